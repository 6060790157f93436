//! The protobuf schema of the built-in kinds, from `schema.json` (written by
//! `generate.py` from the k8s-pb and k8s-openapi crates), as a
//! `prost-reflect` descriptor pool plus what JSON needs beyond it: which
//! scalar fields keep their zero value and which fields are inlined.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

use prost_reflect::DescriptorPool;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions,
};

/// `{"package.Message": [[number, json name, type, label, keep zero, list type], …]}`.
const SCHEMA: &str = include_str!("schema.json");

type Row = (u32, String, String, String, bool, String);

/// The pool and the JSON rules of every message in it.
pub struct Schema {
    pub pool: DescriptorPool,
    /// Scalar fields written even when zero.
    keep_zero: FieldRules<()>,
    /// Embedded structs whose fields are the parent's.
    inline: FieldRules<()>,
    /// Repeated fields → how apply merges them (`atomic`, `set`,
    /// `map:key,…`).
    lists: FieldRules<String>,
}

/// Something said of some fields, by message and field number: looked up
/// for every field of every object read, so without building a key.
#[derive(Default)]
struct FieldRules<T>(HashMap<String, HashMap<u32, T>>);

impl<T> FieldRules<T> {
    fn insert(&mut self, message: &str, number: u32, rule: T) {
        self.0
            .entry(message.to_string())
            .or_default()
            .insert(number, rule);
    }

    fn get(&self, message: &str, number: u32) -> Option<&T> {
        self.0.get(message)?.get(&number)
    }
}

impl Schema {
    pub fn keeps_zero(&self, message: &str, number: u32) -> bool {
        self.keep_zero.get(message, number).is_some()
    }

    pub fn is_inline(&self, message: &str, number: u32) -> bool {
        self.inline.get(message, number).is_some()
    }

    /// How server-side apply merges a repeated field (`atomic` unless said).
    pub fn list_type(&self, message: &str, number: u32) -> &str {
        self.lists
            .get(message, number)
            .map_or("atomic", String::as_str)
    }
}

/// Built once, on the first protobuf body.
pub static SCHEMA_POOL: LazyLock<Result<Schema, String>> = LazyLock::new(build);

fn build() -> Result<Schema, String> {
    let rows: BTreeMap<String, Vec<Row>> =
        serde_json::from_str(SCHEMA).map_err(|e| format!("schema.json: {e}"))?;
    let mut files: BTreeMap<&str, FileDescriptorProto> = BTreeMap::new();
    let mut keep_zero = FieldRules::default();
    let mut inline = FieldRules::default();
    let mut lists = FieldRules::default();
    for (full_name, fields) in &rows {
        let (package, name) = full_name
            .rsplit_once('.')
            .ok_or("a message without package")?;
        let mut message = DescriptorProto {
            name: Some(name.to_string()),
            ..Default::default()
        };
        for (number, json_name, kind, label, zero, list) in fields {
            if *zero {
                keep_zero.insert(full_name, *number, ());
            }
            if !list.is_empty() {
                lists.insert(full_name, *number, list.clone());
            }
            if label == "inline" {
                inline.insert(full_name, *number, ());
            }
            let field_name = if json_name.is_empty() {
                format!("inline{number}")
            } else {
                json_name.clone()
            };
            let mut field = typed(&field_name, *number, kind);
            field.json_name = Some(field_name.clone());
            match label.as_str() {
                "repeated" => field.set_label(Label::Repeated),
                "map" => {
                    let entry = map_entry(&field_name, kind);
                    field = typed(&field_name, *number, "");
                    field.set_label(Label::Repeated);
                    field.set_type(Type::Message);
                    field.type_name = Some(format!(".{full_name}.{}", entry.name()));
                    field.json_name = Some(field_name);
                    message.nested_type.push(entry);
                }
                _ => {}
            }
            message.field.push(field);
        }
        files
            .entry(package)
            .or_insert_with(|| FileDescriptorProto {
                name: Some(format!("{package}.proto")),
                package: Some(package.to_string()),
                syntax: Some("proto2".into()),
                ..Default::default()
            })
            .message_type
            .push(message);
    }
    let packages: BTreeSet<String> = files.keys().map(|p| p.to_string()).collect();
    for file in files.values_mut() {
        file.dependency = imports(file, &packages).into_iter().collect();
    }
    let set = FileDescriptorSet {
        file: files.into_values().collect(),
    };
    let pool = DescriptorPool::from_file_descriptor_set(set).map_err(|e| e.to_string())?;
    Ok(Schema {
        pool,
        keep_zero,
        inline,
        lists,
    })
}

/// A field of `kind`: a scalar's name or a message's full name.
fn typed(name: &str, number: u32, kind: &str) -> FieldDescriptorProto {
    let mut field = FieldDescriptorProto {
        name: Some(name.to_string()),
        number: i32::try_from(number).ok(),
        ..Default::default()
    };
    field.set_label(Label::Optional);
    match kind {
        "string" => field.set_type(Type::String),
        "bytes" => field.set_type(Type::Bytes),
        "bool" => field.set_type(Type::Bool),
        "int32" => field.set_type(Type::Int32),
        "int64" => field.set_type(Type::Int64),
        "double" => field.set_type(Type::Double),
        "" => {}
        message => {
            field.set_type(Type::Message);
            field.type_name = Some(format!(".{message}"));
        }
    }
    field
}

/// The nested `key`/`value` message protobuf encodes a map field's entries as.
fn map_entry(field: &str, value: &str) -> DescriptorProto {
    let mut upper = field.to_string();
    if let Some(first) = upper.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    DescriptorProto {
        name: Some(format!("{upper}Entry")),
        field: vec![typed("key", 1, "string"), typed("value", 2, value)],
        options: Some(MessageOptions {
            map_entry: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The other files whose messages `file` refers to.
fn imports(file: &FileDescriptorProto, packages: &BTreeSet<String>) -> BTreeSet<String> {
    let fields = file.message_type.iter().flat_map(|m| {
        m.field
            .iter()
            .chain(m.nested_type.iter().flat_map(|n| &n.field))
    });
    fields
        .filter_map(|f| f.type_name.as_deref())
        .filter_map(|t| t.trim_start_matches('.').rsplit_once('.'))
        .map(|(package, _)| package.to_string())
        .filter(|p| packages.contains(p) && p != file.package())
        .map(|p| format!("{p}.proto"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_builds_and_knows_the_kinds_kubectl_creates() {
        let schema = SCHEMA_POOL.as_ref().expect("schema");
        for name in [
            "k8s.io.api.core.v1.Namespace",
            "k8s.io.api.core.v1.Secret",
            "k8s.io.api.apps.v1.Deployment",
            "k8s.io.api.batch.v1.CronJob",
            "k8s.io.api.rbac.v1.RoleBinding",
            "k8s.io.apimachinery.pkg.runtime.Unknown",
        ] {
            assert!(schema.pool.get_message_by_name(name).is_some(), "{name}");
        }
        assert!(schema.keeps_zero("k8s.io.api.core.v1.ContainerPort", 3));
        assert!(!schema.keeps_zero("k8s.io.api.core.v1.ContainerPort", 2));
        assert!(schema.is_inline("k8s.io.api.core.v1.Volume", 2));
    }
}
