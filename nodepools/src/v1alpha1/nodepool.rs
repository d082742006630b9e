//! The `NodePool` custom resource: which nodes may be launched for pending pods, how their GPUs
//! are shared, how far the pool may grow and when its nodes may be removed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{NodeClassRef, NodeSelectorRequirement, Taint};
use super::schema;
use crate::duration::{DURATION_OR_NEVER_PATTERN, DURATION_PATTERN};
use crate::mig::CONFIG_PATTERN;
use crate::names::{QUALIFIED_NAME_MAX, QUALIFIED_NAME_PATTERN};

/// The desired state of a NodePool. Enumerations, quantities and durations are kept as
/// written; the autoscaler parses them and reports every problem, with its field path, in the
/// ValidationSucceeded condition.
// Several `printcolumn(...)` entries repeat `type_ = ...`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gpu-autoscaler.dev",
    version = "v1alpha1",
    kind = "NodePool",
    plural = "nodepools",
    category = "gpu-autoscaler",
    status = "NodePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A NodePool says which nodes gpu-autoscaler may launch for pending pods: their labels, taints and instance-type requirements, how their GPUs are shared, the pool's limits and when its nodes may be removed.",
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodes"),
    printcolumn(
        name = "GPUs",
        type_ = "string",
        json_path = ".status.resources.nvidia\\.com/gpu"
    ),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight"),
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
        "rule": "!has(self.atomicScaleUp) || !has(self.minNodes) || self.minNodes == 0 || self.minNodes == self.atomicScaleUp.nodes",
        "message": "minNodes must be 0 or atomicScaleUp.nodes",
    },
]))]
pub struct NodePoolSpec {
    /// What every node of the pool looks like.
    pub template: NodePoolTemplate,
    /// How the pool's GPUs are shared between pods; absent means whole devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_sharing: Option<GpuSharingSpec>,
    /// Upper bounds on the pool's total capacity, counting nodes being launched: resource name
    /// (`cpu`, `memory`, `nvidia.com/gpu`, any extended resource, and `nodes` for the node
    /// count) to quantity. An absent entry is unlimited.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::nonnegative_quantity_map")]
    pub limits: BTreeMap<String, Quantity>,
    /// Upper bounds on physical GPUs per GPU model, as the catalog names models (`H100`,
    /// `A100-80GB`, `L4`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::nonnegative_int_map")]
    pub gpu_limits: BTreeMap<String, i64>,
    /// When and how fast nodes may be removed.
    #[serde(default)]
    pub disruption: DisruptionSpec,
    /// Pools with a higher weight are tried first (1-100; absent ranks below every weight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Nodes the pool keeps even when they are empty: consolidation and drift never take it
    /// below this (expiry, `expireAfter`, is forceful and does).
    /// With the controller's `--enforce-node-group-min-size`, nodes are also launched to reach
    /// it with no pod pending (warm capacity; NodeClaims listing every instance type of the
    /// pool within its limits, cheapest first).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_nodes: i32,
    /// Atomic scaling (the Cluster Autoscaler's `ZeroOrMaxNodeScaling`): the pool has either
    /// no node or exactly `nodes`. A scale-up launches every node it lacks at once, of one
    /// template, all or none (nothing when a limit would stop one of them); a scale-down
    /// removes all of them together, only when every one is removable. `minNodes` must then
    /// be 0 or `nodes`, and `limits.nodes`, when set, at least `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic_scale_up: Option<AtomicScaleUpSpec>,
    /// What the pool's node image adds to the DRA devices predicted for a node that does not
    /// exist yet (the NVIDIA driver's ResourceSlice, derived from the catalog).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dra: Option<DraSpec>,
}

/// DRA settings of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DraSpec {
    /// Attributes every device of the NVIDIA DRA driver (`gpu.nvidia.com`) on the pool's nodes
    /// has, over the predicted ones: what the image installs (`driverVersion`,
    /// `cudaDriverVersion`) or a value the driver publishes differently. A name is the
    /// driver's own (`driverVersion`, or `gpu.nvidia.com/driverVersion`) or `domain/name`;
    /// each value has exactly one of `bool`, `int`, `string`, `version`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub attributes: BTreeMap<String, DeviceAttributeSpec>,
}

/// One device attribute value (`resource.k8s.io/v1` `DeviceAttribute`): exactly one field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.bool), has(self.int), has(self.string), has(self.version)].filter(x, x).size() == 1",
        "message": "exactly one of bool, int, string and version",
    },
]))]
pub struct DeviceAttributeSpec {
    /// A boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    /// An integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    /// A string of at most 64 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub string: Option<String>,
    /// A semantic version (2.0.0) of at most 64 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub version: Option<String>,
}

/// Atomic scaling of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AtomicScaleUpSpec {
    /// The pool's size when it has nodes.
    #[schemars(range(min = 1, max = 1000))]
    pub nodes: i32,
}

/// The node template of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
pub struct NodePoolTemplate {
    /// Metadata put on every node.
    #[serde(default)]
    pub metadata: TemplateMetadata,
    /// Taints put on every node; pods must tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub taints: Vec<Taint>,
    /// Taints present on a new node until an agent (e.g. the GPU Operator) removes them; pods
    /// need not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub startup_taints: Vec<Taint>,
    /// Which instance types, zones, capacity types, architectures and GPUs may be used. A key
    /// no instance type carries, outside the `kubernetes.io`, `k8s.io`, `karpenter.sh`,
    /// `nvidia.com` and `gpu-autoscaler.dev` domains (`team In [ml, research]`), is a label
    /// the NodePool gives its nodes: each node gets a value its pods and the requirement allow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// The provider-specific node class; absent means the provider's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_ref: Option<NodeClassRef>,
    /// How long a node lives: once this old (`720h`, `30m`, `1.5h`; at most ten years) it is
    /// removed whatever it runs,
    /// without a disruption budget or a replacement first, its pods evicted within their
    /// PodDisruptionBudgets and planned again (Karpenter's `expireAfter`). Absent or `Never`:
    /// nodes do not expire (Karpenter's default is `720h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN))]
    pub expire_after: Option<String>,
    /// How long a node being removed may take to drain (`1h`, `90s`): once this long after its
    /// deletion began, its pods are deleted whatever their PodDisruptionBudgets and
    /// `karpenter.sh/do-not-disrupt` say, a pod whose own `terminationGracePeriodSeconds`
    /// would outlast that moment is deleted early enough to get it, and the node is removed
    /// (Karpenter's `terminationGracePeriod`). Copied onto each NodeClaim the pool launches
    /// from then on. Absent: the drain waits for protected pods as long as they run (a pod
    /// that tolerates the disruption taint is never waited for: it goes with the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

/// Node metadata of a NodePool template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": format!("!has(self.labels) || self.labels.all(k, k.size() <= {QUALIFIED_NAME_MAX} && k.matches('{QUALIFIED_NAME_PATTERN}'))"),
        "message": "label keys must be qualified names",
    },
    {
        "rule": "!has(self.labels) || !('gpu-autoscaler.dev/nodepool' in self.labels)",
        "message": "the label gpu-autoscaler.dev/nodepool is set by the autoscaler",
    },
]))]
pub struct TemplateMetadata {
    /// Labels put on every node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::label_map")]
    pub labels: BTreeMap<String, String>,
}

/// How a NodePool's GPUs are shared. `timeSlicing`, `mps` and `mig` exclude each other.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(has(self.timeSlicing) && has(self.mig))",
        "message": "timeSlicing and mig cannot both be set",
    },
    {
        "rule": "!(has(self.mps) && (has(self.timeSlicing) || has(self.mig)))",
        "message": "mps cannot be set with timeSlicing or mig",
    },
]))]
pub struct GpuSharingSpec {
    /// Time-slicing: each physical GPU is advertised as `replicas` devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_slicing: Option<TimeSlicingSpec>,
    /// CUDA MPS (the device plugin's `sharing.mps`): each physical GPU is advertised as
    /// `replicas` devices, each with an equal part of its memory and compute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps: Option<MpsSpec>,
    /// MIG: each physical GPU is split into instances of a named layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigSpec>,
    /// Whether pods may take fractional shares of single devices on this pool's nodes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fractional: bool,
}

/// Time-slicing settings (the GPU Operator's device-plugin `sharing.timeSlicing`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeSlicingSpec {
    /// Devices advertised per physical GPU.
    #[schemars(range(min = 2, max = 1024))]
    pub replicas: i32,
    /// Advertise `<resource>.shared` (e.g. `nvidia.com/gpu.shared`) instead of `<resource>`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rename_by_default: bool,
    /// The device plugin refuses a container asking for more than one replica (NVIDIA
    /// recommends it: more replicas give no more GPU); pods asking for more get no node of
    /// this pool, with a reason.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fail_requests_greater_than_one: bool,
}

/// MPS settings (the GPU Operator's device-plugin `sharing.mps`). The device plugin always
/// fails a container asking for more than one replica, so such pods get no node of this pool,
/// with a reason.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MpsSpec {
    /// Devices advertised per physical GPU. CUDA MPS serves at most 48 clients per GPU.
    #[schemars(range(min = 2, max = 48))]
    pub replicas: i32,
    /// Advertise `nvidia.com/gpu.shared` instead of `nvidia.com/gpu`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rename_by_default: bool,
}

/// MIG settings (the GPU Operator's `nvidia.com/mig.config` and MIG strategy).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigSpec {
    /// Layout name from the GPU Operator's default configuration: `all-1g.10gb`,
    /// `all-3g.40gb`, `all-balanced`, `all-disabled`...
    #[schemars(pattern(CONFIG_PATTERN))]
    pub config: String,
    /// `single` (each MIG instance is one `nvidia.com/gpu`) or `mixed` (each profile is its own
    /// resource, `nvidia.com/mig-<profile>`).
    #[serde(default = "default_mig_strategy")]
    #[schemars(extend("enum" = ["single", "mixed"]))]
    pub strategy: String,
}

fn default_mig_strategy() -> String {
    "single".to_string()
}

/// When and how fast a NodePool's nodes may be removed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionSpec {
    /// `WhenEmpty` (only empty nodes are removed) or `WhenEmptyOrUnderutilized`.
    #[serde(default = "default_consolidation_policy")]
    #[schemars(extend("enum" = ["WhenEmpty", "WhenEmptyOrUnderutilized"]))]
    pub consolidation_policy: String,
    /// How long a node must be stable (no pod added or removed) before consolidation considers
    /// it: `30s`, `10m`, `1h30m`, `1.5h` (at most ten years), or `Never` to disable
    /// consolidation.
    #[serde(default = "default_consolidate_after")]
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN))]
    pub consolidate_after: String,
    /// A GPU node whose GPU requests are below this share of its GPUs is under-utilized.
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub gpu_utilization_threshold: f64,
    /// A node without GPUs whose CPU and memory requests are both below this share of its
    /// allocatable is under-utilized.
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub utilization_threshold: f64,
    /// Right-sizing: a node without GPUs above its threshold is still replaced, after the
    /// same `unneededTime` and `consolidateAfter`, when a node at least this share cheaper
    /// holds its pods (or deleted when they fit on other nodes). GPU nodes are not right-sized:
    /// evicting a GPU job throws its progress away. `0` turns it off: only nodes below their
    /// threshold are consolidated. Only with `WhenEmptyOrUnderutilized`.
    #[serde(default = "default_right_size_savings")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub right_size_savings: f64,
    /// How long a node must stay unneeded before it is removed (`10m`, `1h30m`, `1.5h`; at
    /// most ten years).
    #[serde(default = "default_unneeded_time")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub unneeded_time: String,
    /// No scale-down of this pool's nodes for this long after the pool scaled up (`10m`; at
    /// most ten years). Unset: `--scale-down-delay-after-add`. Each pool counts its own
    /// scale-ups, deletions and failures: one pool's activity does not hold back another's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub scale_down_delay_after_add: Option<String>,
    /// No scale-down of this pool's nodes for this long after one of them was deleted. Unset:
    /// `--scale-down-delay-after-delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub scale_down_delay_after_delete: Option<String>,
    /// No scale-down or drift of this pool's nodes for this long after a deletion in the pool
    /// failed (a drain timed out, a replacement never came up), doubled for each further such
    /// failure in a row up to an hour (or this, if longer) until a deletion succeeds. Unset:
    /// `--scale-down-delay-after-failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub scale_down_delay_after_failure: Option<String>,
    /// How many nodes may be disrupted at once; the most restrictive applicable budget wins.
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50))]
    pub budgets: Vec<BudgetSpec>,
}

fn default_consolidation_policy() -> String {
    "WhenEmptyOrUnderutilized".to_string()
}

fn default_consolidate_after() -> String {
    "0s".to_string()
}

fn default_threshold() -> f64 {
    0.5
}

fn default_right_size_savings() -> f64 {
    autoscaler_core::model::DEFAULT_RIGHT_SIZE_SAVINGS
}

fn default_unneeded_time() -> String {
    "10m".to_string()
}

fn default_budgets() -> Vec<BudgetSpec> {
    vec![BudgetSpec {
        nodes: "10%".to_string(),
        reasons: Vec::new(),
        schedule: None,
        duration: None,
    }]
}

impl Default for DisruptionSpec {
    fn default() -> Self {
        DisruptionSpec {
            consolidation_policy: default_consolidation_policy(),
            consolidate_after: default_consolidate_after(),
            gpu_utilization_threshold: default_threshold(),
            utilization_threshold: default_threshold(),
            right_size_savings: default_right_size_savings(),
            unneeded_time: default_unneeded_time(),
            scale_down_delay_after_add: None,
            scale_down_delay_after_delete: None,
            scale_down_delay_after_failure: None,
            budgets: default_budgets(),
        }
    }
}

/// The OpenAPI pattern of a budget's `nodes`: a count or a percentage up to 100%.
pub const BUDGET_NODES_PATTERN: &str = "^((100|[0-9]{1,2})%|[0-9]+)$";

/// The OpenAPI pattern of a budget's `duration`, Karpenter's: hours and minutes (`8h`,
/// `30m`, `1h30m`), optionally followed by `0s` as Go prints durations (`1h30m0s`).
pub const BUDGET_DURATION_PATTERN: &str = "^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";

/// The OpenAPI pattern of a budget's `schedule`: one of the cron macros or five
/// whitespace-separated fields; validation checks the fields themselves.
pub const BUDGET_SCHEDULE_PATTERN: &str =
    r"^\s*(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})\s*$";

/// The message of the CRD's rule that a budget sets `schedule` and `duration` together
/// (Karpenter's words); the controller's own check of it restates it.
pub const BUDGET_WINDOW_RULE: &str = "'schedule' must be set with 'duration'";

/// One disruption budget.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.schedule) == has(self.duration)",
        "message": BUDGET_WINDOW_RULE,
    },
]))]
pub struct BudgetSpec {
    /// At most this many nodes (`5`) or this share of the pool's nodes (`10%`) at once.
    #[schemars(pattern(BUDGET_NODES_PATTERN))]
    pub nodes: String,
    /// The disruption reasons the budget applies to (`Empty`, `Underutilized`, `Drifted`);
    /// empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::budget_reasons")]
    pub reasons: Vec<String>,
    /// When the budget opens: a cron schedule in UTC, five fields (minute hour day-of-month
    /// month day-of-week, e.g. `0 9 * * mon-fri`) or `@yearly`, `@annually`, `@monthly`,
    /// `@weekly`, `@daily`, `@midnight`, `@hourly`. The budget is in force from each time the
    /// schedule fires for `duration`, and limits nothing otherwise. Set with `duration`;
    /// without both, the budget is always in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BUDGET_SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
    /// How long the budget stays in force after each time `schedule` fires: hours and
    /// minutes (`8h`, `1h30m`). Set with `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BUDGET_DURATION_PATTERN))]
    pub duration: Option<String>,
}

/// The observed state of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// `Ready`, `ValidationSucceeded`, `CapacityDelivered` and `InstanceTypesAvailable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
    /// Nodes of the pool, including those being launched.
    #[serde(default)]
    pub nodes: i64,
    /// Capacity of the pool's nodes, including those being launched, by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub resources: BTreeMap<String, Quantity>,
}
