//! Which kinds the stored CRDs serve, kept in step with each CRD's writes
//! without reading every CRD again: a write's answer can arrive after a
//! later write's (or a deletion's), so each CRD keeps the revision it was
//! last seen at, a deleted one a tombstone, and what was written at an
//! older revision than what is known changes nothing.

use std::collections::BTreeMap;

use crate::resources::Resource;
use crate::store::Revision;

/// The kinds each CRD serves, by CRD name.
#[derive(Default)]
pub(crate) struct CrdKinds {
    /// The revision the stored CRDs were last all read at: a CRD that
    /// listing did not hold was gone by then.
    listed_at: Revision,
    /// Each CRD's revision, and its kinds (none once deleted).
    crds: BTreeMap<String, (Revision, Option<Vec<Resource>>)>,
}

impl CrdKinds {
    /// Every stored CRD, read at revision `at`: replaces all that is known.
    pub(crate) fn listed(
        &mut self,
        at: Revision,
        crds: impl IntoIterator<Item = (String, Revision, Vec<Resource>)>,
    ) {
        self.listed_at = at;
        self.crds = crds
            .into_iter()
            .map(|(name, revision, kinds)| (name, (revision, Some(kinds))))
            .collect();
    }

    /// CRD `name` was written at `revision`; whether that changed what is
    /// served (not when something newer of it is known).
    pub(crate) fn stored(
        &mut self,
        name: String,
        revision: Revision,
        kinds: Vec<Resource>,
    ) -> bool {
        if revision <= self.known_at(&name) {
            return false;
        }
        self.crds.insert(name, (revision, Some(kinds)));
        true
    }

    /// CRD `name` was deleted at `revision`; whether that changed what is
    /// served.
    pub(crate) fn deleted(&mut self, name: &str, revision: Revision) -> bool {
        if revision <= self.known_at(name) {
            return false;
        }
        self.crds.insert(name.to_string(), (revision, None));
        true
    }

    /// The revision of what is known of CRD `name`.
    fn known_at(&self, name: &str) -> Revision {
        self.crds
            .get(name)
            .map_or(self.listed_at, |(revision, _)| *revision)
    }

    /// The kinds served, in CRD name order.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = &Resource> {
        self.crds
            .values()
            .filter_map(|(_, kinds)| kinds.as_ref())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(plural: &str) -> Vec<Resource> {
        let mut resource = crate::resources::builtins()
            .into_iter()
            .next()
            .expect("a built-in");
        resource.plural = plural.to_string();
        vec![resource]
    }

    fn served(crds: &CrdKinds) -> Vec<String> {
        crds.kinds().map(|r| r.plural.clone()).collect()
    }

    #[test]
    fn a_late_answer_of_an_older_write_changes_nothing() {
        let mut crds = CrdKinds::default();
        assert!(crds.stored("a".into(), 5, kind("v5")));
        assert!(!crds.stored("a".into(), 4, kind("v4")));
        assert_eq!(served(&crds), ["v5"]);
        // Deleted at 7; an update at 6 told afterwards does not bring it back.
        assert!(crds.deleted("a", 7));
        assert!(!crds.stored("a".into(), 6, kind("v6")));
        assert!(served(&crds).is_empty());
        // Created again.
        assert!(crds.stored("a".into(), 8, kind("v8")));
        assert_eq!(served(&crds), ["v8"]);
    }

    #[test]
    fn what_a_listing_did_not_hold_was_gone_by_then() {
        let mut crds = CrdKinds::default();
        crds.listed(10, [("b".to_string(), 3, kind("b"))]);
        // `a` was written at 9 and deleted before the listing at 10.
        assert!(!crds.stored("a".into(), 9, kind("a")));
        assert!(!crds.deleted("a", 10));
        assert!(!crds.stored("b".into(), 2, kind("old b")));
        assert_eq!(served(&crds), ["b"]);
        assert!(crds.stored("c".into(), 11, kind("c")));
        assert_eq!(served(&crds), ["b", "c"]);
    }
}
