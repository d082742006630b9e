//! Turning the openb trace into a workload (placeholder, filled in below).
