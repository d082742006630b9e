//! What operators see of the disruption verdicts: each managed node's `Consolidatable`
//! NodeClaim condition, its `DisruptionBlocked` events (rate-limited per node and reason), and
//! the reason label of `gpu_autoscaler_unremovable_nodes`. Pure: the caller passes `now` and
//! performs the writes.
//!
//! A condition message must not change from one round to the next while nothing changed, or
//! every round would write every claim; so verdicts that wait on time alone (unneeded time,
//! `consolidateAfter`, a pause, a do-not-disrupt duration) are written with the wait's start
//! and end instead of the core's "3m of 10m".
//!
//! What these conditions and the claims record is also what a new leader (a restart, a
//! failover) starts its disruption state from ([`restored_state`]): the unneeded timers go on
//! where the last leader left them, and each NodePool's last scale-up is its newest claim, so a
//! restart neither restarts the timers nor forgets `--scale-down-delay-after-add`.

use std::collections::HashMap;
use std::sync::Arc;

use autoscaler_core::disruption::{DisruptionState, Verdict, VerdictKind};
use autoscaler_core::duration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use nodepools::NodeClaim;

use crate::controller::{keys, translate};

/// The NodeClaim condition type.
pub const CONDITION: &str = "Consolidatable";
/// The event reason for a node a safety rule keeps.
pub const BLOCKED_EVENT: &str = "DisruptionBlocked";
/// Least time between two `DisruptionBlocked` events for one node and reason, seconds.
pub const EVENT_EVERY_S: i64 = 600;

/// The condition reason (CamelCase) of a verdict kind; also the metric's `reason` label.
pub fn reason(kind: VerdictKind) -> &'static str {
    use VerdictKind as K;
    match kind {
        K::Empty => "Empty",
        K::Underutilized => "Underutilized",
        K::Candidate => "Candidate",
        K::Unneeded => "Unneeded",
        K::ConsolidateAfter => "ConsolidateAfter",
        K::Paused => "ScaleDownPaused",
        K::NotManaged => "NotManaged",
        K::Deleting => "Deleting",
        K::AboveThreshold => "AboveThreshold",
        K::WhenEmptyOnly => "WhenEmptyOnly",
        K::DoNotDisrupt => "DoNotDisrupt",
        K::ScaleDownDisabled => "ScaleDownDisabled",
        K::Booked => "Booked",
        K::NotInitialized => "NotInitialized",
        K::Nominated => "Nominated",
        K::MigReconfiguring => "MigReconfiguring",
        K::NotEvictable => "NotEvictable",
        K::PdbBlocked => "PdbBlocked",
        K::BudgetExhausted => "BudgetExhausted",
        K::AtMinNodes => "AtMinNodes",
        K::AtClusterMinimum => "AtClusterMinimum",
        K::AtomicPool => "AtomicPool",
        K::NoPlaceForPods => "NoPlaceForPods",
        K::UnreadyUnneeded => "UnreadyUnneeded",
        K::NotReady => "NotReady",
        K::ParallelismLimit => "ParallelismLimit",
        K::Drifted => "Drifted",
    }
}

/// Whether a kept node deserves a `DisruptionBlocked` event: a safety rule or a limit keeps
/// a node that is otherwise a candidate (as Karpenter reports them). Nodes above their
/// threshold, waiting on time, or not yet initialized are the normal state of a cluster and
/// get none; the condition and the metric still say why they stay.
pub fn blocks(kind: VerdictKind) -> bool {
    use VerdictKind as K;
    matches!(
        kind,
        K::DoNotDisrupt
            | K::ScaleDownDisabled
            | K::Booked
            | K::MigReconfiguring
            | K::NotEvictable
            | K::PdbBlocked
            | K::BudgetExhausted
            | K::AtMinNodes
            | K::AtClusterMinimum
            | K::AtomicPool
            | K::ParallelismLimit
    )
}

/// The `Consolidatable` condition a verdict asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// `True`: a scale-down candidate (chosen, or waiting on time alone); `False`: kept.
    pub status: bool,
    /// CamelCase reason ([`reason`]).
    pub reason: &'static str,
    /// The numbers: what keeps it (or why it goes) and its utilization per resource against
    /// the threshold.
    pub message: String,
}

impl Desired {
    /// Whether a stored condition already says this.
    pub fn matches(&self, c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> bool {
        c.type_ == CONDITION
            && c.status == if self.status { "True" } else { "False" }
            && c.reason == self.reason
            && c.message == self.message
    }
}

/// Seconds since the epoch as RFC 3339 (the number itself if out of range).
pub fn at(t: i64) -> String {
    jiff::Timestamp::from_second(t).map_or_else(|_| t.to_string(), |t| t.to_string())
}

/// The condition for `v`, with `by_resource` the node's utilization per resource (from
/// [`autoscaler_core::disruption::utilization_by_resource`]).
pub fn condition(v: &Verdict, by_resource: &[(String, f64)]) -> Desired {
    use VerdictKind as K;
    let words = match (v.kind, v.wait) {
        (K::Unneeded, Some(w)) => format!(
            "{UNNEEDED_SINCE}{}; removable once unneededTime {} is over at {}",
            at(w.since),
            duration::format(w.until - w.since),
            at(w.until)
        ),
        (K::ConsolidateAfter, Some(w)) => format!(
            "pods last changed at {}; consolidateAfter {} is over at {}",
            at(w.since),
            duration::format(w.until - w.since),
            at(w.until)
        ),
        (K::UnreadyUnneeded, Some(w)) => format!(
            "not ready and {UNNEEDED_SINCE}{}; removable once --scale-down-unready-time {} is \
             over at {}",
            at(w.since),
            duration::format(w.until - w.since),
            at(w.until)
        ),
        (K::Paused, Some(w)) => format!(
            "scale-down of NodePool {} paused after the event at {} until {}",
            v.pool.as_deref().unwrap_or_default(),
            at(w.since),
            at(w.until)
        ),
        (K::DoNotDisrupt, Some(w)) => format!(
            "a karpenter.sh/do-not-disrupt duration ({}) protects it until {}",
            duration::format(w.until - w.since),
            at(w.until)
        ),
        _ => v.reason.clone(),
    };
    let mut message = words;
    // A node waits as unneeded above its threshold only as a right-sizing candidate; without
    // this, "unneeded since" beside a utilization over the threshold reads as a contradiction.
    if v.kind == K::Unneeded
        && let (Some(u), Some(t)) = (v.utilization, v.threshold)
        && u > t
    {
        message.push_str(
            ", as a right-sizing candidate (above its threshold, but a cheaper node may hold \
             its pods)",
        );
    }
    if let Some(threshold) = v.threshold
        && !by_resource.is_empty()
    {
        let parts: Vec<String> = by_resource
            .iter()
            .map(|(r, u)| format!("{r} {u:.2}"))
            .collect();
        message.push_str(&format!(
            "; utilization {} against threshold {threshold:.2}",
            parts.join(", ")
        ));
    }
    Desired {
        status: v.kind.is_candidate(),
        reason: reason(v.kind),
        message,
    }
}

/// The words before an unneeded wait's start in [`condition`]'s messages.
const UNNEEDED_SINCE: &str = "unneeded since ";

/// When the claim's node became unneeded, as its `Consolidatable` condition says: the start of
/// an `Unneeded` or `UnreadyUnneeded` wait ([`condition`] writes it into the message). Other
/// verdicts give `None`: a node waiting on `consolidateAfter` after its unneeded time (the
/// message does not carry the start) and one already chosen start their timers again (later,
/// never earlier, than the last leader would have acted).
pub fn unneeded_since(c: &Condition) -> Option<i64> {
    if c.type_ != CONDITION
        || c.status != "True"
        || !matches!(c.reason.as_str(), "Unneeded" | "UnreadyUnneeded")
    {
        return None;
    }
    let (_, rest) = c.message.split_once(UNNEEDED_SINCE)?;
    let ts = rest.split(';').next()?.trim();
    ts.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// The disruption state a new leader starts from, read back from the claims: each node's
/// unneeded timer from its claim's condition ([`unneeded_since`]), and each NodePool's last
/// scale-up as its newest claim's creation (a replacement claim counts too, which can only
/// delay a scale-down). Not restored: the last deletion and failed deletion of a pool
/// (their delays default to 0s and 3m) and the removals under way (their jobs are gone; the
/// nodes they tainted are released in the first round).
pub fn restored_state(claims: &[Arc<NodeClaim>]) -> DisruptionState {
    let mut state = DisruptionState::default();
    for c in claims {
        let status = c.status.as_ref();
        // A claim being deleted keeps no timer, but it was a scale-up all the same (a launch
        // that failed on capacity is deleted soon after it was made).
        if c.metadata.deletion_timestamp.is_none()
            && let Some(node) = status.and_then(|s| s.node_name.as_ref())
            && let Some(since) = status
                .into_iter()
                .flat_map(|s| &s.conditions)
                .find_map(unneeded_since)
        {
            state.unneeded_since.insert(node.clone(), since);
        }
        if let (Some(pool), Some(created)) = (
            c.labels().get(keys::POOL_LABEL),
            c.metadata.creation_timestamp.as_ref(),
        ) {
            let at = translate::epoch_seconds(created);
            let last = state.pools.entry(pool.clone()).or_default();
            last.last_scale_up = Some(last.last_scale_up.map_or(at, |t| t.max(at)));
        }
    }
    state
}

/// When each node was last told each blocking reason ([`EVENT_EVERY_S`] apart at most once).
#[derive(Debug, Default)]
pub struct EventLimiter {
    last: HashMap<(String, &'static str), i64>,
}

impl EventLimiter {
    /// Whether `node` may be told `reason` at `now`; if so, it counts as told.
    pub fn allow(&mut self, node: &str, reason: &'static str, now: i64) -> bool {
        let key = (node.to_string(), reason);
        match self.last.get(&key) {
            Some(t) if now < t + EVENT_EVERY_S => false,
            _ => {
                self.last.insert(key, now);
                true
            }
        }
    }

    /// Forgets entries older than the interval (their nodes may be told again anyway), so the
    /// memory holds at most one interval's worth of nodes.
    pub fn prune(&mut self, now: i64) {
        self.last.retain(|_, t| now < *t + EVENT_EVERY_S);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoscaler_core::disruption::Wait;

    fn verdict(kind: VerdictKind, reason: &str, wait: Option<Wait>) -> Verdict {
        Verdict {
            node: "n".into(),
            pool: Some("gpu".into()),
            utilization: Some(0.25),
            threshold: Some(0.5),
            disrupted: false,
            reason: reason.into(),
            kind,
            wait,
        }
    }

    #[test]
    fn messages_carry_the_numbers_and_do_not_change_while_waiting() {
        let gpu = [("nvidia.com/gpu".to_string(), 0.25)];
        let kept = condition(
            &verdict(
                VerdictKind::PdbBlocked,
                "blocked by PDB default/web (allows 0 disruptions)",
                None,
            ),
            &gpu,
        );
        assert_eq!(
            (kept.status, kept.reason, kept.message.as_str()),
            (
                false,
                "PdbBlocked",
                "blocked by PDB default/web (allows 0 disruptions); utilization nvidia.com/gpu \
                 0.25 against threshold 0.50"
            )
        );
        // Two rounds of the same wait, the core's words having moved on: one message.
        let wait = Some(Wait {
            since: 1_700_000_000,
            until: 1_700_000_600,
        });
        let a = condition(
            &verdict(VerdictKind::Unneeded, "unneeded for 0s of 10m", wait),
            &gpu,
        );
        let b = condition(
            &verdict(VerdictKind::Unneeded, "unneeded for 1m of 10m", wait),
            &gpu,
        );
        assert_eq!(a, b);
        assert!(a.status);
        assert_eq!(
            a.message,
            "unneeded since 2023-11-14T22:13:20Z; removable once unneededTime 10m is over at \
             2023-11-14T22:23:20Z; utilization nvidia.com/gpu 0.25 against threshold 0.50"
        );
    }

    #[test]
    fn a_right_sizing_candidate_says_why_it_is_unneeded_above_its_threshold() {
        let cpu = [("cpu".to_string(), 0.63)];
        let wait = Some(Wait {
            since: 1_700_000_000,
            until: 1_700_000_600,
        });
        let mut v = verdict(VerdictKind::Unneeded, "right-sizing candidate", wait);
        v.utilization = Some(0.63);
        let d = condition(&v, &cpu);
        assert_eq!(
            d.message,
            "unneeded since 2023-11-14T22:13:20Z; removable once unneededTime 10m is over at \
             2023-11-14T22:23:20Z, as a right-sizing candidate (above its threshold, but a \
             cheaper node may hold its pods); utilization cpu 0.63 against threshold 0.50"
        );
        // The wait's start still reads back for a new leader.
        let c = Condition {
            type_: CONDITION.into(),
            status: "True".into(),
            reason: d.reason.into(),
            message: d.message,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(1_700_000_000).unwrap(),
            ),
            observed_generation: None,
        };
        assert_eq!(unneeded_since(&c), Some(1_700_000_000));
    }

    #[test]
    fn events_once_per_node_and_reason_per_interval() {
        let mut l = EventLimiter::default();
        assert!(l.allow("n", "PdbBlocked", 0));
        assert!(!l.allow("n", "PdbBlocked", EVENT_EVERY_S - 1));
        assert!(l.allow("n", "DoNotDisrupt", 1), "another reason is told");
        assert!(l.allow("m", "PdbBlocked", 1), "another node is told");
        assert!(l.allow("n", "PdbBlocked", EVENT_EVERY_S));
        l.prune(EVENT_EVERY_S + 1);
        assert!(l.allow("n", "DoNotDisrupt", EVENT_EVERY_S + 1));
        assert!(blocks(VerdictKind::BudgetExhausted) && !blocks(VerdictKind::AboveThreshold));
    }

    /// A claim of `pool` created at `created`, on Node `node`, with `cond` as its condition.
    fn claim(name: &str, pool: &str, created: &str, node: &str, cond: &Desired) -> Arc<NodeClaim> {
        let c = serde_json::json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": created,
                         "labels": {keys::POOL_LABEL: pool}},
            "spec": {"nodePool": pool},
            "status": {"nodeName": node, "conditions": [{
                "type": CONDITION, "status": if cond.status { "True" } else { "False" },
                "reason": cond.reason, "message": cond.message,
                "lastTransitionTime": "2023-11-14T22:00:00Z"
            }]}
        });
        Arc::new(serde_json::from_value(c).expect("a NodeClaim"))
    }

    #[test]
    fn a_new_leader_goes_on_with_the_unneeded_timers_and_the_last_scale_up() {
        let gpu = [("nvidia.com/gpu".to_string(), 0.25)];
        let wait = |since| {
            Some(Wait {
                since,
                until: since + 600,
            })
        };
        let unneeded = condition(
            &verdict(VerdictKind::Unneeded, "unneeded", wait(1_700_000_000)),
            &gpu,
        );
        let unready = condition(
            &verdict(VerdictKind::UnreadyUnneeded, "unready", wait(1_700_000_100)),
            &[],
        );
        // Waiting on consolidateAfter: no unneeded timer yet, whatever the message's times.
        let waiting = condition(
            &verdict(
                VerdictKind::ConsolidateAfter,
                "consolidateAfter",
                wait(1_699_000_000),
            ),
            &gpu,
        );
        let kept = condition(
            &verdict(VerdictKind::AboveThreshold, "utilization 0.9", None),
            &gpu,
        );
        let claims = [
            claim("a", "gpu", "2023-11-14T21:00:00Z", "na", &unneeded),
            claim("b", "gpu", "2023-11-14T21:30:00Z", "nb", &unready),
            claim("c", "cpu", "2023-11-14T20:00:00Z", "nc", &waiting),
            claim("d", "cpu", "2023-11-14T20:10:00Z", "nd", &kept),
        ];
        let state = restored_state(&claims);
        assert_eq!(
            state.unneeded_since.into_iter().collect::<Vec<_>>(),
            [
                ("na".to_string(), 1_700_000_000),
                ("nb".to_string(), 1_700_000_100)
            ]
        );
        let last_up = |p: &str| state.pools[p].last_scale_up;
        assert_eq!(
            last_up("gpu"),
            Some(1_699_997_400),
            "the newest claim of the pool"
        );
        assert_eq!(last_up("cpu"), Some(1_699_992_600));
        // A claim being deleted (a launch refused for capacity) keeps no timer but was a
        // scale-up: forgetting it would end --scale-down-delay-after-add early.
        let mut deleting = (*claim("e", "cpu", "2023-11-14T22:00:00Z", "ne", &unneeded)).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2023-11-14T22:01:00Z".parse().expect("a time"),
            ));
        let mut with_deleting = claims.to_vec();
        with_deleting.push(Arc::new(deleting));
        let state = restored_state(&with_deleting);
        assert_eq!(state.pools["cpu"].last_scale_up, Some(1_700_000_000 - 800));
        assert!(!state.unneeded_since.contains_key("ne"));
        // The message round-trips exactly; a False condition or another type says nothing.
        let mut c = claims[0].status.as_ref().unwrap().conditions[0].clone();
        assert_eq!(unneeded_since(&c), Some(1_700_000_000));
        c.status = "False".into();
        assert_eq!(unneeded_since(&c), None);
    }
}
