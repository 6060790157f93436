//! Server-side `Table` output (`apiserver.md` fact 9): what `kubectl get`
//! prints, from a CRD's printer columns (NAME and AGE otherwise), with
//! PartialObjectMetadata rows.

use serde_json::{Value, json};

use crate::resources::{Column, Resource};

mod printers;

/// Whether the request asks for a Table.
pub fn wanted(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// The value at a simple JSONPath (`.a.b.c`).
pub fn at<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|k| !k.is_empty())
        .try_fold(object, |v, k| v.get(k))
}

/// Age as kubectl prints it (apimachinery's `HumanDuration`): `45s`,
/// `3m12s`, `5h`, `5h20m`, `36h`, `3d3h`, `60d`, `2y30d`.
pub fn age(created: &str, now: jiff::Timestamp) -> String {
    let Ok(created) = created.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = now.as_second() - created.as_second();
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    let (m, h) = (secs / 60, secs / 3600);
    let (d, y) = (h / 24, h / (24 * 365));
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{unit}")
        } else {
            format!("{big}{unit}{small}{small_unit}")
        }
    };
    match secs {
        s if s < 120 => format!("{s}s"),
        s if m < 10 => with(m, "m", s % 60, "s"),
        _ if m < 3 * 60 => format!("{m}m"),
        _ if h < 8 => with(h, "h", m % 60, "m"),
        _ if h < 48 => format!("{h}h"),
        _ if h < 24 * 8 => with(d, "d", h % 24, "h"),
        _ if h < 24 * 365 * 2 => format!("{d}d"),
        _ if h < 24 * 365 * 8 => with(y, "y", d % 365, "d"),
        _ => format!("{y}y"),
    }
}

fn columns(resource: &Resource) -> Vec<Column> {
    if !resource.columns.is_empty() {
        return resource.columns.clone();
    }
    vec![Column {
        name: "Age".into(),
        type_: "date".into(),
        json_path: ".metadata.creationTimestamp".into(),
        description: "time since the object was created".into(),
        priority: 0,
    }]
}

/// A column's cell: its JSONPath's only match as is, several joined by
/// spaces (as client-go prints them), none as null.
fn cell(object: &Value, column: &Column, now: jiff::Timestamp) -> Value {
    let found = crate::jsonpath::find(object, &column.json_path);
    let one = match found.as_slice() {
        [] => None,
        [one] => Some(*one),
        many => {
            let text: Vec<String> = many
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect();
            return json!(text.join(" "));
        }
    };
    match (one, column.type_.as_str()) {
        (None | Some(Value::Null), _) => Value::Null,
        (Some(Value::String(s)), "date") => json!(age(s, now)),
        (Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))), _) => v.clone(),
        (Some(v), _) => json!(v.to_string()),
    }
}

/// A Table of `items` (full objects) for `resource`.
pub fn table(
    resource: &Resource,
    items: &[Value],
    resource_version: &str,
    include: Include,
) -> Value {
    let now = jiff::Timestamp::now();
    let mut table = if resource.columns.is_empty()
        && let Some(printers) = printers::for_kind(&resource.group, &resource.plural)
    {
        printed(printers, items, resource_version, now)
    } else {
        by_columns(resource, items, resource_version, now)
    };
    include.apply(&mut table, items);
    table
}

/// What each row carries besides its cells (`includeObject`): nothing, the
/// object's metadata (the default), or the whole object (what `kubectl get
/// --sort-by` asks for, to sort by any field).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Include {
    None,
    #[default]
    Metadata,
    Object,
}

impl Include {
    /// The `includeObject` query parameter's value.
    pub fn from_query(value: Option<&str>) -> Include {
        match value {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }

    fn apply(self, table: &mut Value, items: &[Value]) {
        let Some(rows) = table["rows"].as_array_mut() else {
            return;
        };
        for (row, object) in rows.iter_mut().zip(items) {
            match self {
                Include::Metadata => {}
                Include::None => {
                    if let Some(row) = row.as_object_mut() {
                        row.remove("object");
                    }
                }
                Include::Object => row["object"] = object.clone(),
            }
        }
    }
}

fn by_columns(
    resource: &Resource,
    items: &[Value],
    resource_version: &str,
    now: jiff::Timestamp,
) -> Value {
    let columns = columns(resource);
    let mut definitions = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace.",
    })];
    definitions.extend(columns.iter().map(|c| {
        json!({ "name": c.name, "type": if c.type_ == "date" { "string" } else { &c.type_ }, "format": "", "description": c.description, "priority": c.priority })
    }));
    let rows: Vec<Value> = items
        .iter()
        .map(|object| {
            let mut cells = vec![object["metadata"]["name"].clone()];
            cells.extend(columns.iter().map(|c| cell(object, c, now)));
            json!({
                "cells": cells,
                "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"] },
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version },
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// A Table of a built-in kind, with the columns its printers compute.
fn printed(
    printers: &[printers::Printer],
    items: &[Value],
    resource_version: &str,
    now: jiff::Timestamp,
) -> Value {
    let mut definitions = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace.",
    })];
    definitions.extend(printers.iter().map(|p| {
        json!({ "name": p.name, "type": "string", "format": "", "description": "", "priority": p.priority })
    }));
    let rows: Vec<Value> = items
        .iter()
        .map(|object| {
            let mut cells = vec![object["metadata"]["name"].clone()];
            cells.extend(printers.iter().map(|p| (p.cell)(object, now)));
            json!({
                "cells": cells,
                "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"] },
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version },
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Crossplane's managed-resource columns (`kubectl get managed`).
    #[test]
    fn filtered_and_escaped_column_paths_fill_their_cells() {
        let column = |path: &str| Column {
            name: "C".into(),
            type_: "string".into(),
            json_path: path.into(),
            description: String::new(),
            priority: 0,
        };
        let object = json!({
            "metadata": { "annotations": { "crossplane.io/external-name": "vpc-1" } },
            "status": { "conditions": [{ "type": "Synced", "status": "True" }, { "type": "Ready", "status": "False" }] },
        });
        let now = jiff::Timestamp::now();
        let ready = column(".status.conditions[?(@.type=='Ready')].status");
        assert_eq!(cell(&object, &ready, now), json!("False"));
        let external = column(r".metadata.annotations.crossplane\.io/external-name");
        assert_eq!(cell(&object, &external, now), json!("vpc-1"));
        let types = column(".status.conditions[*].type");
        assert_eq!(cell(&object, &types, now), json!("Synced Ready"));
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let now: jiff::Timestamp = "2026-11-30T12:00:00Z".parse().expect("time");
        for (created, want) in [
            ("2026-11-30T11:59:15Z", "45s"),
            ("2026-11-30T11:56:48Z", "3m12s"),
            ("2026-11-30T10:00:00Z", "120m"),
            ("2026-11-30T07:00:00Z", "5h"),
            ("2026-11-30T06:40:00Z", "5h20m"),
            ("2026-11-30T11:57:00Z", "3m"),
            ("2026-11-23T12:00:00Z", "7d"),
            ("2024-10-01T12:00:00Z", "2y60d"),
            ("2026-11-29T00:00:00Z", "36h"),
            ("2026-11-27T09:00:00Z", "3d3h"),
            ("2026-10-01T12:00:00Z", "60d"),
        ] {
            assert_eq!(age(created, now), want, "{created}");
        }
    }

    #[test]
    fn only_a_first_choice_of_table_is_a_table() {
        assert!(wanted(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wanted("application/json"));
    }
}
