//! The executor's steps, one scenario per test.

use crate::builders::{pod, pool};
use crate::disruption::{DisruptionConfig, validate_at};
use crate::model::{DisruptionReason, Node, Snapshot};
use crate::requirements::Labels;
use crate::resources::Resources;

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
        volume_limits: Default::default(),
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

fn facts(now: i64) -> Facts {
    Facts {
        now,
        validation_delay_s: DisruptionConfig::default().validation_delay_s,
        nodes_present: vec!["n1".into()],
        nodes_not_deleting: vec![],
        pods_left: vec![],
        staying: vec![],
        replacement_initialized: None,
        timeouts: Timeouts {
            replacement_s: 900,
            drain_s: 600,
        },
    }
}

/// One step with the core's validation against `snap`, as the controller runs it.
fn run(job: &Job, f: &Facts, snap: &mut Snapshot) -> Step {
    let config = DisruptionConfig::default();
    step(job, f, &mut |check| {
        validate_at(check, &job.command, snap, f.now, &config)
    })
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
    let mut snap = snapshot();
    let job = Job::new(command(Method::Delete));
    assert_eq!(run(&job, &facts(110), &mut snap).next, Stage::Decided);
    let s = run(&job, &facts(115), &mut snap);
    assert_eq!(s.action, Action::Taint(vec!["n1".into()]));
    assert_eq!(s.next, Stage::Tainted);
    // What the validation saw becomes the command's pods.
    assert_eq!(s.validated_pods, Some(vec![]));
}

#[test]
fn failed_validation_abandons_and_untaints() {
    let mut snap = snapshot();
    snap.nodes[0].pods.push(pod("p").build());
    let mut job = Job::new(command(Method::Delete));
    let s = run(&job, &facts(200), &mut snap);
    assert!(matches!(s.next, Stage::Abandoned(ref why) if why.contains("no longer empty")));
    job.stage = s.next;
    let s = run(&job, &facts(201), &mut snap);
    assert_eq!(s.action, Action::Untaint(vec!["n1".into()]));
    assert_eq!(s.next, Stage::Done);
}

#[test]
fn drains_with_backoff_then_deletes() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Delete));
    job.command.pods = vec![key("a")];
    job.stage = Stage::Tainted;
    let mut f = facts(200);
    f.pods_left = vec![key("a")];
    let s = run(&job, &f, &mut snap);
    assert_eq!(s.action, Action::Evict(vec![key("a")]));
    job.stage = s.next;
    job.evictions_refused(200);
    job.evictions_refused(201);
    assert_eq!(job.next_eviction_at, 203);
    f.now = 202;
    assert_eq!(run(&job, &f, &mut snap).action, Action::Wait);
    f.now = 203;
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::Evict(vec![key("a")])
    );
    f.pods_left.clear();
    let s = run(&job, &f, &mut snap);
    assert_eq!(s.action, Action::DeleteNodes(vec!["n1".into()]));
    job.stage = s.next;
    assert_eq!(
        run(&job, &f, &mut snap).next,
        Stage::Deleting { since: 203 }
    );
    f.nodes_present.clear();
    assert_eq!(run(&job, &f, &mut snap).next, Stage::Done);
}

#[test]
fn pods_tolerating_the_taint_go_with_the_nodes_but_still_count_as_arrivals() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Delete));
    job.command.pods = vec![key("a"), key("agent")];
    job.stage = Stage::Tainted;
    let mut f = facts(200);
    f.pods_left = vec![key("a"), key("agent")];
    f.staying = vec![key("agent")];
    let s = run(&job, &f, &mut snap);
    assert_eq!(
        s.action,
        Action::Evict(vec![key("a")]),
        "only the other pod"
    );
    job.stage = s.next;
    // Only the staying pod is left: drained.
    f.pods_left = vec![key("agent")];
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::DeleteNodes(vec!["n1".into()])
    );
    assert_eq!(wake(&job, &f), None, "nothing to wait for");
    // One that arrived after the validation stops the command all the same.
    f.pods_left = vec![key("agent"), key("late")];
    f.staying = vec![key("agent"), key("late")];
    let s = run(&job, &f, &mut snap);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("default/late arrived")),
        "{s:?}"
    );
}

#[test]
fn replacement_must_initialize_first() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Replace));
    job.stage = Stage::Replacing {
        claim: "default-x".into(),
        since: 100,
    };
    let mut f = facts(200);
    f.replacement_initialized = Some(false);
    assert_eq!(run(&job, &f, &mut snap).action, Action::Wait);
    f.replacement_initialized = Some(true);
    let s = run(&job, &f, &mut snap);
    assert_eq!(s.action, Action::Taint(vec!["n1".into()]));
    assert_eq!(s.validated_pods, Some(vec![]));
    // Not in the claim cache yet just after its creation: wait, then give up.
    f.replacement_initialized = None;
    f.now = 100 + REPLACEMENT_CACHE_GRACE_S - 1;
    assert_eq!(run(&job, &f, &mut snap).next, job.stage);
    f.now = 100 + REPLACEMENT_CACHE_GRACE_S;
    let s = run(&job, &f, &mut snap);
    assert!(matches!(s.next, Stage::Abandoned(_)) && s.failure, "{s:?}");
    f.replacement_initialized = Some(false);
    f.now = 1_000;
    let s = run(&job, &f, &mut snap);
    assert!(matches!(s.next, Stage::Abandoned(_)));
    assert!(
        s.failure && s.stuck,
        "a replacement that never came is a failed scale-down the cluster could not get past"
    );
}

#[test]
fn the_nodes_are_validated_again_once_the_replacement_is_up() {
    // The node took a pod while its replacement booted: validation (an empty-node
    // command) fails, the job gives up, and as a replacement exists it is a failure.
    let mut snap = snapshot();
    snap.nodes[0].pods.push(pod("late").build());
    let mut job = Job::new(command(Method::Replace));
    job.stage = Stage::Replacing {
        claim: "default-x".into(),
        since: 100,
    };
    let mut f = facts(200);
    f.replacement_initialized = Some(true);
    let s = run(&job, &f, &mut snap);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("after the replacement came up")),
        "{s:?}"
    );
    // Outgrown, not stuck: the replacement did come up.
    assert!(s.failure && !s.stuck);
}

#[test]
fn a_pod_bound_between_validation_and_taint_abandons_without_failure() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Delete));
    job.command.pods = vec![key("a")];
    job.stage = Stage::Tainted;
    let mut f = facts(200);
    f.pods_left = vec![key("a"), key("late")];
    let s = run(&job, &f, &mut snap);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("default/late arrived")),
        "{s:?}"
    );
    assert!(!s.failure);
    // Only the pods validation saw: the drain goes on.
    f.pods_left = vec![key("a")];
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::Evict(vec![key("a")])
    );
}

/// An empty node's command, mid-drain, learns from the fresh read before deletion that a
/// pod the cache never showed is on the node: it gives up instead of deleting or evicting
/// a pod nothing found a place for, and counts as a failed deletion (evictions went out).
#[test]
fn a_pod_found_while_draining_abandons_instead_of_being_evicted() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Delete));
    job.command.pods = vec![key("a")];
    job.stage = Stage::Draining;
    let mut f = facts(200);
    f.pods_left = vec![];
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::DeleteNodes(vec!["n1".into()])
    );
    f.pods_left = vec![key("protected")];
    let s = run(&job, &f, &mut snap);
    assert_eq!(s.action, Action::Wait);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("default/protected arrived")),
        "{s:?}"
    );
    assert!(s.failure && !s.stuck);
    // A validated pod the cache still shows after its eviction is evicted again.
    f.pods_left = vec![key("a")];
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::Evict(vec![key("a")])
    );
}

#[test]
fn a_drain_that_does_not_finish_in_time_gives_up_as_a_failure() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Delete));
    job.command.pods = vec![key("a")];
    job.stage = Stage::Draining;
    job.evictions_refused(200);
    let mut f = facts(799);
    f.pods_left = vec![key("a")];
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::Evict(vec![key("a")])
    );
    f.now = 800;
    let s = run(&job, &f, &mut snap);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("drain timed out after 600s")),
        "{s:?}"
    );
    assert!(s.failure && s.stuck);
    job.stage = s.next;
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::Untaint(vec!["n1".into()])
    );
}

/// A node that came back under its name after the deletion (its instance registered a new
/// Node) would otherwise hold the command, and the node, in Deleting for good.
#[test]
fn a_node_back_after_its_deletion_ends_the_command() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Delete));
    job.stage = Stage::Deleting { since: 200 };
    let mut f = facts(210);
    // Within the grace the cache may simply not show the deletion yet.
    f.nodes_not_deleting = vec!["n1".into()];
    assert_eq!(
        run(&job, &f, &mut snap).next,
        Stage::Deleting { since: 200 }
    );
    // Being deleted (a finalizer at work): wait however long it takes.
    f.now = 200 + DELETION_CACHE_GRACE_S + 60;
    f.nodes_not_deleting.clear();
    assert_eq!(
        run(&job, &f, &mut snap).next,
        Stage::Deleting { since: 200 }
    );
    f.nodes_not_deleting = vec!["n1".into()];
    let s = run(&job, &f, &mut snap);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("node n1 is present and not being deleted 90s after")),
        "{s:?}"
    );
    assert!(
        s.failure,
        "a deletion that did not finish is a failed deletion"
    );
    job.stage = s.next;
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::Untaint(vec!["n1".into()])
    );
}

#[test]
fn actions_that_keep_failing_give_up() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Delete));
    job.stage = Stage::Deleting { since: 200 };
    for _ in 0..MAX_FAILED_ACTIONS - 1 {
        job.action_failed();
    }
    let f = facts(200);
    assert_eq!(
        run(&job, &f, &mut snap).next,
        Stage::Deleting { since: 200 }
    );
    job.action_failed();
    let s = run(&job, &f, &mut snap);
    assert!(matches!(s.next, Stage::Abandoned(_)) && s.failure, "{s:?}");
    // Nothing was started before the taint: giving up there is no failed deletion.
    job.stage = Stage::Decided;
    let s = run(&job, &f, &mut snap);
    assert!(matches!(s.next, Stage::Abandoned(_)) && !s.failure, "{s:?}");
    job.action_succeeded();
    assert!(!matches!(
        run(&job, &f, &mut snap).next,
        Stage::Abandoned(_)
    ));
}

/// The time at which only the clock can change the answer, for event-driven callers.
#[test]
fn wake_names_the_next_deadline() {
    let mut job = Job::new(command(Method::Delete));
    let mut f = facts(100);
    assert_eq!(wake(&job, &f), Some(115), "the end of the validation delay");
    f.now = 115;
    assert_eq!(wake(&job, &f), None, "due now: step, do not wait");
    job.stage = Stage::Replacing {
        claim: String::new(),
        since: 100,
    };
    f.now = 110;
    assert_eq!(wake(&job, &f), Some(130), "the replacement's grace");
    f.replacement_initialized = Some(false);
    assert_eq!(wake(&job, &f), Some(1000), "the replacement timeout");
    job.stage = Stage::Draining;
    job.evictions_refused(110);
    job.evictions_refused(111);
    f.now = 112;
    f.pods_left = vec![key("a")];
    assert_eq!(wake(&job, &f), Some(113), "the eviction backoff");
    f.pods_left.clear();
    assert_eq!(wake(&job, &f), None, "nothing left to wait for");
}

/// A command whose nodes already belong to a queued job waits for the next plan.
#[test]
fn admit_keeps_one_command_per_node() {
    let queued = vec![Job::new(command(Method::Delete))];
    let mut other = command(Method::Delete);
    assert!(!admit(&queued, &other));
    other.nodes = vec!["n2".into()];
    assert!(admit(&queued, &other));
    assert!(admit(&[], &command(Method::Delete)));
}

/// A caller that describes its replacement itself (the simulator's models of other
/// autoscalers) sets `replaces`: the replacement comes first, then the taint.
#[test]
fn a_replacement_described_by_the_caller_comes_first() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Replace));
    assert_eq!(
        job.order,
        Order::NoReplacement,
        "a Replace command without a claim replaces nothing"
    );
    job.order = Order::ReplaceFirst;
    let s = run(&job, &facts(200), &mut snap);
    assert_eq!(s.action, Action::CreateReplacement);
    assert!(matches!(s.next, Stage::Replacing { since: 200, .. }));
    job.advance(s);
    let mut f = facts(250);
    f.replacement_initialized = Some(true);
    let s = run(&job, &f, &mut snap);
    assert_eq!(s.action, Action::Taint(vec!["n1".into()]));
}

/// Karpenter's order: taint right after the validation, then the replacement; once it
/// initialized the nodes drain without a second validation (a pod that would fail it no
/// longer matters: the taint kept new pods away), and a pod that came anyway gives up.
#[test]
fn karpenters_order_taints_first_and_drains_once_the_replacement_is_up() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Replace));
    job.order = Order::TaintFirst;
    let s = run(&job, &facts(200), &mut snap);
    assert_eq!(s.action, Action::Taint(vec!["n1".into()]));
    assert_eq!(s.next, Stage::Tainted);
    job.advance(s);
    assert!(job.tainted());
    let s = run(&job, &facts(200), &mut snap);
    assert_eq!(s.action, Action::CreateReplacement);
    assert!(matches!(s.next, Stage::Replacing { since: 200, .. }));
    job.advance(s);
    assert!(job.tainted(), "still tainted while the replacement boots");
    let mut f = facts(250);
    f.replacement_initialized = Some(false);
    assert_eq!(run(&job, &f, &mut snap).action, Action::Wait);
    assert_eq!(wake(&job, &f), Some(1100), "the replacement timeout");
    // The validation would now fail (the node holds a pod); it is not asked again.
    snap.nodes[0].pods.push(pod("a").build());
    job.command.pods = vec![key("a")];
    f.replacement_initialized = Some(true);
    f.pods_left = vec![key("a")];
    let s = run(&job, &f, &mut snap);
    assert_eq!(s.action, Action::Evict(vec![key("a")]));
    assert_eq!(s.next, Stage::Draining);
    f.pods_left = vec![];
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::DeleteNodes(vec!["n1".into()])
    );
    f.pods_left = vec![key("a"), key("tolerating")];
    let s = run(&job, &f, &mut snap);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("default/tolerating arrived")),
        "{s:?}"
    );
    assert!(s.failure, "the replacement is up: a failed deletion");
}

/// In Karpenter's order a replacement that never initializes untaints the nodes, as a failed
/// deletion the users are warned of.
#[test]
fn karpenters_order_untaints_when_the_replacement_fails() {
    let mut snap = snapshot();
    let mut job = Job::new(command(Method::Replace));
    job.order = Order::TaintFirst;
    job.stage = Stage::Replacing {
        claim: String::new(),
        since: 100,
    };
    let mut f = facts(100 + REPLACEMENT_CACHE_GRACE_S);
    let s = run(&job, &f, &mut snap);
    assert!(
        matches!(s.next, Stage::Abandoned(ref why) if why.contains("NodeClaim is gone")),
        "{s:?}"
    );
    assert_eq!(s.notice(&job), Some(Notice::GivenUp));
    f.replacement_initialized = Some(false);
    f.now = 1_000;
    let s = run(&job, &f, &mut snap);
    assert!(s.failure && s.why().contains("did not initialize"), "{s:?}");
    job.advance(s);
    assert_eq!(
        run(&job, &f, &mut snap).action,
        Action::Untaint(vec!["n1".into()])
    );
}

/// Which event a step that stops a job owes its nodes: a warning for a failed deletion, a
/// notice for an abandonment users saw the taint of, nothing before the taint.
#[test]
fn notices_follow_what_users_saw() {
    let mut snap = snapshot();
    snap.nodes[0].pods.push(pod("p").build());
    let job = Job::new(command(Method::Delete));
    let s = run(&job, &facts(200), &mut snap);
    assert!(matches!(s.next, Stage::Abandoned(_)) && !s.failure);
    assert_eq!(s.notice(&job), None, "validation failed before the taint");
    let mut tainted = job.clone();
    tainted.stage = Stage::Tainted;
    let mut f = facts(200);
    f.pods_left = vec![key("late")];
    let s = run(&tainted, &f, &mut snap);
    assert_eq!(s.notice(&tainted), Some(Notice::Abandoned));
    assert_eq!(
        (Notice::Abandoned.reason(), Notice::Abandoned.warning()),
        ("DisruptionAbandoned", false)
    );
    assert_eq!(
        Notice::Abandoned.message(s.why()),
        "disruption abandoned, node untainted: pod default/late arrived after validation"
    );
    let mut draining = tainted.clone();
    draining.stage = Stage::Draining;
    let s = run(&draining, &f, &mut snap);
    assert_eq!(s.notice(&draining), Some(Notice::GivenUp));
    assert_eq!(
        (Notice::GivenUp.reason(), Notice::GivenUp.warning()),
        ("DrainFailed", true)
    );
    // Replacing before the taint (the controller's order): nothing users saw.
    let mut replacing = Job::new(command(Method::Replace));
    replacing.order = Order::ReplaceFirst;
    replacing.stage = Stage::Replacing {
        claim: "c".into(),
        since: 0,
    };
    assert!(!replacing.tainted());
    let s = give_up("x".into(), false);
    assert_eq!(s.notice(&replacing), None);
    assert_eq!(s.why(), "x");
}

/// The timeouts' defaults are the flags' default texts, parsed by the one duration grammar.
#[test]
fn timeout_defaults_are_the_flag_texts() {
    assert_eq!(
        Timeouts::default(),
        Timeouts {
            replacement_s: 900,
            drain_s: 600
        }
    );
}
