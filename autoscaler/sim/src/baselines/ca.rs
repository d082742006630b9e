//! The ca-like and ca-ideal baselines: fixed node groups grown by the least-waste expander, and
//! scale-down of nodes below the NodePool's utilization threshold (see the parent module's
//! rules; [`Fidelity`] says which of the two).

use std::collections::{BTreeMap, HashMap};

use autoscaler_core::disruption::Check;
use autoscaler_core::model::{ConsolidationPolicy, Pod};
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::{Resources, is_gpu_class, names};
use providers::OfferingKey;

use super::{
    Fidelity, Shape, available, blocked, budgets_left, empty_delete, nominate_in_flight,
    pdb_snapshot, pod_allows, pool_usage, targets, unhelped, whole_demand, within_limits,
};
use crate::cluster::{Cluster, NodeId, NodePhase, PodId, PodPhase};
use crate::policy::{Ctx, Decision, LaunchSpec, Policy, RequestAnswer, RequestAsk, disruptable};
use crate::scenario::{ProvReqClass, ScoreStrategy};
use crate::scheduler::{self, Scratch, SelectorCache, View};

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

/// Seconds between two Cluster Autoscaler loops (`--scan-interval`, 10 s by default; see
/// `cluster-autoscaler/FAQ.md`). ca-like scales up only on these ticks.
pub const SCAN_INTERVAL_S: i64 = 10;
/// No scale-down for this long after a scale-up (`--scale-down-delay-after-add`, 10 minutes by
/// default; `cluster-autoscaler/FAQ.md`), unless a scenario sets `scaleDownDelayAfterAdd`.
pub const CA_SCALE_DOWN_DELAY_AFTER_ADD_S: i64 = 600;
/// How old the oldest unschedulable pod must be before a scale-up
/// (`unschedulablePodTimeBuffer` in `cluster-autoscaler/core/static_autoscaler.go`).
const POD_BUFFER_S: i64 = 2;
/// How old the oldest unschedulable pod asking for a GPU must be before a scale-up
/// (`unschedulablePodWithGpuTimeBuffer`, same file: "nodes with GPU are very expensive").
const GPU_POD_BUFFER_S: i64 = 30;

/// The first scan tick at or after `t`.
fn next_tick(t: i64) -> i64 {
    t.div_euclid(SCAN_INTERVAL_S) * SCAN_INTERVAL_S
        + if t.rem_euclid(SCAN_INTERVAL_S) == 0 {
            0
        } else {
            SCAN_INTERVAL_S
        }
}

/// Whether a pod asks for a GPU (any GPU-class extended resource or a share).
fn wants_gpu(pod: &Pod) -> bool {
    pod.gpu_share.is_some()
        || pod
            .requests
            .extended
            .iter()
            .any(|(k, v)| *v > 0 && is_gpu_class(k))
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

/// The ca-like (or ca-ideal) baseline (see the module documentation).
pub struct CaLike {
    shapes: Vec<Shape>,
    score: ScoreStrategy,
    unneeded_since: HashMap<NodeId, i64>,
    last_scale_up: Option<i64>,
    delay_after_add: i64,
    selectors: SelectorCache,
    fidelity: Fidelity,
    /// When ca-like wants to be asked again (its next scan tick, or when its pods are old
    /// enough).
    wake: Option<i64>,
}

impl CaLike {
    /// A policy whose node groups are `shapes`.
    pub fn new(
        shapes: Vec<Shape>,
        score: ScoreStrategy,
        delay_after_add: i64,
        fidelity: Fidelity,
    ) -> Self {
        CaLike {
            shapes,
            score,
            unneeded_since: HashMap::new(),
            last_scale_up: None,
            delay_after_add,
            selectors: SelectorCache::default(),
            fidelity,
            wake: None,
        }
    }

    /// For ca-like, the scan tick at which the pods `rest` may get a scale-up, when later than
    /// `now`: the next tick, then until the oldest pod is 2 s old and the oldest GPU pod 30 s.
    fn not_yet(&self, ctx: &Ctx, rest: &[PodId], now: i64) -> Option<i64> {
        if self.fidelity == Fidelity::Ideal {
            return None;
        }
        let since = |p: &PodId| match ctx.cluster.pods[*p].phase {
            PodPhase::Pending { since } => since,
            _ => now,
        };
        let oldest = rest.iter().map(since).min()?;
        let oldest_gpu = rest
            .iter()
            .filter(|p| wants_gpu(ctx.cluster.pod(**p)))
            .map(since)
            .min();
        let ready =
            (oldest + POD_BUFFER_S).max(oldest_gpu.map_or(i64::MIN, |t| t + GPU_POD_BUFFER_S));
        let at = next_tick(ready.max(now));
        (at > now).then_some(at)
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
                if !pod_allows(pod, sh, oi) || lacks_spread_key(pod, &sh.offering_labels[oi]) {
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

    /// The launches of a scale-up option: one node per packed bin. ca-ideal's group is the
    /// type's cheapest offering (zone-balanced as ca-like's for a bin with a pod spread over
    /// zones); ca-like's is every offering of the type, as an Auto Scaling
    /// group spanning zones launches them: the zone with the fewest nodes of the group first
    /// (cheapest first within a zone), among the offerings the bin's pods allow.
    /// `specs_of` holds the specs of the option's pods (a request's pods do not exist yet).
    /// `--enforce-node-group-min-size` (the scenario's `cluster.enforceNodeGroupMinSize`;
    /// upstream's `ScaleUpToNodeGroupMinSize`, `core/static_autoscaler.go`, run every loop):
    /// each pool below its `minNodes`, counting its live nodes not being deleted and this
    /// round's `launching`, grows on its cheapest node group by what it lacks, within its
    /// limits. A pool's types are its node groups here, so the pool's minimum stands for the
    /// group's. Nothing when the flag is off.
    fn min_size_specs(&self, ctx: &Ctx, launching: &[LaunchSpec], now: i64) -> Vec<LaunchSpec> {
        if !ctx.config.enforce_min_nodes {
            return Vec::new();
        }
        let mut usage = pool_usage(ctx, &self.shapes);
        let mut out = Vec::new();
        for (pi, pool) in ctx.pools.iter().enumerate() {
            if pool.min_nodes == 0 || pool.atomic_nodes.is_some() {
                continue;
            }
            let live = ctx
                .cluster
                .live_nodes
                .iter()
                .map(|n| &ctx.cluster.nodes[*n])
                .filter(|n| n.pool == Some(pi) && !n.deleting)
                .count();
            let have = live + launching.iter().filter(|s| s.pool == pi).count();
            let cheapest = self
                .shapes
                .iter()
                .enumerate()
                .filter(|(_, s)| s.pool == pi)
                .filter_map(|(si, s)| {
                    let oi = (0..s.offerings.len())
                        .find(|oi| available(&self.shapes, ctx.unavailable, si, *oi, now))?;
                    Some((s.offerings[oi].2, si))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let Some((_, si)) = cheapest else {
                continue;
            };
            let sh = &self.shapes[si];
            let candidates: Vec<OfferingKey> = (0..sh.offerings.len())
                .filter(|oi| available(&self.shapes, ctx.unavailable, si, *oi, now))
                .take(if self.fidelity == Fidelity::Ideal {
                    1
                } else {
                    usize::MAX
                })
                .map(|oi| {
                    let (z, ct, _) = &sh.offerings[oi];
                    OfferingKey::new(&sh.name, z, *ct)
                })
                .collect();
            for _ in have..pool.min_nodes as usize {
                if !within_limits(pool, &usage[pi], sh) {
                    break;
                }
                usage[pi].0 += 1;
                usage[pi].1.add(&sh.capacity);
                out.push(LaunchSpec {
                    pool: pi,
                    candidates: candidates.clone(),
                    pods: vec![],
                    labels: Labels::new(),
                });
            }
        }
        out
    }

    fn specs(
        &self,
        ctx: &Ctx,
        best: CaOption,
        specs_of: &[(PodId, &Pod)],
        now: i64,
    ) -> Vec<LaunchSpec> {
        let spec = |p: &PodId| specs_of.iter().find(|(id, _)| id == p).map(|(_, pod)| *pod);
        let sh = &self.shapes[best.shape];
        let si = best.shape;
        let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &ctx.cluster.live_nodes {
            let node = &ctx.cluster.nodes[*n];
            if node.pool == Some(sh.pool) && node.instance_type == sh.name {
                *per_zone.entry(node.zone.as_str()).or_default() += 1;
            }
        }
        best.nodes
            .into_iter()
            .map(|pods| {
                // A bin with a pod spread over zones goes through the zone-balanced order even
                // in ca-ideal: the real autoscaler's estimator runs the scheduler's topology
                // spread filter on the group's template node, so it never grows a group in a
                // zone the pod may not use, and a group pinned to its cheapest zone would
                // leave such pods pending for good.
                let spread = pods.iter().any(|p| spec(p).is_some_and(spreads_over_zones));
                let candidates = match self.fidelity {
                    Fidelity::Ideal if !spread => {
                        let (z, ct, _) = &sh.offerings[best.offering];
                        vec![OfferingKey::new(&sh.name, z, *ct)]
                    }
                    Fidelity::Ideal | Fidelity::Real => {
                        let mut offs: Vec<usize> = (0..sh.offerings.len())
                            .filter(|oi| {
                                available(&self.shapes, ctx.unavailable, si, *oi, now)
                                    && pods.iter().all(|p| {
                                        spec(p).is_some_and(|pod| pod_allows(pod, sh, *oi))
                                    })
                            })
                            .collect();
                        offs.sort_by(|a, b| {
                            let (za, _, pa) = &sh.offerings[*a];
                            let (zb, _, pb) = &sh.offerings[*b];
                            let ca = per_zone.get(za.as_str()).copied().unwrap_or(0);
                            let cb = per_zone.get(zb.as_str()).copied().unwrap_or(0);
                            ca.cmp(&cb)
                                .then_with(|| za.cmp(zb))
                                .then_with(|| pa.total_cmp(pb))
                        });
                        if let Some(first) = offs.first() {
                            *per_zone.entry(sh.offerings[*first].0.as_str()).or_default() += 1;
                        }
                        offs.iter()
                            .map(|oi| {
                                let (z, ct, _) = &sh.offerings[*oi];
                                OfferingKey::new(&sh.name, z, *ct)
                            })
                            .collect()
                    }
                };
                LaunchSpec {
                    pool: sh.pool,
                    candidates,
                    pods,
                    labels: Labels::new(),
                }
            })
            .collect()
    }
}

impl Policy for CaLike {
    fn name(&self) -> &'static str {
        match self.fidelity {
            Fidelity::Real => "ca-like",
            Fidelity::Ideal => "ca-ideal",
        }
    }

    fn description(&self) -> &'static str {
        match self.fidelity {
            Fidelity::Real => {
                "a model of the Cluster Autoscaler from its source and documentation: a loop \
                 every 10 s, scale-up only once the oldest pending pod is 2 s old (30 s for a \
                 GPU pod), one node group per instance type with all its offerings (zones \
                 balanced), least-waste expander (GPU-blind), threshold scale-down after the \
                 unneeded time (10 min by default); ProvisioningRequests: check-capacity on \
                 Ready nodes, best-effort-atomic as one node group's scale-up"
            }
            Fidelity::Ideal => {
                "an idealized Cluster Autoscaler: plans on the controller's batch window with no \
                 GPU wait, node groups on their type's cheapest offering, least-waste expander, \
                 threshold scale-down after the unneeded time; ProvisioningRequests as ca-like"
            }
        }
    }

    fn provision_wake(&mut self) -> Option<i64> {
        self.wake.take()
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
        let (noms, rest) = nominate_in_flight(ctx, &self.shapes, pods, false);
        if let Some(at) = self.not_yet(ctx, &rest, now) {
            self.wake = Some(at);
            return (self.min_size_specs(ctx, &[], now), noms);
        }
        let rest: Vec<(PodId, &Pod)> = rest.iter().map(|p| (*p, ctx.cluster.pod(*p))).collect();
        let best = self.best_group(ctx, &rest, now, false);
        let mut specs = best
            .map(|b| self.specs(ctx, b, &rest, now))
            .unwrap_or_default();
        let warm = self.min_size_specs(ctx, &specs, now);
        specs.extend(warm);
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
                launch: self.specs(ctx, b, &rest, now),
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
            let Some(pi) = node.pool else {
                continue;
            };
            let policy = &ctx.pools[pi].disruption;
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
        // Empty nodes in bulk, at most 10 per loop (`--max-empty-bulk-delete`).
        let bulk = ripe_empty.into_iter().take(10).collect();
        if let Some(d) = empty_delete(ctx, bulk, &mut left) {
            return (vec![d], wake);
        }
        for n in ripe_busy {
            let Some(pi) = ctx.cluster.nodes[n].pool else {
                continue;
            };
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

    fn validate(&mut self, ctx: &Ctx, d: &Decision, now: i64, _: Check) -> bool {
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

    /// The Cluster Autoscaler model keeps CA's default global delay
    /// (`--scale-down-delay-type-local=false`): a scale-up anywhere pauses all scale-down.
    fn on_scale_up(&mut self, _pool: &str, now: i64) {
        self.last_scale_up = Some(now);
    }

    fn on_delete(&mut self, _pool: &str, _now: i64) {}
}

/// Whether the pod has a `DoNotSchedule` spread over a key the group's template node does not
/// carry: the scheduler's topology spread filter refuses a node without the key, so the
/// Cluster Autoscaler's estimator, which runs that filter on the template node, never scales
/// the group up for the pod (the pod "did not trigger scale-up"). Every node has a hostname.
fn lacks_spread_key(pod: &Pod, template: &autoscaler_core::requirements::Labels) -> bool {
    pod.spread.iter().any(|s| {
        s.hard
            && s.topology_key != autoscaler_core::labels::HOSTNAME
            && !template.contains_key(&s.topology_key)
    })
}

/// Whether the pod spreads over zones with `DoNotSchedule` (the scheduler refuses a node in a
/// zone that already holds more than its share).
fn spreads_over_zones(pod: &Pod) -> bool {
    pod.spread
        .iter()
        .any(|s| s.hard && s.topology_key == autoscaler_core::labels::ZONE)
}
