//! The cluster status summary the leader keeps in the ConfigMap `gpu-autoscaler-status` of
//! its namespace (the role of the Cluster Autoscaler's status ConfigMap): health, the last
//! round, per-NodePool node counts, usage, limits and kept nodes by reason, and the last
//! scale-ups and scale-downs. Pure: the run loop gathers the facts and writes the text.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// The ConfigMap's name.
pub const CONFIGMAP: &str = "gpu-autoscaler-status";
/// The data key holding the YAML summary.
pub const KEY: &str = "status";
/// How many recent decisions the summary keeps.
pub const RECENT: usize = 20;

/// One scale-up or scale-down.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// When (RFC 3339).
    pub time: String,
    /// `ScaleUp` (a NodeClaim created) or `ScaleDown` (a disruption command decided).
    pub action: &'static str,
    /// The NodePool.
    pub node_pool: String,
    /// The NodeClaim created, or the nodes removed.
    pub objects: Vec<String>,
    /// In words: the pods it is for and its instance types, or the disruption's reason,
    /// method and pods.
    pub detail: String,
}

/// The last [`RECENT`] decisions, oldest first.
#[derive(Debug, Default)]
pub struct Decisions(VecDeque<Decision>);

impl Decisions {
    /// Records one, dropping the oldest beyond [`RECENT`].
    pub fn push(&mut self, d: Decision) {
        if self.0.len() == RECENT {
            self.0.pop_front();
        }
        self.0.push_back(d);
    }

    /// The decisions, newest first.
    pub fn newest_first(&self) -> Vec<Decision> {
        self.0.iter().rev().cloned().collect()
    }
}

/// Node counts of one NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    /// Initialized.
    pub ready: i64,
    /// Launched or registered, not yet initialized.
    pub launching: i64,
    /// Being deleted.
    pub deleting: i64,
}

/// One NodePool's line in the summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSummary {
    /// The NodePool.
    pub name: String,
    /// Its NodeClaims by phase.
    pub nodes: NodeCounts,
    /// Its NodeClaims' capacity (`status.resources`).
    pub usage: BTreeMap<String, String>,
    /// Its `spec.limits`.
    pub limits: BTreeMap<String, String>,
    /// Nodes the last disruption round kept, by `Consolidatable` reason.
    pub kept: BTreeMap<String, i64>,
    /// Nodes the last disruption round found consolidatable.
    pub consolidatable: i64,
}

/// The whole summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// When it was written.
    pub time: String,
    /// The leader that wrote it.
    pub leader: String,
    /// `Healthy`, or `Degraded` with the problems listed.
    pub health: &'static str,
    /// What makes it degraded: invalid NodePools, shapes delivering too little.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// When the leader last completed a round.
    pub last_round: String,
    /// When disruption last ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_disruption_round: Option<String>,
    /// Unschedulable pods.
    pub pending_pods: i64,
    /// One entry per NodePool, by name.
    pub node_pools: Vec<PoolSummary>,
    /// The last scale-ups and scale-downs, newest first.
    pub recent_decisions: Vec<Decision>,
}

impl ClusterStatus {
    /// The health from the problems found.
    pub fn health_of(problems: &[String]) -> &'static str {
        if problems.is_empty() {
            "Healthy"
        } else {
            "Degraded"
        }
    }

    /// The YAML text written under [`KEY`].
    pub fn render(&self) -> String {
        // Plain strings, numbers and maps: serializing cannot fail.
        serde_norway::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_decisions_newest_first() {
        let mut d = Decisions::default();
        for i in 0..RECENT + 3 {
            d.push(Decision {
                time: i.to_string(),
                action: "ScaleUp",
                node_pool: "gpu".into(),
                objects: vec![format!("claim-{i}")],
                detail: String::new(),
            });
        }
        let all = d.newest_first();
        assert_eq!(all.len(), RECENT);
        assert_eq!(all[0].time, (RECENT + 2).to_string());
        assert_eq!(all[RECENT - 1].time, "3");
        let s = ClusterStatus {
            time: "t".into(),
            leader: "me".into(),
            health: ClusterStatus::health_of(&[]),
            problems: vec![],
            last_round: "t".into(),
            last_disruption_round: None,
            pending_pods: 0,
            node_pools: vec![PoolSummary {
                name: "gpu".into(),
                ..PoolSummary::default()
            }],
            recent_decisions: all[..1].to_vec(),
        };
        expect_test::expect![[r#"
            time: t
            leader: me
            health: Healthy
            lastRound: t
            pendingPods: 0
            nodePools:
            - name: gpu
              nodes:
                ready: 0
                launching: 0
                deleting: 0
              usage: {}
              limits: {}
              kept: {}
              consolidatable: 0
            recentDecisions:
            - time: '22'
              action: ScaleUp
              nodePool: gpu
              objects:
              - claim-22
              detail: ''
        "#]]
        .assert_eq(&s.render());
    }
}
