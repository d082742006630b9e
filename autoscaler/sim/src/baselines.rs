//! Baseline policies: *models* of Karpenter and of the Cluster Autoscaler, written from their
//! public source and documentation, for comparison. They are not those projects' code, and the
//! report says so. Each comes twice ([`Fidelity`]): `-like` behaves as the project does today,
//! GPU blind spots included; `-ideal` is the same design made GPU-aware, so every report shows
//! two gaps per competitor. The upstream file or page behind each rule is named next to it
//! here and in `autoscaler/sim/README.md`.
//!
//! **karpenter-like** — provisioning (kubernetes-sigs/karpenter
//! `pkg/controllers/provisioning/scheduling/scheduler.go`, batched by the engine's 1 s idle /
//! 10 s window as `pkg/controllers/provisioning/batcher.go`): pending pods (minus those
//! nominated to nodes in flight) sorted by cpu then memory, largest first, placed first-fit on
//! in-flight nodes, then on the NodeClaims opened in this batch, then on a new NodeClaim in the
//! highest-weight NodePool that can take the pod; a NodeClaim keeps every (instance type,
//! offering) that fits all its pods and launches from up to 60 of them, cheapest first. New
//! GPU nodes are sized by the instance type's physical `nvidia.com/gpu` (Karpenter's capacity
//! comes from the cloud's instance-type description: time-slicing replicas are unknown, so it
//! launches too many nodes and consolidates once the device plugin advertises the replicas),
//! and MIG resources are unknown (kubernetes-sigs/karpenter issue 729): their pods get no node
//! unless the scenario declares its sharing NodeOverlay-style (`cluster.nodeOverlays: true`,
//! `designs/node-overlay.md`), and the report counts them. A fractional GPU share counts as one
//! whole GPU (Karpenter knows only extended-resource counts); gangs get no special treatment.
//! Disruption (`pkg/controllers/disruption/`): only nodes whose pods have not changed for
//! `consolidateAfter` are candidates; empty ones are deleted together (`emptiness.go`); then
//! multi-node consolidation (`multinodeconsolidation.go`): candidates sorted by disruption cost
//! (one per pod, scaled by the lifetime left before `expireAfter`, `pkg/utils/disruption/disruption.go`), filtered by the
//! budgets, at most 100, binary search for the longest prefix whose pods fit the other nodes
//! plus at most one new node cheaper than the prefix (a type being removed caps that price);
//! then single-node consolidation over every candidate (`singlenodeconsolidation.go`). A
//! replacement keeps every cheaper offering, spot only when spot is allowed; replacing one spot
//! node with spot needs at least 15 cheaper instance types and launches from the 15 cheapest
//! (`consolidation.go`, `MinInstanceTypesForSpotToSpotConsolidation`; modelled with the
//! `SpotToSpotConsolidation` feature gate on). Every command is re-validated after 15 s
//! (`consolidationTTL`): still candidates, same action. Budgets, PDBs and do-not-disrupt are
//! honoured.
//!
//! **karpenter-ideal** — the same provisioning sized by what the device plugin advertises
//! (time-slicing and MIG known); consolidation one under-used node at a time among the 10
//! cheapest to disrupt, deleted when the scheduler finds room for its pods, or replaced by
//! the single cheapest type that takes them (no multi-node, no spot-to-spot rule).
//!
//! **ca-like** — a loop every 10 s (`--scan-interval`, kubernetes/autoscaler
//! `cluster-autoscaler/FAQ.md`): scale-up happens on those ticks only, and only once the
//! oldest pod to help is 2 s old, or 30 s when any of them asks for a GPU
//! (`unschedulablePodTimeBuffer` and `unschedulablePodWithGpuTimeBuffer`,
//! `cluster-autoscaler/core/static_autoscaler.go`). Node groups: one per (NodePool, instance
//! type) with every allowed offering, as an Auto Scaling group spanning zones
//! (`cluster-autoscaler/cloudprovider/aws/README.md`): the expander prices it at its cheapest
//! offering, a launch goes to the zone with the fewest nodes of the group first. Scale-up: for
//! every group, the pending pods (minus those upcoming nodes absorb) that fit its template are
//! packed first-fit-decreasing onto fresh nodes; the least-waste expander
//! (`cluster-autoscaler/expander/waste/waste.go`) picks the group whose new nodes waste the
//! least cpu and memory (GPUs are not part of the score) and that group grows by the nodes
//! needed; one group per loop. Scale-down (`cluster-autoscaler/FAQ.md`,
//! `cluster-autoscaler/simulator/utilization/info.go`): a node whose utilization (GPU nodes on
//! GPU, others on max(cpu, memory)) is below the NodePool's threshold (0.5 by default, as
//! `--scale-down-utilization-threshold` and `--scale-down-gpu-utilization-threshold`) and whose
//! pods the scheduler can place elsewhere is unneeded; after the NodePool's unneeded time (10
//! minutes by default, `--scale-down-unneeded-time`) it is removed, empty nodes in bulk (up to
//! 10) and others one per loop, with no scale-down for `scaleDownDelayAfterAdd` (10 minutes)
//! after a scale-up. A GPU node whose device plugin has not advertised its GPUs yet counts as
//! upcoming, not ready (`cluster-autoscaler/utils/gpu/gpu.go`), as for every policy here.
//! ProvisioningRequests, as the Cluster Autoscaler serves them: the request's pods are placed
//! by the scheduler's rules on Ready nodes (other bookings held); check-capacity is answered
//! from that alone, best-effort-atomic scales up one node group for all the pods left, or for
//! none.
//!
//! **ca-ideal** — the same without the GPU blind spots in timing and pricing: it plans on the
//! controller's batch window (1 s idle, 10 s at most) with no GPU wait, and each node group is
//! its type's cheapest offering.
//!
//! The Karpenter models have no ProvisioningRequest support: the model is of a cluster where
//! Kueue runs without the ProvisioningRequest admission check, so a request's pods are created
//! at its arrival and provisioned for as an ordinary gang (its report says "not served").
//!
//! This file holds what all four share (shapes, packing, limits, budgets, safety checks); the
//! policies are in `baselines/karpenter.rs` and `baselines/ca.rs`.

use std::collections::BTreeMap;

use autoscaler_core::disruption::pod_blocker;
use autoscaler_core::model::{Pod, Pool, Snapshot};
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::Resources;
use autoscaler_core::taints::Taint;
use autoscaler_core::{CapacityType, labels};
use providers::{OfferingKey, UnavailableOfferings};

use crate::cluster::{Cluster, NodeId, NodePhase, NodeState, PodId};
use crate::policy::{Ctx, Decision, LaunchSpec};
use crate::scenario::type_in_pool;
use crate::scheduler::untolerated;

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
    /// Allocatable as the cloud's instance-type description gives it, before GPU sharing:
    /// physical `nvidia.com/gpu`, no time-slicing replicas, no MIG resources. What Karpenter
    /// sizes new nodes by unless a NodeOverlay declares more.
    pub physical: Resources,
    /// Room on a new node of this shape once its DaemonSet pods run: by `allocatable` and by
    /// `physical` ([`fresh_room`]), worked out once because consolidation asks for every
    /// shape at every candidate.
    pub fresh: [Resources; 2],
}

/// How closely a baseline follows the project it models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fidelity {
    /// As the real project behaves today, GPU blind spots included (`karpenter-like`,
    /// `ca-like`).
    Real,
    /// The same design made GPU-aware and kinder (`karpenter-ideal`, `ca-ideal`): sizes by
    /// what the device plugin advertises, no GPU scale-up wait, cheapest offering.
    Ideal,
}

/// Room for pods on a fresh node of `sh` (DaemonSet requests subtracted), as a baseline that
/// sees the `physical` instance type (or the shared allocatable) believes.
fn fresh_room(sh: &Shape, physical: bool) -> &Resources {
    &sh.fresh[usize::from(physical)]
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
            let allocatable = shared.allocatable();
            let physical = it.allocatable();
            let fresh = [
                allocatable.minus(&ds_overhead),
                physical.minus(&ds_overhead),
            ];
            out.push(Shape {
                offering_labels,
                pool: pi,
                name: shared.name.clone(),
                labels: shared.labels.clone(),
                taints: pool.taints.clone(),
                allocatable,
                ds_overhead,
                capacity: shared.capacity.clone(),
                offerings,
                gpus: shared.gpu_count(),
                physical,
                fresh,
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
    if unavailable.is_empty() {
        // Building the key (two strings) for every offering of every shape was a fifth of the
        // karpenter-ideal replay.
        return true;
    }
    let (z, ct, _) = &shapes[s].offerings[o];
    !unavailable.is_unavailable(&OfferingKey::new(&shapes[s].name, z, *ct), now)
}

/// Per pool: (nodes, capacity) of live nodes, for limits.
fn pool_usage(ctx: &Ctx, shapes: &[Shape]) -> Vec<(i64, Resources)> {
    let mut u = vec![(0i64, Resources::new()); ctx.pools.len()];
    for ni in &ctx.cluster.live_nodes {
        let n = &ctx.cluster.nodes[*ni];
        let Some(pi) = n.pool else {
            continue;
        };
        u[pi].0 += 1;
        if let Some(s) = shapes
            .iter()
            .find(|s| s.pool == pi && s.name == n.instance_type)
        {
            u[pi].1.add(&s.capacity);
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
                .filter(|n| n.pool == Some(pi) && n.registered())
                .collect();
            let total = nodes.len() as i64;
            let deleting = nodes.iter().filter(|n| n.deleting).count() as i64;
            let allowed = pool
                .disruption
                .budgets
                .iter()
                .map(|b| autoscaler_core::disruption::budget_nodes(b, total))
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
    pdbs_exceeded(ctx, snap, &[n])
}

/// Whether evicting every pod of `nodes` at once would go beyond a PDB's allowance (a PDB none
/// of whose pods is there does not count, however far below its minimum it is: one whose pods
/// all stay pending has a negative allowance).
fn pdbs_exceeded(ctx: &Ctx, snap: &Snapshot, nodes: &[NodeId]) -> bool {
    snap.pdbs.iter().any(|b| {
        let used = nodes
            .iter()
            .flat_map(|n| &ctx.cluster.nodes[*n].pods)
            .map(|p| ctx.cluster.pod(*p))
            .filter(|p| p.key.namespace == b.namespace && b.selector.matches(&p.labels))
            .count() as i32;
        used > 0 && used > b.disruptions_allowed
    })
}

/// Every empty candidate the budgets allow, deleted at once.
fn empty_delete(ctx: &Ctx, empty: Vec<NodeId>, left: &mut [i64]) -> Option<Decision> {
    let mut chosen = Vec::new();
    for n in empty {
        let Some(pi) = ctx.cluster.nodes[n].pool else {
            continue;
        };
        if left[pi] > 0 {
            left[pi] -= 1;
            chosen.push(n);
        }
    }
    (!chosen.is_empty()).then(|| Decision {
        nodes: chosen,
        replacement: None,
        reason: "Empty delete".into(),
        command: None,
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
    physical: bool,
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
                    pod_allows(pod, sh, *o) && used.fits(fresh_room(sh, physical))
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
                    || !d.fits(fresh_room(sh, physical))
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
            .take(karpenter::MAX_INSTANCE_TYPES)
            .map(|(s, o, _)| {
                let (z, ct, _) = &shapes[*s].offerings[*o];
                OfferingKey::new(&shapes[*s].name, z, *ct)
            })
            .collect(),
        pods: b.pods.clone(),
        labels: Labels::new(),
    }
}

/// Puts each pod, in the given order, on the first in-flight node with room that takes its
/// taints and selector; returns those nominations and the pods left for new nodes.
fn nominate_in_flight(
    ctx: &Ctx,
    shapes: &[Shape],
    pods: Vec<PodId>,
    physical: bool,
) -> (Vec<(PodId, NodeId)>, Vec<PodId>) {
    let mut room = in_flight_room(ctx, shapes, physical);
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

/// Room left on in-flight nodes (requests of bound, nominated and booked pods subtracted), on
/// the instance type's `physical` description when the baseline knows no better.
fn in_flight_room(ctx: &Ctx, shapes: &[Shape], physical: bool) -> Vec<(NodeId, Resources)> {
    let mut room: BTreeMap<NodeId, Resources> = BTreeMap::new();
    for ni in &ctx.cluster.live_nodes {
        let n = &ctx.cluster.nodes[*ni];
        if n.phase == NodePhase::Ready || n.deleting {
            continue;
        }
        let Some(sh) = shapes
            .iter()
            .find(|s| Some(s.pool) == n.pool && s.name == n.instance_type)
        else {
            continue;
        };
        let mut r = fresh_room(sh, physical).clone();
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

pub(crate) mod ca;
mod karpenter;

pub use ca::{CaLike, SCAN_INTERVAL_S, ca_utilization};
pub use karpenter::KarpenterLike;
