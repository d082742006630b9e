//! Execution of disruption commands as an explicit state machine per command.
//!
//! ```text
//! Decided ──validation delay, core `validate` ok──▶ (Replacing ──replacement initialized──▶)
//!    │                                                  Tainted ──evict──▶ Draining ──no pods
//!    │                                                     │                  │     left──▶ Deleting ──Nodes gone──▶ Done
//!    └─ validate failed, pod arrived, drain or replacement timed out, action kept failing,
//!       a Node back under its name after the deletion
//!                                                       ─▶ Abandoned ──untaint──▶ Done
//! ```
//!
//! [`step`] is pure: it reads a [`Job`] and the [`Facts`] the runtime gathered and returns the
//! action to perform and the stage to enter once it succeeded. The runtime owns the queue, does
//! the I/O and reports eviction refusals back through [`Job::evictions_refused`], which backs
//! the next attempt off exponentially (PodDisruptionBudgets answer 429 until pods move), and
//! failed actions through [`Job::action_failed`]. A step that gives up on nodes it had started
//! to remove says so in [`Step::failure`]: the runtime then records a failed deletion, which
//! pauses scale-down for `--scale-down-delay-after-failure`.

use autoscaler_core::disruption::{Command, DisruptionConfig, InProgress, Method, validate};
use autoscaler_core::model::{PodKey, Snapshot};
use autoscaler_core::plan::NewClaim;

/// Where a command is in its execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Decided by `plan_disruption`; waits for the validation delay.
    Decided,
    /// Waiting for the replacement claim to initialize.
    Replacing {
        /// The replacement NodeClaim's name.
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

/// One command being executed.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// What `plan_disruption` decided.
    pub command: Command,
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
}

/// The removals under way in `jobs`, for the parallelism limits: every node of a job not yet
/// done or abandoned, and of those the nodes of a job with pods to move (drained).
pub fn in_progress(jobs: &[Job]) -> InProgress {
    let mut busy = InProgress::default();
    for j in jobs {
        if matches!(j.stage, Stage::Done | Stage::Abandoned(_)) {
            continue;
        }
        busy.nodes += j.command.nodes.len();
        if !j.command.pods.is_empty() {
            busy.drains += j.command.nodes.len();
        }
    }
    busy
}

/// Failed actions in a row after which a job gives up on its nodes.
pub const MAX_FAILED_ACTIONS: u32 = 5;

/// What the runtime knows about a job's nodes right now.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// The cluster, for re-validation.
    pub snapshot: &'a Snapshot,
    /// Seconds.
    pub now: i64,
    /// Disruption settings.
    pub config: &'a DisruptionConfig,
    /// Which of the command's nodes still exist.
    pub nodes_present: Vec<String>,
    /// Of those, the ones without a deletion timestamp.
    pub nodes_not_deleting: Vec<String>,
    /// Pods on those nodes that must leave (not DaemonSet, mirror or finished pods).
    pub pods_left: Vec<PodKey>,
    /// For [`Stage::Replacing`]: whether the replacement initialized, `None` when it is gone.
    pub replacement_initialized: Option<bool>,
    /// How long a replacement may take to initialize (seconds).
    pub replacement_timeout_s: i64,
    /// How long pods may take to leave once evictions started (seconds).
    pub drain_timeout_s: i64,
}

/// The one thing to do for a job now.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Nothing yet.
    Wait,
    /// Create the replacement NodeClaim.
    CreateReplacement(Box<NewClaim>),
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
    /// Autoscaler's terms): the runtime records it, pausing scale-down for a while.
    pub failure: bool,
    /// The pods a validation just passed with: the runtime makes them the command's pods, the
    /// set a later arrival is judged against.
    pub validated_pods: Option<Vec<PodKey>>,
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
        validated_pods: None,
    }
}

fn give_up(why: String, failure: bool) -> Step {
    Step {
        action: Action::Wait,
        next: Stage::Abandoned(why),
        failure,
        validated_pods: None,
    }
}

/// Decides the next action of `job`.
pub fn step(job: &Job, facts: &Facts<'_>) -> Step {
    let cmd = &job.command;
    let drain = |next_if_empty: Stage| {
        if facts.pods_left.is_empty() {
            go(
                Action::DeleteNodes(facts.nodes_present.clone()),
                Stage::Deleting { since: facts.now },
            )
        } else if let Some(since) = job.draining_since
            && facts.now - since >= facts.drain_timeout_s
        {
            give_up(
                format!(
                    "drain timed out after {}s with {} pod(s) left (first: {})",
                    facts.now - since,
                    facts.pods_left.len(),
                    facts.pods_left[0]
                ),
                true,
            )
        } else if facts.now >= job.next_eviction_at {
            go(Action::Evict(facts.pods_left.clone()), Stage::Draining)
        } else {
            go(Action::Wait, next_if_empty)
        }
    };
    if job.failed_actions >= MAX_FAILED_ACTIONS
        && !matches!(job.stage, Stage::Abandoned(_) | Stage::Done)
    {
        // Before the taint nothing was started; after it, the nodes could not be removed.
        let started = !matches!(job.stage, Stage::Decided | Stage::Replacing { .. });
        return give_up(
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
            if facts.now < cmd.decided_at + facts.config.validation_delay_s {
                return stay(job);
            }
            if let Err(why) = validate(cmd, facts.snapshot, facts.now, facts.config) {
                return give_up(why, false);
            }
            let mut step = match (&cmd.method, &cmd.replacement) {
                (Method::Replace, Some(claim)) => go(
                    Action::CreateReplacement(Box::new(claim.clone())),
                    // The runtime fills in the claim's cluster name once created.
                    Stage::Replacing {
                        claim: String::new(),
                        since: facts.now,
                    },
                ),
                _ => go(Action::Taint(cmd.nodes.clone()), Stage::Tainted),
            };
            step.validated_pods = Some(facts.pods_left.clone());
            step
        }
        Stage::Replacing { since, .. } => match facts.replacement_initialized {
            Some(true) => {
                // The nodes kept taking pods while the replacement booted: check again, with
                // the replacement now among the places they may go.
                if let Err(why) = validate(cmd, facts.snapshot, facts.now, facts.config) {
                    return give_up(format!("after the replacement came up: {why}"), true);
                }
                let mut step = go(Action::Taint(cmd.nodes.clone()), Stage::Tainted);
                step.validated_pods = Some(facts.pods_left.clone());
                step
            }
            None if facts.now - since < REPLACEMENT_CACHE_GRACE_S => stay(job),
            None => give_up("the replacement NodeClaim is gone".into(), true),
            Some(false) if facts.now - since >= facts.replacement_timeout_s => {
                give_up("the replacement did not initialize in time".into(), true)
            }
            Some(false) => stay(job),
        },
        Stage::Tainted | Stage::Draining => {
            // The last validation placed the pods the nodes had then; one bound between it and
            // the taint (or seen only now, by the fresh read before deletion, because the pod
            // cache lagged) was never given a place, so the command no longer holds: evicting
            // it could lose a bare or do-not-disrupt pod. Once a replacement came up or
            // evictions went out, giving up leaves work half done: a failed deletion.
            if let Some(p) = facts.pods_left.iter().find(|p| !cmd.pods.contains(p)) {
                return give_up(
                    format!("pod {p} arrived after validation"),
                    cmd.method == Method::Replace || job.stage == Stage::Draining,
                );
            }
            drain(job.stage.clone())
        }
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
                give_up(
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

#[cfg(test)]
mod tests {
    use autoscaler_core::builders::{pod, pool};
    use autoscaler_core::model::{DisruptionReason, Node};
    use autoscaler_core::requirements::Labels;
    use autoscaler_core::resources::Resources;

    use super::*;

    fn key(n: &str) -> PodKey {
        PodKey {
            namespace: "default".into(),
            name: n.into(),
        }
    }

    fn empty_node(name: &str) -> Node {
        Node {
            name: name.into(),
            labels: Labels::new(),
            annotations: Labels::new(),
            taints: vec![],
            allocatable: Resources::new().with("cpu", 4000).with("pods", 10),
            pods: vec![],
            unschedulable: false,
            deleting: false,
            pool: Some("default".into()),
            instance_type: None,
            price: Some(1.0),
            created_at: 0,
            last_pod_event: None,
            initialized: true,
            ready: true,
            claim: None,
        }
    }

    fn command(method: Method) -> Command {
        Command {
            reason: DisruptionReason::Empty,
            method,
            nodes: vec!["n1".into()],
            pods: vec![],
            replacement: None,
            savings: 1.0,
            decided_at: 100,
        }
    }

    fn facts<'a>(snap: &'a Snapshot, config: &'a DisruptionConfig, now: i64) -> Facts<'a> {
        Facts {
            snapshot: snap,
            now,
            config,
            nodes_present: vec!["n1".into()],
            nodes_not_deleting: vec![],
            pods_left: vec![],
            replacement_initialized: None,
            replacement_timeout_s: 900,
            drain_timeout_s: 600,
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            nodes: vec![empty_node("n1")],
            pools: vec![pool("default", vec![]).build()],
            ..Default::default()
        }
    }

    /// Removals under way for the parallelism limits: unfinished jobs' nodes, and those of
    /// jobs with pods as drains.
    #[test]
    fn in_progress_counts_unfinished_jobs() {
        let mut empty = Job::new(command(Method::Delete));
        empty.command.nodes = vec!["a".into(), "b".into()];
        let mut drain = Job::new(command(Method::Delete));
        drain.command.pods = vec![key("p")];
        drain.stage = Stage::Draining;
        let mut done = Job::new(command(Method::Delete));
        done.stage = Stage::Done;
        let mut dropped = Job::new(command(Method::Delete));
        dropped.stage = Stage::Abandoned("why".into());
        assert_eq!(
            in_progress(&[empty, drain, done, dropped]),
            InProgress {
                nodes: 3,
                drains: 1
            }
        );
    }

    #[test]
    fn waits_for_validation_delay_then_taints() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let job = Job::new(command(Method::Delete));
        assert_eq!(step(&job, &facts(&snap, &config, 110)).next, Stage::Decided);
        let s = step(&job, &facts(&snap, &config, 115));
        assert_eq!(s.action, Action::Taint(vec!["n1".into()]));
        assert_eq!(s.next, Stage::Tainted);
        // What the validation saw becomes the command's pods.
        assert_eq!(s.validated_pods, Some(vec![]));
    }

    #[test]
    fn failed_validation_abandons_and_untaints() {
        let mut snap = snapshot();
        snap.nodes[0].pods.push(pod("p").build());
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Delete));
        let s = step(&job, &facts(&snap, &config, 200));
        assert!(matches!(s.next, Stage::Abandoned(ref why) if why.contains("no longer empty")));
        job.stage = s.next;
        let s = step(&job, &facts(&snap, &config, 201));
        assert_eq!(s.action, Action::Untaint(vec!["n1".into()]));
        assert_eq!(s.next, Stage::Done);
    }

    #[test]
    fn drains_with_backoff_then_deletes() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Delete));
        job.command.pods = vec![key("a")];
        job.stage = Stage::Tainted;
        let mut f = facts(&snap, &config, 200);
        f.pods_left = vec![key("a")];
        let s = step(&job, &f);
        assert_eq!(s.action, Action::Evict(vec![key("a")]));
        job.stage = s.next;
        job.evictions_refused(200);
        job.evictions_refused(201);
        assert_eq!(job.next_eviction_at, 203);
        f.now = 202;
        assert_eq!(step(&job, &f).action, Action::Wait);
        f.now = 203;
        assert_eq!(step(&job, &f).action, Action::Evict(vec![key("a")]));
        f.pods_left.clear();
        let s = step(&job, &f);
        assert_eq!(s.action, Action::DeleteNodes(vec!["n1".into()]));
        job.stage = s.next;
        assert_eq!(step(&job, &f).next, Stage::Deleting { since: 203 });
        f.nodes_present.clear();
        assert_eq!(step(&job, &f).next, Stage::Done);
    }

    #[test]
    fn replacement_must_initialize_first() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Replace));
        job.stage = Stage::Replacing {
            claim: "default-x".into(),
            since: 100,
        };
        let mut f = facts(&snap, &config, 200);
        f.replacement_initialized = Some(false);
        assert_eq!(step(&job, &f).action, Action::Wait);
        f.replacement_initialized = Some(true);
        let s = step(&job, &f);
        assert_eq!(s.action, Action::Taint(vec!["n1".into()]));
        assert_eq!(s.validated_pods, Some(vec![]));
        // Not in the claim cache yet just after its creation: wait, then give up.
        f.replacement_initialized = None;
        f.now = 100 + REPLACEMENT_CACHE_GRACE_S - 1;
        assert_eq!(step(&job, &f).next, job.stage);
        f.now = 100 + REPLACEMENT_CACHE_GRACE_S;
        let s = step(&job, &f);
        assert!(matches!(s.next, Stage::Abandoned(_)) && s.failure, "{s:?}");
        f.replacement_initialized = Some(false);
        f.now = 1_000;
        let s = step(&job, &f);
        assert!(matches!(s.next, Stage::Abandoned(_)));
        assert!(
            s.failure,
            "a replacement that never came is a failed scale-down"
        );
    }

    #[test]
    fn the_nodes_are_validated_again_once_the_replacement_is_up() {
        // The node took a pod while its replacement booted: validation (an empty-node
        // command) fails, the job gives up, and as a replacement exists it is a failure.
        let mut snap = snapshot();
        snap.nodes[0].pods.push(pod("late").build());
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Replace));
        job.stage = Stage::Replacing {
            claim: "default-x".into(),
            since: 100,
        };
        let mut f = facts(&snap, &config, 200);
        f.replacement_initialized = Some(true);
        let s = step(&job, &f);
        assert!(
            matches!(s.next, Stage::Abandoned(ref why) if why.contains("after the replacement came up")),
            "{s:?}"
        );
        assert!(s.failure);
    }

    #[test]
    fn a_pod_bound_between_validation_and_taint_abandons_without_failure() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Delete));
        job.command.pods = vec![key("a")];
        job.stage = Stage::Tainted;
        let mut f = facts(&snap, &config, 200);
        f.pods_left = vec![key("a"), key("late")];
        let s = step(&job, &f);
        assert!(
            matches!(s.next, Stage::Abandoned(ref why) if why.contains("default/late arrived")),
            "{s:?}"
        );
        assert!(!s.failure);
        // Only the pods validation saw: the drain goes on.
        f.pods_left = vec![key("a")];
        assert_eq!(step(&job, &f).action, Action::Evict(vec![key("a")]));
    }

    /// An empty node's command, mid-drain, learns from the fresh read before deletion that a
    /// pod the cache never showed is on the node: it gives up instead of deleting or evicting
    /// a pod nothing found a place for, and counts as a failed deletion (evictions went out).
    #[test]
    fn a_pod_found_while_draining_abandons_instead_of_being_evicted() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Delete));
        job.command.pods = vec![key("a")];
        job.stage = Stage::Draining;
        let mut f = facts(&snap, &config, 200);
        f.pods_left = vec![];
        assert_eq!(
            step(&job, &f).action,
            Action::DeleteNodes(vec!["n1".into()])
        );
        f.pods_left = vec![key("protected")];
        let s = step(&job, &f);
        assert_eq!(s.action, Action::Wait);
        assert!(
            matches!(s.next, Stage::Abandoned(ref why) if why.contains("default/protected arrived")),
            "{s:?}"
        );
        assert!(s.failure);
        // A validated pod the cache still shows after its eviction is evicted again.
        f.pods_left = vec![key("a")];
        assert_eq!(step(&job, &f).action, Action::Evict(vec![key("a")]));
    }

    #[test]
    fn a_drain_that_does_not_finish_in_time_gives_up_as_a_failure() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Delete));
        job.command.pods = vec![key("a")];
        job.stage = Stage::Draining;
        job.evictions_refused(200);
        let mut f = facts(&snap, &config, 799);
        f.pods_left = vec![key("a")];
        assert_eq!(step(&job, &f).action, Action::Evict(vec![key("a")]));
        f.now = 800;
        let s = step(&job, &f);
        assert!(
            matches!(s.next, Stage::Abandoned(ref why) if why.contains("drain timed out after 600s")),
            "{s:?}"
        );
        assert!(s.failure);
        job.stage = s.next;
        assert_eq!(step(&job, &f).action, Action::Untaint(vec!["n1".into()]));
    }

    /// A node that came back under its name after the deletion (its instance registered a
    /// new Node) would otherwise hold the command, and the node, in Deleting for good.
    #[test]
    fn a_node_back_after_its_deletion_ends_the_command() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Delete));
        job.stage = Stage::Deleting { since: 200 };
        let mut f = facts(&snap, &config, 210);
        // Within the grace the cache may simply not show the deletion yet.
        f.nodes_not_deleting = vec!["n1".into()];
        assert_eq!(step(&job, &f).next, Stage::Deleting { since: 200 });
        // Being deleted (a finalizer at work): wait however long it takes.
        f.now = 200 + DELETION_CACHE_GRACE_S + 60;
        f.nodes_not_deleting.clear();
        assert_eq!(step(&job, &f).next, Stage::Deleting { since: 200 });
        f.nodes_not_deleting = vec!["n1".into()];
        let s = step(&job, &f);
        assert!(
            matches!(s.next, Stage::Abandoned(ref why) if why.contains("node n1 is present and not being deleted 90s after")),
            "{s:?}"
        );
        assert!(
            s.failure,
            "a deletion that did not finish is a failed deletion"
        );
        job.stage = s.next;
        assert_eq!(step(&job, &f).action, Action::Untaint(vec!["n1".into()]));
    }

    #[test]
    fn actions_that_keep_failing_give_up() {
        let snap = snapshot();
        let config = DisruptionConfig::default();
        let mut job = Job::new(command(Method::Delete));
        job.stage = Stage::Deleting { since: 200 };
        for _ in 0..MAX_FAILED_ACTIONS - 1 {
            job.action_failed();
        }
        let f = facts(&snap, &config, 200);
        assert_eq!(step(&job, &f).next, Stage::Deleting { since: 200 });
        job.action_failed();
        let s = step(&job, &f);
        assert!(matches!(s.next, Stage::Abandoned(_)) && s.failure, "{s:?}");
        // Nothing was started before the taint: giving up there is no failed deletion.
        job.stage = Stage::Decided;
        let s = step(&job, &f);
        assert!(matches!(s.next, Stage::Abandoned(_)) && !s.failure, "{s:?}");
        job.action_succeeded();
        assert!(!matches!(step(&job, &f).next, Stage::Abandoned(_)));
    }
}
