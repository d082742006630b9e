//! Making room: a pod with hostname affinity whose every target sits on a full claim gets
//! one target moved to a claim of its own in the same zone, and joins it there.

use crate::labels;

use super::{Planner, SlotKind};

/// Targets [`Planner::make_room_for`] tries to move per hostname affinity term of a pod: each
/// try copies the plan's state, so without a bound a pod with many unmovable-in-the-end targets
/// would cost a copy per target.
const MOVE_TRIES: usize = 8;

impl Planner<'_> {
    /// Takes pod `t` back off new claim `si` (the inverse of [`Self::commit`] for a pod with
    /// no GPU share, DRA claim, host port or anti-affinity, the only pods
    /// [`Self::make_room_for`] moves). The claim keeps its candidates (they still hold the
    /// pods left) and reopens if the room freed takes the smallest pending pod.
    fn uncommit(&mut self, t: usize, si: usize) {
        let pod = &self.snap.pending[t];
        let slot = &mut self.state.slots[si];
        slot.used.sub(&pod.requests);
        slot.pods.retain(|p| *p != t);
        for sel in &self.matches[t] {
            slot.counts[*sel] -= 1;
            if let Some(zc) = slot
                .zone
                .as_deref()
                .and_then(|z| self.state.zone_counts.get_mut(z))
            {
                zc[*sel] -= 1;
            }
        }
        slot.open = true;
        self.state.placed[t] = None;
        self.refresh_new_slot(si, true);
    }

    /// Pod `f` has hostname affinity and every claim holding a pod it must join is full: move
    /// one such target to a new claim of its own in the same zone and place `f` beside it.
    /// A target moves only when that changes nothing else the plan promised: it has no
    /// topology rule but zone affinity (still met in the same zone, which every count keeps),
    /// and no pod left on its claim needs it there (each hostname affinity it meets there is
    /// met by another pod too). Returns whether `f` was placed; otherwise the plan is as before.
    pub(super) fn make_room_for(&mut self, f: usize) -> bool {
        let pod = &self.snap.pending[f];
        let sels: Vec<usize> = pod
            .affinity
            .iter()
            .zip(&self.sel_of_affinity[f])
            .filter(|(t, _)| t.topology_key == labels::HOSTNAME)
            .map(|(_, sel)| *sel)
            .collect();
        for sel in sels {
            let targets: Vec<usize> = (0..self.snap.pending.len())
                .filter(|t| *t != f && self.matches[*t].binary_search(&sel).is_ok())
                .collect();
            let mut tries = 0;
            for t in targets {
                let Some(si) = self.state.placed[t] else {
                    continue;
                };
                if !self.movable(t, si) {
                    continue;
                }
                if tries == MOVE_TRIES {
                    break;
                }
                tries += 1;
                let zone = self.state.slots[si].zone.clone();
                let saved = self.state.clone();
                let saved_scan = self.deferred_scan.clone();
                self.uncommit(t, si);
                let moved = match self.open_claim_candidates(t) {
                    Ok(opening)
                        if opening.1.get(labels::ZONE).and_then(|c| c.single_value())
                            == zone.as_deref() =>
                    {
                        let avoid_gpu = self.avoid_gpu(t);
                        self.open_claim(t, opening, avoid_gpu);
                        true
                    }
                    _ => false,
                };
                if moved && self.place(f) {
                    return true;
                }
                // A deferral this try made is undone with it (the claim it counted is gone).
                self.restore(saved);
                self.deferred_scan = saved_scan;
                self.deferred[f] = false;
            }
        }
        false
    }

    /// Whether pod `t` on new claim `si` may move to a claim of its own in the same zone (see
    /// [`Self::make_room_for`]).
    fn movable(&self, t: usize, si: usize) -> bool {
        let pod = &self.snap.pending[t];
        let slot = &self.state.slots[si];
        if slot.kind != SlotKind::New
            || slot.zone.is_none()
            || pod.group.is_some()
            || pod.gpu_share.is_some()
            || !pod.claims.is_empty()
            || !pod.host_ports.is_empty()
            // Its volumes stay counted on the claim it left (`uncommit` does not undo them).
            || (!pod.volumes.is_empty() && !self.shape_volume_limits.is_empty())
            || !pod.anti_affinity.is_empty()
            || !pod.spread.is_empty()
            || pod.affinity.iter().any(|a| a.topology_key != labels::ZONE)
        {
            return false;
        }
        // A GPU claim keeps a pod that needs one: pods riding in its spare room
        // ([`Self::is_gpu_claim`]) must not be left alone on a GPU node.
        if self.is_gpu_claim(si)
            && slot
                .pods
                .iter()
                .filter(|p| **p != t)
                .all(|p| self.avoid_gpu(*p))
        {
            return false;
        }
        // Every pod left there whose hostname affinity `t` meets still finds another target.
        // A pod its own term selects is counted in the tally but is no target for itself: with
        // `t` elsewhere, the scheduler's self-match exception no longer applies.
        slot.pods.iter().filter(|p| **p != t).all(|p| {
            self.snap.pending[*p]
                .affinity
                .iter()
                .zip(&self.sel_of_affinity[*p])
                .all(|(a, sel)| {
                    let itself = u32::from(self.matches[*p].binary_search(sel).is_ok());
                    a.topology_key != labels::HOSTNAME
                        || self.matches[t].binary_search(sel).is_err()
                        || slot.counts[*sel] - itself >= 2
                })
        })
    }
}
