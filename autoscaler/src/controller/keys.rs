//! Names the controller writes into the cluster. The finalizer, labels, taints and annotations
//! are the core's ([`autoscaler_core::keys`], shared with the simulator); what only the
//! controller needs (the placement group annotation, the field manager) is added here.

pub use autoscaler_core::keys::{
    CLAIM_LABEL, DISRUPTION_TAINT, DRA_ANNOTATION, FINALIZER, NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION_ANNOTATION, POOL_LABEL, REPLACES_ANNOTATION,
};

/// Annotation on a NodeClaim that is one node of an all-or-nothing group spread over several
/// nodes: the cloud placement group to launch it into
/// ([`providers::placement_group_name`] of the cluster and the group). Written with the claim,
/// before the cloud call, and read back by every launch of it, so a relaunch after a crash
/// uses the same group.
pub const PLACEMENT_GROUP_ANNOTATION: &str = providers::tags::PLACEMENT_GROUP;

/// Annotation on a NodeClaim this controller created: a random token written with the create
/// call. The claim's name is chosen before the call too (not by `generateName`), so a create
/// the client retries after the first attempt landed (a 503 or 504 once the object was stored)
/// meets its own object (409 AlreadyExists), recognised by this token, instead of making a
/// second claim and launching a second node.
pub const CREATE_TOKEN_ANNOTATION: &str = "gpu-autoscaler.dev/create-token";

/// Annotation on a NodeClaim planned under `--min-values-policy=best-effort` whose instance
/// types span fewer values than its NodePool's `minValues` ask: `"true"`, and its requirements
/// carry the lowered `minValues`. Karpenter's name, so what reads Karpenter's NodeClaims for it
/// (dashboards, its metric's `min_values_relaxed` label) reads ours alike. Left off a claim
/// that meets every `minValues`, which Karpenter's readers take as `"false"`.
pub const MIN_VALUES_RELAXED_ANNOTATION: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

/// Annotation on a deleted NodeClaim whose `spec.terminationGracePeriod` is set: the moment
/// (RFC 3339, UTC, whole seconds) its node's drain must end, its deletion time plus the grace
/// period. Written once, when the drain begins, and read back every round, so that a restart
/// or a new leader keeps the deadline. Karpenter's name and meaning
/// (`pkg/apis/v1/labels.go` `NodeClaimTerminationTimestampAnnotationKey`).
pub const TERMINATION_TIMESTAMP_ANNOTATION: &str = "karpenter.sh/nodeclaim-termination-timestamp";

/// Label a drained Node gets with the disruption taint, before its pods are evicted: the
/// Kubernetes well-known label that takes a Node out of external load balancers' targets (the
/// service controller and the AWS Load Balancer Controller read its presence), so connections
/// drain before the instance goes rather than failing until a health check notices. Karpenter
/// sets it too, with its own name as the value (`pkg/controllers/node/termination/terminator/
/// terminator.go` `Taint`).
pub const EXCLUDE_FROM_BALANCERS_LABEL: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

/// The value of [`EXCLUDE_FROM_BALANCERS_LABEL`] this controller writes.
pub const EXCLUDE_FROM_BALANCERS_VALUE: &str = "gpu-autoscaler";

/// The field manager of every write (server-side apply and patches).
pub const FIELD_MANAGER: &str = "gpu-autoscaler";

/// Whether an object lists the controller's finalizer ([`FINALIZER`]).
pub fn has_finalizer(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == FINALIZER)
}
