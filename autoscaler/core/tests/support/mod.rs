//! Fixtures the planner's scenario tests share (`planner_scenarios`, `dra_scenarios`,
//! `four_encodings`): the instance types they plan with and the check that renders a plan
//! against its expectation.
// Each test file uses only some of the fixtures.
#![allow(dead_code)]

use autoscaler_core::builders::itype;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{Group, Snapshot};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::plan_provisioning;
use expect_test::Expect;

/// Three zones of one region.
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// General-purpose types, 2 to 16 vCPUs, offered on demand in `zones`.
pub fn cpu_types_in(zones: &[&str]) -> Vec<InstanceType> {
    [
        ("m5.large", "2", "8Gi", 0.096),
        ("m5.xlarge", "4", "16Gi", 0.192),
        ("m5.2xlarge", "8", "32Gi", 0.384),
        ("m5.4xlarge", "16", "64Gi", 0.768),
    ]
    .into_iter()
    .map(|(name, cpu, mem, price)| {
        itype(name)
            .cpu(cpu)
            .mem(mem)
            .on_demand(zones, price)
            .build()
    })
    .collect()
}

/// [`cpu_types_in`] the three [`ZONES`].
pub fn cpu_types() -> Vec<InstanceType> {
    cpu_types_in(&ZONES)
}

/// NVIDIA GPU types: 1 and 4 A10G (24 GB, no MIG), 8 A100 40 GB, 8 H100 80 GB, offered on
/// demand in `zones`.
pub fn gpu_types_in(zones: &[&str]) -> Vec<InstanceType> {
    [
        ("g5.xlarge", "4", "16Gi", 1, "A10G", 24, 1.006),
        ("g5.12xlarge", "48", "192Gi", 4, "A10G", 24, 5.672),
        ("p4d.24xlarge", "96", "1152Gi", 8, "A100", 40, 21.96),
        ("p5.48xlarge", "192", "2048Gi", 8, "H100", 80, 98.32),
    ]
    .into_iter()
    .map(|(name, cpu, mem, n, model, gb, price)| {
        itype(name)
            .cpu(cpu)
            .mem(mem)
            .gpus(n, model, gb)
            .on_demand(zones, price)
            .build()
    })
    .collect()
}

/// [`gpu_types_in`] the three [`ZONES`].
pub fn gpu_types() -> Vec<InstanceType> {
    gpu_types_in(&ZONES)
}

/// Plans `snap`, checks the rendered plan against `expected` and that planning again gives
/// the same plan (determinism); returns the plan.
pub fn check(snap: &Snapshot, expected: Expect) -> Plan {
    let plan = plan_provisioning(snap);
    expected.assert_eq(&plan.render());
    assert_eq!(plan, plan_provisioning(snap), "deterministic");
    plan
}

/// Declares every all-or-nothing group the pending pods name, with all its pending members as
/// its minimum.
pub fn with_groups(mut snap: Snapshot) -> Snapshot {
    let names: Vec<String> = snap
        .pending
        .iter()
        .filter_map(|p| p.group.clone())
        .collect();
    for name in names {
        let min_count = snap
            .pending
            .iter()
            .filter(|p| p.group.as_deref() == Some(&name))
            .count() as u32;
        snap.groups.insert(name.clone(), Group { name, min_count });
    }
    snap
}
