//! Tests of the launch pieces: names, request ids, labels, the instance body and operations.

use autoscaler_core::CapacityType::{OnDemand, Spot};
use autoscaler_core::{Effect, Taint};
use providers::NodeClassRef;

use super::*;

fn request() -> LaunchRequest {
    LaunchRequest {
        claim: "gpu-a1b2c".into(),
        pool: "gpu".into(),
        class: NodeClassRef::default(),
        candidates: vec![OfferingKey::new(
            "n1-standard-8-t4x1",
            "us-central1-a",
            Spot,
        )],
        labels: BTreeMap::from([("team".to_string(), "it's".to_string())]),
        taints: vec![Taint::new("nvidia.com/gpu", "", Effect::NoSchedule)],
        startup_taints: Vec::new(),
        placement_group: None,
        gpu_sharing: Default::default(),
    }
}

#[test]
fn instance_names_are_valid_gce_names_and_deterministic() {
    assert_eq!(instance_name("gpu-a1b2c"), "gpu-a1b2c");
    let dotted = instance_name("pool.v2-abc");
    assert!(dotted.starts_with("pool-v2-abc-"), "{dotted}");
    assert_ne!(dotted, instance_name("pool-v2.abc"));
    assert!(instance_name("9lives").starts_with("n-9lives-"));
    let long = format!("{}-x", "a".repeat(80));
    let n = instance_name(&long);
    assert!(n.len() <= 63, "{n}");
    assert_eq!(n, instance_name(&long));
    assert_ne!(n, instance_name(&format!("{}-y", "a".repeat(80))));
    let valid = |n: &str| {
        n.starts_with(|c: char| c.is_ascii_lowercase())
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !n.ends_with('-')
    };
    for c in ["gpu-a1b2c", "pool.v2-abc", "9lives", long.as_str(), "a.-"] {
        assert!(valid(&instance_name(c)), "{c} -> {}", instance_name(c));
    }
}

#[test]
fn request_ids_are_uuids_per_claim_and_offering() {
    let a = OfferingKey::new("g2-standard-4", "us-central1-a", Spot);
    let b = OfferingKey::new("g2-standard-4", "us-central1-b", Spot);
    let id = request_id("c1", &a);
    assert_eq!(Uuid::parse_str(&id).unwrap().get_version_num(), 5);
    assert_eq!(id, request_id("c1", &a), "a retry reuses the id");
    assert_ne!(id, request_id("c1", &b), "the next zone gets its own");
    assert_ne!(id, request_id("c2", &a));
    assert_ne!(
        id,
        request_id(
            "c1",
            &OfferingKey::new("g2-standard-4", "us-central1-a", OnDemand)
        )
    );
    assert_ne!(
        delete_request_id("gce://p/z/n"),
        delete_request_id("gce://p/z/m")
    );
}

#[test]
fn label_values_and_provider_ids_round_trip() {
    assert_eq!(to_label_value("pool.v2").as_deref(), Some("pool_v2"));
    assert_eq!(from_label_value("pool_v2"), "pool.v2");
    assert!(to_label_value(&"a".repeat(64)).is_none());
    let pid = provider_id("proj", "us-central1-a", "n1");
    assert_eq!(pid, "gce://proj/us-central1-a/n1");
    assert_eq!(
        parse_provider_id(&pid),
        Some(("proj", "us-central1-a", "n1"))
    );
    assert_eq!(parse_provider_id("gce://proj/z"), None);
    assert_eq!(parse_provider_id("aws:///z/i-1"), None);
    assert_eq!(parse_provider_id("gce://p/z/n/extra"), None);
    let tags = neutral_tags(
        &BTreeMap::from([
            (gce_labels::CLUSTER.to_string(), "c".to_string()),
            (gce_labels::POOL.to_string(), "pool_v2".to_string()),
            ("other".to_string(), "x".to_string()),
        ]),
        &BTreeMap::from([(metadata_keys::CLAIM.to_string(), "a.long.claim".to_string())]),
    );
    assert_eq!(tags[tags::CLUSTER], "c");
    assert_eq!(tags[tags::POOL], "pool.v2");
    assert_eq!(tags[tags::CLAIM], "a.long.claim");
    assert_eq!(tags["other"], "x");
}

#[test]
fn the_body_follows_the_class_template() {
    let class = NodeClass {
        subnetwork: Some("regions/us-central1/subnetworks/nodes".into()),
        service_account: Some("nodes@p.iam.gserviceaccount.com".into()),
        network_tags: vec!["gke-node".into()],
        external_ip: true,
        startup_script: Some("echo hello".into()),
        ..NodeClass::default()
    };
    let t = Template {
        project: "p",
        cluster: "c1",
        class: &class,
        builtin_gpu: false,
    };
    let r = request();
    let body = instance_body(&t, &r, &r.candidates[0]);
    let v = serde_json::to_value(&body).unwrap();
    assert_eq!(v["name"], "gpu-a1b2c");
    assert_eq!(
        v["machineType"],
        "zones/us-central1-a/machineTypes/n1-standard-8"
    );
    assert_eq!(
        v["guestAccelerators"][0]["acceleratorType"],
        "projects/p/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4"
    );
    assert_eq!(v["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert_eq!(v["scheduling"]["automaticRestart"], false);
    assert_eq!(
        v["networkInterfaces"][0]["subnetwork"],
        "regions/us-central1/subnetworks/nodes"
    );
    assert_eq!(
        v["networkInterfaces"][0]["accessConfigs"][0]["type"],
        "ONE_TO_ONE_NAT"
    );
    assert_eq!(
        v["serviceAccounts"][0]["email"],
        "nodes@p.iam.gserviceaccount.com"
    );
    assert_eq!(v["tags"]["items"][0], "gke-node");
    assert_eq!(v["disks"][0]["initializeParams"]["diskSizeGb"], "100");
    assert_eq!(
        v["labels"]["gpu-autoscaler-instance-type"],
        "n1-standard-8-t4x1"
    );
    let items = v["metadata"]["items"].as_array().unwrap();
    let script = items
        .iter()
        .find(|i| i["key"] == "startup-script")
        .and_then(|i| i["value"].as_str())
        .unwrap();
    assert!(script.starts_with("#!/bin/bash\n"));
    assert!(script.contains("echo hello\n"));
    // Quoting survives a value with a quote in it.
    assert!(script.contains(r"team=it'\''s"), "{script}");
    assert!(
        script.contains("--register-with-taints=nvidia.com/gpu:NoSchedule"),
        "{script}"
    );

    // A CPU type on demand: no accelerators, live migration allowed.
    let mut r = request();
    r.candidates = vec![OfferingKey::new("e2-standard-4", "us-central1-b", OnDemand)];
    let v = serde_json::to_value(instance_body(&t, &r, &r.candidates[0])).unwrap();
    assert!(v.get("guestAccelerators").is_none());
    assert!(v["scheduling"].get("onHostMaintenance").is_none());
    assert_eq!(v["scheduling"]["provisioningModel"], "STANDARD");
    // The same as Spot: Compute Engine requires TERMINATE on maintenance for Spot VMs.
    r.candidates = vec![OfferingKey::new("e2-standard-4", "us-central1-b", Spot)];
    let v = serde_json::to_value(instance_body(&t, &r, &r.candidates[0])).unwrap();
    assert_eq!(v["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert_eq!(v["scheduling"]["instanceTerminationAction"], "DELETE");
}

#[test]
fn a_done_operation_with_an_error_is_a_failure() {
    let op = |v: serde_json::Value| -> model::Operation { serde_json::from_value(v).unwrap() };
    assert_eq!(
        outcome(&op(serde_json::json!({"status": "RUNNING"}))),
        OpOutcome::Running
    );
    assert_eq!(
        outcome(&op(serde_json::json!({"status": "DONE"}))),
        OpOutcome::Done
    );
    let exhausted = outcome(&op(serde_json::json!({
        "status": "DONE", "httpErrorStatusCode": 503,
        "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no"}]}
    })));
    assert!(
        matches!(
            exhausted,
            OpOutcome::Failed {
                unavailable: true,
                ..
            }
        ),
        "{exhausted:?}"
    );
    let quota = outcome(&op(serde_json::json!({
        "status": "DONE", "error": {"errors": [{"code": "QUOTA_EXCEEDED", "message": "q"}]}
    })));
    assert!(matches!(
        quota,
        OpOutcome::Failed {
            unavailable: true,
            ..
        }
    ));
    let other = outcome(&op(serde_json::json!({
        "status": "DONE", "error": {"errors": [{"code": "INVALID_FIELD_VALUE", "message": "bad image"}]}
    })));
    match other {
        OpOutcome::Failed {
            unavailable,
            code,
            message,
            ..
        } => {
            assert!(!unavailable);
            assert_eq!(
                (code.as_str(), message.as_str()),
                ("INVALID_FIELD_VALUE", "bad image")
            );
        }
        o => panic!("{o:?}"),
    }
    let http_only = outcome(&op(serde_json::json!({
        "status": "DONE", "httpErrorStatusCode": 404, "httpErrorMessage": "NOT FOUND"
    })));
    assert!(matches!(http_only, OpOutcome::Failed { .. }));
    let exists = outcome(&op(serde_json::json!({
        "status": "DONE", "error": {"errors": [{"code": "RESOURCE_ALREADY_EXISTS"}]}
    })));
    assert!(matches!(
        exists,
        OpOutcome::Failed {
            already_exists: true,
            ..
        }
    ));
}
