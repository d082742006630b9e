//! The Cluster Autoscaler's cadence settings through the binary: scale-down delays counted per
//! NodePool, the unready-node halt (condition, events, status ConfigMap, no launch, recovery),
//! and the scale-down of a node that broke down (`--scale-down-unready-time`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nodepools::{NodeClaim, NodePool};
use serde_json::{Value, json};

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(60);

/// A CPU NodePool of m5.xlarge nodes with extra `disruption` fields.
fn pool_with(name: &str, unneeded: &str, disruption: Value) -> Value {
    let mut p = cpu_pool(name, unneeded);
    for (k, v) in disruption.as_object().expect("object") {
        p["spec"]["disruption"][k] = v.clone();
    }
    p
}

/// A 3-CPU pod (one per m5.xlarge) for NodePool `pool`.
fn pool_pod(name: &str, pool: &str) -> Value {
    let mut p = cpu_pod(name, "3", BTreeMap::from([("app", name)]));
    p["spec"]["nodeSelector"] = json!({"gpu-autoscaler.dev/nodepool": pool});
    p
}

async fn complete(c: &Cluster, pod: &str) {
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status(
            pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
}

async fn bound(c: &Cluster, pod: &str) -> Option<String> {
    bound_to(&c.pod("default", pod).await?)
}

/// A condition of `t` among `conds`: (status, reason, message).
fn condition(conds: &[Condition], t: &str) -> Option<(String, String, String)> {
    let c = conds.iter().find(|c| c.type_ == t)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn claim_condition(cl: &NodeClaim, t: &str) -> Option<(String, String, String)> {
    condition(&cl.status.as_ref()?.conditions, t)
}

fn pool_condition(np: &NodePool, t: &str) -> Option<(String, String, String)> {
    condition(&np.status.as_ref()?.conditions, t)
}

async fn claim_of_pool(c: &Cluster, pool: &str) -> Option<NodeClaim> {
    c.claims()
        .await
        .into_iter()
        .find(|cl| cl.spec.node_pool == pool)
}

/// Pool B's node goes while pool A, which scaled up after B, still cools down: each pool's
/// `--scale-down-delay-after-add` runs on its own clock (a global clock would have held B until
/// A's delay was over), and A's own `scaleDownDelayAfterAdd` (10m) overrides the flag (20s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cadence_pool_b_scales_down_while_pool_a_cools() {
    const DELAY_S: i64 = 20;
    let c = Cluster::start().await;
    let _: NodePool = c
        .create(pool_with(
            "a",
            "1s",
            json!({"scaleDownDelayAfterAdd": "10m"}),
        ))
        .await;
    let _: NodePool = c.create(pool_with("b", "1s", json!({}))).await;
    let _ctl = c.controller(
        "cadence",
        &[
            "--leader-elect=false",
            &format!("--scale-down-delay-after-add={DELAY_S}s"),
            "--kwok-ready-delay=3s",
        ],
    );
    // B scales up first; A once B's node runs its pod, a few seconds later.
    let _: Pod = c.create(pool_pod("b1", "b")).await;
    let b_node = eventually("b1 bound", DEADLINE, || bound(&c, "b1")).await;
    let b_claim = claim_of_pool(&c, "b").await.expect("B's claim");
    let b_at = b_claim.metadata.creation_timestamp.clone().expect("time").0;
    let _: Pod = c.create(pool_pod("a1", "a")).await;
    let a_node = eventually("a1 bound", DEADLINE, || bound(&c, "a1")).await;
    let a_claim = claim_of_pool(&c, "a").await.expect("A's claim");
    let a_at = a_claim.metadata.creation_timestamp.clone().expect("time").0;
    assert!(
        a_at.as_second() > b_at.as_second(),
        "A scaled up at {a_at}, not after B at {b_at}"
    );
    complete(&c, "b1").await;
    complete(&c, "a1").await;
    // B's pause, as its NodeClaim says it while it waits, never ends later than B's own scale-up
    // plus the delay (A's scale-up does not move it); then B's node goes.
    let paused_until = std::sync::Mutex::new(Vec::new());
    eventually("B's node removed", DEADLINE, || {
        let (c, b_node, b_claim, paused_until) = (&c, &b_node, &b_claim, &paused_until);
        async move {
            if let Some(cl) = c
                .claims()
                .await
                .into_iter()
                .find(|cl| cl.name_any() == b_claim.name_any())
                && let Some((_, reason, message)) = claim_condition(&cl, "Consolidatable")
                && reason == "ScaleDownPaused"
            {
                paused_until.lock().unwrap().push(message);
            }
            c.nodes()
                .await
                .iter()
                .all(|n| n.name_any() != *b_node)
                .then_some(())
        }
    })
    .await;
    let paused_until = paused_until.into_inner().unwrap();
    assert!(
        !paused_until.is_empty(),
        "B's claim never said it was paused"
    );
    let until_b = jiff::Timestamp::from_second(b_at.as_second() + DELAY_S).expect("time");
    for m in &paused_until {
        assert!(m.contains("NodePool b"), "{m}");
        let until: jiff::Timestamp = m
            .rsplit(" until ")
            .next()
            .and_then(|t| t.split(';').next())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("no end in {m:?}"));
        assert!(
            until.as_second() <= until_b.as_second() + 1,
            "B's pause ran to {until}, past its own scale-up at {b_at} + {DELAY_S}s \
             (A scaled up at {a_at}): {m}"
        );
    }
    // A is still cooling: its node stays, and its claim says so.
    assert!(
        c.nodes().await.iter().any(|n| n.name_any() == a_node),
        "A's node went while A was cooling down"
    );
    let (status, reason, message) = eventually("A's claim says it is paused", DEADLINE, || async {
        claim_condition(&claim_of_pool(&c, "a").await?, "Consolidatable")
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ScaleDownPaused"),
        "{message}"
    );
    assert!(message.contains("NodePool a"), "{message}");
}

/// An event of `reason` about NodePool `pool`, its note.
async fn pool_event(c: &Cluster, pool: &str, reason: &str) -> Option<String> {
    Api::<Event>::all(c.client.clone())
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("NodePool")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pool)
        })
        .and_then(|e| e.note)
}

/// The unready-node halt: four of four nodes unready (more than 3 and more than 45 %) stop
/// scaling; the NodePool's `ClusterHealthy` condition, a `ClusterUnhealthy` event and the
/// status ConfigMap say so, and a new pending pod launches nothing; once the nodes are Ready
/// again scaling resumes (condition, `ClusterHealthy` event) and the pod gets its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cadence_unready_nodes_halt_scaling_until_they_recover() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let _ctl = c.controller(
        "halt",
        &[
            "--leader-elect=false",
            "--status-configmap-interval=1s",
            "--scale-down-unready-enabled=false",
        ],
    );
    for i in 0..4 {
        let _: Pod = c.create(pool_pod(&format!("w{i}"), "cpu")).await;
    }
    let mut nodes = Vec::new();
    for i in 0..4 {
        let name = format!("w{i}");
        nodes.push(eventually("the pods bound", DEADLINE, || bound(&c, &name)).await);
    }
    // Only nodes that finished starting (their claims initialized) count as unready later.
    eventually("the four claims initialized", DEADLINE, || async {
        let claims = c.claims().await;
        (claims.len() == 4
            && claims
                .iter()
                .all(|cl| claim_condition(cl, "Initialized").is_some_and(|(s, _, _)| s == "True")))
        .then_some(())
    })
    .await;
    eventually("the pool healthy", DEADLINE, || async {
        let (s, reason, _) = pool_condition(&c.pool("cpu").await, "ClusterHealthy")?;
        (s == "True" && reason == "UnreadyNodesWithinLimits").then_some(())
    })
    .await;
    for n in &nodes {
        c.set_ready(n, "Unknown").await;
    }
    let message = eventually("the pool's ClusterHealthy False", DEADLINE, || async {
        let (s, reason, m) = pool_condition(&c.pool("cpu").await, "ClusterHealthy")?;
        (s == "False" && reason == "TooManyUnreadyNodes").then_some(m)
    })
    .await;
    assert!(message.contains("4 of 4 nodes unready"), "{message}");
    let note = eventually("a ClusterUnhealthy event", DEADLINE, || {
        pool_event(&c, "cpu", "ClusterUnhealthy")
    })
    .await;
    assert!(note.contains("scaling halted"), "{note}");
    eventually("the status ConfigMap to say so", DEADLINE, || async {
        let s = summary(&c).await?;
        (s["health"].as_str() == Some("Unhealthy")
            && s["readiness"]["scalingHalted"].as_bool() == Some(true)
            && s["readiness"]["unready"].as_u64() == Some(4))
        .then_some(())
    })
    .await;

    // A pod arrives while halted: it waits unschedulable, and nothing is launched for it while
    // the controller keeps reporting the halt (several status writes after the pod became
    // unschedulable: more than the batch window, `--batch-max=2s`).
    let _: Pod = c.create(pool_pod("late", "cpu")).await;
    let unschedulable_at = eventually("the late pod unschedulable", DEADLINE, || async {
        unschedulable_since(&c.pod("default", "late").await?)
    })
    .await;
    eventually(
        "three seconds of halt reported after that",
        DEADLINE,
        || async {
            let s = summary(&c).await?;
            let written: jiff::Timestamp = s["time"].as_str()?.parse().ok()?;
            (s["readiness"]["scalingHalted"].as_bool() == Some(true)
                && written.as_second() >= unschedulable_at.as_second() + 3)
                .then_some(())
        },
    )
    .await;
    assert_eq!(c.claims().await.len(), 4, "a launch while halted");

    // Recovery.
    let recovered_at = jiff::Timestamp::now();
    for n in &nodes {
        c.set_ready(n, "True").await;
    }
    eventually("the pool's ClusterHealthy True again", DEADLINE, || async {
        let (s, _, _) = pool_condition(&c.pool("cpu").await, "ClusterHealthy")?;
        (s == "True").then_some(())
    })
    .await;
    let note = eventually("a ClusterHealthy event", DEADLINE, || {
        pool_event(&c, "cpu", "ClusterHealthy")
    })
    .await;
    assert!(note.contains("scaling resumed"), "{note}");
    eventually("the late pod bound", DEADLINE, || bound(&c, "late")).await;
    let claims = c.claims().await;
    assert_eq!(claims.len(), 5, "{claims:#?}");
    let newest = claims
        .iter()
        .filter_map(|cl| cl.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .max()
        .expect("times");
    assert!(
        newest.as_second() >= recovered_at.as_second() - 1,
        "the late pod's claim ({newest}) came before the recovery ({recovered_at})"
    );
}

/// `--scale-down-unready-time`: of two empty nodes of a pool whose `unneededTime` is an hour,
/// the one that broke down (Ready `Unknown`) is removed after the unready time; the other
/// stays, waiting out its hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cadence_an_unready_node_is_scaled_down_after_the_unready_time() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let _ctl = c.controller(
        "unready",
        &["--leader-elect=false", "--scale-down-unready-time=2s"],
    );
    let _: Pod = c.create(pool_pod("x", "cpu")).await;
    let _: Pod = c.create(pool_pod("y", "cpu")).await;
    let sick = eventually("x bound", DEADLINE, || bound(&c, "x")).await;
    let well = eventually("y bound", DEADLINE, || bound(&c, "y")).await;
    assert_ne!(sick, well);
    complete(&c, "x").await;
    complete(&c, "y").await;
    c.set_ready(&sick, "Unknown").await;
    eventually("the unready node removed", DEADLINE, || async {
        c.nodes()
            .await
            .iter()
            .all(|n| n.name_any() != sick)
            .then_some(())
    })
    .await;
    assert!(
        c.nodes().await.iter().any(|n| n.name_any() == well),
        "the ready node went too"
    );
    let (status, reason, message) = eventually(
        "the ready node's claim waiting its hour",
        DEADLINE,
        || async {
            let cl = c.claims().await.into_iter().find(|cl| {
                cl.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(well.as_str())
            })?;
            claim_condition(&cl, "Consolidatable").filter(|(_, r, _)| r == "Unneeded")
        },
    )
    .await;
    assert_eq!(status, "True", "{reason}: {message}");
    assert!(message.contains("unneededTime 1h"), "{message}");
}
