//! Data-driven DRA planner scenarios: pods whose GPUs come from resource claims, planned onto
//! existing nodes' published devices, in-flight claims and new nodes' templates; the expected
//! plans are rendered as text (`UPDATE_EXPECT=1 cargo test` refreshes them).

use std::sync::Arc;

use autoscaler_core::builders::*;
use autoscaler_core::dra::builders::{allocated_claim, allocation, claim, device, request, slice};
use autoscaler_core::dra::template::{NVIDIA_DRIVER, nvidia_classes};
use autoscaler_core::dra::{Dra, PodClaim};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{InFlightClaim, Snapshot};
use autoscaler_core::requirements::Requirements;
use expect_test::expect;

mod support;
use support::check;

const ZONES: [&str; 1] = ["us-east-1a"];

/// One CPU type and the shared GPU types, in one zone.
fn gpu_types() -> Vec<InstanceType> {
    let mut types = vec![support::cpu_types_in(&ZONES).remove(0)];
    types.extend(support::gpu_types_in(&ZONES));
    types
}

fn classes() -> Dra {
    Dra {
        classes: nvidia_classes()
            .into_iter()
            .map(|c| (c.name.clone(), c))
            .collect(),
        ..Dra::default()
    }
}

/// A pod asking `n` whole NVIDIA GPUs through its own claim (from a template).
fn gpus(n: u32) -> PodClaim {
    claim()
        .request(request("gpu").class(NVIDIA_DRIVER).count(n))
        .from_template("gpu")
}

fn dra_pod(name: &str, c: PodClaim) -> PodBuilder {
    pod(name).cpu("1").mem("1Gi").claim(c)
}

fn snapshot(pods: Vec<PodBuilder>, dra: Dra) -> Snapshot {
    Snapshot {
        pending: pods.into_iter().map(|p| p.build()).collect(),
        pools: vec![pool("gpu", gpu_types()).build()],
        dra: Arc::new(dra),
        ..Snapshot::default()
    }
}

#[test]
fn a_claim_from_a_template_scales_up_from_zero() {
    check(
        &snapshot(vec![dra_pod("one", gpus(1))], classes()),
        expect![[r#"
            claim gpu-1 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[one]
        "#]],
    );
}

#[test]
fn eight_gpus_take_the_cheapest_eight_gpu_type() {
    check(
        &snapshot(vec![dra_pod("big", gpus(8))], classes()),
        expect![[r#"
            claim gpu-1 pool=gpu price=21.960 types=[p4d.24xlarge,p5.48xlarge] pods=[big]
        "#]],
    );
}

#[test]
fn a_selector_on_memory_picks_the_type_whose_gpus_have_it() {
    let c =
        claim()
            .request(request("gpu").class(NVIDIA_DRIVER).selector(
                "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0",
            ))
            .from_template("gpu");
    check(
        &snapshot(vec![dra_pod("wants-80g", c)], classes()),
        expect![[r#"
            claim gpu-1 pool=gpu price=98.320 types=[p5.48xlarge] pods=[wants-80g]
        "#]],
    );
}

#[test]
fn devices_never_overbook_a_new_node() {
    // Six one-GPU pods: no node is planned with more claims than GPUs.
    let pods = (0..6).map(|i| dra_pod(&format!("p{i}"), gpus(1))).collect();
    check(
        &snapshot(pods, classes()),
        expect![[r#"
        claim gpu-1 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[p0]
        claim gpu-2 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[p1]
        claim gpu-3 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[p2]
        claim gpu-4 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[p3]
        claim gpu-5 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[p4]
        claim gpu-6 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[p5]
    "#]],
    );
}

#[test]
fn existing_nodes_offer_their_free_published_devices() {
    let it = &gpu_types()[2];
    let node_slice = (0..4)
        .fold(slice("node-1", NVIDIA_DRIVER), |s, i| {
            s.device(
                device(&format!("gpu-{i}"))
                    .string("type", "gpu")
                    .capacity("memory", "24Gi"),
            )
        })
        .build();
    let mut dra = classes();
    dra.slices.push(node_slice);
    // Two of its four GPUs are allocated already.
    dra.claims.push(allocated_claim(
        "default/running",
        claim().build(),
        allocation(
            "node-1",
            &[
                ("gpu", NVIDIA_DRIVER, "node-1", "gpu-0"),
                ("gpu", NVIDIA_DRIVER, "node-1", "gpu-1"),
            ],
        ),
        &["running"],
    ));
    let mut snap = snapshot(
        vec![dra_pod("two", gpus(2)), dra_pod("three", gpus(3))],
        dra,
    );
    snap.nodes
        .push(node("node-1", it, "us-east-1a").pool("gpu").build());
    check(
        &snap,
        expect![[r#"
        existing default/two -> node-1
        claim gpu-1 pool=gpu price=5.672 types=[g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[three]
    "#]],
    );
}

#[test]
fn an_in_flight_claim_offers_its_template() {
    let mut snap = snapshot(
        vec![
            dra_pod("a", gpus(2)),
            dra_pod("b", gpus(2)),
            dra_pod("c", gpus(1)),
        ],
        classes(),
    );
    snap.in_flight.push(InFlightClaim {
        name: "gpu-inflight".into(),
        pool: "gpu".into(),
        instance_types: vec!["g5.12xlarge".into()],
        requirements: Requirements::new(),
        pods: vec![],
        created_at: 0,
    });
    check(
        &snap,
        expect![[r#"
        in-flight default/a -> gpu-inflight
        in-flight default/b -> gpu-inflight
        claim gpu-1 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[c]
    "#]],
    );
}

#[test]
fn an_allocated_claim_pins_its_pod() {
    let it = &gpu_types()[1];
    let mut c = gpus(1);
    c.allocation = Some(allocation(
        "node-1",
        &[("gpu", NVIDIA_DRIVER, "node-1", "gpu-0")],
    ));
    let mut gone = gpus(1);
    gone.allocation = Some(allocation(
        "node-gone",
        &[("gpu", NVIDIA_DRIVER, "node-gone", "gpu-0")],
    ));
    let mut snap = snapshot(
        vec![
            dra_pod("pinned", c.clone()),
            // Its node is too small for it: it waits, no new node helps.
            pod("pinned-big").cpu("8").claim(c),
            // Its claim's node is gone: allocated again, on a new node.
            dra_pod("re-allocated", gone),
        ],
        classes(),
    );
    snap.nodes
        .push(node("node-1", it, "us-east-1a").pool("gpu").build());
    check(
        &snap,
        expect![[r#"
        existing default/pinned -> node-1
        claim gpu-1 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[re-allocated]
        unschedulable default/pinned-big: its claims are allocated on node node-1, which cannot take it; NodePool gpu cannot help
    "#]],
    );
}

#[test]
fn pods_of_a_shared_claim_land_together() {
    // One allocation of four GPUs for both pods: they fit one 4-GPU node together.
    let shared = claim()
        .request(request("gpu").class(NVIDIA_DRIVER).count(4))
        .shared("team-gpus");
    let pods = vec![
        dra_pod("reader", shared.clone()),
        dra_pod("writer", shared),
        dra_pod("other", gpus(1)),
    ];
    check(
        &snapshot(pods, classes()),
        expect![[r#"
            claim gpu-1 pool=gpu price=5.672 types=[g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[reader,writer]
            claim gpu-2 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[other]
        "#]],
    );
}

#[test]
fn a_pools_image_attributes_reach_its_template() {
    // Only the pool whose image installs a recent driver says so; the selector asks for it.
    let c = claim()
        .request(request("gpu").class(NVIDIA_DRIVER).selector(
            "has(device.attributes['gpu.nvidia.com'].driverVersion) && device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('570.0.0')) >= 0",
        ))
        .from_template("gpu");
    let mut snap = snapshot(vec![dra_pod("new-driver", c)], classes());
    let imaged = pool("imaged", gpu_types())
        .dra_attribute(
            "gpu.nvidia.com/driverVersion",
            autoscaler_core::dra::AttributeValue::Version("570.86.15".into()),
        )
        .build();
    snap.pools.push(imaged);
    check(
        &snap,
        expect![[r#"
            claim imaged-1 pool=imaged price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[new-driver]
        "#]],
    );
}

#[test]
fn claims_that_cannot_be_allocated_are_reasons() {
    let bad_class = claim()
        .request(request("gpu").class("tpu.example.com"))
        .from_template("tpu");
    let bad_cel = claim()
        .request(
            request("gpu")
                .class(NVIDIA_DRIVER)
                .selector("device.attributes['gpu.nvidia.com'].productName =="),
        )
        .from_template("gpu");
    let costly = claim()
        .request(request("gpu").class(NVIDIA_DRIVER).selector(
            "device.attributes['gpu.nvidia.com'].all(a, device.attributes['gpu.nvidia.com'].all(b, device.attributes['gpu.nvidia.com'].all(c, a.matches(b) || c.matches(a))))",
        ))
        .from_template("gpu");
    let pods = vec![
        dra_pod("unknown-class", bad_class),
        dra_pod("bad-cel", bad_cel),
        dra_pod("too-costly", costly),
        dra_pod("sixteen", gpus(16)),
    ];
    check(
        &snapshot(pods, classes()),
        expect![[r#"
            unschedulable default/bad-cel: claim gpu: request "gpu": CEL expression "device.attributes['gpu.nvidia.com'].productName ==" does not compile: ERROR: <input>:1:51: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}
            unschedulable default/sixteen: NodePool gpu: no instance type's devices satisfy claim(s) gpu: e.g. g5.xlarge (the claims need at least 16 device(s), 1 free of 1)
            unschedulable default/too-costly: claim gpu: request "gpu": CEL expression "device.attributes['gpu.nvidia.com'].all(a, device.attributes['gpu.nvidia.com'].all(b, device.attributes['gpu.nvidia.com'].all(c, a.matches(b) || c.matches(a))))" exceeds the cost limit: estimated 36221638, limit 1000000
            unschedulable default/unknown-class: claim tpu: request "gpu": unknown device class "tpu.example.com"
        "#]],
    );
}

mod disruption {
    //! Consolidation with DRA: a pod with a claim moves only where its claim can be
    //! allocated again, and utilization counts allocated devices over published ones.

    use super::*;
    use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, plan_disruption};
    use autoscaler_core::dra::template::nvidia_slice;
    use autoscaler_core::model::{DisruptionPolicy, Node};

    fn p4d() -> InstanceType {
        gpu_types()[3].clone()
    }

    /// Node `name` of type `it` running one pod per entry of `claims` (GPUs each), its claims
    /// allocated on the node's first devices; the node's slice and claims go into `dra`.
    fn busy(name: &str, it: &InstanceType, claims: &[u32], dra: &mut Dra) -> Node {
        dra.slices.push(nvidia_slice(it, name, false).unwrap());
        let mut b = node(name, it, "us-east-1a").pool("gpu");
        let mut next = 0;
        for (k, n) in claims.iter().enumerate() {
            let devices: Vec<String> = (next..next + n).map(|i| format!("gpu-{i}")).collect();
            next += n;
            let refs: Vec<(&str, &str, &str, &str)> = devices
                .iter()
                .map(|d| ("gpu", NVIDIA_DRIVER, name, d.as_str()))
                .collect();
            let a = allocation(name, &refs);
            let mut c = gpus(*n);
            c.allocation = Some(a.clone());
            let pod_name = format!("{name}-w{k}");
            dra.claims.push(allocated_claim(
                &format!("default/{pod_name}-gpu"),
                (*c.spec).clone(),
                a,
                &[&pod_name],
            ));
            b = b.with_pod(pod(&pod_name).cpu("1").mem("1Gi").claim(c));
        }
        b.build()
    }

    fn plan(nodes: Vec<Node>, types: Vec<InstanceType>, dra: Dra) -> String {
        decide(nodes, types, dra).render()
    }

    /// Two p4d nodes of pool `gpu` that go at once when they may: `a` with a one-GPU claim,
    /// `b` with claims of `on_b` GPUs.
    fn a_beside_b(on_b: &[u32]) -> Snapshot {
        let mut dra = classes();
        let nodes = vec![
            busy("a", &p4d(), &[1], &mut dra),
            busy("b", &p4d(), on_b, &mut dra),
        ];
        let quick = DisruptionPolicy {
            unneeded_s: 0,
            budgets: vec![],
            ..DisruptionPolicy::default()
        };
        Snapshot {
            nodes,
            pools: vec![pool("gpu", vec![p4d()]).disruption(quick).build()],
            dra: Arc::new(dra),
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_claim_does_not_move_onto_devices_a_pending_pod_is_about_to_take() {
        // b has one free GPU, and the pending pod p (one GPU by claim, selecting b's host)
        // goes there: b stays for it. a's one-GPU pod would fit b's free GPU too, but the
        // simulation gives that GPU to p's claim (not allocated yet) first: a's pod has no
        // place but a replacement as dear as a, and a stays.
        let mut s = a_beside_b(&[4, 3]);
        let before = plan_disruption(
            &s,
            &DisruptionState::default(),
            0,
            &DisruptionConfig::default(),
        );
        assert_eq!(
            before.render(),
            "Underutilized Delete nodes=[a] pods=1 savings=21.960\nkeep b: GPU utilization 0.88 above threshold 0.50\n"
        );
        s.pending = vec![
            dra_pod("p", gpus(1))
                .select(autoscaler_core::labels::HOSTNAME, "b")
                .build(),
        ];
        assert_eq!(
            autoscaler_core::provision::plan_provisioning(&s).render(),
            "existing default/p -> b\n"
        );
        let after = plan_disruption(
            &s,
            &DisruptionState::default(),
            0,
            &DisruptionConfig::default(),
        );
        expect![[r#"
            keep a: no strictly cheaper replacement
            keep b: GPU utilization 0.88 above threshold 0.50
        "#]]
        .assert_eq(&after.render());
    }

    #[test]
    fn a_claim_moves_onto_devices_left_beside_a_pending_pods() {
        // b has two free GPUs; the pending pod p (one GPU by its own claim) goes there and
        // the simulation gives p's claim one of them first, so a's one-GPU pod takes the
        // other: a goes. A shared claim p would make for itself may be followed by other pods
        // (moved ones among them), so its devices are not worked out: b is kept from moved
        // pods with claims, and a stays.
        let shared = claim()
            .request(request("gpu").class(NVIDIA_DRIVER).count(1))
            .shared("team-gpu");
        for (p_claim, expected) in [
            (
                gpus(1),
                "Underutilized Delete nodes=[a] pods=1 savings=21.960\n",
            ),
            (
                shared,
                "keep a: pod default/a-w0 has nowhere to go: would take devices held on b \
                 for pending pod default/p\n",
            ),
        ] {
            let mut s = a_beside_b(&[4, 2]);
            s.pending = vec![
                dra_pod("p", p_claim)
                    .select(autoscaler_core::labels::HOSTNAME, "b")
                    .build(),
            ];
            let got = plan_disruption(
                &s,
                &DisruptionState::default(),
                0,
                &DisruptionConfig::default(),
            )
            .render();
            assert!(got.starts_with(expected), "{got}");
        }
    }

    fn decide(
        nodes: Vec<Node>,
        types: Vec<InstanceType>,
        dra: Dra,
    ) -> autoscaler_core::disruption::DisruptionPlan {
        let quick = DisruptionPolicy {
            unneeded_s: 0,
            budgets: vec![],
            ..DisruptionPolicy::default()
        };
        let s = Snapshot {
            nodes,
            pools: vec![pool("gpu", types).disruption(quick).build()],
            dra: Arc::new(dra),
            ..Snapshot::default()
        };
        plan_disruption(
            &s,
            &DisruptionState::default(),
            0,
            &DisruptionConfig::default(),
        )
    }

    #[test]
    fn a_claim_moves_to_free_devices() {
        let mut dra = classes();
        let nodes = vec![
            busy("a", &p4d(), &[1], &mut dra),
            busy("b", &p4d(), &[6], &mut dra),
        ];
        expect![[r#"
            Underutilized Delete nodes=[a] pods=1 savings=21.960
            keep b: GPU utilization 0.75 above threshold 0.50
        "#]]
        .assert_eq(&plan(nodes, vec![p4d()], dra));
    }

    #[test]
    fn a_claim_does_not_move_where_no_device_is_free() {
        // b has one free GPU (and is above the threshold); a's 2-GPU claim fits nowhere else,
        // and no cheaper type holds it.
        let mut dra = classes();
        let nodes = vec![
            busy("a", &p4d(), &[2], &mut dra),
            busy("b", &p4d(), &[4, 3], &mut dra),
        ];
        expect![[r#"
            keep a: no strictly cheaper replacement
            keep b: GPU utilization 0.88 above threshold 0.50
        "#]]
        .assert_eq(&plan(nodes, vec![p4d()], dra));
    }

    #[test]
    fn a_claim_is_replaced_by_a_cheaper_node_whose_template_holds_it() {
        let mut dra = classes();
        let nodes = vec![
            busy("a", &p4d(), &[1], &mut dra),
            busy("b", &p4d(), &[8], &mut dra),
        ];
        let types = vec![gpu_types()[1].clone(), p4d()];
        expect![[r#"
            Underutilized Replace nodes=[a] pods=1 savings=20.954 replacement=g5.xlarge@1.006
            keep b: GPU utilization 1.00 above threshold 0.50
        "#]]
        .assert_eq(&plan(nodes.clone(), types.clone(), dra.clone()));
        // The replacement is a claim for a pod with DRA claims: its node must publish its
        // slices before it is initialized, as a launch's.
        let d = decide(nodes, types, dra);
        let r = d.commands[0].replacement.as_ref().expect("a replacement");
        assert!(r.dra, "{r:?}");
    }
}
