//! A node's termination grace period: the deadline its drain may not pass, and what the drain
//! does to each pod at a given moment (Karpenter v1's NodeClaim `terminationGracePeriod`).
//!
//! Karpenter stamps the deadline on the NodeClaim when its deletion begins (annotation
//! `karpenter.sh/nodeclaim-termination-timestamp` = deletion time + grace period,
//! `pkg/controllers/nodeclaim/lifecycle/controller.go`
//! `ensureTerminationGracePeriodTerminationTimeAnnotation`), and its drain
//! (`pkg/controllers/node/termination/drain.go` `DeleteExpiringPods`,
//! `podDeleteTimeWithGracePeriod`) deletes, rather than evicts, every pod whose own
//! `terminationGracePeriodSeconds` would run past that deadline, with a grace period cut to the
//! time left. Deletion bypasses PodDisruptionBudgets and `karpenter.sh/do-not-disrupt`, so by
//! the deadline every pod has been told to go and the node is terminated. Nothing here reads a
//! clock or the API: the caller passes `now` and the pods' facts.

/// The grace period the API server gives a pod that states none (`terminationGracePeriodSeconds`
/// defaults to 30).
pub const DEFAULT_POD_GRACE_S: i64 = 30;

/// The moment, seconds on the caller's clock, by which a node whose removal began at
/// `deleted_at` and whose NodeClaim allows `grace_period_s` must be drained. Saturates rather
/// than overflows, so an absurd grace period means "never".
pub fn termination_deadline(deleted_at: i64, grace_period_s: i64) -> i64 {
    deleted_at.saturating_add(grace_period_s)
}

/// Whether the deadline (if any) has been reached at `now`: the drain then stops waiting and
/// the node is removed whatever still runs on it, as Karpenter's termination controller does
/// once `hasTerminationGracePeriodElapsed`.
pub fn deadline_reached(deadline: Option<i64>, now: i64) -> bool {
    deadline.is_some_and(|d| now >= d)
}

/// What the drain does to one pod that must leave its node, this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainStep {
    /// Evict it through the Eviction API (PodDisruptionBudgets apply).
    Evict,
    /// Delete it (no PodDisruptionBudget applies), with this grace period, seconds: the time
    /// left before the deadline, never negative.
    Delete {
        /// `DeleteOptions.gracePeriodSeconds`.
        grace_s: i64,
    },
    /// Leave it: it is protected (the reason), and no deadline forces it out yet.
    Hold(String),
}

/// What the drain does at `now` to a pod with `protection` (why it may not be evicted, if it
/// may not: `karpenter.sh/do-not-disrupt`, `safe-to-evict=false`) and its own
/// `terminationGracePeriodSeconds` `pod_grace_s`, on a node whose drain `deadline` is given
/// (`None`: no terminationGracePeriod, the drain waits for protected pods forever).
///
/// A pod is deleted once `now` is past `deadline - pod_grace_s` (Karpenter's strict
/// `After`), with the grace left before the deadline, so that it gets as much of its own grace
/// as the node allows, and in any case once the deadline is reached ([`deadline_reached`]),
/// so that every pod has been told to go when the node is removed; otherwise a protected pod
/// is held and any other evicted. A negative `pod_grace_s` counts as 0.
pub fn drain_step(
    protection: Option<String>,
    pod_grace_s: i64,
    deadline: Option<i64>,
    now: i64,
) -> DrainStep {
    if let Some(d) = deadline {
        let delete_at = d.saturating_sub(pod_grace_s.max(0));
        if now > delete_at || now >= d {
            return DrainStep::Delete {
                grace_s: d.saturating_sub(now).max(0),
            };
        }
    }
    match protection {
        Some(why) => DrainStep::Hold(why),
        None => DrainStep::Evict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_the_deletion_plus_the_grace_period_and_saturates() {
        assert_eq!(termination_deadline(1_000, 3_600), 4_600);
        assert_eq!(termination_deadline(1_000, 0), 1_000);
        assert_eq!(termination_deadline(i64::MAX - 5, 3_600), i64::MAX);
    }

    #[test]
    fn the_deadline_is_reached_at_and_after_it_and_never_without_one() {
        for (deadline, now, reached) in [
            (None, i64::MAX, false),
            (Some(100), 99, false),
            (Some(100), 100, true),
            (Some(100), 101, true),
        ] {
            assert_eq!(
                deadline_reached(deadline, now),
                reached,
                "{deadline:?} {now}"
            );
        }
    }

    #[test]
    fn pods_are_evicted_held_or_deleted_by_their_grace_against_the_deadline() {
        let dnd = || Some("pod a/b has karpenter.sh/do-not-disrupt=true".to_string());
        let hold = DrainStep::Hold("pod a/b has karpenter.sh/do-not-disrupt=true".into());
        let delete = |grace_s| DrainStep::Delete { grace_s };
        // (protection, pod grace, deadline, now, step)
        let cases = [
            // No terminationGracePeriod: today's drain, whatever the time.
            (None, 30, None, 1_000_000, DrainStep::Evict),
            (dnd(), 30, None, 1_000_000, hold.clone()),
            // Well before the deadline: the same.
            (None, 30, Some(1_000), 900, DrainStep::Evict),
            (dnd(), 30, Some(1_000), 900, hold.clone()),
            // Exactly deadline - grace: not yet (Karpenter deletes strictly after).
            (dnd(), 30, Some(1_000), 970, hold.clone()),
            // Past deadline - grace: deleted, protected or not, with the grace left.
            (dnd(), 30, Some(1_000), 971, delete(29)),
            (None, 30, Some(1_000), 971, delete(29)),
            // A pod whose grace outlasts the whole window is deleted at once, with what is left.
            (dnd(), 7_200, Some(1_000), 0, delete(1_000)),
            // At and past the deadline: deleted with no grace left.
            (dnd(), 30, Some(1_000), 1_000, delete(0)),
            (None, 0, Some(1_000), 1_001, delete(0)),
            (dnd(), 30, Some(1_000), 5_000, delete(0)),
            // A pod with no grace of its own waits for the deadline itself, and goes at it.
            (dnd(), 0, Some(1_000), 999, hold.clone()),
            (dnd(), 0, Some(1_000), 1_000, delete(0)),
            (dnd(), -5, Some(1_000), 999, hold),
            (dnd(), -5, Some(1_000), 1_000, delete(0)),
        ];
        for (protection, grace, deadline, now, want) in cases {
            assert_eq!(
                drain_step(protection.clone(), grace, deadline, now),
                want,
                "{protection:?} grace {grace} deadline {deadline:?} now {now}"
            );
        }
    }
}
