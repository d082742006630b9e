//! How often the controller acts: the batch window over unschedulable pods, re-planning, the
//! disruption loop and the ProvisioningRequest retries. One type with the defaults written
//! once, as flag texts: the controller's flags use the texts, [`Cadence::default`] parses
//! them, and the simulator's scenarios start from that default.

use crate::duration::default_seconds;

/// `--batch-idle`: a batch of unschedulable pods closes after this long without a new one.
pub const DEFAULT_BATCH_IDLE: &str = "1s";
/// `--batch-max`: a batch closes after this long in all.
pub const DEFAULT_BATCH_MAX: &str = "10s";
/// `--replan-interval`: pods still pending are planned again this long after the last round.
pub const DEFAULT_REPLAN_INTERVAL: &str = "10s";
/// `--disruption-interval`: how often disruption is planned.
pub const DEFAULT_DISRUPTION_INTERVAL: &str = "10s";
/// `--provreq-retry`: first retry of a ProvisioningRequest without capacity, doubling.
pub const DEFAULT_PROVREQ_RETRY: &str = "10s";
/// `--provreq-retry-max`: longest retry delay of a ProvisioningRequest.
pub const DEFAULT_PROVREQ_RETRY_MAX: &str = "5m";

/// The controller's loop timings, in whole seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    /// [`DEFAULT_BATCH_IDLE`].
    pub batch_idle_s: i64,
    /// [`DEFAULT_BATCH_MAX`].
    pub batch_max_s: i64,
    /// [`DEFAULT_REPLAN_INTERVAL`].
    pub replan_s: i64,
    /// [`DEFAULT_DISRUPTION_INTERVAL`].
    pub disruption_interval_s: i64,
    /// [`DEFAULT_PROVREQ_RETRY`].
    pub provreq_retry_s: i64,
    /// [`DEFAULT_PROVREQ_RETRY_MAX`].
    pub provreq_retry_max_s: i64,
}

impl Default for Cadence {
    /// The flags' defaults, parsed from the texts the flags use.
    fn default() -> Self {
        Cadence {
            batch_idle_s: default_seconds(DEFAULT_BATCH_IDLE),
            batch_max_s: default_seconds(DEFAULT_BATCH_MAX),
            replan_s: default_seconds(DEFAULT_REPLAN_INTERVAL),
            disruption_interval_s: default_seconds(DEFAULT_DISRUPTION_INTERVAL),
            provreq_retry_s: default_seconds(DEFAULT_PROVREQ_RETRY),
            provreq_retry_max_s: default_seconds(DEFAULT_PROVREQ_RETRY_MAX),
        }
    }
}

impl Cadence {
    /// How long a pod's nomination to a node keeps that node from disruption after the plan
    /// that last made it: Karpenter's window (twice the batch maximum, at least 10 s;
    /// `nominationWindow` in kubernetes-sigs/karpenter `pkg/controllers/state/statenode.go`),
    /// and at least twice the longest gap between two plans of a pod still pending (a re-plan
    /// interval, then a batch window that a new pod may open just before it ends), so that a
    /// renewal always comes before the nomination lapses.
    pub fn nomination_window_s(&self) -> i64 {
        (2 * (self.replan_s + self.batch_max_s)).max(10)
    }

    /// How long a ProvisioningRequest without capacity waits before its next attempt, after
    /// `attempts` failed ones: [`Cadence::provreq_retry_s`] doubling per attempt, at most
    /// [`Cadence::provreq_retry_max_s`].
    pub fn provreq_retry_delay_s(&self, attempts: u32) -> i64 {
        doubling_backoff(self.provreq_retry_s, self.provreq_retry_max_s, attempts)
    }
}

/// `base` doubled `attempts` times (at most 16), capped at `max`, in whatever unit both are
/// given (the controller counts milliseconds, the simulator seconds).
pub fn doubling_backoff(base: i64, max: i64, attempts: u32) -> i64 {
    base.saturating_mul(1i64 << attempts.min(16)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every default text parses in the one grammar, to the figures the docs give.
    #[test]
    fn defaults_parse() {
        assert_eq!(
            Cadence::default(),
            Cadence {
                batch_idle_s: 1,
                batch_max_s: 10,
                replan_s: 10,
                disruption_interval_s: 10,
                provreq_retry_s: 10,
                provreq_retry_max_s: 300,
            }
        );
    }

    #[test]
    fn provreq_retries_double_up_to_the_maximum() {
        let c = Cadence::default();
        let delays: Vec<i64> = (0..7).map(|a| c.provreq_retry_delay_s(a)).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(c.provreq_retry_delay_s(u32::MAX), 300);
    }

    /// Twice the longest gap between renewals, at least Karpenter's 10 s.
    #[test]
    fn nominations_outlast_two_gaps_between_plans_and_at_least_10s() {
        let c = Cadence::default();
        assert_eq!(c.nomination_window_s(), 40);
        let slow_batches = Cadence {
            batch_max_s: 30,
            ..c
        };
        assert_eq!(slow_batches.nomination_window_s(), 80);
        let slow_replans = Cadence { replan_s: 45, ..c };
        assert_eq!(slow_replans.nomination_window_s(), 110);
        let fast = Cadence {
            batch_max_s: 1,
            replan_s: 0,
            ..c
        };
        assert_eq!(fast.nomination_window_s(), 10);
    }
}
