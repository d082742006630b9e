//! The `fake-apiserver` binary: starts on 127.0.0.1, prints its URL, writes a kubeconfig,
//! registers CRDs from files and runs the harness scheduler when asked.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::json;

/// Kills the child on drop so a failing assertion never leaks the server process.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn binary_serves_crds_and_binds_pods() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("fake-apiserver-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_fake-apiserver"))
            .args([
                "--port",
                "0",
                "--binder",
                "--binder-interval-ms",
                "20",
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .arg("--crd")
            .arg(root.join("deploy/crds/gpu-autoscaler.dev_nodepools.yaml"))
            .arg("--crd")
            .arg(root.join("deploy/crds/gpu-autoscaler.dev_nodeclaims.yaml"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let yaml = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(yaml.contains(&url));
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gpu-autoscaler.dev", "v1alpha1", "NodeClaim"),
        "nodeclaims",
    );
    let claims: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    assert!(
        claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "2", "pods": "5"}, "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let mut bound = false;
    for _ in 0..300 {
        let p = pods.get("p").await.unwrap();
        if p.spec.unwrap().node_name.as_deref() == Some("n") {
            assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
            bound = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(bound, "the --binder scheduler did not bind the pod");
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}
