//! The default fake's catalog: machine types and accelerator types of four us-central1
//! zones.

/// Machine types of the default fake: (name, vCPUs, memory MiB, built-in accelerator, zones).
type MachineRow = (
    &'static str,
    i64,
    i64,
    Option<(&'static str, i64)>,
    &'static [&'static str],
);

const ABCF: &[&str] = &[
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
    "us-central1-f",
];
const ABC: &[&str] = &["us-central1-a", "us-central1-b", "us-central1-c"];
const AB: &[&str] = &["us-central1-a", "us-central1-b"];
const A: &[&str] = &["us-central1-a"];

pub(super) fn default_machines() -> Vec<MachineRow> {
    vec![
        ("e2-micro", 2, 1024, None, ABCF),
        ("e2-standard-4", 4, 16384, None, ABCF),
        ("e2-standard-8", 8, 32768, None, ABCF),
        ("n2-standard-8", 8, 32768, None, ABCF),
        ("n1-standard-4", 4, 15360, None, ABCF),
        ("n1-standard-8", 8, 30720, None, ABCF),
        ("n1-standard-16", 16, 61440, None, ABCF),
        ("n1-standard-32", 32, 122880, None, ABCF),
        ("n1-standard-64", 64, 245760, None, ABCF),
        ("n1-highmem-96", 96, 638976, None, ABCF),
        ("g2-standard-4", 4, 16384, Some(("nvidia-l4", 1)), ABC),
        ("g2-standard-8", 8, 32768, Some(("nvidia-l4", 1)), ABC),
        ("g2-standard-24", 24, 98304, Some(("nvidia-l4", 2)), ABC),
        ("g2-standard-48", 48, 196608, Some(("nvidia-l4", 4)), ABC),
        ("g2-standard-96", 96, 393216, Some(("nvidia-l4", 8)), ABC),
        (
            "a2-highgpu-1g",
            12,
            87040,
            Some(("nvidia-tesla-a100", 1)),
            ABCF,
        ),
        (
            "a2-highgpu-8g",
            96,
            696320,
            Some(("nvidia-tesla-a100", 8)),
            ABCF,
        ),
        (
            "a2-megagpu-16g",
            96,
            1392640,
            Some(("nvidia-tesla-a100", 16)),
            ABCF,
        ),
        (
            "a2-ultragpu-1g",
            12,
            174080,
            Some(("nvidia-a100-80gb", 1)),
            AB,
        ),
        (
            "a2-ultragpu-8g",
            96,
            1392640,
            Some(("nvidia-a100-80gb", 8)),
            AB,
        ),
        (
            "a3-highgpu-1g",
            26,
            239616,
            Some(("nvidia-h100-80gb", 1)),
            AB,
        ),
        (
            "a3-highgpu-8g",
            208,
            1916928,
            Some(("nvidia-h100-80gb", 8)),
            AB,
        ),
        (
            "a3-megagpu-8g",
            208,
            1916928,
            Some(("nvidia-h100-mega-80gb", 8)),
            A,
        ),
        (
            "a3-ultragpu-8g",
            224,
            3022848,
            Some(("nvidia-h200-141gb", 8)),
            A,
        ),
        ("a4-highgpu-8g", 224, 3968000, Some(("nvidia-b200", 8)), A),
        (
            "g4-standard-48",
            48,
            184320,
            Some(("nvidia-rtx-pro-6000", 1)),
            A,
        ),
    ]
}

/// Accelerator types of the default fake: (name, description, max cards, zones).
pub(super) fn default_accelerators()
-> Vec<(&'static str, &'static str, i64, &'static [&'static str])> {
    vec![
        ("nvidia-tesla-t4", "NVIDIA T4", 4, ABCF),
        ("nvidia-tesla-v100", "NVIDIA V100", 8, AB),
        (
            "nvidia-tesla-p100",
            "NVIDIA P100",
            4,
            &["us-central1-c", "us-central1-f"],
        ),
        (
            "nvidia-tesla-p4",
            "NVIDIA P4",
            4,
            &["us-central1-a", "us-central1-c"],
        ),
        ("nvidia-l4", "NVIDIA L4", 8, ABC),
        ("nvidia-tesla-a100", "NVIDIA A100 40GB", 16, ABCF),
        ("nvidia-a100-80gb", "NVIDIA A100 80GB", 8, AB),
        ("nvidia-h100-80gb", "NVIDIA H100 80GB", 8, AB),
        ("nvidia-h100-mega-80gb", "NVIDIA H100 Mega 80GB", 8, A),
        ("nvidia-h200-141gb", "NVIDIA H200 141GB", 8, A),
        ("nvidia-b200", "NVIDIA B200", 8, A),
        ("nvidia-rtx-pro-6000", "NVIDIA RTX PRO 6000", 8, A),
    ]
}
