//! Translation tests, each from a literal Kubernetes object as `kubectl get -o json` shows it.

use autoscaler_core::requirements::Operator;
use autoscaler_core::resources::names;
use autoscaler_core::taints::{Effect, Toleration as CoreToleration};
use serde_json::json;

use super::*;

fn pod_from(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).expect("literal pod")
}

#[test]
fn requests_take_init_and_sidecar_peaks_and_overhead() {
    let p = pod_from(json!({
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                {"name": "download", "resources": {"requests": {"cpu": "3", "memory": "128Mi"}}}
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
            ],
            "overhead": {"cpu": "10m"}
        }
    }));
    let c = pod(&p).unwrap();
    assert_eq!(c.key.to_string(), "ml/train");
    // Steady state: 500m + 250m + 100m sidecar = 850m; init peak: 3 + 100m sidecar = 3100m.
    assert_eq!(c.requests.cpu, 3110);
    // memory: max(1Gi + 64Mi, 128Mi + 64Mi).
    assert_eq!(c.requests.memory, (1024 + 64) * 1024 * 1024);
    assert_eq!(c.requests.get(names::NVIDIA_GPU), 1);
    assert_eq!(c.requests.pods, 1);
    assert!(c.gpu_share.is_none());
    assert_eq!(c.owner_kind, None);
}

#[test]
fn pod_level_resources_replace_container_sum() {
    let p = pod_from(json!({
        "metadata": {"name": "p"},
        "spec": {
            "resources": {"requests": {"cpu": "2"}},
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
        }
    }));
    let c = pod(&p).unwrap();
    assert_eq!(c.requests.cpu, 2000);
    assert_eq!(c.requests.memory, 1 << 30);
    assert_eq!(c.key.namespace, "default");
}

#[test]
fn tolerations_selectors_affinity_and_spread() {
    let p = pod_from(json!({
        "metadata": {
            "name": "gpu", "namespace": "default",
            "labels": {"app": "infer"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1", "controller": true}
            ]
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "ml"}
            ],
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 50, "preference": {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}
                    ]
                },
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "infer"}}}
                ]}
            },
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["infer"]}]}}
            ],
            "priority": 1000
        }
    }));
    let c = pod(&p).unwrap();
    assert_eq!(
        c.tolerations,
        vec![
            CoreToleration {
                effect: Some(Effect::NoSchedule),
                ..CoreToleration::exists("nvidia.com/gpu")
            },
            CoreToleration::equal("dedicated", "ml"),
        ]
    );
    assert_eq!(c.node_selector.terms.len(), 2);
    let zone_term = &c.node_selector.terms[0];
    assert!(zone_term.get("topology.kubernetes.io/zone").is_some());
    assert!(zone_term.get("nvidia.com/gpu.product").is_some());
    let host_term = &c.node_selector.terms[1];
    assert!(host_term.get("kubernetes.io/hostname").is_some());
    assert_eq!(c.preferred.len(), 1);
    assert_eq!(c.preferred[0].0, 50);
    assert_eq!(c.anti_affinity.len(), 1);
    assert_eq!(c.anti_affinity[0].topology_key, "kubernetes.io/hostname");
    assert_eq!(c.spread.len(), 1);
    assert!(c.spread[0].hard);
    assert_eq!(
        c.spread[0].selector,
        Requirements::new().with("app", Operator::In, &["infer"])
    );
    assert_eq!(c.priority, 1000);
    assert_eq!(c.owner_kind.as_deref(), Some("ReplicaSet"));
}

#[test]
fn hami_gpucores_becomes_a_share() {
    let p = pod_from(json!({
        "metadata": {"name": "hami"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {
            "nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "3000"
        }}}]}
    }));
    let c = pod(&p).unwrap();
    assert_eq!(
        c.gpu_share,
        Some(GpuShare {
            resource: names::NVIDIA_GPU.into(),
            milli: 300
        })
    );
    assert_eq!(c.requests.get(names::NVIDIA_GPU), 0);
    assert_eq!(c.requests.get(HAMI_GPU_CORES), 0);
    assert_eq!(c.requests.get(HAMI_GPU_MEM), 0);
}

#[test]
fn share_annotation_wins_and_is_checked() {
    let p = pod_from(json!({
        "metadata": {"name": "frac", "annotations": {"gpu-autoscaler.dev/gpu-share": "470"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}}}]}
    }));
    assert_eq!(pod(&p).unwrap().gpu_share.as_ref().unwrap().milli, 470);
    let bad = pod_from(json!({
        "metadata": {"name": "frac", "annotations": {"gpu-autoscaler.dev/gpu-share": "0.5"}},
        "spec": {"containers": [{"name": "c"}]}
    }));
    let err = pod(&bad).unwrap_err();
    assert!(err.field.contains("gpu-share"), "{err}");
}

#[test]
fn bad_quantity_names_the_field() {
    let p = pod_from(json!({
        "metadata": {"name": "bad"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}
    }));
    let err = pod(&p).unwrap_err();
    assert_eq!(err.field, "spec.containers[0].resources.requests[\"cpu\"]");
    assert_eq!(err.value, "\"lots\"");
}

#[test]
fn local_storage_mirror_and_group() {
    let p = pod_from(json!({
        "metadata": {"name": "m", "annotations": {
            "kubernetes.io/config.mirror": "abc",
            "gpu-autoscaler.dev/pod-group": "gang-1",
            "gpu-autoscaler.dev/pod-group-min-count": "4"
        }},
        "spec": {"containers": [{"name": "c"}], "volumes": [
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "scratch", "emptyDir": {}}
        ]}
    }));
    let c = pod(&p).unwrap();
    assert!(c.mirror);
    assert!(c.local_storage);
    assert_eq!(c.group.as_deref(), Some("gang-1"));
    let gang = crate::controller::gangs::gang_of(&p, None).unwrap();
    assert_eq!((gang.id.as_str(), gang.min), ("gang-1", Some(4)));
    let shm_only = pod_from(json!({
        "metadata": {"name": "s"},
        "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]}
    }));
    assert!(!pod(&shm_only).unwrap().local_storage);
}

/// A ReplicaSet pod with a hostPath, a disk emptyDir and a memory emptyDir, annotated
/// `safe-to-evict-local-volumes: listed` when `listed` is given.
fn local_volume_pod(listed: Option<&str>) -> Pod {
    let mut p = pod_from(json!({
        "metadata": {"name": "w", "namespace": "ml", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w-1", "uid": "u", "controller": true}
        ]},
        "spec": {"containers": [{"name": "c"}], "volumes": [
            {"name": "logs", "hostPath": {"path": "/var/log"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "cfg", "configMap": {"name": "cfg"}}
        ]}
    }));
    if let Some(v) = listed {
        p.metadata.annotations = Some(BTreeMap::from([(
            autoscaler_core::keys::SAFE_TO_EVICT_LOCAL_VOLUMES.to_string(),
            v.to_string(),
        )]));
    }
    p
}

/// Why the translated pod keeps its node, if it does (an empty snapshot: no PDB).
fn blocker(p: &Pod) -> Option<String> {
    let c = pod(p).unwrap();
    autoscaler_core::disruption::pod_blocker(&c, &autoscaler_core::model::Snapshot::default(), 0)
}

#[test]
fn safe_to_evict_local_volumes_waives_local_storage_only_when_every_local_volume_is_listed() {
    // Unannotated: the hostPath and the disk emptyDir block.
    let bare = local_volume_pod(None);
    assert!(pod(&bare).unwrap().local_storage);
    assert_eq!(
        blocker(&bare).as_deref(),
        Some("pod ml/w uses local storage")
    );
    // Every local volume listed; the memory emptyDir and the ConfigMap need not be, and a
    // name that is no volume of the pod changes nothing.
    for listed in ["logs,scratch", "scratch,logs,gone"] {
        let p = local_volume_pod(Some(listed));
        assert!(!pod(&p).unwrap().local_storage, "{listed}");
        assert_eq!(blocker(&p), None, "{listed}");
    }
    // One local volume left out still blocks, whatever else is listed.
    for listed in ["logs", "scratch,shm,cfg", "logs,gone"] {
        let p = local_volume_pod(Some(listed));
        assert!(pod(&p).unwrap().local_storage, "{listed}");
        assert_eq!(
            blocker(&p).as_deref(),
            Some("pod ml/w uses local storage"),
            "{listed}"
        );
    }
}

#[test]
fn safe_to_evict_local_volumes_compares_names_as_written() {
    // As the Cluster Autoscaler, names are not trimmed: " scratch" and "logs " name no
    // volume, so the volume after (or before) the space still blocks.
    for listed in ["logs, scratch", "logs ,scratch", " logs , scratch "] {
        let p = local_volume_pod(Some(listed));
        assert!(pod(&p).unwrap().local_storage, "{listed:?}");
    }
    // An empty list, or one of empty names, waives nothing.
    for listed in ["", ",", " "] {
        let p = local_volume_pod(Some(listed));
        assert!(pod(&p).unwrap().local_storage, "{listed:?}");
        assert!(blocker(&p).is_some(), "{listed:?}");
    }
    // The annotation only names volumes: a pod without local storage stays free of it.
    let mut shm_only = local_volume_pod(Some(""));
    shm_only.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "shm".into(),
        empty_dir: Some(k8s_openapi::api::core::v1::EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    assert!(!pod(&shm_only).unwrap().local_storage);
}

#[test]
fn unschedulable_means_scheduler_gave_up() {
    let pending = pod_from(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}
        ]}
    }));
    assert!(is_unschedulable(&pending));
    let just_created = pod_from(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending"}
    }));
    assert!(!is_unschedulable(&just_created));
    let bound = pod_from(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]}
    }));
    assert!(!is_unschedulable(&bound));
    let done = pod_from(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
        "status": {"phase": "Succeeded"}
    }));
    assert!(!is_active(&done));
}

#[test]
fn daemonset_overhead() {
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "dcgm", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": "dcgm"}},
            "template": {
                "metadata": {"labels": {"app": "dcgm"}},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": [{"operator": "Exists"}]
                }
            }
        }
    }))
    .unwrap();
    let d = daemonset(&ds, None).unwrap();
    assert_eq!(d.name, "gpu-operator/dcgm");
    assert_eq!(d.requests.cpu, 100);
    assert_eq!(d.requests.pods, 1);
    assert_eq!(d.tolerations, vec![CoreToleration::exists("")]);
    assert_eq!(d.node_selector.terms.len(), 1);
}

/// What admission made of a DaemonSet's pod (a RuntimeClass's overhead, a request raised, the
/// DaemonSet controller's tolerations, a sidecar's host port) counts; where the pod may run
/// is the template's, not the term naming the pod's node.
#[test]
fn a_daemonset_with_a_pod_takes_what_admission_made_of_it_and_where_its_template_runs() {
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "dcgm", "namespace": "gpu-operator"},
        "spec": {"selector": {"matchLabels": {"app": "dcgm"}}, "template": {"spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}
    }))
    .unwrap();
    let p = pod(&pod_from(json!({
        "metadata": {"name": "dcgm-x", "namespace": "gpu-operator"},
        "spec": {"nodeName": "gpu-1",
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "300m"}}},
                {"name": "proxy", "ports": [{"containerPort": 9400, "hostPort": 9400}]}
            ],
            "overhead": {"cpu": "50m"},
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}}},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists"},
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
            ]}
    })))
    .unwrap();
    let d = daemonset(&ds, Some(&p)).unwrap();
    assert_eq!(d.requests.cpu, 350);
    assert_eq!(d.requests.pods, 1);
    assert_eq!(d.tolerations, p.tolerations);
    assert_eq!(d.tolerations.len(), 2);
    assert_eq!(d.host_ports, vec![HostPort::tcp(9400)]);
    assert_eq!(d.node_selector, daemonset(&ds, None).unwrap().node_selector);
    assert_ne!(d.node_selector, p.node_selector);
}

#[test]
fn pdb_from_status_or_computed() {
    let with_status: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0, "expectedPods": 2, "observedGeneration": 1}
    }))
    .unwrap();
    assert_eq!(pdb(&with_status, &[]).unwrap().disruptions_allowed, 0);

    let no_status: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    let web: Labels = [("app".to_string(), "web".to_string())].into();
    let other: Labels = [("app".to_string(), "db".to_string())].into();
    let pods = [(&web, true), (&web, true), (&web, true), (&other, true)];
    // 50% of 3 rounds up to 2 unavailable allowed, none unhealthy: 2.
    assert_eq!(pdb(&no_status, &pods).unwrap().disruptions_allowed, 2);
    let zero: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    assert_eq!(pdb(&zero, &pods).unwrap().disruptions_allowed, 0);
}

#[test]
fn null_selectors_match_no_pod_and_empty_ones_every_pod() {
    // Kubernetes: a null labelSelector in a pod (anti-)affinity term matches no pod, a spread
    // constraint's counts none (the constraint still needs the key on the node), and a
    // PodDisruptionBudget's null selector selects none; an empty one ({}) selects them all.
    let p = pod_from(json!({
        "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c"}],
            "affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname"}
                ]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname"},
                    {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {}}
                ]}
            },
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
            ]
        }
    }));
    let c = pod(&p).unwrap();
    let web: Labels = [("app".to_string(), "web".to_string())].into();
    assert_eq!(c.spread.len(), 1);
    assert!(!c.spread[0].selector.matches(&web));
    // The affinity term stays, and no pod ever meets it (not even the pod itself).
    assert_eq!(c.affinity.len(), 1);
    assert!(!c.affinity[0].selector.matches(&web));
    assert!(!c.affinity[0].selector.matches(&Labels::new()));
    // The null anti-affinity term forbids nothing and is gone; the empty one matches all.
    assert_eq!(c.anti_affinity.len(), 1);
    assert_eq!(
        c.anti_affinity[0].topology_key,
        "topology.kubernetes.io/zone"
    );
    assert!(c.anti_affinity[0].selector.matches(&web));

    let pods = [(&web, true), (&web, true)];
    let budget = |spec: serde_json::Value| -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    };
    // No selector: no pod is covered, so none is held back.
    let none = pdb(&budget(json!({"maxUnavailable": 0})), &pods).unwrap();
    assert!(!none.selector.matches(&web));
    let all = pdb(&budget(json!({"maxUnavailable": 0, "selector": {}})), &pods).unwrap();
    assert!(all.selector.matches(&web));
    assert_eq!(all.disruptions_allowed, 0);
}

#[test]
fn affinity_terms_read_their_namespaces() {
    // `namespaces` and a namespaceSelector by name are unioned; `{}` selects every namespace;
    // neither set means the pod's own; a selector on other namespace labels is kept, with the
    // listed namespaces, for each round to resolve against the Namespaces then.
    let with_terms = |terms: serde_json::Value| {
        pod_from(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {
                "containers": [{"name": "c"}],
                "affinity": {"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": terms
                }}
            }
        }))
    };
    let sel = json!({"matchLabels": {"app": "db"}});
    let c = pod(&with_terms(json!([
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel},
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel,
         "namespaces": ["data"],
         "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
             "operator": "In", "values": ["logs"]}]}},
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel, "namespaceSelector": {}},
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel, "namespaces": []}
    ])))
    .unwrap();
    let ns: Vec<&TermNamespaces> = c.anti_affinity.iter().map(|t| &t.namespaces).collect();
    assert_eq!(
        ns,
        [
            &TermNamespaces::Own,
            &TermNamespaces::Listed(["data".to_string(), "logs".to_string()].into()),
            &TermNamespaces::All,
            &TermNamespaces::Own,
        ]
    );
    let db: Labels = [("app".to_string(), "db".to_string())].into();
    // Every namespace carries its name as `kubernetes.io/metadata.name`: `NotIn`, `Exists` and
    // `DoesNotExist` on it are read too; listed namespaces stay in whatever the selector
    // leaves out.
    let by_name = |op: &str, values: serde_json::Value, listed: serde_json::Value| {
        let c = pod(&with_terms(json!([
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel, "namespaces": listed,
             "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                 "operator": op, "values": values}]}}
        ])))
        .unwrap();
        c.anti_affinity[0].namespaces.clone()
    };
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        by_name("NotIn", json!(["kube-system", "data"]), json!(["data"])),
        TermNamespaces::AllBut(set(&["kube-system"]))
    );
    assert_eq!(
        by_name("NotIn", json!(["data"]), json!(["data"])),
        TermNamespaces::All
    );
    assert_eq!(
        by_name("Exists", json!(null), json!([])),
        TermNamespaces::All
    );
    assert_eq!(
        by_name("DoesNotExist", json!(null), json!(["data"])),
        TermNamespaces::Listed(set(&["data"]))
    );
    let all_but = TermNamespaces::AllBut(set(&["kube-system"]));
    assert!(all_but.contains("shop", "logs") && !all_but.contains("shop", "kube-system"));
    assert!(c.anti_affinity[1].selects("shop", "logs", &db));
    assert!(!c.anti_affinity[1].selects("shop", "shop", &db));
    assert!(c.anti_affinity[0].selects("shop", "shop", &db));
    let by_label = pod(&with_terms(json!([
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel, "namespaces": ["data"],
         "namespaceSelector": {"matchLabels": {"team": "data"}}}
    ])))
    .unwrap();
    let TermNamespaces::Matching { listed, selector } = &by_label.anti_affinity[0].namespaces
    else {
        panic!("{:?}", by_label.anti_affinity[0].namespaces);
    };
    assert_eq!(listed, &set(&["data"]));
    let team = |t: &str| -> Labels { [("team".to_string(), t.to_string())].into() };
    assert!(selector.matches(&team("data")) && !selector.matches(&team("web")));
    // Resolved against the cluster's namespaces: the listed one and those labelled so.
    let namespaces = std::collections::BTreeMap::from([
        ("ml".to_string(), team("data")),
        ("web".to_string(), team("web")),
    ]);
    assert_eq!(
        by_label.anti_affinity[0]
            .namespaces
            .with_namespaces(&namespaces),
        TermNamespaces::Listed(set(&["data", "ml"]))
    );
    // A malformed one is still refused, naming the field.
    let err = pod(&with_terms(json!([
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel,
         "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Near"}]}}
    ])))
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector"
        ),
        "{text}"
    );
}

#[test]
fn preferred_pod_affinity_terms_are_read_with_their_weights() {
    // Both kinds of preferred term keep their weight and read like required ones; a bad
    // label selector is refused.
    let p = pod_from(json!({
        "metadata": {"name": "p", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c"}],
            "affinity": {
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 40, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                        "labelSelector": {"matchLabels": {"app": "cache"}}}}
                ]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "web"}}, "namespaces": ["edge"]}},
                    {"weight": 5, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "namespaceSelector": {"matchLabels": {"team": "a"}}}},
                    {"weight": 7, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                ]}
            }
        }
    }));
    let c = pod(&p).unwrap();
    assert!(c.affinity.is_empty() && c.anti_affinity.is_empty());
    assert_eq!(c.preferred_affinity.len(), 1);
    let (w, t) = &c.preferred_affinity[0];
    assert_eq!(
        (*w, t.topology_key.as_str()),
        (40, "topology.kubernetes.io/zone")
    );
    let cache: Labels = [("app".to_string(), "cache".to_string())].into();
    assert!(t.selects("shop", "shop", &cache) && !t.held);
    // The null selector (which avoids no pod) is gone; the namespaceSelector on namespace
    // labels is kept for each round to resolve.
    assert_eq!(c.preferred_anti_affinity.len(), 2);
    let (w, t) = &c.preferred_anti_affinity[0];
    assert_eq!(*w, 100);
    assert_eq!(
        t.namespaces,
        TermNamespaces::Listed(["edge".to_string()].into())
    );
    let (w, t) = &c.preferred_anti_affinity[1];
    assert!(*w == 5 && matches!(t.namespaces, TermNamespaces::Matching { .. }));

    let mut bad = p.clone();
    bad.spec.as_mut().unwrap().affinity = Some(
        serde_json::from_value(json!({
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}}
            ]}
        }))
        .unwrap(),
    );
    let text = pod(&bad).unwrap_err().to_string();
    assert!(
        text.contains("spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.labelSelector"),
        "{text}"
    );
}

#[test]
fn match_label_keys_narrow_selectors_to_the_pods_revision() {
    // A rolling update: only pods of the new revision (the pod's own pod-template-hash)
    // count for its spread and its affinity; mismatchLabelKeys keeps it away from its own
    // tenant's pods. A key the pod lacks is ignored.
    let p = pod_from(json!({
        "metadata": {"name": "p", "labels": {"app": "web", "pod-template-hash": "new", "tenant": "a"}},
        "spec": {
            "containers": [{"name": "c"}],
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "karpenter.sh/capacity-type", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash", "absent"]}
            ],
            "affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}},
                     "matchLabelKeys": ["pod-template-hash"]}
                ]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}},
                     "mismatchLabelKeys": ["tenant"]}
                ]}
            }
        }
    }));
    let c = pod(&p).unwrap();
    let labels = |hash: &str, tenant: &str| -> Labels {
        [
            ("app", "web"),
            ("pod-template-hash", hash),
            ("tenant", tenant),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    assert!(c.spread[0].selector.matches(&labels("new", "a")));
    assert!(!c.spread[0].selector.matches(&labels("old", "a")));
    assert!(c.affinity[0].selector.matches(&labels("new", "b")));
    assert!(!c.affinity[0].selector.matches(&labels("old", "b")));
    assert!(c.anti_affinity[0].selector.matches(&labels("old", "b")));
    assert!(!c.anti_affinity[0].selector.matches(&labels("old", "a")));
}

#[test]
fn node_fields() {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:10Z"},
        "spec": {"providerID": "kwok://n1", "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]},
        "status": {
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "29", "nvidia.com/gpu": "1"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .unwrap();
    assert!(node_ready(&n));
    assert_eq!(
        node_taints(&n),
        vec![CoreTaint::new(
            "nvidia.com/gpu",
            "present",
            Effect::NoSchedule
        )]
    );
    let a = node_allocatable(&n).unwrap();
    assert_eq!(a.cpu, 3920);
    assert_eq!(a.get(names::NVIDIA_GPU), 1);
    assert_eq!(
        epoch_seconds(n.metadata.creation_timestamp.as_ref().unwrap()),
        1_767_225_610
    );
    let back = kube_taint(&node_taints(&n)[0]);
    assert_eq!(back.value.as_deref(), Some("present"));
    assert_eq!(back.effect, "NoSchedule");
}

/// Each pod the controller cannot plan for, as a user would write it, with the full message
/// its owner is shown. The core's wording of why is its own business; the field and the value
/// are this module's.
#[test]
fn refusals_name_the_field_and_the_value() {
    let container = |resources: serde_json::Value| json!({"containers": [{"name": "c", "image": "app", "resources": resources}]});
    let cases = [
        (
            json!({"metadata": {"name": "p"}, "spec": container(json!({"requests": {"cpu": "1e400"}}))}),
            r#"spec.containers[0].resources.requests["cpu"]"#,
            r#""1e400""#,
        ),
        (
            json!({"metadata": {"name": "p"}, "spec": container(json!({"requests": {"cpu": "-1"}}))}),
            r#"spec.containers[0].resources.requests["cpu"]"#,
            r#""-1""#,
        ),
        (
            json!({"metadata": {"name": "p"}, "spec": container(json!({"limits": {"nvidia.com/gpu": "0.5"}}))}),
            r#"spec.containers[0].resources.limits["nvidia.com/gpu"]"#,
            r#""0.5""#,
        ),
        (
            json!({"metadata": {"name": "p"}, "spec": container(json!({"requests": {"memory": "99999999999999999999Ei"}}))}),
            r#"spec.containers[0].resources.requests["memory"]"#,
            r#""99999999999999999999Ei""#,
        ),
        (
            json!({"metadata": {"name": "p", "annotations": {"gpu-autoscaler.dev/gpu-share": "half"}},
                   "spec": container(json!({"limits": {"nvidia.com/gpu": "1"}}))}),
            r#"metadata.annotations["gpu-autoscaler.dev/gpu-share"]"#,
            r#""half""#,
        ),
        (
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}}}}}),
            r#"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator"#,
            r#""Near""#,
        ),
        (
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["new"]}]}]}}}}}),
            r#"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"#,
            r#"{"key":"gen","operator":"Gt","values":["new"]}"#,
        ),
        (
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "in", "values": ["a"]}]}}]}}}}),
            r#"spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator"#,
            r#""in""#,
        ),
        (
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}],
                   "tolerations": [{"key": "gpu", "operator": "Maybe", "effect": "NoSchedule"}]}}),
            r#"spec.tolerations[0]"#,
            r#"{"effect":"NoSchedule","key":"gpu","operator":"Maybe"}"#,
        ),
    ];
    for (object, field, value) in cases {
        let err = pod(&pod_from(object)).unwrap_err();
        assert_eq!((err.field.as_str(), err.value.as_str()), (field, value));
        assert!(matches!(err.why, Why::Invalid(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with(&format!("{field}: {value}: ")), "{text}");
        assert!(
            text.len() > field.len() + value.len() + 4,
            "says why: {text}"
        );
    }
    let share = pod_from(
        json!({"metadata": {"name": "p", "annotations": {"gpu-autoscaler.dev/gpu-share": "half"}},
                                "spec": {"containers": [{"name": "c"}]}}),
    );
    assert_eq!(
        pod(&share).unwrap_err().to_string(),
        r#"metadata.annotations["gpu-autoscaler.dev/gpu-share"]: "half": resource nvidia.com/gpu: a GPU share must be a whole number of thousandths in 1..=1000"#
    );
}

#[test]
fn resource_claims_are_carried_by_source_for_the_round_to_resolve() {
    let p = pod_from(json!({
        "metadata": {"name": "dra"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                                    {"name": "nic", "resourceClaimName": "rdma"}]},
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "dra-gpu-abcde"}]}
    }));
    let core = pod(&p).unwrap();
    let sources: Vec<_> = core
        .claims
        .iter()
        .map(|c| (c.name.as_str(), &c.source))
        .collect();
    assert_eq!(
        sources,
        [
            (
                "gpu",
                &autoscaler_core::dra::ClaimSource::Template {
                    template: "one-gpu".into(),
                    claim: Some("dra-gpu-abcde".into())
                }
            ),
            (
                "nic",
                &autoscaler_core::dra::ClaimSource::Shared {
                    claim: "rdma".into()
                }
            ),
        ]
    );
    assert_eq!(core.requests.get(names::CPU), 1000);
    // An entry naming no claim at all is refused (the API server would have refused it).
    let neither = pod_from(json!({
        "metadata": {"name": "dra"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu"}]}
    }));
    assert_eq!(
        pod(&neither).unwrap_err().to_string(),
        r#"spec.resourceClaims[0]: {"name":"gpu"}: names neither resourceClaimName nor resourceClaimTemplateName"#
    );
    // An empty list asks for nothing.
    let empty = pod_from(json!({
        "metadata": {"name": "dra"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": []}
    }));
    assert!(pod(&empty).unwrap().claims.is_empty());
}

#[test]
fn long_values_are_cut() {
    let share = "9".repeat(10_000);
    let p = pod_from(json!({
        "metadata": {"name": "p", "annotations": {"gpu-autoscaler.dev/gpu-share": share}},
        "spec": {"containers": [{"name": "c"}]}
    }));
    let err = pod(&p).unwrap_err();
    assert_eq!(err.value.chars().count(), VALUE_CHARS + 1);
    assert!(err.value.ends_with('…'), "{}", err.value);
}

#[test]
fn host_ports_of_pods_and_daemonsets() {
    let p = pod_from(json!({
        "metadata": {"name": "proxy", "namespace": "default"},
        "spec": {"containers": [
            {"name": "a", "ports": [
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                {"containerPort": 9090}
            ]}
        ]}
    }));
    let c = pod(&p).unwrap();
    assert_eq!(
        c.host_ports,
        vec![
            HostPort {
                port: 53,
                protocol: "UDP".into(),
                host_ip: "10.0.0.1".into()
            },
            HostPort::tcp(8080),
        ]
    );
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "node-exporter", "namespace": "monitoring"},
        "spec": {
            "selector": {"matchLabels": {"app": "ne"}},
            "template": {"spec": {"containers": [
                {"name": "c", "ports": [{"containerPort": 9100, "hostPort": 9100}]}
            ]}}
        }
    }))
    .unwrap();
    assert_eq!(
        daemonset(&ds, None).unwrap().host_ports,
        vec![HostPort::tcp(9100)]
    );
}

#[test]
fn a_bad_host_port_names_its_field() {
    let p = pod_from(json!({
        "metadata": {"name": "bad"},
        "spec": {"containers": [
            {"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 81, "hostPort": 70000}]}
        ]}
    }));
    let e = pod(&p).unwrap_err();
    assert_eq!(e.field, "spec.containers[0].ports[1].hostPort");
    assert!(e.to_string().contains("70000 is outside 1..=65535"), "{e}");
    let p = pod_from(json!({
        "metadata": {"name": "bad"},
        "spec": {"containers": [
            {"name": "a", "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "HTTP"}]}
        ]}
    }));
    assert_eq!(
        pod(&p).unwrap_err().field,
        "spec.containers[0].ports[0].protocol"
    );
}

#[test]
fn start_time_is_kept_only_for_a_do_not_disrupt_duration() {
    let with = |value: &str| {
        pod_from(json!({
            "metadata": {"name": "p", "annotations": {"karpenter.sh/do-not-disrupt": value}},
            "spec": {"containers": [{"name": "a"}]},
            "status": {"startTime": "2026-01-01T00:00:00Z"}
        }))
    };
    let started = pod(&with("30m")).unwrap();
    assert_eq!(started.started_at, Some(1_767_225_600));
    // "true" needs no start time, so replicas keep translating alike.
    assert_eq!(pod(&with("true")).unwrap().started_at, None);
    let plain = pod_from(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"startTime": "2026-01-01T00:00:00Z"}
    }));
    assert_eq!(pod(&plain).unwrap().started_at, None);
}

#[test]
fn spread_constraints_read_their_node_inclusion_policies() {
    let p = pod_from(json!({
        "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c"}],
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "a", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}},
                {"maxSkew": 1, "topologyKey": "b", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "nodeTaintsPolicy": "Honor"},
                {"maxSkew": 1, "topologyKey": "c", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "nodeTaintsPolicy": "Ignore",
                 "nodeAffinityPolicy": "Ignore"},
                {"maxSkew": 1, "topologyKey": "d", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "nodeAffinityPolicy": "Honor"}
            ]
        }
    }));
    let c = pod(&p).unwrap();
    let honored: Vec<bool> = c.spread.iter().map(|s| s.honor_taints).collect();
    assert_eq!(honored, [false, true, false, false]);
    let ignored: Vec<bool> = c.spread.iter().map(|s| s.ignore_node_affinity).collect();
    assert_eq!(ignored, [false, false, true, false]);
}
