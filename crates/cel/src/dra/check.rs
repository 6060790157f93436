//! A static type checker for DRA device selectors.
//!
//! The `cel` crate parses and evaluates but does not type-check, while the
//! Kubernetes DRA compiler does: it rejects a selector that cannot be bool, a
//! call with no matching overload (`quantity(5)`, `q.sign()`,
//! `compareTo(a, b)`, `quantity('1') == '1'`, `<` on quantities), unknown
//! identifiers, functions and fields. This checker declares the DRA
//! environment — `device` and the functions of Kubernetes' CEL libraries —
//! and infers a type for every node, so the same text is rejected here as in
//! the cluster's allocator. `dyn` (attribute values) is accepted wherever a
//! type is expected and defers the check to run time, as in cel-go.

use std::collections::HashMap;
use std::fmt;

use kube_cel::cel::common::ast::{
    ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue, SelectExpr, operators,
};

use super::library::{QUANTITY_TYPE, SEMVER_TYPE};

/// A CEL type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `uint`.
    Uint,
    /// `double`.
    Double,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `null_type`.
    Null,
    /// `list(T)`.
    List(Box<Ty>),
    /// `map(K, V)`.
    Map(Box<Ty>, Box<Ty>),
    /// `kubernetes.Quantity`.
    Quantity,
    /// `kubernetes.Semver`.
    Semver,
    /// The `device` variable.
    Device,
    /// `optional_type(T)`.
    Optional(Box<Ty>),
    /// A type value (`int`, `string` as identifiers).
    Type,
    /// `google.protobuf.Timestamp`.
    Timestamp,
    /// `google.protobuf.Duration`.
    Duration,
    /// Checked at run time.
    Dyn,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Bool => f.write_str("bool"),
            Ty::Int => f.write_str("int"),
            Ty::Uint => f.write_str("uint"),
            Ty::Double => f.write_str("double"),
            Ty::String => f.write_str("string"),
            Ty::Bytes => f.write_str("bytes"),
            Ty::Null => f.write_str("null_type"),
            Ty::List(t) => write!(f, "list({t})"),
            Ty::Map(k, v) => write!(f, "map({k}, {v})"),
            Ty::Quantity => f.write_str(QUANTITY_TYPE),
            Ty::Semver => f.write_str(SEMVER_TYPE),
            Ty::Device => f.write_str("kubernetes.DRADevice"),
            Ty::Optional(t) => write!(f, "optional_type({t})"),
            Ty::Type => f.write_str("type"),
            Ty::Timestamp => f.write_str("google.protobuf.Timestamp"),
            Ty::Duration => f.write_str("google.protobuf.Duration"),
            Ty::Dyn => f.write_str("dyn"),
        }
    }
}

fn list(t: Ty) -> Ty {
    Ty::List(Box::new(t))
}

fn map(k: Ty, v: Ty) -> Ty {
    Ty::Map(Box::new(k), Box::new(v))
}

impl Ty {
    /// Whether a value of type `actual` may be passed where `self` is expected.
    fn accepts(&self, actual: &Ty) -> bool {
        match (self, actual) {
            (Ty::Dyn, _) | (_, Ty::Dyn) => true,
            (Ty::List(a), Ty::List(b)) => a.accepts(b),
            (Ty::Map(ak, av), Ty::Map(bk, bv)) => ak.accepts(bk) && av.accepts(bv),
            (Ty::Optional(a), Ty::Optional(b)) => a.accepts(b),
            (a, b) => a == b,
        }
    }

    /// The type both of two branches have, or `dyn`.
    fn join(a: Ty, b: Ty) -> Ty {
        if a == b {
            a
        } else if a == Ty::Dyn || b == Ty::Dyn {
            Ty::Dyn
        } else {
            match (a, b) {
                (Ty::List(x), Ty::List(y)) => list(Ty::join(*x, *y)),
                (Ty::Map(xk, xv), Ty::Map(yk, yv)) => map(Ty::join(*xk, *yk), Ty::join(*xv, *yv)),
                _ => Ty::Dyn,
            }
        }
    }
}

/// A type error, with the text it is about (to locate it in the source).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeError {
    /// The compiler's message.
    pub message: String,
    /// A fragment of the source the error is about (a name or an operator).
    pub near: String,
}

type Checked = Result<Ty, TypeError>;

fn err(message: String, near: impl Into<String>) -> TypeError {
    TypeError {
        message,
        near: near.into(),
    }
}

/// The fields of `device`.
fn device_field(field: &str) -> Option<Ty> {
    match field {
        "driver" => Some(Ty::String),
        "attributes" => Some(map(Ty::String, map(Ty::String, Ty::Dyn))),
        "capacity" => Some(map(Ty::String, map(Ty::String, Ty::Quantity))),
        _ => None,
    }
}

/// One declared overload: receiver (for member functions), parameters, result.
struct Overload {
    receiver: Option<Ty>,
    params: Vec<Ty>,
    result: Ty,
}

fn global(params: Vec<Ty>, result: Ty) -> Overload {
    Overload {
        receiver: None,
        params,
        result,
    }
}

fn member(receiver: Ty, params: Vec<Ty>, result: Ty) -> Overload {
    Overload {
        receiver: Some(receiver),
        params,
        result,
    }
}

/// The functions of the DRA environment with fixed signatures. Operators and
/// generic functions (`size`, `_[_]`, `==`, `in`, `+` on lists) are typed in
/// code.
fn declared(name: &str) -> Vec<Overload> {
    use Ty::*;
    let s = || String;
    match name {
        // Quantity library: quantity, isQuantity and sign are global only.
        "quantity" => vec![global(vec![s()], Quantity)],
        "isQuantity" => vec![global(vec![s()], Bool)],
        "sign" => vec![global(vec![Quantity], Int)],
        "isInteger" => vec![member(Quantity, vec![], Bool)],
        "asInteger" => vec![member(Quantity, vec![], Int)],
        "asApproximateFloat" => vec![member(Quantity, vec![], Double)],
        "add" => vec![
            member(Quantity, vec![Quantity], Quantity),
            member(Quantity, vec![Int], Quantity),
        ],
        "sub" => vec![
            member(Quantity, vec![Quantity], Quantity),
            member(Quantity, vec![Int], Quantity),
        ],
        "compareTo" => vec![
            member(Quantity, vec![Quantity], Int),
            member(Semver, vec![Semver], Int),
        ],
        "isGreaterThan" | "isLessThan" => vec![
            member(Quantity, vec![Quantity], Bool),
            member(Semver, vec![Semver], Bool),
        ],
        // Semver library.
        "semver" => vec![global(vec![s()], Semver), global(vec![s(), Bool], Semver)],
        "isSemver" => vec![global(vec![s()], Bool), global(vec![s(), Bool], Bool)],
        "major" | "minor" | "patch" => vec![member(Semver, vec![], Int)],
        // Standard string functions.
        "contains" | "startsWith" | "endsWith" => vec![member(s(), vec![s()], Bool)],
        "matches" => vec![member(s(), vec![s()], Bool), global(vec![s(), s()], Bool)],
        // Kubernetes strings library.
        "charAt" => vec![member(s(), vec![Int], s())],
        "indexOf" | "lastIndexOf" => vec![
            member(s(), vec![s()], Int),
            member(s(), vec![s(), Int], Int),
            member(list(Dyn), vec![Dyn], Int),
        ],
        "lowerAscii" | "upperAscii" | "trim" => vec![member(s(), vec![], s())],
        "replace" => vec![
            member(s(), vec![s(), s()], s()),
            member(s(), vec![s(), s(), Int], s()),
        ],
        "split" => vec![
            member(s(), vec![s()], list(s())),
            member(s(), vec![s(), Int], list(s())),
        ],
        "substring" => vec![
            member(s(), vec![Int], s()),
            member(s(), vec![Int, Int], s()),
        ],
        "join" => vec![
            member(list(s()), vec![], s()),
            member(list(s()), vec![s()], s()),
        ],
        "reverse" => vec![member(s(), vec![], s())],
        // Kubernetes regex library.
        "find" => vec![member(s(), vec![s()], s())],
        "findAll" => vec![
            member(s(), vec![s()], list(s())),
            member(s(), vec![s(), Int], list(s())),
        ],
        // Kubernetes lists library.
        "isSorted" => vec![member(list(Dyn), vec![], Bool)],
        "sum" | "min" | "max" => vec![member(list(Dyn), vec![], Dyn)],
        // Kubernetes sets library.
        "sets.contains" | "sets.equivalent" | "sets.intersects" => {
            vec![global(vec![list(Dyn), list(Dyn)], Bool)]
        }
        // Conversions.
        "int" => vec![global(vec![Dyn], Int)],
        "uint" => vec![global(vec![Dyn], Uint)],
        "double" => vec![global(vec![Dyn], Double)],
        "string" => vec![global(vec![Dyn], s())],
        "bytes" => vec![global(vec![Dyn], Bytes)],
        "bool" => vec![global(vec![Dyn], Bool)],
        "dyn" => vec![global(vec![Dyn], Dyn)],
        "type" => vec![global(vec![Dyn], Type)],
        "timestamp" => vec![global(vec![s()], Timestamp)],
        "duration" => vec![global(vec![s()], Duration)],
        // Optionals.
        "optional.of" | "optional.ofNonZeroValue" => {
            vec![global(vec![Dyn], Optional(Box::new(Dyn)))]
        }
        "optional.none" => vec![global(vec![], Optional(Box::new(Dyn)))],
        "hasValue" => vec![member(Optional(Box::new(Dyn)), vec![], Bool)],
        "value" => vec![member(Optional(Box::new(Dyn)), vec![], Dyn)],
        "orValue" => vec![member(Optional(Box::new(Dyn)), vec![Dyn], Dyn)],
        "or" => vec![member(
            Optional(Box::new(Dyn)),
            vec![Optional(Box::new(Dyn))],
            Optional(Box::new(Dyn)),
        )],
        _ => Vec::new(),
    }
}

/// Names used as type identifiers, e.g. `type(x) == int`.
const TYPE_NAMES: &[&str] = &[
    "bool",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

/// Checks an expression in the DRA environment and returns its type.
pub fn check(expr: &IdedExpr) -> Checked {
    Checker {
        scopes: vec![HashMap::from([("device".to_string(), Ty::Device)])],
    }
    .expr(expr)
}

struct Checker {
    scopes: Vec<HashMap<String, Ty>>,
}

impl Checker {
    fn lookup(&self, name: &str) -> Option<Ty> {
        self.scopes.iter().rev().find_map(|s| s.get(name).cloned())
    }

    fn expr(&mut self, e: &IdedExpr) -> Checked {
        match &e.expr {
            Expr::Unspecified => Ok(Ty::Dyn),
            Expr::Literal(lit) => Ok(match lit {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            }),
            Expr::Ident(name) => match self.lookup(name) {
                Some(t) => Ok(t),
                None if TYPE_NAMES.contains(&name.as_str()) => Ok(Ty::Type),
                None => Err(err(
                    format!("undeclared reference to '{name}' (in container '')"),
                    name.clone(),
                )),
            },
            Expr::Select(select) => self.select(select),
            Expr::List(items) => {
                let mut elem: Option<Ty> = None;
                for item in &items.elements {
                    let t = self.expr(item)?;
                    elem = Some(match elem {
                        None => t,
                        Some(prev) => Ty::join(prev, t),
                    });
                }
                Ok(list(elem.unwrap_or(Ty::Dyn)))
            }
            Expr::Map(m) => {
                let (mut key, mut value): (Option<Ty>, Option<Ty>) = (None, None);
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        let k = self.expr(&entry.key)?;
                        let v = self.expr(&entry.value)?;
                        key = Some(key.map_or(k.clone(), |p| Ty::join(p, k)));
                        value = Some(value.map_or(v.clone(), |p| Ty::join(p, v)));
                    }
                }
                Ok(map(key.unwrap_or(Ty::Dyn), value.unwrap_or(Ty::Dyn)))
            }
            Expr::Struct(s) => Err(err(
                format!("undeclared reference to '{}'", s.type_name),
                s.type_name.clone(),
            )),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Call(call) => {
                let target = match &call.target {
                    Some(t) => Some(self.target(t)?),
                    None => None,
                };
                let mut args = Vec::with_capacity(call.args.len());
                for a in &call.args {
                    args.push(self.expr(a)?);
                }
                match target {
                    Some(Target::Namespace(ns)) => {
                        self.call(&format!("{ns}.{}", call.func_name), None, &args)
                    }
                    Some(Target::Value(t)) => self.call(&call.func_name, Some(t), &args),
                    None => self.call(&call.func_name, None, &args),
                }
            }
        }
    }

    /// A call's receiver: a value, or a namespace such as `sets` or `optional`.
    fn target(&mut self, t: &IdedExpr) -> Result<Target, TypeError> {
        if let Expr::Ident(name) = &t.expr
            && self.lookup(name).is_none()
            && matches!(name.as_str(), "sets" | "optional")
        {
            return Ok(Target::Namespace(name.clone()));
        }
        self.expr(t).map(Target::Value)
    }

    fn select(&mut self, s: &SelectExpr) -> Checked {
        let operand = self.expr(&s.operand)?;
        let field_type = match &operand {
            Ty::Device => device_field(&s.field)
                .ok_or_else(|| err(format!("undefined field '{}'", s.field), s.field.clone()))?,
            Ty::Map(k, v) if k.accepts(&Ty::String) => (**v).clone(),
            Ty::Dyn => Ty::Dyn,
            Ty::Optional(inner) => return Ok(Ty::Optional(Box::new(select_in(inner)))),
            other => {
                return Err(err(
                    format!("type '{other}' does not support field selection"),
                    s.field.clone(),
                ));
            }
        };
        Ok(if s.test { Ty::Bool } else { field_type })
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> Checked {
        let range = self.expr(&c.iter_range)?;
        let (first, second) = match &range {
            Ty::List(t) => (Ty::Int, (**t).clone()),
            Ty::Map(k, v) => ((**k).clone(), (**v).clone()),
            Ty::Dyn => (Ty::Dyn, Ty::Dyn),
            other => {
                return Err(err(
                    format!(
                        "expression of type '{other}' cannot be the range of a comprehension (must be list, map, or dynamic)"
                    ),
                    c.iter_var.clone(),
                ));
            }
        };
        let mut vars = HashMap::new();
        match &c.iter_var2 {
            Some(second_var) => {
                vars.insert(c.iter_var.clone(), first);
                vars.insert(second_var.clone(), second);
            }
            None => {
                let elem = if matches!(range, Ty::List(_)) {
                    second
                } else {
                    first
                };
                vars.insert(c.iter_var.clone(), elem);
            }
        }
        let accu = self.expr(&c.accu_init)?;
        // The accumulator's type is what the step makes of it; start from the
        // initial value and widen once.
        self.scopes
            .push(HashMap::from([(c.accu_var.clone(), accu.clone())]));
        self.scopes.push(vars);
        let cond = self.expr(&c.loop_cond);
        let step = self.expr(&c.loop_step);
        self.scopes.pop();
        let accu = Ty::join(accu, step?);
        cond?;
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(c.accu_var.clone(), accu);
        }
        let result = self.expr(&c.result);
        self.scopes.pop();
        result
    }

    fn call(&mut self, name: &str, target: Option<Ty>, args: &[Ty]) -> Checked {
        if let Some(t) = self.builtin(name, target.as_ref(), args)? {
            return Ok(t);
        }
        let overloads = declared(name);
        if overloads.is_empty() {
            return Err(err(
                format!("undeclared reference to '{name}' (in container '')"),
                near_name(name),
            ));
        }
        let mut results: Vec<Ty> = overloads
            .iter()
            .filter(|o| match (&o.receiver, &target) {
                (Some(r), Some(t)) => r.accepts(t),
                (None, None) => true,
                _ => false,
            })
            .filter(|o| {
                o.params.len() == args.len() && o.params.iter().zip(args).all(|(p, a)| p.accepts(a))
            })
            .map(|o| o.result.clone())
            .collect();
        results.dedup();
        match results.len() {
            0 => Err(no_overload(name, target.as_ref(), args)),
            1 => Ok(results.remove(0)),
            _ => Ok(Ty::Dyn),
        }
    }

    /// Operators and generic functions; `None` when `name` is not one.
    fn builtin(
        &mut self,
        name: &str,
        target: Option<&Ty>,
        args: &[Ty],
    ) -> Result<Option<Ty>, TypeError> {
        use Ty::*;
        let fail = || no_overload(name, target, args);
        let numeric = |t: &Ty| matches!(t, Int | Uint | Double | Dyn);
        let t = match (name, target, args) {
            (operators::LOGICAL_AND | operators::LOGICAL_OR, None, [a, b]) => {
                if Bool.accepts(a) && Bool.accepts(b) {
                    Bool
                } else {
                    return Err(fail());
                }
            }
            (operators::LOGICAL_NOT | operators::NOT_STRICTLY_FALSE, None, [a]) => {
                if Bool.accepts(a) {
                    Bool
                } else {
                    return Err(fail());
                }
            }
            (operators::CONDITIONAL, None, [c, a, b]) => {
                if !Bool.accepts(c) {
                    return Err(fail());
                }
                Ty::join(a.clone(), b.clone())
            }
            (operators::EQUALS | operators::NOT_EQUALS, None, [a, b]) => {
                if a.accepts(b) || b.accepts(a) {
                    Bool
                } else {
                    return Err(fail());
                }
            }
            (
                operators::LESS
                | operators::LESS_EQUALS
                | operators::GREATER
                | operators::GREATER_EQUALS,
                None,
                [a, b],
            ) => {
                let ordered = |t: &Ty| matches!(t, String | Bytes | Bool | Timestamp | Duration);
                let ok = (numeric(a) && numeric(b))
                    || (ordered(a) && a.accepts(b))
                    || (*a == Dyn && ordered(b));
                if ok { Bool } else { return Err(fail()) }
            }
            (operators::ADD, None, [a, b]) => match (a, b) {
                (List(x), List(y)) => list(Ty::join((**x).clone(), (**y).clone())),
                (Dyn, _) | (_, Dyn) => Dyn,
                (x, y) if x == y && matches!(x, Int | Uint | Double | String | Bytes) => x.clone(),
                (Timestamp, Duration) | (Duration, Timestamp) => Timestamp,
                (Duration, Duration) => Duration,
                _ => return Err(fail()),
            },
            (operators::SUBSTRACT | operators::MULTIPLY | operators::DIVIDE, None, [a, b]) => {
                match (a, b) {
                    (Dyn, x) | (x, Dyn) if numeric(x) || *x == Timestamp || *x == Duration => {
                        if *x == Dyn { Dyn } else { x.clone() }
                    }
                    (x, y) if x == y && matches!(x, Int | Uint | Double) => x.clone(),
                    (Timestamp, Timestamp) if name == operators::SUBSTRACT => Duration,
                    _ => return Err(fail()),
                }
            }
            (operators::MODULO, None, [a, b]) => match (a, b) {
                (x, y) if x == y && matches!(x, Int | Uint) => x.clone(),
                (Dyn, x) | (x, Dyn) if matches!(x, Int | Uint | Dyn) => x.clone(),
                _ => return Err(fail()),
            },
            (operators::NEGATE, None, [a]) => match a {
                Int | Double | Dyn => a.clone(),
                _ => return Err(fail()),
            },
            (operators::INDEX, None, [c, i]) => match c {
                List(elem) if Int.accepts(i) || Uint.accepts(i) => (**elem).clone(),
                Map(k, v) if k.accepts(i) => (**v).clone(),
                Dyn => Dyn,
                _ => return Err(fail()),
            },
            (operators::OPT_INDEX, None, [c, _]) => Optional(Box::new(match c {
                List(elem) => (**elem).clone(),
                Map(_, v) => (**v).clone(),
                _ => Dyn,
            })),
            (operators::OPT_SELECT, None, [operand, _]) => Optional(Box::new(select_in(operand))),
            (operators::IN, None, [e, c]) => match c {
                List(elem) if elem.accepts(e) => Bool,
                Map(k, _) if k.accepts(e) => Bool,
                Dyn => Bool,
                _ => return Err(fail()),
            },
            ("size", recv, rest) => {
                let arg = match (recv, rest) {
                    (Some(r), []) => r,
                    (None, [a]) => a,
                    _ => return Err(fail()),
                };
                match arg {
                    String | Bytes | List(_) | Map(_, _) | Dyn => Int,
                    _ => return Err(fail()),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(t))
    }
}

enum Target {
    Value(Ty),
    Namespace(String),
}

/// The type a field selection yields inside an optional or dynamic value.
fn select_in(t: &Ty) -> Ty {
    match t {
        Ty::Map(_, v) => (**v).clone(),
        _ => Ty::Dyn,
    }
}

/// The source text an error about `name` most likely points at.
fn near_name(name: &str) -> String {
    match name {
        operators::LESS => "<".into(),
        operators::LESS_EQUALS => "<=".into(),
        operators::GREATER => ">".into(),
        operators::GREATER_EQUALS => ">=".into(),
        operators::EQUALS => "==".into(),
        operators::NOT_EQUALS => "!=".into(),
        operators::ADD => "+".into(),
        operators::SUBSTRACT => "-".into(),
        operators::MULTIPLY => "*".into(),
        operators::DIVIDE => "/".into(),
        operators::MODULO => "%".into(),
        operators::LOGICAL_AND => "&&".into(),
        operators::LOGICAL_OR => "||".into(),
        operators::LOGICAL_NOT => "!".into(),
        operators::INDEX => "[".into(),
        operators::IN => " in ".into(),
        other => other.rsplit('.').next().unwrap_or(other).to_string(),
    }
}

fn no_overload(name: &str, target: Option<&Ty>, args: &[Ty]) -> TypeError {
    let args = args
        .iter()
        .map(Ty::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let applied = match target {
        Some(t) => format!("{t}.({args})"),
        None => format!("({args})"),
    };
    err(
        format!("found no matching overload for '{name}' applied to '{applied}'"),
        near_name(name),
    )
}

/// The runtime cost limit of one selector evaluation in Kubernetes.
pub const COST_LIMIT: u64 = 1_000_000;

/// Elements a collection the expression does not spell out may have: a
/// device has at most 32 attributes and capacities, and a string attribute
/// at most 64 characters (so `split` yields at most 65 parts).
const COLLECTION_BOUND: u64 = 65;

/// A worst-case estimate of an evaluation's cost: one unit per node, and a
/// comprehension's body once per element of its range. The `cel` crate
/// cannot count cost while evaluating, so the limit Kubernetes enforces at
/// run time is applied to this bound at compile time.
pub fn estimated_cost(expr: &IdedExpr) -> u64 {
    cost(expr).0
}

/// (cost, bound on the number of elements if it is a collection).
fn cost(e: &IdedExpr) -> (u64, u64) {
    match &e.expr {
        Expr::List(l) => {
            let inner: u64 = l
                .elements
                .iter()
                .map(|x| cost(x).0)
                .fold(0, u64::saturating_add);
            (inner.saturating_add(1), l.elements.len() as u64)
        }
        Expr::Map(m) => {
            let mut total = 1u64;
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    total = total
                        .saturating_add(cost(&me.key).0)
                        .saturating_add(cost(&me.value).0);
                }
            }
            (total, m.entries.len() as u64)
        }
        Expr::Comprehension(c) => {
            let (range_cost, n) = cost(&c.iter_range);
            let body = cost(&c.loop_cond).0.saturating_add(cost(&c.loop_step).0);
            let total = range_cost
                .saturating_add(cost(&c.accu_init).0)
                .saturating_add(n.saturating_mul(body))
                .saturating_add(cost(&c.result).0);
            (total, n)
        }
        Expr::Call(call) => {
            let mut total = 1u64;
            if let Some(t) = &call.target {
                total = total.saturating_add(cost(t).0);
            }
            for a in &call.args {
                total = total.saturating_add(cost(a).0);
            }
            (total, COLLECTION_BOUND)
        }
        Expr::Select(s) => (cost(&s.operand).0.saturating_add(1), COLLECTION_BOUND),
        _ => (1, COLLECTION_BOUND),
    }
}
