//! The fleet gateway: one OpenAI-compatible endpoint in front of every
//! replica of every model.
//!
//! Data flow: ModelServices, ModelEndpoints and Secrets → [`table::Table::compile`]
//! (pure, golden-tested) → [`state::Gateway::publish`] swaps the table in →
//! each request ([`proxy::handle`]) reads it once, picks an endpoint
//! ([`select::pick`], pure, seeded in tests) and streams the engine's
//! answer back. [`health`] probes endpoints beside; [`config`] loads the
//! objects from files and reloads them on change; [`server`] accepts
//! connections and drains them on shutdown.

pub mod body;
pub mod config;
pub mod error;
pub mod feed;
pub mod health;
pub mod metrics;
pub mod outlier;
pub mod proxy;
pub mod select;
pub mod server;
pub mod state;
pub mod table;
