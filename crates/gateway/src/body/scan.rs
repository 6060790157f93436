//! Reading a few top-level fields of a JSON request body without building
//! the JSON value: the gateway needs only `model` to route a `/v1/…`
//! request, and the prompt that follows it may be hundreds of kilobytes.
//!
//! The scanner walks the top-level object key by key; a value it does not
//! want is skipped by finding its end (strings with `memchr`, containers by
//! depth), never parsed. It reads every top-level key: a wanted field given
//! twice, or spelled with escapes (`"mod\u0065l"`), is refused, because
//! the engines (Python's `json`) keep the *last* of duplicate keys and
//! unescape names, so the gateway would authorise one model and the engine
//! serve another. It checks structure only as far as it reads: the engine
//! validates the rest.

use std::borrow::Cow;

/// Why a body could not be scanned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// Not a JSON object, or broken where the scanner read it.
    #[error("the request body is not a JSON object: {reason} at byte {at}")]
    Malformed {
        /// What was wrong.
        reason: &'static str,
        /// Byte offset.
        at: usize,
    },
    /// A wanted field appears twice, or with escapes in its name.
    #[error(
        "the request body names `{field}` more than once (or spells it with escapes) at byte {at}"
    )]
    Ambiguous {
        /// The field.
        field: String,
        /// Byte offset of the second spelling.
        at: usize,
    },
}

/// The raw bytes of each wanted top-level field's value (`None` when
/// absent), in the order of `wanted`.
pub fn top_level_fields<'a, const N: usize>(
    body: &'a [u8],
    wanted: [&str; N],
) -> Result<[Option<&'a [u8]>; N], ScanError> {
    let mut found: [Option<&'a [u8]>; N] = [None; N];
    let mut s = Scanner { body, at: 0 };
    s.skip_ws();
    s.expect(b'{', "expected '{'")?;
    s.skip_ws();
    if s.peek() == Some(b'}') {
        return s.finish(found);
    }
    loop {
        s.skip_ws();
        let key = s.string()?;
        s.skip_ws();
        s.expect(b':', "expected ':' after a key")?;
        s.skip_ws();
        let start = s.at;
        s.skip_value()?;
        let value = &body[start..s.at];
        let name = &key[1..key.len() - 1];
        let escaped = memchr::memchr(b'\\', name).is_some();
        let index = if escaped {
            // Unescaped, a key may still name a wanted field: refuse it.
            as_str(key).and_then(|k| wanted.iter().position(|w| *w == k))
        } else {
            wanted.iter().position(|w| w.as_bytes() == name)
        };
        if let Some(i) = index {
            if escaped || found[i].is_some() {
                return Err(ScanError::Ambiguous {
                    field: wanted[i].to_string(),
                    at: start,
                });
            }
            found[i] = Some(value);
        }
        s.skip_ws();
        match s.peek() {
            Some(b',') => s.at += 1,
            Some(b'}') => return s.finish(found),
            _ => return Err(s.error("expected ',' or '}' after a value")),
        }
    }
}

/// A raw JSON string value, unescaped; `None` if it is not a string.
pub fn as_str(raw: &[u8]) -> Option<Cow<'_, str>> {
    if raw.len() < 2 || raw[0] != b'"' {
        return None;
    }
    let inner = &raw[1..raw.len() - 1];
    if memchr::memchr(b'\\', inner).is_none() {
        return std::str::from_utf8(inner).ok().map(Cow::Borrowed);
    }
    serde_json::from_slice::<String>(raw).ok().map(Cow::Owned)
}

struct Scanner<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    /// At the object's closing brace: what was found, if nothing but
    /// whitespace follows it (an engine's JSON parser would refuse the
    /// rest, or read something else than what was routed on).
    fn finish<T>(&mut self, found: T) -> Result<T, ScanError> {
        self.at += 1;
        self.skip_ws();
        if self.at < self.body.len() {
            return Err(self.error("unexpected data after the JSON object"));
        }
        Ok(found)
    }

    fn error(&self, reason: &'static str) -> ScanError {
        ScanError::Malformed {
            reason,
            at: self.at,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.body.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), ScanError> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// A string, quotes included.
    fn string(&mut self) -> Result<&'a [u8], ScanError> {
        let start = self.at;
        self.expect(b'"', "expected a string")?;
        loop {
            let rest = &self.body[self.at..];
            let Some(i) = memchr::memchr2(b'"', b'\\', rest) else {
                return Err(self.error("unterminated string"));
            };
            self.at += i + 1;
            if rest[i] == b'"' {
                return Ok(&self.body[start..self.at]);
            }
            // A backslash escapes the next byte (enough to find the end).
            self.at += 1;
        }
    }

    fn skip_value(&mut self) -> Result<(), ScanError> {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'{' | b'[') => self.skip_container(),
            Some(b't' | b'f' | b'n' | b'-' | b'0'..=b'9') => {
                while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
                {
                    self.at += 1;
                }
                Ok(())
            }
            _ => Err(self.error("expected a value")),
        }
    }

    /// Skips an object or array by depth, stepping over strings whole.
    fn skip_container(&mut self) -> Result<(), ScanError> {
        let mut depth = 0usize;
        loop {
            let rest = &self.body[self.at..];
            let Some(i) = rest
                .iter()
                .position(|b| matches!(b, b'"' | b'{' | b'[' | b'}' | b']'))
            else {
                return Err(self.error("unterminated object or array"));
            };
            self.at += i;
            match rest[i] {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                _ => {
                    depth -= 1;
                    self.at += 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(body: &str) -> Result<Option<String>, ScanError> {
        let [m] = top_level_fields(body.as_bytes(), ["model"])?;
        Ok(m.and_then(as_str).map(Cow::into_owned))
    }

    #[test]
    fn finds_the_model_wherever_it_is() {
        assert_eq!(model(r#"{"model":"a"}"#), Ok(Some("a".into())));
        assert_eq!(
            model(
                r#" { "messages": [{"role":"user","content":"say \"model\": {x}"}], "model" : "b", "stream": true }"#
            ),
            Ok(Some("b".into()))
        );
        assert_eq!(
            model(r#"{"nested":{"model":"inner"},"model":"outer"}"#),
            Ok(Some("outer".into()))
        );
        assert_eq!(
            model(r#"{"model":"esc\u0061ped\\"}"#),
            Ok(Some("escaped\\".into()))
        );
        assert_eq!(
            model(r#"{"n":-1.5e3,"t":true,"z":null,"model":"c"}"#),
            Ok(Some("c".into()))
        );
    }

    #[test]
    fn absent_or_not_a_string_is_none() {
        assert_eq!(model("{}"), Ok(None));
        assert_eq!(model(r#"{"prompt":"x"}"#), Ok(None));
        assert_eq!(model(r#"{"model":7}"#), Ok(None));
    }

    #[test]
    fn reads_to_the_end_so_garbage_after_the_model_is_refused() {
        assert!(model(r#"{"model":"a", garbage"#).is_err());
    }

    /// On main a body with garbage after its JSON object was served.
    #[test]
    fn data_after_the_object_is_refused_and_whitespace_is_not() {
        assert!(model(r#"{"model":"a"} trailing"#).is_err());
        assert!(model(r#"{"model":"a"}{"model":"b"}"#).is_err());
        assert!(model("{} x").is_err());
        assert_eq!(model("{\"model\":\"a\"} \r\n\t"), Ok(Some("a".into())));
    }

    #[test]
    fn a_model_given_twice_or_spelled_with_escapes_is_refused() {
        // Python's json keeps the last duplicate and unescapes names: the
        // engine would serve "expensive" while the gateway authorised "cheap".
        let twice = model(r#"{"model":"cheap","messages":[],"model":"expensive"}"#);
        assert!(matches!(twice, Err(ScanError::Ambiguous { ref field, .. }) if field == "model"));
        let escaped = model(r#"{"mod\u0065l":"expensive","model":"cheap"}"#);
        assert!(matches!(escaped, Err(ScanError::Ambiguous { .. })));
        let alone = model(r#"{"messages":[],"\u006dodel":"x"}"#);
        assert!(matches!(alone, Err(ScanError::Ambiguous { .. })));
        // Escapes in other keys, and `model` inside values, are fine.
        assert_eq!(
            model(r#"{"me\u0073sages":[{"model":"x"}],"model":"a"}"#),
            Ok(Some("a".into()))
        );
    }

    #[test]
    fn malformed_bodies_name_the_byte() {
        assert!(matches!(
            model("[1,2]"),
            Err(ScanError::Malformed { at: 0, .. })
        ));
        assert!(model(r#"{"model" "a"}"#).is_err());
        assert!(model(r#"{"messages":[{"a":"b"}"#).is_err());
        assert!(model(r#"{"prompt":"unterminated"#).is_err());
        assert!(model("").is_err());
        assert_eq!(
            model("{\"a\":1 \"model\":\"x\"}").map_err(|e| e.to_string()),
            Err("the request body is not a JSON object: expected ',' or '}' after a value at byte 7".into())
        );
    }

    #[test]
    fn several_fields_at_once() {
        let body = br#"{"model":"m","stream":true,"max_tokens":12,"messages":[]}"#;
        let [model, stream, max] =
            top_level_fields(body, ["model", "stream", "max_tokens"]).expect("scan");
        assert_eq!(model, Some(&br#""m""#[..]));
        assert_eq!(stream, Some(&b"true"[..]));
        assert_eq!(max, Some(&b"12"[..]));
    }
}
