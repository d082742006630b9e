//! Pods the controller cannot plan for are told why, once, with the field and the value; a
//! good pod created alongside still gets its node.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use nodepools::NodePool;
use serde_json::{Value, json};

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(60);

/// A pod the harness scheduler leaves alone (another `schedulerName`): it binds pods it can
/// parse loosely, which the real scheduler and API server would refuse.
fn odd_pod(name: &str, annotations: Value, spec: Value) -> Value {
    let mut spec = spec;
    spec["schedulerName"] = json!("other-scheduler");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": spec
    })
}

fn requesting(requests: Value, limits: Value) -> Value {
    json!({"containers": [{"name": "app", "image": "app",
                           "resources": {"requests": requests, "limits": limits}}]})
}

/// `(reason, note, series count)` of every event about pod `name`.
pub async fn events_of(c: &Cluster, name: &str) -> Vec<(String, String, Option<i32>)> {
    Api::<Event>::namespaced(c.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.series.map(|s| s.count),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_untranslatable_and_dra_pods_get_one_event_and_a_good_pod_its_node() {
    let c = Cluster::start().await;
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    // Rounds every 500 ms, so "several rounds" below comes quickly.
    let ctl = c.controller("solo", &["--leader-elect=false", "--replan-interval=500ms"]);
    let none = json!({});
    // (pod, what its event must say: the field and the value)
    let bad: Vec<(&str, Value, &str)> = vec![
        (
            "cpu-huge",
            odd_pod(
                "cpu-huge",
                none.clone(),
                requesting(json!({"cpu": "1e400"}), none.clone()),
            ),
            r#"spec.containers[0].resources.requests["cpu"]: "1e400": "#,
        ),
        (
            "cpu-negative",
            odd_pod(
                "cpu-negative",
                none.clone(),
                requesting(json!({"cpu": "-1"}), none.clone()),
            ),
            r#"spec.containers[0].resources.requests["cpu"]: "-1": "#,
        ),
        (
            "gpu-half",
            odd_pod(
                "gpu-half",
                none.clone(),
                requesting(none.clone(), json!({"nvidia.com/gpu": "0.5"})),
            ),
            r#"spec.containers[0].resources.limits["nvidia.com/gpu"]: "0.5": "#,
        ),
        (
            "memory-overflow",
            odd_pod(
                "memory-overflow",
                none.clone(),
                requesting(json!({"memory": "99999999999999999999Ei"}), none.clone()),
            ),
            r#"spec.containers[0].resources.requests["memory"]: "99999999999999999999Ei": "#,
        ),
        (
            "bad-share",
            odd_pod(
                "bad-share",
                json!({"gpu-autoscaler.dev/gpu-share": "half"}),
                requesting(none.clone(), json!({"nvidia.com/gpu": "1"})),
            ),
            r#"metadata.annotations["gpu-autoscaler.dev/gpu-share"]: "half": "#,
        ),
        (
            "bad-operator",
            odd_pod(
                "bad-operator",
                none.clone(),
                json!({
                    "containers": [{"name": "app", "image": "app"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "Near", "values": ["a"]}]}]}}}
                }),
            ),
            r#"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: "Near": "#,
        ),
        (
            // Planned as a plain 3-CPU pod it would need a second m5.xlarge next to the good pod.
            "dra",
            odd_pod(
                "dra",
                none.clone(),
                json!({
                    "containers": [{"name": "app", "image": "app",
                        "resources": {"requests": {"cpu": "3"}, "claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
                }),
            ),
            r#"spec.resourceClaims[0] ("gpu"): ResourceClaimTemplate default/one-gpu not found"#,
        ),
    ];
    for (name, object, _) in &bad {
        let _: Pod = c.create(object.clone()).await;
        mark_unschedulable(&c, name).await;
    }
    let _: Pod = c.create(cpu_pod("good", "3", BTreeMap::new())).await;

    for (name, _, says) in &bad {
        let want = format!("pod didn't trigger scale-up: {says}");
        eventually(
            &format!("the NotTriggerScaleUp event of {name}"),
            DEADLINE,
            || async {
                events_of(&c, name)
                    .await
                    .iter()
                    .any(|(reason, note, _)| {
                        reason == "NotTriggerScaleUp" && note.starts_with(&want)
                    })
                    .then_some(())
            },
        )
        .await;
    }
    eventually("the good pod bound", DEADLINE, || async {
        bound_to(&c.pod("default", "good").await?)
    })
    .await;

    // Several more rounds see the same pods; none is told twice.
    let rounds = |log: &str| log.matches(": planned ").count();
    let seen = rounds(&ctl.log());
    eventually("three more planning rounds", DEADLINE, || async {
        (rounds(&ctl.log()) >= seen + 3).then_some(())
    })
    .await;
    for (name, _, _) in &bad {
        let events = events_of(&c, name).await;
        assert_eq!(events.len(), 1, "{name}: exactly one event: {events:#?}");
        assert_eq!(
            events[0].2, None,
            "{name}: not repeated as a series: {events:#?}"
        );
        assert_eq!(
            ctl.log().matches(&format!("pod=default/{name} ")).count(),
            1,
            "{name}: told (and logged) once"
        );
    }
    let claims = c.claims().await;
    assert_eq!(claims.len(), 1, "only the good pod's node: {claims:#?}");
}
