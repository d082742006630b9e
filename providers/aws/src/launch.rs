//! The pure parts of a launch: batching candidates into fleet requests, idempotency tokens,
//! boot configuration (user data), launch template names, and reading a fleet's answer.
//!
//! # In detail
//!
//! Launch: `CreateFleet` `instant`, one launch template per node class and boot configuration
//! (named by a hash of its content, created when missing), overrides of instance type, subnet and
//! AMI for up to 60 candidates of one capacity type per request (`price-capacity-optimized` for
//! spot, `lowest-price` for on-demand). Offerings refused for capacity (in `Errors`, or as an API
//! error) are returned as unavailable, and the launch moves on to the remaining candidates.
//!
//! Placement groups: a launch with `placement_group` first calls `CreatePlacementGroup` (strategy
//! `cluster`, tags: the cluster tag and `gpu-autoscaler.dev/created-at`, since EC2 records no
//! creation time; `InvalidPlacementGroup.Duplicate` is success; throttling and 5xx fail the launch
//! for a retry, other refusals launch outside any group), then sets `Placement.GroupName` on every
//! fleet override (CreateFleet takes placement per override) and tags the instance with
//! `gpu-autoscaler.dev/placement-group`. A fleet refused inside the group for capacity or for the
//! group itself (`InvalidPlacementGroup.*`) is asked again outside it, with its own ClientToken,
//! and those refusals are not marked unavailable. Collection lists the cluster's groups by tag and
//! deletes those no live instance is tagged with, no claim names and older than the grace period
//! (`InvalidPlacementGroup.InUse` / `.Unknown` are skipped).

use std::collections::BTreeMap;

use autoscaler_core::{CapacityType, Labels, Taint, labels};
use providers::OfferingKey;

use crate::config::{KubernetesEndpoint, NodeClass};

/// CreateFleet takes at most this many overrides per launch template config (the EC2 limit
/// Karpenter works with too).
pub const MAX_OVERRIDES: usize = 60;

/// Fleet error codes that mean "this offering has no capacity now": the offering is marked
/// unavailable and the launch moves on to the other candidates.
pub const CAPACITY_ERROR_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "UnfulfillableCapacity",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    // The type is not sold in that zone (any more): as good as no capacity.
    "Unsupported",
];

/// Whether a fleet or API error code means the offering is out of capacity.
pub fn is_capacity_error(code: &str) -> bool {
    CAPACITY_ERROR_CODES.contains(&code)
}

/// The next fleet request: the capacity type of the most preferred remaining candidate, and
/// up to [`MAX_OVERRIDES`] remaining candidates of that type in the claim's order. A fleet
/// buys one capacity type, so spot and on-demand candidates go in separate requests.
pub fn next_batch(remaining: &[OfferingKey]) -> Option<(CapacityType, Vec<OfferingKey>)> {
    let ct = remaining.first()?.capacity_type;
    let batch = remaining
        .iter()
        .filter(|k| k.capacity_type == ct)
        .take(MAX_OVERRIDES)
        .cloned()
        .collect();
    Some((ct, batch))
}

/// 64-bit FNV-1a: stable across builds and platforms, unlike `std`'s hasher, which matters
/// because tokens and template names must be the same after a restart or upgrade.
pub fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The CreateFleet ClientToken of one fleet request of a claim, outside any placement group.
///
/// See [`client_token_in`]; this is it with no group, unchanged from before placement groups
/// so that a launch in flight across an upgrade keeps its token.
pub fn client_token(cluster: &str, claim: &str, batch: &[OfferingKey]) -> String {
    client_token_in(cluster, claim, batch, None)
}

/// The CreateFleet ClientToken of one fleet request of a claim, into `placement_group` if any.
///
/// EC2 answers a repeated token with the first call's result, so a retried request (timeout,
/// crash, throttling) never buys a second instance. The token covers the cluster (two clusters
/// in one account may use the same claim name) and the request's overrides: after an
/// insufficient-capacity answer the next request offers other overrides, and reusing the token
/// with different parameters would be refused (`IdempotentParameterMismatch`). Readable prefix
/// for the audit trail; at most 64 characters, EC2's limit. The placement group is part of the
/// request too: the fallback outside the group after a refusal inside it is another request.
pub fn client_token_in(
    cluster: &str,
    claim: &str,
    batch: &[OfferingKey],
    placement_group: Option<&str>,
) -> String {
    let mut parts: Vec<String> = vec![cluster.to_string(), claim.to_string()];
    parts.extend(batch.iter().map(ToString::to_string));
    if let Some(g) = placement_group {
        parts.push(format!("placement-group={g}"));
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let h = fnv1a(&refs);
    let prefix: String = claim
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(40)
        .collect();
    format!("{prefix}-{h:016x}")
}

/// Whether kubelet may set a label on its own Node (`--node-labels`): labels under
/// `kubernetes.io` / `k8s.io` are refused unless in the allowed set (NodeRestriction).
fn kubelet_may_set(key: &str) -> bool {
    let prefix = key.split_once('/').map_or("", |(p, _)| p);
    let restricted = prefix == "kubernetes.io"
        || prefix == "k8s.io"
        || prefix.ends_with(".kubernetes.io")
        || prefix.ends_with(".k8s.io");
    if !restricted {
        return true;
    }
    prefix == "kubelet.kubernetes.io"
        || prefix == "node.kubernetes.io"
        || prefix.ends_with(".kubelet.kubernetes.io")
        || prefix.ends_with(".node.kubernetes.io")
}

/// Labels that differ between the offerings of one fleet request (the fleet chooses the type
/// and zone after the user data is fixed) or that the cloud provider and the controller set
/// anyway; they stay out of the boot configuration so that one launch template serves every
/// claim of a NodePool.
const PER_OFFERING_LABELS: &[&str] = &[
    labels::INSTANCE_TYPE,
    labels::INSTANCE_FAMILY,
    labels::INSTANCE_SIZE,
    labels::ZONE,
    labels::REGION,
    labels::ARCH,
    labels::OS,
    labels::CAPACITY_TYPE,
    labels::GPU_MANUFACTURER,
    labels::GPU_NAME,
    labels::GPU_COUNT,
    labels::GPU_MEMORY,
    labels::NVIDIA_PRODUCT,
    labels::NVIDIA_MEMORY,
    labels::NVIDIA_COUNT,
    labels::HOSTNAME,
    // Per claim: the controller puts it on the Node at registration.
    providers::tags::CLAIM,
];

/// The labels a node registers with: the request's, less those that vary per offering or per
/// claim, less those kubelet may not set on itself. The controller applies the full set when
/// the Node registers.
pub fn boot_labels(all: &Labels) -> Labels {
    all.iter()
        .filter(|(k, _)| !PER_OFFERING_LABELS.contains(&k.as_str()) && kubelet_may_set(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn taint_flag(t: &Taint) -> String {
    if t.value.is_empty() {
        format!("{}:{:?}", t.key, t.effect)
    } else {
        format!("{}={}:{:?}", t.key, t.value, t.effect)
    }
}

/// Quotes a YAML scalar (double quotes, escapes) so that label values never change meaning.
fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The boot configuration of a NodePool's nodes: a MIME multipart user data with the
/// Amazon Linux 2023 `nodeadm` NodeConfig (cluster, kubelet labels and taints, startup taints
/// registered as taints) and the node class's own script, if any.
pub fn user_data(
    cluster: &str,
    class: &NodeClass,
    node_labels: &Labels,
    taints: &[Taint],
    startup_taints: &[Taint],
) -> String {
    let KubernetesEndpoint {
        api_server_endpoint,
        certificate_authority,
        cidr,
    } = &class.kubernetes;
    let mut flags = Vec::new();
    if !node_labels.is_empty() {
        let l: Vec<String> = node_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        flags.push(format!("--node-labels={}", l.join(",")));
    }
    let all_taints: Vec<String> = taints
        .iter()
        .chain(startup_taints)
        .map(taint_flag)
        .collect();
    if !all_taints.is_empty() {
        flags.push(format!("--register-with-taints={}", all_taints.join(",")));
    }
    let mut nc = String::new();
    nc.push_str("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n");
    nc.push_str(&format!("    name: {}\n", yaml_str(cluster)));
    if let Some(e) = api_server_endpoint {
        nc.push_str(&format!("    apiServerEndpoint: {}\n", yaml_str(e)));
    }
    if let Some(ca) = certificate_authority {
        nc.push_str(&format!("    certificateAuthority: {}\n", yaml_str(ca)));
    }
    if let Some(c) = cidr {
        nc.push_str(&format!("    cidr: {}\n", yaml_str(c)));
    }
    if !flags.is_empty() {
        nc.push_str("  kubelet:\n    flags:\n");
        for f in &flags {
            nc.push_str(&format!("      - {}\n", yaml_str(f)));
        }
    }
    let boundary = "//gpu-autoscaler//";
    let mut out = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\n\n--{boundary}\nContent-Type: application/node.eks.aws\n\n{nc}"
    );
    if let Some(script) = &class.user_data {
        out.push_str(&format!(
            "\n--{boundary}\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{script}\n"
        ));
    }
    out.push_str(&format!("\n--{boundary}--\n"));
    out
}

/// The launch template of a node class and boot configuration:
/// `gpu-autoscaler/<cluster>/<class>/<hash>`. The hash covers everything the template holds,
/// so a changed class or NodePool gets a new template and running nodes keep theirs.
pub fn template_name(cluster: &str, class_name: &str, content: &[&str]) -> String {
    let mut parts = vec![cluster, class_name];
    parts.extend_from_slice(content);
    format!(
        "gpu-autoscaler/{}/{}/{:016x}",
        crate::catalog::label_safe(cluster),
        crate::catalog::label_safe(class_name),
        fnv1a(&parts)
    )
}

/// One offering's failure in a fleet answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetFailure {
    /// The offering, when the answer says which.
    pub offering: Option<OfferingKey>,
    /// Error code.
    pub code: String,
    /// Message.
    pub message: String,
}

/// What a fleet request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetOutcome {
    /// An instance was bought. `unavailable`: offerings the fleet reported out of capacity.
    Launched {
        /// Instance id.
        instance_id: String,
        /// Its type as the fleet reported it.
        instance_type: Option<String>,
        /// Offerings refused for capacity.
        unavailable: Vec<OfferingKey>,
    },
    /// Nothing bought, only capacity errors: mark `unavailable` and try other candidates.
    NoCapacity {
        /// Offerings refused for capacity (the whole batch when the answer names none).
        unavailable: Vec<OfferingKey>,
    },
    /// Nothing bought for another reason (limits, bad parameters): give up this launch.
    Failed {
        /// The failures.
        failures: Vec<FleetFailure>,
    },
}

/// Reads a fleet answer: `instance_ids` bought, `failures` reported, for a request of `batch`.
pub fn interpret(
    batch: &[OfferingKey],
    instance_ids: Vec<(String, Option<String>)>,
    failures: Vec<FleetFailure>,
) -> FleetOutcome {
    let mut unavailable: Vec<OfferingKey> = Vec::new();
    let mut capacity_only = true;
    for f in &failures {
        if is_capacity_error(&f.code) {
            match &f.offering {
                Some(o) => {
                    if !unavailable.contains(o) {
                        unavailable.push(o.clone());
                    }
                }
                // A capacity error that names no override: the whole request was refused.
                None => {
                    for k in batch {
                        if !unavailable.contains(k) {
                            unavailable.push(k.clone());
                        }
                    }
                }
            }
        } else {
            capacity_only = false;
        }
    }
    if let Some((instance_id, instance_type)) = instance_ids.into_iter().next() {
        return FleetOutcome::Launched {
            instance_id,
            instance_type,
            unavailable,
        };
    }
    if failures.is_empty() {
        // Nothing bought and nothing said: treat the batch as exhausted so the launch moves on
        // rather than asking for the same offerings again.
        return FleetOutcome::NoCapacity {
            unavailable: batch.to_vec(),
        };
    }
    if capacity_only {
        FleetOutcome::NoCapacity { unavailable }
    } else {
        FleetOutcome::Failed { failures }
    }
}

/// Whether a fleet request into a placement group was refused for reasons a launch outside the
/// group might not meet: no capacity (a cluster placement group needs room for its instances
/// close together) or a problem with the group itself (`InvalidPlacementGroup.*`, e.g. an
/// instance type that cluster placement does not support). Such a launch is retried without the
/// group, since the group is a preference.
/// `outcome` is the fleet's answer, or the code of the API error the call ended with.
pub fn refused_in_group(outcome: Result<&FleetOutcome, &str>) -> bool {
    let group_code = |c: &str| c.starts_with("InvalidPlacementGroup");
    match outcome {
        Ok(FleetOutcome::Launched { .. }) => false,
        Ok(FleetOutcome::NoCapacity { .. }) => true,
        Ok(FleetOutcome::Failed { failures }) => failures
            .iter()
            .all(|f| is_capacity_error(&f.code) || group_code(&f.code) || f.code == "Unsupported"),
        Err(code) => is_capacity_error(code) || group_code(code),
    }
}

/// The launch template overrides of one fleet request: per offering of `batch`, its instance
/// type, the subnet of its zone, the AMI of its architecture (from `ami_of`), and, with a
/// `placement_group`, that group (CreateFleet takes `Placement.GroupName` per override).
pub fn fleet_overrides(
    batch: &[OfferingKey],
    subnets: &BTreeMap<String, String>,
    ami_of: impl Fn(&str) -> Option<String>,
    placement_group: Option<&str>,
) -> Vec<aws_sdk_ec2::types::FleetLaunchTemplateOverridesRequest> {
    batch
        .iter()
        .map(|k| {
            aws_sdk_ec2::types::FleetLaunchTemplateOverridesRequest::builder()
                .instance_type(k.instance_type.as_str().into())
                .set_subnet_id(subnets.get(&k.zone).cloned())
                .set_image_id(ami_of(&k.instance_type))
                .set_placement(placement_group.map(|g| {
                    aws_sdk_ec2::types::Placement::builder()
                        .group_name(g)
                        .build()
                }))
                .build()
        })
        .collect()
}

/// Tags on every instance (and its volumes) of a claim.
pub fn instance_tags(
    cluster: &str,
    pool: &str,
    claim: &str,
    class: &NodeClass,
) -> BTreeMap<String, String> {
    let mut t = class.tags.clone();
    t.insert(providers::tags::CLUSTER.into(), cluster.into());
    t.insert(providers::tags::POOL.into(), pool.into());
    t.insert(providers::tags::CLAIM.into(), claim.into());
    t.insert("Name".into(), format!("{cluster}/{pool}/{claim}"));
    t
}

#[cfg(test)]
mod tests {
    use autoscaler_core::CapacityType::{OnDemand, Spot};
    use autoscaler_core::taints::Effect;

    use super::*;

    fn key(t: &str, z: &str, c: CapacityType) -> OfferingKey {
        OfferingKey::new(t, z, c)
    }

    #[test]
    fn batches_follow_the_first_candidates_capacity_type() {
        let c = vec![
            key("g5.xlarge", "a", Spot),
            key("g5.xlarge", "a", OnDemand),
            key("g6.xlarge", "b", Spot),
        ];
        let (ct, b) = next_batch(&c).unwrap();
        assert_eq!(ct, Spot);
        assert_eq!(b, vec![c[0].clone(), c[2].clone()]);
        assert_eq!(next_batch(&c[1..2]).unwrap().0, OnDemand);
        assert!(next_batch(&[]).is_none());
        let many: Vec<_> = (0..100).map(|i| key(&format!("t{i}"), "a", Spot)).collect();
        assert_eq!(next_batch(&many).unwrap().1.len(), MAX_OVERRIDES);
    }

    #[test]
    fn overrides_name_the_placement_group_on_every_offering_when_given() {
        let b = vec![
            key("g5.xlarge", "a", OnDemand),
            key("g6.xlarge", "b", OnDemand),
        ];
        let subnets: BTreeMap<String, String> = [
            ("a".into(), "subnet-a".into()),
            ("b".into(), "subnet-b".into()),
        ]
        .into();
        let ami = |_: &str| Some("ami-1".to_string());
        let grouped = fleet_overrides(&b, &subnets, ami, Some("gpu-autoscaler-c-g-0000abcd"));
        assert_eq!(grouped.len(), 2);
        for (o, k) in grouped.iter().zip(&b) {
            assert_eq!(
                o.instance_type().map(|t| t.as_str()),
                Some(k.instance_type.as_str())
            );
            assert_eq!(o.subnet_id(), subnets.get(&k.zone).map(String::as_str));
            assert_eq!(o.image_id(), Some("ami-1"));
            let p = o.placement().expect("a placement");
            assert_eq!(p.group_name(), Some("gpu-autoscaler-c-g-0000abcd"));
            // CreateFleet refuses zones in the placement: the subnet decides.
            assert_eq!(p.availability_zone(), None);
        }
        let plain = fleet_overrides(&b, &subnets, ami, None);
        assert!(plain.iter().all(|o| o.placement().is_none()));
    }

    #[test]
    fn refusals_inside_a_group_fall_back_and_others_do_not() {
        let f = |code: &str| FleetFailure {
            offering: None,
            code: code.into(),
            message: String::new(),
        };
        let no_capacity = FleetOutcome::NoCapacity {
            unavailable: vec![],
        };
        assert!(refused_in_group(Ok(&no_capacity)));
        assert!(refused_in_group(Err("InsufficientInstanceCapacity")));
        assert!(refused_in_group(Err("InvalidPlacementGroup.Unknown")));
        let group_problems = FleetOutcome::Failed {
            failures: vec![f("InvalidPlacementGroup.InUse"), f("Unsupported")],
        };
        assert!(refused_in_group(Ok(&group_problems)));
        assert!(!refused_in_group(Err("UnauthorizedOperation")));
        let bad_parameter = FleetOutcome::Failed {
            failures: vec![f("InvalidParameterValue")],
        };
        assert!(!refused_in_group(Ok(&bad_parameter)));
        let launched = FleetOutcome::Launched {
            instance_id: "i-1".into(),
            instance_type: None,
            unavailable: vec![],
        };
        assert!(!refused_in_group(Ok(&launched)));
    }

    #[test]
    fn tokens_are_stable_bounded_and_distinct() {
        let b1 = vec![key("g5.xlarge", "a", Spot)];
        let b2 = vec![key("g6.xlarge", "a", Spot)];
        let t = client_token("c1", "gpu-abc12", &b1);
        assert_eq!(t, client_token("c1", "gpu-abc12", &b1));
        assert_ne!(t, client_token("c2", "gpu-abc12", &b1));
        assert_ne!(t, client_token("c1", "gpu-abc12", &b2));
        assert_eq!(t, client_token_in("c1", "gpu-abc12", &b1, None));
        let grouped = client_token_in("c1", "gpu-abc12", &b1, Some("pg"));
        assert_ne!(t, grouped, "in and outside a group are two requests");
        assert_ne!(
            grouped,
            client_token_in("c1", "gpu-abc12", &b1, Some("pg2"))
        );
        assert!(t.starts_with("gpu-abc12-"), "{t}");
        let long = client_token("c1", &"x".repeat(300), &b1);
        assert!(long.len() <= 64, "{}", long.len());
        // Pinned: a change here would break idempotency across an upgrade.
        assert_eq!(fnv1a(&["a"]), 0x089b_e207_b544_f1e4);
    }

    #[test]
    fn boot_labels_drop_per_offering_and_restricted_keys() {
        let l: Labels = [
            ("team", "ml"),
            (labels::INSTANCE_TYPE, "g5.xlarge"),
            (labels::ZONE, "a"),
            (providers::tags::CLAIM, "c"),
            (labels::NODEPOOL, "gpu"),
            ("kubernetes.io/role", "x"),
            ("node.kubernetes.io/lifecycle", "normal"),
            ("example.k8s.io/x", "y"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let b: Vec<_> = boot_labels(&l).into_keys().collect();
        assert_eq!(
            b,
            [labels::NODEPOOL, "node.kubernetes.io/lifecycle", "team"]
        );
    }

    #[test]
    fn user_data_carries_labels_taints_and_startup_taints() {
        let class = NodeClass {
            kubernetes: KubernetesEndpoint {
                api_server_endpoint: Some("https://k8s.example".into()),
                certificate_authority: Some("Q0E=".into()),
                cidr: Some("10.100.0.0/16".into()),
            },
            user_data: Some("echo hello".into()),
            ..NodeClass::default()
        };
        let l: Labels = [("team".to_string(), "ml".to_string())].into();
        let ud = user_data(
            "c1",
            &class,
            &l,
            &[Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule)],
            &[Taint::new(
                "gpu-autoscaler.dev/startup",
                "",
                Effect::NoExecute,
            )],
        );
        assert!(ud.contains("kind: NodeConfig"), "{ud}");
        assert!(ud.contains("name: \"c1\""), "{ud}");
        assert!(
            ud.contains("apiServerEndpoint: \"https://k8s.example\""),
            "{ud}"
        );
        assert!(ud.contains("\"--node-labels=team=ml\""), "{ud}");
        assert!(
            ud.contains(
                "\"--register-with-taints=nvidia.com/gpu=true:NoSchedule,gpu-autoscaler.dev/startup:NoExecute\""
            ),
            "{ud}"
        );
        assert!(ud.contains("text/x-shellscript"), "{ud}");
        assert!(ud.trim_end().ends_with("--//gpu-autoscaler//--"), "{ud}");
    }

    #[test]
    fn template_names_change_with_content() {
        let a = template_name("c1", "default", &["ud1"]);
        assert!(a.starts_with("gpu-autoscaler/c1/default/"), "{a}");
        assert_ne!(a, template_name("c1", "default", &["ud2"]));
        assert_eq!(a, template_name("c1", "default", &["ud1"]));
    }

    #[test]
    fn fleet_answers() {
        let batch = vec![key("g5.xlarge", "a", Spot), key("g6.xlarge", "a", Spot)];
        let ice = |o: Option<OfferingKey>| FleetFailure {
            offering: o,
            code: "InsufficientInstanceCapacity".into(),
            message: "no".into(),
        };
        assert_eq!(
            interpret(
                &batch,
                vec![("i-1".into(), Some("g6.xlarge".into()))],
                vec![ice(Some(batch[0].clone()))]
            ),
            FleetOutcome::Launched {
                instance_id: "i-1".into(),
                instance_type: Some("g6.xlarge".into()),
                unavailable: vec![batch[0].clone()],
            }
        );
        assert_eq!(
            interpret(&batch, vec![], vec![ice(Some(batch[1].clone()))]),
            FleetOutcome::NoCapacity {
                unavailable: vec![batch[1].clone()]
            }
        );
        assert_eq!(
            interpret(&batch, vec![], vec![ice(None)]),
            FleetOutcome::NoCapacity {
                unavailable: batch.clone()
            }
        );
        assert_eq!(
            interpret(&batch, vec![], vec![]),
            FleetOutcome::NoCapacity {
                unavailable: batch.clone()
            }
        );
        let limit = FleetFailure {
            offering: None,
            code: "VcpuLimitExceeded".into(),
            message: "limit".into(),
        };
        assert_eq!(
            interpret(&batch, vec![], vec![ice(None), limit.clone()]),
            FleetOutcome::Failed {
                failures: vec![ice(None), limit]
            }
        );
    }
}
