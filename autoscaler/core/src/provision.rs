//! `plan_provisioning`: the pure function from a cluster snapshot to a provisioning plan.
//!
//! Pods are taken largest first (whole GPUs, GPU shares, cpu, memory, then name, so the order
//! is total and the plan deterministic). Each pod goes to the first place it fits, in this
//! order: an existing node, a claim already in flight (the one with least room first, so the
//! plan does not depend on the claims' random names), a claim this plan has opened whose
//! cheapest instance type still fits it, one that holds it within the larger type it was
//! opened to become, the open claim whose price grows least (when that
//! growth costs less than a node of its own), and finally a new claim. A new claim keeps the
//! *set* of instance types that fit all its pods; it narrows as pods are added. Members of an
//! all-or-nothing group are placed together and rolled back together. Before all that, a pod an
//! earlier plan nominated to a claim still in flight ([`Snapshot::nominated`]) goes back to that
//! claim if it still fits there, so a plan only adds to the last one's placements instead of
//! repacking them with the pods that arrived since.
//!
//! The fit rules (resources with per-device GPU shares, labels, taints, topology) are written
//! once here (`shapes`, `slots`, `topology`) and reused by disruption.
//!
//! # The rules in detail
//!
//! `provision::plan_provisioning(&Snapshot) -> Plan`. Builds *shapes* (an instance type as a given
//! pool's node: sharing applied, pool labels, DaemonSet overhead and reserve removed, offerings
//! filtered by the pool's requirements). A DaemonSet is reserved on a shape when its
//! selector/affinity matches and it tolerates the pool's taints; startup taints do not exclude it
//! (it lands once they are removed). Pods go largest first to: an existing node → an in-flight
//! claim (counted with the GPUs it was launched for, conservatively the smallest candidate) → an
//! open new claim that holds it below the price the claim was opened for, when the pod's fair share
//! of that price (its dominant share of the claim's target type, GPU-class resources only on GPU
//! types) is no more than it would cost per pod on a node of its own kind (the first claim whose
//! cheapest candidate holds the pod as it is, room paid for in any case, before the first that
//! would have to become the larger type it was sized for) → the open claim whose
//! price grows least, if that costs less than the cheapest node any pool could launch for it alone
//! → a new claim in the highest-weight pool that can take it. A new claim is *sized* for the
//! identical pods still pending (the candidate with the lowest price per pod it would hold; for a
//! GPU pod the candidate is priced by the nodes of its kind the whole pending demand of the pod's
//! class would need, spread evenly, when that is more, so a 2-GPU pod is not given a 4-GPU node of
//! its own while its 1-GPU peers open an 8-GPU node that would hold it too), and the tail falls
//! back to the cheapest candidate that holds what it got. Equal-weight pools compete on that sized
//! price per pod, not on their cheapest node for the one pod (a pool with a cheap 1-GPU type can
//! lose to another pool's 8-GPU type that is cheaper per GPU once shared). Pods whose rejections
//! are monotone (no zone spread or affinity) skip slots an identical pod was already refused by.
//! Each open new claim's answer to a pod (no / joins below its price / grows by so much) is kept
//! per group of identical pods under a stamp the claim renews on every change, so a pod re-asks
//! only the claims changed since the last identical pod; pods with topology terms of their own, or
//! any pod once a zone anti-affinity is placed, ask every claim afresh. Per block of 64 claims, a
//! group also keeps what its answers there add up to when they are all "no" or "grows by so much"
//! (the first claim that takes the pod, the least growth), so an identical pod reads a block no
//! claim of which changed since as one entry. A new claim keeps the set
//! of candidate types that fit all its pods, cheapest first, and reports up to 60. A pool's
//! `minValues` (distinct values of a key, instance labels or the offerings' zones and capacity
//! types) is a hard rule under the default `Strict` policy: a pod does not join a claim whose
//! candidates would fall below it, a claim that cannot meet it is not opened (the pods get the
//! reason), truncation to 60 swaps in the cheapest types carrying a missing value, and the
//! controller writes the rule onto the NodeClaim's requirements. Under `BestEffort`
//! (`Snapshot::min_values_policy`, Karpenter's `--min-values-policy`) a claim that cannot meet it
//! is opened all the same, before any lighter pool is tried, with each rule it falls short of
//! lowered to the values its candidates span (at most 60 for a label); pods that join keep that
//! many, a preferred node affinity term narrows the claim even below the pool's rule (Karpenter
//! holds the preference as required first), and `NewClaim::min_values_relaxed` gives what the
//! written-out types span, for the controller to write instead. Fractional GPU shares are packed per device (best fit), never pooled, and only on
//! pools with `gpuSharing.fractional`. Topology: zone and hostname spread (DoNotSchedule; the pod
//! counts in its own domain only when it matches the constraint's selector, as in the scheduler);
//! spread over other keys (capacity type, instance labels, labels a pool defines) by pinning each
//! pod to the domain with the fewest matching pods before planning (`spread_domains`);
//! hostname/zone anti-affinity (both directions), zone/hostname affinity; a claim is pinned to one
//! zone when a zone rule needs it, or when it takes a pod some pending pod's zone affinity selects
//! (so that the pod counts in a zone); the pods a claim held before it was pinned count in its
//! zone from then on, and are counted there when a pod weighs pinning it. A pod with hostname
//! affinity whose every target sits on a full claim gets room at the end: one target that only
//! zone affinity holds, and that no pod left behind needs, moves to a new claim in the same zone
//! and the pod joins it (the plan is left as it was when that fails). Host ports (`Pod::host_ports`, `DaemonSet::host_ports`;
//! conflicts as the NodePorts filter decides: same port and protocol, overlapping host IP): two
//! pods that conflict never share a node or claim, ports bound on existing nodes and in-flight
//! claims' DaemonSets count, and a shape whose DaemonSets bind a pod's port is not a candidate for
//! it (the reason names the port and DaemonSet). `PreferNoSchedule` taints are a soft preference,
//! relaxed as Karpenter does: a pod first tries every place without such a taint it does not
//! tolerate; an existing node or in-flight claim under one is used only when no other takes the
//! pod, and a pool under one only when the pod can be helped nowhere else. Preferred pod
//! affinity and anti-affinity and `ScheduleAnyway` spreads are held as required and given up
//! one at a time for the pods they leave without a place, by planning the batch again
//! (`preferences`, as Karpenter relaxes them). Limits (resources,
//! nodes, GPUs per model) count existing nodes, in-flight claims and the largest candidate of each
//! new claim; cluster-wide limits (`Snapshot::cluster_limits`, see [`crate::quota`]) do the same
//! across every pool, for the nodes their selector matches (a claim counts when one of its
//! candidates, in one of its allowed zones and capacity types, may become such a node), and the
//! pod held back gets the limit's name and numbers. An atomic pool (`Pool::atomic_nodes`) opens
//! every node it lacks with its first claim: the others are copies of that claim without pods
//! (later pods may fill them), the limits are checked for all of them at once, no claim beyond
//! the pool's size is opened, and `finish` gives the pool's claims the candidates they all keep
//! (one template) and marks them `NewClaim::atomic`. All-or-nothing groups are placed together and rolled back together. Pods that cannot
//! be helped carry a reason. After planning, `gang::prefer_one_zone` narrows each fully placed
//! group's new claims to the cheapest zone that holds every member (the zones of existing nodes and
//! in-flight claims it uses included); it only removes offerings, and leaves groups with a hard
//! zone spread, or in a pool with `minValues`, alone. `NewClaim::group` names the group a claim is
//! one node of when every pod of the claim belongs to that group and the group has at least two
//! such claims in the plan (set in `provision`'s `finish`); a group on one new node, a node shared
//! with other pods, and disruption's replacements (one node) get none. The shell turns it into a
//! placement group.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::labels;
use crate::model::{HostPort, Pod, PodAffinityTerm, Snapshot, TermNamespaces};
use crate::plan::Plan;
use crate::requirements::{Labels, Requirements};
use crate::resources::Resources;
use crate::taints::{Effect, Taint, Toleration};

mod claims;
mod classes;
mod domain_sources;
mod dra;
mod explanations;
mod finish;
mod key_hash;
mod open;
mod parts;
mod place;
mod preferences;
mod room;
mod shapes;
mod slot_answers;
mod slots;
mod spread_domains;
mod topology;
mod volume_limits;
mod warm;

pub use shapes::{
    AdmittedTypes, Devices, Shape, ShapeCache, admitted_types, build_shapes,
    claim_meets_min_values, demand, pool_defined_labels, pool_node_type, restricted_domain,
    term_fits_shape,
};

pub(crate) use explanations::pool_standing;
pub use parts::part_sizes;
pub(crate) use preferences::relaxable;
pub(crate) use shapes::same_pool;
pub use shapes::same_pools;

use slot_answers::SlotAnswers;
use topology::SelectorIndex;
use volume_limits::VolumeScan;

/// Tunables of the planner.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanOptions {
    /// Most instance types kept on one new claim (cheapest first).
    pub max_instance_types: usize,
    /// Most new claims one plan opens ([`usize::MAX`] by default: no limit). Once that many
    /// are open, a pod that would need another is listed in [`Plan::deferred`] instead, while
    /// later pods still fill the claims already opened; an all-or-nothing group being placed
    /// opens what it needs (it is never split), and an atomic pool's scale-up is opened whole
    /// or not at all. A provisioning round plans the deferred pods again at once, so a
    /// backlog of 100,000 pods costs the planner one slice per round, not the whole backlog
    /// before the first launch.
    pub max_new_claims: usize,
    /// Most threads one plan may use (1 by default). A large batch whose pods fall into
    /// independent parts (no NodePool, node or topology term in common, see `parts.rs`) is
    /// planned a part per thread; the plan is the same as on one thread.
    pub threads: usize,
    /// `Some(now)` (seconds on the caller's Unix clock): bring every NodePool up to its
    /// `minNodes` (`--enforce-node-group-min-size`; `None`, the default, as in the Cluster
    /// Autoscaler). Once the pods are placed, a pool with fewer nodes than that (existing and
    /// not being removed at `now`, [`crate::model::Node::being_removed`], as disruption counts
    /// them; in flight; planned by this plan) gets claims without pods for the rest
    /// ([`crate::plan::NewClaim::warm`], see `warm.rs`), within its limits and the
    /// cluster-wide ones; what it still lacks is listed in [`Plan::min_nodes_short`] with the
    /// reason. Disruption's simulations never set it (they ask where pods go, not what a pool
    /// should hold); drift does once, to plan the node that replaces a drifted node a pool's
    /// `minNodes` holds.
    pub min_nodes: Option<i64>,
}

/// The controller's default for [`PlanOptions::max_new_claims`] in a provisioning round
/// (`--max-claims-per-round`), which the simulator uses too. As the Cluster Autoscaler's
/// `--max-nodes-per-scaleup` (1000), it bounds the latency of a huge scale-up, not its rate.
pub const DEFAULT_MAX_CLAIMS_PER_ROUND: usize = 1000;

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            max_instance_types: 60,
            max_new_claims: usize::MAX,
            threads: 1,
            min_nodes: None,
        }
    }
}

/// Passes over the pods with pod affinity left unplaced (each pass may place the pods the
/// next one joins); bounded so that planning time stays linear in the pods.
const AFFINITY_PASSES: usize = 4;

/// Plans capacity for every pending pod of `snapshot` with default options.
///
/// Never fails: a pod that cannot be helped is listed in [`Plan::unschedulable`] with a reason.
/// The same snapshot always yields the same plan.
pub fn plan_provisioning(snapshot: &Snapshot) -> Plan {
    plan_with(snapshot, &PlanOptions::default())
}

/// [`plan_provisioning`] with explicit options.
pub fn plan_with(snapshot: &Snapshot, options: &PlanOptions) -> Plan {
    let snapshot = &*crate::zone_ids::resolve(snapshot);
    plan_shaped(snapshot, options, Arc::new(build_shapes(snapshot)))
}

/// [`plan_with`], taking the shapes from `cache` (built again only when the snapshot's pools
/// or DaemonSets changed): the same plan, for callers that plan often.
pub fn plan_cached(snapshot: &Snapshot, options: &PlanOptions, cache: &mut ShapeCache) -> Plan {
    let snapshot = &*crate::zone_ids::resolve(snapshot);
    plan_shaped(snapshot, options, cache.shapes(snapshot))
}

fn plan_shaped(snapshot: &Snapshot, options: &PlanOptions, shapes: Arc<Vec<Shape>>) -> Plan {
    preferences::plan_relaxing(snapshot, |tried| (plan_once(tried, options, &shapes), ())).plan
}

/// [`plan_with`] (or [`plan_cached`] with `cache`) on a snapshot the caller lends: the same
/// plan, without copying the snapshot when pods state preferences (disruption's simulations).
pub(crate) fn plan_lent(
    snapshot: &mut Snapshot,
    options: &PlanOptions,
    cache: Option<&mut ShapeCache>,
) -> Plan {
    let shapes = match cache {
        Some(c) => c.shapes(snapshot),
        None => Arc::new(build_shapes(snapshot)),
    };
    preferences::plan_relaxing_in(snapshot, |tried| (plan_once(tried, options, &shapes), ())).plan
}

/// One plan of `snapshot`'s pending pods as they are.
fn plan_once(snapshot: &Snapshot, options: &PlanOptions, shapes: &Arc<Vec<Shape>>) -> Plan {
    let templates = dra::Templates::of(snapshot);
    let mut plan = Planner::new(snapshot, options, &templates, shapes.clone()).plan();
    crate::gang::prefer_one_zone(snapshot, &mut plan);
    crate::gang::placement_only_in_one_zone(&mut plan);
    plan
}

/// [`plan_with`], every pool and instance type pending pod `pod` (an index into
/// `snapshot.pending`) was considered for, taken when the planner placed it, and the
/// preferences it gave up to be placed, in words.
pub(crate) fn plan_explained(
    snapshot: &Snapshot,
    options: &PlanOptions,
    pod: usize,
) -> (Plan, Vec<crate::explain::PoolConsidered>, Vec<String>) {
    let snapshot = &*crate::zone_ids::resolve(snapshot);
    let shapes = Arc::new(build_shapes(snapshot));
    let relaxed = preferences::plan_relaxing(snapshot, |tried| {
        let templates = dra::Templates::of(tried);
        let mut planner = Planner::new(tried, options, &templates, shapes.clone());
        planner.explain = Some(pod);
        let (mut plan, considered) = planner.run();
        crate::gang::prefer_one_zone(tried, &mut plan);
        crate::gang::placement_only_in_one_zone(&mut plan);
        (plan, considered.unwrap_or_default())
    });
    let given_up = preferences::given_up(&snapshot.pending[pod], relaxed.given_up[pod]);
    (relaxed.plan, relaxed.extra, given_up)
}

/// What a new claim becomes when a pod joins it; `None` fields stay as they are.
struct Grow {
    reqs: Option<Requirements>,
    candidates: Option<Vec<usize>>,
    price: f64,
}

/// A pod's scan identity: demand group, matched selectors, its spread, affinity and
/// anti-affinity selectors, and how its volumes bear on nodes with volume limits.
type ScanKey<'a> = (
    usize,
    &'a [usize],
    &'a [usize],
    &'a [usize],
    &'a [usize],
    VolumeScan<'a>,
);

/// A pod's class identity: node selection, tolerations, whether it takes a GPU share, its
/// host ports, its DRA identity, what its topology rules require of a node, and whether it
/// asks for more than one of a GPU resource.
type ClassKey<'a> = (
    (
        &'a crate::requirements::NodeSelector,
        &'a Option<crate::requirements::NodeSelector>,
    ),
    &'a Vec<Toleration>,
    bool,
    &'a Vec<HostPort>,
    &'a dra::DraKey<'a>,
    Vec<(&'a str, Option<&'a crate::requirements::Constraint>)>,
    bool,
);

/// Selector identity for topology counting: namespace plus label requirements.
/// A label selector with the namespaces it looks in ([`TermNamespaces::resolved`]: never
/// `Own`, so equal keys select the same pods).
type SelKey = (TermNamespaces, Requirements);

/// The selector key of a pod (anti-)affinity term of a pod in namespace `own`.
fn term_sel(own: &str, t: &PodAffinityTerm) -> SelKey {
    (t.namespaces.resolved(own), t.selector.clone())
}

/// A new claim's answer to a pod in step 2 of `place_inner`.
#[derive(Clone, Copy, Debug)]
enum Verdict {
    /// The pod cannot join it.
    No,
    /// The pod joins it below the price it was opened for, at a fair share; `free` when it
    /// fits the claim's cheapest candidate as it is (room that is paid for in any case).
    Join { free: bool },
    /// The pod can join it; the claim's price would grow by this much.
    Grow(f64),
}

/// Slots per block of [`BlockSummary`].
const BLOCK: usize = 64;

/// The walk over open claims for a pod whose verdicts are cached, over one block of slots in
/// which each cached verdict is `No` or a growth above zero (most claims, for most pods): the
/// first claim that takes the pod and the least growth, first of equals. Valid while the
/// block's version is `version`; then every verdict in it is cached at the live stamp, so
/// walking it slot by slot would only read the same answers again.
#[derive(Clone, Copy, Debug)]
struct BlockSummary {
    /// The block's version when summed up; 0 for none.
    version: u64,
    /// The first slot whose verdict is not `No` (`u32::MAX` for none).
    first_ok: u32,
    /// The least growth and its first slot (`u32::MAX` for none).
    least: f64,
    least_at: u32,
}

impl BlockSummary {
    const NONE: BlockSummary = BlockSummary {
        version: 0,
        first_ok: u32::MAX,
        least: f64::INFINITY,
        least_at: u32::MAX,
    };
}

#[derive(Clone, Debug, PartialEq)]
enum SlotKind {
    Existing(usize),
    InFlight(usize),
    New,
}

/// A place pods can go: an existing node, an in-flight claim or a new claim.
#[derive(Clone, Debug)]
struct Slot {
    kind: SlotKind,
    /// In-flight and new claims: the claim's name. Existing nodes leave it empty (their
    /// node's name is read in place, see [`Slot::name`]).
    name: String,
    pool: Option<usize>,
    /// In-flight claims: the labels all candidates share. Existing nodes leave it empty (their
    /// node's labels are read in place, see [`Slot::labels`]); new claims use their
    /// candidates' labels.
    labels: Labels,
    /// In-flight and new claims: their pool's taints. Existing nodes leave it empty (read in
    /// place, see [`Slot::taints`]) unless `own_taints`.
    taints: Vec<Taint>,
    /// Existing nodes with an ephemeral taint ([`crate::keys::EPHEMERAL_TAINTS`]): `taints`
    /// holds the node's taints without it.
    own_taints: bool,
    /// In-flight: allocatable; new claims: the most any candidate offers. Existing nodes leave
    /// it empty (read in place, see [`Slot::allocatable`]).
    allocatable: Resources,
    used: Resources,
    devices: Devices,
    /// New claims: accumulated requirements and candidate shapes (cheapest first).
    reqs: Requirements,
    candidates: Vec<usize>,
    price: f64,
    /// New claims: the price the claim was opened to reach (a larger type than its first pod
    /// alone needs, when similar pods follow), and that type. Pods join for free below it.
    target: f64,
    target_shape: Option<usize>,
    zone: Option<String>,
    pods: Vec<usize>,
    /// Matching-pod counts per selector id.
    counts: Vec<u32>,
    /// Anti-affinity terms of existing pods on this slot: (namespace, selector, topology key).
    blocks: Vec<(SelKey, String)>,
    /// Hostname anti-affinity of planned pods on this slot, as selector ids.
    sel_blocks: Vec<usize>,
    /// Host ports bound on this slot: its pods' and, for in-flight claims, its DaemonSets'
    /// (a new claim's DaemonSets rule out its candidate shapes instead, per class).
    ports: Vec<HostPort>,
    /// Existing nodes with CSI volume limits: the volumes attached there and the limits.
    volumes: Option<Box<volume_limits::VolumeRoom>>,
    /// Limit reservation of a new claim.
    reserved: Resources,
    reserved_models: BTreeMap<String, i64>,
    /// Reservation of a new claim against each cluster-wide limit (empty when there are none).
    reserved_cluster: Vec<PoolUse>,
    open: bool,
    /// New claims: a number no other state of any slot has had (0 for the others), renewed
    /// on every change, so that a verdict computed for this stamp is still the verdict.
    stamp: u64,
    /// Existing nodes and in-flight claims: devices this plan's claims took there.
    dra_taken: Vec<crate::dra::DeviceId>,
    /// New claims: the DRA claims planned there (each allocated once), by the pod's name for it.
    dra_claims: Vec<(String, std::sync::Arc<crate::dra::ClaimSpec>)>,
    /// New claims opened under `BestEffort` below some of their pool's `minValues`: those
    /// rules, each lowered to what the candidates spanned then. Pods that join later keep at
    /// least that many values, as Karpenter checks a pod against the relaxed requirements of
    /// the claim it joins. Empty otherwise.
    min_values_relaxed: BTreeMap<String, u32>,
    /// New claims opened without pods to reach their pool's `minNodes` (`warm.rs`).
    warm: bool,
}

/// Per-class data: pods with the same node selector and tolerations share these answers.
#[derive(Clone, Debug)]
struct Class {
    terms: Vec<Requirements>,
    /// The pods' own node selection as `terms` are built, while a preference is held
    /// ([`crate::model::PodShape::strict_node_selector`]): `zones` come from it.
    zone_terms: Option<Vec<Requirements>>,
    /// Whether the pods take a fractional share of a device.
    share: bool,
    tolerations: Vec<Toleration>,
    /// Per shape: whether some term fits it and its taints are tolerated.
    shape_ok: Vec<bool>,
    /// Per slot: whether the class's pods may go there, and which blocks refuse them all.
    slot_ok: SlotAnswers,
    /// Per (pool, index into `terms`): the pool's shapes that `shape_ok` and the term allow,
    /// in index order, worked out when a pod of the class first looks for a new claim there
    /// (every pod that opens a claim asked it of each shape of the catalog).
    pool_shapes: HashMap<(usize, usize), Vec<usize>>,
    /// Zones any node for this class could be in; while a preference is held, any node its
    /// pods' own node selection allows ([`crate::model::PodShape::strict_node_selector`]):
    /// the zones a zone spread counts.
    zones: BTreeSet<String>,
    /// Host ports the pods bind.
    host_ports: Vec<HostPort>,
    /// Label keys the pods' hard topology spread needs on a node (in `terms` as `Exists`, or
    /// as what [`Planner::domain_pins`] requires there), for the words when no type has one.
    spread_keys: Vec<String>,
    /// What [`Planner::domain_pins`] required of the pods' nodes, as the reasons say it
    /// ([`spread_domains::Pin::describe`]), for the words when no type meets it.
    pins: Vec<String>,
    /// The pods ask for more than one of a GPU-class resource (refused by time-sliced pools
    /// with `failRequestsGreaterThanOne`).
    several: bool,
}

use crate::quota::Usage as PoolUse;

#[derive(Clone)]
struct State {
    slots: Vec<Slot>,
    usage: Vec<PoolUse>,
    /// Usage per cluster-wide limit ([`Snapshot::cluster_limits`]).
    cluster: Vec<PoolUse>,
    zone_counts: HashMap<String, Vec<u32>>,
    zone_blocks: Vec<(SelKey, String)>,
    placed: Vec<Option<usize>>,
    claims_opened: usize,
    /// Slots that are existing nodes or in-flight claims: they come first, new claims after.
    fixed: usize,
    /// Per new claim: cpu, memory and pod slots its cheapest candidate has left, kept apart
    /// from the slots so that looking for room already paid for reads little memory.
    cheapest_room: Vec<[i64; 3]>,
    /// Per slot: a new claim's stamp while it is open, 0 otherwise (other slots, closed
    /// claims). The same kind of compact copy as `cheapest_room`: the walk over open claims
    /// for every pod reads this instead of the much larger slots.
    live_stamp: Vec<u64>,
    /// Per new claim from slot `fixed` on, [`slots::FitIndex::stride`] numbers: what it
    /// offers and what its pods use, as the first check of a verdict reads them.
    fit_rows: Vec<i64>,
    /// Shared DRA claims (namespace, name) planned so far, and the slot they went to.
    dra_shared: BTreeMap<(String, String), usize>,
}

struct Planner<'a> {
    snap: &'a Snapshot,
    options: &'a PlanOptions,
    /// Shared with a [`ShapeCache`] when the caller keeps one; never changed here.
    shapes: Arc<Vec<Shape>>,
    pool_order: Vec<usize>,
    classes: Vec<Class>,
    class_of: Vec<usize>,
    selectors: Vec<SelKey>,
    sel_index: SelectorIndex,
    /// Per pending pod: the selector ids its labels match.
    matches: Vec<Vec<usize>>,
    /// Per pending pod: (selector id, term) for spread, affinity, anti-affinity.
    sel_of_spread: Vec<Vec<usize>>,
    sel_of_affinity: Vec<Vec<usize>>,
    sel_of_anti: Vec<Vec<usize>>,
    /// Per pending pod: whether a pending pod's zone affinity or anti-affinity selects it. Such
    /// a pod pins the zone of the claim it joins, so that it counts in a zone those pods can
    /// join (or keep out of).
    zone_target: Vec<bool>,
    /// Per pod: its demand group (same class, requests and share); pods of a group are
    /// interchangeable for sizing claims.
    demand_group: Vec<usize>,
    /// Per demand group: pods not yet placed.
    remaining: Vec<usize>,
    /// Per class, a [`slots::FitIndex`] row (`class * width ..`): the summed demand of its
    /// pods not yet placed. Read for every candidate of every claim sized, so in columns.
    class_left: Vec<i64>,
    /// Per demand group: the lowest hourly cost per pod over the shapes it can use, counting
    /// how many of the group one node would really hold (lazy).
    unit_cost: Vec<Option<classes::UnitCosts>>,
    /// The same per scan group, for pods a known attach count bounds
    /// ([`Planner::volume_capped`]): the members of one demand group may differ in volumes.
    unit_cost_capped: Vec<Option<classes::UnitCosts>>,
    /// Per pod: its scan group (demand group plus topology identity), and per scan group the
    /// first slot worth trying: earlier slots rejected an identical pod, and slots only fill.
    scan_group: Vec<usize>,
    scan_from: Vec<usize>,
    /// Per scan group, per slot: the stamp a verdict was computed at and the verdict.
    verdicts: Vec<Vec<place::CachedVerdict>>,
    /// Per block of [`BLOCK`] slots: bumped whenever a live stamp in it may have changed
    /// (outside `state`, so a rollback bumps every block rather than turning versions back).
    block_version: Vec<u64>,
    /// Per scan group, per block: what the walk over open claims takes from the block when
    /// every cached verdict in it still holds (see [`BlockSummary`]).
    summaries: Vec<Vec<BlockSummary>>,
    /// The last stamp given out; outside `state`, so that stamps stay unique across rollbacks.
    last_stamp: u64,
    /// Per pod: whether rejections stay rejections as the plan grows (no zone spread or
    /// affinity, whose domains can open up later).
    monotone: Vec<bool>,
    /// Per pod: whether it names a volume another pod names too ([`VolumeScan::Shared`]), so
    /// that its verdict on a claim depends on the claim's volumes, not on their counts alone.
    shares_volumes: Vec<bool>,
    /// Number of distinct zones any shape offers.
    zone_total: usize,
    /// Whether any shape has a GPU (otherwise the GPU-avoidance rule costs nothing to skip).
    any_gpu_shape: bool,
    /// Per shape, the CSI attach counts the CSINodes of its pool's existing nodes of its
    /// instance type give (the least seen per driver): what a new node of the shape will
    /// allow once its driver registers. Empty when no node has a count.
    shape_volume_limits: Vec<Option<BTreeMap<String, u32>>>,
    /// The drivers some shape has a count of in `shape_volume_limits`.
    learned_drivers: BTreeSet<String>,
    /// Whether any pool or node has a `PreferNoSchedule` taint.
    any_prefer_no_schedule: bool,
    /// Placing a pod a second time, now allowed onto `PreferNoSchedule` taints it does not
    /// tolerate (the first try avoids them).
    relaxed: bool,
    /// Per-resource minimum over pending pods' requests: a claim that cannot fit it is closed.
    smallest: Resources,
    state: State,
    reasons: Vec<Option<String>>,
    /// Per pending pod, the pools whose limits alone kept it off a new node (its last try).
    limited: Vec<Vec<String>>,
    /// Known label values, for "did you mean" in reasons; built for the first pod that fails.
    vocabulary: std::cell::OnceCell<crate::vocabulary::Vocabulary>,
    /// Per class, that hint (the same for every pod of the class; looking for the closest
    /// known label for each of thousands of pods that wait took a third of a round).
    hints: HashMap<usize, String>,
    /// Per (demand group, pool, relaxed): the pool's answer to the group's pods, where
    /// nothing in it depends on the plan so far (`open.rs`).
    pool_answers: HashMap<(usize, usize, bool), std::sync::Arc<open::PoolAnswer>>,
    /// Per demand group, per shape: how many of the group's pods one node holds (0: not yet
    /// worked out; `claim_target` fills it in, behind a shared reference).
    per_node: std::cell::RefCell<Vec<Vec<u32>>>,
    /// The pending pod to explain (`explain`): its considerations are taken when it is placed.
    explain: Option<usize>,
    considered: Option<Vec<crate::explain::PoolConsidered>>,
    /// Per pending pod: left for a later plan because the plan holds
    /// [`PlanOptions::max_new_claims`] claims already (unless a later pass placed it).
    deferred: Vec<bool>,
    /// Per scan group: a pod of the group was deferred. The plan only fills from then on, so
    /// an identical pod would be deferred too and is, without the search.
    deferred_scan: Vec<bool>,
    /// An all-or-nothing group is being placed: it may open claims beyond the limit.
    in_group: bool,
    /// DRA: `None` when no pending pod has a resource claim.
    dra: Option<dra::DraPlan<'a>>,
    /// Per pending pod, its DRA identity (part of its class).
    dra_keys: Vec<dra::DraKey<'a>>,
    /// The columns of `State::fit_rows` and each pending pod's requests in them.
    fit_index: slots::FitIndex,
    /// The part of the batch this planner plans, when the batch was split (`parts.rs`).
    part: Option<parts::Part>,
}

impl<'a> Planner<'a> {
    fn new(
        snap: &'a Snapshot,
        options: &'a PlanOptions,
        templates: &'a dra::Templates,
        shapes: Arc<Vec<Shape>>,
    ) -> Self {
        let mut pool_order: Vec<usize> = (0..snap.pools.len()).collect();
        pool_order.sort_by(|a, b| {
            snap.pools[*b]
                .weight
                .cmp(&snap.pools[*a].weight)
                .then_with(|| snap.pools[*a].name.cmp(&snap.pools[*b].name))
        });

        // Selectors used by the pending pods' topology terms.
        let mut sel_index: key_hash::KeyMap<SelKey, usize> = Default::default();
        let mut selectors: Vec<SelKey> = Vec::new();
        let mut intern = |k: SelKey| -> usize {
            if let Some(i) = sel_index.get(&k) {
                return *i;
            }
            selectors.push(k.clone());
            sel_index.insert(k, selectors.len() - 1);
            selectors.len() - 1
        };
        let mut sel_of_spread = Vec::new();
        let mut sel_of_affinity: Vec<Vec<usize>> = Vec::new();
        let mut sel_of_anti = Vec::new();
        for p in &snap.pending {
            let ns = &p.key.namespace;
            // Most pods have no spread: their namespace is not copied for one.
            let spread = if p.spread.is_empty() {
                Vec::new()
            } else {
                let own = TermNamespaces::Own.resolved(ns);
                p.spread
                    .iter()
                    .map(|s| intern((own.clone(), s.selector.clone())))
                    .collect()
            };
            sel_of_spread.push(spread);
            sel_of_affinity.push(p.affinity.iter().map(|t| intern(term_sel(ns, t))).collect());
            sel_of_anti.push(
                p.anti_affinity
                    .iter()
                    .map(|t| intern(term_sel(ns, t)))
                    .collect(),
            );
        }
        let index = SelectorIndex::new(&selectors);
        let matches: Vec<Vec<usize>> = snap
            .pending
            .iter()
            .map(|p| index.matching(&selectors, &p.key.namespace, &p.labels))
            .collect();

        // Targets of zone affinity and of zone anti-affinity: a claim that takes one is pinned
        // to a zone, so that the pod counts there (an unpinned claim's pods count nowhere, and
        // a pod avoiding them could be planned into the zone the claim later lands in).
        let mut zone_affinity_sel = vec![false; selectors.len()];
        for (i, p) in snap.pending.iter().enumerate() {
            let terms = p
                .affinity
                .iter()
                .zip(&sel_of_affinity[i])
                .chain(p.anti_affinity.iter().zip(&sel_of_anti[i]));
            for (t, sel) in terms {
                if t.topology_key == labels::ZONE {
                    zone_affinity_sel[*sel] = true;
                }
            }
        }
        let zone_target = matches
            .iter()
            .map(|m| m.iter().any(|sel| zone_affinity_sel[*sel]))
            .collect();

        let fit_index = slots::FitIndex::new(snap, &shapes);
        let mut planner = Planner {
            snap,
            options,
            shapes,
            pool_order,
            classes: Vec::new(),
            class_of: Vec::new(),
            selectors,
            sel_index: index,
            matches,
            sel_of_spread,
            sel_of_affinity,
            sel_of_anti,
            zone_target,
            demand_group: Vec::new(),
            remaining: Vec::new(),
            class_left: Vec::new(),
            unit_cost: Vec::new(),
            unit_cost_capped: Vec::new(),
            scan_group: Vec::new(),
            scan_from: Vec::new(),
            verdicts: Vec::new(),
            block_version: Vec::new(),
            summaries: Vec::new(),
            last_stamp: 0,
            monotone: Vec::new(),
            shares_volumes: Vec::new(),
            any_gpu_shape: false,
            shape_volume_limits: Vec::new(),
            learned_drivers: BTreeSet::new(),
            any_prefer_no_schedule: false,
            relaxed: false,
            zone_total: 0,
            smallest: Resources::new(),
            state: State {
                slots: Vec::new(),
                usage: vec![PoolUse::default(); snap.pools.len()],
                cluster: vec![PoolUse::default(); snap.cluster_limits.len()],
                zone_counts: HashMap::new(),
                zone_blocks: Vec::new(),
                placed: vec![None; snap.pending.len()],
                claims_opened: 0,
                fixed: 0,
                cheapest_room: Vec::new(),
                live_stamp: Vec::new(),
                fit_rows: Vec::new(),
                dra_shared: BTreeMap::new(),
            },
            reasons: vec![None; snap.pending.len()],
            limited: vec![Vec::new(); snap.pending.len()],
            deferred: vec![false; snap.pending.len()],
            deferred_scan: Vec::new(),
            in_group: false,
            vocabulary: std::cell::OnceCell::new(),
            hints: HashMap::new(),
            pool_answers: HashMap::new(),
            per_node: std::cell::RefCell::new(Vec::new()),
            explain: None,
            considered: None,
            dra: None,
            dra_keys: dra::keys(snap),
            fit_index,
            part: None,
        };
        planner.any_gpu_shape = planner.shapes.iter().any(|s| s.has_gpu);
        let pns = |t: &crate::taints::Taint| t.effect == Effect::PreferNoSchedule;
        planner.any_prefer_no_schedule = snap.pools.iter().any(|p| p.taints.iter().any(pns))
            || snap.nodes.iter().any(|n| n.taints.iter().any(pns));
        planner.zone_total = planner
            .shapes
            .iter()
            .flat_map(|s| s.offerings.iter().map(|o| o.zone.as_str()))
            .collect::<BTreeSet<_>>()
            .len();
        let mut smallest: Option<Resources> = None;
        for p in &snap.pending {
            let r = Resources {
                cpu: p.requests.cpu,
                memory: p.requests.memory,
                ephemeral_storage: p.requests.ephemeral_storage,
                pods: p.requests.pods,
                extended: BTreeMap::new(),
            };
            smallest = Some(match smallest {
                None => r,
                Some(m) => m.min(&r),
            });
        }
        planner.smallest = smallest.unwrap_or_default();
        planner.build_slots();
        planner.build_dra(templates);
        planner.build_classes();
        planner
    }

    /// A live stamp in slot `si`'s block may have changed: summaries of the block are stale.
    fn block_changed(&mut self, si: usize) {
        let b = si / BLOCK;
        if self.block_version.len() <= b {
            self.block_version.resize(b + 1, 1);
        }
        self.block_version[b] += 1;
    }

    /// Puts back a state saved before a try that failed: any live stamp may differ from the
    /// one a summary was made at, so every block's summaries are stale. The claims the try
    /// changed have their room and candidates back: what classes learned of them meanwhile
    /// is forgotten, and no scan starts past a slot that has room again.
    fn restore(&mut self, saved: State) {
        let changed: Vec<usize> = (saved.fixed..saved.slots.len())
            .filter(|&si| self.state.live_stamp.get(si) != saved.live_stamp.get(si))
            .collect();
        self.state = saved;
        for si in changed {
            self.forget_answers(si);
        }
        self.scan_from.fill(0);
        for v in &mut self.block_version {
            *v += 1;
        }
    }

    fn nsel(&self) -> usize {
        self.selectors.len()
    }

    fn count_pod_into(
        &self,
        slot: &mut Slot,
        zone_counts: &mut HashMap<String, Vec<u32>>,
        zone_blocks: &mut Vec<(SelKey, String)>,
        pod: &Pod,
        pending: Option<usize>,
    ) {
        slot.ports.extend(pod.host_ports.iter().cloned());
        if let Some(room) = &mut slot.volumes {
            room.attach(&pod.volumes);
        }
        let nsel = self.selectors.len();
        let mut bump = |i: usize| {
            slot.counts[i] += 1;
            if let Some(z) = &slot.zone {
                if !zone_counts.contains_key(z.as_str()) {
                    zone_counts.insert(z.clone(), vec![0; nsel]);
                }
                if let Some(v) = zone_counts.get_mut(z.as_str()) {
                    v[i] += 1;
                }
            }
        };
        match pending {
            // Pending pods' matches were computed once up front.
            Some(pi) => self.matches[pi].iter().for_each(|i| bump(*i)),
            None => {
                for i in self
                    .sel_index
                    .matching(&self.selectors, &pod.key.namespace, &pod.labels)
                {
                    bump(i);
                }
            }
        }
        // A held preference binds its own pod only (see `preferences`).
        for (ti, t) in pod
            .anti_affinity
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.held)
        {
            if let Some(pi) = pending
                && t.topology_key == labels::HOSTNAME
            {
                slot.sel_blocks.push(self.sel_of_anti[pi][ti]);
                continue;
            }
            if t.topology_key == labels::ZONE {
                if let Some(z) = &slot.zone {
                    zone_blocks.push((term_sel(&pod.key.namespace, t), z.clone()));
                }
            } else {
                slot.blocks
                    .push((term_sel(&pod.key.namespace, t), t.topology_key.clone()));
            }
        }
    }

    /// The plan, and the considerations of the pod to explain, if one was named.
    fn run(self) -> (Plan, Option<Vec<crate::explain::PoolConsidered>>) {
        let order = self.order();
        self.run_in(order)
    }

    /// The order pods are placed in: largest first (GPUs, then shares, CPU and memory), by
    /// name among pods of one size.
    fn order(&self) -> Vec<usize> {
        let pending = &self.snap.pending;
        // Each pod's size, worked out once rather than in every comparison.
        let size: Vec<(i64, u32, i64, i64)> = pending
            .iter()
            .map(|p| {
                let gpus: i64 = p
                    .requests
                    .extended
                    .iter()
                    .filter(|(k, _)| crate::resources::is_gpu_class(k))
                    .map(|(_, v)| *v)
                    .sum::<i64>()
                    + p.claims
                        .iter()
                        .map(|c| i64::from(c.spec.devices_asked()))
                        .sum::<i64>();
                (
                    gpus,
                    p.gpu_share.as_ref().map_or(0, |s| s.milli),
                    p.requests.cpu,
                    p.requests.memory,
                )
            })
            .collect();
        let mut order: Vec<usize> = (0..pending.len()).collect();
        order.sort_by(|a, b| size[*b].cmp(&size[*a]));
        // Then by name among pods of one size (both sorts stable: the same order as one sort
        // by size and name). A workload's pods mostly come in name order already, and seeing
        // that costs one comparison of names per pod.
        for run in order.chunk_by_mut(|a, b| size[*a] == size[*b]) {
            if !run.is_sorted_by(|a, b| pending[*a].key <= pending[*b].key) {
                run.sort_by(|a, b| pending[*a].key.cmp(&pending[*b].key));
            }
        }
        order
    }

    /// [`Self::run`] with the pods in `order`.
    fn run_in(mut self, order: Vec<usize>) -> (Plan, Option<Vec<crate::explain::PoolConsidered>>) {
        let pending = &self.snap.pending;
        let mut done = vec![false; pending.len()];
        self.keep_nominations(&order, &mut done);
        let mut group_members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for i in &order {
            if let Some(g) = &pending[*i].group {
                group_members.entry(g.as_str()).or_default().push(*i);
            }
        }
        for i in order {
            if done[i] {
                continue;
            }
            match &pending[i].group {
                None => {
                    done[i] = true;
                    self.place(i);
                }
                Some(g) => {
                    let members = group_members[g.as_str()].clone();
                    for m in &members {
                        done[*m] = true;
                    }
                    self.place_group(g, &members);
                }
            }
        }
        // A pod with pod affinity that came before every pod it must join found none of them;
        // as the scheduler requeues such a pod, it is tried again while a pass places any.
        let mut retry: Vec<usize> = (0..pending.len())
            .filter(|i| {
                let p = &pending[*i];
                p.group.is_none() && !p.affinity.is_empty() && self.state.placed[*i].is_none()
            })
            .collect();
        for _ in 0..AFFINITY_PASSES {
            let before = retry.len();
            retry.retain(|i| !self.place(*i));
            if retry.is_empty() || retry.len() == before {
                break;
            }
        }
        // A pod whose hostname affinity finds every node holding a target full: the passes
        // cannot help it, but moving a target to a node of its own can (a new claim: once
        // the plan is at its limit, that waits for a later plan).
        for f in retry {
            if !self.at_claim_limit() && self.make_room_for(f) {
                continue;
            }
            // Past the limit, the move needs a claim only a later plan may open: a pod a move
            // could help waits for it; the others keep their reason.
            if self.at_claim_limit()
                && self.snap.pending[f]
                    .affinity
                    .iter()
                    .any(|t| t.topology_key == labels::HOSTNAME)
            {
                self.deferred[f] = true;
            }
        }
        let short = match self.options.min_nodes {
            Some(now) => self.open_warm_claims(now),
            None => Vec::new(),
        };
        let considered = self.considered.take();
        let mut plan = self.finish();
        plan.min_nodes_short = short;
        (plan, considered)
    }
}
