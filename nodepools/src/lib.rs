//! `nodepools`: the gpu-autoscaler API — the `NodePool` and `NodeClaim` custom resources of the
//! `gpu-autoscaler.dev` group, their validation, and CRD generation.
//!
//! Data only: no Kubernetes client, no async runtime. The types are the wire format, kept as
//! users write it (enumerations, quantities and durations as strings), and
//! [`NodePool::to_core`] parses them into the planning core's vocabulary
//! ([`autoscaler_core::model::Pool`]), reporting every problem with its field path;
//! [`NodePool::validate`] is the same walk. The CRD schemas carry the checks the API server can
//! enforce itself (OpenAPI bounds, enums, patterns and CEL `x-kubernetes-validations`).

pub mod crds;
mod duration;
pub mod error;
pub mod lint;
pub mod mig;
pub mod names;
pub mod openapi;
pub mod strict;
pub mod v1alpha1;

pub use duration::{
    DURATION_OR_NEVER_PATTERN, DURATION_PATTERN, Duration, parse as parse_duration,
};
pub use error::{Error, FieldError, ValidationErrors};
pub use v1alpha1::*;

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The API group.
pub const GROUP: &str = "gpu-autoscaler.dev";

/// `apiVersion` of the objects: `<group>/<version>`.
pub const API_VERSION: &str = "gpu-autoscaler.dev/v1alpha1";

/// Reads every document of a YAML stream as `kind`, checking `apiVersion` and `kind`; empty
/// documents are skipped. Strict: a field the kind's schema does not declare is an error naming
/// its path and the closest known field (`spec.disruption.gpuUtilisationThreshold: unknown
/// field (did you mean gpuUtilizationThreshold?)`), since a file is what a user wrote, unlike
/// objects read from the API server, which prunes such fields.
///
/// # Errors
/// [`Error::ParseYaml`] when a document is not valid YAML of that shape, [`Error::CheckKind`]
/// when its `apiVersion` or `kind` is another, [`Error::Validate`] listing the unknown fields
/// of the first document that has any.
pub fn from_yaml<T: DeserializeOwned>(kind: &'static str, text: &str) -> Result<Vec<T>, Error> {
    read_strict(kind, text)?
        .into_iter()
        .map(|(object, name, unknown)| {
            if unknown.is_empty() {
                Ok(object)
            } else {
                Err(Error::Validate {
                    kind,
                    name,
                    errors: unknown,
                })
            }
        })
        .collect()
}

/// Every document of `kind` in `text` with its `metadata.name` and its unknown fields.
fn read_strict<T: DeserializeOwned>(
    kind: &'static str,
    text: &str,
) -> Result<Vec<(T, String, ValidationErrors)>, Error> {
    autoscaler_core::nesting::check_flow_nesting(text)?;
    let mut out = Vec::new();
    for (document, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let err = |source| Error::ParseYaml {
            kind,
            document,
            source,
        };
        let value = serde_norway::Value::deserialize(doc).map_err(err)?;
        if value.is_null() {
            continue;
        }
        let found_kind = value.get("kind").and_then(serde_norway::Value::as_str);
        let found_version = value
            .get("apiVersion")
            .and_then(serde_norway::Value::as_str);
        if found_kind != Some(kind) || found_version != Some(API_VERSION) {
            return Err(Error::CheckKind {
                document,
                expected: kind,
                found: format!(
                    "{}/{}",
                    found_version.unwrap_or("<no apiVersion>"),
                    found_kind.unwrap_or("<no kind>")
                ),
            });
        }
        let name = value
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(serde_norway::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let unknown = match (openapi::schema_of(kind), serde_json::to_value(&value)) {
            (Some(schema), Ok(json)) => {
                openapi::check(schema, &json, openapi::Checks::UNKNOWN_FIELDS)
            }
            // Not JSON-shaped (a non-string key): the typed read below says why.
            _ => Vec::new(),
        };
        let object = serde_norway::from_value(value).map_err(err)?;
        out.push((object, name, ValidationErrors { errors: unknown }));
    }
    Ok(out)
}

/// Reads every NodePool of a YAML stream, strictly (see [`from_yaml`]), and validates each.
///
/// # Errors
/// [`Error::ParseYaml`] / [`Error::CheckKind`] for a document that is not a NodePool,
/// [`Error::Validate`] with every problem of the first invalid one, unknown fields first.
pub fn load_nodepools(text: &str) -> Result<Vec<NodePool>, Error> {
    let mut pools = Vec::new();
    for (pool, name, mut errors) in read_strict::<NodePool>("NodePool", text)? {
        if let Err(e) = pool.validate() {
            errors.errors.extend(e.errors);
        }
        if !errors.is_empty() {
            return Err(Error::Validate {
                kind: "NodePool",
                name,
                errors,
            });
        }
        pools.push(pool);
    }
    Ok(pools)
}
