//! API faults: the controller converges while the fake API server fails its calls at a rate
//! (409 on writes, 429 and 500/503 on any call, some 5xx after the write landed), cuts its
//! watches and answers re-watches with 410 Gone; and a drain behind a `maxUnavailable: 1`
//! PodDisruptionBudget, with graceful termination and a Deployment recreating the evicted
//! pods, evicts one pod at a time through the 429 back-off and finishes.
//!
//! The test's own client is exempt from the faults; only the controller gets them.

use std::collections::BTreeMap;
use std::time::Duration;

use fake_apiserver::{FaultRates, Faults, Options};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use nodepools::NodePool;
use serde_json::json;

use crate::harness::*;

/// Generous: the machine is shared and every call may fail a few times.
const DEADLINE: Duration = Duration::from_secs(180);

/// One GPU pod gets exactly one node and binds; once it is deleted the empty node, its claim
/// and its instance go. Run under the faults of `options`.
async fn one_gpu_pod_round_trip(options: Options, what: &str) {
    let c = Cluster::start_opts(options, &[]).await;
    let _: NodePool = c.create(gpu_pool("gpu", "2s")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Pod = c.create(gpu_pod("train")).await;
    eventually(&format!("{what}: the GPU pod binds"), DEADLINE, || async {
        bound_to(&c.pod("default", "train").await?)
    })
    .await;
    assert_eq!(c.claims().await.len(), 1, "{what}: exactly one claim");
    assert_eq!(c.nodes().await.len(), 1, "{what}: exactly one node");
    assert_eq!(c.instances().await.len(), 1, "{what}: exactly one instance");
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("train", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        &format!("{what}: the empty node, its claim and instance are removed"),
        DEADLINE,
        || async {
            (c.nodes().await.is_empty()
                && c.claims().await.is_empty()
                && c.instances().await.is_empty())
            .then_some(())
        },
    )
    .await;
    let counts = c.server().faults_injected();
    eprintln!("{what}: faults injected {counts:?}");
    drop(ctl);
}

fn faulty(faults: Faults) -> Options {
    Options {
        faults,
        ..options()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_faults_409_429_5xx_at_a_rate() {
    let rates = FaultRates {
        conflict: 0.1,
        throttle: 0.1,
        server_error: 0.1,
    };
    let options = faulty(Faults {
        seed: 1,
        reads: rates,
        writes: rates,
        watches: rates,
        ..Faults::default()
    });
    one_gpu_pod_round_trip(options, "409/429/5xx").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_faults_watch_drops_and_410_on_rewatch() {
    let options = faulty(Faults {
        seed: 2,
        watch_drop: 0.05,
        watch_gone: 0.3,
        ..Faults::default()
    });
    one_gpu_pod_round_trip(options, "watch drops and 410s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_faults_stale_resource_version_0_lists() {
    let options = Options {
        stale_lists: Some(Duration::from_secs(3)),
        faults: Faults {
            seed: 3,
            watch_gone: 0.3,
            ..Faults::default()
        },
        ..options()
    };
    one_gpu_pod_round_trip(options, "stale lists").await;
}

/// Running, Ready and not terminating pods with `app=web`.
async fn healthy_web(c: &Cluster) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().is_some_and(|s| {
                    s.phase.as_deref() == Some("Running")
                        && s.conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_faults_drain_waits_for_its_pdb_then_moves_a_deployment() {
    // Pods terminate gracefully (grace periods scaled to a tenth), owners recreate them and
    // pods of a deleted node linger 2 s before pod GC, as on a real cluster.
    let c = Cluster::start_opts(
        Options {
            graceful_deletion: Some(0.1),
            pod_gc_delay: Duration::from_secs(2),
            ..options()
        },
        &[],
    )
    .await;
    // Node 2 ends up 78 % used (three 1-CPU web pods and the agent on 3.92 allocatable CPUs):
    // a threshold above that makes it a scale-down candidate (at the default 0.5 it is kept).
    let mut pool = cpu_pool("cpu", "1s");
    pool["spec"]["disruption"]["utilizationThreshold"] = json!(0.9);
    let _: NodePool = c.create(pool).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    // A node-agent DaemonSet: one small pod on every node, evicted by a drain after the workloads.
    let _: DaemonSet = c
        .create(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "a", "image": "agent",
                                           "resources": {"requests": {"cpu": "50m"}}}]}}}
        }))
        .await;
    // Node 1: an anchor that must not be disrupted, and a filler leaving no room for the web pods.
    let mut anchor = cpu_pod("anchor", "500m", BTreeMap::from([("app", "anchor")]));
    anchor["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    let _: Pod = c.create(anchor).await;
    let _: Pod = c
        .create(cpu_pod("filler", "3", BTreeMap::from([("app", "filler")])))
        .await;
    let n1 = eventually("anchor and filler bound", DEADLINE, || async {
        let a = bound_to(&c.pod("default", "anchor").await?)?;
        let f = bound_to(&c.pod("default", "filler").await?)?;
        (a == f).then_some(a)
    })
    .await;
    // Node 2: a Deployment of three 1-CPU replicas behind maxUnavailable: 1.
    let _: Deployment = c
        .create(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"terminationGracePeriodSeconds": 20,
                                           "containers": [{"name": "web", "image": "web",
                                               "resources": {"requests": {"cpu": "1"}}}]}}}
        }))
        .await;
    let _: PodDisruptionBudget = c
        .create(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .await;
    eventually(
        "three web replicas running off node 1",
        DEADLINE,
        || async {
            let web = healthy_web(&c).await;
            (web.len() == 3 && web.iter().all(|p| bound_to(p).is_some_and(|n| n != n1)))
                .then_some(())
        },
    )
    .await;
    eprintln!("drain: web replicas running on node 2");
    let pdb: PodDisruptionBudget = Api::namespaced(c.client.clone(), "default")
        .get("web")
        .await
        .unwrap();
    let st = pdb.status.unwrap();
    assert_eq!(
        (st.expected_pods, st.desired_healthy, st.disruptions_allowed),
        (3, 2, 1),
        "the budget counts the Deployment's replicas"
    );
    // Without the filler, node 1 has room for all three web pods. Moving them takes three
    // disruptions at once and the budget allows one, so node 2 is kept (the Cluster
    // Autoscaler's rule: a node is removable only if all its pods can be evicted within every
    // PDB's allowance). The node must still be there after the deletion has been planned on.
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("filler", &DeleteParams::default())
        .await
        .unwrap();
    eprintln!("drain: filler deleted; the budget keeps node 2");
    eventually("the filler gone", DEADLINE, || async {
        c.pod("default", "filler").await.is_none().then_some(())
    })
    .await;
    // Rounds completed 5 s after the filler went: past unneededTime (1s) and validation (1s).
    let gone_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    eventually(
        "controller rounds 5 s after the filler went",
        DEADLINE,
        || async {
            ctl.metric("gpu_autoscaler_last_round_timestamp_seconds")
                .filter(|t| *t > gone_at + 5.0)
        },
    )
    .await;
    assert_eq!(
        c.nodes().await.len(),
        2,
        "node 2 is kept while the PDB allows 1 of 3"
    );
    assert_eq!(
        c.server().evictions(),
        (0, 0),
        "nothing evicted against the budget"
    );
    // The owner raises the budget: all three may go at once, and node 2 is consolidated away.
    Api::<PodDisruptionBudget>::namespaced(c.client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxUnavailable": 3}})),
        )
        .await
        .unwrap();
    eprintln!("drain: budget raised to 3, waiting for the consolidation");
    eventually(
        "the web pods moved to node 1 and node 2 is gone",
        DEADLINE,
        || {
            let (c, n1) = (&c, n1.clone());
            async move {
                let web = healthy_web(c).await;
                let nodes = c.nodes().await;
                (nodes.len() == 1
                    && nodes[0].metadata.name.as_deref() == Some(n1.as_str())
                    && web.len() == 3
                    && web
                        .iter()
                        .all(|p| bound_to(p).as_deref() == Some(n1.as_str())))
                .then_some(())
            }
        },
    )
    .await;
    let (accepted, refused) = c.server().evictions();
    assert!(accepted >= 3, "every web pod was evicted: {accepted}");
    assert_eq!(refused, 0, "no eviction beyond the raised budget");
    // Each of the three evicted web pods is told why, on the pod.
    eventually("an Evicted event per evicted web pod", DEADLINE, || async {
        let told = Api::<Event>::namespaced(c.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("Evicted")
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Pod")
                    && e.note.as_deref().is_some_and(|n| {
                        n.starts_with("evicted by gpu-autoscaler to remove its node")
                    })
            })
            .count();
        (told >= 3).then_some(())
    })
    .await;
    // The DaemonSet follows the nodes: one agent on the one node left, once pod GC ran.
    eventually("one agent pod, on node 1", DEADLINE, || async {
        let agents = Api::<Pod>::namespaced(c.client.clone(), "default")
            .list(&ListParams::default().labels("app=agent"))
            .await
            .ok()?
            .items;
        (agents.len() == 1 && bound_to(&agents[0]).as_deref() == Some(n1.as_str())).then_some(())
    })
    .await;
}

/// One retry layer, bounded: a kwok launch whose writes are all throttled makes exactly
/// `max_attempts` (5) create calls, then fails as throttled; the controller adds none (its
/// `cloud` wrapper makes each operation once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_faults_kwok_retries_an_operation_at_most_five_times() {
    use providers::kwok::{KwokConfig, KwokProvider};
    use providers::{CloudProvider, LaunchRequest, OfferingKey, ProviderError};
    let throttled = FaultRates {
        throttle: 1.0,
        ..FaultRates::default()
    };
    let c = Cluster::start_opts(
        faulty(Faults {
            seed: 7,
            writes: throttled,
            ..Faults::default()
        }),
        &[],
    )
    .await;
    // As the controller builds kwok's client: kube's own retries off, the provider's only.
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&c._server.kubeconfig_yaml()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client that gets the faults");
    let catalog = providers::catalog::default().for_provider("aws");
    let it = catalog
        .iter()
        .find(|t| t.name == "m5.xlarge")
        .expect("m5.xlarge in the embedded catalog");
    let offering = &it.offerings[0];
    let request = LaunchRequest {
        claim: "c1".into(),
        pool: "cpu".into(),
        candidates: vec![OfferingKey {
            instance_type: it.name.clone(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
        }],
        class: Default::default(),
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
        placement_group: None,
        gpu_sharing: Default::default(),
    };
    let mut kwok_config = KwokConfig::default();
    kwok_config.retry.base_delay_ms = 10;
    let kwok = KwokProvider::new(client, catalog.clone(), kwok_config);
    let err = kwok
        .launch(&request)
        .await
        .expect_err("every create is throttled");
    assert!(matches!(err, ProviderError::Throttled { .. }), "{err}");
    assert_eq!(
        c.server().faults_injected().throttles,
        5,
        "5 attempts, one create each"
    );
    assert!(c.instances().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_faults_a_claim_create_stored_but_answered_503_launches_one_node() {
    // The client library retries a create answered 503; the first attempt was stored. With
    // a server-chosen name (`generateName`) the retry made a second NodeClaim and a second
    // node for one pod.
    let options = faulty(Faults {
        lost_create_answer: Some("nodeclaims".into()),
        ..Faults::default()
    });
    let c = Cluster::start_opts(options, &[]).await;
    let _: NodePool = c.create(gpu_pool("gpu", "1h")).await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    let _: Pod = c.create(gpu_pod("train")).await;
    eventually("the GPU pod binds", DEADLINE, || async {
        bound_to(&c.pod("default", "train").await?)
    })
    .await;
    // A few more rounds: nothing else is launched for the pod.
    ctl.more_loops("provision", 5).await;
    assert_eq!(c.server().faults_injected().server_errors_after_write, 1);
    assert_eq!(c.claims().await.len(), 1, "exactly one claim");
    assert_eq!(c.instances().await.len(), 1, "exactly one instance");
}
