//! The scenario's DRA keys: `deviceClasses` (classes besides the NVIDIA driver's
//! `gpu.nvidia.com` and `mig.nvidia.com`, which every scenario with claims has) and a pod's
//! `claims` (each one the pod's own claim from a template, in the shape of a
//! ResourceClaimTemplate's `spec.spec.devices`, selectors as plain CEL strings). Everything is
//! checked here, each problem naming its field: unknown classes, selectors that do not compile
//! or exceed the cost limit, counts, allocation modes, constraints naming unknown requests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use autoscaler_core::dra::cel::Selectors;
use autoscaler_core::dra::template::nvidia_classes;
use autoscaler_core::dra::{
    AllocationMode, ClaimSource, ClaimSpec, DeviceClass, DeviceConstraint, DeviceRequest,
    DeviceSelection, DeviceSubRequest, PodClaim,
};
use serde::Deserialize;

use super::Ctx;
use crate::error::SimError;

/// Most devices one request may ask for (`resource.k8s.io/v1` allocates at most 32 devices
/// per claim).
const MAX_COUNT: u32 = 32;

/// One `deviceClasses` entry.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct DeviceClassFile {
    name: String,
    #[serde(default)]
    selectors: Vec<String>,
}

/// One entry of a pod's `claims`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct ClaimFile {
    name: String,
    requests: Vec<RequestFile>,
    #[serde(default)]
    constraints: Vec<ConstraintFile>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RequestFile {
    name: String,
    #[serde(default)]
    device_class_name: Option<String>,
    #[serde(default)]
    selectors: Vec<String>,
    #[serde(default)]
    allocation_mode: Option<String>,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    first_available: Vec<SubRequestFile>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SubRequestFile {
    name: String,
    device_class_name: String,
    #[serde(default)]
    selectors: Vec<String>,
    #[serde(default)]
    allocation_mode: Option<String>,
    #[serde(default)]
    count: Option<u32>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ConstraintFile {
    #[serde(default)]
    requests: Vec<String>,
    #[serde(default)]
    match_attribute: Option<String>,
    #[serde(default)]
    distinct_attribute: Option<String>,
}

/// Records `name` as the next `kind` of a list in `seen`.
///
/// # Errors
/// Why it cannot name one, for the caller to place at the item's `.name`: blank, or given
/// twice (`"{kind} {name} is {verb} twice"`).
fn new_name(seen: &mut BTreeSet<String>, name: &str, kind: &str, verb: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if !seen.insert(name.to_string()) {
        return Err(format!("{kind} {name} is {verb} twice"));
    }
    Ok(())
}

/// The classes a scenario's claims may name: the NVIDIA driver's, then `files` (a name given
/// again replaces the driver's).
pub(super) fn build_classes(
    cx: &Ctx,
    files: &[DeviceClassFile],
    selectors: &mut Selectors,
) -> Result<BTreeMap<String, DeviceClass>, SimError> {
    let mut out: BTreeMap<String, DeviceClass> = nvidia_classes()
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();
    let mut seen = BTreeSet::new();
    for (i, f) in files.iter().enumerate() {
        let at = |field: &str, why: String| {
            cx.err(
                &["deviceClasses:", &format!("name: {}", f.name)],
                format!("deviceClasses[{i}]{field}"),
                why,
            )
        };
        new_name(&mut seen, &f.name, "class", "defined").map_err(|why| at(".name", why))?;
        for (k, e) in f.selectors.iter().enumerate() {
            selectors
                .check(e)
                .map_err(|err| at(&format!(".selectors[{k}]"), err.to_string()))?;
        }
        out.insert(
            f.name.clone(),
            DeviceClass {
                name: f.name.clone(),
                selectors: f.selectors.clone(),
                extended_resource_name: None,
            },
        );
    }
    Ok(out)
}

/// A pod template's claims, checked against `classes`; `base` is the pod's field path.
pub(super) fn build_claims(
    cx: &Ctx,
    workload: &str,
    base: &str,
    files: &[ClaimFile],
    classes: &BTreeMap<String, DeviceClass>,
    selectors: &mut Selectors,
) -> Result<Vec<PodClaim>, SimError> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for (ci, f) in files.iter().enumerate() {
        let err = |field: &str, why: String| {
            cx.err(
                &["workloads:", &format!("name: {workload}"), "claims:"],
                format!("{base}.claims[{ci}]{field}"),
                why,
            )
        };
        new_name(&mut names, &f.name, "claim", "named").map_err(|why| err(".name", why))?;
        if f.requests.is_empty() {
            return Err(err(".requests", "needs at least one request".into()));
        }
        let mut spec = ClaimSpec::default();
        let mut request_names = BTreeSet::new();
        for (ri, r) in f.requests.iter().enumerate() {
            let rf = format!(".requests[{ri}]");
            if !request_names.insert(r.name.clone()) {
                return Err(err(
                    &format!("{rf}.name"),
                    format!("request {} is named twice", r.name),
                ));
            }
            let mut check = |field: &str,
                             class: &str,
                             sels: &[String],
                             mode: &Option<String>,
                             count: Option<u32>| {
                selection(class, sels, mode, count, classes, selectors)
                    .map_err(|(sub, why)| err(&format!("{rf}{field}{sub}"), why))
            };
            let request = match (&r.device_class_name, r.first_available.is_empty()) {
                (Some(class), true) => DeviceRequest {
                    name: r.name.clone(),
                    exactly: Some(check("", class, &r.selectors, &r.allocation_mode, r.count)?),
                    first_available: vec![],
                },
                (None, false) => {
                    if !r.selectors.is_empty() || r.allocation_mode.is_some() || r.count.is_some() {
                        return Err(err(
                            &rf,
                            "selectors, allocationMode and count go on each firstAvailable entry"
                                .into(),
                        ));
                    }
                    let mut subs = Vec::new();
                    let mut sub_names = BTreeSet::new();
                    for (si, s) in r.first_available.iter().enumerate() {
                        let field = format!(".firstAvailable[{si}]");
                        if !sub_names.insert(s.name.clone()) {
                            return Err(err(
                                &format!("{rf}{field}.name"),
                                format!("alternative {} is named twice", s.name),
                            ));
                        }
                        subs.push(DeviceSubRequest {
                            name: s.name.clone(),
                            selection: check(
                                &field,
                                &s.device_class_name,
                                &s.selectors,
                                &s.allocation_mode,
                                s.count,
                            )?,
                        });
                    }
                    DeviceRequest {
                        name: r.name.clone(),
                        exactly: None,
                        first_available: subs,
                    }
                }
                _ => {
                    return Err(err(
                        &rf,
                        "needs exactly one of deviceClassName and firstAvailable".into(),
                    ));
                }
            };
            spec.requests.push(request);
        }
        for (ki, c) in f.constraints.iter().enumerate() {
            let cf = format!(".constraints[{ki}]");
            let attribute = match (&c.match_attribute, &c.distinct_attribute) {
                (Some(a), None) | (None, Some(a)) => a,
                _ => {
                    return Err(err(
                        &cf,
                        "needs exactly one of matchAttribute and distinctAttribute".into(),
                    ));
                }
            };
            if !attribute.contains('/') {
                return Err(err(
                    &cf,
                    format!(
                        "attribute {attribute:?} must be fully qualified (domain/name, e.g. gpu.nvidia.com/productName)"
                    ),
                ));
            }
            for (k, r) in c.requests.iter().enumerate() {
                let parent = r.split_once('/').map_or(r.as_str(), |(p, _)| p);
                if !request_names.contains(parent) {
                    return Err(err(
                        &format!("{cf}.requests[{k}]"),
                        format!(
                            "no request {r:?} in this claim (requests: {})",
                            request_names.iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
            spec.constraints.push(DeviceConstraint {
                requests: c.requests.clone(),
                match_attribute: c.match_attribute.clone(),
                distinct_attribute: c.distinct_attribute.clone(),
            });
        }
        out.push(PodClaim {
            name: f.name.clone(),
            source: ClaimSource::Template {
                template: format!("{workload}-{}", f.name),
                claim: None,
            },
            spec: Arc::new(spec),
            allocation: None,
        });
    }
    Ok(out)
}

/// One selection, or the sub-field and words of its first problem.
fn selection(
    class: &str,
    sels: &[String],
    mode: &Option<String>,
    count: Option<u32>,
    classes: &BTreeMap<String, DeviceClass>,
    selectors: &mut Selectors,
) -> Result<DeviceSelection, (String, String)> {
    if !classes.contains_key(class) {
        return Err((
            ".deviceClassName".into(),
            format!(
                "unknown device class {class:?} (known: {}; add it under deviceClasses)",
                classes.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    for (k, e) in sels.iter().enumerate() {
        selectors
            .check(e)
            .map_err(|err| (format!(".selectors[{k}]"), err.to_string()))?;
    }
    let allocation_mode = match mode.as_deref() {
        None | Some("ExactCount") => AllocationMode::ExactCount,
        Some("All") => AllocationMode::All,
        Some(other) => {
            return Err((
                ".allocationMode".into(),
                format!("unknown mode {other:?} (ExactCount or All)"),
            ));
        }
    };
    let count = match (allocation_mode, count) {
        (AllocationMode::All, Some(_)) => {
            return Err((
                ".count".into(),
                "count goes with ExactCount, not All".into(),
            ));
        }
        (_, Some(0)) => return Err((".count".into(), "must be at least 1".into())),
        (_, Some(n)) if n > MAX_COUNT => {
            return Err((
                ".count".into(),
                format!("{n} is above {MAX_COUNT}, the API's limit on a claim's allocated devices"),
            ));
        }
        (_, Some(n)) => n,
        (_, None) => 1,
    };
    Ok(DeviceSelection {
        device_class_name: class.to_string(),
        selectors: sels.to_vec(),
        allocation_mode,
        count,
    })
}
