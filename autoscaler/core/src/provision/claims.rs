//! New claims: opening one for a pod, its candidates, target price and limits, growing it
//! as pods join, and marking the claims of all-or-nothing groups.

use std::collections::BTreeMap;

use crate::labels;
use crate::model::{MinValuesPolicy, Pod, PodKey, Pool};
use crate::plan::Plan;
use crate::requirements::{Constraint, Requirements};
use crate::resources::{Resources, format_amount};

use super::classes::dominant_share;
use super::shapes::{
    Devices, Shape, demand, distinct_values, key_fits_shape, may_select, min_values_short,
    offering_allowed, offering_constraints, priced_candidates, relaxed_min_values, term_fits_shape,
};
use super::slots::{asks_key, placeholder};
use super::{Grow, Planner, PoolUse, Slot, SlotKind};
use crate::quota::exceeded;

/// Sets [`NewClaim::group`] on the claims that hold only members of one all-or-nothing group,
/// for the groups with at least two such claims in the plan. A claim shared with pods outside
/// the group gets none and does not count: one node of a group in a placement group of its own
/// would only narrow where the cloud may put it.
pub(super) fn mark_group_claims(pending: &[Pod], plan: &mut Plan) {
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

impl<'a> Planner<'a> {
    /// For a new-claim slot: the requirements, candidates and price it would have with pod `i`
    /// added, or `None` when the pod cannot join it.
    pub(super) fn try_new_slot(&self, i: usize, si: usize, avoid_gpu: bool) -> Option<Grow> {
        let pod = &self.snap.pending[i];
        let ci = self.class_of[i];
        let slot = &self.state.slots[si];
        let add = demand(pod, &slot.devices);
        let row = self.fit_row(si);
        let need = self.fit_index.need(i, &pod.requests, row, &slot.used, &add);
        debug_assert!(self.need_agrees(&need, &slot.used.sum(&add)));
        if !need.fits(self.fit_index.offers(row), slot.allocatable(self.snap)) {
            // `allocatable` of a new claim holds the most any candidate offers.
            return None;
        }
        if self.rides(i, si, avoid_gpu) {
            // Room a GPU node planned for other pods leaves, taken only when the claim keeps
            // its price (a pod that keeps off GPU types never opens or grows a GPU node) and
            // its requirements (the GPU pods keep every zone and capacity type to fall back
            // on). Like any pod that joins, it may leave out candidates too small for it.
            let grow = self.try_new_slot(i, si, false)?;
            let same_reqs = grow.reqs.as_ref().is_none_or(|r| *r == slot.reqs);
            return (grow.price <= slot.price + 1e-12 && same_reqs).then_some(grow);
        }
        let class = &self.classes[ci];
        let usable = |c: usize| self.usable(i, si, c, avoid_gpu, &need);
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
            // The zones seen, with the price each is first offered at (what `pick_zone` would
            // gather from the prefix again), and the cheapest price in each over the prefix:
            // the claim's price once the zone is pinned.
            if !self.topology_ok_on_node(i, slot) {
                // No zone would do: the walk over the candidates is spared.
                return None;
            }
            let mut seen: Vec<(&str, f64)> = Vec::new();
            let mut cheapest: Vec<(&str, f64)> = Vec::new();
            let (zc, cc) = offering_constraints(&slot.reqs);
            for c in slot.candidates.iter().copied() {
                if !usable(c) {
                    continue;
                }
                for o in &self.shapes[c].offerings {
                    if !offering_allowed(o, zc, cc) {
                        continue;
                    }
                    match seen.iter().position(|(z, _)| *z == o.zone) {
                        Some(k) => cheapest[k].1 = cheapest[k].1.min(o.price),
                        None => {
                            seen.push((&o.zone, o.price));
                            cheapest.push((&o.zone, o.price));
                        }
                    }
                }
                if seen.len() >= self.zone_total {
                    break;
                }
            }
            let z = self.pick_zone_among(i, seen, slot)?;
            let price = cheapest.iter().find(|(s, _)| *s == z)?.1;
            let mut reqs = slot.reqs.clone();
            reqs.add_constraint(
                labels::ZONE,
                Constraint::from_operator(labels::ZONE, crate::requirements::Operator::In, &[z])
                    .ok()?,
            );
            return Some(Grow {
                reqs: Some(reqs),
                candidates: None,
                price,
            });
        }
        let one_term = class.terms.len() == 1;
        for term in &class.terms {
            let mut reqs = if term.is_empty() {
                slot.reqs.clone()
            } else {
                slot.reqs.intersect(term)
            };
            if !reqs.satisfiable() {
                continue;
            }
            // `term_fits_shape(&reqs, …)` asked only of the keys that can fail.
            let asked: Vec<(&str, &Constraint)> = term
                .iter()
                .filter(|(k, c)| asks_key(&slot.reqs, k, c, one_term))
                .filter_map(|(k, _)| reqs.get(k).map(|c| (k, c)))
                .collect();
            let (zc, cc) = offering_constraints(&reqs);
            let fits = |c: usize| {
                let shape = &self.shapes[c];
                let fits = asked.iter().all(|(k, con)| key_fits_shape(k, con, shape))
                    && shape.price_allowed(zc, cc).is_some();
                debug_assert_eq!(fits, term_fits_shape(&reqs, shape));
                fits
            };
            let mut cands: Vec<usize> = slot
                .candidates
                .iter()
                .copied()
                .filter(|c| usable(*c) && (term.is_empty() || fits(*c)))
                .collect();
            if cands.is_empty() {
                continue;
            }
            if zone_rules {
                let z = self.pick_zone(i, &reqs, &cands, slot)?;
                super::topology::pin_zone(&mut reqs, z);
                let (zc, cc) = offering_constraints(&reqs);
                cands.retain(|c| self.shapes[*c].price_allowed(zc, cc).is_some());
                if cands.is_empty() {
                    continue;
                }
            }
            let short = |p: &Pool| {
                min_values_short(
                    p,
                    &slot.min_values_relaxed,
                    &self.shapes,
                    &cands,
                    &reqs,
                    self.options.max_instance_types,
                )
            };
            if pool.is_some_and(|p| short(p).is_some()) {
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
            let priced = priced_candidates(&self.shapes, &cands, &reqs);
            let price = priced.first()?.0;
            return Some(Grow {
                reqs: Some(reqs),
                candidates: Some(priced.into_iter().map(|(_, c)| c).collect()),
                price,
            });
        }
        None
    }

    /// How many nodes opening a claim in pool `pi` adds: one, or for an atomic pool that has
    /// none planned yet, every node it lacks (they are planned together).
    pub(super) fn nodes_per_open(&self, pi: usize) -> i64 {
        let pool = &self.snap.pools[pi];
        match pool.atomic_nodes {
            Some(n) => (i64::from(n) - self.state.usage[pi].nodes).max(1),
            None => 1,
        }
    }

    /// Whether a new claim of `shape` under `reqs` (with the rest of an atomic pool's nodes,
    /// as [`Self::nodes_per_open`] counts them) stays within its pool's limits and every
    /// cluster-wide limit; otherwise the first limit it breaks, in words.
    pub(super) fn fits_limits(
        &self,
        pi: usize,
        shape: &Shape,
        reqs: &Requirements,
    ) -> Result<(), String> {
        self.fits_limits_times(pi, shape, reqs, self.nodes_per_open(pi))
    }

    /// [`Self::fits_limits`] for `k` new claims of `shape` at once.
    pub(super) fn fits_limits_times(
        &self,
        pi: usize,
        shape: &Shape,
        reqs: &Requirements,
        k: i64,
    ) -> Result<(), String> {
        let pool = &self.snap.pools[pi];
        let u = &self.state.usage[pi];
        if let Some(n) = pool.atomic_nodes
            && u.nodes >= i64::from(n)
        {
            return Err(format!(
                "NodePool {} scales atomically to {n} nodes and has them (existing, launching or planned)",
                pool.name
            ));
        }
        let atomic = |why: String| match pool.atomic_nodes {
            Some(n) if k > 1 => format!(
                "NodePool {} scales atomically to {n} nodes: {why}",
                pool.name
            ),
            _ => why,
        };
        if let Some(n) = pool.limits.nodes
            && u.nodes + k > n
        {
            return Err(atomic(format!(
                "NodePool {} limit nodes={n} reached",
                pool.name
            )));
        }
        for (name, limit) in &pool.limits.resources {
            if u.resources.get(name) + k * shape.capacity.get(name) > *limit {
                return Err(atomic(format!(
                    "NodePool {} limit {name}={} reached",
                    pool.name,
                    format_amount(name, *limit)
                )));
            }
        }
        if let (n, Some(model)) = &shape.gpus
            && let Some(limit) = pool.limits.gpus_by_model.get(model)
            && u.models.get(model).copied().unwrap_or(0) + k * i64::from(*n) > *limit
        {
            return Err(atomic(format!(
                "NodePool {} limit for GPU model {model}={limit} reached",
                pool.name
            )));
        }
        if !self.snap.cluster_limits.is_empty() {
            let adding = shape.usage().times(k);
            for (li, limit) in self.snap.cluster_limits.iter().enumerate() {
                if may_select(limit, shape, reqs)
                    && let Some(why) = exceeded(limit, &self.state.cluster[li], &adding)
                {
                    return Err(atomic(why));
                }
            }
        }
        Ok(())
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
    pub(super) fn claim_target(
        &self,
        i: usize,
        reqs: &Requirements,
        cands: &[usize],
        avoid_gpu: bool,
    ) -> (f64, f64, Option<usize>) {
        let need = demand(&self.snap.pending[i], &Devices::default());
        let g = self.demand_group[i];
        let left = self.remaining[g].max(1) as f64;
        let mut fits = self.per_node.borrow_mut();
        if fits.len() <= g {
            fits.resize_with(g + 1, Vec::new);
        }
        let fits = &mut fits[g];
        if fits.is_empty() {
            fits.resize(self.shapes.len(), 0);
        }
        let w = self.fit_index.width();
        let ci = self.class_of[i];
        let class_left = need
            .has_gpu_class()
            .then(|| &self.class_left[ci * w..(ci + 1) * w]);
        let mut best = (f64::INFINITY, f64::INFINITY, None);
        let (zc, cc) = offering_constraints(reqs);
        for c in cands {
            let shape = &self.shapes[*c];
            if avoid_gpu && shape.has_gpu {
                continue;
            }
            let Some(p) = shape.price_allowed(zc, cc) else {
                continue;
            };
            // How many of the group one node holds is asked for every candidate of every
            // claim sized: worked out once per group and shape. Saturating at u32::MAX changes
            // nothing, as `left` is far below it.
            if fits[*c] == 0 {
                fits[*c] = (1.0 / dominant_share(&need, &shape.allocatable, false))
                    .floor()
                    .max(1.0) as u32;
            }
            let mut per_node = f64::from(fits[*c]);
            if let Some(k) = self.dra_copies(i, *c) {
                per_node = per_node.min(k);
            }
            match self.volume_copies(i, *c) {
                // Its nodes cannot attach even one such pod.
                Some(k) if k < 1.0 => continue,
                Some(k) => per_node = per_node.min(k),
                None => {}
            }
            let spread = class_left
                .map_or(0.0, |d| self.fit_index.even_spread(d, *c))
                .max(self.dra_spread(i, *c));
            let unit = p * (left / per_node).max(spread).max(1.0) / left;
            if unit < best.0 * (1.0 - 1e-9) {
                best = (unit, p, Some(*c));
            }
        }
        best
    }

    /// Opens the claim `opening` describes ([`Self::open_claim_candidates`]) for pod `i`.
    pub(super) fn open_claim(&mut self, i: usize, opening: super::open::Opening, avoid_gpu: bool) {
        let (pi, reqs, cands, price, _, target) = opening;
        self.state.claims_opened += 1;
        // Size the claim for the pods like this one that are still pending: the candidate with
        // the lowest price per pod it would hold, cheapest on ties. Choosing among pools may
        // have worked it out already, on the plan as it stands.
        let target = target.unwrap_or_else(|| self.claim_target(i, &reqs, &cands, avoid_gpu));
        let target = match target {
            (_, p, Some(c)) => (p, Some(c)),
            _ => (price, cands.first().copied()),
        };
        let pool = &self.snap.pools[pi];
        let name = format!("{}-{}", pool.name, self.state.claims_opened);
        let zone = reqs
            .get(labels::ZONE)
            .and_then(|c| c.single_value())
            .map(str::to_string);
        let min_values_relaxed = self.relaxed_min_values(pool, &cands, &reqs);
        let volumes = self.claim_volume_room(&cands);
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
            min_values_relaxed,
            volumes,
            ..Slot::empty(vec![0; self.nsel()])
        };
        let padding = self.nodes_per_open(pi) - 1;
        self.state.slots.push(slot);
        self.state.usage[pi].nodes += 1;
        let si = self.state.slots.len() - 1;
        self.forget_answers(si);
        // Committing a new claim's first pod narrows its candidates and refreshes it.
        self.commit(i, si, None, false);
        // An atomic pool's other nodes are planned now, as copies of this claim with no pod:
        // they reserve their share of the limits at once, and later pods may fill them.
        for _ in 0..padding {
            self.state.claims_opened += 1;
            let mut copy = self.state.slots[si].clone();
            copy.name = format!("{}-{}", pool.name, self.state.claims_opened);
            copy.pods.clear();
            copy.used = Resources::new();
            copy.devices = Devices::default();
            copy.counts = vec![0; self.nsel()];
            copy.sel_blocks.clear();
            copy.ports.clear();
            copy.volumes = self.claim_volume_room(&copy.candidates);
            copy.reserved = Resources::new();
            copy.reserved_models = BTreeMap::new();
            copy.reserved_cluster = Vec::new();
            copy.dra_claims.clear();
            copy.open = true;
            // Only the candidates the pool's first pod narrowed to are kept, so that the
            // nodes share one template; the padding keeps the claim's zone too.
            self.state.slots.push(copy);
            self.state.usage[pi].nodes += 1;
            let pad = self.state.slots.len() - 1;
            self.forget_answers(pad);
            self.refresh_new_slot(pad, true);
        }
    }

    /// A rolled-back group can leave answers about an earlier claim at this slot index, or
    /// about a claim it changed.
    pub(super) fn forget_answers(&mut self, si: usize) {
        for class in &mut self.classes {
            class.slot_ok.forget(si);
        }
    }

    /// Re-reserves limits for a new claim: the most any of its candidates could use.
    fn reserve(&mut self, si: usize) {
        self.reserve_cluster(si);
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

    /// Re-reserves the cluster-wide limits for a new claim: per limit, the most any candidate
    /// that may become a node the limit selects could add (one node, if any may).
    fn reserve_cluster(&mut self, si: usize) {
        let limits = &self.snap.cluster_limits;
        if limits.is_empty() {
            return;
        }
        let slot = &self.state.slots[si];
        let fresh: Vec<PoolUse> = limits
            .iter()
            .map(|l| {
                slot.candidates
                    .iter()
                    .map(|c| &self.shapes[*c])
                    .filter(|s| may_select(l, s, &slot.reqs))
                    .map(Shape::usage)
                    .reduce(|a, b| a.max(&b))
                    .unwrap_or_default()
            })
            .collect();
        let old = std::mem::replace(&mut self.state.slots[si].reserved_cluster, fresh.clone());
        for (li, now) in fresh.iter().enumerate() {
            if let Some(before) = old.get(li) {
                self.state.cluster[li].sub(before);
            }
            self.state.cluster[li].add(now);
        }
    }

    /// Whether new claim `si` is a GPU node planned for pods already on it (its cheapest
    /// candidate has GPUs) that other pods may ride in. A pod that keeps off GPU types
    /// ([`Planner::avoid_gpu`]) may take room such a claim leaves when the claim keeps its
    /// price and requirements ([`Planner::try_new_slot`]): the node comes anyway, and on an untainted pool
    /// the scheduler would put the pod there too. Not one: a claim with no pod yet (an atomic
    /// pool's other nodes), and a claim of an all-or-nothing group (its nodes share a
    /// placement group only while they hold nothing but the group's pods).
    pub(super) fn is_gpu_claim(&self, si: usize) -> bool {
        let slot = &self.state.slots[si];
        slot.kind == SlotKind::New
            && !slot.pods.is_empty()
            && slot
                .candidates
                .first()
                .is_some_and(|c| self.shapes[*c].has_gpu)
            && slot
                .pods
                .iter()
                .all(|p| self.snap.pending[*p].group.is_none())
    }

    /// Whether pod `i`, keeping off GPU types (`avoid_gpu`), joins new claim `si` as a rider:
    /// in the spare room of a GPU claim ([`Self::is_gpu_claim`]). A pod with DRA claims does
    /// not: its devices are allocated per candidate, which a rider must leave as they are.
    pub(super) fn rides(&self, i: usize, si: usize, avoid_gpu: bool) -> bool {
        avoid_gpu && self.snap.pending[i].claims.is_empty() && self.is_gpu_claim(si)
    }

    pub(super) fn commit(&mut self, i: usize, si: usize, grow: Option<Grow>, avoid_gpu: bool) {
        // A pod riding in a GPU claim's spare room keeps the claim's GPU candidates.
        let avoid_gpu = avoid_gpu && !self.rides(i, si, avoid_gpu);
        let pod = &self.snap.pending[i];
        let need = demand(pod, &self.state.slots[si].devices);
        let is_new = self.state.slots[si].kind == SlotKind::New;
        let resort = grow
            .as_ref()
            .is_some_and(|g| g.reqs.is_some() && g.candidates.is_none());
        let replaced = grow.as_ref().is_some_and(|g| g.candidates.is_some());
        // Candidates only shrink: a shorter list at the end is a narrowed one, whether a grown
        // form brought it (a node selection) or the pod's use did.
        let kept_before = self.state.slots[si].candidates.len();
        {
            let slot = &mut self.state.slots[si];
            if let Some(g) = grow {
                if let Some(reqs) = g.reqs {
                    if slot.zone.is_none() {
                        slot.zone = reqs
                            .get(labels::ZONE)
                            .and_then(|c| c.single_value())
                            .map(str::to_string);
                        // The pods already on the claim are in that zone too.
                        if let Some(z) = &slot.zone
                            && slot.counts.iter().any(|c| *c > 0)
                        {
                            let zc = self
                                .state
                                .zone_counts
                                .entry(z.clone())
                                .or_insert_with(|| vec![0; slot.counts.len()]);
                            for (total, here) in zc.iter_mut().zip(&slot.counts) {
                                *total += here;
                            }
                        }
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
        // Whether the most any candidate offers may have changed: only when a candidate that
        // gave it (in some resource) was dropped. Working it out again over every candidate
        // at each narrowing was a tenth of a large plan.
        let mut lost_most = false;
        let mut kept = usize::MAX;
        if is_new {
            // Keep only the candidates that still hold every pod, in price order.
            let ci = self.class_of[i];
            let class = &self.classes[ci];
            let shapes = &self.shapes;
            let used = &slot.used;
            if resort {
                // The requirements changed (a zone was pinned) without a narrowed list.
                // The candidates without an offering there are dropped by the pricing.
                let priced = priced_candidates(shapes, &slot.candidates, &slot.reqs);
                slot.candidates = priced.into_iter().map(|(_, c)| c).collect();
            }
            let most = &slot.allocatable;
            let mut lost = 0;
            // A type whose nodes are known to attach fewer volumes of a driver than the claim
            // now holds (its first pod may have been admitted by another type only).
            let learned = &self.shape_volume_limits;
            let room = slot.volumes.as_deref();
            let attaches = |c: usize| match (room, learned.get(c).and_then(Option::as_ref)) {
                (Some(room), Some(limits)) => {
                    limits.iter().all(|(d, n)| room.attached(d) <= *n as usize)
                }
                _ => true,
            };
            slot.candidates.retain(|c| {
                let keep = class.shape_ok[*c]
                    && !(avoid_gpu && shapes[*c].has_gpu)
                    && used.fits(&shapes[*c].allocatable)
                    && attaches(*c);
                if !keep {
                    lost |= shapes[*c].allocatable.attains(most);
                }
                keep
            });
            // A resource a dropped candidate gave the most of may still be given by a kept
            // one (every type of a catalog may have the same pod count).
            if lost & Resources::ATTAINS_EXTENDED == 0 {
                for c in &slot.candidates {
                    if lost == 0 {
                        break;
                    }
                    lost &= !shapes[*c].allocatable.attains(most);
                }
            }
            lost_most = lost != 0;
            kept = slot.candidates.len();
            if let Some(first) = slot.candidates.first() {
                slot.price = shapes[*first].price_under(&slot.reqs).unwrap_or(slot.price);
            }
        }
        self.state.slots[si] = slot;
        self.state.zone_counts = zc;
        self.state.zone_blocks = zb;
        self.state.placed[i] = Some(si);
        self.dra_commit(i, si);
        if is_new && kept_before != self.state.slots[si].candidates.len() {
            self.relimit_volumes(si);
        }
        if is_new {
            // A claim's first pod comes before anything was worked out for it.
            let slot = &self.state.slots[si];
            // DRA may have dropped candidates after the narrowing above.
            let narrowed = resort
                || replaced
                || slot.pods.len() == 1
                || lost_most
                || kept != slot.candidates.len();
            self.refresh_new_slot(si, narrowed);
        }
    }

    /// New claim `si`, whose candidates narrowed, attaches at most the least count of the
    /// types left. When that is more than before, pods of its volume counts that it refused
    /// may join it now: no scan starts past it, and a pod deferred for a later plan's claim
    /// does not make the next identical one wait unsearched.
    fn relimit_volumes(&mut self, si: usize) {
        let limits = self.claim_volume_limits(&self.state.slots[si].candidates);
        if let Some(room) = self.state.slots[si].volumes.as_deref_mut()
            && room.relimit(&limits)
        {
            for from in &mut self.scan_from {
                *from = (*from).min(si);
            }
            self.deferred_scan.fill(false);
        }
    }

    /// The first `minValues` rule of `pool` candidates `cands` cannot meet under `reqs`, as a
    /// reason for the pod ([`min_values_short`] with this plan's shapes and type limit).
    pub(super) fn min_values_short(
        &self,
        pool: &Pool,
        cands: &[usize],
        reqs: &Requirements,
    ) -> Option<String> {
        min_values_short(
            pool,
            &BTreeMap::new(),
            &self.shapes,
            cands,
            reqs,
            self.options.max_instance_types,
        )
    }

    /// Whether a `minValues` no candidates can meet lowers the claim instead of refusing it
    /// ([`MinValuesPolicy::BestEffort`]).
    pub(super) fn best_effort(&self) -> bool {
        self.snap.min_values_policy == MinValuesPolicy::BestEffort
    }

    /// Under `BestEffort`, the `minValues` of `pool` candidates `cands` under `reqs` fall
    /// short of, lowered to what they span ([`relaxed_min_values`]); empty under `Strict`.
    pub(super) fn relaxed_min_values(
        &self,
        pool: &Pool,
        cands: &[usize],
        reqs: &Requirements,
    ) -> BTreeMap<String, u32> {
        if !self.best_effort() {
            return BTreeMap::new();
        }
        relaxed_min_values(
            pool,
            &self.shapes,
            cands,
            reqs,
            self.options.max_instance_types,
        )
    }

    /// Of `options` (candidate shapes, cheapest first), the cheapest `max_instance_types`,
    /// swapping in the cheapest that bring a value `minValues` still lacks, so truncation never
    /// breaks what the claim was planned with. The order is kept.
    pub(super) fn truncate_options(
        &self,
        pool: &Pool,
        reqs: &Requirements,
        options: Vec<usize>,
    ) -> Vec<usize> {
        let max = self.options.max_instance_types;
        if options.len() <= max {
            return options;
        }
        let mut keep = vec![false; options.len()];
        let mut kept = 0;
        for (key, &need) in &pool.min_values {
            let chosen: Vec<usize> = options
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(c, _)| *c)
                .collect();
            let mut have = distinct_values(&self.shapes, &chosen, key, reqs);
            let mut chosen = chosen;
            for (j, c) in options.iter().enumerate() {
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
            .filter_map(|(c, k)| k.then_some(c))
            .collect()
    }

    /// After a new claim changed: recompute the most any candidate offers (a quick reject for
    /// later pods) when its candidates may have `narrowed`, close it when even the smallest
    /// pending pod no longer fits, and re-reserve limits.
    pub(super) fn refresh_new_slot(&mut self, si: usize, narrowed: bool) {
        self.last_stamp += 1;
        self.state.slots[si].stamp = self.last_stamp;
        if narrowed {
            let mut most = Resources::new();
            for c in &self.state.slots[si].candidates {
                most.max_assign(&self.shapes[*c].allocatable);
            }
            self.state.slots[si].allocatable = most;
        }
        let slot = &mut self.state.slots[si];
        let free = slot.allocatable.minus(&slot.used);
        if !self.smallest.fits(&free) {
            slot.open = false;
        }
        let room = match slot.candidates.first() {
            Some(c) if slot.open => {
                let a = &self.shapes[*c].allocatable;
                [
                    a.cpu - slot.used.cpu,
                    a.memory - slot.used.memory,
                    a.pods - slot.used.pods,
                ]
            }
            _ => [-1; 3],
        };
        let rooms = &mut self.state.cheapest_room;
        if rooms.len() <= si {
            rooms.resize(si + 1, [-1; 3]);
        }
        rooms[si] = room;
        let live = if slot.open { slot.stamp } else { 0 };
        let stamps = &mut self.state.live_stamp;
        if stamps.len() <= si {
            stamps.resize(si + 1, 0);
        }
        stamps[si] = live;
        self.write_fit_row(si);
        self.block_changed(si);
        self.reserve(si);
    }
}
