//! `resource.k8s.io/v1` through kube-rs: the four DRA types served (discovery, list/watch,
//! the claim's status subresource, slices' field selectors), per-pod claims from templates,
//! and the harness scheduler binding a claim's pod only where its devices are published.

use fake_apiserver::{BinderOptions, FakeApiServer, Options};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn node(name: &str) -> Node {
    from(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "10"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

/// What the NVIDIA driver's kubelet plugin publishes for a node with `gpus` GPUs.
fn slice(node: &str, gpus: usize) -> ResourceSlice {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
            "type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "index": {"int": i}},
            "capacity": {"memory": {"value": "80Gi"}}})
        })
        .collect();
    from(json!({
        "metadata": {"name": format!("{node}-gpu.nvidia.com")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    }))
}

fn gpu_class() -> DeviceClass {
    from(
        json!({"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {"expression":
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}),
    )
}

fn template(name: &str, count: u32) -> ResourceClaimTemplate {
    from(json!({"metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}}}}))
}

fn pod(name: &str, claim: Value) -> Pod {
    from(json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [claim]}}))
}

struct Cluster {
    server: FakeApiServer,
    client: Client,
}

impl Cluster {
    async fn new() -> Self {
        let server = FakeApiServer::new(Options::default());
        let client = server.client();
        let c = Cluster { server, client };
        c.all::<DeviceClass>()
            .create(&PostParams::default(), &gpu_class())
            .await
            .unwrap();
        c
    }

    fn ns<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), "default")
    }

    fn all<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        Api::all(self.client.clone())
    }

    /// One deterministic round of the cluster: controllers (claims from templates), then the
    /// scheduler.
    fn round(&self) {
        self.server.run_controllers_now();
        self.server.schedule_now(&BinderOptions::default());
    }

    async fn pod(&self, name: &str) -> Pod {
        self.ns::<Pod>().get(name).await.unwrap()
    }
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

#[tokio::test]
async fn served_with_discovery_status_and_field_selectors() {
    let c = Cluster::new().await;
    let discovery = kube::Discovery::new(c.client.clone()).run().await.unwrap();
    for (kind, namespaced) in [
        ("ResourceClaim", true),
        ("ResourceClaimTemplate", true),
        ("DeviceClass", false),
        ("ResourceSlice", false),
    ] {
        let (_, caps) = discovery
            .resolve_gvk(&kube::api::GroupVersionKind::gvk(
                "resource.k8s.io",
                "v1",
                kind,
            ))
            .unwrap_or_else(|| panic!("{kind} is not discovered"));
        assert_eq!(
            caps.scope == kube::discovery::Scope::Namespaced,
            namespaced,
            "{kind}"
        );
    }
    let slices = c.all::<ResourceSlice>();
    for n in ["a", "b"] {
        slices
            .create(&PostParams::default(), &slice(n, 2))
            .await
            .unwrap();
    }
    let on_a = slices
        .list(&ListParams::default().fields("spec.nodeName=a"))
        .await
        .unwrap();
    assert_eq!(on_a.items.len(), 1);
    assert_eq!(on_a.items[0].name_any(), "a-gpu.nvidia.com");

    // A claim's status is written through its subresource only, as on the real server.
    let claims = c.ns::<ResourceClaim>();
    let mut claim: ResourceClaim = from(json!({"metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": "1"}]}}));
    let created = claims.create(&PostParams::default(), &claim).await.unwrap();
    assert!(created.status.is_none(), "create resets status");
    claim.metadata.resource_version = created.resource_version();
    let written = claims
        .replace_status("c", &PostParams::default(), &claim)
        .await
        .unwrap();
    assert_eq!(written.status.unwrap().reserved_for.unwrap()[0].name, "x");
    // A body the typed API refuses is a 400 naming the type.
    let bad = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                     "metadata": {"name": "bad"}, "spec": {"selectors": "nope"}});
    let ar = kube::api::ApiResource::erase::<DeviceClass>(&());
    let raw: Api<kube::api::DynamicObject> = Api::all_with(c.client.clone(), &ar);
    match raw.create(&PostParams::default(), &from(bad)).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 400, "{s:?}"),
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn a_template_claim_is_created_allocated_on_a_publishing_node_and_released() {
    let c = Cluster::new().await;
    let nodes = c.all::<Node>();
    // `a` sorts first but publishes no GPU; `b` publishes two.
    for n in ["a", "b"] {
        nodes
            .create(&PostParams::default(), &node(n))
            .await
            .unwrap();
    }
    c.all::<ResourceSlice>()
        .create(&PostParams::default(), &slice("b", 2))
        .await
        .unwrap();
    c.ns::<ResourceClaimTemplate>()
        .create(&PostParams::default(), &template("two-gpus", 2))
        .await
        .unwrap();
    let pods = c.ns::<Pod>();
    for p in ["p1", "p2"] {
        pods.create(
            &PostParams::default(),
            &pod(
                p,
                json!({"name": "gpu", "resourceClaimTemplateName": "two-gpus"}),
            ),
        )
        .await
        .unwrap();
    }
    c.round();
    c.round();

    // Each pod got its own claim, named after it and linked from its status.
    let p1 = c.pod("p1").await;
    let statuses = p1
        .status
        .as_ref()
        .unwrap()
        .resource_claim_statuses
        .clone()
        .unwrap();
    let claim_name = statuses[0].resource_claim_name.clone().unwrap();
    assert!(claim_name.starts_with("p1-gpu-"), "{claim_name}");
    let claim = c.ns::<ResourceClaim>().get(&claim_name).await.unwrap();
    assert_eq!(
        claim
            .annotations()
            .get("resource.kubernetes.io/pod-claim-name")
            .map(String::as_str),
        Some("gpu")
    );
    assert_eq!(claim.owner_references()[0].name, "p1");

    // The first pod binds to `b`, the only node with devices, and its claim holds both GPUs.
    assert_eq!(node_of(&p1).as_deref(), Some("b"));
    let status = claim.status.unwrap();
    let results = status.allocation.unwrap().devices.unwrap().results.unwrap();
    let mut devices: Vec<String> = results.iter().map(|r| r.device.clone()).collect();
    devices.sort();
    assert_eq!(devices, ["gpu-0", "gpu-1"]);
    assert_eq!(status.reserved_for.unwrap()[0].name, "p1");
    // The second finds no free device anywhere and says so as kube-scheduler does.
    let p2 = c.pod("p2").await;
    assert_eq!(node_of(&p2), None);
    let cond = p2.status.unwrap().conditions.unwrap();
    let scheduled = cond.iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert_eq!(scheduled.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(
        scheduled.message.as_deref(),
        Some("0/2 nodes are available: 2 cannot allocate all claims.")
    );

    // The first pod goes: its claim is deleted, the devices are free, the second pod binds.
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    c.round();
    c.round();
    assert!(
        c.ns::<ResourceClaim>()
            .get_opt(&claim_name)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(node_of(&c.pod("p2").await).as_deref(), Some("b"));
}

#[tokio::test]
async fn a_shared_claim_pins_its_pods_and_is_deallocated_when_unused() {
    let c = Cluster::new().await;
    let nodes = c.all::<Node>();
    let slices = c.all::<ResourceSlice>();
    for n in ["a", "b"] {
        nodes
            .create(&PostParams::default(), &node(n))
            .await
            .unwrap();
        slices
            .create(&PostParams::default(), &slice(n, 1))
            .await
            .unwrap();
    }
    let claims = c.ns::<ResourceClaim>();
    let shared: ResourceClaim = from(json!({"metadata": {"name": "shared"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}));
    claims
        .create(&PostParams::default(), &shared)
        .await
        .unwrap();
    let pods = c.ns::<Pod>();
    pods.create(
        &PostParams::default(),
        &pod(
            "first",
            json!({"name": "gpu", "resourceClaimName": "shared"}),
        ),
    )
    .await
    .unwrap();
    c.round();
    let first = node_of(&c.pod("first").await).expect("bound");
    // The second user of the claim goes where the allocation is, whatever the node order.
    pods.create(
        &PostParams::default(),
        &pod(
            "second",
            json!({"name": "gpu", "resourceClaimName": "shared"}),
        ),
    )
    .await
    .unwrap();
    c.round();
    assert_eq!(node_of(&c.pod("second").await), Some(first));
    let reserved = claims
        .get("shared")
        .await
        .unwrap()
        .status
        .unwrap()
        .reserved_for
        .unwrap();
    assert_eq!(reserved.len(), 2);

    // A claim naming an unknown class never binds, and the pod is told why.
    let unknown: ResourceClaim = from(json!({"metadata": {"name": "tpu"},
        "spec": {"devices": {"requests": [{"name": "tpu", "exactly": {"deviceClassName": "tpu.example.com"}}]}}}));
    claims
        .create(&PostParams::default(), &unknown)
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("tpu", json!({"name": "gpu", "resourceClaimName": "tpu"})),
    )
    .await
    .unwrap();
    c.round();
    let tpu = c.pod("tpu").await;
    assert_eq!(node_of(&tpu), None);
    let msg = tpu.status.unwrap().conditions.unwrap()[0]
        .message
        .clone()
        .unwrap();
    assert!(
        msg.contains("device class \"tpu.example.com\" does not exist"),
        "{msg}"
    );

    // Both users gone: nobody reserves the claim, so it is deallocated (it stays: not generated).
    for p in ["first", "second"] {
        pods.delete(p, &DeleteParams::default()).await.unwrap();
    }
    c.round();
    let status = claims.get("shared").await.unwrap().status;
    assert!(status.is_none_or(|s| s.allocation.is_none() && s.reserved_for.is_none()));
}
