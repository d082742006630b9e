//! `provider-gcp`: the Google Cloud Compute Engine provider of gpu-autoscaler.
//!
//! [`GcpProvider`] implements [`providers::CloudProvider`] with the official client
//! `google-cloud-compute-v1` (REST over HTTP/1.1 and JSON, so it can be pointed at a local
//! endpoint such as the fake Compute API of the tests, `tests/fake-compute`):
//!
//! - **Catalog** ([`catalog`]): `machineTypes.aggregatedList` (or `machineTypes.list` per
//!   configured zone) and `acceleratorTypes.list` per zone; accelerator-optimized types with
//!   built-in GPUs (A2, A3, A4, G2, G4) as listed, N1 machines with each attachable GPU in each
//!   allowed count; prices from the embedded catalog (on-demand and spot), the settings'
//!   overrides, and N1 component prices; cached for `catalog_ttl_s`.
//! - **Launch** ([`launch`]): `instances.insert` with the node class's template (image, network,
//!   service account, startup script that registers the kubelet with the NodePool's labels,
//!   taints and startup taints, `onHostMaintenance=TERMINATE` for GPUs, provisioning model SPOT
//!   or STANDARD), the claim's name as instance name, a request id derived from claim and
//!   offering, GCE labels for cluster, NodePool and NodeClaim. The operation is awaited with
//!   `zoneOperations.wait` under a timeout and its `error` is read even when it is DONE
//!   (the library's poller reports such operations as complete). `ZONE_RESOURCE_POOL_EXHAUSTED`
//!   and quota errors move on to the next candidate and come back in
//!   [`providers::Launched::unavailable`] for the caller's [`providers::UnavailableOfferings`].
//!   A 409 for the instance name, or an instance already labelled with the claim, is the
//!   earlier launch of the same claim and is returned as the result.
//! - **Groups**: [`GcpProvider::launch_group`] launches the claims of an all-or-nothing group
//!   with one `instances.bulkInsert` (`count = minCount`) per zone tried. It is the
//!   provider's [`providers::CloudProvider::launch_group`] (atomic here), which the controller
//!   calls for the claims of a best-effort-atomic ProvisioningRequest.
//! - **Placement groups**: a launch with a placement group first makes sure a regional
//!   resource policy of that name exists (`groupPlacementPolicy.collocation = COLLOCATED`,
//!   `description` naming the cluster, since resource policies have no labels; 409 is
//!   success), then inserts (or bulk-inserts) the instance with it in `resourcePolicies`; an
//!   offering refused inside the policy is asked for outside it with its own request id.
//!   Collection deletes the cluster's policies no live instance lists, no claim names and older
//!   than the grace period (by `creationTimestamp`).
//! - **Delete / get / list**: `instances.delete` (404 is success), `instances.get`,
//!   `instances.aggregatedList` filtered on the cluster label.
//! - **Limits**: a token bucket for reads and one for mutations, and retries with jittered
//!   exponential backoff on 429, 5xx, timeouts and connection failures
//!   ([`providers::common::RetrySettings`]). The library's own retries are off.
//! - **Credentials** come from Application Default Credentials (a key file named by
//!   `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's ADC file, or the metadata server, which is how
//!   GKE workload identity arrives); anonymous for an `http://` endpoint. They are never logged.
//!
//! # More
//!
//! Idempotency: the instance name is the claim name (GCE names are unique per zone and become the
//! Node name); the request id is a UUIDv5 of claim and offering (a retry reuses it, the next zone
//! does not, since the server would answer with the first zone's failed operation); before
//! inserting, the claim's instance is looked up by label across zones, which covers retries after
//! the server's request-id window; a 409 for the name is adopted only if it carries the claim.
//!
//! Departures from the other providers, on purpose: provider ids are `gce://project/zone/name`
//! (what the GCE cloud controller writes into `spec.providerID`) while `name()` is `gcp`; GCE label
//! keys cannot hold `/` or `.`, so the cluster/NodePool/NodeClaim tags are the labels
//! `gpu-autoscaler-{cluster,nodepool,nodeclaim}` (values map Kubernetes' `.` to `_`, reversibly)
//! and are translated back to `providers::tags` keys in `Instance::tags`.

mod api;
pub mod catalog;
pub mod config;
mod error;
pub mod launch;
mod provider;

pub use api::CallStats;
pub use config::GcpSettings;
pub use error::GcpError;
pub use provider::{Facts, GROUP_LABEL, GcpProvider, group_id, placement_description, policy_url};
