//! Placing one pod, or one all-or-nothing group: on an existing node or a claim in flight
//! first, then on a new claim of this plan (room already paid for before room a claim was
//! sized for, then the cheapest growth), then on a claim of its own; or deferred, or refused
//! with a reason. Pods an earlier plan nominated to a claim in flight go back there first.

use std::collections::BTreeMap;

use super::{BLOCK, BlockSummary, Devices, Grow, Planner, SlotKind, Verdict, demand};

/// A verdict kept with the claim stamp it was computed at ([`Planner::verdicts`]), in 16
/// bytes rather than the 24 of the pair: the walk over open claims reads one per claim for
/// every pod, and the caches of all scan groups are tens of megabytes at 50,000 pods, so
/// their size is the walk's memory traffic. The kind of verdict sits in the stamp's top two
/// bits (stamps count claim changes and never get there), a growth in `delta`.
#[derive(Clone, Copy, Debug)]
pub(super) struct CachedVerdict {
    tagged: u64,
    delta: f64,
}

impl CachedVerdict {
    /// No verdict: stamp 0, which no open claim has.
    pub(super) const NONE: CachedVerdict = CachedVerdict {
        tagged: 0,
        delta: 0.0,
    };
    const SHIFT: u32 = 62;
    const STAMP: u64 = (1 << Self::SHIFT) - 1;

    fn new(stamp: u64, v: Verdict) -> CachedVerdict {
        debug_assert!(stamp <= Self::STAMP);
        let (kind, delta) = match v {
            Verdict::No => (0, 0.0),
            Verdict::Join { free: false } => (1, 0.0),
            Verdict::Join { free: true } => (2, 0.0),
            Verdict::Grow(d) => (3, d),
        };
        CachedVerdict {
            tagged: stamp | kind << Self::SHIFT,
            delta,
        }
    }

    /// The verdict, when it was computed at `stamp`.
    fn at(self, stamp: u64) -> Option<Verdict> {
        (self.tagged & Self::STAMP == stamp).then_some(match self.tagged >> Self::SHIFT {
            0 => Verdict::No,
            1 => Verdict::Join { free: false },
            2 => Verdict::Join { free: true },
            _ => Verdict::Grow(self.delta),
        })
    }
}

impl<'a> Planner<'a> {
    pub(super) fn place_group(&mut self, group: &str, members: &[usize]) {
        let min = self
            .snap
            .groups
            .get(group)
            .map_or(members.len(), |g| g.min_count as usize);
        if min > members.len() {
            // Members not created yet: a partial gang launched now would sit idle until they
            // come, and the gang scheduler binds none of it before then.
            let msg = format!(
                "all-or-nothing group {group} needs {min} pods but only {} are pending: waiting for the rest",
                members.len()
            );
            for m in members {
                self.state.placed[*m] = None;
                self.reasons[*m] = Some(msg.clone());
            }
            return;
        }
        let saved = self.state.clone();
        let mut failed: Vec<usize> = Vec::new();
        self.in_group = true;
        for m in members {
            if !self.place(*m) {
                failed.push(*m);
            }
        }
        self.in_group = false;
        let placed = members.len() - failed.len();
        if placed >= min {
            // The group's claims past the limit have room other pods may join: a pod deferred
            // before them is searched for again.
            self.deferred_scan.fill(false);
            return;
        }
        let first = failed[0];
        let why = self.reasons[first].clone().unwrap_or_default();
        let msg = format!(
            "all-or-nothing group {group} needs {min} pods but only {placed} fit: pod {} {}",
            self.snap.pending[first].key.name, why
        );
        self.restore(saved);
        let limited = self.limited[first].clone();
        for m in members {
            self.state.placed[*m] = None;
            self.reasons[*m] = Some(msg.clone());
            self.limited[*m] = limited.clone();
        }
    }

    /// Places pod `i`; on failure records the reason and returns false.
    ///
    /// `PreferNoSchedule` is a soft preference, as Karpenter relaxes it: the pod first tries
    /// every place without such a taint it does not tolerate, and only when none takes it
    /// tries again with those places allowed.
    pub(super) fn place(&mut self, i: usize) -> bool {
        if self.explain == Some(i) && self.considered.is_none() {
            // As the pod finds the pools now: the usage of the claims placed before it counts.
            self.considered = Some(self.consider(i));
        }
        if let Some(why) = self.dra_invalid(i) {
            self.reasons[i] = Some(why);
            return false;
        }
        self.deferred[i] = false;
        if self.deferred_scan[self.scan_group[i]] && self.defers(i) {
            self.deferred[i] = true;
            return false;
        }
        let mut placed = self.place_inner(i);
        // A pod waiting for a later plan's claim does not settle for a place it would avoid.
        if !placed && self.any_prefer_no_schedule && !self.deferred[i] {
            let sg = self.scan_group[i];
            let from = self.scan_from[sg];
            self.relaxed = true;
            placed = self.place_inner(i);
            self.relaxed = false;
            // What the relaxed scan skipped says nothing about identical pods' first try.
            self.scan_from[sg] = from;
        }
        if placed {
            self.count_placed(i);
        }
        placed
    }

    /// Pod `i` has a place: one fewer of its kind and its class's demand left to place.
    pub(super) fn count_placed(&mut self, i: usize) {
        let g = self.demand_group[i];
        self.remaining[g] = self.remaining[g].saturating_sub(1);
        let need = demand(&self.snap.pending[i], &Devices::default());
        let w = self.fit_index.width();
        let ci = self.class_of[i];
        self.fit_index.add_to(
            &mut self.class_left[ci * w..(ci + 1) * w],
            &need,
            i64::saturating_sub,
        );
    }

    pub(super) fn place_inner(&mut self, i: usize) -> bool {
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
        // The first claim that holds the pod at no extra price but at a fair share above a
        // node of its own: the place for a pod that cannot have a node of its own.
        let mut free: Option<(usize, Option<Grow>)> = None;
        // The first claim that takes the pod into room it was sized for but has not bought.
        let mut join: Option<(usize, Option<Grow>)> = None;
        let avoid_gpu = self.avoid_gpu(i);
        let mut own = None;
        // Identical pods come one after another and a placement changes one claim, so for
        // pods whose answer depends on nothing but the claim itself, each claim's verdict is
        // kept per scan group and recomputed only when the claim's stamp moved on.
        let cacheable = self.verdict_depends_on_slot_only(i);
        if cacheable && self.verdicts[sg].len() < n {
            self.verdicts[sg].resize(n, CachedVerdict::NONE);
        }
        let req = &self.snap.pending[i].requests;
        let req = [req.cpu, req.memory, req.pods];
        // With every verdict cached, a block of claims that only answer "no" or "grows by so
        // much" and has not changed since is taken from its summary rather than walked.
        let use_blocks = cacheable && !self.any_prefer_no_schedule;
        // The summary of the block being walked: only while it is walked from its first slot
        // with plain answers and no claim of unbought room found (which skips slots after it).
        let mut sum: Option<BlockSummary> = None;
        let mut next = start.max(self.state.fixed);
        while next < n {
            let si = next;
            next += 1;
            if si % BLOCK == 0 {
                let b = si / BLOCK;
                if let Some(s) = sum.take() {
                    self.keep_summary(sg, b - 1, s);
                }
                // A block whose every claim refuses the pod's class answers "no" to every pod
                // of it, whatever its scan group: a group's first walk passes it too.
                if self.classes[ci].slot_ok.block_refused(b) {
                    next = (b + 1) * BLOCK;
                    continue;
                }
            }
            if use_blocks && si % BLOCK == 0 {
                let b = si / BLOCK;
                let version = self.block_version.get(b).copied().unwrap_or(0);
                if join.is_none() && version != 0 {
                    match self.summaries[sg].get(b) {
                        Some(s) if s.version == version => {
                            if s.first_ok != u32::MAX {
                                first_ok.get_or_insert(s.first_ok as usize);
                            }
                            if s.least_at != u32::MAX && best.as_ref().is_none_or(|b| s.least < b.0)
                            {
                                best = Some((s.least, s.least_at as usize, None));
                            }
                            next = (b + 1) * BLOCK;
                            continue;
                        }
                        _ => {
                            sum = Some(BlockSummary {
                                version,
                                ..BlockSummary::NONE
                            })
                        }
                    }
                }
            }
            // Past a claim that takes the pod into unbought room, only room a claim has
            // bought is of interest: its cheapest candidate must hold the pod as it is.
            if join.is_some()
                && self
                    .state
                    .cheapest_room
                    .get(si)
                    .is_none_or(|room| req[0] > room[0] || req[1] > room[1] || req[2] > room[2])
            {
                continue;
            }
            // Only open new claims have a stamp here (see `State::live_stamp`).
            let stamp = self.state.live_stamp.get(si).copied().unwrap_or(0);
            if stamp == 0 || self.avoids_slot(ci, si) {
                continue;
            }
            // The claim's grown form comes with a fresh verdict; a cached one recomputes it
            // only for the claim the pod goes to.
            let cached = match self.verdicts[sg].get(si) {
                Some(c) if cacheable => c.at(stamp),
                _ => None,
            };
            let (verdict, grow) = match cached {
                Some(v) => (v, None),
                None => {
                    let (v, grow) = self.verdict(i, si, avoid_gpu, &mut own);
                    if cacheable {
                        self.verdicts[sg][si] = CachedVerdict::new(stamp, v);
                    }
                    (v, grow)
                }
            };
            let delta = match verdict {
                Verdict::No => continue,
                Verdict::Join { free } => {
                    sum = None;
                    first_ok.get_or_insert(si);
                    if !free {
                        // Room the claim was sized for but has not bought yet: taken only
                        // when no claim has room it pays for anyway.
                        if join.is_none() {
                            join = Some((si, grow));
                        }
                        continue;
                    }
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
            if delta <= 1e-12 {
                sum = None;
                if free.is_none() {
                    free = Some((si, grow));
                }
            } else {
                if let Some(s) = &mut sum {
                    if s.first_ok == u32::MAX {
                        s.first_ok = si as u32;
                    }
                    if delta < s.least {
                        s.least = delta;
                        s.least_at = si as u32;
                    }
                }
                if best.as_ref().is_none_or(|b| delta < b.0) {
                    best = Some((delta, si, grow));
                }
            }
        }
        if let Some(s) = sum {
            // The last block, walked to the last slot there is.
            self.keep_summary(sg, (n - 1) / BLOCK, s);
        }
        self.scan_from[sg] = first_ok.unwrap_or(n);
        if let Some((si, grow)) = join
            && let Some(grow) = grow.or_else(|| self.try_new_slot(i, si, avoid_gpu))
        {
            self.commit(i, si, Some(grow), avoid_gpu);
            return true;
        }
        // 3. grow the claim whose price grows least, when that is cheaper than a node alone.
        let alone = self.open_claim_candidates(i);
        // A pod no new node could take (its pod affinity targets are all on claims of this
        // plan) joins where it costs nothing more rather than stay pending.
        if alone.is_err()
            && let Some((si, grow)) = free
            && let Some(grow) = grow.or_else(|| self.try_new_slot(i, si, avoid_gpu))
        {
            self.commit(i, si, Some(grow), avoid_gpu);
            return true;
        }
        if let Some((delta, si, grow)) = best
            && let Some(grow) = grow.or_else(|| self.try_new_slot(i, si, avoid_gpu))
        {
            let alone_price = alone.as_ref().ok().map(|o| o.4);
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
        // 4. a new claim, sized for the similar pods that follow; past the plan's limit of
        // new claims, a later plan's.
        match alone {
            Ok(_) if self.defers(i) => {
                self.deferred[i] = true;
                // Identical pods get the same answer only while the plan just fills: not for
                // pods whose zone rules or affinity open up as others are placed.
                if self.monotone[i] && self.snap.pending[i].claims.is_empty() {
                    self.deferred_scan[sg] = true;
                }
                false
            }
            Ok(opening) => {
                self.open_claim(i, opening, avoid_gpu);
                true
            }
            Err(reason) => {
                self.reasons[i] = Some(reason);
                false
            }
        }
    }

    /// Keeps the summary of block `b` walked for scan group `sg`.
    fn keep_summary(&mut self, sg: usize, b: usize, s: BlockSummary) {
        let summaries = &mut self.summaries[sg];
        if summaries.len() <= b {
            summaries.resize(b + 1, BlockSummary::NONE);
        }
        summaries[b] = s;
    }

    /// Whether the plan has opened [`PlanOptions::max_new_claims`] claims.
    pub(super) fn at_claim_limit(&self) -> bool {
        self.state.claims_opened >= self.options.max_new_claims
    }

    /// Whether pod `i`, needing a new claim, waits for a later plan: the plan is at its limit
    /// and the pod is not a member of the all-or-nothing group being placed.
    pub(super) fn defers(&self, i: usize) -> bool {
        !self.in_group && self.snap.pending[i].group.is_none() && self.at_claim_limit()
    }

    /// Puts each pod an earlier plan nominated to a claim still in flight
    /// ([`crate::model::Snapshot::nominated`]) back on that claim while it fits there,
    /// largest first, before any other pod is placed; those pods are `done`. Planned from
    /// scratch, the pods that
    /// arrived since would be packed first wherever they fit best, and a nominated pod whose
    /// room they took would get yet another claim, which the scheduler then leaves empty.
    /// Members of all-or-nothing groups are placed with their group instead.
    pub(super) fn keep_nominations(&mut self, order: &[usize], done: &mut [bool]) {
        let snap = self.snap;
        if snap.nominated.is_empty() {
            return;
        }
        let slot_of: BTreeMap<&str, usize> = self
            .state
            .slots
            .iter()
            .enumerate()
            .filter_map(|(si, s)| match s.kind {
                SlotKind::InFlight(ci) => Some((snap.in_flight[ci].name.as_str(), si)),
                _ => None,
            })
            .collect();
        for &i in order {
            let pod = &snap.pending[i];
            let Some(&si) = snap
                .nominated
                .get(&pod.key)
                .and_then(|c| slot_of.get(c.as_str()))
            else {
                continue;
            };
            if pod.group.is_some() || self.dra_invalid(i).is_some() || !self.fits_fixed(i, si) {
                continue;
            }
            if self.explain == Some(i) {
                self.considered = Some(self.consider(i));
            }
            self.commit(i, si, None, false);
            self.count_placed(i);
            done[i] = true;
        }
    }
}
