//! What routing needs of Modelplane's objects, shared by the composition
//! (which turns ModelServices into routes) and the fleet gateway (which
//! routes by them directly): endpoint URLs parsed as the original does, and
//! the endpoints each ModelService entry selects.

use std::collections::BTreeSet;

use crate::types::{ModelEndpoint, ModelService};

/// The parts of an endpoint URL that carry traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `http`, `https`, …
    pub scheme: String,
    /// Host, lower-cased, without IPv6 brackets.
    pub host: String,
    /// Port: explicit, else 443 for https, else 80.
    pub port: u16,
    /// The path (and query), possibly empty.
    pub path: String,
}

/// Parses `scheme://host[:port][/path]` as the original (Python `urlparse`):
/// an explicit port `0` or no port falls back to the scheme's default.
pub fn parse_url(url: &str) -> Option<Url> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = if let Some(stripped) = authority.strip_prefix('[') {
        let (host, after) = stripped.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let default = if scheme == "https" { 443 } else { 80 };
    let port = match port {
        None | Some("") => default,
        Some(p) => match p.parse::<u32>() {
            Ok(0) => default,
            Ok(n) if n <= 65535 => n as u16,
            _ => return None,
        },
    };
    Some(Url {
        scheme,
        host: host.to_ascii_lowercase(),
        port,
        path: path.to_string(),
    })
}

fn key(endpoint: &ModelEndpoint) -> String {
    format!(
        "{}/{}",
        endpoint.metadata.namespace.as_deref().unwrap_or_default(),
        endpoint.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The endpoints each entry selects, first entry first; an endpoint matched
/// by several entries belongs to the first.
pub fn group_endpoints<'a>(
    service: &ModelService,
    endpoints: impl IntoIterator<Item = &'a ModelEndpoint>,
) -> Vec<Vec<&'a ModelEndpoint>> {
    let mut sorted: Vec<&ModelEndpoint> = endpoints.into_iter().collect();
    sorted.sort_by_key(|e| key(e));
    let mut claimed = BTreeSet::new();
    service
        .spec
        .endpoints
        .iter()
        .map(|entry| {
            sorted
                .iter()
                .copied()
                .filter(|e| {
                    entry
                        .selector
                        .matches(e.metadata.labels.as_ref().unwrap_or(&Default::default()))
                })
                .filter(|e| claimed.insert(key(e)))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_like_python_urlparse() {
        let u = parse_url("https://api.together.xyz/v1").expect("valid");
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("api.together.xyz", 443, "/v1")
        );
        assert_eq!(
            parse_url("http://10.0.0.1:8080").map(|u| u.port),
            Some(8080)
        );
        assert_eq!(
            parse_url("http://Gateway.Example:0/x").map(|u| (u.host, u.port)),
            Some(("gateway.example".into(), 80))
        );
        assert_eq!(
            parse_url("http://[::1]:9000/").map(|u| (u.host, u.port)),
            Some(("::1".into(), 9000))
        );
        assert_eq!(parse_url("grpc://h").map(|u| u.port), Some(80));
        for bad in ["no-scheme", "http://", "http://h:70000", "http://h:port"] {
            assert_eq!(parse_url(bad), None, "{bad}");
        }
    }
}
