//! A simulated kube-scheduler, written apart from the planner's own fit logic so that a plan
//! the real scheduler would not follow shows up as pods that stay pending.
//!
//! Filters, as the default scheduler's plugins: NodeUnschedulable (cordoned or being deleted),
//! TaintToleration (NoSchedule / NoExecute), NodeAffinity (nodeSelector and required terms),
//! NodeResourcesFit (every resource; `nvidia.com/gpu` per device, so a fractional share must
//! fit on one device and whole GPUs need wholly free devices), PodTopologySpread
//! (`DoNotSchedule` only), InterPodAffinity (required affinity and anti-affinity, both
//! directions) and DynamicResources (the pod's resource claims allocated from the node's
//! published devices by [`crate::dra`], the simulator's own allocator). Scores: `LeastAllocated` (default) or `MostAllocated` over cpu, memory and,
//! for GPU pods, GPUs; ties go to the older node.

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::model::Pod;
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::names;
use autoscaler_core::taints::{Effect, Taint, Toleration, TolerationOperator};

use crate::cluster::{Cluster, NodeId, NodePhase, NodeState, PodId, PodState};
use crate::scenario::ScoreStrategy;

/// Why a pod does not fit a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unfit {
    /// The node is not Ready, cordoned or being deleted.
    Unschedulable,
    /// An untolerated taint.
    Taint(String),
    /// nodeSelector or required node affinity.
    Selector,
    /// Not enough of a resource.
    Resource(String),
    /// A hard topology spread constraint.
    Spread(String),
    /// Required pod affinity.
    Affinity,
    /// Required pod anti-affinity (either direction).
    AntiAffinity,
}

/// Whether one toleration tolerates one taint (the API's matching rules, restated here on
/// purpose rather than borrowed from the planner).
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect
        && e != taint.effect
    {
        return false;
    }
    match t.operator {
        TolerationOperator::Exists => t.key.is_empty() || t.key == taint.key,
        TolerationOperator::Equal => t.key == taint.key && t.value == taint.value,
    }
}

/// The first taint that keeps the pod off the node.
pub fn untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        matches!(taint.effect, Effect::NoSchedule | Effect::NoExecute)
            && !tolerations.iter().any(|t| tolerates(t, taint))
    })
}

/// The `nvidia.com/gpu` units the pod would take on the node, or why it does not fit its
/// resources. Whole GPUs take the lowest-numbered free units; a share takes the fullest unit it
/// still fits on (best fit).
pub fn fit_resources(pod: &Pod, node: &NodeState) -> Result<Vec<usize>, Unfit> {
    fit_units(pod, node).map_err(|k| Unfit::Resource(k.to_string()))
}

/// [`fit_resources`], naming the short resource without allocating: the scheduler asks this
/// for every pending pod and candidate node, and mostly throws the reason away.
fn fit_units<'p>(pod: &'p Pod, node: &NodeState) -> Result<Vec<usize>, &'p str> {
    let (r, a, u) = (&pod.requests, &node.allocatable, &node.used);
    // The fixed fields first (none is GPU-class, so the device plugin does not hide them), in
    // the order `Resources::iter` yields them.
    for (k, want, alloc, used) in [
        (names::CPU, r.cpu, a.cpu, u.cpu),
        (names::MEMORY, r.memory, a.memory, u.memory),
        (
            names::EPHEMERAL_STORAGE,
            r.ephemeral_storage,
            a.ephemeral_storage,
            u.ephemeral_storage,
        ),
        (names::PODS, r.pods, a.pods, u.pods),
    ] {
        if want != 0 && want > alloc - used {
            return Err(k);
        }
    }
    for (k, v) in &r.extended {
        if k == names::NVIDIA_GPU {
            continue;
        }
        let free = node.alloc_get(k) - node.used.get(k);
        if *v > free {
            return Err(k);
        }
    }
    let units = node.alloc_get(names::NVIDIA_GPU).max(0) as usize;
    let usable = &node.devices[..units.min(node.devices.len())];
    let whole = pod.requests.get(names::NVIDIA_GPU).max(0) as usize;
    let mut out = Vec::new();
    if whole > 0 {
        out.extend(
            usable
                .iter()
                .enumerate()
                .filter(|(_, u)| **u == 0)
                .map(|(i, _)| i)
                .take(whole),
        );
        if out.len() < whole {
            return Err(names::NVIDIA_GPU);
        }
    }
    if let Some(share) = &pod.gpu_share {
        if share.resource != names::NVIDIA_GPU {
            // Shares of other resources are counted as whole units.
            if node.alloc_get(&share.resource) - node.used.get(&share.resource) < 1 {
                return Err(&share.resource);
            }
            return Ok(out);
        }
        let best = usable
            .iter()
            .enumerate()
            .filter(|(i, u)| **u + share.milli <= 1000 && !out.contains(i))
            .max_by_key(|(i, u)| (**u, std::cmp::Reverse(*i)))
            .map(|(i, _)| i);
        match best {
            Some(i) if out.is_empty() => out.push(i),
            Some(_) => return Err(names::NVIDIA_GPU),
            None => return Err(names::NVIDIA_GPU),
        }
    }
    // DynamicResources: the node's published devices (once its driver is up) must hold
    // every claim of the pod, by the simulator's own allocator.
    if !pod.claims.is_empty()
        && (node.phase != NodePhase::Ready || crate::dra::allocate(pod, &node.dra).is_none())
    {
        return Err(CLAIMS);
    }
    Ok(out)
}

/// What a pod whose claims cannot be allocated on a node is short of.
pub const CLAIMS: &str = "resourceClaims";

/// Copies of the few nodes a what-if question changes, laid over the real ones: copying every
/// live node for each question made the baselines' scale-down quadratic in the cluster size.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    /// Per node id, the index of its copy in `copies` (`u32::MAX`: not copied).
    index: Vec<u32>,
    /// The changed nodes: the first `ids.len()` are in use, the rest are kept from an earlier
    /// question so that their allocations can be reused.
    copies: Vec<NodeState>,
    /// The node id of each copy in use.
    ids: Vec<NodeId>,
}

impl Scratch {
    /// An overlay with nothing copied yet, for a cluster of `nodes` nodes (gone ones included).
    pub fn new(nodes: usize) -> Self {
        let mut s = Scratch::default();
        s.reset(nodes);
        s
    }

    /// Forgets every copy (keeping their allocations) for a cluster of `nodes` nodes.
    pub fn reset(&mut self, nodes: usize) {
        for id in self.ids.drain(..) {
            self.index[id] = u32::MAX;
        }
        self.index.resize(nodes, u32::MAX);
    }

    /// The copy of node `id`, made from `base` on first use.
    pub fn node_mut(&mut self, base: &[NodeState], id: NodeId) -> &mut NodeState {
        if self.index[id] == u32::MAX {
            let slot = self.ids.len();
            match self.copies.get_mut(slot) {
                Some(old) => old.copy_from(&base[id]),
                None => self.copies.push(base[id].clone()),
            }
            self.ids.push(id);
            self.index[id] = slot as u32;
        }
        &mut self.copies[self.index[id] as usize]
    }
}

/// What the scheduler reads: nodes (with a scratch overlay for what-if questions) and the
/// pods they hold.
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// Nodes by id.
    pub nodes: &'a [NodeState],
    /// Changed copies that stand in for some of `nodes`.
    pub scratch: Option<&'a Scratch>,
    /// Pods by id.
    pub pods: &'a [PodState],
    /// Nodes not gone.
    pub live: &'a BTreeSet<NodeId>,
    /// Whether some bound pod has required anti-affinity (every placement must check it).
    pub any_anti: bool,
}

impl<'a> View<'a> {
    /// The view of the whole cluster.
    pub fn of(c: &'a Cluster) -> Self {
        View {
            nodes: &c.nodes,
            scratch: None,
            pods: &c.pods,
            live: &c.live_nodes,
            any_anti: c.anti_bound > 0,
        }
    }

    /// Node `id` as this view sees it.
    pub fn node(&self, id: NodeId) -> &'a NodeState {
        if let Some(s) = self.scratch {
            let i = s.index[id];
            if i != u32::MAX {
                return &s.copies[i as usize];
            }
        }
        &self.nodes[id]
    }

    fn pod(&self, id: PodId) -> &'a Pod {
        self.pods[id].pod.as_ref().expect("bound pod exists")
    }
}

/// Per-pod topology facts, computed once per scheduling attempt.
#[derive(Debug, Default, PartialEq)]
pub struct Topology {
    /// Per hard spread constraint: matching-pod count per domain over eligible nodes.
    spread: Vec<BTreeMap<String, u32>>,
    /// Per affinity term: domains holding a matching pod, and whether any pod matches at all.
    affinity: Vec<(BTreeSet<String>, bool)>,
    /// Per anti-affinity term of the pod: domains holding a matching pod.
    anti: Vec<BTreeSet<String>>,
    /// (topology key, domain) pairs that existing pods' anti-affinity forbids to this pod.
    forbidden: BTreeSet<(String, String)>,
}

fn domain<'a>(node: &'a NodeState, key: &str) -> Option<&'a str> {
    node.labels.get(key).map(String::as_str)
}

/// Whether spread constraint `c` of `pod` counts node `n` (`eligible`: the pod's node
/// selection matches it, `nodeAffinityPolicy: Honor`): with `nodeTaintsPolicy: Honor` only
/// if the pod tolerates its taints.
fn counts_node(
    c: &autoscaler_core::model::TopologySpread,
    pod: &Pod,
    eligible: bool,
    n: &NodeState,
) -> bool {
    (eligible || c.ignore_node_affinity)
        && (!c.honor_taints || untolerated(&pod.tolerations, &n.taints).is_none())
}

fn matches_sel(
    ns: &str,
    sel: &autoscaler_core::Requirements,
    pod_ns: &str,
    labels: &Labels,
) -> bool {
    ns == pod_ns && sel.matches(labels)
}

impl Topology {
    /// Gathers the facts `pod`'s constraints need from every registered node of `cluster`.
    pub fn of(view: View, pod: &Pod) -> Topology {
        let hard: Vec<_> = pod.spread.iter().filter(|s| s.hard).collect();
        let mut t = Topology {
            spread: vec![BTreeMap::new(); hard.len()],
            affinity: vec![(BTreeSet::new(), false); pod.affinity.len()],
            anti: vec![BTreeSet::new(); pod.anti_affinity.len()],
            forbidden: BTreeSet::new(),
        };
        for ni in view.live {
            let n = view.node(*ni);
            if !n.registered() {
                continue;
            }
            let eligible = pod.node_selector.matches(&n.labels);
            for (ci, c) in hard.iter().enumerate() {
                if let (true, Some(d)) =
                    (counts_node(c, pod, eligible, n), domain(n, &c.topology_key))
                {
                    t.spread[ci].entry(d.to_string()).or_insert(0);
                }
            }
            for pid in &n.pods {
                t.count(pod, &hard, eligible, n, view.pod(*pid));
            }
        }
        t
    }

    /// Takes in pod `other`, just bound to registered node `node`: what [`Topology::of`]
    /// would have found had it been there. A scheduling pass keeps one topology per pod
    /// template up to date this way instead of walking every pod of the cluster again for
    /// each pending pod (quadratic: 2,000 replicas of a zone-spread Deployment took 3.5 s).
    pub fn add_bound(&mut self, pod: &Pod, node: &NodeState, other: &Pod) {
        let hard: Vec<_> = pod.spread.iter().filter(|s| s.hard).collect();
        let eligible = pod.node_selector.matches(&node.labels);
        self.count(pod, &hard, eligible, node, other);
    }

    /// Counts pod `other` on node `n` into the facts of `pod` (`hard`: its hard spread
    /// constraints; `eligible`: whether its node selection matches `n`).
    fn count(
        &mut self,
        pod: &Pod,
        hard: &[&autoscaler_core::model::TopologySpread],
        eligible: bool,
        n: &NodeState,
        other: &Pod,
    ) {
        let ns = &pod.key.namespace;
        for (ci, c) in hard.iter().enumerate() {
            if let (true, Some(d)) = (counts_node(c, pod, eligible, n), domain(n, &c.topology_key))
                && matches_sel(ns, &c.selector, &other.key.namespace, &other.labels)
            {
                *self.spread[ci].entry(d.to_string()).or_insert(0) += 1;
            }
        }
        for (ci, term) in pod.affinity.iter().enumerate() {
            if term.selects(ns, &other.key.namespace, &other.labels) {
                self.affinity[ci].1 = true;
                if let Some(d) = domain(n, &term.topology_key) {
                    self.affinity[ci].0.insert(d.to_string());
                }
            }
        }
        for (ci, term) in pod.anti_affinity.iter().enumerate() {
            if term.selects(ns, &other.key.namespace, &other.labels)
                && let Some(d) = domain(n, &term.topology_key)
            {
                self.anti[ci].insert(d.to_string());
            }
        }
        for term in &other.anti_affinity {
            if term.selects(&other.key.namespace, ns, &pod.labels)
                && let Some(d) = domain(n, &term.topology_key)
            {
                self.forbidden
                    .insert((term.topology_key.clone(), d.to_string()));
            }
        }
    }

    fn check(&self, pod: &Pod, node: &NodeState) -> Result<(), Unfit> {
        let hard: Vec<_> = pod.spread.iter().filter(|s| s.hard).collect();
        for (ci, c) in hard.iter().enumerate() {
            let Some(d) = domain(node, &c.topology_key) else {
                return Err(Unfit::Spread(c.topology_key.clone()));
            };
            let counts = &self.spread[ci];
            let min = counts.values().copied().min().unwrap_or(0);
            let here = counts.get(d).copied().unwrap_or(0);
            let selfmatch = u32::from(c.selector.matches(&pod.labels));
            if here + selfmatch > min + c.max_skew {
                return Err(Unfit::Spread(c.topology_key.clone()));
            }
        }
        for (ci, term) in pod.affinity.iter().enumerate() {
            let (domains, any) = &self.affinity[ci];
            let ok = match domain(node, &term.topology_key) {
                None => false,
                Some(d) => {
                    domains.contains(d)
                        || (!any
                            && term.selects(&pod.key.namespace, &pod.key.namespace, &pod.labels))
                }
            };
            if !ok {
                return Err(Unfit::Affinity);
            }
        }
        for (ci, term) in pod.anti_affinity.iter().enumerate() {
            if let Some(d) = domain(node, &term.topology_key)
                && self.anti[ci].contains(d)
            {
                return Err(Unfit::AntiAffinity);
            }
        }
        for (key, d) in &self.forbidden {
            if domain(node, key) == Some(d.as_str()) {
                return Err(Unfit::AntiAffinity);
            }
        }
        Ok(())
    }
}

/// Whether a pod has constraints that depend on other pods' placement.
pub fn has_topology(pod: &Pod) -> bool {
    pod.spread.iter().any(|s| s.hard) || !pod.affinity.is_empty() || !pod.anti_affinity.is_empty()
}

/// Runs every filter; `Ok` carries the GPU units the pod would take.
pub fn filter(pod: &Pod, node: &NodeState, topo: Option<&Topology>) -> Result<Vec<usize>, Unfit> {
    filter_cheap(pod, node, topo, false).map_err(|r| match r {
        Reject::Unschedulable => Unfit::Unschedulable,
        Reject::Taint(t) => Unfit::Taint(t.to_string()),
        Reject::Selector => Unfit::Selector,
        Reject::Resource(k) => Unfit::Resource(k.to_string()),
        Reject::Topology(u) => u,
    })
}

/// Why [`filter_cheap`] rejected a node, borrowed rather than formatted: most rejections are
/// never shown to anyone.
enum Reject<'a> {
    Unschedulable,
    Taint(&'a Taint),
    Selector,
    Resource(&'a str),
    Topology(Unfit),
}

/// The filters in their order; `selector_known` skips NodeAffinity for nodes the caller has
/// already matched against the pod's selector.
fn filter_cheap<'a>(
    pod: &'a Pod,
    node: &'a NodeState,
    topo: Option<&Topology>,
    selector_known: bool,
) -> Result<Vec<usize>, Reject<'a>> {
    if !node.registered() || node.cordoned || node.deleting {
        return Err(Reject::Unschedulable);
    }
    if let Some(t) = untolerated(&pod.tolerations, &node.taints) {
        return Err(Reject::Taint(t));
    }
    if !selector_known && !pod.node_selector.matches(&node.labels) {
        return Err(Reject::Selector);
    }
    let devices = fit_units(pod, node).map_err(Reject::Resource)?;
    if let Some(t) = topo {
        t.check(pod, node).map_err(Reject::Topology)?;
    }
    Ok(devices)
}

fn ratio(used: i64, req: i64, alloc: i64) -> f64 {
    if alloc <= 0 {
        return 0.0;
    }
    ((used + req) as f64 / alloc as f64).clamp(0.0, 1.0)
}

/// Score of a feasible node, higher is better.
pub fn score(pod: &Pod, node: &NodeState, strategy: ScoreStrategy) -> f64 {
    // Summed in the order cpu, memory, GPU, without a list: this runs for every feasible node
    // of every scheduling attempt.
    let mut sum = ratio(node.used.cpu, pod.requests.cpu, node.allocatable.cpu)
        + ratio(
            node.used.memory,
            pod.requests.memory,
            node.allocatable.memory,
        );
    let mut parts = 2.0;
    let gpu_req = pod.requests.get(names::NVIDIA_GPU) * 1000
        + pod.gpu_share.as_ref().map_or(0, |s| i64::from(s.milli));
    if gpu_req > 0 {
        let used: i64 = node.devices.iter().map(|d| i64::from(*d)).sum();
        sum += ratio(used, gpu_req, node.alloc_get(names::NVIDIA_GPU) * 1000);
        parts = 3.0;
    }
    let avg = sum / parts;
    match strategy {
        ScoreStrategy::LeastAllocated => 1.0 - avg,
        ScoreStrategy::MostAllocated => avg,
    }
}

/// The best feasible node among `nodes` for `pod`, with the GPU units it would take.
pub fn best_node(
    view: View,
    pod: &Pod,
    nodes: &[NodeId],
    strategy: ScoreStrategy,
) -> Option<(NodeId, Vec<usize>)> {
    let topo = needs_topology(view, pod).then(|| Topology::of(view, pod));
    best_of(
        view,
        pod,
        nodes.iter().copied(),
        strategy,
        false,
        topo.as_ref(),
    )
}

/// Whether placing `pod` in `view` depends on other pods: its own spread or (anti-)affinity,
/// or a bound pod's anti-affinity.
pub fn needs_topology(view: View, pod: &Pod) -> bool {
    has_topology(pod) || view.any_anti
}

fn best_of(
    view: View,
    pod: &Pod,
    nodes: impl Iterator<Item = NodeId>,
    strategy: ScoreStrategy,
    selector_known: bool,
    topo: Option<&Topology>,
) -> Option<(NodeId, Vec<usize>)> {
    let mut best: Option<(f64, NodeId, Vec<usize>)> = None;
    for ni in nodes {
        let n = view.node(ni);
        // Most nodes of a busy cluster are too full: asking for the cpu and memory first skips
        // the taint and device checks on them (the filters' answer is the same either way).
        if short_of_cpu_or_memory(pod, n) {
            continue;
        }
        let Ok(devices) = filter_cheap(pod, n, topo, selector_known) else {
            continue;
        };
        let s = score(pod, n, strategy);
        if best.as_ref().is_none_or(|(bs, _, _)| s > *bs + 1e-12) {
            best = Some((s, ni, devices));
        }
    }
    best.map(|(_, n, d)| (n, d))
}

/// Whether the node lacks the cpu or memory `pod` requests ([`fit_units`] would say so too).
fn short_of_cpu_or_memory(pod: &Pod, node: &NodeState) -> bool {
    let (r, a, u) = (&pod.requests, &node.allocatable, &node.used);
    (r.cpu != 0 && r.cpu > a.cpu - u.cpu) || (r.memory != 0 && r.memory > a.memory - u.memory)
}

/// Per pod template, whether each node matches the template's node selector and required
/// node affinity. Both sides are fixed (templates are immutable and node labels are set at
/// launch), so the answer is computed once per pair instead of at every scheduling attempt.
/// It also lends the what-if questions ([`unplaced`]) one scratch overlay, reset between
/// questions rather than allocated for each.
#[derive(Clone, Debug, Default)]
pub struct SelectorCache {
    /// Per template, per node id: 0 not known yet, 1 matches, 2 does not.
    known: Vec<Vec<u8>>,
    /// The overlay [`unplaced`] borrows.
    spare: Scratch,
}

impl SelectorCache {
    /// The best node for `pod` (of template `template`) among the nodes of `nodes` it
    /// selects, with the GPU units it would take: [`best_node`] with the selector answered
    /// from memory.
    pub fn best_node(
        &mut self,
        view: View,
        template: u32,
        pod: &Pod,
        nodes: impl IntoIterator<Item = NodeId>,
        strategy: ScoreStrategy,
    ) -> Option<(NodeId, Vec<usize>)> {
        let topo = needs_topology(view, pod).then(|| Topology::of(view, pod));
        self.best_node_in(view, template, pod, nodes, strategy, topo.as_ref())
    }

    /// [`SelectorCache::best_node`] with the pod's topology facts given (`None` when it needs
    /// none; see [`needs_topology`]), as a scheduling pass keeps them per template.
    pub fn best_node_in(
        &mut self,
        view: View,
        template: u32,
        pod: &Pod,
        nodes: impl IntoIterator<Item = NodeId>,
        strategy: ScoreStrategy,
        topo: Option<&Topology>,
    ) -> Option<(NodeId, Vec<usize>)> {
        let t = template as usize;
        if self.known.len() <= t {
            self.known.resize(t + 1, Vec::new());
        }
        let known = &mut self.known[t];
        if known.len() < view.nodes.len() {
            known.resize(view.nodes.len(), 0);
        }
        let selected = nodes.into_iter().filter(|&n| {
            if known[n] == 0 {
                known[n] = if pod.node_selector.matches(&view.nodes[n].labels) {
                    1
                } else {
                    2
                };
            }
            known[n] == 1
        });
        best_of(view, pod, selected, strategy, true, topo)
    }
}

/// Takes the capacity of the booked phantoms on `nodes` in `scratch`, except those of request
/// `except` (its own pods may use its booking). GPU units are taken only where the phantom
/// fits them (once the device plugin is up); the rest of its requests at once.
pub fn reserve_bookings(
    cluster: &Cluster,
    scratch: &mut Scratch,
    nodes: impl Iterator<Item = NodeId>,
    except: Option<u32>,
) {
    for n in nodes {
        for (g, pod) in &cluster.nodes[n].held {
            if Some(*g) == except {
                continue;
            }
            let copy = scratch.node_mut(&cluster.nodes, n);
            let devices = fit_resources(pod, copy).unwrap_or_default();
            reserve(copy, pod, &devices);
        }
    }
}

/// Adds a what-if placement to a scratch node.
pub fn place_what_if(n: &mut NodeState, pod: &Pod, id: PodId, devices: &[usize]) {
    reserve(n, pod, devices);
    n.pods.push(id);
}

/// Takes a pod's requests (and the GPU units `devices`) on a scratch node without listing the
/// pod on it: booked capacity, held for pods that do not exist yet.
pub fn reserve(n: &mut NodeState, pod: &Pod, devices: &[usize]) {
    let mut req = pod.requests.clone();
    req.set(names::NVIDIA_GPU, 0);
    let share = pod.gpu_share.as_ref().map(|s| s.milli);
    n.used.add(&req);
    if !pod.claims.is_empty()
        && let Some(t) = crate::dra::allocate(pod, &n.dra)
    {
        n.dra.mark(&t, true);
    }
    for d in devices {
        n.devices[*d] += match share {
            Some(m) if devices.len() == 1 && pod.requests.get(names::NVIDIA_GPU) == 0 => m,
            _ => 1000,
        };
    }
}

/// Whether every pod bound to the `removed` nodes could be re-placed on `targets`, binding them
/// one by one on scratch copies of the nodes involved, largest first: the "would the scheduler
/// find room" question the baselines' scale-down asks. `selectors` remembers which nodes each
/// pod template selects, across calls.
pub fn can_move(
    cluster: &Cluster,
    removed: &[NodeId],
    targets: &[NodeId],
    strategy: ScoreStrategy,
    selectors: &mut SelectorCache,
) -> bool {
    unplaced(cluster, removed, targets, strategy, selectors, true).is_empty()
}

/// The pods of the `removed` nodes the scheduler would not place on `targets` (each pod where
/// it scores best, largest first); with `first_only`, stops at the first such pod.
pub fn unplaced(
    cluster: &Cluster,
    removed: &[NodeId],
    targets: &[NodeId],
    strategy: ScoreStrategy,
    selectors: &mut SelectorCache,
    first_only: bool,
) -> Vec<PodId> {
    // The overlay is lent by the memo, so that its allocations serve every question.
    let mut spare = std::mem::take(&mut selectors.spare);
    spare.reset(cluster.nodes.len());
    let scratch = &mut spare;
    // A node is live exactly while it is not gone: asking the node is a read, asking the
    // set of live nodes a search per target, which was a tenth of a consolidation's cost.
    let live = |n: &NodeId| cluster.nodes.get(*n).is_some_and(NodeState::alive);
    let targets: Vec<NodeId> = targets.iter().copied().filter(live).collect();
    let mut order: Vec<PodId> = Vec::new();
    for &r in removed.iter().filter(|n| live(n)) {
        let copy = scratch.node_mut(&cluster.nodes, r);
        order.extend(copy.pods.iter().copied());
        copy.pods.clear();
    }
    // Keys built once (the GPU count is a map lookup); each includes the pod id, so the order
    // is total and the sort's stability does not matter.
    let mut keyed: Vec<_> = order
        .iter()
        .map(|&p| {
            let r = &cluster.pod(p).requests;
            (
                std::cmp::Reverse(r.get(names::NVIDIA_GPU)),
                std::cmp::Reverse(r.cpu),
                std::cmp::Reverse(r.memory),
                p,
            )
        })
        .collect();
    keyed.sort_unstable();
    // The cpu and memory each target has free, side by side: most targets of a busy cluster
    // are too full for the pod at hand, and reading two numbers per node to say so is much
    // cheaper than reading the node.
    let free_of = |n: &NodeState| {
        (
            n.allocatable.cpu - n.used.cpu,
            n.allocatable.memory - n.used.memory,
        )
    };
    let mut free: Vec<(i64, i64)> = {
        let view = View {
            scratch: Some(scratch),
            ..View::of(cluster)
        };
        targets.iter().map(|&n| free_of(view.node(n))).collect()
    };
    let mut left = Vec::new();
    for (_, _, _, p) in keyed {
        let pod = cluster.pod(p);
        let view = View {
            scratch: Some(scratch),
            ..View::of(cluster)
        };
        let (cpu, memory) = (pod.requests.cpu, pod.requests.memory);
        let roomy = targets
            .iter()
            .zip(&free)
            .filter(|(_, (c, m))| (cpu == 0 || cpu <= *c) && (memory == 0 || memory <= *m))
            .map(|(n, _)| *n);
        match selectors.best_node(view, cluster.template_of[p], pod, roomy, strategy) {
            Some((ni, devices)) => {
                let copy = scratch.node_mut(&cluster.nodes, ni);
                place_what_if(copy, pod, p, &devices);
                if let Some(i) = targets.iter().position(|t| *t == ni) {
                    free[i] = free_of(copy);
                }
            }
            None => {
                left.push(p);
                if first_only {
                    break;
                }
            }
        }
    }
    selectors.spare = spare;
    left
}

#[cfg(test)]
mod tests;
