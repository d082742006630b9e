//! Property tests of the planner's invariants, checked by an independent verifier: every
//! placed pod fits in every resource, tolerates every taint and matches its selectors on every
//! instance type its claim may become; no NodePool limit is exceeded; plans are deterministic.

use std::collections::BTreeMap;

use autoscaler_core::builders::*;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{GpuSharing, Group, Pod, Snapshot};
use autoscaler_core::provision::{
    PlanOptions, ShapeCache, plan_cached, plan_provisioning, plan_with,
};
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::Resources;
use autoscaler_core::taints::untolerated;
use proptest::prelude::*;

const ZONES: [&str; 2] = ["z1", "z2"];

fn catalog() -> Vec<InstanceType> {
    vec![
        itype("c.small")
            .cpu("2")
            .mem("4Gi")
            .max_pods(8)
            .on_demand(&ZONES, 0.1)
            .build(),
        itype("c.big")
            .cpu("16")
            .mem("32Gi")
            .on_demand(&ZONES, 0.7)
            .build(),
        itype("g.one")
            .cpu("8")
            .mem("32Gi")
            .gpus(1, "L4", 24)
            .on_demand(&ZONES, 0.9)
            .build(),
        itype("g.four")
            .cpu("48")
            .mem("192Gi")
            .gpus(4, "L4", 24)
            .on_demand(&["z1"], 3.4)
            .build(),
        itype("h.eight")
            .cpu("96")
            .mem("1024Gi")
            .gpus(8, "H100", 80)
            .on_demand(&["z2"], 90.0)
            .build(),
    ]
}

#[derive(Debug, Clone)]
struct PodSpec {
    cpu: u32,
    mem_gi: u32,
    gpus: u32,
    share: u32,
    model: Option<&'static str>,
    zone: Option<&'static str>,
    tolerate: bool,
    group: Option<u8>,
}

fn arb_pod() -> impl Strategy<Value = PodSpec> {
    (
        1u32..20,
        0u32..40,
        prop_oneof![Just(0u32), Just(0), Just(1), Just(2), Just(4), Just(8)],
        prop_oneof![Just(0u32), Just(0), Just(300), Just(700)],
        proptest::option::of(prop_oneof![Just("l4"), Just("h100")]),
        proptest::option::of(prop_oneof![Just("z1"), Just("z2")]),
        any::<bool>(),
        proptest::option::of(0u8..2),
    )
        .prop_map(
            |(cpu, mem_gi, gpus, share, model, zone, tolerate, group)| PodSpec {
                cpu,
                mem_gi,
                gpus,
                share: if gpus > 0 { 0 } else { share },
                model,
                zone,
                tolerate,
                group,
            },
        )
}

fn build(specs: &[PodSpec], gpu_limit: Option<u32>, tainted: bool, existing: bool) -> Snapshot {
    let mut pods = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let mut b = pod(&format!("p{i:03}"))
            .cpu(&format!("{}00m", s.cpu))
            .mem(&format!("{}Gi", s.mem_gi));
        if s.gpus > 0 {
            b = b.gpus(i64::from(s.gpus));
        }
        if s.share > 0 {
            b = b.gpu_share(s.share);
        }
        if let Some(m) = s.model {
            b = b.model(m);
        }
        if let Some(z) = s.zone {
            b = b.select(labels::ZONE, z);
        }
        if !s.tolerate {
            b.0.tolerations.clear();
        }
        if let Some(g) = s.group {
            b = b.group(&format!("g{g}"));
        }
        pods.push(b.build());
    }
    let mut gpu = pool("gpu", catalog()).sharing(GpuSharing {
        fractional: true,
        ..GpuSharing::default()
    });
    if tainted {
        gpu = gpu.taint("nvidia.com/gpu", "present");
    }
    if let Some(l) = gpu_limit {
        gpu = gpu.limit("nvidia.com/gpu", &l.to_string()).limit_nodes(6);
    }
    let mut snap = Snapshot {
        pending: pods,
        pools: vec![
            gpu.build(),
            pool("cpu", catalog()[..2].to_vec())
                .limit("cpu", "40")
                .build(),
        ],
        ..Snapshot::default()
    };
    snap.daemonsets
        .push(daemonset("ds", "200m", "256Mi", vec![]));
    for g in 0..2 {
        snap.groups.insert(
            format!("g{g}"),
            Group {
                name: format!("g{g}"),
                min_count: 2,
            },
        );
    }
    if existing {
        let it = &catalog()[1];
        snap.nodes.push(
            node("n1", it, "z1")
                .pool("cpu")
                .with_pod(pod("old").cpu("10"))
                .build(),
        );
    }
    snap
}

/// Labels a node of `it` in `zone` from `pool` would carry.
fn node_labels(it: &InstanceType, pool: &str, zone: &str) -> Labels {
    let mut l = it.labels.clone();
    l.insert(labels::ZONE.into(), zone.into());
    l.insert(labels::NODEPOOL.into(), pool.into());
    l.insert(labels::CAPACITY_TYPE.into(), "on-demand".into());
    l
}

fn sum_requests(pods: &[&Pod]) -> Resources {
    let mut r = Resources::new();
    let mut shares: Vec<u32> = Vec::new();
    for p in pods {
        r.add(&p.requests);
        if let Some(s) = &p.gpu_share {
            shares.push(s.milli);
        }
    }
    // Any packing of shares onto devices needs at least ceil(sum/1000) devices, and no share
    // may split, so at least one device per share above 500.
    let total: u32 = shares.iter().sum();
    let big = shares.iter().filter(|s| **s > 500).count() as i64;
    let devices = i64::from(total.div_ceil(1000)).max(big);
    let cur = r.get("nvidia.com/gpu");
    r.set("nvidia.com/gpu", cur + devices);
    r
}

fn verify(snap: &Snapshot) -> Result<(), String> {
    let plan = plan_provisioning(snap);
    if plan != plan_provisioning(snap) {
        return Err("plan is not deterministic".into());
    }
    let by_key: BTreeMap<_, _> = snap.pending.iter().map(|p| (p.key.clone(), p)).collect();
    let total = plan.existing.len()
        + plan.in_flight.len()
        + plan.new_claims.iter().map(|c| c.pods.len()).sum::<usize>()
        + plan.unschedulable.len();
    if total != snap.pending.len() {
        return Err(format!("{total} outcomes for {} pods", snap.pending.len()));
    }
    let mut gpus_by_pool: BTreeMap<&str, i64> = BTreeMap::new();
    let mut nodes_by_pool: BTreeMap<&str, i64> = BTreeMap::new();
    let mut cpu_by_pool: BTreeMap<&str, i64> = BTreeMap::new();
    for c in &plan.new_claims {
        let pool = snap
            .pools
            .iter()
            .find(|p| p.name == c.pool)
            .ok_or("claim of unknown pool")?;
        let pods: Vec<&Pod> = c.pods.iter().map(|k| by_key[k]).collect();
        let need = sum_requests(&pods);
        if c.instance_types.is_empty() {
            return Err(format!("claim {} has no instance type", c.name));
        }
        let mut max_gpu = 0;
        let mut max_cpu = 0;
        for opt in &c.instance_types {
            let it = pool
                .instance_types
                .iter()
                .find(|t| *t.name == *opt.instance_type)
                .ok_or("unknown type")?;
            let mut alloc = it.allocatable();
            let ds = &snap.daemonsets[0];
            if untolerated(&ds.tolerations, &pool.taints).is_none() {
                alloc.sub(&ds.requests);
            }
            if !need.fits(&alloc) {
                return Err(format!(
                    "claim {} pods {need} do not fit {}",
                    c.name, it.name
                ));
            }
            max_gpu = max_gpu.max(it.capacity.get("nvidia.com/gpu"));
            max_cpu = max_cpu.max(it.capacity.cpu);
            for (zone, _, _) in opt.offerings.iter() {
                let l = node_labels(it, &pool.name, zone);
                for p in &pods {
                    if !p.node_selector.matches(&l) {
                        return Err(format!("{} does not match {} in {zone}", p.key, it.name));
                    }
                    if let Some(t) = untolerated(&p.tolerations, &pool.taints) {
                        return Err(format!("{} does not tolerate {t}", p.key));
                    }
                }
            }
        }
        *gpus_by_pool.entry(&pool.name).or_default() += max_gpu;
        *cpu_by_pool.entry(&pool.name).or_default() += max_cpu;
        *nodes_by_pool.entry(&pool.name).or_default() += 1;
    }
    for pool in &snap.pools {
        if let Some(l) = pool.limits.resources.get("nvidia.com/gpu")
            && gpus_by_pool.get(pool.name.as_str()).copied().unwrap_or(0) > *l
        {
            return Err(format!("pool {} gpu limit exceeded", pool.name));
        }
        if let Some(l) = pool.limits.nodes
            && nodes_by_pool.get(pool.name.as_str()).copied().unwrap_or(0) > l
        {
            return Err(format!("pool {} node limit exceeded", pool.name));
        }
        if let Some(l) = pool.limits.resources.get("cpu") {
            let existing: i64 = snap
                .nodes
                .iter()
                .filter(|n| n.pool.as_deref() == Some(&pool.name))
                .map(|n| n.allocatable.cpu)
                .sum();
            if existing + cpu_by_pool.get(pool.name.as_str()).copied().unwrap_or(0) > *l {
                return Err(format!("pool {} cpu limit exceeded", pool.name));
            }
        }
    }
    // Existing placements fit the node's free capacity.
    for n in &snap.nodes {
        let mut on: Vec<&Pod> = n.pods.iter().collect();
        on.extend(
            plan.existing
                .iter()
                .filter(|p| p.target == n.name)
                .map(|p| by_key[&p.pod]),
        );
        if !sum_requests(&on).fits(&n.allocatable) {
            return Err(format!("node {} overcommitted", n.name));
        }
    }
    // Groups: at least min_count members placed, or none.
    for (g, group) in &snap.groups {
        let members: Vec<&Pod> = snap
            .pending
            .iter()
            .filter(|p| p.group.as_deref() == Some(g))
            .collect();
        let unplaced = members
            .iter()
            .filter(|p| plan.unschedulable.iter().any(|u| u.pod == p.key))
            .count();
        let placed = members.len() - unplaced;
        let min = (group.min_count as usize).min(members.len());
        if placed > 0 && placed < min {
            return Err(format!("group {g} has {placed} of {min} members placed"));
        }
    }
    // Placement groups: a claim names a group exactly when all its pods are that group's, the
    // group has at least two such claims, and those claims offer one zone between them (cloud
    // placement groups are zonal) — an independent restatement of the rule.
    let only_group = |c: &autoscaler_core::plan::NewClaim| -> Option<String> {
        let first = by_key[&c.pods[0]].group.clone()?;
        c.pods
            .iter()
            .all(|k| by_key[k].group.as_ref() == Some(&first))
            .then_some(first)
    };
    for c in &plan.new_claims {
        let expected = only_group(c).filter(|g| {
            let mine: Vec<_> = plan
                .new_claims
                .iter()
                .filter(|o| only_group(o).as_ref() == Some(g))
                .collect();
            let zones: std::collections::BTreeSet<&str> = mine
                .iter()
                .flat_map(|o| o.instance_types.iter())
                .flat_map(|t| t.offerings.iter().map(|x| &*x.0))
                .collect();
            mine.len() >= 2 && zones.len() == 1
        });
        if c.group != expected {
            return Err(format!(
                "claim {} names group {:?}, expected {expected:?}",
                c.name, c.group
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn planner_invariants_hold(specs in proptest::collection::vec(arb_pod(), 0..25),
                               limit in proptest::option::of(0u32..20),
                               tainted in any::<bool>(),
                               existing in any::<bool>()) {
        let snap = build(&specs, limit, tainted, existing);
        if let Err(e) = verify(&snap) {
            prop_assert!(false, "{e}\n{}", plan_provisioning(&snap).render());
        }
    }
}

/// Under a limit on new claims (`PlanOptions::max_new_claims`), every pending pod is still
/// accounted for exactly once (placed, unschedulable or deferred), none is refused that the
/// plan without a limit helps; without all-or-nothing
/// groups the plan holds at most the limit; and a plan that needed no more than the limit is
/// the plan without one.
fn verify_limited(snap: &Snapshot, limit: usize) -> Result<(), String> {
    let options = PlanOptions {
        max_new_claims: limit,
        ..PlanOptions::default()
    };
    let plan = plan_with(snap, &options);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let keys = plan
        .existing
        .iter()
        .chain(&plan.in_flight)
        .map(|p| &p.pod)
        .chain(plan.new_claims.iter().flat_map(|c| &c.pods))
        .chain(plan.unschedulable.iter().map(|u| &u.pod))
        .chain(&plan.deferred);
    for k in keys {
        *seen.entry(k.to_string()).or_default() += 1;
    }
    for p in &snap.pending {
        let n = seen.remove(&p.key.to_string()).unwrap_or(0);
        if n != 1 {
            return Err(format!("pod {} is in the plan {n} times", p.key));
        }
    }
    if let Some(k) = seen.keys().next() {
        return Err(format!("pod {k} is in the plan but not pending"));
    }
    let grouped = snap.pending.iter().any(|p| p.group.is_some());
    if !grouped && plan.new_claims.len() > limit {
        return Err(format!(
            "{} new claims over a limit of {limit}",
            plan.new_claims.len()
        ));
    }
    let whole = plan_provisioning(snap);
    // No topology here, and a NodePool's limit only refuses more as more claims open: the
    // limit on claims defers pods but never refuses one the unlimited plan helps.
    for u in &plan.unschedulable {
        if !whole.unschedulable.iter().any(|w| w.pod == u.pod) {
            return Err(format!(
                "pod {} is refused under the limit ({}) but placed without it",
                u.pod, u.reason
            ));
        }
    }
    // A deferred pod can be helped: the unlimited plan places it, or refuses it only because
    // its own claims used up a NodePool's limit first.
    for d in &plan.deferred {
        if whole
            .unschedulable
            .iter()
            .any(|w| w.pod == *d && w.limited_by.is_empty())
        {
            return Err(format!(
                "pod {d} is deferred under the limit but refused without it"
            ));
        }
    }
    if whole.new_claims.len() <= limit && plan != whole {
        return Err(format!(
            "the plan fits the limit of {limit} but differs from the unlimited one:\n{}",
            whole.render()
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn a_limit_on_new_claims_defers_and_never_loses_a_pod(
        specs in proptest::collection::vec(arb_pod(), 0..25),
        limit in 0usize..6,
        tainted in any::<bool>(),
        existing in any::<bool>(),
    ) {
        let snap = build(&specs, None, tainted, existing);
        if let Err(e) = verify_limited(&snap, limit) {
            let options = PlanOptions { max_new_claims: limit, ..PlanOptions::default() };
            prop_assert!(false, "{e}\n{}", plan_with(&snap, &options).render());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    /// A caller's shape cache changes no plan: one cache through a run of snapshots whose
    /// pools change now and then (a pool tainted, an offering gone) plans each as a fresh
    /// planner does.
    #[test]
    fn plans_with_a_shape_cache_equal_plans_without(
        rounds in proptest::collection::vec(
            (proptest::collection::vec(arb_pod(), 0..12), any::<bool>(), any::<bool>(), any::<bool>()),
            1..6,
        ),
    ) {
        let mut cache = ShapeCache::default();
        let options = PlanOptions::default();
        for (specs, tainted, existing, drop_offering) in rounds {
            let mut snap = build(&specs, None, tainted, existing);
            if drop_offering {
                for p in &mut snap.pools {
                    for t in std::sync::Arc::make_mut(&mut p.instance_types) {
                        t.offerings.truncate(1);
                    }
                }
            }
            let cached = plan_cached(&snap, &options, &mut cache);
            let fresh = plan_with(&snap, &options);
            prop_assert_eq!(&cached, &fresh, "{}\n{}", cached.render(), fresh.render());
        }
    }
}

/// A pool that keeps its catalog (the same `Arc`, so the cache compares no entry) but changes a
/// label is a different pool: the cache builds its shapes again.
#[test]
fn a_shape_cache_sees_a_changed_pool_that_shares_its_catalog() {
    use autoscaler_core::requirements::Operator;
    let before = pool("p", catalog()).label("team", "a").build();
    let mut after = before.clone();
    after.labels.insert("team".into(), "b".into());
    assert!(std::sync::Arc::ptr_eq(
        &before.instance_types,
        &after.instance_types
    ));
    let snap = |p: autoscaler_core::model::Pool| Snapshot {
        pending: vec![
            pod("wants-b")
                .cpu("1")
                .require("team", Operator::In, &["b"])
                .build(),
        ],
        pools: vec![p],
        ..Snapshot::default()
    };
    let mut cache = ShapeCache::default();
    let options = PlanOptions::default();
    let first = plan_cached(&snap(before), &options, &mut cache);
    assert_eq!((first.new_claims.len(), first.unschedulable.len()), (0, 1));
    let second = plan_cached(&snap(after.clone()), &options, &mut cache);
    assert_eq!(second, plan_with(&snap(after), &options));
    assert_eq!(
        (second.new_claims.len(), second.unschedulable.len()),
        (1, 0)
    );
}

/// Two pods of one size that cannot both be placed (one GPU allowed, in different zones): the
/// one first by name is, whichever order the snapshot lists them in.
#[test]
fn equal_sized_pods_are_taken_by_name() {
    let spec = |zone| PodSpec {
        cpu: 10,
        mem_gi: 4,
        gpus: 1,
        share: 0,
        model: None,
        zone: Some(zone),
        tolerate: true,
        group: None,
    };
    let snap = build(&[spec("z1"), spec("z2")], Some(1), false, false);
    let mut reversed = snap.clone();
    reversed.pending.reverse();
    for s in [&snap, &reversed] {
        let plan = plan_provisioning(s);
        let placed: Vec<&str> = plan
            .new_claims
            .iter()
            .flat_map(|c| c.pods.iter().map(|k| k.name.as_str()))
            .collect();
        assert_eq!(placed, ["p000"], "{}", plan.render());
    }
}
