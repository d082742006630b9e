//! CustomResourceDefinitions: registration from YAML (the project's own and the
//! ProvisioningRequest CRD from ../shared/data), schema and CEL validation, status subresource,
//! versions, discovery and watches of custom resources.

use std::path::PathBuf;

use fake_apiserver::{FakeApiServer, Options};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::{reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn project_server() -> (FakeApiServer, Client) {
    let s = FakeApiServer::new(Options::default());
    for f in [
        "gpu-autoscaler.dev_nodepools.yaml",
        "gpu-autoscaler.dev_nodeclaims.yaml",
    ] {
        let names = s
            .register_crd_file(repo_root().join("deploy/crds").join(f))
            .unwrap();
        assert_eq!(names.len(), 1);
    }
    let c = s.client();
    (s, c)
}

fn nodepools(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gpu-autoscaler.dev", "v1alpha1", "NodePool"),
        "nodepools",
    );
    Api::all_with(client.clone(), &ar)
}

fn example(name: &str) -> DynamicObject {
    let text = std::fs::read_to_string(repo_root().join("deploy/examples").join(name)).unwrap();
    serde_norway::from_str(&text).unwrap()
}

fn invalid(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) if s.code == 422 => s,
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
}

#[tokio::test]
async fn project_crds_validate_nodepools() {
    let (_s, client) = project_server();
    let pools = nodepools(&client);
    let created = pools
        .create(&PostParams::default(), &example("gpu-train.yaml"))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    for f in ["cpu-default.yaml", "gpu-inference.yaml", "notebooks.yaml"] {
        pools
            .create(&PostParams::default(), &example(f))
            .await
            .unwrap();
    }

    // Enum violation, named by field.
    let mut bad = example("gpu-train.yaml");
    bad.metadata.name = Some("bad-enum".into());
    bad.data["spec"]["disruption"]["consolidationPolicy"] = json!("Sometimes");
    let st = invalid(
        pools
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    let cause = &st.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.field, "spec.disruption.consolidationPolicy");
    assert!(
        st.message.contains("Unsupported value: \"Sometimes\""),
        "{}",
        st.message
    );

    // Type violation.
    let mut bad = example("gpu-train.yaml");
    bad.metadata.name = Some("bad-type".into());
    bad.data["spec"]["weight"] = json!("heavy");
    let st = invalid(
        pools
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!(st.details.unwrap().causes[0].field, "spec.weight");

    // Required field inside a list item, and a pattern.
    let mut bad = example("gpu-train.yaml");
    bad.metadata.name = Some("bad-req".into());
    bad.data["spec"]["template"]["taints"] = json!([{"key": "k"}]);
    bad.data["spec"]["disruption"]["consolidateAfter"] = json!("soon");
    let st = invalid(
        pools
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    let fields: Vec<String> = st
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert!(
        fields.contains(&"spec.template.taints[0].effect".to_string()),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"spec.disruption.consolidateAfter".to_string()),
        "{fields:?}"
    );

    // A CEL rule (x-kubernetes-validations) of the project's CRD.
    let mut bad = example("notebooks.yaml");
    bad.metadata.name = Some("bad-cel".into());
    let sharing = bad.data["spec"]["gpuSharing"].clone();
    assert!(
        sharing["timeSlicing"].is_object(),
        "the notebooks example uses time-slicing"
    );
    bad.data["spec"]["gpuSharing"]["mig"] = json!({"config": "all-1g.10gb"});
    let st = invalid(
        pools
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert!(
        st.message
            .contains("timeSlicing and mig cannot both be set"),
        "{}",
        st.message
    );

    // Unknown fields are pruned, defaults applied.
    let mut extra = example("gpu-train.yaml");
    extra.metadata.name = Some("extra".into());
    extra.data["spec"]["bogus"] = json!(1);
    extra.data["spec"]["disruption"]
        .as_object_mut()
        .unwrap()
        .remove("consolidationPolicy");
    let made = pools.create(&PostParams::default(), &extra).await.unwrap();
    assert!(made.data["spec"].get("bogus").is_none());
    assert_eq!(
        made.data["spec"]["disruption"]["consolidationPolicy"],
        "WhenEmptyOrUnderutilized"
    );

    // Custom resources do not take strategic merge patches (415), like the real server.
    let err = pools
        .patch(
            "gpu-train",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"weight": 1}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 415));
}

#[tokio::test]
async fn custom_resource_status_subresource_and_generation() {
    let (_s, client) = project_server();
    let pools = nodepools(&client);
    pools
        .create(&PostParams::default(), &example("gpu-train.yaml"))
        .await
        .unwrap();
    let pp = PatchParams::default();
    // Status through the main resource is dropped; through /status it lands without a generation bump.
    let p = pools
        .patch(
            "gpu-train",
            &pp,
            &Patch::Merge(json!({"status": {"nodes": 3}})),
        )
        .await
        .unwrap();
    assert!(
        p.data
            .get("status")
            .is_none_or(|s| s.get("nodes").is_none())
    );
    assert_eq!(p.metadata.generation, Some(1));
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ok", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let p = pools
        .patch_status("gpu-train", &pp, &Patch::Merge(status))
        .await
        .unwrap();
    assert_eq!(p.data["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(p.metadata.generation, Some(1));
    // A spec change bumps the generation and keeps the status.
    let p = pools
        .patch(
            "gpu-train",
            &pp,
            &Patch::Merge(json!({"spec": {"weight": 60}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    assert_eq!(p.data["status"]["conditions"][0]["type"], "Ready");
    // A metadata-only change does not.
    let p = pools
        .patch(
            "gpu-train",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(2));
}

fn shared_crd(name: &str) -> Option<PathBuf> {
    let p = repo_root().join("../shared/data/crds").join(name);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "SKIPPED: {} is absent (the shared reference data is not beside the repository)",
            p.display()
        );
        None
    }
}

#[tokio::test]
async fn provisioning_request_crd_from_shared_data() {
    let Some(path) = shared_crd("autoscaling.x-k8s.io_provisioningrequests.yaml") else {
        return;
    };
    let s = FakeApiServer::new(Options::default());
    assert_eq!(
        s.register_crd_file(path).unwrap(),
        ["provisioningrequests.autoscaling.x-k8s.io"]
    );
    let client = s.client();
    let gvk = |v: &str| GroupVersionKind::gvk("autoscaling.x-k8s.io", v, "ProvisioningRequest");
    let v1 = ApiResource::from_gvk_with_plural(&gvk("v1"), "provisioningrequests");
    let reqs: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &v1);
    let pr: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": "train"},
        "spec": {
            "provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
            "podSets": [{"count": 4, "podTemplateRef": {"name": "trainer"}}]
        }
    }))
    .unwrap();
    reqs.create(&PostParams::default(), &pr).await.unwrap();

    let mut bad = pr.clone();
    bad.metadata.name = Some("bad".into());
    bad.data["spec"]["podSets"][0]["count"] = json!(0);
    bad.data["spec"]["podSets"][0]["podTemplateRef"] = json!({});
    let st = invalid(reqs.create(&PostParams::default(), &bad).await.unwrap_err());
    let fields: Vec<String> = st
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert!(
        fields.contains(&"spec.podSets[0].count".to_string()),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"spec.podSets[0].podTemplateRef.name".to_string()),
        "{fields:?}"
    );

    // The spec is immutable (a CEL transition rule, `self == oldSelf`).
    let err = reqs
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"podSets": [{"count": 5, "podTemplateRef": {"name": "trainer"}}]}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(invalid(err).message.contains("immutable"));

    // The other served version sees the same object.
    let v1beta1 = ApiResource::from_gvk_with_plural(&gvk("v1beta1"), "provisioningrequests");
    let old: Api<DynamicObject> = Api::default_namespaced_with(client, &v1beta1);
    let got = old.get("train").await.unwrap();
    assert_eq!(
        got.types.unwrap().api_version,
        "autoscaling.x-k8s.io/v1beta1"
    );
}

#[tokio::test]
async fn crds_created_through_the_api_are_served_and_discoverable() {
    let s = FakeApiServer::new(Options::default());
    let client = s.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 5}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    }))
    .unwrap();
    let made = crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = made
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);

    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (ar, _) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .unwrap();
    assert_eq!(ar.plural, "widgets");

    let widgets: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ar);
    let w = |name: &str, size: Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}})).unwrap()
    };
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let stream = reflector::reflector(writer, watcher(widgets.clone(), watcher::Config::default()));
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();

    widgets
        .create(&PostParams::default(), &w("ok", json!(3)))
        .await
        .unwrap();
    let st = invalid(
        widgets
            .create(&PostParams::default(), &w("big", json!(9)))
            .await
            .unwrap_err(),
    );
    assert_eq!(st.details.unwrap().causes[0].field, "spec.size");
    for _ in 0..500 {
        if reader.state().iter().any(|o| o.name_any() == "ok") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(reader.state().len(), 1);
    task.abort();

    // Deleting the CRD removes the resource type.
    crds.delete("widgets.example.com", &Default::default())
        .await
        .unwrap();
    assert!(matches!(widgets.get("ok").await.unwrap_err(), kube::Error::Api(s) if s.code == 404));
}
