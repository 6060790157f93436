//! Which service a path names, which paths are refused, and the path an
//! endpoint receives.

use http::Uri;

use crate::error::{ErrorKind, GatewayError};
use crate::table::{Endpoint, Service};

/// `/namespace/name/rest` → (`namespace/name`, `rest?query`).
pub(super) fn service_path(uri: &Uri) -> Option<(String, String)> {
    let path = uri.path().strip_prefix('/')?;
    let mut parts = path.splitn(3, '/');
    let (namespace, name) = (parts.next()?, parts.next()?);
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    let mut rest = parts.next().unwrap_or_default().to_string();
    if let Some(query) = uri.query() {
        rest.push('?');
        rest.push_str(query);
    }
    Some((format!("{namespace}/{name}"), rest))
}

/// Refuses a path an upstream could resolve differently from the gateway:
/// `.` and `..` segments (plain or percent-encoded) would climb out of a
/// service's prefix after routing and key scoping chose it, and encoded
/// slashes or backslashes split segments differently on the other side.
pub(super) fn check_path(path: &str) -> Result<(), GatewayError> {
    if has_encoded_separator(path) || path.split('/').any(is_dot_segment) {
        return Err(GatewayError::new(
            ErrorKind::InvalidPath,
            "The request path may not contain `.` or `..` segments or encoded slashes.",
        ));
    }
    Ok(())
}

/// `%2f`, `%5c` (either case) or a backslash. Every request passes here,
/// so it reads the path in place.
pub(super) fn has_encoded_separator(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.contains(&b'\\')
        || memchr::memchr_iter(b'%', bytes).any(|i| {
            matches!(
                bytes.get(i + 1..i + 3),
                Some([b'2', b'f' | b'F'] | [b'5', b'c' | b'C'])
            )
        })
}

/// `.` or `..`, each dot plain or encoded as `%2e` / `%2E`.
pub(super) fn is_dot_segment(segment: &str) -> bool {
    let mut rest = segment.as_bytes();
    let mut dots = 0;
    while !rest.is_empty() {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', b'e' | b'E', tail @ ..] => tail,
            _ => return false,
        };
        dots += 1;
    }
    matches!(dots, 1 | 2)
}

/// The path an endpoint receives for `relative` (the part below the
/// service prefix): the rewrite replaces the prefix, else the prefix stays.
pub(super) fn upstream_path(service: &Service, endpoint: &Endpoint, relative: &str) -> String {
    let (base, separator) = match &endpoint.rewrite {
        Some(rewrite) => (rewrite.trim_end_matches('/'), "/"),
        None => (service.prefix.as_str(), ""),
    };
    [base, separator, relative].concat()
}
