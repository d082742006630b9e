//! Test 1 (scale-up through the device plugin start) and test 2 (scale-down to zero).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use nodepools::NodePool;
use serde_json::{Value, json};

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(40);

/// Test 1: a pending 1-GPU pod → a NodeClaim → a tainted GPU node registers → its GPU
/// allocatable appears after the device-plugin delay → the pod is bound; never a second node.
/// Returns the cluster, controller and node for test 2 to continue with.
async fn scale_up() -> (Cluster, Controller, String) {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "2s")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Pod = c.create(gpu_pod("train")).await;

    let mut saw_zero_gpus = false;
    let mut saw_startup_taint = false;
    let deadline = std::time::Instant::now() + DEADLINE;
    let node = loop {
        if std::time::Instant::now() >= deadline {
            panic!(
                "timed out waiting for the pod to be bound; nodes: {:#?}; claims: {:#?}; pod: {:#?}",
                c.nodes().await,
                c.claims().await,
                c.pod("default", "train").await
            );
        }
        let claims = c.claims().await;
        let instances = c.instances().await;
        let nodes = c.nodes().await;
        assert!(
            claims.len() <= 1,
            "a second NodeClaim was created: {claims:#?}"
        );
        assert!(instances.len() <= 1, "a second instance was launched");
        assert!(nodes.len() <= 1, "a second node registered");
        if let Some(n) = nodes.first() {
            let taints = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            assert!(
                taints
                    .iter()
                    .any(|t| t.key == "nvidia.com/gpu" && t.effect == "NoSchedule"),
                "the node carries the pool's GPU taint: {taints:?}"
            );
            saw_startup_taint |= taints
                .iter()
                .any(|t| t.key == "node.gpu-autoscaler.dev/device-plugin");
            saw_zero_gpus |= allocatable(n, "nvidia.com/gpu").as_deref() == Some("0");
        }
        if let Some(node) = c.pod("default", "train").await.as_ref().and_then(bound_to) {
            break node;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        saw_zero_gpus,
        "GPU allocatable started at zero (device plugin not up)"
    );
    assert!(
        saw_startup_taint,
        "the startup taint was present until the device plugin started"
    );

    let claims = c.claims().await;
    assert_eq!(claims.len(), 1);
    let claim = &claims[0];
    assert_eq!(claim.spec.node_pool, "gpu");
    let status = claim.status.clone().unwrap();
    assert_eq!(status.node_name.as_deref(), Some(node.as_str()));
    assert_eq!(status.instance_type.as_deref(), Some("g4dn.xlarge"));
    let n = c.nodes().await.into_iter().next().unwrap();
    assert_eq!(allocatable(&n, "nvidia.com/gpu").as_deref(), Some("1"));
    let labels = n.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("ml"));
    assert_eq!(
        labels
            .get("gpu-autoscaler.dev/nodepool")
            .map(String::as_str),
        Some("gpu")
    );
    assert!(
        n.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"gpu-autoscaler.dev/termination".to_string()),
        "managed nodes carry the termination finalizer"
    );
    // The claim reaches Initialized (the lifecycle may lag the binder by a loop).
    eventually("the claim to be Initialized", DEADLINE, || async {
        let cl = c.claims().await.into_iter().next()?;
        cl.status?
            .conditions
            .iter()
            .any(|x| x.type_ == "Initialized" && x.status == "True")
            .then_some(())
    })
    .await;
    (c, ctl, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_1_pending_gpu_pod_gets_a_node_once_the_device_plugin_is_up() {
    let (c, ctl, _node) = scale_up().await;
    let log = ctl.log();
    assert!(log.contains("created NodeClaim"), "{log}");
    // The pod's binding is a pod event on the node, recorded on its claim for consolidateAfter.
    eventually("the claim to record the pod event", DEADLINE, || async {
        let cl = c.claims().await.into_iter().next()?;
        let created = cl.metadata.creation_timestamp.clone()?;
        let at = cl.status?.last_pod_event_time?;
        (at.0 >= created.0).then_some(())
    })
    .await;
    // The pod got a TriggeredScaleUp event naming its claim.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(c.client.clone(), "default");
    let evs = events.list(&Default::default()).await.unwrap().items;
    assert!(
        evs.iter()
            .any(|e| e.reason.as_deref() == Some("TriggeredScaleUp")),
        "{evs:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_2_completed_pod_node_is_drained_and_removed_pool_at_zero() {
    let (c, _ctl, node) = scale_up().await;
    // The pod completes.
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    eventually("the node to be removed", DEADLINE, || async {
        let nodes = c.nodes().await;
        nodes
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(node.as_str()))
            .then_some(())
    })
    .await;
    eventually("claims and instances to be gone", DEADLINE, || async {
        (c.claims().await.is_empty() && c.instances().await.is_empty()).then_some(())
    })
    .await;
    eventually(
        "the NodePool status to show zero nodes",
        DEADLINE,
        || async {
            let p = c.pool("gpu").await;
            (p.status?.nodes == 0).then_some(())
        },
    )
    .await;
    // Its conditions say which spec they judged.
    let p = c.pool("gpu").await;
    let generation = p.metadata.generation;
    assert!(generation.is_some());
    let conds = p.status.expect("status").conditions;
    assert!(!conds.is_empty());
    for cond in &conds {
        assert_eq!(cond.observed_generation, generation, "{cond:?}");
    }
}

/// A gang over three nodes: each of its NodeClaims names the gang's placement group, each
/// instance is launched into it and its Node carries it; an ordinary pod's claim names none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_gang_claims_carry_one_placement_group() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "30s")).await;
    let ctl = c.controller("placement", &["--leader-elect=false"]);
    for i in 0..3 {
        let mut p = gpu_pod(&format!("train-{i}"));
        p["metadata"]["annotations"] = json!({
            "gpu-autoscaler.dev/pod-group": "train",
            "gpu-autoscaler.dev/pod-group-min-count": "3",
        });
        let _: Pod = c.create(p).await;
    }
    let _: Pod = c.create(gpu_pod("solo")).await;
    let group = providers::placement_group_name("default", "train");
    let pg = providers::tags::PLACEMENT_GROUP;
    let nodes = eventually("four nodes", DEADLINE, || async {
        let n = c.nodes().await;
        (n.len() >= 4).then_some(n)
    })
    .await;
    let claims = c.claims().await;
    assert_eq!(claims.len(), 4, "{claims:#?}\n{}", ctl.log());
    let annotated = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.annotations.as_ref().and_then(|a| a.get(pg)).cloned()
    };
    let mut named: Vec<Option<String>> = claims.iter().map(|c| annotated(&c.metadata)).collect();
    named.sort();
    assert_eq!(
        named,
        vec![
            None,
            Some(group.clone()),
            Some(group.clone()),
            Some(group.clone())
        ],
        "{}",
        ctl.log()
    );
    // The launches read it back off the claims: the kwok instances and their Nodes have it.
    let instances = c.instances().await;
    assert_eq!(
        instances
            .iter()
            .filter(|i| i.spec.labels.get(pg) == Some(&group))
            .count(),
        3,
        "{instances:#?}"
    );
    let labelled = |n: &k8s_openapi::api::core::v1::Node| {
        n.metadata.labels.as_ref().and_then(|l| l.get(pg)).cloned()
    };
    let mut node_groups: Vec<Option<String>> = nodes.iter().map(labelled).collect();
    node_groups.sort();
    assert_eq!(
        node_groups,
        vec![None, Some(group.clone()), Some(group.clone()), Some(group)]
    );
}

/// `run --catalog-file` takes `catalog --json` output, edited: a type renamed and repriced is
/// launched under its new name, so the file (not the embedded catalog) is what kwok offers. A
/// broken file stops the controller before it connects, naming the file and the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_catalog_file_from_catalog_json_is_what_kwok_offers() {
    let c = Cluster::start().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .args([
            "catalog",
            "--provider",
            "embedded",
            "--json",
            "--instance-type",
            "g5.xlarge",
        ])
        .output()
        .expect("catalog runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows: Value = serde_json::from_slice(&out.stdout).expect("catalog --json is JSON");
    let row = &mut rows[0];
    row["name"] = json!("lab.gpu1");
    row["labels"]["node.kubernetes.io/instance-type"] = json!("lab.gpu1");
    for o in row["offerings"].as_array_mut().unwrap() {
        o["price"] = json!(0.5);
    }
    let file = c.dir.join("lab-catalog.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&rows).unwrap()).unwrap();
    let mut pool = gpu_pool("gpu", "10m");
    pool["spec"]["template"]["requirements"][0]["values"] = json!(["lab.gpu1"]);
    let _: NodePool = c.create(pool).await;
    let flag = format!("--catalog-file={}", file.display());
    let _ctl = c.controller("lab", &["--leader-elect=false", &flag]);
    let _: Pod = c.create(gpu_pod("train")).await;
    let node = eventually("the pod bound to a node", DEADLINE, || async {
        bound_to(&c.pod("default", "train").await?)
    })
    .await;
    let nodes = c.nodes().await;
    let n = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
        .expect("the pod's node");
    let labels = n.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("node.kubernetes.io/instance-type")
            .map(String::as_str),
        Some("lab.gpu1"),
        "{n:#?}"
    );
    // A price that is not a price: refused at start, with the file and the field.
    rows[0]["offerings"][0]["price"] = json!(-1);
    std::fs::write(&file, serde_json::to_vec_pretty(&rows).unwrap()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .args(["run", "--provider=kwok", &flag])
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("run starts");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lab-catalog.json") && err.contains("offerings[0].price"),
        "{err}"
    );
}

/// `--new-pod-scale-up-delay`: a pod younger than the delay launches nothing; its claim is
/// created once the pod is that old (timestamps are whole seconds, hence the second of slack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_new_pod_scale_up_delay_holds_young_pods() {
    const DELAY_S: i64 = 6;
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    let _ctl = c.controller(
        "delay",
        &[
            "--leader-elect=false",
            &format!("--new-pod-scale-up-delay={DELAY_S}s"),
        ],
    );
    let pod: Pod = c.create(gpu_pod("train")).await;
    let born = pod.metadata.creation_timestamp.expect("created").0;
    let claim = eventually("a claim for the pod", DEADLINE, || async {
        c.claims().await.into_iter().next()
    })
    .await;
    let made = claim.metadata.creation_timestamp.expect("created").0;
    let waited = made.as_second() - born.as_second();
    assert!(
        waited >= DELAY_S - 1,
        "the claim came {waited}s after the pod, before the {DELAY_S}s delay"
    );
}

/// `--max-claims-per-round`: a backlog larger than the cap is planned and written slice after
/// slice, one round after another, every pod gets its node, and no pod gets two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_plan_beyond_max_claims_per_round_is_written_over_rounds() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "10m")).await;
    // 3.5 CPUs each: one pod per node. All pending before the controller starts, so that
    // its first round plans the five together.
    for i in 0..5 {
        let name = format!("big-{i}");
        let _: Pod = c
            .create(cpu_pod(
                &name,
                "3500m",
                std::collections::BTreeMap::from([("app", "big")]),
            ))
            .await;
    }
    let ctl = c.controller(
        "capped",
        &["--leader-elect=false", "--max-claims-per-round=2"],
    );
    eventually("every pod bound", Duration::from_secs(90), || async {
        let mut bound = 0;
        for i in 0..5 {
            if bound_to(&c.pod("default", &format!("big-{i}")).await?).is_some() {
                bound += 1;
            }
        }
        (bound == 5).then_some(())
    })
    .await;
    assert_eq!(c.claims().await.len(), 5, "one claim per pod, none twice");
    let log = ctl.log();
    assert!(
        log.matches("pods past --max-claims-per-round are planned next round")
            .count()
            >= 2,
        "5 claims at 2 a round take three rounds: {log}"
    );
}

/// A new leader (a restart, a failover) plans a backlog that stopped arriving before it
/// started at once, instead of gathering it for a batch window first: with `--batch-idle=45s`
/// the pod, unschedulable for an hour, gets its claim within 25 s of the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_new_leader_plans_an_old_backlog_without_a_batch_window() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "10m")).await;
    let _: Pod = c
        .create(cpu_pod(
            "old",
            "1",
            std::collections::BTreeMap::from([("app", "old")]),
        ))
        .await;
    eventually("the pod unschedulable", DEADLINE, || async {
        unschedulable_since(&c.pod("default", "old").await?)
    })
    .await;
    // As if it had been pending for an hour: the scheduler keeps the time while the
    // condition stays False.
    let an_hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status(
            "old",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/0 nodes are available", "lastTransitionTime": an_hour_ago.to_string()
            }]}})),
        )
        .await
        .expect("patching the pod's status");
    let p = c.pod("default", "old").await.expect("the pod");
    assert_eq!(
        unschedulable_since(&p).map(|t| t.as_second()),
        Some(an_hour_ago.as_second()),
        "the condition's time as patched"
    );
    let started = std::time::Instant::now();
    let _ctl = c.controller(
        "restarted",
        &[
            "--leader-elect=false",
            "--batch-idle=45s",
            "--batch-max=60s",
        ],
    );
    eventually(
        "a claim for the old backlog",
        Duration::from_secs(25),
        || async { (!c.claims().await.is_empty()).then_some(()) },
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "the claim came after a batch window"
    );
}

/// Marks pod `name` of `default` as the scheduler marks a pod it preempted pods for: unschedulable
/// for now, nominated to `node` (`status.nominatedNodeName`).
async fn nominate(c: &Cluster, name: &str, node: &str) {
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "nominatedNodeName": node,
                "conditions": [{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": format!("preempting pods on {node}"),
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await
        .expect("status patch");
}

/// A pod the scheduler preempted pods for (`status.nominatedNodeName`) is bound to that node
/// once they are gone: while the node is there, the controller launches nothing for it (as
/// Karpenter leaves preempting pods alone); once the nomination names a node that went, the
/// pod is pending like any other and gets its claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_preempting_pod_waits_for_its_nominated_node_not_a_new_one() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    let _: k8s_openapi::api::core::v1::Node = c
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "busy"}}))
        .await;
    // The harness scheduler leaves pods of another scheduler alone.
    let mut pod = gpu_pod("preemptor");
    pod["spec"]["schedulerName"] = json!("other-scheduler");
    let _: Pod = c.create(pod).await;
    nominate(&c, "preemptor", "busy").await;
    let ctl = c.controller("preempting", &["--leader-elect=false"]);
    // Rounds that began after the nomination was written: none launched anything.
    ctl.more_loops("round", 3).await;
    assert!(
        c.claims().await.is_empty(),
        "a claim for a pod preempting on an existing node"
    );
    // `explain` says the same: the scheduler places it on busy.
    let (code, text, err) = run_explain(&c, &["pod", "default/preemptor", "--provider", "kwok"]);
    assert!(
        code == 0 && text.contains("fits existing node busy"),
        "{text}{err}"
    );
    nominate(&c, "preemptor", "gone").await;
    eventually(
        "a claim once the nominated node is gone",
        DEADLINE,
        || async { c.claims().await.into_iter().next() },
    )
    .await;
}

/// A node a pod preempts pods on (`status.nominatedNodeName`) is held for it: emptied, it is
/// kept with the reason `Nominated` (the pod will be bound there), and removed once the
/// nomination is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_an_empty_node_a_pod_preempts_on_is_kept_for_it() {
    let (c, _ctl, node) = scale_up().await;
    let mut urgent = gpu_pod("urgent");
    urgent["spec"]["schedulerName"] = json!("other-scheduler");
    let _: Pod = c.create(urgent).await;
    let pods = Api::<Pod>::namespaced(c.client.clone(), "default");
    nominate(&c, "urgent", &node).await;
    pods.patch_status(
        "train",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    let kept = eventually("the emptied node kept as Nominated", DEADLINE, || async {
        let claim = c.claims().await.into_iter().find(|cl| {
            cl.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
        })?;
        let cond = claim
            .status?
            .conditions
            .into_iter()
            .find(|k| k.type_ == "Consolidatable")?;
        // Our own nomination of `train` may be named first, while it is still pending.
        (cond.reason == "Nominated" && cond.message.contains("default/urgent"))
            .then_some(cond.message)
    })
    .await;
    assert!(kept.contains("is nominated to it"), "{kept}");
    assert_eq!(
        c.claims().await.len(),
        1,
        "a claim launched for the preempting pod"
    );
    assert!(
        c.nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node.as_str())),
        "the node went while a pod was nominated to it"
    );
    // The pod goes (its owner gave up on it): nothing holds the node any more.
    pods.delete("urgent", &Default::default())
        .await
        .expect("delete the pod");
    eventually("the node to be removed", DEADLINE, || async {
        c.nodes()
            .await
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(node.as_str()))
            .then_some(())
    })
    .await;
}

/// Preferred pod anti-affinity is held while it can be (Karpenter's default policy): three
/// 1-CPU replicas preferring hosts apart get a 4-CPU node each, and every one is bound; with
/// `--preference-policy=ignore` the three share one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_replicas_preferring_hosts_apart_get_a_node_each_unless_preferences_are_ignored() {
    for (policy, nodes) in [("respect", 3), ("ignore", 1)] {
        let c = Cluster::start().await;
        let _: NodePool = c.create(cpu_pool("cpu", "10m")).await;
        for i in 0..3 {
            let mut p = cpu_pod(
                &format!("web-{i}"),
                "1",
                std::collections::BTreeMap::from([("app", "web")]),
            );
            p["spec"]["affinity"] = json!({"podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                    "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "web"}}}}]}});
            let _: Pod = c.create(p).await;
        }
        let flag = format!("--preference-policy={policy}");
        let ctl = c.controller(policy, &["--leader-elect=false", &flag]);
        eventually("every replica bound", Duration::from_secs(90), || async {
            let mut bound = 0;
            for i in 0..3 {
                if bound_to(&c.pod("default", &format!("web-{i}")).await?).is_some() {
                    bound += 1;
                }
            }
            (bound == 3).then_some(())
        })
        .await;
        // Rounds that began after the last bind launched nothing more.
        ctl.more_loops("round", 2).await;
        assert_eq!(c.claims().await.len(), nodes, "{policy}: {}", ctl.log());
    }
}

/// A LimitRange gives a DaemonSet's pods a CPU request its template does not have: the
/// overhead follows the DaemonSet's running pod, so the new node has room for the pending pod
/// and for the DaemonSet pod that lands beside it. Sized by the template, the pod would get an
/// m5.xlarge it cannot share with that DaemonSet pod. `explain` sizes it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_new_node_has_room_for_daemonset_pods_a_limit_range_enlarges() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::{LimitRange, Node};
    let c = Cluster::start().await;
    let _: LimitRange = c
        .create(json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "defaults", "namespace": "kube-system"},
            "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "1500m"}}]}}))
        .await;
    // A node no NodePool manages, where the DaemonSet already runs.
    let _: Node = c
        .create(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "system-a", "labels": {"kubernetes.io/hostname": "system-a"}},
            "spec": {"providerID": "kwok://system-a"}}))
        .await;
    let status = json!({"status": {
        "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "29"},
        "capacity": {"cpu": "2", "memory": "4Gi", "pods": "29"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    Api::<Node>::all(c.client.clone())
        .patch_status("system-a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
    let _: DaemonSet = c.create(agent_daemonset(json!({"memory": "64Mi"}))).await;
    let system_pods: Api<Pod> = Api::namespaced(c.client.clone(), "kube-system");
    let agents_on = |node: String| {
        let pods = system_pods.clone();
        async move {
            let all = pods.list(&Default::default()).await.ok()?.items;
            let on: Vec<Pod> = all
                .into_iter()
                .filter(|p| bound_to(p).as_deref() == Some(node.as_str()))
                .collect();
            (!on.is_empty()).then_some(on)
        }
    };
    let agents = eventually("the DaemonSet's pod on system-a", DEADLINE, || {
        agents_on("system-a".into())
    })
    .await;
    let cpu = |p: &Pod| -> Option<String> {
        let c = p.spec.as_ref()?.containers.first()?;
        Some(
            c.resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("cpu")?
                .0
                .clone(),
        )
    };
    assert_eq!(cpu(&agents[0]).as_deref(), Some("1500m"), "{agents:#?}");

    let mut pool = cpu_pool("cpu", "10m");
    pool["spec"]["template"]["requirements"][0]["values"] = json!(["m5.xlarge", "m5.2xlarge"]);
    let _: NodePool = c.create(pool).await;
    let _: Pod = c
        .create(cpu_pod(
            "web",
            "3",
            std::collections::BTreeMap::from([("app", "web")]),
        ))
        .await;
    eventually("web unschedulable", DEADLINE, || async {
        unschedulable_since(&c.pod("default", "web").await?)
    })
    .await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .args(["explain", "pod", "default/web", "--provider", "kwok"])
        .env("KUBECONFIG", &c.kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("explain runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{said}");
    assert!(said.contains("(instance types m5.2xlarge;"), "{said}");
    assert!(
        said.contains("m5.xlarge: refused (Resources): the pod requests 3 cpu; a node of this type has 2420m for pods"),
        "{said}"
    );

    let ctl = c.controller("ds-overhead", &["--leader-elect=false"]);
    let node = eventually("web bound to a node", DEADLINE, || async {
        bound_to(&c.pod("default", "web").await?)
    })
    .await;
    let claims = c.claims().await;
    assert_eq!(claims.len(), 1, "{claims:#?}\n{}", ctl.log());
    let status = claims[0].status.clone().unwrap_or_default();
    assert_eq!(
        status.instance_type.as_deref(),
        Some("m5.2xlarge"),
        "{claims:#?}"
    );
    let requested = claims[0]
        .spec
        .resources
        .requests
        .get("cpu")
        .map(|q| q.0.clone());
    assert_eq!(requested.as_deref(), Some("4500m"), "{claims:#?}");
    // The DaemonSet's pod lands beside web, with what the LimitRange gave it.
    let agents = eventually("the DaemonSet's pod on web's node", DEADLINE, || {
        agents_on(node.clone())
    })
    .await;
    assert_eq!(cpu(&agents[0]).as_deref(), Some("1500m"), "{agents:#?}");
}
