//! The AWS provider against moto's EC2 server (and a fault-injecting proxy in front of it).
//!
//! Each test starts its own moto on a free 127.0.0.1 port and stops it at the end; without
//! `moto_server` on PATH a test prints `SKIPPED: moto_server not found` and passes.

mod harness;
mod proxy;

mod catalog;
mod faults;
mod lifecycle;
mod placement;
