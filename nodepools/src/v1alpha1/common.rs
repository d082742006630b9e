//! Types shared by NodePool and NodeClaim: requirements, taints, the node class reference and
//! the names of conditions.
//!
//! Enumerated values (operators, effects) are plain strings here so that a bad value reaches
//! `validate()` and is reported with its field path alongside every other problem, instead of
//! failing deserialization at the first one; the CRD schema still lists the allowed values.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::{LABEL_VALUE_MAX, QUALIFIED_NAME_MAX, QUALIFIED_NAME_PATTERN};

/// One `key operator values` expression over node labels, as in a node selector, with
/// Karpenter's optional `minValues` (how many distinct values of the key the set of acceptable
/// instance types must keep, for flexibility).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : true",
        "message": "In and NotIn need at least one value",
    },
    {
        "rule": "self.operator in ['Exists', 'DoesNotExist'] ? !has(self.values) || size(self.values) == 0 : true",
        "message": "Exists and DoesNotExist take no values",
    },
    {
        "rule": "self.operator in ['Gt', 'Lt'] ? has(self.values) && size(self.values) == 1 && self.values[0].matches('^[-+]?[0-9]+$') : true",
        "message": "Gt and Lt need exactly one integer value",
    },
    {
        "rule": "has(self.minValues) && self.operator == 'In' ? has(self.values) && self.minValues <= size(self.values) : true",
        "message": "minValues must not exceed the number of values",
    },
]))]
pub struct NodeSelectorRequirement {
    /// The label key (`node.kubernetes.io/instance-type`, `karpenter.sh/capacity-type`,
    /// `gpu-autoscaler.dev/instance-gpu-name`...).
    #[schemars(length(min = 1, max = QUALIFIED_NAME_MAX), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    #[schemars(extend("enum" = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))]
    pub operator: String,
    /// The values: at least one for `In`/`NotIn`, none for `Exists`/`DoesNotExist`, exactly
    /// one integer for `Gt`/`Lt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(max = LABEL_VALUE_MAX)))]
    pub values: Vec<String>,
    /// Minimum number of distinct values of `key` the acceptable instance types must span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i32>,
}

/// A node taint as written in a NodePool or NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Taint key.
    #[schemars(length(min = 1, max = QUALIFIED_NAME_MAX), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// Taint value (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = LABEL_VALUE_MAX))]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[schemars(extend("enum" = ["NoSchedule", "PreferNoSchedule", "NoExecute"]))]
    pub effect: String,
}

/// A reference to the provider-specific node class (image, subnets, IAM...) nodes are launched
/// with, e.g. `{group: fake.gpu-autoscaler.dev, kind: FakeNodeClass, name: default}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassRef {
    /// API group of the class.
    #[schemars(length(min = 1))]
    pub group: String,
    /// Kind of the class.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Name of the class object.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The `type`s and `reason`s of the conditions this API reports, in the standard
/// `metav1.Condition` shape (`type`, `status`, `reason`, `message`, `lastTransitionTime`,
/// `observedGeneration`).
pub mod conditions {
    /// NodePool and NodeClaim: the object is usable. On a NodeClaim, true once Launched,
    /// Registered and Initialized all are.
    pub const READY: &str = "Ready";
    /// NodePool: the spec passed `validate()`; when false, the message lists every problem.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// NodeClaim: the cloud instance was created.
    pub const LAUNCHED: &str = "Launched";
    /// NodeClaim: a Node for the instance joined the cluster.
    pub const REGISTERED: &str = "Registered";
    /// NodeClaim: the Node is Ready, its startup taints and known ephemeral taints (a Node
    /// Readiness Controller's `readiness.k8s.io/` ones, the cloud controller manager's
    /// `uninitialized`) are gone and every GPU-class resource it was launched for shows its
    /// full allocatable (see `reasons::RESOURCE_MISMATCH`).
    pub const INITIALIZED: &str = "Initialized";
    /// NodePool: its recent nodes came up with what they were launched for. False (reason
    /// `ResourceMismatch`) while an instance type of the pool is kept out of planning because
    /// a node of it advertised fewer devices; the message names the type and the numbers.
    pub const CAPACITY_DELIVERED: &str = "CapacityDelivered";
    /// NodePool: its requirements admit an instance type of its node class's catalog that has
    /// an offering available now (in an allowed zone and capacity type). False, reason
    /// `NoInstanceTypeMatches` or `OfferingsUnavailable`, when nothing can be launched for it.
    pub const INSTANCE_TYPES_AVAILABLE: &str = "InstanceTypesAvailable";

    /// NodePool: scaling may go on. False (reason `TooManyUnreadyNodes`) while more nodes are
    /// unready than `--max-total-unready-percentage` and `--ok-total-unready-count` allow:
    /// the controller then launches nothing and decides no disruption (the Cluster
    /// Autoscaler's halt on an unhealthy cluster); the message has the numbers.
    pub const CLUSTER_HEALTHY: &str = "ClusterHealthy";

    /// NodeClaim: its node no longer matches its NodePool (Karpenter's condition). True with
    /// reason `NodePoolDrifted` (the NodePool's template hash differs from the
    /// `karpenter.sh/nodepool-hash` the claim was launched with) or `RequirementsDrifted` (its
    /// labels no longer meet the NodePool's requirements), the message saying what differs;
    /// absent otherwise. A drifted node is replaced under the NodePool's `Drifted` budget.
    pub const DRIFTED: &str = "Drifted";

    /// NodeClaim, while its node is terminated (Karpenter's condition): Unknown with reason
    /// `Draining` while pods drained from the node remain (evicted or not yet), True once
    /// none does, False with reason `TerminationGracePeriodElapsed` when the claim's
    /// `terminationGracePeriod` ran out first (Karpenter's condition has Unknown and True;
    /// False is this controller's). Absent when there was nothing to drain (the instance was
    /// gone already); True once the instance goes during the drain (its pods went with it).
    pub const DRAINED: &str = "Drained";

    /// NodeClaim, while its node is terminated (Karpenter's condition): Unknown with reason
    /// `AwaitingVolumeDetachment` once the node is drained while VolumeAttachments of its
    /// drained pods' volumes remain (the message names them; the instance is not terminated
    /// yet), True once none does, False with reason `TerminationGracePeriodElapsed` when the
    /// claim's `terminationGracePeriod` ran out first and the instance went regardless.
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";

    /// Condition reasons (CamelCase, as the API requires).
    pub mod reasons {
        /// Validation found problems.
        pub const INVALID_SPEC: &str = "InvalidSpec";
        /// Validation found none.
        pub const VALID: &str = "Valid";
        /// The provider has not answered yet.
        pub const LAUNCH_PENDING: &str = "LaunchPending";
        /// The provider reported no capacity for any acceptable offering.
        pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
        /// The provider rejected the launch for another reason.
        pub const LAUNCH_FAILED: &str = "LaunchFailed";
        /// The instance exists but no Node has joined yet.
        pub const NODE_NOT_FOUND: &str = "NodeNotFound";
        /// The Node is not Ready yet.
        pub const NODE_NOT_READY: &str = "NodeNotReady";
        /// Startup taints are still on the Node.
        pub const STARTUP_TAINTS_EXIST: &str = "StartupTaintsExist";
        /// A taint a starting node carries for a while is still on the Node (the node
        /// lifecycle controller's `not-ready`, the cloud controller manager's
        /// `uninitialized`, a Node Readiness Controller's `readiness.k8s.io/` taint);
        /// Karpenter's reason.
        pub const KNOWN_EPHEMERAL_TAINTS_EXIST: &str = "KnownEphemeralTaintsExist";
        /// A GPU-class resource the claim was launched for shows zero allocatable (the device
        /// plugin is not up yet).
        pub const DEVICE_PLUGIN_NOT_READY: &str = "DevicePluginNotReady";
        /// The claim's NodePool partitions its GPUs with MIG, and the Node's MIG manager has
        /// not reported the claim's `nvidia.com/mig.config` applied yet
        /// (`nvidia.com/mig.config.state` is not `success`, or the Node carries another
        /// configuration).
        pub const MIG_NOT_APPLIED: &str = "MIGNotApplied";
        /// The claim was launched for pods with DRA claims and the Node's ResourceSlices do
        /// not publish (yet) the devices its instance type's template predicts, per driver.
        pub const RESOURCE_SLICES_NOT_PUBLISHED: &str = "ResourceSlicesNotPublished";
        /// The Node advertises less of a GPU-class (or requested extended) resource than the
        /// claim was launched for, past the device-plugin timeout; the message has the numbers.
        /// On a NodePool: the reason of [`super::CAPACITY_DELIVERED`] false.
        pub const RESOURCE_MISMATCH: &str = "ResourceMismatch";
        /// Every node of the NodePool delivered what it was launched for.
        pub const AS_LAUNCHED: &str = "AsLaunched";
        /// The NodePool's requirements admit no instance type of the catalog.
        pub const NO_INSTANCE_TYPE_MATCHES: &str = "NoInstanceTypeMatches";
        /// Every offering of the instance types the NodePool admits is unavailable now (the
        /// cloud refused it recently, or the type delivered too little).
        pub const OFFERINGS_UNAVAILABLE: &str = "OfferingsUnavailable";
        /// Some instance type the NodePool admits has an available offering.
        pub const INSTANCE_TYPES_FOUND: &str = "InstanceTypesFound";
        /// The condition holds.
        pub const SUCCEEDED: &str = "Succeeded";
        /// The reason of [`super::CLUSTER_HEALTHY`] false.
        pub const TOO_MANY_UNREADY_NODES: &str = "TooManyUnreadyNodes";
        /// The reason of [`super::CLUSTER_HEALTHY`] true.
        pub const UNREADY_NODES_WITHIN_LIMITS: &str = "UnreadyNodesWithinLimits";
        /// The reason of [`super::DRAINED`] unknown.
        pub const DRAINING: &str = "Draining";
        /// The reason of [`super::VOLUMES_DETACHED`] unknown.
        pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
        /// The reason of [`super::VOLUMES_DETACHED`] and [`super::DRAINED`] false.
        pub const TERMINATION_GRACE_PERIOD_ELAPSED: &str = "TerminationGracePeriodElapsed";
    }
}
