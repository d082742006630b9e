//! Telling a pending pod why the controller does not scale up for it: once per distinct problem
//! per pod, and no faster than a cluster-wide budget allows.
//!
//! Two kinds of problem reach a pod's owner as a `NotTriggerScaleUp` Warning event: the planner's
//! reasons (no NodePool fits, a limit is reached...) and the pod's own fields the controller
//! cannot read or does not support ([`refusals`]: a bad quantity, an unknown operator,
//! `spec.resourceClaims`...). Such a pod stays pending every round, so without [`Notices`] it
//! would be told the same thing every round, and a burst of thousands of broken replicas would
//! become thousands of API writes per round.
//!
//! [`Notices`] is pure: the caller passes `now`. What it remembers is in memory only, so a new
//! leader tells each pod once more.
//!
//! # Budget and memory
//!
//! Telling pods why (`pod_problems`): a pending pod the planner cannot help, and a pending pod left
//! out because its own fields do not translate (bad quantity, gpu-share annotation, operator, DRA
//! claims), gets a `NotTriggerScaleUp` Warning event, "pod didn't trigger scale-up: FIELD: VALUE:
//! WHY" or the planner's reason. `pod_problems::Notices` (pure, `now` passed in) tells each pod (by
//! uid) each distinct problem once, remembers at most 8 problems per pod, forgets a pod that stops
//! pending or triggers a scale-up, and spends a cluster-wide budget (100 at once, then 10 a
//! second); a problem over budget is not remembered, so a later round tells it. The memory is the
//! leader's only: a new leader tells each pod once more. Such pods are logged once, when told, not
//! every round.

use std::collections::{HashMap, VecDeque};

use super::cache::CachedPod;

/// The event reason for a pending pod no scale-up is made for (the Cluster Autoscaler's).
pub const NOT_TRIGGERED: &str = "NotTriggerScaleUp";
/// The event reason for a pending pod held back by a NodePool's limits, and on that NodePool.
pub const LIMIT_REACHED: &str = "LimitReached";

/// Events a burst may send at once.
pub const BURST: u32 = 100;
/// One more event may be sent per this many milliseconds once the burst is spent (10 a second).
pub const REFILL_MS: i64 = 100;
/// Distinct problems remembered per pod; a pod whose problem keeps changing is told the newest
/// ones, and memory stays bounded.
pub const PER_POD: usize = 8;

/// Which problems each pod was told of, and the rate budget.
#[derive(Debug)]
pub struct Notices {
    told: HashMap<String, VecDeque<String>>,
    burst: u32,
    refill_ms: i64,
    tokens: u32,
    /// When `tokens` was last topped up; `None` before the first call.
    refilled_ms: Option<i64>,
}

impl Default for Notices {
    fn default() -> Self {
        Self::new(BURST, REFILL_MS)
    }
}

impl Notices {
    /// A budget of `burst` events at once, one more every `refill_ms` (at least 1).
    pub fn new(burst: u32, refill_ms: i64) -> Self {
        Notices {
            told: HashMap::new(),
            burst,
            refill_ms: refill_ms.max(1),
            tokens: burst,
            refilled_ms: None,
        }
    }

    fn refill(&mut self, now_ms: i64) {
        let last = *self.refilled_ms.get_or_insert(now_ms);
        // A clock that went back refills nothing and restarts the count from now.
        let earned = now_ms.saturating_sub(last).max(0) / self.refill_ms;
        if earned > 0 || now_ms < last {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(self.burst);
            self.refilled_ms = Some(if now_ms < last {
                now_ms
            } else {
                last.saturating_add(i64::from(earned).saturating_mul(self.refill_ms))
            });
        }
    }

    /// Whether to tell `pod` (its uid) of `problem` now. `true` once per distinct problem per
    /// pod, while the budget lasts; a problem refused for the budget is not remembered, so the
    /// next round offers it again and nothing is lost, only delayed.
    pub fn admit(&mut self, pod: &str, problem: &str, now_ms: i64) -> bool {
        if self
            .told
            .get(pod)
            .is_some_and(|t| t.iter().any(|p| p == problem))
        {
            return false;
        }
        self.refill(now_ms);
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        let told = self.told.entry(pod.to_string()).or_default();
        if told.len() == PER_POD {
            told.pop_front();
        }
        told.push_back(problem.to_string());
        true
    }

    /// Forgets what `pod` was told: it got capacity, so a later problem is news again.
    pub fn forget(&mut self, pod: &str) {
        self.told.remove(pod);
    }

    /// Keeps only the pods `keep` says are still pending (the rest are gone or placed).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.told.retain(|pod, _| keep(pod));
    }

    /// How many pods are remembered.
    pub fn len(&self) -> usize {
        self.told.len()
    }

    /// Whether no pod is remembered.
    pub fn is_empty(&self) -> bool {
        self.told.is_empty()
    }
}

/// The key a pod is remembered by: its uid, or `namespace/name` for an object without one.
pub fn pod_id(p: &CachedPod) -> String {
    p.uid.clone().unwrap_or_else(|| p.key.to_string())
}

/// The message a pod that did not trigger a scale-up is shown, for `why` from the planner or
/// from translation.
pub fn not_triggered(why: &dyn std::fmt::Display) -> String {
    format!("pod didn't trigger scale-up: {why}")
}

/// The pods among `pods` that cannot be planned for because of their own fields, with the
/// message naming the field and its value.
pub fn refusals<'a>(
    pods: impl IntoIterator<Item = &'a CachedPod>,
) -> impl Iterator<Item = (&'a CachedPod, String)> {
    pods.into_iter()
        .filter_map(|p| p.core.as_ref().err().map(|e| (p, not_triggered(e))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    #[test]
    fn once_per_distinct_problem_per_pod() {
        let mut n = Notices::default();
        assert!(n.admit("a", "cpu", 0));
        assert!(!n.admit("a", "cpu", 1_000));
        assert!(!n.admit("a", "cpu", 60_000_000));
        assert!(n.admit("a", "memory", 1_000), "another problem is news");
        assert!(!n.admit("a", "cpu", 2_000), "the first is still remembered");
        assert!(n.admit("b", "cpu", 2_000), "another pod is told too");
        n.forget("a");
        assert!(
            n.admit("a", "cpu", 3_000),
            "told again once it got capacity"
        );
        n.retain(|p| p == "b");
        assert_eq!(n.len(), 1);
        assert!(!n.admit("b", "cpu", 4_000));
        assert!(
            n.admit("a", "cpu", 4_000),
            "a pod no longer pending is forgotten"
        );
    }

    #[test]
    fn the_budget_delays_and_loses_nothing() {
        let mut n = Notices::new(3, 1_000);
        let pods = ["p0", "p1", "p2", "p3", "p4"];
        let told: Vec<bool> = pods.iter().map(|p| n.admit(p, "x", 0)).collect();
        assert_eq!(told, [true, true, true, false, false]);
        // Refused pods are offered again next round; one token a second comes back.
        assert!(!n.admit("p3", "x", 999));
        assert!(n.admit("p3", "x", 1_000));
        assert!(!n.admit("p4", "x", 1_500));
        assert!(n.admit("p4", "x", 2_000));
        // A long quiet spell refills to the burst, not beyond.
        let later: Vec<bool> = (0..5)
            .map(|i| n.admit(&format!("q{i}"), "x", 100_000))
            .collect();
        assert_eq!(later, [true, true, true, false, false]);
        // Once told, a pod is not told again whatever the budget.
        assert!(!n.admit("p0", "x", 1_000_000));
    }

    #[test]
    fn a_clock_going_back_refills_nothing() {
        let mut n = Notices::new(1, 1_000);
        assert!(n.admit("a", "x", 10_000));
        assert!(!n.admit("b", "x", 5_000));
        assert!(!n.admit("b", "x", 5_999));
        assert!(n.admit("b", "x", 6_000));
    }

    #[test]
    fn remembered_problems_per_pod_are_bounded() {
        let mut n = Notices::new(u32::MAX, 1);
        for i in 0..PER_POD + 2 {
            assert!(n.admit("a", &format!("problem {i}"), 0));
        }
        assert!(!n.admit("a", &format!("problem {}", PER_POD + 1), 0));
        assert!(n.admit("a", "problem 0", 0), "the oldest was dropped");
    }

    fn cached(v: serde_json::Value) -> CachedPod {
        let p: Pod = serde_json::from_value(v).unwrap();
        CachedPod::new(p, None)
    }

    #[test]
    fn refusals_name_the_field_and_the_value() {
        let good = cached(
            json!({"metadata": {"name": "good", "namespace": "ml", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}),
        );
        let bad = cached(
            json!({"metadata": {"name": "bad", "namespace": "ml", "uid": "u2"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "-1"}}}]}}),
        );
        let dra = cached(json!({"metadata": {"name": "dra", "namespace": "ml"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu"}]}}));
        let found: Vec<(String, String)> = refusals([&good, &bad, &dra])
            .map(|(p, m)| (pod_id(p), m))
            .collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, "u2");
        assert!(
            found[0].1.starts_with(
                r#"pod didn't trigger scale-up: spec.containers[0].resources.requests["cpu"]: "-1": "#
            ),
            "{}",
            found[0].1
        );
        assert_eq!(found[1].0, "ml/dra", "no uid: the key stands in");
        assert_eq!(
            found[1].1,
            r#"pod didn't trigger scale-up: spec.resourceClaims[0]: {"name":"gpu"}: names neither resourceClaimName nor resourceClaimTemplateName"#
        );
    }
}
