//! CEL device selectors, evaluated as the scheduler's DRA allocator does.
//!
//! A selector is a CEL expression over one variable, `device`, with the fields
//! `device.driver` (string), `device.attributes` and `device.capacity`: maps from a domain
//! (`gpu.nvidia.com`) to maps from the attribute's name to its value. A device's unqualified
//! names belong to its driver's domain. As in Kubernetes, looking up a domain the device does
//! not have gives an empty map (so `device.attributes["other.io"].x` is a runtime error "no
//! such key", and `has(...)` tests it), attributes of type version are semantic versions and
//! capacities are quantities.
//!
//! On top of the `cel` crate's standard functions (`matches`, `size`, `startsWith`,
//! `contains`...), the Kubernetes library functions selectors use in practice:
//! `lowerAscii`, `upperAscii`; `quantity(s)`, `isQuantity(s)` and on quantities `compareTo`,
//! `isGreaterThan`, `isLessThan`, `asInteger`, `isInteger`, `sign`, `add`, `sub`;
//! `semver(s)`, `isSemver(s)` and on versions `compareTo`, `isGreaterThan`, `isLessThan`,
//! `major`, `minor`, `patch`.
//!
//! # Cost limit
//!
//! Every expression is compiled once ([`Selectors`] caches by text) and its worst-case cost
//! estimated from its syntax tree before it is ever run: one unit per node (call, selection,
//! literal, identifier); a call that scans a string (`matches`, `contains`, `startsWith`,
//! `endsWith`, `lowerAscii`, `upperAscii`) costs [`MAX_STRING`] (the API's bound on an
//! attribute's string); a comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) costs
//! its range plus its loop body times the range's size: the literal list's length, else
//! [`MAX_RANGE`] (the API's bound on a device's attributes and capacities, 32, twice). An
//! expression whose estimate exceeds [`MAX_COST`] (the API server's limit for selectors, in the
//! same spirit: bounded work per device) or whose text exceeds [`MAX_LENGTH`] is refused
//! before evaluation, so every evaluation does bounded work. Failures are data
//! ([`SelectorError`]): the allocator turns them into a reason naming the claim and request.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cel::common::ast::{Expr, LiteralValue};
use cel::objects::{Key, Map, Opaque};
use cel::{Context, ExecutionError, FunctionContext, IdedExpr, Program, Value};

use super::{AttributeValue, Device};
use crate::quantity::Quantity;

/// Largest estimated cost of one expression ([`crate::dra::cel`] says how it is counted).
pub const MAX_COST: u64 = 1_000_000;
/// Longest expression text, in bytes (the API's `CELSelectorExpressionMaxLength`).
pub const MAX_LENGTH: usize = 10 * 1024;
/// Cost of one call that scans a string.
pub const MAX_STRING: u64 = 64;
/// Assumed size of a comprehension's range that is not a literal list.
pub const MAX_RANGE: u64 = 64;

/// Why a selector could not say yes or no about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorError {
    /// It does not parse (or is too long).
    Compile {
        /// The expression.
        expression: String,
        /// The parser's words.
        message: String,
    },
    /// Its estimated cost is above [`MAX_COST`].
    Cost {
        /// The expression.
        expression: String,
        /// Its estimate.
        cost: u64,
    },
    /// Evaluating it failed (no such key, wrong types, bad argument).
    Runtime {
        /// The expression.
        expression: String,
        /// The evaluator's words.
        message: String,
    },
    /// It evaluated to something other than a bool.
    NotBool {
        /// The expression.
        expression: String,
        /// What it gave.
        got: String,
    },
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectorError::Compile {
                expression,
                message,
            } => write!(
                f,
                "CEL expression {expression:?} does not compile: {message}"
            ),
            SelectorError::Cost { expression, cost } => write!(
                f,
                "CEL expression {expression:?} exceeds the cost limit: estimated {cost}, limit {MAX_COST}"
            ),
            SelectorError::Runtime {
                expression,
                message,
            } => write!(f, "CEL expression {expression:?} failed: {message}"),
            SelectorError::NotBool { expression, got } => {
                write!(f, "CEL expression {expression:?} gave {got}, not a bool")
            }
        }
    }
}

/// A compiled selector, with the string literals it names (candidate domains, which must
/// read as empty maps when a device lacks them).
struct Compiled {
    program: Program,
    literals: Vec<Arc<String>>,
}

/// The compiled selectors of one planning run: each distinct expression is compiled and
/// costed once, then evaluated against any number of devices.
pub struct Selectors {
    programs: HashMap<String, Result<Arc<Compiled>, SelectorError>>,
    root: Context<'static>,
}

impl Default for Selectors {
    fn default() -> Self {
        Selectors::new()
    }
}

impl fmt::Debug for Selectors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selectors")
            .field("compiled", &self.programs.len())
            .finish()
    }
}

/// A device as CEL sees it, built once per device and reused for every expression.
#[derive(Clone, Debug)]
pub struct DeviceValue {
    driver: Arc<String>,
    attributes: HashMap<Key, Value>,
    capacity: HashMap<Key, Value>,
}

impl DeviceValue {
    /// The value of `device` published by `driver`.
    pub fn new(driver: &str, device: &Device) -> DeviceValue {
        fn domain_of<'a>(driver: &'a str, name: &'a str) -> (&'a str, &'a str) {
            name.split_once('/').unwrap_or((driver, name))
        }
        fn group(entries: Vec<(&str, &str, Value)>) -> HashMap<Key, Value> {
            let mut by_domain: HashMap<String, HashMap<Key, Value>> = HashMap::new();
            for (domain, name, value) in entries {
                by_domain
                    .entry(domain.to_string())
                    .or_default()
                    .insert(Key::String(Arc::new(name.to_string())), value);
            }
            by_domain
                .into_iter()
                .map(|(d, m)| {
                    (
                        Key::String(Arc::new(d)),
                        Value::Map(Map { map: Arc::new(m) }),
                    )
                })
                .collect()
        }
        let attributes = device
            .attributes
            .iter()
            .map(|(name, v)| {
                let (domain, short) = domain_of(driver, name);
                let value = match v {
                    AttributeValue::Bool(b) => Value::Bool(*b),
                    AttributeValue::Int(i) => Value::Int(*i),
                    AttributeValue::String(s) => Value::String(Arc::new(s.clone())),
                    AttributeValue::Version(s) => match semver::Version::parse(s) {
                        Ok(v) => Value::Opaque(Arc::new(Semver(v))),
                        // The API server validates versions; one that slipped through is
                        // still comparable as a string.
                        Err(_) => Value::String(Arc::new(s.clone())),
                    },
                };
                (domain, short, value)
            })
            .collect();
        let capacity = device
            .capacity
            .iter()
            .map(|(name, q)| {
                let (domain, short) = domain_of(driver, name);
                (domain, short, Value::Opaque(Arc::new(Qty(*q))))
            })
            .collect();
        DeviceValue {
            driver: Arc::new(driver.to_string()),
            attributes: group(attributes),
            capacity: group(capacity),
        }
    }

    fn to_value(&self, domains: &[Arc<String>]) -> Value {
        let with_domains = |m: &HashMap<Key, Value>| {
            let mut m = m.clone();
            for d in domains {
                m.entry(Key::String(d.clone()))
                    .or_insert_with(|| Value::Map(Map::from(HashMap::<Key, Value>::new())));
            }
            Value::Map(Map { map: Arc::new(m) })
        };
        let mut fields: HashMap<Key, Value> = HashMap::new();
        fields.insert(key("driver"), Value::String(self.driver.clone()));
        fields.insert(key("attributes"), with_domains(&self.attributes));
        fields.insert(key("capacity"), with_domains(&self.capacity));
        Value::Map(Map {
            map: Arc::new(fields),
        })
    }
}

fn key(s: &str) -> Key {
    Key::String(Arc::new(s.to_string()))
}

impl Selectors {
    /// An empty cache with the Kubernetes library functions registered.
    pub fn new() -> Selectors {
        let mut root = Context::default();
        root.add_function(
            "lowerAscii",
            |This(s): cel::extractors::This<Arc<String>>| s.to_ascii_lowercase(),
        );
        root.add_function(
            "upperAscii",
            |This(s): cel::extractors::This<Arc<String>>| s.to_ascii_uppercase(),
        );
        root.add_function("quantity", quantity);
        root.add_function("isQuantity", |s: Arc<String>| Quantity::parse(&s).is_ok());
        root.add_function("semver", semver_fn);
        root.add_function("isSemver", |s: Arc<String>| {
            semver::Version::parse(&s).is_ok()
        });
        root.add_function("compareTo", compare_to);
        root.add_function("isGreaterThan", is_greater_than);
        root.add_function("isLessThan", is_less_than);
        root.add_function("asInteger", as_integer);
        root.add_function("isInteger", is_integer);
        root.add_function("sign", sign);
        root.add_function("add", add);
        root.add_function("sub", sub);
        root.add_function("major", |ftx: &FunctionContext, This(v): This<Value>| {
            version_part(ftx, v, |v| v.major)
        });
        root.add_function("minor", |ftx: &FunctionContext, This(v): This<Value>| {
            version_part(ftx, v, |v| v.minor)
        });
        root.add_function("patch", |ftx: &FunctionContext, This(v): This<Value>| {
            version_part(ftx, v, |v| v.patch)
        });
        Selectors {
            programs: HashMap::new(),
            root,
        }
    }

    /// Compiles and costs `expression` (once; later calls read the cache).
    ///
    /// # Errors
    /// [`SelectorError::Compile`] or [`SelectorError::Cost`].
    pub fn check(&mut self, expression: &str) -> Result<(), SelectorError> {
        self.compiled(expression).map(|_| ())
    }

    fn compiled(&mut self, expression: &str) -> Result<Arc<Compiled>, SelectorError> {
        if let Some(done) = self.programs.get(expression) {
            return done.clone();
        }
        let result = compile(expression);
        self.programs.insert(expression.to_string(), result.clone());
        result
    }

    /// Whether `device` satisfies `expression`.
    ///
    /// # Errors
    /// Any [`SelectorError`]: the expression does not compile, costs too much, fails on this
    /// device or is not a bool.
    pub fn matches(
        &mut self,
        expression: &str,
        device: &DeviceValue,
    ) -> Result<bool, SelectorError> {
        let compiled = self.compiled(expression)?;
        let mut scope = self.root.new_inner_scope();
        scope.add_variable_from_value("device", device.to_value(&compiled.literals));
        match compiled.program.execute(&scope) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(SelectorError::NotBool {
                expression: expression.to_string(),
                got: format!("{other:?}"),
            }),
            Err(e) => Err(SelectorError::Runtime {
                expression: expression.to_string(),
                message: e.to_string(),
            }),
        }
    }
}

fn compile(expression: &str) -> Result<Arc<Compiled>, SelectorError> {
    if expression.len() > MAX_LENGTH {
        return Err(SelectorError::Compile {
            expression: expression.chars().take(64).collect::<String>() + "...",
            message: format!("longer than {MAX_LENGTH} bytes"),
        });
    }
    let program = Program::compile(expression).map_err(|e| SelectorError::Compile {
        expression: expression.to_string(),
        // The parser's first line says what and where; the rest draws the caret.
        message: e
            .to_string()
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
    })?;
    let cost = estimate(program.expression());
    if cost > MAX_COST {
        return Err(SelectorError::Cost {
            expression: expression.to_string(),
            cost,
        });
    }
    let mut literals = vec![];
    string_literals(program.expression(), &mut literals);
    literals.sort();
    literals.dedup();
    Ok(Arc::new(Compiled { program, literals }))
}

/// Calls whose work grows with a string's length.
const STRING_SCANS: &[&str] = &[
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "lowerAscii",
    "upperAscii",
];

/// The worst-case cost of `e` (module docs), saturating.
fn estimate(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::Call(call) => {
            let own = if STRING_SCANS.contains(&call.func_name.as_str()) {
                MAX_STRING
            } else {
                1
            };
            let target = call.target.as_deref().map_or(0, estimate);
            call.args.iter().fold(own.saturating_add(target), |acc, a| {
                acc.saturating_add(estimate(a))
            })
        }
        Expr::Comprehension(c) => {
            let body = estimate(&c.loop_cond)
                .saturating_add(estimate(&c.loop_step))
                .saturating_add(1);
            estimate(&c.iter_range)
                .saturating_add(estimate(&c.accu_init))
                .saturating_add(estimate(&c.result))
                .saturating_add(body.saturating_mul(range_size(&c.iter_range)))
        }
        Expr::List(l) => l
            .elements
            .iter()
            .fold(1u64, |acc, x| acc.saturating_add(estimate(x))),
        Expr::Map(m) => m.entries.iter().fold(1u64, |acc, entry| match &entry.expr {
            cel::common::ast::EntryExpr::MapEntry(me) => acc
                .saturating_add(estimate(&me.key))
                .saturating_add(estimate(&me.value)),
            cel::common::ast::EntryExpr::StructField(sf) => acc.saturating_add(estimate(&sf.value)),
        }),
        Expr::Select(s) => estimate(&s.operand).saturating_add(1),
        Expr::Struct(s) => s.entries.iter().fold(1u64, |acc, entry| match &entry.expr {
            cel::common::ast::EntryExpr::MapEntry(me) => acc
                .saturating_add(estimate(&me.key))
                .saturating_add(estimate(&me.value)),
            cel::common::ast::EntryExpr::StructField(sf) => acc.saturating_add(estimate(&sf.value)),
        }),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 1,
    }
}

/// An upper bound on how many elements a comprehension's range has.
fn range_size(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::List(l) => l.elements.len() as u64,
        Expr::Map(m) => m.entries.len() as u64,
        Expr::Call(c) if c.func_name == cel::common::ast::operators::ADD => c
            .args
            .iter()
            .fold(0u64, |acc, a| acc.saturating_add(range_size(a))),
        Expr::Comprehension(c) => range_size(&c.iter_range),
        _ => MAX_RANGE,
    }
}

fn string_literals(e: &IdedExpr, out: &mut Vec<Arc<String>>) {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => out.push(Arc::new(s.inner().to_string())),
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                string_literals(t, out);
            }
            c.args.iter().for_each(|a| string_literals(a, out));
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                string_literals(x, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| string_literals(x, out)),
        Expr::Select(s) => string_literals(&s.operand, out),
        Expr::Map(_) | Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

use cel::extractors::This;

/// A Kubernetes quantity inside CEL.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Qty(Quantity);

impl Opaque for Qty {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// A semantic version inside CEL.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Semver(semver::Version);

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

type Res<T> = Result<T, ExecutionError>;

fn quantity(ftx: &FunctionContext, s: Arc<String>) -> Res<Value> {
    Quantity::parse(&s)
        .map(|q| Value::Opaque(Arc::new(Qty(q))))
        .map_err(|e| ftx.error(e.to_string()))
}

fn semver_fn(ftx: &FunctionContext, s: Arc<String>) -> Res<Value> {
    semver::Version::parse(&s)
        .map(|v| Value::Opaque(Arc::new(Semver(v))))
        .map_err(|e| ftx.error(format!("invalid semver {s:?}: {e}")))
}

fn as_qty(ftx: &FunctionContext, v: &Value) -> Res<Quantity> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Qty>().map(|q| q.0).ok_or_else(|| {
            ftx.error(format!(
                "expected a quantity, got {}",
                o.runtime_type_name()
            ))
        }),
        other => Err(ftx.error(format!("expected a quantity, got {other:?}"))),
    }
}

fn as_version<'a>(ftx: &FunctionContext, v: &'a Value) -> Res<&'a semver::Version> {
    match v {
        Value::Opaque(o) => o
            .downcast_ref::<Semver>()
            .map(|s| &s.0)
            .ok_or_else(|| ftx.error(format!("expected a semver, got {}", o.runtime_type_name()))),
        other => Err(ftx.error(format!("expected a semver, got {other:?}"))),
    }
}

/// Orders two quantities or two versions; anything else is an error.
fn order(ftx: &FunctionContext, a: &Value, b: &Value) -> Res<std::cmp::Ordering> {
    if let Ok(x) = as_qty(ftx, a) {
        return Ok(x.cmp(&as_qty(ftx, b)?));
    }
    let x = as_version(ftx, a)?;
    Ok(x.cmp_precedence(as_version(ftx, b)?))
}

fn compare_to(ftx: &FunctionContext, This(a): This<Value>, b: Value) -> Res<i64> {
    Ok(order(ftx, &a, &b)? as i64)
}

fn is_greater_than(ftx: &FunctionContext, This(a): This<Value>, b: Value) -> Res<bool> {
    Ok(order(ftx, &a, &b)?.is_gt())
}

fn is_less_than(ftx: &FunctionContext, This(a): This<Value>, b: Value) -> Res<bool> {
    Ok(order(ftx, &a, &b)?.is_lt())
}

fn as_integer(ftx: &FunctionContext, This(a): This<Value>) -> Res<i64> {
    let q = as_qty(ftx, &a)?;
    if !q.is_whole() {
        return Err(ftx.error(format!("quantity {q} is not an integer")));
    }
    i64::try_from(q.millis() / 1000).map_err(|_| ftx.error(format!("quantity {q} overflows int")))
}

fn is_integer(ftx: &FunctionContext, This(a): This<Value>) -> Res<bool> {
    let q = as_qty(ftx, &a)?;
    Ok(q.is_whole() && i64::try_from(q.millis() / 1000).is_ok())
}

fn sign(ftx: &FunctionContext, This(a): This<Value>) -> Res<i64> {
    Ok(as_qty(ftx, &a)?.millis().signum() as i64)
}

fn arith(ftx: &FunctionContext, a: Value, b: Value, neg: bool) -> Res<Value> {
    let x = as_qty(ftx, &a)?;
    let y = match &b {
        Value::Int(i) => Quantity::from_units(*i),
        other => as_qty(ftx, other)?,
    };
    let y = if neg { -y.millis() } else { y.millis() };
    x.millis()
        .checked_add(y)
        .map(|m| Value::Opaque(Arc::new(Qty(Quantity::from_millis(m)))))
        .ok_or_else(|| ftx.error("quantity overflow"))
}

fn add(ftx: &FunctionContext, This(a): This<Value>, b: Value) -> Res<Value> {
    arith(ftx, a, b, false)
}

fn sub(ftx: &FunctionContext, This(a): This<Value>, b: Value) -> Res<Value> {
    arith(ftx, a, b, true)
}

fn version_part(ftx: &FunctionContext, v: Value, part: fn(&semver::Version) -> u64) -> Res<i64> {
    let v = as_version(ftx, &v)?;
    i64::try_from(part(v)).map_err(|_| ftx.error("version part overflows int"))
}

#[cfg(test)]
mod tests;
