//! Stand-ins for what this machine does not have. For now: a fake
//! OpenAI-compatible engine ([`engine`]), which the gateway's tests and
//! benchmarks drive and which will serve every simulated pod.

pub mod engine;
