//! Test helpers: what the API server would say about an object, from the generated CRD alone.
//!
//! The OpenAPI value checks are the crate's own (`nodepools::openapi`, what `gpu-autoscaler
//! validate` runs); the CEL `x-kubernetes-validations` run in kube's client-side evaluator.

#![allow(dead_code)]

use kube::core::cel::Validator;
use nodepools::openapi::{self, Checks};
use serde_json::Value;

/// The `openAPIV3Schema` of the CRD for `kind`.
pub fn schema_of(kind: &str) -> Value {
    openapi::schema_of(kind).expect("known kind").clone()
}

/// Every problem the API server would report for `object` (an object of `kind` as JSON):
/// OpenAPI value checks first, then CEL rules (skipped when a value has the wrong type, as
/// the server cannot evaluate rules over an object it could not decode).
pub fn server_side(kind: &str, object: &Value) -> Vec<String> {
    let schema = schema_of(kind);
    let mut out: Vec<String> = openapi::check(&schema, object, Checks::SERVER)
        .iter()
        .map(ToString::to_string)
        .collect();
    if !out
        .iter()
        .any(|e| e.contains("must be of type") || e.contains("must not be null"))
        && let Err(errs) = Validator::new().validate(&schema, object, None)
    {
        out.extend(
            errs.iter()
                .map(|e| format!("{}: {}", e.field_path, e.message)),
        );
    }
    out
}
