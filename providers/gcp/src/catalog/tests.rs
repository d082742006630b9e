//! Tests of the catalog conversion: API entries to facts, N1 attach rules, prices, labels.

use std::collections::BTreeMap;

use autoscaler_core::CapacityType::{OnDemand, Spot};
use autoscaler_core::labels;

use super::*;

fn machine(
    name: &str,
    zone: &str,
    vcpu: u32,
    memory_mib: u64,
    accel: Option<(&str, u32)>,
) -> MachineFacts {
    MachineFacts {
        name: name.into(),
        zone: zone.into(),
        vcpu,
        memory_mib,
        arch: "amd64".into(),
        accelerator: accel.map(|(a, n)| (a.to_string(), n)),
    }
}

fn accel(name: &str, zone: &str, max_cards: u32) -> AcceleratorFacts {
    AcceleratorFacts {
        name: name.into(),
        zone: zone.into(),
        max_cards,
    }
}

fn opts() -> BuildOptions {
    BuildOptions {
        region: "us-central1".into(),
        boot_disk_gib: 100,
        max_pods: 110,
        spot: true,
    }
}

fn embedded() -> Embedded {
    Embedded::load(&BTreeMap::new(), &BTreeMap::new())
}

#[test]
fn api_entries_become_facts() {
    let m: model::MachineType = serde_json::from_value(serde_json::json!({
        "name": "a2-highgpu-1g", "guestCpus": 12, "memoryMb": 87040, "zone": "us-central1-a",
        "isSharedCpu": false, "architecture": "X86_64", "id": "123",
        "accelerators": [{"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}]
    }))
    .unwrap();
    let f = MachineFacts::from_api(&m, "ignored").unwrap();
    assert_eq!(
        f,
        machine(
            "a2-highgpu-1g",
            "us-central1-a",
            12,
            87040,
            Some(("nvidia-tesla-a100", 1))
        )
    );
    let arm: model::MachineType = serde_json::from_value(serde_json::json!({
        "name": "c4a-standard-8", "guestCpus": 8, "memoryMb": 32768, "architecture": "ARM64"
    }))
    .unwrap();
    let f = MachineFacts::from_api(&arm, "us-central1-b").unwrap();
    assert_eq!(
        (f.arch.as_str(), f.zone.as_str()),
        ("arm64", "us-central1-b")
    );
    let shared: model::MachineType = serde_json::from_value(serde_json::json!({
        "name": "e2-micro", "guestCpus": 2, "memoryMb": 1024, "isSharedCpu": true
    }))
    .unwrap();
    assert!(MachineFacts::from_api(&shared, "z").is_none());
    let old: model::MachineType = serde_json::from_value(serde_json::json!({
        "name": "n1-old", "guestCpus": 2, "memoryMb": 1024, "deprecated": {"state": "DEPRECATED"}
    }))
    .unwrap();
    assert!(MachineFacts::from_api(&old, "z").is_none());
    let a: model::AcceleratorType = serde_json::from_value(serde_json::json!({
        "name": "nvidia-tesla-t4", "maximumCardsPerInstance": 4,
        "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-f"
    }))
    .unwrap();
    assert_eq!(
        AcceleratorFacts::from_api(&a, "x"),
        Some(accel("nvidia-tesla-t4", "us-central1-f", 4))
    );
}

#[test]
fn attached_names_round_trip() {
    let t4 = &n1_rules()[0];
    assert_eq!(attached_name("n1-standard-8", t4, 1), "n1-standard-8-t4x1");
    let (m, a, n) = split_attached("n1-highmem-16-v100x2").unwrap();
    assert_eq!(
        (m, a.accelerator, n),
        ("n1-highmem-16", "nvidia-tesla-v100", 2)
    );
    assert!(
        split_attached("n1-standard-8-t4x3").is_none(),
        "3 is not an allowed count"
    );
    assert!(split_attached("g2-standard-8").is_none());
    assert!(
        split_attached("n2-standard-8-t4x1").is_none(),
        "only N1 takes attached GPUs"
    );
    assert!(split_attached("n1-standard-8-l4x1").is_none());
}

/// Every N1 + GPU type of the embedded catalog is priced the same by the component formula, so
/// the combinations the table does not list are priced on the same basis.
#[test]
fn component_prices_reproduce_the_embedded_table() {
    let e = embedded();
    assert_eq!(e.spot_factor, 0.4);
    let mut checked = 0;
    for t in providers::catalog::default_catalog_for(providers::catalog::GCP) {
        let Some((machine_name, _, _)) = split_attached(&t.name) else {
            continue;
        };
        let m = machine(
            machine_name,
            "z",
            u32::try_from(t.capacity.get("cpu") / 1000).unwrap(),
            u64::try_from(t.capacity.get("memory") >> 20).unwrap(),
            None,
        );
        let mut bare = e.clone();
        bare.on_demand.remove(&t.name);
        bare.spot.remove(&t.name);
        let (od, spot) = bare.prices(&t.name, Some(&m));
        let table = e.on_demand[&t.name];
        assert!(
            (od.unwrap() - table).abs() < 1e-5,
            "{}: {od:?} vs {table}",
            t.name
        );
        assert!((spot.unwrap() - e.spot[&t.name]).abs() < 1e-5, "{}", t.name);
        checked += 1;
    }
    assert_eq!(checked, 8);
    // Overrides win over the table.
    let o = Embedded::load(
        &BTreeMap::from([("g2-standard-4".to_string(), 0.5)]),
        &BTreeMap::from([("g2-standard-4".to_string(), 0.2)]),
    );
    assert_eq!(o.prices("g2-standard-4", None), (Some(0.5), Some(0.2)));
    // Without a table entry or an N1 formula there is no price.
    assert_eq!(e.prices("a4-highgpu-8g", None), (None, None));
}

#[test]
fn n1_combinations_follow_the_allowed_counts_and_zones() {
    let machines = vec![
        machine("n1-standard-4", "us-central1-a", 4, 15360, None),
        machine("n1-standard-4", "us-central1-b", 4, 15360, None),
        machine("n1-standard-96", "us-central1-a", 96, 368640, None),
    ];
    let accels = vec![
        accel("nvidia-tesla-t4", "us-central1-a", 4),
        accel("nvidia-tesla-t4", "us-central1-b", 2),
        accel("nvidia-tesla-v100", "us-central1-b", 8),
    ];
    let built = build(&machines, &accels, &embedded(), &opts());
    let names: Vec<&str> = built.types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "n1-standard-4",
            "n1-standard-4-t4x1",
            "n1-standard-4-t4x2",
            "n1-standard-4-t4x4",
            "n1-standard-4-v100x1",
            "n1-standard-4-v100x2",
            "n1-standard-4-v100x4",
            "n1-standard-4-v100x8",
            "n1-standard-96",
            "n1-standard-96-t4x4",
        ]
    );
    let zones = |name: &str| -> Vec<String> {
        let t = built.types.iter().find(|t| t.name == name).unwrap();
        let mut z: Vec<String> = t.offerings.iter().map(|o| o.zone.clone()).collect();
        z.dedup();
        z
    };
    assert_eq!(
        zones("n1-standard-4-t4x2"),
        ["us-central1-a", "us-central1-b"]
    );
    assert_eq!(
        zones("n1-standard-4-t4x4"),
        ["us-central1-a"],
        "zone b allows 2 cards"
    );
    // n1-standard-96 is listed in zone a only and V100 in zone b only: no combination.
    assert_eq!(zones("n1-standard-4-v100x1"), ["us-central1-b"]);
}

#[test]
fn gpu_types_carry_capacity_overhead_and_labels() {
    let machines = vec![machine(
        "g2-standard-8",
        "us-central1-c",
        8,
        32768,
        Some(("nvidia-l4", 1)),
    )];
    let built = build(
        &machines,
        &[],
        &embedded(),
        &BuildOptions {
            spot: false,
            ..opts()
        },
    );
    let t = &built.types[0];
    assert_eq!(t.capacity.get("nvidia.com/gpu"), 1);
    assert_eq!(t.capacity.get("cpu"), 8000);
    assert_eq!(t.capacity.get("memory"), 32 << 30);
    assert_eq!(t.capacity.get("ephemeral-storage"), 100 << 30);
    assert_eq!(t.overhead.get("cpu"), overhead::cpu_millis(8));
    assert_eq!(
        t.overhead.get("memory"),
        overhead::gke_memory(32 << 30) + overhead::EVICTION_MEMORY
    );
    // The same labels the embedded catalog gives the type.
    let embedded_type = providers::catalog::default().get("g2-standard-8").unwrap();
    assert_eq!(t.labels, embedded_type.labels);
    assert_eq!(t.gpu, embedded_type.gpu);
    assert_eq!(t.labels[labels::GKE_ACCELERATOR], "nvidia-l4");
    assert!(
        t.offerings.iter().all(|o| o.capacity_type == OnDemand),
        "spot off"
    );
    assert_eq!(t.offerings[0].price, 0.853624);

    // An accelerator this crate does not know is left out rather than guessed.
    let machines = vec![machine(
        "x4-megagpu-8g",
        "us-central1-c",
        8,
        32768,
        Some(("nvidia-future", 8)),
    )];
    let e = Embedded::load(
        &BTreeMap::from([("x4-megagpu-8g".to_string(), 9.0)]),
        &BTreeMap::new(),
    );
    let built = build(&machines, &[], &e, &opts());
    assert!(built.types.is_empty());
    assert_eq!(built.unknown_accelerators, ["x4-megagpu-8g"]);
    // Spot from the table where published.
    let machines = vec![machine(
        "g2-standard-8",
        "us-central1-c",
        8,
        32768,
        Some(("nvidia-l4", 1)),
    )];
    let built = build(&machines, &[], &embedded(), &opts());
    let spot = built.types[0]
        .offerings
        .iter()
        .find(|o| o.capacity_type == Spot)
        .unwrap();
    assert_eq!(spot.price, 0.479872);
}
