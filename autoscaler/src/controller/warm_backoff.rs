//! Back-off of warm launches (`--enforce-node-group-min-size`): a NodePool whose warm nodes
//! launch and never come up gets no new warm claim until a back-off after the last failure.
//!
//! Pod launches have the launch guard ([`super::guard`]): a pod that caused a launch without
//! binding waits. A warm claim has no pod, so without this a template whose nodes never
//! register (a bad image, a missing instance profile) would pay for one instance per
//! registration timeout, for ever. This is the Cluster Autoscaler's node-group back-off applied
//! to the claims that keep a pool at its minimum.
//!
//! **What counts.** A warm claim whose instance launched and which is deleted (or gone) before
//! it initialized is a failure of its pool. A claim refused at launch is not: it cost nothing,
//! and the refused offering is already set aside. A warm claim that initializes clears its
//! pool's record. After `n` failures the pool waits `backoff_s × 2^(n-1)` (at most
//! `max_backoff_s`) from the last one; a failure more than [`RESET_S`] after the one before
//! starts counting again from one, as the Cluster Autoscaler's back-off resets after three
//! quiet hours.
//!
//! The state is bookkeeping with `now` passed in; the runtime tells it the warm claims it
//! creates and, every round, the phase of each claim it sees. It lives in memory: a restarted
//! controller starts afresh.

use std::collections::BTreeMap;

use super::lifecycle::Phase;

/// Quiet time after which a pool's failures count from one again (the Cluster Autoscaler's
/// `--node-group-backoff-reset-timeout` default, 3h).
pub const RESET_S: i64 = 3 * 3600;

/// A warm claim being followed: its pool, when it was created, whether the claim cache has
/// shown it and whether its instance was seen launched.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Followed {
    pool: String,
    created_s: i64,
    seen: bool,
    launched: bool,
}

/// How long a created claim the claim cache has not shown yet is waited for (a watch that lost
/// its events holds it no longer).
const UNSEEN_S: i64 = 600;

/// A pool's failed warm launches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failures {
    /// Failures in a row.
    pub count: u32,
    /// When the last one was seen, epoch seconds.
    pub last_s: i64,
    /// The claim that failed last.
    pub claim: String,
}

/// A pool that may not have a warm claim now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// Its failures.
    pub failures: Failures,
    /// Epoch seconds from which a warm claim is allowed again.
    pub until: i64,
}

/// The back-off's bookkeeping (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarmBackoff {
    backoff_s: i64,
    max_backoff_s: i64,
    claims: BTreeMap<String, Followed>,
    pools: BTreeMap<String, Failures>,
}

impl WarmBackoff {
    /// Empty; the first failure waits `backoff_s`, each further one twice the last, up to
    /// `max_backoff_s` (or `backoff_s`, if longer).
    pub fn new(backoff_s: i64, max_backoff_s: i64) -> Self {
        WarmBackoff {
            backoff_s: backoff_s.max(0),
            max_backoff_s: max_backoff_s.max(backoff_s).max(0),
            ..WarmBackoff::default()
        }
    }

    /// Warm claim `claim` of `pool` was created at `now`.
    pub fn created(&mut self, claim: &str, pool: &str, now: i64) {
        self.claims.insert(
            claim.to_string(),
            Followed {
                pool: pool.to_string(),
                created_s: now,
                seen: false,
                launched: false,
            },
        );
    }

    /// Takes in this round's claims with their phases, at `now`. A followed claim seen
    /// initialized clears its pool's failures; one deleting, failed or gone after it was seen
    /// launched is a failure; one gone without launching is forgotten (one not shown yet is
    /// waited for, up to ten minutes).
    pub fn observe<'a>(&mut self, claims: impl IntoIterator<Item = (&'a str, Phase)>, now: i64) {
        let seen: BTreeMap<&str, Phase> = claims.into_iter().collect();
        let followed = std::mem::take(&mut self.claims);
        for (name, mut f) in followed {
            let phase = seen.get(name.as_str());
            f.seen |= phase.is_some();
            match phase {
                None if !f.seen && now.saturating_sub(f.created_s) < UNSEEN_S => {
                    self.claims.insert(name, f);
                }
                Some(Phase::Initialized) => {
                    self.pools.remove(&f.pool);
                }
                Some(Phase::Pending) => {
                    self.claims.insert(name, f);
                }
                Some(Phase::Launched | Phase::Registered) => {
                    f.launched = true;
                    self.claims.insert(name, f);
                }
                Some(Phase::Failed | Phase::Deleting) | None if f.launched => {
                    self.failed(&f.pool, &name, now);
                }
                Some(Phase::Failed | Phase::Deleting) | None => {}
            }
        }
    }

    fn failed(&mut self, pool: &str, claim: &str, now: i64) {
        let r = self.pools.entry(pool.to_string()).or_insert(Failures {
            count: 0,
            last_s: now,
            claim: String::new(),
        });
        if now.saturating_sub(r.last_s) > RESET_S {
            r.count = 0;
        }
        r.count = r.count.saturating_add(1);
        r.last_s = now;
        r.claim = claim.to_string();
    }

    /// Whether `pool` must wait before its next warm claim at `now`, and until when.
    pub fn blocked(&self, pool: &str, now: i64) -> Option<Blocked> {
        let f = self.pools.get(pool)?;
        let doublings = f.count.saturating_sub(1).min(30);
        let wait = self
            .backoff_s
            .saturating_mul(1_i64 << doublings)
            .min(self.max_backoff_s);
        let until = f.last_s.saturating_add(wait);
        (now < until).then(|| Blocked {
            failures: f.clone(),
            until,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> WarmBackoff {
        WarmBackoff::new(300, 3600)
    }

    /// Creates warm claim `name` of pool "gpu" and has it seen launched at `at`.
    fn launched(b: &mut WarmBackoff, name: &str, at: i64) {
        b.created(name, "gpu", at);
        // Not in the claim cache yet: waited for.
        b.observe([], at);
        b.observe([(name, Phase::Pending)], at);
        b.observe([(name, Phase::Launched)], at);
    }

    #[test]
    fn a_launched_warm_claim_deleted_before_it_initialized_blocks_its_pool_doubling_per_failure() {
        let mut b = backoff();
        launched(&mut b, "gpu-a", 100);
        assert_eq!(b.blocked("gpu", 100), None);
        // The registration timeout deletes it.
        b.observe([("gpu-a", Phase::Deleting)], 1000);
        let blocked = b.blocked("gpu", 1000).expect("blocked");
        assert_eq!((blocked.failures.count, blocked.until), (1, 1300));
        assert_eq!(blocked.failures.claim, "gpu-a");
        assert_eq!(b.blocked("gpu", 1300), None);
        assert_eq!(b.blocked("cpu", 1000), None);
        // The second failure waits twice as long; the claim that vanished without a deletion
        // seen counts the same.
        launched(&mut b, "gpu-b", 1300);
        b.observe([], 2200);
        assert_eq!(b.blocked("gpu", 2200).map(|x| x.until), Some(2800));
        // Up to the maximum.
        for (i, at) in [3000, 4000, 5000, 6000].into_iter().enumerate() {
            let name = format!("gpu-{i}");
            launched(&mut b, &name, at);
            b.observe([], at + 1);
        }
        assert_eq!(b.blocked("gpu", 6001).map(|x| x.until), Some(6001 + 3600));
    }

    #[test]
    fn an_initialized_warm_claim_clears_its_pool_and_a_claim_refused_at_launch_counts_nothing() {
        let mut b = backoff();
        launched(&mut b, "gpu-a", 100);
        b.observe([("gpu-a", Phase::Deleting)], 1000);
        assert!(b.blocked("gpu", 1000).is_some());
        launched(&mut b, "gpu-b", 1300);
        b.observe([("gpu-b", Phase::Registered)], 1400);
        b.observe([("gpu-b", Phase::Initialized)], 1500);
        assert_eq!(b.blocked("gpu", 1500), None);
        // Refused by the cloud: failed without ever launching.
        b.created("gpu-c", "gpu", 1600);
        b.observe([("gpu-c", Phase::Failed)], 1600);
        b.observe([], 1610);
        assert_eq!(b.blocked("gpu", 1610), None);
        // Once initialized, a claim is no longer followed: its later removal is no failure.
        b.observe([("gpu-b", Phase::Deleting)], 9000);
        assert_eq!(b.blocked("gpu", 9000), None);
    }

    #[test]
    fn failures_three_quiet_hours_apart_count_from_one_again() {
        let mut b = backoff();
        launched(&mut b, "gpu-a", 0);
        b.observe([], 100);
        launched(&mut b, "gpu-b", 400);
        b.observe([], 500);
        assert_eq!(b.blocked("gpu", 500).map(|x| x.failures.count), Some(2));
        launched(&mut b, "gpu-c", 20_000);
        b.observe([], 20_100);
        let blocked = b.blocked("gpu", 20_100).expect("blocked");
        assert_eq!((blocked.failures.count, blocked.until), (1, 20_400));
    }
}
