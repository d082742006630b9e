//! Drift end to end on kwok: a NodePool's template changes after its node is up; the node's
//! NodeClaim is marked `Drifted` (`NodePoolDrifted`), a replacement from the new template is
//! launched first, the Deployment's pod moves to it, and the drifted node goes, with a
//! `Drifted` event and counted under the reason `Drifted`.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nodepools::{NodeClaim, NodePool};
use serde_json::json;

use super::harness::*;
use super::pod_problems::events_of;

const DEADLINE: Duration = Duration::from_secs(90);
const HASH: &str = "karpenter.sh/nodepool-hash";

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

/// The claim of node `node`, if one records it.
async fn claim_of(c: &Cluster, node: &str) -> Option<NodeClaim> {
    c.claims()
        .await
        .into_iter()
        .find(|cl| cl.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

/// The claim's `Drifted` condition as (status, reason), if it has one.
fn drifted(cl: &NodeClaim) -> Option<(String, String)> {
    cl.status
        .as_ref()?
        .conditions
        .iter()
        .find(|k| k.type_ == "Drifted")
        .map(|k| (k.status.clone(), k.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_node_whose_nodepool_template_changed_is_replaced_and_its_pod_moves() {
    let c = Cluster::start().await;
    // unneededTime 1h: consolidation leaves the node alone, only drift can move the pod.
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
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
    let launched = claim_of(&c, &first).await.expect("the first node's claim");
    let old_hash = launched
        .annotations()
        .get(HASH)
        .cloned()
        .expect("hash recorded");
    assert_eq!(
        launched
            .annotations()
            .get("karpenter.sh/nodepool-hash-version")
            .map(String::as_str),
        Some("v1")
    );
    assert_eq!(drifted(&launched), None);

    // The template gains a label: every node launched before it has drifted.
    Api::<NodePool>::all(c.client.clone())
        .patch(
            "cpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"team": "ml"}}}}})),
        )
        .await
        .expect("patch the NodePool");
    eventually("the claim to be marked Drifted", DEADLINE, || async {
        let cl = claim_of(&c, &first).await?;
        (drifted(&cl) == Some(("True".into(), "NodePoolDrifted".into()))).then_some(())
    })
    .await;
    let second = eventually("web to run on another node", DEADLINE, || async {
        web_node(&c).await.filter(|n| *n != first)
    })
    .await;
    eventually("the drifted node to be gone", DEADLINE, || async {
        let nodes = c.nodes().await;
        (!nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(first.as_str())))
        .then_some(())
    })
    .await;
    // The replacement is of the new template, and records its hash.
    let node = c
        .nodes()
        .await
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(second.as_str()))
        .expect("the replacement node");
    assert_eq!(
        node.labels().get("team").map(String::as_str),
        Some("ml"),
        "{:?}",
        node.labels()
    );
    let replacement = claim_of(&c, &second)
        .await
        .expect("the replacement's claim");
    let new_hash = replacement.annotations().get(HASH).cloned();
    assert!(
        new_hash.is_some() && new_hash != Some(old_hash),
        "{new_hash:?}"
    );
    assert_eq!(drifted(&replacement), None);
    // The deletion is counted under the reason Drifted.
    eventually("the drift deletion to be counted", DEADLINE, || async {
        ctl.metric_with("gpu_autoscaler_disruptions_total", &[("reason", "Drifted")])
            .filter(|v| *v >= 1.0)
    })
    .await;
    let told = events_of(&c, &first).await;
    assert!(
        told.iter().any(|(reason, note, _)| reason == "Drifted"
            && note.starts_with("drifted (NodePoolDrifted)")),
        "{told:?}"
    );
}
