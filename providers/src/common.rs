//! What every real cloud provider needs alike: the retry policy for throttled and failed API
//! calls, token-bucket settings, and the node labels of an instance type and its GPUs.
//!
//! Plain data and pure functions only (no clock, no randomness source, no async), so that this
//! crate stays cheap for the simulator; the provider crates own their rate limiters and sleep.

use std::time::Duration;

use autoscaler_core::{GpuSpec, Labels, gpu, labels};
use serde::{Deserialize, Serialize};

/// Retries of throttled calls, 5xx answers, timeouts and connection failures: exponential
/// backoff with full jitter, `min(max_delay, base_delay * 2^attempt) * random[0, 1)`.
///
/// Full jitter (rather than a fixed doubling) spreads the retries of many callers that failed
/// together, which is what throttling is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Backoff base in milliseconds.
    pub base_delay_ms: u64,
    /// Backoff cap in milliseconds.
    pub max_delay_ms: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 5,
            base_delay_ms: 200,
            max_delay_ms: 10_000,
        }
    }
}

/// Checks settings that are durations (given with their field names) against the project's
/// bound of ten years ([`autoscaler_core::duration::MAX_DURATION`]), so that a mistyped
/// timeout is refused when the file is read rather than overflowing a deadline later.
///
/// # Errors
/// The first field that is longer, with its value.
pub fn check_durations(fields: &[(&str, Duration)]) -> Result<(), String> {
    let max = autoscaler_core::duration::MAX_DURATION;
    match fields.iter().find(|(_, d)| *d > max) {
        Some((name, d)) => Err(format!(
            "{name}: {} s is longer than ten years",
            d.as_secs()
        )),
        None => Ok(()),
    }
}

impl RetrySettings {
    /// The retry delays as named durations, for [`check_durations`].
    pub fn durations(&self) -> [(&'static str, Duration); 2] {
        [
            (
                "retry.base_delay_ms",
                Duration::from_millis(self.base_delay_ms),
            ),
            (
                "retry.max_delay_ms",
                Duration::from_millis(self.max_delay_ms),
            ),
        ]
    }

    /// The largest delay before attempt `attempt + 1` (0-based `attempt`).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay_ms
            .saturating_mul(1u64.checked_shl(attempt.min(30)).unwrap_or(u64::MAX));
        Duration::from_millis(exp.min(self.max_delay_ms))
    }

    /// The delay before attempt `attempt + 1` for a uniform random `unit` in `[0, 1)` (values
    /// outside are clamped), so that the caller owns the randomness and tests can fix it.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.ceiling(attempt).mul_f64(unit)
    }

    /// Whether another attempt may follow `attempts` failed ones.
    pub fn may_retry(&self, attempts: u32) -> bool {
        attempts < self.max_attempts
    }
}

/// One token bucket: a steady rate and a burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Calls per second, steady state (at least 1 is used).
    pub per_second: u32,
    /// Calls allowed at once after a quiet period (at least 1 is used).
    pub burst: u32,
}

impl RateLimit {
    /// A bucket of `per_second` calls per second and `burst` at once.
    pub const fn new(per_second: u32, burst: u32) -> Self {
        RateLimit { per_second, burst }
    }
}

/// A Kubernetes-label-safe, lower-case rendering of a cloud's name for something (`Radeon Pro
/// V520` → `radeon-pro-v520`): alphanumerics, `.` and `_` kept, runs of anything else turned
/// into one `-`, trimmed to alphanumeric ends and 63 characters.
pub fn label_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let t: String = out
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(63)
        .collect();
    t.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The labels every node of an instance type carries whatever its GPUs: instance type, family
/// and size (when the name has one), architecture, OS and region.
pub fn instance_labels(name: &str, family: &str, size: &str, arch: &str, region: &str) -> Labels {
    let mut l = Labels::new();
    l.insert(labels::INSTANCE_TYPE.into(), name.into());
    l.insert(labels::INSTANCE_FAMILY.into(), family.into());
    if !size.is_empty() {
        l.insert(labels::INSTANCE_SIZE.into(), size.into());
    }
    l.insert(labels::ARCH.into(), arch.into());
    l.insert(labels::OS.into(), "linux".into());
    l.insert(labels::REGION.into(), region.into());
    l
}

/// How a GPU is named beyond its [`GpuSpec`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuNames<'a> {
    /// Provider-neutral lower-case short name (`t4`, `a100`), the
    /// [`labels::GPU_NAME`] value.
    pub short: &'a str,
    /// What NVIDIA GPU Feature Discovery reports in [`labels::NVIDIA_PRODUCT`]
    /// (`Tesla-T4`), when known.
    pub product: Option<&'a str>,
    /// The GKE accelerator label value (`nvidia-tesla-t4`), on Google Cloud only.
    pub gke_accelerator: Option<&'a str>,
}

/// Adds the GPU labels of `gpu` to `l`: the provider-neutral `gpu-autoscaler.dev/instance-gpu-*`
/// family; for NVIDIA also GPU Feature Discovery's `nvidia.com/gpu.{count,memory}`,
/// `nvidia.com/gpu.replicas=1`, `nvidia.com/gpu.sharing-strategy=none`,
/// `nvidia.com/mps.capable=false`, `nvidia.com/mig.capable` and, where the product name is known, `nvidia.com/gpu.product`;
/// and the GKE accelerator label where
/// given. The same labels the embedded catalog gives its types, so that selectors written
/// against one provider work on the others.
pub fn add_gpu_labels(l: &mut Labels, gpu: &GpuSpec, names: GpuNames<'_>) {
    let mut put = |k: &str, v: String| {
        l.insert(k.to_string(), v);
    };
    put(labels::GPU_MANUFACTURER, gpu.vendor.clone());
    put(labels::GPU_NAME, names.short.to_string());
    put(labels::GPU_COUNT, gpu.count.to_string());
    put(labels::GPU_MEMORY, gpu.memory_mib.to_string());
    if gpu.vendor == "nvidia" {
        if let Some(p) = names.product {
            put(labels::NVIDIA_PRODUCT, p.to_string());
        }
        put(labels::NVIDIA_COUNT, gpu.count.to_string());
        put(labels::NVIDIA_MEMORY, gpu.memory_mib.to_string());
        // What GPU Feature Discovery writes on GPUs nobody shares (a pool's sharing changes
        // them), so a pod that asks for an unshared GPU by label gets a node planned.
        put(labels::NVIDIA_REPLICAS, "1".into());
        put(gpu::NVIDIA_SHARING_STRATEGY, "none".into());
        put(gpu::NVIDIA_MPS_CAPABLE, "false".into());
        let capable = gpu::mig::model_for(&gpu.model, gpu.memory_mib).is_some();
        put(gpu::NVIDIA_MIG_CAPABLE, capable.to_string());
    }
    if let Some(a) = names.gke_accelerator {
        put(labels::GKE_ACCELERATOR, a.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn backoff_ceiling_doubles_up_to_the_cap_and_jitter_stays_below() {
        let r = RetrySettings {
            max_attempts: 3,
            base_delay_ms: 100,
            max_delay_ms: 1000,
        };
        let c: Vec<u128> = (0..6).map(|a| r.ceiling(a).as_millis()).collect();
        assert_eq!(c, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(r.ceiling(200), Duration::from_millis(1000));
        assert_eq!(r.delay(1, 0.5), Duration::from_millis(100));
        assert_eq!(r.delay(1, 7.0), Duration::from_millis(200));
        assert_eq!(r.delay(1, f64::NAN), Duration::ZERO);
        assert!(r.may_retry(2));
        assert!(!r.may_retry(3));
    }

    #[test]
    fn label_safe_names() {
        assert_eq!(label_safe("Radeon Pro V520"), "radeon-pro-v520");
        assert_eq!(label_safe("  NVIDIA A100 (80GB) "), "nvidia-a100-80gb");
        assert_eq!(label_safe(&"x".repeat(70)).len(), 63);
        assert_eq!(label_safe(&format!("{}-y", "x".repeat(62))), "x".repeat(62));
    }

    /// The helpers give exactly the labels the embedded catalog builds, for every type of it.
    #[test]
    fn helpers_reproduce_the_embedded_catalog_labels() {
        for e in catalog::default().entries() {
            let t = &e.instance_type;
            let family = &t.labels[labels::INSTANCE_FAMILY];
            let size = t
                .labels
                .get(labels::INSTANCE_SIZE)
                .map_or("", String::as_str);
            let mut l = instance_labels(&t.name, family, size, &t.arch, &e.region);
            if let Some(g) = &t.gpu {
                add_gpu_labels(
                    &mut l,
                    g,
                    GpuNames {
                        short: &t.labels[labels::GPU_NAME],
                        product: t.labels.get(labels::NVIDIA_PRODUCT).map(String::as_str),
                        gke_accelerator: t.labels.get(labels::GKE_ACCELERATOR).map(String::as_str),
                    },
                );
            }
            assert_eq!(l, t.labels, "{}", t.name);
        }
    }
}
