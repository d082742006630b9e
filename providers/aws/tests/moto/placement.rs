//! Placement groups: a gang's launches go into one tagged `cluster` placement group, a full
//! group falls back to launching outside it, and unused groups of this cluster are collected.
//!
//! moto (5.2) emulates no placement groups and ignores `Placement` on CreateFleet, so the proxy
//! answers the placement group actions and records each fleet override's group.

use std::collections::BTreeSet;
use std::sync::Arc;

use autoscaler_core::CapacityType::OnDemand;
use aws_sdk_ec2::types::{PlacementStrategy, ResourceType, Tag, TagSpecification};
use provider_aws::{AwsProvider, FakeClock, PLACEMENT_GROUP_CREATED_TAG};
use providers::{CloudProvider, LaunchRequest, OfferingKey, tags};

use crate::harness::Moto;
use crate::lifecycle::request;
use crate::proxy::Proxy;

const GROUP: &str = "gpu-autoscaler-pg1-volcano-default-train-0123abcd";

async fn provider_at(moto: &Moto, endpoint: &str, cluster: &str, clock: &FakeClock) -> AwsProvider {
    let class = moto
        .node_class(cluster, &["us-east-1a", "us-east-1b"])
        .await;
    let mut s = moto.settings(endpoint, cluster);
    s.node_classes.insert("default".into(), class);
    AwsProvider::connect_with_clock(s, Arc::new(clock.clone()))
        .await
        .unwrap()
}

fn grouped(claim: &str) -> LaunchRequest {
    LaunchRequest {
        placement_group: Some(GROUP.into()),
        gpu_sharing: Default::default(),
        ..request(
            claim,
            vec![
                OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand),
                OfferingKey::new("g5.2xlarge", "us-east-1a", OnDemand),
            ],
        )
    }
}

#[tokio::test]
async fn a_gang_launches_into_one_tagged_group_collected_once_unused() {
    let Some(moto) = Moto::start("a_gang_launches_into_one_tagged_group_collected_once_unused")
    else {
        return;
    };
    let proxy = Proxy::start(&moto.url).await;
    let clock = FakeClock::new(1_000_000);
    let p = provider_at(&moto, &proxy.url, "pg1", &clock).await;

    let a = p.launch(&grouped("train-a")).await.unwrap();
    let b = p.launch(&grouped("train-b")).await.unwrap();
    // The second launch found the group made: a duplicate is success.
    assert_eq!(proxy.requests("CreatePlacementGroup"), 2);
    let groups = proxy.placement_groups();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let (strategy, group_tags) = &groups[GROUP];
    assert_eq!(strategy, PlacementStrategy::Cluster.as_str());
    assert_eq!(group_tags[tags::CLUSTER], "pg1");
    assert_eq!(group_tags[PLACEMENT_GROUP_CREATED_TAG], "1000000");
    // Every override of both fleets named the group.
    let fleets = proxy.fleet_groups();
    assert_eq!(fleets.len(), 2, "{fleets:?}");
    for f in &fleets {
        assert_eq!(f, &vec![Some(GROUP.to_string()); 2]);
    }
    for l in [&a, &b] {
        assert_eq!(l.instance.tags[tags::PLACEMENT_GROUP], GROUP, "{l:#?}");
    }
    // As EC2 lists them afterwards (what garbage collection reads).
    let live = p.list().await.unwrap();
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|i| i.tags[tags::PLACEMENT_GROUP] == GROUP));

    // A group of another cluster, and an old group of ours nobody uses.
    let ec2 = moto.client();
    let foreign =
        aws_sdk_ec2::Client::from_conf(ec2.config().to_builder().endpoint_url(&proxy.url).build());
    for (name, cluster) in [("theirs", "other"), ("ours-old", "pg1")] {
        foreign
            .create_placement_group()
            .group_name(name)
            .strategy(PlacementStrategy::Cluster)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::PlacementGroup)
                    .tags(Tag::builder().key(tags::CLUSTER).value(cluster).build())
                    .tags(
                        Tag::builder()
                            .key(PLACEMENT_GROUP_CREATED_TAG)
                            .value("1")
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await
            .unwrap();
    }

    let none = BTreeSet::new();
    // In use while its instances live: only the old unused one goes.
    assert_eq!(
        p.collect_placement_groups(&live, &none, 600).await.unwrap(),
        ["ours-old"]
    );
    p.delete(&a.instance.provider_id).await.unwrap();
    p.delete(&b.instance.provider_id).await.unwrap();
    let live = p.list().await.unwrap();
    assert!(live.is_empty(), "{live:#?}");
    // Named by a claim (a launch still to come): kept.
    let named = BTreeSet::from([GROUP.to_string()]);
    assert!(
        p.collect_placement_groups(&live, &named, 0)
            .await
            .unwrap()
            .is_empty()
    );
    // Younger than the grace period: kept.
    clock.advance(599);
    assert!(
        p.collect_placement_groups(&live, &none, 600)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(1);
    assert_eq!(
        p.collect_placement_groups(&live, &none, 600).await.unwrap(),
        [GROUP]
    );
    let left: Vec<String> = proxy.placement_groups().into_keys().collect();
    assert_eq!(left, ["theirs"], "another cluster's group is never touched");
    // Nothing left to do: idempotent.
    assert!(
        p.collect_placement_groups(&live, &none, 600)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_full_group_falls_back_to_launching_outside_it() {
    let Some(moto) = Moto::start("a_full_group_falls_back_to_launching_outside_it") else {
        return;
    };
    let proxy = Proxy::start(&moto.url).await;
    let clock = FakeClock::new(1_000_000);
    let p = provider_at(&moto, &proxy.url, "pg2", &clock).await;
    proxy.fill_placement_groups(true);

    let l = p.launch(&grouped("train-a")).await.unwrap();
    // The fleet into the group was refused; the same offerings outside it were bought.
    let fleets = proxy.fleet_groups();
    assert_eq!(
        fleets,
        vec![vec![Some(GROUP.to_string()); 2], vec![None, None]]
    );
    assert_eq!(l.instance.instance_type, "g5.xlarge");
    assert!(
        !l.instance.tags.contains_key(tags::PLACEMENT_GROUP),
        "{l:#?}"
    );
    // Refused inside a group is not refused outside it: nothing is marked unavailable.
    assert!(l.unavailable.is_empty(), "{:?}", l.unavailable);
    // The fallback is its own request: a new idempotency token, or EC2 would answer with the
    // refused request's result.
    assert_eq!(proxy.requests("CreateFleet"), 2);

    // EC2 refusing to create the group at all (no permission): launch outside it.
    proxy.fill_placement_groups(false);
    proxy.fail_next(
        1,
        Some("CreatePlacementGroup"),
        403,
        "UnauthorizedOperation",
    );
    let mut req = grouped("train-b");
    req.placement_group = Some("gpu-autoscaler-pg2-other-0000ffff".into());
    let l = p.launch(&req).await.unwrap();
    assert!(
        !l.instance.tags.contains_key(tags::PLACEMENT_GROUP),
        "{l:#?}"
    );
    assert_eq!(proxy.fleet_groups().last().unwrap(), &vec![None, None]);
    assert!(
        !proxy
            .placement_groups()
            .contains_key("gpu-autoscaler-pg2-other-0000ffff")
    );
}
