//! Topology: label selectors indexed for matching, zone spread, and pod (anti-)affinity
//! checks on a slot.

use std::collections::HashMap;

use crate::labels;
use crate::requirements::{Labels, Requirements, ValueSet};

use super::shapes::offering_allowed;
use super::slots::ports_conflict;
use super::{Planner, SelKey, Slot};

/// Whether selector `sel` selects a pod in namespace `ns` with `labels`.
pub(super) fn sel_matches(sel: &SelKey, ns: &str, labels: &Labels) -> bool {
    sel.0.contains("", ns) && sel.1.matches(labels)
}

/// Finds the selectors a pod's labels match without testing every selector: a selector with an
/// `In` constraint can only match pods carrying one of its values, so it is filed under each
/// (key, value); the rest are tested always.
#[derive(Clone)]
pub(super) struct SelectorIndex {
    by_label: HashMap<(String, String), Vec<usize>>,
    always: Vec<usize>,
}

impl SelectorIndex {
    pub(super) fn new(selectors: &[SelKey]) -> Self {
        let mut by_label: HashMap<(String, String), Vec<usize>> = HashMap::new();
        let mut always = Vec::new();
        for (i, (_, req)) in selectors.iter().enumerate() {
            let key = req.iter().find_map(|(k, c)| match &c.values {
                ValueSet::In(vals) if !c.allow_absent => Some((k, vals)),
                _ => None,
            });
            match key {
                Some((k, vals)) => {
                    for v in vals {
                        by_label
                            .entry((k.to_string(), v.clone()))
                            .or_default()
                            .push(i);
                    }
                }
                None => always.push(i),
            }
        }
        SelectorIndex { by_label, always }
    }

    /// Selector ids matching a pod, ascending.
    pub(super) fn matching(&self, selectors: &[SelKey], ns: &str, labels: &Labels) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .always
            .iter()
            .copied()
            .filter(|i| sel_matches(&selectors[*i], ns, labels))
            .collect();
        if !self.by_label.is_empty() {
            for (k, v) in labels {
                if let Some(ids) = self.by_label.get(&(k.clone(), v.clone())) {
                    out.extend(
                        ids.iter()
                            .copied()
                            .filter(|i| sel_matches(&selectors[*i], ns, labels)),
                    );
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl<'a> Planner<'a> {
    /// Topology rules for a slot whose zone and hostname are known.
    pub(super) fn topology_ok_fixed(&self, i: usize, si: usize) -> bool {
        let slot = &self.state.slots[si];
        self.topology_ok(i, slot, slot.zone.as_deref())
    }

    fn zone_count(&self, sel: usize, zone: &str) -> u32 {
        self.state.zone_counts.get(zone).map_or(0, |v| v[sel])
    }

    /// Pods matching `sel` in `zone` once `slot` is there: a claim not yet pinned to a zone
    /// brings its own pods into the zone it is pinned to.
    fn zone_count_with(&self, sel: usize, zone: &str, slot: &Slot) -> u32 {
        let own = if slot.zone.is_none() {
            slot.counts[sel]
        } else {
            0
        };
        self.zone_count(sel, zone) + own
    }

    /// Whether pod `i` may go on `slot` placed in `zone` (None: zone not known yet, so zone
    /// rules must be settled by pinning first).
    pub(super) fn topology_ok(&self, i: usize, slot: &Slot, zone: Option<&str>) -> bool {
        self.topology_ok_on_node(i, slot) && self.topology_ok_in_zone(i, slot, zone)
    }

    /// The rules of [`Self::topology_ok`] that hold or fail whatever the slot's zone: host
    /// ports and the hostname terms. Weighing every zone for a slot asks them once.
    pub(super) fn topology_ok_on_node(&self, i: usize, slot: &Slot) -> bool {
        let pod = &self.snap.pending[i];
        if ports_conflict(&pod.host_ports, slot.ports.iter()) {
            return false;
        }
        // Anti-affinity of pods already there against this pod.
        if slot
            .sel_blocks
            .iter()
            .any(|b| self.matches[i].binary_search(b).is_ok())
        {
            return false;
        }
        for (sel, key) in &slot.blocks {
            if key == labels::HOSTNAME && sel_matches(sel, &pod.key.namespace, &pod.labels) {
                return false;
            }
        }
        for (t, sel) in pod.anti_affinity.iter().zip(&self.sel_of_anti[i]) {
            if t.topology_key == labels::HOSTNAME && slot.counts[*sel] > 0 {
                return false;
            }
        }
        for (t, sel) in pod.affinity.iter().zip(&self.sel_of_affinity[i]) {
            if t.topology_key == labels::HOSTNAME
                && slot.counts[*sel] == 0
                && !(self.matches[i].contains(sel) && self.nobody_matches(*sel))
            {
                return false;
            }
        }
        for (t, sel) in pod.spread.iter().zip(&self.sel_of_spread[i]) {
            // The pod counts in its own domain only when it matches the constraint's selector
            // (as the scheduler's PodTopologySpread does). A new node is always a possible
            // domain with no matching pod, so min is 0.
            if t.hard && t.topology_key == labels::HOSTNAME {
                let itself = u32::from(self.matches[i].binary_search(sel).is_ok());
                if slot.counts[*sel] + itself > t.max_skew {
                    return false;
                }
            }
        }
        true
    }

    /// The zone rules of [`Self::topology_ok`]: what depends on the zone `slot` is (or would be
    /// pinned to) in.
    fn topology_ok_in_zone(&self, i: usize, slot: &Slot, zone: Option<&str>) -> bool {
        let pod = &self.snap.pending[i];
        if let Some(z) = zone {
            for (sel, bz) in &self.state.zone_blocks {
                if bz == z && sel_matches(sel, &pod.key.namespace, &pod.labels) {
                    return false;
                }
            }
        }
        for (t, sel) in pod.anti_affinity.iter().zip(&self.sel_of_anti[i]) {
            if t.topology_key == labels::ZONE {
                match zone {
                    Some(z) if self.zone_count_with(*sel, z, slot) == 0 => {}
                    _ => return false,
                }
            }
        }
        for (t, sel) in pod.affinity.iter().zip(&self.sel_of_affinity[i]) {
            if t.topology_key == labels::ZONE {
                let self_match = self.matches[i].contains(sel);
                match zone {
                    Some(z) => {
                        if self.zone_count_with(*sel, z, slot) == 0
                            && !(self_match && self.nobody_matches(*sel))
                        {
                            return false;
                        }
                    }
                    None => return false,
                }
            }
        }
        let ci = self.class_of[i];
        for (t, sel) in pod.spread.iter().zip(&self.sel_of_spread[i]) {
            if !t.hard || t.topology_key != labels::ZONE {
                continue;
            }
            // As on a node, the pod counts in its zone only when the selector matches it.
            let itself = u32::from(self.matches[i].binary_search(sel).is_ok());
            let Some(z) = zone else { return false };
            // The claim's own pods count in `z` only, so the other zones' minimum is
            // taken without them.
            let here = self.zone_count_with(*sel, z, slot);
            let zones = &self.classes[ci].zones;
            // Fewer eligible zones than minDomains: the scheduler takes the minimum as 0.
            let min = if zones.len() < t.min_domains as usize {
                0
            } else {
                zones
                    .iter()
                    .map(|d| {
                        if d == z {
                            here
                        } else {
                            self.zone_count(*sel, d)
                        }
                    })
                    .min()
                    .unwrap_or(0)
            };
            if here + itself > min + t.max_skew {
                return false;
            }
        }
        true
    }

    fn nobody_matches(&self, sel: usize) -> bool {
        self.state.slots.iter().all(|s| s.counts[sel] == 0)
    }

    pub(super) fn needs_zone(&self, i: usize) -> bool {
        let pod = &self.snap.pending[i];
        self.zone_target[i]
            || pod
                .spread
                .iter()
                .any(|t| t.hard && t.topology_key == labels::ZONE)
            || pod.affinity.iter().any(|t| t.topology_key == labels::ZONE)
            || pod
                .anti_affinity
                .iter()
                .any(|t| t.topology_key == labels::ZONE)
            || self
                .state
                .zone_blocks
                .iter()
                .any(|(sel, _)| sel_matches(sel, &pod.key.namespace, &pod.labels))
    }

    /// Chooses a zone for a pod with zone rules on a claim not yet pinned: the allowed zone
    /// with the fewest matching pods, then the cheapest, then by name.
    pub(super) fn pick_zone(
        &self,
        i: usize,
        reqs: &Requirements,
        cands: &[usize],
        slot: &Slot,
    ) -> Option<String> {
        // Candidates come cheapest first, so the first price seen for a zone is its cheapest;
        // stop once every zone is seen.
        let mut zones: Vec<(&str, f64)> = Vec::new();
        let zc = reqs.get(labels::ZONE);
        let cc = reqs.get(labels::CAPACITY_TYPE);
        for c in cands {
            for o in &self.shapes[*c].offerings {
                if offering_allowed(o, zc, cc) && !zones.iter().any(|(z, _)| *z == o.zone) {
                    zones.push((&o.zone, o.price));
                }
            }
            if zones.len() >= self.zone_total {
                break;
            }
        }
        self.pick_zone_among(i, zones, slot)
    }

    /// [`Self::pick_zone`] given the zones `reqs` allow on the candidates, each with its first
    /// (cheapest) price, in the order the candidates first offer them: a caller that walked
    /// the candidates already does not walk them again.
    pub(super) fn pick_zone_among(
        &self,
        i: usize,
        zones: Vec<(&str, f64)>,
        slot: &Slot,
    ) -> Option<String> {
        if !self.topology_ok_on_node(i, slot) {
            return None;
        }
        let pod_sels = &self.sel_of_spread[i];
        // Each zone's count is summed once, not again in every comparison.
        zones
            .into_iter()
            .filter(|(z, _)| self.topology_ok_in_zone(i, slot, Some(z)))
            .map(|(z, p)| {
                let count: u32 = pod_sels.iter().map(|s| self.zone_count(*s, z)).sum();
                (count, p, z)
            })
            .min_by(|(ca, pa, za), (cb, pb, zb)| ca.cmp(cb).then(pa.total_cmp(pb)).then(za.cmp(zb)))
            .map(|(.., z)| z.to_string())
    }
}

/// Pins `reqs` to `zone` (the one [`Planner::pick_zone`] chose): the node's zone label must be
/// it.
pub(super) fn pin_zone(reqs: &mut Requirements, zone: String) {
    let c = crate::requirements::Constraint {
        allow_absent: false,
        values: ValueSet::In([zone].into()),
        gt: None,
        lt: None,
    };
    reqs.add_constraint(labels::ZONE, c);
}
