//! The `gpu-autoscaler` command line.
fn main() {}
