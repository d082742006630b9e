//! Insufficient capacity, throttling and server errors, through the fault-injecting proxy.

use autoscaler_core::CapacityType::{OnDemand, Spot};
use providers::{CloudProvider, OfferingKey, ProviderError, UnavailableOfferings};

use crate::harness::Moto;
use crate::lifecycle::{provider, request};
use crate::proxy::Proxy;

#[tokio::test]
async fn refused_offerings_are_reported_and_the_launch_moves_on() {
    let Some(moto) = Moto::start("refused_offerings_are_reported_and_the_launch_moves_on") else {
        return;
    };
    let proxy = Proxy::start(&moto.url).await;
    let p = provider(&moto, &proxy.url, "f1").await;
    let subnets = p.resolve_class("default").await.unwrap().subnets.clone();
    // g5.xlarge has no capacity anywhere, g6.xlarge none in zone a.
    proxy.exhaust("g5.xlarge", None);
    proxy.exhaust("g6.xlarge", Some(&subnets["us-east-1a"]));

    // One fleet request: EC2 skips the refused pools, buys from the next, reports the refusals.
    let g5a = OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand);
    let g6a = OfferingKey::new("g6.xlarge", "us-east-1a", OnDemand);
    let g6b = OfferingKey::new("g6.xlarge", "us-east-1b", OnDemand);
    let launched = p
        .launch(&request(
            "ice-1",
            vec![g5a.clone(), g6a.clone(), g6b.clone()],
        ))
        .await
        .unwrap();
    assert_eq!(launched.instance.instance_type, "g6.xlarge");
    assert_eq!(launched.instance.zone, "us-east-1b");
    assert_eq!(launched.unavailable, vec![g5a.clone(), g6a.clone()]);
    assert_eq!(proxy.requests("CreateFleet"), 1);

    // The caller's cache keeps them out of the next plan for three minutes.
    let mut cache = UnavailableOfferings::default();
    cache.mark_all(launched.unavailable.clone(), 1000);
    let mut types = p.catalog(Some("default")).await.unwrap();
    cache.apply(&mut types, 1010);
    let off = |name: &str, zone: &str| {
        types
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == OnDemand)
            .unwrap()
            .available
    };
    assert!(!off("g5.xlarge", "us-east-1a"));
    assert!(!off("g6.xlarge", "us-east-1a"));
    assert!(off("g6.xlarge", "us-east-1b"));
    assert!(!cache.is_unavailable(&g5a, 1000 + UnavailableOfferings::DEFAULT_TTL_S));
}

#[tokio::test]
async fn a_fully_refused_request_is_retried_with_the_remaining_candidates() {
    let Some(moto) =
        Moto::start("a_fully_refused_request_is_retried_with_the_remaining_candidates")
    else {
        return;
    };
    let proxy = Proxy::start(&moto.url).await;
    let p = provider(&moto, &proxy.url, "f2").await;
    proxy.exhaust("g5.xlarge", None);
    // Spot first: its fleet request holds only the spot candidates, all refused; the launch
    // then asks for the on-demand ones.
    let spot_a = OfferingKey::new("g5.xlarge", "us-east-1a", Spot);
    let spot_b = OfferingKey::new("g5.xlarge", "us-east-1b", Spot);
    let od = OfferingKey::new("g6.xlarge", "us-east-1b", OnDemand);
    let launched = p
        .launch(&request(
            "ice-2",
            vec![spot_a.clone(), od.clone(), spot_b.clone()],
        ))
        .await
        .unwrap();
    assert_eq!(launched.instance.instance_type, "g6.xlarge");
    assert_eq!(launched.instance.capacity_type, OnDemand);
    assert_eq!(launched.unavailable, vec![spot_a.clone(), spot_b.clone()]);
    let fleets = proxy.fleets();
    assert_eq!(fleets.len(), 2, "{fleets:?}");
    assert_eq!(fleets[0].len(), 2);
    assert_eq!(fleets[1][0].0, "g6.xlarge");

    // Nothing left: InsufficientCapacity naming every refused candidate.
    proxy.exhaust("g6.xlarge", None);
    let r = p
        .launch(&request("ice-3", vec![spot_a.clone(), od.clone()]))
        .await;
    match r {
        Err(ProviderError::InsufficientCapacity { offerings, .. }) => {
            assert_eq!(offerings, vec![spot_a, od]);
        }
        other => panic!("{other:?}"),
    }

    // A whole call refused with an API error (EC2's 500 InsufficientInstanceCapacity) counts
    // for every offering of the request and is not retried as a server error.
    proxy.refuse_fleets(Some("InsufficientInstanceCapacity"));
    let before = proxy.requests("CreateFleet");
    let c = OfferingKey::new("m5.large", "us-east-1a", OnDemand);
    let r = p.launch(&request("ice-4", vec![c.clone()])).await;
    assert!(
        matches!(&r, Err(ProviderError::InsufficientCapacity { offerings, .. }) if offerings == &vec![c]),
        "{r:?}"
    );
    assert_eq!(proxy.requests("CreateFleet"), before + 1);
}

#[tokio::test]
async fn throttling_and_server_errors_are_retried_with_backoff() {
    let Some(moto) = Moto::start("throttling_and_server_errors_are_retried_with_backoff") else {
        return;
    };
    let proxy = Proxy::start(&moto.url).await;
    let p = provider(&moto, &proxy.url, "f3").await;
    p.catalog(Some("default")).await.unwrap();
    let (_, throttled0, retried0) = p.stats().snapshot();

    // Two throttles and a 500, then success.
    proxy.fail_next(2, Some("DescribeInstances"), 503, "RequestLimitExceeded");
    proxy.fail_next(1, Some("DescribeInstances"), 500, "InternalError");
    assert!(p.list().await.unwrap().is_empty());
    let (_, throttled, retried) = p.stats().snapshot();
    assert_eq!(throttled - throttled0, 2);
    assert_eq!(retried - retried0, 3);
    assert_eq!(proxy.requests("DescribeInstances"), 4);

    // A launch whose CreateFleet is throttled once still buys exactly one instance.
    proxy.fail_next(1, Some("CreateFleet"), 503, "RequestLimitExceeded");
    let launched = p
        .launch(&request(
            "thr-1",
            vec![OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand)],
        ))
        .await
        .unwrap();
    assert_eq!(proxy.requests("CreateFleet"), 2);
    assert_eq!(p.list().await.unwrap().len(), 1);
    assert_eq!(launched.instance.claim.as_deref(), Some("thr-1"));

    // Throttled past the attempts: a retryable Throttled error for the caller.
    proxy.fail_next(10, Some("TerminateInstances"), 503, "RequestLimitExceeded");
    let r = p.delete(&launched.instance.provider_id).await;
    assert!(matches!(r, Err(ProviderError::Throttled { .. })), "{r:?}");
    assert!(r.unwrap_err().is_retryable());
    assert_eq!(proxy.requests("TerminateInstances"), 4, "max_attempts");

    // A client error is not retried.
    let before = proxy.requests("DescribeInstances");
    proxy.fail_next(1, Some("DescribeInstances"), 400, "UnauthorizedOperation");
    let r = p.list().await;
    assert!(matches!(r, Err(ProviderError::Other { .. })), "{r:?}");
    assert_eq!(proxy.requests("DescribeInstances"), before + 1);
}

#[tokio::test]
async fn token_buckets_pace_calls_per_api_family() {
    let Some(moto) = Moto::start("token_buckets_pace_calls_per_api_family") else {
        return;
    };
    let mut s = moto.settings(&moto.url, "f4");
    s.limits = provider_aws::config::Limits {
        describe_per_second: 4,
        describe_burst: 1,
        mutate_per_second: 100,
        mutate_burst: 100,
    };
    let p = provider_aws::AwsProvider::connect(s).await.unwrap();
    let started = std::time::Instant::now();
    for _ in 0..5 {
        p.list().await.unwrap();
    }
    // One call at once, then one per 250 ms.
    let describe = started.elapsed();
    assert!(
        describe >= std::time::Duration::from_millis(900),
        "{describe:?}"
    );
    // The mutating bucket is separate and full: deletes do not wait behind describes.
    let started = std::time::Instant::now();
    for i in 0..5 {
        p.delete(&format!("aws:///us-east-1a/i-00000000000000{i:02}"))
            .await
            .unwrap();
    }
    assert!(started.elapsed() < describe, "{:?}", started.elapsed());
}

/// Requests per action between two snapshots of the proxy's counts.
fn delta(
    before: &std::collections::BTreeMap<String, u32>,
    after: &std::collections::BTreeMap<String, u32>,
) -> std::collections::BTreeMap<String, u32> {
    after
        .iter()
        .map(|(a, n)| (a.clone(), n - before.get(a).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Live (pending or running) instances moto holds per claim tag, asked of moto directly.
async fn live_per_claim(moto: &Moto, cluster: &str) -> std::collections::BTreeMap<String, usize> {
    let out = moto
        .client()
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:{}", providers::tags::CLUSTER))
                .values(cluster)
                .build(),
        )
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let mut per = std::collections::BTreeMap::new();
    for i in out.reservations().iter().flat_map(|r| r.instances()) {
        let claim = i
            .tags()
            .iter()
            .find(|t| t.key() == Some(providers::tags::CLAIM))
            .and_then(|t| t.value())
            .unwrap_or("")
            .to_string();
        *per.entry(claim).or_default() += 1;
    }
    per
}

/// The bound of `docs/src/reliability.md`: with warm caches a launch (one fleet request) makes
/// at most 3 EC2 requests (the claim's DescribeInstances, CreateFleet, the DescribeInstances
/// reading the instance back), a delete 1 (TerminateInstances), a get 1 (DescribeInstances),
/// and each request at most `retry.max_attempts` calls. Checked with every call throttled
/// (exactly the bound), then under faults at 30 % of calls (capacity, throttling, 5xx,
/// timeouts half after the effect): every operation within its bound, and never a second
/// instance for a claim (a CreateFleet retried after a lost answer reuses its ClientToken).
#[tokio::test]
async fn operations_stay_within_their_call_bounds_under_fault_rates() {
    let Some(moto) = Moto::start("operations_stay_within_their_call_bounds_under_fault_rates")
    else {
        return;
    };
    let proxy = Proxy::start(&moto.url).await;
    let class = moto
        .node_class("rates", &["us-east-1a", "us-east-1b"])
        .await;
    let mut s = moto.settings(&proxy.url, "rates");
    s.node_classes.insert("default".into(), class);
    // A timed-out attempt costs this long; the proxy holds such answers back for longer.
    s.timeouts.attempt_ms = 3000;
    let attempts = s.retry.max_attempts;
    let p = provider_aws::AwsProvider::connect(s).await.unwrap();
    let hang = std::time::Duration::from_millis(4000);
    let g5a = OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand);
    let g6b = OfferingKey::new("g6.xlarge", "us-east-1b", OnDemand);
    // Warm the caches (class, market, launch template): the bound is for a warm provider.
    let warm = p
        .launch(&request("warm", vec![g5a.clone(), g6b.clone()]))
        .await
        .unwrap();
    p.delete(&warm.instance.provider_id).await.unwrap();

    // A CreateFleet that took effect but whose answer was lost is retried with its
    // ClientToken, and EC2 (the proxy, where moto ignores tokens) answers with the first
    // call's instance: one instance, not two.
    proxy.lose_next_answer("CreateFleet");
    let fleets = proxy.requests("CreateFleet");
    let lost = p.launch(&request("lost", vec![g6b.clone()])).await.unwrap();
    assert_eq!(proxy.requests("CreateFleet"), fleets + 2);
    let tokens = proxy.fleet_tokens();
    assert_eq!(tokens[tokens.len() - 1], tokens[tokens.len() - 2]);
    assert_eq!(
        live_per_claim(&moto, "rates").await.get("lost"),
        Some(&1),
        "one instance for the claim"
    );
    p.delete(&lost.instance.provider_id).await.unwrap();

    // Every call throttled: each operation's first request is tried exactly max_attempts
    // times, then the operation fails as Throttled.
    proxy.fault_rates(
        providers::faults::CloudFaultRates {
            throttle: 1.0,
            ..Default::default()
        },
        1,
        hang,
    );
    let before = proxy.all_requests();
    let r = p.launch(&request("thr", vec![g5a.clone()])).await;
    assert!(matches!(r, Err(ProviderError::Throttled { .. })), "{r:?}");
    let d = delta(&before, &proxy.all_requests());
    assert_eq!(d.values().sum::<u32>(), attempts, "{d:?}");
    let before = proxy.all_requests();
    let r = p.delete(&warm.instance.provider_id).await;
    assert!(matches!(r, Err(ProviderError::Throttled { .. })), "{r:?}");
    assert_eq!(
        delta(&before, &proxy.all_requests()),
        [("TerminateInstances".to_string(), attempts)].into()
    );

    // 30 % of calls fault, evenly over the four kinds.
    proxy.fault_rates(providers::faults::CloudFaultRates::even(0.3), 7, hang);
    let (mut launched, mut failed) = (0, 0);
    for i in 0..12 {
        let claim = format!("rate-{i}");
        let before = proxy.all_requests();
        let tokens_before = proxy.fleet_tokens().len();
        let r = p
            .launch(&request(&claim, vec![g5a.clone(), g6b.clone()]))
            .await;
        let d = delta(&before, &proxy.all_requests());
        // Both candidates make one fleet request: every attempt of it carries one token.
        let tokens: std::collections::BTreeSet<String> = proxy
            .fleet_tokens()
            .split_off(tokens_before)
            .into_iter()
            .collect();
        assert!(tokens.len() <= 1, "launch {claim}: {tokens:?}");
        let fleets = d.get("CreateFleet").copied().unwrap_or(0);
        let describes = d.get("DescribeInstances").copied().unwrap_or(0);
        assert!(fleets <= attempts, "launch {claim}: {d:?} {r:?}");
        assert!(describes <= 2 * attempts, "launch {claim}: {d:?} {r:?}");
        assert_eq!(fleets + describes, d.values().sum::<u32>(), "{d:?}");
        let Ok(l) = r else {
            failed += 1;
            continue;
        };
        launched += 1;
        let pid = l.instance.provider_id.clone();
        let before = proxy.all_requests();
        let got = p.get(&pid).await;
        let d = delta(&before, &proxy.all_requests());
        assert!(d.get("DescribeInstances").copied().unwrap_or(0) <= attempts);
        assert_eq!(d.len(), 1, "get {pid}: {d:?} {got:?}");
        let before = proxy.all_requests();
        let del = p.delete(&pid).await;
        let d = delta(&before, &proxy.all_requests());
        assert!(
            d.get("TerminateInstances").copied().unwrap_or(0) <= attempts && d.len() == 1,
            "delete {pid}: {d:?} {del:?}"
        );
        // A failed delete leaves the instance running: a duplicate would show next to it.
        let _ = del;
    }
    let counts = proxy.fault_counts();
    eprintln!("launched {launched}, failed {failed}, faults {counts:?}");
    assert!(launched >= 6, "most launches get through: {launched} of 12");
    assert!(counts.total() >= 5, "{counts:?}");
    assert!(
        counts.insufficient_capacity + counts.timeouts_after >= 1,
        "{counts:?}"
    );
    // Never two live instances for one claim (each launch was retried through faults).
    let per = live_per_claim(&moto, "rates").await;
    assert!(per.values().all(|n| *n <= 1), "{per:?}");
}
