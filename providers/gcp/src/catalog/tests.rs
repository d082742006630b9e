//! Tests of the catalog conversion.
