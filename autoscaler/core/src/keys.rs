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
    CA_TO_BE_DELETED,
    "DeletionCandidateOfClusterAutoscaler",
    "karpenter.sh/disrupted",
];

/// The Cluster Autoscaler's taint on a node it drains and deletes; its value is the Unix time
/// (seconds) it was put on.
pub const CA_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// How long the Cluster Autoscaler counts a node under its [`CA_TO_BE_DELETED`] taint as being
/// deleted: its `MaxCloudProviderNodeDeletionTime`, 5 minutes. An older taint is left over from
/// a deletion that never finished (or from an autoscaler since uninstalled), and the Cluster
/// Autoscaler then treats the node as any other scale-down candidate.
pub const CA_DELETION_WINDOW_S: i64 = 300;

/// The first of `taints` that says another autoscaler is removing the node
/// ([`FOREIGN_REMOVAL_TAINTS`]).
///
/// With `now` (seconds on the caller's clock, the same Unix clock the taint's value uses), a
/// [`CA_TO_BE_DELETED`] taint counts only while it is younger than [`CA_DELETION_WINDOW_S`];
/// one whose value is not a Unix time counts whatever its age, since nothing says the removal
/// is over. Without `now` every such taint counts: the node stays tainted `NoSchedule`, so it
/// is not capacity to plan onto however old the taint is.
pub fn foreign_removal(
    taints: &[crate::taints::Taint],
    now: Option<i64>,
) -> Option<&crate::taints::Taint> {
    taints.iter().find(|t| {
        FOREIGN_REMOVAL_TAINTS.contains(&t.key.as_str())
            && !(t.key == CA_TO_BE_DELETED
                && now.is_some_and(|now| {
                    t.value
                        .trim()
                        .parse::<i64>()
                        .is_ok_and(|at| now.saturating_sub(at) >= CA_DELETION_WINDOW_S)
                }))
    })
}

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

/// Taint key prefixes a node carries while agents outside the autoscaler get it ready: the
/// Node Readiness Controller's `readiness.k8s.io/<rule>` taints, lifted once the node passes
/// each rule (a CNI, a GPU driver up), which Karpenter treats as ephemeral too
/// (`pkg/scheduling/taints.go` `KnownEphemeralTaintKeyPrefixes`); and the Cluster
/// Autoscaler's `startup-taint.` and older `ignore-taint.cluster-autoscaler.kubernetes.io/`
/// prefixes, whose nodes it counts as still starting.
pub const EPHEMERAL_TAINT_PREFIXES: [&str; 3] = [
    "readiness.k8s.io/",
    "startup-taint.cluster-autoscaler.kubernetes.io/",
    "ignore-taint.cluster-autoscaler.kubernetes.io/",
];

/// Whether a taint (`key`, `effect`) is one a starting node carries for a while and loses
/// without the autoscaler's help: Karpenter's known ephemeral taints (`IsKnownEphemeralTaint`,
/// matched by key and effect as `MatchTaint` does) but its own `karpenter.sh/unregistered`,
/// that is [`EPHEMERAL_TAINTS`] as `NoSchedule` and `not-ready` as `NoExecute` too, and any
/// key under [`EPHEMERAL_TAINT_PREFIXES`]. A node is not initialized while it carries one, so
/// its claim stays capacity on its way rather than a node its pods cannot use. (Planning looks
/// through only the `NoSchedule` [`EPHEMERAL_TAINTS`] on existing nodes: a node whose
/// readiness taint stays is no capacity.)
pub fn is_known_ephemeral_taint(key: &str, effect: &str) -> bool {
    (effect == "NoSchedule" && EPHEMERAL_TAINTS.contains(&key))
        || (effect == "NoExecute" && key == "node.kubernetes.io/not-ready")
        || EPHEMERAL_TAINT_PREFIXES.iter().any(|p| key.starts_with(p))
}

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

/// Pod annotation: comma-separated names of its local volumes that do not block its eviction.
pub const SAFE_TO_EVICT_LOCAL_VOLUMES: &str =
    "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes";

/// Node annotation: `"true"` keeps Cluster Autoscaler (and us) from scaling the node down.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";

/// Pod annotation that makes a pod costlier to disrupt.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Annotation on a NodeClaim the controller creates: the hash of its NodePool's
/// `spec.template` at launch (Karpenter's key and meaning). A NodeClaim whose hash differs
/// from its NodePool's current one, of the same [`NODEPOOL_HASH_VERSION_ANNOTATION`], has
/// drifted ([`crate::disruption::drift_of`]).
pub const NODEPOOL_HASH_ANNOTATION: &str = "karpenter.sh/nodepool-hash";

/// Annotation beside [`NODEPOOL_HASH_ANNOTATION`]: the version of the hashing scheme that
/// wrote it. A hash of another version is not compared (Karpenter's rule), so that changing
/// what is hashed does not drift every node at the upgrade.
pub const NODEPOOL_HASH_VERSION_ANNOTATION: &str = "karpenter.sh/nodepool-hash-version";

/// The version of the hashing scheme this build writes and compares
/// (`nodepools::v1alpha1::NodePoolTemplate::drift_hash`).
pub const NODEPOOL_HASH_VERSION: &str = "v1";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taints::{Effect, Taint};

    #[test]
    fn known_ephemeral_taints_are_karpenters_list_and_the_readiness_prefix() {
        let cases = [
            ("node.kubernetes.io/not-ready", "NoSchedule", true),
            ("node.kubernetes.io/not-ready", "NoExecute", true),
            ("node.kubernetes.io/unreachable", "NoSchedule", true),
            // The lifecycle controller's NoExecute form means the node stays down.
            ("node.kubernetes.io/unreachable", "NoExecute", false),
            (
                "node.cloudprovider.kubernetes.io/uninitialized",
                "NoSchedule",
                true,
            ),
            (
                "node.cloudprovider.kubernetes.io/uninitialized",
                "NoExecute",
                false,
            ),
            ("readiness.k8s.io/cni", "NoSchedule", true),
            ("readiness.k8s.io/gpu-driver", "NoExecute", true),
            (
                "startup-taint.cluster-autoscaler.kubernetes.io/gpu",
                "NoSchedule",
                true,
            ),
            (
                "ignore-taint.cluster-autoscaler.kubernetes.io/x",
                "NoSchedule",
                true,
            ),
            ("readiness.k8s.io.evil/x", "NoSchedule", false),
            ("nvidia.com/gpu", "NoSchedule", false),
        ];
        for (key, effect, want) in cases {
            assert_eq!(
                is_known_ephemeral_taint(key, effect),
                want,
                "{key}:{effect}"
            );
        }
    }

    #[test]
    fn a_cluster_autoscaler_taint_counts_for_its_deletion_window_only() {
        let at = 1_700_000_000;
        let ca = [Taint::new(
            CA_TO_BE_DELETED,
            &at.to_string(),
            Effect::NoSchedule,
        )];
        assert!(foreign_removal(&ca, Some(at + CA_DELETION_WINDOW_S - 1)).is_some());
        assert!(foreign_removal(&ca, Some(at + CA_DELETION_WINDOW_S)).is_none());
        // Without a clock, or with a value that is no time, the removal is taken as under way.
        assert!(foreign_removal(&ca, None).is_some());
        let odd = [Taint::new(CA_TO_BE_DELETED, "soon", Effect::NoSchedule)];
        assert!(foreign_removal(&odd, Some(at)).is_some());
        // Karpenter's taint carries no time: it counts whatever the clock says.
        let karpenter = [Taint::new("karpenter.sh/disrupted", "", Effect::NoSchedule)];
        assert!(foreign_removal(&karpenter, Some(at)).is_some());
        let other = [Taint::new("dedicated", "gpu", Effect::NoSchedule)];
        assert!(foreign_removal(&other, Some(at)).is_none());
    }
}
