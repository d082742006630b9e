//! Scenario files: the YAML a user writes to describe a cluster and its workload, and its
//! translation into the simulator's typed [`Scenario`].
//!
//! A scenario names a catalog (`embedded`, `aws`, `gcp`), NodePools (full `NodePool` objects
//! under `nodePools`, files of them under `nodePoolFiles`, or the compact form under `pools`),
//! DaemonSets, cluster timings (launch latency per family, device-plugin delay, capacity
//! errors, spot interruptions) and workload generators (deployments with replica schedules,
//! batch jobs, gangs, ProvisioningRequests with their class, booking and admission delay,
//! Poisson or periodic arrivals).
//!
//! Every problem is reported as [`SimError::Scenario`] with the file, the line and the field:
//! serde_yaml supplies line and path for shape errors (a missing field, a negative duration is
//! rejected while deserializing so it gets the same treatment); semantic checks done after
//! parsing (an unknown NodePool or resource) find their line by searching the text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use autoscaler_core::disruption::{DO_NOT_DISRUPT, SAFE_TO_EVICT};
use autoscaler_core::duration::{self, Bare};
use autoscaler_core::gpu::apply_sharing;
use autoscaler_core::model::{
    Budget, BudgetValue, ConsolidationPolicy, DaemonSet, DisruptionPolicy, GpuShare, GpuSharing,
    Limits, MigSharing, MigStrategy, Pod, PodAffinityTerm, PodKey, Pool, TimeSlicing,
    TopologySpread,
};
use autoscaler_core::quantity::Quantity;
use autoscaler_core::requirements::{Labels, NodeSelector, Operator, Requirements};
use autoscaler_core::resources::{Resources, is_gpu_class, names};
use autoscaler_core::taints::{Effect, Taint, Toleration};
use autoscaler_core::{CapacityType, InstanceType, labels};
use providers::OfferingKey;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::SimError;

/// The bundled default scenario (what `gpu-autoscaler simulate` runs with no arguments).
pub const DEFAULT_SCENARIO_YAML: &str = include_str!("../scenarios/default.yaml");
/// The name the bundled default is reported under.
pub const DEFAULT_SCENARIO_NAME: &str = "default";

// ---------------------------------------------------------------------------------------------
// Scalar helpers that fail while deserializing, so serde_yaml attaches line and field.

/// A duration in whole seconds, in the core's one grammar ([`autoscaler_core::duration`]): a
/// number of seconds, or text such as `90s`, `10m`, `1h30m`, `1.5h`, `2d`. Negative,
/// non-finite and longer than ten years are rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub i64);

/// Parses a duration as [`Dur`] accepts it, in whole seconds (rounded to the nearest).
///
/// # Errors
/// The core's message naming the text: negative, empty, malformed or longer than ten years.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    duration::parse(text.trim(), Bare::Seconds)
        .map(duration::whole_seconds)
        .map_err(|e| e.to_string())
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 90, \"90s\", \"10m\" or \"1h30m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                duration::from_secs_f64(v)
                    .map(|d| Dur(duration::whole_seconds(d)))
                    .map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A Kubernetes quantity (`500m`, `2Gi`, `4`), checked while deserializing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qty(pub Quantity);

impl<'de> Deserialize<'de> for Qty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Qty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as 500m, 2Gi or 4")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Qty, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Qty, E> {
                let q = Quantity::parse(v).map_err(E::custom)?;
                if q.is_negative() {
                    return Err(E::custom(format!("negative quantity {v:?}")));
                }
                Ok(Qty(q))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------------
// The file's shape.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    duration: Dur,
    #[serde(default)]
    catalog: CatalogChoice,
    #[serde(default)]
    policies: Option<Vec<String>>,
    #[serde(default)]
    cluster: ClusterFile,
    #[serde(default)]
    daemon_sets: Vec<DaemonSetFile>,
    #[serde(default, deserialize_with = "nodepools::strict::nodepools")]
    node_pools: Vec<nodepools::NodePool>,
    #[serde(default)]
    node_pool_files: Vec<String>,
    #[serde(default)]
    pools: Vec<PoolFile>,
    #[serde(default)]
    workloads: Vec<WorkloadEntry>,
}

/// Which instance types the fake cloud sells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogChoice {
    /// The whole embedded catalog (AWS and GCP types).
    #[default]
    Embedded,
    /// The embedded catalog's AWS types.
    Aws,
    /// The embedded catalog's GCP types.
    Gcp,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterFile {
    #[serde(default)]
    launch: Option<LaunchFile>,
    #[serde(default)]
    registration: Option<Dur>,
    #[serde(default)]
    device_plugin_delay: Option<Dur>,
    #[serde(default)]
    insufficient_capacity: Option<IceFile>,
    #[serde(default)]
    spot_interruptions_per_hour: Option<f64>,
    #[serde(default)]
    scheduler_score: Option<ScoreStrategy>,
    #[serde(default)]
    batch_idle: Option<Dur>,
    #[serde(default)]
    batch_max: Option<Dur>,
    #[serde(default)]
    disruption_interval: Option<Dur>,
    #[serde(default)]
    validation_delay: Option<Dur>,
    #[serde(default)]
    scale_down_delay_after_add: Option<Dur>,
    #[serde(default)]
    scale_down_delay_after_delete: Option<Dur>,
    #[serde(default)]
    scale_down_delay_after_failure: Option<Dur>,
    #[serde(default)]
    ignore_daemonsets_utilization: Option<bool>,
    #[serde(default)]
    ignore_mirror_pods_utilization: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LaunchFile {
    #[serde(default)]
    cpu: Option<Dur>,
    #[serde(default)]
    gpu: Option<Dur>,
    #[serde(default)]
    families: BTreeMap<String, Dur>,
    #[serde(default)]
    jitter: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IceFile {
    #[serde(default)]
    probability: f64,
    #[serde(default)]
    offerings: Vec<IceOfferingFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IceOfferingFile {
    instance_type: String,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    capacity_type: Option<CapacityType>,
}

/// How the simulated kube-scheduler scores feasible nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum ScoreStrategy {
    /// Prefer the emptiest node (the default scheduler's `LeastAllocated`).
    #[default]
    LeastAllocated,
    /// Prefer the fullest node (bin-packing, `MostAllocated`).
    MostAllocated,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DaemonSetFile {
    name: String,
    #[serde(default)]
    cpu: Option<Qty>,
    #[serde(default)]
    memory: Option<Qty>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerate_all: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PoolFile {
    name: String,
    #[serde(default)]
    weight: i32,
    #[serde(default)]
    instance_types: Vec<String>,
    #[serde(default)]
    families: Vec<String>,
    #[serde(default)]
    gpus: Vec<String>,
    #[serde(default)]
    capacity_types: Vec<CapacityType>,
    #[serde(default)]
    zones: Vec<String>,
    #[serde(default)]
    arch: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<TaintFile>,
    #[serde(default)]
    startup_taints: Vec<TaintFile>,
    #[serde(default)]
    time_slicing: Option<u32>,
    #[serde(default)]
    mig: Option<String>,
    #[serde(default)]
    mig_strategy: Option<String>,
    #[serde(default)]
    fractional: bool,
    #[serde(default)]
    limits: BTreeMap<String, Qty>,
    #[serde(default)]
    gpu_limits: BTreeMap<String, i64>,
    #[serde(default)]
    min_nodes: u32,
    #[serde(default)]
    disruption: DisruptionFile,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DisruptionFile {
    #[serde(default)]
    consolidation_policy: Option<String>,
    #[serde(default)]
    consolidate_after: Option<Dur>,
    #[serde(default)]
    gpu_utilization_threshold: Option<f64>,
    #[serde(default)]
    utilization_threshold: Option<f64>,
    #[serde(default)]
    unneeded_time: Option<Dur>,
    #[serde(default)]
    budgets: Vec<String>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaintFile {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default = "no_schedule")]
    effect: String,
}

fn no_schedule() -> String {
    "NoSchedule".into()
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TolerationFile {
    #[serde(default)]
    key: String,
    #[serde(default)]
    operator: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    effect: String,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodFile {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    cpu: Option<Qty>,
    #[serde(default)]
    memory: Option<Qty>,
    #[serde(default)]
    gpus: Option<u32>,
    #[serde(default)]
    gpu_share: Option<u32>,
    #[serde(default)]
    resources: BTreeMap<String, Qty>,
    #[serde(default)]
    node_pool: Option<String>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    gpu_models: Vec<String>,
    #[serde(default)]
    tolerations: Vec<TolerationFile>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    do_not_disrupt: bool,
    #[serde(default)]
    safe_to_evict: Option<bool>,
    #[serde(default)]
    spread: Vec<SpreadFile>,
    #[serde(default)]
    anti_affinity: Vec<String>,
    #[serde(default)]
    affinity: Vec<String>,
    #[serde(default)]
    local_storage: bool,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpreadFile {
    topology_key: String,
    #[serde(default = "one")]
    max_skew: u32,
}

fn one() -> u32 {
    1
}

/// One `workloads` entry: a map with exactly one of these keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WorkloadEntry {
    #[serde(default)]
    deployment: Option<DeploymentFile>,
    #[serde(default)]
    jobs: Option<JobsFile>,
    #[serde(default)]
    gangs: Option<GangsFile>,
    #[serde(default)]
    provisioning_requests: Option<ProvReqFile>,
}

enum WorkloadFile<'a> {
    Deployment(&'a DeploymentFile),
    Jobs(&'a JobsFile),
    Gangs(&'a GangsFile),
    ProvisioningRequests(&'a ProvReqFile),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeploymentFile {
    name: String,
    replicas: Vec<ReplicaStep>,
    pod: PodFile,
    #[serde(default)]
    max_unavailable: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReplicaStep {
    at: Dur,
    count: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JobsFile {
    name: String,
    arrivals: ArrivalsFile,
    duration: DurationFile,
    pod: PodFile,
    #[serde(default)]
    limit: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GangsFile {
    name: String,
    size: u32,
    arrivals: ArrivalsFile,
    duration: DurationFile,
    pod: PodFile,
    #[serde(default)]
    limit: Option<u32>,
}

/// A `provisioningRequests` entry: a gang's fields plus the request's class and timings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProvReqFile {
    name: String,
    size: u32,
    arrivals: ArrivalsFile,
    duration: DurationFile,
    pod: PodFile,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    booking_duration: Option<Dur>,
    #[serde(default)]
    admission_delay: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ArrivalsFile {
    #[serde(default)]
    per_hour: Option<f64>,
    #[serde(default)]
    every: Option<Dur>,
    #[serde(default)]
    at: Vec<Dur>,
    #[serde(default)]
    start: Option<Dur>,
    #[serde(default)]
    end: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DurationFile {
    #[serde(default)]
    fixed: Option<Dur>,
    #[serde(default)]
    min: Option<Dur>,
    #[serde(default)]
    max: Option<Dur>,
    #[serde(default)]
    mean: Option<Dur>,
}

// ---------------------------------------------------------------------------------------------
// The typed scenario.

/// Timings and fault injection of the simulated cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Seconds from launch until the instance runs, for types without GPUs.
    pub launch_cpu_s: i64,
    /// ... for GPU types (bigger images, driver install).
    pub launch_gpu_s: i64,
    /// Per instance family (`p5`, `a3`), overriding the above.
    pub launch_family_s: BTreeMap<String, i64>,
    /// Relative jitter on launch times, e.g. 0.2 for ±20 %.
    pub launch_jitter: f64,
    /// Seconds from instance running to node Ready.
    pub registration_s: i64,
    /// Seconds from Ready until the device plugin advertises GPUs (and startup taints go).
    pub device_plugin_s: i64,
    /// Chance that a launch attempt on any one offering fails for lack of capacity.
    pub ice_probability: f64,
    /// Offerings that always fail for lack of capacity.
    pub ice_offerings: Vec<OfferingKey>,
    /// Interruptions per spot node per hour.
    pub spot_interruptions_per_hour: f64,
    /// Scheduler scoring.
    pub score: ScoreStrategy,
    /// Batch window: plan after this long without a new pending pod...
    pub batch_idle_s: i64,
    /// ... or this long after the first one.
    pub batch_max_s: i64,
    /// Disruption loop period.
    pub disruption_interval_s: i64,
    /// Delay before a disruption command is re-validated and executed.
    pub validation_delay_s: i64,
    /// No scale-down this long after a scale-up (Cluster Autoscaler's default 10 min).
    pub scale_down_delay_after_add_s: i64,
    /// No scale-down this long after a node deletion (default 0).
    pub scale_down_delay_after_delete_s: i64,
    /// No scale-down this long after a failed deletion (default 3 min).
    pub scale_down_delay_after_failure_s: i64,
    /// Leave DaemonSet pods out of utilization.
    pub ignore_daemonsets_utilization: bool,
    /// Leave mirror pods out of utilization.
    pub ignore_mirror_pods_utilization: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            launch_cpu_s: 45,
            launch_gpu_s: 120,
            launch_family_s: BTreeMap::new(),
            launch_jitter: 0.2,
            registration_s: 20,
            device_plugin_s: 180,
            ice_probability: 0.0,
            ice_offerings: Vec::new(),
            spot_interruptions_per_hour: 0.0,
            score: ScoreStrategy::LeastAllocated,
            batch_idle_s: 1,
            batch_max_s: 10,
            disruption_interval_s: 10,
            validation_delay_s: 15,
            scale_down_delay_after_add_s: 600,
            scale_down_delay_after_delete_s: 0,
            scale_down_delay_after_failure_s: 180,
            ignore_daemonsets_utilization: false,
            ignore_mirror_pods_utilization: false,
        }
    }
}

/// When a generator's units arrive.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrivals {
    /// A Poisson process of `per_hour` arrivals per hour between `start` and `end`.
    Poisson {
        /// Rate.
        per_hour: f64,
        /// First possible arrival.
        start: i64,
        /// No arrival at or after this.
        end: i64,
    },
    /// One arrival every `every` seconds from `start` until `end`.
    Every {
        /// Period.
        every: i64,
        /// First arrival.
        start: i64,
        /// No arrival at or after this.
        end: i64,
    },
    /// Arrivals at these times.
    At(Vec<i64>),
}

/// How long a job runs once all its pods are bound.
#[derive(Clone, Debug, PartialEq)]
pub enum Runtime {
    /// Always this long.
    Fixed(i64),
    /// Uniform between the two.
    Uniform(i64, i64),
    /// Exponential with this mean.
    Exponential(i64),
}

/// What a workload entry generates.
#[derive(Clone, Debug, PartialEq)]
pub enum Generator {
    /// Long-running replicas; `(time, replicas)` steps, sorted by time.
    Deployment {
        /// The replica schedule.
        steps: Vec<(i64, u32)>,
        /// PodDisruptionBudget `maxUnavailable`, if any.
        max_unavailable: Option<u32>,
    },
    /// Independent single-pod jobs.
    Jobs {
        /// Arrival process.
        arrivals: Arrivals,
        /// Runtime.
        runtime: Runtime,
        /// Most jobs generated.
        limit: Option<u32>,
    },
    /// All-or-nothing groups of `size` pods (gangs, or ProvisioningRequests when
    /// `provisioning_request`).
    Groups {
        /// Pods per group.
        size: u32,
        /// Arrival process.
        arrivals: Arrivals,
        /// Runtime of the group once all members are bound.
        runtime: Runtime,
        /// Most groups generated.
        limit: Option<u32>,
        /// For ProvisioningRequests: the request's class and timings (its pods are created
        /// only once it is Provisioned); `None` for plain gangs.
        provisioning_request: Option<ProvReqSpec>,
    },
}

/// The provisioning class of a ProvisioningRequest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProvReqClass {
    /// `best-effort-atomic-scale-up.autoscaling.x-k8s.io`: the capacity of all its pods is
    /// launched, all or nothing.
    BestEffortAtomic,
    /// `check-capacity.autoscaling.x-k8s.io`: answered from existing and in-flight capacity
    /// only; never launches.
    CheckCapacity,
}

impl ProvReqClass {
    /// The short name scenarios use.
    pub fn as_str(self) -> &'static str {
        match self {
            ProvReqClass::BestEffortAtomic => "best-effort-atomic",
            ProvReqClass::CheckCapacity => "check-capacity",
        }
    }

    /// Parses the short name or the full class name.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "best-effort-atomic" | "best-effort-atomic-scale-up.autoscaling.x-k8s.io" => {
                Some(ProvReqClass::BestEffortAtomic)
            }
            "check-capacity" | "check-capacity.autoscaling.x-k8s.io" => {
                Some(ProvReqClass::CheckCapacity)
            }
            _ => None,
        }
    }
}

/// Default time a Provisioned request's capacity stays booked (the controller's
/// `--provreq-booking`).
pub const DEFAULT_BOOKING_S: i64 = 600;
/// Default time from Provisioned until Kueue has admitted the workload and its pods exist.
pub const DEFAULT_ADMISSION_DELAY_S: i64 = 5;

/// What a `provisioningRequests` workload's requests ask for, beyond their pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProvReqSpec {
    /// Provisioning class.
    pub class: ProvReqClass,
    /// Seconds the capacity stays booked after Provisioned (`BookingDurationSeconds`).
    pub booking_s: i64,
    /// Seconds from Provisioned until the pods are created (Kueue's admission).
    pub admission_delay_s: i64,
}

/// One workload entry: a pod template and its generator.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// Name (pods are `<name>-<n>`, labelled `app=<name>`).
    pub name: String,
    /// The pod template (its key's name is the workload name).
    pub template: Pod,
    /// The generator.
    pub generator: Generator,
}

/// A parsed, checked scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Name reported in the summary.
    pub name: String,
    /// The file it came from (`<embedded>` for the default).
    pub path: PathBuf,
    /// Seed (the command line may override it).
    pub seed: u64,
    /// Virtual seconds to simulate.
    pub duration_s: i64,
    /// What the fake cloud sells.
    pub catalog: Arc<Vec<InstanceType>>,
    /// NodePools, with their catalogs.
    pub pools: Vec<Pool>,
    /// DaemonSets.
    pub daemonsets: Vec<DaemonSet>,
    /// Cluster timings and faults.
    pub cluster: ClusterConfig,
    /// Workload generators.
    pub workloads: Vec<WorkloadSpec>,
    /// Policy names to compare.
    pub policies: Vec<String>,
}

/// Every policy the simulator knows.
pub const POLICY_NAMES: [&str; 3] = ["gpu-autoscaler", "karpenter-like", "ca-like"];

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, anchors: &[&str], field: impl Into<String>, why: impl Into<String>) -> SimError {
        SimError::Scenario {
            path: self.path.to_path_buf(),
            line: locate(self.text, anchors),
            field: field.into(),
            why: why.into(),
        }
    }
}

/// The 1-based line of the last anchor, each searched from the line of the previous one; a
/// best effort for errors found after parsing (0 when an anchor is not found).
pub fn locate(text: &str, anchors: &[&str]) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0usize;
    let mut found = 0usize;
    for a in anchors {
        match lines[from..].iter().position(|l| l.contains(a)) {
            Some(i) => {
                from += i;
                found = from + 1;
            }
            None => return found,
        }
    }
    found
}

fn yaml_error(path: &Path, e: &serde_yaml::Error) -> SimError {
    let line = e.location().map_or(0, |l| l.line());
    let msg = e.to_string();
    // serde_yaml renders `path.to.field: message at line L column C`.
    let msg = match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    };
    let (field, why) = match msg.split_once(": ") {
        Some((f, w)) if !f.contains(' ') => (f.to_string(), w.to_string()),
        _ => ("(document)".to_string(), msg.clone()),
    };
    SimError::Scenario {
        path: path.to_path_buf(),
        line,
        field,
        why,
    }
}

impl Scenario {
    /// The bundled default scenario.
    ///
    /// # Errors
    /// Never in a released build (a test loads it); a [`SimError`] otherwise.
    pub fn default_scenario() -> Result<Scenario, SimError> {
        Scenario::parse(Path::new("<embedded default.yaml>"), DEFAULT_SCENARIO_YAML)
    }

    /// Reads and parses a scenario file.
    ///
    /// # Errors
    /// [`SimError::Io`] when it cannot be read, [`SimError::Scenario`] for its first problem.
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::parse(path, &text)
    }

    /// Parses scenario text; `path` names it in errors and anchors `nodePoolFiles`.
    ///
    /// # Errors
    /// [`SimError::Scenario`] naming the file, line and field of the first problem.
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, SimError> {
        let file: File = serde_yaml::from_str(text).map_err(|e| yaml_error(path, &e))?;
        let cx = Ctx { path, text };
        let catalog = Arc::new(match file.catalog {
            CatalogChoice::Embedded => providers::catalog::default_catalog(),
            CatalogChoice::Aws => providers::catalog::default_catalog_for(providers::catalog::AWS),
            CatalogChoice::Gcp => providers::catalog::default_catalog_for(providers::catalog::GCP),
        });
        let cluster = build_cluster(&cx, &file.cluster, &catalog)?;
        let mut pools = Vec::new();
        for (i, np) in file.node_pools.iter().enumerate() {
            let name = np.metadata.name.clone().unwrap_or_default();
            let pool = np.to_core(catalog.clone()).map_err(|e| {
                cx.err(
                    &["nodePools:", &format!("name: {name}")],
                    format!("nodePools[{i}]"),
                    e.lines().join("; "),
                )
            })?;
            pools.push(pool);
        }
        for (i, f) in file.node_pool_files.iter().enumerate() {
            let p = path.parent().unwrap_or(Path::new(".")).join(f);
            let field = format!("nodePoolFiles[{i}]");
            let text = std::fs::read_to_string(&p).map_err(|e| {
                cx.err(
                    &["nodePoolFiles:", f],
                    &field,
                    format!("{}: {e}", p.display()),
                )
            })?;
            let nps = nodepools::load_nodepools(&text).map_err(|e| {
                cx.err(
                    &["nodePoolFiles:", f],
                    &field,
                    format!("{}: {e}", p.display()),
                )
            })?;
            for np in nps {
                let pool = np
                    .to_core(catalog.clone())
                    .map_err(|e| cx.err(&["nodePoolFiles:", f], &field, e.lines().join("; ")))?;
                pools.push(pool);
            }
        }
        for (i, pf) in file.pools.iter().enumerate() {
            pools.push(build_pool(&cx, i, pf, &catalog)?);
        }
        let mut seen = BTreeSet::new();
        for p in &pools {
            if !seen.insert(p.name.clone()) {
                return Err(cx.err(
                    &[&format!("name: {}", p.name), &format!("name: {}", p.name)],
                    "pools",
                    format!("NodePool {} is defined twice", p.name),
                ));
            }
            let usable = p
                .instance_types
                .iter()
                .any(|it| type_in_pool(it, p).is_some());
            if !usable {
                return Err(cx.err(
                    &[&format!("name: {}", p.name)],
                    format!("pools[{}]", p.name),
                    "no instance type of the catalog satisfies this NodePool's requirements",
                ));
            }
        }
        if pools.is_empty() {
            return Err(cx.err(&[], "pools", "the scenario defines no NodePool"));
        }
        let daemonsets = file
            .daemon_sets
            .iter()
            .map(build_daemonset)
            .collect::<Vec<_>>();
        let mut workloads = Vec::new();
        let mut names = BTreeSet::new();
        for (i, e) in file.workloads.iter().enumerate() {
            let kinds = [
                e.deployment.as_ref().map(WorkloadFile::Deployment),
                e.jobs.as_ref().map(WorkloadFile::Jobs),
                e.gangs.as_ref().map(WorkloadFile::Gangs),
                e.provisioning_requests
                    .as_ref()
                    .map(WorkloadFile::ProvisioningRequests),
            ];
            let mut kinds = kinds.into_iter().flatten();
            let (Some(w), None) = (kinds.next(), kinds.next()) else {
                return Err(cx.err(
                    &["workloads:"],
                    format!("workloads[{i}]"),
                    "needs exactly one of deployment, jobs, gangs or provisioningRequests",
                ));
            };
            let spec = build_workload(&cx, i, &w, &pools)?;
            if !names.insert(spec.name.clone()) {
                return Err(cx.err(
                    &[
                        "workloads:",
                        &format!("name: {}", spec.name),
                        &format!("name: {}", spec.name),
                    ],
                    format!("workloads[{i}].name"),
                    format!("workload name {} is used twice", spec.name),
                ));
            }
            workloads.push(spec);
        }
        let policies = match &file.policies {
            None => POLICY_NAMES.iter().map(|s| s.to_string()).collect(),
            Some(list) => {
                for (i, p) in list.iter().enumerate() {
                    if !POLICY_NAMES.contains(&p.as_str()) {
                        return Err(cx.err(
                            &["policies:", p],
                            format!("policies[{i}]"),
                            format!("unknown policy {p:?} (known: {})", POLICY_NAMES.join(", ")),
                        ));
                    }
                }
                list.clone()
            }
        };
        if file.duration.0 <= 0 {
            return Err(cx.err(&["duration:"], "duration", "must be positive"));
        }
        Ok(Scenario {
            name: file.name.unwrap_or_else(|| {
                path.file_stem()
                    .map_or("scenario".into(), |s| s.to_string_lossy().into_owned())
            }),
            path: path.to_path_buf(),
            seed: file.seed.unwrap_or(1),
            duration_s: file.duration.0,
            catalog,
            pools,
            daemonsets,
            cluster,
            workloads,
            policies,
        })
    }
}

/// The instance type as nodes of `pool` see it (sharing applied), when the pool's label
/// requirements (zone and capacity type aside) allow it and some offering is allowed.
pub fn type_in_pool(it: &InstanceType, pool: &Pool) -> Option<InstanceType> {
    let shared = apply_sharing(it, &pool.sharing).ok()?;
    let mut l = shared.labels.clone();
    for (k, v) in &pool.labels {
        l.insert(k.clone(), v.clone());
    }
    l.insert(labels::NODEPOOL.into(), pool.name.clone());
    for (k, c) in pool.requirements.iter() {
        if k == labels::ZONE || k == labels::CAPACITY_TYPE || k == labels::HOSTNAME {
            continue;
        }
        if !c.matches(l.get(k).map(String::as_str)) {
            return None;
        }
    }
    let zc = pool.requirements.get(labels::ZONE);
    let cc = pool.requirements.get(labels::CAPACITY_TYPE);
    let any = shared.offerings.iter().any(|o| {
        zc.is_none_or(|c| c.matches(Some(&o.zone)))
            && cc.is_none_or(|c| c.matches(Some(o.capacity_type.as_str())))
    });
    any.then_some(InstanceType {
        labels: l,
        ..shared
    })
}

fn build_cluster(
    cx: &Ctx,
    f: &ClusterFile,
    catalog: &[InstanceType],
) -> Result<ClusterConfig, SimError> {
    let mut c = ClusterConfig::default();
    if let Some(l) = &f.launch {
        if let Some(d) = l.cpu {
            c.launch_cpu_s = d.0;
        }
        if let Some(d) = l.gpu {
            c.launch_gpu_s = d.0;
        }
        for (k, v) in &l.families {
            c.launch_family_s.insert(k.clone(), v.0);
        }
        if let Some(j) = l.jitter {
            if !(0.0..1.0).contains(&j) {
                return Err(cx.err(&["jitter:"], "cluster.launch.jitter", "must be in [0, 1)"));
            }
            c.launch_jitter = j;
        }
    }
    if let Some(d) = f.registration {
        c.registration_s = d.0;
    }
    if let Some(d) = f.device_plugin_delay {
        c.device_plugin_s = d.0;
    }
    if let Some(ice) = &f.insufficient_capacity {
        if !(0.0..=1.0).contains(&ice.probability) {
            return Err(cx.err(
                &["insufficientCapacity:", "probability:"],
                "cluster.insufficientCapacity.probability",
                "must be in [0, 1]",
            ));
        }
        c.ice_probability = ice.probability;
        for (i, o) in ice.offerings.iter().enumerate() {
            let Some(it) = catalog.iter().find(|t| t.name == o.instance_type) else {
                return Err(cx.err(
                    &["insufficientCapacity:", &o.instance_type],
                    format!("cluster.insufficientCapacity.offerings[{i}].instanceType"),
                    format!("unknown instance type {:?}", o.instance_type),
                ));
            };
            for off in &it.offerings {
                if o.zone.as_ref().is_none_or(|z| *z == off.zone)
                    && o.capacity_type.is_none_or(|ct| ct == off.capacity_type)
                {
                    c.ice_offerings
                        .push(OfferingKey::new(&it.name, &off.zone, off.capacity_type));
                }
            }
        }
    }
    if let Some(r) = f.spot_interruptions_per_hour {
        // Written so that NaN fails too.
        if !(r >= 0.0 && r.is_finite()) {
            return Err(cx.err(
                &["spotInterruptionsPerHour:"],
                "cluster.spotInterruptionsPerHour",
                format!("{r} is not a finite rate of at least 0"),
            ));
        }
        c.spot_interruptions_per_hour = r;
    }
    if let Some(s) = f.scheduler_score {
        c.score = s;
    }
    if let Some(d) = f.batch_idle {
        c.batch_idle_s = d.0.max(1);
    }
    if let Some(d) = f.batch_max {
        c.batch_max_s = d.0.max(1);
    }
    if let Some(d) = f.disruption_interval {
        c.disruption_interval_s = d.0.max(1);
    }
    if let Some(d) = f.validation_delay {
        c.validation_delay_s = d.0;
    }
    if let Some(d) = f.scale_down_delay_after_add {
        c.scale_down_delay_after_add_s = d.0;
    }
    if let Some(d) = f.scale_down_delay_after_delete {
        c.scale_down_delay_after_delete_s = d.0;
    }
    if let Some(d) = f.scale_down_delay_after_failure {
        c.scale_down_delay_after_failure_s = d.0;
    }
    if let Some(b) = f.ignore_daemonsets_utilization {
        c.ignore_daemonsets_utilization = b;
    }
    if let Some(b) = f.ignore_mirror_pods_utilization {
        c.ignore_mirror_pods_utilization = b;
    }
    Ok(c)
}

fn build_daemonset(f: &DaemonSetFile) -> DaemonSet {
    let mut r = Resources::new().with(names::PODS, 1);
    if let Some(q) = f.cpu {
        let _ = r.add_quantity(names::CPU, q.0);
    }
    if let Some(q) = f.memory {
        let _ = r.add_quantity(names::MEMORY, q.0);
    }
    DaemonSet {
        name: f.name.clone(),
        requests: r,
        node_selector: NodeSelector::new(&f.node_selector, vec![]),
        tolerations: if f.tolerate_all {
            vec![Toleration::exists("")]
        } else {
            vec![]
        },
        host_ports: vec![],
    }
}

fn parse_taint(t: &TaintFile) -> Result<Taint, String> {
    let effect = Effect::parse(&t.effect).map_err(|e| e.to_string())?;
    Ok(Taint::new(&t.key, &t.value, effect))
}

fn build_pool(
    cx: &Ctx,
    i: usize,
    f: &PoolFile,
    catalog: &Arc<Vec<InstanceType>>,
) -> Result<Pool, SimError> {
    let field = |s: &str| format!("pools[{i}].{s}");
    let at = |s: &str| cx.err(&["pools:", &format!("name: {}", f.name)], field(s), "");
    let err = |s: &str, key: &str, why: String| {
        cx.err(
            &["pools:", &format!("name: {}", f.name), key],
            field(s),
            why,
        )
    };
    let _ = at;
    let mut reqs = Requirements::new();
    let mut add = |key: &str, values: &[String], fname: &str| -> Result<(), SimError> {
        if values.is_empty() {
            return Ok(());
        }
        reqs.add(key, Operator::In, values)
            .map_err(|e| err(fname, fname, e.to_string()))
    };
    for name in &f.instance_types {
        if !catalog.iter().any(|t| &t.name == name) {
            return Err(err(
                "instanceTypes",
                name,
                format!("unknown instance type {name:?} (not in the catalog)"),
            ));
        }
    }
    add(labels::INSTANCE_TYPE, &f.instance_types, "instanceTypes")?;
    add(labels::INSTANCE_FAMILY, &f.families, "families")?;
    let gpus: Vec<String> = f.gpus.iter().map(|g| g.to_lowercase()).collect();
    add(labels::GPU_NAME, &gpus, "gpus")?;
    let cts: Vec<String> = f
        .capacity_types
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    add(
        labels::CAPACITY_TYPE,
        &if cts.is_empty() {
            vec!["on-demand".to_string()]
        } else {
            cts
        },
        "capacityTypes",
    )?;
    add(labels::ZONE, &f.zones, "zones")?;
    add(labels::ARCH, &f.arch, "arch")?;
    let mut taints = Vec::new();
    for t in &f.taints {
        taints.push(parse_taint(t).map_err(|e| err("taints", &t.key, e))?);
    }
    let mut startup_taints = Vec::new();
    for t in &f.startup_taints {
        startup_taints.push(parse_taint(t).map_err(|e| err("startupTaints", &t.key, e))?);
    }
    let mig = match &f.mig {
        None => None,
        Some(config) => Some(MigSharing {
            config: config.clone(),
            strategy: match f.mig_strategy.as_deref() {
                None | Some("mixed") => MigStrategy::Mixed,
                Some("single") => MigStrategy::Single,
                Some(other) => {
                    return Err(err(
                        "migStrategy",
                        "migStrategy",
                        format!("{other:?} is not single or mixed"),
                    ));
                }
            },
        }),
    };
    let time_slicing = match f.time_slicing {
        None => None,
        Some(r) if r >= 2 => Some(TimeSlicing {
            replicas: r,
            rename: false,
        }),
        Some(r) => {
            return Err(err(
                "timeSlicing",
                "timeSlicing",
                format!("{r} replicas: must be at least 2"),
            ));
        }
    };
    if mig.is_some() && time_slicing.is_some() {
        return Err(err(
            "mig",
            "mig",
            "timeSlicing and mig cannot both be set".into(),
        ));
    }
    let mut limits = Limits::default();
    for (k, q) in &f.limits {
        if k == "nodes" {
            limits.nodes = Some((q.0.millis() / 1000) as i64);
            continue;
        }
        let mut r = Resources::new();
        r.add_quantity(k, q.0)
            .map_err(|e| err(&format!("limits[{k:?}]"), k, e.to_string()))?;
        limits.resources.insert(k.clone(), r.get(k));
    }
    for (k, v) in &f.gpu_limits {
        if *v < 0 {
            return Err(err(
                &format!("gpuLimits[{k:?}]"),
                k,
                "must not be negative".into(),
            ));
        }
        limits.gpus_by_model.insert(k.clone(), *v);
    }
    let d = &f.disruption;
    let mut disruption = DisruptionPolicy::default();
    if let Some(p) = &d.consolidation_policy {
        disruption.consolidation_policy = match p.as_str() {
            "WhenEmpty" => ConsolidationPolicy::WhenEmpty,
            "WhenEmptyOrUnderutilized" => ConsolidationPolicy::WhenEmptyOrUnderutilized,
            other => {
                return Err(err(
                    "disruption.consolidationPolicy",
                    "consolidationPolicy",
                    format!("{other:?} is not WhenEmpty or WhenEmptyOrUnderutilized"),
                ));
            }
        };
    }
    if let Some(v) = d.consolidate_after {
        disruption.consolidate_after_s = v.0;
    }
    for (v, name, slot) in [
        (
            d.gpu_utilization_threshold,
            "gpuUtilizationThreshold",
            &mut disruption.gpu_utilization_threshold,
        ),
        (
            d.utilization_threshold,
            "utilizationThreshold",
            &mut disruption.utilization_threshold,
        ),
    ] {
        if let Some(v) = v {
            if !(0.0..=1.0).contains(&v) {
                return Err(err(
                    &format!("disruption.{name}"),
                    name,
                    format!("{v} is outside [0, 1]"),
                ));
            }
            *slot = v;
        }
    }
    if let Some(v) = d.unneeded_time {
        disruption.unneeded_s = v.0;
    }
    if !d.budgets.is_empty() {
        disruption.budgets.clear();
        for b in &d.budgets {
            let value = if let Some(p) = b.strip_suffix('%') {
                p.trim().parse().ok().map(BudgetValue::Percent)
            } else {
                b.trim().parse().ok().map(BudgetValue::Count)
            };
            let Some(nodes) = value else {
                return Err(err(
                    "disruption.budgets",
                    "budgets",
                    format!("{b:?} is neither a count nor a percentage"),
                ));
            };
            disruption.budgets.push(Budget {
                nodes,
                reasons: vec![],
            });
        }
    }
    let mut pool_labels: Labels = f.labels.clone().into_iter().collect();
    pool_labels.insert(labels::NODEPOOL.into(), f.name.clone());
    Ok(Pool {
        name: f.name.clone(),
        weight: f.weight,
        labels: pool_labels,
        taints,
        startup_taints,
        requirements: reqs,
        sharing: GpuSharing {
            time_slicing,
            mig,
            fractional: f.fractional,
        },
        limits,
        min_nodes: f.min_nodes,
        min_values: Default::default(),
        disruption,
        instance_types: catalog.clone(),
    })
}

fn build_arrivals(
    cx: &Ctx,
    wname: &str,
    field: &str,
    a: &ArrivalsFile,
) -> Result<Arrivals, SimError> {
    let err = |why: &str| {
        cx.err(
            &["workloads:", &format!("name: {wname}"), "arrivals:"],
            field,
            why,
        )
    };
    let start = a.start.map_or(0, |d| d.0);
    let end = a.end.map_or(i64::MAX, |d| d.0);
    let set = [a.per_hour.is_some(), a.every.is_some(), !a.at.is_empty()]
        .iter()
        .filter(|b| **b)
        .count();
    if set != 1 {
        return Err(err("give exactly one of perHour, every or at"));
    }
    if let Some(r) = a.per_hour {
        if !(r > 0.0 && r.is_finite()) {
            return Err(err(&format!("perHour {r} is not a finite positive rate")));
        }
        return Ok(Arrivals::Poisson {
            per_hour: r,
            start,
            end,
        });
    }
    if let Some(e) = a.every {
        if e.0 <= 0 {
            return Err(err("every must be positive"));
        }
        return Ok(Arrivals::Every {
            every: e.0,
            start,
            end,
        });
    }
    Ok(Arrivals::At(a.at.iter().map(|d| d.0).collect()))
}

fn build_runtime(
    cx: &Ctx,
    wname: &str,
    field: &str,
    d: &DurationFile,
) -> Result<Runtime, SimError> {
    let err = |why: &str| {
        cx.err(
            &["workloads:", &format!("name: {wname}"), "duration:"],
            field,
            why,
        )
    };
    let r = match (d.fixed, d.min, d.max, d.mean) {
        (Some(f), None, None, None) => Runtime::Fixed(f.0),
        (None, Some(lo), Some(hi), None) if lo.0 <= hi.0 => Runtime::Uniform(lo.0, hi.0),
        (None, Some(_), Some(_), None) => return Err(err("min must not exceed max")),
        (None, None, None, Some(m)) => Runtime::Exponential(m.0),
        _ => return Err(err("give fixed, min and max, or mean")),
    };
    let positive = match r {
        Runtime::Fixed(v) | Runtime::Exponential(v) => v > 0,
        Runtime::Uniform(_, hi) => hi > 0,
    };
    if !positive {
        return Err(err("a runtime must be positive"));
    }
    Ok(r)
}

fn build_workload(
    cx: &Ctx,
    i: usize,
    w: &WorkloadFile,
    pools: &[Pool],
) -> Result<WorkloadSpec, SimError> {
    let (name, kind, pod, owner) = match w {
        WorkloadFile::Deployment(d) => (&d.name, "deployment", &d.pod, "ReplicaSet"),
        WorkloadFile::Jobs(j) => (&j.name, "jobs", &j.pod, "Job"),
        WorkloadFile::Gangs(g) => (&g.name, "gangs", &g.pod, "Job"),
        WorkloadFile::ProvisioningRequests(r) => (&r.name, "provisioningRequests", &r.pod, "Job"),
    };
    let base = format!("workloads[{i}].{kind}");
    let template = build_pod(cx, name, &format!("{base}.pod"), pod, owner, pools)?;
    let generator = match w {
        WorkloadFile::Deployment(d) => {
            let mut steps: Vec<(i64, u32)> = d.replicas.iter().map(|s| (s.at.0, s.count)).collect();
            if steps.is_empty() {
                return Err(cx.err(
                    &["workloads:", &format!("name: {name}")],
                    format!("{base}.replicas"),
                    "needs at least one step",
                ));
            }
            steps.sort_by_key(|s| s.0);
            Generator::Deployment {
                steps,
                max_unavailable: d.max_unavailable,
            }
        }
        WorkloadFile::Jobs(j) => Generator::Jobs {
            arrivals: build_arrivals(cx, name, &format!("{base}.arrivals"), &j.arrivals)?,
            runtime: build_runtime(cx, name, &format!("{base}.duration"), &j.duration)?,
            limit: j.limit,
        },
        WorkloadFile::Gangs(g) => Generator::Groups {
            size: check_size(cx, name, &base, g.size)?,
            arrivals: build_arrivals(cx, name, &format!("{base}.arrivals"), &g.arrivals)?,
            runtime: build_runtime(cx, name, &format!("{base}.duration"), &g.duration)?,
            limit: g.limit,
            provisioning_request: None,
        },
        WorkloadFile::ProvisioningRequests(r) => Generator::Groups {
            size: check_size(cx, name, &base, r.size)?,
            arrivals: build_arrivals(cx, name, &format!("{base}.arrivals"), &r.arrivals)?,
            runtime: build_runtime(cx, name, &format!("{base}.duration"), &r.duration)?,
            limit: r.limit,
            provisioning_request: Some(build_provreq(cx, name, &base, r)?),
        },
    };
    Ok(WorkloadSpec {
        name: name.clone(),
        template,
        generator,
    })
}

fn check_size(cx: &Ctx, name: &str, base: &str, size: u32) -> Result<u32, SimError> {
    if size == 0 {
        return Err(cx.err(
            &["workloads:", &format!("name: {name}"), "size:"],
            format!("{base}.size"),
            "must be at least 1",
        ));
    }
    Ok(size)
}

fn build_provreq(
    cx: &Ctx,
    name: &str,
    base: &str,
    r: &ProvReqFile,
) -> Result<ProvReqSpec, SimError> {
    let err = |key: &str, field: &str, why: String| {
        cx.err(
            &["workloads:", &format!("name: {name}"), key],
            format!("{base}.{field}"),
            why,
        )
    };
    let class = match &r.class {
        None => ProvReqClass::BestEffortAtomic,
        Some(c) => ProvReqClass::parse(c).ok_or_else(|| {
            err(
                "class:",
                "class",
                format!(
                    "unknown provisioning class {c:?} (known: best-effort-atomic, check-capacity)"
                ),
            )
        })?,
    };
    let booking_s = r.booking_duration.map_or(DEFAULT_BOOKING_S, |d| d.0);
    if booking_s <= 0 {
        return Err(err(
            "bookingDuration:",
            "bookingDuration",
            "must be positive (capacity booked for no time could never be consumed)".into(),
        ));
    }
    Ok(ProvReqSpec {
        class,
        booking_s,
        admission_delay_s: r.admission_delay.map_or(DEFAULT_ADMISSION_DELAY_S, |d| d.0),
    })
}

fn build_pod(
    cx: &Ctx,
    wname: &str,
    base: &str,
    f: &PodFile,
    owner: &str,
    pools: &[Pool],
) -> Result<Pod, SimError> {
    let err = |field: &str, key: &str, why: String| {
        cx.err(
            &["workloads:", &format!("name: {wname}"), key],
            format!("{base}.{field}"),
            why,
        )
    };
    let mut requests = Resources::new().with(names::PODS, 1);
    if let Some(q) = f.cpu {
        requests
            .add_quantity(names::CPU, q.0)
            .map_err(|e| err("cpu", "cpu:", e.to_string()))?;
    }
    if let Some(q) = f.memory {
        requests
            .add_quantity(names::MEMORY, q.0)
            .map_err(|e| err("memory", "memory:", e.to_string()))?;
    }
    if let Some(n) = f.gpus {
        requests.set(names::NVIDIA_GPU, i64::from(n));
    }
    for (k, q) in &f.resources {
        requests
            .add_quantity(k, q.0)
            .map_err(|e| err(&format!("resources[{k:?}]"), k, e.to_string()))?;
    }
    let gpu_share = match f.gpu_share {
        None => None,
        Some(m) if (1..=1000).contains(&m) => Some(GpuShare {
            resource: names::NVIDIA_GPU.into(),
            milli: m,
        }),
        Some(m) => {
            return Err(err(
                "gpuShare",
                "gpuShare:",
                format!("{m} is outside 1..=1000 (thousandths of one GPU)"),
            ));
        }
    };
    let app = wname.to_string();
    let mut pod_labels: Labels = f.labels.clone().into_iter().collect();
    pod_labels.insert("app".into(), app.clone());
    let mut annotations: Labels = f.annotations.clone().into_iter().collect();
    if f.do_not_disrupt {
        annotations.insert(DO_NOT_DISRUPT.into(), "true".into());
    }
    if let Some(s) = f.safe_to_evict {
        annotations.insert(SAFE_TO_EVICT.into(), s.to_string());
    }
    let mut selector: Labels = f.node_selector.clone().into_iter().collect();
    let mut pinned: Option<&Pool> = None;
    if let Some(np) = &f.node_pool {
        let Some(p) = pools.iter().find(|p| &p.name == np) else {
            let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            return Err(err(
                "nodePool",
                "nodePool:",
                format!("unknown NodePool {np:?} (defined: {})", known.join(", ")),
            ));
        };
        pinned = Some(p);
        selector.insert(labels::NODEPOOL.into(), np.clone());
    }
    let mut terms = vec![];
    if !f.gpu_models.is_empty() {
        let models: Vec<String> = f.gpu_models.iter().map(|m| m.to_lowercase()).collect();
        let mut r = Requirements::new();
        r.add(labels::GPU_NAME, Operator::In, &models)
            .map_err(|e| err("gpuModels", "gpuModels:", e.to_string()))?;
        terms.push(r);
    }
    let node_selector = NodeSelector::new(&selector, terms);
    let mut tolerations = Vec::new();
    for t in &f.tolerations {
        tolerations.push(
            Toleration::parse(&t.key, &t.operator, &t.value, &t.effect)
                .map_err(|e| err("tolerations", "tolerations:", e.to_string()))?,
        );
    }
    // The ExtendedResourceToleration admission plugin adds a toleration for every extended
    // resource requested; GPU pools taint with `nvidia.com/gpu`, which MIG and time-sliced
    // requests need too.
    let mut gpu_names: Vec<String> = requests
        .extended
        .keys()
        .filter(|k| is_gpu_class(k))
        .cloned()
        .collect();
    if gpu_share.is_some() {
        gpu_names.push(names::NVIDIA_GPU.into());
    }
    if gpu_names.iter().any(|k| k.starts_with("nvidia.com/")) {
        gpu_names.push(names::NVIDIA_GPU.into());
    }
    gpu_names.sort();
    gpu_names.dedup();
    for k in gpu_names {
        if !tolerations.iter().any(|t| t.key == k) {
            tolerations.push(Toleration::exists(&k));
        }
    }
    // Every extended resource must be offered by some instance type of some NodePool the pod
    // may use; otherwise it is a typo that would leave the pods pending all run.
    for (k, _) in requests.extended.iter() {
        let offered = pools
            .iter()
            .filter(|p| pinned.is_none_or(|q| q.name == p.name))
            .any(|p| {
                p.instance_types
                    .iter()
                    .filter_map(|it| type_in_pool(it, p))
                    .any(|it| it.capacity.get(k) > 0)
            });
        if !offered {
            return Err(err(
                &format!("resources[{k:?}]"),
                k.rsplit('/').next().unwrap_or(k),
                format!(
                    "unknown resource {k:?}: no instance type of {} offers it",
                    pinned.map_or("any NodePool".to_string(), |p| format!(
                        "NodePool {}",
                        p.name
                    ))
                ),
            ));
        }
    }
    let sel = Requirements::new().with("app", Operator::In, &[&app]);
    let spread = f
        .spread
        .iter()
        .map(|s| TopologySpread {
            max_skew: s.max_skew.max(1),
            topology_key: s.topology_key.clone(),
            selector: sel.clone(),
            hard: true,
        })
        .collect();
    let term = |k: &String| PodAffinityTerm {
        topology_key: k.clone(),
        selector: sel.clone(),
    };
    Ok(Pod {
        key: PodKey {
            namespace: f.namespace.clone().unwrap_or_else(|| "default".into()),
            name: wname.to_string(),
        },
        requests,
        gpu_share,
        labels: pod_labels,
        annotations,
        node_selector,
        preferred: vec![],
        tolerations,
        spread,
        anti_affinity: f.anti_affinity.iter().map(term).collect(),
        affinity: f.affinity.iter().map(term).collect(),
        priority: f.priority,
        group: None,
        owner_kind: Some(owner.to_string()),
        local_storage: f.local_storage,
        mirror: false,
        host_ports: vec![],
        started_at: None,
    })
}

#[cfg(test)]
mod tests;
