//! Budgets: what may still be disrupted (NodePool disruption budgets per reason, minNodes,
//! cluster-wide minimums, PodDisruptionBudgets, Cluster Autoscaler's parallelism limits), and
//! phase 2 of planning, each NodePool's scale-down delays.
//!
//! Cluster-wide minimums ([`crate::model::ClusterLimit::min`]) count the nodes not being
//! deleted, as the Cluster Autoscaler does; a replacement is counted as adding nothing (it is
//! cheaper, so it may well be smaller), which can only keep a node the minimum would allow.

use std::collections::BTreeMap;

use crate::model::{Budget, BudgetValue, DisruptionReason, Node, Snapshot};
use crate::quota::{Usage, below_min, node_usage, selects, usage_of_nodes};

use super::candidates::{movable, pdb_selects};
use super::{
    Blocker, DisruptionConfig, DisruptionState, InProgress, Pass, PoolEvents, VerdictKind, cooldown,
};

/// How many nodes of a pool of `total` nodes budget `b` lets be disrupted at once.
/// Percentages round up, as Karpenter does: 10 % of 9 nodes is 1.
pub fn budget_nodes(b: &Budget, total: i64) -> i64 {
    match b.nodes {
        BudgetValue::Count(n) => i64::from(n),
        BudgetValue::Percent(p) => (total * i64::from(p) + 99) / 100,
    }
}

/// How many nodes of a pool of `total` nodes its `budgets` let be disrupted at once for
/// `reason` at `now`: the lowest of the budgets in force ([`Budget::active_at`]) that apply to
/// the reason; `i64::MAX` when none does. A scheduled budget outside its window allows
/// everything, as if absent (Karpenter's `GetAllowedDisruptionsByReason`).
pub fn budget_allows(budgets: &[Budget], total: i64, reason: DisruptionReason, now: i64) -> i64 {
    budgets
        .iter()
        .filter(|b| b.reasons.is_empty() || b.reasons.contains(&reason))
        .filter(|b| b.active_at(now))
        .map(|b| budget_nodes(b, total))
        .min()
        .unwrap_or(i64::MAX)
}

/// What a NodePool's disruption budgets are measured against, over the pool's `nodes` at
/// `now`: the nodes counted (initialized ones only) and those already disrupted (being
/// deleted, removed by another autoscaler, or not ready), as Karpenter counts them.
pub fn budget_standing<'a>(nodes: impl Iterator<Item = &'a Node>, now: i64) -> (i64, i64) {
    let (mut total, mut disrupted) = (0, 0);
    for n in nodes.filter(|n| n.initialized) {
        total += 1;
        if n.being_removed(now) || !n.ready {
            disrupted += 1;
        }
    }
    (total, disrupted)
}

/// Budgets left per pool and reason, and minNodes headroom.
pub(super) struct Allowance {
    /// (pool index, reason) -> nodes that may still be disrupted.
    budget: BTreeMap<(usize, DisruptionReason), i64>,
    /// Pool index -> nodes that may still be removed before minNodes.
    above_min: Vec<i64>,
    /// PDB index -> disruptions left.
    pdb_left: Vec<i64>,
    /// Cluster-wide limit index -> what the nodes not being deleted add up to.
    cluster_total: Vec<Usage>,
    /// Nodes that may still start being removed (`--max-scale-down-parallelism`).
    removals_left: i64,
    /// Of those, nodes with pods to drain (`--max-drain-parallelism`).
    drains_left: i64,
    /// The two limits, for the words.
    limits: (usize, usize),
    /// Whether a whole atomic pool was admitted in this pass: only the first may overrun the
    /// parallelism limits.
    atomic_taken: bool,
}

impl Allowance {
    pub(super) fn new(
        snap: &Snapshot,
        config: &DisruptionConfig,
        busy: &InProgress,
        now: i64,
    ) -> Self {
        let left = |limit: usize, used: usize| {
            i64::try_from(limit.saturating_sub(used)).unwrap_or(i64::MAX)
        };
        let mut budget = BTreeMap::new();
        let mut above_min = Vec::new();
        for (pi, pool) in snap.pools.iter().enumerate() {
            let nodes: Vec<&Node> = snap
                .nodes
                .iter()
                .filter(|n| n.pool.as_deref() == Some(&pool.name))
                .collect();
            let total = nodes.len() as i64;
            let deleting = nodes.iter().filter(|n| n.being_removed(now)).count() as i64;
            let (budget_total, disrupted) = budget_standing(nodes.iter().copied(), now);
            for reason in [
                DisruptionReason::Empty,
                DisruptionReason::Underutilized,
                DisruptionReason::Drifted,
            ] {
                let allowed = budget_allows(&pool.disruption.budgets, budget_total, reason, now);
                budget.insert((pi, reason), allowed.saturating_sub(disrupted));
            }
            above_min.push(total - deleting - i64::from(pool.min_nodes));
        }
        let pdb_left = snap
            .pdbs
            .iter()
            .map(|b| i64::from(b.disruptions_allowed))
            .collect();
        let cluster_total = usage_of_nodes(
            &snap.cluster_limits,
            &snap.pools,
            snap.nodes.iter().filter(|n| !n.being_removed(now)),
        );
        Allowance {
            budget,
            above_min,
            pdb_left,
            cluster_total,
            removals_left: left(config.max_scale_down_parallelism, busy.nodes),
            drains_left: left(config.max_drain_parallelism, busy.drains),
            limits: (
                config.max_scale_down_parallelism,
                config.max_drain_parallelism,
            ),
            atomic_taken: false,
        }
    }

    /// Checks (and, when `take`, consumes) the allowance for removing `nodes`, replacing them
    /// with `added` new nodes in the same pools.
    pub(super) fn admit(
        &mut self,
        snap: &Snapshot,
        nodes: &[&Node],
        reason: DisruptionReason,
        replaced: bool,
        take: bool,
    ) -> Result<(), Blocker> {
        self.admit_counted(snap, nodes, reason, replaced, take, false)
    }

    /// [`Self::admit`] for the whole of an atomic NodePool: the nodes count as one disruption
    /// against the pool's budgets (a budget below the pool's size would otherwise never let it
    /// go), in full against minNodes, cluster-wide minimums and PDBs, and may overrun the
    /// parallelism limits that have room left.
    pub(super) fn admit_whole(
        &mut self,
        snap: &Snapshot,
        nodes: &[&Node],
        reason: DisruptionReason,
    ) -> Result<(), Blocker> {
        self.admit_counted(snap, nodes, reason, false, true, true)
    }

    fn admit_counted(
        &mut self,
        snap: &Snapshot,
        nodes: &[&Node],
        reason: DisruptionReason,
        replaced: bool,
        take: bool,
        as_one: bool,
    ) -> Result<(), Blocker> {
        let mut per_pool: BTreeMap<usize, i64> = BTreeMap::new();
        for n in nodes {
            if let Some(pi) = snap
                .pools
                .iter()
                .position(|p| Some(&p.name) == n.pool.as_ref())
            {
                *per_pool.entry(pi).or_default() += 1;
            }
        }
        for (pi, count) in &per_pool {
            let left = self.budget.get(&(*pi, reason)).copied().unwrap_or(i64::MAX);
            if (if as_one { 1 } else { *count }) > left {
                return Err(Blocker::new(
                    VerdictKind::BudgetExhausted,
                    format!(
                        "disruption budget of NodePool {} exhausted for {reason:?}",
                        snap.pools[*pi].name
                    ),
                ));
            }
            let removed = if replaced { count - 1 } else { *count };
            if removed > self.above_min[*pi] {
                return Err(Blocker::new(
                    VerdictKind::AtMinNodes,
                    format!(
                        "NodePool {} is at minNodes {}",
                        snap.pools[*pi].name, snap.pools[*pi].min_nodes
                    ),
                ));
            }
        }
        for (li, limit) in snap.cluster_limits.iter().enumerate() {
            let selected = nodes.iter().filter(|n| selects(limit, &n.labels)).fold(
                Usage::default(),
                |mut u, n| {
                    u.add(&node_usage(&snap.pools, n));
                    u
                },
            );
            if let Some(why) = below_min(limit, &self.cluster_total[li], &selected) {
                return Err(Blocker::new(VerdictKind::AtClusterMinimum, why));
            }
        }
        let removals = nodes.len() as i64;
        let drains = nodes.iter().filter(|n| !movable(n).is_empty()).count() as i64;
        // An atomic pool goes whole or not at all: the first one of a pass may overrun the
        // parallelism limits as long as they have room left, as the Cluster Autoscaler lets
        // one atomic node group per loop (`cropAtomicNodes`; otherwise a pool larger than the
        // limit could never scale down); the next must fit. Nodes with nothing to drain need
        // no drain allowance, whatever an atomic pool's drains left of it.
        let may_overrun = as_one && !self.atomic_taken;
        let over = |wanted: i64, left: i64| {
            if may_overrun {
                wanted > 0 && left <= 0
            } else {
                wanted > 0 && wanted > left
            }
        };
        if over(removals, self.removals_left) {
            return Err(Blocker::new(
                VerdictKind::ParallelismLimit,
                format!(
                    "--max-scale-down-parallelism {} reached (nodes being removed at once)",
                    self.limits.0
                ),
            ));
        }
        if over(drains, self.drains_left) {
            return Err(Blocker::new(
                VerdictKind::ParallelismLimit,
                format!(
                    "--max-drain-parallelism {} reached (nodes being drained at once)",
                    self.limits.1
                ),
            ));
        }
        // Only the pods consolidation moves use a budget here: DaemonSet pods go in the
        // termination drain after them, one at a time against their own budget's allowance
        // then (a budget allowing one nothing keeps its node, `node_block_in`).
        let mut pdb_use: BTreeMap<usize, i64> = BTreeMap::new();
        for n in nodes {
            for p in movable(n) {
                for (bi, b) in snap.pdbs.iter().enumerate() {
                    if pdb_selects(b, p) {
                        *pdb_use.entry(bi).or_default() += 1;
                    }
                }
            }
        }
        for (bi, used) in &pdb_use {
            if *used > self.pdb_left[*bi] {
                let b = &snap.pdbs[*bi];
                return Err(Blocker::new(
                    VerdictKind::PdbBlocked,
                    format!(
                        "blocked by PDB {}/{} (allows {} more disruptions, needs {used})",
                        b.namespace,
                        b.name,
                        self.pdb_left[*bi].max(0)
                    ),
                ));
            }
        }
        if take {
            for (li, limit) in snap.cluster_limits.iter().enumerate() {
                for n in nodes.iter().filter(|n| selects(limit, &n.labels)) {
                    self.cluster_total[li].sub(&node_usage(&snap.pools, n));
                }
            }
            for (pi, count) in per_pool {
                for reason in [
                    DisruptionReason::Empty,
                    DisruptionReason::Underutilized,
                    DisruptionReason::Drifted,
                ] {
                    if let Some(left) = self.budget.get_mut(&(pi, reason)) {
                        *left -= if as_one { 1 } else { count };
                    }
                }
                self.above_min[pi] -= if replaced { count - 1 } else { count };
            }
            for (bi, used) in pdb_use {
                self.pdb_left[bi] -= used;
            }
            self.removals_left -= removals;
            self.drains_left -= drains;
            self.atomic_taken |= as_one;
        }
        Ok(())
    }
}

impl Pass<'_> {
    /// Phase 2: each NodePool's scale-down delays (Cluster Autoscaler's
    /// `scale-down-delay-after-*`, on the pool's own clock). A candidate whose pool is cooling
    /// down is told how long is left and stays; the others go on.
    pub(super) fn paused(&mut self, state: &DisruptionState, candidates: Vec<usize>) -> Vec<usize> {
        let (snap, now, config) = (self.snap, self.now, self.config);
        let none = PoolEvents::default();
        let mut left = Vec::with_capacity(candidates.len());
        for ni in candidates {
            let node = &snap.nodes[ni];
            let pool = node
                .pool
                .as_deref()
                .and_then(|p| snap.pools.iter().find(|x| x.name == p));
            let paused = pool.and_then(|p| {
                let events = state.pools.get(&p.name).unwrap_or(&none);
                cooldown(&p.disruption.delays, events, config, now)
            });
            match paused {
                Some((what, wait)) => self.keep(
                    &node.name,
                    Blocker {
                        kind: VerdictKind::Paused,
                        message: format!(
                            "scale-down of NodePool {} paused for {} after {what}",
                            pool.map_or("", |p| p.name.as_str()),
                            crate::duration::format(wait.until - now)
                        ),
                        wait: Some(wait),
                    },
                ),
                None => left.push(ni),
            }
        }
        left
    }
}
