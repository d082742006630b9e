//! Request/response semantics through kube-rs: CRUD, concurrency, selectors, patches, status
//! subresources, finalizers, eviction with PodDisruptionBudgets, binding and the harness scheduler.

use axum::http;
use fake_apiserver::{BinderOptions, FakeApiServer, Options};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn server() -> (FakeApiServer, Client) {
    let s = FakeApiServer::new(Options::default());
    let c = s.client();
    (s, c)
}

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    }))
    .unwrap()
}

fn gpu_pod(name: &str, gpus: u32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "cuda",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        }
    }))
    .unwrap()
}

fn node(name: &str, ready: bool, allocatable: Value, taints: Value) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints},
        "status": {
            "allocatable": allocatable, "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
        }
    }))
    .unwrap()
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn rv<K: ResourceExt>(o: &K) -> u64 {
    o.resource_version().unwrap().parse().unwrap()
}

#[tokio::test]
async fn crud_resource_versions_and_conflicts() {
    let (_s, client) = server();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let a = pods
        .create(&PostParams::default(), &pod("a", json!({"app": "x"})))
        .await
        .unwrap();
    let b = pods
        .create(&PostParams::default(), &pod("b", json!({})))
        .await
        .unwrap();
    assert!(
        rv(&b) > rv(&a),
        "one global counter: later writes have larger versions"
    );
    assert!(a.uid().is_some() && a.creation_timestamp().is_some());
    assert_eq!(a.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(
        a.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );

    let dup = pods
        .create(&PostParams::default(), &pod("a", json!({})))
        .await
        .unwrap_err();
    let st = api_error(dup);
    assert_eq!((st.code, st.reason.as_str()), (409, "AlreadyExists"));

    let missing = pods.get("nope").await.unwrap_err();
    assert_eq!(api_error(missing).code, 404);

    // Optimistic concurrency: a replace with the current resourceVersion wins once.
    let mut fresh = pods.get("a").await.unwrap();
    fresh.labels_mut().insert("v".into(), "1".into());
    let updated = pods
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert!(rv(&updated) > rv(&a));
    let stale = pods
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap_err();
    let st = api_error(stale);
    assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));

    // A no-op write does not bump the resourceVersion.
    let same = pods
        .replace("a", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_eq!(rv(&same), rv(&updated));

    // A creation in a namespace that does not exist is a 404.
    let elsewhere: Api<Pod> = Api::namespaced(client.clone(), "ghost");
    let st = api_error(
        elsewhere
            .create(&PostParams::default(), &pod("p", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(st.code, 404);

    // generateName and dry-run.
    let mut g = pod("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let made = pods.create(&PostParams::default(), &g).await.unwrap();
    assert!(made.name_any().starts_with("gen-") && made.name_any().len() == 9);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    pods.create(&dry, &pod("dry", json!({}))).await.unwrap();
    assert_eq!(api_error(pods.get("dry").await.unwrap_err()).code, 404);

    // Invalid label values are rejected like the real server does.
    let st = api_error(
        pods.create(
            &PostParams::default(),
            &pod("bad", json!({"a": "no/slash"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(st.code, 422);
    assert!(st.message.contains("metadata.labels"), "{}", st.message);

    pods.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(pods.get("b").await.unwrap_err()).code, 404);
    let names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test]
async fn label_and_field_selectors_and_pagination() {
    let (_s, client) = server();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (n, app, tier) in [
        ("p1", "web", "a"),
        ("p2", "web", "b"),
        ("p3", "db", "a"),
        ("p4", "db", "c"),
    ] {
        pods.create(
            &PostParams::default(),
            &pod(n, json!({"app": app, "tier": tier})),
        )
        .await
        .unwrap();
    }
    let names =
        |l: kube::core::ObjectList<Pod>| l.items.iter().map(|p| p.name_any()).collect::<Vec<_>>();
    let q = |sel: &str| ListParams::default().labels(sel);
    assert_eq!(names(pods.list(&q("app=web")).await.unwrap()), ["p1", "p2"]);
    assert_eq!(
        names(pods.list(&q("app!=web")).await.unwrap()),
        ["p3", "p4"]
    );
    assert_eq!(
        names(pods.list(&q("tier in (a,c)")).await.unwrap()),
        ["p1", "p3", "p4"]
    );
    assert_eq!(
        names(pods.list(&q("tier notin (a, c),app")).await.unwrap()),
        ["p2"]
    );
    assert_eq!(
        names(pods.list(&q("!app")).await.unwrap()),
        Vec::<String>::new()
    );

    let bound = Patch::Merge(json!({"status": {"phase": "Running"}}));
    pods.patch_status("p3", &PatchParams::default(), &bound)
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p3"}, "target": {"kind": "Node", "name": "n1"}});
    pods.create_subresource::<Value, Value>("binding", "p3", &PostParams::default(), &binding)
        .await
        .unwrap();
    let f = |sel: &str| ListParams::default().fields(sel);
    assert_eq!(
        names(pods.list(&f("spec.nodeName=n1")).await.unwrap()),
        ["p3"]
    );
    assert_eq!(
        names(pods.list(&f("spec.nodeName=")).await.unwrap()),
        ["p1", "p2", "p4"]
    );
    assert_eq!(
        names(pods.list(&f("status.phase=Running")).await.unwrap()),
        ["p3"]
    );
    assert_eq!(
        names(pods.list(&f("metadata.name=p2")).await.unwrap()),
        ["p2"]
    );
    assert_eq!(
        names(
            pods.list(&f("status.phase!=Running,metadata.name!=p1"))
                .await
                .unwrap()
        ),
        ["p2", "p4"]
    );
    let st = api_error(pods.list(&f("spec.bogus=1")).await.unwrap_err());
    assert_eq!(st.code, 400);

    // Pages of two, stitched together by continue tokens.
    let mut all = Vec::new();
    let mut lp = ListParams::default().limit(2);
    loop {
        let page = pods.list(&lp).await.unwrap();
        all.extend(page.items.iter().map(|p| p.name_any()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(all, ["p1", "p2", "p3", "p4"]);

    // All-namespaces list.
    let everywhere: Api<Pod> = Api::all(client);
    assert_eq!(
        everywhere
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        4
    );
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let (_s, client) = server();
    let nodes: Api<Node> = Api::all(client.clone());
    let taint = json!([{"key": "a", "effect": "NoSchedule"}]);
    nodes
        .create(
            &PostParams::default(),
            &node("n1", true, json!({"cpu": "4"}), taint),
        )
        .await
        .unwrap();
    let pp = PatchParams::default();

    let n = nodes
        .patch(
            "n1",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(n.labels().get("x").map(String::as_str), Some("1"));
    assert_eq!(
        n.labels().get("kubernetes.io/hostname").map(String::as_str),
        Some("n1")
    );

    // JSON patch (RFC 6902) through a raw request: append a taint.
    let req = http::Request::patch("/api/v1/nodes/n1")
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "b", "effect": "NoSchedule"}}])).unwrap())
        .unwrap();
    let n: Node = client.request(req).await.unwrap();
    assert_eq!(n.spec.unwrap().taints.unwrap().len(), 2);

    // A failing `test` op is a 422.
    let req = http::Request::patch("/api/v1/nodes/n1")
        .header("content-type", "application/json-patch+json")
        .body(
            serde_json::to_vec(
                &json!([{"op": "test", "path": "/spec/taints/0/key", "value": "zzz"}]),
            )
            .unwrap(),
        )
        .unwrap();
    assert_eq!(
        api_error(client.request::<Node>(req).await.unwrap_err()).code,
        422
    );

    // Strategic merge: finalizers union, taints replaced wholesale (no merge key upstream).
    let n = nodes
        .patch("n1", &pp, &Patch::Strategic(json!({"metadata": {"finalizers": ["f1"]}, "spec": {"taints": [{"key": "c", "effect": "NoExecute"}]}})))
        .await
        .unwrap();
    assert_eq!(n.finalizers(), ["f1"]);
    let taints = n.spec.unwrap().taints.unwrap();
    assert_eq!(taints.len(), 1);
    assert_eq!(taints[0].key, "c");

    // Conditions merge by type through a strategic status patch.
    let n = nodes
        .patch_status(
            "n1",
            &pp,
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}}),
            ),
        )
        .await
        .unwrap();
    let conds = n.status.unwrap().conditions.unwrap();
    assert_eq!(
        conds.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
        ["Ready", "MemoryPressure"]
    );

    // A resourceVersion inside a patch is a precondition.
    let st = api_error(
        nodes
            .patch(
                "n1",
                &pp,
                &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"y": "2"}}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(st.code, 409);

    // Server-side apply: creates when absent, merges when present; needs a field manager.
    let ssa = PatchParams::apply("tests");
    let applied = nodes
        .patch("n2", &ssa, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "labels": {"a": "1"}}})))
        .await
        .unwrap();
    assert_eq!(applied.labels()["a"], "1");
    let applied = nodes
        .patch("n2", &ssa, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "labels": {"b": "2"}}})))
        .await
        .unwrap();
    assert_eq!(applied.labels().len(), 2);
}

#[tokio::test]
async fn status_subresource_splits_spec_and_status() {
    let (_s, client) = server();
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    // A status change through the main resource is ignored...
    let p = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"l": "1"}}, "status": {"phase": "Running"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(p.labels()["l"], "1");
    // ...and a metadata change through /status is ignored.
    let p = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"l": "2"}}, "status": {"phase": "Running"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(p.labels()["l"], "1");
    // replace_status with a stale resourceVersion conflicts.
    let mut stale = p.clone();
    stale.metadata.resource_version = Some("1".into());
    let st = api_error(
        pods.replace_status("p", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(st.code, 409);
    // Pod spec is immutable apart from a few fields.
    let st = api_error(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "sneaky"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(st.code, 422);
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    let (_s, client) = server();
    let pods: Api<Pod> = Api::default_namespaced(client);
    let mut p = pod("f", json!({}));
    p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    let res = pods.delete("f", &DeleteParams::default()).await.unwrap();
    let terminating = res
        .left()
        .expect("the object comes back while finalizers remain");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let got = pods.get("f").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    // No new finalizers on a terminating object.
    let st = api_error(
        pods.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep", "x/y"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(st.code, 422);
    // Removing the last finalizer completes the deletion.
    pods.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(pods.get("f").await.unwrap_err()).code, 404);
}

async fn running_ready(pods: &Api<Pod>, name: &str, labels: Value) {
    pods.create(&PostParams::default(), &pod(name, labels))
        .await
        .unwrap();
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

#[tokio::test]
async fn eviction_honours_pod_disruption_budgets() {
    let (_s, client) = server();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    running_ready(&pods, "w1", json!({"app": "web"})).await;
    running_ready(&pods, "w2", json!({"app": "web"})).await;
    running_ready(&pods, "free", json!({"app": "other"})).await;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (2, 1, 1)
    );

    pods.evict("free", &EvictParams::default()).await.unwrap();
    pods.evict("w1", &EvictParams::default()).await.unwrap();
    assert_eq!(api_error(pods.get("w1").await.unwrap_err()).code, 404);
    assert_eq!(
        pdbs.get("web")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        0
    );

    let st = api_error(pods.evict("w2", &EvictParams::default()).await.unwrap_err());
    assert_eq!((st.code, st.reason.as_str()), (429, "TooManyRequests"));
    assert!(
        st.details.unwrap().causes[0]
            .message
            .contains("needs 1 healthy pods and has 1")
    );
    assert!(pods.get("w2").await.is_ok());

    // Pending pods are evicted regardless of the budget, as on the real server.
    pods.create(&PostParams::default(), &pod("w3", json!({"app": "web"})))
        .await
        .unwrap();
    pods.evict("w3", &EvictParams::default()).await.unwrap();

    // maxUnavailable: 0 blocks everything healthy.
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": null, "maxUnavailable": 0}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api_error(pods.evict("w2", &EvictParams::default()).await.unwrap_err()).code,
        429
    );
}

#[tokio::test]
async fn harness_scheduler_binds_fitting_pods_and_marks_the_rest_unschedulable() {
    let (s, client) = server();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let gpu_taint = json!([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]);
    nodes
        .create(
            &PostParams::default(),
            &node(
                "cpu-1",
                true,
                json!({"cpu": "2", "memory": "4Gi", "pods": "10"}),
                json!([]),
            ),
        )
        .await
        .unwrap();
    nodes
        .create(
            &PostParams::default(),
            &node(
                "gpu-1",
                true,
                json!({"cpu": "8", "memory": "32Gi", "pods": "10", "nvidia.com/gpu": "1"}),
                gpu_taint.clone(),
            ),
        )
        .await
        .unwrap();
    nodes
        .create(
            &PostParams::default(),
            &node(
                "gpu-notready",
                false,
                json!({"cpu": "8", "memory": "32Gi", "pods": "10", "nvidia.com/gpu": "8"}),
                gpu_taint,
            ),
        )
        .await
        .unwrap();

    pods.create(&PostParams::default(), &pod("cpu-a", json!({})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("cpu-b", json!({})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("cpu-c", json!({})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &gpu_pod("gpu-a", 1))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &gpu_pod("gpu-b", 1))
        .await
        .unwrap();

    let bound = s.schedule_now(&BinderOptions::default());
    assert_eq!(bound, 3);
    let node_of = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let get = |n: &'static str| {
        let pods = pods.clone();
        async move { pods.get(n).await.unwrap() }
    };
    assert_eq!(node_of(&get("cpu-a").await), "cpu-1");
    assert_eq!(node_of(&get("cpu-b").await), "cpu-1");
    // The GPU node is tainted and the CPU pod does not tolerate it: no room left.
    let c = get("cpu-c").await;
    assert_eq!(node_of(&c), "");
    assert_eq!(node_of(&get("gpu-a").await), "gpu-1");
    let g = get("gpu-b").await;
    assert_eq!(node_of(&g), "");
    let cond = g
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    let msg = cond.message.unwrap();
    assert!(
        msg.contains("Insufficient nvidia.com/gpu") && msg.contains("not ready"),
        "{msg}"
    );
    let a = get("gpu-a").await.status.unwrap();
    assert_eq!(a.phase.as_deref(), Some("Running"));

    // A second pass with nothing new writes nothing.
    let before = s.resource_version();
    assert_eq!(s.schedule_now(&BinderOptions::default()), 0);
    assert_eq!(s.resource_version(), before);

    // Deleting the node garbage-collects its pods (pod GC).
    nodes
        .delete("gpu-1", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_error(pods.get("gpu-a").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn background_binder_binds_new_pods() {
    let s = FakeApiServer::new(Options {
        binder: Some(BinderOptions {
            interval: std::time::Duration::from_millis(20),
            ..Default::default()
        }),
        ..Options::default()
    });
    let client = s.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    nodes
        .create(
            &PostParams::default(),
            &node(
                "n",
                true,
                json!({"cpu": "4", "memory": "8Gi", "pods": "10"}),
                json!([]),
            ),
        )
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    for _ in 0..200 {
        let p = pods.get("p").await.unwrap();
        if p.spec.unwrap().node_name.as_deref() == Some("n") {
            s.stop_background();
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the background binder did not bind the pod");
}

#[tokio::test]
async fn discovery_documents() {
    let (_s, client) = server();
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    let (ar, caps) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk(
            "policy",
            "v1",
            "PodDisruptionBudget",
        ))
        .unwrap();
    assert_eq!(ar.plural, "poddisruptionbudgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(
        discovery
            .resolve_gvk(&kube::api::GroupVersionKind::gvk(
                "coordination.k8s.io",
                "v1",
                "Lease"
            ))
            .is_some()
    );
    assert!(
        discovery
            .resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "Node"))
            .is_some()
    );
}

#[tokio::test]
async fn kube_runtime_event_recorder_publishes_and_aggregates() {
    use k8s_openapi::api::events::v1::Event as EventV1;
    use kube::Resource;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (_s, client) = server();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let p = pods
        .create(&PostParams::default(), &pod("e", json!({})))
        .await
        .unwrap();
    let n = nodes
        .create(
            &PostParams::default(),
            &node("n", true, json!({}), json!([])),
        )
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpu-autoscaler".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "TriggeredScaleUp".into(),
        note: Some("claim c1".into()),
        action: "ScaleUp".into(),
        secondary: None,
    };
    recorder.publish(&ev, &p.object_ref(&())).await.unwrap();
    // The same event again becomes a series (a merge patch of the first one).
    recorder.publish(&ev, &p.object_ref(&())).await.unwrap();
    recorder.publish(&ev, &n.object_ref(&())).await.unwrap();
    let events: Api<EventV1> = Api::default_namespaced(client);
    let list = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(list.len(), 2, "{list:?}");
    let on_pod = list
        .iter()
        .find(|e| e.regarding.as_ref().unwrap().name.as_deref() == Some("e"))
        .unwrap();
    assert_eq!(on_pod.series.as_ref().unwrap().count, 2);
}

#[tokio::test]
async fn leases_arbitrate_leadership_by_resource_version() {
    use k8s_openapi::api::coordination::v1::Lease;
    let (_s, client) = server();
    let leases: Api<Lease> = Api::default_namespaced(client);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "gpu-autoscaler"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}
    }))
    .unwrap();
    let first = leases.create(&PostParams::default(), &lease).await.unwrap();
    assert_eq!(
        api_error(
            leases
                .create(&PostParams::default(), &lease)
                .await
                .unwrap_err()
        )
        .code,
        409
    );
    // Two replicas read the same version and both try to take over: exactly one wins.
    let mut by_b = first.clone();
    by_b.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let mut by_c = first.clone();
    by_c.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let b = leases
        .replace("gpu-autoscaler", &PostParams::default(), &by_b)
        .await;
    let c = leases
        .replace("gpu-autoscaler", &PostParams::default(), &by_c)
        .await;
    assert!(b.is_ok());
    assert_eq!(api_error(c.unwrap_err()).code, 409);
    let now = leases.get("gpu-autoscaler").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test]
async fn daemonsets_store_templates_and_reset_status_on_create() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let (_s, client) = server();
    let dss: Api<DaemonSet> = Api::namespaced(client, "kube-system");
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "device-plugin"},
        "spec": {
            "selector": {"matchLabels": {"app": "dp"}},
            "template": {"metadata": {"labels": {"app": "dp"}}, "spec": {"containers": [{"name": "dp", "image": "nvidia/dp",
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]}}
        },
        "status": {"currentNumberScheduled": 9, "desiredNumberScheduled": 9, "numberMisscheduled": 0, "numberReady": 9}
    }))
    .unwrap();
    let made = dss.create(&PostParams::default(), &ds).await.unwrap();
    assert!(
        made.status.is_none(),
        "status is the controller's to write, not the creator's"
    );
    assert_eq!(made.metadata.generation, Some(1));
    let containers = made.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(
        containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["cpu"]
            .0,
        "50m"
    );
}

/// The LimitRanger's defaults on create: a request and limit neither set gets the namespace's
/// defaults, a request set is kept, a limit without a request is left as the request.
#[tokio::test]
async fn limit_ranges_default_what_a_created_pods_containers_leave_unset() {
    use k8s_openapi::api::core::v1::LimitRange;
    let (_s, client) = server();
    let ranges: Api<LimitRange> = Api::namespaced(client.clone(), "kube-system");
    let lr: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "defaults"},
        "spec": {"limits": [
            {"type": "Container", "default": {"cpu": "2", "memory": "1Gi"},
                "defaultRequest": {"cpu": "1500m"}},
            {"type": "Pod", "max": {"cpu": "64"}}
        ]}
    }))
    .unwrap();
    ranges.create(&PostParams::default(), &lr).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"containers": [
            {"name": "bare", "image": "agent"},
            {"name": "asks", "image": "agent", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "capped", "image": "agent", "resources": {"limits": {"memory": "256Mi"}}}
        ]}
    }))
    .unwrap();
    let made = pods.create(&PostParams::default(), &p).await.unwrap();
    let res: Vec<Value> = made
        .spec
        .unwrap()
        .containers
        .iter()
        .map(|c| serde_json::to_value(&c.resources).unwrap())
        .collect();
    assert_eq!(
        res,
        [
            json!({"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
            json!({"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
            json!({"requests": {"cpu": "1500m"}, "limits": {"cpu": "2", "memory": "256Mi"}}),
        ]
    );
    // Another namespace's pods are not its.
    let other: Api<Pod> = Api::namespaced(client, "default");
    let made = other
        .create(&PostParams::default(), &pod("plain", json!({})))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&made.spec.unwrap().containers[0].resources).unwrap(),
        json!({"requests": {"cpu": "1", "memory": "1Gi"}})
    );
}
