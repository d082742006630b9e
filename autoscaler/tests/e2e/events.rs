//! What operators see when capacity is the problem: `LimitReached` on a pod a NodePool's limit
//! holds back and on that NodePool, and the NodePool condition `InstanceTypesAvailable` (false
//! while the requirements match no instance type, true once fixed, false again while every
//! matching offering is refused, with `InsufficientCapacity` on the claim that was refused).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nodepools::NodePool;
use providers::kwok::{KwokInstance, OUTAGE_LABEL};
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(60);

/// `(reason, note)` of every event about the object of `kind` named `name`.
async fn events_about(c: &Cluster, kind: &str, name: &str) -> Vec<(String, String)> {
    Api::<Event>::all(c.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// The first event of `reason` about the object, once there is one.
async fn event_note(c: &Cluster, kind: &str, name: &str, reason: &str) -> String {
    eventually(
        &format!("a {reason} event on {kind} {name}"),
        DEADLINE,
        || async {
            events_about(c, kind, name)
                .await
                .into_iter()
                .find(|(r, _)| r == reason)
                .map(|(_, note)| note)
        },
    )
    .await
}

/// `(status, reason, message)` of the NodePool's `InstanceTypesAvailable` condition, once it
/// has `status`.
async fn instance_types_available(c: &Cluster, pool: &str, status: &str) -> (String, String) {
    eventually(
        &format!("InstanceTypesAvailable={status} on {pool}"),
        DEADLINE,
        || async {
            let np = c.pool(pool).await;
            let cond = np
                .status?
                .conditions
                .into_iter()
                .find(|x| x.type_ == "InstanceTypesAvailable")?;
            (cond.status == status).then_some((cond.reason, cond.message))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_limit_reached_on_the_held_back_pod_and_on_its_nodepool() {
    let c = Cluster::start().await;
    let mut pool = gpu_pool("gpu", "1h");
    pool["spec"]["limits"] = json!({"nodes": "1"});
    let _: NodePool = c.create(pool).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Pod = c.create(gpu_pod("first")).await;
    eventually("the first pod's claim", DEADLINE, || async {
        (c.claims().await.len() == 1).then_some(())
    })
    .await;
    // One GPU per g4dn.xlarge: the second pod needs a second node, which the limit refuses.
    let _: Pod = c.create(gpu_pod("second")).await;
    let note = event_note(&c, "Pod", "second", "LimitReached").await;
    assert!(
        note.contains("NodePool gpu limit nodes=1 reached"),
        "{note}\n{}",
        ctl.log()
    );
    let note = event_note(&c, "NodePool", "gpu", "LimitReached").await;
    assert!(
        note.contains("limits reached (nodes=1)") && note.contains("default/second"),
        "{note}"
    );
    // Held back, not launched for, and not told the generic NotTriggerScaleUp instead.
    assert_eq!(c.claims().await.len(), 1);
    let second = events_about(&c, "Pod", "second").await;
    assert!(
        !second.iter().any(|(r, _)| r == "NotTriggerScaleUp"),
        "{second:?}"
    );
    let first = events_about(&c, "Pod", "first").await;
    assert!(!first.iter().any(|(r, _)| r == "LimitReached"), "{first:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_instance_types_available_until_fixed_and_while_every_offering_is_out() {
    let c = Cluster::start().await;
    // A typo in the only instance type: nothing can ever be launched for this pool.
    let mut pool = gpu_pool("gpu", "1h");
    pool["spec"]["template"]["requirements"][0]["values"] = json!(["g4dn.xlarg"]);
    let _: NodePool = c.create(pool).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let (reason, message) = instance_types_available(&c, "gpu", "False").await;
    assert_eq!(reason, "NoInstanceTypeMatches", "{message}");
    assert!(
        message.contains("the requirements admit none of the"),
        "{message}"
    );

    // Fixed: the condition turns true.
    Api::<NodePool>::all(c.client.clone())
        .patch(
            "gpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ]}}})),
        )
        .await
        .expect("patch the NodePool");
    let (reason, message) = instance_types_available(&c, "gpu", "True").await;
    assert_eq!(reason, "InstanceTypesFound", "{message}");

    // Every on-demand g4dn.xlarge offering runs out: the launch for a pod is refused, the
    // claim says InsufficientCapacity, and the pool has nothing available.
    let catalog = providers::catalog::default().for_provider("aws");
    let g4dn = catalog
        .iter()
        .find(|t| t.name == "g4dn.xlarge")
        .expect("g4dn.xlarge in the embedded catalog");
    let instances = Api::<KwokInstance>::all(c.client.clone());
    for (i, o) in g4dn
        .offerings
        .iter()
        .filter(|o| o.capacity_type.as_str() == "on-demand")
        .enumerate()
    {
        let outage: KwokInstance = serde_json::from_value(json!({
            "apiVersion": "kwok.gpu-autoscaler.dev/v1alpha1", "kind": "KwokInstance",
            "metadata": {"name": format!("outage-{i}"), "labels": {OUTAGE_LABEL: "true"}},
            "spec": {"cluster": "-", "claim": "", "pool": "", "instanceType": "g4dn.xlarge",
                     "zone": o.zone, "capacityType": "on-demand"}
        }))
        .unwrap();
        instances
            .create(&PostParams::default(), &outage)
            .await
            .unwrap();
    }
    let _: Pod = c.create(gpu_pod("p")).await;
    let claim = eventually("a claim for the pod", DEADLINE, || async {
        c.claims()
            .await
            .first()
            .and_then(|x| x.metadata.name.clone())
    })
    .await;
    let note = event_note(&c, "NodeClaim", &claim, "InsufficientCapacity").await;
    assert!(note.contains("g4dn.xlarge"), "{note}");
    let (reason, message) = instance_types_available(&c, "gpu", "False").await;
    assert_eq!(reason, "OfferingsUnavailable", "{message}\n{}", ctl.log());
    assert!(
        message.contains("1 instance type(s) the requirements admit"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_launch_failed_on_a_claim_no_offering_can_serve() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "1h")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    // A NodeClaim written by hand for a zone the catalog does not have: the cloud is asked
    // with no candidate offering and refuses the request itself (not for capacity).
    let _: nodepools::NodeClaim = c
        .create(json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "by-hand"},
            "spec": {"nodePool": "gpu",
                     "requirements": [
                         {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]},
                         {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["nowhere-1z"]}],
                     "resources": {"requests": {"cpu": "1"}}}
        }))
        .await;
    let note = event_note(&c, "NodeClaim", "by-hand", "LaunchFailed").await;
    assert!(
        note.contains("no candidate offerings"),
        "{note}\n{}",
        ctl.log()
    );
    assert!(c.instances().await.is_empty(), "nothing launched");
}
