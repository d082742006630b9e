//! Placement groups on the GCP provider against the fake Compute API: compact resource policies
//! created once per group and referenced by the group's instances (insert and bulkInsert), a
//! full placement falling back to launching outside it, and collection of unused policies of
//! this cluster only.

use std::collections::BTreeSet;

use autoscaler_core::CapacityType::OnDemand;
use fake_compute::{FakeCompute, settings_for};
use provider_gcp::{GcpProvider, placement_description};
use providers::{CloudProvider, LaunchRequest, NodeClassRef, OfferingKey, tags};
use serde_json::Value;

const PROJECT: &str = "fake-project";
const GROUP: &str = "gpu-autoscaler-test-cluster-train-0123abcd";

async fn start(fake: &FakeCompute) -> GcpProvider {
    let addr = fake.serve().await.expect("bind");
    GcpProvider::connect(settings_for(addr, PROJECT, "test-cluster"))
        .await
        .expect("connect")
}

fn request(claim: &str, group: Option<&str>) -> LaunchRequest {
    LaunchRequest {
        claim: claim.into(),
        pool: "gpu".into(),
        class: NodeClassRef {
            group: "gcp.gpu-autoscaler.dev".into(),
            kind: "GceNodeClass".into(),
            name: "default".into(),
        },
        candidates: vec![
            OfferingKey::new("g2-standard-8", "us-central1-a", OnDemand),
            OfferingKey::new("g2-standard-8", "us-central1-b", OnDemand),
        ],
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
        placement_group: group.map(str::to_string),
        gpu_sharing: Default::default(),
    }
}

fn policies_of(vm: &Value) -> Vec<String> {
    vm["resourcePolicies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            p.as_str()
                .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        })
        .collect()
}

#[tokio::test]
async fn a_gang_shares_one_compact_policy_collected_once_unused() {
    let fake = FakeCompute::new(PROJECT);
    let p = start(&fake).await;
    let a = p.launch(&request("train-a", Some(GROUP))).await.unwrap();
    let b = p.launch(&request("train-b", Some(GROUP))).await.unwrap();
    let plain = p.launch(&request("solo", None)).await.unwrap();

    // One policy, compact, described as this cluster's; the second launch found it made.
    let policies = fake.resource_policies();
    assert_eq!(policies.len(), 1, "{policies:#?}");
    assert_eq!(policies[0]["name"], GROUP);
    assert_eq!(
        policies[0]["groupPlacementPolicy"]["collocation"],
        "COLLOCATED"
    );
    assert_eq!(
        policies[0]["description"],
        placement_description("test-cluster")
    );
    assert_eq!(fake.count_calls("/resourcePolicies?"), 2);
    // The group's instances reference it; the other one does not.
    for vm in fake.instances() {
        let expected: Vec<String> = if vm["name"] == "solo" {
            vec![]
        } else {
            vec![GROUP.to_string()]
        };
        assert_eq!(policies_of(&vm), expected, "{vm:#?}");
    }
    assert_eq!(a.instance.tags[tags::PLACEMENT_GROUP], GROUP);
    assert_eq!(b.instance.tags[tags::PLACEMENT_GROUP], GROUP);
    assert!(!plain.instance.tags.contains_key(tags::PLACEMENT_GROUP));

    // Another cluster's policy and an old one of ours nobody uses.
    fake.plant_resource_policy(
        "us-central1",
        "theirs",
        &placement_description("other-cluster"),
        "2020-01-01T00:00:00.000-08:00",
    );
    fake.plant_resource_policy(
        "us-central1",
        "ours-old",
        &placement_description("test-cluster"),
        "2020-01-01T00:00:00.000-08:00",
    );
    let none = BTreeSet::new();
    let live = p.list().await.unwrap();
    assert_eq!(
        p.collect_placement_groups(&live, &none, 3600)
            .await
            .unwrap(),
        ["ours-old"],
        "in use while its instances live"
    );
    p.delete(&a.instance.provider_id).await.unwrap();
    p.delete(&b.instance.provider_id).await.unwrap();
    let live = p.list().await.unwrap();
    assert_eq!(live.len(), 1);
    let named = BTreeSet::from([GROUP.to_string()]);
    assert!(
        p.collect_placement_groups(&live, &named, 0)
            .await
            .unwrap()
            .is_empty(),
        "kept while a claim names it"
    );
    assert!(
        p.collect_placement_groups(&live, &none, 3600)
            .await
            .unwrap()
            .is_empty(),
        "kept while younger than the grace period"
    );
    assert_eq!(
        p.collect_placement_groups(&live, &none, 0).await.unwrap(),
        [GROUP]
    );
    let left: Vec<Value> = fake.resource_policies();
    assert_eq!(left.len(), 1);
    assert_eq!(
        left[0]["name"], "theirs",
        "another cluster's policy is never touched"
    );
    assert!(
        p.collect_placement_groups(&live, &none, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_full_placement_falls_back_to_launching_outside_it() {
    let fake = FakeCompute::new(PROJECT);
    let p = start(&fake).await;
    fake.fill_placement(true);
    let l = p.launch(&request("train-a", Some(GROUP))).await.unwrap();
    // The first zone, outside the policy: nothing marked unavailable for the group's sake.
    assert_eq!(l.instance.zone, "us-central1-a");
    assert!(l.unavailable.is_empty(), "{:?}", l.unavailable);
    assert!(!l.instance.tags.contains_key(tags::PLACEMENT_GROUP));
    assert_eq!(fake.count_calls("/zones/us-central1-a/instances?"), 2);
    assert!(policies_of(&fake.instances()[0]).is_empty());
}

#[tokio::test]
async fn a_bulk_inserted_gang_lands_in_its_policy_or_outside_it_when_full() {
    let fake = FakeCompute::new(PROJECT);
    let p = start(&fake).await;
    let group: Vec<LaunchRequest> = ["gang-0", "gang-1"]
        .iter()
        .map(|c| request(c, Some(GROUP)))
        .collect();
    let launched = p.launch_group(&group).await.unwrap();
    assert_eq!(launched.len(), 2);
    for l in &launched {
        assert_eq!(l.instance.tags[tags::PLACEMENT_GROUP], GROUP);
    }
    for vm in fake.instances() {
        assert_eq!(policies_of(&vm), [GROUP]);
    }

    fake.fill_placement(true);
    let other: Vec<LaunchRequest> = ["big-0", "big-1"]
        .iter()
        .map(|c| request(c, Some("gpu-autoscaler-test-cluster-big-0000ffff")))
        .collect();
    let launched = p.launch_group(&other).await.unwrap();
    for l in &launched {
        assert_eq!(l.instance.zone, "us-central1-a");
        assert!(!l.instance.tags.contains_key(tags::PLACEMENT_GROUP));
        assert!(l.unavailable.is_empty());
    }
    assert_eq!(
        fake.count_calls("/zones/us-central1-a/instances/bulkInsert"),
        3
    );
}
