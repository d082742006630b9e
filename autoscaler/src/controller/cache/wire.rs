//! A pod spec read in one pass together with `schedulingGroup`, a field newer than the API
//! types this project builds with.
//!
//! `#[serde(flatten)]` would do the same by buffering the whole spec as generic content and
//! reading it a second time; on a list of 100,000 pods that buffering was about a seventh of
//! the controller's work before its caches synced. Here the spec's own deserializer reads
//! the map, and a map adapter takes the one extra key out of its way.

use std::fmt;

use k8s_openapi::api::core::v1::PodSpec;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};

/// The extra key.
const SCHEDULING_GROUP: &str = "schedulingGroup";

/// `spec`, with `spec.schedulingGroup`.
#[derive(Clone, Debug)]
pub(super) struct SpecWire {
    pub(super) spec: PodSpec,
    pub(super) scheduling_group: Option<SchedulingGroupWire>,
}

/// `spec.schedulingGroup`.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct SchedulingGroupWire {
    #[serde(default, rename = "podGroupName")]
    pub(super) pod_group_name: Option<String>,
}

impl<'de> Deserialize<'de> for SpecWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut group = None;
        let spec = PodSpec::deserialize(Tee {
            inner: d,
            group: &mut group,
        })?;
        Ok(SpecWire {
            spec,
            scheduling_group: group,
        })
    }
}

/// A deserializer that hands its map to the spec's visitor through [`TeeMap`].
struct Tee<'g, D> {
    inner: D,
    group: &'g mut Option<SchedulingGroupWire>,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Tee<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(TeeVisitor {
            inner: visitor,
            group: self.group,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_struct(
            name,
            fields,
            TeeVisitor {
                inner: visitor,
                group: self.group,
            },
        )
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The spec's visitor, given a [`TeeMap`] in place of the map; anything but a map it refuses
/// as the spec's visitor would.
struct TeeVisitor<'g, V> {
    inner: V,
    group: &'g mut Option<SchedulingGroupWire>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for TeeVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(TeeMap {
            inner: map,
            group: self.group,
        })
    }
}

/// The spec's map without `schedulingGroup`, whose value goes to `group`.
struct TeeMap<'g, A> {
    inner: A,
    group: &'g mut Option<SchedulingGroupWire>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for TeeMap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        mut seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            match self.inner.next_key_seed(KeySeed(seed))? {
                None => return Ok(None),
                Some(Key::Field(v)) => return Ok(Some(v)),
                Some(Key::Group(s)) => {
                    *self.group = self.inner.next_value()?;
                    seed = s;
                }
            }
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A key: the spec's field, or `schedulingGroup` (with the spec's seed back, unused).
enum Key<K, T> {
    Field(T),
    Group(K),
}

/// Reads a key as a string and gives every one but `schedulingGroup` to the spec's seed.
struct KeySeed<K>(K);

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<K> {
    type Value = Key<K, K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeyVisitor(self.0))
    }
}

struct KeyVisitor<K>(K);

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for KeyVisitor<K> {
    type Value = Key<K, K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if v == SCHEDULING_GROUP {
            return Ok(Key::Group(self.0));
        }
        self.0.deserialize(v.into_deserializer()).map(Key::Field)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        if v == SCHEDULING_GROUP {
            return Ok(Key::Group(self.0));
        }
        self.0
            .deserialize(de::value::BorrowedStrDeserializer::new(v))
            .map(Key::Field)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        self.visit_str(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_spec_and_its_scheduling_group_are_read_in_one_pass() {
        let v = json!({
            "nodeName": "n1",
            "schedulingGroup": {"podGroupName": "train"},
            "containers": [{"name": "c", "image": "i"}],
            "priority": 7
        });
        let s: SpecWire = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(s.spec.node_name.as_deref(), Some("n1"));
        assert_eq!(s.spec.priority, Some(7));
        assert_eq!(s.spec.containers[0].name, "c");
        let g = s.scheduling_group.unwrap();
        assert_eq!(g.pod_group_name.as_deref(), Some("train"));
        // From text as the watcher reads it (borrowed keys), the same.
        let s: SpecWire = serde_json::from_str(&v.to_string()).unwrap();
        assert_eq!(s.spec.containers[0].name, "c");
        assert_eq!(
            s.scheduling_group.unwrap().pod_group_name.as_deref(),
            Some("train")
        );
    }

    #[test]
    fn a_spec_without_the_group_reads_as_before_and_errors_still_name_the_field() {
        let s: SpecWire =
            serde_json::from_str(r#"{"containers": [], "unknownField": [1, {"a": 2}]}"#).unwrap();
        assert!(s.scheduling_group.is_none());
        assert!(s.spec.containers.is_empty());
        let e = serde_json::from_str::<SpecWire>(r#"{"containers": [], "priority": "high"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid type"), "{e}");
        let e = serde_json::from_str::<SpecWire>(r#"{"containers": [], "schedulingGroup": 3}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid type"), "{e}");
        assert!(serde_json::from_str::<SpecWire>("[1]").is_err());
    }
}
