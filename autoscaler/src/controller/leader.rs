//! Leader election with a `coordination.k8s.io/v1` Lease.
//!
//! [`decide`] is the pure rule (create, renew, take over an expired lease, or follow); the
//! elector task applies it every `retry` with optimistic concurrency (a replace carries the
//! resourceVersion it read, so of two replicas racing for an expired lease exactly one wins).
//! A leader that cannot renew within the lease duration stops leading at once; on shutdown it
//! releases the lease so the other replica takes over without waiting for expiry.

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

/// Decides from the lease as read at `now` (microseconds since the epoch).
pub fn decide(lease: Option<&Lease>, me: &str, now_us: i64) -> Decision {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return if lease.is_none() {
            Decision::Create
        } else {
            Decision::TakeOver
        };
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let duration_us = i64::from(spec.lease_duration_seconds.unwrap_or(15)) * 1_000_000;
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0.as_microsecond())
        .unwrap_or(0);
    if now_us >= renewed + duration_us {
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

/// One acquire-or-renew attempt; `Ok(true)` when we hold the lease afterwards.
async fn try_once(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<bool, kube::Error> {
    check("coordination.k8s.io", "leases", "get");
    let current = match api.get(&cfg.name).await {
        Ok(l) => Some(l),
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e),
    };
    let now_us = now().as_microsecond();
    match decide(current.as_ref(), &cfg.identity, now_us) {
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
                Ok(_) => Ok(true),
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
                Ok(_) => Ok(true),
                // Someone else wrote in between: they won this round.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
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
    loop {
        match try_once(&api, &cfg).await {
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

    fn lease(holder: &str, renew: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "gpu-autoscaler", "namespace": "kube-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew}
        }))
        .unwrap()
    }

    #[test]
    fn decisions() {
        let t0: i64 = 1_767_225_600_000_000; // 2026-01-01T00:00:00Z
        assert_eq!(decide(None, "a", t0), Decision::Create);
        let held = lease("b", "2026-01-01T00:00:00.000000Z");
        assert_eq!(
            decide(Some(&held), "a", t0 + 5_000_000),
            Decision::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&held), "a", t0 + 15_000_000),
            Decision::TakeOver
        );
        assert_eq!(decide(Some(&held), "b", t0 + 1), Decision::Renew);
        let released = lease("", "2026-01-01T00:00:00.000000Z");
        assert_eq!(decide(Some(&released), "a", t0), Decision::TakeOver);
    }
}
