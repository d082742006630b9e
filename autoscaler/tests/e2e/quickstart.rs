//! The kwok walk-through of `docs/src/getting-started.md`, step by step against the fake API
//! server: the controller runs with the arguments of the rendered chart
//! (`deploy/manifests/gpu-autoscaler.yaml`), the NodePool and the pod are the ones the page
//! applies (read from the page, so the test follows it when it changes).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodepools::NodePool;
use serde_json::{Value, json};

use crate::harness::{Cluster, bound_to, eventually, root};

/// The chart's timings are real ones (5 s registration, 10 s for the device plugin).
const DEADLINE: Duration = Duration::from_secs(120);

fn page() -> String {
    std::fs::read_to_string(root().join("docs/src/getting-started.md")).expect("the page exists")
}

/// The files the page's `kubectl apply -f deploy/...` commands apply, in order.
fn applied_files(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| l.trim().strip_prefix("kubectl apply -f deploy/"))
        .map(|f| format!("deploy/{}", f.split_whitespace().next().unwrap_or(f)))
        .collect()
}

/// The YAML block that starts with `# pod.yaml`.
fn pod_block(page: &str) -> Value {
    let start = page
        .find("# pod.yaml")
        .expect("the page has a # pod.yaml block");
    let end = start + page[start..].find("```").expect("the block is closed");
    serde_norway::from_str(&page[start..end]).expect("the pod block is YAML")
}

/// The `args` and the non-downward-API `env` of the chart's controller container.
fn chart_args() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("deploy/manifests/gpu-autoscaler.yaml"))
        .expect("rendered manifests");
    let deploy: Deployment = serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("a manifest document"))
        .filter(|v: &Value| v["kind"] == "Deployment")
        .map(|v| serde_json::from_value(v).expect("a Deployment"))
        .next()
        .expect("the manifests hold the Deployment");
    let spec = deploy.spec.and_then(|s| s.template.spec).expect("pod spec");
    spec.containers[0].args.clone().expect("container args")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_kwok_walkthrough_as_written() {
    let page = page();
    let c = Cluster::start().await;
    // Step 2: the chart's controller, with its arguments as rendered. Only the metrics port
    // moves to an ephemeral loopback one (tests run side by side).
    let mut args: Vec<String> = chart_args()
        .into_iter()
        .filter(|a| !a.starts_with("--metrics-addr="))
        .collect();
    assert_eq!(args[0], "run");
    assert!(args.iter().any(|a| a == "--provider=kwok"), "{args:?}");
    args.push("--metrics-addr=127.0.0.1:0".into());
    // `helm install --create-namespace`: the lease lives in the release's namespace.
    let _: k8s_openapi::api::core::v1::Namespace = c
        .create(json!({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": "gpu-autoscaler"}}))
        .await;
    let ctl = c.controller_exact(
        "chart",
        &args,
        &[
            ("POD_NAMESPACE", "gpu-autoscaler"),
            ("POD_NAME", "gpu-autoscaler-0"),
        ],
    );
    // Step 3: the NodePool the page applies.
    let files = applied_files(&page);
    assert!(!files.is_empty(), "the page applies a NodePool");
    let mut pools = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(root().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let v: Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
        let np: NodePool = c.create(v).await;
        pools.push(np.name_any());
    }
    // Step 4: the page's pod, in the default namespace.
    let mut pod = pod_block(&page);
    pod["metadata"]["namespace"] = json!("default");
    let name = pod["metadata"]["name"]
        .as_str()
        .expect("the pod has a name")
        .to_string();
    let _: Pod = c.create(pod).await;
    let node = eventually(&format!("{name} bound to a new node"), DEADLINE, || async {
        bound_to(&c.pod("default", &name).await?)
    })
    .await;
    // "a claim appears, then Launched, Registered, Initialized"
    let claim = eventually("the claim to be Initialized", DEADLINE, || async {
        let cl = c.claims().await.into_iter().next()?;
        let conds = &cl.status.as_ref()?.conditions;
        ["Launched", "Registered", "Initialized"]
            .iter()
            .all(|t| conds.iter().any(|x| x.type_ == *t && x.status == "True"))
            .then_some(cl)
    })
    .await;
    assert!(pools.contains(&claim.spec.node_pool), "{pools:?}");
    assert_eq!(claim.status.and_then(|s| s.node_name), Some(node.clone()));
    assert_eq!(c.claims().await.len(), 1, "one node for one pod");
    // "kubectl get events --field-selector involvedObject.name=llm   # TriggeredScaleUp"
    let events: Api<Event> = Api::namespaced(c.client.clone(), "default");
    let evs = events.list(&Default::default()).await.unwrap().items;
    assert!(
        evs.iter()
            .any(|e| e.reason.as_deref() == Some("TriggeredScaleUp")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())),
        "{evs:#?}"
    );
    // Step 5, compressed: the page's waits (consolidateAfter, unneededTime, the chart's
    // --scale-down-delay-after-add and --validation-delay) add up to over 15 minutes, so the
    // pool's are shortened and the controller restarted with short global delays.
    drop(ctl);
    for p in &pools {
        Api::<NodePool>::all(c.client.clone())
            .patch(
                p,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"disruption": {
                    "consolidateAfter": "1s", "unneededTime": "1s"}}})),
            )
            .await
            .unwrap();
    }
    args.retain(|a| {
        !a.starts_with("--scale-down-delay-after-add=")
            && !a.starts_with("--validation-delay=")
            && !a.starts_with("--disruption-interval=")
    });
    args.extend([
        "--scale-down-delay-after-add=0s".into(),
        "--validation-delay=1s".into(),
        "--disruption-interval=1s".into(),
    ]);
    let _ctl = c.controller_exact(
        "chart-2",
        &args,
        &[
            ("POD_NAMESPACE", "gpu-autoscaler"),
            ("POD_NAME", "gpu-autoscaler-0"),
        ],
    );
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the node and its claim gone", DEADLINE, || async {
        (c.nodes().await.is_empty() && c.claims().await.is_empty()).then_some(())
    })
    .await;
}
