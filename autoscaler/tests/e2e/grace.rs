//! `terminationGracePeriod` end to end on kwok: an expired node whose only pod may not be
//! disrupted (`karpenter.sh/do-not-disrupt` and a PodDisruptionBudget allowing nothing) is
//! drained anyway once its NodeClaim's grace period runs out: the deadline is recorded on the
//! claim, the pod is deleted, not evicted, its own grace period before the deadline, the node
//! goes and the Deployment's new pod runs on a new node.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use nodepools::NodePool;
use serde_json::json;

use super::harness::*;
use super::pod_problems::events_of;

const DEADLINE: Duration = Duration::from_secs(120);

/// The NodePool's grace period, seconds.
const GRACE_S: i64 = 8;

/// The guarded pod's own `terminationGracePeriodSeconds`.
const POD_GRACE_S: i64 = 2;

/// The guarded pods that run and are not being deleted.
async fn guarded(c: &Cluster) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .list(&ListParams::default().labels("app=guarded"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_an_expired_node_with_a_protected_pod_goes_at_its_termination_grace_period() {
    let c = Cluster::start().await;
    let mut pool = cpu_pool("cpu", "1h");
    pool["spec"]["template"]["expireAfter"] = json!("15s");
    pool["spec"]["template"]["terminationGracePeriod"] = json!(format!("{GRACE_S}s"));
    let _: NodePool = c.create(pool).await;
    let _: PodDisruptionBudget = c
        .create(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
        }))
        .await;
    let _ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Deployment = c
        .create(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "guarded", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "guarded"}},
                     "template": {"metadata": {"labels": {"app": "guarded"},
                                               "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                                  "spec": {"terminationGracePeriodSeconds": POD_GRACE_S,
                                           "containers": [{"name": "c", "image": "c",
                                      "resources": {"requests": {"cpu": "1"}}}]}}}
        }))
        .await;
    let (first, pod) = eventually("the guarded pod to run", DEADLINE, || async {
        let p = guarded(&c).await.into_iter().next()?;
        Some((bound_to(&p)?, p.metadata.name.clone()?))
    })
    .await;
    // The expired claim, while it is being deleted, records its deadline.
    let (began, deadline) = eventually("the drain deadline on the claim", DEADLINE, || async {
        c.claims().await.into_iter().find_map(|cl| {
            let began = cl.metadata.deletion_timestamp.as_ref()?.0;
            let at = cl
                .metadata
                .annotations
                .as_ref()?
                .get("karpenter.sh/nodeclaim-termination-timestamp")?
                .parse::<jiff::Timestamp>()
                .ok()?;
            Some((began, at))
        })
    })
    .await;
    assert_eq!(
        deadline.as_second(),
        began.as_second() + GRACE_S,
        "the deadline is the claim's deletion plus the grace period"
    );
    let second = eventually(
        "the guarded pod to run on another node",
        DEADLINE,
        || async {
            let p = guarded(&c).await.into_iter().next()?;
            let created = p.metadata.creation_timestamp.as_ref()?.0;
            bound_to(&p).filter(|n| *n != first).map(|n| (n, created))
        },
    )
    .await;
    eventually("the expired node to be gone", DEADLINE, || async {
        (!c.nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(first.as_str())))
        .then_some(())
    })
    .await;
    // Held until its own grace period before the deadline (a second's slack: the deadline
    // has whole seconds), not evicted at once as an unprotected pod would be.
    assert!(
        second.1.as_second() >= deadline.as_second() - POD_GRACE_S - 1,
        "the replacement pod was created at {}, before {} - {POD_GRACE_S}s",
        second.1,
        deadline
    );
    let told = events_of(&c, &pod).await;
    let deleted: Vec<_> = told
        .iter()
        .filter(|(reason, _, _)| reason == "Deleted")
        .collect();
    // Deleted and told once, though rounds ran while the cache caught up.
    assert!(
        deleted.len() == 1
            && deleted[0].1.contains("terminationGracePeriod")
            && deleted[0].1.contains(&first)
            && deleted[0].2.is_none_or(|n| n <= 1),
        "{told:?}"
    );
    assert_ne!(first, second.0);
}
