//! Legacy discovery (`apiserver.md` §1.7, §2.1): `/api`, `/apis`, and the
//! resource list of each group version, with short names, categories and
//! subresources, as kubectl and `kube::Discovery` read them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::resources::Resource;

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `GET /api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "" }],
    })
}

/// `GET /apis`: every non-core group, in name order.
pub fn groups(resources: &[Resource]) -> Value {
    let mut versions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        let list = versions.entry(&r.group).or_default();
        if !list.contains(&r.version.as_str()) {
            list.push(&r.version);
        }
    }
    let groups: Vec<Value> = versions
        .into_iter()
        .map(|(group, versions)| {
            let entries: Vec<Value> = versions
                .iter()
                .map(|v| json!({ "groupVersion": format!("{group}/{v}"), "version": v }))
                .collect();
            json!({ "name": group, "versions": entries, "preferredVersion": entries[0] })
        })
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /api/v1` or `GET /apis/GROUP/VERSION`; `None` when nothing is served there.
pub fn resource_list(resources: &[Resource], group: &str, version: &str) -> Option<Value> {
    let mut list = Vec::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut entry = json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        list.push(entry);
        if r.status {
            list.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    (!list.is_empty()).then(|| json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    #[test]
    fn discovery_lists_groups_resources_and_subresources() {
        let all = builtins();
        let groups = groups(&all);
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .filter_map(|g| g["name"].as_str())
            .collect();
        assert!(names.contains(&"apps") && names.contains(&"apiextensions.k8s.io"));
        assert!(names.windows(2).all(|w| w[0] < w[1]));
        let core = resource_list(&all, "", "v1").expect("core");
        let resources = core["resources"].as_array().expect("resources");
        let cm = resources
            .iter()
            .find(|r| r["name"] == "configmaps")
            .expect("configmaps");
        assert_eq!(cm["shortNames"], json!(["cm"]));
        assert!(resources.iter().any(|r| r["name"] == "pods/status"));
        assert_eq!(core["groupVersion"], "v1");
        assert!(resource_list(&all, "apps", "v2").is_none());
    }
}
