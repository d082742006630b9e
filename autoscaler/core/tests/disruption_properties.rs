//! Property tests: no disruption command ever violates a safety rule, budget or minimum, and
//! the pods of removed nodes always have room on what remains (checked independently of the
//! planner, by capacity accounting).

use std::collections::BTreeMap;

use autoscaler_core::builders::*;
use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, Method, plan_disruption};
use autoscaler_core::model::{Budget, BudgetValue, DisruptionPolicy, Pdb, Snapshot};
use autoscaler_core::requirements::{Operator, Requirements};
use autoscaler_core::resources::Resources;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct PodSpec {
    cpu: u32,
    app: u8,
    annotation: u8,
    bare: bool,
}

fn arb_pod() -> impl Strategy<Value = PodSpec> {
    (1u32..80, 0u8..3, 0u8..8, proptest::bool::weighted(0.1)).prop_map(
        |(cpu, app, annotation, bare)| PodSpec {
            cpu,
            app,
            annotation,
            bare,
        },
    )
}

fn build(
    nodes: &[Vec<PodSpec>],
    pdb_allowed: [i32; 3],
    budget: u32,
    min_nodes: u32,
    node_dnd: &[bool],
) -> Snapshot {
    let small = itype("c.4")
        .cpu("4")
        .mem("16Gi")
        .on_demand(&["z"], 0.2)
        .build();
    let big = itype("c.16")
        .cpu("16")
        .mem("64Gi")
        .on_demand(&["z"], 0.7)
        .build();
    let mut built = Vec::new();
    for (i, pods) in nodes.iter().enumerate() {
        let it = if i % 2 == 0 { &big } else { &small };
        let mut n = node(&format!("n{i}"), it, "z").pool("p");
        if node_dnd.get(i).copied().unwrap_or(false) {
            n = n.annotate("karpenter.sh/do-not-disrupt", "true");
        }
        for (j, p) in pods.iter().enumerate() {
            let mut b = pod(&format!("n{i}-p{j}"))
                .cpu(&format!("{}00m", p.cpu))
                .label("app", &format!("a{}", p.app));
            b = match p.annotation {
                0 => b.annotate("karpenter.sh/do-not-disrupt", "true"),
                1 => b.annotate("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
                _ => b,
            };
            if p.bare {
                b = b.owner(None);
            }
            // Only realistic nodes: never overcommitted.
            let mut used = Resources::new();
            for q in &n.0.pods {
                used.add(&q.requests);
            }
            used.add(&b.0.requests);
            if used.fits(&n.0.allocatable) {
                n = n.with_pod(b);
            }
        }
        built.push(n.build());
    }
    let policy = DisruptionPolicy {
        unneeded_s: 0,
        budgets: vec![Budget {
            nodes: BudgetValue::Count(budget),
            reasons: vec![],
        }],
        ..DisruptionPolicy::default()
    };
    Snapshot {
        nodes: built,
        pools: vec![
            pool("p", vec![small, big])
                .disruption(policy)
                .min_nodes(min_nodes)
                .build(),
        ],
        pdbs: (0..3)
            .map(|a| Pdb {
                namespace: "default".into(),
                name: format!("a{a}"),
                selector: Requirements::new().with("app", Operator::In, &[&format!("a{a}")]),
                disruptions_allowed: pdb_allowed[a],
            })
            .collect(),
        ..Snapshot::default()
    }
}

fn check(snap: &Snapshot) -> Result<(), String> {
    let plan = plan_disruption(
        snap,
        &DisruptionState::default(),
        0,
        &DisruptionConfig::default(),
    );
    let mut removed: Vec<&str> = Vec::new();
    let mut replacements = 0;
    let mut pdb_used: BTreeMap<String, i32> = BTreeMap::new();
    for c in &plan.commands {
        if c.method == Method::Replace {
            replacements += 1;
            if c.replacement.is_none() {
                return Err("replace without replacement".into());
            }
        }
        let old_cost: f64 = c
            .nodes
            .iter()
            .map(|n| {
                snap.nodes
                    .iter()
                    .find(|x| &x.name == n)
                    .unwrap()
                    .price
                    .unwrap()
            })
            .sum();
        // Every offering the launch may fall back to, not only the cheapest, is cheaper.
        if let Some(r) = &c.replacement
            && let Some(p) = r
                .instance_types
                .iter()
                .flat_map(|o| o.offerings.iter().map(|x| x.2))
                .chain([r.price])
                .find(|p| *p >= old_cost)
        {
            return Err(format!("replacement not cheaper: {p} >= {old_cost}"));
        }
        for name in &c.nodes {
            let n = snap
                .nodes
                .iter()
                .find(|x| &x.name == name)
                .ok_or("unknown node")?;
            if n.annotations.contains_key("karpenter.sh/do-not-disrupt") {
                return Err(format!("{name} has do-not-disrupt"));
            }
            for p in &n.pods {
                let a = |k: &str| p.annotations.get(k).map(String::as_str);
                if a("karpenter.sh/do-not-disrupt") == Some("true")
                    || a("cluster-autoscaler.kubernetes.io/safe-to-evict") == Some("false")
                    || p.owner_kind.is_none()
                {
                    return Err(format!("{name} holds protected pod {}", p.key));
                }
                for b in &snap.pdbs {
                    if b.selector.matches(&p.labels) {
                        *pdb_used.entry(b.name.clone()).or_default() += 1;
                    }
                }
            }
            removed.push(name);
        }
    }
    for b in &snap.pdbs {
        if pdb_used.get(&b.name).copied().unwrap_or(0) > b.disruptions_allowed.max(0) {
            return Err(format!("PDB {} exceeded", b.name));
        }
    }
    let pool = &snap.pools[0];
    let BudgetValue::Count(budget) = pool.disruption.budgets[0].nodes else {
        unreachable!()
    };
    if removed.len() > budget as usize {
        return Err(format!(
            "{} nodes disrupted with budget {budget}",
            removed.len()
        ));
    }
    let remaining = snap.nodes.len() - removed.len() + replacements;
    if remaining < pool.min_nodes as usize && !removed.is_empty() {
        return Err(format!("below minNodes: {remaining}"));
    }
    // Room for the moved pods: on remaining nodes plus replacements, by capacity.
    if replacements == 0 {
        let mut moved = Resources::new();
        let mut free = Resources::new();
        for n in &snap.nodes {
            let mut used = Resources::new();
            for p in &n.pods {
                used.add(&p.requests);
            }
            if removed.contains(&n.name.as_str()) {
                moved.add(&used);
            } else {
                free.add(&n.allocatable.minus(&used));
            }
        }
        if !moved.fits(&free) {
            return Err(format!("moved {moved} exceeds free {free}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]
    #[test]
    fn disruption_is_always_safe(nodes in proptest::collection::vec(proptest::collection::vec(arb_pod(), 0..4), 1..7),
                                 pdb in proptest::array::uniform3(0i32..3),
                                 budget in 0u32..4,
                                 min_nodes in 0u32..3,
                                 dnd in proptest::collection::vec(proptest::bool::weighted(0.15), 7)) {
        let snap = build(&nodes, pdb, budget, min_nodes, &dnd);
        if let Err(e) = check(&snap) {
            let plan = plan_disruption(&snap, &DisruptionState::default(), 0, &DisruptionConfig::default());
            prop_assert!(false, "{e}\n{}", plan.render());
        }
    }
}
