//! The `openb` suite: provision the Alibaba openb trace (`openb_pod_list_default.csv`) from
//! zero, on instance types made from the distinct node shapes of
//! `openb_node_list_all_node.csv`.
//!
//! # Pricing model
//!
//! The trace has no prices, so each shape is priced as
//! `vCPUs × 0.031611 + GiB × 0.004237 + GPUs × rate(model)` USD per hour: the vCPU and GiB
//! rates are Google Compute Engine's N1 on-demand list prices (us-central1), the GPU rates are
//! [`GPU_RATES`]. Only relative prices matter to the planner; the model makes bigger and
//! better-equipped machines dearer in a plausible way.
//!
//! # Pods
//!
//! Every pod of the list is pending (its phase at trace end does not matter: the question is
//! what capacity the whole workload needs). `num_gpu = 1` with `gpu_milli < 1000` is a
//! fractional share of one device; otherwise `num_gpu` whole GPUs. A non-empty `gpu_spec` pins
//! the pod to those GPU models through `gpu-autoscaler.dev/instance-gpu-name`. One NodePool,
//! no taints, fractional sharing on, one zone, on-demand only.
//!
//! # How high `gpu_allocation` can go
//!
//! Not to 1, and for the default list not to 0.964 either. Its 4,166 fractional shares
//! (1,731.8 GPUs' worth) cannot fill devices exactly: 1,078 of them ask 810/1000 of a GPU and
//! need a device each, and the 190/1000 left on each can only take shares of at most 190, of
//! which the list has 14.8 GPUs' worth (at least 189.8 GPUs idle, [`super::share_waste_bound`]);
//! and packing all the shares' sizes at once, the bin-packing LP
//! ([`autoscaler_core::lp::devices::share_devices_lower_bound`]) proves they need at least
//! 1,965 devices, 233.2 GPUs more than they ask. With the 4,355 whole GPUs the other pods ask,
//! allocation is at most 6,086.8 / 6,320 = 0.963 whatever the plan (the report's
//! `gpu_allocation_max`, the larger idle of the two bounds: [`super::share_idle_bound`]).

use std::collections::BTreeSet;

use autoscaler_core::builders::{itype, pod, pool};
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{GpuSharing, Pod, Snapshot};
use autoscaler_core::requirements::Operator;
use autoscaler_sim::traces::openb::{NodeRecord, PodRecord};

/// The pod list the suite replays.
pub(crate) const POD_LIST: &str = "openb/openb_pod_list_default.csv";
/// The node list whose shapes become instance types.
pub(crate) const NODE_LIST: &str = "openb/openb_node_list_all_node.csv";

/// USD per vCPU-hour (GCE N1 on-demand, us-central1).
pub(crate) const VCPU_RATE: f64 = 0.031611;
/// USD per GiB-hour (GCE N1 on-demand, us-central1).
pub(crate) const GIB_RATE: f64 = 0.004237;
/// USD per GPU-hour and memory per device (GiB) by the trace's model name. T4, P100 and V100:
/// GCE on-demand GPU list prices (us-central1). V100M32: the V100 rate plus 20% for the 32 GB
/// part (assumption). A10: AWS g5.xlarge's price less an m5.xlarge's, the GPU's share of the
/// machine. G2 and G3 are anonymised in the trace: assumed mid-range (1.00) and high-end
/// (2.00). An unknown model is priced like G3.
pub(crate) const GPU_RATES: [(&str, f64, u64); 7] = [
    ("T4", 0.35, 16),
    ("P100", 1.46, 16),
    ("V100M16", 2.48, 16),
    ("V100M32", 2.976, 32),
    ("A10", 0.814, 24),
    ("G2", 1.00, 16),
    ("G3", 2.00, 32),
];
const UNKNOWN_RATE: (f64, u64) = (2.00, 32);
const ZONE: &str = "openb-zone-a";

/// One line describing the pricing model, for the table header and the JSON.
pub(crate) fn pricing_note() -> String {
    let gpus: Vec<String> = GPU_RATES
        .iter()
        .map(|(m, r, _)| format!("{m} {r}"))
        .collect();
    format!(
        "openb prices (USD/h): vCPU {VCPU_RATE} + GiB {GIB_RATE} + per GPU {}",
        gpus.join(", ")
    )
}

fn rate(model: &str) -> (f64, u64) {
    GPU_RATES
        .iter()
        .find(|(m, _, _)| *m == model)
        .map_or(UNKNOWN_RATE, |(_, r, mem)| (*r, *mem))
}

/// The distinct node shapes as instance types, in a stable order.
pub(crate) fn instance_types(nodes: &[NodeRecord]) -> Vec<InstanceType> {
    let shapes: BTreeSet<(u32, String, u64, u64)> = nodes
        .iter()
        .map(|n| {
            let model = if n.gpus > 0 {
                n.model.clone().unwrap_or_default()
            } else {
                String::new()
            };
            (n.gpus, model, n.cpu_milli, n.memory_mib)
        })
        .collect();
    shapes
        .into_iter()
        .map(|(gpus, model, cpu_milli, memory_mib)| {
            let kind = if gpus > 0 {
                model.to_lowercase()
            } else {
                "cpu".into()
            };
            let name = format!(
                "openb-{kind}-{gpus}g-{}c-{}gi",
                cpu_milli / 1000,
                memory_mib / 1024
            );
            let vcpus = cpu_milli as f64 / 1000.0;
            let gib = memory_mib as f64 / 1024.0;
            let mut price = vcpus * VCPU_RATE + gib * GIB_RATE;
            let mut b = itype(&name)
                .cpu(&format!("{cpu_milli}m"))
                .mem(&format!("{memory_mib}Mi"));
            if gpus > 0 {
                let (r, mem) = rate(&model);
                price += f64::from(gpus) * r;
                let label = if model.is_empty() { "unknown" } else { &model };
                b = b.gpus(gpus, label, mem);
            }
            b.offer(ZONE, CapacityType::OnDemand, price).build()
        })
        .collect()
}

/// A pod of the trace in the core's vocabulary.
pub(crate) fn to_pod(r: &PodRecord) -> Pod {
    let mut b = pod(&r.name)
        .cpu(&format!("{}m", r.cpu_milli))
        .mem(&format!("{}Mi", r.memory_mib));
    if let Some(milli) = r.gpu_share() {
        b = b.gpu_share(milli);
    } else if r.num_gpu > 0 {
        b = b.gpus(i64::from(r.num_gpu));
    }
    if !r.gpu_spec.is_empty() {
        let models: Vec<String> = r.gpu_spec.iter().map(|m| m.to_lowercase()).collect();
        let refs: Vec<&str> = models.iter().map(String::as_str).collect();
        b = b.require(labels::GPU_NAME, Operator::In, &refs);
    }
    b.build()
}

/// The suite's snapshot: every pod pending, one NodePool of the node shapes.
pub(crate) fn snapshot(nodes: &[NodeRecord], pods: &[PodRecord]) -> Snapshot {
    let p = pool("openb", instance_types(nodes))
        .sharing(GpuSharing {
            fractional: true,
            ..GpuSharing::default()
        })
        .build();
    Snapshot {
        pending: pods.iter().map(to_pod).collect(),
        pools: vec![p],
        ..Snapshot::default()
    }
}
