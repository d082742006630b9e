//! Kueue's side of the ProvisioningRequest contract, played the way its provisioning
//! admission-check controller behaves, against the controller on the fake API server.
//!
//! What is replayed: requests named `<workload>-<check>-<attempt>` owned by the Workload,
//! PodTemplates `ppt-<request>-<podset>` owned by the request (created after it), parameters
//! from the ProvisioningRequestConfig plus the Workload's `provreq.kueue.x-k8s.io/*`
//! annotations, conditions read in Kueue's precedence (Failed > CapacityRevoked >
//! BookingExpired > Provisioned), retries as a new attempt after a back-off up to
//! `retryStrategy.backoffLimitCount`, BookingExpired ignored once admitted, CapacityRevoked
//! deactivating an active workload, and on admission the pods created with the consume and
//! class annotations and `podSetUpdates.nodeSelector` filled from `provisioningClassDetails`.
//!
//! These tests need the ProvisioningRequest CRD from ../shared; without it they say so and
//! skip.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nodepools::NodePool;
use serde_json::{Value, json};

use crate::harness::*;
use crate::provreq::{DEADLINE, cond, is, plain_gpu_node, provreq_crd, provreqs};

const CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";
const ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
const PIN: &str = "gpu-autoscaler.dev/provisioning-request";
/// Kueue's prefix of Workload annotations copied into the request's parameters.
const PARAM_PREFIX: &str = "provreq.kueue.x-k8s.io/";

/// Where a workload is, as Kueue sees it.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// Quota reserved, admission check pending.
    Pending,
    /// Admitted: its pods exist (or are about to).
    Admitted,
    /// The check was rejected (retries exhausted): quota released, workload inactive.
    Rejected(String),
    /// Deactivated on CapacityRevoked.
    Deactivated(String),
}

/// One Workload with one ProvisioningRequest admission check.
struct Workload {
    name: String,
    check: String,
    class: String,
    /// ProvisioningRequestConfig `spec.parameters`.
    config_params: BTreeMap<String, String>,
    /// The Workload's annotations.
    annotations: BTreeMap<String, String>,
    /// Pod sets: name, count, GPUs per pod.
    pod_sets: Vec<(String, i32, u32)>,
    /// ProvisioningRequestConfig `podSetUpdates.nodeSelector: [{key: PIN, valueFrom...: PIN}]`.
    pin: bool,
    /// `retryStrategy.backoffLimitCount`.
    backoff_limit: u32,
    /// `retryStrategy.backoffBaseSeconds` (short here).
    backoff_base: Duration,
    /// Whether every other admission check is Ready: while not, Kueue does not admit.
    others_ready: bool,
    /// Admitted pods are created only while this is true (a job controller that is slow, or
    /// pods arriving long after admission).
    create_pods: bool,
    /// How many pods are created on admission (`None`: all).
    start_only: Option<usize>,
    attempt: u32,
    phase: Phase,
    /// When the current attempt's request ended (Failed or BookingExpired before admission).
    ended_at: Option<Instant>,
    /// Pods created for the current admission.
    pods_made: bool,
    /// Every condition transition seen, `attempt type=reason`.
    history: Vec<String>,
}

impl Workload {
    fn new(name: &str, class: &str, pod_sets: &[(&str, i32, u32)]) -> Workload {
        Workload {
            name: name.into(),
            check: "capacity".into(),
            class: class.into(),
            config_params: BTreeMap::new(),
            annotations: BTreeMap::new(),
            pod_sets: pod_sets
                .iter()
                .map(|(n, c, g)| (n.to_string(), *c, *g))
                .collect(),
            pin: false,
            backoff_limit: 3,
            backoff_base: Duration::from_secs(1),
            others_ready: true,
            create_pods: true,
            start_only: None,
            attempt: 1,
            phase: Phase::Pending,
            ended_at: None,
            pods_made: false,
            history: Vec::new(),
        }
    }

    fn request(&self) -> String {
        format!("{}-{}-{}", self.name, self.check, self.attempt)
    }

    fn template(&self, request: &str, podset: &str) -> String {
        format!("ppt-{request}-{podset}")
    }

    /// The request's parameters: the config's, then the Workload's prefixed annotations.
    fn parameters(&self) -> BTreeMap<String, String> {
        let mut p = self.config_params.clone();
        for (k, v) in &self.annotations {
            if let Some(name) = k.strip_prefix(PARAM_PREFIX) {
                p.insert(name.to_string(), v.clone());
            }
        }
        p
    }

    fn pod_spec(gpus: u32) -> Value {
        json!({
            "containers": [{"name": "train", "image": "train:1",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()},
                              "limits": {"nvidia.com/gpu": gpus.to_string()}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never"
        })
    }

    /// Creates the current attempt's request, then its PodTemplates (Kueue's order).
    async fn create_request(&mut self, c: &Cluster) {
        let name = self.request();
        let pod_sets: Vec<Value> = self
            .pod_sets
            .iter()
            .map(|(ps, count, _)| {
                json!({"podTemplateRef": {"name": self.template(&name, ps)}, "count": count})
            })
            .collect();
        let obj: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": "default",
                "ownerReferences": [{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                    "name": self.name, "uid": format!("00000000-0000-0000-0000-{:012}", self.name.len()),
                    "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"provisioningClassName": self.class, "parameters": self.parameters(),
                     "podSets": pod_sets}
        }))
        .unwrap();
        let created = provreqs(c)
            .create(&PostParams::default(), &obj)
            .await
            .expect("create ProvisioningRequest");
        let uid = created.metadata.uid.clone().unwrap_or_default();
        for (ps, _, gpus) in &self.pod_sets {
            let _: PodTemplate = c
                .create(json!({
                    "apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": self.template(&name, ps), "namespace": "default",
                        "ownerReferences": [{"apiVersion": "autoscaling.x-k8s.io/v1",
                            "kind": "ProvisioningRequest", "name": name, "uid": uid,
                            "controller": true, "blockOwnerDeletion": true}]},
                    "template": {"metadata": {"labels": {"job": self.name}},
                                 "spec": Self::pod_spec(*gpus)}
                }))
                .await;
        }
        self.history.push(format!("{} created", name));
    }

    /// Deletes an attempt's request and templates (Kueue keeps only the last attempt; the
    /// templates go with their owner).
    async fn delete_request(&self, c: &Cluster, name: &str) {
        let _ = provreqs(c).delete(name, &DeleteParams::default()).await;
        let templates: Api<PodTemplate> = Api::namespaced(c.client.clone(), "default");
        for (ps, _, _) in &self.pod_sets {
            let _ = templates
                .delete(&self.template(name, ps), &DeleteParams::default())
                .await;
        }
    }

    async fn pods(&self, c: &Cluster) -> Vec<Pod> {
        Api::<Pod>::namespaced(c.client.clone(), "default")
            .list(&ListParams::default().labels(&format!("job={}", self.name)))
            .await
            .unwrap()
            .items
    }

    async fn delete_pods(&mut self, c: &Cluster) {
        let api: Api<Pod> = Api::namespaced(c.client.clone(), "default");
        for p in self.pods(c).await {
            let _ = api
                .delete(
                    p.metadata.name.as_deref().unwrap(),
                    &DeleteParams::default(),
                )
                .await;
        }
        self.pods_made = false;
    }

    /// The admitted pods: the template plus Kueue's podSetUpdates.
    async fn create_pods(&mut self, c: &Cluster, status: &Value) {
        let request = self.request();
        let mut made = 0;
        for (ps, count, gpus) in self.pod_sets.clone() {
            for i in 0..count {
                if self.start_only.is_some_and(|n| made >= n) {
                    break;
                }
                let mut spec = Self::pod_spec(gpus);
                if self.pin
                    && let Some(v) = status["provisioningClassDetails"][PIN].as_str()
                {
                    spec["nodeSelector"] = json!({PIN: v});
                }
                let _: Pod = c
                    .create(json!({
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("{}-{ps}-{i}-a{}", self.name, self.attempt),
                            "namespace": "default", "labels": {"job": self.name},
                            "annotations": {
                                "autoscaling.x-k8s.io/consume-provisioning-request": request,
                                "autoscaling.x-k8s.io/provisioning-class-name": self.class},
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                "name": self.name, "uid": "00000000-0000-0000-0000-0000000000aa",
                                "controller": true}]},
                        "spec": spec
                    }))
                    .await;
                made += 1;
            }
        }
        self.pods_made = true;
    }

    /// One pass of Kueue's reconcile for this workload.
    async fn sync(&mut self, c: &Cluster) {
        if matches!(self.phase, Phase::Rejected(_) | Phase::Deactivated(_)) {
            return;
        }
        let name = self.request();
        let Some(obj) = provreqs(c).get_opt(&name).await.unwrap() else {
            self.create_request(c).await;
            return;
        };
        let status = obj.data["status"].clone();
        let msg = |t: &str| {
            cond(&status, t)
                .and_then(|x| x["message"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        let reason = |t: &str| {
            cond(&status, t)
                .and_then(|x| x["reason"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        let admitted = self.phase == Phase::Admitted;
        let retry = if is(&status, "Failed", "True") {
            self.note(format!("{} Failed={}", self.attempt, reason("Failed")));
            true
        } else if is(&status, "CapacityRevoked", "True") {
            self.note(format!("{} CapacityRevoked", self.attempt));
            self.delete_pods(c).await;
            self.phase = Phase::Deactivated(msg("CapacityRevoked"));
            return;
        } else if is(&status, "BookingExpired", "True") {
            self.note(format!(
                "{} BookingExpired={}",
                self.attempt,
                reason("BookingExpired")
            ));
            // Once admitted, Kueue ignores BookingExpired.
            !admitted
        } else {
            if is(&status, "Provisioned", "True") && !admitted && self.others_ready {
                self.note(format!("{} admitted", self.attempt));
                self.phase = Phase::Admitted;
            }
            false
        };
        if retry {
            if admitted {
                // The check went back to Pending: the workload is evicted and requeued.
                self.delete_pods(c).await;
                self.phase = Phase::Pending;
            }
            if self.attempt > self.backoff_limit {
                self.phase = Phase::Rejected(msg("Failed"));
                return;
            }
            let ended = *self.ended_at.get_or_insert_with(Instant::now);
            let backoff = self.backoff_base * 2u32.pow(self.attempt - 1);
            if ended.elapsed() >= backoff {
                self.delete_request(c, &name).await;
                self.attempt += 1;
                self.ended_at = None;
                self.create_request(c).await;
            }
            return;
        }
        if self.phase == Phase::Admitted && self.create_pods && !self.pods_made {
            self.create_pods(c, &status).await;
        }
    }

    fn note(&mut self, s: String) {
        if self.history.last() != Some(&s) {
            self.history.push(s);
        }
    }

    /// Whether the workload is admitted and all its created pods are bound.
    async fn running(&self, c: &Cluster) -> bool {
        if self.phase != Phase::Admitted || !self.pods_made {
            return false;
        }
        let pods = self.pods(c).await;
        let want = self
            .start_only
            .unwrap_or_else(|| self.pod_sets.iter().map(|p| p.1 as usize).sum());
        pods.len() == want && pods.iter().all(|p| bound_to(p).is_some())
    }
}

/// Syncs `w` (as Kueue would, continuously) until `check` gives a value, with a deadline.
async fn sync_until<T>(
    c: &Cluster,
    w: &mut Workload,
    what: &str,
    check: impl AsyncFn(&Workload) -> Option<T>,
) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        w.sync(c).await;
        if let Some(v) = check(w).await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what} of {}: {:?}, history {:#?}, request {:#}",
            w.name,
            w.phase,
            w.history,
            crate::provreq::status(c, &w.request()).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`sync_until`] a condition on the workload alone.
async fn drive(c: &Cluster, w: &mut Workload, what: &str, done: fn(&Workload) -> bool) {
    sync_until(c, w, what, async |w: &Workload| done(w).then_some(())).await
}

fn admitted(w: &Workload) -> bool {
    w.phase == Phase::Admitted
}

fn rejected(w: &Workload) -> bool {
    matches!(w.phase, Phase::Rejected(_))
}

/// Names of the NodeClaims (`live`: only those not being deleted).
async fn claim_names(c: &Cluster, live: bool) -> Vec<String> {
    c.claims()
        .await
        .into_iter()
        .filter(|x| !live || x.metadata.deletion_timestamp.is_none())
        .filter_map(|x| x.metadata.name)
        .collect()
}

/// Syncs `w` until its current request has condition `type_` True; returns the status.
async fn sync_until_true(c: &Cluster, w: &mut Workload, type_: &str) -> Value {
    sync_until(c, w, &format!("{type_}=True"), async |w: &Workload| {
        let s = crate::provreq::status(c, &w.request()).await;
        is(&s, type_, "True").then_some(s)
    })
    .await
}

/// The job finishes: once the booking has ended as consumed (the controller saw every pod
/// scheduled), the pods go away.
async fn finish(c: &Cluster, w: &mut Workload) {
    let s = crate::provreq::until_true(c, &w.request(), "BookingExpired").await;
    assert_eq!(
        cond(&s, "BookingExpired").unwrap()["reason"],
        "CapacityIsConsumed"
    );
    w.delete_pods(c).await;
}

/// Waits until no NodeClaim is left (idle nodes consolidated), so the next request is
/// planned on a clean cluster.
async fn no_claims(c: &Cluster) {
    eventually("every NodeClaim removed", DEADLINE, || async {
        c.claims().await.is_empty().then_some(())
    })
    .await;
}

/// Syncs `w` until it is admitted and running; it must never be rejected or deactivated.
async fn until_running(c: &Cluster, w: &mut Workload) {
    sync_until(c, w, "running", async |w: &Workload| {
        assert!(
            !matches!(w.phase, Phase::Rejected(_) | Phase::Deactivated(_)),
            "{} ended {:?}: {:#?}",
            w.name,
            w.phase,
            w.history
        );
        w.running(c).await.then_some(())
    })
    .await
}

/// Deletes a Node (the machine is gone).
async fn delete_node(c: &Cluster, name: &str) {
    Api::<Node>::all(c.client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete Node");
}

/// The nodes the workload's pods are bound to.
async fn nodes_of(c: &Cluster, w: &Workload) -> Vec<Node> {
    let names: Vec<String> = w.pods(c).await.iter().filter_map(bound_to).collect();
    c.nodes()
        .await
        .into_iter()
        .filter(|n| names.contains(n.metadata.name.as_ref().unwrap()))
        .collect()
}

fn label<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

const CONTROLLER_FLAGS: &[&str] = &[
    "--leader-elect=false",
    "--provreq-retry=1s",
    "--provreq-retry-max=2s",
];

/// A cluster with the ProvisioningRequest CRD, the one-GPU NodePool `gpu` (idle nodes removed
/// after 1 s) and the controller; `None` (said) without the CRD.
async fn kueue_cluster(name: &str) -> Option<(Cluster, Controller)> {
    let crd = provreq_crd()?;
    let c = Cluster::start_with(&[&crd]).await;
    let _: NodePool = c.create(gpu_pool("gpu", "1s")).await;
    let ctl = c.controller(name, CONTROLLER_FLAGS);
    Some((c, ctl))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_normal_path_admits_and_runs_for_both_classes() {
    let Some(crd) = provreq_crd() else { return };
    let c = Cluster::start_with(&[&crd]).await;
    let _: NodePool = c.create(gpu_pool("gpu", "1s")).await;
    plain_gpu_node(&c, "existing-gpu", 4).await;
    let _ctl = c.controller("kueue-normal", CONTROLLER_FLAGS);

    // check-capacity: the existing node has room; nothing is launched.
    let mut check = Workload::new("check", CHECK_CAPACITY, &[("main", 2, 2)]);
    until_running(&c, &mut check).await;
    assert!(c.claims().await.is_empty(), "check-capacity launched");
    assert_eq!(check.attempt, 1, "{:#?}", check.history);

    // best-effort-atomic with pinning: 2 nodes launched, the pods land on exactly those.
    let mut atomic = Workload::new("atomic", ATOMIC, &[("main", 2, 1)]);
    atomic.pin = true;
    until_running(&c, &mut atomic).await;
    let s = crate::provreq::status(&c, &atomic.request()).await;
    let pin = s["provisioningClassDetails"][PIN]
        .as_str()
        .expect("pin detail");
    let nodes = nodes_of(&c, &atomic).await;
    assert_eq!(nodes.len(), 2, "one pod per booked node");
    assert!(
        nodes.iter().all(|n| label(n, PIN) == Some(pin)),
        "{nodes:#?}"
    );
    assert_eq!(claim_names(&c, true).await.len(), 2, "no extra launch");
    assert_eq!(atomic.attempt, 1, "{:#?}", atomic.history);
    // The booking ends as consumed once all pods run.
    let s = crate::provreq::until_true(&c, &atomic.request(), "BookingExpired").await;
    assert_eq!(
        cond(&s, "BookingExpired").unwrap()["reason"],
        "CapacityIsConsumed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_no_capacity_retries_with_and_without_no_retry() {
    let Some((c, _ctl)) = kueue_cluster("kueue-nocap").await else {
        return;
    };

    // noRetry: every attempt fails at once; Kueue retries up to its limit, then rejects.
    let mut quick = Workload::new("quick", CHECK_CAPACITY, &[("main", 1, 2)]);
    quick.config_params.insert("noRetry".into(), "true".into());
    quick.backoff_limit = 1;
    drive(&c, &mut quick, "rejection", rejected).await;
    assert_eq!(quick.attempt, 2, "{:#?}", quick.history);
    let Phase::Rejected(m) = &quick.phase else {
        unreachable!()
    };
    assert!(m.contains("noRetry"), "{m}");
    assert!(
        m.contains("check-capacity never launches") && !m.contains("no NodePool exists"),
        "NodePools exist: {m}"
    );

    // Without noRetry, a short ValidUntilSeconds (a Workload annotation) bounds the wait; the
    // retry message stays the same meanwhile; the next attempt is admitted once capacity
    // exists.
    let mut patient = Workload::new("patient", CHECK_CAPACITY, &[("main", 1, 2)]);
    patient
        .annotations
        .insert(format!("{PARAM_PREFIX}ValidUntilSeconds"), "6".into());
    let mut messages = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    while patient.attempt == 1 {
        patient.sync(&c).await;
        let s = crate::provreq::status(&c, "patient-capacity-1").await;
        if !is(&s, "Failed", "True")
            && let Some(m) = cond(&s, "Provisioned").and_then(|p| p["message"].as_str())
        {
            messages.push(m.to_string());
        }
        assert!(
            Instant::now() < deadline,
            "attempt 1 never ended: {:#?}",
            patient.history
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    messages.dedup();
    assert_eq!(
        messages.iter().filter(|m| m.contains("retrying")).count(),
        1,
        "one stable retry message: {messages:#?}"
    );
    assert!(
        patient.history.iter().any(|h| h == "1 Failed=Expired"),
        "{:#?}",
        patient.history
    );
    plain_gpu_node(&c, "late-gpu", 4).await;
    until_running(&c, &mut patient).await;
    assert!(c.claims().await.is_empty(), "check-capacity never launches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_booking_expiry_before_admission_is_retried() {
    let Some((c, _ctl)) = kueue_cluster("kueue-expiry-before").await else {
        return;
    };
    // Another admission check is still pending: the 3 s booking runs out before admission.
    let mut w = Workload::new("late", ATOMIC, &[("main", 2, 1)]);
    w.pin = true;
    w.others_ready = false;
    w.annotations
        .insert(format!("{PARAM_PREFIX}BookingDurationSeconds"), "3".into());
    drive(&c, &mut w, "a second attempt", |w| w.attempt == 2).await;
    assert!(
        w.history
            .iter()
            .any(|h| h == "1 BookingExpired=CapacityReservationTimeExpired"),
        "{:#?}",
        w.history
    );
    w.others_ready = true;
    until_running(&c, &mut w).await;
    let s = crate::provreq::status(&c, &w.request()).await;
    let pin = s["provisioningClassDetails"][PIN]
        .as_str()
        .map(str::to_string);
    // Attempt 2 may book attempt 1's idle nodes (then nothing is pinned); when it pins, its
    // pods are on its own nodes.
    if let Some(pin) = pin {
        for n in nodes_of(&c, &w).await {
            assert_eq!(label(&n, PIN), Some(pin.as_str()), "pinned to attempt 2");
        }
    }
}

/// Admitted, but the pods arrive only after the booking expired and its idle nodes were
/// removed: with pinning, new nodes carry the label the pods select; without, plain nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_pods_arriving_after_the_booking_expired_still_run() {
    let Some((c, _ctl)) = kueue_cluster("kueue-expiry-after").await else {
        return;
    };
    for pin in [true, false] {
        no_claims(&c).await;
        let name = if pin { "pinned" } else { "free" };
        let mut w = Workload::new(name, ATOMIC, &[("main", 2, 1)]);
        w.pin = pin;
        w.create_pods = false;
        w.annotations
            .insert(format!("{PARAM_PREFIX}BookingDurationSeconds"), "2".into());
        drive(&c, &mut w, "admission", admitted).await;
        let booked: Vec<String> = claim_names(&c, true).await;
        assert_eq!(booked.len(), 2);
        crate::provreq::until_true(&c, &w.request(), "BookingExpired").await;
        eventually("the idle booked nodes removed", DEADLINE, || async {
            let now = claim_names(&c, false).await;
            booked.iter().all(|b| !now.contains(b)).then_some(())
        })
        .await;
        w.create_pods = true;
        until_running(&c, &mut w).await;
        assert_eq!(w.attempt, 1, "admitted workloads are not retried");
        let s = crate::provreq::status(&c, &w.request()).await;
        if pin {
            let v = s["provisioningClassDetails"][PIN].as_str().unwrap();
            for n in nodes_of(&c, &w).await {
                assert_eq!(label(&n, PIN), Some(v), "new node carries the pin");
            }
        }
        w.delete_pods(&c).await;
    }
}

/// A booked node lost before any pod started: the request fails and Kueue retries (both
/// classes, admitted or not); lost after a pod started: CapacityRevoked, and Kueue
/// deactivates the workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_lost_booked_node_is_a_retry_until_pods_run() {
    let Some((c, _ctl)) = kueue_cluster("kueue-lost").await else {
        return;
    };

    // best-effort-atomic, admitted, pods not created yet.
    let mut w = Workload::new("atomic", ATOMIC, &[("main", 2, 1)]);
    w.pin = true;
    w.create_pods = false;
    drive(&c, &mut w, "admission", admitted).await;
    let first: Vec<String> = claim_names(&c, true).await;
    let victim = eventually("a booked node registered", DEADLINE, || c.registered_node()).await;
    delete_node(&c, victim.metadata.name.as_deref().unwrap()).await;
    // "Before any pod started" is the precondition: the job's pods come only once Kueue has
    // retried, or a loaded machine lets them bind before the controller sees the loss.
    drive(&c, &mut w, "the lost booking retried", |w| w.attempt >= 2).await;
    w.create_pods = true;
    until_running(&c, &mut w).await;
    assert_eq!(w.attempt, 2, "{:#?}", w.history);
    assert!(
        w.history.iter().any(|h| h == "1 Failed=BookedCapacityLost"),
        "{:#?}",
        w.history
    );
    assert!(!w.history.iter().any(|h| h.contains("CapacityRevoked")));
    finish(&c, &mut w).await;
    let now: Vec<String> = claim_names(&c, true).await;
    assert!(
        first.iter().all(|f| !now.contains(f)),
        "the first attempt's surviving claim was deleted: {first:?} {now:?}"
    );

    // check-capacity, not admitted yet: the booked existing node goes away.
    plain_gpu_node(&c, "plain-a", 4).await;
    let mut chk = Workload::new("check", CHECK_CAPACITY, &[("main", 1, 4)]);
    chk.others_ready = false;
    sync_until_true(&c, &mut chk, "Provisioned").await;
    delete_node(&c, "plain-a").await;
    drive(&c, &mut chk, "the lost booking failed", |w| {
        w.history.iter().any(|h| h == "1 Failed=BookedCapacityLost")
    })
    .await;
    plain_gpu_node(&c, "plain-b", 4).await;
    chk.others_ready = true;
    until_running(&c, &mut chk).await;
    assert!(chk.attempt >= 2, "{:#?}", chk.history);
    finish(&c, &mut chk).await;
    delete_node(&c, "plain-b").await;
    no_claims(&c).await;

    // A pod of the booking runs, then another booked node is lost: revoked, deactivated.
    let mut run = Workload::new("running", ATOMIC, &[("main", 2, 1)]);
    run.pin = true;
    run.start_only = Some(1);
    until_running(&c, &mut run).await;
    let used = nodes_of(&c, &run).await;
    let s = crate::provreq::status(&c, &run.request()).await;
    let pin = s["provisioningClassDetails"][PIN]
        .as_str()
        .unwrap()
        .to_string();
    let other = eventually("the other booked node registered", DEADLINE, || async {
        c.nodes().await.into_iter().find(|n| {
            label(n, PIN) == Some(pin.as_str())
                && n.metadata.name != used[0].metadata.name
                && n.metadata.deletion_timestamp.is_none()
        })
    })
    .await;
    delete_node(&c, other.metadata.name.as_deref().unwrap()).await;
    drive(&c, &mut run, "deactivation", |w| {
        matches!(w.phase, Phase::Deactivated(_))
    })
    .await;
}

/// A check-capacity request spread over more than 1,000 nodes (with cloud-style node names)
/// is booked: its booking fits the 32,768-character status field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_request_over_1000_nodes_is_booked_within_the_status_limit() {
    let Some(crd) = provreq_crd() else { return };
    let c = Cluster::start_with(&[&crd]).await;
    const N: usize = 1_010;
    let nodes: Vec<String> = (0..N)
        .map(|i| format!("ip-10-0-{}-{}.us-west-2.compute.internal", i / 250, i % 250))
        .collect();
    for n in &nodes {
        plain_gpu_node(&c, n, 1).await;
    }
    let mut ctl = c.controller("kueue-1000", CONTROLLER_FLAGS);
    let mut w = Workload::new("wide", CHECK_CAPACITY, &[("main", N as i32, 1)]);
    w.others_ready = false;
    let s = sync_until_true(&c, &mut w, "Provisioned").await;
    for (k, v) in s["provisioningClassDetails"].as_object().unwrap() {
        let len = v.as_str().unwrap_or_default().len();
        assert!(len <= 32_768, "detail {k} is {len} characters");
    }
    assert_eq!(
        s["provisioningClassDetails"]["gpu-autoscaler.dev/booking"],
        format!("summary/pods={N},nodes={N},claims=0"),
        "too large to list: summarized"
    );
    // A new leader finds the booking again (every node is still free for it).
    ctl.kill9();
    let ctl = c.controller("kueue-1000-next", CONTROLLER_FLAGS);
    eventually("the new leader to find the booking", DEADLINE, || async {
        ctl.log()
            .contains("large booking found again by planning")
            .then_some(())
    })
    .await;
    let s = crate::provreq::status(&c, &w.request()).await;
    assert!(
        is(&s, "Provisioned", "True") && !is(&s, "Failed", "True"),
        "{s:#}"
    );
    w.others_ready = true;
    until_running(&c, &mut w).await;
    assert_eq!(w.attempt, 1, "{:#?}", w.history);
    let s = crate::provreq::until_true(&c, &w.request(), "BookingExpired").await;
    assert_eq!(
        cond(&s, "BookingExpired").unwrap()["reason"],
        "CapacityIsConsumed"
    );
}

/// `/proc/<pid>/status` VmRSS of a process, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A request for 2^31-1 pods is refused from its spec (the controller stays small and keeps
/// answering); invalid parameters are refused naming the parameter; neither launches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_invalid_requests_fail_and_launch_nothing() {
    let Some((c, ctl)) = kueue_cluster("provreq-bounds").await else {
        return;
    };
    let mut huge = Workload::new("huge", ATOMIC, &[("main", i32::MAX, 1)]);
    huge.backoff_limit = 0;
    drive(&c, &mut huge, "rejection", rejected).await;
    let s = crate::provreq::status(&c, &huge.request()).await;
    assert_eq!(
        cond(&s, "Failed").unwrap()["reason"],
        "InvalidRequest",
        "{s:#}"
    );
    assert!(
        cond(&s, "Failed").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("2147483647 pods"),
        "{s:#}"
    );
    let rss = rss_kib(ctl.child.id());
    eprintln!("controller VmRSS after the 2147483647-pod request: {rss:?} KiB");
    if let Some(kib) = rss {
        assert!(kib < 512 * 1024, "controller RSS {kib} KiB");
    }
    for (param, value) in [
        ("ValidUntilSeconds", "-5"),
        ("BookingDurationSeconds", "abc"),
        ("noRetry", "maybe"),
    ] {
        let mut w = Workload::new(
            &format!("bad-{}", param.to_lowercase()),
            ATOMIC,
            &[("main", 1, 1)],
        );
        w.config_params.insert(param.into(), value.into());
        w.backoff_limit = 0;
        drive(&c, &mut w, "rejection", rejected).await;
        let s = crate::provreq::status(&c, &w.request()).await;
        let f = cond(&s, "Failed").unwrap();
        assert_eq!(f["reason"], "InvalidParameters", "{s:#}");
        assert!(f["message"].as_str().unwrap().contains(param), "{s:#}");
    }
    // A request that works, after all of those: the controller still answers.
    let mut ok = Workload::new("ok", ATOMIC, &[("main", 1, 1)]);
    until_running(&c, &mut ok).await;
    assert_eq!(
        claim_names(&c, true).await.len(),
        1,
        "only the valid request launched"
    );
}
