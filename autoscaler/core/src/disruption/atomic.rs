//! Atomic NodePools (`Pool::atomic_nodes`, the Cluster Autoscaler's `ZeroOrMaxNodeScaling`):
//! their nodes leave all together or not at all. When every node of such a pool is a
//! candidate and their pods fit on the other nodes together (no replacement: the pool goes to
//! zero), one delete command removes them all, counted as one disruption against the pool's
//! budgets; otherwise each of its candidates is kept, naming the node that holds the pool.

use crate::model::{DisruptionReason, Node};

use super::candidates::movable;
use super::simulate::nowhere_to_go;
use super::{Blocker, Command, Method, Pass, VerdictKind};

impl Pass<'_> {
    /// Phase 2b: settles the nodes of atomic pools and takes them out of `candidates`, so no
    /// later phase removes or replaces one of them alone.
    pub(super) fn atomic(&mut self, candidates: &mut Vec<usize>) {
        let snap = self.snap;
        for pool in snap.pools.iter().filter(|p| p.atomic_nodes.is_some()) {
            let members: Vec<usize> = (0..snap.nodes.len())
                .filter(|ni| snap.nodes[*ni].pool.as_ref() == Some(&pool.name))
                .collect();
            let chosen: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|ni| members.contains(ni))
                .collect();
            candidates.retain(|ni| !members.contains(ni));
            if chosen.is_empty() {
                continue;
            }
            let keep_all = |pass: &mut Self, why: String| {
                for ni in &chosen {
                    pass.keep(
                        &snap.nodes[*ni].name,
                        Blocker::new(VerdictKind::AtomicPool, why.clone()),
                    );
                }
            };
            if let Some(stays) = members.iter().find(|ni| !chosen.contains(ni)) {
                let n = &snap.nodes[*stays];
                let why = self.verdict.get(&n.name).map_or("", |v| v.reason.as_str());
                let why = format!(
                    "NodePool {} scales down only as a whole: node {} stays ({why})",
                    pool.name, n.name
                );
                keep_all(self, why);
                continue;
            }
            let removed = self.indices(chosen.iter().map(|ni| snap.nodes[*ni].name.as_str()));
            let plan = self.simulate(&removed, false);
            if let Some(u) = plan.unschedulable.first() {
                let why = format!(
                    "NodePool {} scales down only as a whole and its nodes' pods do not fit elsewhere together: {}",
                    pool.name,
                    nowhere_to_go(u)
                );
                keep_all(self, why);
                continue;
            }
            let current: Vec<Node> = removed
                .iter()
                .map(|i| self.work[*i].clone().into_owned())
                .collect();
            let nodes: Vec<&Node> = current.iter().collect();
            let empty = nodes.iter().all(|n| movable(n).is_empty());
            let reason = if empty {
                DisruptionReason::Empty
            } else {
                DisruptionReason::Underutilized
            };
            if let Err(e) = self.allowance.admit_whole(snap, &nodes, reason) {
                for ni in &chosen {
                    self.keep(&snap.nodes[*ni].name, e.clone());
                }
                continue;
            }
            let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
            let pods = nodes
                .iter()
                .flat_map(|n| movable(n))
                .map(|p| p.key.clone())
                .collect();
            let savings = nodes.iter().filter_map(|n| n.price).sum();
            let (kind, words) = if empty {
                (VerdictKind::Empty, "empty".to_string())
            } else {
                (
                    VerdictKind::Underutilized,
                    format!(
                        "underutilized: NodePool {} removed whole, its pods fit on other nodes",
                        pool.name
                    ),
                )
            };
            for name in &names {
                self.disrupt(name, kind, words.clone());
                self.gone.insert(name.clone());
            }
            self.apply(&removed, &plan);
            self.out.commands.push(Command {
                reason,
                method: Method::Delete,
                nodes: names,
                pods,
                replacement: None,
                savings,
                decided_at: self.now,
            });
        }
    }
}
