//! Volume topology in the built snapshot: pending pods narrowed to where their claims let them
//! run, refused when a claim cannot be provisioned for, running pods kept by their volumes.

use super::*;

#[test]
fn volumes_narrow_pending_pods_and_keep_a_running_pod_where_its_volume_is() {
    use crate::controller::volumes::{BIND_COMPLETED, VolumeIndex, VolumeObjects};
    let (pool, types) = general_pool();
    let claim = |name: &str, pv: &str| {
        arc(json!({"metadata": {"name": name, "namespace": "default",
            "annotations": {BIND_COMPLETED: "yes"}},
            "spec": {"volumeName": pv}}))
    };
    let volume = |name: &str, zone: &str| {
        arc(
            json!({"metadata": {"name": name}, "spec": {"nodeAffinity": {"required": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone",
                "operator": "In", "values": [zone]}]}]}}}}),
        )
    };
    let volumes = VolumeIndex::new(&VolumeObjects {
        claims: vec![
            claim("data-db", "pv-db"),
            claim("data-0", "pv-0"),
            claim("data-1", "pv-1"),
        ],
        volumes: vec![
            volume("pv-db", "us-east-1a"),
            volume("pv-0", "us-east-1b"),
            volume("pv-1", "us-east-1b"),
        ],
        classes: vec![],
        ..Default::default()
    });
    let with_claim =
        |c: &str| json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": c}}]});
    let pods = vec![
        // A light pod whose volume is in zone a, on the zone-a node.
        pod_json(
            "default",
            "db",
            "db",
            Some("managed"),
            "200m",
            with_claim("data-db"),
        ),
        // Keeps the zone-b node from being empty.
        pod_json("default", "busy", "busy", Some("spare"), "1", json!({})),
        // Two replicas with volumes in zone b, and one whose claim does not exist.
        pod_json(
            "default",
            "web-0",
            "web",
            None,
            "100m",
            with_claim("data-0"),
        ),
        pod_json(
            "default",
            "web-1",
            "web",
            None,
            "100m",
            with_claim("data-1"),
        ),
        pod_json(
            "default",
            "orphan",
            "web",
            None,
            "100m",
            with_claim("missing"),
        ),
    ];
    let mut spare = node_json("spare");
    spare["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!("us-east-1b");
    let nodes = vec![arc(node_json("managed")), arc(spare)];
    let batch: BTreeSet<PodKey> = ["web-0", "web-1", "orphan"]
        .iter()
        .map(|n| PodKey {
            namespace: "default".into(),
            name: n.to_string(),
        })
        .collect();
    let pools = [pool];
    let claims = [
        initialized_claim("managed", "general"),
        initialized_claim("spare", "general"),
    ];
    let blind = Inputs {
        claims: &claims,
        ..plain_inputs(&pods, &nodes, &pools, &types, &batch)
    };
    let seeing = Inputs {
        volumes: &volumes,
        ..blind
    };
    let mut b = SnapshotBuilder::new();
    let built = b.build(&seeing);
    // The orphan waits, its claim named; the replicas are narrowed to zone b and share a shape.
    assert_eq!(built.refused.len(), 1);
    assert_eq!(built.refused[0].0.name, "orphan");
    assert!(
        built.refused[0]
            .1
            .contains("PersistentVolumeClaim default/missing not found"),
        "{:?}",
        built.refused
    );
    let pending = &built.snapshot.pending;
    assert_eq!(pending.len(), 2);
    assert!(pending[0].shares_shape_with(&pending[1]));
    let zone = |z: &str| Labels::from([(labels::ZONE.to_string(), z.to_string())]);
    assert!(pending[0].node_selector.matches(&zone("us-east-1b")));
    assert!(!pending[0].node_selector.matches(&zone("us-east-1a")));
    // Spreads count by what the pod states itself: nothing.
    assert_eq!(
        pending[0].strict_node_selector,
        Some(autoscaler_core::requirements::NodeSelector::default())
    );
    // Disruption: db may not leave zone a, so its node stays; blind, it moves to the spare.
    let config = autoscaler_core::disruption::DisruptionConfig::default();
    let state = autoscaler_core::disruption::DisruptionState::default();
    let removes = |inputs: &Inputs<'_>| -> bool {
        let snap = SnapshotBuilder::new().build_for_disruption(inputs).snapshot;
        autoscaler_core::disruption::plan_disruption(&snap, &state, 0, &config)
            .commands
            .iter()
            .any(|c| c.nodes.iter().any(|n| n == "managed"))
    };
    assert!(removes(&blind), "without volumes db fits on the spare node");
    assert!(!removes(&seeing), "db's volume is in zone a");
    // The same volume as db's generic ephemeral volume (its claim `db-scratch`, named
    // `<pod>-<volume>`): deleted with the pod, so it does not hold db in zone a.
    let ephemeral = VolumeIndex::new(&VolumeObjects {
        claims: vec![claim("db-scratch", "pv-db")],
        volumes: vec![volume("pv-db", "us-east-1a")],
        ..Default::default()
    });
    let mut pods = pods.clone();
    pods[0] = pod_json(
        "default",
        "db",
        "db",
        Some("managed"),
        "200m",
        json!({"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate":
            {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]}),
    );
    let scratch = Inputs {
        pods: &pods,
        volumes: &ephemeral,
        ..blind
    };
    assert!(
        removes(&scratch),
        "an ephemeral volume's claim goes with its pod"
    );
}

/// Karpenter's "Volume Topology Requirements" cases (`pkg/controllers/provisioning/suite_test.go`):
/// a StorageClass allowing zones 2 and 3, a volume in zone 3, and pods that require zones of
/// their own. The zone of the claim planned for each, or none.
#[test]
fn karpenters_volume_topology_cases_plan_the_zone_both_allow_or_nothing() {
    use crate::controller::volumes::{BIND_COMPLETED, VolumeIndex, VolumeObjects};
    let pool: Arc<NodePool> = arc(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "general"}, "spec": {"template": {}}
    }));
    let m5 = itype("m5.xlarge")
        .cpu("4")
        .mem("16Gi")
        .on_demand(&["test-zone-1", "test-zone-2", "test-zone-3"], 0.192)
        .build();
    let types = BTreeMap::from([("general".to_string(), Arc::new(vec![m5]))]);
    let volumes = VolumeIndex::new(&VolumeObjects {
        claims: vec![
            arc(
                json!({"metadata": {"name": "unbound", "namespace": "default"},
                "spec": {"storageClassName": "zonal"}}),
            ),
            arc(json!({"metadata": {"name": "bound", "namespace": "default",
                "annotations": {BIND_COMPLETED: "yes"}},
                "spec": {"storageClassName": "zonal", "volumeName": "pv-3"}})),
        ],
        volumes: vec![arc(json!({"metadata": {"name": "pv-3"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-3"]}]}]}}}}))],
        classes: vec![arc(
            json!({"metadata": {"name": "zonal"}, "provisioner": "x",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone",
                "values": ["test-zone-2", "test-zone-3"]}]}]}),
        )],
        ..Default::default()
    });
    let cases: [(&str, &str, &[&str], Option<&str>); 5] = [
        (
            "class-zones",
            "unbound",
            &["test-zone-1", "test-zone-3"],
            Some("test-zone-3"),
        ),
        ("class-incompatible", "unbound", &["test-zone-1"], None),
        ("volume-zone", "bound", &[], Some("test-zone-3")),
        ("volume-incompatible", "bound", &["test-zone-1"], None),
        ("invalid-claim", "invalid", &[], None),
    ];
    for (name, claim, zones, want) in cases {
        let mut extra = json!({"volumes": [{"name": "data",
            "persistentVolumeClaim": {"claimName": claim}}]});
        if !zones.is_empty() {
            extra["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone",
                    "operator": "In", "values": zones}]}]}}});
        }
        let pods = vec![pod_json("default", name, name, None, "1", extra)];
        let batch = BTreeSet::from([pods[0].key.clone()]);
        let pools = [pool.clone()];
        let inputs = Inputs {
            volumes: &volumes,
            ..plain_inputs(&pods, &[], &pools, &types, &batch)
        };
        let plan =
            autoscaler_core::plan_provisioning(&SnapshotBuilder::new().build(&inputs).snapshot);
        let zone = plan.new_claims.first().map(|c| {
            c.instance_types[0]
                .offerings
                .iter()
                .map(|o| o.0.to_string())
                .collect::<Vec<_>>()
        });
        match want {
            Some(z) => assert_eq!(zone, Some(vec![z.to_string()]), "{name}: {}", plan.render()),
            None => assert!(plan.new_claims.is_empty(), "{name}: {}", plan.render()),
        }
    }
}

/// CSI volume limits: a node's CSINode count reaches the snapshot, and so do the volumes of
/// the pods running there (plain pods are folded, pods with claims kept whole) and of the
/// pending pod; the plan launches a node for a pod whose volume the full node cannot attach,
/// and puts it on that node when no CSINode limits it (Karpenter's "Volume Usage/Limits").
#[test]
fn a_node_at_its_csi_volume_limit_gets_no_pod_with_another_volume() {
    use crate::controller::volumes::{VolumeIndex, VolumeObjects};
    let (pool, types) = general_pool();
    let claim = |name: &str| {
        arc(json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"storageClassName": "ebs"}}))
    };
    let class = arc(
        json!({"metadata": {"name": "ebs"}, "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer"}),
    );
    let csi_node = arc(
        json!({"metadata": {"name": "managed"}, "spec": {"drivers": [
        {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 2}},
        {"name": "efs.csi.aws.com", "nodeID": "i-1"}]}}),
    );
    let objects = VolumeObjects {
        claims: vec![claim("data-0"), claim("data-1"), claim("data-new")],
        classes: vec![class],
        ..Default::default()
    };
    let blind = VolumeIndex::new(&objects);
    let limited = VolumeIndex::new(&VolumeObjects {
        csi_nodes: vec![csi_node],
        ..objects
    });
    let with_claim =
        |c: &str| json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": c}}]});
    let pods = vec![
        pod_json(
            "default",
            "db-0",
            "db",
            Some("managed"),
            "100m",
            with_claim("data-0"),
        ),
        pod_json(
            "default",
            "db-1",
            "db",
            Some("managed"),
            "100m",
            with_claim("data-1"),
        ),
        pod_json(
            "default",
            "plain",
            "web",
            Some("managed"),
            "100m",
            json!({}),
        ),
        pod_json(
            "default",
            "db-2",
            "db",
            None,
            "100m",
            with_claim("data-new"),
        ),
    ];
    let nodes = vec![arc(node_json("managed"))];
    let batch = BTreeSet::from([pods[3].key.clone()]);
    let pools = [pool];
    let claims = [initialized_claim("managed", "general")];
    let inputs = |volumes| Inputs {
        claims: &claims,
        volumes,
        ..plain_inputs(&pods, &nodes, &pools, &types, &batch)
    };
    let built = SnapshotBuilder::new().build_for_provisioning(&inputs(&limited));
    let snap = &built.snapshot;
    let node = &snap.nodes[0];
    assert_eq!(
        node.volume_limits,
        BTreeMap::from([("ebs.csi.aws.com".to_string(), 2)]),
        "a driver without a count is unbounded"
    );
    let attached: Vec<&str> = node
        .pods
        .iter()
        .flat_map(|p| p.volumes.iter().map(|v| v.id.as_str()))
        .collect();
    assert_eq!(attached, ["default/data-0", "default/data-1"]);
    assert_eq!(snap.pending[0].volumes.len(), 1);
    assert_eq!(snap.pending[0].volumes[0].driver, "ebs.csi.aws.com");
    let plan = autoscaler_core::plan_provisioning(snap);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    let open = autoscaler_core::plan_provisioning(
        &SnapshotBuilder::new()
            .build_for_provisioning(&inputs(&blind))
            .snapshot,
    );
    assert!(open.new_claims.is_empty(), "{}", open.render());
    assert_eq!(open.existing.len(), 1);
}
