//! How objects are stored and read back: the stored form (`apiVersion`,
//! `kind` and `metadata` first, no resourceVersion: the store's revision is
//! the truth), a stored object read as served (its revision stamped, parsed
//! or spliced into the bytes), and base64 for `data` and protobuf bytes.

use serde_json::{Value, json};

use crate::store::{Revision, Stored};

/// A stored object as served: its bytes parsed, its revision stamped.
pub(crate) fn read_stored(stored: &Stored) -> Result<Value, serde_json::Error> {
    let mut object: Value = serde_json::from_slice(&stored.value)?;
    set_resource_version(&mut object, stored.revision);
    Ok(object)
}

/// Stamps the store's revision on an object read or written.
pub fn set_resource_version(object: &mut Value, revision: i64) {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    if let Some(metadata) = object["metadata"].as_object_mut() {
        metadata.insert("resourceVersion".into(), json!(revision.to_string()));
    }
}

/// The stored form: `apiVersion`, `kind` and `metadata` first (so lists can
/// stamp the resourceVersion without parsing, see [`stamp`]), no
/// resourceVersion (the store's revision is the truth).
pub(crate) fn encode(object: &Value) -> Vec<u8> {
    match object {
        // Written in that order as they are, without copying the object.
        // A map of JSON values always serializes; were it ever to fail, the
        // object as it is (but for its resourceVersion, which `stamp` adds)
        // beats storing nothing.
        Value::Object(map) => serde_json::to_vec(&StoredForm(map)).unwrap_or_else(|_| {
            let mut object = object.clone();
            if let Some(metadata) = object["metadata"].as_object_mut() {
                metadata.remove("resourceVersion");
            }
            object.to_string().into()
        }),
        _ => b"{}".to_vec(),
    }
}

/// The keys [`encode`] writes first, in this order.
const STORED_FIRST: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// An object as [`encode`] writes it.
struct StoredForm<'a>(&'a serde_json::Map<String, Value>);

/// A metadata map without its resourceVersion.
struct MetadataStored<'a>(&'a serde_json::Map<String, Value>);

impl serde::Serialize for StoredForm<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut out = serializer.serialize_map(None)?;
        for key in STORED_FIRST {
            match self.0.get(key) {
                Some(Value::Object(meta)) if key == "metadata" => {
                    out.serialize_entry(key, &MetadataStored(meta))?;
                }
                Some(value) => out.serialize_entry(key, value)?,
                None => {}
            }
        }
        for (key, value) in self.0 {
            if !STORED_FIRST.contains(&key.as_str()) {
                out.serialize_entry(key, value)?;
            }
        }
        out.end()
    }
}

impl serde::Serialize for MetadataStored<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut out = serializer.serialize_map(None)?;
        for (key, value) in self.0 {
            if key != "resourceVersion" {
                out.serialize_entry(key, value)?;
            }
        }
        out.end()
    }
}

/// The stored bytes with `"resourceVersion":"REV"` spliced into the
/// top-level metadata, when the bytes have the shape [`encode`] writes:
/// `{"apiVersion":"…","kind":"…","metadata":{…`. `None` otherwise.
pub(crate) fn stamp(raw: &[u8], revision: Revision) -> Option<Vec<u8>> {
    const AT: &[u8] = b",\"metadata\":{";
    let at = raw.windows(AT.len()).position(|w| w == AT)?;
    // Exactly the two string fields before it: eight quotes, none escaped.
    let head = &raw[..at];
    if !head.starts_with(b"{\"apiVersion\":")
        || head.iter().filter(|b| **b == b'"').count() != 8
        || head.contains(&b'\\')
    {
        return None;
    }
    let split = at + AT.len();
    let mut out = Vec::with_capacity(raw.len() + 32);
    out.extend_from_slice(&raw[..split]);
    out.extend_from_slice(format!("\"resourceVersion\":\"{revision}\"").as_bytes());
    if raw.get(split) != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(&raw[split..]);
    Some(out)
}

/// Standard base64 (the kubeconfig's `certificate-authority-data`).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamping_splices_the_revision_into_top_level_metadata() {
        let object = json!({ "data": { "x": "\"metadata\":{" }, "metadata": { "name": "a" }, "kind": "ConfigMap", "apiVersion": "v1" });
        let raw = encode(&object);
        let stamped: Value =
            serde_json::from_slice(&stamp(&raw, 42).expect("encoded shape")).expect("JSON");
        let mut expected = object.clone();
        expected["metadata"]["resourceVersion"] = json!("42");
        assert_eq!(stamped, expected);
        let empty_meta = encode(&json!({ "apiVersion": "v1", "kind": "X", "metadata": {} }));
        let stamped: Value =
            serde_json::from_slice(&stamp(&empty_meta, 7).expect("shape")).expect("JSON");
        assert_eq!(stamped["metadata"], json!({ "resourceVersion": "7" }));
        assert!(
            stamp(br#"{"spec":{"metadata":{}},"metadata":{}}"#, 1).is_none(),
            "other shapes are parsed instead"
        );
    }

    #[test]
    fn the_stored_form_puts_type_and_metadata_first_without_the_resource_version() {
        let object = json!({ "data": { "b": "1", "a": "2" },
            "metadata": { "resourceVersion": "5", "name": "c", "labels": { "z": "1" } },
            "kind": "ConfigMap", "apiVersion": "v1" });
        assert_eq!(
            String::from_utf8(encode(&object)).expect("UTF-8"),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"z":"1"}},"data":{"b":"1","a":"2"}}"#
        );
        assert_eq!(encode(&json!([1])), b"{}");
    }

    #[test]
    fn base64_matches_rfc_4648() {
        for (raw, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), encoded);
        }
    }
}
