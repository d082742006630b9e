//! `autoscaler-sim`: the discrete-event simulator of gpu-autoscaler, and the loaders of the
//! public cluster traces it and the benchmarks replay.

pub mod error;
pub mod traces;

pub use error::SimError;
