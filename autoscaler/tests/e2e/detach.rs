//! A drained node's instance waits for its pods' volumes to detach (Karpenter's termination
//! controller, "should wait for volume attachments"): the VolumeAttachments of a
//! PersistentVolume hold it until they are gone, one of an inline volume does not, and the
//! NodeClaim's `terminationGracePeriod` ends the wait. The fake API server runs no
//! attach-detach controller, so the test removes the attachment itself.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use nodepools::{NodeClaim, NodePool};
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

/// A VolumeAttachment on `node` of PersistentVolume `pv` (`None`: of an inline volume).
fn attachment(name: &str, node: &str, pv: Option<&str>) -> serde_json::Value {
    let source = match pv {
        Some(pv) => json!({"persistentVolumeName": pv}),
        None => json!({"inlineVolumeSpec": {"csi": {"driver": "ebs.csi.aws.com",
                                                    "volumeHandle": "vol-inline"}}}),
    };
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source}
    })
}

/// A cluster whose one node runs the plain pod `web`, with the pool `pool`; the node's name
/// and its claim's.
async fn one_node(c: &Cluster, pool: serde_json::Value) -> (String, String) {
    let _: NodePool = c.create(pool).await;
    let _: Pod = c
        .create(cpu_pod("web", "500m", BTreeMap::from([("app", "web")])))
        .await;
    eventually("web bound to a registered node", DEADLINE, || async {
        let node = bound_to(&c.pod("default", "web").await?)?;
        let claim = c.claims().await.into_iter().find(|cl| {
            cl.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
        })?;
        Some((node, claim.name_any()))
    })
    .await
}

/// The `VolumesDetached` condition of claim `claim`: status, reason and message.
async fn detach_condition(c: &Cluster, claim: &str) -> Option<(String, String, String)> {
    let cl: NodeClaim = c
        .claims()
        .await
        .into_iter()
        .find(|cl| cl.name_any() == claim)?;
    let k = cl
        .status?
        .conditions
        .into_iter()
        .find(|k| k.type_ == "VolumesDetached")?;
    Some((k.status, k.reason, k.message))
}

async fn instance_runs(c: &Cluster, node: &str) -> bool {
    c.instances().await.iter().any(|i| i.name_any() == node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_drained_nodes_instance_waits_until_its_volumes_are_detached() {
    let c = Cluster::start().await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let (node, claim) = one_node(&c, cpu_pool("cpu", "1h")).await;
    let _: VolumeAttachment = c.create(attachment("va-web", &node, Some("pv-web"))).await;
    let _: VolumeAttachment = c.create(attachment("va-inline", &node, None)).await;
    let _: VolumeAttachment = c
        .create(attachment("va-elsewhere", "another-node", Some("pv-other")))
        .await;
    c.delete_node(&node).await;
    eventually(
        "the claim saying it awaits the attachment",
        DEADLINE,
        || async {
            detach_condition(&c, &claim)
                .await
                .filter(|(s, r, _)| s == "Unknown" && r == "AwaitingVolumeDetachment")
        },
    )
    .await;
    assert!(
        c.pod("default", "web")
            .await
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the node was drained first"
    );
    // Rounds that saw the node drained leave the instance running.
    ctl.more_loops("round", 3).await;
    assert!(
        instance_runs(&c, &node).await,
        "the instance waits for the attachment"
    );
    assert!(
        c.nodes().await.iter().any(|n| n.name_any() == node),
        "the node waits too"
    );
    let told = c.events("Node", &node, "AwaitingVolumeDetachment").await;
    assert!(
        told.len() == 1 && told[0].series.as_ref().is_none_or(|s| s.count <= 1),
        "one event on the node, not one per round: {told:?}"
    );
    let note = told[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("va-web") && !note.contains("va-inline") && !note.contains("va-elsewhere"),
        "only the node's attachment of a PersistentVolume holds it: {note}"
    );
    // The attach-detach controller's part: the volume is detached.
    Api::<VolumeAttachment>::all(c.client.clone())
        .delete("va-web", &DeleteParams::default())
        .await
        .expect("deleting the attachment");
    eventually("the instance and the node gone", DEADLINE, || async {
        let gone = !instance_runs(&c, &node).await
            && !c.nodes().await.iter().any(|n| n.name_any() == node);
        gone.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_the_termination_grace_period_ends_the_wait_for_volumes() {
    let c = Cluster::start().await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let mut pool = cpu_pool("cpu", "1h");
    pool["spec"]["template"]["terminationGracePeriod"] = json!("10s");
    let (node, claim) = one_node(&c, pool).await;
    let _: VolumeAttachment = c
        .create(attachment("va-stuck", &node, Some("pv-stuck")))
        .await;
    c.delete_node(&node).await;
    eventually(
        "the controller awaiting the attachment",
        DEADLINE,
        || async {
            ctl.log()
                .contains(
                    "the instance is terminated once these VolumeAttachments are gone: va-stuck",
                )
                .then_some(())
        },
    )
    .await;
    let deadline = eventually("the drain deadline on the claim", DEADLINE, || async {
        let cl = c
            .claims()
            .await
            .into_iter()
            .find(|cl| cl.name_any() == claim)?;
        cl.metadata
            .annotations?
            .get("karpenter.sh/nodeclaim-termination-timestamp")?
            .parse::<jiff::Timestamp>()
            .ok()
    })
    .await;
    eventually(
        "the instance gone though the attachment stays",
        DEADLINE,
        || async { (!instance_runs(&c, &node).await).then_some(()) },
    )
    .await;
    let gone_at = jiff::Timestamp::now();
    assert!(
        gone_at >= deadline,
        "the instance went at {gone_at}, before the deadline {deadline}"
    );
    let left = Api::<VolumeAttachment>::all(c.client.clone())
        .get_opt("va-stuck")
        .await
        .expect("reading the attachment");
    assert!(left.is_some(), "nothing but the test removes attachments");
    assert!(
        ctl.log()
            .contains("the terminationGracePeriod ran out with VolumeAttachments left: va-stuck"),
        "the controller says why it went on"
    );
}
