//! Every NVIDIA instance type of the embedded AWS and GCP catalogs gets a DRA template: one
//! `gpu.nvidia.com` device per GPU with a known architecture, and MIG partitions exactly for
//! the MIG-capable models; the driver's `gpu.nvidia.com` class selects all the GPUs.

use autoscaler_core::dra::allocate::{Allocator, ClaimRef, Inventory, Usage};
use autoscaler_core::dra::builders::{claim, request};
use autoscaler_core::dra::template::{NVIDIA_DRIVER, nvidia_classes, nvidia_slice};

#[test]
fn every_nvidia_type_of_the_embedded_catalogs_has_a_template() {
    let classes = nvidia_classes()
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();
    let mut alloc = Allocator::new(&classes);
    let mut summary = String::new();
    for provider in [providers::catalog::AWS, providers::catalog::GCP] {
        for it in providers::catalog::default_catalog_for(provider) {
            let Some(gpu) = it.gpu.clone() else {
                assert!(nvidia_slice(&it, "n", true).is_none(), "{}", it.name);
                continue;
            };
            let slice = nvidia_slice(&it, "n", true);
            if gpu.vendor != "nvidia" {
                assert!(
                    slice.is_none(),
                    "{}: {} GPUs get no NVIDIA template",
                    it.name,
                    gpu.vendor
                );
                continue;
            }
            let slice = slice.expect("NVIDIA type has a template");
            let whole: Vec<_> = slice
                .devices
                .iter()
                .filter(|d| !d.name.contains("-mig-"))
                .collect();
            assert_eq!(whole.len(), gpu.count as usize, "{}", it.name);
            assert!(
                whole
                    .iter()
                    .all(|d| d.attributes.contains_key("architecture")),
                "{}: model {} has no architecture",
                it.name,
                gpu.model
            );
            let mig = slice.devices.len() - whole.len();
            let spec = claim()
                .request(request("gpu").class(NVIDIA_DRIVER).count(gpu.count))
                .build();
            let inv = Inventory::new([&slice]);
            let got = alloc
                .allocate(
                    "n",
                    &inv,
                    &Usage::default(),
                    &[ClaimRef {
                        name: "c",
                        spec: &spec,
                    }],
                )
                .unwrap_or_else(|e| panic!("{}: {e:?}", it.name));
            assert_eq!(got[0].devices.len(), gpu.count as usize);
            summary += &format!(
                "{provider} {} {}x{}: {} mig devices\n",
                it.name, gpu.count, gpu.model, mig
            );
        }
    }
    expect_test::expect_file!["dra_templates.txt"].assert_eq(&summary);
}
