//! Translation of `resource.k8s.io/v1` objects and resolution of pods' claims.

use super::*;
use autoscaler_core::dra::builders;
use serde_json::{Value, json};

fn from<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn gpu_slice(node: &str, generation: i64, gpus: usize) -> Arc<ResourceSlice> {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            json!({"name": format!("gpu-{i}"),
            "attributes": {"type": {"string": "gpu"}, "index": {"int": i},
                           "cudaComputeCapability": {"version": "9.0.0"}, "mig": {"bool": false}},
            "capacity": {"memory": {"value": "80Gi"}}})
        })
        .collect();
    from(
        json!({"metadata": {"name": format!("{node}-g{generation}")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices}}),
    )
}

fn objects() -> DraObjects {
    DraObjects {
        classes: vec![from(json!({"metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
                     "extendedResourceName": "nvidia.com/gpu"}}))],
        slices: vec![gpu_slice("n1", 1, 8), gpu_slice("n1", 2, 4)],
        templates: vec![from(json!({"metadata": {"name": "two", "namespace": "ml"},
            "spec": {"spec": {"devices": {
                "requests": [{"name": "gpu", "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2,
                     "selectors": [{"cel": {"expression": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}]},
                    {"name": "all", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}]}],
                "constraints": [{"requests": ["gpu"], "matchAttribute": "gpu.nvidia.com/index"}]}}}}))],
        claims: vec![from(
            json!({"metadata": {"name": "shared", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"allocation": {
                "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
                "reservedFor": [{"resource": "pods", "name": "a", "uid": "1"}]}}),
        )],
    }
}

fn pod_claims_of(v: Value) -> Vec<PodClaim> {
    let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(v).unwrap();
    pod_claims(p.spec.as_ref().unwrap(), p.status.as_ref()).unwrap()
}

#[test]
fn objects_translate_field_by_field() {
    let ix = DraIndex::new(&objects());
    assert!(ix.problems.is_empty(), "{:?}", ix.problems);
    let class = &ix.dra.classes["gpu.nvidia.com"];
    assert_eq!(
        class.extended_resource_name.as_deref(),
        Some("nvidia.com/gpu")
    );
    // Only the newest generation of the pool counts.
    assert_eq!(ix.dra.slices.len(), 1);
    let s = &ix.dra.slices[0];
    assert_eq!((s.generation, s.devices.len()), (2, 4));
    assert_eq!(s.nodes, SliceNodes::Node("n1".into()));
    let d = &s.devices[1];
    assert_eq!(d.attributes["index"], AttributeValue::Int(1));
    assert_eq!(
        d.attributes["cudaComputeCapability"],
        AttributeValue::Version("9.0.0".into())
    );
    assert_eq!(d.attributes["mig"], AttributeValue::Bool(false));
    assert_eq!(d.capacity["memory"], Quantity::parse("80Gi").unwrap());
    // The allocated claim: pinned to n1, reserved for pod a.
    let c = &ix.dra.claims[0];
    let a = c.allocation.as_ref().unwrap();
    assert_eq!(a.node.as_deref(), Some("n1"));
    assert_eq!(a.devices[0].device.to_string(), "gpu.nvidia.com/n1/gpu-0");
    assert_eq!(
        c.reserved_for,
        [PodKey {
            namespace: "ml".into(),
            name: "a".into()
        }]
    );
}

#[test]
fn pods_claims_resolve_from_templates_and_shared_claims() {
    let ix = DraIndex::new(&objects());
    let mut claims = pod_claims_of(json!({"metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "two"},
            {"name": "shared", "resourceClaimName": "shared"}]},
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x1"}]}}));
    assert_eq!(
        claims[0].source,
        ClaimSource::Template {
            template: "two".into(),
            claim: Some("p-gpu-x1".into())
        }
    );
    ix.resolve("ml", &mut claims).unwrap();
    // The generated claim is not in the cache yet: the template's spec stands in.
    let want = builders::claim()
        .request(
            builders::request("gpu")
                .or(builders::request("big")
                    .class("gpu.nvidia.com")
                    .count(2)
                    .selector(
                        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
                    ))
                .or(builders::request("all").class("gpu.nvidia.com").all()),
        )
        .match_attribute("gpu.nvidia.com/index", &["gpu"])
        .build();
    assert_eq!(*claims[0].spec, want);
    assert_eq!(
        claims[1].allocation.as_ref().unwrap().node.as_deref(),
        Some("n1")
    );

    let mut missing = pod_claims_of(json!({"metadata": {"name": "q", "namespace": "ml"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}}));
    assert_eq!(
        ix.resolve("ml", &mut missing).unwrap_err(),
        r#"spec.resourceClaims[0] ("gpu"): ResourceClaimTemplate ml/one-gpu not found"#
    );
    let mut gone = pod_claims_of(json!({"metadata": {"name": "q", "namespace": "other"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [
            {"name": "gpu", "resourceClaimName": "shared"}]}}));
    assert_eq!(
        ix.resolve("other", &mut gone).unwrap_err(),
        r#"spec.resourceClaims[0] ("gpu"): ResourceClaim other/shared not found"#
    );
}

#[test]
#[cfg(feature = "controller")]
fn a_truncated_claim_is_refused_and_a_bad_slice_reported() {
    let mut objs = objects();
    let mut huge: ResourceClaim = (*objs.claims[0]).clone();
    crate::controller::run::stores::dra::trim_claim(&mut huge);
    huge.metadata.annotations.get_or_insert_default().insert(
        crate::controller::run::stores::dra::TRUNCATED.into(),
        "spec.devices.requests (40 > 32)".into(),
    );
    objs.claims = vec![Arc::new(huge)];
    objs.slices.push(from(json!({"metadata": {"name": "bad"},
        "spec": {"driver": "x", "allNodes": true, "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "d", "capacity": {"memory": {"value": "lots"}}}]}})));
    let ix = DraIndex::new(&objs);
    assert!(ix.dra.claims.is_empty(), "a cut claim is not planned with");
    assert_eq!(ix.problems.len(), 1);
    assert!(
        ix.problems[0]
            .1
            .starts_with(r#"spec.devices[0].capacity["memory"]: "lots""#),
        "{:?}",
        ix.problems
    );
    let mut claims = pod_claims_of(json!({"metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]}}));
    assert_eq!(
        ix.resolve("ml", &mut claims).unwrap_err(),
        r#"spec.resourceClaims[0] ("gpu"): ResourceClaim ml/shared is over the API's limits (spec.devices.requests (40 > 32))"#
    );
}
