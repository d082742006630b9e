//! Test 4: a PodDisruptionBudget with 0 disruptions allowed blocks consolidation; a pod the
//! controller's cache has not seen keeps its node; with two replicas and leader election only
//! the leader writes; a node waiting for the pod nominated to it is kept.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, PostParams};
use nodepools::NodePool;
use serde_json::{Value, json};

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4a_pdb_with_zero_disruptions_blocks_consolidation() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "1s")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    // Two 3-CPU fillers need two 4-CPU nodes.
    for name in ["filler-1", "filler-2"] {
        let _: Pod = c
            .create(cpu_pod(name, "3", BTreeMap::from([("app", "filler")])))
            .await;
    }
    eventually("both fillers bound", DEADLINE, || async {
        for name in ["filler-1", "filler-2"] {
            bound_to(&c.pod("default", name).await?)?;
        }
        Some(())
    })
    .await;
    assert_eq!(c.nodes().await.len(), 2);
    // One small web pod lands next to each filler (0.5 + 3 of 3.92 CPUs, no room for two).
    for name in ["web-1", "web-2"] {
        let _: Pod = c
            .create(cpu_pod(name, "500m", BTreeMap::from([("app", "web")])))
            .await;
    }
    let pdb: PodDisruptionBudget = c
        .create(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .await;
    let (n1, n2) = eventually("web pods bound on different nodes", DEADLINE, || async {
        let a = bound_to(&c.pod("default", "web-1").await?)?;
        let b = bound_to(&c.pod("default", "web-2").await?)?;
        (a != b).then_some((a, b))
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    for name in ["filler-1", "filler-2"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    // Each node now runs one 0.5-CPU pod: either could go, its pod fitting on the other, but
    // the PDB allows no eviction. Consolidation looks at both nodes and says why each stays;
    // thirty more rounds must still do nothing: the harness sleeps 100 ms between rounds
    // (`--loop-interval=100ms`), so they span more than the unneeded time and validation
    // (1 s each), and unlike a sleep they show the controller really ran.
    eventually(
        "both claims Consolidatable=False PdbBlocked",
        DEADLINE,
        || async {
            let claims = c.claims().await;
            let blocked = claims.iter().all(|cl| {
                cl.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|x| x.type_ == "Consolidatable" && x.reason == "PdbBlocked")
                })
            });
            (claims.len() == 2 && blocked).then_some(())
        },
    )
    .await;
    ctl.more_loops("round", 30).await;
    let nodes = c.nodes().await;
    assert_eq!(nodes.len(), 2, "the PDB kept both nodes");
    for n in &nodes {
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .all(|t| t.key != "gpu-autoscaler.dev/disrupted"),
            "no node was even tainted for disruption"
        );
    }
    assert!(c.pod("default", "web-1").await.is_some());
    assert!(c.pod("default", "web-2").await.is_some());

    // Without the PDB the same cluster consolidates to one node: the PDB was the blocker.
    Api::<PodDisruptionBudget>::namespaced(c.client.clone(), "default")
        .delete(
            pdb.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    eventually("one node consolidated away", DEADLINE, || async {
        let names: Vec<String> = c
            .nodes()
            .await
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        (names.len() == 1 && (names[0] == n1 || names[0] == n2)).then_some(())
    })
    .await;
}

async fn lease_holder(c: &Cluster) -> Option<String> {
    Api::<Lease>::namespaced(c.client.clone(), "kube-system")
        .get_opt("gpu-autoscaler")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

const WRITES: [&str; 4] = ["created NodeClaim", "launched", "registered", "initialized"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4b_two_replicas_only_the_leader_writes() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    // A lease long enough that a loaded machine never lets it lapse between renewals (the
    // hand-over below is a graceful release, which does not wait for it).
    let mut a = c.controller("replica-a", &["--lease-duration=15s"]);
    let mut b = c.controller("replica-b", &["--lease-duration=15s"]);
    let leader = eventually("a leader to be elected", DEADLINE, || lease_holder(&c)).await;
    let (leader_ctl, follower_ctl) = if leader == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let _: Pod = c.create(gpu_pod("train")).await;
    eventually("the pod to be bound", DEADLINE, || async {
        bound_to(&c.pod("default", "train").await?)
    })
    .await;
    assert_eq!(c.claims().await.len(), 1);
    // The fake scheduler binds the pod as soon as the node is Ready with a GPU, which can be
    // before the controller's watch sees the node initialized: wait for the leader's log to
    // catch up rather than reading it once.
    let leader_log = eventually("the leader to log every write", DEADLINE, || async {
        let log = leader_ctl.log();
        WRITES.iter().all(|w| log.contains(w)).then_some(log)
    })
    .await;
    let follower_log = follower_ctl.log();
    for w in WRITES {
        assert!(
            leader_log.contains(w),
            "the leader did {w:?}:\n{leader_log}"
        );
        assert!(
            !follower_log.contains(w),
            "the follower did {w:?}:\n{follower_log}"
        );
    }
    let events = Api::<Event>::namespaced(c.client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(
            e.reporting_instance.as_deref(),
            Some(leader.as_str()),
            "every event comes from the leader"
        );
    }

    // The leader stops gracefully (releasing the lease); the other replica takes over and acts.
    leader_ctl.terminate();
    let new_leader = eventually("the other replica to take over", DEADLINE, || async {
        lease_holder(&c).await.filter(|h| *h != leader)
    })
    .await;
    let _: Pod = c.create(gpu_pod("train-2")).await;
    eventually("the second pod to be bound", DEADLINE, || async {
        bound_to(&c.pod("default", "train-2").await?)
    })
    .await;
    assert_eq!(c.claims().await.len(), 2);
    let log = eventually("the new leader to log its claim", DEADLINE, || async {
        let log = follower_ctl.log();
        log.contains("created NodeClaim").then_some(log)
    })
    .await;
    assert!(
        log.contains("became the leader"),
        "{new_leader} logged its election:\n{log}"
    );
}

/// A pod bound to an empty node while the controller's pod cache lags (its watch events held
/// back by the server): the decision, validation and taint all see an empty node, but the
/// fresh read before deletion finds the pod, so the command is abandoned, the node untainted
/// and kept, and the bare `do-not-disrupt` pod never evicted nor lost with its node. Reliability
/// runs under watch faults lost such pods (issue 14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4c_a_pod_the_cache_has_not_seen_keeps_its_node() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "1s")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Pod = c
        .create(cpu_pod("filler", "3", BTreeMap::from([("app", "filler")])))
        .await;
    let node = eventually("the filler bound", DEADLINE, || async {
        bound_to(&c.pod("default", "filler").await?)
    })
    .await;
    c.server()
        .hold_watch_events("", "pods", "default", "protected");
    let _: Pod = c
        .create(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "protected", "namespace": "default",
                         "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
            "spec": {"nodeName": node,
                     "containers": [{"name": "app", "image": "app",
                                     "resources": {"requests": {"cpu": "100m"}}}]}
        }))
        .await;
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("filler", &DeleteParams::default())
        .await
        .unwrap();
    let events = Api::<Event>::namespaced(c.client.clone(), "default");
    let note = eventually("the disruption to be abandoned", DEADLINE, || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("DisruptionAbandoned"))
            .find_map(|e| e.note)
    })
    .await;
    assert!(
        note.contains("default/protected arrived after validation"),
        "{note}\n{}",
        ctl.log()
    );
    let nodes = c.nodes().await;
    assert!(
        nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(&node)),
        "the node was kept:\n{}",
        ctl.log()
    );
    let p = c
        .pod("default", "protected")
        .await
        .expect("the pod is kept");
    assert_eq!(bound_to(&p).as_deref(), Some(node.as_str()));
    assert_eq!(c.server().evictions(), (0, 0), "nothing was evicted");
    // Once the cache catches up, the controller keeps the node for the pod's annotation and
    // the node is untainted.
    c.server()
        .release_watch_events("", "pods", "default", "protected");
    eventually(
        "the node kept for do-not-disrupt, untainted",
        DEADLINE,
        || async {
            let claim =
                c.claims().await.into_iter().find(|x| {
                    x.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node)
                })?;
            let kept = claim.status?.conditions.into_iter().any(|k| {
                k.type_ == "Consolidatable" && k.status == "False" && k.reason == "DoNotDisrupt"
            });
            let n = c
                .nodes()
                .await
                .into_iter()
                .find(|n| n.metadata.name.as_deref() == Some(&node))?;
            let tainted = n
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "gpu-autoscaler.dev/disrupted");
            (kept && !tainted).then_some(())
        },
    )
    .await;
    assert!(c.pod("default", "protected").await.is_some());
}

/// A node carrying the disruption taint with no command of the current leader behind it (the
/// leader that tainted it died before deleting it, or its write landed late) is released and
/// then consolidated like any other empty node. A tainted node counts as being deleted, so
/// before the release ran on every pass such a node stayed forever when the one release after
/// startup missed it: the small reliability benchmark ended with two empty nodes that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4d_a_node_left_tainted_by_a_dead_leader_is_released_and_consolidated() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "1s")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Pod = c
        .create(cpu_pod("filler", "3", BTreeMap::from([("app", "filler")])))
        .await;
    let node = eventually("the filler bound", DEADLINE, || async {
        bound_to(&c.pod("default", "filler").await?)
    })
    .await;
    // Past its first round: the controller has seen the claim initialize.
    eventually("the claim initialized", DEADLINE, || async {
        ctl.log().contains("initialized claim").then_some(())
    })
    .await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.client.clone());
    let n = nodes.get(&node).await.unwrap();
    let mut taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: "gpu-autoscaler.dev/disrupted".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    nodes
        .patch(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
        .unwrap();
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("filler", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the empty node consolidated", DEADLINE, || async {
        let names: Vec<String> = c
            .nodes()
            .await
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        (!names.contains(&node)).then_some(())
    })
    .await;
    assert!(
        ctl.log()
            .contains("released a node left tainted by an unfinished disruption"),
        "{}",
        ctl.log()
    );
}

/// A node whose pending pod the scheduler has not bound yet is not empty: the plan's
/// nomination keeps it, as Karpenter keeps a node nominated for a pending pod. Seen once in
/// CI before the rule: a node was removed as `Empty` 13 ms after it initialized, because the
/// loaded harness scheduler had not bound its pod, and the pod then waited out the launch
/// guard. Here the test plays a slow scheduler: the pod names another scheduler, the test
/// marks it unschedulable and binds it itself. Once the pod is gone the node is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_4j_a_node_waiting_for_its_nominated_pod_is_kept() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "0s")).await;
    // Re-plans every second: the nomination window is 10 s (twice 1 s + 2 s, at least 10 s),
    // so the passes below outlast it and only renewals keep the node.
    let ctl = c.controller("solo", &["--leader-elect=false", "--replan-interval=1s"]);
    let mut late = cpu_pod("late", "3", BTreeMap::new());
    late["spec"]["schedulerName"] = json!("slow-scheduler");
    let _: Pod = c.create(late).await;
    let pods = Api::<Pod>::namespaced(c.client.clone(), "default");
    mark_unschedulable(&c, "late").await;
    let node = eventually("the node kept for its nominated pod", DEADLINE, || async {
        let claim = c.claims().await.into_iter().find(|x| {
            x.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|k| {
                    k.type_ == "Consolidatable" && k.status == "False" && k.reason == "Nominated"
                })
            })
        })?;
        claim.status?.node_name
    })
    .await;
    // Fifteen disruption passes, one a second, all begun after the verdict: longer than the
    // window, so the re-plans that put the pod on the now existing node renewed it.
    ctl.more_loops("disrupt", 15).await;
    let claim = c
        .claims()
        .await
        .into_iter()
        .find(|x| x.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node));
    let reason = claim
        .and_then(|x| x.status)
        .and_then(|s| {
            s.conditions
                .into_iter()
                .find(|k| k.type_ == "Consolidatable")
        })
        .map(|k| k.reason);
    assert_eq!(
        reason.as_deref(),
        Some("Nominated"),
        "the node is no longer kept for its pod:\n{}",
        ctl.log()
    );
    assert!(
        c.nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(&node)),
        "the node was removed before its pod was bound:\n{}",
        ctl.log()
    );
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "late", "namespace": "default"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}
    });
    pods.create_subresource::<Value, Value>("binding", "late", &PostParams::default(), &binding)
        .await
        .expect("binding");
    eventually("the pod bound to its node", DEADLINE, || async {
        (bound_to(&c.pod("default", "late").await?)? == node).then_some(())
    })
    .await;
    pods.delete("late", &DeleteParams::default()).await.unwrap();
    eventually("the emptied node removed", DEADLINE, || async {
        (!c.nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(&node)))
        .then_some(())
    })
    .await;
}
