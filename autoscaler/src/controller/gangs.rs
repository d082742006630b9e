//! Gang membership: which all-or-nothing group a pod belongs to, read the way each gang
//! scheduler marks its pods.
//!
//! - this project's own annotations [`POD_GROUP_ANNOTATION`] and [`POD_GROUP_MIN_ANNOTATION`];
//! - Volcano: `scheduling.k8s.io/group-name` (or `scheduling.volcano.sh/group-name`) names a
//!   `PodGroup` (`scheduling.volcano.sh/v1beta1`) in the pod's namespace whose `spec.minMember`
//!   is the minimum ([`VolcanoPodGroup`]; when it is not known, every pending member counts);
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
    kind = "VolcanoPodGroup",
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
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskGroup {
    name: String,
    #[serde(default)]
    min_member: Option<i64>,
}

/// The gang a pod belongs to, if any. Malformed minimums are ignored (every pending member
/// then counts), never an error: a gang is a scheduling hint, and the strictest reading is safe.
pub fn gang_of(p: &Pod) -> Option<Gang> {
    let ann = p.metadata.annotations.as_ref()?;
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(name) = ann.get(POD_GROUP_ANNOTATION) {
        let min = ann
            .get(POD_GROUP_MIN_ANNOTATION)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|m| *m > 0);
        return Some(Gang {
            id: name.clone(),
            min,
            volcano: None,
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
        });
    }
    None
}

/// Minimum member counts of Volcano PodGroups by `namespace/name`.
pub fn volcano_minimums<'a>(
    groups: impl IntoIterator<Item = &'a VolcanoPodGroup>,
) -> BTreeMap<String, u32> {
    groups
        .into_iter()
        .filter_map(|g| {
            let ns = g.metadata.namespace.as_deref()?;
            let name = g.metadata.name.as_deref()?;
            let min = u32::try_from(g.spec.min_member?).ok().filter(|m| *m > 0)?;
            Some((format!("{ns}/{name}"), min))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "annotations": annotations, "labels": labels}
        }))
        .unwrap()
    }

    #[test]
    fn own_annotations_with_and_without_a_minimum() {
        let g = gang_of(&pod(
            json!({POD_GROUP_ANNOTATION: "job", POD_GROUP_MIN_ANNOTATION: "3"}),
            json!({}),
        ))
        .unwrap();
        assert_eq!((g.id.as_str(), g.min), ("job", Some(3)));
        let g = gang_of(&pod(
            json!({POD_GROUP_ANNOTATION: "job", POD_GROUP_MIN_ANNOTATION: "x"}),
            json!({}),
        ))
        .unwrap();
        assert_eq!(g.min, None, "a malformed minimum means every member");
    }

    #[test]
    fn volcano_group_names_its_podgroup() {
        for key in [VOLCANO_GROUP_ANNOTATION, VOLCANO_GROUP_ANNOTATION_ALT] {
            let g = gang_of(&pod(json!({key: "pg"}), json!({}))).unwrap();
            assert_eq!(g.id, "volcano:ml/pg");
            assert_eq!(g.volcano.as_deref(), Some("ml/pg"));
            assert_eq!(g.min, None);
        }
        let pg: VolcanoPodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"}, "spec": {"minMember": 8}
        }))
        .unwrap();
        assert_eq!(volcano_minimums([&pg]).get("ml/pg"), Some(&8));
    }

    #[test]
    fn yunikorn_task_group_minimum_from_the_task_groups_list() {
        let groups = r#"[{"name":"driver","minMember":1},{"name":"workers","minMember":4,"minResource":{"nvidia.com/gpu":"8"}}]"#;
        let g = gang_of(&pod(
            json!({YUNIKORN_TASK_GROUP_NAME: "workers", YUNIKORN_TASK_GROUPS: groups}),
            json!({"applicationId": "app-1"}),
        ))
        .unwrap();
        assert_eq!(g.id, "yunikorn:ml/app-1/workers");
        assert_eq!(g.min, Some(4));
        let g = gang_of(&pod(
            json!({YUNIKORN_TASK_GROUP_NAME: "workers", YUNIKORN_TASK_GROUPS: "not json"}),
            json!({}),
        ))
        .unwrap();
        assert_eq!(g.min, None);
    }

    #[test]
    fn pods_without_gang_annotations_have_no_gang() {
        assert_eq!(gang_of(&pod(json!({"x": "y"}), json!({}))), None);
    }
}
