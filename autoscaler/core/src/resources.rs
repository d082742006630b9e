//! `Resources`: exact integer amounts of every resource a pod can request or a node can offer.
//!
//! cpu is kept in millicores; memory and ephemeral storage in bytes; pods as a count; every
//! other (extended) resource in whole units, keyed by its full name (`nvidia.com/gpu`,
//! `nvidia.com/mig-1g.10gb`, `aws.amazon.com/neuron`...). Zero amounts are never stored in the
//! extended map, so two equal vectors compare equal.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::quantity::{Quantity, format_bytes, format_cpu};

/// Well-known resource names.
pub mod names {
    /// CPU, in millicores inside [`super::Resources`].
    pub const CPU: &str = "cpu";
    /// Memory, in bytes.
    pub const MEMORY: &str = "memory";
    /// Local ephemeral storage, in bytes.
    pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
    /// Pod slots.
    pub const PODS: &str = "pods";
    /// NVIDIA whole GPUs (or MIG instances under the single strategy, or time-sliced replicas).
    pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
    /// AMD GPUs.
    pub const AMD_GPU: &str = "amd.com/gpu";
}

/// An exact vector of resource amounts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Pod count.
    pub pods: i64,
    /// Every other resource in whole units; zero entries are never stored.
    pub extended: BTreeMap<String, i64>,
}

/// The first resource in which a request exceeds what is free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The resource name.
    pub resource: String,
    /// How much was asked for.
    pub requested: i64,
    /// How much was available.
    pub available: i64,
}

impl Resources {
    /// The empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `name: quantity` pairs as they appear in a pod spec or NodePool limits.
    ///
    /// # Errors
    /// [`CoreError::ParseQuantity`] for a malformed quantity, [`CoreError::InvalidResource`] for
    /// a negative amount or a fractional amount of an extended resource.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, CoreError> {
        let mut r = Resources::new();
        for (name, value) in pairs {
            let q = Quantity::parse(value).map_err(|source| CoreError::ParseQuantity {
                resource: name.to_string(),
                source,
            })?;
            r.add_quantity(name, q)?;
        }
        Ok(r)
    }

    /// Adds one parsed quantity of resource `name`.
    ///
    /// # Errors
    /// [`CoreError::InvalidResource`] when `q` is negative, too large, or a fractional amount of a
    /// resource counted in whole units other than memory-like byte counts (which round up).
    pub fn add_quantity(&mut self, name: &str, q: Quantity) -> Result<(), CoreError> {
        let invalid = |why: &str| CoreError::InvalidResource {
            resource: name.to_string(),
            why: why.to_string(),
        };
        if q.is_negative() {
            return Err(invalid("must not be negative"));
        }
        let amount = match name {
            names::CPU => q.millis(),
            names::MEMORY | names::EPHEMERAL_STORAGE => q.units_ceil(),
            _ if name.starts_with("hugepages-") => q.units_ceil(),
            _ => {
                if !q.is_whole() {
                    return Err(invalid("must be a whole number"));
                }
                q.units_ceil()
            }
        };
        let amount = i64::try_from(amount).map_err(|_| invalid("too large"))?;
        let cur = self.get(name);
        self.set(name, cur.saturating_add(amount));
        Ok(())
    }

    /// Builder: sets `name` to `amount` (in this type's units) and returns self.
    pub fn with(mut self, name: &str, amount: i64) -> Self {
        self.set(name, amount);
        self
    }

    /// The amount of `name` (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            names::CPU => self.cpu,
            names::MEMORY => self.memory,
            names::EPHEMERAL_STORAGE => self.ephemeral_storage,
            names::PODS => self.pods,
            _ => self.extended.get(name).copied().unwrap_or(0),
        }
    }

    /// Sets the amount of `name`.
    pub fn set(&mut self, name: &str, amount: i64) {
        match name {
            names::CPU => self.cpu = amount,
            names::MEMORY => self.memory = amount,
            names::EPHEMERAL_STORAGE => self.ephemeral_storage = amount,
            names::PODS => self.pods = amount,
            _ => {
                if amount == 0 {
                    self.extended.remove(name);
                } else if let Some(v) = self.extended.get_mut(name) {
                    // No new key (an allocation) for a resource already there.
                    *v = amount;
                } else {
                    self.extended.insert(name.to_string(), amount);
                }
            }
        }
    }

    /// Every non-zero (name, amount) pair, standard resources first, then extended by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        [
            (names::CPU, self.cpu),
            (names::MEMORY, self.memory),
            (names::EPHEMERAL_STORAGE, self.ephemeral_storage),
            (names::PODS, self.pods),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .chain(self.extended.iter().map(|(k, v)| (k.as_str(), *v)))
    }

    /// Each non-zero amount of `self` as [`Resources::iter`] gives it, with `other`'s amount
    /// of the same resource (the fixed ones read without comparing names).
    pub fn iter_with<'a>(
        &'a self,
        other: &'a Resources,
    ) -> impl Iterator<Item = (&'a str, i64, i64)> + 'a {
        [
            (names::CPU, self.cpu, other.cpu),
            (names::MEMORY, self.memory, other.memory),
            (
                names::EPHEMERAL_STORAGE,
                self.ephemeral_storage,
                other.ephemeral_storage,
            ),
            (names::PODS, self.pods, other.pods),
        ]
        .into_iter()
        .filter(|(_, v, _)| *v != 0)
        .chain(
            self.extended
                .iter()
                .map(|(k, v)| (k.as_str(), *v, other.extended.get(k).copied().unwrap_or(0))),
        )
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.pods == 0
            && self.extended.is_empty()
    }

    /// Adds `other` in place (saturating).
    pub fn add(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.pods = self.pods.saturating_add(other.pods);
        for (k, v) in &other.extended {
            self.add_extended(k, |cur| cur.saturating_add(*v));
        }
    }

    /// Sets extended resource `name` to `f` of its amount, as [`Resources::set`] would (an
    /// amount of 0 is removed), without allocating its name when it is already there: the
    /// planner adds every bound pod's requests to its node at each plan.
    fn add_extended(&mut self, name: &String, f: impl Fn(i64) -> i64) {
        match self.extended.get_mut(name) {
            Some(cur) => {
                *cur = f(*cur);
                if *cur == 0 {
                    self.extended.remove(name);
                }
            }
            None => {
                let v = f(0);
                if v != 0 {
                    self.extended.insert(name.clone(), v);
                }
            }
        }
    }

    /// Subtracts `other` in place; amounts may go negative (callers check with [`Self::fits_in`]
    /// first when that matters).
    pub fn sub(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.pods = self.pods.saturating_sub(other.pods);
        for (k, v) in &other.extended {
            self.add_extended(k, |cur| cur.saturating_sub(*v));
        }
    }

    /// `self + other`.
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.add(other);
        r
    }

    /// `self - other`.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// Per-resource maximum (used for init containers: max(init, sum of app containers)).
    pub fn max(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.max_assign(other);
        r
    }

    /// Raises each resource to `other`'s amount where that is larger, in place ([`Self::max`]
    /// without a new map).
    pub fn max_assign(&mut self, other: &Resources) {
        self.cpu = self.cpu.max(other.cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.pods = self.pods.max(other.pods);
        // `extended` holds none of the four named resources, so the maps are merged
        // directly, as `set` would (a zero removes the entry).
        for (k, v) in &other.extended {
            match self.extended.get_mut(k) {
                Some(cur) if *v > *cur && *v == 0 => {
                    self.extended.remove(k);
                }
                Some(cur) if *v > *cur => *cur = *v,
                Some(_) => {}
                None if *v > 0 => {
                    self.extended.insert(k.clone(), *v);
                }
                None => {}
            }
        }
    }

    /// Which non-zero amounts of `self` equal `most`'s amount of the same resource, as bits
    /// ([`Self::ATTAINS_CPU`] and the others): the resources `self` may be what sets `most`
    /// in, when `most` is a [`Self::max`] over a set `self` is in (a zero sets nothing).
    pub fn attains(&self, most: &Resources) -> u8 {
        self.iter_with(most)
            .filter(|(_, here, there)| here == there)
            .fold(0, |bits, (name, _, _)| {
                bits | match name {
                    names::CPU => Self::ATTAINS_CPU,
                    names::MEMORY => Self::ATTAINS_MEMORY,
                    names::EPHEMERAL_STORAGE => Self::ATTAINS_EPHEMERAL_STORAGE,
                    names::PODS => Self::ATTAINS_PODS,
                    _ => Self::ATTAINS_EXTENDED,
                }
            })
    }

    /// [`Self::attains`]: cpu.
    pub const ATTAINS_CPU: u8 = 1;
    /// [`Self::attains`]: memory.
    pub const ATTAINS_MEMORY: u8 = 2;
    /// [`Self::attains`]: ephemeral storage.
    pub const ATTAINS_EPHEMERAL_STORAGE: u8 = 4;
    /// [`Self::attains`]: pods.
    pub const ATTAINS_PODS: u8 = 8;
    /// [`Self::attains`]: some extended resource (which one is not said).
    pub const ATTAINS_EXTENDED: u8 = 16;

    /// Per-resource minimum over the names present in either side.
    pub fn min(&self, other: &Resources) -> Resources {
        let mut r = Resources {
            cpu: self.cpu.min(other.cpu),
            memory: self.memory.min(other.memory),
            ephemeral_storage: self.ephemeral_storage.min(other.ephemeral_storage),
            pods: self.pods.min(other.pods),
            extended: BTreeMap::new(),
        };
        for (k, v) in &self.extended {
            r.set(k, (*v).min(other.get(k)));
        }
        for (k, v) in &other.extended {
            r.set(k, (*v).min(self.get(k)));
        }
        r
    }

    /// `Ok` when every amount requested (`self`) is at most what `available` offers; otherwise the
    /// first shortfall, standard resources first, then extended ones by name.
    pub fn fits_in(&self, available: &Resources) -> Result<(), Shortfall> {
        let short = |resource: &str, requested: i64, available: i64| Shortfall {
            resource: resource.to_string(),
            requested,
            available,
        };
        if self.cpu > available.cpu {
            return Err(short(names::CPU, self.cpu, available.cpu));
        }
        if self.memory > available.memory {
            return Err(short(names::MEMORY, self.memory, available.memory));
        }
        if self.ephemeral_storage > available.ephemeral_storage && self.ephemeral_storage > 0 {
            return Err(short(
                names::EPHEMERAL_STORAGE,
                self.ephemeral_storage,
                available.ephemeral_storage,
            ));
        }
        if self.pods > available.pods {
            return Err(short(names::PODS, self.pods, available.pods));
        }
        for (k, v) in &self.extended {
            let have = available.get(k);
            if *v > have {
                return Err(short(k, *v, have));
            }
        }
        Ok(())
    }

    /// Whether [`Self::fits_in`] succeeds.
    pub fn fits(&self, available: &Resources) -> bool {
        // As `fits_in`, without building the shortfall: this is asked in the planner's
        // innermost loops, where most answers are no.
        self.cpu <= available.cpu
            && self.memory <= available.memory
            && (self.ephemeral_storage <= available.ephemeral_storage
                || self.ephemeral_storage <= 0)
            && self.pods <= available.pods
            && self
                .extended
                .iter()
                .all(|(k, v)| *v <= available.extended.get(k).copied().unwrap_or(0))
    }
}

/// Most extended resources a [`Sum`] holds without a map.
const SUM_EXTENDED: usize = 4;

/// `used.plus(add)` when it is only ever asked whether it fits somewhere
/// ([`Resources::sum`]): with a few extended resources it is kept on the stack, as building
/// and dropping the map of them for a GPU pod's verdict on every open claim was much of a
/// plan's allocation. It sums by [`Resources::add`]'s rules.
pub struct Sum<'r>(SumRepr<'r>);

enum SumRepr<'r> {
    Small {
        /// cpu, memory, ephemeral storage and pods.
        base: [i64; 4],
        /// The extended amounts the sum would store (no entry that adding made 0).
        extended: [(&'r str, i64); SUM_EXTENDED],
        len: usize,
    },
    Big(Resources),
}

impl Resources {
    /// `self + add`, to ask [`Sum::fits`] of (several times, without building the sum).
    pub fn sum<'r>(&'r self, add: &'r Resources) -> Sum<'r> {
        let base = [
            self.cpu.saturating_add(add.cpu),
            self.memory.saturating_add(add.memory),
            self.ephemeral_storage.saturating_add(add.ephemeral_storage),
            self.pods.saturating_add(add.pods),
        ];
        let mut extended = [("", 0); SUM_EXTENDED];
        let mut len = 0;
        // As `add`: an amount both have is summed and dropped when that makes 0, one only
        // `add` has is taken when it is not 0, one only `self` has stays as it is.
        let summed = self
            .extended
            .iter()
            .filter_map(|(k, v)| match add.extended.get(k) {
                Some(a) => {
                    let sum = v.saturating_add(*a);
                    (sum != 0).then_some((k.as_str(), sum))
                }
                None => Some((k.as_str(), *v)),
            });
        let added = add
            .extended
            .iter()
            .filter(|(k, v)| **v != 0 && !self.extended.contains_key(*k))
            .map(|(k, v)| (k.as_str(), *v));
        for e in summed.chain(added) {
            if len == SUM_EXTENDED {
                return Sum(SumRepr::Big(self.plus(add)));
            }
            extended[len] = e;
            len += 1;
        }
        Sum(SumRepr::Small {
            base,
            extended,
            len,
        })
    }
}

impl Sum<'_> {
    /// `used.plus(add).fits(available)`, by [`Resources::fits`]'s rules.
    pub fn fits(&self, available: &Resources) -> bool {
        match &self.0 {
            SumRepr::Small {
                base,
                extended,
                len,
            } => {
                base[0] <= available.cpu
                    && base[1] <= available.memory
                    && (base[2] <= available.ephemeral_storage || base[2] <= 0)
                    && base[3] <= available.pods
                    && extended[..*len]
                        .iter()
                        .all(|(k, v)| *v <= available.extended.get(*k).copied().unwrap_or(0))
            }
            SumRepr::Big(r) => r.fits(available),
        }
    }
}

/// Renders an amount of `name` in Kubernetes notation.
pub fn format_amount(name: &str, amount: i64) -> String {
    match name {
        names::CPU => format_cpu(amount),
        names::MEMORY | names::EPHEMERAL_STORAGE => format_bytes(amount),
        _ => amount.to_string(),
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in self.iter() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{k}={}", format_amount(k, v))?;
        }
        if first {
            f.write_str("{}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requested {} but {} available",
            self.resource,
            format_amount(&self.resource, self.requested),
            format_amount(&self.resource, self.available)
        )
    }
}

/// Whether `name` is a GPU-class resource: whole GPUs of any vendor, MIG profiles, time-sliced
/// replicas (`*.shared`), and accelerators such as Neuron or Gaudi. Disruption measures
/// utilization over exactly these; the planner keeps GPU instance types for pods that use them.
pub fn is_gpu_class(name: &str) -> bool {
    name.starts_with("nvidia.com/gpu")
        || name.starts_with("nvidia.com/mig-")
        || name.starts_with("amd.com/gpu")
        || name.starts_with("aws.amazon.com/neuron")
        || name.starts_with("habana.ai/")
        || name.starts_with("gpu.intel.com/")
}

impl Resources {
    /// Whether any GPU-class resource is non-zero.
    pub fn has_gpu_class(&self) -> bool {
        self.extended.iter().any(|(k, v)| *v > 0 && is_gpu_class(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_assign_takes_each_resource_at_its_larger_amount_and_stores_no_zero() {
        let mut a = Resources::new();
        a.cpu = 1000;
        a.extended.insert("nvidia.com/gpu".into(), 1);
        a.extended.insert("example.com/debt".into(), -2);
        a.extended.insert("example.com/kept".into(), 5);
        let mut b = Resources::new();
        b.cpu = 500;
        b.memory = 7;
        b.extended.insert("nvidia.com/gpu".into(), 4);
        b.extended.insert("example.com/new".into(), 3);
        b.extended.insert("example.com/below".into(), -1);
        b.extended.insert("example.com/kept".into(), 2);
        // A zero in `other` (which `set` never stores, but a map can hold) lifts a debt to
        // nothing, as `set(k, 0)` would.
        b.extended.insert("example.com/debt".into(), 0);
        a.max_assign(&b);
        assert_eq!((a.cpu, a.memory), (1000, 7));
        let ext: Vec<(&str, i64)> = a.extended.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            ext,
            [
                ("example.com/kept", 5),
                ("example.com/new", 3),
                ("nvidia.com/gpu", 4)
            ]
        );
        // `set` on a resource already there updates it in place.
        a.set("nvidia.com/gpu", 8);
        a.set("example.com/new", 0);
        assert_eq!(a.get("nvidia.com/gpu"), 8);
        assert!(!a.extended.contains_key("example.com/new"));
    }

    #[test]
    fn parses_pod_style_requests() {
        let r = Resources::parse([
            ("cpu", "1500m"),
            ("memory", "2Gi"),
            ("nvidia.com/gpu", "2"),
            ("ephemeral-storage", "10G"),
        ])
        .unwrap();
        assert_eq!(r.cpu, 1500);
        assert_eq!(r.memory, 2 << 30);
        assert_eq!(r.ephemeral_storage, 10_000_000_000);
        assert_eq!(r.get("nvidia.com/gpu"), 2);
        assert_eq!(
            r.to_string(),
            "cpu=1500m,memory=2Gi,ephemeral-storage=9765625Ki,nvidia.com/gpu=2"
        );
    }

    #[test]
    fn rejects_fractional_devices_and_negatives_naming_the_resource() {
        let e = Resources::parse([("nvidia.com/gpu", "0.5")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "resource nvidia.com/gpu: must be a whole number"
        );
        let e = Resources::parse([("cpu", "-1")]).unwrap_err();
        assert_eq!(e.to_string(), "resource cpu: must not be negative");
        let e = Resources::parse([("memory", "12Qi")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("parsing resource memory: invalid quantity \"12Qi\"")
        );
    }

    #[test]
    fn fit_reports_first_shortfall() {
        let req = Resources::new().with("cpu", 1000).with("nvidia.com/gpu", 4);
        let free = Resources::new().with("cpu", 4000).with("nvidia.com/gpu", 2);
        let s = req.fits_in(&free).unwrap_err();
        assert_eq!(s.to_string(), "nvidia.com/gpu requested 4 but 2 available");
        assert!(req.fits(&free.clone().with("nvidia.com/gpu", 4)));
    }

    #[test]
    fn zero_extended_entries_vanish() {
        let mut a = Resources::new().with("x/y", 2);
        a.sub(&Resources::new().with("x/y", 2));
        assert_eq!(a, Resources::new());
        assert_eq!(
            Resources::new()
                .with("a/b", 1)
                .max(&Resources::new().with("c/d", 2))
                .extended
                .len(),
            2
        );
    }

    /// `fits` answers as `fits_in` does, on every resource kind and on the edges.
    #[test]
    fn fits_agrees_with_fits_in() {
        let base = Resources::new()
            .with("cpu", 4000)
            .with("memory", 8 << 30)
            .with("ephemeral-storage", 10 << 30)
            .with("pods", 10)
            .with("nvidia.com/gpu", 2);
        let asks = [
            Resources::new(),
            base.clone(),
            Resources::new().with("cpu", 4001),
            Resources::new().with("memory", (8 << 30) + 1),
            Resources::new().with("ephemeral-storage", (10 << 30) + 1),
            Resources::new().with("pods", 11),
            Resources::new().with("nvidia.com/gpu", 3),
            Resources::new().with("example.com/fpga", 1),
            Resources::new().with("cpu", 1000).with("nvidia.com/gpu", 2),
        ];
        let mut yes = 0;
        for ask in &asks {
            for have in [&base, &Resources::new()] {
                assert_eq!(ask.fits(have), ask.fits_in(have).is_ok(), "{ask} in {have}");
                yes += usize::from(ask.fits(have));
            }
        }
        assert_eq!(
            yes, 4,
            "the empty ask fits both, the base and the small ask the base"
        );
    }

    /// `sum(..).fits` answers as `plus(..).fits` does: with amounts that cancel to 0, negative
    /// room, and more extended resources than the sum keeps on the stack.
    #[test]
    fn a_sum_fits_where_the_built_sum_does() {
        let many = |n: i64| {
            (0..6).fold(Resources::new().with("cpu", 1000), |r, i| {
                r.with(&format!("example.com/r{i}"), n)
            })
        };
        let parts = [
            Resources::new(),
            Resources::new().with("cpu", 2000).with("nvidia.com/gpu", 1),
            Resources::new().with("nvidia.com/gpu", -1),
            Resources::new()
                .with("memory", 1 << 30)
                .with("example.com/fpga", 2),
            many(1),
            many(-1),
        ];
        let rooms = [
            Resources::new(),
            Resources::new()
                .with("cpu", 3000)
                .with("memory", 2 << 30)
                .with("nvidia.com/gpu", 1),
            Resources::new()
                .with("cpu", 4000)
                .with("nvidia.com/gpu", -1),
            many(2).with("memory", 4 << 30).with("example.com/fpga", 2),
        ];
        let mut yes = 0;
        for used in &parts {
            for add in &parts {
                for room in &rooms {
                    let want = used.plus(add).fits(room);
                    assert_eq!(used.sum(add).fits(room), want, "{used} + {add} in {room}");
                    yes += usize::from(want);
                }
            }
        }
        assert!(yes > 0 && yes < parts.len() * parts.len() * rooms.len());
    }
}
