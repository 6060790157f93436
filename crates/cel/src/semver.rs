//! Semantic versions as Kubernetes' CEL `semver()` library and DRA `version`
//! attributes read them (blang/semver v4): strict parsing, an optional
//! normalising parse, and precedence comparison that ignores build metadata.

use std::cmp::Ordering;
use std::fmt;

/// A parsed semantic version.
#[derive(Clone, Debug, Eq)]
pub struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Identifier>,
    text: String,
}

/// A prerelease identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Identifier {
    Numeric(u64),
    Alpha(String),
}

/// Why a string is not a semantic version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid semver {text:?}: {reason}")]
pub struct SemverError {
    text: String,
    reason: &'static str,
}

fn error(text: &str, reason: &'static str) -> SemverError {
    SemverError {
        text: text.to_string(),
        reason,
    }
}

fn number(part: &str, text: &str) -> Result<u64, SemverError> {
    if part.is_empty() {
        return Err(error(text, "empty version number"));
    }
    if !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(error(text, "version numbers must be digits"));
    }
    if part.len() > 1 && part.starts_with('0') {
        return Err(error(text, "version numbers must not have leading zeros"));
    }
    part.parse()
        .map_err(|_| error(text, "version number out of range"))
}

fn is_alphanumeric_identifier(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Semver {
    /// Strict `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`.
    pub fn parse(text: &str) -> Result<Semver, SemverError> {
        if text.is_empty() {
            return Err(error(text, "empty version"));
        }
        let mut parts = text.splitn(3, '.');
        let (Some(major), Some(minor), Some(rest)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(error(text, "expected MAJOR.MINOR.PATCH"));
        };
        let (rest, build) = match rest.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (rest, None),
        };
        let (patch, pre) = match rest.split_once('-') {
            Some((patch, pre)) => (patch, Some(pre)),
            None => (rest, None),
        };
        let mut version = Semver {
            major: number(major, text)?,
            minor: number(minor, text)?,
            patch: number(patch, text)?,
            pre: Vec::new(),
            text: text.to_string(),
        };
        if let Some(pre) = pre {
            for ident in pre.split('.') {
                if ident.is_empty() {
                    return Err(error(text, "empty prerelease identifier"));
                }
                if ident.bytes().all(|b| b.is_ascii_digit()) {
                    version.pre.push(Identifier::Numeric(number(ident, text)?));
                } else if is_alphanumeric_identifier(ident) {
                    version.pre.push(Identifier::Alpha(ident.to_string()));
                } else {
                    return Err(error(text, "invalid prerelease identifier"));
                }
            }
        }
        if let Some(build) = build
            && !build.split('.').all(is_alphanumeric_identifier)
        {
            return Err(error(text, "invalid build metadata"));
        }
        Ok(version)
    }

    /// The lenient parse of `semver(s, true)`: one leading `v` is dropped,
    /// leading zeros are stripped and missing minor/patch become 0.
    pub fn parse_normalized(text: &str) -> Result<Semver, SemverError> {
        let v = text.strip_prefix('v').unwrap_or(text);
        let parts: Vec<String> = v
            .splitn(3, '.')
            .map(|part| {
                if part.len() <= 1 {
                    return part.to_string();
                }
                let stripped = part.trim_start_matches('0');
                if stripped.is_empty() || !stripped.starts_with(|c: char| c.is_ascii_digit()) {
                    format!("0{stripped}")
                } else {
                    stripped.to_string()
                }
            })
            .collect();
        if parts.len() < 3 && parts.last().is_some_and(|last| last.contains(['+', '-'])) {
            return Err(error(text, "prerelease or build needs MAJOR.MINOR.PATCH"));
        }
        let mut padded = parts;
        while padded.len() < 3 {
            padded.push("0".into());
        }
        Semver::parse(&padded.join(".")).map_err(|e| SemverError {
            text: text.to_string(),
            reason: e.reason,
        })
    }

    /// Major version.
    pub fn major(&self) -> u64 {
        self.major
    }

    /// Minor version.
    pub fn minor(&self) -> u64 {
        self.minor
    }

    /// Patch version.
    pub fn patch(&self) -> u64 {
        self.patch
    }

    /// −1, 0 or 1 by precedence.
    pub fn compare(&self, other: &Semver) -> i64 {
        match self.cmp(other) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }
    }
}

impl PartialEq for Semver {
    /// Equal precedence; build metadata is ignored.
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_prerelease(&self.pre, &other.pre),
            })
    }
}

fn compare_prerelease(a: &[Identifier], b: &[Identifier]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let order = match (x, y) {
            (Identifier::Numeric(x), Identifier::Numeric(y)) => x.cmp(y),
            (Identifier::Numeric(_), Identifier::Alpha(_)) => Ordering::Less,
            (Identifier::Alpha(_), Identifier::Numeric(_)) => Ordering::Greater,
            (Identifier::Alpha(x), Identifier::Alpha(y)) => x.cmp(y),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Semver {
        Semver::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn strict_parsing_follows_blang_semver() {
        for ok in [
            "1.2.3",
            "0.0.0",
            "1.2.3-rc.1",
            "1.2.3+build.01",
            "1.2.3-alpha-1+b",
            "9.0.0",
        ] {
            assert!(Semver::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-+b",
            "01.2.3",
            "1.02.3",
            "1.2.03",
            "1.2.3.4",
            "v1.2.3",
            "1.2.3-01",
            "1.2.3-a..b",
            "1.2.3-a_b",
            "a.b.c",
            "99999999999999999999.0.0",
        ] {
            assert!(Semver::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn normalized_parsing_pads_and_strips() {
        for (text, want) in [
            ("v1", "1.0.0"),
            ("1.2", "1.2.0"),
            ("v01.02", "1.2.0"),
            ("1.2.3-rc", "1.2.3-rc"),
        ] {
            assert_eq!(
                Semver::parse_normalized(text).map(|s| s.compare(&v(want))),
                Ok(0),
                "{text}"
            );
        }
        for bad in ["V1.2.3", "1.2-rc", " 1"] {
            assert!(Semver::parse_normalized(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn precedence_follows_the_semver_spec() {
        let chain = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
        ];
        for pair in chain.windows(2) {
            assert_eq!(
                v(pair[0]).compare(&v(pair[1])),
                -1,
                "{} < {}",
                pair[0],
                pair[1]
            );
        }
        assert!(v("1.0.0-B") < v("1.0.0-a"));
        assert_eq!(v("1.2.3+a"), v("1.2.3+b"));
        assert!(v("2.0.0") > v("1.99.99"));
    }
}
