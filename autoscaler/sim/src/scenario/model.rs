//! The typed scenario: what a parsed, checked scenario file becomes (cluster timings and
//! faults, arrivals, runtimes, generators, ProvisioningRequest specs, workloads).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use autoscaler_core::model::{DaemonSet, Pod, Pool};
use autoscaler_core::requirements::{Labels, Requirements};
use autoscaler_core::resources::Resources;
use autoscaler_core::taints::Taint;
use autoscaler_core::{CapacityType, InstanceType};
use providers::OfferingKey;

use super::ScoreStrategy;

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
    /// The controller's loop timings (batch window, re-planning, disruption interval,
    /// ProvisioningRequest retries), from the controller's flag defaults.
    pub cadence: autoscaler_core::cadence::Cadence,
    /// The disruption settings (validation delay, scale-down delays, utilization options),
    /// from the controller's flag defaults.
    pub disruption: autoscaler_core::DisruptionConfig,
    /// The Cluster Autoscaler models' `--scale-down-delay-after-add`: CA's 10 minutes unless
    /// the scenario sets `scaleDownDelayAfterAdd` (which gpu-autoscaler then takes too).
    pub ca_delay_after_add_s: i64,
    /// How long a disruption's replacement and drain may take (the controller's
    /// `--replacement-timeout` and `--drain-timeout`).
    pub disruption_timeouts: autoscaler_core::disruption::execute::Timeouts,
    /// Whether the cluster declares its GPU sharing (time-slicing replicas, MIG resources) to
    /// Karpenter with NodeOverlays; without them karpenter-like sizes GPU nodes by physical
    /// `nvidia.com/gpu` and knows no MIG resource.
    pub node_overlays: bool,
    /// The controller's `--enforce-node-group-min-size` (`cluster.enforceNodeGroupMinSize`):
    /// every `--replan-interval`, pending pods or not, gpu-autoscaler brings each NodePool up
    /// to its `minNodes`, and the Cluster Autoscaler models (whose flag it is) scale each pool
    /// below it up on its cheapest node group; the Karpenter models have no such setting.
    pub enforce_min_nodes: bool,
    /// Cluster-wide limits (`maxNodesTotal`, `coresTotal`, `memoryTotal`, `gpuTotal`,
    /// `capacityQuotas`), across NodePools, as the controller's flags and CapacityQuotas.
    pub cluster_limits: Vec<autoscaler_core::model::ClusterLimit>,
    /// DRA DeviceClasses (`deviceClasses`, over the NVIDIA driver's two); empty when no
    /// workload has resource claims.
    pub device_classes: Arc<BTreeMap<String, autoscaler_core::dra::DeviceClass>>,
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
            cadence: Default::default(),
            disruption: Default::default(),
            ca_delay_after_add_s: crate::baselines::ca::CA_SCALE_DOWN_DELAY_AFTER_ADD_S,
            disruption_timeouts: Default::default(),
            node_overlays: false,
            enforce_min_nodes: false,
            cluster_limits: Vec::new(),
            device_classes: Arc::default(),
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

/// A node that exists when a run starts, with the pods bound to it: a scenario's
/// `existingNodes`, or the first sample of a cluster snapshot (`simulate --from-snapshot`).
/// Both reach the engine through this one type: [`crate::workload::generate`] makes its pods
/// workload pods bound from the start, and the engine registers the node as initialized.
#[derive(Clone, Debug, PartialEq)]
pub struct ExistingNode {
    /// Node name (unique in the run).
    pub name: String,
    /// The NodePool managing it; `None` for a node no NodePool manages (never disrupted,
    /// counted in no pool's limits).
    pub pool: Option<String>,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// USD per hour (from the catalog; 0 for a node of no known type).
    pub price: f64,
    /// Physical GPUs (for GPU-hours).
    pub gpus: u32,
    /// Labels, as on the Node.
    pub labels: Labels,
    /// Taints, as on the Node.
    pub taints: Vec<Taint>,
    /// Allocatable, as on the Node (GPU sharing already applied by its device plugin).
    pub allocatable: Resources,
    /// Cordoned.
    pub unschedulable: bool,
    /// DaemonSet and mirror pods: they live and go with the node (as the DaemonSet pods the
    /// engine adds to the nodes it launches).
    pub node_pods: Vec<Pod>,
    /// Every other pod bound to it, with the time it is deleted (`None`: it stays).
    pub pods: Vec<(Pod, Option<i64>)>,
}

/// A pod created during the run (a snapshot series' arrival): pending at `arrival`, deleted
/// at `delete_at` if ever.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayPod {
    /// The pod.
    pub pod: Pod,
    /// When it is created.
    pub arrival: i64,
    /// When it is deleted, if ever.
    pub delete_at: Option<i64>,
}

/// A PodDisruptionBudget over the pods of [`ExistingNode`]s and [`ReplayPod`]s (a snapshot's
/// budgets): at most `max_unavailable` of the pods it selects may be down.
#[derive(Clone, Debug, PartialEq)]
pub struct PdbRule {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Pods covered (in the namespace).
    pub selector: Requirements,
    /// Most pods that may be unavailable.
    pub max_unavailable: u32,
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
    /// Nodes that exist at the start, with their pods.
    pub existing_nodes: Vec<ExistingNode>,
    /// Pods created at given times (a snapshot series; scenarios have none).
    pub replay: Vec<ReplayPod>,
    /// Budgets over existing and replayed pods (a snapshot's; scenarios have none).
    pub pdbs: Vec<PdbRule>,
}

/// Every policy the simulator knows.
pub const POLICY_NAMES: [&str; 5] = [
    "gpu-autoscaler",
    "karpenter-like",
    "karpenter-ideal",
    "ca-like",
    "ca-ideal",
];
