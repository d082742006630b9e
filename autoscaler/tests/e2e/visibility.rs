//! Decisions visible where operators look: every managed node's `Consolidatable` NodeClaim
//! condition, `DisruptionBlocked` events, `gpu_autoscaler_unremovable_nodes`, and the
//! `gpu-autoscaler-status` ConfigMap, for a node below its threshold, one behind a PDB, one
//! under do-not-disrupt, one kept by its pool's budget, one at minNodes and one booked by a
//! ProvisioningRequest, all in one cluster.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodepools::{NodeClaim, NodePool};
use serde_json::json;

use crate::harness::*;
use crate::provreq::{kueue_request, provreq_crd};

const DEADLINE: Duration = Duration::from_secs(120);
const ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";

/// The `Consolidatable` condition (status, reason, message) of the live claims of `pool`.
async fn conditions(c: &Cluster, pool: &str) -> Vec<(String, String, String, String)> {
    c.claims()
        .await
        .into_iter()
        .filter(|x| x.spec.node_pool == pool && x.metadata.deletion_timestamp.is_none())
        .filter_map(|x| {
            let node = x.status.as_ref()?.node_name.clone()?;
            let cond = x
                .status?
                .conditions
                .into_iter()
                .find(|k| k.type_ == "Consolidatable")?;
            Some((node, cond.status, cond.reason, cond.message))
        })
        .collect()
}

/// Waits until some claim of `pool` has `Consolidatable` = `status` with `reason`; returns
/// its node and message.
async fn until_condition(c: &Cluster, pool: &str, status: &str, reason: &str) -> (String, String) {
    until_condition_saying(c, pool, status, reason, "").await
}

/// [`until_condition`], and the message starts with `prefix`: a condition the controller
/// wrote before it saw the latest change (a pod deleted) has the same reason but says
/// something else.
async fn until_condition_saying(
    c: &Cluster,
    pool: &str,
    status: &str,
    reason: &str,
    prefix: &str,
) -> (String, String) {
    let found = eventually(
        &format!("{pool}: Consolidatable={status} {reason} {prefix}"),
        DEADLINE,
        || async {
            conditions(c, pool)
                .await
                .into_iter()
                .find(|(_, s, r, m)| s == status && r == reason && m.starts_with(prefix))
                .map(|(n, _, _, m)| (n, m))
        },
    )
    .await;
    eprintln!(
        "{pool}: node {node}: Consolidatable={status} {reason}: {message}",
        node = found.0,
        message = found.1
    );
    found
}

/// The `DisruptionBlocked` events about `name` (a Node or a NodeClaim).
async fn blocked_events(c: &Cluster, name: &str) -> Vec<Event> {
    Api::<Event>::all(c.client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("DisruptionBlocked")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// The claim of `node`.
async fn claim_of(c: &Cluster, node: &str) -> NodeClaim {
    c.claims()
        .await
        .into_iter()
        .find(|x| x.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .expect("the node's claim")
}

fn pool_in<'a>(s: &'a serde_norway::Value, name: &str) -> Option<&'a serde_norway::Value> {
    s["nodePools"]
        .as_sequence()?
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_9a_verdicts_are_conditions_events_metrics_and_a_status_configmap() {
    let crd = provreq_crd();
    let c = Cluster::start_with(&crd.iter().map(String::as_str).collect::<Vec<_>>()).await;
    // `blocked`: a threshold of 1 makes every node a candidate, so only safety rules keep them.
    let pools = [
        lane_pool("blocked", json!({"utilizationThreshold": 1.0}), json!({})),
        lane_pool("idle", json!({"unneededTime": "1h"}), json!({})),
        lane_pool("budget", json!({"budgets": [{"nodes": "0"}]}), json!({})),
        lane_pool("min", json!({}), json!({"minNodes": 1})),
    ];
    for p in pools {
        let _: NodePool = c.create(p).await;
    }
    if crd.is_some() {
        let _: NodePool = c.create(gpu_pool("gpu", "1s")).await;
    }
    let ctl = c.controller(
        "visibility",
        &["--leader-elect=false", "--status-configmap-interval=1s"],
    );
    let dnd = json!({"karpenter.sh/do-not-disrupt": "true"});
    for (name, lane, cpu, ann) in [
        ("web", "blocked", "3", json!({})),
        ("dnd", "blocked", "3", dnd),
        ("idle-1", "idle", "1", json!({})),
        ("budget-1", "budget", "1", json!({})),
        ("min-1", "min", "1", json!({})),
    ] {
        let _: Pod = c.create(lane_pod(name, lane, cpu, ann)).await;
    }
    let _: PodDisruptionBudget = c
        .create(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .await;
    if crd.is_some() {
        kueue_request(
            &c,
            "held",
            ATOMIC,
            1,
            1,
            json!({"BookingDurationSeconds": "3600"}),
        )
        .await;
    } else {
        eprintln!("SKIPPED: the booked-capacity case (no ProvisioningRequest CRD)");
    }
    eventually("every pod bound", DEADLINE, || async {
        for name in ["web", "dnd", "idle-1", "budget-1", "min-1"] {
            bound_to(&c.pod("default", name).await?)?;
        }
        Some(())
    })
    .await;
    // The budget and min pools' nodes empty out: each would go but for its pool.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    for name in ["budget-1", "min-1"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }

    // Conditions, with the numbers.
    let (web, m) = until_condition(&c, "blocked", "False", "PdbBlocked").await;
    assert!(
        m.starts_with("blocked by PDB default/web (allows 0 disruptions); utilization cpu 0.7"),
        "{m}"
    );
    assert!(m.ends_with("against threshold 1.00"), "{m}");
    let (dnd_node, m) = until_condition(&c, "blocked", "False", "DoNotDisrupt").await;
    assert_eq!(
        m.split(';').next(),
        Some("pod default/dnd has karpenter.sh/do-not-disrupt"),
        "{m}"
    );
    let (idle, m) = until_condition(&c, "idle", "True", "Unneeded").await;
    assert!(m.starts_with("unneeded since "), "{m}");
    assert!(
        m.contains("removable once unneededTime 1h is over at "),
        "{m}"
    );
    assert!(m.contains("utilization cpu 0.2"), "{m}");
    // Until the controller sees `budget-1` gone, the node is underutilized, not empty, and
    // its condition says so.
    let (budget, m) = until_condition_saying(
        &c,
        "budget",
        "False",
        "BudgetExhausted",
        "disruption budget of NodePool budget exhausted for Empty",
    )
    .await;
    assert!(m.contains("utilization cpu 0.00"), "{m}");
    let (min, m) = until_condition(&c, "min", "False", "AtMinNodes").await;
    assert!(m.starts_with("NodePool min is at minNodes 1"), "{m}");
    let booked = if crd.is_some() {
        let (n, m) = until_condition(&c, "gpu", "False", "Booked").await;
        assert!(
            m.starts_with("capacity booked for a ProvisioningRequest"),
            "{m}"
        );
        Some(n)
    } else {
        None
    };

    // One DisruptionBlocked event per blocked node (and its claim), none for the idle one.
    let mut blocked: Vec<(&str, &str)> = vec![
        (&web, "blocked by PDB default/web"),
        (&dnd_node, "karpenter.sh/do-not-disrupt"),
        (&budget, "disruption budget of NodePool budget exhausted"),
        (&min, "NodePool min is at minNodes 1"),
    ];
    if let Some(n) = &booked {
        blocked.push((n, "capacity booked for a ProvisioningRequest"));
    }
    for (node, words) in &blocked {
        let events = eventually(&format!("an event for {node}"), DEADLINE, || async {
            let e = blocked_events(&c, node).await;
            (!e.is_empty()).then_some(e)
        })
        .await;
        let note = events[0].note.clone().unwrap_or_default();
        eprintln!(
            "event about {node}: {} {note}",
            events[0].type_.as_deref().unwrap_or("")
        );
        assert!(note.starts_with("cannot disrupt node: "), "{note}");
        assert!(note.contains(words), "{note}");
        assert_eq!(events[0].type_.as_deref(), Some("Normal"));
    }
    assert!(blocked_events(&c, &idle).await.is_empty());

    // The metric, by pool and reason; the idle node is a candidate, not unremovable.
    for (pool, reason) in [
        ("blocked", "PdbBlocked"),
        ("blocked", "DoNotDisrupt"),
        ("budget", "BudgetExhausted"),
        ("min", "AtMinNodes"),
    ]
    .into_iter()
    .chain(booked.iter().map(|_| ("gpu", "Booked")))
    {
        let labels = [("nodepool", pool), ("reason", reason)];
        eventually(
            &format!("unremovable {pool} {reason}"),
            DEADLINE,
            || async {
                (ctl.metric_with("gpu_autoscaler_unremovable_nodes", &labels) == Some(1.0))
                    .then_some(())
            },
        )
        .await;
    }
    let page = ctl.metrics_page().unwrap();
    for l in page
        .lines()
        .filter(|l| l.starts_with("gpu_autoscaler_unremovable_nodes"))
    {
        eprintln!("{l}");
    }
    assert!(
        !page.contains("unremovable_nodes{nodepool=\"idle\""),
        "{page}"
    );

    // The status ConfigMap: health, counts, kept reasons, the scale-ups.
    let s = eventually("the status summary", DEADLINE, || async {
        let s = summary(&c).await?;
        let b = pool_in(&s, "budget")?;
        (b["kept"]["BudgetExhausted"].as_i64() == Some(1)).then_some(s)
    })
    .await;
    assert_eq!(s["health"].as_str(), Some("Healthy"), "{s:?}");
    assert_eq!(s["leader"].as_str(), Some("visibility"));
    let idle_pool = pool_in(&s, "idle").unwrap();
    assert_eq!(idle_pool["consolidatable"].as_i64(), Some(1), "{s:?}");
    assert_eq!(idle_pool["nodes"]["ready"].as_i64(), Some(1), "{s:?}");
    let blocked_pool = pool_in(&s, "blocked").unwrap();
    assert_eq!(blocked_pool["nodes"]["ready"].as_i64(), Some(2), "{s:?}");
    let decisions = s["recentDecisions"].as_sequence().unwrap();
    for pool in ["blocked", "idle", "budget", "min"] {
        assert!(
            decisions
                .iter()
                .any(|d| d["action"] == "ScaleUp" && d["nodePool"].as_str() == Some(pool)),
            "a scale-up of {pool}: {s:?}"
        );
    }

    // No write storm: across three more disruption rounds (the summary says when each ran),
    // the idle claim is not written again, and no node is told twice.
    let before = claim_of(&c, &idle).await;
    let seen = std::sync::Mutex::new(Vec::new());
    eventually("three more disruption rounds", DEADLINE, || async {
        let round = summary(&c).await?["lastDisruptionRound"]
            .as_str()?
            .to_string();
        let mut seen = seen.lock().unwrap();
        if seen.last() != Some(&round) {
            seen.push(round);
        }
        (seen.len() >= 4).then_some(())
    })
    .await;
    let after = claim_of(&c, &idle).await;
    assert_eq!(
        before.metadata.resource_version, after.metadata.resource_version,
        "the idle claim was not written again"
    );
    for (node, _) in &blocked {
        // One about the Node and one about its NodeClaim (they share the name), each once.
        let events = blocked_events(&c, node).await;
        let mut kinds: Vec<&str> = events
            .iter()
            .filter_map(|e| e.regarding.as_ref()?.kind.as_deref())
            .collect();
        kinds.sort();
        assert_eq!(kinds, ["Node", "NodeClaim"], "{events:?}");
        assert!(
            events.iter().all(|e| e.series.is_none()),
            "told once: {events:?}"
        );
    }

    // The budget allows it again: the node goes, the summary records the scale-down, and the
    // metric's series for the budget is gone.
    Api::<NodePool>::all(c.client.clone())
        .patch(
            "budget",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disruption": {"budgets": [{"nodes": "100%"}]}}})),
        )
        .await
        .unwrap();
    let s = eventually("a scale-down of the budget pool", DEADLINE, || async {
        let s = summary(&c).await?;
        s["recentDecisions"]
            .as_sequence()?
            .iter()
            .any(|d| {
                d["action"] == "ScaleDown"
                    && d["nodePool"].as_str() == Some("budget")
                    && d["objects"][0].as_str() == Some(budget.as_str())
            })
            .then_some(s)
    })
    .await;
    // The booked node still says Booked once its GPU is allocatable and the booking's
    // phantom pod fills it.
    if let Some(n) = &booked {
        let gpu = conditions(&c, "gpu").await;
        assert_eq!(gpu.len(), 1, "{gpu:?}");
        assert_eq!((&gpu[0].0, gpu[0].2.as_str()), (n, "Booked"), "{gpu:?}");
        assert!(gpu[0].3.contains("utilization nvidia.com/gpu"), "{gpu:?}");
    }
    let labels = [("nodepool", "budget"), ("reason", "BudgetExhausted")];
    eventually("the budget's series gone", DEADLINE, || async {
        ctl.metric_with("gpu_autoscaler_unremovable_nodes", &labels)
            .is_none()
            .then_some(())
    })
    .await;
    eprintln!("status summary:\n{}", serde_norway::to_string(&s).unwrap());
}
