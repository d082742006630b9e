//! Warm capacity: claims without pods that bring a NodePool up to its `minNodes`
//! ([`super::PlanOptions::min_nodes`], the Cluster Autoscaler's `--enforce-node-group-min-size`).
//!
//! They are opened once the pods are placed, so the nodes the pods need count first and a pool
//! is never given a small empty node next to the large one its pods were about to open. A warm
//! claim lists every instance type of its pool that stays within the limits, cheapest first, as
//! the pool's template allows them: the provider launches the cheapest it can get (Karpenter's
//! static NodePools leave the choice to the launch the same way). A pool's nodes are its
//! existing nodes not being removed (counted as disruption counts them for `minNodes`), its
//! claims in flight and the claims this plan opens; an atomic pool is left alone (it scales to
//! its own size).

use crate::plan::MinNodesShort;

use super::shapes::{node_requirements, offering_constraints, relaxed_min_values};
use super::{Planner, Slot, SlotKind};

impl Planner<'_> {
    /// Opens the warm claims every pool lacks, within its limits and the cluster-wide ones;
    /// returns the pools still short and why, by pool name.
    pub(super) fn open_warm_claims(&mut self, now: i64) -> Vec<MinNodesShort> {
        let snap = self.snap;
        let mut short = Vec::new();
        let mut order: Vec<usize> = (0..snap.pools.len())
            .filter(|&pi| snap.pools[pi].min_nodes > 0 && snap.pools[pi].atomic_nodes.is_none())
            .collect();
        order.sort_by(|a, b| snap.pools[*a].name.cmp(&snap.pools[*b].name));
        for pi in order {
            let pool = &snap.pools[pi];
            let have = self.pool_nodes(pi, now);
            let mut missing = i64::from(pool.min_nodes) - have;
            while missing > 0 {
                match self.open_warm_claim(pi, missing) {
                    Ok(()) => missing -= 1,
                    Err(reason) => {
                        short.push(MinNodesShort {
                            pool: pool.name.clone(),
                            missing: u32::try_from(missing).unwrap_or(u32::MAX),
                            reason,
                        });
                        break;
                    }
                }
            }
        }
        short
    }

    /// The nodes pool `pi` has towards its `minNodes`: existing ones not being removed at `now`
    /// (as disruption counts them; a node still initializing is counted once, as its claim),
    /// claims in flight, and this plan's claims.
    fn pool_nodes(&self, pi: usize, now: i64) -> i64 {
        let snap = self.snap;
        let name = snap.pools[pi].name.as_str();
        let in_flight: std::collections::HashSet<&str> = snap
            .in_flight
            .iter()
            .filter(|c| c.pool == name)
            .map(|c| c.name.as_str())
            .collect();
        let nodes = snap
            .nodes
            .iter()
            .filter(|n| n.pool.as_deref() == Some(name) && !n.being_removed(now))
            .filter(|n| n.claim.as_deref().is_none_or(|c| !in_flight.contains(c)))
            .count();
        let planned = self
            .state
            .slots
            .iter()
            .filter(|s| s.kind == SlotKind::New && s.pool == Some(pi) && self.claim_written(s))
            .count();
        (nodes + in_flight.len() + planned) as i64
    }

    /// Opens one warm claim in pool `pi`, which lacks `missing` nodes, or says why none can
    /// be. The claim lists the types of which all `missing` nodes stay within the limits, so
    /// that its first node does not reserve room the rest need (a claim reserves what its
    /// largest type would take); when no type allows that many, those of which one does.
    fn open_warm_claim(&mut self, pi: usize, missing: i64) -> Result<(), String> {
        let pool = &self.snap.pools[pi];
        if self.at_claim_limit() {
            return Err(format!(
                "the plan opened its most new claims ({}); the rest come in a later plan",
                self.options.max_new_claims
            ));
        }
        let reqs = node_requirements(pool).into_owned();
        let (zc, cc) = offering_constraints(&reqs);
        let mut limit = None;
        let mut all: Vec<(f64, usize)> = Vec::new();
        let mut one: Vec<(f64, usize)> = Vec::new();
        for (s, shape) in self.shapes.iter().enumerate() {
            if shape.pool != pi {
                continue;
            }
            let Some(price) = shape.price_allowed(zc, cc) else {
                continue;
            };
            if missing > 1 && self.fits_limits_times(pi, shape, &reqs, missing).is_ok() {
                all.push((price, s));
            }
            match self.fits_limits(pi, shape, &reqs) {
                Ok(()) => one.push((price, s)),
                Err(why) => {
                    limit.get_or_insert(why);
                }
            }
        }
        let mut priced = if all.is_empty() { one } else { all };
        if priced.is_empty() {
            return Err(limit.unwrap_or_else(|| {
                format!(
                    "NodePool {} has no instance type with an offering its requirements allow",
                    pool.name
                )
            }));
        }
        priced.sort_by(|(pa, a), (pb, b)| {
            pa.total_cmp(pb)
                .then_with(|| self.shapes[*a].name.cmp(&self.shapes[*b].name))
        });
        let candidates: Vec<usize> = priced.iter().map(|(_, s)| *s).collect();
        if !self.best_effort() {
            let unmet = relaxed_min_values(
                pool,
                &self.shapes,
                &candidates,
                &reqs,
                self.options.max_instance_types,
            );
            if let Some((key, have)) = unmet.iter().next() {
                return Err(format!(
                    "NodePool {} needs minValues {}={} and its instance types within its limits span {have}",
                    pool.name, key, pool.min_values[key]
                ));
            }
        }
        self.state.claims_opened += 1;
        let min_values_relaxed = self.relaxed_min_values(pool, &candidates, &reqs);
        let slot = Slot {
            name: format!("{}-{}", pool.name, self.state.claims_opened),
            pool: Some(pi),
            taints: pool.taints.clone(),
            price: priced[0].0,
            target: priced[0].0,
            target_shape: Some(candidates[0]),
            volumes: self.claim_volume_room(&candidates),
            candidates,
            reqs,
            min_values_relaxed,
            warm: true,
            ..Slot::empty(vec![0; self.nsel()])
        };
        self.state.slots.push(slot);
        self.state.usage[pi].nodes += 1;
        let si = self.state.slots.len() - 1;
        self.forget_answers(si);
        // Works out what the claim may offer and reserves the limits its largest type takes.
        self.refresh_new_slot(si, true);
        Ok(())
    }
}
