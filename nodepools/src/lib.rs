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
pub mod mig;
pub mod names;
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
/// documents are skipped.
///
/// # Errors
/// [`Error::ParseYaml`] when a document is not valid YAML of that shape, [`Error::CheckKind`]
/// when its `apiVersion` or `kind` is another.
pub fn from_yaml<T: DeserializeOwned>(kind: &'static str, text: &str) -> Result<Vec<T>, Error> {
    let mut out = Vec::new();
    for (document, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let err = |source| Error::ParseYaml {
            kind,
            document,
            source,
        };
        let value = serde_yaml::Value::deserialize(doc).map_err(err)?;
        if value.is_null() {
            continue;
        }
        let found_kind = value.get("kind").and_then(serde_yaml::Value::as_str);
        let found_version = value.get("apiVersion").and_then(serde_yaml::Value::as_str);
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
        out.push(serde_yaml::from_value(value).map_err(err)?);
    }
    Ok(out)
}

/// Reads every NodePool of a YAML stream and validates each.
///
/// # Errors
/// [`Error::ParseYaml`] / [`Error::CheckKind`] for a document that is not a NodePool,
/// [`Error::Validate`] with every problem of the first invalid one.
pub fn load_nodepools(text: &str) -> Result<Vec<NodePool>, Error> {
    let pools: Vec<NodePool> = from_yaml("NodePool", text)?;
    for p in &pools {
        p.validate().map_err(|errors| Error::Validate {
            kind: "NodePool",
            name: p.metadata.name.clone().unwrap_or_default(),
            errors,
        })?;
    }
    Ok(pools)
}
