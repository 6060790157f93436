//! Evaluation of a schema's `x-kubernetes-validations` rules.
//!
//! Data flow: `kube_cel::compile_schema` compiles every rule once per kind,
//! and a [`RuleTree`] marks where rules are; [`RuleSet::evaluate`] converts
//! to CEL only the parts of the object (and its previous version) on the way
//! to a rule, each once, then walks the compiled schema and the CEL value
//! together, binding `self` (and `oldSelf`) at each node that carries rules.
//! Subtrees without rules (a cluster's published status, say) are neither
//! converted nor walked, so a check costs the rules and little else.
//!
//! Values are converted as Kubernetes converts them for CEL: a declared
//! property's name is escaped (`x-y` is `x__dash__y`, `a__b` is
//! `a__underscores__b`, `namespace` is `__namespace__`; a name starting
//! with a digit is not visible; a map's keys are data and stay as they
//! are), and a string whose schema says `format: date-time` or `duration`
//! is a CEL `timestamp` or `duration`. (`format: date` stays a string: the
//! compiled schema does not keep that format.)

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel::objects::{Key, KeyRef, Map};
use kube_cel::cel::{Context, Value as Cel};
use kube_cel::{CompilationResult, CompiledSchema, KubeCelExt};
use serde_json::Value;

/// A failed rule at a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleFailure {
    /// Field path of the node the rule sits on.
    pub path: String,
    /// The rule's message (or why it could not be evaluated).
    pub message: String,
    /// The JSON type of the value at `path` (`object`, `string`…).
    pub value_type: &'static str,
}

/// The compiled rules of one schema.
pub struct RuleSet {
    compiled: CompiledSchema,
    /// Where the rules are.
    tree: RuleTree,
    base: Context<'static>,
}

/// The nodes of a schema that carry rules, or lead to one.
#[derive(Debug, Default)]
struct RuleTree {
    /// Rules sit on this node.
    here: bool,
    /// Properties on the way to a rule.
    properties: Vec<(String, RuleTree)>,
    /// The array items, when they lead to a rule.
    items: Option<Box<RuleTree>>,
    /// The map values, when they lead to a rule.
    values: Option<Box<RuleTree>>,
}

impl RuleTree {
    /// The tree of `compiled`, or `None` when no rule is below it.
    fn of(compiled: &CompiledSchema) -> Option<RuleTree> {
        let mut properties: Vec<(String, RuleTree)> = compiled
            .properties
            .iter()
            .filter_map(|(name, child)| Some((name.clone(), RuleTree::of(child)?)))
            .collect();
        properties.sort_by(|a, b| a.0.cmp(&b.0));
        let tree = RuleTree {
            here: !compiled.validations.is_empty(),
            properties,
            items: compiled
                .items
                .as_deref()
                .and_then(RuleTree::of)
                .map(Box::new),
            values: compiled
                .additional_properties
                .as_deref()
                .and_then(RuleTree::of)
                .map(Box::new),
        };
        let leads = tree.here
            || !tree.properties.is_empty()
            || tree.items.is_some()
            || tree.values.is_some();
        leads.then_some(tree)
    }

    /// `value` (whose schema is `compiled`) as CEL, converting only what a
    /// rule can see: all of it at a node with rules, else just the children
    /// that lead to one.
    fn to_cel(&self, compiled: &CompiledSchema, value: &Value) -> Cel {
        if self.here {
            return typed(compiled, value);
        }
        match value {
            Value::Object(map) => {
                let mut out = HashMap::new();
                for (name, child) in &self.properties {
                    if let (Some(v), Some(schema), Some(key)) = (
                        map.get(name),
                        compiled.properties.get(name),
                        key(compiled, name),
                    ) {
                        out.insert(key, child.to_cel(schema, v));
                    }
                }
                if let (Some(values), Some(schema)) =
                    (&self.values, compiled.additional_properties.as_deref())
                {
                    for (k, v) in map {
                        if let (false, Some(key)) =
                            (compiled.properties.contains_key(k), key(compiled, k))
                        {
                            out.insert(key, values.to_cel(schema, v));
                        }
                    }
                }
                Cel::Map(Map { map: Arc::new(out) })
            }
            Value::Array(items) => match (&self.items, compiled.items.as_deref()) {
                (Some(tree), Some(schema)) => Cel::List(Arc::new(
                    items.iter().map(|i| tree.to_cel(schema, i)).collect(),
                )),
                _ => Cel::List(Arc::new(Vec::new())),
            },
            other => typed(compiled, other),
        }
    }
}

/// The CEL key of property `name` of an object whose schema is `compiled`:
/// escaped, unless the object is a map (its keys are data); `None` for a
/// name rules cannot see.
fn key(compiled: &CompiledSchema, name: &str) -> Option<Key> {
    let name = if compiled.is_map {
        name.to_string()
    } else {
        escape(name)?
    };
    Some(Key::String(Arc::new(name)))
}

/// CEL's reserved words, which a property name is escaped from.
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property name as Kubernetes exposes it to CEL: `__word__` for a
/// reserved word, else `__`, `.`, `-` and `/` spelled `__underscores__`,
/// `__dot__`, `__dash__` and `__slash__` (a single `_` stays). A name that
/// starts with a digit or holds any other character is not visible to rules.
fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut escaped = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("__") {
            escaped.push_str("__underscores__");
            rest = after;
            continue;
        }
        match c {
            '.' => escaped.push_str("__dot__"),
            '-' => escaped.push_str("__dash__"),
            '/' => escaped.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => escaped.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(escaped)
}

/// `value` as CEL, read through its schema: names escaped, date-times and
/// durations typed.
fn typed(compiled: &CompiledSchema, value: &Value) -> Cel {
    match value {
        Value::String(s) => match compiled.format {
            kube_cel::SchemaFormat::DateTime => chrono::DateTime::parse_from_rfc3339(s)
                .map_or_else(|_| to_cel(value), Cel::Timestamp),
            kube_cel::SchemaFormat::Duration => {
                go_duration(s).map_or_else(|| to_cel(value), Cel::Duration)
            }
            _ => to_cel(value),
        },
        Value::Array(items) => Cel::List(Arc::new(
            items
                .iter()
                .map(|item| match compiled.items.as_deref() {
                    Some(schema) => typed(schema, item),
                    None => to_cel(item),
                })
                .collect(),
        )),
        Value::Object(map) => {
            let mut out: HashMap<Key, Cel> = map
                .iter()
                .filter_map(|(k, v)| {
                    let schema = compiled
                        .properties
                        .get(k)
                        .or(compiled.additional_properties.as_deref());
                    let v = schema.map_or_else(|| to_cel(v), |schema| typed(schema, v));
                    Some((key(compiled, k)?, v))
                })
                .collect();
            if compiled.embedded_resource {
                for (field, empty) in [
                    ("apiVersion", Cel::String(Arc::default())),
                    ("kind", Cel::String(Arc::default())),
                    (
                        "metadata",
                        Cel::Map(Map {
                            map: Arc::default(),
                        }),
                    ),
                ] {
                    out.entry(Key::String(Arc::new(field.into())))
                        .or_insert(empty);
                }
            }
            Cel::Map(Map { map: Arc::new(out) })
        }
        other => to_cel(other),
    }
}

/// A duration as Kubernetes reads `format: duration` (go-openapi's strfmt):
/// Go's syntax (`1h30m`, `-1.5s`, `300ms`, `0`), also days and weeks and
/// unit words (`1d`, `2w`, `3 hours`).
fn go_duration(text: &str) -> Option<chrono::Duration> {
    let text = text.trim();
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    match rest {
        "0" => return Some(chrono::Duration::zero()),
        "" => return None,
        _ => {}
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .filter(|end| *end > 0)?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = rest[number_end..].trim_start();
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(rest.len());
        let per_unit = match &rest[..unit_end] {
            "ns" | "nanosecond" | "nanoseconds" => 1.0,
            "us" | "µs" | "μs" | "microsecond" | "microseconds" => 1e3,
            "ms" | "millisecond" | "milliseconds" => 1e6,
            "s" | "sec" | "secs" | "second" | "seconds" => 1e9,
            "m" | "min" | "mins" | "minute" | "minutes" => 60e9,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600e9,
            "d" | "day" | "days" => 86_400e9,
            "w" | "wk" | "wks" | "week" | "weeks" => 604_800e9,
            _ => return None,
        };
        nanos += number * per_unit;
        rest = rest[unit_end..].trim_start();
    }
    let nanos = if negative { -nanos } else { nanos };
    // Rounded to whole nanoseconds, within i64 (about 292 years).
    (nanos.abs() < 9.2e18).then(|| chrono::Duration::nanoseconds(nanos.round() as i64))
}

impl std::fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSet").finish_non_exhaustive()
    }
}

impl RuleSet {
    /// Compiles every rule of `schema` (an `openAPIV3Schema`).
    pub fn compile(schema: &Value) -> Self {
        let compiled = kube_cel::compile_schema(schema);
        RuleSet {
            tree: RuleTree::of(&compiled).unwrap_or_default(),
            compiled,
            base: Context::default().with_all(),
        }
    }

    /// The compiled tree, for inspection (e.g. compile errors).
    pub fn compiled(&self) -> &CompiledSchema {
        &self.compiled
    }

    /// Evaluates every rule against `object`, which must already be pruned and
    /// defaulted. Transition rules run only when `old` is given.
    pub fn evaluate(&self, object: &Value, old: Option<&Value>) -> Vec<RuleFailure> {
        let cel = self.tree.to_cel(&self.compiled, object);
        let old_cel = old.map(|o| self.tree.to_cel(&self.compiled, o));
        let mut walk = Walk {
            base: &self.base,
            failures: Vec::new(),
        };
        walk.node(
            &self.compiled,
            &self.tree,
            Node {
                json: object,
                cel: &cel,
            },
            old.zip(old_cel.as_ref())
                .map(|(json, cel)| Node { json, cel }),
            String::new(),
        );
        walk.failures
    }
}

/// A value seen both as JSON (for paths and types) and as CEL (for rules).
#[derive(Clone, Copy)]
struct Node<'a> {
    json: &'a Value,
    cel: &'a Cel,
}

impl<'a> Node<'a> {
    /// Property `name` of an object whose schema is `compiled`.
    fn property(self, compiled: &CompiledSchema, name: &str) -> Option<Node<'a>> {
        let json = self.json.get(name)?;
        let Key::String(key) = key(compiled, name)? else {
            return None;
        };
        match self.cel {
            Cel::Map(map) => map.get(&KeyRef::String(&key)).map(|cel| Node { json, cel }),
            _ => None,
        }
    }

    fn item(self, index: usize) -> Option<Node<'a>> {
        let json = self.json.get(index)?;
        match self.cel {
            Cel::List(items) => items.get(index).map(|cel| Node { json, cel }),
            _ => None,
        }
    }
}

struct Walk<'c> {
    base: &'c Context<'static>,
    failures: Vec<RuleFailure>,
}

impl Walk<'_> {
    /// Checks the rules at `compiled` and below, going only where `tree`
    /// says rules are.
    fn node(
        &mut self,
        compiled: &CompiledSchema,
        tree: &RuleTree,
        value: Node<'_>,
        old: Option<Node<'_>>,
        path: String,
    ) {
        if tree.here {
            self.rules(compiled, value, old, &path);
        }
        for (name, child_tree) in &tree.properties {
            if let (Some(child), Some(child_value)) = (
                compiled.properties.get(name),
                value.property(compiled, name),
            ) {
                let child_old = old.and_then(|o| o.property(compiled, name));
                self.node(child, child_tree, child_value, child_old, join(&path, name));
            }
        }
        if let (Some(items), Some(items_tree), Some(array)) =
            (&compiled.items, &tree.items, value.json.as_array())
        {
            for i in 0..array.len() {
                if let Some(item) = value.item(i) {
                    let item_old = old.and_then(|o| o.item(i));
                    self.node(items, items_tree, item, item_old, format!("{path}[{i}]"));
                }
            }
        }
        if let (Some(values), Some(values_tree), Some(map)) = (
            &compiled.additional_properties,
            &tree.values,
            value.json.as_object(),
        ) {
            for key in map.keys() {
                if compiled.properties.contains_key(key) {
                    continue;
                }
                if let Some(entry) = value.property(compiled, key) {
                    let entry_old = old.and_then(|o| o.property(compiled, key));
                    self.node(values, values_tree, entry, entry_old, join(&path, key));
                }
            }
        }
    }

    fn rules(
        &mut self,
        compiled: &CompiledSchema,
        value: Node<'_>,
        old: Option<Node<'_>>,
        path: &str,
    ) {
        let mut scope = self.base.new_inner_scope();
        scope.add_variable_from_value("self", value.cel.clone());
        if let Some(old) = old {
            scope.add_variable_from_value("oldSelf", old.cel.clone());
        }
        for rule in &compiled.validations {
            let message = match rule {
                Ok(rule) => evaluate(rule, &scope, old.is_some()),
                Err(e) => Some(format!("rule could not be compiled: {e}")),
            };
            if let Some(message) = message {
                self.failures.push(RuleFailure {
                    path: match rule
                        .as_ref()
                        .ok()
                        .and_then(|r| r.rule.field_path.as_deref())
                    {
                        Some(field) if field.starts_with('.') => format!("{path}{field}"),
                        Some(field) => join(path, field),
                        None => path.to_string(),
                    },
                    message,
                    value_type: modelplane_api::validation::structural::type_name(value.json),
                });
            }
        }
    }
}

/// Runs one rule; `None` when it holds, else the message to report.
fn evaluate(rule: &CompilationResult, scope: &Context<'_>, has_old: bool) -> Option<String> {
    if rule.is_transition_rule && !has_old && rule.rule.optional_old_self != Some(true) {
        return None;
    }
    match rule.program.execute(scope) {
        Ok(Cel::Bool(true)) => None,
        Ok(Cel::Bool(false)) => Some(failure_message(rule, scope)),
        Ok(_) => Some(format!(
            "rule did not evaluate to a bool: {}",
            rule.rule.rule
        )),
        Err(e) => Some(format!("rule evaluation error: {e}")),
    }
}

fn failure_message(rule: &CompilationResult, scope: &Context<'_>) -> String {
    if let Some(program) = &rule.message_program
        && let Ok(Cel::String(s)) = program.execute(scope)
    {
        return (*s).clone();
    }
    rule.rule
        .message
        .clone()
        .unwrap_or_else(|| format!("failed rule: {}", rule.rule.rule))
}

fn join(path: &str, name: &str) -> String {
    modelplane_api::validation::structural::join(path, name)
}

/// Converts JSON to CEL: integers are `int`, objects are string-keyed maps.
pub fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<Key, Cel> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            Cel::Map(Map {
                map: Arc::new(entries),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The messages of the rules `object` breaks under `schema`.
    fn broken(schema: Value, object: Value) -> Vec<String> {
        RuleSet::compile(&schema)
            .evaluate(&object, None)
            .into_iter()
            .map(|f| format!("{}: {}", f.path, f.message))
            .collect()
    }

    #[test]
    fn rules_see_property_names_escaped_as_kubernetes_escapes_them() {
        let schema = json!({ "type": "object", "properties": { "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                { "rule": "self.max__dash__replicas >= self.min__dash__replicas", "message": "max below min" },
                { "rule": "self.__namespace__ != 'kube-system'", "message": "reserved" },
                { "rule": "self.a__dot__b__slash__c == 'x' && self.snake_case == 1 && self.x__underscores__y == 2", "message": "dots" },
                { "rule": "size(self) == 7", "message": "invisible names are left out" },
                { "rule": "self.labels.all(k, k != 'team-a')", "message": "map keys are data" },
            ],
            "properties": {
                "max-replicas": { "type": "integer" }, "min-replicas": { "type": "integer" },
                "namespace": { "type": "string" }, "a.b/c": { "type": "string" },
                "snake_case": { "type": "integer" }, "x__y": { "type": "integer" },
                "1st": { "type": "integer" }, "a b": { "type": "integer" },
                "labels": { "type": "object", "additionalProperties": { "type": "string" } },
            },
        } } });
        let object = |max: i64, namespace: &str, label: &str| {
            json!({ "spec": {
            "max-replicas": max, "min-replicas": 2, "namespace": namespace, "a.b/c": "x",
            "snake_case": 1, "x__y": 2, "1st": 1, "a b": 1, "labels": { label: "yes" },
        } })
        };
        assert_eq!(
            broken(schema.clone(), object(3, "ml-team", "team-b")),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(schema, object(1, "kube-system", "team-a")),
            [
                "spec: max below min",
                "spec: reserved",
                "spec: map keys are data"
            ]
        );
    }

    #[test]
    fn date_times_and_durations_are_typed_for_rules() {
        let schema = json!({ "type": "object", "properties": { "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                { "rule": "self.expires > self.created", "message": "expires before created" },
                { "rule": "self.grace <= duration('1h')", "message": "grace too long" },
                { "rule": "self.expires - self.created >= self.grace", "message": "window" },
            ],
            "properties": {
                "created": { "type": "string", "format": "date-time" },
                "expires": { "type": "string", "format": "date-time" },
                "grace": { "type": "string", "format": "duration" },
            },
        } } });
        let object = |expires: &str, grace: &str| {
            json!({ "spec": {
            "created": "2026-12-01T00:00:00Z", "expires": expires, "grace": grace } })
        };
        assert_eq!(
            broken(schema.clone(), object("2026-12-01T02:00:00+01:00", "30m")),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(schema, object("2026-11-30T23:00:00Z", "1h30m")),
            [
                "spec: expires before created",
                "spec: grace too long",
                "spec: window"
            ]
        );
    }

    #[test]
    fn go_durations_read_as_go_reads_them() {
        let nanos = |text: &str| go_duration(text).and_then(|d| d.num_nanoseconds());
        assert_eq!(nanos("0"), Some(0));
        assert_eq!(nanos("1h30m"), Some(5_400_000_000_000));
        assert_eq!(nanos("-1.5s"), Some(-1_500_000_000));
        assert_eq!(nanos("300ms"), Some(300_000_000));
        assert_eq!(nanos("2µs1ns"), Some(2_001));
        assert_eq!(nanos("1d"), Some(86_400_000_000_000));
        assert_eq!(
            nanos("2w 3 hours"),
            Some(2 * 604_800_000_000_000 + 3 * 3_600_000_000_000)
        );
        assert_eq!(nanos("1y"), None);
        assert_eq!(nanos("h"), None);
        assert_eq!(nanos(""), None);
    }
}
