//! Cluster-wide limits end to end: a `--gpu-total` flag and a CapacityQuota object each hold
//! back a GPU pod with a `LimitReached` event naming the limit and the numbers, and
//! nothing is launched beyond them; a pod the quota does not select still gets its node.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodepools::{CapacityQuota, NodePool};
use serde_json::json;

use crate::harness::*;
use crate::pod_problems::events_of;

const DEADLINE: Duration = Duration::from_secs(90);

/// Waits for the pod's `LimitReached` event whose note holds `says`.
async fn told(c: &Cluster, pod: &str, says: &str) -> String {
    eventually(&format!("{pod} told {says:?}"), DEADLINE, || async {
        events_of(c, pod)
            .await
            .into_iter()
            .find(|(reason, note, _)| reason == "LimitReached" && note.contains(says))
            .map(|(_, note, _)| note)
    })
    .await
}

/// Lets at least three more planning rounds pass, then checks that the GPU pool has one
/// claim, its pod bound, and the held-back pod is still pending.
async fn nothing_beyond(c: &Cluster, ctl: &Controller, held: &str) {
    let rounds = |log: &str| log.matches(": planned ").count();
    let seen = rounds(&ctl.log());
    eventually("three more planning rounds", DEADLINE, || async {
        (rounds(&ctl.log()) >= seen + 3).then_some(())
    })
    .await;
    let gpu_claims: Vec<_> = c
        .claims()
        .await
        .into_iter()
        .filter(|cl| cl.spec.node_pool == "gpu")
        .collect();
    assert_eq!(gpu_claims.len(), 1, "one GPU node only: {gpu_claims:#?}");
    let pod = c.pod("default", held).await.expect("the held pod exists");
    assert_eq!(bound_to(&pod), None, "{held} stays pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_gpu_total_flag_holds_back_a_pod_with_the_numbers() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "1h")).await;
    let ctl = c.controller(
        "solo",
        &[
            "--leader-elect=false",
            "--replan-interval=500ms",
            "--gpu-total=T4:0:1",
        ],
    );
    let _: Pod = c.create(gpu_pod("g1")).await;
    eventually("g1 bound", DEADLINE, || async {
        bound_to(&c.pod("default", "g1").await?)
    })
    .await;
    let _: Pod = c.create(gpu_pod("g2")).await;
    let note = told(&c, "g2", "cluster limit GPU T4 max 1 reached").await;
    assert!(note.contains("1 in use or launching"), "{note}");
    nothing_beyond(&c, &ctl, "g2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_capacity_quota_holds_back_the_nodes_it_selects_only() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "1h")).await;
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    // The GPU pool's nodes carry team=ml; the CPU pool's do not.
    let _: CapacityQuota = c
        .create(json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1",
            "kind": "CapacityQuota",
            "metadata": {"name": "ml-gpus"},
            "spec": {
                "selector": {"matchLabels": {"team": "ml"}},
                "limits": {"resources": {"nvidia.com/gpu": 1}}
            }
        }))
        .await;
    let ctl = c.controller("solo", &["--leader-elect=false", "--replan-interval=500ms"]);
    let _: Pod = c.create(gpu_pod("g1")).await;
    let _: Pod = c.create(gpu_pod("g2")).await;
    let _: Pod = c.create(cpu_pod("web", "3", BTreeMap::new())).await;
    let note = told(
        &c,
        "g2",
        "CapacityQuota ml-gpus nvidia.com/gpu max 1 reached: 1 in use or launching",
    )
    .await;
    assert!(note.starts_with("pod didn't trigger scale-up"), "{note}");
    for pod in ["g1", "web"] {
        eventually(&format!("{pod} bound"), DEADLINE, || async {
            bound_to(&c.pod("default", pod).await?)
        })
        .await;
    }
    nothing_beyond(&c, &ctl, "g2").await;
}
