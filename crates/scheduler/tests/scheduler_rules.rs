//! The placement rules of `behavior.md` §1.6–§1.12, one test per rule.

mod common;

use common::*;
use modelplane_api::types::{Role, TaintEffect, TolerationOperator};
use modelplane_scheduler::model::{ReplicaMember, Toleration};
use modelplane_scheduler::{Hold, Options, Reason, schedule};

fn one_gpu(name: &str, replicas: u32) -> modelplane_scheduler::Deployment {
    deployment(
        name,
        replicas,
        vec![engine("main", 1, vec![standalone(1, "20Gi")])],
    )
}

#[test]
fn replicas_spread_one_per_cluster_before_packing() {
    let c = clusters(vec![
        cluster("b").pool("p", 4, vec![gpu(1, "80Gi")]),
        cluster("a").pool("p", 4, vec![gpu(1, "80Gi")]),
    ]);
    let s = run(&one_gpu("m", 3), &c, &[]);
    assert_eq!(places(&s), ["a/0@p", "a/1@p", "b/0@p"]);
}

#[test]
fn output_is_sorted_by_cluster_name_in_code_point_order() {
    let c = clusters(vec![
        cluster("cluster-9").pool("p", 1, vec![gpu(1, "80Gi")]),
        cluster("cluster-10").pool("p", 1, vec![gpu(1, "80Gi")]),
    ]);
    let s = run(&one_gpu("m", 2), &c, &[]);
    assert_eq!(places(&s), ["cluster-10/0@p", "cluster-9/0@p"]);
}

#[test]
fn no_candidate_cluster_holds_instead_of_emptying() {
    let d = one_gpu("m", 1);
    assert!(matches!(
        schedule(&d, &[], &[], Options::default()),
        Err(Hold::NoClusters { .. })
    ));
    let mut d = one_gpu("m", 1);
    d.cluster_selector.insert("region".into(), "eu".into());
    let c = clusters(vec![cluster("a").label("region", "us").pool(
        "p",
        1,
        vec![gpu(1, "80Gi")],
    )]);
    match schedule(&d, &c, &[], Options::default()) {
        Err(Hold::NoClusters { explanations }) => assert_eq!(
            explanations[0].reason,
            Reason::SelectorMismatch {
                label: "region".into(),
                want: "eu".into(),
                have: Some("us".into())
            }
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_cel_holds_with_the_expression_and_position() {
    let d = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![member(
                Role::Standalone,
                1,
                vec![request("gpu", 1, &["device.count == 8"])],
            )],
        )],
    );
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(1, "80Gi")])]);
    match schedule(&d, &c, &[], Options::default()) {
        Err(Hold::InvalidSelector(e)) => {
            assert_eq!(e.expression, "device.count == 8");
            assert_eq!((e.error.line, e.error.column), (1, 8));
            assert_eq!(e.error.message, "undefined field 'count'");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn clusters_not_ready_or_without_gateway_get_no_new_replicas_but_keep_theirs() {
    let c = clusters(vec![
        cluster("a").not_ready().pool("p", 2, vec![gpu(1, "80Gi")]),
        cluster("b").no_gateway().pool("p", 2, vec![gpu(1, "80Gi")]),
        cluster("c").pool("p", 2, vec![gpu(1, "80Gi")]),
    ]);
    let existing = [replica("m", "m-1", "b", 0, &[("main", "p")])];
    let s = run(&one_gpu("m", 3), &c, &existing);
    assert_eq!(places(&s), ["b/0@p", "c/0@p", "c/1@p"]);
    assert_eq!(s.placements[0].gateway_address, "");
}

#[test]
fn a_pool_of_zero_nodes_hosts_nothing() {
    let c = clusters(vec![cluster("a").pool("p", 0, vec![gpu(1, "80Gi")])]);
    assert!(run(&one_gpu("m", 1), &c, &[]).placements.is_empty());
}

#[test]
fn a_device_count_of_zero_satisfies_no_request() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(0, "80Gi")])]);
    assert!(run(&one_gpu("m", 1), &c, &[]).placements.is_empty());
}

#[test]
fn a_request_larger_than_the_device_count_matches_nowhere_even_summed_over_pools() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(4, "80Gi")]).pool(
        "q",
        1,
        vec![gpu(4, "80Gi")],
    )]);
    let d = deployment("m", 1, vec![engine("main", 1, vec![standalone(8, "20Gi")])]);
    assert!(run(&d, &c, &[]).placements.is_empty());
}

#[test]
fn two_requests_on_one_device_must_fit_its_count_jointly() {
    let two = |a: i64, b: i64| {
        deployment(
            "m",
            1,
            vec![engine(
                "main",
                1,
                vec![member(
                    Role::Standalone,
                    1,
                    vec![request("a", a, &["true"]), request("b", b, &["true"])],
                )],
            )],
        )
    };
    let eight = clusters(vec![cluster("a").pool("p", 1, vec![gpu(8, "80Gi")])]);
    assert_eq!(run(&two(4, 4), &eight, &[]).placements.len(), 1);
    assert!(run(&two(5, 5), &eight, &[]).placements.is_empty());
    let one = clusters(vec![cluster("a").pool("p", 1, vec![gpu(1, "80Gi")])]);
    assert!(run(&two(1, 1), &one, &[]).placements.is_empty());
}

#[test]
fn only_synthetic_matches_leave_the_engine_unplaceable() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![nic(8)])]);
    let d = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![member(
                Role::Standalone,
                1,
                vec![request("nic", 1, &["true"])],
            )],
        )],
    );
    let s = run(&d, &c, &[]);
    assert!(s.placements.is_empty());
    assert_eq!(s.explanations[0].reason, Reason::NoClaimableDevice);
}

#[test]
fn a_synthetic_only_member_rides_claimless_with_a_claiming_member() {
    let c = clusters(vec![cluster("a").pool(
        "p",
        2,
        vec![gpu(8, "80Gi"), nic(8)],
    )]);
    let d = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![
                member(
                    Role::Leader,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("40Gi")])],
                ),
                member(
                    Role::Worker,
                    1,
                    vec![request("nic", 1, &[r#"device.driver == "nic.nvidia.com""#])],
                ),
            ],
        )],
    );
    let s = run(&d, &c, &[]);
    assert_eq!(places(&s), ["a/0@p"]);
    assert!(
        s.placements[0].engines[0].members[1]
            .device_requests
            .is_empty()
    );
}

#[test]
fn a_pool_where_a_claiming_member_would_be_stranded_is_rejected() {
    // The Worker claims GPUs on pool "gpus" but only the NIC matches on "nics".
    let any = r#"device.driver == "gpu.nvidia.com" || device.driver == "nic.nvidia.com""#;
    let c = clusters(vec![cluster("a").pool("nics", 4, vec![nic(8)]).pool(
        "gpus",
        4,
        vec![gpu(8, "80Gi")],
    )]);
    let d = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![
                member(
                    Role::Leader,
                    1,
                    vec![request("gpu", 1, &[&mem_at_least("40Gi")])],
                ),
                member(Role::Worker, 1, vec![request("dev", 1, &[any])]),
            ],
        )],
    );
    let s = run(&d, &c, &[]);
    assert_eq!(places(&s), ["a/0@gpus"]);
}

#[test]
fn a_member_without_node_selector_rides_on_the_engine_pool_for_free() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(8, "80Gi")])]);
    let d = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![
                member(
                    Role::Leader,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("40Gi")])],
                ),
                member(Role::Worker, 3, vec![]),
            ],
        )],
    );
    assert_eq!(places(&run(&d, &c, &[])), ["a/0@p"]);
}

#[test]
fn an_engine_is_never_split_across_pools() {
    let c = clusters(vec![
        cluster("a")
            .pool("big", 4, vec![gpu(8, "240Gi")])
            .pool("small", 4, vec![gpu(8, "80Gi")]),
    ]);
    let d = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![
                member(
                    Role::Leader,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("200Gi")])],
                ),
                member(
                    Role::Worker,
                    1,
                    vec![request(
                        "gpu",
                        8,
                        &[
                            r#"device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("200Gi"))"#,
                        ],
                    )],
                ),
            ],
        )],
    );
    assert!(run(&d, &c, &[]).placements.is_empty());
}

#[test]
fn a_gang_needs_all_its_nodes_in_one_pool() {
    let gang = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![
                member(
                    Role::Leader,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("40Gi")])],
                ),
                member(
                    Role::Worker,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("40Gi")])],
                ),
            ],
        )],
    );
    let c = clusters(vec![
        cluster("a").pool("p", 1, vec![gpu(8, "80Gi")]),
        cluster("b").pool("p", 2, vec![gpu(8, "80Gi")]),
    ]);
    assert_eq!(places(&run(&gang, &c, &[])), ["b/0@p"]);
}

#[test]
fn copies_multiply_the_nodes_an_engine_needs() {
    let c = clusters(vec![cluster("a").pool("p", 2, vec![gpu(1, "80Gi")])]);
    let d = deployment("m", 1, vec![engine("main", 3, vec![standalone(1, "20Gi")])]);
    assert!(run(&d, &c, &[]).placements.is_empty());
}

#[test]
fn two_engines_of_a_replica_compete_for_one_pool() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(1, "80Gi")])]);
    let d = deployment(
        "m",
        1,
        vec![
            engine("one", 1, vec![standalone(1, "20Gi")]),
            engine("two", 1, vec![standalone(1, "20Gi")]),
        ],
    );
    assert!(run(&d, &c, &[]).placements.is_empty());
}

#[test]
fn other_deployments_consume_capacity_at_their_stamped_cost() {
    let c = clusters(vec![
        cluster("a").pool("p", 2, vec![gpu(1, "80Gi")]),
        cluster("b").pool("p", 1, vec![gpu(1, "80Gi")]),
    ]);
    let mut claimless = replica("other", "o-3", "b", 0, &[("main", "p")]);
    claimless.engines[0].members[0].claims = false;
    let existing = [
        replica("other", "o-1", "a", 0, &[("main", "p")]),
        replica("other", "o-2", "a", 1, &[("main", "p")]),
        claimless,
        replica("other", "o-4", "b", 1, &[("main", "gone")]),
    ];
    // a is full; b's claimless and unpublished-pool pins charge nothing.
    assert_eq!(places(&run(&one_gpu("m", 2), &c, &existing)), ["b/0@p"]);
}

#[test]
fn a_replica_of_the_same_name_in_another_namespace_is_not_ours_but_is_charged() {
    let c = clusters(vec![
        cluster("a").pool("p", 1, vec![gpu(1, "80Gi")]),
        cluster("b").pool("p", 1, vec![gpu(1, "80Gi")]),
    ]);
    let mut theirs = replica("m", "m-a", "a", 0, &[("main", "p")]);
    theirs.namespace = "other-team".into();
    let s = run(&one_gpu("m", 1), &c, &[theirs]);
    assert_eq!(places(&s), ["b/0@p"]);
    assert!(!s.placements[0].retained);
}

#[test]
fn retained_replicas_keep_their_place_and_are_not_charged_twice() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(1, "80Gi")])]);
    let s = run(
        &one_gpu("m", 1),
        &c,
        &[replica("m", "m-x", "a", 0, &[("main", "p")])],
    );
    assert_eq!(places(&s), ["a/0@p"]);
    assert!(s.placements[0].retained);
}

#[test]
fn a_retained_replica_is_charged_as_it_is_restamped() {
    // Stamped with 1 pod; the deployment now has 2 copies. Retained and
    // restamped, it will run 2 pods: charged 2, so nothing is promised the
    // cluster cannot place (the original charges the stamped 1:
    // docs/decisions.md).
    let c = clusters(vec![cluster("a").pool("p", 3, vec![gpu(1, "80Gi")])]);
    let d = deployment("m", 2, vec![engine("main", 2, vec![standalone(1, "20Gi")])]);
    let s = run(&d, &c, &[replica("m", "m-x", "a", 0, &[("main", "p")])]);
    assert_eq!(places(&s), ["a/0@p"], "3 nodes - 2 restamped: 1 free");
    let c = clusters(vec![cluster("a").pool("p", 4, vec![gpu(1, "80Gi")])]);
    let s = run(&d, &c, &[replica("m", "m-x", "a", 0, &[("main", "p")])]);
    assert_eq!(places(&s), ["a/0@p", "a/1@p"], "4 nodes - 2: room for 2");
}

#[test]
fn a_dropped_replica_frees_its_nodes_for_the_refill() {
    // Pinned to a pool the cluster no longer publishes: re-placed on "q".
    let c = clusters(vec![cluster("a").pool("q", 1, vec![gpu(1, "80Gi")])]);
    let s = run(
        &one_gpu("m", 1),
        &c,
        &[replica("m", "m-x", "a", 0, &[("main", "p")])],
    );
    assert_eq!(places(&s), ["a/0@q"]);
    assert!(!s.placements[0].retained);
}

#[test]
fn of_two_replicas_with_one_identity_the_first_by_name_is_kept() {
    let c = clusters(vec![cluster("a").pool("p", 2, vec![gpu(1, "80Gi")]).pool(
        "q",
        2,
        vec![gpu(1, "80Gi")],
    )]);
    let s = run(
        &one_gpu("m", 1),
        &c,
        &[
            replica("m", "m-b", "a", 0, &[("main", "q")]),
            replica("m", "m-a", "a", 0, &[("main", "p")]),
        ],
    );
    assert_eq!(places(&s), ["a/0@p"]);
}

#[test]
fn a_replica_pinned_to_an_unknown_cluster_is_replaced() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(1, "80Gi")])]);
    let s = run(
        &one_gpu("m", 1),
        &c,
        &[replica("m", "m-x", "gone", 0, &[("main", "p")])],
    );
    assert_eq!(places(&s), ["a/0@p"]);
    assert!(!s.placements[0].retained);
}

#[test]
fn a_member_shape_change_replaces_the_replica() {
    let c = clusters(vec![cluster("a").pool("p", 4, vec![gpu(8, "80Gi")])]);
    let d = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![
                member(
                    Role::Leader,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("40Gi")])],
                ),
                member(
                    Role::Worker,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("40Gi")])],
                ),
            ],
        )],
    );
    let s = run(&d, &c, &[replica("m", "m-x", "a", 0, &[("main", "p")])]);
    assert_eq!(s.placements.len(), 1);
    assert!(!s.placements[0].retained);
}

#[test]
fn a_node_selector_edit_the_pinned_pool_no_longer_satisfies_replaces() {
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(1, "40Gi")]).pool(
        "q",
        1,
        vec![gpu(1, "80Gi")],
    )]);
    let d = deployment("m", 1, vec![engine("main", 1, vec![standalone(1, "60Gi")])]);
    let s = run(&d, &c, &[replica("m", "m-x", "a", 0, &[("main", "p")])]);
    assert_eq!(places(&s), ["a/0@q"]);
}

#[test]
fn without_fill_only_retained_replicas_are_returned() {
    let c = clusters(vec![cluster("a").pool("p", 4, vec![gpu(1, "80Gi")])]);
    let options = Options {
        fill: false,
        explain: modelplane_scheduler::Explain::Never,
    };
    let s = schedule(
        &one_gpu("m", 3),
        &c,
        &[replica("m", "m-x", "a", 0, &[("main", "p")])],
        options,
    )
    .expect("schedule");
    assert_eq!(places(&s), ["a/0@p"]);
}

#[test]
fn new_replicas_take_the_lowest_free_index() {
    let c = clusters(vec![cluster("a").pool("p", 4, vec![gpu(1, "80Gi")])]);
    let s = run(
        &one_gpu("m", 3),
        &c,
        &[
            replica("m", "m-x", "a", 0, &[("main", "p")]),
            replica("m", "m-y", "a", 2, &[("main", "p")]),
        ],
    );
    assert_eq!(places(&s), ["a/0@p", "a/1@p", "a/2@p"]);
}

#[test]
fn scale_down_drops_the_highest_index_on_the_most_loaded_later_cluster() {
    let c = clusters(vec![
        cluster("a").pool("p", 4, vec![gpu(1, "80Gi")]),
        cluster("b").pool("p", 4, vec![gpu(1, "80Gi")]),
    ]);
    let existing = [
        replica("m", "m-1", "a", 0, &[("main", "p")]),
        replica("m", "m-2", "a", 1, &[("main", "p")]),
        replica("m", "m-3", "b", 0, &[("main", "p")]),
        replica("m", "m-4", "b", 1, &[("main", "p")]),
    ];
    assert_eq!(
        places(&run(&one_gpu("m", 3), &c, &existing)),
        ["a/0@p", "a/1@p", "b/0@p"]
    );
    let s = run(&one_gpu("m", 1), &c, &existing);
    assert_eq!(places(&s), ["a/0@p"]);
    let gone: Vec<(String, i64)> = s
        .dropped
        .iter()
        .map(|d| (d.cluster.clone(), d.index))
        .collect();
    // Loads (2, 2) drop b/1; (2, 1) drop a/1; (1, 1) drop b/0.
    assert_eq!(
        gone,
        [
            ("b".to_string(), 1),
            ("a".to_string(), 1),
            ("b".to_string(), 0)
        ]
    );
    assert!(
        s.dropped
            .iter()
            .all(|d| d.reason == modelplane_scheduler::DropReason::ScaledDown)
    );
}

#[test]
fn no_execute_evicts_and_no_schedule_only_blocks_new_replicas() {
    let c = clusters(vec![
        cluster("a")
            .taint("drain", TaintEffect::NoExecute)
            .pool("p", 2, vec![gpu(1, "80Gi")]),
        cluster("b")
            .taint("full", TaintEffect::NoSchedule)
            .pool("p", 2, vec![gpu(1, "80Gi")]),
        cluster("c").pool("p", 2, vec![gpu(1, "80Gi")]),
    ]);
    let existing = [
        replica("m", "m-1", "a", 0, &[("main", "p")]),
        replica("m", "m-2", "b", 0, &[("main", "p")]),
    ];
    assert_eq!(
        places(&run(&one_gpu("m", 2), &c, &existing)),
        ["b/0@p", "c/0@p"]
    );
    let mut tolerant = one_gpu("m", 2);
    tolerant.tolerations.push(Toleration {
        key: "drain".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    });
    assert_eq!(places(&run(&tolerant, &c, &existing)), ["a/0@p", "b/0@p"]);
}

#[test]
fn explanations_say_why_each_cluster_and_pool_was_passed_over() {
    let c = clusters(vec![
        cluster("full").pool("p", 1, vec![gpu(1, "80Gi")]),
        cluster("small").pool("p", 4, vec![gpu(1, "16Gi")]),
        cluster("down")
            .not_ready()
            .pool("p", 4, vec![gpu(1, "80Gi")]),
        cluster("ok").pool("p", 1, vec![gpu(1, "80Gi")]),
    ]);
    let existing = [replica("other", "o-1", "full", 0, &[("main", "p")])];
    let s = run(&one_gpu("m", 2), &c, &existing);
    assert_eq!(places(&s), ["ok/0@p"]);
    let reasons: Vec<(String, Option<String>, Reason)> = s
        .explanations
        .iter()
        .map(|e| (e.cluster.clone(), e.pool.clone(), e.reason.clone()))
        .collect();
    assert!(
        reasons.contains(&("down".into(), None, Reason::NotReady)),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|(c, p, r)| c == "full"
            && p.as_deref() == Some("p")
            && matches!(r,
        Reason::InsufficientDevices { needed, free, used_by, .. }
            if needed == &[1] && free.is_empty() && used_by[0].deployment == "ml/other")),
        "{reasons:#?}"
    );
    assert!(reasons.iter().any(|(c, _, r)| c == "small" && matches!(r,
        Reason::DeviceUnmatched { request, closest: Some(closest), .. }
            if request == "gpu" && closest.device == "gpu"
            && matches!(&closest.why, modelplane_scheduler::DeviceMiss::SelectorFalse { selector: 0, .. }))), "{reasons:#?}");
}

#[test]
fn claims_are_stamped_only_for_dra_devices() {
    let _ = ReplicaMember {
        role: Role::Worker,
        pods: 2,
        pool: "p".into(),
        claims: false,
        requests: Vec::new(),
    };
    let c = clusters(vec![cluster("a").pool("p", 1, vec![gpu(2, "80Gi")])]);
    let s = run(
        &deployment("m", 1, vec![engine("main", 1, vec![standalone(2, "20Gi")])]),
        &c,
        &[],
    );
    let req = &s.placements[0].engines[0].members[0].device_requests[0];
    assert_eq!(
        (req.name.as_str(), req.device_class_name.as_str(), req.count),
        ("gpu", GPU, 2)
    );
    assert_eq!(req.selectors, [mem_at_least("20Gi")]);
}

#[test]
fn replicas_pack_by_device_so_six_tp4_share_four_8_gpu_nodes() {
    let c = clusters(vec![cluster("a").pool("p", 4, vec![gpu(8, "80Gi")])]);
    let tp4 = deployment("m", 6, vec![engine("main", 1, vec![standalone(4, "20Gi")])]);
    let s = run(&tp4, &c, &[]);
    assert_eq!(s.placements.len(), 6, "{:?}", places(&s));
    // Two more TP4 fill the last node; a TP8 finds no node with 8 free.
    let mut existing: Vec<modelplane_scheduler::ExistingReplica> = s
        .placements
        .iter()
        .map(|p| modelplane_scheduler::ExistingReplica::from_placement(&tp4, p))
        .collect();
    let more = deployment(
        "more",
        2,
        vec![engine("main", 1, vec![standalone(4, "20Gi")])],
    );
    let s = run(&more, &c, &existing);
    assert_eq!(s.placements.len(), 2);
    existing.extend(
        s.placements
            .iter()
            .map(|p| modelplane_scheduler::ExistingReplica::from_placement(&more, p)),
    );
    let existing: Vec<modelplane_scheduler::ExistingReplica> =
        existing.into_iter().take(7).collect();
    let tp8 = deployment(
        "big",
        1,
        vec![engine("main", 1, vec![standalone(8, "20Gi")])],
    );
    let s = run(&tp8, &c, &existing);
    assert!(s.placements.is_empty(), "7 TP4 leave 4 GPUs, on one node");
    let said: Vec<String> = s.explanations.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "a/p (main): no room for 8 gpu on one node; gpu free: 4 on 1 node; used by ml/m (24), ml/more (4)"
        ]
    );
}

#[test]
fn a_gang_whose_pods_need_whole_nodes_takes_whole_nodes() {
    let c = clusters(vec![cluster("a").pool("p", 3, vec![gpu(8, "80Gi")])]);
    let gang = deployment(
        "g",
        2,
        vec![engine(
            "main",
            1,
            vec![
                member(
                    Role::Leader,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("20Gi")])],
                ),
                member(
                    Role::Worker,
                    1,
                    vec![request("gpu", 8, &[&mem_at_least("20Gi")])],
                ),
            ],
        )],
    );
    assert_eq!(
        run(&gang, &c, &[]).placements.len(),
        1,
        "two nodes a gang, three nodes"
    );
}

#[test]
fn a_selector_reading_an_attribute_the_devices_lack_says_which_they_have() {
    let c = clusters(vec![cluster("a").pool("p", 2, vec![gpu(8, "80Gi")])]);
    let wants_product = deployment(
        "m",
        1,
        vec![engine(
            "main",
            1,
            vec![member(
                Role::Standalone,
                1,
                vec![request(
                    "gpu",
                    1,
                    &[r#"device.attributes["gpu.nvidia.com"].productName == "H100""#],
                )],
            )],
        )],
    );
    let s = run(&wants_product, &c, &[]);
    assert!(s.placements.is_empty());
    let said: Vec<String> = s
        .explanations
        .iter()
        .map(|e| e.reason.to_string())
        .collect();
    assert_eq!(
        said,
        [
            "member 0 (Standalone) request gpu matches no device; closest gpu: selector 0 fails (the device has no attribute gpu.nvidia.com/productName; it has gpu.nvidia.com/architecture): device.attributes[\"gpu.nvidia.com\"].productName == \"H100\""
        ],
        "{:#?}",
        s.explanations
    );
}
