//! Hand-written OpenAPI schemas for fields whose derived schema would be too loose: maps of
//! quantities, maps of non-negative integers, label maps and condition lists.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::names::{LABEL_VALUE_MAX, LABEL_VALUE_PATTERN};

/// A Kubernetes quantity as the API server checks it (sign allowed).
pub(crate) const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A non-negative Kubernetes quantity.
pub(crate) const NONNEGATIVE_QUANTITY_PATTERN: &str = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

fn quantity_map_with(pattern: &str) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": pattern,
            "x-kubernetes-int-or-string": true,
        },
    })
}

/// `name -> quantity` (int or string), as `ResourceList` is in core Kubernetes.
pub(crate) fn quantity_map(_: &mut SchemaGenerator) -> Schema {
    quantity_map_with(QUANTITY_PATTERN)
}

/// `name -> quantity` where every quantity must be non-negative.
pub(crate) fn nonnegative_quantity_map(_: &mut SchemaGenerator) -> Schema {
    quantity_map_with(NONNEGATIVE_QUANTITY_PATTERN)
}

/// `name -> integer >= 0`.
pub(crate) fn nonnegative_int_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
        },
    })
}

/// `label key -> label value`; keys are checked by CEL on the enclosing object.
pub(crate) fn label_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": 100,
        "additionalProperties": {
            "type": "string",
            "maxLength": LABEL_VALUE_MAX,
            "pattern": LABEL_VALUE_PATTERN,
        },
    })
}

/// A list of standard conditions, one per `type` (a map-list for server-side apply).
pub(crate) fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let item = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition::json_schema(generator);
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// The reasons of a disruption budget.
pub(crate) fn budget_reasons(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": 3,
        "items": {
            "type": "string",
            "enum": ["Empty", "Underutilized", "Drifted"],
        },
    })
}
