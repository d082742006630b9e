//! Capacity under time-slicing and MIG, as tables: one line per (instance type, sharing).

use expect_test::{Expect, expect};

use super::*;
use crate::instance::CapacityType;
use crate::instance::Offering;
use crate::requirements::Labels;
use crate::resources::Resources;

fn gpu_type(
    name: &str,
    vendor: &str,
    model: &str,
    count: u32,
    memory_mib: u64,
    product: Option<&str>,
) -> InstanceType {
    let resource = if vendor == "amd" {
        "amd.com/gpu"
    } else {
        "nvidia.com/gpu"
    };
    let mut labels = Labels::new();
    labels.insert(labels::INSTANCE_TYPE.into(), name.into());
    if let Some(product) = product {
        labels.insert(labels::NVIDIA_PRODUCT.into(), product.into());
        labels.insert(labels::NVIDIA_COUNT.into(), count.to_string());
        labels.insert(labels::NVIDIA_MEMORY.into(), memory_mib.to_string());
    }
    InstanceType {
        name: name.into(),
        arch: "amd64".into(),
        capacity: Resources::new()
            .with("cpu", 96_000)
            .with("memory", 1 << 40)
            .with("pods", 110)
            .with(resource, i64::from(count)),
        overhead: Resources::new().with("cpu", 100).with("memory", 1 << 30),
        gpu: Some(GpuSpec {
            vendor: vendor.into(),
            model: model.into(),
            count,
            memory_mib,
            resource: resource.into(),
        }),
        labels,
        offerings: vec![Offering {
            zone: "zone-a".into(),
            capacity_type: CapacityType::OnDemand,
            price: 1.0,
            available: true,
        }],
    }
}

fn types() -> Vec<InstanceType> {
    let mut cpu = gpu_type("cpu-only", "nvidia", "-", 0, 0, None);
    cpu.gpu = None;
    vec![
        gpu_type("p4d", "nvidia", "A100", 8, 40960, Some("NVIDIA-A100-SXM4-40GB")),
        gpu_type("p4de", "nvidia", "A100", 8, 81920, Some("NVIDIA-A100-SXM4-80GB")),
        gpu_type("a3-1g", "nvidia", "H100", 1, 81920, Some("NVIDIA-H100-80GB-HBM3")),
        gpu_type("p5en", "nvidia", "H200", 8, 144384, Some("NVIDIA-H200")),
        gpu_type("b200x8", "nvidia", "B200", 8, 183359, Some("NVIDIA-B200")),
        gpu_type("g4dn", "nvidia", "T4", 1, 16384, Some("Tesla-T4")),
        gpu_type("g4ad", "amd", "Radeon-Pro-V520", 1, 8192, None),
        cpu,
    ]
}

fn ts(replicas: u32, rename: bool) -> GpuSharing {
    GpuSharing {
        time_slicing: Some(TimeSlicing { replicas, rename }),
        ..GpuSharing::default()
    }
}

fn mig(config: &str, strategy: MigStrategy) -> GpuSharing {
    GpuSharing {
        mig: Some(MigSharing {
            config: config.into(),
            strategy,
        }),
        ..GpuSharing::default()
    }
}

/// Renders what sharing changed: GPU-class resources after, and labels added or changed.
fn render(it: &InstanceType, sharing: &GpuSharing) -> String {
    match apply_sharing(it, sharing) {
        Err(e) => format!("error: {e}"),
        Ok(out) => {
            let mut parts: Vec<String> = out
                .capacity
                .extended
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if parts.is_empty() {
                parts.push("no devices".into());
            }
            for (k, v) in &out.labels {
                if it.labels.get(k) != Some(v) {
                    parts.push(format!("[{k}={v}]"));
                }
            }
            for k in it.labels.keys() {
                if !out.labels.contains_key(k) {
                    parts.push(format!("[-{k}]"));
                }
            }
            // Sharing must not touch anything but GPU resources and labels.
            assert_eq!(out.capacity.cpu, it.capacity.cpu);
            assert_eq!(out.capacity.memory, it.capacity.memory);
            assert_eq!(out.overhead, it.overhead);
            assert_eq!(out.offerings, it.offerings);
            assert_eq!(out.gpu, it.gpu);
            parts.join(" ")
        }
    }
}

fn check(sharing: &GpuSharing, expect: Expect) {
    let out: String = types()
        .iter()
        .map(|it| format!("{}: {}\n", it.name, render(it, sharing)))
        .collect();
    expect.assert_eq(&out);
}

#[test]
fn no_sharing_changes_nothing() {
    for it in types() {
        assert_eq!(apply_sharing(&it, &GpuSharing::default()).unwrap(), it);
    }
}

#[test]
fn time_slicing_multiplies_devices() {
    check(
        &ts(4, false),
        expect![[r#""#]],
    );
}

#[test]
fn time_slicing_with_rename_moves_to_shared_resource() {
    check(
        &ts(3, true),
        expect![[r#""#]],
    );
}

#[test]
fn mig_single_strategy() {
    check(
        &mig("all-1g.10gb", MigStrategy::Single),
        expect![[r#""#]],
    );
}

#[test]
fn mig_mixed_strategy() {
    check(
        &mig("all-1g.10gb", MigStrategy::Mixed),
        expect![[r#""#]],
    );
}

#[test]
fn mig_balanced_mixed() {
    check(
        &mig("all-balanced", MigStrategy::Mixed),
        expect![[r#""#]],
    );
}

#[test]
fn mig_balanced_single_is_rejected() {
    check(
        &mig("all-balanced", MigStrategy::Single),
        expect![[r#""#]],
    );
}

#[test]
fn mig_disabled_keeps_whole_gpus() {
    check(
        &mig("all-disabled", MigStrategy::Single),
        expect![[r#""#]],
    );
}

#[test]
fn mig_then_time_slicing() {
    let sharing = GpuSharing {
        time_slicing: Some(TimeSlicing {
            replicas: 2,
            rename: true,
        }),
        ..mig("all-3g.40gb", MigStrategy::Mixed)
    };
    check(&sharing, expect![[r#""#]]);
    let sharing = GpuSharing {
        time_slicing: Some(TimeSlicing {
            replicas: 2,
            rename: false,
        }),
        ..mig("all-3g.40gb", MigStrategy::Single)
    };
    check(&sharing, expect![[r#""#]]);
}

#[test]
fn errors_name_the_problem() {
    let t4 = &types()[5];
    let e = apply_sharing(t4, &mig("all-1g.10gb", MigStrategy::Mixed)).unwrap_err();
    assert!(matches!(e, CoreError::InvalidGpuSharing { ref model, .. } if model == "T4"));
    let h100 = &types()[2];
    let e = apply_sharing(h100, &mig("all-1g.5gb", MigStrategy::Mixed)).unwrap_err();
    assert_eq!(
        e,
        CoreError::UnknownMigConfig {
            config: "all-1g.5gb".into(),
            model: "H100".into()
        }
    );
    let e = apply_sharing(h100, &ts(0, false)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU sharing on GPU model \"H100\": time-slicing replicas must be at least 1"
    );
}

#[test]
fn allocatable_follows_capacity() {
    let p4de = &types()[1];
    let shared = apply_sharing(p4de, &mig("all-1g.10gb", MigStrategy::Mixed)).unwrap();
    assert_eq!(shared.allocatable().get("nvidia.com/mig-1g.10gb"), 56);
    assert_eq!(shared.allocatable().get("nvidia.com/gpu"), 0);
    let req = Resources::new().with("nvidia.com/mig-1g.10gb", 7);
    assert!(req.fits(&shared.allocatable()));
}
