//! DRA device selectors: the CEL a ModelDeployment writes in
//! `nodeSelector.devices[].selectors[].cel`, evaluated against the devices an
//! InferenceClass publishes, with the semantics of the cluster's DRA
//! allocator (Kubernetes `dynamic-resource-allocation/cel`).
//!
//! Data flow: [`DeviceSelector::compile`] parses, type-checks (a selector must
//! be `bool`) and prepares one expression, once; [`DeviceActivation::new`]
//! turns one published device into the `device` variable, once;
//! [`DeviceActivation::bind`] puts it in a scope, and
//! [`DeviceSelector::matches`] evaluates selectors in that scope, as often as
//! the scheduler needs. An evaluation error is returned as an error, and the
//! scheduler counts it as a non-match for that device only.
//!
//! Kubernetes behaviours kept: `device.attributes[d]` and
//! `device.capacity[d]` are empty maps for an unknown domain `d`; an unknown
//! attribute name is an error; `version` attributes are Semver values and
//! capacities are Quantity values; a device with a malformed version,
//! quantity or value-less attribute matches nothing. Not supported (the `cel`
//! crate lacks them): `cel.bind` and two-variable comprehensions fail to
//! compile. Kubernetes stops an evaluation past 1,000,000 cost units; the
//! `cel` crate cannot count cost, so a selector whose worst-case cost
//! exceeds that bound is rejected at compile time instead.

mod check;
pub mod library;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub use kube_cel::cel::Context;
use kube_cel::cel::ExecutionError;
use kube_cel::cel::common::ast::{
    CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, MapExpr, operators,
};
use kube_cel::cel::objects::{Key, KeyRef, Map, Value};
use kube_cel::cel::parser::Parser;
use modelplane_api::types::Device;

use crate::quantity::Quantity;
use crate::semver::Semver;
pub use check::Ty;

/// The longest selector Kubernetes accepts, in bytes.
pub const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;

/// Why a selector does not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct CompileError {
    /// 1-based line in the expression.
    pub line: usize,
    /// 1-based column in the expression.
    pub column: usize,
    /// The compiler's message.
    pub message: String,
}

/// Why a device could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The device itself is malformed (bad version, quantity or attribute).
    #[error("device {device}: {reason}")]
    Device {
        /// The device's name.
        device: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The expression failed on this device (unknown attribute, bad literal…).
    #[error("{0}")]
    Expression(String),
    /// The expression produced something other than a bool.
    #[error("expression evaluated to {0}, not a bool")]
    NotBool(String),
    /// The expression reads an attribute or capacity the device does not
    /// publish (Kubernetes answers "no such key").
    #[error("the device has no {map} {name}")]
    Missing {
        /// `attribute` or `capacity`.
        map: &'static str,
        /// Its qualified name, `domain/name`.
        name: String,
    },
}

/// The name a device scope left unbound, as what the device lacks.
fn missing(reference: &str) -> Option<EvalError> {
    let (map, name) = reference.strip_prefix('@')?.split_once('/')?;
    let map = match map {
        "attributes" => "attribute",
        "capacity" => "capacity",
        _ => return None,
    };
    Some(EvalError::Missing {
        map,
        name: name.to_string(),
    })
}

/// The qualified names (`domain/name`) of the attributes `device`
/// publishes, sorted: what a selector could have read.
pub fn attribute_names(device: &Device) -> Vec<String> {
    let mut names: Vec<String> = device
        .attributes
        .iter()
        .flatten()
        .map(|(name, _)| {
            let (domain, id) = qualified(name, &device.driver);
            format!("{domain}/{id}")
        })
        .collect();
    names.sort();
    names
}

/// A compiled device selector.
#[derive(Clone)]
pub struct DeviceSelector {
    text: String,
    expr: Arc<IdedExpr>,
}

impl fmt::Debug for DeviceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DeviceSelector").field(&self.text).finish()
    }
}

impl DeviceSelector {
    /// Parses and type-checks `text`; it must be a `bool` expression.
    pub fn compile(text: &str) -> Result<DeviceSelector, CompileError> {
        if text.len() > MAX_EXPRESSION_LENGTH {
            return Err(CompileError {
                line: 1,
                column: 1,
                message: format!(
                    "expression is {} bytes long; the limit is {MAX_EXPRESSION_LENGTH}",
                    text.len()
                ),
            });
        }
        let parsed = Parser::new()
            .enable_optional_syntax(true)
            .parse(text)
            .map_err(|errors| {
                let first = errors.errors.first();
                CompileError {
                    line: first.map_or(1, |e| e.pos.0.max(1) as usize),
                    column: first.map_or(1, |e| e.pos.1.max(0) as usize + 1),
                    message: first.map_or_else(|| "syntax error".into(), |e| e.msg.clone()),
                }
            })?;
        let ty = check::check(&parsed).map_err(|e| located(text, &e.near, e.message))?;
        let cost = check::estimated_cost(&parsed);
        if cost > check::COST_LIMIT {
            return Err(CompileError {
                line: 1,
                column: 1,
                message: format!(
                    "estimated cost {cost} exceeds the per-selector limit of {}",
                    check::COST_LIMIT
                ),
            });
        }
        if !matches!(ty, Ty::Bool | Ty::Dyn) {
            return Err(CompileError {
                line: 1,
                column: 1,
                message: format!("must evaluate to bool, not {ty}"),
            });
        }
        Ok(DeviceSelector {
            text: text.to_string(),
            expr: Arc::new(rewrite_domain_lookups(parsed)),
        })
    }

    /// The attributes the expression reads by literal name, qualified
    /// (`domain/name`), sorted: those a device must publish for it to
    /// evaluate. A name computed at run time is not listed.
    pub fn attributes_read(&self) -> Vec<String> {
        let mut names = Vec::new();
        flat_names(&self.expr, &mut names);
        let mut names: Vec<String> = names
            .into_iter()
            .filter_map(|v| v.strip_prefix("@attributes/"))
            .map(str::to_string)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the device in `scope` satisfies the selector.
    pub fn matches(&self, scope: &DeviceScope<'_>) -> Result<bool, EvalError> {
        match Value::resolve(&self.expr, &scope.ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(EvalError::NotBool(format!("{:?}", other.type_of()))),
            Err(ExecutionError::UndeclaredReference(name)) => {
                Err(missing(&name).unwrap_or_else(|| {
                    EvalError::Expression(format!("undeclared reference to {name}"))
                }))
            }
            Err(e) => Err(EvalError::Expression(e.to_string())),
        }
    }
}

/// One device bound as the `device` variable, ready for any number of
/// selectors. Binding converts the device into the interpreter's values once.
pub struct DeviceScope<'c> {
    ctx: Context<'c>,
}

impl fmt::Debug for DeviceScope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceScope").finish_non_exhaustive()
    }
}

/// The context selectors evaluate in: CEL's standard library and
/// Kubernetes' libraries. Build once; share by reference.
pub fn context() -> Context<'static> {
    library::base_context()
}

/// Where in `text` an error about `near` is: its first occurrence.
fn located(text: &str, near: &str, message: String) -> CompileError {
    let offset = if near.trim().is_empty() {
        0
    } else {
        text.find(near.trim()).unwrap_or(0)
    };
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    CompileError {
        line,
        column,
        message,
    }
}

/// Whether `e` is `device.attributes` or `device.capacity`.
fn is_domain_map(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Select(s)
        if !s.test
            && (s.field == "attributes" || s.field == "capacity")
            && matches!(&s.operand.expr, Expr::Ident(name) if name == "device"))
}

/// `(d in m) ? m[d] : {}` for the domain map `m` and domain `d`.
fn domain_or_empty(map: IdedExpr, domain: IdedExpr, id: u64) -> Expr {
    let node = |expr| IdedExpr { id, expr };
    let call = |name: &str, args: Vec<IdedExpr>| {
        node(Expr::Call(CallExpr {
            func_name: name.into(),
            target: None,
            args,
        }))
    };
    let present = call(operators::IN, vec![domain.clone(), map.clone()]);
    let lookup = call(operators::INDEX, vec![map, domain]);
    let empty = node(Expr::Map(MapExpr::default()));
    Expr::Call(CallExpr {
        func_name: operators::CONDITIONAL.into(),
        target: None,
        args: vec![present, lookup, empty],
    })
}

/// The variable a device scope binds for `device.<map>["<domain>"].<id>`.
fn flat_name(map: &str, domain: &str, id: &str) -> String {
    format!("@{map}/{domain}/{id}")
}

/// The flattened names (`@attributes/d/x`, `@capacity/d/x`) `e` reads,
/// into `out` (the `cel` crate's own reference walk skips them).
fn flat_names<'e>(e: &'e IdedExpr, out: &mut Vec<&'e str>) {
    match &e.expr {
        Expr::Ident(name) if name.starts_with('@') => out.push(name),
        Expr::Call(call) => {
            call.target.iter().for_each(|t| flat_names(t, out));
            call.args.iter().for_each(|a| flat_names(a, out));
        }
        Expr::Select(s) => flat_names(&s.operand, out),
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                flat_names(part, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| flat_names(x, out)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    flat_names(&me.key, out);
                    flat_names(&me.value, out);
                }
            }
        }
        _ => {}
    }
}

/// `device.attributes["d"].x`, `device.capacity["d"]["x"]` and the like
/// with literal names, as `(map, domain, id)`.
fn literal_path(e: &Expr) -> Option<(String, String, String)> {
    let literal = |e: &IdedExpr| match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
        _ => None,
    };
    let (domain_expr, id) = match e {
        Expr::Select(s) if !s.test => (&*s.operand, s.field.clone()),
        Expr::Call(c) if c.func_name == operators::INDEX && c.args.len() == 2 => {
            (&c.args[0], literal(&c.args[1])?)
        }
        _ => return None,
    };
    let (map, domain) = match &domain_expr.expr {
        Expr::Call(c)
            if c.func_name == operators::INDEX
                && c.args.len() == 2
                && is_domain_map(&c.args[0]) =>
        {
            (&c.args[0], literal(&c.args[1])?)
        }
        _ => return None,
    };
    match &map.expr {
        Expr::Select(m) => Some((m.field.clone(), domain, id)),
        _ => None,
    }
}

/// Rewrites domain lookups: a literal path becomes one variable the device
/// scope binds (the common case, and the fast one); any other
/// `device.attributes[d]` / `.capacity[d]` becomes an empty map for an
/// unknown domain, as in Kubernetes.
fn rewrite_domain_lookups(mut e: IdedExpr) -> IdedExpr {
    let id = e.id;
    if let Some((map, domain, name)) = literal_path(&e.expr) {
        e.expr = Expr::Ident(flat_name(&map, &domain, &name));
        return e;
    }
    e.expr = match e.expr {
        Expr::Call(call)
            if call.func_name == operators::INDEX
                && call.args.len() == 2
                && is_domain_map(&call.args[0]) =>
        {
            let mut args = call.args.into_iter().map(rewrite_domain_lookups);
            match (args.next(), args.next()) {
                (Some(map), Some(domain)) => domain_or_empty(map, domain, id),
                _ => Expr::Unspecified,
            }
        }
        Expr::Select(s) if !s.test && is_domain_map(&s.operand) => {
            let domain = IdedExpr {
                id,
                expr: Expr::Literal(LiteralValue::String(s.field.into())),
            };
            domain_or_empty(*s.operand, domain, id)
        }
        Expr::Call(mut call) => {
            call.target = call.target.map(|t| Box::new(rewrite_domain_lookups(*t)));
            call.args = call.args.into_iter().map(rewrite_domain_lookups).collect();
            Expr::Call(call)
        }
        Expr::Select(mut s) => {
            s.operand = Box::new(rewrite_domain_lookups(*s.operand));
            Expr::Select(s)
        }
        Expr::Comprehension(mut c) => {
            c.iter_range = rewrite_domain_lookups(c.iter_range);
            c.accu_init = rewrite_domain_lookups(c.accu_init);
            c.loop_cond = rewrite_domain_lookups(c.loop_cond);
            c.loop_step = rewrite_domain_lookups(c.loop_step);
            c.result = rewrite_domain_lookups(c.result);
            Expr::Comprehension(c)
        }
        Expr::List(mut l) => {
            l.elements = l.elements.into_iter().map(rewrite_domain_lookups).collect();
            Expr::List(l)
        }
        Expr::Map(mut m) => {
            for entry in &mut m.entries {
                if let EntryExpr::MapEntry(me) = &mut entry.expr {
                    me.key = rewrite_domain_lookups(std::mem::take(&mut me.key));
                    me.value = rewrite_domain_lookups(std::mem::take(&mut me.value));
                }
            }
            Expr::Map(m)
        }
        other => other,
    };
    e
}

/// One published device as the `device` variable, built once.
#[derive(Clone, Debug)]
pub struct DeviceActivation {
    name: String,
    value: Result<Value, String>,
    /// Every attribute and capacity under its flat variable name.
    flat: Vec<(String, Value)>,
}

impl DeviceActivation {
    /// Builds the activation of an InferenceClass (or pool) device. A device
    /// whose version, quantity or attribute is malformed keeps the reason and
    /// matches nothing.
    pub fn new(device: &Device) -> DeviceActivation {
        let value = activation(device);
        let flat = match &value {
            Ok(v) => flatten(v),
            Err(_) => Vec::new(),
        };
        DeviceActivation {
            name: device.name.clone(),
            value,
            flat,
        }
    }

    /// Whether the device could be turned into a CEL value.
    pub fn is_valid(&self) -> bool {
        self.value.is_ok()
    }

    /// Binds the device as `device` in a scope of `ctx`; a malformed device
    /// cannot be bound and so matches nothing.
    pub fn bind<'c>(&self, ctx: &'c Context<'c>) -> Result<DeviceScope<'c>, EvalError> {
        let value = self.value.as_ref().map_err(|reason| EvalError::Device {
            device: self.name.clone(),
            reason: reason.clone(),
        })?;
        let mut scope = ctx.new_inner_scope();
        scope.add_variable_from_value("device", value.clone());
        for (name, v) in &self.flat {
            scope.add_variable_from_value(name.as_str(), v.clone());
        }
        Ok(DeviceScope { ctx: scope })
    }
}

/// `(flat name, value)` for every attribute and capacity of an activation.
fn flatten(device: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let Value::Map(fields) = device else {
        return out;
    };
    for map in ["attributes", "capacity"] {
        let Some(Value::Map(domains)) = fields.get(&KeyRef::String(map)) else {
            continue;
        };
        for (domain, ids) in domains.map.iter() {
            let (Key::String(domain), Value::Map(ids)) = (domain, ids) else {
                continue;
            };
            for (id, value) in ids.map.iter() {
                if let Key::String(id) = id {
                    out.push((flat_name(map, domain, id), value.clone()));
                }
            }
        }
    }
    out
}

/// Splits `domain/id`; a bare id is in the driver's domain.
fn qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.split_once('/').unwrap_or((driver, name))
}

fn string_key(s: &str) -> Key {
    Key::String(Arc::new(s.to_string()))
}

fn nested(entries: HashMap<String, HashMap<Key, Value>>) -> Value {
    Value::Map(Map {
        map: Arc::new(
            entries
                .into_iter()
                .map(|(domain, ids)| (string_key(&domain), Value::Map(Map { map: Arc::new(ids) })))
                .collect(),
        ),
    })
}

fn activation(device: &Device) -> Result<Value, String> {
    let driver = device.driver.as_str();
    let mut attributes: HashMap<String, HashMap<Key, Value>> = HashMap::new();
    for (name, attr) in device.attributes.iter().flatten() {
        let (domain, id) = qualified(name, driver);
        let value = if let Some(version) = &attr.version {
            let v = Semver::parse(version).map_err(|e| format!("attribute {name}: {e}"))?;
            library::semver_value(v)
        } else if let Some(s) = &attr.string {
            Value::String(Arc::new(s.clone()))
        } else if let Some(b) = attr.bool_ {
            Value::Bool(b)
        } else if let Some(i) = attr.int {
            Value::Int(i)
        } else {
            return Err(format!("attribute {name} has no value"));
        };
        attributes
            .entry(domain.to_string())
            .or_default()
            .insert(string_key(id), value);
    }
    let mut capacity: HashMap<String, HashMap<Key, Value>> = HashMap::new();
    for (name, cap) in device.capacity.iter().flatten() {
        let (domain, id) = qualified(name, driver);
        let q = Quantity::parse(&cap.value).map_err(|e| format!("capacity {name}: {e}"))?;
        capacity
            .entry(domain.to_string())
            .or_default()
            .insert(string_key(id), library::quantity_value(q));
    }
    let fields = HashMap::from([
        (
            string_key("driver"),
            Value::String(Arc::new(driver.to_string())),
        ),
        (string_key("attributes"), nested(attributes)),
        (string_key("capacity"), nested(capacity)),
    ]);
    Ok(Value::Map(Map {
        map: Arc::new(fields),
    }))
}
