//! `plan_provisioning`: the pure function from a cluster snapshot to a provisioning plan.
//!
//! Pods are taken largest first (whole GPUs, GPU shares, cpu, memory, then name, so the order
//! is total and the plan deterministic). Each pod goes to the first place it fits, in this
//! order: an existing node, a claim already in flight, a claim this plan has opened whose
//! cheapest instance type still fits it, the open claim whose price grows least (when that
//! growth costs less than a node of its own), and finally a new claim. A new claim keeps the
//! *set* of instance types that fit all its pods; it narrows as pods are added. Members of an
//! all-or-nothing group are placed together and rolled back together.
//!
//! The fit rules (resources with per-device GPU shares, labels, taints, topology) are written
//! once here, in [`Fit`], and reused by disruption.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::gpu::apply_sharing;
use crate::instance::{CapacityType, InstanceType, Offering};
use crate::labels;
use crate::model::{GpuShare, HostPort, Pod, PodKey, Pool, Snapshot};
use crate::plan::{ClaimOption, NewClaim, Placement, Plan, Unschedulable};
use crate::requirements::{Constraint, Labels, Requirements, ValueSet};
use crate::resources::{Resources, format_amount};
use crate::taints::{Effect, Taint, Toleration, untolerated};

/// Tunables of the planner.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanOptions {
    /// Most instance types kept on one new claim (cheapest first).
    pub max_instance_types: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            max_instance_types: 60,
        }
    }
}

/// Plans capacity for every pending pod of `snapshot` with default options.
///
/// Never fails: a pod that cannot be helped is listed in [`Plan::unschedulable`] with a reason.
/// The same snapshot always yields the same plan.
pub fn plan_provisioning(snapshot: &Snapshot) -> Plan {
    plan_with(snapshot, &PlanOptions::default())
}

/// [`plan_provisioning`] with explicit options.
pub fn plan_with(snapshot: &Snapshot, options: &PlanOptions) -> Plan {
    let mut plan = Planner::new(snapshot, options).run();
    crate::gang::prefer_one_zone(snapshot, &mut plan);
    crate::gang::placement_only_in_one_zone(&mut plan);
    plan
}

/// An instance type as a node of one pool would offer it: sharing applied, pool labels added,
/// offerings restricted to the pool's requirements, DaemonSet overhead and reserve removed.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Index of the pool in the snapshot.
    pub pool: usize,
    /// Instance type name.
    pub name: String,
    /// Node labels (type, pool, GPU Operator labels), without zone and capacity type.
    pub labels: Labels,
    /// What pods can use: capacity − reserve − DaemonSet overhead.
    pub allocatable: Resources,
    /// Capacity after sharing, counted against limits.
    pub capacity: Resources,
    /// Available offerings allowed by the pool, cheapest first.
    pub offerings: Vec<Offering>,
    /// Physical GPUs and their model.
    pub gpus: (u32, Option<String>),
    /// Whether the shape offers any GPU-class resource.
    pub has_gpu: bool,
    /// Host ports the DaemonSets reserved on it bind, with the DaemonSet's name.
    pub host_ports: Vec<(HostPort, String)>,
}

impl Shape {
    /// Cheapest offering price allowed by `reqs` (zone and capacity type), if any.
    fn price_under(&self, reqs: &Requirements) -> Option<f64> {
        let zc = reqs.get(labels::ZONE);
        let cc = reqs.get(labels::CAPACITY_TYPE);
        self.offerings
            .iter()
            .find(|o| offering_allowed(o, zc, cc))
            .map(|o| o.price)
    }
}

fn offering_allowed(o: &Offering, zc: Option<&Constraint>, cc: Option<&Constraint>) -> bool {
    zc.is_none_or(|c| c.matches(Some(&o.zone)))
        && cc.is_none_or(|c| c.matches(Some(o.capacity_type.as_str())))
}

/// How many distinct values of `key` the candidate shapes span: their labels for instance
/// keys, their offerings allowed under `reqs` for zone and capacity type.
fn distinct_values(shapes: &[Shape], cands: &[usize], key: &str, reqs: &Requirements) -> usize {
    let zc = reqs.get(labels::ZONE);
    let cc = reqs.get(labels::CAPACITY_TYPE);
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for c in cands {
        let s = &shapes[*c];
        if key == labels::ZONE || key == labels::CAPACITY_TYPE {
            for o in s.offerings.iter().filter(|o| offering_allowed(o, zc, cc)) {
                seen.insert(if key == labels::ZONE {
                    o.zone.as_str()
                } else {
                    o.capacity_type.as_str()
                });
            }
        } else if let Some(v) = s.labels.get(key) {
            seen.insert(v.as_str());
        }
    }
    seen.len()
}

/// Whether a planned claim's options (after offerings were removed from it) still span the
/// distinct values its pool's `minValues` demand.
pub fn claim_meets_min_values(pool: &Pool, claim: &NewClaim) -> bool {
    pool.min_values.iter().all(|(key, &need)| {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for o in &claim.instance_types {
            if key == labels::ZONE {
                seen.extend(o.offerings.iter().map(|x| x.0.as_str()));
            } else if key == labels::CAPACITY_TYPE {
                seen.extend(o.offerings.iter().map(|x| x.1.as_str()));
            } else if let Some(v) = pool.labels.get(key).or_else(|| {
                pool.instance_types
                    .iter()
                    .find(|t| t.name == o.instance_type)
                    .and_then(|t| t.labels.get(key))
            }) {
                seen.insert(v.as_str());
            }
        }
        seen.len() >= need as usize
    })
}

/// The first `minValues` rule of `pool` the candidates cannot meet, as a reason for the pod.
fn min_values_short(
    pool: &Pool,
    shapes: &[Shape],
    cands: &[usize],
    reqs: &Requirements,
) -> Option<String> {
    pool.min_values.iter().find_map(|(key, &need)| {
        let have = distinct_values(shapes, cands, key, reqs);
        (have < need as usize).then(|| {
            format!(
                "NodePool {} needs {need} distinct values of {key} among a node's instance types \
                 (minValues); only {have} fit",
                pool.name
            )
        })
    })
}

/// Builds the shapes of every pool: what the planner and disruption both launch from.
///
/// Instance types whose sharing configuration is invalid for their GPU are left out (NodePool
/// validation reports those to the user).
pub fn build_shapes(snapshot: &Snapshot) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for (pi, pool) in snapshot.pools.iter().enumerate() {
        for it in pool.instance_types.iter() {
            if let Some(s) = shape_for(pi, pool, it, snapshot) {
                shapes.push(s);
            }
        }
    }
    shapes
}

fn shape_for(pi: usize, pool: &Pool, it: &InstanceType, snapshot: &Snapshot) -> Option<Shape> {
    let shared = apply_sharing(it, &pool.sharing).ok()?;
    let mut labels = shared.labels.clone();
    for (k, v) in &pool.labels {
        labels.insert(k.clone(), v.clone());
    }
    labels.insert(labels::NODEPOOL.into(), pool.name.clone());
    // The pool's requirements on instance labels (zone and capacity type are per offering).
    for (k, c) in pool.requirements.iter() {
        if k == labels::ZONE || k == labels::CAPACITY_TYPE || k == labels::HOSTNAME {
            continue;
        }
        if !c.matches(labels.get(k).map(String::as_str)) {
            return None;
        }
    }
    let zc = pool.requirements.get(labels::ZONE);
    let cc = pool.requirements.get(labels::CAPACITY_TYPE);
    let mut offerings: Vec<Offering> = shared
        .offerings
        .iter()
        .filter(|o| o.available && offering_allowed(o, zc, cc))
        .cloned()
        .collect();
    if offerings.is_empty() {
        return None;
    }
    offerings.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.zone.cmp(&b.zone))
            .then_with(|| a.capacity_type.cmp(&b.capacity_type))
    });
    let mut allocatable = shared.allocatable();
    // DaemonSets that will run on this node: selector and affinity match and the pool's taints
    // are tolerated. Startup taints do not count: a DaemonSet that does not tolerate them still
    // lands once they are removed, and the node must have room for it then.
    let mut host_ports = Vec::new();
    for ds in &snapshot.daemonsets {
        if ds.node_selector.matches(&labels) && untolerated(&ds.tolerations, &pool.taints).is_none()
        {
            allocatable.sub(&ds.requests);
            host_ports.extend(ds.host_ports.iter().map(|p| (p.clone(), ds.name.clone())));
        }
    }
    let has_gpu = shared.capacity.has_gpu_class();
    Some(Shape {
        pool: pi,
        name: shared.name.clone(),
        labels,
        allocatable,
        capacity: shared.capacity.clone(),
        offerings,
        gpus: (
            shared.gpu.as_ref().map_or(0, |g| g.count),
            shared.gpu.as_ref().map(|g| g.model.clone()),
        ),
        has_gpu,
        host_ports,
    })
}

/// Whether a requirement term can hold on a new node of `shape` (labels, and some offering's
/// zone and capacity type together).
pub fn term_fits_shape(term: &Requirements, shape: &Shape) -> bool {
    for (k, c) in term.iter() {
        if k == labels::ZONE || k == labels::CAPACITY_TYPE {
            continue;
        }
        if k == labels::HOSTNAME {
            // A new node's name is unknown; only constraints that any fresh name meets hold.
            if !(c.allow_absent || matches!(c.values, ValueSet::NotIn(_))) {
                return false;
            }
            continue;
        }
        if !c.matches(shape.labels.get(k).map(String::as_str)) {
            return false;
        }
    }
    shape.price_under(term).is_some()
}

/// Device-level GPU accounting shared by every place a pod can go: fractional shares are
/// packed per device (best fit), whole devices come from the free count.
#[derive(Clone, Debug, Default)]
pub struct Devices {
    /// Free thousandths of each partially used device, with its resource.
    pub partial: Vec<(String, u32)>,
}

impl Devices {
    /// Where a share would go: `Some(index)` into `partial`, or `None` for a fresh device.
    pub fn best_fit(&self, share: &GpuShare) -> Option<usize> {
        self.partial
            .iter()
            .enumerate()
            .filter(|(_, (r, free))| *r == share.resource && *free >= share.milli)
            .min_by_key(|(i, (_, free))| (*free, *i))
            .map(|(i, _)| i)
    }

    /// The extra whole devices a share costs: 0 when it fits a partial device, else 1.
    pub fn extra_devices(&self, share: &GpuShare) -> i64 {
        if share.milli >= 1000 {
            return 1;
        }
        i64::from(self.best_fit(share).is_none())
    }

    /// Records a share; returns the whole devices it opened (0 or 1).
    pub fn take(&mut self, share: &GpuShare) -> i64 {
        if share.milli >= 1000 {
            return 1;
        }
        match self.best_fit(share) {
            Some(i) => {
                self.partial[i].1 -= share.milli;
                if self.partial[i].1 == 0 {
                    self.partial.swap_remove(i);
                }
                0
            }
            None => {
                self.partial
                    .push((share.resource.clone(), 1000 - share.milli));
                1
            }
        }
    }
}

/// A pod's demand on a place: its requests plus the whole devices its share would open there.
pub fn demand(pod: &Pod, devices: &Devices) -> Resources {
    match &pod.gpu_share {
        None => pod.requests.clone(),
        Some(share) => {
            let mut r = pod.requests.clone();
            let extra = devices.extra_devices(share);
            if extra > 0 {
                let cur = r.get(&share.resource);
                r.set(&share.resource, cur + extra);
            }
            r
        }
    }
}

/// What a new claim becomes when a pod joins it; `None` fields stay as they are.
struct Grow {
    reqs: Option<Requirements>,
    candidates: Option<Vec<usize>>,
    price: f64,
}

/// The largest fraction of `alloc` that `need` takes in any resource (only GPU-class ones when
/// `gpu_only`).
fn dominant_share(need: &Resources, alloc: &Resources, gpu_only: bool) -> f64 {
    let mut share: f64 = 0.0;
    for (name, amount) in need.iter() {
        if gpu_only && !crate::resources::is_gpu_class(name) {
            continue;
        }
        let have = alloc.get(name);
        if have > 0 {
            share = share.max(amount as f64 / have as f64);
        } else if amount > 0 {
            return f64::INFINITY;
        }
    }
    share
}

/// How many nodes of `alloc` a demand needs if it could be split freely: its largest ratio
/// over the resources the node has (resources it lacks are someone else's concern).
fn even_spread(need: &Resources, alloc: &Resources) -> f64 {
    need.iter()
        .filter_map(|(name, amount)| {
            let have = alloc.get(name);
            (have > 0).then(|| amount as f64 / have as f64)
        })
        .fold(0.0, f64::max)
}

/// A cheap necessary condition for `req` (without shares) fitting into `alloc - used`, with no
/// allocation: most slots fail it.
fn quick_fit(req: &Resources, alloc: &Resources, used: &Resources) -> bool {
    req.cpu + used.cpu <= alloc.cpu
        && req.memory + used.memory <= alloc.memory
        && req.pods + used.pods <= alloc.pods
        && req
            .extended
            .iter()
            .all(|(k, v)| v + used.get(k) <= alloc.get(k))
}

/// A pod's scan identity: demand group, matched selectors, and its spread, affinity and
/// anti-affinity selectors.
type ScanKey<'a> = (usize, &'a [usize], &'a [usize], &'a [usize], &'a [usize]);

/// A pod's class identity: node selection, tolerations, whether it takes a GPU share, and
/// its host ports.
type ClassKey<'a> = (
    &'a crate::requirements::NodeSelector,
    &'a Vec<Toleration>,
    bool,
    &'a Vec<HostPort>,
);

/// Selector identity for topology counting: namespace plus label requirements.
type SelKey = (String, Requirements);

/// A new claim's answer to a pod in step 2 of `place_inner`.
#[derive(Clone, Copy, Debug)]
enum Verdict {
    /// The pod cannot join it.
    No,
    /// The pod joins it below the price it was opened for, at a fair share.
    Join,
    /// The pod can join it; the claim's price would grow by this much.
    Grow(f64),
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
    name: String,
    pool: Option<usize>,
    /// Fixed labels (existing and in-flight); new claims use their candidates' labels.
    labels: Labels,
    taints: Vec<Taint>,
    /// Existing and in-flight: allocatable; new claims: unused.
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
    blocks: Vec<(String, Requirements, String)>,
    /// Hostname anti-affinity of planned pods on this slot, as selector ids.
    sel_blocks: Vec<usize>,
    /// Host ports bound on this slot: its pods' and, for in-flight claims, its DaemonSets'
    /// (a new claim's DaemonSets rule out its candidate shapes instead, per class).
    ports: Vec<HostPort>,
    /// Limit reservation of a new claim.
    reserved: Resources,
    reserved_models: BTreeMap<String, i64>,
    open: bool,
    /// New claims: a number no other state of any slot has had (0 for the others), renewed
    /// on every change, so that a verdict computed for this stamp is still the verdict.
    stamp: u64,
}

impl Slot {
    /// An open new-claim slot with nothing in it, `counts` as given.
    fn empty(counts: Vec<u32>) -> Slot {
        Slot {
            kind: SlotKind::New,
            name: String::new(),
            pool: None,
            labels: Labels::new(),
            taints: vec![],
            allocatable: Resources::new(),
            used: Resources::new(),
            devices: Devices::default(),
            reqs: Requirements::new(),
            candidates: vec![],
            price: 0.0,
            target: 0.0,
            target_shape: None,
            zone: None,
            pods: vec![],
            counts,
            blocks: vec![],
            sel_blocks: vec![],
            ports: vec![],
            reserved: Resources::new(),
            reserved_models: BTreeMap::new(),
            open: true,
            stamp: 0,
        }
    }
}

/// Per-class data: pods with the same node selector and tolerations share these answers.
#[derive(Debug)]
struct Class {
    terms: Vec<Requirements>,
    /// Whether the pods take a fractional share of a device.
    share: bool,
    tolerations: Vec<Toleration>,
    /// Per shape: whether some term fits it and its taints are tolerated.
    shape_ok: Vec<bool>,
    /// Per slot: 0 unknown, 1 compatible, 2 not.
    slot_ok: Vec<u8>,
    /// Zones any node for this class could be in.
    zones: BTreeSet<String>,
    /// Host ports the pods bind.
    host_ports: Vec<HostPort>,
}

#[derive(Clone, Debug, Default)]
struct PoolUse {
    resources: Resources,
    nodes: i64,
    models: BTreeMap<String, i64>,
}

#[derive(Clone)]
struct State {
    slots: Vec<Slot>,
    usage: Vec<PoolUse>,
    zone_counts: HashMap<String, Vec<u32>>,
    zone_blocks: Vec<(String, Requirements, String)>,
    placed: Vec<Option<usize>>,
    claims_opened: usize,
}

struct Planner<'a> {
    snap: &'a Snapshot,
    options: &'a PlanOptions,
    shapes: Vec<Shape>,
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
    /// Per pod: its demand group (same class, requests and share); pods of a group are
    /// interchangeable for sizing claims.
    demand_group: Vec<usize>,
    /// Per demand group: pods not yet placed.
    remaining: Vec<usize>,
    /// Per class: the summed demand of its pods not yet placed.
    class_left: Vec<Resources>,
    /// Per demand group: the lowest hourly cost per pod over the shapes it can use, counting
    /// how many of the group one node would really hold (lazy).
    unit_cost: Vec<Option<f64>>,
    /// Per pod: its scan group (demand group plus topology identity), and per scan group the
    /// first slot worth trying: earlier slots rejected an identical pod, and slots only fill.
    scan_group: Vec<usize>,
    scan_from: Vec<usize>,
    /// Per scan group, per slot: the stamp a verdict was computed at and the verdict.
    verdicts: Vec<Vec<(u64, Verdict)>>,
    /// The last stamp given out; outside `state`, so that stamps stay unique across rollbacks.
    last_stamp: u64,
    /// Per pod: whether rejections stay rejections as the plan grows (no zone spread or
    /// affinity, whose domains can open up later).
    monotone: Vec<bool>,
    /// Number of distinct zones any shape offers.
    zone_total: usize,
    /// Whether any shape has a GPU (otherwise the GPU-avoidance rule costs nothing to skip).
    any_gpu_shape: bool,
    /// Whether any pool or node has a `PreferNoSchedule` taint.
    any_prefer_no_schedule: bool,
    /// Placing a pod a second time, now allowed onto `PreferNoSchedule` taints it does not
    /// tolerate (the first try avoids them).
    relaxed: bool,
    /// Per-resource minimum over pending pods' requests: a claim that cannot fit it is closed.
    smallest: Resources,
    state: State,
    reasons: Vec<Option<String>>,
    /// Known label values, for "did you mean" in reasons; built for the first pod that fails.
    vocabulary: std::cell::OnceCell<crate::vocabulary::Vocabulary>,
}

fn sel_matches(sel: &SelKey, ns: &str, labels: &Labels) -> bool {
    sel.0 == ns && sel.1.matches(labels)
}

/// Finds the selectors a pod's labels match without testing every selector: a selector with an
/// `In` constraint can only match pods carrying one of its values, so it is filed under each
/// (namespace, key, value); the rest are tested always.
struct SelectorIndex {
    by_label: HashMap<(String, String, String), Vec<usize>>,
    always: Vec<usize>,
}

impl SelectorIndex {
    fn new(selectors: &[SelKey]) -> Self {
        let mut by_label: HashMap<(String, String, String), Vec<usize>> = HashMap::new();
        let mut always = Vec::new();
        for (i, (ns, req)) in selectors.iter().enumerate() {
            let key = req.iter().find_map(|(k, c)| match &c.values {
                ValueSet::In(vals) if !c.allow_absent => Some((k, vals)),
                _ => None,
            });
            match key {
                Some((k, vals)) => {
                    for v in vals {
                        by_label
                            .entry((ns.clone(), k.to_string(), v.clone()))
                            .or_default()
                            .push(i);
                    }
                }
                None => always.push(i),
            }
        }
        SelectorIndex { by_label, always }
    }

    /// Selector ids matching a pod, ascending.
    fn matching(&self, selectors: &[SelKey], ns: &str, labels: &Labels) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .always
            .iter()
            .copied()
            .filter(|i| sel_matches(&selectors[*i], ns, labels))
            .collect();
        if !self.by_label.is_empty() {
            for (k, v) in labels {
                if let Some(ids) = self.by_label.get(&(ns.to_string(), k.clone(), v.clone())) {
                    out.extend(
                        ids.iter()
                            .copied()
                            .filter(|i| sel_matches(&selectors[*i], ns, labels)),
                    );
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl<'a> Planner<'a> {
    fn new(snap: &'a Snapshot, options: &'a PlanOptions) -> Self {
        let shapes = build_shapes(snap);
        let mut pool_order: Vec<usize> = (0..snap.pools.len()).collect();
        pool_order.sort_by(|a, b| {
            snap.pools[*b]
                .weight
                .cmp(&snap.pools[*a].weight)
                .then_with(|| snap.pools[*a].name.cmp(&snap.pools[*b].name))
        });

        // Selectors used by the pending pods' topology terms.
        let mut sel_index: HashMap<SelKey, usize> = HashMap::new();
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
        let mut sel_of_affinity = Vec::new();
        let mut sel_of_anti = Vec::new();
        for p in &snap.pending {
            let ns = &p.key.namespace;
            sel_of_spread.push(
                p.spread
                    .iter()
                    .map(|s| intern((ns.clone(), s.selector.clone())))
                    .collect(),
            );
            sel_of_affinity.push(
                p.affinity
                    .iter()
                    .map(|s| intern((ns.clone(), s.selector.clone())))
                    .collect(),
            );
            sel_of_anti.push(
                p.anti_affinity
                    .iter()
                    .map(|s| intern((ns.clone(), s.selector.clone())))
                    .collect(),
            );
        }
        let index = SelectorIndex::new(&selectors);
        let matches: Vec<Vec<usize>> = snap
            .pending
            .iter()
            .map(|p| index.matching(&selectors, &p.key.namespace, &p.labels))
            .collect();

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
            demand_group: Vec::new(),
            remaining: Vec::new(),
            class_left: Vec::new(),
            unit_cost: Vec::new(),
            scan_group: Vec::new(),
            scan_from: Vec::new(),
            verdicts: Vec::new(),
            last_stamp: 0,
            monotone: Vec::new(),
            any_gpu_shape: false,
            any_prefer_no_schedule: false,
            relaxed: false,
            zone_total: 0,
            smallest: Resources::new(),
            state: State {
                slots: Vec::new(),
                usage: vec![PoolUse::default(); snap.pools.len()],
                zone_counts: HashMap::new(),
                zone_blocks: Vec::new(),
                placed: vec![None; snap.pending.len()],
                claims_opened: 0,
            },
            reasons: vec![None; snap.pending.len()],
            vocabulary: std::cell::OnceCell::new(),
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
        planner.build_classes();
        planner
    }

    fn nsel(&self) -> usize {
        self.selectors.len()
    }

    fn count_pod_into(
        &self,
        slot: &mut Slot,
        zone_counts: &mut HashMap<String, Vec<u32>>,
        zone_blocks: &mut Vec<(String, Requirements, String)>,
        pod: &Pod,
        pending: Option<usize>,
    ) {
        slot.ports.extend(pod.host_ports.iter().cloned());
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
        for (ti, t) in pod.anti_affinity.iter().enumerate() {
            if let Some(pi) = pending
                && t.topology_key == labels::HOSTNAME
            {
                slot.sel_blocks.push(self.sel_of_anti[pi][ti]);
                continue;
            }
            if t.topology_key == labels::ZONE {
                if let Some(z) = &slot.zone {
                    zone_blocks.push((pod.key.namespace.clone(), t.selector.clone(), z.clone()));
                }
            } else {
                slot.blocks.push((
                    pod.key.namespace.clone(),
                    t.selector.clone(),
                    t.topology_key.clone(),
                ));
            }
        }
    }

    fn build_slots(&mut self) {
        let snap = self.snap;
        let in_flight_names: BTreeSet<&str> =
            snap.in_flight.iter().map(|c| c.name.as_str()).collect();
        let mut slots = Vec::new();
        let mut zone_counts = HashMap::new();
        let mut zone_blocks = Vec::new();
        let mut usage = vec![PoolUse::default(); snap.pools.len()];
        let pool_idx: HashMap<&str, usize> = snap
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        let mut node_order: Vec<usize> = (0..snap.nodes.len()).collect();
        node_order.sort_by(|a, b| snap.nodes[*a].name.cmp(&snap.nodes[*b].name));
        for ni in node_order {
            let n = &snap.nodes[ni];
            let pool = n.pool.as_deref().and_then(|p| pool_idx.get(p).copied());
            let counted_as_claim = !n.initialized
                && n.claim
                    .as_deref()
                    .is_some_and(|c| in_flight_names.contains(c));
            if counted_as_claim {
                continue;
            }
            if let Some(pi) = pool {
                let u = &mut usage[pi];
                u.nodes += 1;
                // Limits count the node's full capacity; allocatable is the best measure we have.
                u.resources.add(&n.allocatable);
                if let Some(m) = self.node_model(n) {
                    let g = n
                        .labels
                        .get(labels::GPU_COUNT)
                        .and_then(|c| c.parse::<i64>().ok())
                        .unwrap_or(0);
                    *u.models.entry(m).or_default() += g;
                }
            }
            let mut slot = Slot {
                kind: SlotKind::Existing(ni),
                name: n.name.clone(),
                pool,
                labels: n.labels.clone(),
                taints: n.taints.clone(),
                allocatable: n.allocatable.clone(),
                price: n.price.unwrap_or(0.0),
                zone: n.labels.get(labels::ZONE).cloned(),
                open: !(n.unschedulable || n.deleting),
                ..Slot::empty(vec![0; self.nsel()])
            };
            for p in &n.pods {
                let d = demand(p, &slot.devices);
                slot.used.add(&d);
                if let Some(s) = &p.gpu_share {
                    slot.devices.take(s);
                }
                self.count_pod_into(&mut slot, &mut zone_counts, &mut zone_blocks, p, None);
            }
            slots.push(slot);
        }
        let mut claims: Vec<usize> = (0..snap.in_flight.len()).collect();
        claims.sort_by(|a, b| snap.in_flight[*a].name.cmp(&snap.in_flight[*b].name));
        for ci in claims {
            let c = &snap.in_flight[ci];
            let Some(&pi) = pool_idx.get(c.pool.as_str()) else {
                continue;
            };
            let shapes: Vec<&Shape> = self
                .shapes
                .iter()
                .filter(|s| s.pool == pi && c.instance_types.contains(&s.name))
                .collect();
            let Some(first) = shapes.first() else {
                continue;
            };
            // Conservative: the claim may become any of its candidates, so count on the least.
            let mut alloc = first.allocatable.clone();
            let mut cap = first.capacity.clone();
            let mut common = first.labels.clone();
            for s in &shapes[1..] {
                alloc = alloc.min(&s.allocatable);
                cap = cap.max(&s.capacity);
                common.retain(|k, v| s.labels.get(k) == Some(v));
            }
            let zone = c
                .requirements
                .get(labels::ZONE)
                .and_then(|z| z.single_value())
                .map(str::to_string);
            if let Some(z) = &zone {
                common.insert(labels::ZONE.into(), z.clone());
            }
            if let Some(ct) = c
                .requirements
                .get(labels::CAPACITY_TYPE)
                .and_then(|z| z.single_value())
            {
                common.insert(labels::CAPACITY_TYPE.into(), ct.to_string());
            }
            let u = &mut usage[pi];
            u.nodes += 1;
            u.resources.add(&cap);
            for s in &shapes {
                if let (n, Some(m)) = &s.gpus {
                    let e = u.models.entry(m.clone()).or_default();
                    *e = (*e).max(i64::from(*n));
                }
            }
            // Its DaemonSets' ports, whichever candidate it becomes.
            let mut ports: Vec<HostPort> = shapes
                .iter()
                .flat_map(|s| s.host_ports.iter().map(|(p, _)| p.clone()))
                .collect();
            ports.sort();
            ports.dedup();
            let mut slot = Slot {
                kind: SlotKind::InFlight(ci),
                ports,
                name: c.name.clone(),
                pool: Some(pi),
                labels: common,
                taints: snap.pools[pi].taints.clone(),
                allocatable: alloc,
                reqs: c.requirements.clone(),
                zone,
                ..Slot::empty(vec![0; self.nsel()])
            };
            for p in &c.pods {
                let d = demand(p, &slot.devices);
                slot.used.add(&d);
                if let Some(s) = &p.gpu_share {
                    slot.devices.take(s);
                }
                self.count_pod_into(&mut slot, &mut zone_counts, &mut zone_blocks, p, None);
            }
            slots.push(slot);
        }
        self.state.slots = slots;
        self.state.zone_counts = zone_counts;
        self.state.zone_blocks = zone_blocks;
        self.state.usage = usage;
    }

    fn node_model(&self, n: &crate::model::Node) -> Option<String> {
        let name = n.instance_type.as_deref()?;
        let pi = self
            .snap
            .pools
            .iter()
            .position(|p| Some(&p.name) == n.pool.as_ref())?;
        self.snap.pools[pi]
            .instance_types
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.gpu.as_ref().map(|g| g.model.clone()))
    }

    fn build_classes(&mut self) {
        let mut index: HashMap<ClassKey<'_>, usize> = HashMap::new();
        let mut classes = Vec::new();
        let mut class_of = Vec::with_capacity(self.snap.pending.len());
        for p in &self.snap.pending {
            let share = p.gpu_share.is_some();
            let key = (&p.node_selector, &p.tolerations, share, &p.host_ports);
            let ci = match index.get(&key) {
                Some(ci) => *ci,
                None => {
                    let terms = if p.node_selector.terms.is_empty() {
                        vec![Requirements::new()]
                    } else {
                        p.node_selector.terms.clone()
                    };
                    let mut zones = BTreeSet::new();
                    let shape_ok: Vec<bool> = self
                        .shapes
                        .iter()
                        .map(|s| {
                            let pool = &self.snap.pools[s.pool];
                            if untolerated(&p.tolerations, &pool.taints).is_some() {
                                return false;
                            }
                            // Shares of one device need a pool whose nodes run a sharing
                            // device plugin.
                            if share && !pool.sharing.fractional {
                                return false;
                            }
                            // A DaemonSet on every such node holds one of the pod's ports.
                            if ports_conflict(&p.host_ports, s.host_ports.iter().map(|(h, _)| h)) {
                                return false;
                            }
                            let mut ok = false;
                            for t in &terms {
                                if term_fits_shape(t, s) {
                                    ok = true;
                                    let zc = t.get(labels::ZONE);
                                    let cc = t.get(labels::CAPACITY_TYPE);
                                    for o in
                                        s.offerings.iter().filter(|o| offering_allowed(o, zc, cc))
                                    {
                                        zones.insert(o.zone.clone());
                                    }
                                }
                            }
                            ok
                        })
                        .collect();
                    classes.push(Class {
                        terms,
                        share,
                        host_ports: p.host_ports.clone(),
                        tolerations: p.tolerations.clone(),
                        shape_ok,
                        slot_ok: Vec::new(),
                        zones,
                    });
                    index.insert(key, classes.len() - 1);
                    classes.len() - 1
                }
            };
            class_of.push(ci);
        }
        // Zones of compatible existing nodes are spread domains too.
        for class in &mut classes {
            for slot in &self.state.slots {
                if let Some(z) = &slot.zone
                    && slot.kind != SlotKind::New
                    && class.terms.iter().any(|t| t.matches(&slot.labels))
                {
                    class.zones.insert(z.clone());
                }
            }
        }
        self.classes = classes;
        self.class_of = class_of;
        self.build_groups();
    }

    fn build_groups(&mut self) {
        let pending = &self.snap.pending;
        let mut demand_index: HashMap<(usize, &Resources, &Option<GpuShare>), usize> =
            HashMap::new();
        let mut scan_index: HashMap<ScanKey<'_>, usize> = HashMap::new();
        for (i, p) in pending.iter().enumerate() {
            let n = demand_index.len();
            let g = *demand_index
                .entry((self.class_of[i], &p.requests, &p.gpu_share))
                .or_insert(n);
            self.demand_group.push(g);
            if g == self.remaining.len() {
                self.remaining.push(0);
            }
            self.remaining[g] += 1;
            let key = (
                g,
                self.matches[i].as_slice(),
                self.sel_of_spread[i].as_slice(),
                self.sel_of_affinity[i].as_slice(),
                self.sel_of_anti[i].as_slice(),
            );
            let n = scan_index.len();
            self.scan_group.push(*scan_index.entry(key).or_insert(n));
            self.monotone.push(
                p.affinity.is_empty()
                    && !p
                        .spread
                        .iter()
                        .any(|t| t.hard && t.topology_key != labels::HOSTNAME),
            );
        }
        self.unit_cost = vec![None; self.remaining.len()];
        self.class_left = vec![Resources::new(); self.classes.len()];
        for (i, p) in pending.iter().enumerate() {
            self.class_left[self.class_of[i]].add(&demand(p, &Devices::default()));
        }
        self.scan_from = vec![0; scan_index.len()];
        self.verdicts = vec![Vec::new(); scan_index.len()];
    }

    /// The lowest hourly cost per pod of demand group `g` on a node of its own kind: over the
    /// shapes pod `i` (a member) can use, price / how many members one node holds, capped by
    /// the members still pending.
    fn unit_cost(&mut self, i: usize, avoid_gpu: bool) -> f64 {
        let g = self.demand_group[i];
        if let Some(c) = self.unit_cost[g] {
            return c;
        }
        let pod = &self.snap.pending[i];
        let need = demand(pod, &Devices::default());
        let class = &self.classes[self.class_of[i]];
        let left = self.remaining[g].max(1) as f64;
        let mut best = f64::INFINITY;
        for (si, shape) in self.shapes.iter().enumerate() {
            if !class.shape_ok[si] || (avoid_gpu && shape.has_gpu) || !need.fits(&shape.allocatable)
            {
                continue;
            }
            let per_node = (1.0 / dominant_share(&need, &shape.allocatable, false))
                .floor()
                .max(1.0);
            best = best.min(shape.offerings[0].price / per_node.min(left));
        }
        self.unit_cost[g] = Some(best);
        best
    }

    /// The pod's share of a claim's target price: its dominant share of the target type,
    /// counting only GPU-class resources on GPU types (cpu left over on a GPU node is not what
    /// that node is bought for).
    fn fair_share(&self, i: usize, slot: &Slot) -> f64 {
        let Some(t) = slot.target_shape else {
            return 0.0;
        };
        let shape = &self.shapes[t];
        let need = demand(&self.snap.pending[i], &slot.devices);
        slot.target * dominant_share(&need, &shape.allocatable, shape.has_gpu)
    }

    fn run(mut self) -> Plan {
        let pending = &self.snap.pending;
        let mut order: Vec<usize> = (0..pending.len()).collect();
        order.sort_by(|a, b| {
            let (pa, pb) = (&pending[*a], &pending[*b]);
            let key = |p: &Pod| {
                let gpus: i64 = p
                    .requests
                    .extended
                    .iter()
                    .filter(|(k, _)| crate::resources::is_gpu_class(k))
                    .map(|(_, v)| *v)
                    .sum();
                (
                    gpus,
                    p.gpu_share.as_ref().map_or(0, |s| s.milli),
                    p.requests.cpu,
                    p.requests.memory,
                )
            };
            key(pb).cmp(&key(pa)).then_with(|| pa.key.cmp(&pb.key))
        });
        let mut done = vec![false; pending.len()];
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
        self.finish()
    }

    fn place_group(&mut self, group: &str, members: &[usize]) {
        let min = self
            .snap
            .groups
            .get(group)
            .map_or(members.len(), |g| (g.min_count as usize).min(members.len()));
        let saved = self.state.clone();
        let mut failed: Vec<usize> = Vec::new();
        for m in members {
            if !self.place(*m) {
                failed.push(*m);
            }
        }
        let placed = members.len() - failed.len();
        if placed >= min {
            return;
        }
        let first = failed[0];
        let why = self.reasons[first].clone().unwrap_or_default();
        let msg = format!(
            "all-or-nothing group {group} needs {min} pods but only {placed} fit: pod {} {}",
            self.snap.pending[first].key.name, why
        );
        self.state = saved;
        for m in members {
            self.state.placed[*m] = None;
            self.reasons[*m] = Some(msg.clone());
        }
    }

    /// Places pod `i`; on failure records the reason and returns false.
    ///
    /// `PreferNoSchedule` is a soft preference, as Karpenter relaxes it: the pod first tries
    /// every place without such a taint it does not tolerate, and only when none takes it
    /// tries again with those places allowed.
    fn place(&mut self, i: usize) -> bool {
        let mut placed = self.place_inner(i);
        if !placed && self.any_prefer_no_schedule {
            let sg = self.scan_group[i];
            let from = self.scan_from[sg];
            self.relaxed = true;
            placed = self.place_inner(i);
            self.relaxed = false;
            // What the relaxed scan skipped says nothing about identical pods' first try.
            self.scan_from[sg] = from;
        }
        if placed {
            let g = self.demand_group[i];
            self.remaining[g] = self.remaining[g].saturating_sub(1);
            let need = demand(&self.snap.pending[i], &Devices::default());
            self.class_left[self.class_of[i]].sub(&need);
        }
        placed
    }

    fn place_inner(&mut self, i: usize) -> bool {
        let ci = self.class_of[i];
        let sg = self.scan_group[i];
        let start = if self.monotone[i] && !self.relaxed {
            self.scan_from[sg]
        } else {
            0
        };
        let mut first_ok: Option<usize> = None;
        // 1. existing nodes and in-flight claims, in that order (slots are laid out that way).
        // Capacity that is already there is used under a PreferNoSchedule taint the pod does
        // not tolerate too (the scheduler would put the pod there rather than leave it
        // pending), but only once no other node or claim takes it.
        let n = self.state.slots.len();
        let was_relaxed = self.relaxed;
        let mut from = start;
        let fixed = loop {
            if let Some(si) = self.scan_fixed(i, from) {
                break Some(si);
            }
            if self.relaxed || !self.any_prefer_no_schedule {
                break None;
            }
            // Slots before `start` may only have been avoided, not refused.
            self.relaxed = true;
            from = 0;
        };
        self.relaxed = was_relaxed;
        if let Some(si) = fixed {
            self.scan_from[sg] = si;
            self.commit(i, si, None, false);
            return true;
        }
        // 2. a new claim that takes it below the price it was opened for, if the pod's fair
        // share of that price is no more than the pod would cost on a node of its own kind.
        let mut best: Option<(f64, usize, Option<Grow>)> = None;
        let avoid_gpu = self.avoid_gpu(i);
        let own = self.unit_cost(i, avoid_gpu);
        // Identical pods come one after another and a placement changes one claim, so for
        // pods whose answer depends on nothing but the claim itself, each claim's verdict is
        // kept per scan group and recomputed only when the claim's stamp moved on.
        let cacheable = self.verdict_depends_on_slot_only(i);
        if cacheable && self.verdicts[sg].len() < n {
            self.verdicts[sg].resize(n, (0, Verdict::No));
        }
        for si in start..n {
            let slot = &self.state.slots[si];
            if !slot.open || slot.kind != SlotKind::New || self.avoids(ci, &slot.taints) {
                continue;
            }
            let stamp = slot.stamp;
            // The claim's grown form comes with a fresh verdict; a cached one recomputes it
            // only for the claim the pod goes to.
            let (verdict, grow) = match self.verdicts[sg].get(si) {
                Some((s, v)) if cacheable && *s == stamp => (*v, None),
                _ => {
                    let (v, grow) = self.verdict(i, si, avoid_gpu, own);
                    if cacheable {
                        self.verdicts[sg][si] = (stamp, v);
                    }
                    (v, grow)
                }
            };
            let delta = match verdict {
                Verdict::No => continue,
                Verdict::Join => {
                    first_ok.get_or_insert(si);
                    if let Some(grow) = grow.or_else(|| self.try_new_slot(i, si, avoid_gpu)) {
                        self.scan_from[sg] = first_ok.unwrap_or(si);
                        self.commit(i, si, Some(grow), avoid_gpu);
                        return true;
                    }
                    continue;
                }
                Verdict::Grow(delta) => delta,
            };
            first_ok.get_or_insert(si);
            if delta > 1e-12 && best.as_ref().is_none_or(|b| delta < b.0) {
                best = Some((delta, si, grow));
            }
        }
        self.scan_from[sg] = first_ok.unwrap_or(n);
        // 3. grow the claim whose price grows least, when that is cheaper than a node alone.
        let alone = self.open_claim_candidates(i);
        if let Some((delta, si, grow)) = best
            && let Some(grow) = grow.or_else(|| self.try_new_slot(i, si, avoid_gpu))
        {
            let alone_price = alone.as_ref().ok().map(|(.., p)| *p);
            if alone_price.is_none_or(|a| delta <= a + 1e-12) {
                self.commit(i, si, Some(grow), avoid_gpu);
                let slot = &mut self.state.slots[si];
                if slot.price > slot.target {
                    slot.target = slot.price;
                    slot.target_shape = slot.candidates.first().copied();
                }
                return true;
            }
        }
        // 4. a new claim, sized for the similar pods that follow.
        match alone {
            Ok((pool, reqs, cands, price, _)) => {
                self.open_claim(i, pool, reqs, cands, price, avoid_gpu);
                true
            }
            Err(reason) => {
                self.reasons[i] = Some(reason);
                false
            }
        }
    }

    /// The first existing node or in-flight claim from slot `start` on that takes pod `i`.
    fn scan_fixed(&mut self, i: usize, start: usize) -> Option<usize> {
        let pod = &self.snap.pending[i];
        let ci = self.class_of[i];
        for si in start..self.state.slots.len() {
            let slot = &self.state.slots[si];
            if !slot.open || slot.kind == SlotKind::New {
                continue;
            }
            if !quick_fit(&pod.requests, &slot.allocatable, &slot.used) {
                continue;
            }
            if self.avoids(ci, &slot.taints) {
                continue;
            }
            let need = demand(pod, &slot.devices);
            if !need.fits(&slot.allocatable.minus(&slot.used)) {
                continue;
            }
            if !self.slot_compatible(ci, si) {
                continue;
            }
            if !self.topology_ok_fixed(i, si) {
                continue;
            }
            return Some(si);
        }
        None
    }

    /// What new claim `si` means for pod `i` in step 2 of [`Self::place_inner`], with what
    /// the claim would become when the pod can join it.
    fn verdict(
        &mut self,
        i: usize,
        si: usize,
        avoid_gpu: bool,
        own: f64,
    ) -> (Verdict, Option<Grow>) {
        let pod = &self.snap.pending[i];
        let slot = &self.state.slots[si];
        if !quick_fit(&pod.requests, &slot.allocatable, &slot.used)
            || !self.new_slot_may_fit(self.class_of[i], si)
        {
            return (Verdict::No, None);
        }
        let Some(grow) = self.try_new_slot(i, si, avoid_gpu) else {
            return (Verdict::No, None);
        };
        let slot = &self.state.slots[si];
        let delta = grow.price - slot.target.max(slot.price);
        let v = if delta > 1e-12 {
            Verdict::Grow(delta)
        } else if self.fair_share(i, slot) <= own * (1.0 + 1e-9) + 1e-12 {
            Verdict::Join
        } else {
            // Fits for free, but the pod would take more of the claim than it is worth.
            Verdict::Grow(0.0)
        };
        (v, Some(grow))
    }

    /// Whether pods of class `ci` keep off a place with these taints on their first try: a
    /// `PreferNoSchedule` taint they do not tolerate.
    fn avoids(&self, ci: usize, taints: &[Taint]) -> bool {
        !self.relaxed
            && self.any_prefer_no_schedule
            && prefers_not(&self.classes[ci].tolerations, taints)
    }

    /// Whether pod `i`'s verdict on a new claim depends on that claim alone (and on the pod's
    /// scan group): no topology term of its own, and no zone anti-affinity placed so far that
    /// could hold against it.
    fn verdict_depends_on_slot_only(&self, i: usize) -> bool {
        let pod = &self.snap.pending[i];
        pod.spread.is_empty()
            && pod.affinity.is_empty()
            && pod.anti_affinity.is_empty()
            && self.state.zone_blocks.is_empty()
    }

    fn slot_compatible(&mut self, ci: usize, si: usize) -> bool {
        let class = &mut self.classes[ci];
        if class.slot_ok.len() <= si {
            class.slot_ok.resize(self.state.slots.len().max(si + 1), 0);
        }
        match class.slot_ok[si] {
            1 => true,
            2 => false,
            _ => {
                let slot = &self.state.slots[si];
                let shares_ok = !class.share
                    || slot
                        .pool
                        .is_none_or(|pi| self.snap.pools[pi].sharing.fractional);
                let ok = shares_ok
                    && untolerated(&class.tolerations, &slot.taints).is_none()
                    && class.terms.iter().any(|t| match slot.kind {
                        SlotKind::Existing(_) => t.matches(&slot.labels),
                        // In-flight: labels are what all candidates share; a term on other
                        // keys cannot be promised.
                        _ => t.matches(&slot.labels),
                    });
                class.slot_ok[si] = if ok { 1 } else { 2 };
                ok
            }
        }
    }

    /// Whether some candidate of new claim `si` suits class `ci`. Candidates only shrink, so a
    /// "no" is remembered and a "yes" is re-checked by the caller.
    fn new_slot_may_fit(&mut self, ci: usize, si: usize) -> bool {
        let class = &mut self.classes[ci];
        if class.slot_ok.len() <= si {
            class.slot_ok.resize(self.state.slots.len().max(si + 1), 0);
        }
        match class.slot_ok[si] {
            2 => false,
            1 => true,
            _ => {
                let ok = self.state.slots[si]
                    .candidates
                    .iter()
                    .any(|c| class.shape_ok[*c]);
                class.slot_ok[si] = if ok { 1 } else { 2 };
                ok
            }
        }
    }

    /// Topology rules for a slot whose zone and hostname are known.
    fn topology_ok_fixed(&self, i: usize, si: usize) -> bool {
        let slot = &self.state.slots[si];
        self.topology_ok(i, slot, slot.zone.as_deref())
    }

    fn zone_count(&self, sel: usize, zone: &str) -> u32 {
        self.state.zone_counts.get(zone).map_or(0, |v| v[sel])
    }

    /// Whether pod `i` may go on `slot` placed in `zone` (None: zone not known yet, so zone
    /// rules must be settled by pinning first).
    fn topology_ok(&self, i: usize, slot: &Slot, zone: Option<&str>) -> bool {
        let pod = &self.snap.pending[i];
        if ports_conflict(&pod.host_ports, slot.ports.iter()) {
            return false;
        }
        // Anti-affinity of pods already there against this pod.
        if slot
            .sel_blocks
            .iter()
            .any(|b| self.matches[i].binary_search(b).is_ok())
        {
            return false;
        }
        for (ns, sel, key) in &slot.blocks {
            if key == labels::HOSTNAME && *ns == pod.key.namespace && sel.matches(&pod.labels) {
                return false;
            }
        }
        if let Some(z) = zone {
            for (ns, sel, bz) in &self.state.zone_blocks {
                if bz == z && *ns == pod.key.namespace && sel.matches(&pod.labels) {
                    return false;
                }
            }
        }
        for (t, sel) in pod.anti_affinity.iter().zip(&self.sel_of_anti[i]) {
            if t.topology_key == labels::HOSTNAME {
                if slot.counts[*sel] > 0 {
                    return false;
                }
            } else if t.topology_key == labels::ZONE {
                match zone {
                    Some(z) if self.zone_count(*sel, z) == 0 => {}
                    _ => return false,
                }
            }
        }
        for (t, sel) in pod.affinity.iter().zip(&self.sel_of_affinity[i]) {
            let self_match = self.matches[i].contains(sel);
            if t.topology_key == labels::HOSTNAME {
                if slot.counts[*sel] == 0 && !(self_match && self.nobody_matches(*sel)) {
                    return false;
                }
            } else if t.topology_key == labels::ZONE {
                match zone {
                    Some(z) => {
                        if self.zone_count(*sel, z) == 0
                            && !(self_match && self.nobody_matches(*sel))
                        {
                            return false;
                        }
                    }
                    None => return false,
                }
            }
        }
        let ci = self.class_of[i];
        for (t, sel) in pod.spread.iter().zip(&self.sel_of_spread[i]) {
            if !t.hard {
                continue;
            }
            // The pod counts in its own domain only when it matches the constraint's selector
            // (as the scheduler's PodTopologySpread does).
            let itself = u32::from(self.matches[i].binary_search(sel).is_ok());
            if t.topology_key == labels::HOSTNAME {
                // A new node is always a possible domain with no matching pod, so min is 0.
                if slot.counts[*sel] + itself > t.max_skew {
                    return false;
                }
            } else if t.topology_key == labels::ZONE {
                let Some(z) = zone else { return false };
                let min = self.classes[ci]
                    .zones
                    .iter()
                    .map(|d| self.zone_count(*sel, d))
                    .min()
                    .unwrap_or(0);
                if self.zone_count(*sel, z) + itself > min + t.max_skew {
                    return false;
                }
            }
        }
        true
    }

    fn nobody_matches(&self, sel: usize) -> bool {
        self.state.slots.iter().all(|s| s.counts[sel] == 0)
    }

    fn needs_zone(&self, i: usize) -> bool {
        let pod = &self.snap.pending[i];
        pod.spread
            .iter()
            .any(|t| t.hard && t.topology_key == labels::ZONE)
            || pod.affinity.iter().any(|t| t.topology_key == labels::ZONE)
            || pod
                .anti_affinity
                .iter()
                .any(|t| t.topology_key == labels::ZONE)
            || self
                .state
                .zone_blocks
                .iter()
                .any(|(ns, sel, _)| *ns == pod.key.namespace && sel.matches(&pod.labels))
    }

    /// Whether pod `i` needs no GPU and some GPU-less shape could host it alone: then GPU
    /// instance types are not used for it.
    fn avoid_gpu(&self, i: usize) -> bool {
        if !self.any_gpu_shape {
            return false;
        }
        let pod = &self.snap.pending[i];
        let need = demand(pod, &Devices::default());
        if need.has_gpu_class() {
            return false;
        }
        let class = &self.classes[self.class_of[i]];
        self.shapes
            .iter()
            .enumerate()
            .any(|(s, sh)| !sh.has_gpu && class.shape_ok[s] && need.fits(&sh.allocatable))
    }

    /// For a new-claim slot: the requirements, candidates and price it would have with pod `i`
    /// added, or `None` when the pod cannot join it.
    fn try_new_slot(&self, i: usize, si: usize, avoid_gpu: bool) -> Option<Grow> {
        let pod = &self.snap.pending[i];
        let ci = self.class_of[i];
        let slot = &self.state.slots[si];
        let need = slot.used.plus(&demand(pod, &slot.devices));
        if !need.fits(&slot.allocatable) {
            // `allocatable` of a new claim holds the most any candidate offers.
            return None;
        }
        let class = &self.classes[ci];
        let usable = |c: usize| {
            class.shape_ok[c]
                && !(avoid_gpu && self.shapes[c].has_gpu)
                && need.fits(&self.shapes[c].allocatable)
        };
        let zone_rules = self.needs_zone(i) && slot.zone.is_none();
        // The quick paths below do not list the narrowed candidates; minValues needs them.
        let pool = slot.pool.map(|pi| &self.snap.pools[pi]);
        let strict = pool.is_some_and(|p| !p.min_values.is_empty());
        if class.terms.len() == 1 && class.terms[0].is_empty() && !zone_rules && !strict {
            // Requirements stay as they are, so candidates stay in price order and the first
            // usable one sets the price; narrowing waits until the pod is committed.
            if !self.topology_ok(i, slot, slot.zone.as_deref()) {
                return None;
            }
            let first = slot.candidates.iter().copied().find(|c| usable(*c))?;
            let price = self.shapes[first].price_under(&slot.reqs)?;
            return Some(Grow {
                reqs: None,
                candidates: None,
                price,
            });
        }
        if class.terms.len() == 1 && class.terms[0].is_empty() && !strict {
            // Pin a zone without narrowing everything: a cheapest-first prefix of the usable
            // candidates that reaches every zone tells which zones are possible and their price.
            let mut prefix = Vec::new();
            let mut seen: Vec<&str> = Vec::new();
            let zc = slot.reqs.get(labels::ZONE);
            let cc = slot.reqs.get(labels::CAPACITY_TYPE);
            for c in slot.candidates.iter().copied() {
                if !usable(c) {
                    continue;
                }
                prefix.push(c);
                for o in &self.shapes[c].offerings {
                    if offering_allowed(o, zc, cc) && !seen.contains(&o.zone.as_str()) {
                        seen.push(&o.zone);
                    }
                }
                if seen.len() >= self.zone_total {
                    break;
                }
            }
            let z = self.pick_zone(i, &slot.reqs, &prefix, slot)?;
            let mut reqs = slot.reqs.clone();
            reqs.add_constraint(
                labels::ZONE,
                Constraint::from_operator(labels::ZONE, crate::requirements::Operator::In, &[z])
                    .ok()?,
            );
            let price = prefix
                .iter()
                .filter_map(|c| self.shapes[*c].price_under(&reqs))
                .min_by(f64::total_cmp)?;
            return Some(Grow {
                reqs: Some(reqs),
                candidates: None,
                price,
            });
        }
        for term in &class.terms {
            let mut reqs = if term.is_empty() {
                slot.reqs.clone()
            } else {
                slot.reqs.intersect(term)
            };
            if !reqs.satisfiable() {
                continue;
            }
            let mut cands: Vec<usize> = slot
                .candidates
                .iter()
                .copied()
                .filter(|c| {
                    usable(*c) && (term.is_empty() || term_fits_shape(&reqs, &self.shapes[*c]))
                })
                .collect();
            if cands.is_empty() {
                continue;
            }
            if zone_rules {
                let z = self.pick_zone(i, &reqs, &cands, slot)?;
                reqs.add_constraint(
                    labels::ZONE,
                    Constraint::from_operator(
                        labels::ZONE,
                        crate::requirements::Operator::In,
                        &[z],
                    )
                    .ok()?,
                );
                cands.retain(|c| self.shapes[*c].price_under(&reqs).is_some());
                if cands.is_empty() {
                    continue;
                }
            }
            if pool.is_some_and(|p| min_values_short(p, &self.shapes, &cands, &reqs).is_some()) {
                continue;
            }
            let zone = slot.zone.clone().or_else(|| {
                reqs.get(labels::ZONE)
                    .and_then(|c| c.single_value())
                    .map(str::to_string)
            });
            if !self.topology_ok(i, slot, zone.as_deref()) {
                continue;
            }
            let mut priced: Vec<(f64, usize)> = cands
                .iter()
                .filter_map(|c| self.shapes[*c].price_under(&reqs).map(|p| (p, *c)))
                .collect();
            priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let price = priced.first()?.0;
            return Some(Grow {
                reqs: Some(reqs),
                candidates: Some(priced.into_iter().map(|(_, c)| c).collect()),
                price,
            });
        }
        None
    }

    /// Chooses a zone for a pod with zone rules on a claim not yet pinned: the allowed zone
    /// with the fewest matching pods, then the cheapest, then by name.
    fn pick_zone(
        &self,
        i: usize,
        reqs: &Requirements,
        cands: &[usize],
        slot: &Slot,
    ) -> Option<String> {
        // Candidates come cheapest first, so the first price seen for a zone is its cheapest;
        // stop once every zone is seen.
        let mut zones: Vec<(&str, f64)> = Vec::new();
        let zc = reqs.get(labels::ZONE);
        let cc = reqs.get(labels::CAPACITY_TYPE);
        for c in cands {
            for o in &self.shapes[*c].offerings {
                if offering_allowed(o, zc, cc) && !zones.iter().any(|(z, _)| *z == o.zone) {
                    zones.push((&o.zone, o.price));
                }
            }
            if zones.len() >= self.zone_total {
                break;
            }
        }
        let pod_sels = &self.sel_of_spread[i];
        zones
            .into_iter()
            .filter(|(z, _)| self.topology_ok(i, slot, Some(z)))
            .min_by(|(za, pa), (zb, pb)| {
                let ca: u32 = pod_sels.iter().map(|s| self.zone_count(*s, za)).sum();
                let cb: u32 = pod_sels.iter().map(|s| self.zone_count(*s, zb)).sum();
                ca.cmp(&cb).then(pa.total_cmp(pb)).then(za.cmp(zb))
            })
            .map(|(z, _)| z.to_string())
    }

    /// Limit headroom of a pool: what may still be added.
    fn fits_limits(&self, pi: usize, shape: &Shape) -> Result<(), String> {
        let pool = &self.snap.pools[pi];
        let u = &self.state.usage[pi];
        if let Some(n) = pool.limits.nodes
            && u.nodes + 1 > n
        {
            return Err(format!("NodePool {} limit nodes={n} reached", pool.name));
        }
        for (name, limit) in &pool.limits.resources {
            if u.resources.get(name) + shape.capacity.get(name) > *limit {
                return Err(format!(
                    "NodePool {} limit {name}={} reached",
                    pool.name,
                    format_amount(name, *limit)
                ));
            }
        }
        if let (n, Some(model)) = &shape.gpus
            && let Some(limit) = pool.limits.gpus_by_model.get(model)
            && u.models.get(model).copied().unwrap_or(0) + i64::from(*n) > *limit
        {
            return Err(format!(
                "NodePool {} limit for GPU model {model}={limit} reached",
                pool.name
            ));
        }
        Ok(())
    }

    /// The pool, requirements, candidates and price of a new claim for pod `i`, and the price
    /// of the cheapest node any pool could launch for it alone, or the reason there is none.
    #[allow(clippy::type_complexity)]
    fn open_claim_candidates(
        &mut self,
        i: usize,
    ) -> Result<(usize, Requirements, Vec<usize>, f64, f64), String> {
        let pod = &self.snap.pending[i];
        let ci = self.class_of[i];
        let need = demand(pod, &Devices::default());
        let wants_gpu = need.has_gpu_class();
        let avoid_gpu = self.avoid_gpu(i);
        let mut best: Option<(i32, Option<f64>, f64, usize, Requirements, Vec<usize>)> = None;
        let mut cheapest = f64::INFINITY;
        let mut reasons: Vec<String> = Vec::new();
        let empty = Slot::empty(vec![0; self.nsel()]);
        for &pi in &self.pool_order {
            let pool = &self.snap.pools[pi];
            if let Some((w, ..)) = &best
                && *w > pool.weight
            {
                break;
            }
            if let Some(t) = untolerated(&self.classes[ci].tolerations, &pool.taints) {
                reasons.push(format!("taint {t} of NodePool {} not tolerated", pool.name));
                continue;
            }
            if self.avoids(ci, &pool.taints) {
                reasons.push(format!(
                    "NodePool {} has a PreferNoSchedule taint the pod does not tolerate",
                    pool.name
                ));
                continue;
            }
            for term in self.classes[ci].terms.clone() {
                let reqs = pool.requirements.intersect(&term);
                if let Some(k) = pool.requirements.conflict_with(&term) {
                    reasons.push(format!(
                        "NodePool {} requirement on {k} conflicts with the pod's node affinity",
                        pool.name
                    ));
                    continue;
                }
                let mut limit_reason = None;
                let mut fitting: Vec<usize> = (0..self.shapes.len())
                    .filter(|s| {
                        let sh = &self.shapes[*s];
                        sh.pool == pi
                            && self.classes[ci].shape_ok[*s]
                            && term_fits_shape(&term, sh)
                            && need.fits(&sh.allocatable)
                    })
                    .filter(|s| match self.fits_limits(pi, &self.shapes[*s]) {
                        Ok(()) => true,
                        Err(e) => {
                            limit_reason.get_or_insert(e);
                            false
                        }
                    })
                    .collect();
                if fitting.is_empty() {
                    reasons.push(
                        limit_reason.unwrap_or_else(|| self.no_fit_reason(pi, ci, &term, &need)),
                    );
                    continue;
                }
                if !wants_gpu && fitting.iter().any(|s| !self.shapes[*s].has_gpu) {
                    // GPU types are a last resort for a pod that needs none, unless dropping
                    // them leaves fewer values than the pool's minValues.
                    let cpu_only: Vec<usize> = fitting
                        .iter()
                        .copied()
                        .filter(|s| !self.shapes[*s].has_gpu)
                        .collect();
                    if min_values_short(pool, &self.shapes, &cpu_only, &reqs).is_none() {
                        fitting = cpu_only;
                    }
                }
                // Preferred node affinity breaks ties: keep it when something still fits.
                let mut reqs = reqs;
                let mut prefs = pod.preferred.clone();
                prefs.sort_by_key(|p| std::cmp::Reverse(p.0));
                for (_, pterm) in prefs {
                    let r2 = reqs.intersect(&pterm);
                    let kept: Vec<usize> = fitting
                        .iter()
                        .copied()
                        .filter(|s| term_fits_shape(&r2, &self.shapes[*s]))
                        .collect();
                    if r2.satisfiable()
                        && !kept.is_empty()
                        && min_values_short(pool, &self.shapes, &kept, &r2).is_none()
                    {
                        reqs = r2;
                        fitting = kept;
                    }
                }
                if self.needs_zone(i) {
                    let Some(z) = self.pick_zone(i, &reqs, &fitting, &empty) else {
                        reasons.push(format!(
                            "NodePool {}: no zone satisfies the pod's topology constraints",
                            pool.name
                        ));
                        continue;
                    };
                    reqs.add_constraint(
                        labels::ZONE,
                        Constraint::from_operator(
                            labels::ZONE,
                            crate::requirements::Operator::In,
                            &[z],
                        )
                        .expect("one value"),
                    );
                    fitting.retain(|c| self.shapes[*c].price_under(&reqs).is_some());
                } else if !self.topology_ok(i, &empty, None) {
                    reasons.push("topology constraints cannot be met on a new node".into());
                    continue;
                }
                let mut priced: Vec<(f64, usize)> = fitting
                    .iter()
                    .filter_map(|c| self.shapes[*c].price_under(&reqs).map(|p| (p, *c)))
                    .collect();
                priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let Some(&(price, _)) = priced.first() else {
                    continue;
                };
                let cands: Vec<usize> = priced.into_iter().map(|(_, c)| c).collect();
                if let Some(why) = min_values_short(pool, &self.shapes, &cands, &reqs) {
                    reasons.push(why);
                    continue;
                }
                cheapest = cheapest.min(price);
                // Pools compete on the price per pod of the node the claim would be sized to,
                // not on the cheapest node for this pod alone: a pool whose only small node is
                // cheap can still cost more per pod than another pool's big node once the
                // similar pods that follow share it. Prices per pod are worked out only when
                // there is a choice.
                let (better, unit) = match &mut best {
                    None => (true, None),
                    Some(b) => {
                        let theirs = *b
                            .1
                            .get_or_insert_with(|| self.claim_target(i, &b.4, &b.5, avoid_gpu).0);
                        let unit = self.claim_target(i, &reqs, &cands, avoid_gpu).0;
                        let better = unit < theirs * (1.0 - 1e-9)
                            || (unit <= theirs * (1.0 + 1e-9) && price < b.2);
                        (better, Some(unit))
                    }
                };
                if better {
                    best = Some((pool.weight, unit, price, pi, reqs, cands));
                }
            }
        }
        match best {
            Some((_, _, price, pi, reqs, cands)) => Ok((pi, reqs, cands, price, cheapest)),
            None => {
                let vocabulary = (self.vocabulary)
                    .get_or_init(|| crate::vocabulary::Vocabulary::of_pools(&self.snap.pools));
                Err(self.summarize(reasons) + &vocabulary.hint(&self.classes[ci].terms))
            }
        }
    }

    /// The lowest price per pod over `cands` (under `reqs`) for pod `i` and the members of its
    /// demand group still pending, with that candidate's price and index; `(INFINITY, INFINITY,
    /// None)` when no candidate is usable.
    ///
    /// A candidate is priced by the nodes of its kind the pending pods would need: the group's
    /// pods at the whole number one node holds and, for a GPU pod, also the whole pending
    /// demand of its class (pods that may share its nodes, whatever their size) spread evenly.
    /// Without the second term a 2-GPU pod sized alone gets a 4-GPU node of its own, and the
    /// 1-GPU pods after it an 8-GPU node that would have held it too.
    fn claim_target(
        &self,
        i: usize,
        reqs: &Requirements,
        cands: &[usize],
        avoid_gpu: bool,
    ) -> (f64, f64, Option<usize>) {
        let need = demand(&self.snap.pending[i], &Devices::default());
        let left = self.remaining[self.demand_group[i]].max(1) as f64;
        let class_left = need
            .has_gpu_class()
            .then(|| &self.class_left[self.class_of[i]]);
        let mut best = (f64::INFINITY, f64::INFINITY, None);
        for c in cands {
            let shape = &self.shapes[*c];
            if avoid_gpu && shape.has_gpu {
                continue;
            }
            let Some(p) = shape.price_under(reqs) else {
                continue;
            };
            let per_node = (1.0 / dominant_share(&need, &shape.allocatable, false))
                .floor()
                .max(1.0);
            let spread = class_left.map_or(0.0, |d| even_spread(d, &shape.allocatable));
            let unit = p * (left / per_node).max(spread).max(1.0) / left;
            if unit < best.0 * (1.0 - 1e-9) {
                best = (unit, p, Some(*c));
            }
        }
        best
    }

    fn summarize(&self, mut reasons: Vec<String>) -> String {
        if self.snap.pools.is_empty() {
            return "no NodePool exists".into();
        }
        if !reasons.is_empty() && reasons.iter().all(|r| r.starts_with("taint ")) {
            let mut taints: Vec<String> = reasons
                .iter()
                .filter_map(|r| {
                    r.strip_prefix("taint ")
                        .and_then(|r| r.split(" of NodePool").next())
                        .map(str::to_string)
                })
                .collect();
            taints.dedup();
            return format!(
                "taint {} not tolerated by any NodePool the pod can use",
                taints.join(", ")
            );
        }
        reasons.dedup();
        if reasons.is_empty() {
            return "no NodePool can launch a node for this pod".into();
        }
        reasons.join("; ")
    }

    fn no_fit_reason(&self, pi: usize, ci: usize, term: &Requirements, need: &Resources) -> String {
        let pool = &self.snap.pools[pi];
        let compatible: Vec<&Shape> = self
            .shapes
            .iter()
            .enumerate()
            .filter(|(s, sh)| {
                sh.pool == pi && self.classes[ci].shape_ok[*s] && term_fits_shape(term, sh)
            })
            .map(|(_, sh)| sh)
            .collect();
        if compatible.is_empty() {
            if self.classes[ci].share && !pool.sharing.fractional {
                return format!(
                    "NodePool {} does not offer fractional GPU shares (gpuSharing.fractional)",
                    pool.name
                );
            }
            let class = &self.classes[ci];
            let port_taken = self
                .shapes
                .iter()
                .filter(|sh| sh.pool == pi && term_fits_shape(term, sh))
                .flat_map(|sh| sh.host_ports.iter())
                .find(|(h, _)| class.host_ports.iter().any(|w| w.conflicts(h)));
            if let Some((port, ds)) = port_taken {
                return format!(
                    "host port {} is taken by DaemonSet {ds} on the nodes of NodePool {}",
                    port.describe(),
                    pool.name
                );
            }
            let any_in_pool = self.shapes.iter().any(|s| s.pool == pi);
            if !any_in_pool {
                return format!(
                    "NodePool {} has no instance type with an available offering",
                    pool.name
                );
            }
            return format!(
                "no instance type in NodePool {} matches the pod's node selector and affinity",
                pool.name
            );
        }
        // The resource that fails everywhere decides the message, as users read it.
        for (name, amount) in need.iter() {
            if compatible.iter().all(|s| s.allocatable.get(name) < amount) {
                return format!(
                    "no instance type in NodePool {} offers {} {name}",
                    pool.name,
                    format_amount(name, amount)
                );
            }
        }
        format!(
            "no instance type in NodePool {} fits the pod's requests {need} together",
            pool.name
        )
    }

    fn open_claim(
        &mut self,
        i: usize,
        pi: usize,
        reqs: Requirements,
        cands: Vec<usize>,
        price: f64,
        avoid_gpu: bool,
    ) {
        self.state.claims_opened += 1;
        // Size the claim for the pods like this one that are still pending: the candidate with
        // the lowest price per pod it would hold, cheapest on ties.
        let target = match self.claim_target(i, &reqs, &cands, avoid_gpu) {
            (_, p, Some(c)) => (p, Some(c)),
            _ => (price, cands.first().copied()),
        };
        let pool = &self.snap.pools[pi];
        let name = format!("{}-{}", pool.name, self.state.claims_opened);
        let zone = reqs
            .get(labels::ZONE)
            .and_then(|c| c.single_value())
            .map(str::to_string);
        let slot = Slot {
            name,
            pool: Some(pi),
            taints: pool.taints.clone(),
            reqs,
            candidates: cands,
            price,
            zone,
            target: target.0,
            target_shape: target.1,
            ..Slot::empty(vec![0; self.nsel()])
        };
        self.state.slots.push(slot);
        self.state.usage[pi].nodes += 1;
        let si = self.state.slots.len() - 1;
        // A rolled-back group can leave answers about an earlier claim at this index.
        for class in &mut self.classes {
            if let Some(ok) = class.slot_ok.get_mut(si) {
                *ok = 0;
            }
        }
        self.commit(i, si, None, false);
        self.refresh_new_slot(si);
    }

    /// Re-reserves limits for a new claim: the most any of its candidates could use.
    fn reserve(&mut self, si: usize) {
        let slot = &self.state.slots[si];
        let Some(pi) = slot.pool else { return };
        let pool = &self.snap.pools[pi];
        if pool.limits.resources.is_empty() && pool.limits.gpus_by_model.is_empty() {
            return;
        }
        let mut cap = Resources::new();
        let mut models: BTreeMap<String, i64> = BTreeMap::new();
        for c in &slot.candidates {
            let s = &self.shapes[*c];
            cap = cap.max(&s.capacity);
            if let (n, Some(m)) = &s.gpus {
                let e = models.entry(m.clone()).or_default();
                *e = (*e).max(i64::from(*n));
            }
        }
        let old = std::mem::replace(&mut self.state.slots[si].reserved, cap.clone());
        let old_models =
            std::mem::replace(&mut self.state.slots[si].reserved_models, models.clone());
        let u = &mut self.state.usage[pi];
        u.resources.sub(&old);
        u.resources.add(&cap);
        for (m, n) in old_models {
            *u.models.entry(m).or_default() -= n;
        }
        for (m, n) in models {
            *u.models.entry(m).or_default() += n;
        }
    }

    fn commit(&mut self, i: usize, si: usize, grow: Option<Grow>, avoid_gpu: bool) {
        let pod = &self.snap.pending[i];
        let need = demand(pod, &self.state.slots[si].devices);
        let is_new = self.state.slots[si].kind == SlotKind::New;
        let resort = grow
            .as_ref()
            .is_some_and(|g| g.reqs.is_some() && g.candidates.is_none());
        {
            let slot = &mut self.state.slots[si];
            if let Some(g) = grow {
                if let Some(reqs) = g.reqs {
                    if slot.zone.is_none() {
                        slot.zone = reqs
                            .get(labels::ZONE)
                            .and_then(|c| c.single_value())
                            .map(str::to_string);
                    }
                    slot.reqs = reqs;
                }
                if let Some(c) = g.candidates {
                    slot.candidates = c;
                }
                slot.price = g.price;
            }
            slot.used.add(&need);
            if let Some(s) = &pod.gpu_share {
                slot.devices.take(s);
            }
            slot.pods.push(i);
        }
        let mut slot = std::mem::replace(&mut self.state.slots[si], placeholder());
        let mut zc = std::mem::take(&mut self.state.zone_counts);
        let mut zb = std::mem::take(&mut self.state.zone_blocks);
        self.count_pod_into(&mut slot, &mut zc, &mut zb, pod, Some(i));
        if is_new {
            // Keep only the candidates that still hold every pod, in price order.
            let ci = self.class_of[i];
            let class = &self.classes[ci];
            let shapes = &self.shapes;
            let used = &slot.used;
            if resort {
                // The requirements changed (a zone was pinned) without a narrowed list.
                let reqs = &slot.reqs;
                slot.candidates
                    .retain(|c| shapes[*c].price_under(reqs).is_some());
                let mut priced: Vec<(f64, usize)> = slot
                    .candidates
                    .iter()
                    .filter_map(|c| shapes[*c].price_under(reqs).map(|p| (p, *c)))
                    .collect();
                priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                slot.candidates = priced.into_iter().map(|(_, c)| c).collect();
            }
            slot.candidates.retain(|c| {
                class.shape_ok[*c]
                    && !(avoid_gpu && shapes[*c].has_gpu)
                    && used.fits(&shapes[*c].allocatable)
            });
            if let Some(first) = slot.candidates.first() {
                slot.price = shapes[*first].price_under(&slot.reqs).unwrap_or(slot.price);
            }
        }
        self.state.slots[si] = slot;
        self.state.zone_counts = zc;
        self.state.zone_blocks = zb;
        self.state.placed[i] = Some(si);
        if is_new {
            self.refresh_new_slot(si);
        }
    }

    /// The cheapest `max_instance_types` options, swapping in the cheapest options that bring a
    /// value `minValues` still lacks, so truncation never breaks what the claim was planned with.
    fn truncate_options(
        &self,
        pool: &Pool,
        reqs: &Requirements,
        options: Vec<(ClaimOption, usize)>,
    ) -> Vec<ClaimOption> {
        let max = self.options.max_instance_types;
        if options.len() <= max {
            return options.into_iter().map(|(o, _)| o).collect();
        }
        let mut keep = vec![false; options.len()];
        let mut kept = 0;
        for (key, &need) in &pool.min_values {
            let chosen: Vec<usize> = options
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|((_, c), _)| *c)
                .collect();
            let mut have = distinct_values(&self.shapes, &chosen, key, reqs);
            let mut chosen = chosen;
            for (j, (_, c)) in options.iter().enumerate() {
                if have >= need as usize || kept >= max {
                    break;
                }
                if keep[j] {
                    continue;
                }
                chosen.push(*c);
                let now = distinct_values(&self.shapes, &chosen, key, reqs);
                if now > have {
                    keep[j] = true;
                    kept += 1;
                    have = now;
                } else {
                    chosen.pop();
                }
            }
        }
        for k in keep.iter_mut() {
            if kept >= max {
                break;
            }
            if !*k {
                *k = true;
                kept += 1;
            }
        }
        options
            .into_iter()
            .zip(keep)
            .filter_map(|((o, _), k)| k.then_some(o))
            .collect()
    }

    /// After a new claim narrowed: recompute the most any candidate offers (a quick reject for
    /// later pods), close it when even the smallest pending pod no longer fits, and re-reserve
    /// limits.
    fn refresh_new_slot(&mut self, si: usize) {
        self.last_stamp += 1;
        self.state.slots[si].stamp = self.last_stamp;
        let mut most = Resources::new();
        for c in &self.state.slots[si].candidates {
            most = most.max(&self.shapes[*c].allocatable);
        }
        let slot = &mut self.state.slots[si];
        slot.allocatable = most;
        let free = slot.allocatable.minus(&slot.used);
        if !self.smallest.fits(&free) {
            slot.open = false;
        }
        self.reserve(si);
    }

    fn finish(self) -> Plan {
        let mut plan = Plan::default();
        let pending = &self.snap.pending;
        let mut unplaced: Vec<usize> = Vec::new();
        for (i, p) in self.state.placed.iter().enumerate() {
            match p {
                Some(si) => {
                    let slot = &self.state.slots[*si];
                    match slot.kind {
                        SlotKind::Existing(_) => plan.existing.push(Placement {
                            pod: pending[i].key.clone(),
                            target: slot.name.clone(),
                        }),
                        SlotKind::InFlight(_) => plan.in_flight.push(Placement {
                            pod: pending[i].key.clone(),
                            target: slot.name.clone(),
                        }),
                        SlotKind::New => {}
                    }
                }
                None => unplaced.push(i),
            }
        }
        plan.existing.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan.in_flight.sort_by(|a, b| a.pod.cmp(&b.pod));
        for slot in &self.state.slots {
            if slot.kind != SlotKind::New || slot.pods.is_empty() {
                continue;
            }
            let pool = &self.snap.pools[slot.pool.expect("new claims have a pool")];
            let zc = slot.reqs.get(labels::ZONE);
            let cc = slot.reqs.get(labels::CAPACITY_TYPE);
            let mut options: Vec<(ClaimOption, usize)> = slot
                .candidates
                .iter()
                .map(|c| {
                    let s = &self.shapes[*c];
                    let offerings: Vec<(String, CapacityType, f64)> = s
                        .offerings
                        .iter()
                        .filter(|o| offering_allowed(o, zc, cc))
                        .map(|o| (o.zone.clone(), o.capacity_type, o.price))
                        .collect();
                    let o = ClaimOption {
                        instance_type: s.name.clone(),
                        price: offerings.first().map_or(f64::INFINITY, |o| o.2),
                        offerings,
                    };
                    (o, *c)
                })
                .filter(|o| !o.0.offerings.is_empty())
                .collect();
            options.sort_by(|(a, _), (b, _)| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.instance_type.cmp(&b.instance_type))
            });
            let options = self.truncate_options(pool, &slot.reqs, options);
            let gpus = slot
                .candidates
                .iter()
                .map(|c| &self.shapes[*c])
                .find(|s| options.first().is_some_and(|o| o.instance_type == s.name))
                .map_or(0, |s| s.gpus.0);
            let mut labels_out = pool.labels.clone();
            labels_out.insert(labels::NODEPOOL.into(), pool.name.clone());
            let mut pods: Vec<_> = slot.pods.iter().map(|i| pending[*i].key.clone()).collect();
            pods.sort();
            plan.new_claims.push(NewClaim {
                name: slot.name.clone(),
                pool: pool.name.clone(),
                price: options.first().map_or(0.0, |o| o.price),
                instance_types: options,
                requirements: slot.reqs.clone(),
                labels: labels_out,
                taints: pool.taints.clone(),
                startup_taints: pool.startup_taints.clone(),
                pods,
                requests: slot.used.clone(),
                gpus,
                group: None,
            });
        }
        mark_group_claims(pending, &mut plan);
        for i in unplaced {
            plan.unschedulable.push(Unschedulable {
                pod: pending[i].key.clone(),
                reason: self.reasons[i]
                    .clone()
                    .unwrap_or_else(|| "not placed".into()),
            });
        }
        plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan
    }
}

/// Sets [`NewClaim::group`] on the claims that hold only members of one all-or-nothing group,
/// for the groups with at least two such claims in the plan. A claim shared with pods outside
/// the group gets none and does not count: one node of a group in a placement group of its own
/// would only narrow where the cloud may put it.
fn mark_group_claims(pending: &[Pod], plan: &mut Plan) {
    let group_of: BTreeMap<&PodKey, &str> = pending
        .iter()
        .filter_map(|p| p.group.as_deref().map(|g| (&p.key, g)))
        .collect();
    if group_of.is_empty() {
        return;
    }
    // The one group of each claim whose pods all belong to it.
    let only: Vec<Option<&str>> = plan
        .new_claims
        .iter()
        .map(|c| {
            let mut groups = c.pods.iter().map(|k| group_of.get(k).copied());
            let first = groups.next().flatten()?;
            groups.all(|g| g == Some(first)).then_some(first)
        })
        .collect();
    let mut claims_of: BTreeMap<&str, usize> = BTreeMap::new();
    for g in only.iter().flatten() {
        *claims_of.entry(g).or_default() += 1;
    }
    for (c, g) in plan.new_claims.iter_mut().zip(only) {
        c.group = g
            .filter(|g| claims_of.get(g).is_some_and(|n| *n >= 2))
            .map(str::to_string);
    }
}

/// Whether any of `wanted` conflicts with a port already bound (`bound`).
fn ports_conflict<'a>(wanted: &[HostPort], mut bound: impl Iterator<Item = &'a HostPort>) -> bool {
    !wanted.is_empty() && bound.any(|b| wanted.iter().any(|w| w.conflicts(b)))
}

/// Whether `taints` hold a `PreferNoSchedule` taint that `tolerations` do not tolerate.
fn prefers_not(tolerations: &[Toleration], taints: &[Taint]) -> bool {
    taints.iter().any(|t| {
        t.effect == Effect::PreferNoSchedule && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

fn placeholder() -> Slot {
    Slot {
        open: false,
        ..Slot::empty(vec![])
    }
}
