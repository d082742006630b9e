//! The `volumes` suite: StatefulSet replicas with an EBS claim each, on a cluster whose nodes
//! publish the EBS CSI driver's attach count in their CSINodes, as EKS nodes running the driver
//! do. Every pending pod attaches a volume of a driver with a known count, which the planner
//! checks on every node and claim it considers.
//!
//! One NodePool over the embedded AWS catalog's types without accelerators. Per type, two
//! existing nodes that attach at most [`COUNT`] EBS volumes and hold [`ATTACHED`] pods with one
//! claim each (room for five more volumes each, where their cpu allows). Pending: [`PODS`] pods by default, in
//! StatefulSets of [`REPLICAS`] replicas; a set's cpu (250m to 2) and memory (512Mi to 4Gi)
//! are drawn from a fixed seed, and each replica has its own claim (`data-<set>-<i>`).

use autoscaler_core::builders::{node, pod, pool};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{Pod, Snapshot};

use super::rng::SplitMix64;

/// Pending pods of the suite's default case.
pub(crate) const PODS: usize = 10_000;
/// Replicas per StatefulSet.
pub(crate) const REPLICAS: usize = 200;
/// The EBS attach count every node publishes.
pub(crate) const COUNT: u32 = 25;
/// Pods with a claim already on each existing node.
pub(crate) const ATTACHED: usize = 20;
/// The suite's seed.
pub(crate) const SEED: u64 = 0x766f_6c75_6d65_7300;

const EBS: &str = "ebs.csi.aws.com";

/// The snapshot with `pods` pending pods.
pub(crate) fn snapshot(pods: usize) -> Snapshot {
    let catalog = providers::catalog::default_catalog_for(providers::catalog::AWS);
    let types: Vec<InstanceType> = catalog.into_iter().filter(|t| t.gpu.is_none()).collect();
    let mut nodes = Vec::new();
    for t in &types {
        let Some(zone) = t.offerings.first().map(|o| o.zone.clone()) else {
            continue;
        };
        for k in 0..2 {
            let name = format!("{}-{k}", t.name);
            let mut b = node(&name, t, &zone)
                .pool("default")
                .volume_limit(EBS, COUNT);
            for v in 0..ATTACHED {
                let p = format!("{name}-run-{v}");
                b = b.with_pod(
                    pod(&p)
                        .cpu("100m")
                        .mem("128Mi")
                        .volume(EBS, &format!("default/data-{p}")),
                );
            }
            nodes.push(b.build());
        }
    }
    let mut rng = SplitMix64::new(SEED);
    let mut pending: Vec<Pod> = Vec::with_capacity(pods);
    let mut set = 0;
    while pending.len() < pods {
        let cpu = rng.pick(&["250m", "500m", "1", "2"]);
        let mem = rng.pick(&["512Mi", "1Gi", "2Gi", "4Gi"]);
        let app = format!("db-{set:03}");
        for i in 0..REPLICAS.min(pods - pending.len()) {
            let name = format!("{app}-{i}");
            pending.push(
                pod(&name)
                    .label("app", &app)
                    .cpu(cpu)
                    .mem(mem)
                    .volume(EBS, &format!("default/data-{name}"))
                    .build(),
            );
        }
        set += 1;
    }
    Snapshot {
        pending,
        nodes,
        pools: vec![pool("default", types).build()],
        ..Snapshot::default()
    }
}
