//! Karpenter's volume tests, replayed from API objects to a plan: its scheduling suite's
//! "VolumeUsage" describe (`pkg/controllers/provisioning/scheduling/suite_test.go`), its
//! provisioning suite's "Volume Topology Requirements" context
//! (`pkg/controllers/provisioning/suite_test.go`) and the PVC spread case of `topology_test.go`.

use super::*;
use crate::controller::volumes::{VolumeIndex, VolumeObjects};
use autoscaler_core::plan::Plan;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

const Z1: &str = "test-zone-1";
const Z2: &str = "test-zone-2";
const Z3: &str = "test-zone-3";
const CSI: &str = "fake.csi.provider";

/// An m5.xlarge offered on demand in the three test zones, and optionally a larger type
/// labelled `special: optional` (Karpenter's fake exotic type).
fn types(special: bool) -> BTreeMap<String, Arc<Vec<InstanceType>>> {
    let mut v = vec![
        itype("m5.xlarge")
            .cpu("4")
            .mem("16Gi")
            .max_pods(110)
            .on_demand(&[Z1, Z2, Z3], 0.192)
            .build(),
    ];
    if special {
        v.push(
            itype("m5.2xlarge")
                .cpu("8")
                .mem("32Gi")
                .max_pods(110)
                .label("special", "optional")
                .on_demand(&[Z1, Z2, Z3], 0.384)
                .build(),
        );
    }
    BTreeMap::from([("general".to_string(), Arc::new(v))])
}

fn general() -> Arc<NodePool> {
    arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "general"}, "spec": {"template": {}}
    }))
}

fn pvc(name: &str, volume: Option<&str>, class: Option<&str>) -> Arc<PersistentVolumeClaim> {
    let mut c = json!({"metadata": {"name": name, "namespace": "default"}, "spec": {}});
    if let Some(v) = volume {
        c["metadata"]["annotations"] = json!({crate::controller::volumes::BIND_COMPLETED: "yes"});
        c["spec"]["volumeName"] = json!(v);
    }
    if let Some(s) = class {
        c["spec"]["storageClassName"] = json!(s);
    }
    arc(c)
}

/// A PersistentVolume of `source` (`{"csi": ...}`, `{"local": ...}`) with node affinity `terms`.
fn pv(name: &str, source: serde_json::Value, terms: serde_json::Value) -> Arc<PersistentVolume> {
    let mut spec = source;
    if !terms.as_array().is_some_and(Vec::is_empty) {
        spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": terms}});
    }
    arc(json!({"metadata": {"name": name}, "spec": spec}))
}

fn csi_source() -> serde_json::Value {
    json!({"csi": {"driver": "test.driver", "volumeHandle": "test-handle"}})
}

fn zone_term(zones: &[&str]) -> serde_json::Value {
    json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}]})
}

fn sc(name: &str, provisioner: &str, topologies: serde_json::Value) -> Arc<StorageClass> {
    arc(
        json!({"metadata": {"name": name}, "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer", "allowedTopologies": topologies}),
    )
}

fn sc_zones(zones: &[&str]) -> serde_json::Value {
    json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": zones}]}])
}

fn csinode(node: &str, drivers: &[(&str, i32)]) -> Arc<CSINode> {
    let drivers: Vec<_> = drivers
        .iter()
        .map(|(d, n)| json!({"name": d, "nodeID": "fake-node-id", "allocatable": {"count": n}}))
        .collect();
    arc(json!({"metadata": {"name": node}, "spec": {"drivers": drivers}}))
}

fn claim_volume(claim: &str) -> serde_json::Value {
    json!({"name": format!("v-{claim}"), "persistentVolumeClaim": {"claimName": claim}})
}

fn ephemeral_volume(name: &str, class: Option<&str>) -> serde_json::Value {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}});
    if let Some(c) = class {
        spec["storageClassName"] = json!(c);
    }
    json!({"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": spec}}})
}

fn require_zones(zones: &[&str]) -> serde_json::Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [zone_term(zones)]}}})
}

/// A node of pool `general` in `zone`, with room for `cpu`.
fn zone_node(name: &str, zone: &str, cpu: &str) -> Arc<Node> {
    let mut n = node_json(name);
    n["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!(zone);
    n["status"]["allocatable"] = json!({"cpu": cpu, "memory": "64Gi", "pods": "200"});
    arc(n)
}

#[derive(Default)]
struct World {
    pods: Vec<Arc<CachedPod>>,
    nodes: Vec<Arc<Node>>,
    objects: VolumeObjects,
    special: bool,
}

struct Outcome {
    plan: Plan,
    refused: Vec<(PodKey, String)>,
    snapshot: autoscaler_core::model::Snapshot,
}

impl Outcome {
    /// The zone pod `name` lands in: its node's, or the one zone its new claim's offerings
    /// keep (`None` when unplaced; `"many"` when the claim keeps several).
    fn zone(&self, name: &str) -> Option<String> {
        let key = |p: &PodKey| p.name == name;
        if let Some(p) = self.plan.existing.iter().find(|p| key(&p.pod)) {
            let n = self.snapshot.nodes.iter().find(|n| n.name == p.target)?;
            return n.labels.get(labels::ZONE).cloned();
        }
        let c = self
            .plan
            .new_claims
            .iter()
            .find(|c| c.pods.iter().any(key))?;
        let zones: BTreeSet<String> = c
            .instance_types
            .iter()
            .flat_map(|t| t.offerings.iter().map(|o| o.0.to_string()))
            .collect();
        Some(if zones.len() == 1 {
            zones.into_iter().next().unwrap()
        } else {
            format!("many {zones:?}")
        })
    }

    fn placed(&self, name: &str) -> bool {
        self.zone(name).is_some() || self.plan.in_flight.iter().any(|p| p.pod.name == name)
    }

    /// The instance types of pod `name`'s new claim.
    fn claim_types(&self, name: &str) -> Vec<String> {
        self.plan
            .new_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p.name == name))
            .map(|c| {
                c.instance_types
                    .iter()
                    .map(|t| t.instance_type.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn plan(w: World) -> Outcome {
    let pools = [general()];
    let types = types(w.special);
    let batch: BTreeSet<PodKey> = w
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .map(|p| p.key.clone())
        .collect();
    let claims: Vec<Arc<NodeClaim>> = w
        .nodes
        .iter()
        .map(|n| initialized_claim(n.metadata.name.as_deref().unwrap(), "general"))
        .collect();
    let index = VolumeIndex::new(&w.objects);
    let inputs = Inputs {
        claims: &claims,
        volumes: &index,
        ..plain_inputs(&w.pods, &w.nodes, &pools, &types, &batch)
    };
    let built = SnapshotBuilder::new().build_for_provisioning(&inputs);
    assert!(built.problems.is_empty(), "{:?}", built.problems);
    let plan = autoscaler_core::plan_provisioning(&built.snapshot);
    Outcome {
        plan,
        refused: built.refused,
        snapshot: built.snapshot,
    }
}

fn pending(name: &str, app: &str, extra: serde_json::Value) -> Arc<CachedPod> {
    pod_json("default", name, app, None, "100m", extra)
}

// ---- VolumeUsage (scheduling suite) ----

/// "should launch multiple nodes if required due to volume limits": a node whose CSINode
/// attaches 10 volumes of the driver takes five of six pods with two claims each.
#[test]
fn should_launch_multiple_nodes_if_required_due_to_volume_limits() {
    let mut w = World {
        nodes: vec![zone_node("n1", Z1, "1024")],
        ..Default::default()
    };
    w.objects.csi_nodes = vec![csinode("n1", &[(CSI, 10)])];
    w.objects.classes = vec![sc("my-storage-class", CSI, sc_zones(&[Z1]))];
    for i in 0..6 {
        let (a, b) = (format!("my-claim-a-{i}"), format!("my-claim-b-{i}"));
        w.objects
            .claims
            .push(pvc(&a, None, Some("my-storage-class")));
        w.objects
            .claims
            .push(pvc(&b, None, Some("my-storage-class")));
        w.pods.push(pending(
            &format!("p{i}"),
            "db",
            json!({"volumes": [claim_volume(&a), claim_volume(&b)]}),
        ));
    }
    let o = plan(w);
    assert_eq!(o.plan.existing.len(), 5, "{}", o.plan.render());
    assert_eq!(o.plan.new_claims.len(), 1, "{}", o.plan.render());
}

/// "should launch a single node if all pods use the same PVC".
#[test]
fn should_launch_a_single_node_if_all_pods_use_the_same_pvc() {
    let mut w = World {
        nodes: vec![zone_node("n1", Z1, "1024")],
        ..Default::default()
    };
    w.objects.csi_nodes = vec![csinode("n1", &[(CSI, 10)])];
    w.objects.classes = vec![sc("my-storage-class", CSI, sc_zones(&[Z1]))];
    w.objects.volumes = vec![pv("my-volume", csi_source(), json!([zone_term(&[Z1])]))];
    w.objects.claims = vec![pvc("my-claim", Some("my-volume"), Some("my-storage-class"))];
    for i in 0..100 {
        w.pods.push(pod_json(
            "default",
            &format!("p{i}"),
            "db",
            None,
            "10m",
            json!({"volumes": [claim_volume("my-claim")]}),
        ));
    }
    let o = plan(w);
    assert!(o.plan.new_claims.is_empty(), "{}", o.plan.render());
    assert_eq!(o.plan.existing.len(), 100, "{}", o.plan.render());
}

/// "should not fail for NFS volumes": pods listing one NFS claim twice, with an empty class.
/// A CSINode limit on another driver makes the planner count volumes.
#[test]
fn should_not_fail_for_nfs_volumes() {
    let mut w = World {
        nodes: vec![zone_node("n1", Z1, "1024")],
        ..Default::default()
    };
    w.objects.csi_nodes = vec![csinode("n1", &[(CSI, 1)])];
    w.objects.volumes = vec![pv(
        "my-volume",
        json!({"nfs": {"server": "fake.server", "path": "/some/path"}}),
        json!([zone_term(&[Z1])]),
    )];
    w.objects.claims = vec![pvc("my-claim", Some("my-volume"), Some(""))];
    for i in 0..5 {
        w.pods.push(pending(
            &format!("p{i}"),
            "db",
            json!({"volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "my-claim"}},
                {"name": "b", "persistentVolumeClaim": {"claimName": "my-claim"}}]}),
        ));
    }
    let o = plan(w);
    assert!(o.refused.is_empty(), "{:?}", o.refused);
    assert!(o.plan.new_claims.is_empty(), "{}", o.plan.render());
    assert_eq!(o.plan.existing.len(), 5, "{}", o.plan.render());
}

/// Karpenter's `ResolveDriver` (and kube-scheduler's `NodeVolumeLimits`): a claim bound to a
/// volume that is neither CSI nor a migrated in-tree one is not counted, whatever its class's
/// provisioner; the class is read only for an unbound claim (kube-scheduler: or when the
/// volume is not found).
#[test]
fn a_claim_bound_to_a_non_csi_volume_is_not_counted_against_its_classes_driver() {
    let mut w = World {
        nodes: vec![zone_node("n1", Z1, "1024")],
        ..Default::default()
    };
    w.objects.csi_nodes = vec![csinode("n1", &[(CSI, 1)])];
    w.objects.classes = vec![sc("my-storage-class", CSI, json!([]))];
    w.objects.volumes = vec![pv(
        "nfs-pv",
        json!({"nfs": {"server": "fake.server", "path": "/some/path"}}),
        json!([]),
    )];
    w.objects.claims = vec![
        pvc("share", Some("nfs-pv"), Some("my-storage-class")),
        pvc("data", None, Some("my-storage-class")),
    ];
    w.pods.push(pod_json(
        "default",
        "nfs-user",
        "web",
        Some("n1"),
        "100m",
        json!({"volumes": [claim_volume("share")]}),
    ));
    w.pods.push(pending(
        "db",
        "db",
        json!({"volumes": [claim_volume("data")]}),
    ));
    let o = plan(w);
    let n1 = o.snapshot.nodes.iter().find(|n| n.name == "n1").unwrap();
    let attached: Vec<_> = n1.pods.iter().flat_map(|p| p.volumes.clone()).collect();
    assert!(
        attached.is_empty(),
        "the NFS claim counts against nothing: {attached:?}"
    );
    assert!(o.plan.new_claims.is_empty(), "{}", o.plan.render());
}

/// "should schedule pods using a PV with multiple zones" and "... a StorageClass with multiple
/// zones in AllowedTopologies": two pods apart by zone, each volume allowing zone 1 or 2.
#[test]
fn should_schedule_pods_using_multiple_zone_alternatives_apart() {
    for by_class in [false, true] {
        let mut w = World::default();
        if by_class {
            w.objects.classes = vec![sc(
                "multi-zone-sc",
                CSI,
                json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": [Z1]}]},
                       {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": [Z2]}]}]),
            )];
        }
        for i in 0..2 {
            let claim = format!("multi-zone-pvc-{i}");
            if by_class {
                w.objects
                    .claims
                    .push(pvc(&claim, None, Some("multi-zone-sc")));
            } else {
                let vol = format!("multi-zone-pv-{i}");
                w.objects.volumes.push(pv(
                    &vol,
                    csi_source(),
                    json!([zone_term(&[Z1]), zone_term(&[Z2])]),
                ));
                w.objects.claims.push(pvc(&claim, Some(&vol), None));
            }
            w.pods.push(pending(
                &format!("pod-{i}"),
                "multi-zone-app",
                json!({"volumes": [claim_volume(&claim)],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "topology.kubernetes.io/zone",
                     "labelSelector": {"matchLabels": {"app": "multi-zone-app"}}}]}}}),
            ));
        }
        let o = plan(w);
        let (a, b) = (o.zone("pod-0"), o.zone("pod-1"));
        let ok = |z: &Option<String>| z.as_deref() == Some(Z1) || z.as_deref() == Some(Z2);
        assert!(
            ok(&a) && ok(&b) && a != b,
            "class {by_class}: {a:?} {b:?} {}",
            o.plan.render()
        );
    }
}

/// "should schedule pods when a valid multi-volume topology alternative remains after pruning
/// disjoint branches": only the larger type carries `special: optional`, none `required`.
#[test]
fn should_schedule_when_a_multi_volume_alternative_remains_after_pruning() {
    let special = |v: &str| json!({"key": "special", "values": [v]});
    let zone = |z: &str| json!({"key": "topology.kubernetes.io/zone", "values": [z]});
    let mut w = World {
        special: true,
        ..Default::default()
    };
    w.objects.classes = vec![
        sc(
            "a",
            CSI,
            json!([{"matchLabelExpressions": [special("required")]},
                   {"matchLabelExpressions": [special("optional")]}]),
        ),
        sc(
            "b",
            CSI,
            json!([{"matchLabelExpressions": [zone(Z1), special("optional")]},
                   {"matchLabelExpressions": [zone(Z2), special("required")]}]),
        ),
    ];
    w.objects.claims = vec![pvc("pvc-a", None, Some("a")), pvc("pvc-b", None, Some("b"))];
    w.pods.push(pending(
        "pod",
        "x",
        json!({"volumes": [claim_volume("pvc-a"), claim_volume("pvc-b")]}),
    ));
    let o = plan(w);
    assert_eq!(o.zone("pod").as_deref(), Some(Z1), "{}", o.plan.render());
    assert_eq!(o.claim_types("pod"), ["m5.2xlarge"], "{}", o.plan.render());
}

/// "should preserve unconstrained PV alternatives after ignoring hostname affinity" (local and
/// hostPath), and "should ignore hostname affinity scheduling when using local path volumes"
/// (plain and ephemeral).
#[test]
fn local_volumes_hostname_terms_are_ignored_for_pending_pods() {
    for source in [
        json!({"local": {"path": "/mnt/local-disks"}}),
        json!({"hostPath": {"path": "/mnt/local-disks"}}),
    ] {
        let host = json!({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["existing-host"]}]});
        let mut w = World::default();
        w.objects.volumes = vec![
            pv(
                "hostname-or-zone-pv",
                source.clone(),
                json!([host, zone_term(&["invalid-zone"])]),
            ),
            pv("host-only", source.clone(), json!([host])),
        ];
        w.objects.classes = vec![sc("local-path", "kubernetes.io/no-provisioner", json!([]))];
        w.objects.claims = vec![
            pvc("hostname-or-zone-pvc", Some("hostname-or-zone-pv"), None),
            pvc("plain", Some("host-only"), Some("local-path")),
            pvc("eph-scratch", Some("host-only"), Some("local-path")),
        ];
        w.pods = vec![
            pending(
                "hostname-or-zone-pod",
                "a",
                json!({"volumes": [claim_volume("hostname-or-zone-pvc")]}),
            ),
            pending(
                "plain-pod",
                "b",
                json!({"volumes": [claim_volume("plain")]}),
            ),
            pending(
                "eph",
                "c",
                json!({"volumes": [ephemeral_volume("scratch", Some("local-path"))]}),
            ),
        ];
        let o = plan(w);
        assert!(o.refused.is_empty(), "{:?}", o.refused);
        for p in ["hostname-or-zone-pod", "plain-pod", "eph"] {
            assert!(o.placed(p), "{source}: {p}: {}", o.plan.render());
        }
    }
}

/// "should not ignore hostname affinity when using non-local path volumes": a CSI volume tied
/// to a host no node is: nothing is launched.
#[test]
fn should_not_ignore_hostname_affinity_when_using_non_local_path_volumes() {
    let mut w = World::default();
    w.objects.volumes = vec![pv(
        "pv",
        csi_source(),
        json!([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["some-random-host"]}]}]),
    )];
    w.objects.classes = vec![sc("zonal", CSI, sc_zones(&[Z2, Z3]))];
    w.objects.claims = vec![pvc("pvc", Some("pv"), Some("zonal"))];
    w.pods = vec![pending("p", "a", json!({"volumes": [claim_volume("pvc")]}))];
    let o = plan(w);
    assert!(o.plan.new_claims.is_empty(), "{}", o.plan.render());
}

/// "should not relax an added volume topology zone node-selector away": the pod's required
/// affinity has two terms, one no type meets; the volume's zone holds on the other.
#[test]
fn should_not_relax_an_added_volume_topology_zone_node_selector_away() {
    let mut w = World::default();
    w.objects.volumes = vec![pv("pv", csi_source(), json!([zone_term(&[Z3])]))];
    w.objects.classes = vec![sc("zonal", CSI, sc_zones(&[Z2, Z3]))];
    w.objects.claims = vec![pvc("pvc", Some("pv"), Some("zonal"))];
    w.pods = vec![pending(
        "p",
        "a",
        json!({"volumes": [claim_volume("pvc")],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "example.com/label", "operator": "In", "values": ["unsupported"]}]},
            {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}]}}}}),
    )];
    let o = plan(w);
    assert_eq!(o.zone("p").as_deref(), Some(Z3), "{}", o.plan.render());
}

/// The "(ephemeral volume)" cases of "Volume Topology Requirements": the claim of a generic
/// ephemeral volume, `<pod>-<volume>`, read like any other.
#[test]
fn volume_topology_requirements_ephemeral_volume_cases() {
    // (bound volume?, pod's zones, expected zone)
    let cases: [(&str, bool, &[&str], Option<&str>); 4] = [
        ("class-zones", false, &[Z1, Z3], Some(Z3)),
        ("class-incompatible", false, &[Z1], None),
        ("volume-zone", true, &[], Some(Z3)),
        ("volume-incompatible", true, &[Z1], None),
    ];
    for (name, bound, zones, want) in cases {
        let mut w = World::default();
        w.objects.classes = vec![sc("zonal", CSI, sc_zones(&[Z2, Z3]))];
        w.objects.volumes = vec![pv("pv-3", csi_source(), json!([zone_term(&[Z3])]))];
        w.objects.claims = vec![pvc(
            &format!("{name}-tmp"),
            bound.then_some("pv-3"),
            Some("zonal"),
        )];
        let mut extra = json!({"volumes": [ephemeral_volume("tmp", Some("zonal"))]});
        if !zones.is_empty() {
            extra["affinity"] = require_zones(zones);
        }
        w.pods = vec![pending(name, name, extra)];
        let o = plan(w);
        assert!(o.refused.is_empty(), "{name}: {:?}", o.refused);
        assert_eq!(o.zone(name).as_deref(), want, "{name}: {}", o.plan.render());
    }
}

/// "should schedule with an empty / a missing storage class if the pvc is bound", "should not
/// schedule with an empty / a missing storage class if the pvc is not bound", and the ephemeral
/// tables "... without a storage class when the PVC is bound / unbound".
#[test]
fn storage_class_empty_or_missing_bound_schedules_unbound_waits() {
    let mut w = World::default();
    w.objects.volumes = vec![pv("test-volume", csi_source(), json!([]))];
    w.objects.claims = vec![
        pvc("bound-empty", Some("test-volume"), Some("")),
        pvc(
            "bound-missing",
            Some("test-volume"),
            Some("missing-storage-class"),
        ),
        pvc("unbound-empty", None, Some("")),
        pvc("unbound-missing", None, Some("missing-storage-class")),
        pvc("eph-a-tmp", Some("test-volume"), Some("non-existent")),
        pvc("eph-b-tmp", Some("test-volume"), Some("")),
    ];
    let with = |c: &str| json!({"volumes": [claim_volume(c)]});
    w.pods = vec![
        pending("bound-empty", "a", with("bound-empty")),
        pending("bound-missing", "b", with("bound-missing")),
        pending("unbound-empty", "c", with("unbound-empty")),
        pending("unbound-missing", "d", with("unbound-missing")),
        pending(
            "eph-a",
            "e",
            json!({"volumes": [ephemeral_volume("tmp", Some("non-existent"))]}),
        ),
        pending(
            "eph-b",
            "f",
            json!({"volumes": [ephemeral_volume("tmp", Some(""))]}),
        ),
        // Its claim was never created.
        pending(
            "eph-c",
            "g",
            json!({"volumes": [ephemeral_volume("tmp", Some("non-existent"))]}),
        ),
        pending("plain", "h", json!({})),
    ];
    let o = plan(w);
    let refused: BTreeSet<&str> = o.refused.iter().map(|(k, _)| k.name.as_str()).collect();
    assert_eq!(
        refused,
        BTreeSet::from(["unbound-empty", "unbound-missing", "eph-c"]),
        "{:?}",
        o.refused
    );
    for p in ["bound-empty", "bound-missing", "eph-a", "eph-b", "plain"] {
        assert!(o.placed(p), "{p}: {}", o.plan.render());
    }
}

/// "should launch nodes for pods with ephemeral volume using the specified storage class name"
/// and "CSIMigration" (a non-dynamic PVC and an ephemeral volume of an in-tree class): the
/// running pod's claim fills the node's count of one, so the next pod gets a new node.
#[test]
fn ephemeral_and_migrated_claims_count_against_the_nodes_limit() {
    // (class provisioner, CSINode driver, ephemeral?)
    let cases = [
        (CSI, CSI, true),
        ("kubernetes.io/aws-ebs", "ebs.csi.aws.com", false),
        ("kubernetes.io/aws-ebs", "ebs.csi.aws.com", true),
    ];
    for (provisioner, driver, ephemeral) in cases {
        let mut w = World {
            nodes: vec![zone_node("n1", Z1, "1024")],
            ..Default::default()
        };
        w.objects.csi_nodes = vec![csinode("n1", &[(driver, 1), ("other-provider", 10)])];
        w.objects.classes = vec![
            sc("my-storage-class", provisioner, sc_zones(&[Z1])),
            sc("default-storage-class", "other-provider", sc_zones(&[Z1])),
        ];
        let volumes = |pod: &str| {
            if ephemeral {
                (
                    format!("{pod}-tmp-ephemeral"),
                    json!({"volumes": [ephemeral_volume("tmp-ephemeral", Some("my-storage-class"))]}),
                )
            } else {
                let c = format!("{pod}-claim");
                (c.clone(), json!({"volumes": [claim_volume(&c)]}))
            }
        };
        let (c1, v1) = volumes("initial");
        let (c2, v2) = volumes("next");
        w.objects.claims = vec![
            pvc(&c1, None, Some("my-storage-class")),
            pvc(&c2, None, Some("my-storage-class")),
        ];
        w.pods = vec![
            pod_json("default", "initial", "a", Some("n1"), "100m", v1),
            pending("next", "a", v2),
        ];
        let o = plan(w);
        assert_eq!(
            o.plan.new_claims.len(),
            1,
            "{provisioner} ephemeral={ephemeral}: {}",
            o.plan.render()
        );
    }
}

/// topology_test.go "should schedule pod with PVC and TSC minDomains=3 when pods are spread
/// across 3 zones": the volume's zone narrows where the pod goes, not the domains its spread
/// counts.
#[test]
fn should_schedule_pod_with_pvc_and_min_domains_3_when_pods_are_spread_across_3_zones() {
    let spread = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3,
        "labelSelector": {"matchLabels": {"app": "spread"}}}]);
    let mut w = World {
        nodes: vec![
            zone_node("n1", Z1, "4"),
            zone_node("n2", Z2, "4"),
            zone_node("n3", Z3, "4"),
        ],
        ..Default::default()
    };
    for (i, n) in ["n1", "n2", "n3"].iter().enumerate() {
        w.pods.push(pod_json(
            "default",
            &format!("s{i}"),
            "spread",
            Some(n),
            "100m",
            json!({"topologySpreadConstraints": spread}),
        ));
    }
    w.objects.volumes = vec![pv("test-pv", csi_source(), json!([zone_term(&[Z1])]))];
    w.objects.claims = vec![pvc("test-pvc", Some("test-pv"), None)];
    w.pods.push(pending(
        "with-pvc",
        "spread",
        json!({"topologySpreadConstraints": spread, "volumes": [claim_volume("test-pvc")]}),
    ));
    let o = plan(w);
    assert_eq!(
        o.zone("with-pvc").as_deref(),
        Some(Z1),
        "{}",
        o.plan.render()
    );
}

/// A claim a pod lists twice attaches once (Karpenter's volume sets, kube-scheduler's
/// unique volume handles): a node whose CSINode allows one volume takes the pod.
#[test]
fn a_claim_listed_twice_attaches_once() {
    let mut w = World {
        nodes: vec![zone_node("n1", Z1, "1024")],
        ..Default::default()
    };
    w.objects.csi_nodes = vec![csinode("n1", &[(CSI, 1)])];
    w.objects.classes = vec![sc("my-storage-class", CSI, json!([]))];
    w.objects.claims = vec![pvc("my-claim", None, Some("my-storage-class"))];
    w.pods.push(pending(
        "p",
        "db",
        json!({"volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "my-claim"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "my-claim"}}]}),
    ));
    let o = plan(w);
    assert!(o.plan.new_claims.is_empty(), "{}", o.plan.render());
    assert_eq!(o.plan.existing.len(), 1, "{}", o.plan.render());
}
