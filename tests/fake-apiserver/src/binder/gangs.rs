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

/// The groups whose pending members wait this pass, each with the message for their
/// `PodScheduled=False` condition. `pending` is in binding order; `bound` counts each group's
/// members already bound. The trial runs on a copy of `views` with the same node choice as the
/// pass (DRA claims are not tried here: the pass checks them per pod).
pub(super) fn held(
    pending: &[std::sync::Arc<Value>],
    bound: &BTreeMap<String, usize>,
    views: &[NodeView],
    memory: &mut Memory,
    opts: &BinderOptions,
) -> BTreeMap<String, String> {
    let mut members: BTreeMap<String, (usize, Vec<&Value>)> = BTreeMap::new();
    for p in pending {
        if let Some((g, min)) = group_of(p) {
            let e = members.entry(g).or_default();
            e.0 = e.0.max(min);
            e.1.push(p.as_ref());
        }
    }
    let mut out = BTreeMap::new();
    for (g, (min, pods)) in members {
        let already = bound.get(&g).copied().unwrap_or(0);
        if already + pods.len() < min {
            out.insert(
                g.clone(),
                format!(
                    "pod group {g}: {} of its minimum {min} members exist",
                    already + pods.len()
                ),
            );
            continue;
        }
        let mut trial: Vec<NodeView> = views.to_vec();
        let mut fitted = 0;
        for p in &pods {
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
        if fitted < pods.len() {
            out.insert(
                g.clone(),
                format!(
                    "pod group {g}: {fitted} of its {} pending members fit; all or none are bound",
                    pods.len()
                ),
            );
        }
    }
    out
}
