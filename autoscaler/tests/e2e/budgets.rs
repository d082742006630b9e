//! Disruption budgets on a schedule end to end: a `nodes: "0"` budget whose window is open
//! keeps an empty node (`Consolidatable=False BudgetExhausted`, and `explain nodepool` says the
//! window is open); moved to a date that never comes, it limits nothing and the node goes.
//! Both windows are chosen so that the wall clock cannot make the test flaky: `* * * * *`
//! for an hour is always open, February 30th never fires.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodepools::NodePool;
use serde_json::json;

use super::harness::*;

const DEADLINE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_an_open_budget_window_keeps_an_empty_node_until_it_is_moved() {
    let c = Cluster::start().await;
    let always = json!([{"nodes": "0", "schedule": "* * * * *", "duration": "1h"}]);
    let _: NodePool = c
        .create(lane_pool("frozen", json!({"budgets": always}), json!({})))
        .await;
    let _ctl = c.controller("budget-window", &["--leader-elect=false"]);
    let _: Pod = c.create(lane_pod("job", "frozen", "3", json!({}))).await;
    let node = eventually("the pod bound", DEADLINE, || async {
        bound_to(&c.pod("default", "job").await?)
    })
    .await;
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .delete("job", &DeleteParams::default())
        .await
        .expect("deleting the pod");
    // Empty now, the node would go at once (consolidateAfter 0s); the open window keeps it.
    eventually("the node kept by the budget", DEADLINE, || async {
        c.claims()
            .await
            .iter()
            .any(|x| {
                x.status.as_ref().is_some_and(|s| {
                    s.node_name.as_deref() == Some(node.as_str())
                        && s.conditions
                            .iter()
                            .any(|k| k.type_ == "Consolidatable" && k.reason == "BudgetExhausted")
                })
            })
            .then_some(())
    })
    .await;
    let (code, out, err) = run_explain(&c, &["nodepool", "frozen"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "    0 (all reasons) from \"* * * * *\" (UTC) for 1h, active now: allows 0 node(s) at once"
        ),
        "{out}"
    );

    let never = json!([{"nodes": "0", "schedule": "0 0 30 2 *", "duration": "1h"}]);
    Api::<NodePool>::all(c.client.clone())
        .patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disruption": {"budgets": never}}})),
        )
        .await
        .expect("patch the NodePool");
    eventually("the empty node removed", DEADLINE, || async {
        (!c.nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node.as_str())))
        .then_some(())
    })
    .await;
    let (code, out, err) = run_explain(&c, &["nodepool", "frozen"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("from \"0 0 30 2 *\" (UTC) for 1h, inactive now: limits nothing"),
        "{out}"
    );
}
