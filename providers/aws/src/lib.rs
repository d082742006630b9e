//! `provider-aws`: the AWS EC2 cloud provider of gpu-autoscaler.
//!
//! [`AwsProvider`] implements [`providers::CloudProvider`] with `aws-sdk-ec2`:
//!
//! - **Catalog** ([`catalog`]): `DescribeInstanceTypes` (paginated) for shapes, GPUs and other
//!   accelerators and ENI limits, `DescribeInstanceTypeOfferings` for zones,
//!   `DescribeAvailabilityZones` for their zone IDs (put on each offering), the embedded
//!   catalog's list prices for on-demand (overridable in the settings) and
//!   `DescribeSpotPriceHistory` for spot; cached for `catalog_ttl_s` on a [`Clock`].
//! - **Launch** ([`launch`]): `CreateFleet` of type `instant` for one instance, one launch
//!   template per node class and boot configuration (created when missing), up to 60
//!   instance-type x zone overrides per request in the claim's order, `price-capacity-optimized`
//!   for spot and `lowest-price` for on-demand, a ClientToken derived from the claim, tags for
//!   cluster, NodePool and NodeClaim. Offerings the fleet refuses for capacity come back in
//!   [`providers::Launched::unavailable`] (or in [`providers::ProviderError::InsufficientCapacity`]
//!   when nothing could be bought) for the caller's [`providers::UnavailableOfferings`]; the
//!   launch itself moves on to the remaining candidates.
//! - **Placement groups**: a launch for a claim with a placement group (one node of a gang over
//!   several nodes) first creates a `cluster` placement group of that name, tagged with the
//!   cluster and its creation time (`InvalidPlacementGroup.Duplicate` is success), and puts
//!   `Placement.GroupName` on every fleet override; when the fleet finds no room inside the
//!   group, the same offerings are asked for outside it (the group is a preference).
//!   [`providers::CloudProvider::collect_placement_groups`] deletes the cluster's groups no
//!   live instance is in, no claim names and older than the grace period.
//! - **Delete / get / list**: `TerminateInstances` (an unknown or terminated instance is
//!   success), `DescribeInstances` by id or by the cluster tag.
//! - **Limits**: a token bucket for describe calls and one for mutating calls, and retries with
//!   jittered exponential backoff on throttling, 5xx, timeouts and connection failures
//!   ([`config::Limits`], [`config::RetrySettings`]). The SDK's own retries are off.
//! - **Credentials** come only from the SDK's default chain (environment, profile, web identity
//!   / IRSA, container and instance metadata) and are never logged.
//!
//! - **Settings** ([`AwsSettings`], YAML): node classes (AMI, subnets, security groups, IAM
//!   profile, disk, API server endpoint), limits, retries, timeouts, cache TTL, price
//!   overrides; [`config::EXAMPLE_SETTINGS`] is a commented example.
//!
//! Spot interruption and rebalance notices are a later issue; [`interruption`] is the seam.
//!
//! # More
//!
//! Idempotency: before buying, the claim's live instance is looked up by tag (covers restarts and
//! lost answers); the ClientToken is a hash of cluster, claim and the request's overrides (a
//! retried request reuses it; the next request after a refusal does not, since EC2 would answer
//! with the first one's result or a parameter mismatch).
//!
//! User data: an AL2023 `nodeadm` NodeConfig with the NodePool's labels (less those that vary by
//! offering or claim, and those kubelet may not set), taints and startup taints; the controller
//! adds the rest at registration. That keeps one template per NodePool instead of one per claim.
//!
//! Tests run against moto's EC2 server; a fault-injecting proxy in front of it supplies what moto
//! cannot: fleet `Errors` for exhausted pools, throttling and 5xx, and placement groups (moto 5.2
//! has none and ignores `Placement` on CreateFleet; the proxy answers
//! Create/Describe/DeletePlacementGroup and records each override's group).

mod api;
pub mod catalog;
mod clock;
pub mod config;
mod error;
pub mod interruption;
pub mod launch;
mod provider;

pub use api::CallStats;
pub use clock::{Clock, FakeClock, SystemClock};
pub use config::AwsSettings;
pub use error::AwsError;
pub use provider::{
    AwsProvider, PLACEMENT_GROUP_CREATED_TAG, ResolvedClass, instance_id, provider_id,
};
