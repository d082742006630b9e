//! The runtime side of the delivered-capacity check and the launch guard: reporting a claim
//! whose Node came up short ([`lifecycle::Action::ResourceMismatch`]), keeping its shape out of
//! the NodePool's plans, the NodePool's `CapacityDelivered` condition, and holding back new
//! claims for pods the [`LaunchGuard`] says have caused enough launches.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use autoscaler_core::gpu::apply_sharing;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{GpuSharing, PodKey, Snapshot};
use autoscaler_core::overlay::apply_overlays;
use autoscaler_core::plan::Plan;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodepools::NodeClaim;
use nodepools::conditions::{self, reasons};
use providers::{CloudProvider, ShapeKey, UnavailableShapes};
use serde_json::json;

use super::super::actuator::{reference, set_condition};
use super::super::cache::CachedPod;
use super::super::error::Result;
use super::super::guard::{GuardConfig, LaunchGuard, Verdict};
use super::super::lifecycle::{self, Phase};
use super::super::settings::RunArgs;
use super::{Controller, class_of, epoch};
use crate::controller::settings::whole_seconds as secs;

/// An event to publish: regarding, warning, reason, note.
type PendingEvent = (ObjectReference, bool, &'static str, String);

/// What the guard keeps across rounds (in memory: a restart starts afresh, except that shapes
/// of claims still in `ResourceMismatch` are excluded again on the first round).
pub(super) struct GuardState {
    /// Launches per pending pod.
    pub(super) launches: LaunchGuard,
    /// Shapes kept out of planning because a node of theirs came up short.
    pub(super) shapes: UnavailableShapes,
    /// The latest mismatch message per excluded shape, for the NodePool condition.
    mismatches: BTreeMap<ShapeKey, String>,
    /// Pods told they are held back, with the end of the back-off they were told about.
    told: HashMap<PodKey, i64>,
}

impl GuardState {
    /// Empty, with the limits of `args`.
    pub(super) fn new(args: &RunArgs) -> Self {
        let backoff_s = secs(args.launch_backoff);
        GuardState {
            launches: LaunchGuard::new(GuardConfig {
                max_launches: args.max_launches_per_pod,
                backoff_s,
                max_backoff_s: backoff_s.max(GuardConfig::default().max_backoff_s),
            }),
            shapes: UnavailableShapes::new(secs(args.resource_mismatch_ttl)),
            mismatches: BTreeMap::new(),
            told: HashMap::new(),
        }
    }
}

/// A NodePool's catalog as launches use it: instance types as the pool's nodes (GPU sharing
/// applied: what a claim records as launched for), and the sharing itself (what the launch
/// request tells the provider the device plugin is configured for).
pub(super) struct LaunchCatalog {
    /// Instance types with the pool's GPU sharing applied.
    pub(super) types: Arc<Vec<InstanceType>>,
    /// The pool's GPU sharing.
    pub(super) sharing: GpuSharing,
}

/// When the claim launched, if it did: the Launched condition's time, else `now`.
fn launched_at(claim: &NodeClaim, now: i64) -> Option<i64> {
    lifecycle::provider_id(claim)?;
    Some(
        lifecycle::condition(claim, conditions::LAUNCHED)
            .filter(|c| c.status == "True")
            .map(|c| super::super::translate::epoch_seconds(&c.last_transition_time))
            .unwrap_or(now),
    )
}

/// The shape and message of a claim currently marked `ResourceMismatch`.
fn mismatch_of(claim: &NodeClaim) -> Option<(ShapeKey, String)> {
    if lifecycle::phase(claim) == Phase::Deleting {
        return None;
    }
    let c = lifecycle::condition(claim, conditions::INITIALIZED)
        .filter(|c| c.status == "False" && c.reason == reasons::RESOURCE_MISMATCH)?;
    let it = claim.status.as_ref()?.instance_type.clone()?;
    Some((
        ShapeKey::new(claim.spec.node_pool.clone(), it),
        c.message.clone(),
    ))
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// The launch catalog of the NodePool named `pool`, once its catalog is loaded.
    pub(super) fn launch_catalog(&self, pool: &str) -> Option<LaunchCatalog> {
        let np = self.stores.pools.find(|p| p.name_any() == pool)?;
        let types = self
            .types
            .get(&class_of(&np))
            .map(|(_, t)| t.clone())
            .filter(|t| !t.is_empty())?;
        let overlays = self.overlays();
        let types = if overlays.is_empty() {
            types
        } else {
            Arc::new(apply_overlays(&types, &overlays))
        };
        // An invalid NodePool is not planned for; its claims launch unshared.
        let sharing = np
            .to_core(Arc::new(Vec::new()))
            .map(|p| p.sharing)
            .unwrap_or_default();
        let types = if sharing == GpuSharing::default() {
            types
        } else {
            Arc::new(
                types
                    .iter()
                    .map(|t| apply_sharing(t, &sharing).unwrap_or_else(|_| t.clone()))
                    .collect(),
            )
        };
        Some(LaunchCatalog { types, sharing })
    }

    /// Feeds the launch guard this round's claims and pending pods, and renews the exclusion
    /// of every shape one of whose claims is still marked `ResourceMismatch`.
    pub(super) fn guard_observe(&mut self, pending: &BTreeSet<PodKey>) {
        let now = epoch();
        let claims = self.stores.claims.state();
        let seen: Vec<(String, Option<i64>)> = claims
            .iter()
            .map(|c| (c.name_any(), launched_at(c, now)))
            .collect();
        let g = &mut self.guard;
        g.launches
            .observe(seen.iter().map(|(n, t)| (n.as_str(), *t)), pending);
        for (shape, message) in claims.iter().filter_map(|c| mismatch_of(c)) {
            g.shapes.mark(shape.clone(), now);
            g.mismatches.insert(shape, message);
        }
        g.shapes.prune(now);
        let shapes = &g.shapes;
        g.mismatches.retain(|k, _| shapes.is_unavailable(k, now));
        g.told.retain(|k, _| pending.contains(k));
    }

    /// Drops the plan's new claims whose every pod is held back by the launch guard (and with
    /// them every claim of an all-or-nothing group one of them serves, so a group is never
    /// launched in part), telling each held-back pod once per back-off.
    pub(super) fn guard_plan(
        &mut self,
        plan: &mut Plan,
        snapshot: &Snapshot,
        pods: &HashMap<&PodKey, &Arc<CachedPod>>,
        events: &mut Vec<PendingEvent>,
    ) {
        let now = epoch();
        let filled: HashSet<&str> = plan.in_flight.iter().map(|p| p.target.as_str()).collect();
        let verdicts: BTreeMap<&PodKey, Verdict> = plan
            .new_claims
            .iter()
            .flat_map(|nc| &nc.pods)
            .map(|p| {
                let v = self
                    .guard
                    .launches
                    .verdict_in_plan(p, now, |c| filled.contains(c));
                (p, v)
            })
            .filter(|(_, v)| *v != Verdict::Allowed)
            .collect();
        if verdicts.is_empty() {
            return;
        }
        let mut held: Vec<bool> = plan
            .new_claims
            .iter()
            // A warm claim (no pods) is no pod's launch: never held for one.
            .map(|nc| !nc.warm && nc.pods.iter().all(|p| verdicts.contains_key(p)))
            .collect();
        let group_of: HashMap<&PodKey, &str> = snapshot
            .pending
            .iter()
            .filter_map(|p| p.group.as_deref().map(|g| (&p.key, g)))
            .collect();
        let held_groups: BTreeSet<&str> = plan
            .new_claims
            .iter()
            .zip(&held)
            .filter(|(_, h)| **h)
            .flat_map(|(nc, _)| nc.pods.iter().filter_map(|p| group_of.get(p).copied()))
            .collect();
        for (nc, h) in plan.new_claims.iter().zip(held.iter_mut()) {
            if nc
                .pods
                .iter()
                .any(|p| group_of.get(p).is_some_and(|g| held_groups.contains(g)))
            {
                *h = true;
            }
        }
        let max = self.guard.launches.config().max_launches;
        for (nc, _) in plan.new_claims.iter().zip(&held).filter(|(_, h)| **h) {
            for pod in &nc.pods {
                let Some(Verdict::Blocked {
                    launches,
                    until,
                    claims,
                }) = verdicts.get(pod)
                else {
                    continue;
                };
                if self.guard.told.get(pod) == Some(until) {
                    continue;
                }
                self.guard.told.insert(pod.clone(), *until);
                let when = jiff::Timestamp::from_second(*until)
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| until.to_string());
                tracing::warn!(pod = %pod, launches, until = %when, "launch guard: holding back a new NodeClaim");
                if let Some(p) = pods.get(pod) {
                    events.push((
                        p.reference(),
                        true,
                        "LaunchBackoff",
                        format!(
                            "pod didn't trigger scale-up: it caused {launches} launch(es) without binding (NodeClaims {}); no further launch for it before {when} (--max-launches-per-pod={max})",
                            claims.join(", ")
                        ),
                    ));
                }
            }
        }
        let mut keep = held.iter().map(|h| !h);
        plan.new_claims.retain(|_| keep.next().unwrap_or(true));
    }

    /// Marks the claim `ResourceMismatch` with `message`, tells the claim and its NodePool, and
    /// keeps the claim's shape out of the pool's plans.
    pub(super) async fn report_mismatch(
        &mut self,
        claim: &Arc<NodeClaim>,
        message: String,
    ) -> Result<()> {
        let name = claim.name_any();
        let pool = claim.spec.node_pool.clone();
        let mut s = claim.status.clone().unwrap_or_default();
        let ts = jiff::Timestamp::now();
        for c in [conditions::INITIALIZED, conditions::READY] {
            set_condition(
                &mut s.conditions,
                (c, false),
                reasons::RESOURCE_MISMATCH,
                &message,
                ts,
                claim.metadata.generation,
            );
        }
        tracing::warn!(claim = %name, %pool, %message, "resource mismatch");
        self.shared
            .actuator
            .patch_claim_status(&name, &json!(s))
            .await?;
        let now = epoch();
        let ttl = self.guard.shapes.ttl_s();
        if let Some(it) = s.instance_type.as_deref() {
            let shape = ShapeKey::new(pool.clone(), it);
            self.guard.shapes.mark(shape.clone(), now);
            self.guard.mismatches.insert(shape, message.clone());
        }
        let actuator = self.shared.actuator.clone();
        actuator
            .event(
                &reference(claim.as_ref()),
                true,
                reasons::RESOURCE_MISMATCH,
                "Initialize",
                message.clone(),
            )
            .await;
        if let Some(np) = self.stores.pools.find(|p| p.name_any() == pool) {
            actuator
                .event(
                    &reference(np.as_ref()),
                    true,
                    reasons::RESOURCE_MISMATCH,
                    "Initialize",
                    format!(
                        "NodeClaim {name}: {message}; its instance type is kept out of this NodePool's plans for {ttl}s"
                    ),
                )
                .await;
        }
        // Replan now, without the shape, and show the condition on the NodePool soon.
        self.batcher.flag(self.millis());
        self.last_pool_status = None;
        Ok(())
    }

    /// The NodePool's `CapacityDelivered` condition: false while one of its shapes is kept out
    /// of planning for a mismatch, with the messages; true otherwise.
    pub(super) fn delivered_condition(&self, pool: &str, now: i64) -> (bool, &'static str, String) {
        let ttl = self.guard.shapes.ttl_s();
        let shown: Vec<String> = self
            .guard
            .mismatches
            .iter()
            .filter(|(k, _)| k.pool == pool && self.guard.shapes.is_unavailable(k, now))
            .map(|(k, m)| format!("{}: {m}", k.instance_type))
            .collect();
        if shown.is_empty() {
            (true, reasons::AS_LAUNCHED, String::new())
        } else {
            (
                false,
                reasons::RESOURCE_MISMATCH,
                format!(
                    "{}; kept out of this NodePool's plans until {ttl}s after the last such node",
                    shown.join("; ")
                ),
            )
        }
    }
}
