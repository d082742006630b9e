//! Dynamic Resource Allocation end to end on kwok: a pod whose only GPU request is a
//! ResourceClaim from a template scales a GPU pool up from zero, the fake DRA driver publishes
//! the new node's devices, the harness scheduler (independent of the planner) allocates the
//! claim there and binds the pod; claims that can never be allocated launch nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, ListParams};
use nodepools::NodePool;
use serde_json::{Value, json};

use super::harness::*;
use super::pod_problems::events_of;

const DEADLINE: Duration = Duration::from_secs(120);

const CLASSES: &str = "deploy/examples/dra/nvidia-deviceclasses.yaml";

fn template(name: &str, class: &str, selectors: Value) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": class, "selectors": selectors}}]}}}})
}

fn claim_pod(name: &str, template: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "cuda", "image": "cuda:12",
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "claims": [{"name": "gpu"}]}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_dra_claim_from_a_template_scales_a_gpu_pool_from_zero() {
    let c = Cluster::start().await;
    c.apply_file(CLASSES).await;
    let _: NodePool = c.create(gpu_pool("gpu", "1h")).await;
    let _driver = c.fake_dra_driver();
    let _ctl = c.controller("solo", &["--leader-elect=false"]);
    // The guide's example: a template for one whole GPU and a pod using it, nothing else.
    c.apply_file("deploy/examples/dra/one-gpu-claim-template.yaml")
        .await;

    let node = eventually("the DRA pod bound", DEADLINE, || async {
        bound_to(&c.pod("default", "cuda-dra").await?)
    })
    .await;
    let claims = c.claims().await;
    assert_eq!(claims.len(), 1, "one node for one GPU: {claims:#?}");
    let nc = &claims[0];
    assert!(
        waits_for_slices(nc),
        "the claim waits for the node's slices"
    );
    let status = nc.status.as_ref().unwrap();
    assert_eq!(status.instance_type.as_deref(), Some("g4dn.xlarge"));
    assert_eq!(status.node_name.as_deref(), Some(node.as_str()));
    // The pod's own claim, made from the template, holds the new node's GPU.
    let pod: Pod = c.pod("default", "cuda-dra").await.unwrap();
    let claim_name = pod.status.unwrap().resource_claim_statuses.unwrap()[0]
        .resource_claim_name
        .clone()
        .unwrap();
    let claim = Api::<ResourceClaim>::namespaced(c.client.clone(), "default")
        .get(&claim_name)
        .await
        .unwrap();
    let allocation = claim.status.unwrap().allocation.unwrap();
    let results = allocation.devices.unwrap().results.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(
        (
            results[0].driver.as_str(),
            results[0].pool.as_str(),
            results[0].device.as_str()
        ),
        ("gpu.nvidia.com", node.as_str(), "gpu-0")
    );
    // The claim is initialized (its slices matched the template) and the pod was told.
    eventually("the NodeClaim initialized", DEADLINE, || async {
        let claims = c.claims().await;
        claims[0]
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "Initialized" && c.status == "True")
            .then_some(())
    })
    .await;
    let events = events_of(&c, "cuda-dra").await;
    assert!(
        events.iter().any(|(r, _, _)| r == "TriggeredScaleUp"),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_dra_unknown_class_and_bad_cel_get_a_reason_and_launch_nothing() {
    let c = Cluster::start().await;
    c.apply_file(CLASSES).await;
    let _: NodePool = c.create(gpu_pool("gpu", "1h")).await;
    let ctl = c.controller("solo", &["--leader-elect=false", "--replan-interval=500ms"]);
    let cases = [
        (
            "tpu",
            template("tpu", "tpu.example.com", json!([])),
            "unknown device class \"tpu.example.com\"",
        ),
        (
            "bad-cel",
            template(
                "bad-cel",
                "gpu.nvidia.com",
                json!([{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName =="}}]),
            ),
            "device.attributes['gpu.nvidia.com'].productName ==",
        ),
        (
            "no-template",
            Value::Null,
            "ResourceClaimTemplate default/missing not found",
        ),
    ];
    for (name, t, _) in &cases {
        let template_name = if t.is_null() {
            "missing".to_string()
        } else {
            let _: ResourceClaimTemplate = c.create(t.clone()).await;
            name.to_string()
        };
        let _: Pod = c.create(claim_pod(name, &template_name)).await;
    }
    for (name, _, says) in &cases {
        eventually(
            &format!("the NotTriggerScaleUp event of {name}"),
            DEADLINE,
            || async {
                events_of(&c, name)
                    .await
                    .iter()
                    .any(|(reason, note, _)| reason == "NotTriggerScaleUp" && note.contains(says))
                    .then_some(())
            },
        )
        .await;
    }
    // Later rounds still launch nothing for them.
    let rounds = |log: &str| log.matches(": planned ").count();
    let seen = rounds(&ctl.log());
    eventually("three more planning rounds", DEADLINE, || async {
        (rounds(&ctl.log()) >= seen + 3).then_some(())
    })
    .await;
    assert!(c.claims().await.is_empty(), "nothing launched");
    assert!(c.instances().await.is_empty(), "no kwok instance");
    let pods = Api::<Pod>::namespaced(c.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pods.items.iter().all(|p| bound_to(p).is_none()));
}
