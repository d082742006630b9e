//! Unit tests of the catalog conversion, on EC2 descriptions built with the SDK's builders.

use aws_sdk_ec2::types::{
    GpuDeviceInfo, GpuDeviceMemoryInfo, GpuInfo, InferenceAcceleratorInfo, InferenceDeviceInfo,
    InferenceDeviceMemoryInfo, MemoryInfo, NetworkCardInfo, NetworkInfo, NeuronDeviceInfo,
    NeuronDeviceMemoryInfo, NeuronInfo, ProcessorInfo, VCpuInfo,
};

use super::*;

fn base(
    name: &str,
    arch: ArchitectureType,
    vcpu: i32,
    mib: i64,
) -> aws_sdk_ec2::types::builders::InstanceTypeInfoBuilder {
    InstanceTypeInfo::builder()
        .instance_type(name.into())
        .processor_info(
            ProcessorInfo::builder()
                .supported_architectures(arch)
                .build(),
        )
        .v_cpu_info(VCpuInfo::builder().default_v_cpus(vcpu).build())
        .memory_info(MemoryInfo::builder().size_in_mib(mib).build())
        .supported_usage_classes(UsageClassType::OnDemand)
        .supported_usage_classes(UsageClassType::Spot)
}

fn network(enis: i32, ips: i32) -> NetworkInfo {
    NetworkInfo::builder()
        .maximum_network_interfaces(enis * 4)
        .default_network_card_index(0)
        .network_cards(
            NetworkCardInfo::builder()
                .network_card_index(0)
                .maximum_network_interfaces(enis)
                .build(),
        )
        .ipv4_addresses_per_interface(ips)
        .build()
}

fn gpu(manufacturer: &str, name: &str, count: i32, mib: i32) -> GpuInfo {
    GpuInfo::builder()
        .gpus(
            GpuDeviceInfo::builder()
                .manufacturer(manufacturer)
                .name(name)
                .count(count)
                .memory_info(GpuDeviceMemoryInfo::builder().size_in_mib(mib).build())
                .build(),
        )
        .build()
}

fn g5_xlarge() -> InstanceTypeInfo {
    base("g5.xlarge", ArchitectureType::X8664, 4, 16384)
        .network_info(network(4, 15))
        .gpu_info(gpu("NVIDIA", "A10G", 1, 22888))
        .build()
}

fn opts() -> BuildOptions {
    BuildOptions {
        region: "us-east-1".into(),
        root_volume_gib: 20,
        vm_memory_overhead_percent: 7.5,
        max_pods: None,
        zones: None,
    }
}

fn market(types: &[&str], zones: &[&str], spot: &[(&str, &str, f64)]) -> Market {
    Market {
        zones: types
            .iter()
            .map(|t| (t.to_string(), zones.iter().map(|z| z.to_string()).collect()))
            .collect(),
        zone_ids: zones
            .iter()
            .enumerate()
            .map(|(i, z)| (z.to_string(), format!("use1-az{}", i + 1)))
            .collect(),
        spot: spot
            .iter()
            .map(|(t, z, p)| ((t.to_string(), z.to_string()), *p))
            .collect(),
    }
}

#[test]
fn facts_of_a_gpu_type() {
    let f = TypeFacts::from_sdk(&g5_xlarge()).unwrap();
    assert_eq!(
        f,
        TypeFacts {
            name: "g5.xlarge".into(),
            arch: "amd64".into(),
            vcpu: 4,
            memory_mib: 16384,
            // 4 ENIs on the default card x (15 - 1) + 2, the embedded catalog's value.
            eni_max_pods: Some(58),
            accelerator: Some(AcceleratorFacts {
                manufacturer: "NVIDIA".into(),
                name: "A10G".into(),
                count: 1,
                memory_mib: 22888,
            }),
            on_demand: true,
            spot: true,
        }
    );
}

#[test]
fn mac_and_incomplete_types_are_skipped() {
    let mac = base("mac2.metal", ArchitectureType::Arm64Mac, 12, 16384).build();
    assert_eq!(TypeFacts::from_sdk(&mac), None);
    let no_memory = InstanceTypeInfo::builder()
        .instance_type("m5.large".into())
        .processor_info(
            ProcessorInfo::builder()
                .supported_architectures(ArchitectureType::X8664)
                .build(),
        )
        .v_cpu_info(VCpuInfo::builder().default_v_cpus(2).build())
        .build();
    assert_eq!(TypeFacts::from_sdk(&no_memory), None);
}

#[test]
fn g5_matches_the_embedded_catalog_but_for_vm_overhead() {
    let embedded = Embedded::load(&BTreeMap::new());
    let f = TypeFacts::from_sdk(&g5_xlarge()).unwrap();
    let m = market(
        &["g5.xlarge"],
        &["us-east-1a", "us-east-1b"],
        &[("g5.xlarge", "us-east-1a", 0.45)],
    );
    let t = f.to_instance_type(&m, &embedded, &opts()).unwrap();
    let reference = providers::catalog::default().get("g5.xlarge").unwrap();
    assert_eq!(t.labels, reference.labels);
    assert_eq!(t.gpu, reference.gpu);
    assert_eq!(t.overhead, reference.overhead);
    assert_eq!(t.capacity.get("nvidia.com/gpu"), 1);
    assert_eq!(t.capacity.pods, 58);
    assert_eq!(t.capacity.cpu, 4000);
    // 16 GiB less 7.5 %, whole MiB.
    assert_eq!(t.capacity.memory, 15155 * MIB);
    assert_eq!(t.capacity.ephemeral_storage, 20 * GIB);
    let offers: Vec<(String, CapacityType, f64)> = t
        .offerings
        .iter()
        .map(|o| (o.zone.clone(), o.capacity_type, o.price))
        .collect();
    assert_eq!(
        offers,
        [
            ("us-east-1a".to_string(), CapacityType::Spot, 0.45),
            ("us-east-1a".to_string(), CapacityType::OnDemand, 1.006),
            ("us-east-1b".to_string(), CapacityType::OnDemand, 1.006),
        ]
    );
    // Each offering carries its zone's ID, from DescribeAvailabilityZones.
    let ids: Vec<Option<&str>> = t.offerings.iter().map(|o| o.zone_id.as_deref()).collect();
    assert_eq!(ids, [Some("use1-az1"), Some("use1-az1"), Some("use1-az2")]);
    // A class's zones and disk narrow and reshape the same facts.
    let mut o = opts();
    o.zones = Some(["us-east-1b".to_string()].into());
    o.root_volume_gib = 100;
    o.max_pods = Some(110);
    let t = f.to_instance_type(&m, &embedded, &o).unwrap();
    assert_eq!(t.offerings.len(), 1);
    assert_eq!(t.capacity.ephemeral_storage, 100 * GIB);
    assert_eq!(t.capacity.pods, 110);
    assert_eq!(
        t.overhead.get("memory"),
        overhead::eks_memory(110) + overhead::EVICTION_MEMORY
    );
}

#[test]
fn amd_habana_and_neuron_devices() {
    let embedded = Embedded::load(&BTreeMap::new());
    let m = market(
        &["g4ad.xlarge", "dl1.24xlarge", "inf2.xlarge", "inf1.xlarge"],
        &["z"],
        &[("dl1.24xlarge", "z", 4.0)],
    );
    let g4ad = base("g4ad.xlarge", ArchitectureType::X8664, 4, 16384)
        .gpu_info(gpu("AMD", "Radeon Pro V520", 1, 8192))
        .build();
    let t = TypeFacts::from_sdk(&g4ad)
        .unwrap()
        .to_instance_type(&m, &embedded, &opts())
        .unwrap();
    assert_eq!(t.capacity.get("amd.com/gpu"), 1);
    assert_eq!(t.gpu.as_ref().unwrap().model, "Radeon-Pro-V520");
    assert_eq!(t.labels[labels::GPU_NAME], "radeon-pro-v520");
    assert_eq!(t.labels[labels::GPU_MANUFACTURER], "amd");
    assert!(!t.labels.contains_key(labels::NVIDIA_PRODUCT));

    let dl1 = base("dl1.24xlarge", ArchitectureType::X8664, 96, 786432)
        .gpu_info(gpu("Habana", "Gaudi HL-205", 8, 32768))
        .build();
    let t = TypeFacts::from_sdk(&dl1)
        .unwrap()
        .to_instance_type(&m, &embedded, &opts())
        .unwrap();
    assert_eq!(t.capacity.get(HABANA_GAUDI), 8);
    assert_eq!(t.gpu.as_ref().unwrap().model, "Gaudi-HL-205");
    assert_eq!(t.labels[labels::GPU_NAME], "gaudi-hl-205");
    // No list price in the table: only the spot offering is priced.
    assert_eq!(t.offerings.len(), 1);
    assert_eq!(t.offerings[0].capacity_type, CapacityType::Spot);

    let inf2 = base("inf2.xlarge", ArchitectureType::X8664, 4, 16384)
        .neuron_info(
            NeuronInfo::builder()
                .neuron_devices(
                    NeuronDeviceInfo::builder()
                        .name("Inferentia2")
                        .count(1)
                        .memory_info(NeuronDeviceMemoryInfo::builder().size_in_mib(32768).build())
                        .build(),
                )
                .build(),
        )
        .build();
    let t = TypeFacts::from_sdk(&inf2)
        .unwrap()
        .to_instance_type(&m, &embedded, &opts())
        .unwrap();
    assert_eq!(t.capacity.get(AWS_NEURON), 1);
    assert_eq!(
        t.gpu,
        providers::catalog::default()
            .get("inf2.xlarge")
            .unwrap()
            .gpu
    );

    let inf1 = base("inf1.xlarge", ArchitectureType::X8664, 4, 8192)
        .inference_accelerator_info(
            InferenceAcceleratorInfo::builder()
                .accelerators(
                    InferenceDeviceInfo::builder()
                        .manufacturer("AWS")
                        .name("Inferentia")
                        .count(1)
                        .memory_info(
                            InferenceDeviceMemoryInfo::builder()
                                .size_in_mib(8192)
                                .build(),
                        )
                        .build(),
                )
                .build(),
        )
        .build();
    let f = TypeFacts::from_sdk(&inf1).unwrap();
    assert_eq!(f.accelerator.as_ref().unwrap().name, "Inferentia");
    // Neither a list price nor a spot price: the planner could not weigh it.
    assert_eq!(f.to_instance_type(&m, &embedded, &opts()), None);
    let priced = Embedded::load(&BTreeMap::from([("inf1.xlarge".to_string(), 0.228)]));
    let t = f.to_instance_type(&m, &priced, &opts()).unwrap();
    assert_eq!(t.capacity.get(AWS_NEURON), 1);
    assert_eq!(t.offerings[0].price, 0.228);
}

#[test]
fn spot_only_where_supported_and_build_sorts() {
    let embedded = Embedded::load(&BTreeMap::new());
    let od_only = base("m5.large", ArchitectureType::X8664, 2, 8192)
        .set_supported_usage_classes(Some(vec![UsageClassType::OnDemand]))
        .network_info(network(3, 10))
        .build();
    let f = TypeFacts::from_sdk(&od_only).unwrap();
    assert!(!f.spot);
    let m = market(
        &["m5.large", "g5.xlarge"],
        &["z"],
        &[("m5.large", "z", 0.03)],
    );
    let all = build(
        &[f, TypeFacts::from_sdk(&g5_xlarge()).unwrap()],
        &m,
        &embedded,
        &opts(),
    );
    let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["g5.xlarge", "m5.large"]);
    assert!(
        all[1]
            .offerings
            .iter()
            .all(|o| o.capacity_type == CapacityType::OnDemand)
    );
    assert_eq!(all[1].capacity.pods, 29);
}

#[test]
fn label_safe_names() {
    assert_eq!(label_safe("Radeon Pro V520"), "radeon-pro-v520");
    assert_eq!(label_safe("  A10G "), "a10g");
    assert_eq!(label_safe("Gaudi HL-205"), "gaudi-hl-205");
    assert_eq!(label_safe(&"x".repeat(100)).len(), 63);
}
