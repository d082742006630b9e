//! Expiration end to end on kwok: a node older than its NodePool's `expireAfter` has its
//! NodeClaim deleted without a budget or a replacement first, the termination flow drains
//! it, and the Deployment's pod runs again on a new node.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use nodepools::NodePool;
use serde_json::json;

use super::harness::*;
use super::pod_problems::events_of;

const DEADLINE: Duration = Duration::from_secs(90);

/// The node web's pod is bound to, if it runs.
async fn web_node(c: &Cluster) -> Option<String> {
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .list(&ListParams::default().labels("app=web"))
        .await
        .ok()?
        .items
        .iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .and_then(bound_to)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_node_past_expire_after_is_removed_and_its_pod_runs_on_a_new_one() {
    let c = Cluster::start().await;
    let mut pool = cpu_pool("cpu", "1h");
    pool["spec"]["template"]["expireAfter"] = json!("15s");
    let _: NodePool = c.create(pool).await;
    let _ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Deployment = c
        .create(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "web",
                                      "resources": {"requests": {"cpu": "1"}}}]}}}
        }))
        .await;
    let first = eventually("web to run", DEADLINE, || web_node(&c)).await;
    let second = eventually("web to run on another node", DEADLINE, || async {
        web_node(&c).await.filter(|n| *n != first)
    })
    .await;
    eventually("the expired node to be gone", DEADLINE, || async {
        let nodes = c.nodes().await;
        (!nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(first.as_str())))
        .then_some(())
    })
    .await;
    let told = events_of(&c, &first).await;
    let expired: Vec<_> = told
        .iter()
        .filter(|(reason, _, _)| reason == "Expired")
        .collect();
    // Told once: a pass before the cache shows the deletion does not delete and tell again.
    assert!(
        expired.len() == 1
            && expired[0].1.contains("expireAfter (15s)")
            && expired[0].2.is_none_or(|n| n <= 1),
        "{told:?}"
    );
    assert_ne!(first, second);
}
