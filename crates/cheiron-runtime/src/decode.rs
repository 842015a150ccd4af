//! Typed reading of a document read from a file (`--from`, `cheiron mutate`, `cheiron explain`),
//! with errors worded as the apiserver words them: the field's path, then what is wrong with
//! it (`spec.mode: Unsupported value: "pod": supported values: "ServiceAccount", "Pod",
//! "Node"`; `spec.secrets: Required value`).
//!
//! What an error may show is decided by what kind of error it is, never by its text: serde
//! reports each kind through its own method of [`serde::de::Error`], and this module's error
//! type keeps them apart. Field names, the values an enum allows and the value given for an
//! enum are the schema's words or a choice among them, and are shown. A value of the wrong
//! type or out of range may be a password (`password: 918273645` is an integer), so only its
//! type is shown. A message a type writes itself may quote its input, so its quoted parts are
//! hidden ([`crate::message::without_values`]).
//!
//! serde_json reports all of these through one error type that keeps only the text, so the
//! JSON value is read here through a small deserializer of its own over the same value
//! (objects, arrays and scalars as `serde_json::Value`'s own deserializer hands them over), and
//! `serde_path_to_error` (already in the tree through axum) tracks the path.

use std::{fmt, marker::PhantomData};

use serde::de::{
    self, DeserializeOwned, Deserializer, IntoDeserializer, Unexpected, Visitor,
    value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer},
};
use serde_json::Value;

use crate::message::without_values;

/// Why a document is not the type wanted, with the path of the field concerned.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.path, .problem))]
pub struct DecodeError {
    /// The field's path (`spec.secrets[0].password`), or `.` for the document itself.
    path: String,
    problem: Problem,
}

impl DecodeError {
    /// The path of the field concerned (`spec.mode`; `.` for the document itself).
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// What is wrong, by the kind serde reported it as.
#[derive(Debug)]
enum Problem {
    /// A field that must be given is not.
    Required(&'static str),
    /// An enum's value is none of those it allows.
    Unsupported {
        value: String,
        supported: &'static [&'static str],
    },
    /// A field the type does not know (types that refuse unknown fields only).
    UnknownField(String),
    /// A field given twice.
    Duplicate(&'static str),
    /// A value of another type than wanted: only its type is kept.
    InvalidType { got: &'static str, want: String },
    /// A value out of what is wanted: not kept.
    InvalidValue { want: String },
    /// A list of another length than wanted.
    InvalidLength { len: usize, want: String },
    /// A type's own message, its quoted parts hidden.
    Custom(String),
}

fn describe(path: &str, problem: &Problem) -> String {
    let quoted = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let child = |field: &str| match path {
        "." => field.to_owned(),
        _ => format!("{path}.{field}"),
    };
    match problem {
        Problem::Required(field) => format!("{}: Required value", child(field)),
        Problem::Unsupported { value, supported } => format!(
            "{path}: Unsupported value: {value:?}: supported values: {}",
            quoted(supported)
        ),
        Problem::UnknownField(field) => format!("unknown field {:?}", child(field)),
        Problem::Duplicate(field) => format!("{}: Duplicate value", child(field)),
        Problem::InvalidType { got, want } => {
            format!("{path}: Invalid value: {got:?}: expected {want}")
        }
        Problem::InvalidValue { want } => format!("{path}: Invalid value: expected {want}"),
        Problem::InvalidLength { len, want } => {
            format!("{path}: Invalid value: {len} items: expected {want}")
        }
        Problem::Custom(message) => format!("{path}: {message}"),
    }
}

/// The kind of an unexpected value, without the value.
fn kind(unexpected: &Unexpected<'_>) -> &'static str {
    match unexpected {
        Unexpected::Bool(_) => "boolean",
        Unexpected::Unsigned(_) | Unexpected::Signed(_) => "integer",
        Unexpected::Float(_) => "number",
        Unexpected::Char(_) | Unexpected::Str(_) => "string",
        Unexpected::Bytes(_) => "bytes",
        Unexpected::Unit | Unexpected::Option => "null",
        Unexpected::Seq => "array",
        Unexpected::Map => "object",
        Unexpected::NewtypeStruct
        | Unexpected::Enum
        | Unexpected::UnitVariant
        | Unexpected::NewtypeVariant
        | Unexpected::TupleVariant
        | Unexpected::StructVariant => "value",
        Unexpected::Other(_) => "value",
    }
}

/// The error serde reports into while reading; [`typed`] adds the path.
#[derive(Debug)]
struct Reported(Problem);

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(".", &self.0))
    }
}

impl std::error::Error for Reported {}

impl de::Error for Reported {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self(Problem::Custom(without_values(&message.to_string())))
    }
    fn missing_field(field: &'static str) -> Self {
        Self(Problem::Required(field))
    }
    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self(Problem::Unsupported {
            value: variant.to_owned(),
            supported: expected,
        })
    }
    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        Self(Problem::UnknownField(field.to_owned()))
    }
    fn duplicate_field(field: &'static str) -> Self {
        Self(Problem::Duplicate(field))
    }
    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self(Problem::InvalidType {
            got: kind(&unexpected),
            want: expected.to_string(),
        })
    }
    fn invalid_value(_unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self(Problem::InvalidValue {
            want: expected.to_string(),
        })
    }
    fn invalid_length(len: usize, expected: &dyn de::Expected) -> Self {
        Self(Problem::InvalidLength {
            len,
            want: expected.to_string(),
        })
    }
}

/// `value` as a `T`, or why not, worded as the apiserver words it.
pub fn typed<T: DeserializeOwned>(value: Value) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(Json::<Reported>::new(value)).map_err(|e| DecodeError {
        path: e.path().to_string(),
        problem: e.into_inner().0,
    })
}

/// A JSON value as a deserializer whose errors are `E`.
struct Json<E> {
    value: Value,
    error: PhantomData<E>,
}

impl<E> Json<E> {
    fn new(value: Value) -> Self {
        Self {
            value,
            error: PhantomData,
        }
    }
}

impl<'de, E: de::Error> IntoDeserializer<'de, E> for Json<E> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de, E: de::Error> Deserializer<'de> for Json<E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter().map(Json::new));
                let read = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(read)
            }
            Value::Object(members) => {
                let mut map = MapDeserializer::new(
                    members
                        .into_iter()
                        .map(|(key, value)| (key, Json::new(value))),
                );
                let read = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(read)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.value {
            Value::Null => visitor.visit_none(),
            value => visitor.visit_some(Json::new(value)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, E> {
        match self.value {
            Value::String(variant) => visitor.visit_enum(variant.into_deserializer()),
            Value::Object(members) => {
                visitor.visit_enum(MapAccessDeserializer::new(MapDeserializer::new(
                    members
                        .into_iter()
                        .map(|(key, value)| (key, Json::new(value))),
                )))
            }
            other => Err(E::invalid_type(unexpected(&other), &"a string")),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, E> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        secrets: Vec<Entry>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    enum Mode {
        ServiceAccount,
        Pod,
        Node,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Entry {
        name: String,
        password: Option<String>,
        port: Option<u16>,
    }

    #[derive(Debug, Deserialize)]
    struct Manager {
        spec: Spec,
    }

    fn error(value: serde_json::Value) -> String {
        typed::<Manager>(value)
            .map(|m| format!("decoded: {m:?}"))
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_value_an_enum_does_not_allow_is_named_with_the_values_it_allows() {
        assert_eq!(
            error(json!({"spec": {"secrets": [], "mode": "pod"}})),
            r#"spec.mode: Unsupported value: "pod": supported values: "ServiceAccount", "Pod", "Node""#
        );
    }

    #[test]
    fn a_missing_field_is_named_by_its_path() {
        assert_eq!(
            error(json!({"spec": {"secret": []}})),
            "spec.secrets: Required value"
        );
        assert_eq!(error(json!({})), "spec: Required value");
        assert_eq!(
            error(json!({"spec": {"secrets": [{"password": "s3cr3t"}]}})),
            "spec.secrets[0].name: Required value"
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_or_range_is_never_repeated() {
        let wrong_type =
            error(json!({"spec": {"secrets": [{"name": "a", "password": 918273645}]}}));
        assert_eq!(
            wrong_type,
            r#"spec.secrets[0].password: Invalid value: "integer": expected a string"#
        );
        let out_of_range = error(json!({"spec": {"secrets": [{"name": "a", "port": 918273645}]}}));
        assert!(
            out_of_range.starts_with("spec.secrets[0].port: Invalid value: expected"),
            "{out_of_range}"
        );
        let string_for_a_list = error(json!({"spec": {"secrets": "s3cr3t"}}));
        assert_eq!(
            string_for_a_list,
            r#"spec.secrets: Invalid value: "string": expected a sequence"#
        );
        for message in [wrong_type, out_of_range, string_for_a_list] {
            assert!(
                !message.contains("918273645") && !message.contains("s3cr3t"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_valid_document_reads_as_serde_json_reads_it() -> Result<(), serde_json::Error> {
        let value = json!({"spec": {
            "secrets": [{"name": "a", "password": null, "port": 5000}],
            "mode": "Node",
            "labels": {"tier": "apps"},
            "ignored": {"unknown": [1, -2, 1.5, true]},
        }});
        let ours = typed::<Manager>(value.clone()).map(|m| m.spec);
        let theirs = serde_json::from_value::<Manager>(value)?.spec;
        assert_eq!(ours.ok(), Some(theirs));
        Ok(())
    }
}
