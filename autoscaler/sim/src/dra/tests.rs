//! Tests of the simulated scheduler's DRA allocator: a table of pods' claims against one
//! node's published devices (some already taken), with what it allocates.

use std::collections::BTreeMap;
use std::sync::Arc;

use autoscaler_core::builders::{itype, pod};
use autoscaler_core::dra::DeviceClass;
use autoscaler_core::dra::builders::{ClaimBuilder, claim, class_with, request};
use autoscaler_core::dra::template::{NVIDIA_DRIVER, NVIDIA_MIG_CLASS, nvidia_classes};

use super::*;

fn classes() -> Arc<BTreeMap<String, DeviceClass>> {
    let mut c: BTreeMap<String, DeviceClass> = nvidia_classes()
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();
    // A class whose selector fails on every device (no such attribute).
    let broken = class_with(
        "broken",
        &["device.attributes['gpu.nvidia.com'].noSuchAttribute == 'x'"],
    );
    c.insert(broken.name.clone(), broken);
    Arc::new(c)
}

/// A node of 4 x A100 40GB (MIG partitions published when `mig`), `taken` devices held.
fn node(mig: bool, taken: &[&str]) -> NodeDra {
    let it = itype("p4d.4x")
        .cpu("48")
        .mem("512Gi")
        .gpus(4, "A100", 40)
        .on_demand(&["z"], 1.0)
        .build();
    let d = NodeDevices::for_node(&it, "n1", mig, &BTreeMap::new(), classes()).expect("GPU type");
    let mut dra = NodeDra::new(Some(d.clone()));
    for t in taken {
        let i = d
            .slice
            .devices
            .iter()
            .position(|x| x.name == *t)
            .expect("device");
        dra.taken[i] = true;
    }
    dra
}

/// What `claims` get on the node, as `request=device` per claim, or `no fit`.
fn outcome(dra: &NodeDra, claims: Vec<ClaimBuilder>) -> String {
    let mut p = pod("p").cpu("1");
    for (i, c) in claims.into_iter().enumerate() {
        p = p.claim(c.from_template(&format!("c{i}")));
    }
    let p = p.build();
    match allocate(&p, dra) {
        None => "no fit".into(),
        Some(t) => (0..p.claims.len())
            .map(|c| {
                results(dra, &t, c)
                    .iter()
                    .map(|r| format!("{}={}", r.request, r.device.device))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect::<Vec<_>>()
            .join(" | "),
    }
}

fn gpus(n: u32) -> ClaimBuilder {
    claim().request(request("gpu").class(NVIDIA_DRIVER).count(n))
}

fn mig(profile: &str) -> ClaimBuilder {
    claim().request(request("mig").class(NVIDIA_MIG_CLASS).selector(&format!(
        "device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    )))
}

#[test]
fn allocations_on_one_node() {
    let cases: Vec<(&str, NodeDra, Vec<ClaimBuilder>, &str)> = vec![
        (
            "two whole GPUs",
            node(false, &[]),
            vec![gpus(2)],
            "gpu=gpu-0,gpu=gpu-1",
        ),
        (
            "taken devices are skipped",
            node(false, &["gpu-0", "gpu-2"]),
            vec![gpus(2)],
            "gpu=gpu-1,gpu=gpu-3",
        ),
        (
            "never more than exist",
            node(false, &["gpu-3"]),
            vec![gpus(4)],
            "no fit",
        ),
        (
            "two claims of one pod never share a device",
            node(false, &[]),
            vec![gpus(3), gpus(1)],
            "gpu=gpu-0,gpu=gpu-1,gpu=gpu-2 | gpu=gpu-3",
        ),
        (
            "two claims of one pod beyond the node",
            node(false, &[]),
            vec![gpus(3), gpus(2)],
            "no fit",
        ),
        (
            "All takes every matching device",
            node(false, &[]),
            vec![claim().request(request("gpu").class(NVIDIA_DRIVER).all())],
            "gpu=gpu-0,gpu=gpu-1,gpu=gpu-2,gpu=gpu-3",
        ),
        (
            "All fails when one is held",
            node(false, &["gpu-1"]),
            vec![claim().request(request("gpu").class(NVIDIA_DRIVER).all())],
            "no fit",
        ),
        (
            "firstAvailable falls back",
            node(false, &["gpu-0", "gpu-1"]),
            vec![
                claim().request(
                    request("gpu")
                        .or(request("four").class(NVIDIA_DRIVER).count(4))
                        .or(request("two").class(NVIDIA_DRIVER).count(2)),
                ),
            ],
            "gpu/two=gpu-2,gpu/two=gpu-3",
        ),
        (
            "matchAttribute holds across requests",
            node(false, &[]),
            vec![
                claim()
                    .request(request("a").class(NVIDIA_DRIVER))
                    .request(request("b").class(NVIDIA_DRIVER))
                    .match_attribute("gpu.nvidia.com/productName", &[]),
            ],
            "a=gpu-0,b=gpu-1",
        ),
        (
            "matchAttribute on index cannot hold for two devices",
            node(false, &[]),
            vec![
                claim()
                    .request(request("a").class(NVIDIA_DRIVER))
                    .request(request("b").class(NVIDIA_DRIVER))
                    .match_attribute("gpu.nvidia.com/index", &[]),
            ],
            "no fit",
        ),
        (
            "distinctAttribute on productName cannot hold on one model",
            node(false, &[]),
            vec![
                claim()
                    .request(request("a").class(NVIDIA_DRIVER).count(2))
                    .distinct_attribute("gpu.nvidia.com/productName", &[]),
            ],
            "no fit",
        ),
        (
            "MIG: seven 1g.5gb on one GPU",
            node(true, &[]),
            vec![mig("1g.5gb")],
            "mig=gpu-0-mig-1g-5gb-0",
        ),
        (
            "MIG: a whole GPU held blocks its partitions",
            node(true, &["gpu-0", "gpu-1", "gpu-2", "gpu-3"]),
            vec![mig("1g.5gb")],
            "no fit",
        ),
        (
            "MIG: a partition held blocks its whole GPU",
            node(true, &["gpu-0-mig-3g-20gb-0", "gpu-1", "gpu-2", "gpu-3"]),
            vec![gpus(1)],
            "no fit",
        ),
        (
            "MIG: the other half of a GPU stays free",
            node(true, &["gpu-0-mig-3g-20gb-0", "gpu-1", "gpu-2", "gpu-3"]),
            vec![mig("3g.20gb")],
            "mig=gpu-0-mig-3g-20gb-4",
        ),
        (
            "unknown class",
            node(false, &[]),
            vec![claim().request(request("x").class("tpu.example.com"))],
            "no fit",
        ),
        (
            "a selector failing on a device",
            node(false, &[]),
            vec![claim().request(request("x").class("broken"))],
            "no fit",
        ),
    ];
    let mut failures = Vec::new();
    for (name, dra, claims, want) in cases {
        let got = outcome(&dra, claims);
        if got != want {
            failures.push(format!("{name}: got {got}, want {want}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_node_without_devices_fits_no_claim_but_any_pod_without() {
    let none = NodeDra::default();
    assert!(allocate(&pod("p").claim(gpus(1).from_template("g")).build(), &none).is_none());
    assert_eq!(allocate(&pod("q").cpu("1").build(), &none), Some(vec![]));
}

#[test]
fn marking_takes_and_releases_devices() {
    let mut dra = node(false, &[]);
    let p = pod("p").claim(gpus(3).from_template("g")).build();
    let t = allocate(&p, &dra).unwrap();
    dra.mark(&t, true);
    assert_eq!(dra.allocated(), 3);
    assert!(allocate(&p, &dra).is_none(), "only one GPU left");
    assert!((gpu_equivalent(&dra, &t) - 3.0).abs() < 1e-9);
    dra.mark(&t, false);
    assert_eq!(dra.allocated(), 0);
}
