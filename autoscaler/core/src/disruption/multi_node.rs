//! Consolidation method 4, multi-node: the longest prefix of the leftovers (at most
//! `max_multi_node_candidates`) whose pods fit on the rest plus at most one new node cheaper
//! than the prefix, found by binary search on its length.

use std::collections::BTreeSet;

use crate::model::{DisruptionReason, Node};
use crate::plan::Plan;

use super::candidates::movable;
use super::replace::{cheaper_only, is_spot, spot_to_spot};
use super::{Command, Method, Pass, VerdictKind};

impl Pass<'_> {
    /// Phase 5: one command for the longest prefix of `leftovers` that consolidates.
    pub(super) fn multi_node(&mut self, mut leftovers: Vec<String>) {
        leftovers.truncate(self.config.max_multi_node_candidates);
        if leftovers.len() < 2 {
            return;
        }
        let (mut lo, mut hi) = (2usize, leftovers.len());
        let mut best = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            match self.try_prefix(&leftovers[..mid]) {
                Some(found) => {
                    best = Some((mid, found));
                    lo = mid + 1;
                }
                None => hi = mid - 1,
            }
        }
        let Some((k, (removed, plan, cost))) = best else {
            return;
        };
        let current: Vec<Node> = removed
            .iter()
            .map(|i| self.work[*i].clone().into_owned())
            .collect();
        let nodes: Vec<&Node> = current.iter().collect();
        let replaced = !plan.new_claims.is_empty();
        if let Err(e) = self.allowance.admit(
            self.snap,
            &nodes,
            DisruptionReason::Underutilized,
            replaced,
            true,
        ) {
            for n in nodes {
                self.keep(&n.name, e.clone());
            }
            return;
        }
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let pods = nodes
            .iter()
            .flat_map(|n| movable(n))
            .map(|p| p.key.clone())
            .collect();
        for name in &names {
            self.disrupt(
                name,
                VerdictKind::Underutilized,
                format!("underutilized: consolidated with {} other nodes", k - 1),
            );
        }
        self.apply(&removed, &plan);
        self.out.commands.push(Command {
            reason: DisruptionReason::Underutilized,
            method: if replaced {
                Method::Replace
            } else {
                Method::Delete
            },
            nodes: names,
            pods,
            savings: cost - plan.new_cost(),
            replacement: plan.new_claims.first().cloned(),
            decided_at: self.now,
        });
    }

    /// Whether the nodes of `prefix` consolidate: their pods fit on the rest plus at most one
    /// new node cheaper than they are. Their indexes, the plan and what they cost.
    fn try_prefix(&self, prefix: &[String]) -> Option<(BTreeSet<usize>, Plan, f64)> {
        let work = &self.work;
        let removed = self.indices(prefix.iter().map(String::as_str));
        let mut plan = self.simulate(&removed, true);
        let cost: f64 = removed.iter().map(|i| work[*i].price.unwrap_or(0.0)).sum();
        if !(plan.unschedulable.is_empty() && plan.new_claims.len() <= 1 && plan.new_cost() < cost)
        {
            return None;
        }
        if let Some(c) = plan.new_claims.pop() {
            let mut c = cheaper_only(self.snap, c, cost)?;
            // Spot nodes replaced together get a spot node when it can be one, as in
            // Karpenter; the flexibility of 15 cheaper types is asked of single nodes only.
            if removed.iter().all(|i| is_spot(&work[*i])) {
                c = spot_to_spot(self.snap, c, 0).ok()?;
            }
            plan.new_claims.push(c);
        }
        Some((removed, plan, cost))
    }
}
