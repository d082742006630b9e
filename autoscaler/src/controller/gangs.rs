//! Gang membership: which all-or-nothing group a pod belongs to, read the way each gang
//! scheduler marks its pods.
//!
//! - this project's own annotations [`POD_GROUP_ANNOTATION`] and [`POD_GROUP_MIN_ANNOTATION`];
//! - Volcano: `scheduling.k8s.io/group-name` (or `scheduling.volcano.sh/group-name`) names a
//!   `PodGroup` (`scheduling.volcano.sh/v1beta1`) in the pod's namespace whose `spec.minMember`
//!   is the minimum ([`VolcanoPodGroup`]; when it is not known, every pending member counts);
//! - Kubernetes' own PodGroup (`scheduling.k8s.io/v1alpha2`, GenericWorkload feature): the
//!   pod's `spec.schedulingGroup.podGroupName` names a [`SchedulingPodGroup`] in its namespace;
//!   a `gang` policy's `minCount` is the minimum, a `basic` policy is no gang at all;
//! - YuniKorn: `yunikorn.apache.org/task-group-name` names one of the task groups listed (JSON)
//!   in `yunikorn.apache.org/task-groups`, whose `minMember` is the minimum; the group is scoped
//!   by the application id (label `applicationId` or `yunikorn.apache.org/app-id`).
//!
//! Group ids carry the scheduler and the namespace, so gangs of different schedulers or
//! namespaces never merge.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Pod annotation: the all-or-nothing group the pod belongs to (this project's own).
pub const POD_GROUP_ANNOTATION: &str = "gpu-autoscaler.dev/pod-group";
/// Pod annotation: how many members of that group must get capacity together.
pub const POD_GROUP_MIN_ANNOTATION: &str = "gpu-autoscaler.dev/pod-group-min-count";
/// Volcano's pod annotation naming its PodGroup.
pub const VOLCANO_GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// The same, under Volcano's own prefix.
pub const VOLCANO_GROUP_ANNOTATION_ALT: &str = "scheduling.volcano.sh/group-name";
/// YuniKorn's pod annotation naming the pod's task group.
pub const YUNIKORN_TASK_GROUP_NAME: &str = "yunikorn.apache.org/task-group-name";
/// YuniKorn's pod annotation listing the application's task groups (JSON).
pub const YUNIKORN_TASK_GROUPS: &str = "yunikorn.apache.org/task-groups";

/// Volcano's PodGroup, reduced to what gang planning reads.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
    kind = "PodGroup",
    root = "VolcanoPodGroup",
    plural = "podgroups",
    namespaced,
    schema = "disabled",
    doc = "Volcano's PodGroup (only spec.minMember is read)."
)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupSpec {
    /// Members that must be scheduled together.
    #[serde(default)]
    pub min_member: Option<i32>,
}

/// Kubernetes' PodGroup (`scheduling.k8s.io/v1alpha2`), reduced to its scheduling policy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "scheduling.k8s.io",
    version = "v1alpha2",
    kind = "PodGroup",
    root = "SchedulingPodGroup",
    plural = "podgroups",
    namespaced,
    schema = "disabled",
    doc = "Kubernetes' PodGroup (only spec.schedulingPolicy is read)."
)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPodGroupSpec {
    /// Exactly one of `basic` or `gang`.
    #[serde(default)]
    pub scheduling_policy: SchedulingPolicy,
}

/// A PodGroup's scheduling policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulingPolicy {
    /// All-or-nothing.
    #[serde(default)]
    pub gang: Option<GangPolicy>,
}

/// The gang policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangPolicy {
    /// Pods that must be schedulable together.
    #[serde(default)]
    pub min_count: Option<i32>,
}

/// What the gang objects in the cluster say, for the snapshot builder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangObjects {
    /// Volcano PodGroups by `namespace/name`: `Some(minMember)`, or `None` when it states none
    /// usable.
    pub volcano: BTreeMap<String, Option<u32>>,
    /// Kubernetes PodGroups by `namespace/name`: `Some(minCount)` for a gang, `None` for the
    /// basic policy (no gang).
    pub k8s: BTreeMap<String, Option<u32>>,
    /// Whether the cluster serves Volcano's PodGroups (then `volcano` lists all of them).
    pub volcano_served: bool,
    /// Whether the cluster serves Kubernetes' PodGroups (then `k8s` lists all of them).
    pub k8s_served: bool,
}

/// A gang's minimum as the cluster's objects state it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Minimum {
    /// This many members must get capacity together.
    Known(u32),
    /// Not stated: every pending member counts.
    Unknown,
    /// A Kubernetes PodGroup with the basic policy: scheduled pod by pod.
    NotAGang,
    /// The PodGroup the pod names does not exist (though its API is served): its gang
    /// scheduler binds none of the pods until it does, so none is planned. Says which.
    Missing(String),
}

impl GangObjects {
    /// The minimum of `g`. When a PodGroup's API is not served its objects are unknown, so a
    /// pod naming one counts as [`Minimum::Unknown`], not missing: nothing then enforces the
    /// gang, and planning every pending member together is the strictest safe reading.
    pub fn minimum(&self, g: &Gang) -> Minimum {
        if let Some(m) = g.min {
            return Minimum::Known(m);
        }
        if let Some(v) = &g.volcano {
            return match self.volcano.get(v) {
                Some(Some(m)) => Minimum::Known(*m),
                Some(None) => Minimum::Unknown,
                None if self.volcano_served => {
                    Minimum::Missing(format!("Volcano PodGroup {v} does not exist yet"))
                }
                None => Minimum::Unknown,
            };
        }
        if let Some(k) = &g.k8s {
            return match self.k8s.get(k) {
                Some(Some(m)) => Minimum::Known(*m),
                Some(None) => Minimum::NotAGang,
                None if self.k8s_served => Minimum::Missing(format!(
                    "PodGroup {k} (scheduling.k8s.io) does not exist yet"
                )),
                None => Minimum::Unknown,
            };
        }
        Minimum::Unknown
    }
}

/// Kubernetes PodGroups' policies by `namespace/name`.
pub fn k8s_policies<'a>(
    groups: impl IntoIterator<Item = &'a SchedulingPodGroup>,
) -> BTreeMap<String, Option<u32>> {
    groups
        .into_iter()
        .filter_map(|g| {
            let ns = g.metadata.namespace.as_deref()?;
            let name = g.metadata.name.as_deref()?;
            let min = g.spec.scheduling_policy.gang.as_ref().map(|gang| {
                gang.min_count
                    .and_then(|m| u32::try_from(m).ok())
                    .filter(|m| *m > 0)
                    .unwrap_or(1)
            });
            Some((format!("{ns}/{name}"), min))
        })
        .collect()
}

/// A pod's gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gang {
    /// Group id as the planner sees it.
    pub id: String,
    /// The minimum member count the pod itself declares; `None` when it comes from a
    /// Volcano PodGroup object or is not stated (then every pending member counts).
    pub min: Option<u32>,
    /// For Volcano: the PodGroup's `namespace/name`, to look its minimum up.
    pub volcano: Option<String>,
    /// For Kubernetes' PodGroup: its `namespace/name`, to look its policy up.
    pub k8s: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskGroup {
    name: String,
    #[serde(default)]
    min_member: Option<i64>,
}

/// The gang a pod belongs to, if any; `scheduling_group` is the pod's
/// `spec.schedulingGroup.podGroupName` (a field newer than the API types this project builds
/// with, so the caller reads it from the wire). Malformed minimums are ignored (every pending
/// member then counts), never an error: a gang is a scheduling hint, and the strictest reading
/// is safe.
pub fn gang_of(p: &Pod, scheduling_group: Option<&str>) -> Option<Gang> {
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(name) = scheduling_group.filter(|n| !n.is_empty()) {
        return Some(Gang {
            id: format!("k8s:{ns}/{name}"),
            min: None,
            volcano: None,
            k8s: Some(format!("{ns}/{name}")),
        });
    }
    let ann = p.metadata.annotations.as_ref()?;
    if let Some(name) = ann.get(POD_GROUP_ANNOTATION) {
        let min = ann
            .get(POD_GROUP_MIN_ANNOTATION)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|m| *m > 0);
        return Some(Gang {
            id: name.clone(),
            min,
            volcano: None,
            k8s: None,
        });
    }
    if let Some(name) = ann
        .get(VOLCANO_GROUP_ANNOTATION)
        .or_else(|| ann.get(VOLCANO_GROUP_ANNOTATION_ALT))
    {
        return Some(Gang {
            id: format!("volcano:{ns}/{name}"),
            min: None,
            volcano: Some(format!("{ns}/{name}")),
            k8s: None,
        });
    }
    if let Some(task_group) = ann.get(YUNIKORN_TASK_GROUP_NAME) {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        let app = labels
            .get("applicationId")
            .or_else(|| labels.get("yunikorn.apache.org/app-id"))
            .or_else(|| ann.get("yunikorn.apache.org/app-id"))
            .map_or("-", String::as_str);
        let min = ann
            .get(YUNIKORN_TASK_GROUPS)
            .and_then(|j| serde_json::from_str::<Vec<TaskGroup>>(j).ok())
            .and_then(|groups| groups.into_iter().find(|g| &g.name == task_group))
            .and_then(|g| g.min_member)
            .and_then(|m| u32::try_from(m).ok())
            .filter(|m| *m > 0);
        return Some(Gang {
            id: format!("yunikorn:{ns}/{app}/{task_group}"),
            min,
            volcano: None,
            k8s: None,
        });
    }
    None
}

/// Volcano PodGroups' minimum member counts by `namespace/name` (`None`: none usable).
pub fn volcano_minimums<'a>(
    groups: impl IntoIterator<Item = &'a VolcanoPodGroup>,
) -> BTreeMap<String, Option<u32>> {
    groups
        .into_iter()
        .filter_map(|g| {
            let ns = g.metadata.namespace.as_deref()?;
            let name = g.metadata.name.as_deref()?;
            let min = g
                .spec
                .min_member
                .and_then(|m| u32::try_from(m).ok())
                .filter(|m| *m > 0);
            Some((format!("{ns}/{name}"), min))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gang_of_(p: &Pod) -> Option<Gang> {
        gang_of(p, None)
    }

    fn pod(annotations: serde_json::Value, labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "annotations": annotations, "labels": labels}
        }))
        .unwrap()
    }

    #[test]
    fn own_annotations_with_and_without_a_minimum() {
        let g = gang_of_(&pod(
            json!({POD_GROUP_ANNOTATION: "job", POD_GROUP_MIN_ANNOTATION: "3"}),
            json!({}),
        ))
        .unwrap();
        assert_eq!((g.id.as_str(), g.min), ("job", Some(3)));
        let g = gang_of_(&pod(
            json!({POD_GROUP_ANNOTATION: "job", POD_GROUP_MIN_ANNOTATION: "x"}),
            json!({}),
        ))
        .unwrap();
        assert_eq!(g.min, None, "a malformed minimum means every member");
    }

    #[test]
    fn volcano_group_names_its_podgroup() {
        for key in [VOLCANO_GROUP_ANNOTATION, VOLCANO_GROUP_ANNOTATION_ALT] {
            let g = gang_of_(&pod(json!({key: "pg"}), json!({}))).unwrap();
            assert_eq!(g.id, "volcano:ml/pg");
            assert_eq!(g.volcano.as_deref(), Some("ml/pg"));
            assert_eq!(g.min, None);
        }
        let pg: VolcanoPodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"}, "spec": {"minMember": 8}
        }))
        .unwrap();
        assert_eq!(volcano_minimums([&pg]).get("ml/pg"), Some(&Some(8)));
        let g = gang_of_(&pod(json!({VOLCANO_GROUP_ANNOTATION: "pg"}), json!({}))).unwrap();
        let objects = GangObjects {
            volcano: volcano_minimums([&pg]),
            ..Default::default()
        };
        assert_eq!(objects.minimum(&g), Minimum::Known(8));
        // A pod naming a PodGroup not created yet waits for it when the API is served.
        let later = gang_of_(&pod(json!({VOLCANO_GROUP_ANNOTATION: "later"}), json!({}))).unwrap();
        assert_eq!(objects.minimum(&later), Minimum::Unknown);
        let served = GangObjects {
            volcano_served: true,
            ..objects
        };
        assert_eq!(
            served.minimum(&later),
            Minimum::Missing("Volcano PodGroup ml/later does not exist yet".into())
        );
    }

    #[test]
    fn yunikorn_task_group_minimum_from_the_task_groups_list() {
        let groups = r#"[{"name":"driver","minMember":1},{"name":"workers","minMember":4,"minResource":{"nvidia.com/gpu":"8"}}]"#;
        let g = gang_of_(&pod(
            json!({YUNIKORN_TASK_GROUP_NAME: "workers", YUNIKORN_TASK_GROUPS: groups}),
            json!({"applicationId": "app-1"}),
        ))
        .unwrap();
        assert_eq!(g.id, "yunikorn:ml/app-1/workers");
        assert_eq!(g.min, Some(4));
        let g = gang_of_(&pod(
            json!({YUNIKORN_TASK_GROUP_NAME: "workers", YUNIKORN_TASK_GROUPS: "not json"}),
            json!({}),
        ))
        .unwrap();
        assert_eq!(g.min, None);
    }

    #[test]
    fn kubernetes_podgroup_policy_decides_gang_or_not() {
        let p = pod(json!({}), json!({}));
        let g = gang_of(&p, Some("workers")).unwrap();
        assert_eq!(g.id, "k8s:ml/workers");
        let groups: Vec<SchedulingPodGroup> = [
            json!({"metadata": {"name": "workers", "namespace": "ml"},
                   "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}),
            json!({"metadata": {"name": "web", "namespace": "ml"},
                   "spec": {"schedulingPolicy": {"basic": {}}}}),
        ]
        .into_iter()
        .map(|mut v| {
            v["apiVersion"] = json!("scheduling.k8s.io/v1alpha2");
            v["kind"] = json!("PodGroup");
            serde_json::from_value(v).unwrap()
        })
        .collect();
        let objects = GangObjects {
            k8s: k8s_policies(&groups),
            ..Default::default()
        };
        assert_eq!(objects.minimum(&g), Minimum::Known(4));
        let basic = gang_of(&p, Some("web")).unwrap();
        assert_eq!(objects.minimum(&basic), Minimum::NotAGang);
        let unknown = gang_of(&p, Some("later")).unwrap();
        assert_eq!(objects.minimum(&unknown), Minimum::Unknown);
        let served = GangObjects {
            k8s_served: true,
            ..objects
        };
        assert!(matches!(served.minimum(&unknown), Minimum::Missing(_)));
    }

    #[test]
    fn pods_without_gang_annotations_have_no_gang() {
        assert_eq!(gang_of_(&pod(json!({"x": "y"}), json!({}))), None);
    }
}
