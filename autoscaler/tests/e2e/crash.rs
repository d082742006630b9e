//! Test 3: the controller is SIGKILLed between NodeClaim creation and launch, and between
//! launch and registration; after a restart there is no duplicate node and no leaked instance.
//! A restart does not start a consolidation early either.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodepools::{NodeClaim, NodePool};

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(40);

/// After the restart: the pod is bound, and exactly the one claim, instance and node exist,
/// also after garbage collection had time to run.
async fn converges_to_one(c: &Cluster, claim: &str, ctl: &Controller) {
    eventually(
        "the pod to be bound after the restart",
        DEADLINE,
        || async { bound_to(&c.pod("default", "train").await?) },
    )
    .await;
    // Four more garbage-collection passes (--gc-interval=2s apart, so the last begins at least
    // 6 s after the first): the later ones run past the grace period (--gc-grace=4s) of any
    // instance launched around the restart.
    ctl.more_loops("gc", 4).await;
    let claims = c.claims().await;
    let instances = c.instances().await;
    let nodes = c.nodes().await;
    assert_eq!(
        claims.iter().map(|x| x.name_any()).collect::<Vec<_>>(),
        vec![claim.to_string()],
        "the claim written before the crash is the only one"
    );
    assert_eq!(
        instances.iter().map(|x| x.name_any()).collect::<Vec<_>>(),
        vec![claim.to_string()],
        "one instance, the claim's (launch is idempotent on the claim name)"
    );
    assert_eq!(nodes.len(), 1, "no duplicate node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3a_sigkill_between_claim_creation_and_launch() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    // A slow cloud API keeps the launch call in flight long enough to kill the controller.
    let mut first = c.controller(
        "first",
        &["--leader-elect=false", "--kwok-launch-latency=5s"],
    );
    let _: Pod = c.create(gpu_pod("train")).await;
    let claim = eventually("a NodeClaim to be written", DEADLINE, || async {
        c.claims().await.first().map(|x| x.name_any())
    })
    .await;
    first.kill9();
    assert!(
        c.instances().await.is_empty(),
        "killed before the instance existed"
    );
    let claims = c.claims().await;
    assert!(
        claims[0]
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none(),
        "the claim was not launched yet"
    );
    let second = c.controller("second", &["--leader-elect=false"]);
    converges_to_one(&c, &claim, &second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3b_sigkill_between_launch_and_registration() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    // A slow boot keeps the instance unregistered long enough to kill the controller.
    let mut first = c.controller(
        "first",
        &["--leader-elect=false", "--kwok-register-delay=6s"],
    );
    let _: Pod = c.create(gpu_pod("train")).await;
    let claim = eventually("the NodeClaim to be launched", DEADLINE, || async {
        let cl = c.claims().await.into_iter().next()?;
        cl.status.as_ref()?.provider_id.as_ref()?;
        Some(cl.name_any())
    })
    .await;
    first.kill9();
    assert_eq!(c.instances().await.len(), 1, "the instance exists");
    assert!(
        c.nodes().await.is_empty(),
        "killed before the node registered"
    );
    let second = c.controller("second", &["--leader-elect=false"]);
    converges_to_one(&c, &claim, &second).await;
}

/// Restart continuity: a node's last pod event outlives the controller. The pod on a node
/// older than `consolidateAfter` completes, the controller records the event on the claim and
/// is killed; its successor must not consolidate the node before `consolidateAfter` has passed
/// since the event (a successor that forgot it would count from the node's creation, already
/// far enough back, and delete the node at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3c_restart_keeps_consolidate_after_from_the_last_pod_event() {
    const AFTER: f64 = 12.0;
    let c = Cluster::start().await;
    let mut pool = gpu_pool("gpu", "0s");
    pool["spec"]["disruption"]["consolidateAfter"] = serde_json::json!(format!("{AFTER}s"));
    let _: NodePool = c.create(pool).await;
    let mut first = c.controller("first", &["--leader-elect=false"]);
    let _: Pod = c.create(gpu_pod("train")).await;
    let node = eventually("the pod to be bound", DEADLINE, || async {
        bound_to(&c.pod("default", "train").await?)
    })
    .await;
    let claim = c.claims().await.remove(0).name_any();
    // The node must be older than consolidateAfter, so that forgetting the event would show.
    let created = c
        .nodes()
        .await
        .iter()
        .find(|n| n.name_any() == node)
        .and_then(|n| n.metadata.creation_timestamp.clone())
        .expect("the node has a creation time")
        .0;
    eventually(
        "the node to be older than consolidateAfter",
        DEADLINE,
        || async {
            let age = jiff::Timestamp::now().duration_since(created).as_secs_f64();
            (age > AFTER + 1.0).then_some(())
        },
    )
    .await;
    let completed = jiff::Timestamp::now();
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status(
            "train",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    // The first controller writes the event onto the claim, then dies without cleaning up.
    let event = eventually("the claim's lastPodEventTime", DEADLINE, || async {
        let cl = c
            .claims()
            .await
            .into_iter()
            .find(|x| x.name_any() == claim)?;
        let t = cl.status?.last_pod_event_time?.0;
        (t.as_second() + 1 >= completed.as_second()).then_some(t)
    })
    .await;
    first.kill9();
    let _second = c.controller("second", &["--leader-elect=false"]);
    eventually(
        "the node to be consolidated",
        Duration::from_secs(90),
        || async { (!c.nodes().await.iter().any(|n| n.name_any() == node)).then_some(()) },
    )
    .await;
    let waited = jiff::Timestamp::now().duration_since(event).as_secs_f64();
    // Timestamps are whole seconds: one second of slack.
    assert!(
        waited >= AFTER - 1.0,
        "consolidated {waited:.1}s after the last pod event, before consolidateAfter ({AFTER}s)"
    );
}

/// A GPU pod gets a fresh node, then completes: returns the node and its claim's name.
async fn node_emptied(c: &Cluster) -> (String, String) {
    let _: Pod = c.create(gpu_pod("train")).await;
    let node = eventually("the pod to be bound", DEADLINE, || async {
        bound_to(&c.pod("default", "train").await?)
    })
    .await;
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status(
            "train",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    let claim = c.claims().await.remove(0).name_any();
    (node, claim)
}

/// Restart continuity: `--scale-down-delay-after-add` counts from the pool's last scale-up,
/// which a successor reads back from the pool's newest claim. The node's pod completes at
/// once and the controller is killed; a successor that forgot the scale-up would delete the
/// empty node within seconds of starting, long before the delay is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3d_restart_keeps_the_scale_down_delay_after_add() {
    const DELAY: i64 = 40;
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "0s")).await;
    let delay = format!("--scale-down-delay-after-add={DELAY}s");
    let mut first = c.controller("first", &["--leader-elect=false", &delay]);
    let (node, claim) = node_emptied(&c).await;
    let created = c
        .claims()
        .await
        .iter()
        .find(|x| x.name_any() == claim)
        .and_then(|x| x.metadata.creation_timestamp.clone())
        .expect("the claim has a creation time")
        .0;
    first.kill9();
    let age = jiff::Timestamp::now().duration_since(created).as_secs_f64();
    let _second = c.controller("second", &["--leader-elect=false", &delay]);
    eventually(
        "the node to be consolidated",
        Duration::from_secs(150),
        || async { (!c.nodes().await.iter().any(|n| n.name_any() == node)).then_some(()) },
    )
    .await;
    let waited = jiff::Timestamp::now().duration_since(created).as_secs_f64();
    // Timestamps are whole seconds: one second of slack.
    assert!(
        waited >= (DELAY - 1) as f64,
        "the empty node was consolidated {waited:.1}s after the scale-up (the first controller \
         was killed {age:.1}s after it), before --scale-down-delay-after-add ({DELAY}s)"
    );
}

/// Restart continuity: a node's unneeded timer goes on in the successor, from the start the
/// last controller wrote into the claim's `Consolidatable` condition, neither restarted (the
/// successor never writes another start) nor shortened (the node goes no earlier than
/// `unneededTime` after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3e_restart_keeps_the_unneeded_timer() {
    const UNNEEDED: f64 = 20.0;
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "20s")).await;
    let mut first = c.controller("first", &["--leader-elect=false"]);
    let (node, claim) = node_emptied(&c).await;
    let since_of = |cl: &nodepools::NodeClaim| -> Option<String> {
        let cond = cl
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|x| x.type_ == "Consolidatable" && x.reason == "Unneeded")?;
        let (_, rest) = cond.message.split_once("unneeded since ")?;
        Some(rest.split(';').next()?.to_string())
    };
    let since = eventually("the claim's unneeded timer", DEADLINE, || async {
        let cl = c
            .claims()
            .await
            .into_iter()
            .find(|x| x.name_any() == claim)?;
        since_of(&cl)
    })
    .await;
    let start: jiff::Timestamp = since.parse().expect("an RFC 3339 time");
    // Half the wait under the first controller, so that a restarted timer would show.
    eventually("half the unneeded time to pass", DEADLINE, || async {
        let age = jiff::Timestamp::now().duration_since(start).as_secs_f64();
        (age > UNNEEDED / 2.0).then_some(())
    })
    .await;
    first.kill9();
    let _second = c.controller("second", &["--leader-elect=false"]);
    // Every start the claim's condition shows until the node is gone.
    let starts = std::sync::Mutex::new(std::collections::BTreeSet::new());
    eventually(
        "the node to be consolidated",
        Duration::from_secs(90),
        || async {
            if let Some(cl) = c.claims().await.iter().find(|x| x.name_any() == claim) {
                starts.lock().unwrap().extend(since_of(cl));
            }
            (!c.nodes().await.iter().any(|n| n.name_any() == node)).then_some(())
        },
    )
    .await;
    let waited = jiff::Timestamp::now().duration_since(start).as_secs_f64();
    assert_eq!(
        starts.into_inner().unwrap().into_iter().collect::<Vec<_>>(),
        std::slice::from_ref(&since),
        "the successor wrote another start of the unneeded timer"
    );
    assert!(
        waited >= UNNEEDED - 1.0,
        "consolidated {waited:.1}s after the node became unneeded, before unneededTime"
    );
}

/// The claim named `claim` and its instance are both gone, well before garbage collection
/// could have removed the instance (the controllers run with `--gc-grace=10m`).
async fn claim_and_instance_gone(c: &Cluster, claim: &str) {
    eventually("the deleted NodeClaim to be gone", DEADLINE, || async {
        c.claims()
            .await
            .iter()
            .all(|x| x.name_any() != claim)
            .then_some(())
    })
    .await;
    let left: Vec<String> = c
        .instances()
        .await
        .iter()
        .map(|i| i.name_any())
        .filter(|n| n == claim)
        .collect();
    assert!(
        left.is_empty(),
        "the deleted claim's instance outlives it: {left:?}"
    );
}

/// A NodeClaim deleted while its launch call is still running keeps its finalizer until the
/// launch has ended, and then terminates what it created: releasing it at once would leave the
/// instance the launch creates a moment later to garbage collection (or forever, if the
/// controller restarts more often than the GC grace period, as `bench reliability` found).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3f_a_claim_deleted_during_its_launch_leaves_no_instance() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    let ctl = c.controller(
        "only",
        &[
            "--leader-elect=false",
            "--kwok-launch-latency=3s",
            "--gc-grace=10m",
        ],
    );
    let _: Pod = c.create(gpu_pod("train")).await;
    let claim = eventually("a NodeClaim to be written", DEADLINE, || async {
        c.claims().await.first().map(|x| x.name_any())
    })
    .await;
    let started = format!("launching claim={claim}");
    eventually("the launch to start", DEADLINE, || async {
        ctl.log().contains(&started).then_some(())
    })
    .await;
    Api::<NodeClaim>::all(c.client.clone())
        .delete(&claim, &DeleteParams::default())
        .await
        .expect("deleting the claim");
    // The launch call has returned (the instance exists from then on, unless terminated).
    let launched = [
        ("provider", "kwok"),
        ("operation", "launch"),
        ("code", "ok"),
    ];
    eventually("the launch call to return", DEADLINE, || async {
        ctl.metric_with("gpu_autoscaler_cloud_api_calls_total", &launched)
            .filter(|n| *n >= 1.0)
    })
    .await;
    claim_and_instance_gone(&c, &claim).await;
}

/// A cluster whose controller launched the pod `train`'s claim and was killed at
/// `launch:after`, before the claim recorded its instance; and the claim's name.
async fn killed_after_its_first_launch() -> (Cluster, String) {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    let mut first = c.controller_with_env(
        "first",
        &["--leader-elect=false", "--gc-grace=10m"],
        &[("GPU_AUTOSCALER_KILL_AT", "launch:after:1")],
    );
    let _: Pod = c.create(gpu_pod("train")).await;
    let claim = eventually("the instance to be created", DEADLINE, || async {
        c.instances().await.first().map(|i| i.name_any())
    })
    .await;
    let deadline = std::time::Instant::now() + DEADLINE;
    while first
        .child
        .try_wait()
        .expect("waiting on the controller")
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the controller did not die at launch:after"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (c, claim)
}

/// A claim whose launch created an instance but whose controller died before recording it
/// (killed at `launch:after`), deleted before a successor starts: the successor finds the
/// instance by its claim tag and terminates it before releasing the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3g_a_deleted_claim_terminates_the_instance_it_never_recorded() {
    let (c, claim) = killed_after_its_first_launch().await;
    let recorded = c
        .claims()
        .await
        .into_iter()
        .find(|x| x.name_any() == claim)
        .and_then(|x| x.status?.provider_id);
    assert_eq!(
        recorded, None,
        "killed before the claim recorded its instance"
    );
    Api::<NodeClaim>::all(c.client.clone())
        .delete(&claim, &DeleteParams::default())
        .await
        .expect("deleting the claim");
    let _second = c.controller("second", &["--leader-elect=false", "--gc-grace=10m"]);
    claim_and_instance_gone(&c, &claim).await;
}

/// As 3g, but the instance the claim never recorded booted and runs a pod by the time the
/// claim is deleted: termination waits for the pod to go (it does not drain, and deleting the
/// Node would orphan the pod), then terminates the instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_3h_an_unrecorded_instance_running_pods_is_terminated_only_once_they_are_gone() {
    let (c, claim) = killed_after_its_first_launch().await;
    // The instance boots (kwok boots only while a controller runs: the test plays its
    // kubelet) and the pod is bound there.
    let claim_obj = c
        .claims()
        .await
        .into_iter()
        .find(|x| x.name_any() == claim)
        .expect("the claim");
    let pid = format!("{}{claim}", providers::kwok::PROVIDER_ID_PREFIX);
    let _: k8s_openapi::api::core::v1::Node =
        c.create(kubelet_node(&claim, &pid, &claim_obj)).await;
    let bound = eventually(
        "the pod to run on the unrecorded instance",
        DEADLINE,
        || async { bound_to(&c.pod("default", "train").await?) },
    )
    .await;
    Api::<NodeClaim>::all(c.client.clone())
        .delete(&claim, &DeleteParams::default())
        .await
        .expect("deleting the claim");
    let second = c.controller("second", &["--leader-elect=false", "--gc-grace=10m"]);
    assert_eq!(bound, claim, "the instance's Node is named after the claim");
    eventually("termination to wait for the pod", DEADLINE, || async {
        second
            .log()
            .contains("runs pods that must move first")
            .then_some(())
    })
    .await;
    assert!(
        c.instances().await.iter().any(|i| i.name_any() == claim),
        "the instance is kept while the pod runs"
    );
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("train", &DeleteParams::default())
        .await
        .expect("deleting the pod");
    claim_and_instance_gone(&c, &claim).await;
}
