//! The kwok provider's unit tests: quantities, Node shapes and sharing, stage times.

use autoscaler_core::model::{MigSharing, MigStrategy, TimeSlicing};

use super::api::advertised;
use super::*;

#[test]
fn quantities_render_as_kubernetes_writes_them() {
    assert_eq!(quantity("cpu", 3920).0, "3920m");
    assert_eq!(quantity("cpu", 4000).0, "4");
    assert_eq!(quantity("memory", 1 << 30).0, "1073741824");
    assert_eq!(quantity("nvidia.com/gpu", 8).0, "8");
    assert_eq!(instance_name("kwok://gpu-x"), Some("gpu-x"));
    assert_eq!(instance_name("aws:///i-1"), None);
}

#[test]
fn crd_yaml_names_the_type() {
    let v: serde_json::Value = serde_norway::from_str(CRD_YAML).unwrap();
    assert_eq!(v["spec"]["names"]["kind"], "KwokInstance");
    assert_eq!(v["spec"]["group"], "kwok.gpu-autoscaler.dev");
}

fn instance(type_name: &str, sharing: GpuSharing) -> KwokInstance {
    let mut ki: KwokInstance = serde_json::from_value(json!({
        "metadata": {"name": "nb-1"},
        "spec": {"cluster": "c", "claim": "nb-1", "pool": "notebooks",
                 "instanceType": type_name, "zone": "us-east-1a",
                 "capacityType": "on-demand"}
    }))
    .unwrap();
    ki.spec.gpu_sharing = sharing;
    // The sharing survives the round trip through the API.
    let back: KwokInstance = serde_json::from_value(json!(ki)).unwrap();
    assert_eq!(back.spec, ki.spec);
    ki
}

fn gpus(status: &NodeStatus) -> Vec<(String, String, String)> {
    let a = status.allocatable.as_ref().unwrap();
    let c = status.capacity.as_ref().unwrap();
    a.iter()
        .filter(|(k, _)| is_gpu_class(k))
        .map(|(k, v)| (k.clone(), v.0.clone(), c[k].0.clone()))
        .collect()
}

#[test]
fn the_node_advertises_the_pools_sharing_and_the_configured_share_of_it() {
    let catalog = crate::catalog::default_catalog();
    let ki = instance(
        "g4dn.12xlarge",
        GpuSharing {
            time_slicing: Some(TimeSlicing {
                replicas: 4,
                rename: false,
                ..TimeSlicing::default()
            }),
            ..GpuSharing::default()
        },
    );
    let booted = booted_type(&catalog, &ki).unwrap();
    let g = |s: &NodeStatus| gpus(s);
    let n = |v: &str| ("nvidia.com/gpu".to_string(), v.to_string(), v.to_string());
    assert_eq!(g(&node_status(&booted, true, false, 1.0)), [n("0")]);
    assert_eq!(g(&node_status(&booted, true, true, 1.0)), [n("16")]);
    assert_eq!(g(&node_status(&booted, true, true, 0.25)), [n("4")]);
    assert_eq!(
        booted
            .labels
            .get("nvidia.com/gpu.replicas")
            .map(String::as_str),
        Some("4")
    );
    // MIG: the device plugin advertises MIG instances, not whole GPUs.
    let ki = instance(
        "p4d.24xlarge",
        GpuSharing {
            mig: Some(MigSharing {
                config: "all-1g.5gb".into(),
                strategy: MigStrategy::Mixed,
            }),
            ..GpuSharing::default()
        },
    );
    let booted = booted_type(&catalog, &ki).unwrap();
    let shown = gpus(&node_status(&booted, true, true, 1.0));
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0].0.starts_with("nvidia.com/mig-"), "{shown:?}");
    // Unshared and no fraction: the catalog type as it is.
    let ki = instance("g4dn.12xlarge", GpuSharing::default());
    let plain = booted_type(&catalog, &ki).unwrap();
    assert_eq!(g(&node_status(&plain, true, true, 1.0)), [n("4")]);
    assert_eq!(advertised(1, 0.1), 1);
    assert_eq!(advertised(8, 0.5), 4);
    assert_eq!(advertised(0, 0.5), 0);
}

/// A stage marked by this process counts from the mark, to the sub-second; one marked for
/// another object (a Node registered again), or not marked here, from the timestamp.
#[tokio::test]
async fn stage_times_count_from_this_process_marks_for_the_same_object() {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
    let client = kube::Client::try_from(config).expect("a client");
    let kwok = KwokProvider::new(client, vec![], KwokConfig::default());
    let now = jiff::Timestamp::now();
    let ten_ago = Time(now - jiff::SignedDuration::from_secs(10));
    kwok.mark(
        "gpu-a",
        Stage::Registered,
        Some("uid-1"),
        now - jiff::SignedDuration::from_millis(300),
    );
    let marked = kwok.since(
        "gpu-a",
        Stage::Registered,
        Some("uid-1"),
        Some(&ten_ago),
        now,
    );
    assert_eq!(marked, Duration::from_millis(300));
    let other = kwok.since(
        "gpu-a",
        Stage::Registered,
        Some("uid-2"),
        Some(&ten_ago),
        now,
    );
    assert_eq!(other, Duration::from_secs(10));
    let unmarked = kwok.since("gpu-a", Stage::Ready, Some("uid-1"), Some(&ten_ago), now);
    assert_eq!(unmarked, Duration::from_secs(10));
    let unknown = kwok.since("gpu-b", Stage::Launched, None, None, now);
    assert_eq!(unknown, Duration::ZERO);
}

/// A stage seen late is marked when it was due, so the next one is not late as well; one
/// seen early (clock skew) or on time is marked now.
#[test]
fn a_late_pass_marks_the_stage_when_it_was_due() {
    let now = jiff::Timestamp::now();
    let at = due(now, Duration::from_millis(1_400), Duration::from_secs(1));
    assert_eq!(
        now.duration_since(at),
        jiff::SignedDuration::from_millis(400)
    );
    assert_eq!(
        due(now, Duration::from_secs(1), Duration::from_secs(1)),
        now
    );
    assert_eq!(due(now, Duration::ZERO, Duration::from_secs(1)), now);
}
