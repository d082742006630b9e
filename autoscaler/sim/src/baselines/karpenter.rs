//! The karpenter-like and karpenter-ideal baselines: provisioning by first-fit-decreasing onto
//! NodeClaims that keep every fitting offering, and consolidation (see the parent module's
//! rules; [`Fidelity`] says which of the two).

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::CapacityType;
use autoscaler_core::disruption::Check;
use autoscaler_core::disruption::execute::Order;
use autoscaler_core::model::ConsolidationPolicy;
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::Resources;
use providers::{OfferingKey, UnavailableOfferings};

use super::{
    Fidelity, Shape, available, bin_spec, blocked, budgets_left, empty_delete, fresh_room,
    movable_pods, nominate_in_flight, pack, pdb_snapshot, pdbs_exceeded, pod_allows, pool_usage,
    targets, unhelped, whole_demand,
};
use crate::cluster::{Cluster, NodeId, PodId};
use crate::policy::{Ctx, Decision, LaunchSpec, Policy, disruptable};
use crate::scenario::ScoreStrategy;
use crate::scheduler::{self, SelectorCache};

/// Most candidates multi-node consolidation looks at (Karpenter's
/// `pkg/controllers/disruption/multinodeconsolidation.go`: "a maximum batch of 100").
pub const MULTI_NODE_CANDIDATES: usize = 100;
/// Cheaper instance types a single spot node's spot replacement needs, and how many of the
/// cheapest it launches from (`MinInstanceTypesForSpotToSpotConsolidation` in
/// `pkg/controllers/disruption/consolidation.go`).
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;
/// Instance types a NodeClaim is launched with, cheapest first: the AWS provider's
/// `maxInstanceTypes` per CreateFleet call (aws/karpenter-provider-aws
/// `pkg/providers/instance/instance.go`), under the core's 600
/// (`pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go`).
pub const MAX_INSTANCE_TYPES: usize = 60;
/// NodePool `expireAfter` default (720h), which scales a candidate's disruption cost by the
/// lifetime it has left (`pkg/utils/disruption/disruption.go`, `LifetimeRemaining`).
const EXPIRE_AFTER_S: f64 = 720.0 * 3600.0;

/// The karpenter-like (or -ideal) baseline (see the module documentation).
pub struct KarpenterLike {
    shapes: Vec<Shape>,
    score: ScoreStrategy,
    selectors: SelectorCache,
    fidelity: Fidelity,
    overlays: bool,
    /// Pods no instance type could take because they request a resource Karpenter does not
    /// see (MIG profiles without a NodeOverlay), with that resource.
    unknown: BTreeMap<PodId, String>,
}

impl KarpenterLike {
    /// A policy packing against `shapes`; `overlays` says whether the scenario declares its
    /// GPU sharing to Karpenter NodeOverlay-style (only read by [`Fidelity::Real`]).
    pub fn new(
        shapes: Vec<Shape>,
        score: ScoreStrategy,
        fidelity: Fidelity,
        overlays: bool,
    ) -> Self {
        KarpenterLike {
            shapes,
            score,
            selectors: SelectorCache::default(),
            fidelity,
            overlays,
            unknown: BTreeMap::new(),
        }
    }

    /// Whether new nodes are sized by the instance type's physical description.
    fn physical(&self) -> bool {
        self.fidelity == Fidelity::Real && !self.overlays
    }

    /// A resource `p` requests that no instance type advertises to Karpenter, if any.
    fn unknown_resource(&self, ctx: &Ctx, p: PodId) -> Option<String> {
        let d = whole_demand(ctx.cluster.pod(p));
        d.extended
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, _)| k)
            .find(|k| self.shapes.iter().all(|sh| sh.physical.get(k) == 0))
            .cloned()
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
        if Some(sh.pool) != node.pool || !total.fits(fresh_room(sh, false)) {
            continue;
        }
        for (oi, o) in sh.offerings.iter().enumerate() {
            // The price first: an offering no cheaper than the node, or than the best so far,
            // would not be chosen, so the costlier checks are skipped for it.
            if o.2 >= node.price
                || best.is_some_and(|b| o.2 >= b.2)
                || !available(shapes, unavailable, si, oi, now)
                || !pods.iter().all(|p| pod_allows(ctx.cluster.pod(*p), sh, oi))
            {
                continue;
            }
            best = Some((si, oi, o.2));
        }
    }
    best
}

/// How much disrupting a node costs in Karpenter's ordering: one per pod, scaled by the
/// lifetime the node has left before `expireAfter`.
fn disruption_cost(cluster: &Cluster, n: NodeId, now: i64) -> f64 {
    let node = &cluster.nodes[n];
    let age = (now - node.launched_at) as f64;
    node.pods.len() as f64 * (1.0 - age / EXPIRE_AFTER_S).clamp(0.0, 1.0)
}

/// What consolidating a set of candidates would do.
enum Consolidation {
    /// Their pods fit the other nodes.
    Delete,
    /// The pods left over fit one new node cheaper than the candidates: its NodePool and its
    /// offerings, cheapest first.
    Replace(usize, Vec<OfferingKey>),
}

impl KarpenterLike {
    /// Karpenter's `computeConsolidation` for `nodes`: the scheduler places their pods on the
    /// other nodes; what is left must fit one new NodeClaim whose offerings are cheaper than
    /// the candidates together (spot-to-spot and same-type rules applied).
    fn compute(&mut self, ctx: &Ctx, nodes: &[NodeId], now: i64) -> Option<Consolidation> {
        let cluster = ctx.cluster;
        // Evicting several nodes' pods must stay within each PDB together (the eviction API
        // would refuse the rest).
        if nodes.len() > 1 && pdbs_exceeded(ctx, &pdb_snapshot(ctx), nodes) {
            return None;
        }
        let others = targets(cluster, nodes);
        let left = scheduler::unplaced(
            cluster,
            nodes,
            &others,
            self.score,
            &mut self.selectors,
            false,
        );
        if left.is_empty() {
            return Some(Consolidation::Delete);
        }
        let mut total = Resources::new();
        for p in &left {
            total.add(&whole_demand(cluster.pod(*p)));
        }
        let price: f64 = nodes.iter().map(|n| cluster.nodes[*n].price).sum();
        // Replacing several nodes with one of a type being removed is no better than deleting
        // the others: such a type caps the price (`filterOutSameType`).
        let mut cap = price;
        if nodes.len() > 1 {
            for n in nodes {
                let node = &cluster.nodes[*n];
                if self.shapes.iter().any(|sh| sh.name == node.instance_type) {
                    cap = cap.min(node.price);
                }
            }
        }
        let physical = self.physical();
        let mut opts: Vec<(usize, usize, f64)> = Vec::new();
        for (si, sh) in self.shapes.iter().enumerate() {
            if !total.fits(fresh_room(sh, physical)) {
                continue;
            }
            for (oi, o) in sh.offerings.iter().enumerate() {
                if o.2 < cap
                    && available(&self.shapes, ctx.unavailable, si, oi, now)
                    && left.iter().all(|p| pod_allows(cluster.pod(*p), sh, oi))
                {
                    opts.push((si, oi, o.2));
                }
            }
        }
        let spot =
            |o: &(usize, usize, f64)| self.shapes[o.0].offerings[o.1].1 == CapacityType::Spot;
        let all_spot = nodes
            .iter()
            .all(|n| cluster.nodes[*n].capacity_type == CapacityType::Spot);
        // A replacement that may be spot is priced as spot, so it must be spot.
        if opts.iter().any(spot) {
            opts.retain(spot);
        }
        opts.sort_by(|a, b| {
            a.2.total_cmp(&b.2)
                .then_with(|| self.shapes[a.0].name.cmp(&self.shapes[b.0].name))
                .then_with(|| a.1.cmp(&b.1))
        });
        let mut types: Vec<&str> = Vec::new();
        for o in &opts {
            let name = self.shapes[o.0].name.as_str();
            if !types.contains(&name) {
                types.push(name);
            }
        }
        let mut limit = MAX_INSTANCE_TYPES;
        if all_spot && opts.first().is_some_and(spot) && nodes.len() == 1 {
            // Single-node spot-to-spot: at least 15 cheaper types, and launch from the 15
            // cheapest only, so the new node is not itself replaced at once.
            if types.len() < SPOT_TO_SPOT_MIN_TYPES {
                return None;
            }
            limit = SPOT_TO_SPOT_MIN_TYPES;
        }
        let keep: BTreeSet<&str> = types.into_iter().take(limit).collect();
        // One NodeClaim belongs to one NodePool: the cheapest option's.
        let pool = self.shapes[opts.first()?.0].pool;
        let offerings: Vec<OfferingKey> = opts
            .iter()
            .filter(|o| {
                self.shapes[o.0].pool == pool && keep.contains(self.shapes[o.0].name.as_str())
            })
            .map(|(s, o, _)| {
                let (z, ct, _) = &self.shapes[*s].offerings[*o];
                OfferingKey::new(&self.shapes[*s].name, z, *ct)
            })
            .collect();
        Some(Consolidation::Replace(pool, offerings))
    }

    /// The decision for a consolidation of `nodes`.
    fn decision(nodes: Vec<NodeId>, c: Consolidation, kind: &str) -> Decision {
        match c {
            Consolidation::Delete => Decision {
                nodes,
                replacement: None,
                reason: format!("{kind} delete"),
                command: None,
            },
            Consolidation::Replace(pool, candidates) => Decision {
                nodes,
                replacement: Some(LaunchSpec {
                    pool,
                    candidates,
                    pods: vec![],
                    labels: Labels::new(),
                }),
                reason: format!("{kind} replace"),
                command: None,
            },
        }
    }

    /// Whether a candidate is still one: managed, unblocked, its pods unchanged for
    /// `consolidateAfter`.
    fn still_candidate(ctx: &Ctx, n: NodeId, now: i64) -> bool {
        let node = &ctx.cluster.nodes[n];
        let Some(pi) = node.pool else {
            return false;
        };
        disruptable(ctx.cluster, n)
            && now
                >= node
                    .last_pod_change
                    .saturating_add(ctx.pools[pi].disruption.consolidate_after_s)
    }

    /// Karpenter's consolidation: empty nodes first, then multi-node (binary search over the
    /// first up-to-100 candidates by disruption cost), then single-node.
    fn disrupt_real(&mut self, ctx: &Ctx, now: i64) -> (Vec<Decision>, i64) {
        let (empty, mut busy, wake) = candidates(ctx, now);
        let mut left = budgets_left(ctx);
        if let Some(d) = empty_delete(ctx, empty, &mut left) {
            return (vec![d], wake);
        }
        let cost: BTreeMap<NodeId, f64> = busy
            .iter()
            .map(|n| (*n, disruption_cost(ctx.cluster, *n, now)))
            .collect();
        busy.sort_by(|a, b| cost[a].total_cmp(&cost[b]).then_with(|| a.cmp(b)));
        // Multi-node: candidates the budgets allow, in order.
        let mut budget = left.clone();
        let mut multi = Vec::new();
        for &n in &busy {
            let pi = ctx.cluster.nodes[n].pool.unwrap_or(0);
            if budget[pi] > 0 {
                budget[pi] -= 1;
                multi.push(n);
            }
        }
        if multi.len() >= 2 {
            let mut lo = 1usize;
            let mut hi = multi.len().min(MULTI_NODE_CANDIDATES);
            if multi.len() <= hi {
                hi = multi.len() - 1;
            }
            let mut best: Option<(usize, Consolidation)> = None;
            while lo <= hi {
                let mid = (lo + hi) / 2;
                match self.compute(ctx, &multi[..=mid], now) {
                    Some(c) => {
                        best = Some((mid, c));
                        lo = mid + 1;
                    }
                    None => hi = mid - 1,
                }
            }
            if let Some((mid, c)) = best {
                let nodes = multi[..=mid].to_vec();
                return (vec![Self::decision(nodes, c, "Multi-node")], wake);
            }
        }
        for &n in &busy {
            let pi = ctx.cluster.nodes[n].pool.unwrap_or(0);
            if left[pi] <= 0 {
                continue;
            }
            if let Some(c) = self.compute(ctx, &[n], now) {
                left[pi] -= 1;
                return (vec![Self::decision(vec![n], c, "Single-node")], wake);
            }
        }
        (vec![], wake)
    }

    /// The earlier model, GPU-aware and kinder in sizing, harsher in consolidation: one
    /// under-used node at a time among the 10 cheapest to disrupt, replaced by one type.
    fn disrupt_ideal(&mut self, ctx: &Ctx, now: i64) -> (Vec<Decision>, i64) {
        let (empty, mut busy, wake) = candidates(ctx, now);
        let mut left = budgets_left(ctx);
        if let Some(d) = empty_delete(ctx, empty, &mut left) {
            return (vec![d], wake);
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
            let Some(pi) = ctx.cluster.nodes[n].pool else {
                continue;
            };
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
                            labels: Labels::new(),
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
}

/// Consolidation candidates: empty ones, busy ones (pools consolidating when under-used), and
/// the earliest time a node's `consolidateAfter` runs out.
fn candidates(ctx: &Ctx, now: i64) -> (Vec<NodeId>, Vec<NodeId>, i64) {
    let snap = pdb_snapshot(ctx);
    let mut wake = i64::MAX;
    let mut empty = Vec::new();
    let mut busy = Vec::new();
    for &n in &ctx.cluster.live_nodes {
        if !disruptable(ctx.cluster, n) {
            continue;
        }
        let node = &ctx.cluster.nodes[n];
        let Some(pi) = node.pool else {
            continue;
        };
        let policy = &ctx.pools[pi].disruption;
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
    (empty, busy, wake)
}

impl Policy for KarpenterLike {
    fn name(&self) -> &'static str {
        match self.fidelity {
            Fidelity::Real => "karpenter-like",
            Fidelity::Ideal => "karpenter-ideal",
        }
    }

    fn description(&self) -> &'static str {
        match self.fidelity {
            Fidelity::Real => {
                "a model of Karpenter from its source and documentation: sizes new GPU nodes by \
                 physical nvidia.com/gpu (no time-slicing replicas, no MIG resources unless \
                 declared NodeOverlay-style), a fractional share counts as a whole GPU, \
                 NodeClaims with up to 60 types cheapest first; emptiness, multi-node (100 \
                 candidates) and single-node consolidation with the spot-to-spot rule; no \
                 ProvisioningRequest support (a request's pods are created at once, as plain pods)"
            }
            Fidelity::Ideal => {
                "an idealized, GPU-aware Karpenter: sizes by what the device plugin advertises \
                 (time-slicing and MIG known), first-fit-decreasing by cpu then memory, \
                 cheapest instance type that fits; single-node consolidation among 10 \
                 candidates, replacement by one type; no ProvisioningRequest support"
            }
        }
    }

    fn provision(&mut self, ctx: &Ctx, now: i64) -> (Vec<LaunchSpec>, Vec<(PodId, NodeId)>) {
        let mut pods = unhelped(ctx);
        pods.sort_by_key(|p| {
            let r = &ctx.cluster.pod(*p).requests;
            (std::cmp::Reverse(r.cpu), std::cmp::Reverse(r.memory), *p)
        });
        let physical = self.physical();
        // In-flight nodes first.
        let (noms, rest) = nominate_in_flight(ctx, &self.shapes, pods, physical);
        let mut usage = pool_usage(ctx, &self.shapes);
        let mut bins = Vec::new();
        let left = pack(
            ctx,
            &self.shapes,
            ctx.unavailable,
            &rest,
            now,
            &mut usage,
            &mut bins,
            physical,
        );
        if physical {
            for p in left {
                if let Some(r) = self.unknown_resource(ctx, p) {
                    self.unknown.insert(p, r);
                }
            }
        }
        (
            bins.iter().map(|b| bin_spec(&self.shapes, b)).collect(),
            noms,
        )
    }

    fn disrupt(&mut self, ctx: &Ctx, now: i64) -> (Vec<Decision>, i64) {
        match self.fidelity {
            Fidelity::Real => self.disrupt_real(ctx, now),
            Fidelity::Ideal => self.disrupt_ideal(ctx, now),
        }
    }

    /// Karpenter's emptiness validation goes on with the candidates still empty and not
    /// nominated for a pod, and drops the others (`pkg/controllers/disruption/validation.go`,
    /// `EmptinessValidator.validateCandidates`), rather than dropping the whole command.
    /// Budgets held when the command was decided, and narrowing only takes nodes out.
    fn narrow(&mut self, ctx: &Ctx, d: &Decision) -> Option<Vec<String>> {
        if !d.reason.starts_with("Empty") {
            return None;
        }
        let nodes = &ctx.cluster.nodes;
        let kept: Vec<String> = d
            .nodes
            .iter()
            .filter(|n| {
                disruptable(ctx.cluster, **n)
                    && nodes[**n].pods.is_empty()
                    && nodes[**n].held.is_empty()
            })
            .map(|n| nodes[*n].name.clone())
            .collect();
        (!kept.is_empty() && kept.len() < d.nodes.len()).then_some(kept)
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
        if self.fidelity == Fidelity::Real {
            // Karpenter's validation: still candidates after 15 s, and the same action.
            if !d.nodes.iter().all(|n| Self::still_candidate(ctx, *n, now)) {
                return false;
            }
            return matches!(
                (self.compute(ctx, &d.nodes, now), &d.replacement),
                (Some(Consolidation::Delete), None) | (Some(Consolidation::Replace(..)), Some(_))
            );
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

    fn notes(&self, cluster: &Cluster) -> Vec<String> {
        if self.unknown.is_empty() {
            return vec![];
        }
        let resources: BTreeSet<&str> = self.unknown.values().map(String::as_str).collect();
        let pending = self
            .unknown
            .keys()
            .filter(|p| cluster.pending.contains(p))
            .count();
        vec![format!(
            "{} pods request {} which no instance type advertises to Karpenter (no NodeOverlay \
             declared: cluster.nodeOverlays): it launched nothing for them; {pending} still \
             pending at the end",
            self.unknown.len(),
            resources.into_iter().collect::<Vec<_>>().join(", ")
        )]
    }

    fn on_scale_up(&mut self, _pool: &str, _now: i64) {}

    /// Karpenter's documented disruption flow: a NoSchedule taint on the nodes first, then
    /// the replacements pre-spun and waited for until initialized, then the nodes deleted
    /// (their termination drains them); a replacement that fails to initialize untaints. The
    /// simulated taint is the core's key: only whether pods tolerate it matters here.
    fn replacement_order(&self) -> Order {
        Order::TaintFirst
    }

    fn on_delete(&mut self, _pool: &str, _now: i64) {}
}
