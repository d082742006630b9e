//! Kubelet and system reserve: the part of a machine pods never get.
//!
//! Both managed Kubernetes services reserve CPU on the same sliding scale; memory differs:
//!
//! - CPU (EKS and GKE): 6% of the first core, 1% of the second, 0.5% of the third and fourth,
//!   0.25% of every core above four.
//! - Memory, EKS style: 255 MiB + 11 MiB per pod the node may run (`max_pods`).
//! - Memory, GKE style: 255 MiB on machines under 1 GiB; otherwise 25% of the first 4 GiB, 20% of
//!   the next 4 GiB, 10% of the next 8 GiB, 6% of the next 112 GiB and 2% above 128 GiB, rounded
//!   up to a whole MiB.
//! - Eviction threshold on both: 100 MiB of memory, and 10% of the root volume.
//! - Ephemeral storage: 1 GiB kube-reserved plus that 10% eviction threshold.

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// Memory the kubelet evicts pods to keep free (`memory.available<100Mi`).
pub const EVICTION_MEMORY: i64 = 100 * MIB;

/// Kube-reserved CPU in millicores for a machine with `vcpu` cores (rounded up).
pub fn cpu_millis(vcpu: u32) -> i64 {
    // In tenths of a millicore, so that 0.25% of a core (2.5m) stays exact.
    let tenths: i64 = (1..=i64::from(vcpu))
        .map(|core| match core {
            1 => 600,
            2 => 100,
            3 | 4 => 50,
            _ => 25,
        })
        .sum();
    (tenths + 9) / 10
}

/// EKS-style kube-reserved memory in bytes for a node running at most `max_pods` pods.
pub fn eks_memory(max_pods: u32) -> i64 {
    (255 + 11 * i64::from(max_pods)) * MIB
}

/// GKE-style kube-reserved memory in bytes for a machine with `memory` bytes.
pub fn gke_memory(memory: i64) -> i64 {
    if memory < GIB {
        return 255 * MIB;
    }
    // (upper bound of the tier, percent reserved within it)
    const TIERS: [(i64, i64); 5] = [
        (4 * GIB, 25),
        (8 * GIB, 20),
        (16 * GIB, 10),
        (128 * GIB, 6),
        (i64::MAX, 2),
    ];
    let mut reserved = 0;
    let mut lower = 0;
    for (upper, percent) in TIERS {
        if memory <= lower {
            break;
        }
        let in_tier = memory.min(upper) - lower;
        reserved += in_tier * percent / 100;
        lower = upper;
    }
    // Whole MiB, rounded up, as kubelet flags are written.
    (reserved + MIB - 1) / MIB * MIB
}

/// Reserved plus eviction-threshold ephemeral storage in bytes for a root volume of `root`
/// bytes.
pub fn ephemeral_storage(root: i64) -> i64 {
    GIB + (root + 9) / 10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_scale() {
        assert_eq!(cpu_millis(1), 60);
        assert_eq!(cpu_millis(2), 70);
        assert_eq!(cpu_millis(4), 80);
        assert_eq!(cpu_millis(8), 90);
        assert_eq!(cpu_millis(5), 83); // 82.5 rounded up
        assert_eq!(cpu_millis(96), 310);
    }

    #[test]
    fn memory_scales() {
        assert_eq!(eks_memory(29), 574 * MIB);
        assert_eq!(eks_memory(110), 1465 * MIB);
        assert_eq!(gke_memory(512 * MIB), 255 * MIB);
        assert_eq!(gke_memory(4 * GIB), GIB);
        // 1 GiB + 0.8 GiB
        assert_eq!(gke_memory(8 * GIB), (1024 + 820) * MIB); // 1 GiB + 819.2 MiB
        // 1024 + 819.2 + 819.2 MiB + 6% of 16 GiB (983.04 MiB)
        assert_eq!(gke_memory(32 * GIB), 3646 * MIB);
        assert_eq!(ephemeral_storage(20 * GIB), 3 * GIB);
    }
}
