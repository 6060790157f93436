//! Discovery (`apiserver.md` §1.7, §2.1): legacy `/api`, `/apis` and the
//! resource list of each group version, and the aggregated
//! `apidiscovery.k8s.io/v2` documents kubectl 1.33 and
//! `Discovery::run_aggregated` ask for first; both with short names,
//! categories and the status and scale subresources.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::resources::{Resource, VERBS};

const SUBRESOURCE_VERBS: [&str; 3] = ["get", "patch", "update"];

/// The media type of aggregated discovery, which clients ask for in `Accept`.
pub const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery (v2).
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
            && params.contains(&"as=APIGroupDiscoveryList")
    })
}

/// Aggregated `GET /api` (`core`) or `GET /apis`: every group with every
/// version and its resources in one document.
pub fn aggregated(resources: &[Resource], core: bool) -> Value {
    let mut groups: BTreeMap<&str, BTreeMap<&str, Vec<Value>>> = BTreeMap::new();
    for r in resources.iter().filter(|r| r.group.is_empty() == core) {
        groups
            .entry(&r.group)
            .or_default()
            .entry(&r.version)
            .or_default()
            .push(aggregated_resource(r));
    }
    let items: Vec<Value> = groups
        .into_iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .into_iter()
                .map(|(version, resources)| {
                    json!({ "version": version, "resources": resources, "freshness": "Current" })
                })
                .collect();
            let metadata = if core {
                json!({})
            } else {
                json!({ "name": group })
            };
            json!({ "metadata": metadata, "versions": versions })
        })
        .collect();
    json!({ "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items })
}

fn aggregated_resource(r: &Resource) -> Value {
    let kind = json!({ "group": r.group, "version": r.version, "kind": r.kind });
    let mut entry = json!({
        "resource": r.plural, "responseKind": kind,
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular, "verbs": VERBS,
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    let mut subresources = Vec::new();
    if r.status {
        subresources.push(
            json!({ "subresource": "status", "responseKind": kind, "verbs": SUBRESOURCE_VERBS }),
        );
    }
    if r.scale.is_some() {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": { "group": "autoscaling", "version": "v1", "kind": "Scale" },
            "verbs": SUBRESOURCE_VERBS,
        }));
    }
    if !subresources.is_empty() {
        entry["subresources"] = json!(subresources);
    }
    entry
}

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
                "kind": r.kind, "verbs": SUBRESOURCE_VERBS,
            }));
        }
        if r.scale.is_some() {
            list.push(json!({
                "name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": SUBRESOURCE_VERBS,
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

    #[test]
    fn aggregated_discovery_groups_versions_and_subresources() {
        let all = builtins();
        let core = aggregated(&all, true);
        assert_eq!(core["kind"], "APIGroupDiscoveryList");
        let items = core["items"].as_array().expect("items");
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"], json!({}));
        let v1 = &items[0]["versions"][0];
        assert_eq!(v1["version"], "v1");
        let pods = v1["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["resource"] == "pods")
            .expect("pods");
        assert_eq!(
            pods["responseKind"],
            json!({ "group": "", "version": "v1", "kind": "Pod" })
        );
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["subresources"][0]["subresource"], "status");
        let apis = aggregated(&all, false);
        let names: Vec<&str> = apis["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|g| g["metadata"]["name"].as_str())
            .collect();
        assert!(names.contains(&"apps") && !names.contains(&""));
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!wants_aggregated("application/json, */*"));
    }
}
