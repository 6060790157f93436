//! The owner index: for every stored object its uid and the uids it names in
//! `ownerReferences`, kept by the store's writer as it commits (and built
//! once when the store opens), so garbage collection finds an owner's
//! dependents, and whether an owner still exists, without reading the store.

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;

/// What the index needs of an object: its uid and its owners' uids.
#[derive(Deserialize, Default)]
struct Head {
    #[serde(default)]
    metadata: Meta,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default, rename = "ownerReferences")]
    owner_references: Vec<Reference>,
}

#[derive(Deserialize)]
struct Reference {
    #[serde(default)]
    uid: Option<String>,
}

/// Uids and owner references of every live object, by store key.
#[derive(Debug, Default)]
pub struct OwnerIndex {
    /// Owner uid → keys of the objects that name it.
    dependents: HashMap<String, BTreeSet<String>>,
    /// Key → the owner uids it names.
    owners_of: HashMap<String, Vec<String>>,
    /// Uid → key of the object that has it.
    keys: HashMap<String, String>,
    /// Key → its uid.
    uids: HashMap<String, String>,
}

impl OwnerIndex {
    /// Records that `key` now holds `value` (`None`: it was deleted).
    pub fn set(&mut self, key: &str, value: Option<&[u8]>) {
        self.forget(key);
        let Some(value) = value else {
            return;
        };
        let head: Head = serde_json::from_slice(value).unwrap_or_default();
        if let Some(uid) = head.metadata.uid {
            self.keys.insert(uid.clone(), key.to_string());
            self.uids.insert(key.to_string(), uid);
        }
        let owners: Vec<String> = head
            .metadata
            .owner_references
            .into_iter()
            .filter_map(|r| r.uid)
            .collect();
        for owner in &owners {
            self.dependents
                .entry(owner.clone())
                .or_default()
                .insert(key.to_string());
        }
        if !owners.is_empty() {
            self.owners_of.insert(key.to_string(), owners);
        }
    }

    fn forget(&mut self, key: &str) {
        if let Some(uid) = self.uids.remove(key)
            && self.keys.get(&uid).is_some_and(|k| k == key)
        {
            self.keys.remove(&uid);
        }
        for owner in self.owners_of.remove(key).unwrap_or_default() {
            if let Some(keys) = self.dependents.get_mut(&owner) {
                keys.remove(key);
                if keys.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }

    /// The keys of the objects that name `owner`.
    pub fn dependents(&self, owner: &str) -> Vec<String> {
        self.dependents
            .get(owner)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The key of the object whose uid is `uid`.
    pub fn key_of(&self, uid: &str) -> Option<String> {
        self.keys.get(uid).cloned()
    }

    /// Every owner uid some object names, with the keys naming it.
    pub fn owners(&self) -> Vec<(String, Vec<String>)> {
        self.dependents
            .iter()
            .map(|(owner, keys)| (owner.clone(), keys.iter().cloned().collect()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(uid: &str, owners: &[&str]) -> Vec<u8> {
        let refs: Vec<serde_json::Value> = owners
            .iter()
            .map(|o| serde_json::json!({ "uid": o, "name": "x", "kind": "K", "apiVersion": "v1" }))
            .collect();
        serde_json::json!({ "metadata": { "uid": uid, "ownerReferences": refs }, "data": { "big": "x" } })
            .to_string()
            .into_bytes()
    }

    #[test]
    fn dependents_follow_every_write() {
        let mut index = OwnerIndex::default();
        index.set("/a", Some(&object("ua", &[])));
        index.set("/b", Some(&object("ub", &["ua"])));
        index.set("/c", Some(&object("uc", &["ua", "ub"])));
        assert_eq!(index.dependents("ua"), ["/b", "/c"]);
        assert_eq!(index.key_of("ub").as_deref(), Some("/b"));
        // /c lets go of ua; /b is deleted.
        index.set("/c", Some(&object("uc", &["ub"])));
        index.set("/b", None);
        assert!(index.dependents("ua").is_empty());
        assert_eq!(index.dependents("ub"), ["/c"]);
        assert_eq!(index.key_of("ub"), None);
    }
}
