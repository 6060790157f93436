//! A decoded message as the JSON Kubernetes would store for it: JSON field
//! names, optional fields left out when empty (Go's `omitempty`), embedded
//! structs inlined, and apimachinery's own types in their JSON forms — Time
//! and MicroTime as RFC 3339, Quantity as its string, IntOrString as either,
//! RawExtension and FieldsV1 as the JSON they carry, bytes as base64.

use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value as Field};
use serde_json::{Map, Value, json};

use super::ProtobufError;
use super::schema::Schema;

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// The JSON of `message`.
pub fn message(schema: &Schema, message: &DynamicMessage) -> Result<Value, ProtobufError> {
    let name = message.descriptor().full_name().to_string();
    if let Some(special) = apimachinery(&name, message)? {
        return Ok(special);
    }
    if let Some(unknown) = message.unknown_fields().next() {
        return Err(ProtobufError::UnknownField {
            message: name,
            number: unknown.number(),
        });
    }
    let mut object = Map::new();
    let mut fields: Vec<_> = message.fields().collect();
    fields.sort_by_key(|(field, _)| field.number());
    for (field, value) in fields {
        if schema.is_inline(&name, field.number()) {
            if let Field::Message(inner) = value
                && let Value::Object(inner) = self::message(schema, inner)?
            {
                object.extend(inner);
            }
            continue;
        }
        let keep_zero = schema.keeps_zero(&name, field.number());
        if let Some(json) = field_value(schema, value, keep_zero)? {
            object.insert(field.json_name().to_string(), json);
        }
    }
    Ok(Value::Object(object))
}

/// A field's JSON, or `None` when `omitempty` leaves it out.
fn field_value(
    schema: &Schema,
    value: &Field,
    keep_zero: bool,
) -> Result<Option<Value>, ProtobufError> {
    Ok(match value {
        Field::List(items) if items.is_empty() => None,
        Field::List(items) => Some(Value::Array(
            items
                .iter()
                .map(|item| field_value(schema, item, true).map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?,
        )),
        Field::Map(entries) if entries.is_empty() => None,
        Field::Map(entries) => {
            let mut object = Map::new();
            for (key, value) in entries {
                let MapKey::String(key) = key else { continue };
                let value = field_value(schema, value, true)?.unwrap_or_default();
                object.insert(key.clone(), value);
            }
            // A map's order on the wire is the sender's; JSON's is sorted.
            object.sort_keys();
            Some(Value::Object(object))
        }
        Field::Message(inner) => Some(message(schema, inner)?),
        scalar => {
            let json = self::scalar(scalar);
            (keep_zero || !is_zero(&json)).then_some(json)
        }
    })
}

fn scalar(value: &Field) -> Value {
    match value {
        Field::Bool(b) => json!(b),
        Field::I32(n) => json!(n),
        Field::I64(n) => json!(n),
        Field::U32(n) => json!(n),
        Field::U64(n) => json!(n),
        Field::F32(n) => json!(n),
        Field::F64(n) => json!(n),
        Field::String(s) => json!(s),
        Field::Bytes(b) => json!(crate::codec::base64(b)),
        Field::EnumNumber(n) => json!(n),
        _ => Value::Null,
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// The JSON form of an apimachinery type that JSON spells its own way.
fn apimachinery(name: &str, message: &DynamicMessage) -> Result<Option<Value>, ProtobufError> {
    let number = |n: u32| message.get_field_by_number(n).map(|v| v.into_owned());
    let int = |n: u32| match number(n) {
        Some(Field::I64(v)) => v,
        Some(Field::I32(v)) => i64::from(v),
        _ => 0,
    };
    let text = |n: u32| match number(n) {
        Some(Field::String(s)) => s,
        _ => String::new(),
    };
    let raw = |n: u32| -> Result<Value, ProtobufError> {
        match number(n) {
            Some(Field::Bytes(b)) if !b.is_empty() => {
                serde_json::from_slice(&b).map_err(|e| ProtobufError::Raw {
                    message: name.to_string(),
                    reason: e.to_string(),
                })
            }
            _ => Ok(Value::Null),
        }
    };
    Ok(Some(match name {
        // Zero is null in JSON; only seconds are kept (as Kubernetes does).
        n if n == format!("{META}.Time") => match int(1) {
            0 => Value::Null,
            seconds => json!(timestamp(seconds, 0, false)?),
        },
        n if n == format!("{META}.MicroTime") => match (int(1), int(2)) {
            (0, 0) => Value::Null,
            (seconds, nanos) => json!(timestamp(seconds, nanos, true)?),
        },
        n if n == format!("{META}.FieldsV1") => raw(1)?,
        n if n == format!("{META}.Verbs") => match number(1) {
            Some(Field::List(items)) => Value::Array(items.iter().map(scalar).collect()),
            _ => json!([]),
        },
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => json!(text(1)),
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => match int(1) {
            1 => json!(text(3)),
            _ => json!(int(2)),
        },
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => raw(1)?,
        _ => return Ok(None),
    }))
}

fn timestamp(seconds: i64, nanos: i64, micro: bool) -> Result<String, ProtobufError> {
    let nanos = i32::try_from(nanos).unwrap_or_default();
    let at = jiff::Timestamp::new(seconds, nanos).map_err(|e| ProtobufError::Raw {
        message: "Time".into(),
        reason: e.to_string(),
    })?;
    let format = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Ok(at.strftime(format).to_string())
}
