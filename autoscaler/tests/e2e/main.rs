//! End-to-end tests: the real `gpu-autoscaler` binary against the fake API server, with the
//! kwok provider and the harness scheduler. Deadlines are generous; nothing asserts on speed.

mod harness;

mod budgets;
mod cadence;
mod crash;
mod detach;
mod dra;
mod drain_order;
mod drift;
mod events;
mod expiry;
mod explain;
mod faults;
mod fidelity;
mod grace;
mod guard;
mod kueue;
mod limits;
mod namespaces;
mod parity;
mod pod_problems;
mod provisioning;
mod provreq;
mod quickstart;
mod reliability;
mod safety;
mod snapshot;
mod termination;
mod visibility;
mod volumes;
mod warm;
