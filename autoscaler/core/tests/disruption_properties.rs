//! Property tests: no disruption command ever violates a safety rule, budget or minimum, and
//! the pods of removed nodes always have a place on what remains plus the replacements
//! (checked independently of the planner, by an exact search over pod placements).

use std::collections::BTreeMap;

use autoscaler_core::builders::*;
use autoscaler_core::disruption::{
    DisruptionCache, DisruptionConfig, DisruptionState, Method, plan_disruption,
    plan_disruption_cached,
};
use autoscaler_core::model::{
    Budget, BudgetValue, DisruptionPolicy, DisruptionReason, Pdb, Snapshot,
};
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
    (1u32..80, 0u8..3, 0u8..12, proptest::bool::weighted(0.1)).prop_map(
        |(cpu, app, annotation, bare)| PodSpec {
            cpu,
            app,
            annotation,
            bare,
        },
    )
}

/// What may keep a node from being disrupted, drawn per node.
#[derive(Debug, Clone, Copy)]
enum NodeFlag {
    None,
    DoNotDisrupt,
    ScaleDownDisabled,
    Uninitialized,
    Booked,
    MigPending,
}

fn arb_flag() -> impl Strategy<Value = NodeFlag> {
    prop_oneof![
        10 => Just(NodeFlag::None),
        1 => Just(NodeFlag::DoNotDisrupt),
        1 => Just(NodeFlag::ScaleDownDisabled),
        1 => Just(NodeFlag::Uninitialized),
        1 => Just(NodeFlag::Booked),
        1 => Just(NodeFlag::MigPending),
    ]
}

/// A budget as a count or a percent, for every reason or only some.
#[derive(Debug, Clone, Copy)]
struct BudgetSpec {
    value: u32,
    percent: bool,
    underutilized_only: bool,
}

fn arb_budget() -> impl Strategy<Value = BudgetSpec> {
    (
        0u32..4,
        0u32..80,
        proptest::bool::weighted(0.3),
        proptest::bool::weighted(0.3),
    )
        .prop_map(|(count, pct, percent, underutilized_only)| BudgetSpec {
            value: if percent { pct } else { count },
            percent,
            underutilized_only,
        })
}

fn build(
    nodes: &[Vec<PodSpec>],
    pdb_allowed: [i32; 3],
    budget: BudgetSpec,
    min_nodes: u32,
    flags: &[NodeFlag],
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
    let mut booked = std::collections::BTreeSet::new();
    for (i, pods) in nodes.iter().enumerate() {
        let it = if i % 2 == 0 { &big } else { &small };
        let name = format!("n{i}");
        let mut n = node(&name, it, "z").pool("p");
        match flags.get(i).copied().unwrap_or(NodeFlag::None) {
            NodeFlag::None => {}
            NodeFlag::DoNotDisrupt => n = n.annotate("karpenter.sh/do-not-disrupt", "true"),
            NodeFlag::ScaleDownDisabled => {
                n = n.annotate(
                    "cluster-autoscaler.kubernetes.io/scale-down-disabled",
                    "true",
                );
            }
            NodeFlag::Uninitialized => n = n.initialized(false),
            NodeFlag::Booked => {
                booked.insert(name.clone());
            }
            NodeFlag::MigPending => n = n.label("nvidia.com/mig.config.state", "pending"),
        }
        for (j, p) in pods.iter().enumerate() {
            let mut b = pod(&format!("n{i}-p{j}"))
                .cpu(&format!("{}00m", p.cpu))
                .label("app", &format!("a{}", p.app));
            b = match p.annotation {
                0 => b.annotate("karpenter.sh/do-not-disrupt", "true"),
                1 => b.annotate("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
                // An explicit safe-to-evict overrides the other pod rules.
                2 => b.annotate("cluster-autoscaler.kubernetes.io/safe-to-evict", "true"),
                3 => {
                    b.0.local_storage = true;
                    b
                }
                4 => b.ns("kube-system"),
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
            nodes: if budget.percent {
                BudgetValue::Percent(budget.value)
            } else {
                BudgetValue::Count(budget.value)
            },
            reasons: if budget.underutilized_only {
                vec![DisruptionReason::Underutilized]
            } else {
                vec![]
            },
            schedule: None,
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
        booked_nodes: booked,
        ..Snapshot::default()
    }
}

/// Whether pods of these CPU sizes fit into bins with this much free CPU: an exhaustive
/// search (biggest pods first, bins of equal room tried once), independent of the planner.
fn packs(pods: &mut [i64], bins: &mut [i64]) -> bool {
    pods.sort_unstable_by(|a, b| b.cmp(a));
    fn place(pods: &[i64], bins: &mut [i64]) -> bool {
        let Some((&p, rest)) = pods.split_first() else {
            return true;
        };
        let mut tried: Vec<i64> = Vec::new();
        for i in 0..bins.len() {
            if bins[i] < p || tried.contains(&bins[i]) {
                continue;
            }
            tried.push(bins[i]);
            bins[i] -= p;
            if place(rest, bins) {
                return true;
            }
            bins[i] += p;
        }
        false
    }
    place(pods, bins)
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
            if n.annotations.contains_key("karpenter.sh/do-not-disrupt")
                || n.annotations
                    .contains_key("cluster-autoscaler.kubernetes.io/scale-down-disabled")
            {
                return Err(format!("{name} is annotated against disruption"));
            }
            if !n.initialized
                || snap.booked_nodes.contains(name)
                || n.labels.contains_key("nvidia.com/mig.config.state")
            {
                return Err(format!(
                    "{name} is uninitialized, booked or reconfiguring MIG"
                ));
            }
            for p in &n.pods {
                let a = |k: &str| p.annotations.get(k).map(String::as_str);
                let evictable = a("cluster-autoscaler.kubernetes.io/safe-to-evict") == Some("true");
                let has_pdb = snap
                    .pdbs
                    .iter()
                    .any(|b| b.namespace == p.key.namespace && b.selector.matches(&p.labels));
                if a("karpenter.sh/do-not-disrupt") == Some("true")
                    || a("cluster-autoscaler.kubernetes.io/safe-to-evict") == Some("false")
                    || (!evictable
                        && (p.owner_kind.is_none()
                            || p.local_storage
                            || (p.key.namespace == "kube-system" && !has_pdb)))
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
    let b = &pool.disruption.budgets[0];
    let budget = match b.nodes {
        BudgetValue::Count(n) => n as usize,
        BudgetValue::Percent(p) => (snap.nodes.len() * p as usize).div_ceil(100),
    };
    for reason in [DisruptionReason::Empty, DisruptionReason::Underutilized] {
        let by_reason: usize = plan
            .commands
            .iter()
            .filter(|c| c.reason == reason)
            .map(|c| c.nodes.len())
            .sum();
        let limit = if b.reasons.is_empty() || b.reasons.contains(&reason) {
            budget
        } else {
            usize::MAX
        };
        if by_reason > limit {
            return Err(format!(
                "{by_reason} nodes disrupted for {reason:?} with budget {limit}"
            ));
        }
    }
    let remaining = snap.nodes.len() - removed.len() + replacements;
    if remaining < pool.min_nodes as usize && !removed.is_empty() {
        return Err(format!("below minNodes: {remaining}"));
    }
    // A place for every moved pod, pod by pod: on the remaining nodes (not cordoned or being
    // deleted) and on the replacements' smallest option.
    let mut moved: Vec<i64> = Vec::new();
    let mut bins: Vec<i64> = Vec::new();
    for n in &snap.nodes {
        let used: i64 = n.pods.iter().map(|p| p.requests.get("cpu")).sum();
        if removed.contains(&n.name.as_str()) {
            moved.extend(n.pods.iter().map(|p| p.requests.get("cpu")));
        } else if !n.unschedulable && !n.deleting {
            bins.push(n.allocatable.get("cpu") - used);
        }
    }
    for c in &plan.commands {
        if let Some(r) = &c.replacement {
            let smallest = r
                .instance_types
                .iter()
                .filter_map(|o| {
                    pool.instance_types
                        .iter()
                        .find(|t| *t.name == *o.instance_type)
                })
                .map(|t| t.allocatable().get("cpu"))
                .min()
                .ok_or("a replacement without a known option")?;
            bins.push(smallest);
        }
    }
    if !packs(&mut moved, &mut bins) {
        return Err(format!("moved pods {moved:?} have no place in {bins:?}"));
    }
    Ok(())
}

/// A change between two passes over the same cluster.
#[derive(Debug, Clone)]
enum Edit {
    /// A node goes (the nodes after it move up one place and take new names).
    DropNode(usize),
    /// A pod gets another size: same node, same pod count, same names.
    Resize(usize, usize, u32),
    /// A pod is bound.
    AddPod(usize, PodSpec),
    /// A pod leaves.
    DropPod(usize, usize),
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0usize..7).prop_map(Edit::DropNode),
        (0usize..7, 0usize..4, 1u32..80).prop_map(|(n, p, c)| Edit::Resize(n, p, c)),
        (0usize..7, arb_pod()).prop_map(|(n, p)| Edit::AddPod(n, p)),
        (0usize..7, 0usize..4).prop_map(|(n, p)| Edit::DropPod(n, p)),
    ]
}

fn apply(nodes: &mut Vec<Vec<PodSpec>>, edit: &Edit) {
    if nodes.is_empty() {
        return;
    }
    let len = nodes.len();
    match edit {
        Edit::DropNode(n) => {
            nodes.remove(n % len);
        }
        Edit::Resize(n, p, cpu) => {
            let pods = &mut nodes[n % len];
            if !pods.is_empty() {
                let i = p % pods.len();
                pods[i].cpu = *cpu;
            }
        }
        Edit::AddPod(n, p) => nodes[n % len].push(p.clone()),
        Edit::DropPod(n, p) => {
            let pods = &mut nodes[n % len];
            if !pods.is_empty() {
                let i = p % pods.len();
                pods.remove(i);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    /// One cache carried through passes over a changing cluster (it keeps a copy of the nodes
    /// and copies only those that changed, and the plans of its simulations while nothing
    /// changed) plans exactly as passes without one.
    #[test]
    fn a_cache_kept_across_changing_passes_plans_as_fresh_passes(
        nodes in proptest::collection::vec(proptest::collection::vec(arb_pod(), 0..4), 1..7),
        edits in proptest::collection::vec(arb_edit(), 1..6),
        flags in proptest::collection::vec(arb_flag(), 7),
    ) {
        let budget = BudgetSpec { value: 3, percent: false, underutilized_only: false };
        let mut nodes = nodes;
        let mut cache = DisruptionCache::default();
        let (state, config) = (DisruptionState::default(), DisruptionConfig::default());
        for edit in std::iter::once(None).chain(edits.iter().map(Some)) {
            if let Some(e) = edit {
                apply(&mut nodes, e);
            }
            let snap = build(&nodes, [1, 1, 1], budget, 0, &flags);
            let with = plan_disruption_cached(&snap, &state, 0, &config, &mut cache);
            let without = plan_disruption(&snap, &state, 0, &config);
            prop_assert_eq!(&with, &without, "after {:?}", edit);
            // A second pass on the unchanged cluster answers from the plans the cache kept.
            let again = plan_disruption_cached(&snap, &state, 0, &config, &mut cache);
            prop_assert_eq!(&again, &without, "again after {:?}", edit);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]
    #[test]
    fn disruption_is_always_safe(nodes in proptest::collection::vec(proptest::collection::vec(arb_pod(), 0..4), 1..7),
                                 pdb in proptest::array::uniform3(0i32..3),
                                 budget in arb_budget(),
                                 min_nodes in 0u32..3,
                                 flags in proptest::collection::vec(arb_flag(), 7)) {
        let snap = build(&nodes, pdb, budget, min_nodes, &flags);
        if let Err(e) = check(&snap) {
            let plan = plan_disruption(&snap, &DisruptionState::default(), 0, &DisruptionConfig::default());
            prop_assert!(false, "{e}\n{}", plan.render());
        }
    }
}
