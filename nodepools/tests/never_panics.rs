//! Validation never panics, whatever the field values: arbitrary strings, numbers at the
//! extremes, NaN, and the odd valid value so that deeper checks run too.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nodepools::{
    BudgetSpec, GpuSharingSpec, MigSpec, MpsSpec, NodeClaim, NodeClaimSpec, NodePool, NodePoolSpec,
    NodeSelectorRequirement, Taint, TimeSlicingSpec,
};
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,10}",
        Just(String::new()),
        Just("In".to_string()),
        Just("Gt".to_string()),
        Just("NoSchedule".to_string()),
        Just("all-1g.10gb".to_string()),
        Just("10%".to_string()),
        Just("1h30m".to_string()),
        Just("16Gi".to_string()),
        Just("-1".to_string()),
        Just("99999999999999999999999999Ei".to_string()),
        Just("nvidia.com/gpu".to_string()),
    ]
}

fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-0.0),
        0.0..=1.0
    ]
}

fn requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    (
        text(),
        text(),
        prop::collection::vec(text(), 0..3),
        prop::option::of(any::<i32>()),
    )
        .prop_map(
            |(key, operator, values, min_values)| NodeSelectorRequirement {
                key,
                operator,
                values,
                min_values,
            },
        )
}

fn taint() -> impl Strategy<Value = Taint> {
    (text(), text(), text()).prop_map(|(key, value, effect)| Taint { key, value, effect })
}

fn quantities() -> impl Strategy<Value = BTreeMap<String, Quantity>> {
    prop::collection::btree_map(text(), text().prop_map(Quantity), 0..3)
}

fn nodepool() -> impl Strategy<Value = NodePool> {
    (
        prop::collection::vec(requirement(), 0..4),
        prop::collection::vec(taint(), 0..3),
        prop::collection::vec(taint(), 0..2),
        prop::collection::btree_map(text(), text(), 0..3),
        quantities(),
        prop::collection::btree_map(text(), any::<i64>(), 0..2),
        (any::<i32>(), any::<bool>(), text(), text(), any::<u8>()),
        (text(), text(), number(), number(), text()),
        prop::collection::vec(
            (
                text(),
                prop::collection::vec(text(), 0..3),
                prop::option::of(text()),
                prop::option::of(text()),
            ),
            0..3,
        ),
        (prop::option::of(any::<i32>()), any::<i32>()),
    )
        .prop_map(
            |(reqs, taints, startup, labels, limits, gpu_limits, sharing, d, budgets, (w, m))| {
                let mut spec = NodePoolSpec::default();
                spec.template.requirements = reqs;
                spec.template.taints = taints;
                spec.template.startup_taints = startup;
                spec.template.metadata.labels = labels;
                spec.limits = limits;
                spec.gpu_limits = gpu_limits;
                let (replicas, rename, config, strategy, which) = sharing;
                spec.gpu_sharing = Some(GpuSharingSpec {
                    time_slicing: (which & 1 == 1).then_some(TimeSlicingSpec {
                        replicas,
                        rename_by_default: rename,
                        fail_requests_greater_than_one: rename,
                    }),
                    mps: (which & 8 == 8).then_some(MpsSpec {
                        replicas,
                        rename_by_default: rename,
                    }),
                    mig: (which & 2 == 2).then_some(MigSpec { config, strategy }),
                    fractional: which & 4 == 4,
                });
                let (policy, after, gpu_t, t, unneeded) = d;
                spec.disruption.consolidation_policy = policy;
                spec.disruption.consolidate_after = after;
                spec.disruption.gpu_utilization_threshold = gpu_t;
                spec.disruption.utilization_threshold = t;
                spec.disruption.unneeded_time = unneeded;
                spec.disruption.budgets = budgets
                    .into_iter()
                    .map(|(nodes, reasons, schedule, duration)| BudgetSpec {
                        nodes,
                        reasons,
                        schedule,
                        duration,
                    })
                    .collect();
                spec.weight = w;
                spec.min_nodes = m;
                NodePool::new("fuzz", spec)
            },
        )
}

proptest! {
    #[test]
    fn nodepool_validation_never_panics(pool in nodepool()) {
        if let Err(e) = pool.validate() {
            prop_assert!(!e.is_empty());
            for err in &e.errors {
                prop_assert!(err.path.starts_with("spec.") || err.path.starts_with("metadata."));
            }
        }
    }

    #[test]
    fn nodeclaim_validation_never_panics(
        pool in text(),
        reqs in prop::collection::vec(requirement(), 0..4),
        requests in quantities(),
        taints in prop::collection::vec(taint(), 0..3),
    ) {
        let mut spec = NodeClaimSpec { node_pool: pool, requirements: reqs, taints, ..Default::default() };
        spec.resources.requests = requests;
        let _ = NodeClaim::new("fuzz", spec).validate();
    }
}
