//! The kube-controller-manager's part a serving cluster needs: Deployments
//! (pods per template hash, Available once enough are ready), Jobs (a pod
//! until one succeeds), PVC binding on the cluster's storage classes,
//! ResourceClaims from a pod's claim templates, and eviction of pods that do
//! not tolerate a node's `NoExecute` taint. Pure.

use serde_json::{Value, json};

use super::world::{
    ClusterKind, World, Write, condition, condition_value, conditions_differ, deleting, name,
    namespace, owner_reference, pod_done, pod_ready, short_hash, uid,
};

const MANAGER: &str = "kube-controller-manager";

/// Everything the controller manager writes this pass.
pub fn step(world: &World<'_>) -> Vec<Write> {
    let mut out = Vec::new();
    for deployment in world.all(ClusterKind::Deployment) {
        deployment_step(world, deployment, &mut out);
    }
    for job in world.all(ClusterKind::Job) {
        job_step(world, job, &mut out);
    }
    for pvc in world.all(ClusterKind::Pvc) {
        pvc_step(world, pvc, &mut out);
    }
    for pod in world.all(ClusterKind::Pod) {
        claims_step(world, pod, &mut out);
        eviction_step(world, pod, &mut out);
    }
    out
}

/// A pod of `owner` from `template`, named `pod_name`.
pub fn pod_from_template(owner: &Value, template: &Value, pod_name: &str, labels: Value) -> Value {
    let mut metadata = json!({
        "name": pod_name,
        "namespace": namespace(owner),
        "labels": template["metadata"]["labels"].clone(),
        "ownerReferences": [owner_reference(owner)],
    });
    if !metadata["labels"].is_object() {
        metadata["labels"] = json!({});
    }
    for (k, v) in labels.as_object().into_iter().flatten() {
        metadata["labels"][k] = v.clone();
    }
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        metadata["annotations"] = json!(a);
    }
    let mut spec = template["spec"].clone();
    if spec["schedulerName"].is_null() {
        spec["schedulerName"] = json!("default-scheduler");
    }
    if spec["restartPolicy"].is_null() {
        spec["restartPolicy"] = json!("Always");
    }
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec })
}

fn replicas(object: &Value) -> u64 {
    object["spec"]["replicas"].as_u64().unwrap_or(1)
}

fn deployment_step(world: &World<'_>, deployment: &Value, out: &mut Vec<Write>) {
    if deleting(deployment) {
        return;
    }
    let template = &deployment["spec"]["template"];
    let hash = short_hash(&template.to_string(), 10);
    let want = replicas(deployment);
    let pods: Vec<&Value> = world
        .pods_of(uid(deployment))
        .filter(|p| !deleting(p))
        .collect();
    let current = |p: &Value| p["metadata"]["labels"]["pod-template-hash"] == hash.as_str();
    // Every pod of the deployment, terminating ones too: a new pod never
    // takes the name of one still being deleted.
    let taken: Vec<&str> = world.pods_of(uid(deployment)).map(name).collect();
    let mut live = pods.iter().filter(|p| current(p)).count() as u64;
    let mut i = 0u64;
    while live < want {
        let pod_name = format!(
            "{}-{hash}-{}",
            name(deployment),
            short_hash(&i.to_string(), 5)
        );
        i += 1;
        if taken.contains(&pod_name.as_str()) {
            continue;
        }
        let pod = pod_from_template(
            deployment,
            template,
            &pod_name,
            json!({ "pod-template-hash": hash }),
        );
        out.push(Write::Apply {
            kind: ClusterKind::Pod,
            object: pod,
            manager: MANAGER,
        });
        live += 1;
    }
    let new_ready = pods.iter().filter(|p| current(p) && pod_ready(p)).count() as u64;
    // Scaling down: the newest-named extra pods of the current template go
    // (unready ones first); old pods go once the new ones serve (a surge,
    // never a gap).
    let mut extra: Vec<&&Value> = pods.iter().filter(|p| current(p)).collect();
    extra.sort_by_key(|p| (pod_ready(p), std::cmp::Reverse(name(p).to_string())));
    let surplus = (extra.len() as u64).saturating_sub(want) as usize;
    for pod in extra.into_iter().take(surplus) {
        out.push(delete_pod(pod));
    }
    for pod in pods.iter().filter(|p| !current(p)) {
        if new_ready >= want {
            out.push(delete_pod(pod));
        }
    }
    let ready = pods.iter().filter(|p| pod_ready(p)).count() as u64;
    let updated = pods.iter().filter(|p| current(p)).count() as u64;
    // maxUnavailable 25% rounded down.
    let available = ready >= want - want / 4;
    let previous = condition(deployment, "Available");
    let mut status = json!({
        "observedGeneration": deployment["metadata"]["generation"],
        "replicas": pods.len(),
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [
            if available {
                condition_value(previous, "Available", true, "MinimumReplicasAvailable", "Deployment has minimum availability.", world.timestamp)
            } else {
                condition_value(previous, "Available", false, "MinimumReplicasUnavailable", "Deployment does not have minimum availability.", world.timestamp)
            },
        ],
    });
    if ready == 0 {
        status["availableReplicas"] = json!(0);
    }
    push_status(
        ClusterKind::Deployment,
        deployment,
        status,
        &[
            "replicas",
            "readyReplicas",
            "updatedReplicas",
            "observedGeneration",
        ],
        out,
    );
}

/// A status write when conditions or any of `fields` changed.
pub fn push_status(
    kind: ClusterKind,
    object: &Value,
    status: Value,
    fields: &[&str],
    out: &mut Vec<Write>,
) {
    let changed = conditions_differ(object, &status)
        || fields.iter().any(|f| object["status"][*f] != status[*f]);
    if changed {
        out.push(Write::Status {
            kind,
            object: object.clone(),
            status,
            manager: MANAGER,
        });
    }
}

/// Deletes `pod`.
pub fn delete_pod(pod: &Value) -> Write {
    Write::Delete {
        kind: ClusterKind::Pod,
        namespace: namespace(pod).into(),
        name: name(pod).into(),
    }
}

fn job_step(world: &World<'_>, job: &Value, out: &mut Vec<Write>) {
    let finished = |type_| condition(job, type_).is_some_and(|c| c["status"] == "True");
    if deleting(job) || finished("Complete") || finished("Failed") {
        return;
    }
    let pods: Vec<&Value> = world.pods_of(uid(job)).collect();
    if past_backoff_limit(job, &pods) {
        fail_job(world, job, &pods, out);
        return;
    }
    let succeeded = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Succeeded")
        .count();
    let failed = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Failed")
        .count();
    let active = pods.iter().filter(|p| !pod_done(p)).count();
    if succeeded == 0 && active == 0 {
        let attempt = failed;
        let pod_name = format!("{}-{}", name(job), short_hash(&attempt.to_string(), 5));
        let mut pod = pod_from_template(
            job,
            &job["spec"]["template"],
            &pod_name,
            json!({ "job-name": name(job) }),
        );
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!(name(job));
        out.push(Write::Apply {
            kind: ClusterKind::Pod,
            object: pod,
            manager: MANAGER,
        });
        out.push(job_event(
            job,
            "SuccessfulCreate",
            format!("Created pod: {pod_name}"),
        ));
    }
    let mut status = json!({ "active": active, "succeeded": succeeded, "failed": failed, "startTime": job["status"]["startTime"].as_str().unwrap_or(world.timestamp) });
    if succeeded > 0 {
        mark_hydrated(world, job, out);
        out.push(job_event(job, "Completed", "Job completed".into()));
        status["conditions"] = json!([
            condition_value(
                None,
                "SuccessCriteriaMet",
                true,
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                world.timestamp
            ),
            condition_value(
                None,
                "Complete",
                true,
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                world.timestamp
            ),
        ]);
        status["completionTime"] = json!(world.timestamp);
    }
    push_status(
        ClusterKind::Job,
        job,
        status,
        &["active", "succeeded", "failed"],
        out,
    );
}

/// Whether `job` has retried more than `spec.backoffLimit` (default 6)
/// allows, as the Job controller counts: failed pods, and with
/// `restartPolicy: OnFailure` the restarts of its pods' containers too.
fn past_backoff_limit(job: &Value, pods: &[&Value]) -> bool {
    let limit = job["spec"]["backoffLimit"].as_u64().unwrap_or(6);
    let failed = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Failed")
        .count() as u64;
    if job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure" {
        let restarts: u64 = pods
            .iter()
            .filter(|p| !pod_done(p))
            .flat_map(|p| {
                p["status"]["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
            })
            .filter_map(|c| c["restartCount"].as_u64())
            .sum();
        restarts > 0 && failed + restarts >= limit
    } else {
        failed > limit
    }
}

/// Marks `job` Failed (`BackoffLimitExceeded`) and deletes its running
/// pods, as the Job controller does once retries are spent.
fn fail_job(world: &World<'_>, job: &Value, pods: &[&Value], out: &mut Vec<Write>) {
    const MESSAGE: &str = "Job has reached the specified backoff limit";
    out.extend(pods.iter().filter(|p| !pod_done(p)).map(|p| delete_pod(p)));
    out.push(Write::Event {
        object: job.clone(),
        type_: "Warning",
        reason: "BackoffLimitExceeded".into(),
        message: MESSAGE.into(),
        source: "job-controller",
    });
    let failed = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Failed")
        .count();
    let status = json!({
        "active": 0,
        "failed": failed.max(1),
        "startTime": job["status"]["startTime"].as_str().unwrap_or(world.timestamp),
        "conditions": [
            condition_value(None, "FailureTarget", true, "BackoffLimitExceeded", MESSAGE, world.timestamp),
            condition_value(None, "Failed", true, "BackoffLimitExceeded", MESSAGE, world.timestamp),
        ],
    });
    push_status(ClusterKind::Job, job, status, &["active", "failed"], out);
}

/// An event of the Job controller about `job`.
fn job_event(job: &Value, reason: &str, message: String) -> Write {
    Write::Event {
        object: job.clone(),
        type_: "Normal",
        reason: reason.into(),
        message,
        source: "job-controller",
    }
}

/// What a volume holds outlives the Job that wrote it: a succeeded Job
/// marks each claim it mounted as holding data (the simulated storage's
/// record of its contents).
fn mark_hydrated(world: &World<'_>, job: &Value, out: &mut Vec<Write>) {
    let claims = job["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str());
    for claim in claims {
        let Some(pvc) = world.get(ClusterKind::Pvc, namespace(job), claim) else {
            continue;
        };
        if pvc["metadata"]["annotations"][super::HYDRATED] == "true" {
            continue;
        }
        out.push(Write::Patch {
            kind: ClusterKind::Pvc,
            namespace: namespace(job).to_string(),
            name: claim.to_string(),
            patch: json!({ "metadata": { "uid": uid(pvc), "annotations": { super::HYDRATED: "true" } } }),
        });
    }
}

fn pvc_step(world: &World<'_>, pvc: &Value, out: &mut Vec<Write>) {
    if pvc["status"]["phase"] == "Bound" {
        return;
    }
    let class = pvc["spec"]["storageClassName"].as_str().unwrap_or_default();
    if world.get(ClusterKind::StorageClass, "", class).is_none() {
        out.push(Write::Event {
            object: pvc.clone(),
            type_: "Warning",
            reason: "ProvisioningFailed".into(),
            message: format!("storageclass.storage.k8s.io \"{class}\" not found"),
            source: "persistentvolume-controller",
        });
        return;
    }
    let status = json!({
        "phase": "Bound",
        "accessModes": pvc["spec"]["accessModes"],
        "capacity": { "storage": pvc["spec"]["resources"]["requests"]["storage"] },
    });
    out.push(Write::Status {
        kind: ClusterKind::Pvc,
        object: pvc.clone(),
        status,
        manager: MANAGER,
    });
    out.push(Write::Event {
        object: pvc.clone(),
        type_: "Normal",
        reason: "ProvisioningSucceeded".into(),
        message: format!(
            "Successfully provisioned volume pvc-{} using {class}",
            uid(pvc)
        ),
        source: "persistentvolume-controller",
    });
}

/// The ResourceClaim a pod's claim `claim` (from a template) gets.
pub fn claim_name(pod: &Value, claim: &str) -> String {
    let base = format!("{}-{claim}", name(pod));
    let base = &base[..base.len().min(57)];
    format!("{base}-{}", short_hash(uid(pod), 5))
}

fn claims_step(world: &World<'_>, pod: &Value, out: &mut Vec<Write>) {
    if pod_done(pod) || deleting(pod) {
        return;
    }
    let mut statuses = Vec::new();
    for claim in pod["spec"]["resourceClaims"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let Some(template_name) = claim["resourceClaimTemplateName"].as_str() else {
            continue;
        };
        let claim_ref = claim["name"].as_str().unwrap_or_default();
        let generated = claim_name(pod, claim_ref);
        statuses.push(json!({ "name": claim_ref, "resourceClaimName": generated }));
        if world
            .get(ClusterKind::Claim, namespace(pod), &generated)
            .is_some()
        {
            continue;
        }
        let Some(template) = world.get(ClusterKind::ClaimTemplate, namespace(pod), template_name)
        else {
            continue;
        };
        out.push(Write::Apply {
            kind: ClusterKind::Claim,
            object: json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {
                    "name": generated, "namespace": namespace(pod),
                    "annotations": { "resource.kubernetes.io/pod-claim-name": claim_ref },
                    "ownerReferences": [owner_reference(&json!({ "apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"] }))],
                },
                "spec": template["spec"]["spec"],
            }),
            manager: MANAGER,
        });
    }
    if !statuses.is_empty() && pod["status"]["resourceClaimStatuses"] != json!(statuses) {
        out.push(Write::Status {
            kind: ClusterKind::Pod,
            object: pod.clone(),
            status: json!({ "resourceClaimStatuses": statuses }),
            manager: MANAGER,
        });
    }
}

/// Whether `pod` tolerates `taint`.
pub fn tolerates(pod: &Value, taint: &Value) -> bool {
    pod["spec"]["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| {
            let key_ok =
                t["key"].is_null() && t["operator"] == "Exists" || t["key"] == taint["key"];
            let value_ok = t["operator"] == "Exists"
                || t["value"] == taint["value"]
                || (t["value"].is_null() && taint["value"].is_null());
            let effect_ok = t["effect"].is_null() || t["effect"] == taint["effect"];
            key_ok && value_ok && effect_ok
        })
}

fn eviction_step(world: &World<'_>, pod: &Value, out: &mut Vec<Write>) {
    let Some(node_name) = pod["spec"]["nodeName"].as_str() else {
        return;
    };
    if deleting(pod) || pod_done(pod) {
        return;
    }
    let Some(node) = world.get(ClusterKind::Node, "", node_name) else {
        return;
    };
    let untolerated = node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["effect"] == "NoExecute" && !tolerates(pod, t));
    if let Some(taint) = untolerated {
        out.push(Write::Event {
            object: pod.clone(),
            type_: "Normal",
            reason: "TaintManagerEviction".into(),
            message: format!(
                "Marking for deletion Pod {}/{} (taint {}={}:NoExecute)",
                namespace(pod),
                name(pod),
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default()
            ),
            source: "taint-eviction-controller",
        });
        out.push(delete_pod(pod));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::world::Snapshot;
    use crate::informer::Change;

    fn world_of(objects: &[(ClusterKind, Value)]) -> Snapshot {
        let mut s = Snapshot::default();
        for (kind, o) in objects {
            s.change(Change::Apply(*kind, o.clone()));
        }
        s
    }

    fn deployment() -> Value {
        json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "epp", "namespace": "ml", "uid": "d1", "generation": 1 },
            "spec": { "replicas": 2, "template": { "metadata": { "labels": { "app": "epp" } }, "spec": { "containers": [{ "name": "c", "image": "epp" }] } } } })
    }

    fn events_of(writes: &[Write]) -> Vec<String> {
        writes
            .iter()
            .filter_map(|w| match w {
                Write::Event {
                    reason, message, ..
                } => Some(format!("{reason}: {message}")),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_job_says_it_created_its_pod_and_that_it_completed() {
        let job = json!({ "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": "hydrate", "namespace": "ml", "uid": "j1" },
            "spec": { "template": { "spec": { "restartPolicy": "Never", "containers": [{ "name": "c", "image": "hf" }] } } } });
        let snapshot = world_of(&[(ClusterKind::Job, job.clone())]);
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        let created = events_of(&step(&world));
        assert_eq!(created.len(), 1, "{created:?}");
        assert!(created[0].starts_with("SuccessfulCreate: Created pod: hydrate-"));
        let done = json!({ "metadata": { "name": "hydrate-x", "namespace": "ml",
                "ownerReferences": [{ "uid": "j1", "controller": true }] },
            "spec": {}, "status": { "phase": "Succeeded" } });
        let snapshot = world_of(&[(ClusterKind::Job, job), (ClusterKind::Pod, done)]);
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        assert_eq!(events_of(&step(&world)), ["Completed: Job completed"]);
    }

    #[test]
    fn a_job_whose_container_keeps_failing_fails_at_its_backoff_limit() {
        let job = json!({ "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": "hydrate", "namespace": "ml", "uid": "j1" },
            "spec": { "backoffLimit": 3, "template": { "spec": { "restartPolicy": "OnFailure",
                "containers": [{ "name": "c", "image": "hf" }] } } } });
        let crashing = |restarts: u64| {
            json!({ "metadata": { "name": "hydrate-x", "namespace": "ml",
                    "ownerReferences": [{ "uid": "j1", "controller": true }] },
                "spec": {}, "status": { "phase": "Running",
                    "containerStatuses": [{ "name": "c", "restartCount": restarts }] } })
        };
        let step_with = |restarts| {
            let snapshot = world_of(&[
                (ClusterKind::Job, job.clone()),
                (ClusterKind::Pod, crashing(restarts)),
            ]);
            let world = World {
                snapshot: &snapshot,
                timestamp: "t",
            };
            step(&world)
        };
        assert!(events_of(&step_with(2)).is_empty(), "retries left");
        let writes = step_with(3);
        assert_eq!(
            events_of(&writes),
            ["BackoffLimitExceeded: Job has reached the specified backoff limit"]
        );
        assert!(writes.iter().any(
            |w| matches!(w, Write::Delete { kind: ClusterKind::Pod, name, .. } if name == "hydrate-x")
        ));
        let failed = writes.iter().find_map(|w| match w {
            Write::Status { status, .. } => Some(status["conditions"][1].clone()),
            _ => None,
        });
        assert_eq!(failed.expect("a status")["type"], "Failed");
    }

    #[test]
    fn a_deployment_gets_its_pods_then_is_available_once_they_are_ready() {
        let snapshot = world_of(&[(ClusterKind::Deployment, deployment())]);
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        let writes = step(&world);
        let pods: Vec<&Value> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Apply {
                    kind: ClusterKind::Pod,
                    object,
                    ..
                } => Some(object),
                _ => None,
            })
            .collect();
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[0]["metadata"]["ownerReferences"][0]["uid"], "d1");
        assert_eq!(pods[0]["metadata"]["labels"]["app"], "epp");
        assert_eq!(pods[0]["spec"]["schedulerName"], "default-scheduler");
        let status = writes
            .iter()
            .find_map(|w| match w {
                Write::Status { status, .. } => Some(status),
                _ => None,
            })
            .expect("status");
        assert_eq!(status["conditions"][0]["status"], "False");

        let mut ready: Vec<(ClusterKind, Value)> = vec![(ClusterKind::Deployment, deployment())];
        for p in pods {
            let mut p = p.clone();
            p["status"] = json!({ "conditions": [{ "type": "Ready", "status": "True" }] });
            ready.push((ClusterKind::Pod, p));
        }
        let snapshot = world_of(&ready);
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        let writes = step(&world);
        assert!(
            !writes.iter().any(|w| matches!(w, Write::Apply { .. })),
            "nothing more to create"
        );
        let status = writes
            .iter()
            .find_map(|w| match w {
                Write::Status { status, .. } => Some(status),
                _ => None,
            })
            .expect("status");
        assert_eq!(
            status["conditions"][0]["reason"],
            "MinimumReplicasAvailable"
        );
        assert_eq!(status["readyReplicas"], 2);
    }

    #[test]
    fn a_pod_that_does_not_tolerate_a_no_execute_taint_is_evicted() {
        let node = json!({ "metadata": { "name": "n1" }, "spec": { "taints": [{ "key": "drain", "value": "now", "effect": "NoExecute" }] } });
        let pod = json!({ "metadata": { "name": "p", "namespace": "ml" }, "spec": { "nodeName": "n1",
            "tolerations": [{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }] } });
        let snapshot = world_of(&[(ClusterKind::Node, node), (ClusterKind::Pod, pod)]);
        let writes = step(&World {
            snapshot: &snapshot,
            timestamp: "t",
        });
        assert!(writes.iter().any(
            |w| matches!(w, Write::Delete { kind: ClusterKind::Pod, name, .. } if name == "p")
        ));
    }

    #[test]
    fn a_claim_is_made_from_the_pods_template_and_the_pod_points_at_it() {
        let template = json!({ "metadata": { "name": "t", "namespace": "ml" }, "spec": { "spec": { "devices": { "requests": [{ "name": "gpu", "exactly": { "deviceClassName": "gpu.nvidia.com", "count": 1 } }] } } } });
        let pod = json!({ "metadata": { "name": "p", "namespace": "ml", "uid": "u1" }, "spec": { "resourceClaims": [{ "name": "devices", "resourceClaimTemplateName": "t" }] } });
        let snapshot = world_of(&[
            (ClusterKind::ClaimTemplate, template),
            (ClusterKind::Pod, pod.clone()),
        ]);
        let writes = step(&World {
            snapshot: &snapshot,
            timestamp: "t",
        });
        let claim = writes
            .iter()
            .find_map(|w| match w {
                Write::Apply {
                    kind: ClusterKind::Claim,
                    object,
                    ..
                } => Some(object),
                _ => None,
            })
            .expect("a claim");
        assert_eq!(claim["metadata"]["name"], claim_name(&pod, "devices"));
        assert_eq!(
            claim["spec"]["devices"]["requests"][0]["exactly"]["count"],
            1
        );
        assert!(writes.iter().any(|w| matches!(w, Write::Status { kind: ClusterKind::Pod, status, .. } if status["resourceClaimStatuses"][0]["name"] == "devices")));
    }
}
