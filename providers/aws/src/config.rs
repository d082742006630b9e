//! Settings of the AWS provider: region and endpoint, node classes, rate limits, retries,
//! timeouts, catalog cache and price overrides. Loaded from YAML (`--aws-config FILE`) or built
//! in code; every field has a default so that an empty file is valid.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::AwsError;

/// A commented settings file (also checked by a unit test, so it stays valid).
pub const EXAMPLE_SETTINGS: &str = r#"# gpu-autoscaler AWS provider settings (--aws-config FILE). Every field is optional.
region: us-east-1
# endpoint_url: http://127.0.0.1:5000      # an EC2 emulator such as moto
# profile: ops                             # a named profile of ~/.aws/config
cluster: prod                              # tag value; run's --cluster-name wins
node_classes:
  default:                                 # NodePools whose nodeClassRef names no other class
    ami:
      name: amazon-eks-node-al2023-x86_64-nvidia-1.33-*
      owners: [amazon]
    # subnets / security_groups: by ids or tags; default: tagged gpu-autoscaler.dev/discovery=<cluster>
    instance_profile: gpu-autoscaler-node
    root_volume_gib: 100
    kubernetes:
      api_server_endpoint: https://ABCDEF.gr7.us-east-1.eks.amazonaws.com
      certificate_authority: LS0tLS1CRUdJTi...
      cidr: 10.100.0.0/16
    tags: {team: ml}
  arm:
    ami: {tags: {role: gpu-autoscaler-arm}}
    subnets: {ids: [subnet-0123456789abcdef0]}
    security_groups: {ids: [sg-0123456789abcdef0]}
instance_types: []                         # EC2 patterns (g5.*, p5.48xlarge); empty: all
on_demand_prices: {p5e.48xlarge: 70.0}     # add or refresh list prices, USD per hour
spot: true
catalog_ttl_s: 600
vm_memory_overhead_percent: 7.5
limits: {describe_per_second: 10, describe_burst: 50, mutate_per_second: 5, mutate_burst: 20}
retry: {max_attempts: 5, base_delay_ms: 200, max_delay_ms: 10000}
timeouts: {connect_ms: 3000, attempt_ms: 30000}
"#;

/// The tag subnets, security groups and AMIs carry to be found by a node class that names no
/// selector of its own (`gpu-autoscaler.dev/discovery: <cluster>`), as Karpenter's
/// `karpenter.sh/discovery`.
pub const DISCOVERY_TAG: &str = "gpu-autoscaler.dev/discovery";

/// The node class used for a NodePool whose class name is not configured.
pub const DEFAULT_CLASS: &str = "default";

/// Everything the AWS provider can be told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AwsSettings {
    /// Region; when absent, `AWS_REGION` / `AWS_DEFAULT_REGION` / the profile's region. The
    /// instance-metadata region is deliberately not consulted: a missing region is a
    /// configuration error, not a network probe.
    pub region: Option<String>,
    /// EC2 endpoint (a test emulator such as moto); the SDK also honours `AWS_ENDPOINT_URL`.
    pub endpoint_url: Option<String>,
    /// Named profile of the shared config files (else `AWS_PROFILE`, else `default`).
    pub profile: Option<String>,
    /// A shared credentials file read instead of `~/.aws/credentials` (the default chain still
    /// applies: environment first, then this profile file, then web identity and metadata).
    pub credentials_file: Option<std::path::PathBuf>,
    /// Cluster name: the value of the cluster tag on every instance and the discovery tag value.
    pub cluster: String,
    /// Node classes by name (a NodePool's `nodeClassRef.name`); [`DEFAULT_CLASS`] serves
    /// NodePools whose class is not listed.
    pub node_classes: BTreeMap<String, NodeClass>,
    /// API rate limits.
    pub limits: Limits,
    /// Retries of throttled and failed calls.
    pub retry: RetrySettings,
    /// Network timeouts.
    pub timeouts: Timeouts,
    /// How long the instance-type catalog, spot prices and resolved node classes are reused.
    pub catalog_ttl_s: i64,
    /// Share of a machine's nominal memory the hypervisor and firmware keep (percent). EC2
    /// reports nominal memory; the kernel sees less. Karpenter's default, 7.5 %, is ours too.
    pub vm_memory_overhead_percent: f64,
    /// On-demand prices (USD per hour) that replace or extend the embedded table, so that
    /// prices can be refreshed without a new build.
    pub on_demand_prices: BTreeMap<String, f64>,
    /// Ask DescribeSpotPriceHistory for spot prices; when off, types get no spot offerings.
    pub spot: bool,
    /// Instance types to consider, as EC2 filter patterns (`g5.*`, `p5.48xlarge`); empty: all.
    /// A short list makes discovery cheaper; NodePool requirements narrow further.
    pub instance_types: Vec<String>,
}

impl Default for AwsSettings {
    fn default() -> Self {
        AwsSettings {
            region: None,
            endpoint_url: None,
            profile: None,
            credentials_file: None,
            cluster: "default".into(),
            node_classes: BTreeMap::new(),
            limits: Limits::default(),
            retry: RetrySettings::default(),
            timeouts: Timeouts::default(),
            catalog_ttl_s: 600,
            vm_memory_overhead_percent: 7.5,
            on_demand_prices: BTreeMap::new(),
            spot: true,
            instance_types: Vec::new(),
        }
    }
}

impl AwsSettings {
    /// Parses a settings file.
    ///
    /// # Errors
    /// [`AwsError::Config`] for YAML that does not have this shape or holds impossible values.
    pub fn from_yaml(yaml: &str) -> Result<Self, AwsError> {
        autoscaler_core::nesting::check_flow_nesting(yaml)
            .map_err(|e| AwsError::Config(format!("settings do not parse: {e}")))?;
        let s: AwsSettings = serde_norway::from_str(yaml)
            .map_err(|e| AwsError::Config(format!("settings do not parse: {e}")))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks values that parse but cannot work.
    ///
    /// # Errors
    /// [`AwsError::Config`] naming the field.
    pub fn validate(&self) -> Result<(), AwsError> {
        let bad = |what: &str| Err(AwsError::Config(what.to_string()));
        if self.cluster.is_empty() {
            return bad("cluster must not be empty");
        }
        if self.catalog_ttl_s < 0 {
            return bad("catalog_ttl_s must not be negative");
        }
        if !(0.0..50.0).contains(&self.vm_memory_overhead_percent) {
            return bad("vm_memory_overhead_percent must be in [0, 50)");
        }
        for (t, p) in &self.on_demand_prices {
            if !(p.is_finite() && *p > 0.0) {
                return Err(AwsError::Config(format!(
                    "on_demand_prices.{t}: must be a positive number, got {p}"
                )));
            }
        }
        if self.limits.describe_per_second == 0 || self.limits.mutate_per_second == 0 {
            return bad("limits: rates must be positive");
        }
        if self.retry.max_attempts == 0 {
            return bad("retry.max_attempts must be at least 1");
        }
        let [base, max] = self.retry.durations();
        providers::common::check_durations(&[
            (
                "catalog_ttl_s",
                Duration::from_secs(self.catalog_ttl_s.unsigned_abs()),
            ),
            (
                "timeouts.connect_ms",
                Duration::from_millis(self.timeouts.connect_ms),
            ),
            (
                "timeouts.attempt_ms",
                Duration::from_millis(self.timeouts.attempt_ms),
            ),
            base,
            max,
        ])
        .map_err(AwsError::Config)?;
        for (name, class) in &self.node_classes {
            if class.root_volume_gib == 0 {
                return Err(AwsError::Config(format!(
                    "node_classes.{name}.root_volume_gib must be positive"
                )));
            }
        }
        Ok(())
    }

    /// The class for a NodePool's class name: the one of that name, else [`DEFAULT_CLASS`].
    pub fn class(&self, name: &str) -> Option<(&str, &NodeClass)> {
        self.node_classes
            .get_key_value(name)
            .or_else(|| self.node_classes.get_key_value(DEFAULT_CLASS))
            .map(|(k, v)| (k.as_str(), v))
    }
}

/// How to launch the nodes of a NodePool: image, network, IAM, disk and boot configuration.
/// One launch template is kept per class and boot configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeClass {
    /// AMIs, one per architecture is used (the newest that matches). Required to launch.
    pub ami: Selector,
    /// Subnets; one per zone is used (the one with the most free addresses). Empty: the
    /// subnets tagged [`DISCOVERY_TAG`]`=<cluster>`.
    pub subnets: Selector,
    /// Security groups. Empty: those tagged [`DISCOVERY_TAG`]`=<cluster>`.
    pub security_groups: Selector,
    /// IAM instance profile name of the nodes.
    pub instance_profile: Option<String>,
    /// Root volume size; also the node's ephemeral-storage capacity.
    pub root_volume_gib: u32,
    /// Root device name of the AMI.
    pub root_device_name: String,
    /// Where the nodes find the Kubernetes API (written into the nodeadm configuration).
    pub kubernetes: KubernetesEndpoint,
    /// An extra shell script run before the node joins (a MIME part of the user data).
    pub user_data: Option<String>,
    /// Extra tags on instances and volumes.
    pub tags: BTreeMap<String, String>,
    /// Pods per node instead of the ENI formula (for prefix delegation or custom networking).
    pub max_pods: Option<u32>,
}

impl Default for NodeClass {
    fn default() -> Self {
        NodeClass {
            ami: Selector::default(),
            subnets: Selector::default(),
            security_groups: Selector::default(),
            instance_profile: None,
            root_volume_gib: 20,
            root_device_name: "/dev/xvda".into(),
            kubernetes: KubernetesEndpoint::default(),
            user_data: None,
            tags: BTreeMap::new(),
            max_pods: None,
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
    /// Service CIDR.
    pub cidr: Option<String>,
}

/// Selects EC2 resources by id, by tags (all must match), or (AMIs only) by name pattern and
/// owners. Ids win over the rest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Selector {
    /// Resource ids.
    pub ids: Vec<String>,
    /// Tags that must all match (`*` wildcards as EC2 filters allow).
    pub tags: BTreeMap<String, String>,
    /// AMI name pattern (`amazon-eks-node-al2023-x86_64-nvidia-*`).
    pub name: Option<String>,
    /// AMI owners (`amazon`, an account id).
    pub owners: Vec<String>,
}

impl Selector {
    /// Whether nothing is selected explicitly.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.tags.is_empty() && self.name.is_none()
    }

    /// Selection by ids.
    pub fn ids(ids: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Selector {
            ids: ids.into_iter().map(Into::into).collect(),
            ..Selector::default()
        }
    }

    /// Selection by one tag.
    pub fn tag(key: impl Into<String>, value: impl Into<String>) -> Self {
        Selector {
            tags: BTreeMap::from([(key.into(), value.into())]),
            ..Selector::default()
        }
    }
}

/// Token buckets per API family: mutating calls (CreateFleet, TerminateInstances,
/// CreateLaunchTemplate) and describe calls have separate budgets on EC2, so they get separate
/// buckets here and a describe storm cannot starve launches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Describe calls per second.
    pub describe_per_second: u32,
    /// Describe burst.
    pub describe_burst: u32,
    /// Mutating calls per second.
    pub mutate_per_second: u32,
    /// Mutating burst.
    pub mutate_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        // Well under EC2's default account budgets (describe: 100 burst / 20 per second;
        // mutating: 50 burst / 5 per second), leaving room for other tools in the account.
        Limits {
            describe_per_second: 10,
            describe_burst: 50,
            mutate_per_second: 5,
            mutate_burst: 20,
        }
    }
}

/// Retries of throttled calls, 5xx answers, timeouts and connection failures: the providers'
/// shared settings (exponential backoff with full jitter).
pub use providers::common::RetrySettings;

/// Network timeouts, so that an unreachable endpoint fails instead of hanging.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// TCP + TLS connect, milliseconds.
    pub connect_ms: u64,
    /// One attempt of one call, milliseconds (CreateFleet `instant` can take several seconds).
    pub attempt_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_ms: 3_000,
            attempt_ms: 30_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_example_parses() {
        let s = AwsSettings::from_yaml(EXAMPLE_SETTINGS).unwrap();
        assert_eq!(s.node_classes.len(), 2);
        assert_eq!(s.class("gpu").unwrap().0, "default");
        assert_eq!(s.on_demand_prices["p5e.48xlarge"], 70.0);
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(
            AwsSettings::from_yaml("{}").unwrap(),
            AwsSettings::default()
        );
    }

    #[test]
    fn classes_and_fallback() {
        let s = AwsSettings::from_yaml(
            "cluster: c1\nnode_classes:\n  default:\n    ami: {ids: [ami-1]}\n  gpu:\n    ami: {tags: {role: gpu}}\n    root_volume_gib: 200\n",
        )
        .unwrap();
        assert_eq!(s.class("gpu").unwrap().1.root_volume_gib, 200);
        assert_eq!(s.class("other").unwrap().0, "default");
        assert_eq!(s.class("gpu").unwrap().1.ami, Selector::tag("role", "gpu"));
    }

    #[test]
    fn bad_values_are_named() {
        let e = AwsSettings::from_yaml("on_demand_prices: {g5.xlarge: -1}").unwrap_err();
        assert!(e.to_string().contains("on_demand_prices.g5.xlarge"), "{e}");
        assert!(AwsSettings::from_yaml("nope: 1").is_err());
        assert!(AwsSettings::from_yaml("retry: {max_attempts: 0}").is_err());
    }

    #[test]
    fn backoff_ceiling_doubles_up_to_the_cap() {
        let r = RetrySettings {
            max_attempts: 5,
            base_delay_ms: 100,
            max_delay_ms: 1000,
        };
        let c: Vec<u64> = (0..6).map(|a| r.ceiling(a).as_millis() as u64).collect();
        assert_eq!(c, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(r.ceiling(200), Duration::from_millis(1000));
    }
}
