//! ProvisioningRequests shaped exactly as Kueue creates them (the real CRD from
//! ../shared/data/crds), and a Volcano gang: all-or-nothing capacity end to end.
//!
//! These tests need the ProvisioningRequest CRD from ../shared; without it they say so and
//! skip (CI always has it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nodepools::NodePool;
use providers::kwok::{KwokInstance, OUTAGE_LABEL};
use serde_json::{Value, json};

use crate::harness::*;

// Upper bounds, not expectations: a loaded machine can take minutes to boot kwok nodes.
pub(crate) const DEADLINE: Duration = Duration::from_secs(120);

pub(crate) fn provreq_crd() -> Option<String> {
    // `../shared/data` beside the checkout, or `$GPU_AUTOSCALER_SHARED_DATA` (a checkout that
    // is not a sibling of `shared`, such as a git worktree elsewhere).
    let data = std::env::var_os("GPU_AUTOSCALER_SHARED_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data")
        });
    let p = data.join("crds/autoscaling.x-k8s.io_provisioningrequests.yaml");
    match std::fs::read_to_string(&p) {
        Ok(s) => Some(s),
        Err(_) => {
            eprintln!(
                "SKIPPED: {} is absent (the ProvisioningRequest CRD comes from ../shared)",
                p.display()
            );
            None
        }
    }
}

/// Kueue's objects for one workload: `ppt-<request>-<podset>` PodTemplate and the request,
/// both labelled `kueue.x-k8s.io/managed: "true"`.
pub(crate) async fn kueue_request(
    c: &Cluster,
    name: &str,
    class: &str,
    count: i32,
    gpus: u32,
    parameters: Value,
) {
    let template = format!("ppt-{name}-main");
    let _: PodTemplate = c
        .create(json!({
            "apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": template, "namespace": "default",
                         "labels": {"kueue.x-k8s.io/managed": "true"}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "train", "image": "train:1",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()},
                                      "limits": {"nvidia.com/gpu": gpus.to_string()}}}],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "restartPolicy": "Never"
                }
            }
        }))
        .await;
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"kueue.x-k8s.io/managed": "true"}},
        "spec": {
            "provisioningClassName": class,
            "parameters": parameters,
            "podSets": [{"podTemplateRef": {"name": template}, "count": count}]
        }
    }))
    .unwrap();
    provreqs(c)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create ProvisioningRequest");
}

/// ProvisioningRequests in `default`, untyped as a test client sees them.
pub(crate) fn provreqs(c: &Cluster) -> Api<kube::api::DynamicObject> {
    Api::namespaced_with(
        c.client.clone(),
        "default",
        &kube::api::ApiResource {
            group: "autoscaling.x-k8s.io".into(),
            version: "v1".into(),
            api_version: "autoscaling.x-k8s.io/v1".into(),
            kind: "ProvisioningRequest".into(),
            plural: "provisioningrequests".into(),
        },
    )
}

/// The request's status as JSON (`null` once it is gone).
pub(crate) async fn status(c: &Cluster, name: &str) -> Value {
    provreqs(c)
        .get(name)
        .await
        .map(|o| o.data["status"].clone())
        .unwrap_or(Value::Null)
}

pub(crate) fn cond<'a>(s: &'a Value, type_: &str) -> Option<&'a Value> {
    s["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

pub(crate) fn is(s: &Value, type_: &str, status: &str) -> bool {
    cond(s, type_).is_some_and(|c| c["status"] == status)
}

/// Waits until condition `type_` is `True`; returns the status.
pub(crate) async fn until_true(c: &Cluster, name: &str, type_: &str) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let s = status(c, name).await;
        if is(&s, type_, "True") {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {type_}=True on {name}: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Ready node outside any NodePool with `gpus` T4s.
pub(crate) async fn plain_gpu_node(c: &Cluster, name: &str, gpus: u32) {
    let _: Node = c
        .create(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": "us-east-1a",
                "node.kubernetes.io/instance-type": "g4dn.12xlarge",
                "nvidia.com/gpu.product": "Tesla-T4"}},
            "spec": {},
            "status": {
                "capacity": {"cpu": "48", "memory": "192Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
                "allocatable": {"cpu": "48", "memory": "192Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .await;
}

/// A pod consuming request `request`'s capacity, as Kueue creates it once admitted.
fn consumer(name: &str, request: &str, gpus: u32, selector: Option<(&str, &str)>) -> Value {
    let mut spec = json!({
        "containers": [{"name": "train", "image": "train:1",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()},
                          "limits": {"nvidia.com/gpu": gpus.to_string()}}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    });
    if let Some((k, v)) = selector {
        spec["nodeSelector"] = json!({k: v});
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": request},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": request,
                                 "uid": "00000000-0000-0000-0000-0000000000aa", "controller": true}]},
        "spec": spec
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_7a_check_capacity_books_existing_capacity_and_never_launches() {
    let Some(crd) = provreq_crd() else { return };
    let c = Cluster::start_with(&[&crd]).await;
    let _: NodePool = c.create(gpu_pool("gpu", "1s")).await;
    plain_gpu_node(&c, "existing-gpu", 4).await;
    let _ctl = c.controller(
        "provreq-check",
        &["--leader-elect=false", "--provreq-retention=10s"],
    );
    const CHECK: &str = "check-capacity.autoscaling.x-k8s.io";

    // 2 × 2 GPUs fit on the existing node: Accepted, then Provisioned (CapacityIsFound).
    kueue_request(&c, "fits", CHECK, 2, 2, json!({})).await;
    let s = until_true(&c, "fits", "Provisioned").await;
    assert!(is(&s, "Accepted", "True"), "{s:#}");
    assert_eq!(
        cond(&s, "Provisioned").unwrap()["reason"],
        "CapacityIsFound"
    );
    assert_eq!(
        s["provisioningClassDetails"]["gpu-autoscaler.dev/booking"],
        "node/existing-gpu=2"
    );

    // The node's 4 GPUs are booked: 1 × 2 more GPUs do not fit, and noRetry fails the request.
    kueue_request(&c, "no-room", CHECK, 1, 2, json!({"noRetry": "true"})).await;
    let s = until_true(&c, "no-room", "Failed").await;
    assert!(is(&s, "Provisioned", "False"), "{s:#}");
    assert_eq!(
        cond(&s, "Provisioned").unwrap()["reason"],
        "CapacityIsNotFound"
    );

    // Without noRetry a request that cannot fit stays Provisioned=False with the reason.
    kueue_request(&c, "too-big", CHECK, 1, 8, json!({})).await;
    let deadline = Instant::now() + DEADLINE;
    let s = loop {
        let s = status(&c, "too-big").await;
        if cond(&s, "Provisioned")
            .is_some_and(|p| p["message"].as_str().unwrap_or("").contains("retrying"))
        {
            break s;
        }
        assert!(Instant::now() < deadline, "no retry message: {s:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!is(&s, "Failed", "True"), "{s:#}");

    // The consuming pods arrive and bind: the booking ends as consumed. No NodeClaim ever.
    for i in 0..2 {
        let _: Pod = c
            .create(consumer(&format!("fits-{i}"), "fits", 2, None))
            .await;
    }
    let s = until_true(&c, "fits", "BookingExpired").await;
    assert_eq!(
        cond(&s, "BookingExpired").unwrap()["reason"],
        "CapacityIsConsumed"
    );
    assert!(c.claims().await.is_empty(), "check-capacity never launches");

    // Terminal requests are deleted once the retention has passed since they ended.
    eventually("the failed request retired", DEADLINE, || async {
        status(&c, "no-room").await.is_null().then_some(())
    })
    .await;
    assert!(
        !status(&c, "too-big").await.is_null(),
        "a waiting request is kept"
    );
}

/// An A100 NodePool of p4d.24xlarge (8 GPUs) on demand.
pub(crate) fn a100_pool() -> Value {
    json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "a100"},
        "spec": {
            "template": {
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p4d.24xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            },
            "disruption": {"consolidateAfter": "0s", "unneededTime": "1s", "budgets": [{"nodes": "100%"}]}
        }
    })
}

fn claim_zone(c: &nodepools::NodeClaim) -> Option<String> {
    c.spec
        .requirements
        .iter()
        .find(|r| r.key == "topology.kubernetes.io/zone" && r.values.len() == 1)
        .map(|r| r.values[0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_7b_best_effort_atomic_launches_all_four_nodes_or_none() {
    let Some(crd) = provreq_crd() else { return };
    let c = Cluster::start_with(&[&crd]).await;
    let _: NodePool = c.create(a100_pool()).await;
    let ctl = c.controller(
        "provreq-atomic",
        &[
            "--leader-elect=false",
            "--kwok-launch-latency=2s",
            "--provreq-retry=1s",
        ],
    );
    kueue_request(
        &c,
        "train",
        "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        4,
        8,
        json!({}),
    )
    .await;

    // The gang's 4 claims are created together, all in one zone.
    let first = eventually("4 NodeClaims", DEADLINE, || async {
        let claims = c.claims().await;
        (claims.len() == 4).then_some(claims)
    })
    .await;
    let zones: std::collections::BTreeSet<_> = first.iter().map(claim_zone).collect();
    assert_eq!(zones.len(), 1, "one zone for the gang: {zones:?}");
    let zone = zones.into_iter().next().unwrap().expect("a zone");
    // Mid-way (the launches are in flight): the offering runs out.
    let outage: KwokInstance = serde_json::from_value(json!({
        "apiVersion": "kwok.gpu-autoscaler.dev/v1alpha1", "kind": "KwokInstance",
        "metadata": {"name": "outage-p4d", "labels": {OUTAGE_LABEL: "true"}},
        "spec": {"cluster": "-", "claim": "", "pool": "", "instanceType": "p4d.24xlarge",
                 "zone": zone, "capacityType": "on-demand"}
    }))
    .unwrap();
    Api::<KwokInstance>::all(c.client.clone())
        .create(&PostParams::default(), &outage)
        .await
        .unwrap();

    // Either all 4 launch or none stays: the first attempt is rolled back, the retry lands
    // all 4 in another zone. Never a partial set of nodes with the request Provisioned.
    let deadline = Instant::now() + DEADLINE;
    let s = loop {
        let s = status(&c, "train").await;
        let nodes = c.nodes().await;
        if is(&s, "Provisioned", "True") {
            break s;
        }
        assert!(nodes.len() <= 4, "more than 4 nodes: {}", nodes.len());
        assert!(
            Instant::now() < deadline,
            "not provisioned: {s:#}\n{}",
            ctl.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        cond(&s, "Provisioned").unwrap()["reason"],
        "CapacityIsProvisioned"
    );
    assert!(ctl.log().contains("rolled back"), "{}", ctl.log());
    let claims = c.claims().await;
    let live: Vec<_> = claims
        .iter()
        .filter(|x| x.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(live.len(), 4, "{live:#?}");
    for cl in &live {
        assert_ne!(claim_zone(cl).as_deref(), Some(zone.as_str()));
    }
    let pin = s["provisioningClassDetails"]["gpu-autoscaler.dev/provisioning-request"]
        .as_str()
        .expect("pin detail")
        .to_string();

    // Kueue admits: 4 pods pinned to the provisioned nodes consume the booking; no new claim.
    for i in 0..4 {
        let _: Pod = c
            .create(consumer(
                &format!("train-{i}"),
                "train",
                8,
                Some(("gpu-autoscaler.dev/provisioning-request", &pin)),
            ))
            .await;
    }
    let s = until_true(&c, "train", "BookingExpired").await;
    assert_eq!(
        cond(&s, "BookingExpired").unwrap()["reason"],
        "CapacityIsConsumed"
    );
    let live = c
        .claims()
        .await
        .into_iter()
        .filter(|x| x.metadata.deletion_timestamp.is_none())
        .count();
    assert_eq!(live, 4, "consuming pods never trigger a scale-up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_7c_booked_nodes_are_kept_until_expiry_and_fail_when_lost_unused() {
    let Some(crd) = provreq_crd() else { return };
    let c = Cluster::start_with(&[&crd]).await;
    let _: NodePool = c.create(gpu_pool("gpu", "1s")).await;
    let ctl = c.controller("provreq-booking", &["--leader-elect=false"]);
    const ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";

    // A booking of 8 s on an empty node: consolidation (1 s unneeded) must wait for it.
    kueue_request(
        &c,
        "held",
        ATOMIC,
        1,
        1,
        json!({"BookingDurationSeconds": "8"}),
    )
    .await;
    let s = until_true(&c, "held", "Provisioned").await;
    let booked_at = Instant::now();
    let booking = s["provisioningClassDetails"]["gpu-autoscaler.dev/booking"]
        .as_str()
        .unwrap()
        .to_string();
    let claim = booking
        .strip_prefix("claim/")
        .and_then(|b| b.split('=').next())
        .unwrap()
        .to_string();
    // While booked, the empty node stays.
    while booked_at.elapsed() < Duration::from_secs(5) {
        let s = status(&c, "held").await;
        assert!(!is(&s, "BookingExpired", "True"), "expired early: {s:#}");
        let claims = c.claims().await;
        assert!(
            claims
                .iter()
                .any(|x| x.metadata.name.as_deref() == Some(claim.as_str())
                    && x.metadata.deletion_timestamp.is_none()),
            "booked claim {claim} was disrupted:\n{}",
            ctl.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = until_true(&c, "held", "BookingExpired").await;
    assert_eq!(
        cond(&s, "BookingExpired").unwrap()["reason"],
        "CapacityReservationTimeExpired"
    );
    // Then the idle node is consolidated away.
    eventually("the expired booking's node removed", DEADLINE, || async {
        c.claims()
            .await
            .iter()
            .all(|x| x.metadata.name.as_deref() != Some(claim.as_str()))
            .then_some(())
    })
    .await;

    // A booked node lost before its pods arrive: a failed attempt (Kueue retries it), not a
    // revocation (Kueue would deactivate the workload).
    kueue_request(&c, "lost", ATOMIC, 1, 1, json!({})).await;
    until_true(&c, "lost", "Provisioned").await;
    let node = eventually("the booked node registered", DEADLINE, || {
        c.registered_node()
    })
    .await;
    Api::<Node>::all(c.client.clone())
        .delete(
            node.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    let s = until_true(&c, "lost", "Failed").await;
    assert_eq!(
        cond(&s, "Failed").unwrap()["reason"],
        "BookedCapacityLost",
        "{s:#}"
    );
    assert!(!is(&s, "CapacityRevoked", "True"), "{s:#}");
    assert!(!is(&s, "BookingExpired", "True"), "{s:#}");
}

/// A PodGroup CRD of `group`/`version` (schema-less: the tests write only what is read).
fn podgroup_crd(group: &str, version: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podgroups.{group}
spec:
  group: {group}
  names: {{kind: PodGroup, listKind: PodGroupList, plural: podgroups, singular: podgroup}}
  scope: Namespaced
  versions:
    - name: {version}
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"
    )
}

async fn create_dynamic(c: &Cluster, api_version: &str, plural: &str, obj: Value) {
    let (group, version) = api_version.split_once('/').unwrap();
    let ar = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: obj["kind"].as_str().unwrap().into(),
        plural: plural.into(),
    };
    let o: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
    Api::<kube::api::DynamicObject>::namespaced_with(c.client.clone(), "default", &ar)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

/// Waits until `n` pods named `prefix…` were each told why they got no node, and asserts
/// that every latest note says `needle`.
async fn all_told(c: &Cluster, prefix: &str, n: usize, needle: &str, ctl: &Controller) {
    for note in not_triggered(c, prefix, n).await.values() {
        assert!(note.contains(needle), "{note}\n{}", ctl.log());
    }
}

/// Creates Volcano PodGroup `name` in `default` with `spec.minMember`.
async fn volcano_group(c: &Cluster, name: &str, min_member: u32) {
    create_dynamic(
        c,
        "scheduling.volcano.sh/v1beta1",
        "podgroups",
        json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"minMember": min_member}}),
    )
    .await;
}

/// Waits until `n` pods named `prefix…` in `default` each have a NotTriggerScaleUp (or
/// LimitReached) event;
/// returns each pod's latest note.
async fn not_triggered(c: &Cluster, prefix: &str, n: usize) -> BTreeMap<String, String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(c.client.clone(), "default");
    let what = format!("NotTriggerScaleUp for {n} pods {prefix}*");
    eventually(&what, DEADLINE, || async {
        let evs = events.list(&ListParams::default()).await.unwrap().items;
        let per_pod: BTreeMap<String, String> = evs
            .iter()
            // A member a limit holds back is told `LimitReached`; the rest why nothing fits.
            .filter(|e| {
                matches!(
                    e.reason.as_deref(),
                    Some("NotTriggerScaleUp" | "LimitReached")
                )
            })
            .filter_map(|e| {
                let name = e.regarding.as_ref()?.name.clone()?;
                name.starts_with(prefix)
                    .then(|| (name, e.note.clone().unwrap_or_default()))
            })
            .collect();
        (per_pod.len() == n).then_some(per_pod)
    })
    .await
}

/// Two gangs of 8 single-GPU pods and room for 6 GPUs: the Volcano gang (minMember 8) cannot
/// fit and launches nothing, each member told why; so does the Kubernetes PodGroup gang while
/// its minCount is 7, and once its PodGroup says 6 it gets its 6 nodes: both minimums are read
/// from their objects (as plain pods, 6 of either would have launched at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_7d_volcano_gang_of_8_that_cannot_fit_launches_nothing() {
    let volcano = podgroup_crd("scheduling.volcano.sh", "v1beta1");
    let k8s = podgroup_crd("scheduling.k8s.io", "v1alpha2");
    let c = Cluster::start_with(&[&volcano, &k8s]).await;
    let mut pool = gpu_pool("gpu", "30s");
    pool["spec"]["limits"] = json!({"nvidia.com/gpu": "6"});
    let _: NodePool = c.create(pool).await;
    volcano_group(&c, "vc", 8).await;
    create_dynamic(
        &c,
        "scheduling.k8s.io/v1alpha2",
        "podgroups",
        json!({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
               "metadata": {"name": "kg", "namespace": "default"},
               "spec": {"schedulingPolicy": {"gang": {"minCount": 7}}}}),
    )
    .await;
    let ctl = c.controller("gangs", &["--leader-elect=false"]);
    // Raw objects: the typed Pod of this project's API version has no `spec.schedulingGroup`.
    let pods_api = kube::api::ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Pod".into(),
        plural: "pods".into(),
    };
    let raw_pods: Api<kube::api::DynamicObject> =
        Api::namespaced_with(c.client.clone(), "default", &pods_api);
    for i in 0..8 {
        let mut p = gpu_pod(&format!("vc-{i}"));
        p["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": "vc"});
        let _: Pod = c.create(p).await;
        let mut p = gpu_pod(&format!("kg-{i}"));
        p["spec"]["schedulingGroup"] = json!({"podGroupName": "kg"});
        let obj: kube::api::DynamicObject = serde_json::from_value(p).unwrap();
        let stored = raw_pods
            .create(&PostParams::default(), &obj)
            .await
            .expect("create kg pod");
        assert_eq!(
            stored.data["spec"]["schedulingGroup"]["podGroupName"], "kg",
            "the server keeps spec.schedulingGroup"
        );
    }
    // Every member of both gangs is told why nothing launched.
    all_told(
        &c,
        "vc-",
        8,
        "all-or-nothing group volcano:default/vc needs 8 pods",
        &ctl,
    )
    .await;
    all_told(
        &c,
        "kg-",
        8,
        "all-or-nothing group k8s:default/kg needs 7 pods",
        &ctl,
    )
    .await;
    assert!(
        c.claims().await.is_empty(),
        "neither gang fits: nothing launched"
    );
    // The PodGroup now asks for 6: the gang fits.
    let k8s_groups = kube::api::ApiResource {
        group: "scheduling.k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    };
    Api::<kube::api::DynamicObject>::namespaced_with(c.client.clone(), "default", &k8s_groups)
        .patch(
            "kg",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"schedulingPolicy": {"gang": {"minCount": 6}}}}),
            ),
        )
        .await
        .expect("patch PodGroup kg");
    let claims = eventually("6 claims for the Kubernetes gang", DEADLINE, || async {
        let claims = c.claims().await;
        (claims.len() >= 6).then_some(claims)
    })
    .await;
    // Three more rounds, two of them begun with the six claims there: no seventh.
    ctl.more_loops("round", 3).await;
    let claims_after = c.claims().await;
    assert_eq!(claims_after.len(), 6, "{claims:#?}");
    // Every claim was launched for a Kubernetes-gang pod, none for the Volcano gang. (Which
    // pod the harness scheduler then binds is not the controller's choice: it knows no gangs
    // and may put a Volcano pod on a node launched for the other gang.)
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(c.client.clone(), "default");
    let triggered: Vec<String> =
        eventually("6 pods told they triggered scale-up", DEADLINE, || async {
            let names: BTreeSet<String> = events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("TriggeredScaleUp"))
                .filter_map(|e| e.regarding?.name)
                .collect();
            (names.len() >= 6).then(|| names.into_iter().collect())
        })
        .await;
    assert_eq!(triggered.len(), 6, "{triggered:?}");
    assert!(
        triggered.iter().all(|n| n.starts_with("kg-")),
        "{triggered:?}"
    );
}

/// Pods naming a Volcano PodGroup that is created after them wait for it (Volcano binds none
/// of them before then): no node for a partial gang, each pod told what it waits for; once
/// the PodGroup says 2, both get their nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_7f_pods_wait_for_a_podgroup_created_after_them() {
    let volcano = podgroup_crd("scheduling.volcano.sh", "v1beta1");
    let c = Cluster::start_with(&[&volcano]).await;
    let _: NodePool = c.create(gpu_pool("gpu", "30s")).await;
    let ctl = c.controller("late-group", &["--leader-elect=false"]);
    for i in 0..2 {
        let mut p = gpu_pod(&format!("late-{i}"));
        p["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": "late"});
        let _: Pod = c.create(p).await;
    }
    all_told(
        &c,
        "late-",
        2,
        "Volcano PodGroup default/late does not exist yet",
        &ctl,
    )
    .await;
    assert!(c.claims().await.is_empty(), "no node before the PodGroup");
    volcano_group(&c, "late", 2).await;
    eventually("2 claims once the PodGroup exists", DEADLINE, || async {
        (c.claims().await.len() == 2).then_some(())
    })
    .await;
}

/// Kueue installed after the autoscaler: the ProvisioningRequest CRD appears while the
/// controller runs, and its requests are answered without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_7e_a_crd_installed_after_start_is_picked_up_without_a_restart() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let Some(crd) = provreq_crd() else { return };
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool("gpu", "10m")).await;
    plain_gpu_node(&c, "existing-gpu", 4).await;
    let ctl = c.controller(
        "provreq-late",
        &["--leader-elect=false", "--optional-api-recheck=1s"],
    );
    eventually(
        "the controller to find the API missing",
        DEADLINE,
        || async { ctl.log().contains("not served").then_some(()) },
    )
    .await;
    let crd: serde_json::Value = serde_norway::from_str(&crd).expect("CRD YAML");
    let _: CustomResourceDefinition = c.create(crd).await;
    kueue_request(
        &c,
        "late",
        "check-capacity.autoscaling.x-k8s.io",
        1,
        2,
        json!({}),
    )
    .await;
    let s = until_true(&c, "late", "Provisioned").await;
    assert_eq!(
        cond(&s, "Provisioned").unwrap()["reason"],
        "CapacityIsFound",
        "{s:#}"
    );
    assert!(ctl.log().contains("now served"), "{}", ctl.log());
}
