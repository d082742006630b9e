//! Allocator tests: a table of (inventory, taken devices, claims) with the allocation or the
//! reason each must give, in `allocations.txt`.

use std::collections::BTreeMap;

use super::*;
use crate::dra::builders::*;
use crate::dra::{ClaimSpec, DeviceClass, ResourceSlice};

const NV: &str = "gpu.nvidia.com";

fn classes() -> BTreeMap<String, DeviceClass> {
    [
        class_with(
            NV,
            &["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"],
        ),
        class_with(
            "mig.nvidia.com",
            &["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"],
        ),
        class_with("broken.example.com", &["device.attributes['gpu.nvidia.com'].nope == 1"]),
    ]
    .into_iter()
    .map(|c| (c.name.clone(), c))
    .collect()
}

/// `n` GPUs of `model` with `mem` each; PCIe roots alternate `pci-a`, `pci-b`.
fn gpus(n: usize, model: &str, mem: &str) -> ResourceSlice {
    (0..n)
        .fold(slice("node", NV), |s, i| {
            s.device(
                device(&format!("gpu-{i}"))
                    .string("type", "gpu")
                    .string("productName", model)
                    .int("index", i as i64)
                    .string("pcieRoot", if i % 2 == 0 { "pci-a" } else { "pci-b" })
                    .capacity("memory", mem),
            )
        })
        .build()
}

/// One A100 as a partitionable device: the whole GPU (8 memory slices, 7 compute slices) or
/// MIG partitions drawing from the same counters.
fn a100_mig() -> ResourceSlice {
    let mut s = slice("node", NV)
        .counters(
            "gpu-0-counters",
            &[("memorySlices", "8"), ("computeSlices", "7")],
        )
        .device(
            device("gpu-0")
                .string("type", "gpu")
                .capacity("memory", "40Gi")
                .consumes(
                    "gpu-0-counters",
                    &[("memorySlices", "8"), ("computeSlices", "7")],
                ),
        );
    for (profile, n, mem, comp) in [("3g.20gb", 2, "4", "3"), ("1g.5gb", 7, "1", "1")] {
        for i in 0..n {
            s = s.device(
                device(&format!("gpu-0-mig-{profile}-{i}"))
                    .string("type", "mig")
                    .string("profile", profile)
                    .consumes(
                        "gpu-0-counters",
                        &[("memorySlices", mem), ("computeSlices", comp)],
                    ),
            );
        }
    }
    s.build()
}

fn one(r: RequestBuilder) -> ClaimSpec {
    claim().request(r).build()
}

fn run(slices: &[ResourceSlice], taken: &[&str], claims: &[ClaimSpec]) -> String {
    let classes = classes();
    let mut alloc = Allocator::new(&classes);
    let inv = Inventory::new(slices);
    let mut usage = Usage::default();
    for t in taken {
        usage.taken.insert(DeviceId {
            driver: NV.into(),
            pool: "node".into(),
            device: t.to_string(),
        });
    }
    let refs: Vec<ClaimRef<'_>> = claims
        .iter()
        .enumerate()
        .map(|(i, spec)| ClaimRef {
            name: ["first", "second", "third"][i],
            spec,
        })
        .collect();
    if let Err(Failure::Invalid(why)) = alloc.validate(&refs) {
        return format!("invalid (before search): {why}");
    }
    match alloc.allocate("node", &inv, &usage, &refs) {
        Ok(allocs) => allocs
            .iter()
            .map(|a| {
                a.devices
                    .iter()
                    .map(|d| format!("{}={}", d.request, d.device.device))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join(" | "),
        Err(Failure::NoFit(why)) => format!("no fit: {why}"),
        Err(Failure::Invalid(why)) => format!("invalid: {why}"),
    }
}

#[test]
fn allocations_table() {
    let four = [gpus(4, "H100", "80Gi")];
    let gpu = || request("gpu").class(NV);
    let cases: Vec<(&str, String)> = vec![
        ("two of four", run(&four, &[], &[one(gpu().count(2))])),
        (
            "two of four, first two taken",
            run(&four, &["gpu-0", "gpu-1"], &[one(gpu().count(2))]),
        ),
        (
            "three of four, two taken",
            run(&four, &["gpu-0", "gpu-3"], &[one(gpu().count(3))]),
        ),
        ("all", run(&four, &[], &[one(gpu().all())])),
        (
            "all, one taken",
            run(&four, &["gpu-2"], &[one(gpu().all())]),
        ),
        ("all of none", run(&[], &[], &[one(gpu().all())])),
        (
            "selector on memory",
            run(
                &four,
                &[],
                &[one(gpu().selector(
                    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
                ))],
            ),
        ),
        (
            "firstAvailable falls back",
            run(
                &[gpus(4, "L4", "24Gi")],
                &[],
                &[one(request("gpu")
                    .or(request("big").class(NV).selector(
                        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0",
                    ))
                    .or(request("small").class(NV).count(2)))],
            ),
        ),
        (
            "firstAvailable takes the first",
            run(
                &four,
                &[],
                &[one(request("gpu")
                    .or(request("big").class(NV).selector(
                        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0",
                    ))
                    .or(request("small").class(NV).count(2)))],
            ),
        ),
        (
            "matchAttribute backtracks to one PCIe root",
            run(
                &four,
                &["gpu-0"],
                &[claim()
                    .request(gpu().count(2))
                    .match_attribute("gpu.nvidia.com/pcieRoot", &[])
                    .build()],
            ),
        ),
        (
            "matchAttribute across two requests",
            run(
                &four,
                &["gpu-0"],
                &[claim()
                    .request(request("a").class(NV))
                    .request(request("b").class(NV))
                    .match_attribute("gpu.nvidia.com/pcieRoot", &["a", "b"])
                    .build()],
            ),
        ),
        (
            "distinctAttribute",
            run(
                &four,
                &[],
                &[claim()
                    .request(gpu().count(2))
                    .distinct_attribute("gpu.nvidia.com/pcieRoot", &[])
                    .build()],
            ),
        ),
        (
            "distinctAttribute cannot hold for three",
            run(
                &four,
                &[],
                &[claim()
                    .request(gpu().count(3))
                    .distinct_attribute("gpu.nvidia.com/pcieRoot", &[])
                    .build()],
            ),
        ),
        (
            "constraint on a missing attribute",
            run(
                &four,
                &[],
                &[claim()
                    .request(gpu().count(2))
                    .match_attribute("gpu.nvidia.com/nvlinkDomain", &[])
                    .build()],
            ),
        ),
        (
            "two claims take distinct devices",
            run(&four, &["gpu-1"], &[one(gpu().count(2)), one(gpu())]),
        ),
        (
            "two claims, not enough together",
            run(
                &four,
                &["gpu-1"],
                &[one(gpu().count(2)), one(gpu().count(2))],
            ),
        ),
        (
            "MIG: two 3g partitions share one GPU's counters",
            run(
                &[a100_mig()],
                &[],
                &[one(request("mig")
                    .class("mig.nvidia.com")
                    .count(2)
                    .selector(
                        "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'",
                    ))],
            ),
        ),
        (
            "MIG: a 3g partition and two 1g after one 3g is taken",
            run(
                &[a100_mig()],
                &["gpu-0-mig-3g.20gb-0"],
                &[claim()
                    .request(
                        request("m3")
                            .class("mig.nvidia.com")
                            .selector("device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"),
                    )
                    .request(
                        request("m1")
                            .class("mig.nvidia.com")
                            .count(2)
                            .selector("device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"),
                    )
                    .build()],
            ),
        ),
        (
            "MIG: the whole GPU once a partition is taken",
            run(&[a100_mig()], &["gpu-0-mig-1g.5gb-3"], &[one(gpu())]),
        ),
        (
            "MIG: no partition once the whole GPU is taken",
            run(
                &[a100_mig()],
                &["gpu-0"],
                &[one(request("mig").class("mig.nvidia.com"))],
            ),
        ),
        (
            "MIG: seven 1g partitions, not eight",
            run(
                &[a100_mig()],
                &[],
                &[one(request("mig")
                    .class("mig.nvidia.com")
                    .count(8)
                    .selector(
                        "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",
                    ))],
            ),
        ),
        (
            "unknown class",
            run(&four, &[], &[one(request("gpu").class("tpu.example.com"))]),
        ),
        (
            "selector does not compile",
            run(
                &four,
                &[],
                &[one(gpu().selector("device.attributes[ == 1"))],
            ),
        ),
        (
            "class selector fails at runtime",
            run(
                &four,
                &[],
                &[one(request("gpu").class("broken.example.com"))],
            ),
        ),
        (
            "search gives up",
            run(
                &[(0..200)
                    .fold(slice("node", NV), |s, i| {
                        s.device(
                            device(&format!("d{i}"))
                                .string("type", "gpu")
                                .string("root", "same"),
                        )
                    })
                    .build()],
                &[],
                &[claim()
                    .request(gpu().count(2))
                    .distinct_attribute("gpu.nvidia.com/root", &[])
                    .build()],
            ),
        ),
    ];
    let out: String = cases
        .iter()
        .map(|(n, r)| format!("{n}\n  => {r}\n"))
        .collect();
    expect_test::expect_file!["allocations.txt"].assert_eq(&out);
}

#[test]
fn slices_reach_their_nodes() {
    use crate::requirements::{Labels, NodeSelector};
    let labels: Labels = [("zone".to_string(), "a".to_string())].into();
    let local = slice("n1", NV).build();
    let everywhere = slice("n1", NV)
        .nodes(crate::dra::SliceNodes::AllNodes)
        .build();
    let none = slice("n1", NV)
        .nodes(crate::dra::SliceNodes::Selector(NodeSelector::default()))
        .build();
    assert!(reaches(&local, "n1", &labels));
    assert!(!reaches(&local, "n2", &labels));
    assert!(reaches(&everywhere, "n2", &labels));
    // An empty selector (no terms) matches as the core's NodeSelector does.
    assert_eq!(
        reaches(&none, "n2", &labels),
        NodeSelector::default().matches(&labels)
    );
}
