//! Which VolumeAttachments hold a drained node's instance, read as Karpenter reads them
//! (`pkg/controllers/node/termination/controller.go`, `awaitVolumeDetachment` and
//! `filterVolumeAttachments`).
//!
//! Terminating an instance while a volume is still attached to it leaves the volume to the
//! cloud's forced detach, which can take minutes, and the pod moved elsewhere
//! cannot attach it meanwhile. So once a node is drained its instance waits until the
//! attach-detach controller has removed the VolumeAttachments of its drained pods' volumes.
//! Two kinds never hold it: an attachment of an inline volume (no PersistentVolume named: it
//! goes with its pod, which is gone), and one of a volume a pod not drained uses (a mirror
//! pod, a pod tolerating the disruption taint: its volume stays attached until the
//! instance goes; a pod stuck terminating, a minute past its grace period: its kubelet is
//! likely gone, and its volume would detach only once the Node is gone, which this wait
//! holds). A NodeClaim's `terminationGracePeriod` bounds the wait, as it bounds the drain.

use std::collections::{BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttachment;

/// The names of the VolumeAttachments on node `node` its instance waits for, sorted: every
/// attachment whose `spec.nodeName` is `node` and whose source names a PersistentVolume
/// outside `kept` (the volumes of the pods staying on the node, [`kept_volumes`]). An
/// attachment being deleted still holds the instance: its finalizer goes only once the
/// volume is detached.
pub fn blocking<'a>(
    attachments: impl IntoIterator<Item = &'a VolumeAttachment>,
    node: &str,
    kept: &HashSet<String>,
) -> Vec<String> {
    let names: BTreeSet<String> = attachments
        .into_iter()
        .filter(|a| a.spec.node_name == node)
        .filter(|a| {
            a.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !kept.contains(pv))
        })
        .filter_map(|a| a.metadata.name.clone())
        .collect();
    names.into_iter().collect()
}

/// The PersistentVolumes bound to the claims `claims` (namespace and claim name) of the pods
/// staying on a node: a claim not found or not bound names none.
pub fn kept_volumes<'a>(
    claims: impl IntoIterator<Item = (&'a str, &'a str)>,
    volume_claims: &HashMap<(String, String), &PersistentVolumeClaim>,
) -> HashSet<String> {
    claims
        .into_iter()
        .filter_map(|(ns, name)| {
            let c = volume_claims.get(&(ns.to_string(), name.to_string()))?;
            c.spec.as_ref()?.volume_name.clone()
        })
        .filter(|v| !v.is_empty())
        .collect()
}

/// What the instance's wait for its volumes says, once the node is drained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detach {
    /// No attachment holds the instance: terminate it.
    Detached,
    /// The attachments named hold the instance: wait.
    Awaiting(Vec<String>),
    /// Attachments remain but the `terminationGracePeriod` ran out: terminate it regardless.
    GracePeriodElapsed(Vec<String>),
}

impl Detach {
    /// The verdict on `blocking` attachments, `overdue` when the node's drain deadline has
    /// passed.
    pub fn of(blocking: Vec<String>, overdue: bool) -> Detach {
        match (blocking.is_empty(), overdue) {
            (true, _) => Detach::Detached,
            (false, false) => Detach::Awaiting(blocking),
            (false, true) => Detach::GracePeriodElapsed(blocking),
        }
    }

    /// The NodeClaim condition it reads as: status, reason and message (the same for every
    /// set of attachments, so that each detaching does not rewrite it; [`Detach::describe`]
    /// names them).
    pub fn condition(&self) -> (&'static str, &'static str, &'static str) {
        use nodepools::conditions::reasons;
        match self {
            Detach::Detached => (
                "True",
                reasons::SUCCEEDED,
                "no VolumeAttachment of a drained pod's volume remains",
            ),
            Detach::Awaiting(_) => (
                "Unknown",
                reasons::AWAITING_VOLUME_DETACHMENT,
                "the instance is terminated once the VolumeAttachments of its drained pods' volumes are gone (the node's events name them)",
            ),
            Detach::GracePeriodElapsed(_) => (
                "False",
                reasons::TERMINATION_GRACE_PERIOD_ELAPSED,
                "the terminationGracePeriod ran out before the VolumeAttachments of its drained pods' volumes were gone",
            ),
        }
    }

    /// What it says in the log and in the Node's event, naming the attachments.
    pub fn describe(&self) -> String {
        match self {
            Detach::Detached => self.condition().2.to_string(),
            Detach::Awaiting(names) => format!(
                "the instance is terminated once these VolumeAttachments are gone: {}",
                listed(names)
            ),
            Detach::GracePeriodElapsed(names) => format!(
                "the terminationGracePeriod ran out with VolumeAttachments left: {}",
                listed(names)
            ),
        }
    }

    /// Whether the instance waits.
    pub fn waits(&self) -> bool {
        matches!(self, Detach::Awaiting(_))
    }
}

/// At most the first few `names`, then how many more
/// ([`autoscaler_core::explain::names`]).
fn listed(names: &[String]) -> String {
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    autoscaler_core::explain::names(&names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attachment(name: &str, node: &str, pv: Option<&str>) -> VolumeAttachment {
        let source = match pv {
            Some(pv) => json!({"persistentVolumeName": pv}),
            None => {
                json!({"inlineVolumeSpec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}})
            }
        };
        serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source}
        }))
        .expect("a VolumeAttachment")
    }

    fn claim(ns: &str, name: &str, pv: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"volumeName": pv}
        }))
        .expect("a PersistentVolumeClaim")
    }

    #[test]
    fn only_the_nodes_attachments_of_persistent_volumes_not_kept_hold_it() {
        let all = [
            attachment("va-b", "n1", Some("pv-b")),
            attachment("va-a", "n1", Some("pv-a")),
            attachment("va-other-node", "n2", Some("pv-c")),
            attachment("va-inline", "n1", None),
            attachment("va-daemon", "n1", Some("pv-daemon")),
        ];
        let kept = HashSet::from(["pv-daemon".to_string()]);
        assert_eq!(blocking(&all, "n1", &kept), ["va-a", "va-b"]);
        assert_eq!(blocking(&all, "n3", &kept), Vec::<String>::new());
    }

    #[test]
    fn kept_volumes_are_those_bound_to_the_staying_pods_claims() {
        let claims = [
            claim("kube-system", "logs", Some("pv-logs")),
            claim("default", "logs", Some("pv-other")),
            claim("kube-system", "unbound", None),
        ];
        let index: HashMap<(String, String), &PersistentVolumeClaim> = claims
            .iter()
            .map(|c| {
                let ns = c.metadata.namespace.clone().unwrap_or_default();
                ((ns, c.metadata.name.clone().unwrap_or_default()), c)
            })
            .collect();
        let kept = kept_volumes(
            [
                ("kube-system", "logs"),
                ("kube-system", "unbound"),
                ("kube-system", "missing"),
            ],
            &index,
        );
        assert_eq!(kept, HashSet::from(["pv-logs".to_string()]));
    }

    #[test]
    fn the_verdict_waits_only_before_the_deadline() {
        let names = vec!["va-a".to_string()];
        assert_eq!(Detach::of(vec![], false), Detach::Detached);
        assert_eq!(Detach::of(vec![], true), Detach::Detached);
        assert!(Detach::of(names.clone(), false).waits());
        let late = Detach::of(names, true);
        assert!(!late.waits());
        let (status, reason, _) = late.condition();
        assert_eq!((status, reason), ("False", "TerminationGracePeriodElapsed"));
        assert!(late.describe().contains("va-a"), "{}", late.describe());
        let many: Vec<String> = (0..12).map(|i| format!("va-{i:02}")).collect();
        let waiting = Detach::of(many, false);
        let (status, reason, fixed) = waiting.condition();
        assert_eq!((status, reason), ("Unknown", "AwaitingVolumeDetachment"));
        assert!(!fixed.contains("va-"), "the condition names none: {fixed}");
        let message = waiting.describe();
        assert!(
            message.ends_with("va-07 and 4 more"),
            "eight named, the rest counted: {message}"
        );
    }
}
