//! The cluster behaviour beyond the API itself: graceful pod termination, workload controllers
//! recreating pods, PodDisruptionBudgets counting the owner's replicas, delayed pod GC, stale
//! `resourceVersion=0` lists, and injected faults.

use std::time::{Duration, Instant};

use fake_apiserver::{BinderOptions, FakeApiServer, FaultRates, Faults, Options};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn server(options: Options) -> (FakeApiServer, Client) {
    let s = FakeApiServer::new(Options {
        binder: Some(BinderOptions {
            interval: Duration::from_millis(20),
            ..BinderOptions::default()
        }),
        ..options
    });
    let c = s.client_without_faults();
    (s, c)
}

async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn create(c: &Client, ns: &str, plural_path: &str, v: Value) {
    let url = format!("/apis/apps/v1/namespaces/{ns}/{plural_path}");
    let req = axum::http::Request::post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&v).unwrap())
        .unwrap();
    let _: Value = c.request(req).await.expect("create");
}

fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

async fn pods(c: &Client, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.clone(), "default")
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
}

fn deployment(name: &str, replicas: i32, grace: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"terminationGracePeriodSeconds": grace,
                                          "containers": [{"name": "c", "image": "x",
                                              "resources": {"requests": {"cpu": "1"}}}]}}}})
}

#[tokio::test]
async fn graceful_deletion_keeps_a_terminating_pod_for_its_scaled_grace_period() {
    let (_s, c) = server(Options {
        graceful_deletion: Some(0.1),
        ..Options::default()
    });
    Api::<Node>::all(c.clone())
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let pods_api: Api<Pod> = Api::namespaced(c.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"terminationGracePeriodSeconds": 10, "containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    pods_api.create(&PostParams::default(), &p).await.unwrap();
    until("p runs", || async {
        pods_api.get("p").await.ok().filter(running)
    })
    .await;
    let started = Instant::now();
    pods_api
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    let p = pods_api.get("p").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(10));
    until("p removed", || async {
        pods_api.get_opt("p").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "10 s scaled by 0.1: about one second, took {:?}",
        started.elapsed()
    );
    // DeleteOptions.gracePeriodSeconds wins over the pod's own; 0 removes at once.
    let q: Pod =
        serde_json::from_value(json!({"metadata": {"name": "q", "finalizers": ["x/hold"]},
        "spec": {"containers": [{"name": "c", "image": "x"}]}}))
        .unwrap();
    pods_api.create(&PostParams::default(), &q).await.unwrap();
    until("q runs", || async {
        pods_api.get("q").await.ok().filter(running)
    })
    .await;
    pods_api
        .delete("q", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    // Its finalizer still holds it.
    let q = pods_api.get("q").await.unwrap();
    assert!(q.metadata.deletion_timestamp.is_some());
    pods_api
        .patch(
            "q",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(pods_api.get_opt("q").await.unwrap().is_none());
}

#[tokio::test]
async fn a_max_unavailable_1_budget_refuses_the_second_eviction_while_the_first_is_replaced() {
    let (s, c) = server(Options {
        graceful_deletion: Some(0.1),
        ..Options::default()
    });
    Api::<Node>::all(c.clone())
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    create(&c, "default", "deployments", deployment("web", 3, 10)).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let web = until("three replicas run", || async {
        let p = pods(&c, "app=web").await;
        (p.len() == 3 && p.iter().all(running)).then_some(p)
    })
    .await;
    let st = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (st.expected_pods, st.desired_healthy, st.disruptions_allowed),
        (3, 2, 1)
    );
    let pods_api: Api<Pod> = Api::namespaced(c.clone(), "default");
    let (a, b) = (web[0].name_any(), web[1].name_any());
    pods_api.evict(&a, &EvictParams::default()).await.unwrap();
    // The evicted pod terminates; its replacement is created at once but not yet ready when
    // the second eviction comes.
    let err = pods_api
        .evict(&b, &EvictParams::default())
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 429),
        other => panic!("expected 429, got {other:?}"),
    }
    let st = pdbs.get("web").await.unwrap().status.unwrap();
    assert!(st.disrupted_pods.unwrap_or_default().contains_key(&a));
    // Once the replacement runs, the budget allows the next one.
    until("a replacement runs", || async {
        let p = pods(&c, "app=web").await;
        (p.iter().filter(|p| running(p)).count() == 3).then_some(())
    })
    .await;
    pods_api.evict(&b, &EvictParams::default()).await.unwrap();
    // The first pod leaves after its scaled grace period and leaves disruptedPods with it.
    until("a gone and unlisted", || async {
        let gone = pods_api.get_opt(&a).await.unwrap().is_none();
        let st = pdbs.get("web").await.ok()?.status?;
        (gone && !st.disrupted_pods.unwrap_or_default().contains_key(&a)).then_some(())
    })
    .await;
    assert_eq!(s.evictions(), (2, 1));
}

#[tokio::test]
async fn statefulsets_and_daemonsets_keep_their_pods() {
    let (_s, c) = server(Options::default());
    let nodes: Api<Node> = Api::all(c.clone());
    for n in ["n1", "n2"] {
        nodes
            .create(&PostParams::default(), &node(n))
            .await
            .unwrap();
    }
    create(&c, "default", "statefulsets", json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db"}, "spec": {"replicas": 2, "serviceName": "db",
        "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})).await;
    create(&c, "default", "daemonsets", json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})).await;
    until("db-0, db-1 and an agent per node run", || async {
        let mut db: Vec<String> = pods(&c, "app=db")
            .await
            .iter()
            .filter(|p| running(p))
            .map(|p| p.name_any())
            .collect();
        db.sort();
        let mut agents: Vec<String> = pods(&c, "app=agent")
            .await
            .iter()
            .filter(|p| running(p))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        agents.sort();
        (db == ["db-0", "db-1"] && agents == ["n1", "n2"]).then_some(())
    })
    .await;
    let pods_api: Api<Pod> = Api::namespaced(c.clone(), "default");
    let old_uid = pods_api.get("db-1").await.unwrap().uid();
    pods_api
        .delete("db-1", &DeleteParams::default())
        .await
        .unwrap();
    until("db-1 recreated with the same name", || async {
        let p = pods_api.get_opt("db-1").await.ok()??;
        (p.uid() != old_uid && running(&p)).then_some(())
    })
    .await;
    // A third node gets an agent too; a deleted node's agent goes with pod GC.
    nodes
        .create(&PostParams::default(), &node("n3"))
        .await
        .unwrap();
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    until("agents on n2 and n3", || async {
        let mut agents: Vec<String> = pods(&c, "app=agent")
            .await
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        agents.sort();
        (agents == ["n2", "n3"]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn pod_gc_waits_for_its_delay() {
    let (_s, c) = server(Options {
        pod_gc_delay: Duration::from_millis(800),
        ..Options::default()
    });
    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let pods_api: Api<Pod> = Api::namespaced(c.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    pods_api.create(&PostParams::default(), &p).await.unwrap();
    until("p runs", || async {
        pods_api.get("p").await.ok().filter(running)
    })
    .await;
    let deleted = Instant::now();
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert!(
        pods_api.get_opt("p").await.unwrap().is_some(),
        "not at once"
    );
    until("p collected", || async {
        pods_api.get_opt("p").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(deleted.elapsed() >= Duration::from_millis(700));
}

#[tokio::test]
async fn resource_version_0_lists_lag_and_the_watch_from_them_catches_up() {
    let (s, c) = server(Options {
        stale_lists: Some(Duration::from_millis(500)),
        binder: None,
        ..Options::default()
    });
    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .create(&PostParams::default(), &node("old"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await; // let "old" age past the lag
    nodes
        .create(&PostParams::default(), &node("new"))
        .await
        .unwrap();
    let stale = nodes
        .list(&ListParams::default().match_any())
        .await
        .unwrap();
    let names: Vec<String> = stale.items.iter().map(|n| n.name_any()).collect();
    assert_eq!(names, ["old"], "the cache has not seen the newest node yet");
    let fresh = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        fresh.items.len(),
        2,
        "a list without resourceVersion is consistent"
    );
    let rv: u64 = stale.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv < s.resource_version());
}

#[tokio::test]
async fn injected_faults_hit_the_faulty_client_only() {
    let s = FakeApiServer::new(Options {
        faults: Faults {
            seed: 9,
            reads: FaultRates {
                throttle: 0.3,
                server_error: 0.3,
                ..FaultRates::default()
            },
            ..Faults::default()
        },
        ..Options::default()
    });
    let (faulty, clean) = (s.client(), s.client_without_faults());
    let mut codes = std::collections::BTreeMap::new();
    for _ in 0..100 {
        let r = Api::<Pod>::namespaced(faulty.clone(), "default")
            .list(&ListParams::default())
            .await;
        let code = match r {
            Ok(_) => 200,
            Err(kube::Error::Api(s)) => s.code,
            Err(e) => panic!("{e}"),
        };
        *codes.entry(code).or_insert(0) += 1;
        Api::<Pod>::namespaced(clean.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap();
    }
    assert!(
        codes.keys().all(|c| [200, 429, 500, 503].contains(c)),
        "{codes:?}"
    );
    assert!(
        codes.contains_key(&429) && codes.contains_key(&200),
        "{codes:?}"
    );
    let counts = s.faults_injected();
    assert_eq!(counts.throttles, codes[&429]);
    assert_eq!(
        counts.server_errors,
        codes.get(&500).unwrap_or(&0) + codes.get(&503).unwrap_or(&0)
    );
}

/// The audit of disruptive calls orders them against the test's own writes: each record
/// carries the server's resourceVersion when the call came, so a write of the test (failing a
/// Node, say) tells the calls before it from those after it.
#[tokio::test]
async fn audit_records_carry_the_resource_version_of_their_call() {
    let s = FakeApiServer::new(Options::default());
    let (audited, clean) = (s.client(), s.client_without_faults());
    let nodes = Api::<Node>::all(clean.clone());
    for n in ["n1", "n2"] {
        nodes
            .create(&PostParams::default(), &node(n))
            .await
            .unwrap();
    }
    let before = s.resource_version();
    Api::<Node>::all(audited.clone())
        .delete("n1", &DeleteParams::default())
        .await
        .unwrap();
    // The test's own write in between: a later call has at least its resourceVersion.
    let marker = nodes
        .patch(
            "n2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let at: u64 = marker.metadata.resource_version.unwrap().parse().unwrap();
    Api::<Node>::all(audited)
        .delete("n2", &DeleteParams::default())
        .await
        .unwrap();
    let req = axum::http::Request::get("/debug/audit")
        .body(Vec::new())
        .unwrap();
    let audit: Value = clean.request(req).await.unwrap();
    let rv = |node: &str| {
        audit["records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["call"] == "deleteNode" && r["node"] == node)
            .and_then(|r| r["rv"].as_u64())
            .unwrap_or_else(|| panic!("no deleteNode record with rv for {node}: {audit}"))
    };
    assert_eq!(rv("n1"), before, "the call before the marker");
    assert!(rv("n1") < at, "{} < {at}", rv("n1"));
    assert!(rv("n2") >= at, "{} >= {at}", rv("n2"));
}

/// A Node deletion disrupts nothing while a finalizer holds the Node: the audit records it
/// when the system under test releases the last finalizer (with the pods bound then and the
/// Node's uid), not at the delete call, and not when a test's own client releases it.
#[tokio::test]
async fn a_node_held_by_a_finalizer_is_audited_when_it_goes() {
    let (s, clean) = server(Options {
        pod_gc_delay: Duration::from_secs(60),
        ..Options::default()
    });
    let audited = s.client();
    let nodes = Api::<Node>::all(clean.clone());
    for n in ["held", "own"] {
        let mut obj = node(n);
        obj.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        nodes.create(&PostParams::default(), &obj).await.unwrap();
    }
    let pods_api: Api<Pod> = Api::namespaced(clean.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"nodeName": "held", "containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    pods_api.create(&PostParams::default(), &p).await.unwrap();
    let audit = || async {
        let req = axum::http::Request::get("/debug/audit")
            .body(Vec::new())
            .unwrap();
        let a: Value = clean.request(req).await.unwrap();
        a["records"].as_array().unwrap().clone()
    };
    let uid = nodes.get("held").await.unwrap().metadata.uid.unwrap();
    for n in ["held", "own"] {
        Api::<Node>::all(audited.clone())
            .delete(n, &DeleteParams::default())
            .await
            .unwrap();
    }
    assert!(
        audit().await.is_empty(),
        "the finalizers hold both Nodes: nothing disrupted yet"
    );
    let release = kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let params = kube::api::PatchParams::default();
    nodes.patch("own", &params, &release).await.unwrap();
    Api::<Node>::all(audited)
        .patch("held", &params, &release)
        .await
        .unwrap();
    let records = audit().await;
    assert_eq!(records.len(), 1, "only the audited release: {records:?}");
    let r = &records[0];
    assert_eq!(r["call"], "deleteNode");
    assert_eq!(r["node"], "held");
    assert_eq!(r["uid"], uid.as_str());
    assert_eq!(r["pods"][0]["pod"], "default/p", "{r}");
}
