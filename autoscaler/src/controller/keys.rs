//! Names the controller writes into the cluster: finalizers, labels, taints, annotations.

/// Finalizer on NodeClaims and managed Nodes: deleting either always terminates the instance.
pub const FINALIZER: &str = "gpu-autoscaler.dev/termination";

/// Label on a managed Node (and on its NodeClaim's launch request): the NodeClaim's name.
pub const CLAIM_LABEL: &str = "gpu-autoscaler.dev/nodeclaim";

/// Label on a managed Node: its NodePool (the same key the core uses).
pub const POOL_LABEL: &str = autoscaler_core::labels::NODEPOOL;

/// Taint put on a Node chosen for disruption before its pods are evicted.
pub const DISRUPTION_TAINT: &str = "gpu-autoscaler.dev/disrupted";

/// Annotation on a NodeClaim created as the replacement of a disrupted node.
pub const REPLACES_ANNOTATION: &str = "gpu-autoscaler.dev/replaces";

/// Annotation on a NodeClaim that is one node of an all-or-nothing group spread over several
/// nodes: the cloud placement group to launch it into
/// ([`providers::placement_group_name`] of the cluster and the group). Written with the claim,
/// before the cloud call, and read back by every launch of it, so a relaunch after a crash
/// uses the same group.
pub const PLACEMENT_GROUP_ANNOTATION: &str = providers::tags::PLACEMENT_GROUP;

/// Annotation on a NodeClaim created for pods with DRA claims (`"true"`): it is Initialized
/// only once its Node's ResourceSlices publish what its instance type's template predicts.
/// Written with the claim, so a restarted controller still waits for the slices.
pub const DRA_ANNOTATION: &str = "gpu-autoscaler.dev/dra";

/// The field manager of every write (server-side apply and patches).
pub const FIELD_MANAGER: &str = "gpu-autoscaler";
