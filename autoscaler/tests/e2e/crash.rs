//! Test 3: the controller is SIGKILLed between NodeClaim creation and launch, and between
//! launch and registration; after a restart there is no duplicate node and no leaked instance.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use nodepools::NodePool;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(40);

/// After the restart: the pod is bound, and exactly the one claim, instance and node exist,
/// also after garbage collection had time to run.
async fn converges_to_one(c: &Cluster, claim: &str) {
    eventually(
        "the pod to be bound after the restart",
        DEADLINE,
        || async { bound_to(&c.pod("default", "train").await?) },
    )
    .await;
    // Long enough for at least two GC passes past the grace period (--gc-interval=2s,
    // --gc-grace=4s).
    tokio::time::sleep(Duration::from_secs(7)).await;
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
    let _second = c.controller("second", &["--leader-elect=false"]);
    converges_to_one(&c, &claim).await;
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
    let _second = c.controller("second", &["--leader-elect=false"]);
    converges_to_one(&c, &claim).await;
}
