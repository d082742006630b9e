//! Cluster health as the Cluster Autoscaler judges it before it scales: with too many nodes
//! unready, something is broken (a network partition, a control-plane problem) and adding or
//! removing nodes would only make it worse, so scaling halts until the nodes come back.
//!
//! The rule is the Cluster Autoscaler's (`ClusterStateRegistry.IsClusterHealthy`): unhealthy
//! when the unready nodes are *both* more than `ok_unready_count` (`--ok-total-unready-count`,
//! 3) *and* more than `max_unready_percentage` (`--max-total-unready-percentage`, 45) percent of
//! all registered nodes. A node counts as unready when its `Ready` condition is not `True`
//! after it started; nodes still starting and nodes being deleted do not count (they still
//! count in the total, as the Cluster Autoscaler's node list does).

use serde::{Deserialize, Serialize};

/// What one registered node contributes to the health check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeReadiness {
    /// `Ready` is `True`.
    Ready,
    /// Not ready yet, still starting (a managed node not initialized, an unmanaged one younger
    /// than the start-up allowance).
    NotStarted,
    /// Not ready after it started: it broke down.
    Unready,
    /// Being deleted.
    Deleting,
}

impl NodeReadiness {
    /// Classifies a node: `ready` its `Ready` condition, `started` whether it finished starting
    /// (or had the time to), `deleting` whether it is being deleted.
    pub fn of(ready: bool, started: bool, deleting: bool) -> Self {
        match (deleting, ready, started) {
            (true, _, _) => NodeReadiness::Deleting,
            (false, true, _) => NodeReadiness::Ready,
            (false, false, false) => NodeReadiness::NotStarted,
            (false, false, true) => NodeReadiness::Unready,
        }
    }
}

/// The thresholds (Cluster Autoscaler's flags and defaults).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthConfig {
    /// `--max-total-unready-percentage` (45).
    pub max_unready_percentage: f64,
    /// `--ok-total-unready-count` (3).
    pub ok_unready_count: usize,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            max_unready_percentage: 45.0,
            ok_unready_count: 3,
        }
    }
}

/// The verdict on the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterHealth {
    /// Whether scaling may go on.
    pub healthy: bool,
    /// Registered nodes.
    pub nodes: usize,
    /// Of those, unready after they started.
    pub unready: usize,
    /// Of those, still starting.
    pub not_started: usize,
    /// In words, with the numbers and the thresholds.
    pub message: String,
}

/// Judges the cluster from its nodes' readiness. Never fails; an empty cluster is healthy.
pub fn assess(
    nodes: impl IntoIterator<Item = NodeReadiness>,
    config: &HealthConfig,
) -> ClusterHealth {
    let (mut total, mut unready, mut not_started) = (0usize, 0usize, 0usize);
    for n in nodes {
        total += 1;
        match n {
            NodeReadiness::Unready => unready += 1,
            NodeReadiness::NotStarted => not_started += 1,
            NodeReadiness::Ready | NodeReadiness::Deleting => {}
        }
    }
    let share = config.max_unready_percentage / 100.0 * total as f64;
    let healthy = !(unready > config.ok_unready_count && unready as f64 > share);
    let message = if healthy {
        format!(
            "{unready} of {total} nodes unready (scaling halts above {} nodes and {}%)",
            config.ok_unready_count, config.max_unready_percentage
        )
    } else {
        format!(
            "{unready} of {total} nodes unready, more than {} and more than {}%: scaling halted \
             until nodes recover",
            config.ok_unready_count, config.max_unready_percentage
        )
    };
    ClusterHealth {
        healthy,
        nodes: total,
        unready,
        not_started,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeReadiness::{Deleting, NotStarted, Ready, Unready};

    fn nodes(ready: usize, unready: usize, other: &[NodeReadiness]) -> Vec<NodeReadiness> {
        let mut v = vec![Ready; ready];
        v.extend(std::iter::repeat_n(Unready, unready));
        v.extend_from_slice(other);
        v
    }

    /// The Cluster Autoscaler's rule with its defaults: both thresholds must be passed.
    #[test]
    fn unhealthy_only_above_both_the_count_and_the_share() {
        let cfg = HealthConfig::default();
        for (ready, unready, other, healthy, why) in [
            (0, 0, &[][..], true, "an empty cluster"),
            (0, 3, &[][..], true, "100% but only 3 (not more than 3)"),
            (0, 4, &[][..], false, "4 of 4"),
            (5, 4, &[][..], true, "4 of 9 = 44.4%, not above 45%"),
            (4, 4, &[][..], false, "4 of 8 = 50%"),
            (6, 4, &[][..], true, "4 of 10 = 40%"),
            (100, 40, &[][..], true, "40 of 140 = 28.6%"),
            (
                2,
                3,
                &[NotStarted, NotStarted, NotStarted][..],
                true,
                "starting nodes are not unready",
            ),
            (
                1,
                4,
                &[Deleting, Deleting, Deleting, Deleting, Deleting, Deleting][..],
                true,
                "deleting nodes count in the total only: 4 of 11",
            ),
        ] {
            let h = assess(nodes(ready, unready, other), &cfg);
            assert_eq!(h.healthy, healthy, "{why}: {h:?}");
            assert_eq!(h.unready, unready, "{why}");
        }
    }

    #[test]
    fn thresholds_are_settings_and_the_message_names_them() {
        let strict = HealthConfig {
            max_unready_percentage: 10.0,
            ok_unready_count: 0,
        };
        let h = assess(nodes(9, 1, &[]), &strict);
        assert!(h.healthy, "1 of 10 is 10%, not above it");
        let h = assess(nodes(8, 2, &[]), &strict);
        assert!(!h.healthy);
        assert_eq!(
            h.message,
            "2 of 10 nodes unready, more than 0 and more than 10%: scaling halted until nodes \
             recover"
        );
    }

    #[test]
    fn classification() {
        assert_eq!(NodeReadiness::of(true, true, false), Ready);
        assert_eq!(NodeReadiness::of(true, false, false), Ready);
        assert_eq!(NodeReadiness::of(false, false, false), NotStarted);
        assert_eq!(NodeReadiness::of(false, true, false), Unready);
        assert_eq!(NodeReadiness::of(false, true, true), Deleting);
    }
}
