//! The compact form pods are cached in.
//!
//! A `k8s_openapi` `Pod` is over 2 KiB before any of its strings, and a cluster may hold
//! 150,000 of them. The pod reflector therefore deserializes each pod straight into a
//! [`CachedPod`] (`#[serde(from = "Pod")]`): the pod is translated into the core's vocabulary
//! once, when it arrives, and only that translation plus the handful of facts the loop reads
//! (binding, phase, scheduling condition, readiness) are kept. Planning rounds then clone
//! translated pods instead of parsing objects.

use std::borrow::Cow;

use autoscaler_core::model::{Pod as CorePod, PodKey};
use autoscaler_core::resources::Resources;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::translate::{self, TranslateError};

/// A pod as the controller caches it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "PodWire")]
pub struct CachedPod {
    /// Name, namespace, uid, resourceVersion, creation and deletion timestamps only (labels
    /// and annotations live in [`Self::core`]).
    pub metadata: ObjectMeta,
    /// `namespace/name`.
    pub key: PodKey,
    /// The node it is bound to.
    pub node_name: Option<String>,
    /// Not finished (phase neither Succeeded nor Failed).
    pub active: bool,
    /// `PodScheduled=False, reason=Unschedulable`, unbound, not deleting, not finished.
    pub unschedulable: bool,
    /// When it became unschedulable, milliseconds since the epoch.
    pub unschedulable_since_ms: Option<i64>,
    /// `Ready=True`.
    pub ready: bool,
    /// Its gang, if any.
    pub group: Option<super::gangs::Gang>,
    /// The translation, or why it failed.
    pub core: Result<CorePod, TranslateError>,
}

/// A pod as it comes over the wire: the typed `Pod` plus `spec.schedulingGroup`, which is
/// newer than the API types this project builds with.
#[derive(Deserialize)]
struct PodWire {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SpecWire>,
    #[serde(default)]
    status: Option<k8s_openapi::api::core::v1::PodStatus>,
}

#[derive(Deserialize)]
struct SpecWire {
    #[serde(flatten)]
    spec: k8s_openapi::api::core::v1::PodSpec,
    #[serde(default, rename = "schedulingGroup")]
    scheduling_group: Option<SchedulingGroupWire>,
}

#[derive(Deserialize)]
struct SchedulingGroupWire {
    #[serde(default, rename = "podGroupName")]
    pod_group_name: Option<String>,
}

impl From<PodWire> for CachedPod {
    fn from(w: PodWire) -> Self {
        let (spec, group_name) = match w.spec {
            Some(s) => (
                Some(s.spec),
                s.scheduling_group.and_then(|g| g.pod_group_name),
            ),
            None => (None, None),
        };
        let pod = Pod {
            metadata: w.metadata,
            spec,
            status: w.status,
        };
        CachedPod::new(pod, group_name.as_deref())
    }
}

impl From<Pod> for CachedPod {
    fn from(p: Pod) -> Self {
        CachedPod::new(p, None)
    }
}

impl CachedPod {
    /// Caches `p`, whose `spec.schedulingGroup.podGroupName` is `scheduling_group`.
    pub fn new(p: Pod, scheduling_group: Option<&str>) -> Self {
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        let unschedulable_since_ms = conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_millisecond());
        let ready = conditions
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let gang = super::gangs::gang_of(&p, scheduling_group);
        CachedPod {
            key: translate::pod_key(&p),
            node_name: translate::node_name(&p).map(str::to_string),
            active: translate::is_active(&p),
            unschedulable: translate::is_unschedulable(&p),
            unschedulable_since_ms,
            ready,
            group: gang.clone(),
            core: translate::pod(&p).map(|mut c| {
                c.group = gang.map(|g| g.id);
                c
            }),
            metadata: ObjectMeta {
                name: p.metadata.name,
                namespace: p.metadata.namespace,
                uid: p.metadata.uid,
                resource_version: p.metadata.resource_version,
                creation_timestamp: p.metadata.creation_timestamp,
                deletion_timestamp: p.metadata.deletion_timestamp,
                ..Default::default()
            },
        }
    }
}

impl CachedPod {
    /// Whether the pod is a DaemonSet or mirror pod (it does not move when its node goes).
    pub fn stays_with_node(&self) -> bool {
        self.core
            .as_ref()
            .is_ok_and(|c| c.is_daemonset() || c.mirror)
    }

    /// Its effective requests (empty when it did not translate).
    pub fn requests(&self) -> Resources {
        self.core
            .as_ref()
            .map(|c| c.requests.clone())
            .unwrap_or_default()
    }
}

impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn deserializes_straight_into_the_compact_form() {
        let v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "cuda", "env": [{"name": "A", "value": "1"}],
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        });
        let c: CachedPod = serde_json::from_value(v.clone()).unwrap();
        let p: Pod = serde_json::from_value(v).unwrap();
        assert_eq!(c.core, translate::pod(&p));
        assert!(c.unschedulable);
        assert_eq!(c.unschedulable_since_ms, Some(1_767_225_600_000));
        assert_eq!(c.key.to_string(), "ml/p");
        assert_eq!(c.metadata.resource_version.as_deref(), Some("7"));
        assert!(c.metadata.labels.is_none());
        assert_eq!(
            kube::Resource::object_ref(&c, &()).kind.as_deref(),
            Some("Pod")
        );
    }
}
