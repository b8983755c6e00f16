//! A strict JSON reader for verification: one value, nothing after it, and no object with the
//! same key twice, at any depth.
//!
//! `serde_json::Value` keeps the last of two equal keys, so `{"cmd":"ls","cmd":"rm -rf ~"}`
//! would read as one thing to a program and another to a person looking at the line. A line
//! that can be read two ways is refused (MALFORMED), whatever its MAC says. Keys are compared
//! after unescaping, so `"a"` and `"\u0061"` are the same key.
//!
//! serde_json's recursion limit (128) bounds the nesting depth, so hostile input cannot
//! exhaust the stack.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Keys per object above which duplicates are looked up in a hash set, not a list.
const LINEAR_KEYS: usize = 16;

/// Checks that `bytes` is exactly one JSON value with no duplicate keys.
pub(crate) fn check(bytes: &[u8]) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    Check.deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())
}

/// Parses `bytes` as exactly one JSON value, refusing duplicate keys.
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Build.deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

/// Remembers the keys of one object and refuses a repeat.
struct Seen<'de> {
    few: Vec<Cow<'de, str>>,
    many: Option<HashSet<Cow<'de, str>>>,
}

impl<'de> Seen<'de> {
    fn new() -> Self {
        Seen {
            few: Vec::new(),
            many: None,
        }
    }

    fn insert<E: de::Error>(&mut self, key: Cow<'de, str>) -> Result<(), E> {
        if let Some(set) = &mut self.many {
            if !set.insert(key.clone()) {
                return Err(E::custom(format_args!("duplicate key {key:?}")));
            }
            return Ok(());
        }
        if self.few.contains(&key) {
            return Err(E::custom(format_args!("duplicate key {key:?}")));
        }
        self.few.push(key);
        if self.few.len() > LINEAR_KEYS {
            self.many = Some(self.few.drain(..).collect());
        }
        Ok(())
    }
}

/// Reads a key, borrowing it from the input when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Validates without building anything (the verify hot path).
struct Check;

impl<'de> DeserializeSeed<'de> for Check {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Check {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Check)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Seen::new();
        while let Some(key) = map.next_key_seed(Key)? {
            seen.insert::<A::Error>(key)?;
            map.next_value_seed(Check)?;
        }
        Ok(())
    }
}

/// Builds a `serde_json::Value`, refusing duplicate keys.
struct Build;

impl<'de> DeserializeSeed<'de> for Build {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Build)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let key = key.into_owned();
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            let v = map.next_value_seed(Build)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_refused_at_any_depth() {
        let cases: &[(&str, bool)] = &[
            (r#"{"a":1,"b":2}"#, true),
            (r#"{"a":1,"a":2}"#, false),
            (r#"{"a":1,"\u0061":2}"#, false),
            (r#"{"x":[{"k":1},{"k":1}]}"#, true),
            (r#"{"x":[{"k":1,"k":1}]}"#, false),
            (r#"{"x":{"y":{"z":0,"z":0}}}"#, false),
            (r#"{"a":1} "#, true),
            (r#"{"a":1} {}"#, false),
            (r#"{"a":1"#, false),
            ("[1,2,3]", true),
            ("\"s\"", true),
        ];
        for (text, ok) in cases {
            assert_eq!(check(text.as_bytes()).is_ok(), *ok, "check {text}");
            assert_eq!(parse(text.as_bytes()).is_ok(), *ok, "parse {text}");
        }
        let many: String = format!(
            "{{{}}}",
            (0..40)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(check(many.as_bytes()).is_ok());
        let dup = many.replace("\"k39\"", "\"k3\"");
        assert!(check(dup.as_bytes()).is_err());
        assert!(parse(dup.as_bytes()).is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert!(check(deep.as_bytes()).is_err());
        assert!(parse(deep.as_bytes()).is_err());
    }
}
