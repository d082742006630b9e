//! Every write the controller makes to the Kubernetes API, each checked against
//! [`super::api_calls`], and the one fresh read that guards an irreversible write.

use std::collections::BTreeMap;

use autoscaler_core::model::PodKey;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use nodepools::{NodeClaim, NodePool};
use serde_json::{Value, json};

use super::api_calls::check;
use super::crashpoint;
use super::error::{Error, Result};
use super::keys;

/// Outcome of one eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evicted {
    /// Accepted.
    Yes,
    /// Refused by the pod's PodDisruptionBudgets: asked again later.
    Refused(Refusal),
    /// The pod is already gone.
    Gone,
}

/// Why the Eviction API refused an eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 429 with a `DisruptionBudget` cause: a PodDisruptionBudget does not allow it now; the
    /// cause's words (which name the budget and its numbers).
    Budget(String),
    /// 500: more than one PodDisruptionBudget selects the pod, which the Eviction API does
    /// not support (until one is removed, the pod can only be deleted).
    MultipleBudgets,
    /// 429 without such a cause: the API server throttles.
    Throttled,
}

impl Refusal {
    /// What it means, for events.
    pub fn describe(&self) -> String {
        match self {
            Refusal::Budget(why) => {
                format!("its PodDisruptionBudget allows no disruption now ({why})")
            }
            Refusal::MultipleBudgets => {
                "more than one PodDisruptionBudget selects it, which the Eviction API refuses"
                    .into()
            }
            Refusal::Throttled => "the API server throttles evictions".into(),
        }
    }

    /// The refusal a 429 `status` says: a budget's when a cause says so.
    fn of_429(status: &kube::core::Status) -> Self {
        let cause = status
            .details
            .iter()
            .flat_map(|d| d.causes.iter())
            .find(|c| c.reason == "DisruptionBudget");
        match cause {
            Some(c) if !c.message.is_empty() => Refusal::Budget(c.message.clone()),
            Some(_) => Refusal::Budget(status.message.clone()),
            None => Refusal::Throttled,
        }
    }
}

/// Whether `e` is the Eviction API's refusal of a pod more than one PodDisruptionBudget
/// selects (a 500 whose message says so, as the API server words it).
fn multiple_budgets(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 500 && s.message.contains("more than one PodDisruptionBudget"))
}

/// Sets (or replaces) condition `type_` in `conditions`, keeping the transition time when the
/// status did not change, and stamping the object's `generation` it was decided on.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    (type_, status): (&str, bool),
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    set_condition_status(
        conditions,
        (type_, status),
        reason,
        message,
        now,
        generation,
    );
}

/// [`set_condition`] with the status as the API spells it, `"Unknown"` included.
pub fn set_condition_status(
    conditions: &mut Vec<Condition>,
    (type_, status): (&str, &str),
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
    generation: Option<i64>,
) {
    let new = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Time(now),
        observed_generation: generation,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => {
            c.reason = new.reason;
            c.message = new.message;
            c.observed_generation = generation;
        }
        Some(c) => *c = new,
        None => conditions.push(new),
    }
}

/// Preconditions that hold only for the object of UID `uid`.
fn same_pod(uid: &str) -> kube::api::Preconditions {
    kube::api::Preconditions {
        uid: Some(uid.to_string()),
        resource_version: None,
    }
}

fn is(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Names a create tries before it gives up on names already taken.
const NAME_ATTEMPTS: u32 = 5;

/// `claim` with its name chosen here, as `generateName` would (its prefix and five random
/// characters from the API server's alphabet), unless it has one, and a random create token
/// ([`keys::CREATE_TOKEN_ANNOTATION`]); and the token.
fn named_claim(claim: &NodeClaim) -> (NodeClaim, String) {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut named = claim.clone();
    if named.metadata.name.is_none() {
        let suffix: String = (0..5)
            .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
            .collect();
        let prefix = named.metadata.generate_name.take().unwrap_or_default();
        named.metadata.name = Some(format!("{prefix}{suffix}"));
    }
    let token = format!("{:016x}", fastrand::u64(..));
    named
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(keys::CREATE_TOKEN_ANNOTATION.into(), token.clone());
    (named, token)
}

/// A write's result with 404 (the object is gone, nothing left to write) as success.
fn gone_is_ok<T>(
    r: std::result::Result<T, kube::Error>,
    action: impl FnOnce() -> String,
) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if is(&e, 404) => Ok(()),
        Err(e) => Err(Error::kube(action(), e)),
    }
}

/// The API writer.
#[derive(Clone)]
pub struct Actuator {
    client: kube::Client,
    /// The client evictions go through: without kube's retry layer. A PodDisruptionBudget's
    /// 429 is an answer, not throttling, and kube's default policy retries a 429 up to 15
    /// times with a back-off doubling from 5 ms: minutes in all, the whole loop held.
    evictions: kube::Client,
    recorder: Recorder,
}

const GROUP: &str = "gpu-autoscaler.dev";

impl Actuator {
    /// A writer using `client`, evicting through `evictions` (a client built with
    /// `default_retry` off), reporting events as `identity`.
    pub fn new(client: kube::Client, evictions: kube::Client, identity: &str) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "gpu-autoscaler".into(),
                instance: Some(identity.to_string()),
            },
        );
        Actuator {
            client,
            evictions,
            recorder,
        }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Creates a NodeClaim (with `generateName`); returns it as stored.
    ///
    /// # Errors
    /// The API error.
    pub async fn create_claim(&self, claim: &NodeClaim) -> Result<NodeClaim> {
        check(GROUP, "nodeclaims", "create");
        crashpoint::reached("claim-write:before");
        let mut attempt = 0;
        let created = loop {
            attempt += 1;
            let (named, token) = named_claim(claim);
            let name = named.name_any();
            match self.claims().create(&PostParams::default(), &named).await {
                Ok(c) => break Ok(c),
                // A retried create whose first attempt landed, or a name taken by another
                // claim (a new random name then).
                Err(e) if is(&e, 409) => {
                    let found = self
                        .claims()
                        .get_opt(&name)
                        .await
                        .map_err(|e| Error::kube("reading back a NodeClaim", e))?;
                    if let Some(c) = found
                        && c.annotations().get(keys::CREATE_TOKEN_ANNOTATION) == Some(&token)
                    {
                        break Ok(c);
                    }
                    if attempt >= NAME_ATTEMPTS {
                        break Err(Error::kube("creating a NodeClaim", e));
                    }
                }
                Err(e) => break Err(Error::kube("creating a NodeClaim", e)),
            }
        };
        crashpoint::reached("claim-write:after");
        created
    }

    /// Writes a NodeClaim's whole status (the controller is its only writer).
    ///
    /// # Errors
    /// The API error; 404 (claim gone) is `Ok`.
    pub async fn patch_claim_status(&self, name: &str, status: &Value) -> Result<()> {
        check(GROUP, "nodeclaims/status", "patch");
        let r = self
            .claims()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await;
        gone_is_ok(r, || format!("patching NodeClaim {name} status"))
    }

    /// Replaces a NodeClaim's conditions, guarded by the resourceVersion it was read at, so
    /// a condition another stage wrote meanwhile is never reverted from a stale copy. The
    /// claim as written (`None` when it is gone): a second write in the same round goes from
    /// it, not from the copy the first one made stale.
    ///
    /// # Errors
    /// The API error (409 when the claim changed meanwhile: retry on the next round); 404 is
    /// `Ok`.
    pub async fn patch_claim_conditions(
        &self,
        claim: &NodeClaim,
        conditions: &[Condition],
    ) -> Result<Option<NodeClaim>> {
        check(GROUP, "nodeclaims/status", "patch");
        let name = claim.name_any();
        let r = self
            .claims()
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": claim.resource_version()},
                    "status": {"conditions": conditions},
                })),
            )
            .await;
        match r {
            Ok(c) => Ok(Some(c)),
            Err(e) if is(&e, 404) => Ok(None),
            Err(e) => Err(Error::kube(
                format!("patching NodeClaim {name} conditions"),
                e,
            )),
        }
    }

    /// Writes (creating or replacing) the data of ConfigMap `name` in `namespace`, by
    /// server-side apply as field manager `gpu-autoscaler`.
    ///
    /// # Errors
    /// The API error.
    pub async fn apply_configmap(
        &self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<()> {
        check("", "configmaps", "patch");
        check("", "configmaps", "create");
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.client.clone(), namespace);
        api.patch(
            name,
            &PatchParams::apply("gpu-autoscaler").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": data,
            })),
        )
        .await
        .map(|_| ())
        .map_err(|e| Error::kube(format!("writing ConfigMap {namespace}/{name}"), e))
    }

    /// Replaces the finalizers of a NodeClaim, guarded by the resourceVersion it was read at.
    ///
    /// # Errors
    /// The API error (409 when the claim changed meanwhile: retry on the next round).
    pub async fn set_claim_finalizers(
        &self,
        claim: &NodeClaim,
        finalizers: &[String],
    ) -> Result<()> {
        self.patch_claim_metadata(claim, json!({"finalizers": finalizers}), "finalizers")
            .await
    }

    /// Sets annotation `key` of a NodeClaim to `value`, guarded by the resourceVersion it was
    /// read at, so that a value another writer put there meanwhile is not overwritten.
    ///
    /// # Errors
    /// The API error (409 when the claim changed meanwhile: retry on the next round); 404 is
    /// `Ok`.
    pub async fn annotate_claim(&self, claim: &NodeClaim, key: &str, value: &str) -> Result<()> {
        self.patch_claim_metadata(claim, json!({"annotations": {key: value}}), "annotations")
            .await
    }

    /// Merges `metadata` into a NodeClaim's metadata, guarded by the resourceVersion the claim
    /// was read at; `what` names the fields in the error.
    async fn patch_claim_metadata(
        &self,
        claim: &NodeClaim,
        mut metadata: Value,
        what: &str,
    ) -> Result<()> {
        check(GROUP, "nodeclaims", "patch");
        let name = claim.name_any();
        metadata["resourceVersion"] = json!(claim.resource_version());
        match self
            .claims()
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": metadata })),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is(&e, 404) => Ok(()),
            Err(e) => Err(Error::kube(format!("setting NodeClaim {name} {what}"), e)),
        }
    }

    /// Deletes a NodeClaim (its finalizer then terminates the instance).
    ///
    /// # Errors
    /// The API error; 404 is `Ok`.
    pub async fn delete_claim(&self, name: &str) -> Result<()> {
        check(GROUP, "nodeclaims", "delete");
        match self.claims().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is(&e, 404) => Ok(()),
            Err(e) => Err(Error::kube(format!("deleting NodeClaim {name}"), e)),
        }
    }

    /// Merge-patches a Node (labels, taints with resourceVersion, finalizers).
    ///
    /// # Errors
    /// The API error; 404 is `Ok`.
    pub async fn patch_node(&self, name: &str, patch: &Value) -> Result<()> {
        check("", "nodes", "patch");
        match self
            .nodes()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is(&e, 404) => Ok(()),
            Err(e) => Err(Error::kube(format!("patching Node {name}"), e)),
        }
    }

    /// Deletes a Node (its finalizer then terminates the instance).
    ///
    /// # Errors
    /// The API error; 404 is `Ok`.
    pub async fn delete_node(&self, name: &str) -> Result<()> {
        check("", "nodes", "delete");
        crashpoint::reached("node-delete");
        match self.nodes().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is(&e, 404) => Ok(()),
            Err(e) => Err(Error::kube(format!("deleting Node {name}"), e)),
        }
    }

    /// The pods bound to Node `name`, read from the API server itself (a consistent list, not
    /// the watch cache), so that a Node is never deleted on the word of a cache that lags.
    ///
    /// # Errors
    /// The API error.
    pub async fn pods_on_node(&self, name: &str) -> Result<Vec<Pod>> {
        check("", "pods", "list");
        let api: Api<Pod> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={name}"));
        api.list(&params)
            .await
            .map(|l| l.items)
            .map_err(|e| Error::kube(format!("listing the pods on Node {name}"), e))
    }

    /// Every VolumeAttachment, read from the API server itself (the API selects them by no
    /// field but their name), so that an instance is never terminated on the word of a cache
    /// that has not seen its attachments yet.
    ///
    /// # Errors
    /// The API error.
    pub async fn volume_attachments(
        &self,
    ) -> Result<Vec<k8s_openapi::api::storage::v1::VolumeAttachment>> {
        check("storage.k8s.io", "volumeattachments", "list");
        Api::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| Error::kube("listing VolumeAttachments".to_string(), e))
    }

    /// Evicts a pod through the Eviction API, once: a refusal (429, a PodDisruptionBudget
    /// or throttling; 500 for a pod several budgets select) is returned at once, for the
    /// caller to ask again later. With `uid`, only
    /// the pod of that UID: a pod created since under the same name (a StatefulSet's
    /// replacement, on another node) is not touched and counts as gone (409).
    ///
    /// # Errors
    /// Any API error other than 429, 404, 409 and the several-budgets 500.
    pub async fn evict(&self, pod: &PodKey, uid: Option<&str>) -> Result<Evicted> {
        check("", "pods/eviction", "create");
        crashpoint::reached("drain");
        let api: Api<Pod> = Api::namespaced(self.evictions.clone(), &pod.namespace);
        let params = EvictParams {
            delete_options: Some(DeleteParams {
                preconditions: uid.map(same_pod),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        };
        match api.evict(&pod.name, &params).await {
            Ok(_) => Ok(Evicted::Yes),
            Err(kube::Error::Api(s)) if s.code == 429 => Ok(Evicted::Refused(Refusal::of_429(&s))),
            Err(e) if multiple_budgets(&e) => Ok(Evicted::Refused(Refusal::MultipleBudgets)),
            Err(e) if is(&e, 404) || is(&e, 409) => Ok(Evicted::Gone),
            Err(e) => Err(Error::kube(format!("evicting pod {pod}"), e)),
        }
    }

    /// Deletes a pod with a grace period of `grace_s` seconds: no PodDisruptionBudget applies,
    /// unlike [`Self::evict`]. Whether the pod was there to delete. With `uid`, only the pod of
    /// that UID (another under the same name counts as not there).
    ///
    /// # Errors
    /// Any API error other than 404 and 409.
    pub async fn delete_pod(&self, pod: &PodKey, uid: Option<&str>, grace_s: i64) -> Result<bool> {
        check("", "pods", "delete");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace_s.max(0)).unwrap_or(u32::MAX)),
            preconditions: uid.map(same_pod),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name, &params).await {
            Ok(_) => Ok(true),
            Err(e) if is(&e, 404) || is(&e, 409) => Ok(false),
            Err(e) => Err(Error::kube(format!("deleting pod {pod}"), e)),
        }
    }

    /// Writes a NodePool's status.
    ///
    /// # Errors
    /// The API error; 404 is `Ok`.
    pub async fn patch_pool_status(&self, name: &str, status: &Value) -> Result<()> {
        check(GROUP, "nodepools/status", "patch");
        match Api::<NodePool>::all(self.client.clone())
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is(&e, 404) => Ok(()),
            Err(e) => Err(Error::kube(format!("patching NodePool {name} status"), e)),
        }
    }

    /// Merge-patches a ProvisioningRequest's status (conditions are written whole; a `null`
    /// detail removes it).
    ///
    /// # Errors
    /// The API error; 404 (request deleted) is `Ok`.
    pub async fn patch_provreq_status(&self, ns: &str, name: &str, status: &Value) -> Result<()> {
        check(
            "autoscaling.x-k8s.io",
            "provisioningrequests/status",
            "patch",
        );
        let r = Api::<super::provreq::ProvisioningRequest>::namespaced(self.client.clone(), ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await;
        gone_is_ok(r, || {
            format!("patching ProvisioningRequest {ns}/{name} status")
        })
    }

    /// Deletes a terminal ProvisioningRequest past its retention age.
    ///
    /// # Errors
    /// The API error; 404 is `Ok`.
    pub async fn delete_provreq(&self, ns: &str, name: &str) -> Result<()> {
        check("autoscaling.x-k8s.io", "provisioningrequests", "delete");
        let r = Api::<super::provreq::ProvisioningRequest>::namespaced(self.client.clone(), ns)
            .delete(name, &kube::api::DeleteParams::default())
            .await;
        gone_is_ok(r, || format!("deleting ProvisioningRequest {ns}/{name}"))
    }

    /// Publishes an event about `regarding`; failures are logged, never fatal.
    pub async fn event(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        check("events.k8s.io", "events", "create");
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, regarding).await {
            tracing::debug!(error = %e, reason, "publishing an event");
        }
    }
}

/// An object reference for events.
pub fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    obj.object_ref(&())
}

/// Labels as a JSON object, for patches.
pub fn labels_json(labels: &BTreeMap<String, String>) -> Value {
    json!(labels)
}

pub use super::keys::has_finalizer;

/// An object's finalizers with the controller's ([`keys::FINALIZER`]) added if missing: what
/// to write so that the controller's termination path holds it.
pub fn with_finalizer(finalizers: &[String]) -> Vec<String> {
    let mut f = finalizers.to_vec();
    if !f.iter().any(|x| x == keys::FINALIZER) {
        f.push(keys::FINALIZER.into());
    }
    f
}

/// An object's finalizers without the controller's ([`keys::FINALIZER`]): what to write to
/// release it.
pub fn without_finalizer(finalizers: &[String]) -> Vec<String> {
    finalizers
        .iter()
        .filter(|f| *f != keys::FINALIZER)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_named_before_its_create_as_generate_name_would_and_carries_a_token() {
        let mut claim = NodeClaim::new("", Default::default());
        claim.metadata.name = None;
        claim.metadata.generate_name = Some("gpu-".into());
        let (a, token_a) = named_claim(&claim);
        let (b, token_b) = named_claim(&claim);
        for (named, token) in [(&a, &token_a), (&b, &token_b)] {
            let name = named.name_any();
            let suffix = name.strip_prefix("gpu-").expect("the prefix");
            assert_eq!(suffix.len(), 5, "{name}");
            assert!(
                suffix
                    .bytes()
                    .all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c))
            );
            assert_eq!(named.metadata.generate_name, None);
            assert_eq!(
                named.annotations().get(keys::CREATE_TOKEN_ANNOTATION),
                Some(token)
            );
            assert_eq!(token.len(), 16);
        }
        // Each create has its own token (and, but for a one-in-14-million chance, name).
        assert_ne!(token_a, token_b);
        // A claim named by its caller keeps its name.
        claim.metadata.name = Some("fixed".into());
        assert_eq!(named_claim(&claim).0.name_any(), "fixed");
    }

    #[test]
    fn conditions_keep_their_transition_time_and_follow_the_generation() {
        let t0 = jiff::Timestamp::from_second(1_000).unwrap();
        let t1 = jiff::Timestamp::from_second(2_000).unwrap();
        let mut conds = Vec::new();
        set_condition(&mut conds, ("Ready", false), "NotYet", "wait", t0, Some(1));
        set_condition(
            &mut conds,
            ("Ready", false),
            "StillNot",
            "more",
            t1,
            Some(2),
        );
        assert_eq!(conds.len(), 1);
        let c = &conds[0];
        // Same status: the transition is still the first one; reason and generation move on.
        assert_eq!(c.last_transition_time, Time(t0));
        assert_eq!(
            (c.reason.as_str(), c.observed_generation),
            ("StillNot", Some(2))
        );
        set_condition(&mut conds, ("Ready", true), "Done", "", t1, Some(3));
        assert_eq!(conds[0].last_transition_time, Time(t1));
        assert_eq!(conds[0].observed_generation, Some(3));
    }

    #[test]
    fn a_429_is_a_budget_refusal_only_with_a_disruption_budget_cause() {
        let status = |causes: serde_json::Value| -> kube::core::Status {
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": 429, "reason": "TooManyRequests",
                "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                "details": {"causes": causes}
            }))
            .unwrap()
        };
        let budget = status(serde_json::json!([{"reason": "DisruptionBudget",
            "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]));
        assert_eq!(
            Refusal::of_429(&budget),
            Refusal::Budget(
                "The disruption budget web needs 2 healthy pods and has 2 currently".into()
            )
        );
        assert_eq!(
            Refusal::of_429(&status(serde_json::json!([]))),
            Refusal::Throttled
        );
        let worded = status(serde_json::json!([{"reason": "DisruptionBudget"}]));
        assert!(
            matches!(Refusal::of_429(&worded), Refusal::Budget(m) if m.contains("disruption budget"))
        );
    }
}
