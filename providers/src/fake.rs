//! A deterministic in-memory cloud for tests and the simulator.
//!
//! Launches succeed at once (instances are `Running`), provider ids count up
//! (`fake:///<zone>/fake-1`, `fake:///<zone>/fake-2`...), and the futures are ready immediately,
//! so [`block_on`] drives them without a runtime. Tests can limit or exhaust the capacity of
//! offerings, queue errors for the next call of an action, plant instances the autoscaler did not
//! launch, and read back every call made.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use autoscaler_core::InstanceType;

use crate::catalog;
use crate::error::{Action, ProviderError};
use crate::provider::{
    CloudProvider, Instance, InstanceState, LaunchRequest, Launched, NodeClassRef, OfferingKey,
    tags,
};

/// The cluster name the fake tags its instances with unless told otherwise.
pub const DEFAULT_CLUSTER: &str = "fake-cluster";

/// One call made to the fake, with its arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// `instance_types(class)`.
    InstanceTypes(NodeClassRef),
    /// `launch(request)`.
    Launch(Box<LaunchRequest>),
    /// `delete(provider_id)`.
    Delete(String),
    /// `get(provider_id)`.
    Get(String),
    /// `list()`.
    List,
    /// `collect_placement_groups(live, keep, grace)`: the groups kept.
    CollectPlacementGroups(BTreeSet<String>),
}

#[derive(Default)]
struct State {
    next_id: u64,
    instances: BTreeMap<String, Instance>,
    by_claim: BTreeMap<String, String>,
    /// Remaining launches per offering; absent = unlimited.
    capacity: BTreeMap<OfferingKey, u32>,
    injected: BTreeMap<Action, VecDeque<ProviderError>>,
    calls: Vec<Call>,
    /// Placement groups that launches created and collection has not deleted.
    placement_groups: BTreeSet<String>,
}

/// The in-memory provider. Share it behind an `Arc`; all methods take `&self`.
pub struct FakeProvider {
    cluster: String,
    catalog: Vec<InstanceType>,
    state: Mutex<State>,
}

impl FakeProvider {
    /// A fake offering `catalog`, tagging instances for [`DEFAULT_CLUSTER`].
    pub fn new(catalog: Vec<InstanceType>) -> Self {
        FakeProvider {
            cluster: DEFAULT_CLUSTER.to_string(),
            catalog,
            state: Mutex::new(State::default()),
        }
    }

    /// A fake offering the embedded default catalog.
    pub fn with_default_catalog() -> Self {
        Self::new(catalog::default_catalog())
    }

    /// The same fake, tagging (and listing) instances for `cluster`.
    pub fn with_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }

    /// The cluster name instances are tagged with.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock must not take the others down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Limits `key` to `remaining` more launches (`None`: unlimited, the default). Deleting an
    /// instance gives its launch back, so a limit models a finite capacity pool.
    pub fn set_capacity(&self, key: OfferingKey, remaining: Option<u32>) {
        let mut s = self.state();
        match remaining {
            Some(n) => {
                s.capacity.insert(key, n);
            }
            None => {
                s.capacity.remove(&key);
            }
        }
    }

    /// Makes every launch on `key` fail with insufficient capacity until restored.
    pub fn fail_offering(&self, key: OfferingKey) {
        self.set_capacity(key, Some(0));
    }

    /// Lifts any capacity limit on `key`.
    pub fn restore_offering(&self, key: &OfferingKey) {
        self.state().capacity.remove(key);
    }

    /// Makes the next call of `action` fail with `error` (errors queue up per action).
    pub fn inject_error(&self, action: Action, error: ProviderError) {
        self.state()
            .injected
            .entry(action)
            .or_default()
            .push_back(error);
    }

    /// Plants an instance the autoscaler did not launch through this fake (a leak from before a
    /// crash, another cluster's machine), as it exists in the cloud. A claim tag, if any, makes
    /// later launches for that claim return it.
    pub fn insert_instance(&self, instance: Instance) {
        let mut s = self.state();
        if let Some(claim) = &instance.claim {
            s.by_claim
                .insert(claim.clone(), instance.provider_id.clone());
        }
        s.instances.insert(instance.provider_id.clone(), instance);
    }

    /// Changes an instance's state (a spot interruption, a stuck launch); `false` when unknown.
    pub fn set_state(&self, provider_id: &str, state: InstanceState) -> bool {
        match self.state().instances.get_mut(provider_id) {
            Some(i) => {
                i.state = state;
                true
            }
            None => false,
        }
    }

    /// Every instance the fake knows, terminated ones included, by provider id.
    pub fn instances(&self) -> Vec<Instance> {
        self.state().instances.values().cloned().collect()
    }

    /// The placement groups launches created and collection has not deleted, sorted.
    pub fn placement_groups(&self) -> Vec<String> {
        self.state().placement_groups.iter().cloned().collect()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }

    /// Records the call and pops an injected error for it, if any.
    fn begin(&self, s: &mut State, action: Action, call: Call) -> Result<(), ProviderError> {
        s.calls.push(call);
        match s.injected.get_mut(&action).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn launch_now(&self, request: &LaunchRequest) -> Result<Launched, ProviderError> {
        let mut s = self.state();
        self.begin(
            &mut s,
            Action::Launch,
            Call::Launch(Box::new(request.clone())),
        )?;
        let invalid = |why: String| ProviderError::InvalidRequest {
            action: Action::Launch,
            why,
        };
        if let Some(instance) = s
            .by_claim
            .get(&request.claim)
            .and_then(|id| s.instances.get(id))
        {
            return Ok(Launched {
                instance: instance.clone(),
                unavailable: Vec::new(),
            });
        }
        if request.claim.is_empty() {
            return Err(invalid(
                "claim name (the idempotency token) is empty".into(),
            ));
        }
        if request.candidates.is_empty() {
            return Err(invalid(format!(
                "claim {} has no candidate offerings",
                request.claim
            )));
        }
        let mut refused = Vec::new();
        for key in &request.candidates {
            let it = self
                .catalog
                .iter()
                .find(|t| t.name == key.instance_type)
                .ok_or_else(|| invalid(format!("unknown instance type {}", key.instance_type)))?;
            // A type not sold in that zone or capacity type is refused like missing capacity,
            // as clouds do for unsupported placements.
            let Some(offering) = it
                .offerings
                .iter()
                .find(|o| o.zone == key.zone && o.capacity_type == key.capacity_type)
            else {
                refused.push(key.clone());
                continue;
            };
            match s.capacity.get_mut(key) {
                Some(0) => {
                    refused.push(key.clone());
                    continue;
                }
                Some(n) => *n -= 1,
                None => {}
            }
            s.next_id += 1;
            let provider_id = format!("fake:///{}/fake-{}", key.zone, s.next_id);
            let mut tags = BTreeMap::from([
                (tags::CLUSTER.to_string(), self.cluster.clone()),
                (tags::CLAIM.to_string(), request.claim.clone()),
                (tags::POOL.to_string(), request.pool.clone()),
            ]);
            if let Some(g) = &request.placement_group {
                s.placement_groups.insert(g.clone());
                tags.insert(tags::PLACEMENT_GROUP.to_string(), g.clone());
            }
            let instance = Instance {
                provider_id: provider_id.clone(),
                claim: Some(request.claim.clone()),
                pool: Some(request.pool.clone()),
                instance_type: key.instance_type.clone(),
                zone: key.zone.clone(),
                capacity_type: key.capacity_type,
                price: Some(offering.price),
                state: InstanceState::Running,
                tags,
            };
            s.by_claim
                .insert(request.claim.clone(), provider_id.clone());
            s.instances.insert(provider_id, instance.clone());
            return Ok(Launched {
                instance,
                unavailable: refused,
            });
        }
        Err(ProviderError::InsufficientCapacity {
            action: Action::Launch,
            offerings: refused,
        })
    }

    fn delete_now(&self, provider_id: &str) -> Result<(), ProviderError> {
        let mut s = self.state();
        self.begin(
            &mut s,
            Action::Delete,
            Call::Delete(provider_id.to_string()),
        )?;
        let Some(instance) = s.instances.get_mut(provider_id) else {
            return Ok(());
        };
        if instance.state == InstanceState::Terminated {
            return Ok(());
        }
        instance.state = InstanceState::Terminated;
        let key = instance.offering();
        if let Some(n) = s.capacity.get_mut(&key) {
            *n += 1;
        }
        Ok(())
    }

    fn get_now(&self, provider_id: &str) -> Result<Instance, ProviderError> {
        let mut s = self.state();
        self.begin(&mut s, Action::Get, Call::Get(provider_id.to_string()))?;
        s.instances
            .get(provider_id)
            .cloned()
            .ok_or_else(|| ProviderError::NotFound {
                action: Action::Get,
                provider_id: provider_id.to_string(),
            })
    }

    fn list_now(&self) -> Result<Vec<Instance>, ProviderError> {
        let mut s = self.state();
        self.begin(&mut s, Action::List, Call::List)?;
        Ok(s.instances
            .values()
            .filter(|i| i.state != InstanceState::Terminated)
            .filter(|i| i.tags.get(tags::CLUSTER) == Some(&self.cluster))
            .cloned()
            .collect())
    }

    fn collect_placement_groups_now(
        &self,
        live: &[Instance],
        keep: &BTreeSet<String>,
    ) -> Result<Vec<String>, ProviderError> {
        let mut s = self.state();
        self.begin(
            &mut s,
            Action::CollectPlacementGroups,
            Call::CollectPlacementGroups(keep.clone()),
        )?;
        let used: BTreeSet<&String> = live
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .filter_map(|i| i.tags.get(tags::PLACEMENT_GROUP))
            .collect();
        let gone: Vec<String> = s
            .placement_groups
            .iter()
            .filter(|g| !used.contains(g) && !keep.contains(*g))
            .cloned()
            .collect();
        for g in &gone {
            s.placement_groups.remove(g);
        }
        Ok(gone)
    }

    fn instance_types_now(&self, class: &NodeClassRef) -> Result<Vec<InstanceType>, ProviderError> {
        let mut s = self.state();
        self.begin(
            &mut s,
            Action::InstanceTypes,
            Call::InstanceTypes(class.clone()),
        )?;
        Ok(self.catalog.clone())
    }
}

impl CloudProvider for FakeProvider {
    fn name(&self) -> &str {
        "fake"
    }

    /// The fake's catalog for any class.
    async fn instance_types(
        &self,
        class: &NodeClassRef,
    ) -> Result<Vec<InstanceType>, ProviderError> {
        self.instance_types_now(class)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, ProviderError> {
        self.launch_now(request)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        self.delete_now(provider_id)
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, ProviderError> {
        self.get_now(provider_id)
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        self.list_now()
    }

    /// The fake's groups have no age: `grace_s` is ignored.
    async fn collect_placement_groups(
        &self,
        live: &[Instance],
        keep: &BTreeSet<String>,
        _grace_s: i64,
    ) -> Result<Vec<String>, ProviderError> {
        self.collect_placement_groups_now(live, keep)
    }
}

/// Wakes the blocked thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on the current thread, parking between polls.
///
/// Enough for the fake's futures (ready at once) and for synchronous callers such as the
/// simulator; not a replacement for tokio when real I/O is involved.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

#[cfg(test)]
mod tests;
