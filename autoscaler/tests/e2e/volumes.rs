//! Volume topology end to end on kwok: a pod whose claim is bound to a volume in one zone
//! gets its node in that zone (the harness scheduler, independent of the planner, binds a
//! pod only where its bound volumes' node affinity allows), a pod waiting for its first
//! consumer gets a node in a zone its StorageClass allows, a pod whose volume has only a zone
//! label (no node affinity) gets its node in that zone, and a pod whose claim does not exist
//! launches nothing and is told why. A node whose CSINode lets the EBS driver attach one
//! volume takes no second pod with an EBS claim: a node is launched for it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use nodepools::NodePool;
use serde_json::{Value, json};

use super::harness::*;
use super::pod_problems::events_of;

const DEADLINE: Duration = Duration::from_secs(60);

fn pod_with_claim(name: &str, claim: &str) -> Value {
    let mut p = cpu_pod(name, "1", [("app", name)].into());
    p["spec"]["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
    p
}

fn claim(name: &str, volume: Option<&str>, class: &str) -> Value {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "resources": {"requests": {"storage": "10Gi"}}}});
    if let Some(v) = volume {
        c["spec"]["volumeName"] = json!(v);
        c["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    }
    c
}

async fn zone_of(c: &Cluster, pod: &str) -> Option<String> {
    let node = bound_to(&c.pod("default", pod).await?)?;
    let n: Node = c
        .nodes()
        .await
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))?;
    n.metadata
        .labels?
        .get("topology.kubernetes.io/zone")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_pods_get_nodes_where_their_volumes_are_and_a_missing_claim_launches_nothing() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "60s")).await;
    // Every zone costs the same; the volume is in the third one.
    let _: PersistentVolume = c
        .create(json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-c"},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1c"]}]}]}}}}))
        .await;
    // An in-tree style volume: no node affinity, only the beta zone label the scheduler's
    // VolumeZone filter reads.
    let _: PersistentVolume = c
        .create(json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-b", "labels": {
                "failure-domain.beta.kubernetes.io/zone": "us-east-1b",
                "failure-domain.beta.kubernetes.io/region": "us-east-1"}},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                "awsElasticBlockStore": {"volumeID": "vol-2"}}}))
        .await;
    let _: StorageClass = c
        .create(
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["us-east-1d"]}]}]}),
        )
        .await;
    let _: PersistentVolumeClaim = c.create(claim("data", Some("pv-c"), "zonal")).await;
    let _: PersistentVolumeClaim = c.create(claim("fresh", None, "zonal")).await;
    let _: PersistentVolumeClaim = c.create(claim("old", Some("pv-b"), "zonal")).await;
    let _ctl = c.controller("solo", &["--leader-elect=false"]);
    for (pod, claim) in [
        ("db", "data"),
        ("cache", "fresh"),
        ("legacy", "old"),
        ("orphan", "missing"),
    ] {
        let _: Pod = c.create(pod_with_claim(pod, claim)).await;
    }
    let zone = eventually("db to run in its volume's zone", DEADLINE, || async {
        zone_of(&c, "db").await
    })
    .await;
    assert_eq!(zone, "us-east-1c");
    let zone = eventually("cache to run in its class's zone", DEADLINE, || async {
        zone_of(&c, "cache").await
    })
    .await;
    assert_eq!(zone, "us-east-1d");
    let zone = eventually(
        "legacy to run in its volume label's zone",
        DEADLINE,
        || async { zone_of(&c, "legacy").await },
    )
    .await;
    assert_eq!(zone, "us-east-1b");
    eventually("the orphan's NotTriggerScaleUp event", DEADLINE, || async {
        events_of(&c, "orphan")
            .await
            .iter()
            .any(|(reason, note, _)| {
                reason == "NotTriggerScaleUp"
                    && note.contains("PersistentVolumeClaim default/missing not found")
            })
            .then_some(())
    })
    .await;
    // One node per zone the three pods needed, none for the orphan.
    let claims = c.claims().await;
    assert_eq!(claims.len(), 3, "{claims:#?}");
    assert!(bound_to(&c.pod("default", "orphan").await.unwrap()).is_none());
    // `explain` gives the controller's reason.
    let (code, text, err) = run_explain(&c, &["pod", "default/orphan"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("PersistentVolumeClaim default/missing not found"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_node_at_its_csi_attach_limit_gets_a_second_node_for_the_next_volume() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let _: StorageClass = c
        .create(
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "ebs"}, "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer"}),
        )
        .await;
    for name in ["data-0", "data-1"] {
        let _: PersistentVolumeClaim = c.create(claim(name, None, "ebs")).await;
    }
    let _ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Pod = c.create(pod_with_claim("db-0", "data-0")).await;
    let first = eventually("db-0 to run", DEADLINE, || async {
        bound_to(&c.pod("default", "db-0").await?)
    })
    .await;
    // The EBS driver's node plugin registers: one volume per node (db-0's is attached).
    let _: CSINode = c
        .create(json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": first},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1",
                "allocatable": {"count": 1}}]}}))
        .await;
    // db-1 fits the first node's cpu (an m5.xlarge holds four such pods) but not its
    // attach limit: without CSINode counts the planner would leave it pending for good.
    let _: Pod = c.create(pod_with_claim("db-1", "data-1")).await;
    let second = eventually("db-1 to run", DEADLINE, || async {
        bound_to(&c.pod("default", "db-1").await?)
    })
    .await;
    assert_ne!(first, second);
    assert_eq!(c.claims().await.len(), 2);
}
