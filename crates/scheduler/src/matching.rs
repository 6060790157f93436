//! Compiling a deployment's selectors and matching members to pools
//! (`behavior.md` §1.3–§1.4), memoised per distinct pool device list.

use std::collections::HashMap;
use std::sync::Arc;

use modelplane_api::types::{Claim, Role};
use modelplane_cel::dra;
use modelplane_cel::dra::{CompileError, DeviceSelector, EvalError};
use serde::Serialize;

use crate::model::{Deployment, PoolDevice};

/// A selector that does not compile: the deployment is held.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "engine {engine}, member {member}, request {request}, selector {selector}: {expression:?}: {error}"
)]
pub struct SelectorError {
    /// Engine name.
    pub engine: String,
    /// Member position (0-based).
    pub member: usize,
    /// Request name.
    pub request: String,
    /// Selector position (0-based).
    pub selector: usize,
    /// The expression.
    pub expression: String,
    /// The compiler's error, with its position in the expression.
    pub error: CompileError,
}

/// A request resolved against a pool's DRA device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRequest {
    /// Request name.
    pub name: String,
    /// DeviceClass of the matched device ("" when unset).
    pub device_class_name: String,
    /// Devices per pod.
    pub count: i64,
    /// The selectors, verbatim.
    pub selectors: Vec<String>,
    /// Which of the pool's devices it takes (its index there).
    #[serde(skip)]
    pub device: usize,
}

pub(crate) struct CompiledRequest {
    pub name: String,
    pub count: i64,
    pub texts: Vec<String>,
    pub selectors: Vec<DeviceSelector>,
}

pub(crate) struct CompiledMember {
    pub role: Role,
    /// Pods of this member in one replica: its pods × the engine's copies.
    pub pods: i64,
    pub requests: Vec<CompiledRequest>,
}

pub(crate) struct CompiledEngine {
    pub name: String,
    pub members: Vec<CompiledMember>,
}

/// Compiles every selector, in deployment order; the first failure holds.
pub(crate) fn compile(deployment: &Deployment) -> Result<Vec<CompiledEngine>, Box<SelectorError>> {
    deployment
        .engines
        .iter()
        .map(|engine| {
            let members = engine
                .members
                .iter()
                .enumerate()
                .map(|(mi, member)| {
                    let requests = member
                        .requests
                        .iter()
                        .map(|request| {
                            let selectors = request
                                .selectors
                                .iter()
                                .enumerate()
                                .map(|(si, text)| {
                                    DeviceSelector::compile(text).map_err(|error| {
                                        Box::new(SelectorError {
                                            engine: engine.name.clone(),
                                            member: mi,
                                            request: request.name.clone(),
                                            selector: si,
                                            expression: text.clone(),
                                            error,
                                        })
                                    })
                                })
                                .collect::<Result<Vec<_>, Box<SelectorError>>>()?;
                            Ok(CompiledRequest {
                                name: request.name.clone(),
                                count: request.count,
                                texts: request.selectors.clone(),
                                selectors,
                            })
                        })
                        .collect::<Result<Vec<_>, Box<SelectorError>>>()?;
                    Ok(CompiledMember {
                        role: member.role,
                        pods: i64::from(member.pods) * i64::from(engine.copies),
                        requests,
                    })
                })
                .collect::<Result<Vec<_>, Box<SelectorError>>>()?;
            Ok(CompiledEngine {
                name: engine.name.clone(),
                members,
            })
        })
        .collect()
}

/// Why one device does not satisfy one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum DeviceMiss {
    /// Fewer devices left on the node than the request asks for.
    Count {
        /// Devices still free on a node after earlier requests.
        available: i64,
        /// Devices the request asks for.
        requested: i64,
    },
    /// A selector is false for this device.
    SelectorFalse {
        /// Position of the selector.
        selector: usize,
        /// Its text.
        expression: String,
    },
    /// A selector failed on this device (unknown attribute, malformed device…).
    SelectorError {
        /// Position of the selector.
        selector: usize,
        /// Its text.
        expression: String,
        /// What went wrong.
        error: String,
    },
}

/// Evaluates selectors against devices, memoised by device identity, so a
/// device shared by many pools (the same InferenceClass) is evaluated once.
pub(crate) struct Matcher {
    ctx: dra::Context<'static>,
    /// (engine, member, request, device) → all selectors hold.
    request_memo: HashMap<(usize, usize, usize, usize), bool>,
    /// (engine, member, device list) → the member's match on that list.
    member_memo: HashMap<(usize, usize, usize), Option<Vec<ResolvedRequest>>>,
}

fn ptr<T: ?Sized>(arc: &Arc<T>) -> usize {
    Arc::as_ptr(arc) as *const () as usize
}

impl Matcher {
    pub(crate) fn new() -> Matcher {
        Matcher {
            ctx: dra::context(),
            request_memo: HashMap::new(),
            member_memo: HashMap::new(),
        }
    }

    /// Evaluates each selector of `request` on `device`, stopping at the first
    /// that does not hold: `Ok(())` or why not.
    pub(crate) fn evaluate(
        &self,
        request: &CompiledRequest,
        device: &PoolDevice,
    ) -> Result<(), DeviceMiss> {
        let scope = match device.activation.bind(&self.ctx) {
            Ok(scope) => scope,
            Err(e) => {
                return Err(DeviceMiss::SelectorError {
                    selector: 0,
                    expression: request.texts.first().cloned().unwrap_or_default(),
                    error: e.to_string(),
                });
            }
        };
        for (i, selector) in request.selectors.iter().enumerate() {
            match selector.matches(&scope) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(DeviceMiss::SelectorFalse {
                        selector: i,
                        expression: request.texts[i].clone(),
                    });
                }
                Err(e) => return Err(selector_error(i, &request.texts[i], &e, device)),
            }
        }
        Ok(())
    }

    fn request_holds(
        &mut self,
        key: (usize, usize, usize),
        request: &CompiledRequest,
        device: &Arc<PoolDevice>,
    ) -> bool {
        let memo_key = (key.0, key.1, key.2, ptr(device));
        if let Some(hit) = self.request_memo.get(&memo_key) {
            return *hit;
        }
        let holds = self.evaluate(request, device).is_ok();
        self.request_memo.insert(memo_key, holds);
        holds
    }

    /// `match_member(pool, member)`: `None` when some request finds no device;
    /// otherwise the DRA requests it resolves (possibly none).
    pub(crate) fn match_member(
        &mut self,
        engines: &[CompiledEngine],
        engine: usize,
        member: usize,
        devices: &Arc<[Arc<PoolDevice>]>,
    ) -> Option<Vec<ResolvedRequest>> {
        let memo_key = (engine, member, ptr(devices));
        if let Some(hit) = self.member_memo.get(&memo_key) {
            return hit.clone();
        }
        let compiled = &engines[engine].members[member];
        let mut remaining: Vec<i64> = devices.iter().map(|d| d.count).collect();
        let mut resolved = Vec::new();
        let mut result = Some(());
        for (ri, request) in compiled.requests.iter().enumerate() {
            let found = (0..devices.len()).find(|&i| {
                remaining[i] >= request.count
                    && self.request_holds((engine, member, ri), request, &devices[i])
            });
            let Some(i) = found else {
                result = None;
                break;
            };
            remaining[i] -= request.count;
            if devices[i].claim == Claim::Dra {
                resolved.push(ResolvedRequest {
                    name: request.name.clone(),
                    device_class_name: devices[i].device_class_name.clone(),
                    count: request.count,
                    selectors: request.texts.clone(),
                    device: i,
                });
            }
        }
        let out = result.map(|()| resolved);
        self.member_memo.insert(memo_key, out.clone());
        out
    }
}

/// A selector's failure on `device`, in words: one that reads an attribute
/// the device lacks says which it has.
fn selector_error(i: usize, text: &str, e: &EvalError, device: &PoolDevice) -> DeviceMiss {
    let error = match e {
        EvalError::Missing {
            map: "attribute", ..
        } => {
            let has = dra::attribute_names(&device.source);
            if has.is_empty() {
                format!("{e}; it publishes no attributes")
            } else {
                format!("{e}; it has {}", has.join(", "))
            }
        }
        _ => e.to_string(),
    };
    DeviceMiss::SelectorError {
        selector: i,
        expression: text.to_string(),
        error,
    }
}
