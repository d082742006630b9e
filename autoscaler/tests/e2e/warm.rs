//! Warm capacity end to end (`--enforce-node-group-min-size`): a NodePool's `minNodes` are
//! launched with no pod pending, kept through disruption rounds, never launched twice, and
//! replaced when one goes, and replaced first when the pool's template changes (drift); a
//! pool's GPU limit leaves it short with a `MinNodesNotReached` event; a pool whose warm node
//! never registers backs off instead of paying for one launch per registration timeout;
//! without the flag `minNodes` launches nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;
use nodepools::{NodeClaim, NodePool};
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

const WARM: &[&str] = &[
    "--leader-elect=false",
    "--replan-interval=500ms",
    "--enforce-node-group-min-size=true",
];

/// [`gpu_pool`] (one T4 per node) with `minNodes` and, when given, a limit on its GPUs.
fn warm_pool(min: u32, max_gpus: Option<u32>) -> serde_json::Value {
    let mut pool = gpu_pool("gpu", "1s");
    pool["spec"]["minNodes"] = json!(min);
    if let Some(n) = max_gpus {
        pool["spec"]["limits"] = json!({"nvidia.com/gpu": n.to_string()});
    }
    pool
}

/// The GPU pool's claims nobody is deleting.
async fn live_gpu_claims(c: &Cluster) -> Vec<NodeClaim> {
    c.claims()
        .await
        .into_iter()
        .filter(|cl| cl.spec.node_pool == "gpu" && cl.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until the GPU pool has `n` registered Nodes nobody is deleting; returns their names.
async fn registered_gpu_nodes(c: &Cluster, n: usize) -> BTreeSet<String> {
    eventually(&format!("{n} registered GPU nodes"), DEADLINE, || async {
        let names: BTreeSet<String> = c
            .nodes()
            .await
            .into_iter()
            .filter(|node| {
                node.metadata.deletion_timestamp.is_none()
                    && node
                        .labels()
                        .get("gpu-autoscaler.dev/nodepool")
                        .map(String::as_str)
                        == Some("gpu")
            })
            .map(|node| node.name_any())
            .collect();
        (names.len() == n).then_some(names)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_warm_nodes_are_launched_kept_and_replaced_without_a_pending_pod() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(warm_pool(2, None)).await;
    let _: NodePool = c.create(cpu_pool("cpu", "1s")).await;
    let ctl = c.controller("solo", WARM);
    let first = registered_gpu_nodes(&c, 2).await;
    // Several plans and disruption rounds later (empty nodes, unneeded after 1 s): the same
    // two, none launched twice, and nothing for the pool without a minimum.
    ctl.more_loops("plan", 3).await;
    ctl.more_loops("disrupt", 3).await;
    assert_eq!(registered_gpu_nodes(&c, 2).await, first);
    let claims = c.claims().await;
    assert_eq!(
        claims
            .iter()
            .filter(|cl| cl.spec.node_pool == "gpu")
            .count(),
        2,
        "{claims:#?}"
    );
    assert!(claims.iter().all(|cl| cl.spec.node_pool == "gpu"));
    // Both launches are told on the NodePool (one Event, repeated as a series).
    let told = eventually("a ScaledUpToMinNodes event", DEADLINE, || async {
        let ev = c.events("NodePool", "gpu", "ScaledUpToMinNodes").await;
        ev.into_iter().next()
    })
    .await;
    let note = told.note.clone().unwrap_or_default();
    assert!(note.contains("minNodes 2"), "{note}");
    // One goes: the pool is brought back to two with a new node.
    let gone = first.iter().next().expect("a node").clone();
    c.delete_node(&gone).await;
    let after = eventually("the lost node replaced", DEADLINE, || async {
        let names = registered_gpu_nodes(&c, 2).await;
        (!names.contains(&gone) && live_gpu_claims(&c).await.len() == 2).then_some(names)
    })
    .await;
    assert_eq!(after.intersection(&first).count(), 1, "{after:?} {first:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_warm_a_gpu_limit_leaves_the_pool_short_and_says_so() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(warm_pool(3, Some(1))).await;
    let ctl = c.controller("solo", WARM);
    let told = eventually("a MinNodesNotReached event", DEADLINE, || async {
        c.events("NodePool", "gpu", "MinNodesNotReached")
            .await
            .into_iter()
            .next()
    })
    .await;
    let note = told.note.unwrap_or_default();
    assert!(
        note.contains("2 node(s) short of minNodes 3") && note.contains("limit nvidia.com/gpu=1"),
        "{note}"
    );
    registered_gpu_nodes(&c, 1).await;
    ctl.more_loops("plan", 3).await;
    assert_eq!(live_gpu_claims(&c).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_warm_without_the_flag_min_nodes_launches_nothing() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(warm_pool(2, None)).await;
    let ctl = c.controller("solo", &["--leader-elect=false", "--replan-interval=500ms"]);
    // Rounds that saw the pool: no claim, since no pod is pending.
    ctl.more_loops("provision", 5).await;
    assert!(c.claims().await.is_empty());
    // A pending pod gets its one node, and the minimum adds none beside it.
    let _: k8s_openapi::api::core::v1::Pod = c.create(gpu_pod("g1")).await;
    eventually("g1 bound", DEADLINE, || async {
        bound_to(&c.pod("default", "g1").await?)
    })
    .await;
    ctl.more_loops("provision", 5).await;
    assert_eq!(live_gpu_claims(&c).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_warm_a_drifted_warm_node_is_replaced_first_by_one_of_the_new_template() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(warm_pool(1, None)).await;
    let ctl = c.controller("solo", WARM);
    let first = registered_gpu_nodes(&c, 1).await;
    let first = first.into_iter().next().expect("the warm node");
    // The template gains a label: the warm node drifted. Deleting it would take the pool below
    // minNodes, so a node of the new template comes first, then the old one goes.
    kube::Api::<NodePool>::all(c.client.clone())
        .patch(
            "gpu",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"template": {"metadata": {"labels": {"image": "v2"}}}}}),
            ),
        )
        .await
        .expect("patch the NodePool");
    let second = eventually("the drifted warm node replaced", DEADLINE, || async {
        let nodes = registered_gpu_nodes(&c, 1).await;
        nodes.into_iter().find(|n| *n != first)
    })
    .await;
    let node = c
        .nodes()
        .await
        .into_iter()
        .find(|n| n.name_any() == second)
        .expect("the replacement node");
    assert_eq!(node.labels().get("image").map(String::as_str), Some("v2"));
    eventually("the drifted node gone", DEADLINE, || async {
        (!c.nodes().await.iter().any(|n| n.name_any() == first)).then_some(())
    })
    .await;
    assert_eq!(live_gpu_claims(&c).await.len(), 1);
    // Replaced first (launch, then taint and drain), not deleted and refilled.
    let log = ctl.log();
    assert!(
        log.contains("reason=Drifted method=Replace"),
        "the drift command replaces: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_warm_a_pool_whose_warm_node_never_registers_backs_off() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(warm_pool(1, None)).await;
    // The instance launches but its Node never joins (a broken image, say); the claim is
    // deleted after two seconds.
    let ctl = c.controller(
        "solo",
        &[
            WARM,
            &["--kwok-register-delay=1h", "--registration-timeout=2s"],
        ]
        .concat(),
    );
    let told = eventually(
        "a MinNodesNotReached event for the back-off",
        DEADLINE,
        || async {
            c.events("NodePool", "gpu", "MinNodesNotReached")
                .await
                .into_iter()
                .find(|e| {
                    e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("did not come up"))
                })
        },
    )
    .await;
    let note = told.note.unwrap_or_default();
    assert!(
        note.contains("1 node(s) short of minNodes 1")
            && note.contains("1 warm node(s) in a row")
            && note.contains("no Node registered within 2s of the launch"),
        "{note}"
    );
    // Planning goes on every 500 ms; with the default five-minute back-off no second warm
    // node is launched (without it, one every registration timeout).
    ctl.more_loops("plan", 8).await;
    let log = ctl.log();
    assert_eq!(
        log.matches("created NodeClaim").count(),
        1,
        "one warm launch: {log}"
    );
    assert!(live_gpu_claims(&c).await.is_empty());
}
