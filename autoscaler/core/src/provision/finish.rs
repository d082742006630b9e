//! The plan out of the planner's final state: placements, new claims with their options,
//! refused and deferred pods.

use std::collections::BTreeMap;

use crate::labels;
use crate::plan::{ClaimOption, NewClaim, Placement, Plan, Unschedulable};

use super::claims::mark_group_claims;
use super::shapes::{offering_allowed, offering_constraints, pool_defined_values};
use super::{Planner, SlotKind};

impl Planner<'_> {
    /// The plan: placements on existing nodes and in-flight claims, the new claims with their
    /// options (an atomic pool's sharing one template), the pods refused and those deferred.
    pub(super) fn finish(self) -> Plan {
        let mut plan = Plan::default();
        let pending = &self.snap.pending;
        let mut unplaced: Vec<usize> = Vec::new();
        for (i, p) in self.state.placed.iter().enumerate() {
            if !self.plans_pod(i) {
                continue;
            }
            match p {
                None if self.deferred[i] => plan.deferred.push(pending[i].key.clone()),
                Some(si) => {
                    let slot = &self.state.slots[*si];
                    match slot.kind {
                        SlotKind::Existing(_) => plan.existing.push(Placement {
                            pod: pending[i].key.clone(),
                            target: slot.name(self.snap).to_string(),
                        }),
                        SlotKind::InFlight(_) => plan.in_flight.push(Placement {
                            pod: pending[i].key.clone(),
                            target: slot.name(self.snap).to_string(),
                        }),
                        SlotKind::New => {}
                    }
                }
                None => unplaced.push(i),
            }
        }
        plan.existing.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan.in_flight.sort_by(|a, b| a.pod.cmp(&b.pod));
        // An atomic pool's claims share one template: the candidates every one of them keeps
        // (each claim's candidates hold its pods, so their intersection holds all of them).
        let mut shared: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for slot in &self.state.slots {
            if let (SlotKind::New, Some(pi)) = (&slot.kind, slot.pool)
                && self.snap.pools[pi].atomic_nodes.is_some()
            {
                shared
                    .entry(pi)
                    .and_modify(|c| c.retain(|x| slot.candidates.contains(x)))
                    .or_insert_with(|| slot.candidates.clone());
            }
        }
        for slot in &self.state.slots {
            if !self.claim_written(slot) {
                continue;
            }
            let atomic = self.atomic(slot);
            let pool = &self.snap.pools[slot.pool.expect("new claims have a pool")];
            let candidates = match slot.pool.and_then(|pi| shared.get(&pi)) {
                Some(c) if atomic && !c.is_empty() => c,
                _ => &slot.candidates,
            };
            let (zc, cc) = offering_constraints(&slot.reqs);
            // Priced and ordered by candidate first; only the kept ones are written out, as
            // a claim of a large catalog keeps 60 of hundreds.
            let first_price = |c: usize| {
                self.shapes[c]
                    .offerings
                    .iter()
                    .find(|o| offering_allowed(o, zc, cc))
                    .map(|o| o.price)
            };
            let mut priced: Vec<(f64, usize)> = Vec::with_capacity(candidates.len());
            priced.extend(
                candidates
                    .iter()
                    .filter_map(|c| first_price(*c).map(|p| (p, *c))),
            );
            priced.sort_by(|(pa, a), (pb, b)| {
                pa.total_cmp(pb)
                    .then_with(|| self.shapes[*a].name.cmp(&self.shapes[*b].name))
            });
            let kept = self.truncate_options(
                pool,
                &slot.reqs,
                priced.into_iter().map(|(_, c)| c).collect(),
            );
            let options: Vec<ClaimOption> = kept
                .iter()
                .map(|c| {
                    let s = &self.shapes[*c];
                    let allowed = s.offerings.iter().map(|o| offering_allowed(o, zc, cc));
                    // Most claims accept every offering of their types, and then the options
                    // share the shape's list rather than each writing its own.
                    let offerings = if allowed.clone().all(|a| a) {
                        s.written.clone()
                    } else {
                        allowed
                            .zip(s.written.iter())
                            .filter(|(a, _)| *a)
                            .map(|(_, w)| w.clone())
                            .collect()
                    };
                    ClaimOption {
                        instance_type: s.name.clone(),
                        price: offerings.first().map_or(f64::INFINITY, |o| o.2),
                        offerings,
                    }
                })
                .collect();
            let gpus = candidates
                .iter()
                .map(|c| &self.shapes[*c])
                .find(|s| options.first().is_some_and(|o| o.instance_type == s.name))
                .map_or(0, |s| s.gpus.0);
            let mut labels_out = pool.labels.clone();
            if let Some(&c) = candidates.first() {
                labels_out.extend(pool_defined_values(
                    &self.shapes[c].pool_defined,
                    &slot.reqs,
                ));
            }
            labels_out.insert(labels::NODEPOOL.into(), pool.name.clone());
            // As Karpenter's NodeClaim: the pods' requests and those of the DaemonSets that land
            // on the cheapest type listed.
            let mut requests = slot.used.clone();
            if let Some(c) = kept.first() {
                requests.add(&self.shapes[*c].daemonsets);
            }
            let mut pods: Vec<_> = slot.pods.iter().map(|i| pending[*i].key.clone()).collect();
            pods.sort();
            let dra = slot.pods.iter().any(|i| !pending[*i].claims.is_empty());
            // Counted on the types written out, so the NodeClaim never asks for more values
            // than it lists.
            let min_values_relaxed = self.relaxed_min_values(pool, &kept, &slot.reqs);
            plan.new_claims.push(NewClaim {
                name: slot.name.clone(),
                pool: pool.name.clone(),
                price: options.first().map_or(0.0, |o| o.price),
                instance_types: options,
                requirements: slot.reqs.clone(),
                labels: labels_out,
                taints: pool.taints.clone(),
                startup_taints: pool.startup_taints.clone(),
                pods,
                requests,
                gpus,
                group: None,
                atomic,
                dra,
                min_values_relaxed,
                warm: slot.warm,
            });
        }
        mark_group_claims(pending, &mut plan);
        for i in unplaced {
            plan.unschedulable.push(Unschedulable {
                pod: pending[i].key.clone(),
                reason: self.reasons[i]
                    .clone()
                    .unwrap_or_else(|| "not placed".into()),
                limited_by: self.limited[i].clone(),
            });
        }
        plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan.deferred.sort();
        plan
    }

    /// Whether `slot` is a new claim of an atomic pool.
    fn atomic(&self, slot: &super::Slot) -> bool {
        slot.pool
            .is_some_and(|pi| self.snap.pools[pi].atomic_nodes.is_some())
    }

    /// Whether the plan lists `slot` as a new claim: a new claim with pods, any new claim of
    /// an atomic pool (its scale-up is written whole), or one opened to reach `minNodes`.
    pub(super) fn claim_written(&self, slot: &super::Slot) -> bool {
        slot.kind == SlotKind::New && (!slot.pods.is_empty() || self.atomic(slot) || slot.warm)
    }
}
