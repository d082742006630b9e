//! Volume topology cases, after Karpenter's volume topology tests in
//! `pkg/controllers/provisioning/suite_test.go` and `ValidatePersistentVolumeClaims`.

use super::*;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeSpec, PodSpec, TopologySelectorLabelRequirement,
    TopologySelectorTerm, Volume as PodVolume, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

const ZONE: &str = "topology.kubernetes.io/zone";

fn claim(name: &str, volume: Option<&str>, class: Option<&str>) -> PersistentVolumeClaim {
    let mut annotations = std::collections::BTreeMap::new();
    if volume.is_some() {
        annotations.insert(BIND_COMPLETED.to_string(), "yes".to_string());
    }
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: volume.map(Into::into),
            storage_class_name: class.map(Into::into),
            ..Default::default()
        }),
        status: None,
    }
}

fn expr(key: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: Some(values.iter().map(|v| v.to_string()).collect()),
    }
}

/// A volume whose node affinity has one term per entry of `terms`.
fn volume(name: &str, terms: Vec<Vec<NodeSelectorRequirement>>) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: terms
                        .into_iter()
                        .map(|e| NodeSelectorTerm {
                            match_expressions: Some(e),
                            match_fields: None,
                        })
                        .collect(),
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}

fn class(name: &str, mode: &str, zones: &[&[&str]]) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        provisioner: "ebs.csi.aws.com".into(),
        volume_binding_mode: Some(mode.into()),
        allowed_topologies: Some(
            zones
                .iter()
                .map(|z| TopologySelectorTerm {
                    match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                        key: "topology.ebs.csi.aws.com/zone".into(),
                        values: z.iter().map(|v| v.to_string()).collect(),
                    }]),
                })
                .collect(),
        ),
        ..Default::default()
    }
}

fn index(
    claims: Vec<PersistentVolumeClaim>,
    volumes: Vec<PersistentVolume>,
    classes: Vec<StorageClass>,
) -> VolumeIndex {
    VolumeIndex::new(&VolumeObjects {
        claims: claims.into_iter().map(Arc::new).collect(),
        volumes: volumes.into_iter().map(Arc::new).collect(),
        classes: classes.into_iter().map(Arc::new).collect(),
        ..Default::default()
    })
}

fn names(claims: &[&str]) -> Vec<String> {
    claims.iter().map(|c| c.to_string()).collect()
}

/// The zones each alternative allows, for compact assertions.
fn zones(alts: &[Requirements]) -> Vec<String> {
    alts.iter()
        .map(|a| a.get(ZONE).map_or("any".to_string(), |c| format!("{c:?}")))
        .collect()
}

fn zone_in(alts: &[Requirements], zone: &str) -> Vec<bool> {
    alts.iter()
        .map(|a| a.get(ZONE).is_none_or(|c| c.matches(Some(zone))))
        .collect()
}

#[test]
fn a_bound_volume_ties_the_pod_to_its_zone_and_terms_are_alternatives() {
    let ix = index(
        vec![claim("data", Some("pv-1"), Some("gp3"))],
        vec![volume(
            "pv-1",
            vec![
                vec![expr("topology.ebs.csi.aws.com/zone", &["us-east-1b"])],
                vec![expr(ZONE, &["us-east-1c"])],
            ],
        )],
        vec![],
    );
    let alts = ix.for_pending("ns", &names(&["data"])).unwrap();
    assert_eq!(alts.len(), 2, "{:?}", zones(&alts));
    // The EBS driver's key is read as the zone.
    assert_eq!(zone_in(&alts, "us-east-1b"), vec![true, false]);
    assert_eq!(zone_in(&alts, "us-east-1c"), vec![false, true]);
    assert!(!zone_in(&alts, "us-east-1a").contains(&true));
}

#[test]
fn an_unbound_claim_waiting_for_its_first_consumer_reads_the_allowed_topologies() {
    let ix = index(
        vec![claim("fresh", None, Some("zonal"))],
        vec![],
        vec![class(
            "zonal",
            "WaitForFirstConsumer",
            &[&["us-east-1a"], &["us-east-1c"]],
        )],
    );
    let alts = ix.for_pending("ns", &names(&["fresh"])).unwrap();
    assert_eq!(zone_in(&alts, "us-east-1a"), vec![true, false]);
    assert_eq!(zone_in(&alts, "us-east-1c"), vec![false, true]);
    // A class without topologies constrains nothing.
    let free = index(
        vec![claim("fresh", None, Some("any"))],
        vec![],
        vec![class("any", "WaitForFirstConsumer", &[])],
    );
    assert!(
        free.for_pending("ns", &names(&["fresh"]))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn two_volumes_combine_into_the_pairings_that_can_be_met() {
    let ix = index(
        vec![
            claim("a", Some("pv-a"), None),
            claim("b", None, Some("zonal")),
        ],
        vec![volume("pv-a", vec![vec![expr(ZONE, &["z1", "z2"])]])],
        vec![class("zonal", "WaitForFirstConsumer", &[&["z2"], &["z3"]])],
    );
    // z1|z2 with z2 or z3: only z2 can be met.
    let alts = ix.for_pending("ns", &names(&["a", "b"])).unwrap();
    assert_eq!(alts.len(), 1);
    assert_eq!(zone_in(&alts, "z2"), vec![true]);
    assert_eq!(zone_in(&alts, "z1"), vec![false]);
    // Volumes in zones that share nothing: every pairing kept, none can be met.
    let apart = index(
        vec![
            claim("a", Some("pv-a"), None),
            claim("c", Some("pv-c"), None),
        ],
        vec![
            volume("pv-a", vec![vec![expr(ZONE, &["z1"])]]),
            volume("pv-c", vec![vec![expr(ZONE, &["z3"])]]),
        ],
        vec![],
    );
    let alts = apart.for_pending("ns", &names(&["a", "c"])).unwrap();
    assert_eq!(alts.len(), 1);
    assert!(!alts[0].satisfiable());
}

#[test]
fn pods_whose_claims_cannot_be_provisioned_for_wait_with_the_claim_named() {
    let mut deleting = claim("deleting", None, Some("zonal"));
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let mut lost = claim("lost", Some("pv-gone"), None);
    lost.status = Some(PersistentVolumeClaimStatus {
        phase: Some("Lost".into()),
        ..Default::default()
    });
    let mut half_bound = claim("half", Some("pv-1"), None);
    half_bound.metadata.annotations = None;
    let ix = index(
        vec![
            deleting,
            lost,
            half_bound,
            claim("dangling", Some("pv-missing"), None),
            claim("classless", None, None),
            claim("unknown-class", None, Some("nope")),
            claim("immediate", None, Some("now")),
        ],
        vec![volume("pv-1", vec![vec![expr(ZONE, &["z1"])]])],
        vec![class("now", "Immediate", &[])],
    );
    let why = |c: &str| ix.for_pending("ns", &names(&[c])).unwrap_err();
    assert_eq!(why("missing"), "PersistentVolumeClaim ns/missing not found");
    assert!(why("deleting").ends_with("is being deleted"));
    assert!(why("lost").contains("is Lost"));
    assert!(why("half").contains("not bound yet (no pv.kubernetes.io/bind-completed)"));
    assert!(why("dangling").contains("PersistentVolume pv-missing not found"));
    assert!(why("classless").contains("names no StorageClass"));
    assert!(why("unknown-class").contains("StorageClass nope not found"));
    assert!(why("immediate").contains("binds Immediate"));
    // The same claims on a running pod add nothing rather than fail.
    assert!(
        ix.for_bound("ns", &names(&["missing", "dangling", "half"]))
            .len()
            == 1
    );
}

#[test]
fn a_local_volumes_hostname_is_dropped_for_a_pending_pod_and_kept_for_a_running_one() {
    let mut local = volume(
        "pv-local",
        vec![vec![expr("kubernetes.io/hostname", &["node-7"])]],
    );
    local.spec.as_mut().unwrap().host_path = Some(HostPathVolumeSource {
        path: "/data".into(),
        type_: None,
    });
    let ix = index(
        vec![claim("disk", Some("pv-local"), None)],
        vec![local],
        vec![],
    );
    assert!(ix.for_pending("ns", &names(&["disk"])).unwrap().is_empty());
    let bound = ix.for_bound("ns", &names(&["disk"]));
    assert_eq!(bound.len(), 1);
    assert!(bound[0].get("kubernetes.io/hostname").is_some());
}

#[test]
fn claim_names_cover_claims_and_generic_ephemeral_volumes() {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            volumes: Some(vec![
                PodVolume {
                    name: "data".into(),
                    persistent_volume_claim: Some(
                        k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                            claim_name: "data-web-0".into(),
                            read_only: None,
                        },
                    ),
                    ..Default::default()
                },
                PodVolume {
                    name: "scratch".into(),
                    ephemeral: Some(Default::default()),
                    ..Default::default()
                },
                PodVolume {
                    name: "tmp".into(),
                    empty_dir: Some(Default::default()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        status: None,
    };
    let claims = claim_names(&pod);
    assert_eq!(claims.all(), ["data-web-0", "web-0-scratch"]);
    assert_eq!(claims.persistent(), ["data-web-0"]);
}

#[test]
fn a_cross_product_past_the_cap_keeps_the_first_alternatives() {
    let mut claims = Vec::new();
    let mut volumes = Vec::new();
    for i in 0..8 {
        claims.push(claim(&format!("c{i}"), Some(&format!("pv{i}")), None));
        // Two terms on different keys: every pairing can be met, 2^8 of them.
        volumes.push(volume(
            &format!("pv{i}"),
            vec![
                vec![expr(&format!("k{i}"), &["a"])],
                vec![expr(&format!("k{i}"), &["b"])],
            ],
        ));
    }
    let ix = index(claims, volumes, vec![]);
    let all: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
    assert_eq!(ix.for_pending("ns", &all).unwrap().len(), MAX_ALTERNATIVES);
}

/// `volume` with labels.
fn labelled(
    name: &str,
    labels: &[(&str, &str)],
    terms: Vec<Vec<NodeSelectorRequirement>>,
) -> PersistentVolume {
    let mut v = volume(name, terms);
    v.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    v
}

#[test]
fn a_volume_labelled_with_zones_ties_the_pod_to_them_as_the_schedulers_volume_zone_filter() {
    // An in-tree volume: zone and region labels, no node affinity terms.
    let mut old = labelled(
        "pv-old",
        &[
            (
                "failure-domain.beta.kubernetes.io/zone",
                "us-east-1a__us-east-1c",
            ),
            ("failure-domain.beta.kubernetes.io/region", "us-east-1"),
            ("team", "storage"),
        ],
        vec![],
    );
    old.spec.as_mut().unwrap().node_affinity = None;
    let ix = index(vec![claim("data", Some("pv-old"), None)], vec![old], vec![]);
    let alts = ix.for_pending("ns", &names(&["data"])).unwrap();
    assert_eq!(alts.len(), 1, "{:?}", zones(&alts));
    // The beta keys are read as the GA ones, and `__` separates zones.
    assert_eq!(zone_in(&alts, "us-east-1a"), vec![true]);
    assert_eq!(zone_in(&alts, "us-east-1c"), vec![true]);
    assert_eq!(zone_in(&alts, "us-east-1b"), vec![false]);
    let region = alts[0]
        .get("topology.kubernetes.io/region")
        .expect("region");
    assert!(region.matches(Some("us-east-1")) && !region.matches(Some("us-west-2")));
    assert!(alts[0].get("team").is_none(), "other labels are not read");
    // A running pod on it is moved only within those zones too.
    assert_eq!(
        zone_in(&ix.for_bound("ns", &names(&["data"])), "us-east-1b"),
        vec![false]
    );
}

#[test]
fn zone_labels_narrow_every_node_affinity_term_and_an_unparsable_value_is_ignored() {
    let ix = index(
        vec![
            claim("both", Some("pv-both"), None),
            claim("bad", Some("pv-bad"), None),
        ],
        vec![
            labelled(
                "pv-both",
                &[(ZONE, "us-east-1b")],
                vec![
                    vec![expr(ZONE, &["us-east-1a", "us-east-1b"])],
                    vec![expr("rack", &["r1"])],
                ],
            ),
            // An empty entry: the scheduler cannot parse it and ignores the label.
            labelled(
                "pv-bad",
                &[(ZONE, "us-east-1a__")],
                vec![vec![expr("rack", &["r2"])]],
            ),
        ],
        vec![],
    );
    let both = ix.for_pending("ns", &names(&["both"])).unwrap();
    assert_eq!(both.len(), 2, "{:?}", zones(&both));
    assert_eq!(zone_in(&both, "us-east-1b"), vec![true, true]);
    assert_eq!(zone_in(&both, "us-east-1a"), vec![false, false]);
    let bad = ix.for_pending("ns", &names(&["bad"])).unwrap();
    assert_eq!(zones(&bad), vec!["any".to_string()]);
}

/// Karpenter's driver resolution (`volumeusage.go`): the bound volume's CSI driver first,
/// else the claim's StorageClass's provisioner; an in-tree volume or provisioner counts as
/// the CSI driver it migrated to, as kube-scheduler counts it; a claim with neither counts
/// for no driver.
#[test]
fn a_claims_driver_is_its_volumes_then_its_classes() {
    let mut csi = volume("pv-csi", vec![]);
    csi.spec.as_mut().unwrap().csi = Some(k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
        driver: "pd.csi.storage.gke.io".into(),
        volume_handle: "disk-1".into(),
        ..Default::default()
    });
    let mut in_tree = volume("pv-ebs", vec![]);
    in_tree.spec.as_mut().unwrap().aws_elastic_block_store = Some(
        k8s_openapi::api::core::v1::AWSElasticBlockStoreVolumeSource {
            volume_id: "vol-1".into(),
            ..Default::default()
        },
    );
    // Neither a CSI nor an in-tree source it knows (NFS): not counted, whatever the class
    // says (Karpenter's `ResolveDriver`, kube-scheduler's `NodeVolumeLimits`). A claim bound
    // to a volume not found falls back to its class.
    let other = volume("pv-nfs", vec![]);
    let mut gce = class("standard", "WaitForFirstConsumer", &[]);
    gce.provisioner = "kubernetes.io/gce-pd".into();
    let ix = index(
        vec![
            claim("on-csi", Some("pv-csi"), Some("gp3")),
            claim("on-ebs", Some("pv-ebs"), Some("standard")),
            claim("on-nfs", Some("pv-nfs"), Some("gp3")),
            claim("on-gone", Some("pv-gone"), Some("gp3")),
            claim("dynamic", None, Some("gp3")),
            claim("migrated", None, Some("standard")),
            claim("classless", None, None),
            claim("unknown-class", None, Some("nope")),
        ],
        vec![csi, in_tree, other],
        vec![class("gp3", "WaitForFirstConsumer", &[]), gce],
    );
    let names = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let got = ix.attachments(
        "ns",
        &names(&[
            "on-csi",
            "on-ebs",
            "on-nfs",
            "on-gone",
            "dynamic",
            "migrated",
            "classless",
            "unknown-class",
            "missing",
        ]),
    );
    let got: Vec<(&str, &str)> = got
        .iter()
        .map(|v| (v.driver.as_str(), v.id.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("pd.csi.storage.gke.io", "ns/on-csi"),
            ("ebs.csi.aws.com", "ns/on-ebs"),
            ("ebs.csi.aws.com", "ns/on-gone"),
            ("ebs.csi.aws.com", "ns/dynamic"),
            ("pd.csi.storage.gke.io", "ns/migrated"),
        ]
    );
    assert_eq!(csi_driver("kubernetes.io/azure-disk"), "disk.csi.azure.com");
    assert_eq!(csi_driver("example.com/nas"), "example.com/nas");
}

/// A CSINode's counts are the node's limits; a driver published without `allocatable`, or
/// without a count, is unbounded (Karpenter's "should treat a published driver without an
/// attachment limit as unbounded"), and a node without a CSINode has no limits.
#[test]
fn csinode_counts_are_node_limits_and_a_driver_without_one_is_unbounded() {
    let csi_node: k8s_openapi::api::storage::v1::CSINode =
        serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1"},
        "spec": {"drivers": [
            {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
            {"name": "efs.csi.aws.com", "nodeID": "i-1"},
            {"name": "fsx.csi.aws.com", "nodeID": "i-1", "allocatable": {}}]}}))
        .unwrap();
    let ix = VolumeIndex::new(&VolumeObjects {
        csi_nodes: vec![Arc::new(csi_node)],
        ..Default::default()
    });
    assert!(ix.any_limits());
    assert_eq!(
        ix.node_limits("n1"),
        BTreeMap::from([("ebs.csi.aws.com".to_string(), 25)])
    );
    assert!(ix.node_limits("n2").is_empty());
    assert!(!VolumeIndex::new(&VolumeObjects::default()).any_limits());
}
