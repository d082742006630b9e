//! Planning a large batch as independent parts on several threads, with the plan one thread
//! would make.
//!
//! Pods whose classes share no NodePool and no existing node or in-flight claim never meet in
//! the planner: a pod's walk over the claims of the plan answers "no" to every claim of a pool
//! its class cannot use, and nothing else it reads (its class's and demand group's pods left,
//! the pools' usage, cached answers) is touched by the other pods. So the pending pods are
//! split along those lines (a union of classes, pools and fixed slots); each thread has a copy
//! of the planner, set up once, and takes parts, largest first, placing each part's pods in
//! their usual order; the threads' plans are merged with the claims named in the order one
//! planner would have opened them. The merge is exact only where the parts cannot interact in
//! any other way, so a batch is split only when none of these hold: topology spread or pod
//! (anti-)affinity on a pending pod (the counts cross parts), all-or-nothing groups, DRA
//! claims, nominations, cluster-wide limits, atomic pools, a claim limit the batch could reach,
//! or an explanation being asked for. `tests/parts.rs` checks the merged plan against one
//! planner's on generated batches.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::plan::Plan;

use super::shapes::demand;
use super::{Devices, Planner, SlotKind};

/// Fewest pending pods worth splitting: below it the copies and threads cost more than the
/// parts save.
pub(super) const MIN_PODS: usize = 2048;

/// What a part's planner knows of the whole batch.
#[derive(Clone)]
pub(super) struct Part {
    /// Per pending pod: whether this planner placed it (it took the pod's part).
    pub(super) member: Vec<bool>,
    /// Per pending pod: its position in the order one planner places the batch in.
    pub(super) position: Arc<Vec<u32>>,
}

/// Disjoint sets over classes, pools and fixed slots (path halving, union by index).
struct Sets(Vec<usize>);

impl Sets {
    fn root(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.root(a), self.root(b));
        if a != b {
            self.0[a.max(b)] = a.min(b);
        }
    }
}

impl<'a> Planner<'a> {
    /// Whether nothing but shared pools and nodes can make this batch's pods interact (see the
    /// module documentation), and it is large enough to split.
    fn may_split(&self) -> bool {
        let snap = self.snap;
        self.options.threads > 1
            && snap.pending.len() >= MIN_PODS
            && snap.pending.len() <= self.options.max_new_claims
            && self.explain.is_none()
            && self.options.min_nodes.is_none()
            && self.dra.is_none()
            && self.selectors.is_empty()
            && snap.nominated.is_empty()
            && snap.cluster_limits.is_empty()
            && snap.pools.iter().all(|p| p.atomic_nodes.is_none())
            && snap.pending.iter().all(|p| {
                p.group.is_none()
                    && p.spread.is_empty()
                    && p.affinity.is_empty()
                    && p.anti_affinity.is_empty()
            })
    }

    /// The pending pods in independent parts, each in placing order, or `None` when the batch
    /// is one part or may not be split.
    fn parts(&mut self, order: &[usize]) -> Option<Vec<Vec<usize>>> {
        if !self.may_split() {
            return None;
        }
        let snap = self.snap;
        let (nc, np) = (self.classes.len(), snap.pools.len());
        let fixed = self.state.fixed;
        let mut sets = Sets((0..nc + np + fixed).collect());
        // One pod per demand group: its class and requests are the group's.
        let mut seen = vec![false; self.remaining.len()];
        for i in 0..snap.pending.len() {
            let g = self.demand_group[i];
            if std::mem::replace(&mut seen[g], true) {
                continue;
            }
            let ci = self.class_of[i];
            let need = demand(&snap.pending[i], &Devices::default());
            // A pool is shared when some shape of it could hold the pod on a new node (a pod
            // no shape of a pool holds is refused there in words that do not depend on the
            // pool's usage: its limits are only asked of shapes that hold the pod).
            for (s, shape) in self.shapes.iter().enumerate() {
                if self.classes[ci].shape_ok[s] && need.fits(&shape.allocatable) {
                    sets.join(ci, nc + shape.pool);
                }
            }
            for si in 0..fixed {
                let slot = &self.state.slots[si];
                let room = slot.kind != SlotKind::New && need.fits(slot.allocatable(snap));
                if room && self.slot_compatible(ci, si) {
                    sets.join(ci, nc + np + si);
                }
            }
        }
        let mut part_of_root: Vec<usize> = vec![usize::MAX; nc + np + fixed];
        let mut parts: Vec<Vec<usize>> = Vec::new();
        for &i in order {
            let r = sets.root(self.class_of[i]);
            if part_of_root[r] == usize::MAX {
                part_of_root[r] = parts.len();
                parts.push(Vec::new());
            }
            parts[part_of_root[r]].push(i);
        }
        (parts.len() > 1).then_some(parts)
    }

    /// A copy of this planner, set up and with nothing placed, that plans only the pods it is
    /// given (`part.member`, filled in as it takes parts).
    fn copy_for(&self, part: Part) -> Planner<'a> {
        Planner {
            snap: self.snap,
            options: self.options,
            shapes: self.shapes.clone(),
            pool_order: self.pool_order.clone(),
            classes: self.classes.clone(),
            class_of: self.class_of.clone(),
            selectors: self.selectors.clone(),
            sel_index: self.sel_index.clone(),
            matches: self.matches.clone(),
            sel_of_spread: self.sel_of_spread.clone(),
            sel_of_affinity: self.sel_of_affinity.clone(),
            sel_of_anti: self.sel_of_anti.clone(),
            zone_target: self.zone_target.clone(),
            demand_group: self.demand_group.clone(),
            remaining: self.remaining.clone(),
            class_left: self.class_left.clone(),
            unit_cost: self.unit_cost.clone(),
            unit_cost_capped: self.unit_cost_capped.clone(),
            scan_group: self.scan_group.clone(),
            scan_from: self.scan_from.clone(),
            verdicts: self.verdicts.clone(),
            block_version: self.block_version.clone(),
            summaries: self.summaries.clone(),
            last_stamp: self.last_stamp,
            monotone: self.monotone.clone(),
            shares_volumes: self.shares_volumes.clone(),
            zone_total: self.zone_total,
            any_gpu_shape: self.any_gpu_shape,
            shape_volume_limits: self.shape_volume_limits.clone(),
            learned_drivers: self.learned_drivers.clone(),
            any_prefer_no_schedule: self.any_prefer_no_schedule,
            relaxed: self.relaxed,
            smallest: self.smallest.clone(),
            state: self.state.clone(),
            reasons: self.reasons.clone(),
            limited: self.limited.clone(),
            vocabulary: self.vocabulary.clone(),
            hints: self.hints.clone(),
            pool_answers: self.pool_answers.clone(),
            per_node: self.per_node.clone(),
            explain: None,
            considered: None,
            deferred: self.deferred.clone(),
            deferred_scan: self.deferred_scan.clone(),
            in_group: self.in_group,
            // Batches with DRA claims are never split (`may_split`).
            dra: None,
            dra_keys: self.dra_keys.clone(),
            fit_index: self.fit_index.clone(),
            part: Some(part),
        }
    }

    /// The plan, made in parts on up to [`super::PlanOptions::threads`] threads when the batch
    /// splits, by this planner alone otherwise: the same plan either way.
    pub(super) fn plan(mut self) -> Plan {
        let order = self.order();
        let Some(parts) = self.parts(&order) else {
            return self.run_in(order).0;
        };
        let mut position = vec![0u32; self.snap.pending.len()];
        for (k, &i) in order.iter().enumerate() {
            position[i] = k as u32;
        }
        let position = Arc::new(position);
        // Largest part first, each thread taking the next part when it is done with its
        // last: one large part (GPU pods with many types) then runs alone while the others
        // share the other threads.
        let mut parts = parts;
        parts.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let threads = self.options.threads.min(parts.len());
        let part = || Part {
            member: vec![false; self.snap.pending.len()],
            position: position.clone(),
        };
        // The set-up planner itself is the first thread's, so one copy fewer is made before
        // any part starts. Batches that split have no explain request and no DRA claims
        // (`may_split`), so it is what a copy would be.
        let mut copies: Vec<Planner<'a>> = (1..threads).map(|_| self.copy_for(part())).collect();
        self.part = Some(part());
        copies.insert(0, self);
        let next = AtomicUsize::new(0);
        let (parts, next) = (&parts, &next);
        let planned: Vec<(Plan, Vec<u32>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = copies
                .into_iter()
                .map(|planner| scope.spawn(move || planner.run_parts(parts, next)))
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(out) => out,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        });
        merge(planned)
    }

    /// Takes parts from `parts` (each in placing order) at `next` until none is left and
    /// places their pods; returns the plan of the pods it placed with, per new claim, the
    /// position of the pod that opened it. Parts share no pool or node, so the claims of a
    /// part placed earlier are nothing to the pods of the next.
    fn run_parts(mut self, parts: &[Vec<usize>], next: &AtomicUsize) -> (Plan, Vec<u32>) {
        while let Some(pods) = parts.get(next.fetch_add(1, Ordering::Relaxed)) {
            for &i in pods {
                if let Some(part) = &mut self.part {
                    part.member[i] = true;
                }
                self.place(i);
            }
        }
        let position = self
            .part
            .as_ref()
            .map(|p| p.position.clone())
            .unwrap_or_default();
        // The first pod of a claim in placing order opened it: later pods only join claims.
        let opened: Vec<u32> = self
            .state
            .slots
            .iter()
            .filter(|s| self.claim_written(s))
            .map(|s| {
                s.pods
                    .iter()
                    .map(|i| position[*i])
                    .min()
                    .unwrap_or(u32::MAX)
            })
            .collect();
        (self.finish(), opened)
    }

    /// Whether pending pod `i` is planned by this planner (every pod, unless it plans a part).
    pub(super) fn plans_pod(&self, i: usize) -> bool {
        self.part.as_ref().is_none_or(|p| p.member[i])
    }
}

/// One plan out of the parts' plans: placements and refusals merged in the order a plan lists
/// them, new claims in the order one planner would have opened them and named as it would
/// have (`<pool>-<n>`, counting every claim of the plan).
fn merge(planned: Vec<(Plan, Vec<u32>)>) -> Plan {
    let mut plan = Plan::default();
    let mut claims = Vec::new();
    for (part, opened) in planned {
        debug_assert_eq!(part.new_claims.len(), opened.len());
        claims.extend(opened.into_iter().zip(part.new_claims));
        plan.existing.extend(part.existing);
        plan.in_flight.extend(part.in_flight);
        plan.unschedulable.extend(part.unschedulable);
        plan.deferred.extend(part.deferred);
    }
    claims.sort_by_key(|(at, _)| *at);
    for (n, (_, mut claim)) in claims.into_iter().enumerate() {
        claim.name = format!("{}-{}", claim.pool, n + 1);
        plan.new_claims.push(claim);
    }
    plan.existing.sort_by(|a, b| a.pod.cmp(&b.pod));
    plan.in_flight.sort_by(|a, b| a.pod.cmp(&b.pod));
    plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    plan.deferred.sort();
    plan
}

/// The sizes (pending pods) of the independent parts one plan of `snapshot` with `options`
/// would be made in, largest first; empty when it would be made whole. With pods that state
/// preferences, this is the first of the planner's passes (`preferences.rs`).
pub fn part_sizes(snapshot: &crate::model::Snapshot, options: &super::PlanOptions) -> Vec<usize> {
    let snapshot = &*crate::zone_ids::resolve(snapshot);
    let shapes = Arc::new(super::build_shapes(snapshot));
    let templates = super::dra::Templates::of(snapshot);
    let mut planner = Planner::new(snapshot, options, &templates, shapes);
    let order = planner.order();
    let mut sizes: Vec<usize> = planner
        .parts(&order)
        .unwrap_or_default()
        .iter()
        .map(Vec::len)
        .collect();
    sizes.sort_by(|a, b| b.cmp(a));
    sizes
}
