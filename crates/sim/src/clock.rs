//! The wall clock, as the simulated parts stamp what they write.

/// Now, as Kubernetes writes transition times.
pub fn timestamp() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
