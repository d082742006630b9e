//! The GCP provider in the real binary, against the fake Compute REST API of `provider-gcp`:
//! `gpu-autoscaler catalog --provider gcp --json`, and `gpu-autoscaler run --provider gcp`
//! with the fake Kubernetes API server launching a GPU VM for a pending GPU pod, and an atomic
//! ProvisioningRequest's VMs bulk-inserted into one placement policy.

// The e2e harness (fake API server, controller process, polling) is shared, not copied.
#[allow(dead_code)]
#[path = "e2e/harness.rs"]
mod harness;

use std::process::Command;
use std::time::Duration;

use fake_compute::FakeCompute;
use harness::{Cluster, eventually, gpu_pod};
use k8s_openapi::api::core::v1::Pod;
use nodepools::NodePool;
use serde_json::{Value, json};

const PROJECT: &str = "fake-project";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_json_lists_gcp_gpu_types_from_the_compute_api() {
    let fake = FakeCompute::new(PROJECT);
    let addr = fake.serve().await.unwrap();
    let bin = env!("CARGO_BIN_EXE_gpu-autoscaler");
    let endpoint = format!("http://{addr}");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args(["catalog", "--provider", "gcp", "--project", PROJECT])
            .args(["--zone", "us-central1-a", "--zone", "us-central1-b"])
            .args(["--endpoint-url", &endpoint, "--json"])
            .env_remove("GOOGLE_CLOUD_PROJECT")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).cloned();
    let t4 = row("n1-standard-8-t4x1").expect("N1 + T4 listed");
    assert_eq!(t4["gpu"]["model"], "T4");
    assert_eq!(
        t4["labels"]["cloud.google.com/gke-accelerator"],
        "nvidia-tesla-t4"
    );
    assert_eq!(t4["on_demand_price"], 0.729998);
    assert_eq!(t4["zones"], json!(["us-central1-a", "us-central1-b"]));
    let h100 = row("a3-highgpu-8g").expect("A3 listed");
    assert_eq!(h100["gpu"]["count"], 8);
    assert_eq!(
        h100["labels"]["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    assert!(row("a3-megagpu-8g").is_some(), "zone a offers it");
    assert!(row("e2-micro").is_none());
    // Only the two zones were asked, one page each.
    assert_eq!(fake.count_calls("/zones/us-central1-a/machineTypes"), 1);
    assert_eq!(fake.count_calls("/zones/us-central1-c/"), 0);
}

/// A NodePool of N1 machines with one T4, on demand.
fn t4_pool(name: &str) -> Value {
    json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "node.gpu-autoscaler.dev/device-plugin", "effect": "NoSchedule"}],
                "requirements": [
                    {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-tesla-t4"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            },
            "disruption": {"consolidateAfter": "0s", "unneededTime": "1h", "budgets": [{"nodes": "100%"}]}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_gcp_launches_a_gpu_vm_for_a_pending_gpu_pod() {
    let fake = FakeCompute::new(PROJECT);
    // The cheapest T4 shape is out of stock in zone a: the launch moves on.
    fake.fail_inserts(
        Some("us-central1-a"),
        Some("n1-standard-4"),
        None,
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        None,
    );
    let addr = fake.serve().await.unwrap();
    let cluster = Cluster::start().await;
    let endpoint = format!("http://{addr}");
    let _ctl = cluster.controller(
        "gcp",
        &[
            "--provider=gcp",
            &format!("--project={PROJECT}"),
            &format!("--endpoint-url={endpoint}"),
            "--cluster-name=e2e",
            "--leader-elect=false",
        ],
    );
    let _: NodePool = cluster.create(t4_pool("t4")).await;
    let _: Pod = cluster.create(gpu_pod("train")).await;

    let vm = eventually(
        "a VM in the fake Compute API",
        Duration::from_secs(60),
        || {
            let fake = fake.clone();
            async move { fake.instances().into_iter().next() }
        },
    )
    .await;
    let claims = eventually(
        "the NodeClaim records the VM",
        Duration::from_secs(30),
        || async {
            let claims = cluster.claims().await;
            claims
                .iter()
                .any(|c| harness::launched_on(c, "gce://fake-project/"))
                .then_some(claims)
        },
    )
    .await;
    assert_eq!(claims.len(), 1);
    let claim = claims[0].metadata.name.clone().unwrap();
    assert_eq!(vm["name"], claim.as_str());
    assert_eq!(vm["labels"]["gpu-autoscaler-nodeclaim"], claim.as_str());
    assert_eq!(vm["labels"]["gpu-autoscaler-cluster"], "e2e");
    assert_eq!(vm["labels"]["gpu-autoscaler-nodepool"], "t4");
    assert_eq!(vm["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert_eq!(vm["scheduling"]["provisioningModel"], "STANDARD");
    assert!(
        vm["guestAccelerators"][0]["acceleratorType"]
            .as_str()
            .unwrap()
            .ends_with("/nvidia-tesla-t4")
    );
    assert_eq!(vm["guestAccelerators"][0]["acceleratorCount"], 1);
    let zone = vm["zone"].as_str().unwrap();
    let machine = vm["machineType"].as_str().unwrap();
    assert!(
        !(zone.ends_with("us-central1-a") && machine.ends_with("/n1-standard-4")),
        "the exhausted offering was not used: {zone} {machine}"
    );
    let script = vm["metadata"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == "startup-script")
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(script.contains("team=ml"), "{script}");
    assert!(
        script.contains("node.gpu-autoscaler.dev/device-plugin:NoSchedule"),
        "{script}"
    );
    // One VM only, however many rounds ran.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fake.instances().len(), 1);
}

/// With credentials required, a broken service-account key fails the command before any
/// request is sent, says what to fix, and never prints the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_fail_clearly_without_printing_secrets() {
    let fake = FakeCompute::new(PROJECT);
    let addr = fake.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    let marker = "SECRET-KEY-MATERIAL-7f3a";
    std::fs::write(
        &key,
        json!({
            "type": "service_account",
            "project_id": PROJECT,
            "private_key_id": "0123456789abcdef",
            "private_key": format!("-----BEGIN PRIVATE KEY-----\n{marker}\n-----END PRIVATE KEY-----\n"),
            "client_email": "nodes@fake-project.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": "http://127.0.0.1:9/token",
        })
        .to_string(),
    )
    .unwrap();
    let config = dir.path().join("gcp.yaml");
    std::fs::write(
        &config,
        format!("project: {PROJECT}\nendpoint_url: http://{addr}\nanonymous: false\n"),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_gpu-autoscaler");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args(["catalog", "--provider", "gcp", "--gcp-config"])
            .arg(&config)
            .env("GOOGLE_APPLICATION_CREDENTIALS", &key)
            .env("RUST_LOG", "trace")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("credentials"), "{stderr}");
    assert!(
        !stderr.contains(marker) && !stdout.contains(marker),
        "{stderr}"
    );
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
}

/// The controller drives delete and list through the provider too: a VM whose node never
/// registers is deleted when its claim times out, and a VM of this cluster without a claim is
/// garbage-collected after the grace period; another cluster's VM is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_gcp_deletes_unregistered_vms_and_collects_orphans() {
    let fake = FakeCompute::new(PROJECT);
    fake.plant_instance(
        "us-central1-b",
        "orphan",
        "n1-standard-8",
        &[("gpu-autoscaler-cluster", "e2e")],
    );
    fake.plant_instance(
        "us-central1-b",
        "not-ours",
        "n1-standard-8",
        &[("gpu-autoscaler-cluster", "other")],
    );
    let addr = fake.serve().await.unwrap();
    let cluster = Cluster::start().await;
    let _ctl = cluster.controller(
        "gcp-gc",
        &[
            "--provider=gcp",
            &format!("--project={PROJECT}"),
            &format!("--endpoint-url=http://{addr}"),
            "--cluster-name=e2e",
            "--leader-elect=false",
            "--registration-timeout=3s",
        ],
    );
    let _: NodePool = cluster.create(t4_pool("t4")).await;
    let _: Pod = cluster.create(gpu_pod("train")).await;

    let first = eventually("a VM for the pod", Duration::from_secs(60), || {
        let fake = fake.clone();
        async move {
            fake.instances()
                .into_iter()
                .find(|i| i["labels"]["gpu-autoscaler-nodeclaim"].is_string())
                .and_then(|i| i["name"].as_str().map(str::to_string))
        }
    })
    .await;
    eventually(
        "the unregistered VM deleted through the API",
        Duration::from_secs(60),
        || {
            let fake = fake.clone();
            let first = first.clone();
            async move {
                fake.calls()
                    .iter()
                    .any(|c| c.starts_with("DELETE") && c.contains(&format!("/instances/{first}?")))
                    .then_some(())
            }
        },
    )
    .await;
    eventually("the orphan collected", Duration::from_secs(60), || {
        let fake = fake.clone();
        async move { (!fake.instances().iter().any(|i| i["name"] == "orphan")).then_some(()) }
    })
    .await;
    assert!(fake.instances().iter().any(|i| i["name"] == "not-ours"));
    assert!(
        fake.calls()
            .iter()
            .any(|c| c.contains("aggregated/instances?") && c.contains("gpu-autoscaler-cluster")),
        "GC lists by the cluster label"
    );
}

/// A best-effort-atomic ProvisioningRequest (shaped as Kueue creates it) for 3 one-T4 pods on
/// GCP: its 3 claims are launched with one `instances.bulkInsert` (all or none, decided by
/// Compute Engine), and the request turns Provisioned once all 3 VMs exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_gcp_launches_an_atomic_provisioning_request_with_one_bulk_insert() {
    let crd_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/crds/autoscaling.x-k8s.io_provisioningrequests.yaml");
    let Ok(crd) = std::fs::read_to_string(&crd_path) else {
        eprintln!("SKIPPED: {} is absent", crd_path.display());
        return;
    };
    let fake = FakeCompute::new(PROJECT);
    let addr = fake.serve().await.unwrap();
    let cluster = Cluster::start_with(&[&crd]).await;
    // Single-T4 machines: one claim per pod, all three of one template.
    let mut pool = t4_pool("t4");
    pool["spec"]["template"]["requirements"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "gpu-autoscaler.dev/instance-gpu-count", "operator": "In", "values": ["1"]}));
    let _: NodePool = cluster.create(pool).await;
    let _: k8s_openapi::api::core::v1::PodTemplate = cluster
        .create(json!({
            "apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": "ppt-train-main", "namespace": "default",
                         "labels": {"kueue.x-k8s.io/managed": "true"}},
            "template": {"spec": {
                "containers": [{"name": "c", "image": "cuda",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
            }}
        }))
        .await;
    let ar = kube::api::ApiResource {
        group: "autoscaling.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "autoscaling.x-k8s.io/v1".into(),
        kind: "ProvisioningRequest".into(),
        plural: "provisioningrequests".into(),
    };
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(cluster.client.clone(), "default", &ar);
    let pr: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                 "podSets": [{"podTemplateRef": {"name": "ppt-train-main"}, "count": 3}]}
    }))
    .unwrap();
    api.create(&Default::default(), &pr).await.unwrap();
    let ctl = cluster.controller(
        "gcp-atomic",
        &[
            "--provider=gcp",
            &format!("--project={PROJECT}"),
            &format!("--endpoint-url=http://{addr}"),
            "--cluster-name=e2e",
            "--leader-elect=false",
        ],
    );
    let status = eventually("Provisioned=True", Duration::from_secs(60), || {
        let api = api.clone();
        async move {
            let s = api.get("train").await.ok()?.data["status"].clone();
            s["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Provisioned" && c["status"] == "True")
                .then_some(s)
        }
    })
    .await;
    let booking = status["provisioningClassDetails"]["gpu-autoscaler.dev/booking"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(booking.matches("claim/").count(), 3, "{booking}");
    let vms = fake.instances();
    assert_eq!(vms.len(), 3, "{vms:#?}");
    let bulk: Vec<String> = fake
        .calls()
        .into_iter()
        .filter(|c| c.contains("/instances/bulkInsert"))
        .collect();
    assert_eq!(bulk.len(), 1, "{bulk:?}\n{}", ctl.log());
    assert!(
        !fake
            .calls()
            .iter()
            .any(|c| c.starts_with("POST") && c.contains("/instances?")),
        "no single inserts: {:?}",
        fake.calls()
    );
    // Every VM carries its claim's label, set after the bulk insert.
    let claims: Vec<String> = cluster
        .claims()
        .await
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    for vm in &vms {
        let label = vm["labels"]["gpu-autoscaler-nodeclaim"]
            .as_str()
            .unwrap_or("");
        assert!(claims.iter().any(|c| c == label), "{vm:#}");
    }
    // The request's nodes are one placement group: one compact resource policy, created
    // before the bulk insert and listed by every VM.
    let group = providers::placement_group_name("e2e", "provreq:default/train");
    let policies = fake.resource_policies();
    assert_eq!(policies.len(), 1, "{policies:#?}");
    assert_eq!(policies[0]["name"], group.as_str());
    assert_eq!(
        policies[0]["groupPlacementPolicy"]["collocation"],
        "COLLOCATED"
    );
    for vm in &vms {
        let listed: Vec<&str> = vm["resourcePolicies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str()?.rsplit('/').next())
            .collect();
        assert_eq!(listed, [group.as_str()], "{vm:#}");
    }
}

/// The DRA guide's example on GCP: a pod whose only GPU request is a ResourceClaim from a
/// template scales a T4 NodePool up from zero through the fake Compute API; the test plays the
/// kubelet and the NVIDIA DRA driver (the new Node's GPUs from the provider's own catalog, read
/// from the fake), the harness scheduler allocates the claim there and binds the pod, and the
/// NodeClaim is initialized once the slices match its instance type's template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_gcp_a_dra_claim_scales_a_gpu_pool_from_zero() {
    use providers::CloudProvider;
    let fake = FakeCompute::new(PROJECT);
    let addr = fake.serve().await.unwrap();
    let cluster = Cluster::start().await;
    cluster
        .apply_file("deploy/examples/dra/nvidia-deviceclasses.yaml")
        .await;
    let ctl = cluster.controller(
        "gcp-dra",
        &[
            "--provider=gcp",
            &format!("--project={PROJECT}"),
            &format!("--endpoint-url=http://{addr}"),
            "--cluster-name=e2e",
            "--leader-elect=false",
        ],
    );
    let provider =
        provider_gcp::GcpProvider::connect(fake_compute::settings_for(addr, PROJECT, "e2e"))
            .await
            .unwrap();
    let catalog = provider
        .instance_types(&providers::NodeClassRef {
            group: String::new(),
            kind: String::new(),
            name: "default".into(),
        })
        .await
        .unwrap();
    let _driver = cluster.fake_dra_driver_for(catalog);
    let mut pool = t4_pool("t4");
    // The Node the test registers carries no startup taint to wait for.
    pool["spec"]["template"]
        .as_object_mut()
        .unwrap()
        .remove("startupTaints");
    let _: NodePool = cluster.create(pool).await;
    cluster
        .apply_file("deploy/examples/dra/one-gpu-claim-template.yaml")
        .await;

    harness::dra_claim_scales_from_zero(&cluster, &ctl, "gce://fake-project/", |pid| {
        pid.rsplit('/').next().unwrap().to_string()
    })
    .await;
    assert_eq!(fake.instances().len(), 1, "one VM");
}
