//! `gpu-autoscaler explain` against the fake API server: a pod asking for a GPU model no
//! pool offers (each pool and type named with what refused it, and a did-you-mean), a node
//! kept by `karpenter.sh/do-not-disrupt`, a NodePool at its cpu limit; `--json`; and the
//! one-line errors (not found, bad name, no kubeconfig). The text answers are the ones the
//! troubleshooting guide quotes: each test checks its block of `docs/src/troubleshooting.md`
//! (`UPDATE_DOCS=1` rewrites them), with the generated names made fixed.

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodepools::NodePool;
use serde_json::{Value, json};

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(120);

/// The doc page holding the quoted answers.
const DOC: &str = "docs/src/troubleshooting.md";

/// One test at a time reads or rewrites the doc page.
static DOC_LOCK: Mutex<()> = Mutex::new(());

/// The answer of a successful `explain`, printed for the test log.
fn explained(c: &Cluster, args: &[&str]) -> String {
    let (code, out, err) = run_explain(c, args);
    assert_eq!(code, 0, "explain {args:?} failed: {err}");
    eprintln!("$ gpu-autoscaler explain {}\n{out}", args.join(" "));
    out
}

/// Checks (or, under `UPDATE_DOCS=1`, rewrites) the fenced block that follows the marker
/// `<!-- explain: NAME -->` in the troubleshooting guide.
fn doc_block(name: &str, text: &str) {
    let _guard = DOC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = root().join(DOC);
    let page = std::fs::read_to_string(&path).expect("the troubleshooting guide");
    let marker = format!("<!-- explain: {name} -->\n");
    let start = page.find(&marker).expect("the block's marker") + marker.len();
    let open = "```text\n";
    assert!(
        page[start..].starts_with(open),
        "{name}: no ```text block after the marker"
    );
    let body = start + open.len();
    let end = body + page[body..].find("```\n").expect("the block's end");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let new = format!("{}{text}{}", &page[..body], &page[end..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    assert_eq!(
        &page[body..end],
        text,
        "{DOC}: the `{name}` block is stale: run UPDATE_DOCS=1 cargo test --workspace --test e2e -- explain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_explain_a_pending_pod_names_every_pool_and_type_with_a_did_you_mean() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "1h")).await;
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    // The catalog's spelling of the model; node labels hold the lower-case one.
    let mut pod = gpu_pod("train");
    pod["spec"]["nodeSelector"] = json!({"gpu-autoscaler.dev/instance-gpu-name": "H100"});
    let _: Pod = c.create(pod).await;

    let out = explained(&c, &["pod", "default/train", "--provider", "kwok"]);
    assert!(
        out.starts_with("Pod default/train\n  pending; no node can be launched for it: "),
        "{out}"
    );
    for line in [
        // Each pool, each type, with the values allowed and found.
        "  gpu (weight 0)\n",
        "    g4dn.xlarge: refused (Requirements): the pod requires \
         gpu-autoscaler.dev/instance-gpu-name In [H100]; the type has \
         gpu-autoscaler.dev/instance-gpu-name=t4\n",
        "left out by the NodePool (Requirements): the NodePool requires \
         node.kubernetes.io/instance-type In [g4dn.xlarge]\n",
        "  cpu (weight 0)\n",
        "    m5.xlarge: refused (Requirements): the pod requires \
         gpu-autoscaler.dev/instance-gpu-name In [H100]; the type has no \
         gpu-autoscaler.dev/instance-gpu-name label\n",
        "Hint: no instance type has gpu-autoscaler.dev/instance-gpu-name=\"H100\" (did you mean \
         \"h100\"? GPU names in labels are lower case)\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    doc_block("pending-pod", &out);

    // The same as JSON, in its documented shape.
    let (code, text, err) = run_explain(&c, &["pod", "default/train", "--json"]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(doc["apiVersion"], "gpu-autoscaler.dev/explain/v1");
    assert_eq!(doc["kind"], "Pod");
    assert_eq!(doc["pod"]["outcome"]["kind"], "unschedulable");
    let gpu = doc["pod"]["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == "gpu")
        .expect("the gpu pool");
    let t4 = gpu["instanceTypes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["instanceType"] == "g4dn.xlarge")
        .expect("g4dn.xlarge");
    assert_eq!(t4["refused"]["kind"], "requirements", "{t4}");
    assert!(
        doc["pod"]["hints"][0]
            .as_str()
            .unwrap()
            .contains("\"h100\"")
    );

    // Errors: one line naming the thing, exit status 1.
    for (args, says) in [
        (
            vec!["pod", "default/nope"],
            "error: pod default/nope not found\n",
        ),
        (
            vec!["pod", "train"],
            "error: pod \"train\": expected NAMESPACE/NAME, e.g. default/train-0\n",
        ),
        (vec!["node", "nope"], "error: node nope not found\n"),
        (vec!["nodepool", "nope"], "error: NodePool nope not found\n"),
    ] {
        let (code, out, err) = run_explain(&c, &args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", says),
            "{args:?}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .args(["explain", "pod", "default/train"])
        .env("KUBECONFIG", c.dir.join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: loading the Kubernetes client configuration: ")
            && err.lines().count() == 1,
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_explain_a_node_kept_by_do_not_disrupt() {
    let c = Cluster::start().await;
    // A threshold of 1 makes the node a candidate: only the annotation keeps it.
    let _: NodePool = c
        .create(lane_pool(
            "keep",
            json!({"utilizationThreshold": 1.0}),
            json!({}),
        ))
        .await;
    let _ctl = c.controller("explain-node", &["--leader-elect=false"]);
    let dnd = json!({"karpenter.sh/do-not-disrupt": "true"});
    let _: Pod = c.create(lane_pod("dnd", "keep", "3", dnd)).await;
    let node = eventually("the pod bound", DEADLINE, || async {
        bound_to(&c.pod("default", "dnd").await?)
    })
    .await;
    // The controller's own verdict reaches the claim first, so the answer quotes it too.
    let claim = eventually("the Consolidatable condition", DEADLINE, || async {
        c.claims().await.into_iter().find(|x| {
            x.status.as_ref().is_some_and(|s| {
                s.node_name.as_deref() == Some(node.as_str())
                    && s.conditions
                        .iter()
                        .any(|k| k.type_ == "Consolidatable" && k.reason == "DoNotDisrupt")
            })
        })
    })
    .await;
    let out = explained(&c, &["node", &node]);
    for line in [
        format!("Node {node} (NodePool keep)\n"),
        "  verdict: kept (DoNotDisrupt): pod default/dnd has karpenter.sh/do-not-disrupt\n".into(),
        "  utilization: cpu 0.77, memory 0.00 against threshold 1.00\n".into(),
        format!(
            "  NodeClaim {}: the controller's last round wrote Consolidatable=False DoNotDisrupt",
            claim.metadata.name.as_deref().unwrap()
        ),
    ] {
        assert!(out.contains(&line), "missing {line:?} in:\n{out}");
    }
    let since = claim
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|k| k.type_ == "Consolidatable")
        .unwrap()
        .last_transition_time
        .0
        .to_string();
    let fixed = out
        .replace(&node, "keep-7vcpg")
        .replace(&since, "2026-12-01T19:16:56Z");
    doc_block("kept-node", &fixed);
    let (code, text, _) = run_explain(&c, &["node", &node, "--json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["node"]["verdict"]["kind"], "DoNotDisrupt", "{doc}");
    assert_eq!(doc["condition"]["reason"], "DoNotDisrupt", "{doc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_explain_a_nodepool_at_its_limit_and_the_pod_it_holds_back() {
    let c = Cluster::start().await;
    // Room for one m5.xlarge (4 cpu): the second pod finds the limit reached.
    let _: NodePool = c
        .create(lane_pool(
            "capped",
            json!({}),
            json!({"limits": {"cpu": "4"}}),
        ))
        .await;
    let _ctl = c.controller("explain-pool", &["--leader-elect=false"]);
    let _: Pod = c.create(lane_pod("first", "capped", "3", json!({}))).await;
    let node = eventually("the first pod bound", DEADLINE, || async {
        bound_to(&c.pod("default", "first").await?)
    })
    .await;
    let _: Pod = c.create(lane_pod("second", "capped", "3", json!({}))).await;
    // Once the controller has planned the second pod, it is told why.
    eventually(
        "a LimitReached event for the second pod",
        DEADLINE,
        || async {
            let events = kube::Api::<k8s_openapi::api::events::v1::Event>::all(c.client.clone())
                .list(&Default::default())
                .await
                .ok()?;
            events
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("LimitReached")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("second")
                })
                .then_some(())
        },
    )
    .await;

    let out = explained(&c, &["nodepool", "capped"]);
    for line in [
        "NodePool capped (weight 0)\n",
        "  nodes: 1 (existing and in flight), minNodes 0\n",
        "    cpu: ",
        " of 4 (reached)\n",
        "    m5.xlarge: refused (Limits): NodePool capped limit cpu=4 reached\n",
        "    100% (all reasons): allows 1 node(s) at once, 0 being deleted\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(
        out.contains(&format!("    {node}: kept (AboveThreshold): ")),
        "{out}"
    );
    doc_block("capped-pool", &out.replace(&node, "capped-x2k9p"));

    let out = explained(&c, &["pod", "default/second"]);
    assert!(
        out.contains(
            "pending; no node can be launched for it: NodePool capped limit cpu=4 reached"
        ),
        "{out}"
    );
    assert!(
        out.contains("    m5.xlarge: refused (Limits): NodePool capped limit cpu=4 reached\n"),
        "{out}"
    );
    let (code, text, _) = run_explain(&c, &["nodepool", "capped", "--json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&text).unwrap();
    let cpu = &doc["nodePool"]["limits"][0];
    assert_eq!(
        (&cpu["name"], &cpu["reached"]),
        (&json!("cpu"), &json!(true)),
        "{doc}"
    );
}
