//! Reading the JSON form of a snapshot (the same structure as the pickle, e.g. what
//! `json.dump(torch.cuda.memory._snapshot())` writes), as a stream.
//!
//! JSON is read top-down, so every value's place is known before it is read: values the
//! schema reads go to the [`Builder`] as the pickle reader's do, and everything else
//! (stack frames, unknown keys) is parsed and dropped without being stored
//! (`serde::de::IgnoredAny`). serde_json refuses nesting deeper than 128 levels, so the
//! visitors recurse at most that deep.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::decode::{Builder, Kind, Role, Val, k, key_code};
use crate::{Snapshot, SnapshotError};

/// One value of the document, read in `role`.
struct Seed<'b> {
    b: &'b mut Builder,
    role: Role,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Val;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Val, D::Error> {
        d.deserialize_any(self)
    }
}

fn fatal<E: de::Error>(message: String) -> E {
    E::custom(message)
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Val;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Val, E> {
        Ok(Val::None)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Val, E> {
        Ok(Val::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Val, E> {
        Ok(Val::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Val, E> {
        self.b.int(v.into()).map_err(fatal)
    }

    fn visit_f64<E>(self, v: f64) -> Result<Val, E> {
        Ok(Val::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Val, E> {
        self.b.string(v).map_err(fatal)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
        let list = self.b.open(self.role, Kind::List).map_err(fatal)?;
        if list == Val::Skip(Kind::List) {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(list);
        }
        let mut i = 0u64;
        loop {
            let role = self
                .b
                .list_info(list)
                .map_or(Role::Skip, |(r, _)| r.elem(i));
            let Some(item) = seq.next_element_seed(Seed { b: self.b, role })? else {
                break;
            };
            self.b.add(list, item);
            i += 1;
        }
        Ok(list)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val, A::Error> {
        let dict = self.b.open(self.role, Kind::Dict).map_err(fatal)?;
        let role = self.b.dict_info(dict).map_or(Role::Skip, |(r, _)| r);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let code = key_code(&key);
            if code == k::NONE || !role.has_field(code) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = map.next_value_seed(Seed {
                b: self.b,
                role: role.key(code),
            })?;
            self.b.set_item(dict, code, value).map_err(fatal)?;
        }
        Ok(dict)
    }
}

fn read<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
) -> Result<Snapshot, SnapshotError> {
    let mut b = Builder::default();
    let root = Seed {
        b: &mut b,
        role: Role::Root,
    }
    .deserialize(&mut de)?;
    de.end()?;
    b.finish(root)
}

/// Reads a snapshot's JSON form from memory.
pub fn read_json(data: &[u8]) -> Result<Snapshot, SnapshotError> {
    read(serde_json::Deserializer::from_slice(data))
}

/// Reads a snapshot's JSON form from a stream.
pub fn read_json_from(input: impl std::io::Read) -> Result<Snapshot, SnapshotError> {
    read(serde_json::Deserializer::from_reader(input))
}
