//! Settings of the GCP provider: project, region and zones, endpoint, node classes (the
//! per-NodePool instance template), rate limits, retries, timeouts, catalog cache and price
//! overrides. Loaded from YAML (`--gcp-config FILE`, see `providers/gcp/settings.example.yaml`)
//! or built in code; every field has a default except the project, so that a file with only
//! `project:` is valid.

use std::collections::BTreeMap;
use std::time::Duration;

use providers::common::{RateLimit, RetrySettings};
use serde::{Deserialize, Serialize};

use crate::error::GcpError;

/// The node class used for a NodePool whose class name is not configured.
pub const DEFAULT_CLASS: &str = "default";

/// Everything the GCP provider can be told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GcpSettings {
    /// Project id; when empty, `GOOGLE_CLOUD_PROJECT` / `CLOUDSDK_CORE_PROJECT` at connect time.
    pub project: String,
    /// Region; its zones are those machine types are discovered and offered in.
    pub region: String,
    /// Only these zones of the region (empty: every zone that lists machine types).
    pub zones: Vec<String>,
    /// Compute API endpoint (a test fake such as `http://127.0.0.1:8089`); default the public
    /// one. An `http://` endpoint is called without credentials unless [`Self::anonymous`] is
    /// `false`.
    pub endpoint_url: Option<String>,
    /// Send requests without credentials (`true`) or with Application Default Credentials
    /// (`false`); when absent, without for an `http://` endpoint (emulators and fakes) and with
    /// otherwise.
    pub anonymous: Option<bool>,
    /// Cluster name: the value of the cluster label on every instance.
    pub cluster: String,
    /// Node classes by name (a NodePool's `nodeClassRef.name`); [`DEFAULT_CLASS`] serves
    /// NodePools whose class is not listed.
    pub node_classes: BTreeMap<String, NodeClass>,
    /// API rate limits.
    pub limits: Limits,
    /// Retries of throttled and failed calls.
    pub retry: RetrySettings,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// How long the discovered catalog is reused.
    pub catalog_ttl_s: i64,
    /// On-demand prices (USD per hour) that replace or extend the embedded table.
    pub on_demand_prices: BTreeMap<String, f64>,
    /// Spot prices (USD per hour) that replace or extend the embedded table.
    pub spot_prices: BTreeMap<String, f64>,
    /// Offer spot (provisioning model SPOT) at all.
    pub spot: bool,
}

impl Default for GcpSettings {
    fn default() -> Self {
        GcpSettings {
            project: String::new(),
            region: "us-central1".into(),
            zones: Vec::new(),
            endpoint_url: None,
            anonymous: None,
            cluster: "default".into(),
            node_classes: BTreeMap::new(),
            limits: Limits::default(),
            retry: RetrySettings::default(),
            timeouts: Timeouts::default(),
            catalog_ttl_s: 600,
            on_demand_prices: BTreeMap::new(),
            spot_prices: BTreeMap::new(),
            spot: true,
        }
    }
}

/// Whether `s` is a valid GCE label value (lower-case letters, digits, `-` and `_`, at most 63).
pub fn is_gce_label_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl GcpSettings {
    /// Parses a settings file.
    ///
    /// # Errors
    /// [`GcpError::Config`] for YAML that does not have this shape or holds impossible values.
    pub fn from_yaml(yaml: &str) -> Result<Self, GcpError> {
        autoscaler_core::nesting::check_flow_nesting(yaml)
            .map_err(|e| GcpError::Config(format!("settings do not parse: {e}")))?;
        let s: GcpSettings = serde_norway::from_str(yaml)
            .map_err(|e| GcpError::Config(format!("settings do not parse: {e}")))?;
        s.validate()?;
        Ok(s)
    }

    /// Whether requests go out without credentials.
    pub fn is_anonymous(&self) -> bool {
        self.anonymous.unwrap_or_else(|| {
            self.endpoint_url
                .as_deref()
                .is_some_and(|u| u.starts_with("http://"))
        })
    }

    /// Checks values that parse but cannot work.
    ///
    /// # Errors
    /// [`GcpError::Config`] naming the field.
    pub fn validate(&self) -> Result<(), GcpError> {
        let bad = |what: String| Err(GcpError::Config(what));
        if self.cluster.is_empty() || !is_gce_label_value(&self.cluster) {
            return bad(format!(
                "cluster {:?} must be a GCE label value (lower-case letters, digits, - and _)",
                self.cluster
            ));
        }
        if self.region.is_empty() {
            return bad("region must not be empty".into());
        }
        for z in &self.zones {
            if !z.starts_with(&format!("{}-", self.region)) {
                return bad(format!("zone {z} is not in region {}", self.region));
            }
        }
        if self.catalog_ttl_s < 0 {
            return bad("catalog_ttl_s must not be negative".into());
        }
        for (what, prices) in [
            ("on_demand_prices", &self.on_demand_prices),
            ("spot_prices", &self.spot_prices),
        ] {
            for (t, p) in prices {
                if !(p.is_finite() && *p > 0.0) {
                    return bad(format!("{what}.{t}: must be a positive number, got {p}"));
                }
            }
        }
        if self.retry.max_attempts == 0 {
            return bad("retry.max_attempts must be at least 1".into());
        }
        for l in [self.limits.read, self.limits.mutate] {
            if l.per_second == 0 || l.burst == 0 {
                return bad("limits: rates and bursts must be positive".into());
            }
        }
        if self.timeouts.operation_s == 0 {
            return bad("timeouts.operation_s must be positive".into());
        }
        let [base, max] = self.retry.durations();
        providers::common::check_durations(&[
            (
                "catalog_ttl_s",
                Duration::from_secs(self.catalog_ttl_s.unsigned_abs()),
            ),
            (
                "timeouts.attempt_ms",
                Duration::from_millis(self.timeouts.attempt_ms),
            ),
            (
                "timeouts.operation_s",
                Duration::from_secs(self.timeouts.operation_s),
            ),
            (
                "timeouts.poll_ms",
                Duration::from_millis(self.timeouts.poll_ms),
            ),
            base,
            max,
        ])
        .map_err(GcpError::Config)?;
        for (name, class) in &self.node_classes {
            if class.boot_disk_gib < 10 {
                return bad(format!(
                    "node_classes.{name}.boot_disk_gib must be at least 10"
                ));
            }
            for (k, v) in &class.labels {
                if !is_gce_label_value(k) || !is_gce_label_value(v) || k.is_empty() {
                    return bad(format!(
                        "node_classes.{name}.labels.{k}: not a valid GCE label"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The class for a NodePool's class name: the one of that name, else [`DEFAULT_CLASS`],
    /// else the built-in default class.
    pub fn class(&self, name: &str) -> (String, NodeClass) {
        self.node_classes
            .get_key_value(name)
            .or_else(|| self.node_classes.get_key_value(DEFAULT_CLASS))
            .map_or_else(
                || (DEFAULT_CLASS.to_string(), NodeClass::default()),
                |(k, v)| (k.clone(), v.clone()),
            )
    }
}

/// How to launch the nodes of a NodePool: the instance template that `instances.insert` gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeClass {
    /// Boot image (`projects/cos-cloud/global/images/family/cos-stable`, or an
    /// accelerator-ready image of your own).
    pub image: String,
    /// Boot disk size; also the node's ephemeral-storage capacity.
    pub boot_disk_gib: u32,
    /// Boot disk type (`pd-balanced`, `hyperdisk-balanced` for A3/A4/G4).
    pub boot_disk_type: String,
    /// VPC network (`global/networks/default`).
    pub network: String,
    /// Subnetwork (`regions/us-central1/subnetworks/nodes`); empty: the network's auto subnet.
    pub subnetwork: Option<String>,
    /// Give nodes an ephemeral external IP (for clusters without Cloud NAT).
    pub external_ip: bool,
    /// Service account the node runs as; absent: the project's default compute account.
    pub service_account: Option<String>,
    /// OAuth scopes of that account.
    pub scopes: Vec<String>,
    /// Network tags (firewall rules).
    pub network_tags: Vec<String>,
    /// Extra GCE labels on instances (keys and values in GCE label syntax).
    pub labels: BTreeMap<String, String>,
    /// Extra metadata items.
    pub metadata: BTreeMap<String, String>,
    /// Where the nodes find the Kubernetes API (written into the startup script).
    pub kubernetes: KubernetesEndpoint,
    /// An extra shell fragment run before the kubelet is configured.
    pub startup_script: Option<String>,
    /// Pods per node.
    pub max_pods: u32,
}

impl Default for NodeClass {
    fn default() -> Self {
        NodeClass {
            image: "projects/cos-cloud/global/images/family/cos-stable".into(),
            boot_disk_gib: 100,
            boot_disk_type: "pd-balanced".into(),
            network: "global/networks/default".into(),
            subnetwork: None,
            external_ip: false,
            service_account: None,
            scopes: vec!["https://www.googleapis.com/auth/cloud-platform".into()],
            network_tags: Vec::new(),
            labels: BTreeMap::new(),
            metadata: BTreeMap::new(),
            kubernetes: KubernetesEndpoint::default(),
            startup_script: None,
            max_pods: 110,
        }
    }
}

/// The API server a node joins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesEndpoint {
    /// `https://...` endpoint of the API server.
    pub api_server_endpoint: Option<String>,
    /// Base64 PEM of the cluster CA.
    pub certificate_authority: Option<String>,
    /// Metadata key holding the bootstrap token (the token itself never passes through the
    /// autoscaler: it is set on the project or template by the operator).
    pub bootstrap_token_metadata_key: Option<String>,
}

/// Token buckets: reads (get, list, operation polls) and mutations (insert, delete) draw from
/// separate buckets, as Compute Engine meters them separately, so that polling cannot starve
/// launches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Read calls.
    pub read: RateLimit,
    /// Mutating calls.
    pub mutate: RateLimit,
}

impl Default for Limits {
    fn default() -> Self {
        // Well under Compute Engine's default per-project budgets (1,500 reads and 1,500
        // mutations per minute per region), leaving room for other tools in the project.
        Limits {
            read: RateLimit::new(10, 50),
            mutate: RateLimit::new(5, 20),
        }
    }
}

/// Timeouts, so that an unreachable endpoint or a stuck operation fails instead of hanging.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// One attempt of one call, milliseconds.
    pub attempt_ms: u64,
    /// Waiting for one long-running operation (an insert or delete) to be DONE, seconds.
    pub operation_s: u64,
    /// Between two polls of an operation, milliseconds (`zoneOperations.wait` itself blocks
    /// server-side for up to two minutes; this is the pause after it returns not DONE).
    pub poll_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            attempt_ms: 30_000,
            operation_s: 300,
            poll_ms: 1_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_file() {
        let s = GcpSettings::from_yaml("project: p1\n").unwrap();
        assert_eq!(s.project, "p1");
        assert_eq!(s.region, "us-central1");
        assert!(!s.is_anonymous());
        assert_eq!(s.class("gpu").1, NodeClass::default());
    }

    #[test]
    fn the_example_file_parses() {
        let s = GcpSettings::from_yaml(include_str!("../settings.example.yaml")).unwrap();
        assert_eq!(s.zones.len(), 3);
        assert_eq!(s.class("h100").1.boot_disk_type, "hyperdisk-balanced");
        assert_eq!(s.class("anything").0, DEFAULT_CLASS);
        assert_eq!(s.on_demand_prices["a4-highgpu-8g"], 120.0);
    }

    #[test]
    fn classes_and_fallback() {
        let s = GcpSettings::from_yaml(
            "project: p\ncluster: c1\nnode_classes:\n  default:\n    image: img-a\n  gpu:\n    image: img-g\n    boot_disk_gib: 200\n",
        )
        .unwrap();
        assert_eq!(s.class("gpu").1.boot_disk_gib, 200);
        assert_eq!(s.class("other").0, "default");
        assert_eq!(s.class("other").1.image, "img-a");
    }

    #[test]
    fn bad_values_are_named() {
        let e = GcpSettings::from_yaml("on_demand_prices: {g2-standard-4: -1}").unwrap_err();
        assert!(
            e.to_string().contains("on_demand_prices.g2-standard-4"),
            "{e}"
        );
        assert!(GcpSettings::from_yaml("nope: 1").is_err());
        assert!(GcpSettings::from_yaml("cluster: Not_Valid").is_err());
        assert!(GcpSettings::from_yaml("zones: [europe-west4-a]").is_err());
        assert!(GcpSettings::from_yaml("retry: {max_attempts: 0}").is_err());
        let s = GcpSettings {
            endpoint_url: Some("http://127.0.0.1:1".into()),
            ..GcpSettings::default()
        };
        assert!(s.is_anonymous());
        let s = GcpSettings {
            anonymous: Some(false),
            ..s
        };
        assert!(!s.is_anonymous(), "explicitly with credentials");
    }
}
