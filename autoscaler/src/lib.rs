//! The `autoscaler` library: the controller runtime behind `gpu-autoscaler run` (see
//! [`controller`]), shared by the binary and its end-to-end tests.

pub mod aws;
pub mod controller;
pub mod gcp;
pub mod replay;
