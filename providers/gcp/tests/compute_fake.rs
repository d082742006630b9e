//! The GCP provider through the official Compute client against the local fake Compute REST
//! API: catalog building, launch with zone fallback, idempotent retry, delete, get and listing
//! for garbage collection, retries and throttling.

use std::collections::BTreeMap;

use autoscaler_core::CapacityType::{OnDemand, Spot};
use autoscaler_core::{Effect, Taint, labels};
use fake_compute::{FakeCompute, settings_for};
use provider_gcp::{GcpProvider, GcpSettings};
use providers::{
    CloudProvider, InstanceState, LaunchRequest, NodeClassRef, OfferingKey, ProviderError,
};
use serde_json::Value;

const PROJECT: &str = "fake-project";

async fn start() -> (FakeCompute, GcpProvider) {
    start_with(FakeCompute::new(PROJECT), |_| {}).await
}

async fn start_with(
    fake: FakeCompute,
    tweak: impl FnOnce(&mut GcpSettings),
) -> (FakeCompute, GcpProvider) {
    let addr = fake.serve().await.expect("bind");
    let mut s = settings_for(addr, PROJECT, "test-cluster");
    tweak(&mut s);
    let p = GcpProvider::connect(s).await.expect("connect");
    (fake, p)
}

fn class() -> NodeClassRef {
    NodeClassRef {
        group: "gcp.gpu-autoscaler.dev".into(),
        kind: "GceNodeClass".into(),
        name: "default".into(),
    }
}

fn request(
    claim: &str,
    candidates: &[(&str, &str, autoscaler_core::CapacityType)],
) -> LaunchRequest {
    LaunchRequest {
        claim: claim.into(),
        pool: "gpu.pool".into(),
        class: class(),
        candidates: candidates
            .iter()
            .map(|(t, z, c)| OfferingKey::new(*t, *z, *c))
            .collect(),
        labels: BTreeMap::from([("team".to_string(), "ml".to_string())]),
        taints: vec![Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule)],
        startup_taints: vec![Taint::new(
            "gpu-autoscaler.dev/unready",
            "",
            Effect::NoSchedule,
        )],
        placement_group: None,
        gpu_sharing: Default::default(),
    }
}

fn metadata(inst: &Value, key: &str) -> String {
    inst["metadata"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["key"] == key)
        .and_then(|i| i["value"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn catalog_has_builtin_and_attached_gpu_types_with_prices_and_labels() {
    let (fake, p) = start().await;
    let types = p.instance_types(&class()).await.unwrap();
    let by: BTreeMap<&str, _> = types.iter().map(|t| (t.name.as_str(), t)).collect();

    // N1 + T4 from the embedded table, priced exactly as it lists.
    let t4 = by["n1-standard-8-t4x1"];
    let g = t4.gpu.as_ref().unwrap();
    assert_eq!((g.model.as_str(), g.count, g.memory_mib), ("T4", 1, 16384));
    assert_eq!(t4.capacity.get("nvidia.com/gpu"), 1);
    assert_eq!(t4.labels[labels::GKE_ACCELERATOR], "nvidia-tesla-t4");
    assert_eq!(t4.labels[labels::NVIDIA_PRODUCT], "Tesla-T4");
    assert_eq!(t4.labels[labels::GPU_NAME], "t4");
    let od = t4
        .offerings
        .iter()
        .find(|o| o.capacity_type == OnDemand)
        .unwrap();
    assert_eq!(od.price, 0.729998);
    assert_eq!(t4.offerings.len(), 8, "4 zones x spot/on-demand");

    // N1 + P4 is not in the table: machine + GPU component prices.
    let p4 = by["n1-standard-8-p4x1"];
    let od = p4
        .offerings
        .iter()
        .find(|o| o.capacity_type == OnDemand)
        .unwrap();
    assert!((od.price - (0.379998 + 0.60)).abs() < 1e-6, "{}", od.price);
    let zones: Vec<&str> = p4.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert!(
        zones
            .iter()
            .all(|z| *z == "us-central1-a" || *z == "us-central1-c")
    );

    // Allowed counts per shape: V100 x1 needs <= 12 vCPUs, so n1-standard-16 takes x2 and up.
    assert!(by.contains_key("n1-standard-8-v100x1"));
    assert!(!by.contains_key("n1-standard-16-v100x1"));
    assert!(by.contains_key("n1-standard-16-v100x2"));
    assert!(by.contains_key("n1-standard-64-v100x8"));
    assert!(
        !by.contains_key("n1-standard-64-t4x1"),
        "T4 x1 allows at most 48 vCPUs"
    );
    assert!(
        !by.keys().any(|k| k.contains("-l4x")),
        "L4 is not attachable to N1"
    );

    // Built-in GPUs.
    let l4 = by["g2-standard-24"];
    assert_eq!(l4.gpu.as_ref().unwrap().count, 2);
    assert_eq!(l4.labels[labels::GKE_ACCELERATOR], "nvidia-l4");
    assert_eq!(l4.labels[labels::NVIDIA_PRODUCT], "NVIDIA-L4");
    let spot = l4
        .offerings
        .iter()
        .find(|o| o.capacity_type == Spot)
        .unwrap();
    assert_eq!(spot.price, 1.124816);
    let a100 = by["a2-ultragpu-1g"];
    assert_eq!(a100.gpu.as_ref().unwrap().model, "A100-80GB");
    assert_eq!(a100.labels[labels::GKE_ACCELERATOR], "nvidia-a100-80gb");
    assert_eq!(by["a2-megagpu-16g"].gpu.as_ref().unwrap().count, 16);
    let mega = by["a3-megagpu-8g"];
    assert_eq!(
        mega.labels[labels::GKE_ACCELERATOR],
        "nvidia-h100-mega-80gb"
    );
    assert!(mega.offerings.iter().all(|o| o.zone == "us-central1-a"));
    assert_eq!(
        by["a3-ultragpu-8g"].labels[labels::NVIDIA_PRODUCT],
        "NVIDIA-H200"
    );
    // CPU types are offered when priced; shared-core ones never.
    assert!(by.contains_key("e2-standard-4"));
    assert!(by.contains_key("n1-standard-8"));
    assert!(!by.contains_key("e2-micro"));

    // What has no list price is left out and said so.
    let built = p.catalog("default").await.unwrap();
    assert!(built.unpriced.contains(&"a4-highgpu-8g".to_string()));
    assert!(built.unpriced.contains(&"g4-standard-48".to_string()));
    assert_eq!(built.types, types);

    // One aggregated call for machine types, one accelerator list per zone; cached after.
    assert_eq!(fake.count_calls("aggregated/machineTypes"), 1);
    assert_eq!(fake.count_calls("/acceleratorTypes"), 4);
    p.instance_types(&class()).await.unwrap();
    assert_eq!(fake.count_calls("aggregated/machineTypes"), 1);
}

#[tokio::test]
async fn catalog_pages_and_per_zone_lists_agree_with_the_aggregated_one() {
    let (_, all) = start().await;
    let want = all.instance_types(&class()).await.unwrap();
    let fake = FakeCompute::new(PROJECT);
    fake.set_page_size(7);
    let (fake, paged) = start_with(fake, |s| {
        s.zones = ["a", "b", "c", "f"]
            .iter()
            .map(|z| format!("us-central1-{z}"))
            .collect();
    })
    .await;
    let got = paged.instance_types(&class()).await.unwrap();
    assert_eq!(got, want);
    assert!(
        fake.count_calls("/zones/us-central1-a/machineTypes") > 1,
        "paged"
    );
    assert_eq!(fake.count_calls("aggregated/machineTypes"), 0);

    // The aggregated list, paged across zones.
    let fake = FakeCompute::new(PROJECT);
    fake.set_page_size(5);
    let (fake, aggregated) = start_with(fake, |_| {}).await;
    assert_eq!(aggregated.instance_types(&class()).await.unwrap(), want);
    assert!(fake.count_calls("aggregated/machineTypes") > 10, "paged");
}

#[tokio::test]
async fn launch_builds_the_instance_from_the_template() {
    let (fake, p) = start().await;
    let r = request(
        "gpu-pool-abc12",
        &[("n1-standard-8-t4x1", "us-central1-b", Spot)],
    );
    let launched = p.launch(&r).await.unwrap();
    let i = &launched.instance;
    assert_eq!(
        i.provider_id,
        "gce://fake-project/us-central1-b/gpu-pool-abc12"
    );
    assert_eq!(i.claim.as_deref(), Some("gpu-pool-abc12"));
    assert_eq!(
        i.pool.as_deref(),
        Some("gpu.pool"),
        "'.' survives the GCE label"
    );
    assert_eq!(i.instance_type, "n1-standard-8-t4x1");
    assert_eq!(i.capacity_type, Spot);
    assert_eq!(i.price, Some(0.291999));
    assert!(launched.unavailable.is_empty());

    let body = &fake.instances()[0];
    assert!(
        body["machineType"]
            .as_str()
            .unwrap()
            .ends_with("/machineTypes/n1-standard-8")
    );
    assert_eq!(body["guestAccelerators"][0]["acceleratorCount"], 1);
    assert!(
        body["guestAccelerators"][0]["acceleratorType"]
            .as_str()
            .unwrap()
            .ends_with("/acceleratorTypes/nvidia-tesla-t4")
    );
    assert_eq!(body["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert_eq!(body["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(body["scheduling"]["instanceTerminationAction"], "DELETE");
    assert_eq!(body["labels"]["gpu-autoscaler-cluster"], "test-cluster");
    assert_eq!(body["labels"]["gpu-autoscaler-nodeclaim"], "gpu-pool-abc12");
    assert_eq!(body["labels"]["gpu-autoscaler-nodepool"], "gpu_pool");
    assert_eq!(body["status"], "RUNNING");
    let script = metadata(body, "startup-script");
    assert!(script.contains("--register-with-taints=nvidia.com/gpu=true:NoSchedule,gpu-autoscaler.dev/unready:NoSchedule"), "{script}");
    assert!(
        script.contains("karpenter.sh/capacity-type=spot"),
        "{script}"
    );
    assert!(script.contains("team=ml"), "{script}");
    assert!(script.contains("--provider-id=gce://fake-project/us-central1-b/gpu-pool-abc12"));
    assert!(metadata(body, "kube-labels").contains("topology.kubernetes.io/zone=us-central1-b"));

    // The request id is a UUID derived from claim and offering.
    let insert = fake
        .calls()
        .into_iter()
        .find(|c| c.starts_with("POST") && c.contains("/instances?"))
        .unwrap();
    let rid = insert
        .split("requestId=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    assert_eq!(rid.len(), 36);
    assert_eq!(
        rid,
        provider_gcp::launch::request_id(
            "gpu-pool-abc12",
            &OfferingKey::new("n1-standard-8-t4x1", "us-central1-b", Spot)
        )
    );

    // On-demand built-in GPU: standard provisioning, still TERMINATE on maintenance.
    let r = request(
        "gpu-pool-def34",
        &[("g2-standard-4", "us-central1-a", OnDemand)],
    );
    p.launch(&r).await.unwrap();
    let body = fake
        .instances()
        .into_iter()
        .find(|i| i["name"] == "gpu-pool-def34")
        .unwrap();
    assert_eq!(body["scheduling"]["provisioningModel"], "STANDARD");
    assert_eq!(body["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert!(
        body.get("guestAccelerators")
            .is_none_or(|g| g.as_array().is_none_or(Vec::is_empty))
    );
}

#[tokio::test]
async fn launch_falls_back_across_zones_on_stockout_and_quota() {
    let fake = FakeCompute::new(PROJECT);
    fake.set_operation_polls(3);
    fake.fail_inserts(
        Some("us-central1-a"),
        Some("g2-standard-8"),
        Some("SPOT"),
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        None,
    );
    fake.fail_inserts(Some("us-central1-b"), None, None, "QUOTA_EXCEEDED", None);
    let (fake, p) = start_with(fake, |_| {}).await;
    let r = request(
        "claim-1",
        &[
            ("g2-standard-8", "us-central1-a", Spot),
            ("g2-standard-8", "us-central1-b", Spot),
            ("g2-standard-8", "us-central1-c", Spot),
        ],
    );
    let launched = p.launch(&r).await.unwrap();
    assert_eq!(launched.instance.zone, "us-central1-c");
    assert_eq!(launched.instance.state, InstanceState::Running);
    assert_eq!(
        launched.unavailable,
        vec![
            OfferingKey::new("g2-standard-8", "us-central1-a", Spot),
            OfferingKey::new("g2-standard-8", "us-central1-b", Spot),
        ]
    );
    assert_eq!(
        fake.instances().len(),
        1,
        "failed inserts leave nothing behind"
    );
    // Operations were polled until DONE.
    assert!(fake.count_calls("/wait") >= 3);

    // Nothing anywhere: every candidate is reported for the unavailable-offerings cache.
    let r = request(
        "claim-2",
        &[
            ("g2-standard-8", "us-central1-a", Spot),
            ("g2-standard-8", "us-central1-b", OnDemand),
        ],
    );
    match p.launch(&r).await {
        Err(ProviderError::InsufficientCapacity { offerings, .. }) => {
            assert_eq!(offerings, r.candidates);
        }
        other => panic!("{other:?}"),
    }
    // A type the zone does not list is skipped like a stockout; an unknown type is invalid.
    let r = request("claim-3", &[("a3-megagpu-8g", "us-central1-c", OnDemand)]);
    assert!(matches!(
        p.launch(&r).await,
        Err(ProviderError::InsufficientCapacity { .. })
    ));
    let r = request("claim-4", &[("x9-huge-1", "us-central1-c", OnDemand)]);
    assert!(matches!(
        p.launch(&r).await,
        Err(ProviderError::InvalidRequest { .. })
    ));
    let r = request("claim-5", &[]);
    assert!(matches!(
        p.launch(&r).await,
        Err(ProviderError::InvalidRequest { .. })
    ));
}

#[tokio::test]
async fn a_retried_launch_returns_the_first_instance() {
    let fake = FakeCompute::new(PROJECT);
    // The first attempt gives up waiting for its operation (as after a crash or timeout).
    fake.set_operation_polls(1_000_000);
    let (fake, p) = start_with(fake, |s| s.timeouts.operation_s = 1).await;
    let r = request(
        "retry-me",
        &[
            ("g2-standard-4", "us-central1-a", OnDemand),
            ("g2-standard-4", "us-central1-b", OnDemand),
        ],
    );
    let first = p.launch(&r).await.unwrap_err();
    assert!(first.is_retryable(), "{first}");
    assert_eq!(fake.instances().len(), 1);

    // The retry finds the claim's instance by label instead of inserting another.
    let again = p.launch(&r).await.unwrap();
    assert_eq!(again.instance.zone, "us-central1-a");
    assert_eq!(again.instance.state, InstanceState::Pending);
    let again2 = p.launch(&r).await.unwrap();
    assert_eq!(again2.instance.provider_id, again.instance.provider_id);
    assert_eq!(fake.instances().len(), 1);
    assert_eq!(
        fake.count_calls("POST /projects/fake-project/zones/us-central1-a/instances?"),
        1
    );
}

#[tokio::test]
async fn the_same_request_id_gets_the_same_operation_and_a_taken_name_is_a_conflict() {
    let fake = FakeCompute::new(PROJECT);
    fake.fail_inserts(
        Some("us-central1-a"),
        None,
        None,
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        Some(1),
    );
    let (fake, p) = start_with(fake, |_| {}).await;
    let r = request("dedupe", &[("g2-standard-4", "us-central1-a", OnDemand)]);
    assert!(matches!(
        p.launch(&r).await,
        Err(ProviderError::InsufficientCapacity { .. })
    ));
    // The fault is used up, but the same request id answers with the same (failed) operation,
    // as the real API deduplicates: still no capacity, and still no instance.
    assert!(matches!(
        p.launch(&r).await,
        Err(ProviderError::InsufficientCapacity { .. })
    ));
    assert!(fake.instances().is_empty());
    // After the deduplication window the insert is new and succeeds.
    fake.forget_request_ids();
    assert_eq!(p.launch(&r).await.unwrap().instance.zone, "us-central1-a");

    // Someone else's instance holds the name: HTTP 409, and it is not adopted.
    fake.plant_instance(
        "us-central1-b",
        "taken",
        "n1-standard-8",
        &[("gpu-autoscaler-cluster", "test-cluster")],
    );
    let r = request("taken", &[("g2-standard-4", "us-central1-b", OnDemand)]);
    match p.launch(&r).await {
        Err(ProviderError::InvalidRequest { why, .. }) => {
            assert!(why.contains("another claim"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn delete_is_idempotent_and_get_reports_not_found() {
    let (fake, p) = start().await;
    let r = request(
        "short-lived",
        &[("n1-standard-4-t4x1", "us-central1-f", OnDemand)],
    );
    let pid = p.launch(&r).await.unwrap().instance.provider_id;
    assert_eq!(
        p.get(&pid).await.unwrap().instance_type,
        "n1-standard-4-t4x1"
    );
    p.delete(&pid).await.unwrap();
    assert!(fake.instances().is_empty());
    p.delete(&pid).await.unwrap();
    p.delete("gce://fake-project/us-central1-a/never-was")
        .await
        .unwrap();
    assert!(matches!(
        p.get(&pid).await,
        Err(ProviderError::NotFound { .. })
    ));
    assert!(matches!(
        p.delete("aws:///us-east-1a/i-1").await,
        Err(ProviderError::InvalidRequest { .. })
    ));
}

#[tokio::test]
async fn list_returns_this_clusters_instances_for_garbage_collection() {
    let (fake, p) = start().await;
    let mine = p
        .launch(&request(
            "claimed",
            &[("g2-standard-4", "us-central1-c", Spot)],
        ))
        .await
        .unwrap()
        .instance;
    fake.plant_instance(
        "us-central1-a",
        "orphan",
        "n1-standard-8",
        &[("gpu-autoscaler-cluster", "test-cluster")],
    );
    fake.plant_instance(
        "us-central1-a",
        "other",
        "n1-standard-8",
        &[("gpu-autoscaler-cluster", "someone-else")],
    );
    fake.plant_instance("us-central1-b", "unlabelled", "n1-standard-8", &[]);
    let listed = p.list().await.unwrap();
    let ids: Vec<(&str, Option<&str>)> = listed
        .iter()
        .map(|i| (i.provider_id.as_str(), i.claim.as_deref()))
        .collect();
    assert_eq!(
        ids,
        [
            ("gce://fake-project/us-central1-a/orphan", None),
            (mine.provider_id.as_str(), Some("claimed")),
        ]
    );
    assert_eq!(listed[1].tags[providers::tags::CLUSTER], "test-cluster");
    assert_eq!(listed[1].capacity_type, Spot);
    // The filter went to the server.
    assert!(
        fake.calls()
            .iter()
            .any(|c| c.contains("aggregated/instances?") && c.contains("gpu-autoscaler-cluster"))
    );
}

#[tokio::test]
async fn transient_errors_are_retried_and_throttling_surfaces_after_the_attempts() {
    let (fake, p) = start().await;
    fake.fail_next_http("machineTypes.aggregatedList", 503, "backendError");
    fake.fail_next_http("instances.insert", 429, "rateLimitExceeded");
    let r = request("retried", &[("g2-standard-4", "us-central1-a", OnDemand)]);
    p.launch(&r).await.unwrap();
    let (attempts, throttled, retried) = p.stats().snapshot();
    assert_eq!((throttled, retried), (1, 2), "attempts {attempts}");
    assert_eq!(fake.instances().len(), 1);

    for _ in 0..3 {
        fake.fail_next_http("instances.get", 429, "rateLimitExceeded");
    }
    let pid = "gce://fake-project/us-central1-a/retried";
    assert!(matches!(
        p.get(pid).await,
        Err(ProviderError::Throttled { .. })
    ));
    assert_eq!(p.get(pid).await.unwrap().claim.as_deref(), Some("retried"));

    // A synchronous quota refusal moves on to the next offering.
    fake.fail_next_http("instances.insert", 403, "quotaExceeded");
    let r = request(
        "quota",
        &[
            ("g2-standard-4", "us-central1-a", OnDemand),
            ("g2-standard-4", "us-central1-b", OnDemand),
        ],
    );
    let l = p.launch(&r).await.unwrap();
    assert_eq!(l.instance.zone, "us-central1-b");
    assert_eq!(l.unavailable.len(), 1);
}

#[tokio::test]
async fn a_group_is_bulk_inserted_all_or_nothing_and_retried_idempotently() {
    let fake = FakeCompute::new(PROJECT);
    fake.fail_inserts(
        Some("us-central1-a"),
        Some("g2-standard-8"),
        None,
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        None,
    );
    let (fake, p) = start_with(fake, |_| {}).await;
    let candidates = [
        ("g2-standard-8", "us-central1-a", OnDemand),
        ("g2-standard-8", "us-central1-b", OnDemand),
    ];
    let group: Vec<LaunchRequest> = ["gang-0", "gang-1", "gang-2"]
        .iter()
        .map(|c| request(c, &candidates))
        .collect();
    let launched = p.launch_group(&group).await.unwrap();
    assert_eq!(launched.len(), 3);
    for (l, r) in launched.iter().zip(&group) {
        assert_eq!(l.instance.claim.as_deref(), Some(r.claim.as_str()));
        assert_eq!(l.instance.zone, "us-central1-b");
        assert_eq!(
            l.unavailable,
            [OfferingKey::new("g2-standard-8", "us-central1-a", OnDemand)]
        );
    }
    let vms = fake.instances();
    assert_eq!(vms.len(), 3, "zone a created none of them");
    let gid = provider_gcp::group_id(&group);
    for vm in &vms {
        assert_eq!(vm["labels"][provider_gcp::GROUP_LABEL], gid.as_str());
        assert_eq!(vm["labels"]["gpu-autoscaler-cluster"], "test-cluster");
        assert_eq!(
            vm["machineType"].as_str().unwrap().rsplit('/').next(),
            Some("g2-standard-8")
        );
        assert!(!metadata(vm, "startup-script").contains("--provider-id"));
    }
    assert_eq!(fake.count_calls("/instances/bulkInsert"), 2);
    assert_eq!(fake.count_calls("/setLabels"), 3);

    // A retry (after a crash, say) finds the group and creates nothing.
    let again = p.launch_group(&group).await.unwrap();
    assert_eq!(
        again
            .iter()
            .map(|l| &l.instance.provider_id)
            .collect::<Vec<_>>(),
        launched
            .iter()
            .map(|l| &l.instance.provider_id)
            .collect::<Vec<_>>()
    );
    assert_eq!(fake.count_calls("/instances/bulkInsert"), 2);
    assert_eq!(fake.instances().len(), 3);

    // Nowhere to put the whole group: nothing is created.
    let big: Vec<LaunchRequest> = ["big-0", "big-1"]
        .iter()
        .map(|c| request(c, &[("g2-standard-8", "us-central1-a", Spot)]))
        .collect();
    assert!(matches!(
        p.launch_group(&big).await,
        Err(ProviderError::InsufficientCapacity { .. })
    ));
    assert_eq!(fake.instances().len(), 3);

    // Claims that do not share one template cannot be one bulkInsert.
    let mixed = vec![
        request("m-0", &candidates),
        request("m-1", &[("g2-standard-4", "us-central1-b", OnDemand)]),
    ];
    assert!(matches!(
        p.launch_group(&mixed).await,
        Err(ProviderError::InvalidRequest { .. })
    ));
}

#[tokio::test]
async fn reads_and_mutations_draw_from_their_token_buckets() {
    let (_, p) = start_with(FakeCompute::new(PROJECT), |s| {
        s.limits.read = providers::common::RateLimit::new(4, 1);
    })
    .await;
    let pid = "gce://fake-project/us-central1-a/none";
    let start = std::time::Instant::now();
    for _ in 0..5 {
        assert!(matches!(
            p.get(pid).await,
            Err(ProviderError::NotFound { .. })
        ));
    }
    // One at once, then four more at four per second.
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );

    // An N1 combination outside the price table is priced from its shape once the catalog is
    // cached.
    p.instance_types(&class()).await.unwrap();
    let l = p
        .launch(&request(
            "p4-node",
            &[("n1-standard-8-p4x1", "us-central1-a", OnDemand)],
        ))
        .await
        .unwrap();
    assert_eq!(l.instance.price, Some(0.979998));
}

/// The Compute method of one recorded call line (`METHOD path?query`).
fn method_of(call: &str) -> &'static str {
    let (verb, rest) = call.split_once(' ').unwrap_or(("", call));
    let path = rest.split('?').next().unwrap_or("");
    match verb {
        "DELETE" => "instances.delete",
        "POST" if path.ends_with("/wait") => "zoneOperations.wait",
        "POST" if path.ends_with("/instances") => "instances.insert",
        "GET" if path.ends_with("/aggregated/instances") => "instances.aggregatedList",
        "GET" if path.contains("/instances/") => "instances.get",
        _ => "other",
    }
}

/// Calls per method made since `from` calls had been recorded.
fn calls_since(fake: &FakeCompute, from: usize) -> BTreeMap<&'static str, u32> {
    let mut out = BTreeMap::new();
    for c in fake.calls().iter().skip(from) {
        *out.entry(method_of(c)).or_default() += 1;
    }
    out
}

/// The bound of `docs/src/reliability.md`: with warm caches a launch makes one
/// `instances.aggregatedList` (the claim's instance), then per offering tried one
/// `instances.insert`, the `zoneOperations.wait` polls until its operation is DONE (one here)
/// and, on success, one `instances.get`; a get one `instances.get`; a delete one
/// `instances.delete` and its polls; and each request at most `retry.max_attempts` calls.
/// Checked with every call throttled (exactly the bound), then under faults at 30 % of calls
/// (stockouts, throttling, 5xx, timeouts half after the effect): every operation within its
/// bound, never a second VM for a claim.
#[tokio::test]
async fn operations_stay_within_their_call_bounds_under_fault_rates() {
    let (fake, p) = start_with(FakeCompute::new(PROJECT), |s| {
        s.timeouts.attempt_ms = 300;
    })
    .await;
    let attempts = 3; // settings_for's retry.max_attempts
    let hang = std::time::Duration::from_millis(1000);
    let offers = [
        ("g2-standard-4", "us-central1-a", OnDemand),
        ("g2-standard-4", "us-central1-b", OnDemand),
    ];
    // Warm the machine type cache: the bound is for a warm provider.
    let warm = p.launch(&request("warm", &offers)).await.unwrap();

    // Every call throttled: the first request of each operation is tried exactly
    // max_attempts times, then the operation fails as Throttled.
    fake.fault_rates(
        providers::faults::CloudFaultRates {
            throttle: 1.0,
            ..Default::default()
        },
        1,
        hang,
    );
    for (what, r) in [
        (
            "launch",
            p.launch(&request("thr", &offers)).await.map(|_| ()),
        ),
        ("get", p.get(&warm.instance.provider_id).await.map(|_| ())),
        ("delete", p.delete(&warm.instance.provider_id).await),
    ] {
        assert!(
            matches!(r, Err(ProviderError::Throttled { .. })),
            "{what}: {r:?}"
        );
    }
    let all = calls_since(&fake, 0);
    assert_eq!(all["instances.get"], attempts + 1, "{all:?}");
    assert_eq!(all["instances.delete"], attempts, "{all:?}");

    // 30 % of calls fault, evenly over the four kinds.
    fake.fault_rates(providers::faults::CloudFaultRates::even(0.3), 7, hang);
    let (mut launched, mut failed) = (0, 0);
    for i in 0..12 {
        let claim = format!("rate-{i}");
        let from = fake.calls().len();
        let r = p.launch(&request(&claim, &offers)).await;
        let d = calls_since(&fake, from);
        let n = |m: &str| d.get(m).copied().unwrap_or(0);
        let tried = offers.len() as u32;
        assert!(
            n("instances.aggregatedList") <= attempts,
            "{claim}: {d:?} {r:?}"
        );
        assert!(
            n("instances.insert") <= tried * attempts,
            "{claim}: {d:?} {r:?}"
        );
        assert!(
            n("zoneOperations.wait") <= tried * attempts,
            "{claim}: {d:?} {r:?}"
        );
        assert!(
            n("instances.get") <= tried * attempts,
            "{claim}: {d:?} {r:?}"
        );
        assert_eq!(n("other") + n("instances.delete"), 0, "{claim}: {d:?}");
        let Ok(l) = r else {
            failed += 1;
            continue;
        };
        launched += 1;
        let pid = l.instance.provider_id.clone();
        let from = fake.calls().len();
        let got = p.get(&pid).await;
        let d = calls_since(&fake, from);
        assert!(
            d.len() == 1 && d.get("instances.get").copied().unwrap_or(0) <= attempts,
            "get {pid}: {d:?} {got:?}"
        );
        let from = fake.calls().len();
        let del = p.delete(&pid).await;
        let d = calls_since(&fake, from);
        let n = |m: &str| d.get(m).copied().unwrap_or(0);
        assert!(
            n("instances.delete") <= attempts
                && n("zoneOperations.wait") <= attempts
                && n("instances.delete") + n("zoneOperations.wait") == d.values().sum::<u32>(),
            "delete {pid}: {d:?} {del:?}"
        );
    }
    let counts = fake.fault_counts();
    eprintln!("launched {launched}, failed {failed}, faults {counts:?}");
    assert!(launched >= 6, "most launches get through: {launched} of 12");
    assert!(counts.total() >= 5, "{counts:?}");
    // Never two VMs for one claim: a VM is named after its claim, and an insert retried after
    // a lost answer reuses its request id.
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for vm in fake.instances() {
        let claim = vm["labels"]["gpu-autoscaler-nodeclaim"]
            .as_str()
            .unwrap_or("")
            .to_string();
        *per.entry(claim).or_default() += 1;
    }
    assert!(per.values().all(|n| *n <= 1), "{per:?}");
}
