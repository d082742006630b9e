//! Consolidation method 2, delete: one underutilized node at a time, removed when its pods fit
//! on the other nodes as they are (no new node). A node that does not goes on to
//! [`replace`](super::replace).

use std::collections::BTreeSet;

use crate::model::{DisruptionReason, Node};

use super::candidates::movable;
use super::{Command, Method, Pass, VerdictKind};

impl Pass<'_> {
    /// Phase 4: each non-empty candidate, on the cluster as the previous commands left it,
    /// deleted or else replaced. Returns the nodes neither could remove, for
    /// [`multi_node`](super::multi_node).
    pub(super) fn one_at_a_time(&mut self, candidates: &[usize]) -> Vec<String> {
        let mut leftovers = Vec::new();
        for ni in candidates {
            let n = &self.snap.nodes[*ni];
            // Empty nodes were settled in phase 3, within the Empty budget.
            if self.gone.contains(&n.name) || movable(n).is_empty() {
                continue;
            }
            let Some(wi) = self.index(&n.name) else {
                continue;
            };
            // The node as earlier commands left it (it may have received pods).
            let current = self.work[wi].clone().into_owned();
            let removed = BTreeSet::from([wi]);
            // Once a budget or parallelism limit refuses even a replacement, neither method
            // can take the node: no simulation (on a large cluster most candidates of a pass
            // come after the limits are spent).
            if let Err(b) = self.allowance.admit(
                self.snap,
                &[&current],
                DisruptionReason::Underutilized,
                true,
                false,
            ) {
                self.keep(&current.name, b);
                if !self.right_size.contains_key(&current.name) {
                    leftovers.push(current.name.clone());
                }
                continue;
            }
            if self.delete(&current, &removed) {
                continue;
            }
            // A node kept only for right-sizing is no multi-node candidate: it is not
            // underutilized, and merging it would need no saving of its own.
            if !self.replace(&current, &removed) && !self.right_size.contains_key(&current.name) {
                leftovers.push(current.name.clone());
            }
        }
        leftovers
    }

    /// Deletes node `n` (`removed`, its index in the working cluster) when its pods fit on the
    /// other nodes. True when that settled the node: deleted, or refused by a budget.
    fn delete(&mut self, n: &Node, removed: &BTreeSet<usize>) -> bool {
        let plan = self.simulate(removed, false);
        if !plan.unschedulable.is_empty() {
            return false;
        }
        if let Err(e) = self.allowance.admit(
            self.snap,
            &[n],
            DisruptionReason::Underutilized,
            false,
            true,
        ) {
            self.keep(&n.name, e);
            return true;
        }
        let pods = movable(n).iter().map(|p| p.key.clone()).collect();
        self.apply(removed, &plan);
        self.gone.insert(n.name.clone());
        let why = match self.right_size.get(&n.name) {
            Some((_, above)) => format!("right-sized: {above}, but its pods fit on other nodes"),
            None => "underutilized: its pods fit on other nodes".into(),
        };
        self.disrupt(&n.name, VerdictKind::Underutilized, why);
        self.out.commands.push(Command {
            reason: DisruptionReason::Underutilized,
            method: Method::Delete,
            nodes: vec![n.name.clone()],
            pods,
            replacement: None,
            savings: n.price.unwrap_or(0.0),
            decided_at: self.now,
        });
        true
    }
}
