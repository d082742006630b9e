//! The simulator's values as the API objects the controller reads: a workload pod (a core
//! [`CorePod`] template) as a `Pod`, a scenario's NodePools with their durations divided by the
//! time compression. `translate::pod` reads these pods back into the very template (tested), so
//! both sides plan the same pods.

use autoscaler::controller::gangs::{POD_GROUP_ANNOTATION, POD_GROUP_MIN_ANNOTATION};
use autoscaler::controller::translate::GPU_SHARE_ANNOTATION;
use autoscaler_core::model::Pod as CorePod;
use autoscaler_core::requirements::{Constraint, Requirements, ValueSet};
use autoscaler_core::resources::names;
use autoscaler_core::taints::{Effect, TolerationOperator};
use nodepools::NodePool;
use serde_json::{Value, json};

/// `matchExpressions` of `reqs`, one per key (a constraint that needs two, such as `In` with
/// bounds, gives two).
pub(super) fn expressions(reqs: &Requirements) -> Vec<Value> {
    reqs.iter().flat_map(|(k, c)| expression(k, c)).collect()
}

fn expression(key: &str, c: &Constraint) -> Vec<Value> {
    let mut out = Vec::new();
    let expr = |op: &str, values: Vec<String>| {
        if values.is_empty() {
            json!({"key": key, "operator": op})
        } else {
            json!({"key": key, "operator": op, "values": values})
        }
    };
    match &c.values {
        ValueSet::In(v) => out.push(expr("In", v.iter().cloned().collect())),
        ValueSet::NotIn(v) if !c.allow_absent && c.gt.is_none() && c.lt.is_none() => {
            out.push(expr("Exists", vec![]));
            if !v.is_empty() {
                out.push(expr("NotIn", v.iter().cloned().collect()));
            }
        }
        ValueSet::NotIn(v) if v.is_empty() => {}
        ValueSet::NotIn(v) => out.push(expr("NotIn", v.iter().cloned().collect())),
    }
    if c.allow_absent && matches!(&c.values, ValueSet::In(v) if v.is_empty()) {
        out.clear();
        out.push(expr("DoesNotExist", vec![]));
    }
    if let Some(g) = c.gt {
        out.push(expr("Gt", vec![g.to_string()]));
    }
    if let Some(l) = c.lt {
        out.push(expr("Lt", vec![l.to_string()]));
    }
    out
}

/// The label selector `{matchExpressions}` of `reqs`.
fn selector(reqs: &Requirements) -> Value {
    json!({"matchExpressions": expressions(reqs)})
}

/// `p` as a Pod named `name`: requests (as one container's requests and limits), labels,
/// the annotations the planner reads, required node affinity, tolerations, topology spread,
/// pod (anti-)affinity, priority, a controller owner of the template's kind, the gang
/// annotations for `gang` (name and size), and the GPU-share annotation.
pub(super) fn pod(p: &CorePod, name: &str, gang: Option<(&str, usize)>) -> Value {
    let mut requests = serde_json::Map::new();
    let mut limits = serde_json::Map::new();
    for (k, v) in p.requests.iter() {
        if v == 0 || k == names::PODS {
            continue;
        }
        let q = match k {
            names::CPU => format!("{v}m"),
            _ => v.to_string(),
        };
        if k != names::CPU && k != names::MEMORY && k != names::EPHEMERAL_STORAGE {
            limits.insert(k.to_string(), json!(q));
        }
        requests.insert(k.to_string(), json!(q));
    }
    let mut annotations: serde_json::Map<String, Value> = p
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    if let Some(s) = &p.gpu_share {
        annotations.insert(GPU_SHARE_ANNOTATION.into(), json!(s.milli.to_string()));
    }
    if let Some((g, n)) = gang {
        annotations.insert(POD_GROUP_ANNOTATION.into(), json!(g));
        annotations.insert(POD_GROUP_MIN_ANNOTATION.into(), json!(n.to_string()));
    }
    let terms: Vec<Value> = p
        .node_selector
        .terms
        .iter()
        .map(|t| json!({"matchExpressions": expressions(t)}))
        .collect();
    let mut affinity = serde_json::Map::new();
    if !terms.is_empty() {
        affinity.insert(
            "nodeAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}),
        );
    }
    let pod_terms = |ts: &[autoscaler_core::model::PodAffinityTerm]| -> Vec<Value> {
        ts.iter()
            .map(|t| json!({"topologyKey": t.topology_key, "labelSelector": selector(&t.selector)}))
            .collect()
    };
    if !p.affinity.is_empty() {
        affinity.insert(
            "podAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": pod_terms(&p.affinity)}),
        );
    }
    if !p.anti_affinity.is_empty() {
        affinity.insert(
            "podAntiAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": pod_terms(&p.anti_affinity)}),
        );
    }
    let tolerations: Vec<Value> = p
        .tolerations
        .iter()
        .map(|t| {
            let mut v = json!({"key": t.key, "operator": match t.operator {
                TolerationOperator::Equal => "Equal",
                TolerationOperator::Exists => "Exists",
            }});
            if t.operator == TolerationOperator::Equal {
                v["value"] = json!(t.value);
            }
            if let Some(e) = t.effect {
                v["effect"] = json!(match e {
                    Effect::NoSchedule => "NoSchedule",
                    Effect::PreferNoSchedule => "PreferNoSchedule",
                    Effect::NoExecute => "NoExecute",
                });
            }
            v
        })
        .collect();
    let spread: Vec<Value> = p
        .spread
        .iter()
        .map(|s| {
            json!({"maxSkew": s.max_skew, "topologyKey": s.topology_key,
                "whenUnsatisfiable": if s.hard { "DoNotSchedule" } else { "ScheduleAnyway" },
                "labelSelector": selector(&s.selector)})
        })
        .collect();
    let mut spec = json!({
        "containers": [{"name": "main", "image": "workload",
            "resources": {"requests": requests, "limits": limits}}],
        "restartPolicy": "Never",
    });
    if !affinity.is_empty() {
        spec["affinity"] = Value::Object(affinity);
    }
    if !tolerations.is_empty() {
        spec["tolerations"] = json!(tolerations);
    }
    if !spread.is_empty() {
        spec["topologySpreadConstraints"] = json!(spread);
    }
    if p.priority != 0 {
        spec["priority"] = json!(p.priority);
    }
    let mut metadata = json!({"name": name, "namespace": p.key.namespace,
        "labels": p.labels, "annotations": annotations});
    if let Some(kind) = &p.owner_kind {
        let api_version = match kind.as_str() {
            "Job" => "batch/v1",
            _ => "apps/v1",
        };
        metadata["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind,
            "name": p.key.name, "uid": "00000000-0000-0000-0000-0000000f1de1",
            "controller": true}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// `np` with every duration of its disruption block divided by `compression` (written in
/// milliseconds), so the controller on the real clock keeps the simulator's cadence.
pub(super) fn compressed_pool(np: &NodePool, compression: f64) -> NodePool {
    let mut np = np.clone();
    let d = &mut np.spec.disruption;
    let scale = |s: &str| -> String {
        match autoscaler_core::duration::parse(s, autoscaler_core::duration::Bare::Seconds) {
            Ok(v) => format!(
                "{}ms",
                ((v.as_secs_f64() * 1000.0 / compression).round() as u64).max(1)
            ),
            // "Never" and anything the controller itself refuses are passed on as written.
            Err(_) => s.to_string(),
        }
    };
    d.consolidate_after = scale(&d.consolidate_after);
    d.unneeded_time = scale(&d.unneeded_time);
    for slot in [
        &mut d.scale_down_delay_after_add,
        &mut d.scale_down_delay_after_delete,
        &mut d.scale_down_delay_after_failure,
    ] {
        if let Some(v) = slot.as_mut() {
            *v = scale(v);
        }
    }
    np
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoscaler_core::builders::pod as core_pod;

    /// The controller reads the pod it is given back into the simulator's template: same
    /// requests, selectors, tolerations, spread, annotations and gang.
    #[test]
    fn pods_read_back_as_the_template() {
        let scenario = autoscaler_sim::Scenario::parse(
            std::path::Path::new("default-slice.yaml"),
            super::super::DEFAULT_SLICE,
        )
        .unwrap();
        let w = autoscaler_sim::workload::generate(&scenario, 42, 3600, 100_000).unwrap();
        let mut seen = 0;
        for (i, spec) in w.pods.iter().enumerate().take(200) {
            let template = &w.templates[spec.template as usize];
            let gang = spec.group.map(|g| {
                let g = &w.groups[g as usize];
                (g.name.as_str(), g.members.len())
            });
            let obj: k8s_openapi::api::core::v1::Pod =
                serde_json::from_value(pod(template, &spec.name, gang)).unwrap();
            let back = autoscaler::controller::translate::pod(&obj).unwrap();
            assert_eq!(back.requests, template.requests, "pod {i}");
            assert_eq!(back.node_selector, template.node_selector, "pod {i}");
            assert_eq!(back.tolerations, template.tolerations, "pod {i}");
            assert_eq!(back.spread, template.spread, "pod {i}");
            assert_eq!(back.annotations, template.annotations, "pod {i}");
            assert_eq!(back.labels, template.labels, "pod {i}");
            assert_eq!(back.owner_kind, template.owner_kind, "pod {i}");
            assert_eq!(back.group.is_some(), gang.is_some(), "pod {i}");
            seen += 1;
        }
        assert!(seen > 20, "the slice has pods");
        let share = core_pod("s").cpu("1").gpu_share(250).build();
        let obj: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(pod(&share, "s", None)).unwrap();
        let back = autoscaler::controller::translate::pod(&obj).unwrap();
        assert_eq!(back.gpu_share, share.gpu_share);
        assert_eq!(back.requests, share.requests);
    }

    #[test]
    fn pool_durations_are_divided() {
        let pools = super::super::node_pools(super::super::DEFAULT_SLICE).unwrap();
        let train = pools.iter().find(|p| p.name_any() == "gpu-train").unwrap();
        let c = compressed_pool(train, 30.0);
        assert_eq!(c.spec.disruption.consolidate_after, "20000ms");
        assert_eq!(c.spec.disruption.unneeded_time, "20000ms");
        assert_eq!(c.spec.disruption.budgets, train.spec.disruption.budgets);
    }

    use kube::ResourceExt as _;
}
