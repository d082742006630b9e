//! All-or-nothing binding of pod groups, as the coscheduling plugin (scheduler-plugins) or
//! Volcano's gang scheduling would: a group's pending members are bound in one pass only when
//! every one of them fits at once and the group then has at least its minimum bound; otherwise
//! none is, and each is marked unschedulable. Groups are the project's pod annotations
//! (`gpu-autoscaler.dev/pod-group`, `gpu-autoscaler.dev/pod-group-min-count`, default: every
//! member); a group's key is namespace and name.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{BinderOptions, NodeView, candidates, misfit, shares::Memory};

/// Pod annotation naming the pod's all-or-nothing group.
const POD_GROUP: &str = "gpu-autoscaler.dev/pod-group";
/// Pod annotation: how many of the group's members must run together.
const POD_GROUP_MIN: &str = "gpu-autoscaler.dev/pod-group-min-count";

/// The pod's group (`namespace/name`) and its minimum count (0 when not given: every member
/// pending now).
pub(super) fn group_of(p: &Value) -> Option<(String, usize)> {
    let a = p.pointer("/metadata/annotations")?;
    let name = a.get(POD_GROUP)?.as_str().filter(|s| !s.is_empty())?;
    let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
    let min = a
        .get(POD_GROUP_MIN)
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Some((format!("{ns}/{name}"), min))
}

/// Each group's pending members this pass (in binding order) and its minimum count (the
/// largest any member gives).
pub(super) fn pending_members(
    pending: &[std::sync::Arc<Value>],
) -> BTreeMap<String, (usize, Vec<&Value>)> {
    let mut members: BTreeMap<String, (usize, Vec<&Value>)> = BTreeMap::new();
    for p in pending {
        if let Some((g, min)) = group_of(p) {
            let e = members.entry(g).or_default();
            e.0 = e.0.max(min);
            e.1.push(p.as_ref());
        }
    }
    members
}

/// Whether group `g`'s pending members `pods` wait this pass: `Some` with the message for
/// their `PodScheduled=False` condition, `None` when all of them fit at once and the group
/// then has at least `min` members bound (`already` are bound now). The trial runs on a copy
/// of `views` as they are at the group's turn in the pass (the pods bound before it took
/// their room), with the same node choice as the pass (DRA claims are not tried here: the
/// pass checks them per pod).
pub(super) fn held(
    g: &str,
    (min, pods): &(usize, Vec<&Value>),
    already: usize,
    views: &[NodeView],
    memory: &mut Memory,
    opts: &BinderOptions,
) -> Option<String> {
    let min = *min;
    if already + pods.len() < min {
        return Some(format!(
            "pod group {g}: {} of its minimum {min} members exist",
            already + pods.len()
        ));
    }
    let mut trial: Vec<NodeView> = views.to_vec();
    let mut fitted = 0;
    for p in pods {
        let uid = p["metadata"]["uid"].as_str().unwrap_or_default();
        let ask = memory.ask(uid, p);
        let spot = candidates(&ask, &trial, opts).into_iter().find_map(|i| {
            let n = &trial[i];
            if misfit(p, &ask, n).is_some() {
                return None;
            }
            n.place(&ask).map(|at| (i, at))
        });
        let Some((i, at)) = spot else { break };
        trial[i].take(&ask, &at);
        fitted += 1;
    }
    (fitted < pods.len()).then(|| {
        format!(
            "pod group {g}: {fitted} of its {} pending members fit; all or none are bound",
            pods.len()
        )
    })
}
