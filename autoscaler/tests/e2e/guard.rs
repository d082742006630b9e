//! Delivered capacity and the launch guard, end to end: every example NodePool serves pods
//! that fit it (the kwok Nodes advertising the pools' GPU sharing), and a Node that comes up
//! with fewer devices than planned costs one launch, then is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use nodepools::{NodeClaim, NodePool};
use serde_json::{Value, json};

use crate::harness::{Cluster, bound_to, eventually};

const DEADLINE: Duration = Duration::from_secs(90);

fn examples() -> Vec<(PathBuf, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            if !v.is_null() {
                out.push((f.clone(), v));
            }
        }
    }
    out
}

/// A pod for `pool`, asking for `resources`, pinned to the pool and tolerating its GPU taint.
fn pod_for(name: &str, pool: &str, resources: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-rs"),
                                 "uid": "00000000-0000-0000-0000-00000000000a", "controller": true}]},
        "spec": {
            "nodeSelector": {"gpu-autoscaler.dev/nodepool": pool},
            "containers": [{"name": "main", "image": "main", "resources": {"requests": resources, "limits": resources}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        }
    })
}

/// What fits each example pool: CPU on the CPU pool, a whole 4-GPU node's worth of time
/// slices on notebooks (the pod of the runaway report), one MIG instance on inference, four
/// GPUs on training.
fn fitting_pod(pool: &str) -> Value {
    let r = match pool {
        "cpu-default" => json!({"cpu": "1", "memory": "1Gi"}),
        "notebooks" => json!({"cpu": "1", "nvidia.com/gpu": "16"}),
        "gpu-inference" => json!({"cpu": "1", "nvidia.com/mig-1g.10gb": "1"}),
        "gpu-train" => json!({"cpu": "8", "nvidia.com/gpu": "4"}),
        other => panic!(
            "deploy/examples has NodePool {other}: give it a fitting pod in tests/e2e/guard.rs"
        ),
    };
    pod_for(&format!("{pool}-pod"), pool, r)
}

fn condition<'a>(
    conds: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conds.iter().find(|c| c.type_ == t)
}

fn claim_condition(cl: &NodeClaim, t: &str) -> Option<(String, String, String)> {
    let c = condition(&cl.status.as_ref()?.conditions, t)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_guard_every_example_nodepool_serves_a_fitting_pod() {
    let c = Cluster::start().await;
    let mut pools = Vec::new();
    for (file, v) in examples() {
        assert_eq!(v["kind"], "NodePool", "{}", file.display());
        let np: NodePool = c.create(v).await;
        pools.push(np.name_any());
    }
    assert!(pools.len() >= 4, "{pools:?}");
    let _ctl = c.controller("guard-examples", &[]);
    for pool in &pools {
        let _: Pod = c.create(fitting_pod(pool)).await;
    }
    for pool in &pools {
        let name = format!("{pool}-pod");
        let node = eventually(&format!("{name} to bind"), DEADLINE, || async {
            bound_to(&c.pod("default", &name).await?)
        })
        .await;
        // Bound to a node of its pool whose claim initializes. kwok may bind the pod a moment
        // before the controller's next round writes Initialized, so that part is waited on.
        let claims = c.claims().await;
        let claim = claims
            .iter()
            .find(|cl| cl.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
            .unwrap_or_else(|| panic!("no claim for node {node}: {claims:#?}"));
        assert_eq!(&claim.spec.node_pool, pool);
        let claim_name = claim.name_any();
        // Times out (and fails) unless the claim reports Initialized=True.
        eventually(
            &format!("claim {claim_name} to initialize"),
            DEADLINE,
            || async {
                let cl = c
                    .claims()
                    .await
                    .into_iter()
                    .find(|cl| cl.name_any() == claim_name)?;
                claim_condition(&cl, "Initialized")
                    .map(|x| x.0)
                    .filter(|s| s == "True")
            },
        )
        .await;
    }
    // One node per pod, and every pool reports delivering what it launched.
    assert_eq!(c.claims().await.len(), pools.len());
    for pool in &pools {
        let np = eventually("CapacityDelivered on the pool", DEADLINE, || async {
            let np = c.pool(pool).await;
            let s = np.status.clone()?;
            condition(&s.conditions, "CapacityDelivered").map(|_| np)
        })
        .await;
        let s = np.status.unwrap();
        let cd = condition(&s.conditions, "CapacityDelivered").unwrap();
        assert_eq!(
            (cd.status.as_str(), cd.reason.as_str()),
            ("True", "AsLaunched")
        );
    }
    // The notebooks node advertises the pool's time slices; the inference node MIG instances.
    let nodes = c.nodes().await;
    let alloc = |pool: &str, res: &str| -> Option<String> {
        nodes
            .iter()
            .find(|n| {
                n.labels()
                    .get("gpu-autoscaler.dev/nodepool")
                    .map(String::as_str)
                    == Some(pool)
            })
            .and_then(|n| crate::harness::allocatable(n, res))
    };
    let shared: i64 = alloc("notebooks", "nvidia.com/gpu")
        .unwrap()
        .parse()
        .unwrap();
    assert!(shared >= 16 && shared % 4 == 0, "{shared}");
    assert!(alloc("gpu-inference", "nvidia.com/mig-1g.10gb").is_some());
    assert_eq!(alloc("gpu-inference", "nvidia.com/gpu"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_guard_a_node_short_of_devices_costs_one_launch_and_is_reported() {
    let c = Cluster::start().await;
    let (_, notebooks) = examples()
        .into_iter()
        .find(|(_, v)| v["metadata"]["name"] == "notebooks")
        .expect("deploy/examples has the notebooks NodePool");
    let _: NodePool = c.create(notebooks).await;
    // The device plugin advertises a quarter of what the pool's time-slicing promises: what a
    // device plugin without the time-slicing configuration does. The timeout leaves kwok's GPU
    // delay (2 s) a wide margin, so the report shows the devices advertised, not the zero
    // before the plugin starts, however loaded the machine.
    let _ctl = c.controller(
        "guard-runaway",
        &[
            "--kwok-register-gpu-fraction=0.25",
            "--device-plugin-timeout=10s",
        ],
    );
    let mut big = fitting_pod("notebooks");
    big["metadata"]["name"] = json!("big");
    let _: Pod = c.create(big).await;

    // Every claim name ever listed, polled throughout.
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let events = Api::<Event>::all(c.client.clone());
    let reported = |evs: &[Event], kind: &str, reason: &str| -> Option<String> {
        evs.iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind)
            })
            .and_then(|e| e.note.clone())
    };
    let all = eventually(
        "the mismatch on claim, pool and pod, and the guard's event",
        DEADLINE,
        || {
            let (c, events, seen) = (&c, &events, seen.clone());
            async move {
                let claims = c.claims().await;
                seen.lock()
                    .unwrap()
                    .extend(claims.iter().map(|cl| cl.name_any()));
                let claim = claims.first()?;
                let (status, reason, message) = claim_condition(claim, "Initialized")?;
                if (status.as_str(), reason.as_str()) != ("False", "ResourceMismatch") {
                    return None;
                }
                let np = c.pool("notebooks").await;
                let pool_cond = condition(&np.status?.conditions, "CapacityDelivered")
                    .filter(|c| c.status == "False" && c.reason == "ResourceMismatch")?
                    .message
                    .clone();
                let evs = events.list(&ListParams::default()).await.ok()?.items;
                Some(BTreeMap::from([
                    ("claim condition", message),
                    ("pool condition", pool_cond),
                    (
                        "claim event",
                        reported(&evs, "NodeClaim", "ResourceMismatch")?,
                    ),
                    (
                        "pool event",
                        reported(&evs, "NodePool", "ResourceMismatch")?,
                    ),
                    ("pod event", reported(&evs, "Pod", "LaunchBackoff")?),
                ]))
            }
        },
    )
    .await;
    for (what, text) in &all {
        if *what != "pod event" {
            assert!(
                text.contains("nvidia.com/gpu 4 of 16") && text.contains("g4dn.12xlarge"),
                "{what}: {text}"
            );
        }
    }
    assert!(all["pod event"].contains("caused 1 launch"), "{all:#?}");
    // Replans after the report (pending pods are planned again every 10 s) launch nothing.
    let plans = || {
        std::fs::read_to_string(c.dir.join("guard-runaway.log"))
            .unwrap_or_default()
            .matches("plan_ms=")
            .count()
    };
    let before = plans();
    eventually("two more planning rounds", DEADLINE, || async {
        (plans() >= before + 2).then_some(())
    })
    .await;
    let mut seen = seen.lock().unwrap().clone();
    seen.extend(c.claims().await.iter().map(|cl| cl.name_any()));
    assert_eq!(seen.len(), 1, "one launch for the pod, saw claims {seen:?}");
    assert_eq!(c.instances().await.len(), 1);
    assert_eq!(bound_to(&c.pod("default", "big").await.unwrap()), None);
}

/// A larger pod arriving while a pod waits for its in-flight claim takes that claim's room in
/// the next plan (pods are packed largest first) and the waiting pod gets a new claim: the
/// launch guard lets that claim through, since the pod's first claim is still in flight and
/// filled by the newcomer. (It used to count it as the pod's second launch and hold it back
/// for `--launch-backoff`, 5 minutes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_guard_a_larger_newcomer_does_not_push_a_waiting_pod_off_its_claim() {
    let c = Cluster::start().await;
    // m5.xlarge only: room for either pod, not both.
    let _: NodePool = c.create(crate::harness::cpu_pool("cpu", "1h")).await;
    // The first claim stays in flight while the second pod is planned.
    let ctl = c.controller("guard-nominated", &["--kwok-register-delay=8s"]);
    // One claim for the first pod; after the larger pod, two (whichever pod each ends up
    // holding).
    for (claims, name, cpu) in [(1, "waiting", "2"), (2, "larger", "3")] {
        let _: Pod = c
            .create(crate::harness::cpu_pod(name, cpu, BTreeMap::new()))
            .await;
        eventually(&format!("{claims} claim(s)"), DEADLINE, || async {
            (c.claims().await.len() == claims).then_some(())
        })
        .await;
    }
    for name in ["waiting", "larger"] {
        eventually(&format!("{name} to bind"), DEADLINE, || async {
            bound_to(&c.pod("default", name).await?)
        })
        .await;
    }
    assert_eq!(c.claims().await.len(), 2, "one claim per pod");
    let log = ctl.log();
    assert!(
        !log.contains("launch guard: holding back"),
        "the guard held a pod back:\n{log}"
    );
    let events = Api::<Event>::all(c.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        !events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("LaunchBackoff")),
        "{:#?}",
        events.items
    );
}

/// A Node that registers with a Node Readiness Controller's taint (not the NodePool's, so the
/// planner knows nothing of it) is not initialized while the taint is on it: its claim stays
/// capacity on its way for the pending pod, so no second node is launched, and once the
/// taint goes the claim initializes and the pod binds (Karpenter's known ephemeral taints).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_guard_a_readiness_taint_holds_initialization_without_a_second_launch() {
    const READINESS: &str = "readiness.k8s.io/gpu-driver";
    let c = Cluster::start().await;
    let _: NodePool = c.create(crate::harness::gpu_pool("gpu", "1h")).await;
    let ctl = c.controller(
        "solo",
        &[
            "--leader-elect=false",
            // Pending pods are planned again each second: a plan that took the node for
            // initialized would launch a second one within the wait below.
            "--replan-interval=1s",
            &format!("--kwok-register-with-taints={READINESS}=pending:NoSchedule"),
        ],
    );
    let _: Pod = c.create(crate::harness::gpu_pod("train")).await;
    // The device plugin came up (the startup taint is gone, the GPU advertised), the
    // readiness taint stays.
    let held = |cl: &NodeClaim| {
        let (status, reason, message) = claim_condition(cl, "Initialized")?;
        (status == "False" && reason == "KnownEphemeralTaintsExist").then_some(message)
    };
    let deadline = std::time::Instant::now() + DEADLINE;
    let message = loop {
        let claims = c.claims().await;
        if let Some(m) = claims.first().and_then(held) {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the claim never held by the readiness taint: {claims:#?}\n{:#?}",
            c.nodes().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(message.contains(READINESS), "{message}");
    // Three more plans of the pending pod while the taint holds its node.
    let from = ctl.loops("plan");
    eventually("three more plans", DEADLINE, || async {
        (ctl.loops("plan") >= from + 3).then_some(())
    })
    .await;
    assert_eq!(c.claims().await.len(), 1, "a second claim: {}", ctl.log());
    assert_eq!(c.instances().await.len(), 1, "a second instance");
    // Nor did a plan want one: the launch guard would have held it back (one launch per pod
    // per backoff), and said so on the pod.
    let events = crate::pod_problems::events_of(&c, "train").await;
    assert!(
        !events
            .iter()
            .any(|(reason, _, _)| reason == "LaunchBackoff"),
        "{events:?}"
    );
    assert!(
        c.pod("default", "train")
            .await
            .and_then(|p| bound_to(&p))
            .is_none(),
        "the harness scheduler keeps the pod off the tainted node"
    );

    // The readiness controller lifts its taint.
    let node = c.nodes().await.into_iter().next().expect("the node");
    let taints: Vec<_> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != READINESS)
        .collect();
    Api::<k8s_openapi::api::core::v1::Node>::all(c.client.clone())
        .patch(
            &node.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({
                "metadata": {"resourceVersion": node.resource_version()},
                "spec": {"taints": taints}
            })),
        )
        .await
        .expect("lifting the readiness taint");
    eventually("the pod bound to the one node", DEADLINE, || async {
        bound_to(&c.pod("default", "train").await?)
    })
    .await;
    let cl = c.claims().await;
    assert_eq!(cl.len(), 1, "{cl:#?}");
    assert_eq!(
        claim_condition(&cl[0], "Initialized").map(|c| c.0),
        Some("True".to_string())
    );
}
