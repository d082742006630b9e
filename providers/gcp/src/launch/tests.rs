//! Tests of the launch pieces.
