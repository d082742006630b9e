//! The drain of a deleted Node, tier by tier and to the end of each pod: workloads first, then
//! DaemonSet pods, then critical pods; a tier's evictions wait until every pod of the tiers
//! before it is gone, and the instance waits until the last drained pod is gone (not only
//! told to go), as Karpenter's terminator drains ("should evict pods in order and wait until
//! pods are fully deleted"). Pods here carry a finalizer the test removes and an hour's
//! grace period (so none is ever stuck terminating, which the drain would pass by), so each
//! stays terminating exactly as long as the test needs: no timing decides what is seen.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodepools::NodePool;
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

/// The finalizer that keeps a test's pod terminating until the test lets it go.
const HOLD: &str = "e2e.gpu-autoscaler.dev/hold";

fn pods(c: &Cluster) -> Api<Pod> {
    Api::namespaced(c.client.clone(), "default")
}

async fn set_finalizers(c: &Cluster, pod: &str, finalizers: serde_json::Value) {
    pods(c)
        .patch(
            pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .expect("patching the pod's finalizers");
}

/// The grace period of the test's pods: an hour, so that none is stuck terminating (a
/// minute past its `deletionTimestamp`) while the test looks.
const GRACE_S: i64 = 3_600;

/// Lets pod `name` finish terminating: its grace cut to a second (the kubelet's part) and the
/// test's finalizer gone.
async fn release(c: &Cluster, name: &str) {
    let at_once = DeleteParams {
        grace_period_seconds: Some(1),
        ..DeleteParams::default()
    };
    pods(c)
        .delete(name, &at_once)
        .await
        .expect("cutting the pod's grace");
    set_finalizers(c, name, json!(null)).await;
    eventually(&format!("pod {name} gone"), DEADLINE, || async {
        c.pod("default", name).await.is_none().then_some(())
    })
    .await;
}

fn terminating(p: &Option<Pod>) -> bool {
    p.as_ref()
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
}

/// What the drain has started: the names of the pods terminating, and whether the instance
/// and the Node are still there.
async fn seen(c: &Cluster, node: &str, names: &[&str]) -> (Vec<String>, bool, bool) {
    let mut going = Vec::new();
    for n in names {
        if terminating(&c.pod("default", n).await) {
            going.push(n.to_string());
        }
    }
    let instance = c.instances().await.iter().any(|i| i.name_any() == node);
    let up = c.nodes().await.iter().any(|n| n.name_any() == node);
    (going, instance, up)
}

/// A pod bound to `node` directly (as the DaemonSet controller and the kubelet bind theirs),
/// with `owner` as its controller and the test's finalizer.
fn bound_pod(name: &str, node: &str, owner: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name},
            "ownerReferences": [owner], "finalizers": [HOLD]},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": GRACE_S,
            "containers": [{"name": "c", "image": "c", "resources": {"requests": {"cpu": "100m"}}}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_drain_goes_tier_by_tier_and_the_instance_waits_for_the_last_pod_to_end() {
    // Graceful deletion: an evicted pod keeps a deletionTimestamp at the end of its grace.
    let mut opts = options();
    opts.graceful_deletion = Some(0.01);
    let c = Cluster::start_opts(opts, &[]).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    // No consolidation in the test's time.
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let mut web = cpu_pod("web", "500m", BTreeMap::from([("app", "web")]));
    web["spec"]["terminationGracePeriodSeconds"] = json!(GRACE_S);
    let _: Pod = c.create(web).await;
    let mut dns = cpu_pod("dns", "500m", BTreeMap::from([("app", "dns")]));
    dns["spec"]["priorityClassName"] = json!("system-cluster-critical");
    dns["spec"]["terminationGracePeriodSeconds"] = json!(GRACE_S);
    let _: Pod = c.create(dns).await;
    let node = eventually("both pods bound to one node", DEADLINE, || async {
        let a = bound_to(&c.pod("default", "web").await?)?;
        let b = bound_to(&c.pod("default", "dns").await?)?;
        (a == b).then_some(a)
    })
    .await;
    let daemon = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
        "uid": "00000000-0000-0000-0000-0000000000a1", "controller": true});
    let _: Pod = c.create(bound_pod("agent", &node, daemon)).await;
    let kubelet = json!({"apiVersion": "v1", "kind": "Node", "name": node,
        "uid": "00000000-0000-0000-0000-0000000000b1", "controller": true});
    let _: Pod = c.create(bound_pod("static", &node, kubelet)).await;
    for p in ["web", "dns"] {
        set_finalizers(&c, p, json!([HOLD])).await;
    }
    let all = ["web", "agent", "dns", "static"];

    c.delete_node(&node).await;
    // Workloads first; the Node is tainted and taken out of load balancers before.
    eventually("the workload evicted", DEADLINE, || async {
        terminating(&c.pod("default", "web").await).then_some(())
    })
    .await;
    let n: Node = Api::all(c.client.clone()).get(&node).await.unwrap();
    assert_eq!(
        n.labels()
            .get("node.kubernetes.io/exclude-from-external-load-balancers")
            .map(String::as_str),
        Some("gpu-autoscaler"),
        "{:?}",
        n.labels()
    );
    // Three more rounds saw the workload terminating: nothing else was evicted, the instance
    // runs on while the workload shuts down, and the claim says it is draining.
    ctl.more_loops("round", 3).await;
    assert_eq!(
        seen(&c, &node, &all).await,
        (vec!["web".to_string()], true, true),
        "{}",
        ctl.log()
    );
    eventually("the claim says it is draining", DEADLINE, || async {
        let claims = c.claims().await;
        claims
            .iter()
            .flat_map(|cl| cl.status.iter().flat_map(|s| s.conditions.iter()))
            .any(|k| k.type_ == "Drained" && k.status == "Unknown" && k.reason == "Draining")
            .then_some(())
    })
    .await;

    release(&c, "web").await;
    eventually("the DaemonSet pod evicted", DEADLINE, || async {
        terminating(&c.pod("default", "agent").await).then_some(())
    })
    .await;
    ctl.more_loops("round", 3).await;
    assert_eq!(
        seen(&c, &node, &all).await,
        (vec!["agent".to_string()], true, true)
    );

    release(&c, "agent").await;
    eventually("the critical pod evicted", DEADLINE, || async {
        terminating(&c.pod("default", "dns").await).then_some(())
    })
    .await;
    // The last drained pod terminating still holds the instance; the mirror pod never does.
    ctl.more_loops("round", 3).await;
    assert_eq!(
        seen(&c, &node, &all).await,
        (vec!["dns".to_string()], true, true)
    );

    release(&c, "dns").await;
    eventually("the instance and the node gone", DEADLINE, || async {
        let (_, instance, up) = seen(&c, &node, &[]).await;
        (!instance && !up).then_some(())
    })
    .await;
    let told = crate::pod_problems::events_of(&c, "static").await;
    assert!(
        !told.iter().any(|(reason, _, _)| reason == "Evicted"),
        "the mirror pod was not evicted: {told:?}"
    );
}
