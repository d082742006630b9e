//! Strict reading of objects embedded in other files (a simulator scenario's `nodePools:` and
//! `overlays:`):
//! `#[serde(deserialize_with = "nodepools::strict::nodepools")]` rejects a field the CRD does
//! not declare, naming its path and the closest known field, where the plain `Deserialize`
//! (which the controller's watches use, and must stay lenient) would drop it.

use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::Value;

use crate::openapi::{self, Checks};
use crate::{NodeOverlay, NodePool};

/// One object of `kind` read as JSON, refused when it has fields the kind's schema lacks.
fn object<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    kind: &str,
    d: D,
) -> Result<T, D::Error> {
    let json = Value::deserialize(d)?;
    if let Some(schema) = openapi::schema_of(kind) {
        let unknown = openapi::check(schema, &json, Checks::UNKNOWN_FIELDS);
        if !unknown.is_empty() {
            let name = json
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let lines: Vec<String> = unknown.iter().map(ToString::to_string).collect();
            return Err(D::Error::custom(format!(
                "{kind} {name:?}: {}",
                lines.join("; ")
            )));
        }
    }
    serde_json::from_value(json).map_err(D::Error::custom)
}

/// One object of the API kind `K`, read strictly.
struct Strict<K>(K);

impl<'de, K> Deserialize<'de> for Strict<K>
where
    K: serde::de::DeserializeOwned + kube::Resource<DynamicType = ()>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object(&K::kind(&()), d).map(Strict)
    }
}

/// A list of objects of kind `K`, each read strictly.
fn list<'de, D: Deserializer<'de>, K>(d: D) -> Result<Vec<K>, D::Error>
where
    K: serde::de::DeserializeOwned + kube::Resource<DynamicType = ()>,
{
    Ok(Vec::<Strict<K>>::deserialize(d)?
        .into_iter()
        .map(|s| s.0)
        .collect())
}

/// `deserialize_with` for a `Vec<NodePool>` field of a file users write.
///
/// # Errors
/// The deserializer's error for a malformed list, or for the first NodePool with an unknown
/// field (every unknown field of it listed: `NodePool "gpu": spec.disruption.
/// gpuUtilisationThreshold: unknown field (did you mean gpuUtilizationThreshold?)`).
pub fn nodepools<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<NodePool>, D::Error> {
    list(d)
}

/// `deserialize_with` for a `Vec<NodeOverlay>` field of a file users write (a scenario's
/// `overlays:`).
///
/// # Errors
/// As [`nodepools`], for NodeOverlays.
pub fn nodeoverlays<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<NodeOverlay>, D::Error> {
    list(d)
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default, deserialize_with = "super::nodepools")]
        pools: Vec<crate::NodePool>,
    }

    #[test]
    fn embedded_nodepools_are_strict() {
        let good = "pools:\n- {metadata: {name: a}, spec: {template: {}, weight: 3}}\n";
        let f: File = serde_norway::from_str(good).unwrap();
        assert_eq!(f.pools[0].spec.weight, Some(3));
        let bad = "pools:\n- metadata: {name: a}\n  spec:\n    template: {}\n    disruption: {gpuUtilisationThreshold: 0.3}\n";
        let e = serde_norway::from_str::<File>(bad)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("NodePool \"a\": spec.disruption.gpuUtilisationThreshold: unknown field (did you mean gpuUtilizationThreshold?)"),
            "{e}"
        );
    }
}
