//! Well-known label, taint and annotation names the core reads or writes.

/// `kubernetes.io/hostname`.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// The label the API server gives every Namespace, with its name as the value.
pub const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
/// `topology.kubernetes.io/zone`.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// AWS's zone ID (`use1-az1`), the same physical zone in every account; read as the zones it
/// names ([`crate::zone_ids`]).
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// Deprecated and driver-specific keys that name a well-known label, with the key they are
/// read as. Kubernetes still sets the `beta` and `failure-domain` labels beside the stable
/// ones, and the EBS, GCE PD and Azure Disk CSI drivers write their own zone key into the node
/// affinity of the volumes they provision; Karpenter reads each as the stable key
/// (`NormalizedLabels`, with the AWS and Azure providers adding their CSI zone keys), so a
/// requirement on one is a requirement on the other.
pub const NORMALIZED: &[(&str, &str)] = &[
    (ZONE_BETA, ZONE),
    (REGION_BETA, REGION),
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
    ("topology.ebs.csi.aws.com/zone", ZONE),
    ("topology.gke.io/zone", ZONE),
    ("topology.disk.csi.azure.com/zone", ZONE),
];

/// The key a requirement on `key` is read as ([`NORMALIZED`]); `key` itself for every other.
pub fn normalized(key: &str) -> &str {
    NORMALIZED
        .iter()
        .find(|(from, _)| *from == key)
        .map_or(key, |(_, to)| to)
}

/// `topology.kubernetes.io/region`.
pub const REGION: &str = "topology.kubernetes.io/region";
/// `failure-domain.beta.kubernetes.io/zone`, deprecated for [`ZONE`] ([`NORMALIZED`]).
pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
/// `failure-domain.beta.kubernetes.io/region`, deprecated for [`REGION`] ([`NORMALIZED`]).
pub const REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
/// `node.kubernetes.io/instance-type`.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// `kubernetes.io/arch`.
pub const ARCH: &str = "kubernetes.io/arch";
/// `kubernetes.io/os`.
pub const OS: &str = "kubernetes.io/os";
/// Capacity type (`spot` / `on-demand`), Karpenter's well-known key so users' selectors carry over.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// The NodePool that owns a node.
pub const NODEPOOL: &str = "gpu-autoscaler.dev/nodepool";
/// Instance family (`p4d`, `a2`), provider-neutral.
pub const INSTANCE_FAMILY: &str = "gpu-autoscaler.dev/instance-family";
/// Instance size (`24xlarge`, `highgpu-8g`).
pub const INSTANCE_SIZE: &str = "gpu-autoscaler.dev/instance-size";
/// GPU vendor (`nvidia`, `amd`), provider-neutral.
pub const GPU_MANUFACTURER: &str = "gpu-autoscaler.dev/instance-gpu-manufacturer";
/// GPU model short name (`h100`, `a100`, `l4`), provider-neutral, lower case.
pub const GPU_NAME: &str = "gpu-autoscaler.dev/instance-gpu-name";
/// Number of physical GPUs on the instance.
pub const GPU_COUNT: &str = "gpu-autoscaler.dev/instance-gpu-count";
/// Memory per GPU in MiB.
pub const GPU_MEMORY: &str = "gpu-autoscaler.dev/instance-gpu-memory";
/// GPU Feature Discovery's product label (`NVIDIA-H100-80GB-HBM3`, `-SHARED` when time-sliced).
pub const NVIDIA_PRODUCT: &str = "nvidia.com/gpu.product";
/// GPU Feature Discovery's memory label, MiB per GPU.
pub const NVIDIA_MEMORY: &str = "nvidia.com/gpu.memory";
/// GPU Feature Discovery's GPU count label.
pub const NVIDIA_COUNT: &str = "nvidia.com/gpu.count";
/// GPU Operator's time-slicing replicas label.
pub const NVIDIA_REPLICAS: &str = "nvidia.com/gpu.replicas";
/// GPU Operator's MIG configuration label (requested layout).
pub const NVIDIA_MIG_CONFIG: &str = "nvidia.com/mig.config";
/// GPU Operator's MIG reconfiguration state (`pending`, `rebooting`, `success`, `failed`).
pub const NVIDIA_MIG_CONFIG_STATE: &str = "nvidia.com/mig.config.state";
/// GPU Operator's MIG strategy label.
pub const NVIDIA_MIG_STRATEGY: &str = "nvidia.com/mig.strategy";
/// GKE's accelerator label, for users coming from GKE.
pub const GKE_ACCELERATOR: &str = "cloud.google.com/gke-accelerator";
