//! Integration tests of the fabric driven by synthetic traffic: routing covers every pair without
//! loops, packets are conserved, deadlock avoidance holds beyond saturation, the watchdog catches
//! a real deadlock, zero-load latency matches the analytical value, results are deterministic,
//! and the generalized fat tree survives a failed down link that a plain fat tree cannot.

use hpcnet_fabric::net::Network;
use hpcnet_fabric::topology::{NodeId, PortIdx, RouterId};
use hpcnet_workloads::synthetic::{run_synthetic, RunOptions, RunReport};
use hpcnet_workloads::Scenario;

const LINK: &str = r#"
[link]
lanes = 4
lane_rate = "25 Gb/s"
encoding = "64b/66b"
latency = "10 ns"
"#;

fn scenario(topology: &str, router: &str, routing: &str, traffic: &str, extra: &str) -> String {
    format!(
        "seed = 7\n[topology]\n{topology}\n{LINK}\n[router]\n{router}\n[routing]\n{routing}\n[traffic]\n{traffic}\n[sim]\nwarmup = \"1 us\"\nmeasure = \"5 us\"\n{extra}\n"
    )
}

fn load(text: &str, overrides: &[&str]) -> Scenario {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Scenario::from_str_named(text, "test.toml", "test", &o).unwrap_or_else(|e| panic!("scenario: {e}"))
}

fn run(sc: &Scenario) -> RunReport {
    run_synthetic(sc, RunOptions::default()).unwrap_or_else(|e| panic!("run: {e}"))
}

fn torus(k: &str, routing: &str, vcs: u32) -> String {
    scenario(
        &format!("kind = \"torus\"\nk = {k}"),
        &format!("vcs = {vcs}\nprivate_credits = 16\nlatency = \"20 ns\""),
        routing,
        "pattern = \"uniform\"\nload = 0.3",
        "",
    )
}

/// All the (topology, routing) pairs the fabric supports, as small scenarios.
fn catalogue() -> Vec<(&'static str, String)> {
    let r = "vcs = 4\nprivate_credits = 16\nshared_credits = 16\nlatency = \"20 ns\"";
    let t = "pattern = \"uniform\"\nload = 0.3";
    // Valiant and UGAL: one VC per hop of local–global–local–global–local.
    let r5 = "vcs = 5\nprivate_credits = 16\nshared_credits = 16\nlatency = \"20 ns\"";
    vec![
        ("torus dor bubble", torus("[4, 4, 4]", "algorithm = \"dimension_order\"\ndeadlock = \"bubble\"", 2)),
        ("torus dor dateline", torus("[5, 4]", "algorithm = \"dimension_order\"\ndeadlock = \"dateline\"", 2)),
        ("torus adaptive bubble", torus("[4, 4]", "algorithm = \"minimal_adaptive\"\ndeadlock = \"bubble\"", 3)),
        ("torus adaptive dateline", torus("[4, 3]", "algorithm = \"minimal_adaptive\"\ndeadlock = \"dateline\"", 3)),
        ("torus source", torus("[4, 4]", "algorithm = \"source\"", 2)),
        ("mesh dor", scenario("kind = \"mesh\"\nk = [3, 5]", r, "algorithm = \"dimension_order\"", t, "")),
        ("hypercube", scenario("kind = \"hypercube\"\nn = 5", r, "algorithm = \"dimension_order\"", t, "")),
        ("fat tree", scenario("kind = \"fat_tree\"\nk = 3\nn = 3", r, "algorithm = \"up_down\"", t, "")),
        (
            "fat tree adaptive",
            scenario("kind = \"fat_tree\"\nk = 4\nn = 2", r, "algorithm = \"up_down\"\nselection = \"adaptive\"", t, ""),
        ),
        (
            "leaf spine",
            scenario("kind = \"leaf_spine\"\nleaves = 6\nspines = 3\nnodes_per_leaf = 5\nlinks_per_spine = 2", r, "algorithm = \"up_down\"", t, ""),
        ),
        (
            "generalized fat tree",
            scenario(
                "kind = \"generalized_fat_tree\"\nplanes = 2\nleaves = 6\nspines = 4\nnodes_per_leaf = 4\nsibling_links = 2\nradix = 12",
                r,
                "algorithm = \"table\"\nselection = \"adaptive\"",
                t,
                "",
            ),
        ),
        ("dragonfly", scenario("kind = \"dragonfly\"\na = 3\np = 2\nh = 1", r, "algorithm = \"minimal\"", t, "")),
        ("dragonfly source", scenario("kind = \"dragonfly\"\na = 3\np = 1\nh = 2", r, "algorithm = \"source\"", t, "")),
        ("dragonfly valiant", scenario("kind = \"dragonfly\"\na = 3\np = 2\nh = 1", r5, "algorithm = \"valiant\"", t, "")),
        (
            "dragonfly ugal",
            scenario("kind = \"dragonfly\"\na = 4\np = 1\nh = 2", r5, "algorithm = \"ugal\"\nthreshold = 8", t, ""),
        ),
    ]
}

#[test]
fn every_topology_routes_every_pair_loop_free() {
    for (name, text) in catalogue() {
        let sc = load(&text, &[]);
        let net = Network::new(sc.topology.clone(), sc.fabric.clone()).expect(name);
        let n = net.topo.nodes.len() as u32;
        for rail in 0..net.rails() {
            for s in 0..n {
                for d in 0..n {
                    if s == d {
                        continue;
                    }
                    let path = net
                        .routing
                        .trace(&net.topo, NodeId(s), NodeId(d), rail, 0)
                        .unwrap_or_else(|e| panic!("{name}: {s}->{d}: {e}"));
                    // Loop-free: no (router, port) used twice.
                    let mut hops: Vec<_> = path.iter().map(|(r, p, _)| (*r, *p)).collect();
                    let len = hops.len();
                    hops.sort_unstable();
                    hops.dedup();
                    assert_eq!(hops.len(), len, "{name}: loop on {s}->{d}: {path:?}");
                    // VCs stay in range.
                    assert!(
                        path.iter().all(|(_, _, vc)| (*vc as u32) < sc.fabric.router.vcs as u32),
                        "{name}: {path:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_topology_conserves_packets() {
    for (name, text) in catalogue() {
        let rep = run(&load(&text, &[]));
        assert!(rep.deadlock.is_none(), "{name}: {:?}", rep.deadlock);
        assert!(rep.drained, "{name}");
        assert!(rep.conservation_ok, "{name}");
        assert!(
            rep.packets_injected > 100,
            "{name}: only {} packets",
            rep.packets_injected
        );
        assert_eq!(
            rep.packets_injected,
            rep.packets_delivered + rep.packets_dropped,
            "{name}"
        );
        assert_eq!(rep.packets_dropped, 0, "{name}");
        assert_eq!(rep.packets_generated, rep.packets_injected, "{name}");
        assert_eq!(rep.measured_packets, rep.measured_delivered, "{name}");
    }
}

#[test]
fn tori_do_not_deadlock_at_and_beyond_saturation() {
    for routing in [
        "algorithm = \"dimension_order\"\ndeadlock = \"bubble\"",
        "algorithm = \"dimension_order\"\ndeadlock = \"dateline\"",
        "algorithm = \"minimal_adaptive\"\ndeadlock = \"bubble\"",
    ] {
        for k in ["[8, 8]", "[4, 4, 4]"] {
            let sc = load(
                &torus(k, routing, 3),
                &["traffic.load=1.0", "router.private_credits=10"],
            );
            let rep = run(&sc);
            assert!(rep.deadlock.is_none(), "{routing} {k}: {:?}", rep.deadlock);
            assert!(rep.drained && rep.conservation_ok, "{routing} {k}");
            let bound = rep.channel_load_bound.as_ref().expect("bound").saturation_bound;
            // Saturated: accepted well below offered, at a plausible fraction of the bound.
            assert!(
                rep.accepted_load < 0.95 * rep.offered_load,
                "{routing} {k}: not saturated"
            );
            let ratio = rep.accepted_load / bound;
            assert!(ratio > 0.3 && ratio <= 1.0, "{routing} {k}: accepted/bound = {ratio}");
        }
    }
}

#[test]
fn nicevt_torus_with_bubble_routing_survives_saturation_at_8x8x8() {
    // The NICEVT M3 machine (8×8×8, dimension order + bubble, request and response classes of
    // one VC each) at full offered load with tornado and uniform traffic: no deadlock, every
    // packet delivered after the drain, and saturated (accepted below offered).
    for pattern in ["uniform", "tornado"] {
        let sc = load(
            include_str!("../../../scenarios/nicevt-m3.toml"),
            &[
                "traffic.load=1.0",
                &format!("traffic.pattern=\"{pattern}\""),
                "sim.warmup=\"1 us\"",
                "sim.measure=\"3 us\"",
            ],
        );
        let rep = run(&sc);
        assert!(rep.deadlock.is_none(), "{pattern}: {:?}", rep.deadlock);
        assert!(rep.drained && rep.conservation_ok, "{pattern}");
        assert!(rep.accepted_load < 0.95 * rep.offered_load, "{pattern}: not saturated");
    }
}

#[test]
fn bubble_routing_with_mixed_packet_sizes_does_not_deadlock() {
    // Packets of 5, 4 and 1 credits (64-B credits, 16 per VC) at full load. Counted by their
    // own size, the free room of a ring can split into 4 credits per buffer, which no 5-credit
    // head can use: the tornado run with seed 3 deadlocked that way. Each packet now takes a
    // maximum-size slot, so every run drains.
    for pattern in ["tornado", "uniform"] {
        for seed in 1..=4 {
            let sc = load(
                include_str!("../../../scenarios/torus-8x8.toml"),
                &[
                    "traffic.load=1.0",
                    &format!("traffic.pattern=\"{pattern}\""),
                    r#"traffic.size={ sizes = ["256 B", "192 B", "8 B"], weights = [0.4, 0.3, 0.3] }"#,
                    &format!("seed={seed}"),
                ],
            );
            let rep = run(&sc);
            assert!(rep.deadlock.is_none(), "{pattern} seed {seed}: {:?}", rep.deadlock);
            assert!(rep.drained && rep.conservation_ok, "{pattern} seed {seed}");
            assert_eq!(rep.measured_packets, rep.measured_delivered, "{pattern} seed {seed}");
        }
    }
}

#[test]
fn watchdog_reports_a_real_deadlock() {
    // Dimension order on a torus without bubble or dateline, tiny buffers, full load: the rings
    // fill and deadlock. The watchdog must stop the run and name blocked channels.
    let sc = load(
        &torus("[8, 8]", "algorithm = \"dimension_order\"\ndeadlock = \"none\"", 1),
        &[
            "traffic.load=1.0",
            "router.private_credits=5",
            "traffic.pattern=\"tornado\"",
            "faults.watchdog=\"2 us\"",
        ],
    );
    let rep = run(&sc);
    let d = rep.deadlock.as_ref().expect("deadlock detected");
    assert!(d.in_flight > 0);
    assert!(!d.blocked.is_empty());
    // Every blocked router channel really lacks credits at the output its head requested (an
    // output with room would have served one of its requests within the watchdog time).
    for b in d.blocked.iter().filter(|b| b.source_node.is_none()) {
        assert!(
            b.out_port < PortIdx(5),
            "2-D torus router: 4 ring ports + 1 node port: {b:?}"
        );
        assert!(b.credits_needed > b.credits_free, "{b:?}");
    }
    assert!(!rep.drained);
    // The same configuration with bubble flow control completes.
    let ok = run(&load(
        &torus("[8, 8]", "algorithm = \"dimension_order\"\ndeadlock = \"bubble\"", 1),
        &[
            "traffic.load=1.0",
            "router.private_credits=10",
            "traffic.pattern=\"tornado\"",
        ],
    ));
    assert!(ok.deadlock.is_none() && ok.drained);
}

#[test]
fn zero_load_latency_matches_the_analytical_value() {
    for (name, text) in catalogue() {
        let sc = load(&text, &["traffic.load=0.005", "sim.measure=\"40 us\""]);
        let rep = run(&sc);
        let (net, zero) = (rep.network_latency_ns.unwrap(), rep.zero_load_latency_ns.unwrap());
        let rel = (net - zero).abs() / zero;
        assert!(rel < 0.01, "{name}: simulated {net} ns vs analytical {zero} ns");
    }
}

#[test]
fn analytical_zero_load_latency_by_hand() {
    // 4x4 torus, neighbour traffic: every packet crosses 2 routers and 3 links.
    // 272 B at 25 Gb/s x 4 x 64/66 = 96.97 Gb/s -> 22.44 ns; latency = 3 x 10 + 2 x 20 + 22.44 ns.
    let sc = load(
        &torus("[4, 4]", "algorithm = \"dimension_order\"", 2),
        &[
            "traffic.load=0.01",
            "traffic.pattern=\"nearest_neighbor\"",
            "sim.measure=\"20 us\"",
        ],
    );
    let rep = run(&sc);
    let ser = 272.0 * 8.0 / (100e9 * 64.0 / 66.0) * 1e9;
    let expect = 3.0 * 10.0 + 2.0 * 20.0 + ser;
    assert!((rep.mean_hops.unwrap() - 2.0).abs() < 1e-9);
    let net = rep.network_latency_ns.unwrap();
    assert!((net - expect).abs() / expect < 0.01, "{net} vs {expect}");
}

#[test]
fn store_and_forward_pays_serialisation_at_every_hop() {
    let vct = run(&load(
        &torus("[4, 4]", "algorithm = \"dimension_order\"", 2),
        &["traffic.load=0.01", "traffic.pattern=\"nearest_neighbor\""],
    ));
    let saf = run(&load(
        &torus("[4, 4]", "algorithm = \"dimension_order\"", 2),
        &[
            "traffic.load=0.01",
            "traffic.pattern=\"nearest_neighbor\"",
            "link.switching=\"store_and_forward\"",
        ],
    ));
    let ser = 272.0 * 8.0 / (100e9 * 64.0 / 66.0) * 1e9;
    // Two routers each wait for the tail: + 2 serialisations.
    let diff = saf.network_latency_ns.unwrap() - vct.network_latency_ns.unwrap();
    assert!(
        (diff - 2.0 * ser).abs() < 0.5,
        "SAF - VCT = {diff} ns, expected {}",
        2.0 * ser
    );
}

#[test]
fn accepted_load_tracks_offered_below_saturation() {
    for l in [0.1, 0.3, 0.5] {
        let sc = load(
            &torus("[8, 8]", "algorithm = \"dimension_order\"", 2),
            &[&format!("traffic.load={l}"), "sim.measure=\"20 us\""],
        );
        let rep = run(&sc);
        assert!(
            (rep.offered_load - l).abs() / l < 0.05,
            "offered {} for load {l}",
            rep.offered_load
        );
        assert!(
            (rep.accepted_load - rep.offered_load).abs() / rep.offered_load < 0.05,
            "load {l}: {rep:?}",
            rep = (rep.offered_load, rep.accepted_load)
        );
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_result() {
    let text = torus("[4, 4, 4]", "algorithm = \"minimal_adaptive\"", 3);
    let a = run(&load(&text, &[])).deterministic_json();
    let b = run(&load(&text, &[])).deterministic_json();
    assert_eq!(a, b);
    let c = run(&load(&text, &["seed=8"])).deterministic_json();
    assert_ne!(a, c);
}

fn sunway(sibling_links: u32, failed: &str) -> Scenario {
    let text = scenario(
        &format!("kind = \"generalized_fat_tree\"\nplanes = 1\nleaves = 4\nspines = 3\nnodes_per_leaf = 3\nsibling_links = {sibling_links}\nradix = 8"),
        "vcs = 2\nprivate_credits = 16\nlatency = \"20 ns\"",
        "algorithm = \"up_down\"",
        "pattern = \"uniform\"\nload = 0.2",
        &format!("[faults]\nfailed_links = [{failed}]"),
    );
    load(&text, &[])
}

#[test]
fn generalized_fat_tree_bypasses_a_failed_down_link_through_the_sibling() {
    // Routers: leaves 0..4, spines 4..7. Spine 4's port 1 goes down to leaf 1.
    let failed = "{ router = 4, port = 1 }";
    let gft = sunway(2, failed);
    let net = Network::new(gft.topology.clone(), gft.fabric.clone()).expect("net");
    let n = net.topo.nodes.len() as u32;
    let mut via_sibling = 0;
    for s in 0..n {
        for d in 0..n {
            if s != d {
                let path = net
                    .routing
                    .trace(&net.topo, NodeId(s), NodeId(d), 0, 0)
                    .unwrap_or_else(|e| panic!("{s}->{d}: {e}"));
                if path.iter().any(|(r, p, _)| *r == RouterId(4) && *p == PortIdx(1)) {
                    panic!("path {s}->{d} uses the failed link");
                }
                if path.len() == 4 {
                    via_sibling += 1;
                }
            }
        }
    }
    assert!(via_sibling > 0, "some paths must descend through the sibling leaf");
    let rep = run(&gft);
    assert_eq!(rep.packets_dropped, 0);
    assert!(rep.drained && rep.conservation_ok);

    // Plain fat tree (no sibling links): the same failure makes pairs unreachable; the run
    // reports dropped packets with the reason, and still conserves them.
    let plain = sunway(0, failed);
    let rep = run(&plain);
    assert!(rep.packets_dropped > 0);
    assert_eq!(
        rep.drops_by_reason.get("unreachable").copied(),
        Some(rep.packets_dropped)
    );
    assert_eq!(rep.packets_injected, rep.packets_delivered + rep.packets_dropped);
}

#[test]
fn a_failed_node_cable_is_down_both_ways() {
    // Leaf 0's ports 0..3 are its nodes: port 0 is node 0's cable.
    let rep = run(&sunway(2, "{ router = 0, port = 0 }"));
    let from = rep.drops_by_reason.get("source_cable_down").copied().unwrap_or(0);
    let to = rep.drops_by_reason.get("unreachable").copied().unwrap_or(0);
    assert!(from > 0, "node 0 must not send: {:?}", rep.drops_by_reason);
    assert!(to > 0, "node 0 must not receive: {:?}", rep.drops_by_reason);
    assert!(rep.drained && rep.deadlock.is_none(), "{rep:?}");
    assert_eq!(from + to, rep.packets_dropped);
    assert_eq!(rep.packets_injected, rep.packets_delivered + rep.packets_dropped);
    // Uniform traffic over 12 nodes: node 0 sends about 1/12 of the packets and receives about
    // 1/12; no other packet is lost.
    let generated = rep.packets_injected as f64;
    assert!(
        (from as f64) < generated * 0.2 && (to as f64) < generated * 0.2,
        "{rep:?}"
    );
}

#[test]
fn generalized_fat_tree_survives_losing_every_uplink_of_a_leaf() {
    // Leaf 0's up ports are 3, 4, 5 (3 nodes, then one per spine).
    let failed = "{ router = 0, port = 3 }, { router = 0, port = 4 }, { router = 0, port = 5 }";
    let rep = run(&sunway(2, failed));
    assert_eq!(rep.packets_dropped, 0, "{:?}", rep.drops_by_reason);
    assert!(rep.drained);
    let rep = run(&sunway(0, failed));
    assert!(rep.packets_dropped > 0);
}

#[test]
fn adaptive_rails_use_both_planes() {
    let text = scenario(
        "kind = \"generalized_fat_tree\"\nplanes = 2\nleaves = 4\nspines = 4\nnodes_per_leaf = 4\nsibling_links = 2\nradix = 10",
        "vcs = 2\nprivate_credits = 16\nlatency = \"20 ns\"",
        "algorithm = \"up_down\"",
        "pattern = \"uniform\"\nload = 0.6\nrails = \"adaptive\"",
        "",
    );
    let both = run(&load(&text, &[]));
    let one = run(&load(&text, &["traffic.rails=\"fixed\""]));
    assert!(both.drained && one.drained);
    // Node bandwidth counts both rails; with one rail only half can be accepted.
    assert!((both.accepted_load - both.offered_load).abs() < 0.05 * both.offered_load);
    assert!(
        one.accepted_load <= 0.5 + 1e-6,
        "fixed rail accepted {}",
        one.accepted_load
    );
}

#[test]
fn age_arbitration_and_shared_credits_run_clean() {
    let sc = load(
        &torus("[4, 4]", "algorithm = \"dimension_order\"\ndeadlock = \"dateline\"", 2),
        &[
            "router.arbitration=\"age\"",
            "router.shared_credits=32",
            "traffic.load=0.9",
        ],
    );
    let rep = run(&sc);
    assert!(rep.drained && rep.conservation_ok && rep.deadlock.is_none());
}

#[test]
fn every_pattern_runs_and_conserves() {
    for p in [
        "uniform",
        "transpose",
        "bit_complement",
        "bit_reverse",
        "shuffle",
        "tornado",
        "nearest_neighbor",
        "hotspot",
        "random_permutation",
        "all_to_all",
    ] {
        let sc = load(
            &torus("[4, 4]", "algorithm = \"dimension_order\"", 2),
            &[&format!("traffic.pattern=\"{p}\""), "traffic.process=\"periodic\""],
        );
        let rep = run(&sc);
        assert!(rep.drained && rep.conservation_ok, "{p}");
        assert!(rep.packets_delivered > 0, "{p}");
    }
}

#[test]
fn table_routing_reports_two_level_memory() {
    let sc = load(
        &scenario(
            "kind = \"generalized_fat_tree\"\nplanes = 2\nleaves = 32\nspines = 18\nnodes_per_leaf = 18\nsibling_links = 4\nradix = 40\nnodes = 512",
            "vcs = 4\nprivate_credits = 32",
            "algorithm = \"table\"",
            "load = 0.1",
            "",
        ),
        &["sim.measure=\"1 us\""],
    );
    let rep = run(&sc);
    let t = rep.table_memory.expect("table memory reported");
    assert_eq!(t.flat_entries, 512);
    assert_eq!(t.supernode_size, 18);
    assert_eq!(t.two_level_entries, 18 + 512u64.div_ceil(18));
    assert!(t.saving_percent > 90.0);
    // The 256K-endpoint claim of spec 01: supernodes of 512 give 512 + 512 entries.
    let big = hpcnet_fabric::routing::TableMemory::compute(256 * 1024, 512, 40);
    assert!((big.saving_percent - 99.6).abs() < 0.05, "{}", big.saving_percent);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

        /// Any small torus or mesh, any seed, any load up to 1: every packet is delivered exactly
        /// once, nothing deadlocks, and the run is reproducible.
        #[test]
        fn random_grids_conserve_and_never_deadlock(
            k0 in 2u32..6, k1 in 2u32..6, wrap in any::<bool>(), dateline in any::<bool>(),
            offered in 0.05f64..1.0, seed in 0u64..1000,
        ) {
            let kind = if wrap { "torus" } else { "mesh" };
            let dl = if dateline { "dateline" } else { "bubble" };
            let text = scenario(
                &format!("kind = \"{kind}\"\nk = [{k0}, {k1}]"),
                "vcs = 2\nprivate_credits = 10\nlatency = \"20 ns\"",
                &format!("algorithm = \"dimension_order\"\ndeadlock = \"{dl}\""),
                &format!("pattern = \"uniform\"\nload = {offered}"),
                "",
            );
            let sc = load(&text, &[&format!("seed={seed}"), "sim.measure=\"3 us\""]);
            let a = run(&sc);
            prop_assert!(a.deadlock.is_none());
            prop_assert!(a.drained && a.conservation_ok);
            prop_assert_eq!(a.packets_injected, a.packets_delivered);
            let b = run(&sc);
            prop_assert_eq!(a.deterministic_json(), b.deterministic_json());
        }
    }
}

/// `traffic.allow_self`: uniform traffic then also picks the source (about 1/n of the packets
/// on a 16-node torus), such packets cross the source's router and come back, and every packet
/// is still delivered. Without it no packet goes to its source.
#[test]
fn allow_self_sends_through_the_source_router_and_conserves_packets() {
    let text = torus("[4, 4]", "algorithm = \"dimension_order\"", 2);
    let with = run(&load(&text, &["traffic.allow_self=true"]));
    let without = run(&load(&text, &[]));
    for rep in [&with, &without] {
        assert!(rep.drained && rep.conservation_ok && rep.deadlock.is_none());
        assert_eq!(rep.packets_injected, rep.packets_delivered);
        assert_eq!(rep.packets_generated, rep.packets_injected);
    }
    // With self traffic the mean hop count falls: 1/16 of the packets take one router.
    let (with_hops, without_hops) = (with.mean_hops.unwrap(), without.mean_hops.unwrap());
    assert!(with_hops < without_hops - 0.1, "{with_hops} vs {without_hops}");
    let bound = |r: &RunReport| r.channel_load_bound.as_ref().map(|b| b.max_channel_load);
    assert_ne!(bound(&with), bound(&without));
}

/// The tie rule of dimension order on an even ring moves the channel-load bound: `positive`
/// loads the plus links with the half-way flows, `balanced` and `random` split them.
#[test]
fn tie_rules_move_the_uniform_bound_on_an_even_torus() {
    let text = torus("[8, 8]", "algorithm = \"dimension_order\"", 2);
    let bound = |tie: &str| {
        let rep = run(&load(&text, &[&format!("routing.tie=\"{tie}\"")]));
        assert!(rep.drained && rep.conservation_ok, "{tie}");
        rep.channel_load_bound.expect("bound").saturation_bound
    };
    let (p, b, r) = (bound("positive"), bound("balanced"), bound("random"));
    // 8-ary: the busiest links carry (k+2)/8 instead of k/8 per unit load (×64/63 without self).
    assert!((p - 0.7875).abs() < 1e-9, "{p}");
    assert!((b - 0.984375).abs() < 1e-9, "{b}");
    assert!((r - b).abs() < 1e-9, "{r}");
}

/// Valiant and UGAL-L against minimal routing on the shipped dragonfly (72 nodes), offered load
/// 1.0, as Kim, Dally, Scott and Abts (ISCA 2008) describe them: under uniform traffic
/// Valiant's detours cost it throughput that minimal routing keeps; under adversarial patterns
/// — group shift (each group to the next, their worst case) and tornado on node ids (each group
/// to one or two others) — minimal routing is held to the few global links between those
/// groups and Valiant spreads the load; UGAL-L follows the better of the two in each case.
#[test]
fn ugal_follows_the_better_of_minimal_and_valiant_on_a_dragonfly() {
    let text = include_str!("../../../scenarios/dragonfly-small.toml");
    let accepted = |algorithm: &str, pattern: &str| {
        let sc = load(
            text,
            &[
                &format!("routing.algorithm={algorithm}"),
                "router.vcs=5",
                "traffic.load=1.0",
                &format!("traffic.pattern={pattern}"),
                "sim.measure=\"10 us\"",
                "sim.allow_undrained=true",
            ],
        );
        let r = run(&sc);
        assert!(r.conservation_ok && r.deadlock.is_none(), "{algorithm} {pattern}");
        r.accepted_load
    };
    let three = |pattern: &str| {
        [
            accepted("minimal", pattern),
            accepted("valiant", pattern),
            accepted("ugal", pattern),
        ]
    };
    let [min_u, val_u, ugal_u] = three("uniform");
    assert!(
        min_u > 1.1 * val_u,
        "uniform: minimal {min_u:.3} above Valiant {val_u:.3}"
    );
    assert!(
        ugal_u > 0.95 * min_u,
        "uniform: UGAL {ugal_u:.3} near minimal {min_u:.3}"
    );
    for pattern in ["group_shift", "tornado"] {
        let [min, val, ugal] = three(pattern);
        let all = format!("{pattern}: minimal {min:.3}, Valiant {val:.3}, UGAL {ugal:.3}");
        assert!(val > 1.2 * min, "Valiant above minimal: {all}");
        assert!(ugal > 1.2 * min && ugal > 0.85 * val, "UGAL near Valiant: {all}");
    }
}
