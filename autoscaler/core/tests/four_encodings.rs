//! Four encodings, one answer: a corpus of GPU workloads, each written four ways (whole GPUs
//! through the device plugin, MIG under the mixed strategy, time-slicing, and DRA resource
//! claims), planned from zero nodes. Where two encodings mean the same thing the plans must
//! open the same number of nodes at the same cost; every plan's figures are kept in
//! `four_encodings.txt` (`UPDATE_EXPECT=1` refreshes it), which is what
//! `docs/src/how-to/dra.md` quotes for the pairs that differ.
//!
//! A scenario is one of four kinds of need, and its pods ask for it:
//!
//! | need | device plugin | MIG mixed | time-slicing | DRA |
//! |---|---|---|---|---|
//! | `Whole(g)`: g whole GPUs | `nvidia.com/gpu: g` | `all-7g.40gb`, `nvidia.com/mig-7g.40gb: g` | 4 replicas, `nvidia.com/gpu: g` | claim of `g` devices of `gpu.nvidia.com` |
//! | `Slice(p)`: one MIG partition | `nvidia.com/gpu: 1` | `all-<p>`, `nvidia.com/mig-<p>: 1` | 7 replicas, `nvidia.com/gpu: 1` | claim of one `mig.nvidia.com` device with `profile == p` (MIG pool: partitions published) |
//! | `Share(r)`: a 1/r time share | `nvidia.com/gpu: 1` | `all-1g.5gb`, `nvidia.com/mig-1g.5gb: 1` | r replicas, `nvidia.com/gpu: 1` | one claim of a whole GPU shared by each r pods (`resourceClaimName`) |
//!
//! The same meaning, so the same plan: device plugin, DRA and MIG `7g` for whole GPUs (MIG
//! only on MIG-capable GPUs); MIG and DRA for one partition profile; time-slicing and DRA's
//! shared claims for shares.

use std::collections::BTreeMap;
use std::sync::Arc;

use autoscaler_core::builders::*;
use autoscaler_core::dra::Dra;
use autoscaler_core::dra::builders::{claim, request};
use autoscaler_core::dra::template::{NVIDIA_DRIVER, NVIDIA_MIG_CLASS, nvidia_classes};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{GpuSharing, MigSharing, MigStrategy, Snapshot, TimeSlicing};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::plan_provisioning;

mod support;

/// What each pod of a group needs.
#[derive(Clone, Copy, Debug)]
enum Need {
    /// Whole GPUs, exclusively.
    Whole(u32),
    /// One MIG partition of this profile (A100 40 GB names).
    Slice(&'static str),
    /// A share of one GPU with `r - 1` other pods.
    Share(u32),
}

/// The GPUs a scenario plans on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Gpus {
    /// A100 40 GB types: 1, 2, 4 and 8 GPUs (MIG-capable).
    A100,
    /// A10G types: 1 and 4 GPUs (no MIG).
    A10G,
}

/// How a scenario is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Encoding {
    DevicePlugin,
    MigMixed,
    TimeSlicing,
    Dra,
}

const ENCODINGS: [Encoding; 4] = [
    Encoding::DevicePlugin,
    Encoding::MigMixed,
    Encoding::TimeSlicing,
    Encoding::Dra,
];

/// One scenario: groups of `count` pods with one need, on one family of GPUs.
struct Case {
    name: String,
    gpus: Gpus,
    groups: Vec<(u32, Need)>,
}

fn case(gpus: Gpus, groups: &[(u32, Need)]) -> Case {
    let name = groups
        .iter()
        .map(|(n, need)| match need {
            Need::Whole(g) => format!("{n}x{g}gpu"),
            Need::Slice(p) => format!("{n}x{p}"),
            Need::Share(r) => format!("{n}x1/{r}"),
        })
        .collect::<Vec<_>>()
        .join("+");
    Case {
        name: format!("{:?} {name}", gpus),
        gpus,
        groups: groups.to_vec(),
    }
}

/// The corpus: whole GPUs on MIG-capable and other GPUs, one partition profile, shares.
fn corpus() -> Vec<Case> {
    use Gpus::*;
    use Need::*;
    let mut out = Vec::new();
    for groups in [
        &[(1, Whole(1))][..],
        &[(3, Whole(1))],
        &[(1, Whole(2))],
        &[(2, Whole(4))],
        &[(1, Whole(8))],
        &[(5, Whole(1)), (1, Whole(4))],
        &[(7, Whole(1))],
        &[(2, Whole(2)), (3, Whole(1))],
        &[(9, Whole(1))],
        &[(4, Whole(2))],
        &[(1, Whole(8)), (1, Whole(1))],
        &[(3, Whole(3))],
    ] {
        out.push(case(A100, groups));
    }
    for groups in [
        &[(1, Whole(1))][..],
        &[(3, Whole(1))],
        &[(1, Whole(2))],
        &[(2, Whole(4))],
        &[(5, Whole(1))],
        &[(4, Whole(1)), (1, Whole(2))],
        &[(6, Whole(2))],
        &[(1, Whole(3)), (2, Whole(1))],
        &[(9, Whole(1))],
        &[(2, Whole(4)), (3, Whole(1))],
    ] {
        out.push(case(A10G, groups));
    }
    for groups in [
        &[(1, Slice("1g.5gb"))][..],
        &[(7, Slice("1g.5gb"))],
        &[(8, Slice("1g.5gb"))],
        &[(30, Slice("1g.5gb"))],
        &[(3, Slice("2g.10gb"))],
        &[(10, Slice("2g.10gb"))],
        &[(2, Slice("3g.20gb"))],
        &[(5, Slice("3g.20gb"))],
        &[(1, Slice("4g.20gb"))],
        &[(6, Slice("4g.20gb"))],
        &[(3, Slice("7g.40gb"))],
        &[(4, Slice("1g.10gb"))],
    ] {
        out.push(case(A100, groups));
    }
    for groups in [
        &[(1, Share(2))][..],
        &[(2, Share(2))],
        &[(5, Share(2))],
        &[(4, Share(4))],
        &[(9, Share(4))],
        &[(16, Share(4))],
        &[(7, Share(7))],
        &[(20, Share(7))],
        &[(3, Share(3))],
        &[(40, Share(8))],
    ] {
        out.push(case(A100, groups));
    }
    // Two profiles at once: one MIG layout per pool cannot serve both, DRA partitions each
    // GPU as its claims need (a documented difference, not an equality).
    out.push(case(A100, &[(4, Slice("1g.5gb")), (2, Slice("3g.20gb"))]));
    out.push(case(A100, &[(2, Slice("2g.10gb")), (1, Slice("3g.20gb"))]));
    out
}

fn types(gpus: Gpus) -> Vec<InstanceType> {
    const Z: [&str; 1] = ["us-east-1a"];
    match gpus {
        Gpus::A100 => [
            ("a100.1", "12", "96Gi", 1, 4.10),
            ("a100.2", "24", "192Gi", 2, 8.00),
            ("a100.4", "48", "384Gi", 4, 15.00),
            ("p4d.24xlarge", "96", "1152Gi", 8, 21.96),
        ]
        .into_iter()
        .map(|(name, cpu, mem, n, price)| {
            itype(name)
                .cpu(cpu)
                .mem(mem)
                .gpus(n, "A100", 40)
                .on_demand(&Z, price)
                .build()
        })
        .collect(),
        Gpus::A10G => support::gpu_types_in(&Z)
            .into_iter()
            .filter(|t| t.gpu.as_ref().is_some_and(|g| g.model == "A10G"))
            .collect(),
    }
}

fn mig(config: &str) -> GpuSharing {
    GpuSharing {
        mig: Some(MigSharing {
            config: config.into(),
            strategy: MigStrategy::Mixed,
        }),
        ..GpuSharing::default()
    }
}

fn time_slicing(replicas: u32) -> GpuSharing {
    GpuSharing {
        time_slicing: Some(TimeSlicing {
            replicas,
            rename: false,
            ..TimeSlicing::default()
        }),
        ..GpuSharing::default()
    }
}

/// The MIG layout and the resource a need takes under the mixed strategy.
fn mig_of(need: Need) -> (String, String, u32) {
    let (profile, n) = match need {
        Need::Whole(g) => ("7g.40gb", g),
        Need::Slice(p) => (p, 1),
        Need::Share(_) => ("1g.5gb", 1),
    };
    (
        format!("all-{profile}"),
        format!("nvidia.com/mig-{profile}"),
        n,
    )
}

/// The snapshot of `c` written as `e`: pending pods and one NodePool, no node yet.
fn snapshot(c: &Case, e: Encoding) -> Snapshot {
    let mut pods = Vec::new();
    let mut sharing = GpuSharing::default();
    for (gi, (count, need)) in c.groups.iter().enumerate() {
        for i in 0..*count {
            let p = pod(&format!("g{gi}-{i:02}")).cpu("1").mem("2Gi");
            let p = match (e, need) {
                (Encoding::DevicePlugin, Need::Whole(g)) => p.gpus(i64::from(*g)),
                (Encoding::DevicePlugin | Encoding::TimeSlicing, _) => {
                    if e == Encoding::TimeSlicing {
                        sharing = time_slicing(match need {
                            Need::Share(r) => *r,
                            Need::Slice(_) => 7,
                            Need::Whole(_) => 4,
                        });
                    }
                    p.gpus(match need {
                        Need::Whole(g) => i64::from(*g),
                        _ => 1,
                    })
                }
                (Encoding::MigMixed, _) => {
                    let (config, resource, n) = mig_of(*need);
                    sharing = mig(&config);
                    p.res(&resource, &n.to_string())
                }
                (Encoding::Dra, Need::Whole(g)) => p.claim(
                    claim()
                        .request(request("gpu").class(NVIDIA_DRIVER).count(*g))
                        .from_template("gpu"),
                ),
                (Encoding::Dra, Need::Slice(profile)) => {
                    sharing = mig(&format!("all-{profile}"));
                    p.claim(
                        claim()
                            .request(request("mig").class(NVIDIA_MIG_CLASS).selector(&format!(
                                "device.attributes['gpu.nvidia.com'].profile == '{profile}'"
                            )))
                            .from_template("mig"),
                    )
                }
                (Encoding::Dra, Need::Share(r)) => {
                    // Each r consecutive pods share one claim of one whole GPU.
                    let group = format!("share-{gi}-{}", i / r);
                    p.claim(
                        claim()
                            .request(request("gpu").class(NVIDIA_DRIVER))
                            .shared(&group),
                    )
                }
            };
            pods.push(p.build());
        }
    }
    let dra = if e == Encoding::Dra {
        Dra {
            classes: nvidia_classes()
                .into_iter()
                .map(|c| (c.name.clone(), c))
                .collect(),
            ..Dra::default()
        }
    } else {
        Dra::default()
    };
    Snapshot {
        pending: pods,
        pools: vec![pool("gpu", types(c.gpus)).sharing(sharing).build()],
        dra: Arc::new(dra),
        ..Snapshot::default()
    }
}

/// Nodes, cost and pods left out of one plan.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Outcome {
    nodes: usize,
    cost: f64,
    unplaced: usize,
}

impl Outcome {
    fn of(p: &Plan) -> Outcome {
        Outcome {
            nodes: p.new_claims.len(),
            cost: p.new_cost(),
            unplaced: p.unschedulable.len(),
        }
    }

    fn same(&self, o: &Outcome) -> bool {
        self.nodes == o.nodes && (self.cost - o.cost).abs() < 1e-9 && self.unplaced == o.unplaced
    }
}

/// The pairs of encodings that mean the same thing for a case.
fn equivalent(c: &Case) -> Vec<(Encoding, Encoding)> {
    use Encoding::*;
    let whole = c.groups.iter().all(|(_, n)| matches!(n, Need::Whole(_)));
    let one_profile = c
        .groups
        .iter()
        .map(|(_, n)| match n {
            Need::Slice(p) => Some(*p),
            _ => None,
        })
        .collect::<std::collections::BTreeSet<_>>();
    let shares = c.groups.iter().all(|(_, n)| matches!(n, Need::Share(_)));
    if whole {
        let mut pairs = vec![(DevicePlugin, Dra)];
        if c.gpus == Gpus::A100 {
            pairs.push((DevicePlugin, MigMixed));
        }
        pairs
    } else if one_profile.len() == 1 && one_profile.iter().all(Option::is_some) {
        vec![(MigMixed, Dra)]
    } else if shares && c.groups.len() == 1 {
        vec![(TimeSlicing, Dra)]
    } else {
        vec![]
    }
}

#[test]
fn four_encodings_one_answer() {
    let corpus = corpus();
    assert!(corpus.len() >= 40, "{} scenarios", corpus.len());
    let mut table = String::new();
    let mut failures = Vec::new();
    let mut pairs_checked = 0;
    for c in &corpus {
        let mut outcomes = BTreeMap::new();
        for e in ENCODINGS {
            let snap = snapshot(c, e);
            let plan = plan_provisioning(&snap);
            assert_eq!(plan, plan_provisioning(&snap), "deterministic");
            outcomes.insert(e, Outcome::of(&plan));
        }
        let pairs = equivalent(c);
        for (a, b) in &pairs {
            pairs_checked += 1;
            if !outcomes[a].same(&outcomes[b]) {
                failures.push(format!(
                    "{}: {a:?} {:?} but {b:?} {:?}",
                    c.name, outcomes[a], outcomes[b]
                ));
            }
        }
        table.push_str(&format!("{:<34}", c.name));
        for e in ENCODINGS {
            let o = outcomes[&e];
            // No claim sums to -0.0.
            let o = Outcome {
                cost: o.cost + 0.0,
                ..o
            };
            let cell = if o.unplaced > 0 {
                format!("{}n ${:.2} ({} left)", o.nodes, o.cost, o.unplaced)
            } else {
                format!("{}n ${:.2}", o.nodes, o.cost)
            };
            table.push_str(&format!(" | {cell:<20}"));
        }
        let same: Vec<String> = pairs.iter().map(|(a, b)| format!("{a:?}={b:?}")).collect();
        table.push_str(&format!(" | {}\n", same.join(" ")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(pairs_checked >= 40, "{pairs_checked} pairs");
    let header = format!(
        "{:<34} | {:<20} | {:<20} | {:<20} | {:<20} | equal by meaning\n",
        "scenario", "device plugin", "MIG mixed", "time-slicing", "DRA"
    );
    expect_test::expect_file!["four_encodings.txt"].assert_eq(&(header + &table));
}
