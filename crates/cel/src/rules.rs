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
//! Property names are used as CEL map keys unescaped: Modelplane's schemas
//! declare no property that Kubernetes would escape (`-`, `.`, reserved
//! words), and no `date-time`/`duration` field carries a rule.

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

    /// `value` as CEL, converting only what a rule can see: all of it at a
    /// node with rules, else just the children that lead to one.
    fn to_cel(&self, value: &Value) -> Cel {
        if self.here {
            return to_cel(value);
        }
        match value {
            Value::Object(map) => {
                let mut out = HashMap::new();
                for (name, child) in &self.properties {
                    if let Some(v) = map.get(name) {
                        out.insert(Key::String(Arc::new(name.clone())), child.to_cel(v));
                    }
                }
                if let Some(values) = &self.values {
                    for (k, v) in map {
                        if !self.properties.iter().any(|(name, _)| name == k) {
                            out.insert(Key::String(Arc::new(k.clone())), values.to_cel(v));
                        }
                    }
                }
                Cel::Map(Map { map: Arc::new(out) })
            }
            Value::Array(items) => match &self.items {
                Some(tree) => Cel::List(Arc::new(items.iter().map(|i| tree.to_cel(i)).collect())),
                None => Cel::List(Arc::new(Vec::new())),
            },
            other => to_cel(other),
        }
    }
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
        let cel = self.tree.to_cel(object);
        let old_cel = old.map(|o| self.tree.to_cel(o));
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
    fn property(self, name: &str) -> Option<Node<'a>> {
        let json = self.json.get(name)?;
        match self.cel {
            Cel::Map(map) => map.get(&KeyRef::String(name)).map(|cel| Node { json, cel }),
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
            if let (Some(child), Some(child_value)) =
                (compiled.properties.get(name), value.property(name))
            {
                let child_old = old.and_then(|o| o.property(name));
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
                if let Some(entry) = value.property(key) {
                    let entry_old = old.and_then(|o| o.property(key));
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
