//! Pod anti-affinity whose `namespaceSelector` reads Namespace labels: the controller watches
//! Namespaces and resolves the selector each round, so a pod kept away from the pods of
//! namespaces labelled `team=data` gets a node of its own while its target's namespace carries
//! the label, and may share one once it does not. (The harness scheduler does not model pod
//! affinity, so both pods are created before any node exists and the test reads the plan.)

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use nodepools::NodePool;
use serde_json::json;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

/// Namespace `data` labelled `team=<team>`, a pod `db` in it, and a pod `web` in `default`
/// whose anti-affinity keeps it off nodes running `app=db` pods of namespaces labelled
/// `team=data`; the claims planned for them, as the log's `for_pods` lists.
async fn plan_for(team: &str) -> Vec<String> {
    let c = Cluster::start().await;
    let _: Namespace = c
        .create(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "data", "labels": {"team": team}}
        }))
        .await;
    let _: NodePool = c.create(cpu_pool("cpu", "1h")).await;
    let mut db = cpu_pod("db", "500m", BTreeMap::from([("app", "db")]));
    db["metadata"]["namespace"] = json!("data");
    let mut web = cpu_pod("web", "500m", BTreeMap::from([("app", "web")]));
    web["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "db"}},
            "namespaceSelector": {"matchLabels": {"team": "data"}}
        }]
    }});
    let _: Pod = c.create(db).await;
    let _: Pod = c.create(web).await;
    // Both pending before the controller starts: one round plans both.
    eventually("both pods unschedulable", DEADLINE, || async {
        unschedulable_since(&c.pod("data", "db").await?)?;
        unschedulable_since(&c.pod("default", "web").await?)
    })
    .await;
    let ctl = c.controller("solo", &["--leader-elect=false"]);
    eventually("both pods bound", DEADLINE, || async {
        bound_to(&c.pod("data", "db").await?)?;
        bound_to(&c.pod("default", "web").await?)
    })
    .await;
    let log = ctl.log();
    let mut planned: Vec<String> = log
        .lines()
        .filter(|l| l.contains("created NodeClaim"))
        .filter_map(|l| {
            let at = l.find("for_pods=")? + "for_pods=".len();
            Some(l[at..].split_whitespace().next()?.to_string())
        })
        .collect();
    planned.sort();
    planned
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_anti_affinity_to_namespaces_selected_by_label_keeps_pods_apart() {
    assert_eq!(plan_for("data").await, ["db", "web"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_namespace_without_the_label_is_not_selected() {
    assert_eq!(plan_for("web").await, ["db,web"]);
}
