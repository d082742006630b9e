//! The karpenter-like baseline: provisioning by first-fit-decreasing onto NodeClaims that keep
//! every fitting offering, and single-node consolidation (see the parent module's rules).

use autoscaler_core::model::ConsolidationPolicy;
use autoscaler_core::resources::Resources;
use providers::{OfferingKey, UnavailableOfferings};

use super::{
    Shape, available, bin_spec, blocked, budgets_left, movable_pods, nominate_in_flight, pack,
    pdb_snapshot, pod_allows, pool_usage, targets, unhelped, whole_demand,
};
use crate::cluster::{NodeId, PodId};
use crate::policy::{Ctx, Decision, LaunchSpec, Policy, disruptable};
use crate::scenario::ScoreStrategy;
use crate::scheduler::{self, SelectorCache};

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
        if Some(sh.pool) != node.pool || !total.fits(&sh.allocatable.minus(&sh.ds_overhead)) {
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

    fn on_scale_up(&mut self, _pool: &str, _now: i64) {}

    fn on_delete(&mut self, _pool: &str, _now: i64) {}
}
