//! The `NodeClaim` custom resource: one node the autoscaler decided to launch, written before the
//! cloud call so that a crash never loses track of an instance.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{NodeClassRef, NodeSelectorRequirement, Taint};
use super::schema;
use crate::duration::DURATION_PATTERN;

/// The desired node: the resolved set of acceptable instance types, zones and capacity types
/// (as requirements), what it must hold, and how it is tainted.
// Several `printcolumn(...)` entries repeat `type_ = ...`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gpu-autoscaler.dev",
    version = "v1alpha1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    category = "gpu-autoscaler",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A NodeClaim is one node gpu-autoscaler launches: the acceptable instance types, zones and capacity types, the resources it must offer and its taints; its status follows the instance from launch to an initialized Node.",
    printcolumn(name = "NodePool", type_ = "string", json_path = ".spec.nodePool"),
    printcolumn(name = "Type", type_ = "string", json_path = ".status.instanceType"),
    printcolumn(
        name = "GPUs",
        type_ = "string",
        json_path = ".status.capacity.nvidia\\.com/gpu"
    ),
    printcolumn(name = "Zone", type_ = "string", json_path = ".status.zone"),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".status.capacityType"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.taints) || self.taints.all(t, self.taints.exists_one(u, u.key == t.key && u.effect == t.effect))",
        "message": "taints must not repeat a key and effect",
    },
    {
        "rule": "!has(self.startupTaints) || self.startupTaints.all(t, self.startupTaints.exists_one(u, u.key == t.key && u.effect == t.effect) && (!has(self.taints) || !self.taints.exists(u, u.key == t.key && u.effect == t.effect)))",
        "message": "startupTaints must not repeat a key and effect, nor one of taints",
    },
]))]
pub struct NodeClaimSpec {
    /// Name of the owning NodePool.
    #[schemars(length(min = 1, max = 253))]
    pub node_pool: String,
    /// Acceptable instance types, zones, capacity types...: the NodePool's requirements
    /// narrowed by the pods the claim is for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// What the node must be able to hold.
    #[serde(default)]
    pub resources: ResourceRequirements,
    /// Taints the node registers with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub taints: Vec<Taint>,
    /// Taints the node registers with that an agent removes during initialization.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub startup_taints: Vec<Taint>,
    /// The provider-specific node class, copied from the NodePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_ref: Option<NodeClassRef>,
    /// How long the node's drain may take once the NodeClaim's deletion began, copied from the
    /// NodePool's `spec.template.terminationGracePeriod` (Karpenter's NodeClaim
    /// `spec.terminationGracePeriod`, `pkg/apis/v1/nodeclaim.go`). When the deletion begins the
    /// deadline is written to the annotation `karpenter.sh/nodeclaim-termination-timestamp`;
    /// from then on pods are deleted, not evicted, when their own grace period would outlast
    /// it, and at the deadline the node is removed whatever still runs. Absent: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

/// Resources a NodeClaim's node must offer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// Sum of the requests of the pods the claim is for, DaemonSet overhead included.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::nonnegative_quantity_map")]
    pub requests: BTreeMap<String, Quantity>,
}

/// What became of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The provider's id of the instance (`aws:///us-east-1a/i-0abc...`), once launched.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The Node's name, once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The instance type launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// The zone launched in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `spot` or `on-demand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    /// The instance's full capacity, GPU resources (after sharing) included.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Capacity minus system reserve: what pods can use.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// `Launched`, `Registered`, `Initialized` and `Ready`; `Consolidatable` (the last
    /// disruption verdict); `Drifted` (True, reason `NodePoolDrifted` or
    /// `RequirementsDrifted`, while the node no longer matches its NodePool: its
    /// `karpenter.sh/nodepool-hash` annotation, written at launch, differs from the NodePool's
    /// template hash, or its labels no longer meet the NodePool's requirements); `Drained`
    /// while its node is drained for termination (Unknown, reason `Draining`, while pods
    /// drained from it remain, evicted or not yet; True once none does; False, reason
    /// `TerminationGracePeriodElapsed`, when `terminationGracePeriod` ran out first);
    /// `VolumesDetached` once its node is drained for termination (Unknown, reason
    /// `AwaitingVolumeDetachment`, while VolumeAttachments of its drained pods'
    /// PersistentVolumes remain and hold the instance, the message naming them; True once none
    /// does; False, reason `TerminationGracePeriodElapsed`, when `terminationGracePeriod` ran
    /// out first and the instance went regardless).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
    /// When a pod was last bound to or removed from the node (consolidation waits
    /// `consolidateAfter` from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}
