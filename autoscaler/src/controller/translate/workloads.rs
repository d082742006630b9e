//! DaemonSets and PodDisruptionBudgets in the core's vocabulary: the overhead a DaemonSet adds
//! to every node it lands on, and what a budget allows now.

use super::*;

/// Translates a DaemonSet into the per-node overhead it adds.
///
/// `pod` is the translation of one of its pods, the newest, when it has one. Its requests,
/// tolerations and host ports are what the DaemonSet's pods really get: a LimitRange, a
/// RuntimeClass's overhead or a mutating webhook (VPA, sidecar injectors) changes them between
/// the template and the pod, and the DaemonSet controller adds its own tolerations. Where the
/// DaemonSet may run still comes from the template: the controller replaces each pod's
/// required node affinity with a term naming the pod's node (`matchFields` on
/// `metadata.name`), which would keep the overhead off every new node. Without a pod all comes
/// from the template. This is Karpenter's choice (`getDaemonSetPods` in its provisioner, with
/// the pod its cluster state keeps per DaemonSet).
///
/// # Errors
/// [`TranslateError`] naming the first field of the template that does not parse.
pub fn daemonset(ds: &DaemonSet, pod: Option<&CorePod>) -> Result<CoreDaemonSet, TranslateError> {
    let name = format!(
        "{}/{}",
        ds.metadata.namespace.as_deref().unwrap_or("default"),
        ds.metadata.name.as_deref().unwrap_or_default()
    );
    let empty = PodSpec::default();
    let spec = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .unwrap_or(&empty);
    let (node_selector, _) = node_selection(spec)?;
    if let Some(p) = pod {
        return Ok(CoreDaemonSet {
            name,
            requests: p.requests.clone(),
            node_selector,
            tolerations: p.tolerations.clone(),
            host_ports: p.host_ports.clone(),
        });
    }
    let mut requests = effective_requests(spec)?;
    requests.set(names::PODS, 1);
    let mut tolerations = Vec::new();
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        tolerations.push(toleration(
            t,
            &format!("spec.template.spec.tolerations[{i}]"),
        )?);
    }
    Ok(CoreDaemonSet {
        name,
        requests,
        node_selector,
        tolerations,
        host_ports: host_ports(spec, "spec.template.spec")?,
    })
}

fn scaled(v: &IntOrString, total: i32, round_up: bool) -> i32 {
    match v {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let num = pct * i64::from(total);
            let r = if round_up {
                (num + 99) / 100
            } else {
                num / 100
            };
            i32::try_from(r).unwrap_or(i32::MAX)
        }
    }
}

/// Translates a PodDisruptionBudget. `disruptionsAllowed` comes from its status when the
/// disruption controller has written one; otherwise it is computed here from the spec and the
/// pods it selects (`pods`: every pod of the namespace, with whether it is healthy).
///
/// # Errors
/// [`TranslateError`] for a malformed selector.
pub fn pdb(b: &PodDisruptionBudget, pods: &[(&Labels, bool)]) -> Result<Pdb, TranslateError> {
    let spec = b.spec.clone().unwrap_or_default();
    let selector = match &spec.selector {
        Some(s) => label_selector(s, "spec.selector")?,
        None => matches_nothing(),
    };
    let disruptions_allowed = match &b.status {
        Some(s) if s.observed_generation.is_some() || s.expected_pods > 0 => s.disruptions_allowed,
        _ => {
            let matching: Vec<bool> = pods
                .iter()
                .filter(|(l, _)| selector.matches(l))
                .map(|(_, healthy)| *healthy)
                .collect();
            let expected = i32::try_from(matching.len()).unwrap_or(i32::MAX);
            let healthy = i32::try_from(matching.iter().filter(|h| **h).count()).unwrap_or(0);
            let allowed = match (&spec.min_available, &spec.max_unavailable) {
                (Some(min), _) => healthy - scaled(min, expected, true),
                (None, Some(max)) => scaled(max, expected, true) - (expected - healthy),
                (None, None) => healthy - expected,
            };
            allowed.max(0)
        }
    };
    Ok(Pdb {
        namespace: b
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: b.metadata.name.clone().unwrap_or_default(),
        selector,
        disruptions_allowed,
    })
}
