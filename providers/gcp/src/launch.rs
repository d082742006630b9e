//! Pure pieces of a launch: instance names, request ids, GCE labels, the instance body that
//! `instances.insert` gets for a node class, the startup script, and what a finished operation
//! means.
//!
//! Names and ids are derived from the NodeClaim only, so that a retry after a crash sends the
//! same request: the instance name is the claim name (GCE names are unique per zone and are the
//! Node name), and the request id is a name-based UUID (version 5) of claim, instance type,
//! zone and capacity type — Compute Engine request ids must be UUIDs, and a retry of the same
//! offering must reuse its id while the next offering of a zone fallback must not (the server
//! would answer it with the first zone's failed operation).
//!
//! # In detail
//!
//! Launch: one `instances.insert` per candidate with the node class's template; the operation is
//! awaited with `zoneOperations.wait` and its `error` read even when DONE (the library's poller
//! would report such an operation as complete). `ZONE_RESOURCE_POOL_EXHAUSTED` and quota move on to
//! the next candidate and are returned as unavailable offerings.
//!
//! Placement groups: a launch with `placement_group` first makes sure the regional resource policy
//! of that name exists (`resourcePolicies.insert` with `groupPlacementPolicy.collocation =
//! COLLOCATED`, a request id derived from cluster and name, 409 or `alreadyExists` is success, the
//! regional operation awaited with `regionOperations.wait`). Resource policies have no labels, so
//! the cluster is named in their `description`. `instances.insert` lists the policy's URL in
//! `resourcePolicies` (bulkInsert: its name in `instanceProperties`); an offering refused inside
//! the policy is tried outside it with another request id and is not marked unavailable. Instances
//! report the policy as the `gpu-autoscaler.dev/placement-group` tag; collection deletes the
//! cluster's policies no live instance lists, no claim names and older than the grace period
//! (`creationTimestamp`), skipping 404 and `resourceInUseByAnotherResource`. The fake Compute API
//! serves resourcePolicies insert/get/list/delete and regional operations, keeps instances'
//! `resourcePolicies`, and can refuse every insert into a policy for capacity.

use std::collections::BTreeMap;

use autoscaler_core::{CapacityType, labels};
use google_cloud_compute_v1::model::{
    self, AcceleratorConfig, AccessConfig, AttachedDisk, AttachedDiskInitializeParams, Metadata,
    NetworkInterface, Scheduling, ServiceAccount, Tags,
};
use providers::{LaunchRequest, OfferingKey, tags};
use uuid::Uuid;

use crate::catalog::split_attached;
use crate::config::NodeClass;

/// GCE label keys (lower-case, `-` and `_` only: the Kubernetes-style tag keys of
/// [`providers::tags`] are not valid GCE label keys).
pub mod gce_labels {
    /// The cluster, as [`providers::tags::CLUSTER`].
    pub const CLUSTER: &str = "gpu-autoscaler-cluster";
    /// The NodePool, as [`providers::tags::POOL`].
    pub const POOL: &str = "gpu-autoscaler-nodepool";
    /// The NodeClaim, as [`providers::tags::CLAIM`].
    pub const CLAIM: &str = "gpu-autoscaler-nodeclaim";
    /// Spot or on-demand.
    pub const CAPACITY_TYPE: &str = "gpu-autoscaler-capacity-type";
    /// The instance type as the catalog names it (`n1-standard-8-t4x1`).
    pub const INSTANCE_TYPE: &str = "gpu-autoscaler-instance-type";
}

/// Metadata keys carrying full (untruncated) names, for names too long for a label value.
pub mod metadata_keys {
    /// NodeClaim name.
    pub const CLAIM: &str = "gpu-autoscaler-nodeclaim";
    /// NodePool name.
    pub const POOL: &str = "gpu-autoscaler-nodepool";
    /// Node labels, comma-separated `k=v` (the key GKE's node images and Cluster Autoscaler's
    /// GCE templates read).
    pub const KUBE_LABELS: &str = "kube-labels";
    /// The boot script.
    pub const STARTUP_SCRIPT: &str = "startup-script";
}

/// The namespace of request-id UUIDs (a fixed random UUID of this project).
const REQUEST_NS: Uuid = Uuid::from_u128(0x5b0c_3f9e_8a41_4d2c_9e77_1f6a_d3b8_c042);

/// A Kubernetes object name as a GCE label value: Kubernetes names may hold `.`, which GCE
/// values may not; `_` stands for it (Kubernetes names never hold `_`, so the mapping is
/// reversible). `None` when longer than 63 characters (the full name then travels in metadata).
pub fn to_label_value(name: &str) -> Option<String> {
    (name.len() <= 63).then(|| name.replace('.', "_"))
}

/// The inverse of [`to_label_value`].
pub fn from_label_value(value: &str) -> String {
    value.replace('_', ".")
}

/// The GCE instance name of a claim: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`. A Kubernetes name that
/// already fits is used as is; any other (with `.`, a leading digit, too long) is rewritten, cut
/// to 54 characters and suffixed with a hash of the whole, so that it stays unique and
/// deterministic.
pub fn instance_name(claim: &str) -> String {
    let mut n: String = claim
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !n.starts_with(|c: char| c.is_ascii_lowercase()) {
        n.insert_str(0, "n-");
    }
    if n != claim || n.len() > 63 {
        // Cut or rewritten: a hash of the original keeps distinct claims distinct
        // (`pool.a-b` and `pool-a.b` would otherwise both be `pool-a-b`).
        let h = Uuid::new_v5(&REQUEST_NS, claim.as_bytes())
            .simple()
            .to_string();
        n.truncate(54);
        n = format!("{}-{}", n.trim_end_matches('-'), &h[..8]);
    }
    n
}

/// The request id of one insert attempt: a UUID derived from the claim and the offering.
pub fn request_id(claim: &str, offering: &OfferingKey) -> String {
    let key = format!(
        "insert/{claim}/{}/{}/{}",
        offering.instance_type, offering.zone, offering.capacity_type
    );
    Uuid::new_v5(&REQUEST_NS, key.as_bytes()).to_string()
}

/// The request id of a delete of `provider_id`.
pub fn delete_request_id(provider_id: &str) -> String {
    Uuid::new_v5(&REQUEST_NS, format!("delete/{provider_id}").as_bytes()).to_string()
}

/// The GCE label filter selecting one label value (`labels.k = "v"`).
pub fn label_filter(key: &str, value: &str) -> String {
    format!("labels.{key} = \"{value}\"")
}

/// The provider id of an instance, as the GCE cloud controller writes `spec.providerID`.
pub fn provider_id(project: &str, zone: &str, name: &str) -> String {
    format!("gce://{project}/{zone}/{name}")
}

/// Project, zone and instance name of a provider id (`gce://p/us-central1-a/n1`).
pub fn parse_provider_id(provider_id: &str) -> Option<(&str, &str, &str)> {
    let rest = provider_id.strip_prefix("gce://")?;
    let mut parts = rest.split('/');
    let (p, z, n) = (parts.next()?, parts.next()?, parts.next()?);
    (parts.next().is_none() && !p.is_empty() && !z.is_empty() && !n.is_empty()).then_some((p, z, n))
}

/// Single-quotes a string for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The boot script: writes the kubelet's registration flags (labels, taints and startup taints,
/// provider id, max pods) where the node image's kubelet unit reads them, runs the class's own
/// fragment first, and restarts the kubelet when the image has one. Images that bootstrap
/// differently read the same values from `/etc/default/kubelet-gpu-autoscaler` or from the
/// `kube-labels` metadata item.
pub fn startup_script(
    request: &LaunchRequest,
    class: &NodeClass,
    node_labels: &BTreeMap<String, String>,
    provider_id: &str,
) -> String {
    let labels = node_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let taints = request
        .taints
        .iter()
        .chain(&request.startup_taints)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut args = format!(
        "--node-labels={labels} --provider-id={provider_id} --max-pods={}",
        class.max_pods
    );
    if !taints.is_empty() {
        args.push_str(&format!(" --register-with-taints={taints}"));
    }
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(&format!(
        "# gpu-autoscaler: NodeClaim {}, NodePool {}\nset -euo pipefail\n",
        request.claim, request.pool
    ));
    if let Some(extra) = &class.startup_script {
        s.push_str(extra);
        if !extra.ends_with('\n') {
            s.push('\n');
        }
    }
    s.push_str("mkdir -p /etc/default\n");
    s.push_str("cat >/etc/default/kubelet-gpu-autoscaler <<'GPU_AUTOSCALER_EOF'\n");
    s.push_str(&format!("KUBELET_EXTRA_ARGS={}\n", sh_quote(&args)));
    if let Some(api) = &class.kubernetes.api_server_endpoint {
        s.push_str(&format!("KUBERNETES_API_SERVER={}\n", sh_quote(api)));
    }
    if let Some(ca) = &class.kubernetes.certificate_authority {
        s.push_str(&format!("KUBERNETES_CA_DATA={}\n", sh_quote(ca)));
    }
    if let Some(key) = &class.kubernetes.bootstrap_token_metadata_key {
        s.push_str(&format!("BOOTSTRAP_TOKEN_METADATA_KEY={}\n", sh_quote(key)));
    }
    s.push_str("GPU_AUTOSCALER_EOF\n");
    s.push_str(
        "if command -v systemctl >/dev/null && systemctl cat kubelet >/dev/null 2>&1; then\n  \
         systemctl restart kubelet\nfi\n",
    );
    s
}

/// The labels a node registers with: the request's (NodePool template and instance-type
/// labels) plus zone and capacity type of the offering taken.
pub fn node_labels(request: &LaunchRequest, offering: &OfferingKey) -> BTreeMap<String, String> {
    let mut l = request.labels.clone();
    l.insert(labels::ZONE.into(), offering.zone.clone());
    l.insert(labels::INSTANCE_TYPE.into(), offering.instance_type.clone());
    l.insert(
        labels::CAPACITY_TYPE.into(),
        offering.capacity_type.as_str().into(),
    );
    l.insert(labels::NODEPOOL.into(), request.pool.clone());
    l
}

/// Everything [`instance_body`] needs besides the request.
#[derive(Clone, Debug)]
pub struct Template<'a> {
    /// Project.
    pub project: &'a str,
    /// Cluster name (label value).
    pub cluster: &'a str,
    /// Node class.
    pub class: &'a NodeClass,
    /// Built-in accelerator of the machine type, if any (`nvidia-l4`, 1): decides
    /// `onHostMaintenance`.
    pub builtin_gpu: bool,
}

/// The machine type and attached GPUs of a catalog type name.
pub fn machine_and_gpus(instance_type: &str) -> (String, Option<(String, u32)>) {
    match split_attached(instance_type) {
        Some((machine, a, count)) => (
            machine.to_string(),
            Some((a.accelerator.to_string(), count)),
        ),
        None => (instance_type.to_string(), None),
    }
}

/// The `instances.insert` body for `request` on `offering`.
pub fn instance_body(
    t: &Template<'_>,
    request: &LaunchRequest,
    offering: &OfferingKey,
) -> model::Instance {
    let name = instance_name(&request.claim);
    let zone = &offering.zone;
    let (machine, attached) = machine_and_gpus(&offering.instance_type);
    let gpu = t.builtin_gpu || attached.is_some();
    let spot = offering.capacity_type == CapacityType::Spot;
    let pid = provider_id(t.project, zone, &name);
    let node_labels = node_labels(request, offering);

    let mut gce: BTreeMap<String, String> = t.class.labels.clone();
    gce.insert(gce_labels::CLUSTER.into(), t.cluster.to_string());
    if let Some(v) = to_label_value(&request.pool) {
        gce.insert(gce_labels::POOL.into(), v);
    }
    if let Some(v) = to_label_value(&request.claim) {
        gce.insert(gce_labels::CLAIM.into(), v);
    }
    gce.insert(
        gce_labels::CAPACITY_TYPE.into(),
        offering.capacity_type.as_str().into(),
    );
    gce.insert(
        gce_labels::INSTANCE_TYPE.into(),
        offering.instance_type.clone(),
    );

    let mut meta: BTreeMap<String, String> = t.class.metadata.clone();
    meta.insert(metadata_keys::CLAIM.into(), request.claim.clone());
    meta.insert(metadata_keys::POOL.into(), request.pool.clone());
    meta.insert(
        metadata_keys::KUBE_LABELS.into(),
        node_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    );
    meta.insert(
        metadata_keys::STARTUP_SCRIPT.into(),
        startup_script(request, t.class, &node_labels, &pid),
    );

    // GPUs cannot live-migrate: maintenance must stop the VM; Compute Engine demands the same
    // of every Spot VM. Spot VMs cannot restart automatically and are deleted when preempted,
    // so that the Node and the claim go away instead of leaving a stopped VM behind.
    let mut scheduling = Scheduling::new()
        .set_provisioning_model(if spot {
            model::scheduling::ProvisioningModel::Spot
        } else {
            model::scheduling::ProvisioningModel::Standard
        })
        .set_automatic_restart(!spot);
    if gpu || spot {
        scheduling =
            scheduling.set_on_host_maintenance(model::scheduling::OnHostMaintenance::Terminate);
    }
    if spot {
        scheduling = scheduling
            .set_instance_termination_action(model::scheduling::InstanceTerminationAction::Delete);
    }

    let mut nic = NetworkInterface::new().set_network(t.class.network.clone());
    if let Some(s) = &t.class.subnetwork {
        nic = nic.set_subnetwork(s.clone());
    }
    if t.class.external_ip {
        nic = nic.set_access_configs([AccessConfig::new()
            .set_name("External NAT")
            .set_type(model::access_config::Type::OneToOneNat)]);
    }

    let disk = AttachedDisk::new()
        .set_boot(true)
        .set_auto_delete(true)
        .set_initialize_params(
            AttachedDiskInitializeParams::new()
                .set_source_image(t.class.image.clone())
                .set_disk_size_gb(i64::from(t.class.boot_disk_gib))
                .set_disk_type(format!("zones/{zone}/diskTypes/{}", t.class.boot_disk_type)),
        );

    let mut body = model::Instance::new()
        .set_name(name)
        .set_machine_type(format!("zones/{zone}/machineTypes/{machine}"))
        .set_labels(gce)
        .set_metadata(
            Metadata::new().set_items(
                meta.into_iter()
                    .map(|(k, v)| model::metadata::Items::new().set_key(k).set_value(v)),
            ),
        )
        .set_scheduling(scheduling)
        .set_network_interfaces([nic])
        .set_disks([disk])
        .set_service_accounts([ServiceAccount::new()
            .set_email(
                t.class
                    .service_account
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            )
            .set_scopes(t.class.scopes.clone())]);
    if let Some((accel, count)) = attached {
        body = body.set_guest_accelerators([AcceleratorConfig::new()
            .set_accelerator_type(format!(
                "projects/{}/zones/{zone}/acceleratorTypes/{accel}",
                t.project
            ))
            .set_accelerator_count(i32::try_from(count).unwrap_or(i32::MAX))]);
    }
    if !t.class.network_tags.is_empty() {
        body = body.set_tags(Tags::new().set_items(t.class.network_tags.clone()));
    }
    body
}

/// What a long-running operation came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpOutcome {
    /// Not DONE yet.
    Running,
    /// DONE without error.
    Done,
    /// DONE with `error.errors[]`: the first error's code and message, and how to read it.
    Failed {
        /// Error code (`ZONE_RESOURCE_POOL_EXHAUSTED`).
        code: String,
        /// Message.
        message: String,
        /// The offering lacks capacity or quota: try the next one and remember this one.
        unavailable: bool,
        /// The resource exists already (the same name was inserted before).
        already_exists: bool,
        /// The resource does not exist (deleting a gone instance).
        not_found: bool,
    },
}

/// Error codes meaning "this offering, not now": capacity stockouts and quota.
const UNAVAILABLE_CODES: &[&str] = &[
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "RESOURCE_POOL_EXHAUSTED",
    "QUOTA_EXCEEDED",
    "RESOURCE_EXHAUSTED",
    "STOCKOUT",
];

/// Reads a Compute operation. A DONE operation with `error` is a failure even though the
/// library's poller would report it as success (the operation itself completed).
pub fn outcome(op: &model::Operation) -> OpOutcome {
    let done = op
        .status
        .as_ref()
        .and_then(|s| s.name())
        .is_some_and(|s| s == "DONE");
    if !done {
        return OpOutcome::Running;
    }
    let first = op.error.as_ref().and_then(|e| e.errors.first());
    let http_failed = op.http_error_status_code.is_some_and(|c| c >= 400);
    if first.is_none() && !http_failed {
        return OpOutcome::Done;
    }
    let code = first
        .and_then(|e| e.code.clone())
        .or_else(|| op.http_error_status_code.map(|c| c.to_string()))
        .unwrap_or_else(|| "UNKNOWN".into());
    let message = first
        .and_then(|e| e.message.clone())
        .or_else(|| op.http_error_message.clone())
        .unwrap_or_default();
    OpOutcome::Failed {
        unavailable: UNAVAILABLE_CODES.contains(&code.as_str()),
        already_exists: code == "RESOURCE_ALREADY_EXISTS" || code == "ALREADY_EXISTS",
        not_found: code == "RESOURCE_NOT_FOUND" || code == "NOT_FOUND",
        code,
        message,
    }
}

/// The tags of an instance in the provider-neutral vocabulary: the three well-known GCE label
/// keys become [`providers::tags`] keys (with full names from metadata when the label had to
/// be left out), other labels stay as they are.
pub fn neutral_tags(
    gce: &BTreeMap<String, String>,
    metadata: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in gce {
        match k.as_str() {
            gce_labels::CLUSTER => {
                out.insert(tags::CLUSTER.to_string(), v.clone());
            }
            gce_labels::POOL => {
                out.insert(tags::POOL.to_string(), from_label_value(v));
            }
            gce_labels::CLAIM => {
                out.insert(tags::CLAIM.to_string(), from_label_value(v));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    for (key, tag) in [
        (metadata_keys::CLAIM, tags::CLAIM),
        (metadata_keys::POOL, tags::POOL),
    ] {
        if let Some(v) = metadata.get(key) {
            out.insert(tag.to_string(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests;
