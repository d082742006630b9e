//! Validation: a command re-checked against the cluster as it is after the validation delay,
//! before anything is tainted.

use std::collections::BTreeSet;

use crate::model::{DisruptionReason, Node, Snapshot};

use super::budgets::Allowance;
use super::candidates::{Nominations, movable, node_block_in, right_size_savings};
use super::simulate::{nowhere_to_go, pending_holds, simulate_holding};
use super::{Command, DisruptionConfig, Method};

/// The nodes of an empty-nodes `command` still there and empty in `snap`, when a pod has
/// landed on some of them and not on all: Karpenter drops the nodes that took pods and deletes
/// the others, where dropping the whole command would leave them all to the next pass, a
/// validation delay later. `None` for any other command, or when every node or none is still
/// empty; the command is then validated as it is. The caller replaces the command's nodes
/// before [`validate`], which checks the rest (blocks, budgets).
pub fn narrow_empty(command: &Command, snap: &Snapshot) -> Option<Vec<String>> {
    // An atomic pool's nodes leave all together or not at all.
    if command.reason != DisruptionReason::Empty || atomic_pool(command, snap).is_some() {
        return None;
    }
    let kept: Vec<String> = command
        .nodes
        .iter()
        .filter(|name| {
            snap.nodes
                .iter()
                .find(|n| &n.name == *name)
                .is_some_and(|n| movable(n).is_empty())
        })
        .cloned()
        .collect();
    (!kept.is_empty() && kept.len() < command.nodes.len()).then_some(kept)
}

/// The atomic NodePool (`Pool::atomic_nodes`) one of `command`'s nodes belongs to, if any: the
/// command then removes that pool whole (`atomic.rs`).
fn atomic_pool<'s>(command: &Command, snap: &'s Snapshot) -> Option<&'s str> {
    snap.pools
        .iter()
        .filter(|p| p.atomic_nodes.is_some())
        .find(|p| {
            snap.nodes
                .iter()
                .any(|n| n.pool.as_ref() == Some(&p.name) && command.nodes.contains(&n.name))
        })
        .map(|p| p.name.as_str())
}

/// Re-checks a command against the cluster as it is now, `validation_delay_s` after it was
/// decided. `Err` says why it no longer holds; the caller then drops it. `snap` is lent to the
/// simulation and comes back as it was ([`super::simulate()`]), but for its zone IDs, which
/// are read as zones in place ([`crate::zone_ids::resolve_in_place`]) as the decision read
/// them.
pub fn validate(
    command: &Command,
    snap: &mut Snapshot,
    now: i64,
    config: &DisruptionConfig,
) -> Result<(), String> {
    validate_at(Check::Decided, command, snap, now, config)
}

/// When a command is checked again ([`super::execute::step`] says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The validation delay is over and nothing was done yet: [`validate`].
    Decided,
    /// The replacement launched first is up ([`super::execute::Order::ReplaceFirst`]): it is
    /// a node of `snap` now, so the pods that came to the nodes while it booted are placed
    /// with it among the places they may go. The command still goes on only if what they
    /// need then (at most one new node) costs less than the nodes it removes, as at the
    /// decision; the replacement's types are not compared with that node's, which would say
    /// nothing about it. Its price is not counted: it is paid already, and abandoning would
    /// leave it for consolidation to remove later (counting it cost 0.4 % more on the openb
    /// replay, 20 seeds).
    ReplacementUp,
}

/// [`validate`] at `check` (see [`Check`] for what differs once the replacement is up).
/// `Err` says why the command no longer holds.
pub fn validate_at(
    check: Check,
    command: &Command,
    snap: &mut Snapshot,
    now: i64,
    config: &DisruptionConfig,
) -> Result<(), String> {
    // The command was decided on the snapshot with zone IDs read as zones; check it so too.
    crate::zone_ids::resolve_in_place(snap);
    if now < command.decided_at + config.validation_delay_s {
        return Err(format!(
            "validation delay not over ({}s left)",
            command.decided_at + config.validation_delay_s - now
        ));
    }
    let mut removed = BTreeSet::new();
    // Worked out once: the nodes they keep, and the simulation below holds them.
    let (holds, nominated) = pending_holds(snap);
    let mut nominations = Nominations::of(snap);
    nominations.binding(
        holds[nominated..]
            .iter()
            .map(|(ni, p)| (snap.nodes[*ni].name.clone(), p.key.clone()))
            .collect(),
    );
    for name in &command.nodes {
        let Some(i) = snap.nodes.iter().position(|n| &n.name == name) else {
            return Err(format!("node {name} is gone"));
        };
        let n = &snap.nodes[i];
        if let Some(b) = node_block_in(n, snap, &nominations, now) {
            return Err(format!("node {name}: {}", b.message));
        }
        if command.reason == DisruptionReason::Empty && !movable(n).is_empty() {
            return Err(format!("node {name} is no longer empty"));
        }
        // A drift command holds while the node still drifts (Karpenter re-checks that its
        // candidates still carry the Drifted condition).
        if command.reason == DisruptionReason::Drifted
            && snap
                .pools
                .iter()
                .find(|p| Some(&p.name) == n.pool.as_ref())
                .is_none_or(|p| super::drift_of(n, p).is_none())
        {
            return Err(format!("node {name} no longer drifts from its NodePool"));
        }
        removed.insert(i);
    }
    let nodes: Vec<&Node> = removed.iter().map(|i| &snap.nodes[*i]).collect();
    // An atomic pool goes whole: every node it has now must be in the command, which counts
    // as one disruption, as it did when it was decided.
    let atomic = atomic_pool(command, snap);
    if let Some(pool) = atomic
        && let Some(other) = snap
            .nodes
            .iter()
            .find(|n| n.pool.as_deref() == Some(pool) && !command.nodes.contains(&n.name))
    {
        return Err(format!(
            "NodePool {pool} scales down only as a whole, and node {} is not in the command",
            other.name
        ));
    }
    // The command's own removal is the one the parallelism limits admitted when it was
    // decided: nothing else is counted against them here.
    let mut allowance = Allowance::new(snap, config, &super::InProgress::default(), now);
    let admitted = if atomic.is_some() {
        allowance.admit_whole(snap, &nodes, command.reason)
    } else {
        allowance.admit(
            snap,
            &nodes,
            command.reason,
            command.method == Method::Replace,
            false,
        )
    };
    admitted.map_err(|b| b.message)?;
    if command.reason == DisruptionReason::Empty {
        return Ok(());
    }
    let cost: f64 = nodes.iter().map(|n| n.price.unwrap_or(0.0)).sum();
    // A node above its threshold is replaced only for the saving right-sizing asks.
    let devices = crate::dra::device_use(&snap.dra);
    let savings = nodes
        .iter()
        .map(|n| right_size_savings(n, snap, devices.get(n.name.as_str()).copied(), config))
        .fold(0.0, f64::max);
    let plan = simulate_holding(snap, &removed, command.method == Method::Replace, &holds);
    if let Some(u) = plan.unschedulable.first() {
        return Err(nowhere_to_go(u));
    }
    // Drift replaces a node whatever the replacement costs: what is left to check is that
    // its pods still have somewhere to go, with at most the one new node it launches.
    if command.reason == DisruptionReason::Drifted {
        if plan.new_claims.len() > usize::from(command.method == Method::Replace) {
            return Err("its pods no longer fit with the nodes the command launches".into());
        }
        return Ok(());
    }
    if command.method == Method::Replace && (plan.new_claims.len() > 1 || plan.new_cost() >= cost) {
        return Err("replacement is no longer strictly cheaper".into());
    }
    // The replacement launches with the types decided then: each must still be one the
    // simulation picks for the pods now (Karpenter's check that they are a subset), or a pod
    // that came meanwhile might not fit the node that comes.
    // Once it is up, it is one of `snap`'s nodes and any new claim is for pods that came
    // meanwhile: comparing its types with that claim's would say nothing.
    if check == Check::Decided
        && let (Some(r), Some(now_claim)) = (&command.replacement, plan.new_claims.first())
    {
        let picked: BTreeSet<&str> = now_claim
            .instance_types
            .iter()
            .map(|o| &*o.instance_type)
            .collect();
        if let Some(o) = r
            .instance_types
            .iter()
            .find(|o| !picked.contains(&*o.instance_type))
        {
            return Err(format!(
                "the replacement's instance type {} is no longer one scheduling picks for its pods",
                o.instance_type
            ));
        }
    }
    if command.method == Method::Replace && plan.new_cost() > cost * (1.0 - savings) {
        return Err(format!(
            "above its utilization threshold, and the replacement no longer saves {:.0} %",
            savings * 100.0
        ));
    }
    if command.method == Method::Delete && !plan.new_claims.is_empty() {
        return Err("pods no longer fit on the remaining nodes".into());
    }
    Ok(())
}
