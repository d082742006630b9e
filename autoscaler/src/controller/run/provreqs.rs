//! The ProvisioningRequest loop of the controller: one [`provreq::step`] per request, the
//! planner asked for requests that are waiting, and bookings held in every snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use autoscaler_core::model::Snapshot;
use k8s_openapi::api::core::v1::PodTemplate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use nodepools::NodeClaim;
use nodepools::conditions as claim_conditions;
use nodepools::conditions::reasons as claim_reasons;
use providers::CloudProvider;
use serde_json::{Value, json};

use super::super::actuator::has_finalizer;
use super::super::actuator::set_condition;
use super::super::cache::CachedPod;
use super::super::lifecycle::{self, Phase};
use super::super::metrics::ProvReqLabel;
use super::super::provreq::{
    self, BOOKING_DETAIL, Class, Facts, PIN_LABEL, ProvisioningRequest, REQUEST_ANNOTATION, State,
    Step, Target, TargetStatus, conditions, reasons,
};
use super::{Controller, claim_object, epoch};
use crate::controller::settings::whole_seconds as secs;

/// `provisioningClassDetails` key: when the booking was written (seconds), so a claim not yet
/// in the cache right after its creation is not mistaken for a vanished one.
const BOOKED_AT_DETAIL: &str = "gpu-autoscaler.dev/booked-at";
/// How long a just-created claim may be missing from the cache.
const CACHE_GRACE_S: i64 = 15;

/// What the request loop keeps between rounds.
#[derive(Default)]
pub(super) struct Memory {
    /// Requests without capacity: attempts so far and when the next may run.
    backoff: HashMap<String, (u32, Instant)>,
    /// Bookings too large for the status ([`provreq::Booking::detail`] wrote a summary).
    bookings: HashMap<String, provreq::Booking>,
}

fn ns_name(pr: &ProvisioningRequest) -> (String, String) {
    (
        pr.namespace().unwrap_or_else(|| "default".into()),
        pr.name_any(),
    )
}

/// PodTemplates by `(namespace, name)`.
fn by_name(templates: &[Arc<PodTemplate>]) -> BTreeMap<(String, String), &PodTemplate> {
    templates
        .iter()
        .map(|t| {
            (
                (t.namespace().unwrap_or_default(), t.name_any()),
                t.as_ref(),
            )
        })
        .collect()
}

fn state_name(s: &State) -> &'static str {
    match s {
        State::New => "new",
        State::Waiting => "waiting",
        State::Launching(_) => "launching",
        State::Booked { .. } => "booked",
        State::Done => "done",
    }
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// `namespace/name` of the requests whose consuming pods get no scale-up of their own
    /// ([`provreq::live`]).
    pub(super) fn live_provreqs(&self) -> BTreeSet<String> {
        match self.stores.provreqs.get() {
            Some((prs, _)) => provreq::live(&prs.state()),
            None => BTreeSet::new(),
        }
    }

    fn templates(&self) -> Vec<Arc<PodTemplate>> {
        self.stores
            .provreqs
            .get()
            .map(|(_, t)| t.state())
            .unwrap_or_default()
    }

    /// Whether `claim` belongs to a live best-effort-atomic request whose claims this loop
    /// launches together (the provider has an atomic group launch).
    pub(super) fn launched_by_request(&self, claim: &NodeClaim) -> bool {
        if !self.shared.provider.atomic_groups() {
            return false;
        }
        let Some(key) = claim.annotations().get(REQUEST_ANNOTATION) else {
            return false;
        };
        let Some((store, _)) = self.stores.provreqs.get() else {
            return false;
        };
        store.state().iter().any(|pr| {
            let (ns, name) = ns_name(pr);
            // Waiting too: the request's status may lag its claims in the cache.
            format!("{ns}/{name}") == *key
                && matches!(provreq::state(pr), State::Waiting | State::Launching(_))
        })
    }

    /// Launches a Launching request's claims as one atomic group once they are all pending.
    fn launch_booking(&self, booking: &provreq::Booking) {
        if !self.shared.provider.atomic_groups() {
            return;
        }
        let claims = self.stores.claims.state();
        let mut group = Vec::new();
        for c in booking.claims() {
            match claims
                .iter()
                .find(|x| x.metadata.name.as_deref() == Some(c))
            {
                Some(x) if lifecycle::phase(x) == Phase::Pending && has_finalizer(&x.metadata) => {
                    group.push(x.clone());
                }
                // Not cached yet, or past Pending: nothing to launch as a group now.
                _ => return,
            }
        }
        if !group.is_empty() {
            self.spawn_group_launch(group);
        }
    }

    /// Consuming pods bound to a node, per request `namespace/name`.
    fn consumed(pods: &[Arc<CachedPod>]) -> BTreeMap<String, u32> {
        Self::consumed_on(pods)
            .into_iter()
            .map(|(r, on)| (r, u32::try_from(on.len()).unwrap_or(u32::MAX)))
            .collect()
    }

    /// The nodes of the consuming pods bound to one, per request `namespace/name`.
    fn consumed_on(pods: &[Arc<CachedPod>]) -> BTreeMap<String, Vec<&str>> {
        let mut out: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for p in pods {
            let Some(node) = p.node_name.as_deref().filter(|_| p.active) else {
                continue;
            };
            if let Some(r) = p.core.as_ref().ok().and_then(provreq::consumed_request) {
                out.entry(r).or_default().push(node);
            }
        }
        out
    }

    /// Holds every Launching or Booked request's capacity in `snap`, and offers the pin label
    /// to pending pods that require it ([`provreq::offer_pin`]).
    pub(super) fn hold_bookings(&self, snap: &mut Snapshot, pods: &[Arc<CachedPod>]) {
        provreq::offer_pin(snap);
        let Some((prs, _)) = self.stores.provreqs.get() else {
            return;
        };
        // Most rounds hold nothing: walk the pods only when a booking needs its phantoms.
        let held: Vec<(Arc<ProvisioningRequest>, provreq::Booking)> = prs
            .state()
            .into_iter()
            .filter(|pr| Class::of(pr).is_some())
            .filter_map(|pr| match provreq::state(&pr) {
                State::Launching(b) | State::Booked { booking: b, .. } => Some((pr, b)),
                _ => None,
            })
            .collect();
        if held.is_empty() {
            return;
        }
        let templates = self.templates();
        let by_name = by_name(&templates);
        let consumed = Self::consumed_on(pods);
        // A booked claim's place is on its Node once it registered.
        let claim_of: HashMap<String, String> = snap
            .nodes
            .iter()
            .filter_map(|n| Some((n.name.clone(), n.claim.clone()?)))
            .collect();
        let settings = self.provreq_settings();
        let namespaces = self.stores.namespace_labels();
        for (pr, booking) in held {
            let (ns, name) = ns_name(&pr);
            let Some(booking) = self.resolved(&format!("{ns}/{name}"), booking) else {
                // Elided and not found again yet: the request loop plans it this round.
                continue;
            };
            let on = consumed
                .get(&format!("{ns}/{name}"))
                .map_or(&[][..], Vec::as_slice);
            let places =
                provreq::places_left(&booking, on, |n| claim_of.get(n).map(String::as_str));
            let used = u32::try_from(on.len()).unwrap_or(u32::MAX);
            // Without its templates the request's nodes are still kept from disruption.
            let phantoms = provreq::pods(&pr, &by_name, settings.max_pods, &namespaces)
                .map(|p| provreq::phantoms(p, used))
                .unwrap_or_default();
            provreq::hold(snap, &places, phantoms);
        }
    }

    fn target_status(&self, pr: &ProvisioningRequest, t: &Target, now: i64) -> TargetStatus {
        match t {
            Target::Node(n) => match self
                .stores
                .nodes
                .find(|x| x.metadata.name.as_deref() == Some(n.as_str()))
            {
                Some(x) if x.metadata.deletion_timestamp.is_none() => TargetStatus::Alive {
                    launched: true,
                    initialized: true,
                },
                _ => TargetStatus::Gone,
            },
            Target::Claim(c) => {
                let Some(claim) = self
                    .stores
                    .claims
                    .find(|x| x.metadata.name.as_deref() == Some(c.as_str()))
                else {
                    let booked_at = pr
                        .status
                        .as_ref()
                        .and_then(|s| s.provisioning_class_details.get(BOOKED_AT_DETAIL))
                        .and_then(|v| v.parse::<i64>().ok())
                        .unwrap_or(0);
                    return if now - booked_at < CACHE_GRACE_S {
                        TargetStatus::Alive {
                            launched: false,
                            initialized: false,
                        }
                    } else {
                        TargetStatus::Gone
                    };
                };
                if claim.metadata.deletion_timestamp.is_some() {
                    return TargetStatus::Gone;
                }
                let cond = |type_: &str| {
                    claim
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.iter().find(|x| x.type_ == type_))
                        .cloned()
                };
                let initialized =
                    cond(claim_conditions::INITIALIZED).is_some_and(|x| x.status == "True");
                match cond(claim_conditions::LAUNCHED) {
                    Some(x) if x.status == "True" => TargetStatus::Alive {
                        launched: true,
                        initialized,
                    },
                    Some(x)
                        if x.reason == claim_reasons::INSUFFICIENT_CAPACITY
                            || x.reason == claim_reasons::LAUNCH_FAILED =>
                    {
                        TargetStatus::Failed(x.message)
                    }
                    _ => TargetStatus::Alive {
                        launched: false,
                        initialized: false,
                    },
                }
            }
        }
    }

    /// A booking with its targets: an elided one from memory (`None` when not held).
    fn resolved(&self, key: &str, b: provreq::Booking) -> Option<provreq::Booking> {
        if !b.elided {
            return Some(b);
        }
        self.provreq_memory.bookings.get(key).cloned()
    }

    /// The snapshot waiting requests are planned against, built once per round.
    async fn round_base<'a>(&mut self, base: &'a mut Option<Snapshot>) -> &'a mut Snapshot {
        if base.is_none() {
            let pools = self.stores.pools.state();
            let types = self.instance_types(&pools).await;
            // Whole: the request's own pods may select any namespace.
            *base = Some(self.full_snapshot(&types, false));
        }
        base.as_mut().expect("just built")
    }

    /// Finds an elided booking again (this leader did not write it): plans the request's
    /// pods not yet consumed on existing and in-flight capacity, as check-capacity does, and
    /// holds the result in `snap`. `None` when they no longer fit.
    fn find_again(
        &mut self,
        pr: &ProvisioningRequest,
        snap: &mut Snapshot,
        consumed: u32,
    ) -> Option<provreq::Booking> {
        let templates = self.templates();
        let pods = provreq::pods(
            pr,
            &by_name(&templates),
            self.args.provreq_max_pods,
            &self.stores.namespace_labels(),
        )
        .ok()?;
        let keep = pods.len().saturating_sub(consumed as usize);
        let pods: Vec<_> = pods.into_iter().take(keep).collect();
        let (plan, why) =
            autoscaler_core::provreq::plan(snap, &provreq::group_id(pr), pods.clone(), true);
        if why.is_some() {
            return None;
        }
        let booking = provreq::booking_of(&plan, &BTreeMap::new());
        provreq::hold(snap, &booking, provreq::phantoms(pods, 0));
        let (ns, name) = ns_name(pr);
        self.provreq_memory
            .bookings
            .insert(format!("{ns}/{name}"), booking.clone());
        Some(booking)
    }

    fn provreq_settings(&self) -> provreq::Settings {
        provreq::Settings {
            booking_s: secs(self.args.provreq_booking),
            deadline_s: secs(self.args.provreq_deadline),
            max_pods: self.args.provreq_max_pods,
        }
    }

    /// One step per ProvisioningRequest; waiting requests are planned for (with backoff).
    pub(super) async fn provisioning_requests(&mut self) {
        let Some((store, _)) = self.stores.provreqs.get() else {
            return;
        };
        let prs = store.state();
        let now = epoch();
        let settings = self.provreq_settings();
        if !self.provreq_backoff_restored {
            self.restore_backoff(&prs, now);
            self.provreq_backoff_restored = true;
        }
        // Consumption matters only to booked requests; most rounds have none.
        let consumed = if prs
            .iter()
            .any(|pr| matches!(provreq::state(pr), State::Booked { .. }))
        {
            Self::consumed(&self.stores.pods.state())
        } else {
            BTreeMap::new()
        };
        let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
        // The snapshot waiting requests are planned against, built once per round and updated
        // with each booking made in it.
        let mut base: Option<Snapshot> = None;
        let mut launched_this_round = false;
        for pr in &prs {
            let class = pr.spec.provisioning_class_name.clone();
            let mut state = provreq::state(pr);
            let label = if Class::of(pr).is_some() {
                state_name(&state)
            } else {
                "ignored"
            };
            *counts.entry((class, label.into())).or_default() += 1;
            let (ns, name) = ns_name(pr);
            let mut facts = Facts {
                now,
                created: pr
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(now, |t| t.0.as_second()),
                targets: BTreeMap::new(),
                consumed: consumed.get(&format!("{ns}/{name}")).copied().unwrap_or(0),
            };
            if let State::Launching(b) | State::Booked { booking: b, .. } = &mut state
                && b.elided
            {
                let key = format!("{ns}/{name}");
                if let Some(held) = self.provreq_memory.bookings.get(&key) {
                    *b = held.clone();
                } else if Class::of(pr).is_some() {
                    let snap = self.round_base(&mut base).await;
                    let mut snap = std::mem::take(snap);
                    if let Some(found) = self.find_again(pr, &mut snap, facts.consumed) {
                        tracing::info!(request = %key, "large booking found again by planning");
                        *b = found;
                    }
                    base = Some(snap);
                }
            }
            if let State::Launching(b) = &state {
                self.launch_booking(b);
            }
            if let State::Launching(b) | State::Booked { booking: b, .. } = &state {
                for t in b.targets.keys() {
                    facts
                        .targets
                        .insert(t.clone(), self.target_status(pr, t, now));
                }
            }
            let booking = match &state {
                State::Launching(b) | State::Booked { booking: b, .. } => b.clone(),
                _ => provreq::Booking::default(),
            };
            let step = provreq::step_from(pr, state.clone(), &facts, &settings);
            let result = match step {
                Step::Wait => {
                    if state == State::Done {
                        self.retire(pr, now).await;
                    }
                    Ok(())
                }
                Step::Accept => {
                    self.write(
                        pr,
                        &[
                            (
                                conditions::ACCEPTED,
                                true,
                                reasons::ACCEPTED,
                                "accepted by gpu-autoscaler",
                            ),
                            (
                                conditions::PROVISIONED,
                                false,
                                reasons::CAPACITY_IS_NOT_FOUND,
                                "waiting for the first capacity check",
                            ),
                        ],
                        json!({}),
                    )
                    .await
                }
                Step::Attempt => {
                    let key = format!("{ns}/{name}");
                    let due = self
                        .provreq_memory
                        .backoff
                        .get(&key)
                        .is_none_or(|(_, at)| Instant::now() >= *at);
                    if !due || launched_this_round {
                        Ok(())
                    } else {
                        let snap = self.round_base(&mut base).await;
                        let mut snap = std::mem::take(snap);
                        let launched = self.attempt(pr, &mut snap, now).await;
                        base = Some(snap);
                        launched_this_round |= launched;
                        Ok(())
                    }
                }
                Step::Provisioned => {
                    let n = booking.claims().count();
                    self.provreq_memory.backoff.remove(&format!("{ns}/{name}"));
                    self.write(
                        pr,
                        &[(
                            conditions::PROVISIONED,
                            true,
                            reasons::CAPACITY_IS_PROVISIONED,
                            &format!("capacity is provisioned: {n} node(s) launched"),
                        )],
                        json!({}),
                    )
                    .await
                }
                Step::Rollback { message } => {
                    let cleanup = self.delete_claims(&booking).await;
                    self.provreq_memory.bookings.remove(&format!("{ns}/{name}"));
                    self.backoff(&format!("{ns}/{name}"));
                    tracing::info!(request = %format!("{ns}/{name}"), %message, "rolled back");
                    self.write(
                        pr,
                        &[(
                            conditions::PROVISIONED,
                            false,
                            reasons::CAPACITY_IS_NOT_FOUND,
                            &if cleanup.kept + cleanup.failed == 0 {
                                format!(
                                    "{message}; every NodeClaim of the request was deleted (all or nothing); retrying"
                                )
                            } else {
                                format!(
                                    "{message}; its NodeClaims were deleted (all or nothing){}; retrying",
                                    cleanup.except()
                                )
                            },
                        )],
                        json!({BOOKING_DETAIL: Value::Null, BOOKED_AT_DETAIL: Value::Null, PIN_LABEL: Value::Null}),
                    )
                    .await
                }
                Step::StartClock => {
                    self.write(pr, &[], json!({provreq::CLOCK_DETAIL: now.to_string()}))
                        .await
                }
                Step::Lost { message } => {
                    let c = self.delete_claims(&booking).await;
                    tracing::info!(request = %format!("{ns}/{name}"), %message, "booked capacity lost");
                    let cleanup = match (c.deleted, c.kept + c.failed) {
                        (0, 0) => String::new(),
                        (d, 0) => format!("; its {d} NodeClaim(s) were deleted"),
                        (d, _) => format!("; {d} of its NodeClaims were deleted{}", c.except()),
                    };
                    self.write(
                        pr,
                        &[(
                            conditions::FAILED,
                            true,
                            reasons::CAPACITY_LOST,
                            &format!("{message}{cleanup}; a new attempt books capacity again"),
                        )],
                        json!({}),
                    )
                    .await
                }
                Step::Fail { reason, message } => {
                    self.write(
                        pr,
                        &[(conditions::FAILED, true, reason, &message)],
                        json!({}),
                    )
                    .await
                }
                Step::Expire { reason, message } => {
                    self.write(
                        pr,
                        &[(conditions::BOOKING_EXPIRED, true, reason, &message)],
                        json!({}),
                    )
                    .await
                }
                Step::Revoke { message } => {
                    self.write(
                        pr,
                        &[(
                            conditions::CAPACITY_REVOKED,
                            true,
                            reasons::REVOKED,
                            &message,
                        )],
                        json!({}),
                    )
                    .await
                }
            };
            if let Err(e) = result {
                tracing::warn!(request = %format!("{ns}/{name}"), error = %e, "ProvisioningRequest");
            }
        }
        let live: BTreeSet<String> = prs
            .iter()
            .map(|p| {
                let (ns, name) = ns_name(p);
                format!("{ns}/{name}")
            })
            .collect();
        self.provreq_memory.backoff.retain(|k, _| live.contains(k));
        let booked: BTreeSet<String> = prs
            .iter()
            .filter(|p| {
                matches!(
                    provreq::state(p),
                    State::Launching(_) | State::Booked { .. }
                )
            })
            .map(|p| {
                let (ns, name) = ns_name(p);
                format!("{ns}/{name}")
            })
            .collect();
        self.provreq_memory
            .bookings
            .retain(|k, _| booked.contains(k));
        let m = &self.shared.metrics.provisioning_requests;
        m.clear();
        for ((class, state), n) in counts {
            m.get_or_create(&ProvReqLabel { class, state }).set(n);
        }
    }

    /// Deletes the NodeClaims of a booking whose nodes run no pod that would have to move
    /// (read fresh from the API server). Booked capacity is not reserved against other pods:
    /// a node that took one meanwhile is left to consolidation, which drains it within its
    /// PodDisruptionBudgets, rather than deleted under the pod. A claim whose deletion failed
    /// is not retried here: its node, once empty, is consolidation's too.
    async fn delete_claims(&self, booking: &provreq::Booking) -> Cleanup {
        let claims = self.stores.claims.state();
        let mut out = Cleanup::default();
        for c in booking.claims() {
            let node = claims
                .iter()
                .find(|x| x.name_any() == c)
                .and_then(|x| x.status.as_ref())
                .and_then(|s| s.node_name.clone());
            if let Some(node) = node {
                match self.pods_moving_with(std::slice::from_ref(&node)).await {
                    Ok(pods) if pods.is_empty() => {}
                    Ok(pods) => {
                        tracing::info!(claim = c, %node, ?pods, "kept a ProvisioningRequest's NodeClaim: pods run on its node");
                        out.kept += 1;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(claim = c, %node, error = %e, "kept a ProvisioningRequest's NodeClaim: its pods could not be read");
                        out.kept += 1;
                        continue;
                    }
                }
            }
            match self.shared.actuator.delete_claim(c).await {
                Ok(()) => out.deleted += 1,
                Err(e) => {
                    tracing::warn!(claim = c, error = %e, "deleting a ProvisioningRequest's NodeClaim");
                    out.failed += 1;
                }
            }
        }
        out
    }

    /// A new leader's back-off for the requests the last one was retrying
    /// ([`provreq::restored_backoff`]), so that a restart does not retry them all at once.
    fn restore_backoff(&mut self, prs: &[Arc<ProvisioningRequest>], now: i64) {
        let (base, max) = (
            secs(self.args.provreq_retry),
            secs(self.args.provreq_retry_max),
        );
        for pr in prs {
            if let Some((attempts, next)) = provreq::restored_backoff(pr, base, max, now) {
                let (ns, name) = ns_name(pr);
                let wait = std::time::Duration::from_secs(u64::try_from(next - now).unwrap_or(0));
                self.provreq_memory
                    .backoff
                    .insert(format!("{ns}/{name}"), (attempts, Instant::now() + wait));
            }
        }
    }

    /// The next retry delay of a request without capacity (doubling from `--provreq-retry`).
    fn backoff(&mut self, key: &str) -> std::time::Duration {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let (base, max) = (ms(self.args.provreq_retry), ms(self.args.provreq_retry_max));
        let entry = self
            .provreq_memory
            .backoff
            .entry(key.to_string())
            .or_insert((0, Instant::now()));
        let delay = std::time::Duration::from_millis(
            u64::try_from(autoscaler_core::cadence::doubling_backoff(
                base, max, entry.0,
            ))
            .unwrap_or(0),
        );
        entry.0 += 1;
        entry.1 = Instant::now() + delay;
        delay
    }

    /// Plans for a waiting request against `snap`; books what it finds, creates the claims of
    /// a best-effort-atomic request, or records why there is no capacity. Returns whether
    /// claims were created (their capacity is not in `snap`, so no other request is planned
    /// in this round).
    async fn attempt(&mut self, pr: &ProvisioningRequest, snap: &mut Snapshot, now: i64) -> bool {
        let (ns, name) = ns_name(pr);
        let key = format!("{ns}/{name}");
        let class = Class::of(pr).expect("only known classes are attempted");
        let templates = self.templates();
        let by_name = by_name(&templates);
        let pods = match provreq::pods(
            pr,
            &by_name,
            self.args.provreq_max_pods,
            &self.stores.namespace_labels(),
        ) {
            Ok(p) => p,
            Err(why) => {
                // Only a missing template is worth waiting for: Kueue creates the templates
                // right after the request.
                let set = match &why {
                    provreq::PodsError::Missing(m) => {
                        self.backoff(&key);
                        (
                            conditions::PROVISIONED,
                            false,
                            reasons::TEMPLATE_MISSING,
                            format!("{m}; retrying"),
                        )
                    }
                    provreq::PodsError::Invalid(m) => {
                        (conditions::FAILED, true, reasons::INVALID, m.clone())
                    }
                };
                if let Err(e) = self
                    .write(pr, &[(set.0, set.1, set.2, &set.3)], json!({}))
                    .await
                {
                    tracing::warn!(request = %key, error = %e, "ProvisioningRequest");
                }
                return false;
            }
        };
        let (plan, why) = autoscaler_core::provreq::plan(
            snap,
            &provreq::group_id(pr),
            pods.clone(),
            class == Class::CheckCapacity,
        );
        let result = if let Some(why) = why {
            if provreq::no_retry(pr) {
                self.write(
                    pr,
                    &[
                        (
                            conditions::PROVISIONED,
                            false,
                            reasons::CAPACITY_IS_NOT_FOUND,
                            &why,
                        ),
                        (
                            conditions::FAILED,
                            true,
                            reasons::NO_RETRY,
                            &format!("no capacity and noRetry is set: {why}"),
                        ),
                    ],
                    json!({}),
                )
                .await
            } else {
                // Stable text: Kueue copies it into the Workload on every change.
                self.backoff(&key);
                self.write(
                    pr,
                    &[(
                        conditions::PROVISIONED,
                        false,
                        reasons::CAPACITY_IS_NOT_FOUND,
                        &format!("{why}; retrying"),
                    )],
                    json!({}),
                )
                .await
            }
        } else if plan.new_claims.is_empty() {
            let booking = provreq::booking_of(&plan, &BTreeMap::new());
            provreq::hold(snap, &booking, provreq::phantoms(pods, 0));
            self.provreq_memory.backoff.remove(&key);
            let detail = booking.detail();
            tracing::info!(request = %key, booking = %detail, "capacity found");
            self.provreq_memory
                .bookings
                .insert(key.clone(), booking.clone());
            self.write(
                pr,
                &[(
                    conditions::PROVISIONED,
                    true,
                    reasons::CAPACITY_IS_FOUND,
                    &format!(
                        "capacity is found in the cluster: {} pod(s) on {} node(s)",
                        booking.total(),
                        booking.targets.len()
                    ),
                )],
                json!({BOOKING_DETAIL: detail, BOOKED_AT_DETAIL: now.to_string()}),
            )
            .await
        } else {
            return self.launch_for(pr, &plan, now).await;
        };
        if let Err(e) = result {
            tracing::warn!(request = %key, error = %e, "ProvisioningRequest");
        }
        false
    }

    /// Creates a best-effort-atomic request's claims; if any creation fails, deletes the ones
    /// made (all or nothing). Returns whether claims now exist.
    async fn launch_for(
        &mut self,
        pr: &ProvisioningRequest,
        plan: &autoscaler_core::plan::Plan,
        now: i64,
    ) -> bool {
        let (ns, name) = ns_name(pr);
        let key = format!("{ns}/{name}");
        let pools = self.stores.pools.state();
        let pin = provreq::pin_value(pr);
        let mut created: BTreeMap<String, String> = BTreeMap::new();
        let mut failure: Option<String> = None;
        for nc in &plan.new_claims {
            let Some(np) = pools.iter().find(|p| p.name_any() == nc.pool) else {
                failure = Some(format!("NodePool {} disappeared", nc.pool));
                break;
            };
            let mut obj = claim_object(nc, np, &self.args.cluster_name);
            obj.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(PIN_LABEL.into(), pin.clone());
            obj.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(REQUEST_ANNOTATION.into(), key.clone());
            match self.shared.actuator.create_claim(&obj).await {
                Ok(c) => {
                    created.insert(nc.name.clone(), c.name_any());
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        if let Some(why) = failure {
            for c in created.values() {
                let _ = self.shared.actuator.delete_claim(c).await;
            }
            self.backoff(&key);
            let msg = format!("creating NodeClaims failed: {why}; retrying");
            if let Err(e) = self
                .write(
                    pr,
                    &[(
                        conditions::PROVISIONED,
                        false,
                        reasons::CAPACITY_IS_NOT_FOUND,
                        &msg,
                    )],
                    json!({}),
                )
                .await
            {
                tracing::warn!(request = %key, error = %e, "ProvisioningRequest");
            }
            return false;
        }
        for pool in plan.new_claims.iter().map(|c| c.pool.as_str()) {
            self.disruption_state.scaled_up(pool, now);
        }
        let booking = provreq::booking_of(plan, &created);
        // Pinning works only when every pod goes to the new nodes.
        let pinned = plan.existing.is_empty() && plan.in_flight.is_empty();
        let types: BTreeSet<&str> = plan
            .new_claims
            .iter()
            .filter_map(|c| c.instance_types.first().map(|o| &*o.instance_type))
            .collect();
        let msg = format!(
            "launching {} node(s) ({}) for {} pod(s); Provisioned turns True once every one has launched",
            created.len(),
            types.into_iter().collect::<Vec<_>>().join(", "),
            booking.total()
        );
        tracing::info!(request = %key, claims = ?created.values().collect::<Vec<_>>(), "launching for ProvisioningRequest");
        self.provreq_memory
            .bookings
            .insert(key.clone(), booking.clone());
        let details = json!({
            BOOKING_DETAIL: booking.detail(),
            BOOKED_AT_DETAIL: now.to_string(),
            PIN_LABEL: if pinned { Value::String(pin) } else { Value::Null },
        });
        if let Err(e) = self
            .write(
                pr,
                &[(conditions::PROVISIONED, false, reasons::PROVISIONING, &msg)],
                details,
            )
            .await
        {
            tracing::warn!(request = %key, error = %e, "ProvisioningRequest");
        }
        true
    }

    /// Sets conditions (in the order given, with observedGeneration) and merges `details`
    /// into `provisioningClassDetails`.
    async fn write(
        &self,
        pr: &ProvisioningRequest,
        set: &[(&str, bool, &str, &str)],
        details: Value,
    ) -> super::super::Result<()> {
        let (ns, name) = ns_name(pr);
        let mut conds: Vec<Condition> = pr
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let ts = jiff::Timestamp::now();
        for (type_, status, reason, message) in set {
            set_condition(
                &mut conds,
                (type_, *status),
                reason,
                message,
                ts,
                pr.metadata.generation,
            );
        }
        let old = pr.status.clone().unwrap_or_default();
        let same_details = details.as_object().is_none_or(|d| {
            d.iter().all(|(k, v)| match v {
                Value::Null => !old.provisioning_class_details.contains_key(k),
                Value::String(s) => old.provisioning_class_details.get(k) == Some(s),
                _ => false,
            })
        });
        // An unchanged status is not written: every write wakes Kueue up.
        if same_details && same_conditions(&old.conditions, &conds) {
            return Ok(());
        }
        let mut status = json!({"conditions": conds});
        if details.as_object().is_some_and(|d| !d.is_empty()) {
            status["provisioningClassDetails"] = details;
        }
        self.shared
            .actuator
            .patch_provreq_status(&ns, &name, &status)
            .await
    }

    /// Deletes a terminal request once `--provreq-retention` has passed since it ended.
    async fn retire(&self, pr: &ProvisioningRequest, now: i64) {
        let keep = secs(self.args.provreq_retention);
        if keep == 0 {
            return;
        }
        let ended = pr
            .status
            .as_ref()
            .into_iter()
            .flat_map(|s| s.conditions.iter())
            .filter(|c| {
                c.status == "True"
                    && [
                        conditions::FAILED,
                        conditions::BOOKING_EXPIRED,
                        conditions::CAPACITY_REVOKED,
                    ]
                    .contains(&c.type_.as_str())
            })
            .map(|c| c.last_transition_time.0.as_second())
            .min();
        if let Some(t) = ended
            && now - t >= keep
        {
            let (ns, name) = ns_name(pr);
            if let Err(e) = self.shared.actuator.delete_provreq(&ns, &name).await {
                tracing::warn!(request = %format!("{ns}/{name}"), error = %e, "retiring");
            }
        }
    }
}

/// Equal apart from the transition times (which [`set_condition`] keeps on unchanged status).
fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
                && x.observed_generation == y.observed_generation
        })
}

mod cleanup;
use cleanup::Cleanup;
