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
            zone_id: None,
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
        gpu_type(
            "p4d",
            "nvidia",
            "A100",
            8,
            40960,
            Some("NVIDIA-A100-SXM4-40GB"),
        ),
        gpu_type(
            "p4de",
            "nvidia",
            "A100",
            8,
            81920,
            Some("NVIDIA-A100-SXM4-80GB"),
        ),
        gpu_type(
            "a3-1g",
            "nvidia",
            "H100",
            1,
            81920,
            Some("NVIDIA-H100-80GB-HBM3"),
        ),
        gpu_type("p5en", "nvidia", "H200", 8, 144384, Some("NVIDIA-H200")),
        gpu_type("b200x8", "nvidia", "B200", 8, 183359, Some("NVIDIA-B200")),
        gpu_type("g4dn", "nvidia", "T4", 1, 16384, Some("Tesla-T4")),
        gpu_type("g4ad", "amd", "Radeon-Pro-V520", 1, 8192, None),
        cpu,
    ]
}

fn ts(replicas: u32, rename: bool) -> GpuSharing {
    GpuSharing {
        time_slicing: Some(TimeSlicing {
            replicas,
            rename,
            ..TimeSlicing::default()
        }),
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
        expect![[r#"
            p4d: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=time-slicing]
            p4de: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=time-slicing]
            a3-1g: nvidia.com/gpu=4 [nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=time-slicing]
            p5en: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-H200-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=time-slicing]
            b200x8: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-B200-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=time-slicing]
            g4dn: nvidia.com/gpu=4 [nvidia.com/gpu.product=Tesla-T4-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=time-slicing]
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": time-slicing is a feature of NVIDIA's device plugin and needs an NVIDIA GPU
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn time_slicing_with_rename_moves_to_shared_resource() {
    check(
        &ts(3, true),
        expect![[r#"
            p4d: nvidia.com/gpu.shared=24 [nvidia.com/gpu.replicas=3] [nvidia.com/gpu.sharing-strategy=time-slicing]
            p4de: nvidia.com/gpu.shared=24 [nvidia.com/gpu.replicas=3] [nvidia.com/gpu.sharing-strategy=time-slicing]
            a3-1g: nvidia.com/gpu.shared=3 [nvidia.com/gpu.replicas=3] [nvidia.com/gpu.sharing-strategy=time-slicing]
            p5en: nvidia.com/gpu.shared=24 [nvidia.com/gpu.replicas=3] [nvidia.com/gpu.sharing-strategy=time-slicing]
            b200x8: nvidia.com/gpu.shared=24 [nvidia.com/gpu.replicas=3] [nvidia.com/gpu.sharing-strategy=time-slicing]
            g4dn: nvidia.com/gpu.shared=3 [nvidia.com/gpu.replicas=3] [nvidia.com/gpu.sharing-strategy=time-slicing]
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": time-slicing is a feature of NVIDIA's device plugin and needs an NVIDIA GPU
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn mig_single_strategy() {
    check(
        &mig("all-1g.10gb", MigStrategy::Single),
        expect![[r#"
            p4d: nvidia.com/gpu=32 [nvidia.com/gpu.count=32] [nvidia.com/gpu.memory=9856] [nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.10gb] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-1g.10gb] [nvidia.com/mig.strategy=single]
            p4de: nvidia.com/gpu=56 [nvidia.com/gpu.count=56] [nvidia.com/gpu.memory=9856] [nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-MIG-1g.10gb] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-1g.10gb] [nvidia.com/mig.strategy=single]
            a3-1g: nvidia.com/gpu=7 [nvidia.com/gpu.count=7] [nvidia.com/gpu.memory=10240] [nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-1g.10gb] [nvidia.com/mig.strategy=single]
            p5en: error: unknown MIG configuration "all-1g.10gb" for GPU model "H200 (H200-141GB)"
            b200x8: error: unknown MIG configuration "all-1g.10gb" for GPU model "B200"
            g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn mig_mixed_strategy() {
    check(
        &mig("all-1g.10gb", MigStrategy::Mixed),
        expect![[r#"
            p4d: nvidia.com/mig-1g.10gb=32 [nvidia.com/mig-1g.10gb.count=32] [nvidia.com/mig-1g.10gb.memory=9856] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-1g.10gb] [nvidia.com/mig.strategy=mixed]
            p4de: nvidia.com/mig-1g.10gb=56 [nvidia.com/mig-1g.10gb.count=56] [nvidia.com/mig-1g.10gb.memory=9856] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-1g.10gb] [nvidia.com/mig.strategy=mixed]
            a3-1g: nvidia.com/mig-1g.10gb=7 [nvidia.com/mig-1g.10gb.count=7] [nvidia.com/mig-1g.10gb.memory=10240] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-1g.10gb] [nvidia.com/mig.strategy=mixed]
            p5en: error: unknown MIG configuration "all-1g.10gb" for GPU model "H200 (H200-141GB)"
            b200x8: error: unknown MIG configuration "all-1g.10gb" for GPU model "B200"
            g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn mig_balanced_mixed() {
    check(
        &mig("all-balanced", MigStrategy::Mixed),
        expect![[r#"
            p4d: nvidia.com/mig-1g.5gb=16 nvidia.com/mig-2g.10gb=8 nvidia.com/mig-3g.20gb=8 [nvidia.com/mig-1g.5gb.count=16] [nvidia.com/mig-1g.5gb.memory=4864] [nvidia.com/mig-2g.10gb.count=8] [nvidia.com/mig-2g.10gb.memory=9856] [nvidia.com/mig-3g.20gb.count=8] [nvidia.com/mig-3g.20gb.memory=19968] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-balanced] [nvidia.com/mig.strategy=mixed]
            p4de: nvidia.com/mig-1g.10gb=16 nvidia.com/mig-2g.20gb=8 nvidia.com/mig-3g.40gb=8 [nvidia.com/mig-1g.10gb.count=16] [nvidia.com/mig-1g.10gb.memory=9856] [nvidia.com/mig-2g.20gb.count=8] [nvidia.com/mig-2g.20gb.memory=19968] [nvidia.com/mig-3g.40gb.count=8] [nvidia.com/mig-3g.40gb.memory=40192] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-balanced] [nvidia.com/mig.strategy=mixed]
            a3-1g: nvidia.com/mig-1g.10gb=2 nvidia.com/mig-2g.20gb=1 nvidia.com/mig-3g.40gb=1 [nvidia.com/mig-1g.10gb.count=2] [nvidia.com/mig-1g.10gb.memory=10240] [nvidia.com/mig-2g.20gb.count=1] [nvidia.com/mig-2g.20gb.memory=20480] [nvidia.com/mig-3g.40gb.count=1] [nvidia.com/mig-3g.40gb.memory=40960] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-balanced] [nvidia.com/mig.strategy=mixed]
            p5en: nvidia.com/mig-1g.18gb=16 nvidia.com/mig-2g.35gb=8 nvidia.com/mig-3g.71gb=8 [nvidia.com/mig-1g.18gb.count=16] [nvidia.com/mig-1g.18gb.memory=18432] [nvidia.com/mig-2g.35gb.count=8] [nvidia.com/mig-2g.35gb.memory=35840] [nvidia.com/mig-3g.71gb.count=8] [nvidia.com/mig-3g.71gb.memory=72704] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-balanced] [nvidia.com/mig.strategy=mixed]
            b200x8: nvidia.com/mig-1g.23gb=16 nvidia.com/mig-2g.45gb=8 nvidia.com/mig-3g.90gb=8 [nvidia.com/mig-1g.23gb.count=16] [nvidia.com/mig-1g.23gb.memory=23552] [nvidia.com/mig-2g.45gb.count=8] [nvidia.com/mig-2g.45gb.memory=46080] [nvidia.com/mig-3g.90gb.count=8] [nvidia.com/mig-3g.90gb.memory=92160] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-balanced] [nvidia.com/mig.strategy=mixed]
            g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn mig_balanced_single_is_rejected() {
    check(
        &mig("all-balanced", MigStrategy::Single),
        expect![[r#"
            p4d: error: GPU sharing on GPU model "A100": MIG strategy single advertises every instance as nvidia.com/gpu and so needs one profile type, but all-balanced has 1g.5gb, 2g.10gb, 3g.20gb; use strategy mixed or an all-<profile> configuration
            p4de: error: GPU sharing on GPU model "A100": MIG strategy single advertises every instance as nvidia.com/gpu and so needs one profile type, but all-balanced has 1g.10gb, 2g.20gb, 3g.40gb; use strategy mixed or an all-<profile> configuration
            a3-1g: error: GPU sharing on GPU model "H100": MIG strategy single advertises every instance as nvidia.com/gpu and so needs one profile type, but all-balanced has 1g.10gb, 2g.20gb, 3g.40gb; use strategy mixed or an all-<profile> configuration
            p5en: error: GPU sharing on GPU model "H200": MIG strategy single advertises every instance as nvidia.com/gpu and so needs one profile type, but all-balanced has 1g.18gb, 2g.35gb, 3g.71gb; use strategy mixed or an all-<profile> configuration
            b200x8: error: GPU sharing on GPU model "B200": MIG strategy single advertises every instance as nvidia.com/gpu and so needs one profile type, but all-balanced has 1g.23gb, 2g.45gb, 3g.90gb; use strategy mixed or an all-<profile> configuration
            g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn mig_disabled_keeps_whole_gpus() {
    check(
        &mig("all-disabled", MigStrategy::Single),
        expect![[r#"
            p4d: nvidia.com/gpu=8 [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-disabled] [nvidia.com/mig.strategy=single]
            p4de: nvidia.com/gpu=8 [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-disabled] [nvidia.com/mig.strategy=single]
            a3-1g: nvidia.com/gpu=1 [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-disabled] [nvidia.com/mig.strategy=single]
            p5en: nvidia.com/gpu=8 [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-disabled] [nvidia.com/mig.strategy=single]
            b200x8: nvidia.com/gpu=8 [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-disabled] [nvidia.com/mig.strategy=single]
            g4dn: nvidia.com/gpu=1 [nvidia.com/mig.capable=false] [nvidia.com/mig.strategy=single]
            g4ad: amd.com/gpu=1
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn mig_enabled_without_instances_offers_nothing_and_is_refused_under_single() {
    check(
        &mig("all-enabled", MigStrategy::Single),
        expect![[r#"
            p4d: error: GPU sharing on GPU model "A100": MIG strategy single needs MIG instances to advertise as nvidia.com/gpu, but all-enabled creates none and the device plugin does not start without them; use strategy mixed or an all-<profile> configuration
            p4de: error: GPU sharing on GPU model "A100": MIG strategy single needs MIG instances to advertise as nvidia.com/gpu, but all-enabled creates none and the device plugin does not start without them; use strategy mixed or an all-<profile> configuration
            a3-1g: error: GPU sharing on GPU model "H100": MIG strategy single needs MIG instances to advertise as nvidia.com/gpu, but all-enabled creates none and the device plugin does not start without them; use strategy mixed or an all-<profile> configuration
            p5en: error: GPU sharing on GPU model "H200": MIG strategy single needs MIG instances to advertise as nvidia.com/gpu, but all-enabled creates none and the device plugin does not start without them; use strategy mixed or an all-<profile> configuration
            b200x8: error: GPU sharing on GPU model "B200": MIG strategy single needs MIG instances to advertise as nvidia.com/gpu, but all-enabled creates none and the device plugin does not start without them; use strategy mixed or an all-<profile> configuration
            g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            cpu-only: no devices
        "#]],
    );
    check(
        &mig("all-enabled", MigStrategy::Mixed),
        expect![[r#"
            p4d: no devices [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-enabled] [nvidia.com/mig.strategy=mixed]
            p4de: no devices [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-enabled] [nvidia.com/mig.strategy=mixed]
            a3-1g: no devices [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-enabled] [nvidia.com/mig.strategy=mixed]
            p5en: no devices [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-enabled] [nvidia.com/mig.strategy=mixed]
            b200x8: no devices [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-enabled] [nvidia.com/mig.strategy=mixed]
            g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            cpu-only: no devices
        "#]],
    );
}

#[test]
fn mig_then_time_slicing() {
    let sharing = GpuSharing {
        time_slicing: Some(TimeSlicing {
            replicas: 2,
            rename: true,
            ..TimeSlicing::default()
        }),
        ..mig("all-3g.40gb", MigStrategy::Mixed)
    };
    check(
        &sharing,
        expect![[r#"
            p4d: error: unknown MIG configuration "all-3g.40gb" for GPU model "A100 (A100-40GB)"
            p4de: nvidia.com/mig-3g.40gb.shared=32 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=time-slicing] [nvidia.com/mig-3g.40gb.count=16] [nvidia.com/mig-3g.40gb.memory=40192] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-3g.40gb] [nvidia.com/mig.strategy=mixed]
            a3-1g: nvidia.com/mig-3g.40gb.shared=4 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=time-slicing] [nvidia.com/mig-3g.40gb.count=2] [nvidia.com/mig-3g.40gb.memory=40960] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-3g.40gb] [nvidia.com/mig.strategy=mixed]
            p5en: error: unknown MIG configuration "all-3g.40gb" for GPU model "H200 (H200-141GB)"
            b200x8: error: unknown MIG configuration "all-3g.40gb" for GPU model "B200"
            g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
            cpu-only: no devices
        "#]],
    );
    let sharing = GpuSharing {
        time_slicing: Some(TimeSlicing {
            replicas: 2,
            rename: false,
            ..TimeSlicing::default()
        }),
        ..mig("all-3g.40gb", MigStrategy::Single)
    };
    check(
        &sharing,
        expect![[r#"
        p4d: error: unknown MIG configuration "all-3g.40gb" for GPU model "A100 (A100-40GB)"
        p4de: nvidia.com/gpu=32 [nvidia.com/gpu.count=16] [nvidia.com/gpu.memory=40192] [nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-MIG-3g.40gb-SHARED] [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=time-slicing] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-3g.40gb] [nvidia.com/mig.strategy=single]
        a3-1g: nvidia.com/gpu=4 [nvidia.com/gpu.count=2] [nvidia.com/gpu.memory=40960] [nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-3g.40gb-SHARED] [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=time-slicing] [nvidia.com/mig.capable=true] [nvidia.com/mig.config=all-3g.40gb] [nvidia.com/mig.strategy=single]
        p5en: error: unknown MIG configuration "all-3g.40gb" for GPU model "H200 (H200-141GB)"
        b200x8: error: unknown MIG configuration "all-3g.40gb" for GPU model "B200"
        g4dn: error: GPU sharing on GPU model "T4": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
        g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": this GPU does not support MIG (MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, B200)
        cpu-only: no devices
    "#]],
    );
}

#[test]
fn mps_advertises_replicas_like_time_slicing_and_says_mps() {
    let mps = |replicas, rename| GpuSharing {
        time_slicing: Some(TimeSlicing {
            replicas,
            rename,
            mps: true,
            ..TimeSlicing::default()
        }),
        ..GpuSharing::default()
    };
    check(
        &mps(4, false),
        expect![[r#"
            p4d: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            p4de: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            a3-1g: nvidia.com/gpu=4 [nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            p5en: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-H200-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            b200x8: nvidia.com/gpu=32 [nvidia.com/gpu.product=NVIDIA-B200-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            g4dn: nvidia.com/gpu=4 [nvidia.com/gpu.product=Tesla-T4-SHARED] [nvidia.com/gpu.replicas=4] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": MPS is a feature of NVIDIA's device plugin and needs an NVIDIA GPU
            cpu-only: no devices
        "#]],
    );
    check(
        &mps(2, true),
        expect![[r#"
            p4d: nvidia.com/gpu.shared=16 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            p4de: nvidia.com/gpu.shared=16 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            a3-1g: nvidia.com/gpu.shared=2 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            p5en: nvidia.com/gpu.shared=16 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            b200x8: nvidia.com/gpu.shared=16 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            g4dn: nvidia.com/gpu.shared=2 [nvidia.com/gpu.replicas=2] [nvidia.com/gpu.sharing-strategy=mps] [nvidia.com/mps.capable=true]
            g4ad: error: GPU sharing on GPU model "Radeon-Pro-V520": MPS is a feature of NVIDIA's device plugin and needs an NVIDIA GPU
            cpu-only: no devices
        "#]],
    );
    // Not on MIG instances, under either strategy; all-disabled keeps whole GPUs to share.
    for strategy in [MigStrategy::Single, MigStrategy::Mixed] {
        let sharing = GpuSharing {
            time_slicing: mps(2, false).time_slicing,
            ..mig("all-1g.10gb", strategy)
        };
        let t = &types()[0];
        assert_eq!(
            render(t, &sharing),
            "error: GPU sharing on GPU model \"A100\": MPS shares only whole GPUs, not MIG \
             instances (MIG configuration all-disabled, or time-slicing instead of MPS)"
        );
    }
    let off = GpuSharing {
        time_slicing: mps(2, false).time_slicing,
        ..mig("all-disabled", MigStrategy::Single)
    };
    assert!(render(&types()[0], &off).contains("nvidia.com/gpu=16"));
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
            model: "H100 (H100-80GB)".into()
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
