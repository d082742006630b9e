//! Leader election with a `coordination.k8s.io/v1` Lease.
//!
//! [`decide`] is the pure rule (create, renew, take over an expired lease, or follow); the
//! elector task applies it every `retry` with optimistic concurrency (a replace carries the
//! resourceVersion it read, so of two replicas racing for an expired lease exactly one wins).
//! A leader that cannot renew within the lease duration stops leading at once; on shutdown it
//! releases the lease so the other replica takes over without waiting for expiry.
//!
//! Expiry is measured on this replica's own clock, from when it last saw the lease *change*
//! ([`Observation`]), as client-go's leader election does: the holder's `renewTime` is only
//! compared with earlier readings of itself, never with the local time, so clocks skewed by any
//! amount between replicas cannot make a live lease look expired (or a dead one look live for
//! longer than one lease duration after this replica last saw it renewed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use super::api_calls::check;

/// Leader-election settings.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How often to try to acquire or renew.
    pub retry: Duration,
}

/// What to do with the lease as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No lease: create it, held by us.
    Create,
    /// We hold it: renew.
    Renew,
    /// Someone else held it and it expired (or was released): take it over.
    TakeOver,
    /// Someone else holds a valid lease.
    Follow {
        /// Its holder.
        holder: String,
    },
}

/// The part of a lease that changes whenever its holder renews or loses it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    acquire_time: Option<MicroTime>,
    renew_time: Option<MicroTime>,
    transitions: Option<i32>,
    duration_s: Option<i32>,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Self {
        Record {
            holder: spec.holder_identity.clone(),
            acquire_time: spec.acquire_time.clone(),
            renew_time: spec.renew_time.clone(),
            transitions: spec.lease_transitions,
            duration_s: spec.lease_duration_seconds,
        }
    }
}

/// What this replica last saw of the lease, and when by its own monotonic clock.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    seen: Option<(Record, i64)>,
}

impl Observation {
    /// Notes `spec` as read at `now_us`; the time is kept only when the record changed.
    /// Returns when the current record was first seen.
    fn note(&mut self, spec: &LeaseSpec, now_us: i64) -> i64 {
        let record = Record::of(spec);
        match &self.seen {
            Some((r, at)) if *r == record => *at,
            _ => {
                self.seen = Some((record, now_us));
                now_us
            }
        }
    }
}

/// Decides from the lease as read at `now_us`: microseconds on this replica's monotonic clock
/// (any origin, the same for every call with one `seen`). A lease someone else holds expires
/// `leaseDurationSeconds` after `seen` first recorded its current state: the lease's own
/// timestamps are compared only with each other (see the module docs).
pub fn decide(lease: Option<&Lease>, me: &str, seen: &mut Observation, now_us: i64) -> Decision {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return if lease.is_none() {
            Decision::Create
        } else {
            Decision::TakeOver
        };
    };
    let since = seen.note(spec, now_us);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let duration_us = i64::from(spec.lease_duration_seconds.unwrap_or(15).max(0)) * 1_000_000;
    if now_us.saturating_sub(since) >= duration_us {
        Decision::TakeOver
    } else {
        Decision::Follow { holder }
    }
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

fn spec_for(cfg: &LeaderConfig, previous: Option<&LeaseSpec>, take_over: bool) -> LeaseSpec {
    let t = MicroTime(now());
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(
            i32::try_from(cfg.lease_duration.as_secs().max(1)).unwrap_or(15),
        ),
        acquire_time: if take_over || previous.is_none() {
            Some(t.clone())
        } else {
            previous.and_then(|p| p.acquire_time.clone())
        },
        renew_time: Some(t),
        lease_transitions: Some(if take_over {
            transitions + 1
        } else {
            transitions
        }),
        ..Default::default()
    }
}

/// One acquire-or-renew attempt; `Ok(true)` when we hold the lease afterwards. `now_us`
/// reads the local monotonic clock for [`decide`].
async fn try_once(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    seen: &mut Observation,
    now_us: impl Fn() -> i64,
) -> Result<bool, kube::Error> {
    check("coordination.k8s.io", "leases", "get");
    let current = match api.get(&cfg.name).await {
        Ok(l) => Some(l),
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e),
    };
    match decide(current.as_ref(), &cfg.identity, seen, now_us()) {
        Decision::Follow { .. } => Ok(false),
        Decision::Create => {
            check("coordination.k8s.io", "leases", "create");
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(spec_for(cfg, None, false)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    note_written(seen, &written, now_us());
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        d @ (Decision::Renew | Decision::TakeOver) => {
            let mut lease = current.expect("decided on an existing lease");
            let spec = spec_for(cfg, lease.spec.as_ref(), d == Decision::TakeOver);
            lease.spec = Some(spec);
            check("coordination.k8s.io", "leases", "update");
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(written) => {
                    note_written(seen, &written, now_us());
                    Ok(true)
                }
                // Someone else wrote in between: they won this round.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Our own write is a change like any other: should another replica take the lease, its
/// expiry is counted from here.
fn note_written(seen: &mut Observation, lease: &Lease, now_us: i64) {
    if let Some(spec) = &lease.spec {
        seen.note(spec, now_us);
    }
}

/// Gives the lease up (holder cleared) if we hold it.
pub async fn release(client: kube::Client, cfg: &LeaderConfig) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    check("coordination.k8s.io", "leases", "get");
    let Ok(mut lease) = api.get(&cfg.name).await else {
        return;
    };
    if lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        != Some(&cfg.identity)
    {
        return;
    }
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
    }
    check("coordination.k8s.io", "leases", "update");
    if let Err(e) = api.replace(&cfg.name, &PostParams::default(), &lease).await {
        tracing::warn!(error = %e, "releasing the leader lease");
    }
}

/// Runs the elector until `stop` flips; `leader` mirrors whether we hold the lease. Returns
/// `Err` when leadership, once held, was lost (the caller must stop acting at once).
///
/// # Errors
/// A message saying leadership was lost.
pub async fn run(
    client: kube::Client,
    cfg: LeaderConfig,
    leader: Arc<AtomicBool>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut last_renewed: Option<tokio::time::Instant> = None;
    let mut seen = Observation::default();
    let origin = tokio::time::Instant::now();
    let clock = || i64::try_from(origin.elapsed().as_micros()).unwrap_or(i64::MAX);
    loop {
        match try_once(&api, &cfg, &mut seen, clock).await {
            Ok(true) => {
                if !leader.swap(true, Ordering::SeqCst) {
                    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "became the leader");
                }
                last_renewed = Some(tokio::time::Instant::now());
            }
            Ok(false) => {
                if leader.load(Ordering::SeqCst) {
                    leader.store(false, Ordering::SeqCst);
                    return Err("another replica took the leader lease".into());
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "leader election");
                if leader.load(Ordering::SeqCst)
                    && last_renewed.is_some_and(|t| t.elapsed() >= cfg.lease_duration)
                {
                    leader.store(false, Ordering::SeqCst);
                    return Err(format!("could not renew the leader lease: {e}"));
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.retry) => {}
            _ = stop.changed() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const S: i64 = 1_000_000;

    fn lease(holder: &str, renew: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "gpu-autoscaler", "namespace": "kube-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew,
                     "leaseTransitions": 0}
        }))
        .unwrap()
    }

    /// `renewTime` `s` seconds after 2026-01-01T00:00:00Z, on the holder's clock.
    fn renewed(holder: &str, s: u32) -> Lease {
        lease(
            holder,
            &format!(
                "2026-01-01T{:02}:{:02}:{:02}.000000Z",
                s / 3600,
                s / 60 % 60,
                s % 60
            ),
        )
    }

    #[test]
    fn create_renew_and_released() {
        let mut seen = Observation::default();
        assert_eq!(decide(None, "a", &mut seen, 0), Decision::Create);
        assert_eq!(
            decide(Some(&renewed("b", 0)), "b", &mut seen, S),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&renewed("", 0)), "a", &mut seen, 2 * S),
            Decision::TakeOver,
            "a released lease is free at once"
        );
        let no_spec: Lease = serde_json::from_value(json!({"metadata": {"name": "l"}})).unwrap();
        assert_eq!(
            decide(Some(&no_spec), "a", &mut seen, 3 * S),
            Decision::TakeOver
        );
    }

    /// The follower's clock reads three hours past the holder's: comparing `renewTime` with it
    /// would call every renewal expired. Kept renewed, the lease is never taken.
    #[test]
    fn a_follower_clock_hours_ahead_does_not_take_a_live_lease() {
        let ahead = 1_767_225_600 * S + 3 * 3600 * S; // 2026-01-01T03:00:00Z, on the follower
        let mut seen = Observation::default();
        for step in 0..60u32 {
            // The holder renews every 2 s of its clock; the follower reads every 2 s of its own.
            let now = ahead + i64::from(step) * 2 * S;
            assert_eq!(
                decide(Some(&renewed("b", step * 2)), "a", &mut seen, now),
                Decision::Follow { holder: "b".into() },
                "step {step}"
            );
        }
    }

    /// The holder's clock is hours ahead (its `renewTime` is in the follower's future) and it
    /// stops renewing: the follower takes the lease one lease duration after it last saw a
    /// change, not hours later.
    #[test]
    fn a_lease_that_stops_being_renewed_is_taken_after_its_duration_of_local_observation() {
        let mut seen = Observation::default();
        let t0 = 42 * S; // any origin: a monotonic clock
        let future = 5 * 3600; // seconds: the holder's clock is five hours ahead
        assert_eq!(
            decide(Some(&renewed("b", future)), "a", &mut seen, t0),
            Decision::Follow { holder: "b".into() }
        );
        // Last renewal, seen at t0 + 4 s.
        let last = renewed("b", future + 4);
        assert_eq!(
            decide(Some(&last), "a", &mut seen, t0 + 4 * S),
            Decision::Follow { holder: "b".into() }
        );
        // Read unchanged for almost 15 s more: still followed.
        for ms in [5_000, 10_000, 18_999] {
            assert_eq!(
                decide(Some(&last), "a", &mut seen, t0 + ms * 1_000),
                Decision::Follow { holder: "b".into() },
                "{ms} ms"
            );
        }
        assert_eq!(
            decide(Some(&last), "a", &mut seen, t0 + 19 * S),
            Decision::TakeOver
        );
    }

    /// A replica that starts while a dead holder's lease is still in place waits one lease
    /// duration from its first reading: it cannot know how long the lease has been stale.
    #[test]
    fn a_fresh_replica_waits_one_duration_from_its_first_reading() {
        let mut seen = Observation::default();
        let stale = renewed("b", 0);
        assert_eq!(
            decide(Some(&stale), "a", &mut seen, 0),
            Decision::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&stale), "a", &mut seen, 15 * S),
            Decision::TakeOver
        );
    }

    /// Any change restarts the count: a new holder, or a takeover that kept the renew time.
    #[test]
    fn every_change_of_the_record_restarts_the_count() {
        let mut seen = Observation::default();
        assert!(matches!(
            decide(Some(&renewed("b", 0)), "a", &mut seen, 0),
            Decision::Follow { .. }
        ));
        let mut taken = renewed("c", 0);
        taken.spec.as_mut().unwrap().lease_transitions = Some(1);
        assert_eq!(
            decide(Some(&taken), "a", &mut seen, 10 * S),
            Decision::Follow { holder: "c".into() }
        );
        assert_eq!(
            decide(Some(&taken), "a", &mut seen, 24 * S),
            Decision::Follow { holder: "c".into() },
            "15 s counted from the change at 10 s, not from 0"
        );
        assert_eq!(
            decide(Some(&taken), "a", &mut seen, 25 * S),
            Decision::TakeOver
        );
    }
}
