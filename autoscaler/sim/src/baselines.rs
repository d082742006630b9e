//! Baseline policies: documented *models* of Karpenter and of the Cluster Autoscaler, written
//! from their public documentation, for comparison. They are not those projects' code, and the
//! report says so.
//!
//! **karpenter-like** — provisioning: pending pods (minus those nominated to nodes in flight)
//! sorted by cpu then memory, largest first, placed first-fit on in-flight nodes, then on the
//! NodeClaims opened in this batch, then on a new NodeClaim in the highest-weight NodePool that
//! can take the pod; a NodeClaim keeps every (instance type, offering) that fits all its pods
//! and launches the cheapest first. A fractional GPU share counts as one whole GPU (Karpenter
//! knows only extended-resource counts); gangs get no special treatment. Disruption: empty
//! nodes past `consolidateAfter` (since the last pod change) are deleted; otherwise one
//! under-used node at a time is deleted when the scheduler finds room for its pods elsewhere,
//! or replaced by a strictly cheaper single node (price only; no utilization threshold, no GPU
//! awareness). Budgets, PDBs and do-not-disrupt are honoured.
//!
//! **ca-like** — fixed node groups, one per (NodePool, instance type) with the type's cheapest
//! allowed offering. Scale-up: for every group, the pending pods (minus nominated ones) that
//! fit its template are packed first-fit-decreasing onto fresh nodes; the least-waste expander
//! picks the group whose new nodes waste the least cpu and memory (GPUs are not part of the
//! score, as in the Cluster Autoscaler's least-waste expander) and that group grows by the
//! nodes needed; one group per loop. Scale-down: a node whose utilization (GPU nodes on GPU,
//! others on max(cpu, memory)) is below the NodePool's threshold and whose pods the scheduler
//! can place elsewhere is unneeded; after the NodePool's unneeded time (10 minutes by
//! default) it is removed, empty nodes in bulk and others one per loop, with no scale-down for
//! `scaleDownDelayAfterAdd` after a scale-up. ProvisioningRequests, as the Cluster Autoscaler
//! serves them: the request's pods are placed by the scheduler's rules on Ready nodes (other
//! bookings held); check-capacity is answered from that alone, best-effort-atomic scales up one
//! node group for all the pods left, or for none.
//!
//! karpenter-like has no ProvisioningRequest support: the model is of a cluster where Kueue runs
//! without the ProvisioningRequest admission check, so a request's pods are created at its
//! arrival and provisioned for as an ordinary gang (its report says "not served").

use std::collections::{BTreeMap, HashMap};

use autoscaler_core::disruption::pod_blocker;
use autoscaler_core::model::{BudgetValue, ConsolidationPolicy, Pod, Pool, Snapshot};
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::{Resources, is_gpu_class, names};
use autoscaler_core::taints::Taint;
use autoscaler_core::{CapacityType, labels};
use providers::{OfferingKey, UnavailableOfferings};

use crate::cluster::{Cluster, NodeId, NodePhase, NodeState, PodId};
use crate::policy::{Ctx, Decision, LaunchSpec, Policy, RequestAnswer, RequestAsk, disruptable};
use crate::scenario::{ProvReqClass, ScoreStrategy, type_in_pool};
use crate::scheduler::{self, Scratch, SelectorCache, View, untolerated};

/// An instance type as a node of one pool would be: what the baselines pack against and what
/// the engine builds nodes from.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Pool index.
    pub pool: usize,
    /// Instance type name.
    pub name: String,
    /// Node labels (type, sharing, pool), without zone, capacity type or hostname.
    pub labels: Labels,
    /// Pool taints.
    pub taints: Vec<Taint>,
    /// Allocatable with sharing applied (DaemonSet pods not subtracted).
    pub allocatable: Resources,
    /// DaemonSet requests on such a node.
    pub ds_overhead: Resources,
    /// Capacity with sharing applied (for limits).
    pub capacity: Resources,
    /// Allowed offerings (zone, capacity type, price), cheapest first.
    pub offerings: Vec<(String, CapacityType, f64)>,
    /// Node labels per offering (zone and capacity type added), computed once because
    /// selector checks against them are the baselines' hottest path.
    pub offering_labels: Vec<Labels>,
    /// Physical GPUs.
    pub gpus: u32,
}

/// Every (pool, instance type) shape of a scenario.
pub fn build_shapes(pools: &[Pool], daemonsets: &[autoscaler_core::DaemonSet]) -> Vec<Shape> {
    let mut out = Vec::new();
    for (pi, pool) in pools.iter().enumerate() {
        for it in pool.instance_types.iter() {
            let Some(shared) = type_in_pool(it, pool) else {
                continue;
            };
            let zc = pool.requirements.get(labels::ZONE);
            let cc = pool.requirements.get(labels::CAPACITY_TYPE);
            let mut offerings: Vec<(String, CapacityType, f64)> = shared
                .offerings
                .iter()
                .filter(|o| {
                    zc.is_none_or(|c| c.matches(Some(&o.zone)))
                        && cc.is_none_or(|c| c.matches(Some(o.capacity_type.as_str())))
                })
                .map(|o| (o.zone.clone(), o.capacity_type, o.price))
                .collect();
            offerings.sort_by(|a, b| a.2.total_cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
            let all_taints: Vec<Taint> = pool
                .taints
                .iter()
                .chain(&pool.startup_taints)
                .cloned()
                .collect();
            let mut ds_overhead = Resources::new();
            for ds in daemonsets {
                if ds.node_selector.matches(&shared.labels)
                    && untolerated(&ds.tolerations, &all_taints).is_none()
                {
                    ds_overhead.add(&ds.requests);
                }
            }
            let offering_labels = offerings
                .iter()
                .map(|(z, ct, _)| {
                    let mut l = shared.labels.clone();
                    l.insert(labels::ZONE.into(), z.clone());
                    l.insert(labels::CAPACITY_TYPE.into(), ct.as_str().into());
                    l
                })
                .collect();
            out.push(Shape {
                offering_labels,
                pool: pi,
                name: shared.name.clone(),
                labels: shared.labels.clone(),
                taints: pool.taints.clone(),
                allocatable: shared.allocatable(),
                ds_overhead,
                capacity: shared.capacity.clone(),
                offerings,
                gpus: shared.gpu_count(),
            });
        }
    }
    out
}

/// A pod's demand on a fresh node of a baseline: a fractional share counts as a whole device.
fn whole_demand(pod: &Pod) -> Resources {
    let mut r = pod.requests.clone();
    if let Some(s) = &pod.gpu_share {
        let cur = r.get(&s.resource);
        r.set(&s.resource, cur + 1);
    }
    r
}

/// Whether the pod may run on a node of `shape` bought as its offering `o` (labels, taints).
fn pod_allows(pod: &Pod, shape: &Shape, o: usize) -> bool {
    untolerated(&pod.tolerations, &shape.taints).is_none()
        && pod.node_selector.matches(&shape.offering_labels[o])
}

/// An open NodeClaim of a baseline: its pods and the (shape, offering) pairs still fitting.
#[derive(Clone, Debug)]
struct Bin {
    pool: usize,
    used: Resources,
    options: Vec<(usize, usize, f64)>,
    pods: Vec<PodId>,
}

fn available(
    shapes: &[Shape],
    unavailable: &UnavailableOfferings,
    s: usize,
    o: usize,
    now: i64,
) -> bool {
    let (z, ct, _) = &shapes[s].offerings[o];
    !unavailable.is_unavailable(&OfferingKey::new(&shapes[s].name, z, *ct), now)
}

/// Per pool: (nodes, capacity) of live nodes, for limits.
fn pool_usage(ctx: &Ctx, shapes: &[Shape]) -> Vec<(i64, Resources)> {
    let mut u = vec![(0i64, Resources::new()); ctx.pools.len()];
    for ni in &ctx.cluster.live_nodes {
        let n = &ctx.cluster.nodes[*ni];
        u[n.pool].0 += 1;
        if let Some(s) = shapes
            .iter()
            .find(|s| s.pool == n.pool && s.name == n.instance_type)
        {
            u[n.pool].1.add(&s.capacity);
        }
    }
    u
}

fn within_limits(pool: &Pool, usage: &(i64, Resources), shape: &Shape) -> bool {
    if pool.limits.nodes.is_some_and(|max| usage.0 + 1 > max) {
        return false;
    }
    pool.limits
        .resources
        .iter()
        .all(|(k, max)| usage.1.get(k) + shape.capacity.get(k) <= *max)
}

fn pools_by_weight(pools: &[Pool]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pools.len()).collect();
    order.sort_by(|a, b| {
        pools[*b]
            .weight
            .cmp(&pools[*a].weight)
            .then_with(|| pools[*a].name.cmp(&pools[*b].name))
    });
    order
}

/// Pending pods a baseline should provision for: not nominated to a node in flight, not
/// waiting for booked capacity.
fn unhelped(ctx: &Ctx) -> Vec<PodId> {
    ctx.cluster
        .pending
        .iter()
        .copied()
        .filter(|p| !ctx.nominated.contains_key(p) && !consumes_booking(ctx, *p))
        .collect()
}

/// Whether a pending pod belongs to a ProvisioningRequest whose booking is live (it waits for
/// that capacity and is never provisioned for again).
fn consumes_booking(ctx: &Ctx, p: PodId) -> bool {
    ctx.workload.pods[p]
        .group
        .is_some_and(|g| ctx.cluster.live_bookings.contains(&g))
}

/// The disruption budget left per pool: the tightest budget minus nodes being deleted.
fn budgets_left(ctx: &Ctx) -> Vec<i64> {
    ctx.pools
        .iter()
        .enumerate()
        .map(|(pi, pool)| {
            let nodes: Vec<&NodeState> = ctx
                .cluster
                .live_nodes
                .iter()
                .map(|n| &ctx.cluster.nodes[*n])
                .filter(|n| n.pool == pi && n.registered())
                .collect();
            let total = nodes.len() as i64;
            let deleting = nodes.iter().filter(|n| n.deleting).count() as i64;
            let allowed = pool
                .disruption
                .budgets
                .iter()
                .map(|b| match b.nodes {
                    BudgetValue::Count(n) => i64::from(n),
                    BudgetValue::Percent(p) => (total * i64::from(p) + 99) / 100,
                })
                .min()
                .unwrap_or(i64::MAX);
            let above_min = total - deleting - i64::from(pool.min_nodes);
            (allowed - deleting).min(above_min)
        })
        .collect()
}

/// Why a node may not be disrupted by a baseline (the same safety rules as the core: PDBs,
/// do-not-disrupt, safe-to-evict, controller-less pods, booked capacity).
fn blocked(ctx: &Ctx, snap: &Snapshot, n: NodeId, now: i64) -> bool {
    let node = &ctx.cluster.nodes[n];
    if snap.booked_nodes.contains(&node.name) {
        return true;
    }
    if node
        .pods
        .iter()
        .any(|p| pod_blocker(ctx.cluster.pod(*p), snap, now).is_some())
    {
        return true;
    }
    // Evicting every pod of the node at once must stay within each PDB's allowance.
    snap.pdbs.iter().any(|b| {
        let used = node
            .pods
            .iter()
            .map(|p| ctx.cluster.pod(*p))
            .filter(|p| p.key.namespace == b.namespace && b.selector.matches(&p.labels))
            .count() as i32;
        used > b.disruptions_allowed
    })
}

fn pdb_snapshot(ctx: &Ctx) -> Snapshot {
    let mut snap = Snapshot {
        pdbs: ctx.cluster.pdbs(ctx.workload),
        ..Default::default()
    };
    for ni in &ctx.cluster.live_nodes {
        let n = &ctx.cluster.nodes[*ni];
        if n.registered() && !n.held.is_empty() {
            snap.booked_nodes.insert(n.name.clone());
        }
    }
    snap
}

/// Ready, schedulable nodes other than `except`, booked ones left out (their capacity is
/// held for a ProvisioningRequest's pods).
fn targets(cluster: &Cluster, except: &[NodeId]) -> Vec<NodeId> {
    cluster
        .live_nodes
        .iter()
        .copied()
        .filter(|n| {
            let node = &cluster.nodes[*n];
            node.phase == NodePhase::Ready
                && !node.deleting
                && !node.cordoned
                && node.held.is_empty()
                && !except.contains(n)
        })
        .collect()
}

fn movable_pods(cluster: &Cluster, n: NodeId) -> Vec<PodId> {
    cluster.nodes[n].pods.clone()
}

/// Packs `pods` into new bins (first-fit over existing bins, then a new bin in the first pool
/// of `pool_order` with an option for the pod). Returns the bins and the pods no shape fits.
#[allow(clippy::too_many_arguments)]
fn pack(
    ctx: &Ctx,
    shapes: &[Shape],
    unavailable: &UnavailableOfferings,
    pods: &[PodId],
    now: i64,
    usage: &mut [(i64, Resources)],
    bins: &mut Vec<Bin>,
) -> Vec<PodId> {
    let order = pools_by_weight(ctx.pools);
    let mut left = Vec::new();
    for &p in pods {
        let pod = ctx.cluster.pod(p);
        let d = whole_demand(pod);
        let mut placed = false;
        for b in bins.iter_mut() {
            let used = b.used.plus(&d);
            let opts: Vec<(usize, usize, f64)> = b
                .options
                .iter()
                .copied()
                .filter(|(s, o, _)| {
                    let sh = &shapes[*s];
                    pod_allows(pod, sh, *o) && used.fits(&sh.allocatable.minus(&sh.ds_overhead))
                })
                .collect();
            if !opts.is_empty() {
                b.used = used;
                b.options = opts;
                b.pods.push(p);
                placed = true;
                break;
            }
        }
        if placed {
            continue;
        }
        for &pi in &order {
            let mut opts: Vec<(usize, usize, f64)> = Vec::new();
            for (si, sh) in shapes.iter().enumerate() {
                if sh.pool != pi
                    || !d.fits(&sh.allocatable.minus(&sh.ds_overhead))
                    || !within_limits(&ctx.pools[pi], &usage[pi], sh)
                {
                    continue;
                }
                for (oi, o) in sh.offerings.iter().enumerate() {
                    if available(shapes, unavailable, si, oi, now) && pod_allows(pod, sh, oi) {
                        opts.push((si, oi, o.2));
                    }
                }
            }
            if opts.is_empty() {
                continue;
            }
            opts.sort_by(|a, b| {
                a.2.total_cmp(&b.2)
                    .then_with(|| shapes[a.0].name.cmp(&shapes[b.0].name))
                    .then_with(|| a.1.cmp(&b.1))
            });
            let cheapest = opts[0].0;
            usage[pi].0 += 1;
            usage[pi].1.add(&shapes[cheapest].capacity);
            bins.push(Bin {
                pool: pi,
                used: d.clone(),
                options: opts,
                pods: vec![p],
            });
            placed = true;
            break;
        }
        if !placed {
            left.push(p);
        }
    }
    left
}

fn bin_spec(shapes: &[Shape], b: &Bin) -> LaunchSpec {
    let mut opts = b.options.clone();
    opts.sort_by(|a, b| a.2.total_cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
    LaunchSpec {
        pool: b.pool,
        candidates: opts
            .iter()
            .take(60)
            .map(|(s, o, _)| {
                let (z, ct, _) = &shapes[*s].offerings[*o];
                OfferingKey::new(&shapes[*s].name, z, *ct)
            })
            .collect(),
        pods: b.pods.clone(),
    }
}

/// Puts each pod, in the given order, on the first in-flight node with room that takes its
/// taints and selector; returns those nominations and the pods left for new nodes.
fn nominate_in_flight(
    ctx: &Ctx,
    shapes: &[Shape],
    pods: Vec<PodId>,
) -> (Vec<(PodId, NodeId)>, Vec<PodId>) {
    let mut room = in_flight_room(ctx, shapes);
    let mut noms = Vec::new();
    let mut rest = Vec::new();
    for p in pods {
        let pod = ctx.cluster.pod(p);
        let d = whole_demand(pod);
        let hit = room.iter_mut().find(|(n, r)| {
            let node = &ctx.cluster.nodes[*n];
            d.fits(r)
                && untolerated(&pod.tolerations, &node.taints).is_none()
                && pod.node_selector.matches(&node.labels)
        });
        match hit {
            Some((n, r)) => {
                r.sub(&d);
                noms.push((p, *n));
            }
            None => rest.push(p),
        }
    }
    (noms, rest)
}

/// Room left on in-flight nodes (requests of bound, nominated and booked pods subtracted).
fn in_flight_room(ctx: &Ctx, shapes: &[Shape]) -> Vec<(NodeId, Resources)> {
    let mut room: BTreeMap<NodeId, Resources> = BTreeMap::new();
    for ni in &ctx.cluster.live_nodes {
        let n = &ctx.cluster.nodes[*ni];
        if n.phase == NodePhase::Ready || n.deleting {
            continue;
        }
        let Some(sh) = shapes
            .iter()
            .find(|s| s.pool == n.pool && s.name == n.instance_type)
        else {
            continue;
        };
        let mut r = sh.allocatable.minus(&sh.ds_overhead);
        for p in &n.pods {
            r.sub(&whole_demand(ctx.cluster.pod(*p)));
        }
        // Capacity booked for a ProvisioningRequest is not room.
        for (_, p) in &n.held {
            r.sub(&whole_demand(p));
        }
        room.insert(*ni, r);
    }
    for (p, n) in ctx.nominated {
        if let Some(r) = room.get_mut(n)
            && ctx.cluster.pending.contains(p)
        {
            r.sub(&whole_demand(ctx.cluster.pod(*p)));
        }
    }
    room.into_iter().collect()
}

/// The karpenter-like baseline (see the module documentation).
pub struct KarpenterLike {
    shapes: Vec<Shape>,
    score: ScoreStrategy,
    selectors: SelectorCache,
}

impl KarpenterLike {
    /// A policy packing against `shapes`.
    pub fn new(shapes: Vec<Shape>, score: ScoreStrategy) -> Self {
        KarpenterLike {
            shapes,
            score,
            selectors: SelectorCache::default(),
        }
    }
}

fn node_pods_fit_new(
    ctx: &Ctx,
    shapes: &[Shape],
    unavailable: &UnavailableOfferings,
    n: NodeId,
    now: i64,
) -> Option<(usize, usize, f64)> {
    let node = &ctx.cluster.nodes[n];
    let pods = movable_pods(ctx.cluster, n);
    let mut total = Resources::new();
    for p in &pods {
        total.add(&whole_demand(ctx.cluster.pod(*p)));
    }
    let mut best: Option<(usize, usize, f64)> = None;
    for (si, sh) in shapes.iter().enumerate() {
        if sh.pool != node.pool || !total.fits(&sh.allocatable.minus(&sh.ds_overhead)) {
            continue;
        }
        for (oi, o) in sh.offerings.iter().enumerate() {
            if !available(shapes, unavailable, si, oi, now)
                || !pods.iter().all(|p| pod_allows(ctx.cluster.pod(*p), sh, oi))
            {
                continue;
            }
            if best.is_none_or(|b| o.2 < b.2) {
                best = Some((si, oi, o.2));
            }
        }
    }
    best.filter(|b| b.2 < node.price)
}

impl Policy for KarpenterLike {
    fn name(&self) -> &'static str {
        "karpenter-like"
    }

    fn description(&self) -> &'static str {
        "a model of Karpenter from its documentation: first-fit-decreasing by cpu then memory, \
         cheapest instance type that fits, price-only consolidation, no GPU-utilization \
         threshold; no ProvisioningRequest support (Kueue without the admission check: a \
         request's pods are created at once, as a plain gang)"
    }

    fn provision(&mut self, ctx: &Ctx, now: i64) -> (Vec<LaunchSpec>, Vec<(PodId, NodeId)>) {
        let mut pods = unhelped(ctx);
        pods.sort_by_key(|p| {
            let r = &ctx.cluster.pod(*p).requests;
            (std::cmp::Reverse(r.cpu), std::cmp::Reverse(r.memory), *p)
        });
        // In-flight nodes first.
        let (noms, rest) = nominate_in_flight(ctx, &self.shapes, pods);
        let mut usage = pool_usage(ctx, &self.shapes);
        let mut bins = Vec::new();
        pack(
            ctx,
            &self.shapes,
            ctx.unavailable,
            &rest,
            now,
            &mut usage,
            &mut bins,
        );
        (
            bins.iter().map(|b| bin_spec(&self.shapes, b)).collect(),
            noms,
        )
    }

    fn disrupt(&mut self, ctx: &Ctx, now: i64) -> (Vec<Decision>, i64) {
        let snap = pdb_snapshot(ctx);
        let mut left = budgets_left(ctx);
        let mut wake = i64::MAX;
        let mut empty = Vec::new();
        let mut busy = Vec::new();
        for &n in &ctx.cluster.live_nodes {
            if !disruptable(ctx.cluster, n) {
                continue;
            }
            let node = &ctx.cluster.nodes[n];
            let policy = &ctx.pools[node.pool].disruption;
            let ready_at = node
                .last_pod_change
                .saturating_add(policy.consolidate_after_s);
            if now < ready_at {
                wake = wake.min(ready_at);
                continue;
            }
            if blocked(ctx, &snap, n, now) {
                continue;
            }
            if node.pods.is_empty() {
                empty.push(n);
            } else if policy.consolidation_policy == ConsolidationPolicy::WhenEmptyOrUnderutilized {
                busy.push(n);
            }
        }
        let mut chosen = Vec::new();
        for n in empty {
            let pi = ctx.cluster.nodes[n].pool;
            if left[pi] > 0 {
                left[pi] -= 1;
                chosen.push(n);
            }
        }
        if !chosen.is_empty() {
            return (
                vec![Decision {
                    nodes: chosen,
                    replacement: None,
                    reason: "Empty delete".into(),
                    command: None,
                }],
                wake,
            );
        }
        busy.sort_by(|a, b| {
            let (na, nb) = (&ctx.cluster.nodes[*a], &ctx.cluster.nodes[*b]);
            na.pods
                .len()
                .cmp(&nb.pods.len())
                .then_with(|| nb.price.total_cmp(&na.price))
                .then_with(|| a.cmp(b))
        });
        for &n in busy.iter().take(10) {
            let pi = ctx.cluster.nodes[n].pool;
            if left[pi] <= 0 {
                continue;
            }
            let others = targets(ctx.cluster, &[n]);
            if scheduler::can_move(ctx.cluster, &[n], &others, self.score, &mut self.selectors) {
                return (
                    vec![Decision {
                        nodes: vec![n],
                        replacement: None,
                        reason: "Underutilized delete".into(),
                        command: None,
                    }],
                    wake,
                );
            }
            if let Some((s, o, _)) = node_pods_fit_new(ctx, &self.shapes, ctx.unavailable, n, now) {
                let (z, ct, _) = &self.shapes[s].offerings[o];
                return (
                    vec![Decision {
                        nodes: vec![n],
                        replacement: Some(LaunchSpec {
                            pool: pi,
                            candidates: vec![OfferingKey::new(&self.shapes[s].name, z, *ct)],
                            pods: vec![],
                        }),
                        reason: "Underutilized replace".into(),
                        command: None,
                    }],
                    wake,
                );
            }
        }
        (vec![], wake)
    }

    fn validate(&mut self, ctx: &Ctx, d: &Decision, now: i64) -> bool {
        let snap = pdb_snapshot(ctx);
        for &n in &d.nodes {
            if !disruptable(ctx.cluster, n) || blocked(ctx, &snap, n, now) {
                return false;
            }
        }
        if d.reason.starts_with("Empty") {
            return d
                .nodes
                .iter()
                .all(|n| ctx.cluster.nodes[*n].pods.is_empty());
        }
        let n = d.nodes[0];
        if d.replacement.is_none() {
            let others = targets(ctx.cluster, &d.nodes);
            return scheduler::can_move(
                ctx.cluster,
                &d.nodes,
                &others,
                self.score,
                &mut self.selectors,
            );
        }
        node_pods_fit_new(ctx, &self.shapes, ctx.unavailable, n, now).is_some()
    }

    fn on_scale_up(&mut self, _now: i64) {}

    fn on_delete(&mut self, _now: i64) {}
}

/// Utilization as the Cluster Autoscaler measures it (DaemonSet pods counted, as with its
/// default flags): GPU nodes on their GPU-class resources, others on max(cpu, memory).
pub fn ca_utilization(cluster: &Cluster, n: NodeId) -> f64 {
    let node = &cluster.nodes[n];
    let alloc = &node.allocatable;
    let gpu: Vec<&String> = alloc
        .extended
        .keys()
        .filter(|k| is_gpu_class(k) && alloc.get(k) > 0)
        .collect();
    if gpu.is_empty() {
        let cpu = node.used.cpu as f64 / alloc.cpu.max(1) as f64;
        let mem = node.used.memory as f64 / alloc.memory.max(1) as f64;
        return cpu.max(mem);
    }
    let mut best: f64 = 0.0;
    for k in gpu {
        let used = if k == names::NVIDIA_GPU {
            node.devices.iter().map(|d| f64::from(*d)).sum::<f64>() / 1000.0
        } else {
            node.used.get(k) as f64
        };
        best = best.max(used / alloc.get(k) as f64);
    }
    best
}

/// One node group's scale-up option, as the least-waste expander compares them.
struct CaOption {
    waste: f64,
    helped: usize,
    cost: f64,
    shape: usize,
    offering: usize,
    nodes: Vec<Vec<PodId>>,
}

impl CaOption {
    /// Least waste first, then more pods helped, then cheaper, then by type name.
    fn better_than(&self, other: &CaOption, shapes: &[Shape]) -> bool {
        self.waste
            .total_cmp(&other.waste)
            .then_with(|| other.helped.cmp(&self.helped))
            .then_with(|| self.cost.total_cmp(&other.cost))
            .then_with(|| shapes[self.shape].name.cmp(&shapes[other.shape].name))
            .is_lt()
    }
}

/// The ca-like baseline (see the module documentation).
pub struct CaLike {
    shapes: Vec<Shape>,
    score: ScoreStrategy,
    unneeded_since: HashMap<NodeId, i64>,
    last_scale_up: Option<i64>,
    delay_after_add: i64,
    selectors: SelectorCache,
}

impl CaLike {
    /// A policy whose node groups are `shapes`.
    pub fn new(shapes: Vec<Shape>, score: ScoreStrategy, delay_after_add: i64) -> Self {
        CaLike {
            shapes,
            score,
            unneeded_since: HashMap::new(),
            last_scale_up: None,
            delay_after_add,
            selectors: SelectorCache::default(),
        }
    }
}

impl CaLike {
    /// Per node group, `pods` packed first-fit-decreasing onto fresh nodes of its cheapest
    /// available offering; the least-waste expander's choice among them (among the groups
    /// that take every pod when `all`).
    fn best_group(
        &self,
        ctx: &Ctx,
        pods: &[(PodId, &Pod)],
        now: i64,
        all: bool,
    ) -> Option<CaOption> {
        let usage = pool_usage(ctx, &self.shapes);
        // One option per node group: its cheapest available offering; pack FFD.
        let mut best: Option<CaOption> = None;
        for (si, sh) in self.shapes.iter().enumerate() {
            let Some(oi) = (0..sh.offerings.len())
                .find(|oi| available(&self.shapes, ctx.unavailable, si, *oi, now))
            else {
                continue;
            };
            let o = &sh.offerings[oi];
            let cap = sh.allocatable.minus(&sh.ds_overhead);
            let pool = &ctx.pools[sh.pool];
            let mut nodes: Vec<(Resources, Vec<PodId>)> = Vec::new();
            let mut u = usage[sh.pool].clone();
            for &(p, pod) in pods {
                if !pod_allows(pod, sh, oi) {
                    continue;
                }
                let d = whole_demand(pod);
                if !d.fits(&cap) {
                    continue;
                }
                if let Some(slot) = nodes.iter_mut().find(|(used, _)| used.plus(&d).fits(&cap)) {
                    slot.0.add(&d);
                    slot.1.push(p);
                    continue;
                }
                if !within_limits(pool, &u, sh) || nodes.len() >= 200 {
                    continue;
                }
                u.0 += 1;
                u.1.add(&sh.capacity);
                nodes.push((d, vec![p]));
            }
            if nodes.is_empty() {
                continue;
            }
            let count = nodes.len() as f64;
            let cpu: i64 = nodes.iter().map(|n| n.0.cpu).sum();
            let mem: i64 = nodes.iter().map(|n| n.0.memory).sum();
            let waste = 1.0
                - (cpu as f64 / (count * cap.cpu.max(1) as f64)
                    + mem as f64 / (count * cap.memory.max(1) as f64))
                    / 2.0;
            let helped: usize = nodes.iter().map(|n| n.1.len()).sum();
            if all && helped < pods.len() {
                continue;
            }
            let option = CaOption {
                waste,
                helped,
                cost: o.2 * count,
                shape: si,
                offering: oi,
                nodes: nodes.into_iter().map(|n| n.1).collect(),
            };
            if best
                .as_ref()
                .is_none_or(|b| option.better_than(b, &self.shapes))
            {
                best = Some(option);
            }
        }
        best
    }

    /// The launches of a scale-up option: one node per packed bin.
    fn specs(&self, best: CaOption) -> Vec<LaunchSpec> {
        let sh = &self.shapes[best.shape];
        let (z, ct, _) = &sh.offerings[best.offering];
        best.nodes
            .into_iter()
            .map(|pods| LaunchSpec {
                pool: sh.pool,
                candidates: vec![OfferingKey::new(&sh.name, z, *ct)],
                pods,
            })
            .collect()
    }
}

impl Policy for CaLike {
    fn name(&self) -> &'static str {
        "ca-like"
    }

    fn description(&self) -> &'static str {
        "a model of the Cluster Autoscaler from its documentation: fixed node groups per \
         instance type, least-waste expander, threshold scale-down after the unneeded time \
         (10 min by default); ProvisioningRequests: check-capacity on Ready nodes, \
         best-effort-atomic as one node group's scale-up"
    }

    fn provision(&mut self, ctx: &Ctx, now: i64) -> (Vec<LaunchSpec>, Vec<(PodId, NodeId)>) {
        let mut pods = unhelped(ctx);
        pods.sort_by_key(|p| {
            let r = &ctx.cluster.pod(*p).requests;
            (
                std::cmp::Reverse(r.get(names::NVIDIA_GPU)),
                std::cmp::Reverse(r.cpu),
                std::cmp::Reverse(r.memory),
                *p,
            )
        });
        // Upcoming nodes absorb what they can (the autoscaler counts them as capacity).
        let (noms, rest) = nominate_in_flight(ctx, &self.shapes, pods);
        let rest: Vec<(PodId, &Pod)> = rest.iter().map(|p| (*p, ctx.cluster.pod(*p))).collect();
        let best = self.best_group(ctx, &rest, now, false);
        let specs = best.map(|b| self.specs(b)).unwrap_or_default();
        (specs, noms)
    }

    /// As the Cluster Autoscaler's ProvisioningRequest classes, within its node-group model:
    /// the pods are first placed by the scheduler's rules on Ready nodes (other bookings held);
    /// check-capacity stops there, best-effort-atomic scales up one node group for all the
    /// rest or for none of it.
    fn provision_request(&mut self, ctx: &Ctx, ask: &RequestAsk, now: i64) -> RequestAnswer {
        let cluster = ctx.cluster;
        let mut scratch = Scratch::new(cluster.nodes.len());
        scheduler::reserve_bookings(
            cluster,
            &mut scratch,
            cluster.live_nodes.iter().copied(),
            None,
        );
        let nodes: Vec<NodeId> = cluster
            .live_nodes
            .iter()
            .copied()
            .filter(|n| {
                let node = &cluster.nodes[*n];
                node.phase == NodePhase::Ready && !node.deleting && !node.cordoned
            })
            .collect();
        let mut order: Vec<&(PodId, Pod)> = ask.pods.iter().collect();
        order.sort_by_key(|(id, p)| {
            (
                std::cmp::Reverse(p.requests.get(names::NVIDIA_GPU)),
                std::cmp::Reverse(p.requests.cpu),
                std::cmp::Reverse(p.requests.memory),
                *id,
            )
        });
        let mut on: BTreeMap<NodeId, Vec<PodId>> = BTreeMap::new();
        let mut rest: Vec<(PodId, &Pod)> = Vec::new();
        for (id, pod) in order {
            let view = View {
                scratch: Some(&scratch),
                ..View::of(cluster)
            };
            match scheduler::best_node(view, pod, &nodes, self.score) {
                Some((n, devices)) => {
                    scheduler::reserve(scratch.node_mut(&cluster.nodes, n), pod, &devices);
                    on.entry(n).or_default().push(*id);
                }
                None => rest.push((*id, pod)),
            }
        }
        let on: Vec<(NodeId, Vec<PodId>)> = on.into_iter().collect();
        if rest.is_empty() {
            return RequestAnswer::Capacity { on, launch: vec![] };
        }
        if ask.class == ProvReqClass::CheckCapacity {
            return RequestAnswer::NoCapacity(format!(
                "{} of {} pods do not fit the existing nodes",
                rest.len(),
                ask.pods.len()
            ));
        }
        match self.best_group(ctx, &rest, now, true) {
            Some(b) => RequestAnswer::Capacity {
                on,
                launch: self.specs(b),
            },
            _ => RequestAnswer::NoCapacity(format!(
                "no node group can take all {} remaining pods",
                rest.len()
            )),
        }
    }

    fn disrupt(&mut self, ctx: &Ctx, now: i64) -> (Vec<Decision>, i64) {
        if let Some(t) = self.last_scale_up
            && now < t + self.delay_after_add
        {
            return (vec![], t + self.delay_after_add);
        }
        let snap = pdb_snapshot(ctx);
        let mut wake = i64::MAX;
        let mut still = HashMap::new();
        let mut ripe_empty = Vec::new();
        let mut ripe_busy = Vec::new();
        for &n in &ctx.cluster.live_nodes {
            if !disruptable(ctx.cluster, n) {
                continue;
            }
            let node = &ctx.cluster.nodes[n];
            let policy = &ctx.pools[node.pool].disruption;
            let util = ca_utilization(ctx.cluster, n);
            let is_gpu = node.gpus > 0;
            let threshold = if is_gpu {
                policy.gpu_utilization_threshold
            } else {
                policy.utilization_threshold
            };
            let empty = node.pods.is_empty();
            if !empty
                && (util >= threshold
                    || policy.consolidation_policy == ConsolidationPolicy::WhenEmpty)
            {
                continue;
            }
            if blocked(ctx, &snap, n, now) {
                continue;
            }
            if !empty {
                let others = targets(ctx.cluster, &[n]);
                if !scheduler::can_move(ctx.cluster, &[n], &others, self.score, &mut self.selectors)
                {
                    continue;
                }
            }
            let since = self.unneeded_since.get(&n).copied().unwrap_or(now);
            still.insert(n, since);
            let ripe = since.saturating_add(policy.unneeded_s);
            if now < ripe {
                wake = wake.min(ripe);
                continue;
            }
            if empty {
                ripe_empty.push(n);
            } else {
                ripe_busy.push(n);
            }
        }
        self.unneeded_since = still;
        let mut left = budgets_left(ctx);
        let mut chosen = Vec::new();
        for n in ripe_empty.into_iter().take(10) {
            let pi = ctx.cluster.nodes[n].pool;
            if left[pi] > 0 {
                left[pi] -= 1;
                chosen.push(n);
            }
        }
        if !chosen.is_empty() {
            return (
                vec![Decision {
                    nodes: chosen,
                    replacement: None,
                    reason: "Empty delete".into(),
                    command: None,
                }],
                wake,
            );
        }
        for n in ripe_busy {
            let pi = ctx.cluster.nodes[n].pool;
            if left[pi] > 0 {
                return (
                    vec![Decision {
                        nodes: vec![n],
                        replacement: None,
                        reason: "Underutilized delete".into(),
                        command: None,
                    }],
                    wake,
                );
            }
        }
        (vec![], wake)
    }

    fn validate(&mut self, ctx: &Ctx, d: &Decision, now: i64) -> bool {
        let snap = pdb_snapshot(ctx);
        for &n in &d.nodes {
            if !disruptable(ctx.cluster, n) || blocked(ctx, &snap, n, now) {
                return false;
            }
        }
        if d.reason.starts_with("Empty") {
            return d
                .nodes
                .iter()
                .all(|n| ctx.cluster.nodes[*n].pods.is_empty());
        }
        let others = targets(ctx.cluster, &d.nodes);
        scheduler::can_move(
            ctx.cluster,
            &d.nodes,
            &others,
            self.score,
            &mut self.selectors,
        )
    }

    fn on_scale_up(&mut self, now: i64) {
        self.last_scale_up = Some(now);
    }

    fn on_delete(&mut self, _now: i64) {}
}
