//! The cluster status summary the leader keeps in the ConfigMap `gpu-autoscaler-status` of
//! its namespace (the role of the Cluster Autoscaler's status ConfigMap): health (with the
//! unready-node halt's counts), the last round, per-NodePool node counts, usage, limits and kept nodes by reason, and the last
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

/// The unready-node halt's view (`--max-total-unready-percentage`, `--ok-total-unready-count`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// Whether scaling is halted.
    pub scaling_halted: bool,
    /// Registered nodes.
    pub nodes: usize,
    /// Unready after they started.
    pub unready: usize,
    /// Still starting.
    pub not_started: usize,
    /// In words.
    pub message: String,
}

impl From<&autoscaler_core::health::ClusterHealth> for Readiness {
    fn from(h: &autoscaler_core::health::ClusterHealth) -> Self {
        Readiness {
            scaling_halted: !h.healthy,
            nodes: h.nodes,
            unready: h.unready,
            not_started: h.not_started,
            message: h.message.clone(),
        }
    }
}

/// The whole summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// When it was written.
    pub time: String,
    /// The leader that wrote it.
    pub leader: String,
    /// `Healthy`; `Unhealthy` while too many nodes are unready (scaling halted); else
    /// `Degraded` with the problems listed.
    pub health: &'static str,
    /// What makes it degraded: invalid NodePools, shapes delivering too little.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// The nodes' readiness as the unready-node halt counts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
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
    /// The health from the problems found and whether scaling is halted.
    pub fn health_of(problems: &[String], halted: bool) -> &'static str {
        if halted {
            "Unhealthy"
        } else if problems.is_empty() {
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
            health: ClusterStatus::health_of(&[], false),
            problems: vec![],
            readiness: None,
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

    #[test]
    fn an_unready_halt_makes_the_cluster_unhealthy_with_its_counts() {
        use autoscaler_core::health::{HealthConfig, NodeReadiness, assess};
        let h = assess(
            [NodeReadiness::Unready; 4]
                .into_iter()
                .chain([NodeReadiness::Ready]),
            &HealthConfig::default(),
        );
        assert_eq!(ClusterStatus::health_of(&[], !h.healthy), "Unhealthy");
        assert_eq!(ClusterStatus::health_of(&["x".into()], false), "Degraded");
        let r = Readiness::from(&h);
        expect_test::expect![[r#"
            scalingHalted: true
            nodes: 5
            unready: 4
            notStarted: 0
            message: '4 of 5 nodes unready, more than 3 and more than 45%: scaling halted until nodes recover'
        "#]]
        .assert_eq(&serde_norway::to_string(&r).unwrap_or_default());
    }
}
