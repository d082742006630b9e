//! Test 4e-4h: a managed Node deleted by someone else (`kubectl delete node`) is drained
//! before its instance is terminated, protected pods hold the termination, and a Node whose
//! instance is already gone is released without a drain once it is not Ready.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use nodepools::NodePool;
use providers::kwok::KwokInstance;
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

/// A CPU pod of `cpu` with `karpenter.sh/do-not-disrupt: "true"`.
fn protected_pod(name: &str, cpu: &str) -> serde_json::Value {
    let mut p = cpu_pod(name, cpu, BTreeMap::from([("app", name)]));
    p["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    p
}

/// A cluster whose one node runs a plain pod `web` and a protected pod `keep`; the node's
/// name.
async fn one_node_with_a_protected_pod(c: &Cluster) -> String {
    one_node_with(c, protected_pod("keep", "500m")).await
}

/// A cluster whose one node runs a plain pod `web` and the pod `other` (in `default`); the
/// node's name.
async fn one_node_with(c: &Cluster, other: serde_json::Value) -> String {
    // No consolidation in the test's time: the pool's nodes are never unneeded long enough.
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let _: Pod = c
        .create(cpu_pod("web", "500m", BTreeMap::from([("app", "web")])))
        .await;
    let name = other["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let _: Pod = c.create(other).await;
    eventually("both pods bound to one node", DEADLINE, || async {
        let a = bound_to(&c.pod("default", "web").await?)?;
        let b = bound_to(&c.pod("default", &name).await?)?;
        (a == b).then_some(a)
    })
    .await
}

/// Removes every finalizer from Node `node` (what a Node registered again by its kubelet
/// looks like).
async fn strip_finalizers(c: &Cluster, node: &str) {
    Api::<Node>::all(c.client.clone())
        .patch(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("stripping the node's finalizer");
}

fn gone_or_terminating(p: Option<Pod>) -> bool {
    p.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

/// Waits for the plain pod `web` to be evicted from the node being deleted.
async fn plain_pod_evicted(c: &Cluster) {
    eventually("the plain pod evicted", DEADLINE, || async {
        gone_or_terminating(c.pod("default", "web").await).then_some(())
    })
    .await;
}

/// The deleted `node`, which the protected pod `keep` still holds.
async fn held_node(c: &Cluster, node: &str) -> Node {
    c.nodes()
        .await
        .into_iter()
        .find(|n| n.name_any() == node)
        .expect("the deleted node stays while a protected pod runs on it")
}

/// The protected pod `keep` on the deleted `node` holds the node's instance and is not
/// evicted; once it is deleted, the instance, the node and (if given) its claim go.
async fn held_until_the_protected_pod_goes(c: &Cluster, node: &str, claim: Option<&str>) {
    assert!(
        c.instances().await.iter().any(|i| i.name_any() == node),
        "the instance runs on while the protected pod does"
    );
    assert!(
        !gone_or_terminating(c.pod("default", "keep").await),
        "the protected pod was not evicted"
    );
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("keep", &DeleteParams::default())
        .await
        .expect("deleting the protected pod");
    eventually(
        "the instance, the node and its claim gone",
        DEADLINE,
        || async {
            let instance = c.instances().await.iter().any(|i| i.name_any() == node);
            let n = c.nodes().await.iter().any(|n| n.name_any() == node);
            let cl = match claim {
                Some(name) => c.claims().await.iter().any(|cl| cl.name_any() == name),
                None => false,
            };
            (!instance && !n && !cl).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4e_a_deleted_node_is_drained_and_protected_pods_hold_its_instance() {
    let c = Cluster::start().await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let node = one_node_with_a_protected_pod(&c).await;
    c.delete_node(&node).await;
    // The plain pod is evicted; the protected one is not, and it holds the instance.
    plain_pod_evicted(&c).await;
    eventually(
        "a warning that protected pods hold the node",
        DEADLINE,
        || async {
            let events = Api::<Event>::all(c.client.clone())
                .list(&ListParams::default())
                .await
                .ok()?;
            events
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("Draining")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(node.as_str())
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("do-not-disrupt"))
                })
                .then_some(())
        },
    )
    .await;
    let n = held_node(&c, &node).await;
    let taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "gpu-autoscaler.dev/disrupted" && t.effect == "NoSchedule"),
        "nothing new lands on a node being drained: {taints:?}"
    );
    held_until_the_protected_pod_goes(&c, &node, None).await;
    assert!(
        ctl.log()
            .contains("draining 2 pods before the instance is terminated"),
        "the drain is logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4f_a_node_whose_instance_is_gone_is_released_without_a_drain_once_not_ready() {
    let c = Cluster::start().await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let node = one_node_with_a_protected_pod(&c).await;
    // A spot interruption: the instance goes, then its Node is deleted.
    Api::<KwokInstance>::all(c.client.clone())
        .delete(&node, &DeleteParams::default())
        .await
        .expect("deleting the instance");
    c.delete_node(&node).await;
    // While the Node is Ready its kubelet runs, whatever the cloud says (a lagging instance
    // list): it is drained, and the protected pod holds it.
    ctl.more_loops("round", 3).await;
    held_node(&c, &node).await;
    // The node lifecycle controller finds the kubelet silent.
    c.set_ready(&node, "Unknown").await;
    eventually(
        "the node released though a protected pod was bound to it",
        DEADLINE,
        || async { (!c.nodes().await.iter().any(|n| n.name_any() == node)).then_some(()) },
    )
    .await;
    assert!(
        ctl.log().contains("instance is gone: nothing to drain"),
        "the controller saw the instance gone"
    );
}

/// A PodDisruptionBudget that refuses a drain's eviction does not hold the loop: kube's
/// client would retry the 429 for minutes, and meanwhile no pending pod got a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4g_a_drain_refused_by_a_pdb_does_not_hold_provisioning() {
    let c = Cluster::start().await;
    let _ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let _: Pod = c
        .create(cpu_pod("web", "500m", BTreeMap::from([("app", "web")])))
        .await;
    let _: k8s_openapi::api::policy::v1::PodDisruptionBudget = c
        .create(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .await;
    let node = eventually("web bound", DEADLINE, || async {
        bound_to(&c.pod("default", "web").await?)
    })
    .await;
    c.delete_node(&node).await;
    eventually("the drain under way", DEADLINE, || async {
        let n = c.nodes().await.into_iter().find(|n| n.name_any() == node)?;
        let taints = n.spec?.taints?;
        taints
            .iter()
            .any(|t| t.key == "gpu-autoscaler.dev/disrupted")
            .then_some(())
    })
    .await;
    // A pod that needs a new node (3.5 of 3.92 CPUs, and the draining node takes nothing).
    let _: Pod = c
        .create(cpu_pod("late", "3500m", BTreeMap::from([("app", "late")])))
        .await;
    let late = eventually(
        "the late pod placed while the drain is refused",
        Duration::from_secs(30),
        || async { bound_to(&c.pod("default", "late").await?) },
    )
    .await;
    assert_ne!(late, node);
    assert!(
        !gone_or_terminating(c.pod("default", "web").await),
        "the PDB allows no eviction"
    );
    // The Node says which pod and which budget, once.
    let told = c.events("Node", &node, "FailedDraining").await;
    assert_eq!(told.len(), 1, "{told:?}");
    let note = told[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("default/web") && note.contains("The disruption budget web needs"),
        "{note}"
    );
    assert!(
        c.nodes().await.iter().any(|n| n.name_any() == node),
        "the node waits for its drain"
    );
}

/// A claim deleted while its Node lacks the finalizer (a Node deleted and registered again by
/// its kubelet after the claim's registration, as `bench reliability` does): the Node is
/// drained all the same, and a protected pod on it holds the Node and the instance. Before,
/// the claim's termination deleted such a Node at once, under its pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4h_a_node_without_the_finalizer_is_drained_before_its_claim_goes() {
    let c = Cluster::start().await;
    let _ctl = c.controller("solo", &["--leader-elect=false"]);
    let node = one_node_with_a_protected_pod(&c).await;
    eventually("the node registered", DEADLINE, || async {
        let n = c.registered_node().await?;
        (n.name_any() == node).then_some(())
    })
    .await;
    strip_finalizers(&c, &node).await;
    let claim = c
        .claims()
        .await
        .into_iter()
        .find(|cl| cl.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .expect("the node's claim")
        .name_any();
    Api::<nodepools::NodeClaim>::all(c.client.clone())
        .delete(&claim, &DeleteParams::default())
        .await
        .expect("deleting the claim");
    plain_pod_evicted(&c).await;
    let n = held_node(&c, &node).await;
    assert!(
        n.metadata.deletion_timestamp.is_some(),
        "the node is being deleted"
    );
    held_until_the_protected_pod_goes(&c, &node, Some(&claim)).await;
}

/// A registered claim's Node that lost the finalizer (its kubelet registered it again, or
/// someone stripped it) gets it back from the claim's lifecycle without waiting for a
/// deletion; a `kubectl delete node` then drains it as any other. Before, such a Node deleted
/// by consolidation went at once under its pods, and the still-claimed instance registered it
/// again, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4i_a_node_that_lost_its_finalizer_gets_it_back_and_is_drained() {
    let c = Cluster::start().await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let node = one_node_with_a_protected_pod(&c).await;
    let has_finalizer = |n: &Node| {
        n.finalizers()
            .iter()
            .any(|f| f == "gpu-autoscaler.dev/termination")
    };
    eventually(
        "the node registered with the finalizer",
        DEADLINE,
        || async {
            let n = c.registered_node().await?;
            (n.name_any() == node && has_finalizer(&n)).then_some(())
        },
    )
    .await;
    strip_finalizers(&c, &node).await;
    eventually("the finalizer back on the node", DEADLINE, || async {
        let n = c.nodes().await.into_iter().find(|n| n.name_any() == node)?;
        has_finalizer(&n).then_some(())
    })
    .await;
    assert!(
        ctl.log().contains("registered again without the finalizer"),
        "the controller says why it patched the node"
    );
    c.delete_node(&node).await;
    plain_pod_evicted(&c).await;
    let n = held_node(&c, &node).await;
    assert!(
        n.metadata.deletion_timestamp.is_some(),
        "the node is being deleted"
    );
    held_until_the_protected_pod_goes(&c, &node, None).await;
}

/// A pod that tolerates the disruption taint is not evicted and does not hold the drain: it
/// goes with its node, as Karpenter leaves it (`IsDrainable`). Evicted, its replacement could
/// be put back on the tainted node by the scheduler, and the drain would never end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4j_a_pod_tolerating_the_disruption_taint_goes_with_its_node() {
    let c = Cluster::start().await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let mut agent = cpu_pod("agent", "500m", BTreeMap::from([("app", "agent")]));
    agent["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    let node = one_node_with(&c, agent).await;
    c.delete_node(&node).await;
    plain_pod_evicted(&c).await;
    eventually(
        "the instance and the node gone with the tolerating pod on it",
        DEADLINE,
        || async {
            let instance = c.instances().await.iter().any(|i| i.name_any() == node);
            let n = c.nodes().await.iter().any(|n| n.name_any() == node);
            (!instance && !n).then_some(())
        },
    )
    .await;
    let told = crate::pod_problems::events_of(&c, "agent").await;
    assert!(
        !told.iter().any(|(reason, _, _)| reason == "Evicted"),
        "the tolerating pod was not evicted: {told:?}"
    );
    assert!(
        ctl.log()
            .contains("draining 1 pods before the instance is terminated"),
        "only the plain pod was drained"
    );
}

/// A pod two PodDisruptionBudgets select cannot be evicted (the Eviction API answers 500):
/// it holds its node, as a budget allowing nothing does, while the drain evicts the node's
/// other pods, and the Node says once which pod and why (Karpenter's `FailedDraining`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4k_a_pod_two_budgets_select_holds_the_drain_and_is_named_once() {
    let c = Cluster::start().await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    for (name, app) in [("alpha", "alpha"), ("zulu", "zulu")] {
        let _: Pod = c
            .create(cpu_pod(name, "500m", BTreeMap::from([("app", app)])))
            .await;
    }
    for pdb in ["alpha-a", "alpha-b"] {
        let _: k8s_openapi::api::policy::v1::PodDisruptionBudget = c
            .create(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": pdb, "namespace": "default"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "alpha"}}}
            }))
            .await;
    }
    let node = eventually("both pods bound to one node", DEADLINE, || async {
        let a = bound_to(&c.pod("default", "alpha").await?)?;
        let z = bound_to(&c.pod("default", "zulu").await?)?;
        (a == z).then_some(a)
    })
    .await;
    c.delete_node(&node).await;
    eventually("the other pod evicted", DEADLINE, || async {
        gone_or_terminating(c.pod("default", "zulu").await).then_some(())
    })
    .await;
    ctl.more_loops("round", 3).await;
    assert!(
        !gone_or_terminating(c.pod("default", "alpha").await),
        "the Eviction API refuses a pod two budgets select"
    );
    assert!(c.nodes().await.iter().any(|n| n.name_any() == node));
    let told = c.events("Node", &node, "FailedDraining").await;
    assert!(
        told.len() == 1 && told[0].series.as_ref().is_none_or(|s| s.count <= 1),
        "one event, not one per round: {told:?}"
    );
    let note = told[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("default/alpha") && note.contains("more than one PodDisruptionBudget"),
        "{note}"
    );
}
