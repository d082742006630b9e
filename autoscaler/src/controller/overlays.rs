//! NodeOverlay objects applied to the catalogs the controller and `explain` plan with: one
//! function each for parsing the objects and for applying them, so both see the same types
//! (the rules are the core's, [`autoscaler_core::overlay`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use autoscaler_core::instance::InstanceType;
use autoscaler_core::overlay::{Overlay, apply_overlays};
use kube::ResourceExt;
use nodepools::NodeOverlay;

/// An overlay left out because it does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// `name@generation`: a changed object is reported again.
    pub key: String,
    /// Every problem, with its field path.
    pub problems: String,
}

/// The overlays that parse, by name, and the ones that do not.
pub fn parse<'a>(
    objects: impl IntoIterator<Item = &'a NodeOverlay>,
) -> (Vec<Overlay>, Vec<Refused>) {
    let mut objects: Vec<&NodeOverlay> = objects.into_iter().collect();
    objects.sort_by_key(|o| o.name_any());
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for o in objects {
        match o.to_core() {
            Ok(v) => ok.push(v),
            Err(e) => refused.push(Refused {
                key: format!("{}@{}", o.name_any(), o.metadata.generation.unwrap_or(0)),
                problems: e.to_string(),
            }),
        }
    }
    (ok, refused)
}

/// Each pool's catalog with `overlays` applied; unchanged (the same `Arc`) without overlays.
pub fn apply(
    types: BTreeMap<String, Arc<Vec<InstanceType>>>,
    overlays: &[Overlay],
) -> BTreeMap<String, Arc<Vec<InstanceType>>> {
    if overlays.is_empty() {
        return types;
    }
    types
        .into_iter()
        .map(|(pool, t)| (pool, Arc::new(apply_overlays(&t, overlays))))
        .collect()
}
