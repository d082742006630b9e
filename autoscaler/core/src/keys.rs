//! The cluster-visible keys: every finalizer, taint and annotation key the controller writes
//! or the planner reads, named once so that the controller and the simulator use the same.
//! Node labels the planner matches on (well-known and ours) live in [`crate::labels`].

/// Finalizer on NodeClaims and managed Nodes: deleting either always terminates the instance.
pub const FINALIZER: &str = "gpu-autoscaler.dev/termination";

/// Label on a managed Node (and on its NodeClaim's launch request): the NodeClaim's name.
pub const CLAIM_LABEL: &str = "gpu-autoscaler.dev/nodeclaim";

/// Label on a managed Node and its NodeClaim: its NodePool.
pub const POOL_LABEL: &str = crate::labels::NODEPOOL;

/// Taint put on a Node chosen for disruption before its pods are evicted (NoSchedule).
pub const DISRUPTION_TAINT: &str = "gpu-autoscaler.dev/disrupted";

/// Taints another autoscaler puts on a node it is removing, in a cluster where it runs beside
/// gpu-autoscaler (during a migration): the Cluster Autoscaler's `ToBeDeletedByClusterAutoscaler`
/// (drain started) and `DeletionCandidateOfClusterAutoscaler` (chosen, soon drained), and
/// Karpenter's `karpenter.sh/disrupted`. Such a node is not capacity to plan onto.
pub const FOREIGN_REMOVAL_TAINTS: [&str; 3] = [
    "ToBeDeletedByClusterAutoscaler",
    "DeletionCandidateOfClusterAutoscaler",
    "karpenter.sh/disrupted",
];

/// `NoSchedule` taints a node carries while it starts or briefly loses its kubelet: the node
/// lifecycle controller's `not-ready` and `unreachable`, and the cloud controller manager's
/// `uninitialized`. Planning looks through them on an existing node, as Karpenter does (its
/// known ephemeral taints): the node is capacity coming back, and counting it out would launch
/// a second node for pods the first will hold. The `NoExecute` forms, which the node lifecycle
/// controller adds to a node that stays down, still keep pods off it.
pub const EPHEMERAL_TAINTS: [&str; 3] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
];

/// Annotation on a NodeClaim created as the replacement of a disrupted node: the nodes it
/// replaces, comma-separated.
pub const REPLACES_ANNOTATION: &str = "gpu-autoscaler.dev/replaces";

/// Annotation on a NodeClaim created for pods with DRA claims (`"true"`): it is Initialized
/// only once its Node's ResourceSlices publish what its instance type's template predicts.
/// Written with the claim, so a restarted controller still waits for the slices.
pub const DRA_ANNOTATION: &str = "gpu-autoscaler.dev/dra";

/// Annotation (pod or node) that forbids voluntary disruption (Karpenter's key).
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

/// Pod annotation: `"false"` forbids eviction, `"true"` allows it despite local storage or no
/// controller (Cluster Autoscaler's key).
pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// Node annotation: `"true"` keeps Cluster Autoscaler (and us) from scaling the node down.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";

/// Pod annotation that makes a pod costlier to disrupt.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
