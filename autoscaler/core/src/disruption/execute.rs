//! The disruption command queue: how one decided [`Command`] is carried out, as an explicit
//! state machine that the controller and the simulator both drive.
//!
//! ```text
//! Decided ──validation delay, validation ok──▶ (Replacing ──replacement initialized, valid again──▶)
//!    │                                                  Tainted ──evict──▶ Draining ──no pods
//!    │                                                     │                  │     left──▶ Deleting ──Nodes gone──▶ Done
//!    └─ validation failed, pod arrived, drain or replacement timed out, action kept failing,
//!       a Node back under its name after the deletion
//!                                                       ─▶ Abandoned ──untaint──▶ Done
//! ```
//!
//! The replacement comes before the taint in this controller's [`Order::ReplaceFirst`] (drawn
//! above); Karpenter's documented flow, [`Order::TaintFirst`], taints first and drains once the
//! replacement initialized (`Tainted ─▶ Replacing ─▶ Draining`), which the simulator's model of
//! Karpenter uses.
//!
//! [`step`] is pure: it reads a [`Job`], the [`Facts`] the caller gathered (`now` among them)
//! and a validation to run when the command must be re-checked, and returns the [`Action`] to
//! perform and the [`Stage`] to enter once it succeeded. The caller owns the queue ([`admit`],
//! [`in_progress`]), performs the actions (the controller through the API server, the simulator
//! on its simulated cluster) and reports back: eviction refusals through
//! [`Job::evictions_refused`], which backs the next attempt off exponentially
//! (PodDisruptionBudgets answer 429 until pods move), and failed actions through
//! [`Job::action_failed`]. A step that gives up on nodes it had started to remove says so in
//! [`Step::failure`]: the caller then records a failed deletion, which pauses scale-down for
//! `--scale-down-delay-after-failure`. [`wake`] says when time alone can change the next step,
//! so an event-driven caller knows when to call again.

use super::{Check, Command, InProgress, Method};
use crate::duration::default_seconds;
use crate::model::PodKey;

/// Where a command is in its execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Decided by `plan_disruption`; waits for the validation delay.
    Decided,
    /// Waiting for the replacement claim to initialize.
    Replacing {
        /// The replacement NodeClaim's name (empty when the caller has none to name).
        claim: String,
        /// When it was created (seconds).
        since: i64,
    },
    /// The nodes carry the disruption taint; no eviction sent yet.
    Tainted,
    /// Evictions sent; waiting for the pods to leave.
    Draining,
    /// The Nodes were deleted; waiting for them (and their instances) to go.
    Deleting {
        /// When the deletion was sent (seconds).
        since: i64,
    },
    /// Dropped, with the reason; the nodes are untainted next.
    Abandoned(String),
    /// Finished.
    Done,
}

impl Stage {
    /// Lower-case name for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Stage::Decided => "decided",
            Stage::Replacing { .. } => "replacing",
            Stage::Tainted => "tainted",
            Stage::Draining => "draining",
            Stage::Deleting { .. } => "deleting",
            Stage::Abandoned(_) => "abandoned",
            Stage::Done => "done",
        }
    }
}

/// How long the steps that wait on the cluster may take, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// How long a replacement may take to initialize (`--replacement-timeout`).
    pub replacement_s: i64,
    /// How long pods may take to leave once evictions started (`--drain-timeout`).
    pub drain_s: i64,
}

/// `--replacement-timeout`'s default, in the duration grammar.
pub const DEFAULT_REPLACEMENT_TIMEOUT: &str = "15m";
/// `--drain-timeout`'s default, in the duration grammar.
pub const DEFAULT_DRAIN_TIMEOUT: &str = "10m";

impl Default for Timeouts {
    /// The flags' defaults: both read from the constants the flags use, so they cannot differ.
    fn default() -> Self {
        Timeouts {
            replacement_s: default_seconds(DEFAULT_REPLACEMENT_TIMEOUT),
            drain_s: default_seconds(DEFAULT_DRAIN_TIMEOUT),
        }
    }
}

/// Whether a job launches a replacement, and whether before or after the taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// No replacement: validate, taint, drain, delete. Cluster Autoscaler's scale-down
    /// (`ToBeDeletedByClusterAutoscaler`, drain, delete) has this shape too.
    NoReplacement,
    /// This controller's: the replacement is launched while the nodes still take pods, the
    /// command is validated again once it initialized (the nodes may have taken pods
    /// meanwhile), and only then are the nodes tainted, drained and deleted.
    ReplaceFirst,
    /// Karpenter's documented flow: the nodes are tainted right after the validation, the
    /// replacement launched, and once it initialized they are drained and deleted without a
    /// second validation (the taint kept new pods away). A replacement that fails untaints.
    TaintFirst,
}

/// One command being executed.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// What `plan_disruption` decided.
    pub command: Command,
    /// Whether a replacement is launched, and when: [`Order::ReplaceFirst`] for
    /// [`Method::Replace`] with a replacement claim, as [`Job::new`] reads it off the command,
    /// [`Order::NoReplacement`] otherwise. A caller that describes the replacement elsewhere
    /// (the simulator's models of other autoscalers) sets it itself.
    pub order: Order,
    /// Where it is.
    pub stage: Stage,
    /// Earliest time of the next eviction round (seconds).
    pub next_eviction_at: i64,
    /// Current eviction backoff (seconds), doubled on every refusal up to a minute.
    pub backoff_s: i64,
    /// When the first eviction round was sent (seconds).
    pub draining_since: Option<i64>,
    /// Actions that failed in a row (API errors); reset by one that succeeds.
    pub failed_actions: u32,
}

impl Job {
    /// A freshly decided job.
    pub fn new(command: Command) -> Self {
        Job {
            order: if command.method == Method::Replace && command.replacement.is_some() {
                Order::ReplaceFirst
            } else {
                Order::NoReplacement
            },
            command,
            stage: Stage::Decided,
            next_eviction_at: 0,
            backoff_s: 1,
            draining_since: None,
            failed_actions: 0,
        }
    }

    /// Records that some evictions were refused (429) at `now`: retry later, backing off.
    pub fn evictions_refused(&mut self, now: i64) {
        self.draining_since.get_or_insert(now);
        self.next_eviction_at = now + self.backoff_s;
        self.backoff_s = (self.backoff_s * 2).min(60);
    }

    /// Records a round in which every eviction was accepted.
    pub fn evictions_accepted(&mut self, now: i64) {
        self.draining_since.get_or_insert(now);
        self.next_eviction_at = now + 1;
        self.backoff_s = 1;
    }

    /// Records an action that failed (the job stays where it is and tries again).
    pub fn action_failed(&mut self) {
        self.failed_actions += 1;
    }

    /// Records an action that succeeded.
    pub fn action_succeeded(&mut self) {
        self.failed_actions = 0;
    }

    /// Applies a step whose action succeeded: the pods validation passed with become the
    /// command's, the stage moves on.
    pub fn advance(&mut self, step: Step) {
        self.action_succeeded();
        if let Some(pods) = step.validated_pods {
            self.command.pods = pods;
        }
        self.stage = step.next;
    }

    /// Whether the job still holds its nodes (neither finished nor given up).
    pub fn active(&self) -> bool {
        !matches!(self.stage, Stage::Done | Stage::Abandoned(_))
    }

    /// Whether the nodes carry the disruption taint in the job's current stage (before an
    /// abandonment: whether users saw it).
    pub fn tainted(&self) -> bool {
        match self.stage {
            Stage::Tainted | Stage::Draining | Stage::Deleting { .. } => true,
            Stage::Replacing { .. } => self.order == Order::TaintFirst,
            Stage::Decided | Stage::Abandoned(_) | Stage::Done => false,
        }
    }
}

/// The removals under way in `jobs`, for the parallelism limits: every node of a job not yet
/// done or abandoned, and of those the nodes of a job with pods to move (drained).
pub fn in_progress(jobs: &[Job]) -> InProgress {
    let mut busy = InProgress::default();
    for j in jobs.iter().filter(|j| j.active()) {
        busy.nodes += j.command.nodes.len();
        if !j.command.pods.is_empty() {
            busy.drains += j.command.nodes.len();
        }
    }
    busy
}

/// Whether a newly decided command may join the queue: none of its nodes belongs to a job
/// already queued (a node is removed by one command at a time).
pub fn admit(jobs: &[Job], command: &Command) -> bool {
    !jobs
        .iter()
        .any(|j| command.nodes.iter().any(|n| j.command.nodes.contains(n)))
}

/// Failed actions in a row after which a job gives up on its nodes.
pub const MAX_FAILED_ACTIONS: u32 = 5;

/// What the caller knows about a job's nodes right now.
#[derive(Clone, Debug)]
pub struct Facts {
    /// Seconds.
    pub now: i64,
    /// How long after its decision a command is validated again
    /// ([`super::DisruptionConfig::validation_delay_s`]).
    pub validation_delay_s: i64,
    /// Which of the command's nodes still exist.
    pub nodes_present: Vec<String>,
    /// Of those, the ones without a deletion timestamp.
    pub nodes_not_deleting: Vec<String>,
    /// Pods on those nodes that move with them (not DaemonSet, mirror, finished or
    /// terminating pods): each must have been placed by the last validation.
    pub pods_left: Vec<PodKey>,
    /// Of `pods_left`, those that go with the nodes: they tolerate the disruption taint, so
    /// they are neither evicted nor waited for (Karpenter's `IsDrainable`; evicted, one could
    /// be scheduled straight back). They still stop the command if they arrived after it was
    /// validated.
    pub staying: Vec<PodKey>,
    /// For [`Stage::Replacing`]: whether the replacement initialized, `None` when it is gone.
    pub replacement_initialized: Option<bool>,
    /// How long replacements and drains may take.
    pub timeouts: Timeouts,
}

impl Facts {
    /// The pods to evict and wait for: `pods_left` but those `staying`.
    pub fn to_move(&self) -> Vec<PodKey> {
        self.pods_left
            .iter()
            .filter(|p| !self.staying.contains(p))
            .cloned()
            .collect()
    }
}

/// The one thing to do for a job now.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Nothing yet.
    Wait,
    /// Create the replacement ([`Command::replacement`], or the caller's own description of
    /// it); the caller names it in [`Stage::Replacing`] once created.
    CreateReplacement,
    /// Put the disruption taint on the nodes (and record the event).
    Taint(Vec<String>),
    /// Evict the pods through the Eviction API.
    Evict(Vec<PodKey>),
    /// Delete the Node objects (their finalizer terminates the instances).
    DeleteNodes(Vec<String>),
    /// Remove the disruption taint from the nodes that are left.
    Untaint(Vec<String>),
}

/// The next action and the stage to enter once it has been performed.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// What to do.
    pub action: Action,
    /// Where the job is after doing it.
    pub next: Stage,
    /// The job gives up on nodes it had started to remove (a failed deletion, in Cluster
    /// Autoscaler's terms): the caller records it, pausing scale-down for a while.
    pub failure: bool,
    /// Of a failure: the cluster could not carry the command out (a replacement that never
    /// came up or vanished, a drain that timed out, actions failing again and again, a
    /// deletion that did not take), as against a command the cluster outgrew (a pod arrived,
    /// the command no longer held once its replacement was up). Only these, in a row, lengthen
    /// the pause ([`super::DisruptionState::failed`]).
    pub stuck: bool,
    /// The pods a validation just passed with: they become the command's pods, the set a
    /// later arrival is judged against ([`Job::advance`]).
    pub validated_pods: Option<Vec<PodKey>>,
}

/// What users are told, as an event on each of the command's nodes, when a step ends a job's
/// hold on them ([`Step::notice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A failed deletion ([`Step::failure`]): a warning.
    GivenUp,
    /// A plain abandonment once the nodes were tainted, which users saw: why the taint goes
    /// away again.
    Abandoned,
}

impl Notice {
    /// Whether the event is a warning.
    pub fn warning(self) -> bool {
        self == Notice::GivenUp
    }

    /// The event's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Notice::GivenUp => "DrainFailed",
            Notice::Abandoned => "DisruptionAbandoned",
        }
    }

    /// The event's message, ending with why the job stopped.
    pub fn message(self, why: &str) -> String {
        let what = match self {
            Notice::GivenUp => "disruption given up",
            Notice::Abandoned => "disruption abandoned",
        };
        format!("{what}, node untainted: {why}")
    }
}

impl Step {
    /// The event this step, taken from `job`'s current stage, owes the nodes: a failed
    /// deletion always, a plain abandonment only once they were tainted (an abandonment
    /// before the taint changed nothing users could see).
    pub fn notice(&self, job: &Job) -> Option<Notice> {
        if self.failure {
            Some(Notice::GivenUp)
        } else if matches!(self.next, Stage::Abandoned(_)) && job.tainted() {
            Some(Notice::Abandoned)
        } else {
            None
        }
    }

    /// Why the job stops: the abandonment's reason, or the stage it goes to.
    pub fn why(&self) -> &str {
        match &self.next {
            Stage::Abandoned(why) => why,
            other => other.as_str(),
        }
    }
}

/// How long after its deletion a command's Node may still show without a deletion timestamp
/// (the watch has not delivered the deletion yet) before the command counts it as not deleted.
pub const DELETION_CACHE_GRACE_S: i64 = 30;

/// How long a freshly created replacement may be missing from the claim cache (the watch has
/// not delivered it yet) before it counts as gone.
pub const REPLACEMENT_CACHE_GRACE_S: i64 = 30;

fn stay(job: &Job) -> Step {
    go(Action::Wait, job.stage.clone())
}

fn go(action: Action, next: Stage) -> Step {
    Step {
        action,
        next,
        failure: false,
        stuck: false,
        validated_pods: None,
    }
}

/// Launch the replacement; the caller fills in the claim's name once created.
fn create_replacement(now: i64) -> Step {
    go(
        Action::CreateReplacement,
        Stage::Replacing {
            claim: String::new(),
            since: now,
        },
    )
}

fn give_up(why: String, failure: bool) -> Step {
    Step {
        action: Action::Wait,
        next: Stage::Abandoned(why),
        failure,
        stuck: false,
        validated_pods: None,
    }
}

/// [`give_up`] as a failure the cluster could not get past ([`Step::stuck`]), when `failure`.
fn give_up_stuck(why: String, failure: bool) -> Step {
    Step {
        stuck: failure,
        ..give_up(why, failure)
    }
}

/// Decides the next action of `job`. `validate` re-checks the command against the cluster as
/// it is now (the core's [`super::validate_at`] for the core's commands); it is called only
/// when the command must be re-checked: once the validation delay is over
/// ([`Check::Decided`]), and again once a replacement launched first initialized
/// ([`Check::ReplacementUp`]).
pub fn step(
    job: &Job,
    facts: &Facts,
    validate: &mut dyn FnMut(Check) -> Result<(), String>,
) -> Step {
    let cmd = &job.command;
    let to_move = facts.to_move();
    let drain = |next_if_empty: Stage| {
        if to_move.is_empty() {
            go(
                Action::DeleteNodes(facts.nodes_present.clone()),
                Stage::Deleting { since: facts.now },
            )
        } else if let Some(since) = job.draining_since
            && facts.now - since >= facts.timeouts.drain_s
        {
            give_up_stuck(
                format!(
                    "drain timed out after {}s with {} pod(s) left (first: {})",
                    facts.now - since,
                    to_move.len(),
                    to_move[0]
                ),
                true,
            )
        } else if facts.now >= job.next_eviction_at {
            go(Action::Evict(to_move.clone()), Stage::Draining)
        } else {
            go(Action::Wait, next_if_empty)
        }
    };
    // The last validation placed the pods the nodes had then; one bound between it and the
    // taint (or seen only now, by the caller's fresh read before deletion, because its pod
    // cache lagged) was never given a place, so the command no longer holds: evicting it could
    // lose a bare or do-not-disrupt pod. Once a replacement came up or evictions went out,
    // giving up leaves work half done: a failed deletion.
    let drain_validated = |next_if_empty: Stage| {
        if let Some(p) = facts.pods_left.iter().find(|p| !cmd.pods.contains(p)) {
            return give_up(
                format!("pod {p} arrived after validation"),
                job.order != Order::NoReplacement || job.stage == Stage::Draining,
            );
        }
        drain(next_if_empty)
    };
    if job.failed_actions >= MAX_FAILED_ACTIONS && job.active() {
        // Before the taint nothing was started; after it, the nodes could not be removed.
        let started = job.tainted();
        return give_up_stuck(
            format!(
                "{} failed {} times in a row",
                job.stage.as_str(),
                job.failed_actions
            ),
            started,
        );
    }
    match &job.stage {
        Stage::Decided => {
            if facts.now < cmd.decided_at + facts.validation_delay_s {
                return stay(job);
            }
            if let Err(why) = validate(Check::Decided) {
                return give_up(why, false);
            }
            let mut step = if job.order == Order::ReplaceFirst {
                create_replacement(facts.now)
            } else {
                go(Action::Taint(cmd.nodes.clone()), Stage::Tainted)
            };
            step.validated_pods = Some(facts.pods_left.clone());
            step
        }
        Stage::Replacing { .. }
            if job.order == Order::TaintFirst && facts.replacement_initialized == Some(true) =>
        {
            // Tainted since the validation: only pods that tolerate the taint can have come.
            drain_validated(job.stage.clone())
        }
        Stage::Replacing { since, .. } => match facts.replacement_initialized {
            Some(true) => {
                // The nodes kept taking pods while the replacement booted: check again, with
                // the replacement now among the places they may go.
                if let Err(why) = validate(Check::ReplacementUp) {
                    return give_up(format!("after the replacement came up: {why}"), true);
                }
                let mut step = go(Action::Taint(cmd.nodes.clone()), Stage::Tainted);
                step.validated_pods = Some(facts.pods_left.clone());
                step
            }
            None if facts.now - since < REPLACEMENT_CACHE_GRACE_S => stay(job),
            None => give_up_stuck("the replacement NodeClaim is gone".into(), true),
            Some(false) if facts.now - since >= facts.timeouts.replacement_s => {
                give_up_stuck("the replacement did not initialize in time".into(), true)
            }
            Some(false) => stay(job),
        },
        Stage::Tainted if job.order == Order::TaintFirst => create_replacement(facts.now),
        Stage::Tainted | Stage::Draining => drain_validated(job.stage.clone()),
        Stage::Deleting { since } => {
            if facts.nodes_present.is_empty() {
                go(Action::Wait, Stage::Done)
            } else if let Some(n) = facts.nodes_not_deleting.first()
                && facts.now - since >= DELETION_CACHE_GRACE_S
            {
                // A Node by that name exists and nobody is deleting it: a new object under
                // the same name (its instance registered again) or a deletion that did not
                // take. Waiting would hold the node out of every later command for good;
                // the command no longer describes the cluster, so it ends and a new one may
                // be decided on what is there now.
                give_up_stuck(
                    format!(
                        "node {n} is present and not being deleted {}s after its deletion",
                        facts.now - since
                    ),
                    true,
                )
            } else {
                stay(job)
            }
        }
        Stage::Abandoned(_) => go(Action::Untaint(facts.nodes_present.clone()), Stage::Done),
        Stage::Done => stay(job),
    }
}

/// The earliest time after `facts.now` at which time alone (the facts otherwise unchanged)
/// can change what [`step`] answers: the end of the validation delay, of the replacement's
/// grace or timeout, of the eviction backoff or of the drain timeout. `None` when only a
/// change in the facts can (a replacement initializing, pods leaving, nodes going).
pub fn wake(job: &Job, facts: &Facts) -> Option<i64> {
    let after = |t: i64| (t > facts.now).then_some(t);
    let drain = || {
        let timeout = job.draining_since.map(|s| s + facts.timeouts.drain_s);
        [after(job.next_eviction_at), timeout.and_then(after)]
            .into_iter()
            .flatten()
            .min()
    };
    match &job.stage {
        Stage::Decided => after(job.command.decided_at + facts.validation_delay_s),
        Stage::Replacing { since, .. } => match facts.replacement_initialized {
            None => after(since + REPLACEMENT_CACHE_GRACE_S),
            Some(false) => after(since + facts.timeouts.replacement_s),
            // Karpenter's order drains from here.
            Some(true) if job.order == Order::TaintFirst && !facts.to_move().is_empty() => drain(),
            Some(true) => None,
        },
        Stage::Tainted if job.order == Order::TaintFirst => None,
        Stage::Tainted | Stage::Draining if !facts.to_move().is_empty() => drain(),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
