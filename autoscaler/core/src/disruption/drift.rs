//! Drift: nodes that no longer match their NodePool, replaced under the `Drifted` budget
//! (Karpenter v1's drift, in two halves as there).
//!
//! Detection (`pkg/controllers/nodeclaim/disruption/drift.go`, `isDrifted`): a node is drifted
//! when its NodeClaim's `karpenter.sh/nodepool-hash` differs from the NodePool's current
//! template hash of the same `karpenter.sh/nodepool-hash-version` (`NodePoolDrifted`, checked
//! first), or when its labels no longer meet the NodePool's requirements
//! (`RequirementsDrifted`). A hash of another version, or a node or pool without one, is not
//! compared, as there. The controller copies the NodeClaim's two annotations into the core
//! node's [`Node::annotations`]; [`Pool::template_hash`] is the pool's hash now.
//!
//! Disruption (`pkg/controllers/disruption/drift.go`, with the method order of
//! `pkg/controllers/disruption/controller.go`: emptiness, then drift, then multi-node and
//! single-node consolidation): it runs after empty-node consolidation and before the other
//! consolidation methods, ignores utilization thresholds, `consolidateAfter` and
//! `unneededTime`, and decides at most one command per pass, for one node: the drifted
//! candidates in order, the first whose pods all have somewhere to go (on other nodes, or on
//! one new node launched first) within its NodePool's `Drifted` budget. Nodes that may not be
//! disrupted (`karpenter.sh/do-not-disrupt`, PodDisruptionBudgets, the other blockers of
//! consolidation) are skipped, as there.
//!
//! Where this departs from Karpenter, and why:
//! - Karpenter orders candidates by when their `Drifted` condition turned true; the core has
//!   no clock of its own, so the oldest node goes first (then the name).
//! - Karpenter's drift skips empty nodes, leaving them to emptiness, which waits for
//!   `consolidateAfter`; an empty drifted node of a pool that never consolidates would then
//!   stay for good. Here the empty-node phase takes it first when it can, and drift deletes it
//!   otherwise, under the `Drifted` budget.
//! - A label the node does not carry is not judged: Karpenter judges the NodeClaim's labels,
//!   which always carry every key its requirements name; a Node here may lack a catalog label
//!   its type never published, and judging that would roll every node of the pool.
//! - One command launches at most one replacement (the command carries one): a node whose
//!   pods need several new nodes stays, and its verdict says so.
//! - Nodes of atomic NodePools are removed only whole, by consolidation: drift leaves them.
//! - A drifted node its pool's `minNodes` holds (warm capacity), empty or with pods that fit
//!   elsewhere, is replaced, not left for good: its replacement is the node the planner would
//!   open to bring the pool back up to `minNodes` without it (as
//!   `--enforce-node-group-min-size` does), launched first; Karpenter's static NodePools
//!   replace their drifted nodes one for one the same way. As for any replacement, the
//!   pool's limits count the cluster without the node, so during the swap the pool may hold
//!   one node above `limits.nodes`.
//! - The consolidation methods after drift still run in the same pass, on the cluster as the
//!   drift command leaves it, as every phase of [`super::plan_disruption`] does; Karpenter
//!   runs one method per pass.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::keys::{NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION_ANNOTATION};
use crate::model::{DisruptionReason, Node, Pool, Snapshot};
use crate::plan::{NewClaim, Plan};

use super::candidates::{movable, node_block_in};
use super::simulate::nowhere_to_go;
use super::{Blocker, Command, Method, Pass, VerdictKind};

/// Why a node drifted: the reasons Karpenter writes on the `Drifted` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DriftReason {
    /// The NodePool's template changed since the node was launched.
    NodePoolDrifted,
    /// The node's labels no longer meet the NodePool's requirements.
    RequirementsDrifted,
}

impl DriftReason {
    /// The reason as Karpenter spells it (`NodePoolDrifted`, `RequirementsDrifted`).
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::NodePoolDrifted => "NodePoolDrifted",
            DriftReason::RequirementsDrifted => "RequirementsDrifted",
        }
    }
}

/// A node's drift: the reason, and in words what differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// The reason.
    pub reason: DriftReason,
    /// What differs (the two hashes, or the label and the requirement it no longer meets).
    pub detail: String,
}

impl Drift {
    /// `drifted (Reason): detail`, the words verdicts and events start with.
    pub fn words(&self) -> String {
        format!("drifted ({}): {}", self.reason.as_str(), self.detail)
    }
}

/// Whether `node` drifted from `pool` (its NodePool), and why: static drift first, then
/// requirements, in Karpenter's order. Pure; `None` when it matches.
pub fn drift_of(node: &Node, pool: &Pool) -> Option<Drift> {
    let ann = |k: &str| node.annotations.get(k).map(String::as_str);
    if let (Some(now), Some(recorded), Some(version)) = (
        pool.template_hash.as_deref(),
        ann(NODEPOOL_HASH_ANNOTATION),
        ann(NODEPOOL_HASH_VERSION_ANNOTATION),
    ) && version == crate::keys::NODEPOOL_HASH_VERSION
        && recorded != now
    {
        return Some(Drift {
            reason: DriftReason::NodePoolDrifted,
            detail: format!(
                "NodePool {}'s template changed since launch (hash {recorded}, now {now})",
                pool.name
            ),
        });
    }
    requirements_drift(&node.labels, pool)
}

/// The requirements half of [`drift_of`]: whether node `labels` no longer meet `pool`'s
/// requirements (a key the labels do not carry is not judged; see the module).
pub fn requirements_drift(labels: &crate::requirements::Labels, pool: &Pool) -> Option<Drift> {
    pool.requirements.iter().find_map(|(key, c)| {
        let value = labels.get(key)?;
        (!c.matches(Some(value.as_str()))).then(|| Drift {
            reason: DriftReason::RequirementsDrifted,
            detail: format!(
                "label {key}={value} no longer meets NodePool {}'s requirements",
                pool.name
            ),
        })
    })
}

/// A drifted node of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drifted {
    /// The node.
    pub node: String,
    /// Its NodeClaim, where the `Drifted` condition goes.
    pub claim: String,
    /// Why.
    pub drift: Drift,
}

/// Every node of `snap` managed by a NodeClaim of a NodePool of `snap` that drifted, in node
/// order, nodes being removed included (their NodeClaim's condition stays true to the end).
pub fn drifted(snap: &Snapshot) -> Vec<Drifted> {
    snap.nodes
        .iter()
        .filter_map(|n| {
            let claim = n.claim.clone()?;
            let pool = snap
                .pools
                .iter()
                .find(|p| Some(&p.name) == n.pool.as_ref())?;
            drift_of(n, pool).map(|drift| Drifted {
                node: n.name.clone(),
                claim,
                drift,
            })
        })
        .collect()
}

impl Pass<'_> {
    /// The drift phase: at most one command, for the first drifted node (oldest first) that
    /// may go; every other drifted node's verdict says why it stays.
    pub(super) fn drift(&mut self) {
        let snap = self.snap;
        let mut found: Vec<(&Node, Drift, &Pool)> = snap
            .nodes
            .iter()
            .filter(|n| !self.gone.contains(&n.name))
            .filter_map(|n| {
                let pool = snap
                    .pools
                    .iter()
                    .find(|p| Some(&p.name) == n.pool.as_ref())?;
                drift_of(n, pool).map(|d| (n, d, pool))
            })
            .collect();
        if found.is_empty() {
            return;
        }
        found.sort_by(|(a, _, _), (b, _, _)| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.name.cmp(&b.name))
        });
        if !self.binding_known {
            self.binding_known = true;
            let binding = self.sim.get_mut().pending_targets(snap, &self.work);
            self.nominations.binding(binding);
        }
        let mut decided = false;
        for (n, d, pool) in found {
            let words = d.words();
            if decided {
                self.keep(
                    &n.name,
                    Blocker::new(
                        VerdictKind::Drifted,
                        format!("{words}; waits for the next pass (one drift command per pass)"),
                    ),
                );
                continue;
            }
            let paused = self.out.state.pools.get(&pool.name).and_then(|events| {
                super::failure_pause(&pool.disruption.delays, events, self.config, self.now)
            });
            if let Some(wait) = paused {
                self.keep(
                    &n.name,
                    Blocker {
                        kind: VerdictKind::Paused,
                        message: format!(
                            "{words}, but drift in NodePool {} is paused for {} after a failed \
                             deletion",
                            pool.name,
                            crate::duration::format(wait.until - self.now)
                        ),
                        wait: Some(wait),
                    },
                );
                continue;
            }
            decided = self.drift_one(n, &words);
        }
    }

    /// The claim that brings `n`'s pool back up to its `minNodes` once `n` is gone: planned
    /// as a provisioning round with `PlanOptions::min_nodes` would, on the cluster without `n`
    /// (its other nodes, the claims in flight and the cluster-wide limits counted). `None`
    /// when no node can be planned (a limit, no instance type).
    fn min_nodes_replacement(&self, n: &Node) -> Option<NewClaim> {
        let snap = self.snap;
        let pool = snap
            .pools
            .iter()
            .find(|p| Some(&p.name) == n.pool.as_ref())?;
        let without = Snapshot {
            nodes: snap
                .nodes
                .iter()
                .filter(|m| m.name != n.name && !self.gone.contains(&m.name))
                .cloned()
                .collect(),
            in_flight: snap.in_flight.clone(),
            daemonsets: snap.daemonsets.clone(),
            pools: vec![pool.clone()],
            cluster_limits: snap.cluster_limits.clone(),
            min_values_policy: snap.min_values_policy,
            ..Snapshot::default()
        };
        let options = crate::provision::PlanOptions {
            min_nodes: Some(self.now),
            max_new_claims: 1,
            ..Default::default()
        };
        crate::provision::plan_with(&without, &options)
            .new_claims
            .into_iter()
            .next()
    }

    /// Decides the drift command for node `n`, `words` saying how it drifted. False when it
    /// stays (its verdict says why).
    fn drift_one(&mut self, n: &Node, words: &str) -> bool {
        let snap = self.snap;
        let stay = |b: Blocker| Blocker {
            message: format!("{words}, but {}", b.message),
            ..b
        };
        if let Some(b) = node_block_in(n, snap, &self.nominations, self.now) {
            self.keep(&n.name, stay(b));
            return false;
        }
        let atomic = snap
            .pools
            .iter()
            .any(|p| Some(&p.name) == n.pool.as_ref() && p.atomic_nodes.is_some());
        if atomic {
            let b = Blocker::new(
                VerdictKind::AtomicPool,
                "its NodePool is atomic: its nodes go only all together",
            );
            self.keep(&n.name, stay(b));
            return false;
        }
        let Some(wi) = self.index(&n.name) else {
            return false;
        };
        // The node as earlier commands of this pass left it.
        let current = self.work[wi].clone().into_owned();
        let removed = BTreeSet::from([wi]);
        let empty = movable(&current).is_empty();
        // Budgets first: a refused node needs no simulation. An empty node its pool's
        // minNodes holds is replaced by the node that brings the pool back up instead.
        let mut warm = None;
        if let Err(b) =
            self.allowance
                .admit(snap, &[&current], DisruptionReason::Drifted, !empty, false)
        {
            warm = match b.kind {
                VerdictKind::AtMinNodes if empty => self.min_nodes_replacement(n),
                _ => None,
            };
            if warm.is_none() {
                self.keep(&n.name, stay(b));
                return false;
            }
        }
        let mut plan = if empty {
            Plan {
                new_claims: warm.into_iter().collect(),
                ..Plan::default()
            }
        } else {
            self.simulate(&removed, true)
        };
        if let Some(u) = plan.unschedulable.first() {
            let b = Blocker::new(VerdictKind::NoPlaceForPods, nowhere_to_go(u));
            self.keep(&n.name, stay(b));
            return false;
        }
        if plan.new_claims.len() > 1 {
            let b = Blocker::new(
                VerdictKind::NoPlaceForPods,
                format!(
                    "its pods need {} new nodes, and a drift command launches at most one",
                    plan.new_claims.len()
                ),
            );
            self.keep(&n.name, stay(b));
            return false;
        }
        let mut replacement = plan.new_claims.first().cloned();
        let mut admitted = self.allowance.admit(
            snap,
            &[&current],
            DisruptionReason::Drifted,
            replacement.is_some(),
            true,
        );
        // Its pods fit on other nodes, but the pool's minNodes holds the node itself: a node
        // that brings the pool back up comes first, as for an empty one.
        if let Err(b) = &admitted
            && b.kind == VerdictKind::AtMinNodes
            && replacement.is_none()
            && let Some(c) = self.min_nodes_replacement(n)
        {
            plan.new_claims.push(c.clone());
            replacement = Some(c);
            admitted =
                self.allowance
                    .admit(snap, &[&current], DisruptionReason::Drifted, true, true);
        }
        if let Err(b) = admitted {
            self.keep(&n.name, stay(b));
            return false;
        }
        let pods = movable(&current).iter().map(|p| p.key.clone()).collect();
        self.apply(&removed, &plan);
        self.gone.insert(n.name.clone());
        let price = current.price.unwrap_or(0.0);
        let (method, how, savings) = match &replacement {
            Some(r) => (
                Method::Replace,
                format!(
                    "replaced by a new {} node first",
                    r.instance_types.first().map_or("", |o| &*o.instance_type)
                ),
                price - r.price,
            ),
            None if empty => (Method::Delete, "empty, deleted".to_string(), price),
            None => (
                Method::Delete,
                "its pods fit on other nodes".to_string(),
                price,
            ),
        };
        self.disrupt(&n.name, VerdictKind::Drifted, format!("{words}: {how}"));
        self.out.commands.push(Command {
            reason: DisruptionReason::Drifted,
            method,
            nodes: vec![n.name.clone()],
            pods,
            replacement,
            savings,
            decided_at: self.now,
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{itype, node, pool};
    use crate::keys::{NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION_ANNOTATION};
    use crate::labels;
    use crate::requirements::Operator;

    #[test]
    fn a_node_drifts_when_its_recorded_hash_differs_from_its_pools_of_the_same_version() {
        let m5 = itype("m5.large").cpu("2").mem("8Gi").build();
        let p = pool("p", vec![m5.clone()]).template_hash("111").build();
        let same = node("same", &m5, "a")
            .pool("p")
            .launched_with("111")
            .build();
        let changed = node("changed", &m5, "a")
            .pool("p")
            .launched_with("222")
            .build();
        assert_eq!(drift_of(&same, &p), None);
        let d = drift_of(&changed, &p).expect("drifted");
        assert_eq!(d.reason, DriftReason::NodePoolDrifted);
        assert!(
            d.words().starts_with("drifted (NodePoolDrifted): "),
            "{d:?}"
        );
        // Another version, a half-written record or a pool with no hash: nothing compared.
        let older = node("older", &m5, "a")
            .pool("p")
            .annotate(NODEPOOL_HASH_ANNOTATION, "222")
            .annotate(NODEPOOL_HASH_VERSION_ANNOTATION, "v0")
            .build();
        let no_version = node("nv", &m5, "a")
            .pool("p")
            .annotate(NODEPOOL_HASH_ANNOTATION, "222")
            .build();
        assert_eq!(drift_of(&older, &p), None);
        assert_eq!(drift_of(&no_version, &p), None);
        let unhashed = pool("p", vec![m5]).build();
        assert_eq!(drift_of(&changed, &unhashed), None);
    }

    #[test]
    fn a_node_drifts_when_its_labels_no_longer_meet_its_pools_requirements() {
        let m5 = itype("m5.large").cpu("2").mem("8Gi").build();
        let on_demand = pool("p", vec![m5.clone()])
            .require(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])
            .build();
        let spot = node("spot", &m5, "a")
            .pool("p")
            .label(labels::CAPACITY_TYPE, "spot")
            .build();
        let od = node("od", &m5, "a")
            .pool("p")
            .label(labels::CAPACITY_TYPE, "on-demand")
            .build();
        let d = drift_of(&spot, &on_demand).expect("drifted");
        assert_eq!(d.reason, DriftReason::RequirementsDrifted);
        assert!(
            d.detail.contains("karpenter.sh/capacity-type=spot"),
            "{d:?}"
        );
        assert_eq!(drift_of(&od, &on_demand), None);
        // An instance type taken out of an `In` list drifts its nodes.
        let narrowed = pool("p", vec![m5.clone()])
            .require(labels::INSTANCE_TYPE, Operator::In, &["m5.xlarge"])
            .build();
        assert_eq!(
            drift_of(&od, &narrowed).map(|d| d.reason),
            Some(DriftReason::RequirementsDrifted)
        );
        // A key the node does not carry is not judged.
        let custom = pool("p", vec![m5])
            .require("team", Operator::In, &["ml"])
            .build();
        assert_eq!(drift_of(&od, &custom), None);
    }

    #[test]
    fn static_drift_is_reported_before_requirements_drift() {
        let m5 = itype("m5.large").cpu("2").mem("8Gi").build();
        let p = pool("p", vec![m5.clone()])
            .template_hash("new")
            .require(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])
            .build();
        let n = node("n", &m5, "a")
            .pool("p")
            .label(labels::CAPACITY_TYPE, "spot")
            .launched_with("old")
            .build();
        assert_eq!(
            drift_of(&n, &p).map(|d| d.reason),
            Some(DriftReason::NodePoolDrifted)
        );
    }

    #[test]
    fn explain_node_shows_the_drift_verdict_and_its_command() {
        let m5 = itype("m5.large")
            .cpu("2")
            .mem("8Gi")
            .on_demand(&["a"], 0.1)
            .build();
        let snap = Snapshot {
            pools: vec![pool("p", vec![m5.clone()]).template_hash("new").build()],
            nodes: vec![
                node("n", &m5, "a")
                    .pool("p")
                    .launched_with("old")
                    .with_pod(crate::builders::pod("web").cpu("1"))
                    .build(),
            ],
            ..Snapshot::default()
        };
        let e = crate::explain::explain_node(
            &snap,
            &super::super::DisruptionState::default(),
            0,
            &super::super::DisruptionConfig::default(),
            "n",
        )
        .expect("explained");
        let text = e.render();
        assert!(
            text.contains("verdict: chosen for removal (Drifted): drifted (NodePoolDrifted)"),
            "{text}"
        );
        assert!(e.command.is_some(), "{text}");
    }

    #[test]
    fn drifted_lists_the_managed_nodes_with_their_claims() {
        let m5 = itype("m5.large").cpu("2").mem("8Gi").build();
        let mut a = node("a", &m5, "z").pool("p").launched_with("old").build();
        a.claim = Some("claim-a".into());
        let mut b = node("b", &m5, "z").pool("p").launched_with("new").build();
        b.claim = Some("claim-b".into());
        // No NodeClaim: nothing to put the condition on.
        let c = node("c", &m5, "z").pool("p").launched_with("old").build();
        let snap = Snapshot {
            pools: vec![pool("p", vec![m5]).template_hash("new").build()],
            nodes: vec![a, b, c],
            ..Snapshot::default()
        };
        let out = drifted(&snap);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(
            (out[0].node.as_str(), out[0].claim.as_str()),
            ("a", "claim-a")
        );
    }
}
