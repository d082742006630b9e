//! The cluster snapshot the planning functions read: pods, nodes, in-flight claims, DaemonSets
//! and NodePools, already translated out of Kubernetes objects by the shell.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::instance::InstanceType;
use crate::requirements::{Labels, NodeSelector, Requirements};
use crate::resources::Resources;
use crate::taints::{Taint, Toleration};

mod namespaces;
pub use namespaces::{TermNamespaces, resolve_namespace_selectors};

/// `namespace/name` of a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A share of one GPU device (never pooled across devices): e.g. 470/1000 of one GPU as in the
/// Alibaba openb trace, or HAMi's `gpucores` percent scaled to thousandths.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuShare {
    /// The device resource the share is taken from (`nvidia.com/gpu`).
    pub resource: String,
    /// Thousandths of one device, 1..=1000.
    pub milli: u32,
}

/// `topologySpreadConstraints` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopologySpread {
    /// Largest allowed difference between the fullest and the emptiest domain.
    pub max_skew: u32,
    /// Domain key: `topology.kubernetes.io/zone` or `kubernetes.io/hostname`.
    pub topology_key: String,
    /// Which pods count (same namespace).
    pub selector: Requirements,
    /// `DoNotSchedule` (true) or `ScheduleAnyway` (false). The planner holds a `ScheduleAnyway`
    /// spread as required while it tries it and gives it up when the pod cannot be placed so
    /// ([`crate::provision`]'s preference relaxation, as Karpenter's).
    pub hard: bool,
    /// `minDomains` (0 when unset): while fewer domains than this are eligible, the global
    /// minimum is taken as 0, so at most `maxSkew` matching pods go in each.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub min_domains: u32,
    /// `nodeTaintsPolicy: Honor`: only nodes whose taints the pod tolerates (and NodePools
    /// it tolerates) count. The default, `Ignore`, counts every node: a domain only a
    /// tainted NodePool offers is a domain with no pods, which caps the others at `maxSkew`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub honor_taints: bool,
    /// `nodeAffinityPolicy: Ignore`: every node counts, not only those the pod's node
    /// selection matches (the default, `Honor`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_node_affinity: bool,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// A pod (anti-)affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodAffinityTerm {
    /// Domain key.
    pub topology_key: String,
    /// Which pods the term is about, in [`PodAffinityTerm::namespaces`].
    pub selector: Requirements,
    /// The namespaces whose pods the selector looks at.
    #[serde(default, skip_serializing_if = "TermNamespaces::is_own")]
    pub namespaces: TermNamespaces,
    /// A preferred term the planner holds as required while it tries it (set only on the
    /// pods it plans, never on a snapshot's own). It binds the pod that has it and no other:
    /// as in Karpenter, the pods it selects are not kept away from that pod's domain, since
    /// relaxing it could not help them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

impl PodAffinityTerm {
    /// Whether the term of a pod in namespace `own` selects a pod in namespace `ns` with
    /// `labels`.
    pub fn selects(&self, own: &str, ns: &str, labels: &Labels) -> bool {
        self.namespaces.contains(own, ns) && self.selector.matches(labels)
    }
}

/// A port a container binds on its node's network (`containers[].ports[].hostPort`): two pods
/// whose host ports conflict never share a node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HostPort {
    /// The port number on the node.
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP` (the API's default is `TCP`).
    pub protocol: String,
    /// The node address it binds; empty or `0.0.0.0` means every address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

impl HostPort {
    /// A `TCP` port on every address.
    pub fn tcp(port: u16) -> Self {
        HostPort {
            port,
            protocol: "TCP".into(),
            host_ip: String::new(),
        }
    }

    /// Whether two bindings cannot live on one node, as the scheduler's NodePorts filter
    /// decides: same port and protocol, and addresses that overlap (equal, or either binds
    /// every address).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let any = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (any(&self.host_ip) || any(&other.host_ip) || self.host_ip == other.host_ip)
    }

    /// `8080/TCP`, or `10.0.0.1:8080/TCP` with an address.
    pub fn describe(&self) -> String {
        if self.host_ip.is_empty() {
            format!("{}/{}", self.port, self.protocol)
        } else {
            format!("{}:{}/{}", self.host_ip, self.port, self.protocol)
        }
    }
}

/// A pod, as the planner needs it: its identity and its [`PodShape`], everything else it
/// says, which reads as the pod's own fields (`pod.requests`, `pod.labels`) through `Deref`.
///
/// The shape sits behind an `Arc`: the replicas of one workload differ only in their names,
/// and a snapshot of 100,000 pending replicas that each copied their labels, selectors and
/// tolerations took a quarter of a gigabyte where one shared shape takes nothing. Cloning a
/// pod copies its key and shares the shape; changing a field through `DerefMut` copies the
/// shape first when another pod shares it (copy on write), so no pod ever sees another's
/// change. Serialized, the shape's fields sit beside `key` as before.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pod {
    /// Identity.
    pub key: PodKey,
    #[serde(flatten)]
    shape: Arc<PodShape>,
    /// The volumes its PersistentVolumeClaims attach to its node, each counted against the
    /// node's per-driver limit ([`Node::volume_limits`]). Kept beside the key, not in the
    /// shape: a StatefulSet's replicas name a claim each and share everything else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<AttachedVolume>,
}

/// A volume a pod attaches to its node, as the scheduler's `NodeVolumeLimits` filter and
/// Karpenter's volume usage count it: one per PersistentVolumeClaim, by the CSI driver that
/// serves it. Two pods on one node using the same claim count it once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttachedVolume {
    /// The CSI driver (`ebs.csi.aws.com`): the bound PersistentVolume's `spec.csi.driver`,
    /// else the claim's StorageClass's provisioner.
    pub driver: String,
    /// What tells volumes apart on a node: the claim, `namespace/name`.
    pub id: String,
}

/// What a pod asks for and says about itself, apart from its name: the part of [`Pod`] that
/// replicas share.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodShape {
    /// Effective requests: max(sum of containers, largest init container) + overhead, with
    /// `pods = 1`. A [`GpuShare`] is not in here.
    pub requests: Resources,
    /// A fractional share of one GPU, if the pod asks for one.
    pub gpu_share: Option<GpuShare>,
    /// Pod labels.
    pub labels: Labels,
    /// Pod annotations that matter (disruption reads do-not-disrupt, safe-to-evict and deletion
    /// cost); the controller keeps only the ones something reads.
    pub annotations: Labels,
    /// nodeSelector AND (OR of required node affinity terms).
    pub node_selector: NodeSelector,
    /// Preferred node affinity: (weight, term).
    pub preferred: Vec<(i32, Requirements)>,
    /// The pod's own node selection when `node_selector` holds more than the pod states: a
    /// preferred node affinity term the planner holds as required (see
    /// `provision::preferences`), or the node affinity of its volumes (the controller ANDs
    /// the zones of a bound PersistentVolume or of a StorageClass's `allowedTopologies` in).
    /// Topology spreads list and count domains by it, as Karpenter counts them by the pod's
    /// own requirements, so those narrow where the pod may go but not which domains its skew
    /// counts. `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_node_selector: Option<NodeSelector>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints.
    pub spread: Vec<TopologySpread>,
    /// Required pod anti-affinity terms.
    pub anti_affinity: Vec<PodAffinityTerm>,
    /// Required pod affinity terms.
    pub affinity: Vec<PodAffinityTerm>,
    /// Preferred pod affinity terms: (weight, term).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_affinity: Vec<(i32, PodAffinityTerm)>,
    /// Preferred pod anti-affinity terms: (weight, term).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_anti_affinity: Vec<(i32, PodAffinityTerm)>,
    /// Priority.
    pub priority: i32,
    /// All-or-nothing group this pod belongs to (gang or ProvisioningRequest).
    pub group: Option<String>,
    /// Controller kind of the owner (`ReplicaSet`, `Job`, `DaemonSet`...), `None` for bare pods.
    pub owner_kind: Option<String>,
    /// Whether the pod mounts local storage (hostPath, an emptyDir on disk) that keeps it on
    /// its node: the controller leaves out volumes its `safe-to-evict-local-volumes`
    /// annotation names, as the Cluster Autoscaler does.
    pub local_storage: bool,
    /// Whether this is a mirror (static) pod.
    pub mirror: bool,
    /// Host ports its containers bind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// When the pod started running (seconds on the caller's clock), when it matters: a
    /// `karpenter.sh/do-not-disrupt` duration counts from it. `None` reads as "just started".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// Its DRA claims (`spec.resourceClaims`), resolved; see [`crate::dra`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<crate::dra::PodClaim>,
}

impl PodShape {
    /// The node selection the pod states itself: [`Self::strict_node_selector`] while a
    /// preference is held, else [`Self::node_selector`].
    pub fn own_node_selector(&self) -> &NodeSelector {
        self.strict_node_selector
            .as_ref()
            .unwrap_or(&self.node_selector)
    }

    /// Narrows where the pod may go to nodes that also meet one of `alternatives`
    /// ([`NodeSelector::and_any`]) while its spreads keep counting by what it states itself
    /// ([`Self::strict_node_selector`]). No alternatives changes nothing.
    pub fn require_any(&mut self, alternatives: &[Requirements]) {
        if alternatives.is_empty() {
            return;
        }
        let own = self.own_node_selector().clone();
        self.node_selector = self.node_selector.and_any(alternatives);
        self.strict_node_selector = Some(own);
    }

    /// Whether the pod states any preference: preferred node or pod (anti-)affinity, or a
    /// `ScheduleAnyway` spread.
    pub fn has_preferences(&self) -> bool {
        !self.preferred.is_empty()
            || !self.preferred_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
            || self.spread.iter().any(|t| !t.hard)
    }
}

impl Pod {
    /// A pod `key` requesting one pod slot and nothing else: no labels, selectors, tolerations
    /// or owner. Builders and loaders start here and fill in what they know.
    pub fn new(key: PodKey) -> Pod {
        Pod::with_shape(key, PodShape::default())
    }

    /// Pod `key` with `shape`.
    pub fn with_shape(key: PodKey, shape: PodShape) -> Pod {
        Pod {
            key,
            shape: Arc::new(shape),
            volumes: Vec::new(),
        }
    }

    /// Pod `key` sharing `shape` with the pods that hold it already.
    pub fn sharing(key: PodKey, shape: Arc<PodShape>) -> Pod {
        Pod {
            key,
            shape,
            volumes: Vec::new(),
        }
    }

    /// The same pod (key and volumes) with `shape` instead of its own: how a pass that
    /// rewrites shapes (held preferences, zone IDs, volume topology) shares one new shape
    /// among replicas without losing what each pod holds apart from its shape.
    pub fn with_shared_shape(&self, shape: Arc<PodShape>) -> Pod {
        Pod {
            key: self.key.clone(),
            shape,
            volumes: self.volumes.clone(),
        }
    }

    /// Its shape, shared with its clones.
    pub fn shape(&self) -> &Arc<PodShape> {
        &self.shape
    }

    /// Whether the two pods share one shape in memory (not only equal ones).
    pub fn shares_shape_with(&self, other: &Pod) -> bool {
        Arc::ptr_eq(&self.shape, &other.shape)
    }
}

impl std::ops::Deref for Pod {
    type Target = PodShape;

    fn deref(&self) -> &PodShape {
        &self.shape
    }
}

impl std::ops::DerefMut for Pod {
    /// Copies the shape first when another pod shares it.
    fn deref_mut(&mut self) -> &mut PodShape {
        Arc::make_mut(&mut self.shape)
    }
}

impl Default for PodShape {
    /// One pod slot and nothing else.
    fn default() -> Self {
        PodShape {
            requests: Resources::new().with(crate::resources::names::PODS, 1),
            gpu_share: None,
            labels: Labels::new(),
            annotations: Labels::new(),
            node_selector: NodeSelector::default(),
            preferred: vec![],
            strict_node_selector: None,
            tolerations: vec![],
            spread: vec![],
            anti_affinity: vec![],
            affinity: vec![],
            preferred_affinity: vec![],
            preferred_anti_affinity: vec![],
            priority: 0,
            group: None,
            owner_kind: None,
            local_storage: false,
            mirror: false,
            host_ports: vec![],
            started_at: None,
            claims: vec![],
        }
    }
}

impl PodShape {
    /// Whether the pod belongs to a DaemonSet.
    pub fn is_daemonset(&self) -> bool {
        self.owner_kind.as_deref() == Some("DaemonSet")
    }

    /// Whether the pod tolerates the taint a node being disrupted gets
    /// ([`crate::taints::Taint::disruption`]). Karpenter does not evict such a pod
    /// (`IsDrainable`): the scheduler could put it straight back on the node, so it goes with
    /// the node. Its budgets and protections still count when disruption decides.
    pub fn tolerates_disruption_taint(&self) -> bool {
        let taint = crate::taints::Taint::disruption();
        self.tolerations.iter().any(|t| t.tolerates(&taint))
    }
}

/// An existing node with the pods bound to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Labels (zone, instance type, GPU labels...).
    pub labels: Labels,
    /// Annotations.
    pub annotations: Labels,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable as reported by the kubelet.
    pub allocatable: Resources,
    /// Bound pods, DaemonSet and mirror pods included.
    pub pods: Vec<Pod>,
    /// Cordoned.
    pub unschedulable: bool,
    /// Being deleted (deletionTimestamp set or marked for disruption).
    pub deleting: bool,
    /// Owning NodePool, when managed.
    pub pool: Option<String>,
    /// Instance type name, when known.
    pub instance_type: Option<String>,
    /// Hourly price, when known.
    pub price: Option<f64>,
    /// When the node was created, seconds on the caller's clock.
    pub created_at: i64,
    /// When a pod was last bound to or removed from the node, if known (seconds on the
    /// caller's clock). Consolidation waits `consolidateAfter` from the later of this and
    /// `created_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event: Option<i64>,
    /// Whether the node is initialized (Ready, startup taints gone, device plugin up).
    pub initialized: bool,
    /// Whether its `Ready` condition is `True` now. An initialized node that is not ready
    /// broke down after it started: scale-down treats it by `--scale-down-unready-*`.
    #[serde(default = "ready_by_default")]
    pub ready: bool,
    /// The NodeClaim behind the node, when managed.
    pub claim: Option<String>,
    /// How many volumes each CSI driver may attach here (the node's CSINode object,
    /// `spec.drivers[].allocatable.count`); a driver not listed is unlimited. Counted against
    /// the distinct [`Pod::volumes`] of the node's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volume_limits: BTreeMap<String, u32>,
}

impl Node {
    /// Whether the node is no capacity to plan onto: being deleted, or tainted by another
    /// autoscaler that is removing it ([`crate::keys::foreign_removal`], whatever the taint's
    /// age: the `NoSchedule` taint stays on a node whose removal never finished).
    pub fn going(&self) -> bool {
        self.deleting || crate::keys::foreign_removal(&self.taints, None).is_some()
    }

    /// Since when the node's pods have not changed: the later of its last pod event and its
    /// creation. Karpenter's `consolidateAfter` counts from here.
    pub fn stable_since(&self) -> i64 {
        self.last_pod_event
            .map_or(self.created_at, |t| t.max(self.created_at))
    }

    /// Whether the node is being removed at `now` (seconds on the caller's Unix clock):
    /// deleted, or by another autoscaler whose taint is still within its window
    /// ([`crate::keys::foreign_removal`]). A leftover taint's node is an ordinary node of its
    /// pool: it counts towards `minNodes` both when disruption keeps a pool at its minimum and
    /// when a plan brings the pool up to it, so the two never undo each other.
    pub fn being_removed(&self, now: i64) -> bool {
        self.deleting || crate::keys::foreign_removal(&self.taints, Some(now)).is_some()
    }
}

fn ready_by_default() -> bool {
    true
}

/// A NodeClaim launched but not initialized yet: its capacity is *in flight*.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InFlightClaim {
    /// NodeClaim name.
    pub name: String,
    /// Owning NodePool.
    pub pool: String,
    /// Candidate instance types; once launched, the one chosen.
    pub instance_types: Vec<String>,
    /// Resolved requirements (zone, capacity type...).
    pub requirements: Requirements,
    /// Pods already bound to its node, if the node registered.
    pub pods: Vec<Pod>,
    /// When the claim was created, seconds on the caller's clock.
    pub created_at: i64,
}

/// A DaemonSet, for per-node overhead.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DaemonSet {
    /// `namespace/name`.
    pub name: String,
    /// Effective requests of one of its pods.
    pub requests: Resources,
    /// Where it runs.
    pub node_selector: NodeSelector,
    /// Its tolerations.
    pub tolerations: Vec<Toleration>,
    /// Host ports its pods bind on every node they run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
}

/// Time-slicing (or MPS) configuration of a NodePool: how the device plugin advertises each
/// GPU as several replicas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimeSlicing {
    /// Replicas per physical GPU (>= 2).
    pub replicas: u32,
    /// Advertise `<resource>.shared` instead of `<resource>`.
    pub rename: bool,
    /// The device plugin's `failRequestsGreaterThanOne`: a container asking for more than one
    /// replica fails at admission, so such pods get no node of the pool.
    #[serde(default)]
    pub fail_requests_greater_than_one: bool,
    /// The replicas come from CUDA MPS (the device plugin's `sharing.mps`) rather than
    /// time-slicing: the node is advertised the same way, GPU Feature Discovery's
    /// sharing-strategy label says `mps`, and the device plugin always fails a request for
    /// more than one replica (each replica gets a fixed part of the GPU's memory and compute).
    #[serde(default)]
    pub mps: bool,
}

impl TimeSlicing {
    /// Whether a container asking for more than one replica is refused by the device plugin:
    /// always under MPS, under time-slicing with `failRequestsGreaterThanOne`.
    pub fn one_replica_each(&self) -> bool {
        self.fail_requests_greater_than_one || self.mps
    }
}

/// MIG strategy of the GPU Operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MigStrategy {
    /// Each MIG instance is advertised as one `nvidia.com/gpu`.
    Single,
    /// Each profile is its own resource, `nvidia.com/mig-<profile>`.
    Mixed,
}

/// MIG configuration of a NodePool.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MigSharing {
    /// Layout name (`all-1g.10gb`, `all-balanced`, `all-disabled`).
    pub config: String,
    /// Strategy.
    pub strategy: MigStrategy,
}

/// How a NodePool shares its GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuSharing {
    /// Time-slicing, if any.
    pub time_slicing: Option<TimeSlicing>,
    /// MIG, if any.
    pub mig: Option<MigSharing>,
    /// Whether pods may take fractional shares of single devices on this pool's nodes.
    pub fractional: bool,
}

/// NodePool limits; an absent entry is unlimited.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Per resource, in [`Resources`] units.
    pub resources: BTreeMap<String, i64>,
    /// Total nodes.
    pub nodes: Option<i64>,
    /// Physical GPUs per GPU model (catalog model name, e.g. `H100`).
    pub gpus_by_model: BTreeMap<String, i64>,
}

/// A limit on the whole cluster, across NodePools: the `run` flags' totals
/// (`--max-nodes-total`, `--cores-total`, `--memory-total`, `--gpu-total`) or one
/// CapacityQuota object. It counts every node whose labels its selector matches (managed or
/// not), every in-flight claim and every planned claim that may get such labels; the planner
/// never opens a claim that would take the count above a maximum, and disruption never takes
/// it below a minimum.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterLimit {
    /// How reasons name it: `cluster limit` for the flags, `CapacityQuota <name>` for an object.
    pub name: String,
    /// Which nodes it counts, as requirements on the node's labels; empty counts every node.
    #[serde(default)]
    pub selector: Requirements,
    /// The maximums (resources in [`Resources`] units, nodes, physical GPUs per model).
    #[serde(default)]
    pub max: Limits,
    /// The minimums disruption keeps (same units); empty for a CapacityQuota.
    #[serde(default)]
    pub min: Limits,
}

impl ClusterLimit {
    /// Whether the limit bounds nothing.
    pub fn is_empty(&self) -> bool {
        self.max.is_empty() && self.min.is_empty()
    }
}

impl Limits {
    /// Whether no entry is set.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.nodes.is_none() && self.gpus_by_model.is_empty()
    }
}

/// When consolidation may act on a NodePool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsolidationPolicy {
    /// Only empty nodes are removed.
    WhenEmpty,
    /// Empty and under-utilized nodes are removed or replaced.
    WhenEmptyOrUnderutilized,
}

/// Why a node is disrupted; budgets may be limited to some reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DisruptionReason {
    /// The node has no workload pods.
    Empty,
    /// The node's pods fit elsewhere, or on a cheaper replacement.
    Underutilized,
    /// The node drifted from its NodePool's spec.
    Drifted,
}

/// How many nodes may be disrupted at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BudgetValue {
    /// At most this many nodes.
    Count(u32),
    /// At most this percent of the pool's nodes (rounded down... as Karpenter: rounded up).
    Percent(u32),
}

/// One disruption budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// The allowance.
    pub nodes: BudgetValue,
    /// Reasons it applies to; empty = all.
    pub reasons: Vec<DisruptionReason>,
    /// When it is in force; `None`: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<BudgetSchedule>,
}

/// The window of a scheduled budget: from each time `cron` fires for `duration_s` seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetSchedule {
    /// When each window opens (UTC).
    pub cron: crate::cron::Cron,
    /// How long each window stays open, in seconds (at most ten years).
    pub duration_s: i64,
}

impl Budget {
    /// Whether the budget is in force at `now` (seconds since the Unix epoch): always without
    /// a schedule, otherwise when the schedule fired at some `t` with `t <= now < t +
    /// duration`, as Karpenter's `Budget.IsActive`. An inactive budget allows everything.
    pub fn active_at(&self, now: i64) -> bool {
        match &self.schedule {
            None => true,
            Some(s) if s.duration_s <= 0 => false,
            // The earliest opening still open at `now` is `now - duration + 1`.
            Some(s) => s
                .cron
                .last_fire(now, now.saturating_sub(s.duration_s).saturating_add(1))
                .is_some(),
        }
    }
}

/// Disruption settings of a NodePool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisruptionPolicy {
    /// Consolidation policy.
    pub consolidation_policy: ConsolidationPolicy,
    /// Seconds a node must be stable before consolidation acts.
    pub consolidate_after_s: i64,
    /// GPU-utilization threshold in [0, 1].
    pub gpu_utilization_threshold: f64,
    /// CPU/memory utilization threshold in [0, 1] for non-GPU nodes.
    pub utilization_threshold: f64,
    /// Seconds a node must stay unneeded before removal.
    pub unneeded_s: i64,
    /// Right-sizing: a node without GPUs above its threshold is still replaced (or deleted)
    /// when a node at least this fraction cheaper holds its pods, after the same `unneededTime`
    /// and `consolidateAfter` (Karpenter replaces a node with any cheaper one; the threshold
    /// alone keeps a 128-CPU node for one 64-CPU pod that fits a 96-CPU node 25 % cheaper).
    /// GPU nodes are left to their threshold: evicting a GPU job throws its progress away (on
    /// the default and sharing scenarios right-sizing them cost 13 % more, in re-run work). In
    /// [0, 1]; 0 turns it off, so only nodes below the threshold are consolidated (the Cluster
    /// Autoscaler's rule). Only with `WhenEmptyOrUnderutilized`.
    #[serde(default = "default_right_size_savings")]
    pub right_size_savings: f64,
    /// Budgets.
    pub budgets: Vec<Budget>,
    /// The pool's own scale-down delays; an absent one is the cluster-wide flag's.
    #[serde(default)]
    pub delays: ScaleDownDelays,
    /// Karpenter's `expireAfter`: seconds after which a node of the pool is removed whatever
    /// it runs, without a budget or a replacement first (its pods are evicted as on any
    /// removal, within their PodDisruptionBudgets, and planned again). `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after_s: Option<i64>,
    /// Karpenter's `terminationGracePeriod`: seconds a node of the pool may take to drain once
    /// its removal began; past that its pods are deleted whatever protects them and the node
    /// goes ([`crate::disruption::drain_step`]). `None`: the drain waits for protected pods.
    /// Planning does not read it: consolidation respects protected pods either way, as
    /// Karpenter's graceful disruption does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_s: Option<i64>,
}

impl DisruptionPolicy {
    /// The utilization threshold a node is measured against: the GPU threshold for a node
    /// measured on its GPUs, the cpu/memory threshold otherwise.
    pub fn threshold(&self, gpu: bool) -> f64 {
        if gpu {
            self.gpu_utilization_threshold
        } else {
            self.utilization_threshold
        }
    }
}

/// [`DisruptionPolicy::right_size_savings`] when a NodePool does not set it.
pub const DEFAULT_RIGHT_SIZE_SAVINGS: f64 = 0.2;

fn default_right_size_savings() -> f64 {
    DEFAULT_RIGHT_SIZE_SAVINGS
}

/// A NodePool's scale-down delays (Cluster Autoscaler's `--scale-down-delay-after-*`, counted
/// per pool): seconds during which the pool's nodes are not scaled down after the pool scaled
/// up, deleted a node, or failed to. `None` takes the cluster-wide value
/// ([`crate::disruption::DisruptionConfig`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleDownDelays {
    /// After a scale-up of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_add_s: Option<i64>,
    /// After a node of the pool was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_delete_s: Option<i64>,
    /// After a failed deletion of a node of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_failure_s: Option<i64>,
}

impl Default for DisruptionPolicy {
    fn default() -> Self {
        DisruptionPolicy {
            consolidation_policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            consolidate_after_s: 0,
            gpu_utilization_threshold: 0.5,
            utilization_threshold: 0.5,
            unneeded_s: 600,
            right_size_savings: DEFAULT_RIGHT_SIZE_SAVINGS,
            budgets: vec![Budget {
                nodes: BudgetValue::Percent(10),
                reasons: vec![],
                schedule: None,
            }],
            delays: ScaleDownDelays::default(),
            expire_after_s: None,
            termination_grace_period_s: None,
        }
    }
}

/// A NodePool in the core's vocabulary, with its catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    /// Name.
    pub name: String,
    /// Higher weight is tried first.
    pub weight: i32,
    /// Labels put on every node.
    pub labels: Labels,
    /// Taints put on every node; pods must tolerate them.
    pub taints: Vec<Taint>,
    /// Taints present until an agent removes them; pods need not tolerate them.
    pub startup_taints: Vec<Taint>,
    /// Which instance types, zones and capacity types may be used.
    pub requirements: Requirements,
    /// GPU sharing.
    pub sharing: GpuSharing,
    /// Limits.
    pub limits: Limits,
    /// Minimum node count.
    pub min_nodes: u32,
    /// Karpenter's `minValues`: per requirement key, how many distinct values the acceptable
    /// instance types of one new claim must span, so the launch has that much to fall back on.
    /// A claim that cannot keep that many is not opened (its pods get the reason), unless the
    /// snapshot's [`Snapshot::min_values_policy`] is [`MinValuesPolicy::BestEffort`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_values: BTreeMap<String, u32>,
    /// Disruption settings.
    pub disruption: DisruptionPolicy,
    /// The instance types this pool's provider class can launch (before sharing is applied).
    pub instance_types: Arc<Vec<InstanceType>>,
    /// Atomic scale-up (the Cluster Autoscaler's `ZeroOrMaxNodeScaling`): the pool holds
    /// either no node or exactly this many. A plan that opens any claim in the pool opens all
    /// the nodes it lacks, of one template, marked [`crate::plan::NewClaim::atomic`];
    /// disruption removes the pool's nodes only all together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic_nodes: Option<u32>,
    /// Attributes the pool's node image gives every device of the NVIDIA DRA driver, over the
    /// ones predicted from the catalog (`spec.dra.attributes`: `driverVersion`, ...), keyed
    /// as [`crate::dra::template::with_attributes`] reads them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dra_attributes: BTreeMap<String, crate::dra::AttributeValue>,
    /// The hash of the NodePool's `spec.template` as it is now (Karpenter's
    /// `karpenter.sh/nodepool-hash`, of version [`crate::keys::NODEPOOL_HASH_VERSION`]): a
    /// node whose NodeClaim recorded another hash at launch has drifted
    /// ([`crate::disruption::drift_of`]). `None` when the caller has no template to hash (the
    /// simulator's pools never change): no node of the pool drifts statically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hash: Option<String>,
}

/// An all-or-nothing group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// Group id as pods reference it.
    pub name: String,
    /// How many of the group's pending pods must get capacity together. More than the
    /// snapshot holds means the group waits for its other members: none of them is planned.
    /// Members already running are the caller's to subtract (a gang scheduler counts them).
    pub min_count: u32,
}

/// A PodDisruptionBudget, reduced to what disruption needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pdb {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Which pods it covers (same namespace).
    pub selector: Requirements,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

/// What the planner does when the instance types that fit a claim span fewer values of a key
/// than its NodePool's `minValues` (Karpenter's `--min-values-policy`, `MIN_VALUES_POLICY`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MinValuesPolicy {
    /// The claim is not opened: its pods go to another NodePool or wait with the reason.
    #[default]
    Strict,
    /// The claim is opened with the types there are, its `minValues` lowered to the values
    /// they span ([`crate::plan::NewClaim::min_values_relaxed`]), before any lighter NodePool
    /// is tried.
    BestEffort,
}

impl MinValuesPolicy {
    /// Whether this is the default, [`MinValuesPolicy::Strict`] (a snapshot leaves it out).
    pub fn is_strict(&self) -> bool {
        *self == MinValuesPolicy::Strict
    }
}

/// Everything the planner reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Pending pods to place.
    pub pending: Vec<Pod>,
    /// Existing nodes.
    pub nodes: Vec<Node>,
    /// Claims launched but not initialized.
    pub in_flight: Vec<InFlightClaim>,
    /// DaemonSets.
    pub daemonsets: Vec<DaemonSet>,
    /// NodePools.
    pub pools: Vec<Pool>,
    /// All-or-nothing groups by name.
    pub groups: BTreeMap<String, Group>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<Pdb>,
    /// Nodes holding capacity booked for a ProvisioningRequest: never disrupted.
    pub booked_nodes: std::collections::BTreeSet<String>,
    /// Pending pods an earlier plan put on a claim still in flight, with the claim's name
    /// (Karpenter's nominations). The planner keeps each on its claim while it fits there, so
    /// that pods arriving later do not take its room and push it onto yet another claim.
    /// Disruption keeps the node of a named claim while the entry is there (the pod is about
    /// to be bound to it); the caller drops entries whose pod is no longer pending, and
    /// entries no plan has renewed for [`crate::cadence::Cadence::nomination_window_s`].
    /// The planner ignores entries for pods not pending or claims not in flight.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nominated: BTreeMap<PodKey, String>,
    /// Limits on the whole cluster (flags and CapacityQuota objects), across NodePools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_limits: Vec<ClusterLimit>,
    /// Dynamic Resource Allocation: device classes, published devices, allocated claims
    /// (behind an `Arc`: disruption's simulations share it).
    #[serde(default, skip_serializing_if = "crate::dra::Dra::arc_is_empty")]
    pub dra: Arc<crate::dra::Dra>,
    /// How `minValues` that cannot be met are treated, in provisioning and in the simulations
    /// of disruption alike.
    #[serde(default, skip_serializing_if = "MinValuesPolicy::is_strict")]
    pub min_values_policy: MinValuesPolicy,
}

impl Snapshot {
    /// Drops every pod's preferences: preferred node affinity, preferred pod affinity and
    /// anti-affinity, and `ScheduleAnyway` topology spreads, on pending pods and on the pods
    /// of nodes, which disruption may move. What Karpenter's `--preference-policy=Ignore` asks
    /// of its scheduler and its consolidation. A pod without preferences keeps its shared
    /// shape.
    pub fn ignore_preferences(&mut self) {
        let pods = self
            .pending
            .iter_mut()
            .chain(self.nodes.iter_mut().flat_map(|n| n.pods.iter_mut()));
        for p in pods {
            if p.has_preferences() {
                p.preferred.clear();
                p.preferred_affinity.clear();
                p.preferred_anti_affinity.clear();
                p.spread.retain(|t| t.hard);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::pod;

    #[test]
    fn a_changed_clone_leaves_the_pod_it_shared_a_shape_with_alone() {
        let a = pod("a").cpu("1").label("app", "x").build();
        let mut b = a.clone();
        b.key.name = "b".into();
        assert!(a.shares_shape_with(&b));
        b.labels.insert("app".into(), "y".into());
        b.requests.cpu = 2000;
        assert!(!a.shares_shape_with(&b));
        assert_eq!(a.labels["app"], "x");
        assert_eq!(a.requests.cpu, 1000);
        assert_eq!(b.labels["app"], "y");
        assert_eq!(a.key.name, "a");
    }

    #[test]
    fn a_pod_serializes_its_shape_beside_its_key() {
        let p = pod("a").ns("ml").gpus(1).priority(5).build();
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["key"]["namespace"], "ml");
        assert_eq!(v["priority"], 5);
        assert!(v.get("shape").is_none(), "{v}");
        let back: Pod = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }
}
