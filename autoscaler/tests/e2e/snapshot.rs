//! `gpu-autoscaler snapshot` against the fake API server, then the simulator started from the
//! file: the simulated cluster at time 0 equals the recorded one as the controller sees it
//! (nodes with their pods, pending pods, NodePools, DaemonSets, budgets), compared as values.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use autoscaler::replay::{self, API_VERSION, KIND, Sample};
use autoscaler_core::model::{Node as CoreNode, Pod as CorePod};
use autoscaler_core::{Snapshot, labels};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nodepools::NodePool;
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(60);

/// A Ready node of `itype` in us-east-1a, of `pool` when given.
async fn node(c: &Cluster, name: &str, itype: &str, pool: Option<&str>, alloc: serde_json::Value) {
    let mut l = json!({
        "kubernetes.io/hostname": name,
        labels::INSTANCE_TYPE: itype,
        labels::ZONE: "us-east-1a",
        labels::CAPACITY_TYPE: "on-demand",
    });
    let mut taints = json!([]);
    if let Some(p) = pool {
        l[labels::NODEPOOL] = json!(p);
        if p == "gpu" {
            taints = json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]);
        }
    }
    let _: Node = c
        .create(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": l},
            "spec": {"providerID": format!("kwok://{name}"), "taints": taints}}))
        .await;
    let status = json!({"status": {"allocatable": alloc.clone(), "capacity": alloc,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    Api::<Node>::all(c.client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
}

/// A pod bound to `node` (or pending), with `extra` merged into its metadata and spec.
fn pod_on(
    name: &str,
    node: Option<&str>,
    cpu: &str,
    meta: serde_json::Value,
    spec: serde_json::Value,
) -> serde_json::Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                                 "uid": "00000000-0000-0000-0000-000000000009", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "app", "command": ["sleep", "1d"],
                                 "env": [{"name": "A", "value": "b"}],
                                 "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    for (k, v) in meta.as_object().unwrap() {
        p["metadata"][k] = v.clone();
    }
    for (k, v) in spec.as_object().unwrap() {
        p["spec"][k] = v.clone();
    }
    p
}

/// A node as compared: what a node of the snapshot holds, its pods in key order, start times
/// on the recorded clock.
#[derive(Debug, PartialEq)]
struct NodeView {
    name: String,
    labels: autoscaler_core::Labels,
    taints: Vec<autoscaler_core::taints::Taint>,
    allocatable: autoscaler_core::Resources,
    unschedulable: bool,
    pool: Option<String>,
    instance_type: Option<String>,
    pods: Vec<CorePod>,
}

fn view(n: &CoreNode, shift: i64) -> NodeView {
    let mut pods: Vec<CorePod> = n.pods.iter().map(|p| shifted(p, shift)).collect();
    pods.sort_by(|a, b| a.key.cmp(&b.key));
    NodeView {
        name: n.name.clone(),
        labels: n.labels.clone(),
        taints: n.taints.clone(),
        allocatable: n.allocatable.clone(),
        unschedulable: n.unschedulable,
        pool: n.pool.clone(),
        instance_type: n.instance_type.clone(),
        pods,
    }
}

fn shifted(p: &CorePod, shift: i64) -> CorePod {
    let mut p = p.clone();
    if let Some(s) = p.started_at.as_mut() {
        *s += shift;
    }
    p
}

fn nodes(s: &Snapshot, shift: i64) -> Vec<NodeView> {
    let mut v: Vec<NodeView> = s.nodes.iter().map(|n| view(n, shift)).collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

fn pending(s: &Snapshot, shift: i64) -> Vec<CorePod> {
    let mut v: Vec<CorePod> = s.pending.iter().map(|p| shifted(p, shift)).collect();
    v.sort_by(|a, b| a.key.cmp(&b.key));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_replays_as_the_cluster_it_recorded() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "5m")).await;
    let _: NodePool = c.create(cpu_pool("cpu", "5m")).await;
    node(
        &c,
        "gpu-a",
        "g4dn.xlarge",
        Some("gpu"),
        json!({"cpu": "3920m", "memory": "15Gi", "pods": "29", "nvidia.com/gpu": "1"}),
    )
    .await;
    node(
        &c,
        "cpu-a",
        "m5.xlarge",
        Some("cpu"),
        json!({"cpu": "3920m", "memory": "15Gi", "pods": "58"}),
    )
    .await;
    // A node no NodePool manages.
    node(
        &c,
        "system-a",
        "m5.large",
        None,
        json!({"cpu": "1930m", "memory": "7Gi", "pods": "29"}),
    )
    .await;
    let _: DaemonSet = c
        .create(agent_daemonset(json!({"cpu": "100m", "memory": "128Mi"})))
        .await;
    let mut gpu = gpu_pod("train");
    gpu["spec"]["nodeName"] = json!("gpu-a");
    gpu["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "30m",
        "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}"});
    let _: Pod = c.create(gpu).await;
    // Running for ten minutes: its do-not-disrupt duration counts from its start.
    let status = json!({"status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}});
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status("train", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pod status");
    let _: Pod = c
        .create(pod_on("web-0", Some("cpu-a"), "1", json!({"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}),
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": labels::ZONE, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}}],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
                "nodeSelector": {labels::CAPACITY_TYPE: "on-demand"},
                "priority": 100})))
        .await;
    let _: Pod = c
        .create(pod_on(
            "web-1",
            Some("system-a"),
            "500m",
            json!({}),
            json!({}),
        ))
        .await;
    // Fits nowhere: stays pending.
    let _: Pod = c
        .create(pod_on("huge", None, "64", json!({}), json!({})))
        .await;
    let _: PodDisruptionBudget = c
        .create(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;

    // The daemon pods are bound and running on all three nodes, the big pod marked
    // unschedulable: nothing changes any more.
    let pods: Api<Pod> = Api::all(c.client.clone());
    eventually("daemon pods running everywhere", DEADLINE, || async {
        let all = pods.list(&ListParams::default()).await.ok()?.items;
        let agents = all
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("agent"))
            })
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        let huge = all
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("huge"))?;
        let marked = huge
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"));
        (agents == 3 && marked).then_some(())
    })
    .await;

    let file = c.dir.join("snap.yaml");
    let status = Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .args(["snapshot", "-o"])
        .arg(&file)
        .env("KUBECONFIG", &c.kubeconfig)
        .status()
        .expect("snapshot runs");
    assert!(status.success(), "snapshot failed: {status}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with(&format!("---\napiVersion: {API_VERSION}\nkind: {KIND}\n")),
        "{text}"
    );
    assert!(
        !text.contains("last-applied-configuration") && !text.contains("sleep"),
        "not trimmed"
    );

    // The cluster as the controller sees it, from the objects as the API server has them.
    let list = ListParams::default();
    let live = Sample {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        time: jiff::Timestamp::now(),
        node_pools: Api::<NodePool>::all(c.client.clone())
            .list(&list)
            .await
            .unwrap()
            .items,
        nodes: c.nodes().await,
        pods: pods.list(&list).await.unwrap().items,
        daemon_sets: Api::<DaemonSet>::all(c.client.clone())
            .list(&list)
            .await
            .unwrap()
            .items,
        pod_disruption_budgets: Api::<PodDisruptionBudget>::all(c.client.clone())
            .list(&list)
            .await
            .unwrap()
            .items,
        namespaces: Vec::new(),
        complete: true,
    };
    let catalog = Arc::new(providers::catalog::default_catalog());
    let recorded = replay::controller_view(&live, &catalog);
    assert!(recorded.problems.is_empty(), "{:?}", recorded.problems);
    let want = recorded.snapshot;

    // The simulator started from the file.
    let (samples, notes) = replay::read(&file).expect("the file reads");
    assert!(notes.is_empty(), "{notes:?}");
    let loaded = replay::load(&file, &samples, (*catalog).clone()).expect("the snapshot loads");
    assert!(loaded.notes.is_empty(), "{:?}", loaded.notes);
    let scenario = loaded.scenario;
    let workload =
        autoscaler_sim::workload::generate(&scenario, 1, scenario.duration_s, 1000).unwrap();
    let got = autoscaler_sim::initial_state(&scenario, &workload);
    let t0 = samples[0].time.as_second();

    assert_eq!(nodes(&got, t0), nodes(&want, 0));
    assert_eq!(pending(&got, t0), pending(&want, 0));
    assert_eq!(got.pools, want.pools);
    assert_eq!(got.daemonsets, want.daemonsets);
    assert_eq!(got.pdbs, want.pdbs);
    // Not vacuous: what the test put in is there.
    let names: Vec<&str> = want.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["cpu-a", "gpu-a", "system-a"]);
    assert_eq!(want.nodes.iter().map(|n| n.pods.len()).sum::<usize>(), 6);
    assert_eq!(want.pending.len(), 1);
    assert_eq!(want.pools.len(), 2);
    assert_eq!(want.pdbs.len(), 1);
    let train = want.nodes[1]
        .pods
        .iter()
        .find(|p| p.key.name == "train")
        .unwrap();
    assert_eq!(
        train.started_at,
        Some(
            jiff::Timestamp::from_second(1_767_225_600)
                .unwrap()
                .as_second()
        ),
        "the do-not-disrupt duration's start is kept"
    );
}
