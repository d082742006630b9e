//! The fake's contract: idempotent launches, capacity failures, idempotent deletes, listing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use autoscaler_core::CapacityType::{OnDemand, Spot};

use super::*;
use crate::UnavailableOfferings;

fn request(
    claim: &str,
    candidates: &[(&str, &str, autoscaler_core::CapacityType)],
) -> LaunchRequest {
    LaunchRequest {
        claim: claim.into(),
        pool: "gpu".into(),
        class: NodeClassRef::default(),
        candidates: candidates
            .iter()
            .map(|(t, z, c)| OfferingKey::new(*t, *z, *c))
            .collect(),
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
        placement_group: None,
        gpu_sharing: Default::default(),
    }
}

#[test]
fn launch_is_idempotent_per_claim() {
    let cloud = FakeProvider::with_default_catalog();
    let req = request("claim-a", &[("g5.xlarge", "us-east-1a", Spot)]);
    let first = block_on(cloud.launch(&req)).unwrap();
    let again = block_on(cloud.launch(&req)).unwrap();
    assert_eq!(first.instance, again.instance);
    assert_eq!(first.instance.provider_id, "fake:///us-east-1a/fake-1");
    assert_eq!(first.instance.claim.as_deref(), Some("claim-a"));
    assert_eq!(first.instance.tags[tags::CLUSTER], DEFAULT_CLUSTER);
    assert_eq!(first.instance.tags[tags::POOL], "gpu");
    assert_eq!(first.instance.price, Some(0.4024));
    assert_eq!(block_on(cloud.list()).unwrap().len(), 1);
    let other = block_on(cloud.launch(&request("claim-b", &[("g5.xlarge", "us-east-1a", Spot)])));
    assert_eq!(
        other.unwrap().instance.provider_id,
        "fake:///us-east-1a/fake-2"
    );
}

#[test]
fn insufficient_capacity_falls_through_candidates_and_feeds_the_cache() {
    let cloud = FakeProvider::with_default_catalog();
    let spot_a = OfferingKey::new("p5.48xlarge", "us-east-1a", Spot);
    let spot_b = OfferingKey::new("p5.48xlarge", "us-east-1b", Spot);
    cloud.fail_offering(spot_a.clone());
    cloud.fail_offering(spot_b.clone());
    let req = request(
        "claim-1",
        &[
            ("p5.48xlarge", "us-east-1a", Spot),
            ("p5.48xlarge", "us-east-1b", Spot),
            ("p5.48xlarge", "us-east-1a", OnDemand),
        ],
    );
    let launched = block_on(cloud.launch(&req)).unwrap();
    assert_eq!(launched.instance.capacity_type, OnDemand);
    assert_eq!(launched.unavailable, [spot_a.clone(), spot_b.clone()]);

    let req = request(
        "claim-2",
        &[
            ("p5.48xlarge", "us-east-1a", Spot),
            ("p5.48xlarge", "us-east-1b", Spot),
        ],
    );
    let e = block_on(cloud.launch(&req)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "launching an instance: insufficient capacity for p5.48xlarge/us-east-1a/spot, \
         p5.48xlarge/us-east-1b/spot"
    );
    assert!(!e.is_retryable());
    let ProviderError::InsufficientCapacity { offerings, .. } = e else {
        panic!("{e:?}")
    };
    let mut cache = UnavailableOfferings::default();
    cache.mark_all(offerings, 100);
    let mut types = block_on(cloud.instance_types(&NodeClassRef::default())).unwrap();
    cache.apply(&mut types, 150);
    let p5 = types.iter().find(|t| t.name == "p5.48xlarge").unwrap();
    assert_eq!(p5.offerings.iter().filter(|o| !o.available).count(), 2);
    let cheapest = p5.cheapest_offering().unwrap();
    assert_eq!(
        (cheapest.zone.as_str(), cheapest.capacity_type),
        ("us-east-1c", Spot)
    );

    cloud.restore_offering(&spot_a);
    let launched = block_on(cloud.launch(&req)).unwrap();
    assert_eq!(launched.instance.offering(), spot_a);
}

#[test]
fn limited_capacity_comes_back_on_delete() {
    let cloud = FakeProvider::with_default_catalog();
    let key = OfferingKey::new("g6.xlarge", "us-east-1c", OnDemand);
    cloud.set_capacity(key.clone(), Some(1));
    let c = [("g6.xlarge", "us-east-1c", OnDemand)];
    let a = block_on(cloud.launch(&request("a", &c))).unwrap().instance;
    assert!(matches!(
        block_on(cloud.launch(&request("b", &c))),
        Err(ProviderError::InsufficientCapacity { .. })
    ));
    block_on(cloud.delete(&a.provider_id)).unwrap();
    assert!(block_on(cloud.launch(&request("b", &c))).is_ok());
    cloud.set_capacity(key, None);
    assert!(block_on(cloud.launch(&request("c", &c))).is_ok());
}

#[test]
fn delete_is_idempotent_and_list_shows_live_instances_of_this_cluster() {
    let cloud = FakeProvider::with_default_catalog().with_cluster("prod");
    let c = [("m5.large", "us-east-1a", OnDemand)];
    let a = block_on(cloud.launch(&request("a", &c))).unwrap().instance;
    let b = block_on(cloud.launch(&request("b", &c))).unwrap().instance;
    let mut foreign = a.clone();
    foreign.provider_id = "fake:///us-east-1a/other-1".into();
    foreign.tags.insert(tags::CLUSTER.into(), "staging".into());
    foreign.claim = None;
    cloud.insert_instance(foreign);
    let mut orphan = b.clone();
    orphan.provider_id = "fake:///us-east-1a/orphan-1".into();
    orphan.claim = None;
    orphan.tags.remove(tags::CLAIM);
    cloud.insert_instance(orphan);

    block_on(cloud.delete(&a.provider_id)).unwrap();
    block_on(cloud.delete(&a.provider_id)).unwrap();
    block_on(cloud.delete("fake:///nowhere/never")).unwrap();
    assert_eq!(
        block_on(cloud.get(&a.provider_id)).unwrap().state,
        InstanceState::Terminated
    );
    assert_eq!(
        block_on(cloud.get("fake:///nowhere/never")).unwrap_err(),
        ProviderError::NotFound {
            action: Action::Get,
            provider_id: "fake:///nowhere/never".into()
        }
    );
    let live: Vec<(String, Option<String>)> = block_on(cloud.list())
        .unwrap()
        .into_iter()
        .map(|i| (i.provider_id, i.claim))
        .collect();
    assert_eq!(
        live,
        [
            (
                "fake:///us-east-1a/fake-2".to_string(),
                Some("b".to_string())
            ),
            ("fake:///us-east-1a/orphan-1".to_string(), None),
        ]
    );
    // A terminated instance stays the answer for its claim: the token is not reusable.
    let again = block_on(cloud.launch(&request("a", &c))).unwrap().instance;
    assert_eq!(again.state, InstanceState::Terminated);
}

#[test]
fn placement_groups_are_recorded_and_collected_when_unused() {
    let cloud = FakeProvider::with_default_catalog();
    let mut a = request("claim-a", &[("g5.xlarge", "us-east-1a", Spot)]);
    a.placement_group = Some("pg-1".into());
    let mut b = request("claim-b", &[("g5.xlarge", "us-east-1a", Spot)]);
    b.placement_group = Some("pg-1".into());
    let plain = request("claim-c", &[("g5.xlarge", "us-east-1a", Spot)]);
    let la = block_on(cloud.launch(&a)).unwrap();
    let lb = block_on(cloud.launch(&b)).unwrap();
    let lc = block_on(cloud.launch(&plain)).unwrap();
    assert_eq!(la.instance.tags[tags::PLACEMENT_GROUP], "pg-1");
    assert_eq!(lb.instance.tags[tags::PLACEMENT_GROUP], "pg-1");
    assert!(!lc.instance.tags.contains_key(tags::PLACEMENT_GROUP));
    assert_eq!(cloud.placement_groups(), ["pg-1"]);
    let recorded: Vec<Option<String>> = cloud
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Launch(r) => Some(r.placement_group),
            _ => None,
        })
        .collect();
    assert_eq!(recorded, [Some("pg-1".into()), Some("pg-1".into()), None]);

    let keep = BTreeSet::new();
    // In use while one of its instances lives.
    block_on(cloud.delete(&la.instance.provider_id)).unwrap();
    let live = block_on(cloud.list()).unwrap();
    assert!(
        block_on(cloud.collect_placement_groups(&live, &keep, 0))
            .unwrap()
            .is_empty()
    );
    block_on(cloud.delete(&lb.instance.provider_id)).unwrap();
    let live = block_on(cloud.list()).unwrap();
    // Kept while the caller still names it.
    let named = BTreeSet::from(["pg-1".to_string()]);
    assert!(
        block_on(cloud.collect_placement_groups(&live, &named, 0))
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        block_on(cloud.collect_placement_groups(&live, &keep, 0)).unwrap(),
        ["pg-1"]
    );
    assert!(cloud.placement_groups().is_empty());
}

#[test]
fn invalid_requests_are_not_retryable() {
    let cloud = FakeProvider::with_default_catalog();
    let e = block_on(cloud.launch(&request("x", &[]))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "launching an instance: invalid request: claim x has no candidate offerings"
    );
    assert!(!e.is_retryable());
    let e = block_on(cloud.launch(&request("x", &[("z9.huge", "us-east-1a", Spot)]))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "launching an instance: invalid request: unknown instance type z9.huge"
    );
    // Sold only in us-east4: refused in other zones like missing capacity.
    let e = block_on(cloud.launch(&request("x", &[("a3-megagpu-8g", "us-central1-a", Spot)])))
        .unwrap_err();
    assert_eq!(e.action(), Action::Launch);
    assert!(matches!(e, ProviderError::InsufficientCapacity { .. }));
}

#[test]
fn injected_errors_fire_once_and_calls_are_recorded() {
    let cloud = FakeProvider::with_default_catalog();
    cloud.inject_error(
        Action::List,
        ProviderError::Throttled {
            action: Action::List,
            retry_after_s: Some(2),
        },
    );
    let e = block_on(cloud.list()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "listing instances: throttled by the cloud API (retry after 2s)"
    );
    assert!(e.is_retryable());
    assert!(block_on(cloud.list()).unwrap().is_empty());
    block_on(cloud.delete("fake:///z/1")).unwrap();
    assert_eq!(
        cloud.calls(),
        [Call::List, Call::List, Call::Delete("fake:///z/1".into())]
    );
    cloud.clear_calls();
    assert!(cloud.calls().is_empty());
    assert!(!cloud.set_state("fake:///z/1", InstanceState::Running));
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[test]
fn futures_are_send() {
    let cloud = FakeProvider::with_default_catalog();
    let req = request("s", &[("m5.large", "us-east-1a", Spot)]);
    assert!(block_on(assert_send(cloud.launch(&req))).is_ok());
    assert!(block_on(assert_send(cloud.list())).is_ok());
}

/// Pending once, then ready: exercises block_on's park/wake path.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = u32;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        if self.0 {
            Poll::Ready(7)
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[test]
fn block_on_handles_pending_futures() {
    assert_eq!(block_on(YieldOnce(false)), 7);
}
