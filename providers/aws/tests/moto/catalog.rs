//! Catalog building from moto's DescribeInstanceTypes / DescribeInstanceTypeOfferings /
//! DescribeSpotPriceHistory, the cache and its TTL, and node-class narrowing.

use std::sync::Arc;

use autoscaler_core::{CapacityType, labels};
use provider_aws::{AwsProvider, FakeClock};
use providers::{CloudProvider, NodeClassRef};

use crate::harness::Moto;

#[tokio::test]
async fn catalog_has_gpu_types_zones_and_prices() {
    let Some(moto) = Moto::start("catalog_has_gpu_types_zones_and_prices") else {
        return;
    };
    let clock = FakeClock::new(1_000_000);
    // Every type moto knows, as in production (no `instance_types` filter).
    let mut s = moto.settings(&moto.url, "c1");
    s.instance_types.clear();
    let p = AwsProvider::connect_with_clock(s, Arc::new(clock.clone()))
        .await
        .unwrap();
    let types = p.catalog(None).await.unwrap();
    assert!(types.len() > 300, "only {} types", types.len());
    let get = |n: &str| {
        types
            .iter()
            .find(|t| t.name == n)
            .unwrap_or_else(|| panic!("{n} missing"))
    };

    let g5 = get("g5.xlarge");
    assert_eq!(g5.capacity.get("nvidia.com/gpu"), 1);
    assert_eq!(g5.capacity.pods, 58);
    let gpu = g5.gpu.as_ref().unwrap();
    assert_eq!(
        (gpu.model.as_str(), gpu.count, gpu.memory_mib),
        ("A10G", 1, 22888)
    );
    assert_eq!(g5.labels[labels::NVIDIA_PRODUCT], "NVIDIA-A10G");
    assert_eq!(g5.labels[labels::GPU_NAME], "a10g");
    assert_eq!(g5.labels[labels::GPU_MEMORY], "22888");
    assert_eq!(g5.labels[labels::REGION], "us-east-1");
    let zones: std::collections::BTreeSet<&str> =
        g5.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert!(
        zones.len() >= 3 && zones.iter().all(|z| z.starts_with("us-east-1")),
        "{zones:?}"
    );
    // Zone IDs from DescribeAvailabilityZones: one per zone, on every offering there.
    let ids: std::collections::BTreeMap<&str, Option<&str>> = g5
        .offerings
        .iter()
        .map(|o| (o.zone.as_str(), o.zone_id.as_deref()))
        .collect();
    assert!(
        ids.values()
            .all(|id| id.is_some_and(|i| i.starts_with("use1-az"))),
        "{ids:?}"
    );
    let od = g5
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .unwrap();
    assert_eq!(od.price, 1.006, "on-demand from the embedded table");
    let spot = g5
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::Spot)
        .unwrap();
    assert_eq!(spot.price, 0.00001, "moto's stub spot price");

    let p4d = get("p4d.24xlarge");
    assert_eq!(p4d.capacity.get("nvidia.com/gpu"), 8);
    assert_eq!(p4d.gpu.as_ref().unwrap().model, "A100-40GB");
    assert_eq!(p4d.labels[labels::NVIDIA_PRODUCT], "NVIDIA-A100-SXM4-40GB");
    assert_eq!(p4d.capacity.pods, 737);

    let inf2 = get("inf2.xlarge");
    assert_eq!(inf2.capacity.get("aws.amazon.com/neuron"), 1);

    // Every accelerator type offers its devices under the vendor's resource, and its labels
    // agree. (moto 5.2.5 dropped the AMD g4ad and Habana dl1 types AWS retired; their mapping
    // is unit-tested.)
    let expected = |vendor: &str| match vendor {
        "nvidia" => "nvidia.com/gpu",
        "amd" => "amd.com/gpu",
        "habana" => "habana.ai/gaudi",
        "aws" => "aws.amazon.com/neuron",
        other => panic!("unexpected accelerator vendor {other}"),
    };
    let mut vendors = std::collections::BTreeSet::new();
    for t in types.iter().filter(|t| t.gpu.is_some()) {
        let g = t.gpu.as_ref().unwrap();
        vendors.insert(g.vendor.as_str());
        assert_eq!(g.resource, expected(&g.vendor), "{}", t.name);
        assert_eq!(
            t.capacity.get(&g.resource),
            i64::from(g.count),
            "{}",
            t.name
        );
        assert_eq!(
            t.labels[labels::GPU_COUNT],
            g.count.to_string(),
            "{}",
            t.name
        );
        assert_eq!(
            t.labels[labels::GPU_MEMORY],
            g.memory_mib.to_string(),
            "{}",
            t.name
        );
    }
    assert!(
        vendors.contains("nvidia") && vendors.contains("aws"),
        "{vendors:?}"
    );
    // Types without a list price in the embedded table are offered as spot only.
    assert!(types.iter().any(|t| {
        !t.offerings.is_empty()
            && t.offerings
                .iter()
                .all(|o| o.capacity_type == CapacityType::Spot)
    }));

    let m5 = get("m5.large");
    assert!(m5.gpu.is_none());
    assert_eq!(m5.capacity.pods, 29);
    assert!(m5.allocatable().memory > 6 << 30);

    // Cached: no API call until the TTL passes.
    let before = p.stats().snapshot().0;
    p.catalog(None).await.unwrap();
    assert_eq!(p.stats().snapshot().0, before);
    clock.advance(p.settings().catalog_ttl_s - 1);
    p.catalog(None).await.unwrap();
    assert_eq!(p.stats().snapshot().0, before);
}

#[tokio::test]
async fn catalog_cache_expires_and_types_can_be_narrowed() {
    let Some(moto) = Moto::start("catalog_cache_expires_and_types_can_be_narrowed") else {
        return;
    };
    let clock = FakeClock::new(5_000);
    let mut s = moto.settings(&moto.url, "c1");
    s.instance_types = vec!["g5.*".into(), "p4d.24xlarge".into()];
    s.on_demand_prices.insert("g5.xlarge".into(), 0.9);
    s.catalog_ttl_s = 60;
    let p = AwsProvider::connect_with_clock(s, Arc::new(clock.clone()))
        .await
        .unwrap();
    let types = p.catalog(None).await.unwrap();
    assert!(
        types
            .iter()
            .all(|t| t.name.starts_with("g5.") || t.name == "p4d.24xlarge")
    );
    assert!(types.iter().any(|t| t.name == "p4d.24xlarge"));
    let g5 = types.iter().find(|t| t.name == "g5.xlarge").unwrap();
    assert!(
        g5.offerings
            .iter()
            .any(|o| o.capacity_type == CapacityType::OnDemand && o.price == 0.9)
    );
    let before = p.stats().snapshot().0;
    clock.advance(59);
    p.catalog(None).await.unwrap();
    assert_eq!(p.stats().snapshot().0, before);
    clock.advance(1);
    p.catalog(None).await.unwrap();
    assert_eq!(
        p.stats().snapshot().0,
        before + 4,
        "types, offerings, zone IDs, spot prices"
    );
    p.invalidate().await;
    p.catalog(None).await.unwrap();
    assert_eq!(p.stats().snapshot().0, before + 8);
}

#[tokio::test]
async fn node_class_narrows_zones_architectures_and_disk() {
    let Some(moto) = Moto::start("node_class_narrows_zones_architectures_and_disk") else {
        return;
    };
    let mut class = moto.node_class("c2", &["us-east-1a", "us-east-1b"]).await;
    class.root_volume_gib = 100;
    let mut s = moto.settings(&moto.url, "c2");
    s.node_classes.insert("gpu".into(), class);
    let p = AwsProvider::connect(s).await.unwrap();
    let r = p.resolve_class("gpu").await.unwrap();
    assert_eq!(
        r.subnets.keys().map(String::as_str).collect::<Vec<_>>(),
        ["us-east-1a", "us-east-1b"]
    );
    assert_eq!(
        r.amis.keys().map(String::as_str).collect::<Vec<_>>(),
        ["amd64"]
    );
    assert_eq!(r.security_groups.len(), 1);

    let types = p
        .instance_types(&NodeClassRef {
            group: "aws.gpu-autoscaler.dev".into(),
            kind: "EC2NodeClass".into(),
            name: "gpu".into(),
        })
        .await
        .unwrap();
    assert!(
        types.iter().all(|t| t.arch == "amd64"),
        "only architectures with an AMI"
    );
    assert!(types.iter().all(|t| {
        t.offerings
            .iter()
            .all(|o| o.zone == "us-east-1a" || o.zone == "us-east-1b")
    }));
    let g5 = types.iter().find(|t| t.name == "g5.xlarge").unwrap();
    assert_eq!(g5.capacity.ephemeral_storage, 100 << 30);

    // The same resources selected by id resolve alike.
    let by_id = provider_aws::config::NodeClass {
        ami: provider_aws::config::Selector::ids(r.amis.values().cloned()),
        subnets: provider_aws::config::Selector::ids(r.subnets.values().cloned()),
        security_groups: provider_aws::config::Selector::ids(r.security_groups.clone()),
        ..provider_aws::config::NodeClass::default()
    };
    let mut s = moto.settings(&moto.url, "c2");
    s.node_classes.insert("by-id".into(), by_id);
    let p2 = AwsProvider::connect(s).await.unwrap();
    let r2 = p2.resolve_class("by-id").await.unwrap();
    assert_eq!(
        (&r2.amis, &r2.subnets, &r2.security_groups),
        (&r.amis, &r.subnets, &r.security_groups)
    );

    // An unknown class name with no `default` class: the region-wide catalog.
    let all = p.catalog(Some("other")).await.unwrap();
    assert!(all.iter().any(|t| t.arch == "arm64"));
}
