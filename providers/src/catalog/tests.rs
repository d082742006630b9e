//! The embedded catalog loads, holds what it promises, and bad catalogs are rejected by name.

use std::collections::BTreeMap;

use autoscaler_core::gpu::apply_sharing;
use autoscaler_core::model::{GpuSharing, MigSharing, MigStrategy};
use autoscaler_core::{CoreError, resources::format_amount};
use expect_test::expect;

use super::*;

#[test]
fn embedded_catalog_loads() {
    let c = Catalog::parse(DEFAULT_CATALOG_YAML).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&c, default());
    assert_eq!(c.providers(), ["aws", "gcp"]);
    assert!((100..=200).contains(&c.len()), "{} entries", c.len());
}

#[test]
fn counts_per_provider_and_gpu_model() {
    let mut out = String::new();
    for p in default().providers() {
        let types = default_catalog_for(p);
        let gpu = types.iter().filter(|t| t.gpu.is_some()).count();
        out += &format!("{p}: {} types, {gpu} with accelerators\n", types.len());
    }
    let mut by_model: BTreeMap<&str, usize> = BTreeMap::new();
    for t in default().entries() {
        if let Some(g) = &t.instance_type.gpu {
            *by_model.entry(g.model.as_str()).or_default() += 1;
        }
    }
    for (m, n) in by_model {
        out += &format!("  {m}: {n}\n");
    }
    expect![[r#"
        aws: 107 types, 53 with accelerators
        gcp: 48 types, 31 with accelerators
          A100-40GB: 6
          A100-80GB: 5
          A10G: 8
          B200: 1
          H100: 7
          H200: 2
          Inferentia2: 4
          L4: 16
          L40S: 8
          Radeon-Pro-V520: 2
          T4: 11
          T4G: 4
          Trainium: 2
          V100: 7
          V100-32GB: 1
    "#]]
    .assert_eq(&out);
}

#[test]
fn accelerator_types_carry_resources_and_labels() {
    for ct in default().entries() {
        let t = &ct.instance_type;
        let Some(g) = &t.gpu else {
            assert!(!t.labels.contains_key(labels::GPU_COUNT), "{}", t.name);
            assert!(t.capacity.extended.is_empty(), "{}", t.name);
            continue;
        };
        assert_eq!(
            t.capacity.get(&g.resource),
            i64::from(g.count),
            "{}",
            t.name
        );
        assert_eq!(t.gpu_count(), g.count);
        assert_eq!(t.labels[labels::GPU_COUNT], g.count.to_string());
        assert_eq!(t.labels[labels::GPU_MEMORY], g.memory_mib.to_string());
        assert_eq!(t.labels[labels::GPU_MANUFACTURER], g.vendor);
        assert!(t.labels.contains_key(labels::GPU_NAME), "{}", t.name);
        if g.vendor == "nvidia" {
            assert_eq!(g.resource, "nvidia.com/gpu");
            assert!(
                t.labels[labels::NVIDIA_PRODUCT].starts_with(['N', 'T']),
                "{}",
                t.name
            );
            assert_eq!(t.labels[labels::NVIDIA_COUNT], g.count.to_string());
        } else {
            assert!(!t.labels.contains_key(labels::NVIDIA_PRODUCT), "{}", t.name);
        }
        assert_eq!(
            t.labels.contains_key(labels::GKE_ACCELERATOR),
            ct.provider == GCP,
            "{}",
            t.name
        );
    }
}

#[test]
fn prices_are_positive_and_spot_is_cheaper() {
    for t in default_catalog() {
        assert!(!t.offerings.is_empty(), "{}", t.name);
        let od: Vec<f64> = t
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .map(|o| o.price)
            .collect();
        for o in &t.offerings {
            assert!(o.price > 0.0 && o.price.is_finite(), "{}", t.name);
            assert!(o.available);
            if o.capacity_type == CapacityType::Spot {
                assert!(o.price < od[0], "{}: spot {} >= on-demand", t.name, o.price);
            }
        }
    }
}

#[test]
fn every_type_leaves_room_for_pods() {
    for t in default_catalog() {
        let a = t.allocatable();
        assert!(
            a.cpu > 0 && a.memory > 0 && a.ephemeral_storage > 0 && a.pods > 0,
            "{}",
            t.name
        );
        assert!(
            t.overhead.cpu * 10 < t.capacity.cpu,
            "{}: cpu reserve over 10%",
            t.name
        );
        assert_eq!(t.labels[labels::INSTANCE_TYPE], t.name);
        assert_eq!(t.labels[labels::ARCH], t.arch);
    }
}

fn show(t: &InstanceType) -> String {
    let res = |r: &Resources| {
        r.iter()
            .map(|(k, v)| format!("{k}={}", format_amount(k, v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = format!("{}\n  capacity:    {}\n", t.name, res(&t.capacity));
    out += &format!("  overhead:    {}\n", res(&t.overhead));
    out += &format!("  allocatable: {}\n", res(&t.allocatable()));
    for (k, v) in &t.labels {
        out += &format!("  {k}={v}\n");
    }
    let zones: Vec<&str> = t
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| o.zone.as_str())
        .collect();
    let price = |ct| {
        t.offerings
            .iter()
            .find(|o| o.capacity_type == ct)
            .map_or(0.0, |o| o.price)
    };
    out += &format!(
        "  offerings: {} x (on-demand ${}, spot ${})\n",
        zones.join(","),
        price(CapacityType::OnDemand),
        price(CapacityType::Spot)
    );
    out
}

#[test]
fn sample_entries() {
    let out: String = [
        "m7g.medium",
        "g5.xlarge",
        "p5.48xlarge",
        "inf2.xlarge",
        "n1-standard-8-t4x1",
        "a3-megagpu-8g",
    ]
    .iter()
    .map(|n| show(default().get(n).unwrap_or_else(|| panic!("{n} missing"))))
    .collect();
    expect![[r#"
        m7g.medium
          capacity:    cpu=1 memory=4Gi ephemeral-storage=20Gi pods=8
          overhead:    cpu=60m memory=443Mi ephemeral-storage=3Gi
          allocatable: cpu=940m memory=3653Mi ephemeral-storage=17Gi pods=8
          gpu-autoscaler.dev/instance-family=m7g
          gpu-autoscaler.dev/instance-size=medium
          kubernetes.io/arch=arm64
          kubernetes.io/os=linux
          node.kubernetes.io/instance-type=m7g.medium
          topology.kubernetes.io/region=us-east-1
          offerings: us-east-1a,us-east-1b,us-east-1c,us-east-1d x (on-demand $0.0408, spot $0.01632)
        g5.xlarge
          capacity:    cpu=4 memory=16Gi ephemeral-storage=20Gi pods=58 nvidia.com/gpu=1
          overhead:    cpu=80m memory=993Mi ephemeral-storage=3Gi
          allocatable: cpu=3920m memory=15391Mi ephemeral-storage=17Gi pods=58 nvidia.com/gpu=1
          gpu-autoscaler.dev/instance-family=g5
          gpu-autoscaler.dev/instance-gpu-count=1
          gpu-autoscaler.dev/instance-gpu-manufacturer=nvidia
          gpu-autoscaler.dev/instance-gpu-memory=22888
          gpu-autoscaler.dev/instance-gpu-name=a10g
          gpu-autoscaler.dev/instance-size=xlarge
          kubernetes.io/arch=amd64
          kubernetes.io/os=linux
          node.kubernetes.io/instance-type=g5.xlarge
          nvidia.com/gpu.count=1
          nvidia.com/gpu.memory=22888
          nvidia.com/gpu.product=NVIDIA-A10G
          nvidia.com/gpu.replicas=1
          nvidia.com/gpu.sharing-strategy=none
          nvidia.com/mig.capable=false
          nvidia.com/mps.capable=false
          topology.kubernetes.io/region=us-east-1
          offerings: us-east-1a,us-east-1b,us-east-1c,us-east-1d x (on-demand $1.006, spot $0.4024)
        p5.48xlarge
          capacity:    cpu=192 memory=2Ti ephemeral-storage=20Gi pods=100 nvidia.com/gpu=8
          overhead:    cpu=550m memory=1455Mi ephemeral-storage=3Gi
          allocatable: cpu=191450m memory=2095697Mi ephemeral-storage=17Gi pods=100 nvidia.com/gpu=8
          gpu-autoscaler.dev/instance-family=p5
          gpu-autoscaler.dev/instance-gpu-count=8
          gpu-autoscaler.dev/instance-gpu-manufacturer=nvidia
          gpu-autoscaler.dev/instance-gpu-memory=81920
          gpu-autoscaler.dev/instance-gpu-name=h100
          gpu-autoscaler.dev/instance-size=48xlarge
          kubernetes.io/arch=amd64
          kubernetes.io/os=linux
          node.kubernetes.io/instance-type=p5.48xlarge
          nvidia.com/gpu.count=8
          nvidia.com/gpu.memory=81920
          nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
          nvidia.com/gpu.replicas=1
          nvidia.com/gpu.sharing-strategy=none
          nvidia.com/mig.capable=true
          nvidia.com/mps.capable=false
          topology.kubernetes.io/region=us-east-1
          offerings: us-east-1a,us-east-1b,us-east-1c,us-east-1d x (on-demand $55.04, spot $22.016)
        inf2.xlarge
          capacity:    cpu=4 memory=16Gi ephemeral-storage=20Gi pods=58 aws.amazon.com/neuron=1
          overhead:    cpu=80m memory=993Mi ephemeral-storage=3Gi
          allocatable: cpu=3920m memory=15391Mi ephemeral-storage=17Gi pods=58 aws.amazon.com/neuron=1
          gpu-autoscaler.dev/instance-family=inf2
          gpu-autoscaler.dev/instance-gpu-count=1
          gpu-autoscaler.dev/instance-gpu-manufacturer=aws
          gpu-autoscaler.dev/instance-gpu-memory=32768
          gpu-autoscaler.dev/instance-gpu-name=inferentia2
          gpu-autoscaler.dev/instance-size=xlarge
          kubernetes.io/arch=amd64
          kubernetes.io/os=linux
          node.kubernetes.io/instance-type=inf2.xlarge
          topology.kubernetes.io/region=us-east-1
          offerings: us-east-1a,us-east-1b,us-east-1c,us-east-1d x (on-demand $0.7582, spot $0.30328)
        n1-standard-8-t4x1
          capacity:    cpu=8 memory=30Gi ephemeral-storage=100Gi pods=110 nvidia.com/gpu=1
          overhead:    cpu=90m memory=3623Mi ephemeral-storage=11Gi
          allocatable: cpu=7910m memory=27097Mi ephemeral-storage=89Gi pods=110 nvidia.com/gpu=1
          cloud.google.com/gke-accelerator=nvidia-tesla-t4
          gpu-autoscaler.dev/instance-family=n1
          gpu-autoscaler.dev/instance-gpu-count=1
          gpu-autoscaler.dev/instance-gpu-manufacturer=nvidia
          gpu-autoscaler.dev/instance-gpu-memory=16384
          gpu-autoscaler.dev/instance-gpu-name=t4
          gpu-autoscaler.dev/instance-size=standard-8-t4x1
          kubernetes.io/arch=amd64
          kubernetes.io/os=linux
          node.kubernetes.io/instance-type=n1-standard-8-t4x1
          nvidia.com/gpu.count=1
          nvidia.com/gpu.memory=16384
          nvidia.com/gpu.product=Tesla-T4
          nvidia.com/gpu.replicas=1
          nvidia.com/gpu.sharing-strategy=none
          nvidia.com/mig.capable=false
          nvidia.com/mps.capable=false
          topology.kubernetes.io/region=us-central1
          offerings: us-central1-a,us-central1-b,us-central1-c,us-central1-f x (on-demand $0.729998, spot $0.291999)
        a3-megagpu-8g
          capacity:    cpu=208 memory=1872Gi ephemeral-storage=100Gi pods=110 nvidia.com/gpu=8
          overhead:    cpu=590m memory=45361Mi ephemeral-storage=11Gi
          allocatable: cpu=207410m memory=1871567Mi ephemeral-storage=89Gi pods=110 nvidia.com/gpu=8
          cloud.google.com/gke-accelerator=nvidia-h100-mega-80gb
          gpu-autoscaler.dev/instance-family=a3
          gpu-autoscaler.dev/instance-gpu-count=8
          gpu-autoscaler.dev/instance-gpu-manufacturer=nvidia
          gpu-autoscaler.dev/instance-gpu-memory=81920
          gpu-autoscaler.dev/instance-gpu-name=h100
          gpu-autoscaler.dev/instance-size=megagpu-8g
          kubernetes.io/arch=amd64
          kubernetes.io/os=linux
          node.kubernetes.io/instance-type=a3-megagpu-8g
          nvidia.com/gpu.count=8
          nvidia.com/gpu.memory=81920
          nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
          nvidia.com/gpu.replicas=1
          nvidia.com/gpu.sharing-strategy=none
          nvidia.com/mig.capable=true
          nvidia.com/mps.capable=false
          topology.kubernetes.io/region=us-east4
          offerings: us-east4-a,us-east4-b,us-east4-c x (on-demand $92.937588, spot $37.175035)
    "#]]
    .assert_eq(&out);
}

#[test]
fn mig_geometry_resolves_for_every_mig_capable_type() {
    let balanced = GpuSharing {
        mig: Some(MigSharing {
            config: "all-balanced".into(),
            strategy: MigStrategy::Mixed,
        }),
        ..GpuSharing::default()
    };
    let mut out = String::new();
    for t in default_catalog() {
        let Some(g) = &t.gpu else { continue };
        match apply_sharing(&t, &balanced) {
            Ok(shared) => {
                let mig: Vec<String> = shared
                    .capacity
                    .extended
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                out += &format!("{}: {}\n", t.name, mig.join(" "));
            }
            Err(CoreError::InvalidGpuSharing { model, .. }) => assert_eq!(model, g.model),
            Err(e) => panic!("{}: {e}", t.name),
        }
    }
    expect![[r#"
        p4d.24xlarge: nvidia.com/mig-1g.5gb=16 nvidia.com/mig-2g.10gb=8 nvidia.com/mig-3g.20gb=8
        p4de.24xlarge: nvidia.com/mig-1g.10gb=16 nvidia.com/mig-2g.20gb=8 nvidia.com/mig-3g.40gb=8
        p5.4xlarge: nvidia.com/mig-1g.10gb=2 nvidia.com/mig-2g.20gb=1 nvidia.com/mig-3g.40gb=1
        p5.48xlarge: nvidia.com/mig-1g.10gb=16 nvidia.com/mig-2g.20gb=8 nvidia.com/mig-3g.40gb=8
        p5en.48xlarge: nvidia.com/mig-1g.18gb=16 nvidia.com/mig-2g.35gb=8 nvidia.com/mig-3g.71gb=8
        p6-b200.48xlarge: nvidia.com/mig-1g.23gb=16 nvidia.com/mig-2g.45gb=8 nvidia.com/mig-3g.90gb=8
        a2-highgpu-1g: nvidia.com/mig-1g.5gb=2 nvidia.com/mig-2g.10gb=1 nvidia.com/mig-3g.20gb=1
        a2-highgpu-2g: nvidia.com/mig-1g.5gb=4 nvidia.com/mig-2g.10gb=2 nvidia.com/mig-3g.20gb=2
        a2-highgpu-4g: nvidia.com/mig-1g.5gb=8 nvidia.com/mig-2g.10gb=4 nvidia.com/mig-3g.20gb=4
        a2-highgpu-8g: nvidia.com/mig-1g.5gb=16 nvidia.com/mig-2g.10gb=8 nvidia.com/mig-3g.20gb=8
        a2-megagpu-16g: nvidia.com/mig-1g.5gb=32 nvidia.com/mig-2g.10gb=16 nvidia.com/mig-3g.20gb=16
        a2-ultragpu-1g: nvidia.com/mig-1g.10gb=2 nvidia.com/mig-2g.20gb=1 nvidia.com/mig-3g.40gb=1
        a2-ultragpu-2g: nvidia.com/mig-1g.10gb=4 nvidia.com/mig-2g.20gb=2 nvidia.com/mig-3g.40gb=2
        a2-ultragpu-4g: nvidia.com/mig-1g.10gb=8 nvidia.com/mig-2g.20gb=4 nvidia.com/mig-3g.40gb=4
        a2-ultragpu-8g: nvidia.com/mig-1g.10gb=16 nvidia.com/mig-2g.20gb=8 nvidia.com/mig-3g.40gb=8
        a3-highgpu-1g: nvidia.com/mig-1g.10gb=2 nvidia.com/mig-2g.20gb=1 nvidia.com/mig-3g.40gb=1
        a3-highgpu-2g: nvidia.com/mig-1g.10gb=4 nvidia.com/mig-2g.20gb=2 nvidia.com/mig-3g.40gb=2
        a3-highgpu-4g: nvidia.com/mig-1g.10gb=8 nvidia.com/mig-2g.20gb=4 nvidia.com/mig-3g.40gb=4
        a3-highgpu-8g: nvidia.com/mig-1g.10gb=16 nvidia.com/mig-2g.20gb=8 nvidia.com/mig-3g.40gb=8
        a3-megagpu-8g: nvidia.com/mig-1g.10gb=16 nvidia.com/mig-2g.20gb=8 nvidia.com/mig-3g.40gb=8
        a3-ultragpu-8g: nvidia.com/mig-1g.18gb=16 nvidia.com/mig-2g.35gb=8 nvidia.com/mig-3g.71gb=8
    "#]]
    .assert_eq(&out);
}

fn err(yaml: &str) -> String {
    Catalog::parse(yaml).unwrap_err().to_string()
}

const HEAD: &str = "gpus:\n  T4: {vendor: nvidia, name: t4, memory_mib: 16384, product: Tesla-T4}\n\
                    providers:\n  aws:\n    region: r\n    zones: [z]\n    spot_factor: 0.5\n    \
                    overhead: eks\n    root_volume_gib: 20\n    types:\n";

#[test]
fn bad_catalogs_name_the_entry_and_field() {
    let good = format!(
        "{HEAD}      - {{name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1}}\n"
    );
    assert_eq!(Catalog::parse(&good).unwrap().len(), 1);
    let cases = [
        "      - {name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: -1}\n",
        "      - {name: a.b, vcpu: 0, memory_mib: 1024, max_pods: 10, on_demand: 1}\n",
        "      - {name: a.b, vcpu: 2, memory_mib: 1024, on_demand: 1}\n",
        "      - {name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1, gpu: {model: H9, count: 1}}\n",
        "      - {name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1, gpu: {model: T4, count: 0}}\n",
        "      - {name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1, arch: s390x}\n",
        "      - {name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1}\n      - {name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1}\n",
        "      - {name: a.b, vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1, cores: 3}\n",
        "      - {name: 'a b', vcpu: 2, memory_mib: 1024, max_pods: 10, on_demand: 1}\n",
        "      - {name: a.b, vcpu: two, memory_mib: 1024, max_pods: 10, on_demand: 1}\n",
    ];
    let out: String = cases
        .iter()
        .map(|c| format!("{}\n", err(&format!("{HEAD}{c}"))))
        .collect();
    expect![[r#"
        catalog entry "a.b", field on_demand: price must be a positive number of USD per hour, got -1
        catalog entry "a.b", field vcpu: must be positive
        catalog entry "a.b", field max_pods: missing, and provider aws has no default
        catalog entry "a.b", field gpu.model: unknown GPU model "H9" (not under gpus:)
        catalog entry "a.b", field gpu.count: must be positive
        catalog entry "a.b", field arch: "s390x" is neither amd64 nor arm64
        catalog entry "a.b", field name: listed twice
        catalog does not parse: providers.aws.types[0]: unknown field `cores`, expected one of `name`, `vcpu`, `memory_mib`, `arch`, `max_pods`, `on_demand`, `spot`, `gpu`, `gke_accelerator`, `region`, `zones` at line 11 column 76
        catalog entry "a b", field name: "a b" is not a valid Kubernetes label value
        catalog does not parse: providers.aws.types[0].vcpu: invalid type: string "two", expected u32 at line 11 column 27
    "#]]
    .assert_eq(&out);
    assert!(err("not: [a catalog").starts_with("catalog does not parse"));
}

#[test]
fn a_user_catalog_larger_than_the_bound_is_refused() {
    let path = std::env::temp_dir().join(format!("catalog-bound-{}.json", std::process::id()));
    // Sparse: no disk space used; at most one byte past the bound is read.
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(MAX_FILE_BYTES + 1))
        .unwrap();
    let err = read_user_catalog(&path).expect_err("too large");
    std::fs::remove_file(&path).unwrap();
    assert!(
        err.to_string().ends_with(&format!(
            "larger than {} MiB, the most a catalog may be",
            MAX_FILE_BYTES >> 20
        )),
        "{err}"
    );
}
