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
    /// left before the deadline, never below [`MIN_DELETE_GRACE_S`].
    Delete {
        /// `DeleteOptions.gracePeriodSeconds`.
        grace_s: i64,
    },
    /// Leave it: it is protected (the reason), and no deadline forces it out yet.
    Hold(String),
    /// Leave it: it is terminating already and will be gone before the deadline (or there is
    /// none). The drain still waits for it, so that its instance is not terminated under it
    /// while it shuts down.
    Wait,
}

/// The least grace period a drain deletes a pod with, seconds. Zero would remove it from the
/// API server at once, before its containers stop, and a replacement (a StatefulSet's, with
/// the same name and volumes) could start while it still runs; Karpenter clamps to 1 too
/// (`pkg/controllers/node/termination/terminator/eviction.go` `forceDelete`).
pub const MIN_DELETE_GRACE_S: i64 = 1;

/// The order a drain takes a node's pods in, first to last: each tier is evicted only once
/// every pod of the tiers before it is gone, as the kubelet's graceful node shutdown orders
/// them and Karpenter's terminator does (`pkg/controllers/node/termination/terminator/
/// terminator.go` `groupPodsByPriority`): workloads first, then DaemonSet pods (node agents,
/// such as a log shipper, outlive the workloads they serve), then critical pods
/// ([`CRITICAL_PRIORITY_CLASSES`]), then critical DaemonSet pods. Deletions a deadline forces
/// ([`DrainStep::Delete`]) are not held back by the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DrainTier {
    /// Neither critical nor a DaemonSet's.
    Workload,
    /// A DaemonSet's, not critical.
    DaemonSet,
    /// Critical, not a DaemonSet's.
    Critical,
    /// A critical DaemonSet pod.
    CriticalDaemonSet,
}

/// The priority classes that make a pod critical to a drain ([`DrainTier`]).
pub const CRITICAL_PRIORITY_CLASSES: [&str; 2] =
    ["system-cluster-critical", "system-node-critical"];

impl DrainTier {
    /// The tier of a pod with `spec.priorityClassName` `priority_class` that a DaemonSet
    /// controls (`daemonset`) or not.
    pub fn of(priority_class: Option<&str>, daemonset: bool) -> Self {
        let critical = priority_class.is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c));
        match (critical, daemonset) {
            (false, false) => DrainTier::Workload,
            (false, true) => DrainTier::DaemonSet,
            (true, false) => DrainTier::Critical,
            (true, true) => DrainTier::CriticalDaemonSet,
        }
    }
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
/// is held and any other evicted. A negative `pod_grace_s` counts as 0. The grace given is
/// never below [`MIN_DELETE_GRACE_S`].
///
/// A pod terminating already, until `terminating_until` (its `metadata.deletionTimestamp`,
/// which is its deletion time plus its grace period), is waited for ([`DrainStep::Wait`]),
/// unless it would outlast the deadline: then it is deleted again with the grace left
/// (Karpenter's `IsPodEligibleForForcedEviction`), protected or not.
pub fn drain_step(
    protection: Option<String>,
    pod_grace_s: i64,
    terminating_until: Option<i64>,
    deadline: Option<i64>,
    now: i64,
) -> DrainStep {
    let delete = |d: i64| DrainStep::Delete {
        grace_s: d.saturating_sub(now).max(MIN_DELETE_GRACE_S),
    };
    if let Some(until) = terminating_until {
        return match deadline {
            Some(d) if until > d => delete(d),
            _ => DrainStep::Wait,
        };
    }
    if let Some(d) = deadline {
        let delete_at = d.saturating_sub(pod_grace_s.max(0));
        if now > delete_at || now >= d {
            return delete(d);
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
            // At and past the deadline: deleted with the least grace (never 0: a force
            // deletion).
            (dnd(), 30, Some(1_000), 1_000, delete(1)),
            (None, 0, Some(1_000), 1_001, delete(1)),
            (dnd(), 30, Some(1_000), 5_000, delete(1)),
            (None, 30, Some(1_000), 999, delete(1)),
            // A pod with no grace of its own waits for the deadline itself, and goes at it.
            (dnd(), 0, Some(1_000), 999, hold.clone()),
            (dnd(), 0, Some(1_000), 1_000, delete(1)),
            (dnd(), -5, Some(1_000), 999, hold),
            (dnd(), -5, Some(1_000), 1_000, delete(1)),
        ];
        for (protection, grace, deadline, now, want) in cases {
            assert_eq!(
                drain_step(protection.clone(), grace, None, deadline, now),
                want,
                "{protection:?} grace {grace} deadline {deadline:?} now {now}"
            );
        }
    }

    #[test]
    fn terminating_pods_are_waited_for_unless_they_would_outlast_the_deadline() {
        let dnd = || Some("pod a/b has karpenter.sh/do-not-disrupt=true".to_string());
        // (protection, terminating until, deadline, now, step)
        let cases = [
            // No deadline: wait, however long it takes, protected or not.
            (None, 5_000, None, 1_000, DrainStep::Wait),
            (dnd(), 5_000, None, 1_000, DrainStep::Wait),
            // Gone by the deadline (or exactly at it): wait.
            (None, 900, Some(1_000), 800, DrainStep::Wait),
            (dnd(), 1_000, Some(1_000), 800, DrainStep::Wait),
            // It would outlast the deadline: deleted again with the grace left.
            (
                None,
                1_001,
                Some(1_000),
                800,
                DrainStep::Delete { grace_s: 200 },
            ),
            (
                dnd(),
                9_000,
                Some(1_000),
                999,
                DrainStep::Delete { grace_s: 1 },
            ),
            (
                None,
                9_000,
                Some(1_000),
                2_000,
                DrainStep::Delete { grace_s: 1 },
            ),
        ];
        for (protection, until, deadline, now, want) in cases {
            assert_eq!(
                drain_step(protection.clone(), 30, Some(until), deadline, now),
                want,
                "{protection:?} until {until} deadline {deadline:?} now {now}"
            );
        }
    }

    #[test]
    fn workloads_go_first_then_daemonsets_then_critical_pods() {
        let tiers = [
            DrainTier::of(None, false),
            DrainTier::of(Some("high"), false),
            DrainTier::of(None, true),
            DrainTier::of(Some("system-cluster-critical"), false),
            DrainTier::of(Some("system-node-critical"), false),
            DrainTier::of(Some("system-node-critical"), true),
        ];
        assert_eq!(
            tiers,
            [
                DrainTier::Workload,
                DrainTier::Workload,
                DrainTier::DaemonSet,
                DrainTier::Critical,
                DrainTier::Critical,
                DrainTier::CriticalDaemonSet,
            ]
        );
        assert!(tiers.windows(2).all(|w| w[0] <= w[1]), "{tiers:?}");
    }
}
