//! The Quantity and Semver CEL libraries with Kubernetes semantics, on top of
//! kube-cel's other Kubernetes libraries (strings, lists, regex, sets…).
//!
//! kube-cel's own quantity and semver functions are replaced: they trim
//! whitespace, do not round or cap like the API server, and accept versions
//! blang/semver rejects. Call styles (global `sign`, member `compareTo`…) are
//! enforced by the type checker, not here.

use std::sync::Arc;

use kube_cel::KubeCelExt;
use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::objects::{Opaque, Value};
use kube_cel::cel::{Context, ExecutionError, ResolveResult};

use crate::quantity::Quantity;
use crate::semver::Semver;

/// CEL type name of quantities, as Kubernetes names it.
pub const QUANTITY_TYPE: &str = "kubernetes.Quantity";
/// CEL type name of semantic versions, as Kubernetes names it.
pub const SEMVER_TYPE: &str = "kubernetes.Semver";

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        QUANTITY_TYPE
    }
}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        SEMVER_TYPE
    }
}

/// A CEL value holding a quantity.
pub fn quantity_value(q: Quantity) -> Value {
    Value::Opaque(Arc::new(q))
}

/// A CEL value holding a version.
pub fn semver_value(v: Semver) -> Value {
    Value::Opaque(Arc::new(v))
}

fn fail(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn as_quantity<'a>(value: &'a Value, function: &str) -> Result<&'a Quantity, ExecutionError> {
    match value {
        Value::Opaque(o) => o
            .downcast_ref::<Quantity>()
            .ok_or_else(|| fail(function, "expected a Quantity")),
        _ => Err(fail(function, "expected a Quantity")),
    }
}

fn as_semver<'a>(value: &'a Value, function: &str) -> Result<&'a Semver, ExecutionError> {
    match value {
        Value::Opaque(o) => o
            .downcast_ref::<Semver>()
            .ok_or_else(|| fail(function, "expected a Semver")),
        _ => Err(fail(function, "expected a Semver")),
    }
}

fn one_arg<'a>(args: &'a [Value], function: &str) -> Result<&'a Value, ExecutionError> {
    args.first()
        .ok_or_else(|| fail(function, "missing argument"))
}

fn normalize_flag(args: &[Value], function: &str) -> Result<bool, ExecutionError> {
    match args.get(1) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(fail(function, "the second argument must be a bool")),
    }
}

fn parse_semver(text: &str, normalize: bool) -> Result<Semver, crate::semver::SemverError> {
    if normalize {
        Semver::parse_normalized(text)
    } else {
        Semver::parse(text)
    }
}

fn quantity(text: Arc<String>) -> ResolveResult {
    Quantity::parse(&text)
        .map(quantity_value)
        .map_err(|e| fail("quantity", e))
}

fn is_quantity(text: Arc<String>) -> ResolveResult {
    Ok(Value::Bool(Quantity::parse(&text).is_ok()))
}

fn sign(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Int(as_quantity(&this, "sign")?.sign()))
}

fn is_integer(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Bool(as_quantity(&this, "isInteger")?.is_integer()))
}

fn as_integer(This(this): This<Value>) -> ResolveResult {
    as_quantity(&this, "asInteger")?
        .as_integer()
        .map(Value::Int)
        .ok_or_else(|| fail("asInteger", "cannot convert value to integer"))
}

fn as_approximate_float(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Float(
        as_quantity(&this, "asApproximateFloat")?.as_approximate_float(),
    ))
}

fn quantity_or_int(value: &Value, function: &str) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Int(i) => Ok(Quantity::from_int(*i)),
        other => as_quantity(other, function).copied(),
    }
}

fn add(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    let q = as_quantity(&this, "add")?;
    let other = quantity_or_int(one_arg(&args, "add")?, "add")?;
    Ok(quantity_value(q.add(&other)))
}

fn sub(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    let q = as_quantity(&this, "sub")?;
    let other = quantity_or_int(one_arg(&args, "sub")?, "sub")?;
    Ok(quantity_value(q.sub(&other)))
}

/// `compareTo`, `isGreaterThan`, `isLessThan`: on the receiver's type.
fn compare(this: &Value, args: &[Value], function: &str) -> Result<i64, ExecutionError> {
    let other = one_arg(args, function)?;
    match this {
        Value::Opaque(o) if o.runtime_type_name() == QUANTITY_TYPE => {
            Ok(as_quantity(this, function)?.compare(as_quantity(other, function)?))
        }
        Value::Opaque(o) if o.runtime_type_name() == SEMVER_TYPE => {
            Ok(as_semver(this, function)?.compare(as_semver(other, function)?))
        }
        _ => Err(fail(function, "expected a Quantity or a Semver receiver")),
    }
}

fn compare_to(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    compare(&this, &args, "compareTo").map(Value::Int)
}

fn is_greater_than(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    compare(&this, &args, "isGreaterThan").map(|c| Value::Bool(c > 0))
}

fn is_less_than(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    compare(&this, &args, "isLessThan").map(|c| Value::Bool(c < 0))
}

fn semver(Arguments(args): Arguments) -> ResolveResult {
    let Some(Value::String(text)) = args.first() else {
        return Err(fail("semver", "expected a string"));
    };
    parse_semver(text, normalize_flag(&args, "semver")?)
        .map(semver_value)
        .map_err(|e| fail("semver", e))
}

fn is_semver(Arguments(args): Arguments) -> ResolveResult {
    let Some(Value::String(text)) = args.first() else {
        return Err(fail("isSemver", "expected a string"));
    };
    Ok(Value::Bool(
        parse_semver(text, normalize_flag(&args, "isSemver")?).is_ok(),
    ))
}

fn version_part(this: &Value, function: &str, part: fn(&Semver) -> u64) -> ResolveResult {
    i64::try_from(part(as_semver(this, function)?))
        .map(Value::Int)
        .map_err(|_| fail(function, "version number out of int range"))
}

fn major(This(this): This<Value>) -> ResolveResult {
    version_part(&this, "major", Semver::major)
}

fn minor(This(this): This<Value>) -> ResolveResult {
    version_part(&this, "minor", Semver::minor)
}

fn patch(This(this): This<Value>) -> ResolveResult {
    version_part(&this, "patch", Semver::patch)
}

/// A root context with CEL's standard library, kube-cel's Kubernetes
/// libraries, and these Quantity and Semver functions.
pub fn base_context() -> Context<'static> {
    let mut ctx = Context::default();
    ctx.register_all();
    ctx.add_function("quantity", quantity);
    ctx.add_function("isQuantity", is_quantity);
    ctx.add_function("sign", sign);
    ctx.add_function("isInteger", is_integer);
    ctx.add_function("asInteger", as_integer);
    ctx.add_function("asApproximateFloat", as_approximate_float);
    ctx.add_function("add", add);
    ctx.add_function("sub", sub);
    ctx.add_function("compareTo", compare_to);
    ctx.add_function("isGreaterThan", is_greater_than);
    ctx.add_function("isLessThan", is_less_than);
    ctx.add_function("semver", semver);
    ctx.add_function("isSemver", is_semver);
    ctx.add_function("major", major);
    ctx.add_function("minor", minor);
    ctx.add_function("patch", patch);
    ctx
}
