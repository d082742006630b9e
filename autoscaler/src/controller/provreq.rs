//! ProvisioningRequests (`autoscaling.x-k8s.io/v1`) for Kueue's admission check: the API types,
//! the lifecycle as a state enum with a pure [`step`], bookings, and the phantom pods that hold
//! booked capacity in the planner's snapshot.
//!
//! Lifecycle (conditions are written in this order; each carries observedGeneration):
//!
//! ```text
//! New ──Accept──▶ Waiting ──(fits on existing/in-flight)──────────────▶ Booked ──▶ Done
//!                   │  ▲                                                 │  (BookingExpired:
//!                   │  └──Rollback (a claim failed or vanished)──┐       │   consumed or time;
//!                   └──(best-effort-atomic: claims created)──▶ Launching │   CapacityRevoked)
//!                                                                └──all launched──▶ Booked
//! Waiting past the deadline, or with noRetry and no capacity: Failed (Done).
//! ```
//!
//! A booking is written into `status.provisioningClassDetails[`[`BOOKING_DETAIL`]`]` as the
//! nodes and NodeClaims holding the request's pods (`node/a=2,claim/b=1`), so it survives a
//! leader change. While a request is Launching or Booked, [`hold`] puts phantom copies of its
//! not-yet-arrived pods on those nodes and claims in every snapshot: other pods and other
//! requests cannot be planned onto the capacity, and disruption never touches the nodes.
//! What a request puts into the planner's snapshot (its pods, the phantoms, the booking read
//! back from a plan, the pin label) is in `planner` (`provreq/planner.rs`), re-exported here.
//!
//! # The controller's handling in detail
//!
//! ProvisioningRequests (`provreq`, `run/provreqs.rs`), handled once the CRD is served (same `Late`
//! check, so installing Kueue after the autoscaler needs no restart); the user's guide is
//! `docs/src/how-to/kueue.md`. `provreq::state` reads the lifecycle off the object (New → Waiting →
//! \[Launching\] → Booked → Done) and `provreq::step` decides one action from it and observed facts
//! (its booking's nodes and claims, consumed pods, `now`). New and Waiting requests are first
//! checked from the spec alone (`provreq::validate`): `noRetry`, `ValidUntilSeconds` and
//! `BookingDurationSeconds` must be valid (`Failed`, `InvalidParameters`, naming the parameter) and
//! the pod sets non-negative and at most `--provreq-max-pods` pods together (`Failed`,
//! `InvalidRequest`); nothing is built for a refused request. `provreq::shapes` translates one pod
//! per pod set whatever its count; the planner's copies (`provreq::pods`) are made only under that
//! bound. A PodTemplate that does not exist yet is waited for (`Provisioned=False`,
//! `PodTemplateNotFound`); one that does not translate fails the request naming the field. Waiting
//! requests are planned one at a time against the full snapshot with their pods as one
//! all-or-nothing group: `check-capacity` with no NodePool (existing and in-flight capacity only),
//! `best-effort-atomic` with all of them. What a request gets is its *booking*
//! (`node/<n>=k,claim/<c>=k` in `status.provisioningClassDetails`, so it survives a leader change);
//! one longer than `provreq::BOOKING_BUDGET` (16 KiB; the field is capped at 32,768 characters) is
//! written as `summary/pods=..,nodes=..,claims=..` and held in the leader's `run/provreqs.rs`
//! `Memory`, and a new leader finds it again by planning the request's unconsumed pods on existing
//! and in-flight capacity (`find_again`; not found: lost, below). Atomic requests turn
//! `Provisioned=True` only when every claim has launched; one failed or vanished claim deletes all
//! of them (rollback) and the request retries with backoff, the unavailable offering now skipped.
//! While Launching or Booked, `provreq::hold` puts phantom copies of the request's not-yet-bound
//! pods on its nodes and claims in every snapshot (provisioning, disruption, other requests) and
//! lists the nodes as booked (never disrupted). Consuming pods
//! (`autoscaling.x-k8s.io/consume-provisioning-request`) of a live request never enter a batch. The
//! booking time runs from when every booked node is initialized
//! (`gpu-autoscaler.dev/booking-started`), not from launch. The booking ends when all its pods are
//! bound (`BookingExpired`, `CapacityIsConsumed`) or when its time runs out
//! (`CapacityReservationTimeExpired`). A booked node or claim lost before any of the pods started
//! is a failed attempt: the booking's other claims are deleted and the request gets `Failed=True`,
//! `BookedCapacityLost`, which Kueue retries as a new request; only a loss after some pods started
//! is `CapacityRevoked` (which makes Kueue deactivate the workload). Retry messages do not change
//! between retries, and a status equal to the one stored is not written (each change makes Kueue
//! rewrite the Workload). Nodes launched for a request carry
//! `gpu-autoscaler.dev/provisioning-request=<uid>`, and the same key in `provisioningClassDetails`
//! lets Kueue's `podSetUpdates.nodeSelector` pin the pods to them; pending pods that select that
//! label (pinned pods arriving after their booking ended) get it offered by every pool
//! (`provreq::offer_pin`, in `hold_bookings`, one value per plan), so their new claims carry it
//! too. Where the cloud has an atomic group launch (`CloudProvider::atomic_groups`; GCP's
//! `instances.bulkInsert` with `minCount = count`), a request's claims are not launched one by one
//! by the lifecycle but together by the request loop, so the cloud itself decides all or none;
//! elsewhere the rollback above gives the same outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

pub use planner::{
    PodsError, booking_of, consumed_request, hold, offer_pin, phantoms, pinned_to, places_left,
    pods, shapes,
};

/// Answer from existing and in-flight capacity only; never launch.
pub const CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";
/// Launch the whole request or nothing.
pub const BEST_EFFORT_ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
/// Pod annotation naming the request whose capacity the pod consumes.
pub const CONSUME_ANNOTATION: &str = "autoscaling.x-k8s.io/consume-provisioning-request";
/// The older form of [`CONSUME_ANNOTATION`].
pub const CONSUME_ANNOTATION_CA: &str =
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request";
/// Label on the nodes launched for a request (value: a unique id of the request), and the
/// `provisioningClassDetails` key carrying that value, for Kueue's
/// `podSetUpdates.nodeSelector[].valueFromProvisioningClassDetail`.
pub const PIN_LABEL: &str = "gpu-autoscaler.dev/provisioning-request";
/// `provisioningClassDetails` key of the booking.
pub const BOOKING_DETAIL: &str = "gpu-autoscaler.dev/booking";
/// `provisioningClassDetails` key: when every booked node was initialized (seconds), the start
/// of the booking time. A node still booting holds no clock: the pods could not have used it.
pub const CLOCK_DETAIL: &str = "gpu-autoscaler.dev/booking-started";
/// Annotation on a NodeClaim created for a request: its `namespace/name`.
pub const REQUEST_ANNOTATION: &str = "gpu-autoscaler.dev/provisioning-request-name";

/// Parameter: `"true"` fails the request at the first attempt without capacity.
pub const PARAM_NO_RETRY: &str = "noRetry";
/// Request parameter naming the autoscaler instance meant to answer it; a request that sets
/// it is left alone (this controller has no instance name).
pub const PARAM_PROCESSOR_INSTANCE: &str = "processorInstance";
/// Parameter: seconds after creation during which the request is retried.
pub const PARAM_VALID_UNTIL: &str = "ValidUntilSeconds";
/// Parameter: seconds a booking is held once provisioned.
pub const PARAM_BOOKING: &str = "BookingDurationSeconds";

/// Condition types.
pub mod conditions {
    /// The request was accepted by this backend.
    pub const ACCEPTED: &str = "Accepted";
    /// Capacity is there (True) or not yet (False, with the reason or an ETA).
    pub const PROVISIONED: &str = "Provisioned";
    /// The request will never be provisioned.
    pub const FAILED: &str = "Failed";
    /// The booking ended (consumed, or its time ran out).
    pub const BOOKING_EXPIRED: &str = "BookingExpired";
    /// Booked capacity was lost before it was consumed.
    pub const CAPACITY_REVOKED: &str = "CapacityRevoked";
}

/// Condition reasons.
pub mod reasons {
    /// Accepted.
    pub const ACCEPTED: &str = "Accepted";
    /// Capacity exists in the cluster.
    pub const CAPACITY_IS_FOUND: &str = "CapacityIsFound";
    /// Capacity was launched for the request.
    pub const CAPACITY_IS_PROVISIONED: &str = "CapacityIsProvisioned";
    /// No capacity (yet).
    pub const CAPACITY_IS_NOT_FOUND: &str = "CapacityIsNotFound";
    /// Nodes are being launched.
    pub const PROVISIONING: &str = "Provisioning";
    /// The request's deadline passed.
    pub const EXPIRED: &str = "Expired";
    /// `noRetry` and no capacity.
    pub const NO_RETRY: &str = "CapacityIsNotFoundNoRetry";
    /// The consuming pods arrived.
    pub const CONSUMED: &str = "CapacityIsConsumed";
    /// The booking time ran out.
    pub const TIME_EXPIRED: &str = "CapacityReservationTimeExpired";
    /// A booked node or claim is gone.
    pub const REVOKED: &str = "CapacityIsRevoked";
    /// The request cannot be served as written: a PodTemplate that does not translate, a
    /// negative count, or more pods than `--provreq-max-pods`.
    pub const INVALID: &str = "InvalidRequest";
    /// A class parameter is not a valid value (the message names it).
    pub const INVALID_PARAMETERS: &str = "InvalidParameters";
    /// A PodTemplate of the request does not exist (yet: Kueue creates them after the request).
    pub const TEMPLATE_MISSING: &str = "PodTemplateNotFound";
    /// A booked node or claim was lost before any of the request's pods started: the request
    /// failed so that Kueue retries it as a new attempt.
    pub const CAPACITY_LOST: &str = "BookedCapacityLost";
}

/// `spec` of a ProvisioningRequest.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1",
    kind = "ProvisioningRequest",
    plural = "provisioningrequests",
    namespaced,
    status = "ProvisioningRequestStatus",
    schema = "disabled",
    doc = "A request for capacity for a set of pods (Kueue's ProvisioningRequest admission check)."
)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestSpec {
    /// Provisioning class.
    pub provisioning_class_name: String,
    /// Pods to provision for.
    pub pod_sets: Vec<PodSet>,
    /// Class parameters.
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
}

/// `count` pods shaped like a PodTemplate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// The PodTemplate, in the request's namespace.
    pub pod_template_ref: TemplateRef,
    /// How many pods.
    pub count: i32,
}

/// A PodTemplate reference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateRef {
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
}

/// `status` of a ProvisioningRequest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestStatus {
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Class-specific details.
    #[serde(default)]
    pub provisioning_class_details: BTreeMap<String, String>,
}

/// The classes this backend serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// [`CHECK_CAPACITY`].
    CheckCapacity,
    /// [`BEST_EFFORT_ATOMIC`].
    BestEffortAtomic,
}

impl Class {
    /// The class of a request, `None` for classes left to other backends.
    pub fn of(pr: &ProvisioningRequest) -> Option<Class> {
        // A request addressed to a dedicated autoscaler instance (the Cluster Autoscaler's
        // `--check-capacity-processor-instance`) is that instance's to answer.
        if pr
            .spec
            .parameters
            .get(PARAM_PROCESSOR_INSTANCE)
            .is_some_and(|v| !v.is_empty())
        {
            return None;
        }
        match pr.spec.provisioning_class_name.as_str() {
            CHECK_CAPACITY => Some(Class::CheckCapacity),
            BEST_EFFORT_ATOMIC => Some(Class::BestEffortAtomic),
            _ => None,
        }
    }
}

/// Where booked pods sit.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// An existing Node.
    Node(String),
    /// A NodeClaim (in flight, or registered as a Node carrying its name in the claim label).
    Claim(String),
}

/// Longest booking written out in full into `provisioningClassDetails` (whose values the
/// API server caps at 32,768 characters, shared with the other details): a larger one is
/// written as a [`Booking::detail`] summary and held by the leader.
pub const BOOKING_BUDGET: usize = 16 * 1024;

/// The capacity a request holds: how many of its pods each target was planned to take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Booking {
    /// Pods per target.
    pub targets: BTreeMap<Target, u32>,
    /// Read from a summary detail: the targets are not in the object (the leader that wrote
    /// it holds them; another one finds them again by planning).
    pub elided: bool,
}

impl Booking {
    /// What is written into the status: [`Self::render`] when it fits [`BOOKING_BUDGET`],
    /// otherwise a bounded summary (`summary/pods=1010,nodes=1010,claims=0`).
    pub fn detail(&self) -> String {
        let full = self.render();
        if full.len() <= BOOKING_BUDGET {
            return full;
        }
        let claims = self.claims().count();
        format!(
            "summary/pods={},nodes={},claims={claims}",
            self.total(),
            self.targets.len() - claims
        )
    }

    /// `node/a=2,claim/b=1`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (t, n) in &self.targets {
            if !s.is_empty() {
                s.push(',');
            }
            let _ = match t {
                Target::Node(x) => write!(s, "node/{x}={n}"),
                Target::Claim(x) => write!(s, "claim/{x}={n}"),
            };
        }
        s
    }

    /// Parses [`Self::render`]'s output.
    ///
    /// # Errors
    /// The malformed entry (the detail was edited by hand, or written by another backend).
    pub fn parse(s: &str) -> Result<Booking, String> {
        if s.starts_with("summary/") {
            return Ok(Booking {
                targets: BTreeMap::new(),
                elided: true,
            });
        }
        let mut targets = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (target, n) = part
                .rsplit_once('=')
                .ok_or_else(|| format!("booking entry {part:?} has no '=<count>'"))?;
            let n: u32 = n
                .parse()
                .map_err(|_| format!("booking entry {part:?}: count is not a number"))?;
            let t = match target.split_once('/') {
                Some(("node", x)) if !x.is_empty() => Target::Node(x.into()),
                Some(("claim", x)) if !x.is_empty() => Target::Claim(x.into()),
                _ => {
                    return Err(format!(
                        "booking entry {part:?}: expected node/<name> or claim/<name>"
                    ));
                }
            };
            *targets.entry(t).or_insert(0) += n;
        }
        Ok(Booking {
            targets,
            elided: false,
        })
    }

    /// Pods booked in all.
    pub fn total(&self) -> u32 {
        self.targets.values().sum()
    }

    /// The claims of the booking.
    pub fn claims(&self) -> impl Iterator<Item = &str> {
        self.targets.keys().filter_map(|t| match t {
            Target::Claim(c) => Some(c.as_str()),
            Target::Node(_) => None,
        })
    }
}

/// Where a request is in its lifecycle, read from its status.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// Not accepted yet.
    New,
    /// Accepted; no capacity yet.
    Waiting,
    /// Claims created (best-effort-atomic); not all launched.
    Launching(Booking),
    /// Provisioned at `since` (seconds); capacity held.
    Booked {
        /// The capacity.
        booking: Booking,
        /// When Provisioned turned True.
        since: i64,
        /// When every booked node was initialized: the booking time runs from here.
        clock: Option<i64>,
    },
    /// Failed, BookingExpired or CapacityRevoked: nothing more to do.
    Done,
}

fn is_true(pr: &ProvisioningRequest, type_: &str) -> bool {
    condition(pr, type_).is_some_and(|c| c.status == "True")
}

/// The request's condition of `type_`.
pub fn condition<'a>(pr: &'a ProvisioningRequest, type_: &str) -> Option<&'a Condition> {
    pr.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// The request's booking detail, if it has one; a malformed detail reads as none.
pub fn booking(pr: &ProvisioningRequest) -> Option<Booking> {
    let s = pr
        .status
        .as_ref()?
        .provisioning_class_details
        .get(BOOKING_DETAIL)?;
    Booking::parse(s).ok()
}

/// The lifecycle state of a request.
pub fn state(pr: &ProvisioningRequest) -> State {
    use conditions::*;
    if is_true(pr, FAILED) || is_true(pr, BOOKING_EXPIRED) || is_true(pr, CAPACITY_REVOKED) {
        return State::Done;
    }
    let clock = pr
        .status
        .as_ref()
        .and_then(|s| s.provisioning_class_details.get(CLOCK_DETAIL))
        .and_then(|v| v.parse::<i64>().ok());
    // Provisioned decides before Accepted: a request another writer provisioned (the Cluster
    // Autoscaler before a migration) may carry no Accepted condition, and is booked, not new.
    if let Some(c) = condition(pr, PROVISIONED).filter(|c| c.status == "True") {
        return State::Booked {
            // Without a booking of ours there is nothing of ours to hold.
            booking: booking(pr).unwrap_or_default(),
            since: c.last_transition_time.0.as_second(),
            clock,
        };
    }
    if !is_true(pr, ACCEPTED) {
        return State::New;
    }
    match booking(pr) {
        Some(b) if !b.targets.is_empty() || b.elided => State::Launching(b),
        _ => State::Waiting,
    }
}

/// What a booked target looks like now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetStatus {
    /// There; for a claim, whether its instance has launched and its node is initialized.
    Alive {
        /// Launched (always true for a Node).
        launched: bool,
        /// Initialized: pods can run there (always true for a Node).
        initialized: bool,
    },
    /// The claim's launch failed (message).
    Failed(String),
    /// Deleted, or being deleted.
    Gone,
}

/// Settings of the lifecycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Booking time when the request does not set [`PARAM_BOOKING`].
    pub booking_s: i64,
    /// Deadline after creation when the request does not set [`PARAM_VALID_UNTIL`].
    pub deadline_s: i64,
    /// Most pods one request may ask for (all pod sets together); checked from the spec
    /// before any pod is built.
    pub max_pods: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            booking_s: 600,
            deadline_s: 7 * 24 * 3600,
            max_pods: autoscaler_core::provreq::MAX_PODS,
        }
    }
}

/// What is known of a request beyond its own object.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Now, seconds.
    pub now: i64,
    /// The request's creation time, seconds.
    pub created: i64,
    /// The status of every target of its booking.
    pub targets: BTreeMap<Target, TargetStatus>,
    /// Consuming pods bound to a node.
    pub consumed: u32,
}

/// One step of the lifecycle.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing to do.
    Wait,
    /// Write `Accepted=True` and `Provisioned=False`.
    Accept,
    /// Plan for the request (subject to the retry backoff).
    Attempt,
    /// Every claim launched: `Provisioned=True`.
    Provisioned,
    /// A claim failed or vanished: delete the booking's claims, back to Waiting.
    Rollback {
        /// Why.
        message: String,
    },
    /// Every booked node is initialized: the booking time starts now.
    StartClock,
    /// A booked node or claim was lost before any pod started: delete the booking's claims
    /// and write `Failed=True` ([`reasons::CAPACITY_LOST`]) so that Kueue retries.
    Lost {
        /// Why.
        message: String,
    },
    /// The request is invalid, its deadline passed, or it asked not to be retried:
    /// `Failed=True`.
    Fail {
        /// Reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
    /// `BookingExpired=True`.
    Expire {
        /// Reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
    /// `CapacityRevoked=True`: booked capacity lost after some of the pods started.
    Revoke {
        /// Message.
        message: String,
    },
}

/// Longest time a parameter may give, in seconds (10 years, the bound of every duration).
pub const MAX_PARAM_SECONDS: i64 = 10 * 365 * 24 * 3600;

/// A seconds parameter: absent, or a whole number from 0 to [`MAX_PARAM_SECONDS`].
///
/// # Errors
/// A message naming the parameter and its value.
fn param_seconds(pr: &ProvisioningRequest, key: &str) -> Result<Option<i64>, String> {
    let Some(v) = pr.spec.parameters.get(key) else {
        return Ok(None);
    };
    match v.trim().parse::<i64>() {
        Ok(n) if (0..=MAX_PARAM_SECONDS).contains(&n) => Ok(Some(n)),
        Ok(_) => Err(format!(
            "parameter {key}={v:?} is out of range: seconds from 0 to {MAX_PARAM_SECONDS}"
        )),
        Err(_) => Err(format!(
            "parameter {key}={v:?} is not a whole number of seconds"
        )),
    }
}

/// The request's `noRetry` parameter.
///
/// # Errors
/// A message naming the parameter when it is neither `"true"` nor `"false"`.
fn param_no_retry(pr: &ProvisioningRequest) -> Result<bool, String> {
    match pr.spec.parameters.get(PARAM_NO_RETRY) {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(format!(
            "parameter {PARAM_NO_RETRY}={v:?} must be \"true\" or \"false\""
        )),
    }
}

/// Checks a request from its spec alone, before anything is built for it: its parameters
/// ([`reasons::INVALID_PARAMETERS`]) and its pod counts ([`reasons::INVALID`]).
///
/// # Errors
/// The reason and a message naming the parameter or field.
pub fn validate(
    pr: &ProvisioningRequest,
    settings: &Settings,
) -> Result<(), (&'static str, String)> {
    let bad = |m: String| (reasons::INVALID_PARAMETERS, m);
    param_seconds(pr, PARAM_VALID_UNTIL).map_err(bad)?;
    param_seconds(pr, PARAM_BOOKING).map_err(bad)?;
    param_no_retry(pr).map_err(bad)?;
    if pr.spec.pod_sets.is_empty() {
        return Err((reasons::INVALID, "spec.podSets is empty".into()));
    }
    if let Some((i, s)) = pr
        .spec
        .pod_sets
        .iter()
        .enumerate()
        .find(|(_, s)| s.count < 0)
    {
        return Err((
            reasons::INVALID,
            format!(
                "spec.podSets[{i}].count is {}; it must not be negative",
                s.count
            ),
        ));
    }
    let total = total_pods(pr);
    if total > settings.max_pods {
        return Err((
            reasons::INVALID,
            format!(
                "the request asks for {total} pods (spec.podSets[*].count); at most {} per request \
                 (--provreq-max-pods)",
                settings.max_pods
            ),
        ));
    }
    Ok(())
}

/// Whether the request asks not to be retried (an invalid value reads as not set; [`validate`]
/// fails such a request first).
pub fn no_retry(pr: &ProvisioningRequest) -> bool {
    param_no_retry(pr).unwrap_or(false)
}

/// Where a request's retries stand, read back after a restart (the back-off itself is the
/// leader's memory): a request whose `Provisioned=False` message says it is retrying has been
/// retried on the back-off schedule (`base_s`, doubling, at most `max_s`) since the condition's
/// transition, so its attempts so far and the next one's time (seconds) are those of that
/// schedule. `None` for a request that is not waiting on a retry.
pub fn restored_backoff(
    pr: &ProvisioningRequest,
    base_s: i64,
    max_s: i64,
    now: i64,
) -> Option<(u32, i64)> {
    let c = condition(pr, conditions::PROVISIONED)?;
    if c.status != "False" || !c.message.ends_with("retrying") {
        return None;
    }
    let mut next = c.last_transition_time.0.as_second();
    let mut attempts = 0u32;
    // One second at least, so that the walk ends; bounded like the leader's own doubling.
    while next <= now {
        let delay = base_s
            .saturating_mul(1i64 << attempts.min(16))
            .min(max_s)
            .max(1);
        next = next.saturating_add(delay);
        attempts = attempts.saturating_add(1);
    }
    Some((attempts, next))
}

/// The booking time of a request.
pub fn booking_seconds(pr: &ProvisioningRequest, s: &Settings) -> i64 {
    param_seconds(pr, PARAM_BOOKING)
        .ok()
        .flatten()
        .unwrap_or(s.booking_s)
}

/// The next step of a request. Pure; `Attempt` is answered by the shell with a plan.
pub fn step(pr: &ProvisioningRequest, facts: &Facts, settings: &Settings) -> Step {
    step_from(pr, state(pr), facts, settings)
}

/// [`step`] from a given state: the shell passes the request's [`state`] with an elided
/// booking replaced by the one it holds; a booking still elided could not be found again.
pub fn step_from(
    pr: &ProvisioningRequest,
    state: State,
    facts: &Facts,
    settings: &Settings,
) -> Step {
    if Class::of(pr).is_none() {
        return Step::Wait;
    }
    if matches!(state, State::New | State::Waiting)
        && let Err((reason, message)) = validate(pr, settings)
    {
        return Step::Fail { reason, message };
    }
    // Past its deadline (strictly, as the Cluster Autoscaler reads it), a request fails
    // whether or not it was accepted: a stale one is not accepted first.
    let expired = || {
        let deadline = param_seconds(pr, PARAM_VALID_UNTIL)
            .ok()
            .flatten()
            .unwrap_or(settings.deadline_s);
        (facts.now > facts.created.saturating_add(deadline)).then(|| Step::Fail {
            reason: reasons::EXPIRED,
            message: format!("not provisioned within {deadline} s of its creation"),
        })
    };
    match state {
        State::New => expired().unwrap_or(Step::Accept),
        State::Done => Step::Wait,
        State::Waiting => expired().unwrap_or(Step::Attempt),
        State::Launching(b) if b.elided => Step::Rollback {
            message: "the NodeClaims being launched are not known to this leader".into(),
        },
        State::Launching(b) => {
            for t in b.targets.keys() {
                match facts.targets.get(t) {
                    Some(TargetStatus::Failed(m)) => {
                        return Step::Rollback {
                            message: format!("{} failed to launch: {m}", name(t)),
                        };
                    }
                    Some(TargetStatus::Gone) | None => {
                        return Step::Rollback {
                            message: format!("{} disappeared before it launched", name(t)),
                        };
                    }
                    Some(TargetStatus::Alive { .. }) => {}
                }
            }
            if b.targets.keys().all(|t| {
                matches!(
                    facts.targets.get(t),
                    Some(TargetStatus::Alive { launched: true, .. })
                )
            }) {
                Step::Provisioned
            } else {
                Step::Wait
            }
        }
        State::Booked {
            booking,
            since,
            clock,
        } => {
            let lost = if booking.elided {
                Some("the booked capacity could not be found again by this leader".to_string())
            } else {
                booking
                    .targets
                    .keys()
                    .find(|t| !matches!(facts.targets.get(t), Some(TargetStatus::Alive { .. })))
                    .map(|t| format!("booked {}", name(t)))
            };
            if let Some(what) = lost {
                // Kueue deactivates the workload on CapacityRevoked; a booking nothing has
                // used yet is a failed attempt instead, which Kueue retries.
                return if facts.consumed == 0 {
                    Step::Lost {
                        message: format!("{what} was lost before any pod of the request started"),
                    }
                } else {
                    Step::Revoke {
                        message: format!(
                            "{what} is gone after {} pod(s) of the request started",
                            facts.consumed
                        ),
                    }
                };
            }
            let total = total_pods(pr);
            if u64::from(facts.consumed) >= total && total > 0 {
                return Step::Expire {
                    reason: reasons::CONSUMED,
                    message: format!("all {total} pods arrived and were scheduled"),
                };
            }
            let start = match clock {
                Some(t) => t,
                None if booking.targets.is_empty() && !booking.elided => since,
                None => {
                    let ready = booking.targets.keys().all(|t| {
                        matches!(
                            facts.targets.get(t),
                            Some(TargetStatus::Alive {
                                initialized: true,
                                ..
                            })
                        )
                    });
                    return if ready { Step::StartClock } else { Step::Wait };
                }
            };
            let secs = booking_seconds(pr, settings);
            if facts.now >= start.saturating_add(secs) {
                return Step::Expire {
                    reason: reasons::TIME_EXPIRED,
                    message: format!(
                        "booking of {secs} s expired with {} of {total} pods consumed",
                        facts.consumed
                    ),
                };
            }
            Step::Wait
        }
    }
}

fn name(t: &Target) -> String {
    match t {
        Target::Node(n) => format!("node {n}"),
        Target::Claim(c) => format!("NodeClaim {c}"),
    }
}

/// Pods the request asks for (negative counts read as none; [`validate`] refuses them).
pub fn total_pods(pr: &ProvisioningRequest) -> u64 {
    pr.spec
        .pod_sets
        .iter()
        .map(|s| u64::try_from(s.count).unwrap_or(0))
        .sum()
}

/// The request's group id in the planner.
pub fn group_id(pr: &ProvisioningRequest) -> String {
    format!(
        "provreq:{}/{}",
        pr.metadata.namespace.as_deref().unwrap_or("default"),
        pr.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The requests' ids seen by [`PIN_LABEL`]: a label value unique to the request.
pub fn pin_value(pr: &ProvisioningRequest) -> String {
    // A uid is 36 characters of [0-9a-f-]: always a valid label value.
    pr.metadata
        .uid
        .clone()
        .unwrap_or_else(|| group_id(pr).replace([':', '/'], "."))
}

/// Names of the requests whose consumer pods get no scale-up of their own: ours not Done
/// (their capacity is booked or coming), and every request another backend answers (its
/// class is not ours, or it names another autoscaler instance): that backend provisions for
/// its pods, as the Cluster Autoscaler leaves any consuming pod alone. A pod of one of our
/// requests that ended is provisioned for like any pod, so it is not stranded.
pub fn live(prs: &[std::sync::Arc<ProvisioningRequest>]) -> BTreeSet<String> {
    prs.iter()
        .filter(|p| Class::of(p).is_none() || state(p) != State::Done)
        .map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or("default"),
                p.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

mod planner;
#[cfg(test)]
mod tests;
