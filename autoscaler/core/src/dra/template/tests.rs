//! Template tests: the slices predicted for a few instance types, and what the NVIDIA
//! classes and the allocator make of them.

use super::*;
use crate::builders::itype;
use crate::dra::allocate::{Allocator, ClaimRef, Inventory, Usage};
use crate::dra::builders::{claim, request};

fn render(s: &ResourceSlice) -> String {
    let mut out = format!("slice {} driver {} pool {}\n", s.name, s.driver, s.pool);
    for c in &s.shared_counters {
        out += &format!("  counters {}: {}\n", c.name, c.counters.len());
    }
    for d in &s.devices {
        let attrs: Vec<String> = d
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let cap: Vec<String> = d.capacity.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let uses: Vec<String> = d
            .consumes_counters
            .iter()
            .map(|c| {
                format!(
                    "{}[{}]",
                    c.counter_set,
                    c.counters.keys().cloned().collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        out += &format!(
            "  {} {} {} {}\n",
            d.name,
            attrs.join(" "),
            cap.join(" "),
            uses.join(" ")
        );
    }
    out
}

#[test]
fn nvidia_templates() {
    let l4 = itype("g6.2xlarge").gpus(1, "L4", 22).build();
    let a100 = itype("p4d.24xlarge").gpus(1, "A100-40GB", 40).build();
    let cpu = itype("m5.large").cpu("2").build();
    let mut out = render(&nvidia_slice(&l4, "node-a", false).unwrap());
    out += &render(&nvidia_slice(&a100, "node-b", true).unwrap());
    out += &format!("cpu-only: {:?}\n", nvidia_slice(&cpu, "node-c", true));
    expect_test::expect_file!["templates.txt"].assert_eq(&out);
}

/// The driver's own classes select the template's devices: whole GPUs for `gpu.nvidia.com`,
/// MIG partitions for `mig.nvidia.com`, and the counters keep the partitions within one GPU.
#[test]
fn nvidia_classes_allocate_from_templates() {
    let classes = nvidia_classes()
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();
    let mut alloc = Allocator::new(&classes);
    let h100 = itype("p5.48xlarge").gpus(8, "H100", 80).build();
    let slice = nvidia_slice(&h100, "n", true).unwrap();
    let inv = Inventory::new([&slice]);
    let whole = claim()
        .request(request("gpu").class(NVIDIA_DRIVER).count(8))
        .build();
    let got = alloc
        .allocate(
            "n",
            &inv,
            &Usage::default(),
            &[ClaimRef {
                name: "c",
                spec: &whole,
            }],
        )
        .unwrap();
    assert_eq!(got[0].devices.len(), 8);
    assert!(
        got[0]
            .devices
            .iter()
            .all(|d| !d.device.device.contains("mig"))
    );
    // Eight GPUs hold 8 x 7 = 56 1g partitions and not one more.
    let mig = |n| {
        claim()
            .request(
                request("mig")
                    .class(NVIDIA_MIG_CLASS)
                    .count(n)
                    .selector("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"),
            )
            .build()
    };
    let (fits, too_many) = (mig(56), mig(57));
    assert!(
        alloc
            .allocate(
                "n",
                &inv,
                &Usage::default(),
                &[ClaimRef {
                    name: "c",
                    spec: &fits
                }]
            )
            .is_ok()
    );
    assert!(
        alloc
            .allocate(
                "n",
                &inv,
                &Usage::default(),
                &[ClaimRef {
                    name: "c",
                    spec: &too_many
                }]
            )
            .is_err()
    );
}
