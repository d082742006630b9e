//! Random pods with topology spread and pod (anti-)affinity over capacity type, arch, a label
//! two NodePools define, zone and hostname, on clusters with labelled running nodes: the
//! planner never panics, answers the same twice, accounts for every pod once, and never puts
//! two pods on one new claim when one's required anti-affinity selects the other (one node is
//! one domain of every key).

use std::collections::BTreeMap;

use autoscaler_core::builders::*;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{Pod, Snapshot};
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::requirements::Operator;
use proptest::prelude::*;

mod support;
use support::{cpu_types, with_spot};

/// `cpu_types` with spot offerings at 40 % of the on-demand price, and two arm64 types.
fn catalog() -> Vec<InstanceType> {
    let mut types: Vec<InstanceType> = cpu_types().into_iter().map(with_spot).collect();
    for (name, cpu, price) in [("a1.large", "2", 0.08), ("a1.xlarge", "4", 0.16)] {
        let mut t = itype(name)
            .cpu(cpu)
            .mem("8Gi")
            .label(labels::ARCH, "arm64")
            .on_demand(&support::ZONES, price)
            .build();
        t.arch = "arm64".into();
        types.push(t);
    }
    types
}

const KEYS: [&str; 5] = [
    labels::CAPACITY_TYPE,
    labels::ARCH,
    "capacity-spread",
    labels::ZONE,
    labels::HOSTNAME,
];
const APPS: [&str; 3] = ["a", "b", "c"];

/// One pod: cpu (tenths), its app, and its rules: (kind 0 spread / 1 affinity / 2 anti, key,
/// app selected, max skew).
type PodSpec = (u32, usize, Vec<(u8, usize, usize, u32)>);

fn arb_pod() -> impl Strategy<Value = PodSpec> {
    (
        1u32..30,
        0usize..APPS.len(),
        proptest::collection::vec(
            (0u8..3, 0usize..KEYS.len(), 0usize..APPS.len(), 1u32..3),
            0..3,
        ),
    )
}

fn build(specs: &[PodSpec], running: &[(usize, usize, usize)]) -> Snapshot {
    let pending = specs
        .iter()
        .enumerate()
        .map(|(i, (cpu, app, rules))| {
            let mut b = pod(&format!("p{i:03}"))
                .cpu(&format!("{cpu}00m"))
                .label("app", APPS[*app]);
            for (kind, key, target, skew) in rules {
                b = match kind {
                    0 => b.spread(KEYS[*key], *skew, APPS[*target]),
                    1 => b.affinity(KEYS[*key], APPS[*target]),
                    _ => b.anti_affinity(KEYS[*key], APPS[*target]),
                };
            }
            b.build()
        })
        .collect();
    let types = catalog();
    let nodes = running
        .iter()
        .enumerate()
        .map(|(n, (t, ct, app))| {
            let it = &types[t % types.len()];
            node(&format!("n{n}"), it, support::ZONES[n % 3])
                .label(labels::CAPACITY_TYPE, ["spot", "on-demand"][ct % 2])
                .with_pod(
                    pod(&format!("r{n}"))
                        .cpu("500m")
                        .label("app", APPS[app % APPS.len()]),
                )
                .build()
        })
        .collect();
    Snapshot {
        pending,
        nodes,
        pools: vec![
            pool("spot", catalog())
                .require(labels::CAPACITY_TYPE, Operator::In, &["spot"])
                .require("capacity-spread", Operator::In, &["2", "3"])
                .build(),
            pool("od", catalog())
                .require(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])
                .require("capacity-spread", Operator::In, &["1"])
                .build(),
        ],
        ..Snapshot::default()
    }
}

fn verify(snap: &Snapshot) -> Result<(), String> {
    let plan = plan_provisioning(snap);
    if plan != plan_provisioning(snap) {
        return Err("plan is not deterministic".into());
    }
    let total = plan.existing.len()
        + plan.in_flight.len()
        + plan.new_claims.iter().map(|c| c.pods.len()).sum::<usize>()
        + plan.unschedulable.len();
    if total != snap.pending.len() {
        return Err(format!("{total} outcomes for {} pods", snap.pending.len()));
    }
    let by_key: BTreeMap<_, &Pod> = snap.pending.iter().map(|p| (p.key.clone(), p)).collect();
    for c in &plan.new_claims {
        let pods: Vec<&Pod> = c.pods.iter().map(|k| by_key[k]).collect();
        for a in &pods {
            for b in pods.iter().filter(|b| b.key != a.key) {
                if a.anti_affinity
                    .iter()
                    .any(|t| t.selector.matches(&b.labels))
                {
                    return Err(format!(
                        "{} and {} share claim {} though {}'s anti-affinity selects {}",
                        a.key, b.key, c.name, a.key, b.key
                    ));
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn topology_rules_over_any_key_keep_the_planner_sound(
        specs in proptest::collection::vec(arb_pod(), 0..20),
        running in proptest::collection::vec((0usize..6, 0usize..2, 0usize..3), 0..6),
    ) {
        let snap = build(&specs, &running);
        if let Err(e) = verify(&snap) {
            prop_assert!(false, "{e}\n{}", plan_provisioning(&snap).render());
        }
    }
}
