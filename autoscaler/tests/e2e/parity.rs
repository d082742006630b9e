//! Karpenter and Cluster Autoscaler semantics end to end (issue 12): a NodeOverlay created
//! while the controller runs changes the instance type it launches; an atomic NodePool
//! (`spec.atomicScaleUp`) launches all of its nodes for one pod, or none when a limit would
//! cut the group, and leaves only whole, down to zero.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use nodepools::{NodeClaim, NodeOverlay, NodePool};
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

/// A CPU pool offering two 4-vCPU types: c6i.xlarge ($0.17/h in the embedded catalog) and
/// m5.xlarge ($0.192/h).
fn two_type_pool() -> serde_json::Value {
    json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "cpu"},
        "spec": {
            "template": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                 "values": ["c6i.xlarge", "m5.xlarge"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ]},
            "disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}
        }
    })
}

/// The instance type the Node of the claim serving `pod` was launched as, once it is bound.
async fn launched_type_for(c: &Cluster, pod: &str) -> String {
    let node = eventually(&format!("{pod} bound"), DEADLINE, || async {
        bound_to(&c.pod("default", pod).await?)
    })
    .await;
    let n = c
        .nodes()
        .await
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
        .expect("the pod's node exists");
    n.metadata
        .labels
        .unwrap_or_default()
        .get("node.kubernetes.io/instance-type")
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_node_overlay_changes_the_launched_instance_type() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(two_type_pool()).await;
    let _ctl = c.controller("solo", &["--leader-elect=false", "--replan-interval=500ms"]);
    // Before any overlay the cheaper type is launched.
    let _: Pod = c.create(cpu_pod("before", "3", BTreeMap::new())).await;
    assert_eq!(launched_type_for(&c, "before").await, "c6i.xlarge");
    // A licence surcharge on c6i makes m5 the cheaper choice, for planning and launching.
    let _: NodeOverlay = c
        .create(json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": "c6i-licence"},
            "spec": {
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                  "values": ["c6i.xlarge"]}],
                "priceAdjustment": "+50%"
            }
        }))
        .await;
    // The overlay reaches the controller through its watch: the next pod (which cannot share
    // the first node) gets an m5.xlarge.
    let _: Pod = c.create(cpu_pod("after", "3", BTreeMap::new())).await;
    assert_eq!(launched_type_for(&c, "after").await, "m5.xlarge");
    assert_eq!(c.claims().await.len(), 2);
}

/// An atomic NodePool of two m5.xlarge nodes.
fn atomic_pool(limit_nodes: Option<i64>) -> serde_json::Value {
    let mut pool = lane_pool("atomic", json!({}), json!({"atomicScaleUp": {"nodes": 2}}));
    if let Some(n) = limit_nodes {
        pool["spec"]["limits"] = json!({"nodes": n});
    }
    pool
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_atomic_nodepool_launches_all_its_nodes_and_leaves_whole() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(atomic_pool(None)).await;
    let _ctl = c.controller("solo", &["--leader-elect=false", "--replan-interval=500ms"]);
    // One small pod: the pool scales to its two nodes at once.
    let _: Pod = c.create(lane_pod("one", "atomic", "500m", json!({}))).await;
    eventually("one bound", DEADLINE, || async {
        bound_to(&c.pod("default", "one").await?)
    })
    .await;
    let claims: Vec<NodeClaim> = eventually("two registered nodes", DEADLINE, || async {
        let nodes = c
            .nodes()
            .await
            .into_iter()
            .filter(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.get("lane").map(String::as_str) == Some("atomic"))
            })
            .count();
        let claims = c.claims().await;
        (nodes == 2 && claims.len() == 2).then_some(claims)
    })
    .await;
    let groups: Vec<Option<String>> = claims
        .iter()
        .map(|cl| {
            cl.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("gpu-autoscaler.dev/atomic-scale-up").cloned())
        })
        .collect();
    assert!(groups[0].is_some() && groups[0] == groups[1], "{groups:?}");
    // The pod goes: the pool goes back to zero, both nodes (never one left behind).
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("one", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the pool at zero", DEADLINE, || async {
        (c.claims().await.is_empty() && c.instances().await.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_atomic_nodepool_a_limit_that_cuts_the_group_launches_nothing() {
    let c = Cluster::start().await;
    // Validation refuses `limits.nodes` below the group; a cluster limit can still cut it.
    let _: NodePool = c.create(atomic_pool(None)).await;
    let ctl = c.controller(
        "solo",
        &[
            "--leader-elect=false",
            "--replan-interval=500ms",
            "--max-nodes-total=1",
        ],
    );
    let _: Pod = c.create(lane_pod("one", "atomic", "500m", json!({}))).await;
    let rounds = |log: &str| log.matches(": planned ").count();
    eventually("three planning rounds", DEADLINE, || async {
        (rounds(&ctl.log()) >= 3).then_some(())
    })
    .await;
    assert!(c.claims().await.is_empty(), "no node of a cut group");
    assert!(c.instances().await.is_empty());
    let pod = c.pod("default", "one").await.expect("the pod exists");
    assert_eq!(bound_to(&pod), None);
}
