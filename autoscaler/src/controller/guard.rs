//! The launch guard: a pending pod that has caused `max_launches` launches without binding
//! causes no more until it binds, or until a back-off after its last launch has passed.
//!
//! Whatever makes the planner and the cluster disagree (a device plugin configured otherwise
//! than the NodePool, a label the scheduler reads differently, a planner bug), the cost is
//! bounded: every such pod buys at most `max_launches` nodes, then one more per back-off, the
//! back-off doubling with every further launch up to `max_backoff_s`.
//!
//! Only launches count: a claim created for a pod counts once the cloud created its instance
//! (a claim refused for capacity and retried elsewhere is not a launch). The state is pure
//! bookkeeping with `now` passed in; the runtime feeds it the claims it creates and the claims
//! and pending pods it sees, and asks [`LaunchGuard::verdict`] before creating a claim. It lives
//! in memory: a restarted controller starts counting afresh.

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::PodKey;

/// Limits of the guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardConfig {
    /// Launches a pod may cause without binding before it waits for the back-off (0: no
    /// limit).
    pub max_launches: u32,
    /// The wait after the launch that reached the limit; doubled for each launch beyond it.
    pub backoff_s: i64,
    /// The longest wait.
    pub max_backoff_s: i64,
}

impl Default for GuardConfig {
    fn default() -> Self {
        GuardConfig {
            max_launches: 1,
            backoff_s: 300,
            max_backoff_s: 3600,
        }
    }
}

/// What the guard says about launching for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The pod may cause a launch.
    Allowed,
    /// The pod has caused `launches` launches without binding; none until `until`.
    Blocked {
        /// Launches so far.
        launches: u32,
        /// Epoch seconds after which one more launch is allowed.
        until: i64,
        /// The claims of those launches, in name order (the most recent few).
        claims: Vec<String>,
    },
}

/// Launches per pending pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PodLaunches {
    launches: u32,
    last_launch_s: i64,
    claims: BTreeSet<String>,
}

/// The guard's bookkeeping (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchGuard {
    config: GuardConfig,
    /// Claims created for pods and not launched yet, with those pods.
    waiting: BTreeMap<String, Vec<PodKey>>,
    pods: BTreeMap<PodKey, PodLaunches>,
}

/// How many claim names a pod's record keeps for messages.
const CLAIMS_KEPT: usize = 5;

impl LaunchGuard {
    /// An empty guard.
    pub fn new(config: GuardConfig) -> Self {
        LaunchGuard {
            config,
            ..LaunchGuard::default()
        }
    }

    /// The limits.
    pub fn config(&self) -> &GuardConfig {
        &self.config
    }

    /// A claim named `claim` was created for `pods`; it counts as their launch once
    /// [`Self::observe`] sees it launched.
    pub fn created(&mut self, claim: &str, pods: &[PodKey]) {
        if pods.is_empty() {
            return;
        }
        self.waiting.insert(claim.to_string(), pods.to_vec());
    }

    /// Takes in this round's view: every claim that exists, with when it launched (`None`:
    /// not launched yet), and the pods still pending. A waiting claim seen launched counts for
    /// its pods; one gone without launching is forgotten; a pod no longer pending (bound,
    /// deleted) starts from zero.
    pub fn observe<'a>(
        &mut self,
        claims: impl IntoIterator<Item = (&'a str, Option<i64>)>,
        pending: &BTreeSet<PodKey>,
    ) {
        let seen: BTreeMap<&str, Option<i64>> = claims.into_iter().collect();
        let waiting = std::mem::take(&mut self.waiting);
        for (claim, pods) in waiting {
            match seen.get(claim.as_str()) {
                Some(Some(at)) => {
                    for p in pods.into_iter().filter(|p| pending.contains(p)) {
                        let r = self.pods.entry(p).or_default();
                        r.launches = r.launches.saturating_add(1);
                        r.last_launch_s = r.last_launch_s.max(*at);
                        r.claims.insert(claim.clone());
                        while r.claims.len() > CLAIMS_KEPT {
                            r.claims.pop_first();
                        }
                    }
                }
                Some(None) => {
                    self.waiting.insert(claim, pods);
                }
                None => {}
            }
        }
        self.pods.retain(|p, _| pending.contains(p));
    }

    /// Whether `pod` may cause another launch at `now`.
    pub fn verdict(&self, pod: &PodKey, now: i64) -> Verdict {
        let max = self.config.max_launches;
        let Some(r) = self.pods.get(pod).filter(|r| max > 0 && r.launches >= max) else {
            return Verdict::Allowed;
        };
        let doublings = (r.launches - max).min(30);
        let wait = self
            .config
            .backoff_s
            .saturating_mul(1_i64 << doublings)
            .min(self.config.max_backoff_s.max(self.config.backoff_s));
        let until = r.last_launch_s.saturating_add(wait);
        if now >= until {
            Verdict::Allowed
        } else {
            Verdict::Blocked {
                launches: r.launches,
                until,
                claims: r.claims.iter().cloned().collect(),
            }
        }
    }

    /// [`Self::verdict`] for a pod a plan puts on a new claim, where `fills(claim)` says whether
    /// the same plan puts other pending pods on in-flight claim `claim`. A pod blocked for its
    /// launches is allowed when one of the claims it launched is still in flight and filled by
    /// others: a newer pod took the room (plans place pods largest first), so the new claim is
    /// the plan's growth, not a repeat of a launch that failed the pod. A claim that came up
    /// without taking the pod is no longer in flight and keeps it blocked.
    pub fn verdict_in_plan(&self, pod: &PodKey, now: i64, fills: impl Fn(&str) -> bool) -> Verdict {
        match self.verdict(pod, now) {
            Verdict::Blocked { claims, .. } if claims.iter().any(|c| fills(c)) => Verdict::Allowed,
            v => v,
        }
    }

    /// Pods with a record (for metrics and tests).
    pub fn tracked(&self) -> usize {
        self.pods.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> PodKey {
        PodKey {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_pod_displaced_from_its_in_flight_claim_may_launch_again() {
        let mut g = LaunchGuard::new(GuardConfig::default());
        let p = key("waiting");
        g.created("c-1", std::slice::from_ref(&p));
        g.observe([("c-1", Some(100))], &pending(&["waiting"]));
        assert!(matches!(g.verdict(&p, 110), Verdict::Blocked { .. }));
        // The plan fills c-1 with a newer pod: this pod's new claim is growth.
        assert_eq!(g.verdict_in_plan(&p, 110, |c| c == "c-1"), Verdict::Allowed);
        // Nobody else on c-1 (it came up without the pod, or the plan left it): still blocked.
        assert!(matches!(
            g.verdict_in_plan(&p, 110, |c| c == "other"),
            Verdict::Blocked { launches: 1, .. }
        ));
    }

    fn pending(names: &[&str]) -> BTreeSet<PodKey> {
        names.iter().map(|n| key(n)).collect()
    }

    fn guard(max_launches: u32) -> LaunchGuard {
        LaunchGuard::new(GuardConfig {
            max_launches,
            backoff_s: 300,
            max_backoff_s: 1000,
        })
    }

    #[test]
    fn a_pod_that_launched_and_did_not_bind_waits_for_the_backoff() {
        let mut g = guard(1);
        let p = key("big");
        g.created("nb-1", std::slice::from_ref(&p));
        // Not launched yet: the claim is in flight, nothing counts.
        g.observe([("nb-1", None)], &pending(&["big"]));
        assert_eq!(g.verdict(&p, 100), Verdict::Allowed);
        g.observe([("nb-1", Some(100))], &pending(&["big"]));
        assert_eq!(
            g.verdict(&p, 120),
            Verdict::Blocked {
                launches: 1,
                until: 400,
                claims: vec!["nb-1".into()]
            }
        );
        assert_eq!(g.verdict(&p, 399), g.verdict(&p, 120));
        assert_eq!(g.verdict(&p, 400), Verdict::Allowed);
        // The launch after the back-off doubles the next wait, up to the cap.
        g.created("nb-2", std::slice::from_ref(&p));
        g.observe([("nb-2", Some(400))], &pending(&["big"]));
        assert!(matches!(
            g.verdict(&p, 999),
            Verdict::Blocked { until: 1000, .. }
        ));
        g.created("nb-3", std::slice::from_ref(&p));
        g.observe([("nb-3", Some(1000))], &pending(&["big"]));
        assert!(matches!(
            g.verdict(&p, 1000),
            Verdict::Blocked {
                until: 2000,
                launches: 3,
                ..
            }
        ));
    }

    #[test]
    fn binding_resets_and_unlaunched_claims_do_not_count() {
        let mut g = guard(1);
        let (a, b) = (key("a"), key("b"));
        g.created("c-1", &[a.clone(), b.clone()]);
        g.observe([("c-1", Some(10))], &pending(&["a", "b"]));
        assert!(matches!(g.verdict(&a, 11), Verdict::Blocked { .. }));
        // b binds: its record goes; a stays blocked.
        g.observe([("c-1", Some(10))], &pending(&["a"]));
        assert_eq!(g.verdict(&b, 11), Verdict::Allowed);
        assert!(matches!(g.verdict(&a, 11), Verdict::Blocked { .. }));
        assert_eq!(g.tracked(), 1);
        // A claim refused for capacity and deleted before launching is no launch.
        let c = key("c");
        g.created("c-2", std::slice::from_ref(&c));
        g.observe([], &pending(&["a", "c"]));
        g.observe([("c-2", Some(20))], &pending(&["a", "c"]));
        assert_eq!(g.verdict(&c, 21), Verdict::Allowed);
    }

    #[test]
    fn the_limit_counts_launches_and_zero_disables_the_guard() {
        let mut g = guard(2);
        let p = key("p");
        g.created("c-1", std::slice::from_ref(&p));
        g.observe([("c-1", Some(10))], &pending(&["p"]));
        assert_eq!(g.verdict(&p, 11), Verdict::Allowed);
        g.created("c-2", std::slice::from_ref(&p));
        g.observe([("c-1", Some(10)), ("c-2", Some(50))], &pending(&["p"]));
        assert!(matches!(
            g.verdict(&p, 51),
            Verdict::Blocked {
                until: 350,
                launches: 2,
                ..
            }
        ));

        let mut off = guard(0);
        for i in 0..5 {
            let c = format!("c-{i}");
            off.created(&c, std::slice::from_ref(&p));
            off.observe([(c.as_str(), Some(i))], &pending(&["p"]));
        }
        assert_eq!(off.verdict(&p, 5), Verdict::Allowed);
    }
}
