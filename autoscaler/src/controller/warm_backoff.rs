//! Back-off of warm launches (`--enforce-node-group-min-size`): a NodePool whose warm nodes
//! launch and never come up gets no new warm claim until a back-off after the last failure.
//!
//! Pod launches have the launch guard ([`super::guard`]): a pod that caused a launch without
//! binding waits. A warm claim has no pod, so without this a template whose nodes never
//! register (a bad image, a missing instance profile) would pay for one instance per
//! registration timeout, for ever. This is the Cluster Autoscaler's node-group back-off applied
//! to the claims that keep a pool at its minimum.
//!
//! **What counts.** A warm claim the lifecycle deletes because it failed to become a node
//! ([`super::lifecycle::Action::Delete`] with `failed`: its Node did not register or
//! initialize in time, or the cloud refused the launch for a reason other than capacity) is a
//! failure of its pool. A capacity refusal is not (the offering is set aside and another
//! tried), nor a warm claim deleted for any other reason (its Node deleted by someone, expiry,
//! garbage collection of a vanished instance). A warm claim that initializes clears its pool's
//! record, and so does any change to the NodePool (its `metadata.generation`: a user who fixed
//! the template should not wait out the back-off); a deleted pool's record goes. After `n`
//! failures in a row the pool waits `backoff_s × 2^(n-1)` (at most `max_backoff_s`) from the
//! last; a failure more than [`RESET_S`] after the one before counts from one again, as the
//! Cluster Autoscaler's back-off resets after three quiet hours.
//!
//! The state is bookkeeping with `now` passed in; the runtime tells it the warm claims it
//! creates, the failures the lifecycle deletes, and every round the phase of each claim and
//! the NodePools' generations. It lives in memory: a restarted controller starts afresh.

use std::collections::BTreeMap;

use super::lifecycle::Phase;

/// Quiet time after which a pool's failures count from one again (the Cluster Autoscaler's
/// `--node-group-backoff-reset-timeout` default, 3h).
pub const RESET_S: i64 = 3 * 3600;

/// A warm claim being followed: its pool and the pool's generation it was planned from, when
/// it was created and whether the claim cache has shown it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Followed {
    pool: String,
    generation: i64,
    created_s: i64,
    seen: bool,
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
    /// Why it failed (the lifecycle's reason).
    pub why: String,
    /// The NodePool's `metadata.generation` the failed claims were planned from.
    pub generation: i64,
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

    /// Whether it follows no claim and holds no pool's record: [`Self::observe`] would do
    /// nothing.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.pools.is_empty()
    }

    /// Warm claim `claim` of `pool` was created at `now`, planned from the pool at
    /// `generation`.
    pub fn created(&mut self, claim: &str, pool: &str, generation: i64, now: i64) {
        self.claims.insert(
            claim.to_string(),
            Followed {
                pool: pool.to_string(),
                generation,
                created_s: now,
                seen: false,
            },
        );
    }

    /// The lifecycle deletes `claim` at `now` because it failed to become a node (`why`). A
    /// failure of the pool if it is a followed warm claim, counted once however often the
    /// deletion is tried, and against the pool's generation the claim was planned from: a
    /// claim of the template before an edit does not hold back the edited one.
    pub fn failed(&mut self, claim: &str, why: &str, now: i64) {
        let Some(f) = self.claims.remove(claim) else {
            return;
        };
        let generation = f.generation;
        let r = self.pools.entry(f.pool).or_insert(Failures {
            count: 0,
            last_s: now,
            claim: String::new(),
            why: String::new(),
            generation,
        });
        if now.saturating_sub(r.last_s) > RESET_S || r.generation != generation {
            r.count = 0;
        }
        r.count = r.count.saturating_add(1);
        r.last_s = now;
        r.claim = claim.to_string();
        r.why = why.to_string();
        r.generation = generation;
    }

    /// Takes in this round's claims with their phases and the NodePools with their
    /// generations, at `now`. A followed claim seen initialized clears its pool's failures; one
    /// being deleted, or gone, is forgotten (one the cache has not shown yet is waited for, up
    /// to ten minutes). A pool's record goes when the pool is gone or its generation changed.
    pub fn observe<'a>(
        &mut self,
        claims: impl IntoIterator<Item = (&'a str, Phase)>,
        pools: impl IntoIterator<Item = (&'a str, i64)>,
        now: i64,
    ) {
        let seen: BTreeMap<&str, Phase> = claims.into_iter().collect();
        let followed = std::mem::take(&mut self.claims);
        for (name, mut f) in followed {
            let phase = seen.get(name.as_str());
            f.seen |= phase.is_some();
            match phase {
                Some(Phase::Initialized) => {
                    self.pools.remove(&f.pool);
                }
                Some(Phase::Deleting) => {}
                Some(_) => {
                    self.claims.insert(name, f);
                }
                None if !f.seen && now.saturating_sub(f.created_s) < UNSEEN_S => {
                    self.claims.insert(name, f);
                }
                None => {}
            }
        }
        let generations: BTreeMap<&str, i64> = pools.into_iter().collect();
        self.pools
            .retain(|pool, r| generations.get(pool.as_str()) == Some(&r.generation));
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

    const POOLS: [(&str, i64); 2] = [("gpu", 1), ("cpu", 1)];

    fn backoff() -> WarmBackoff {
        WarmBackoff::new(300, 3600)
    }

    /// Creates warm claim `name` of pool "gpu" at `at`, has it seen launched, then deleted as
    /// failed at `failed_at` (the pool at generation 1).
    fn fails(b: &mut WarmBackoff, name: &str, at: i64, failed_at: i64) {
        b.created(name, "gpu", 1, at);
        // Not in the claim cache yet: waited for.
        b.observe([], POOLS, at);
        b.observe([(name, Phase::Launched)], POOLS, at);
        b.failed(
            name,
            "no Node registered within 900s of the launch",
            failed_at,
        );
        // The deletion is tried again: counted once.
        b.failed(
            name,
            "no Node registered within 900s of the launch",
            failed_at,
        );
        b.observe([(name, Phase::Deleting)], POOLS, failed_at);
    }

    #[test]
    fn a_warm_claim_that_failed_to_become_a_node_blocks_its_pool_doubling_per_failure() {
        let mut b = backoff();
        fails(&mut b, "gpu-a", 100, 1000);
        let blocked = b.blocked("gpu", 1000).expect("blocked");
        assert_eq!((blocked.failures.count, blocked.until), (1, 1300));
        assert_eq!(blocked.failures.claim, "gpu-a");
        assert!(blocked.failures.why.contains("no Node registered"));
        assert_eq!(b.blocked("gpu", 1300), None);
        assert_eq!(b.blocked("cpu", 1000), None);
        fails(&mut b, "gpu-b", 1300, 2200);
        assert_eq!(b.blocked("gpu", 2200).map(|x| x.until), Some(2800));
        // Up to the maximum.
        for (i, at) in [3000, 4000, 5000, 6000].into_iter().enumerate() {
            fails(&mut b, &format!("gpu-{i}"), at, at + 1);
        }
        assert_eq!(b.blocked("gpu", 6001).map(|x| x.until), Some(6001 + 3600));
    }

    #[test]
    fn only_followed_warm_claims_count_and_an_initialized_one_clears_its_pool() {
        let mut b = backoff();
        // A pod's claim, or a warm claim of a leader before this one: not followed.
        b.failed("gpu-pods", "no Node registered", 100);
        assert_eq!(b.blocked("gpu", 100), None);
        // A warm claim deleted for another reason (its Node deleted, expiry): forgotten, and
        // a later failed deletion of the same name counts nothing.
        b.created("gpu-a", "gpu", 1, 100);
        b.observe([("gpu-a", Phase::Registered)], POOLS, 200);
        b.observe([("gpu-a", Phase::Deleting)], POOLS, 300);
        b.failed("gpu-a", "no Node registered", 300);
        assert_eq!(b.blocked("gpu", 300), None);
        // A claim the cache never showed is forgotten after ten minutes.
        b.created("gpu-lost", "gpu", 1, 300);
        b.observe([], POOLS, 901);
        b.failed("gpu-lost", "no Node registered", 902);
        assert_eq!(b.blocked("gpu", 902), None);
        fails(&mut b, "gpu-b", 1000, 1100);
        assert!(b.blocked("gpu", 1100).is_some());
        b.created("gpu-c", "gpu", 1, 1400);
        b.observe([("gpu-c", Phase::Registered)], POOLS, 1450);
        b.observe([("gpu-c", Phase::Initialized)], POOLS, 1500);
        assert_eq!(b.blocked("gpu", 1500), None);
    }

    #[test]
    fn a_changed_or_deleted_pool_ends_its_back_off() {
        let mut b = backoff();
        fails(&mut b, "gpu-a", 0, 100);
        b.observe([], [("gpu", 2), ("cpu", 1)], 150);
        assert_eq!(b.blocked("gpu", 150), None);
        fails(&mut b, "gpu-b", 200, 300);
        b.observe([], [("cpu", 1)], 350);
        assert_eq!(b.blocked("gpu", 350), None);
        // A claim of the template before an edit fails after it: the edited pool waits not.
        b.created("gpu-old", "gpu", 1, 400);
        b.observe([("gpu-old", Phase::Launched)], [("gpu", 2)], 450);
        b.failed("gpu-old", "no Node registered", 500);
        b.observe([], [("gpu", 2)], 500);
        assert_eq!(b.blocked("gpu", 500), None);
    }

    #[test]
    fn failures_three_quiet_hours_apart_count_from_one_again() {
        let mut b = backoff();
        fails(&mut b, "gpu-a", 0, 100);
        fails(&mut b, "gpu-b", 400, 500);
        assert_eq!(b.blocked("gpu", 500).map(|x| x.failures.count), Some(2));
        fails(&mut b, "gpu-c", 20_000, 20_100);
        let blocked = b.blocked("gpu", 20_100).expect("blocked");
        assert_eq!((blocked.failures.count, blocked.until), (1, 20_400));
    }
}
