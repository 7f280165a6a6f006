//! Unit tests of the routing functions: dimension order (first differing dimension, e-cube),
//! dateline VC switch, D-mod-k up-port choice, adaptive selection, failed-link fallbacks, table
//! routing and its memory accounting, and the dragonfly's VC per hop.

use super::*;
use crate::topology::{
    build, DragonflyConfig, FatTreeConfig, GeneralizedFatTreeConfig, GridConfig, HypercubeConfig, TopologyConfig,
};

fn torus(k: &[u32]) -> Topology {
    build(&TopologyConfig::Torus(GridConfig {
        k: k.to_vec(),
        concentration: 1,
        radix: None,
    }))
    .unwrap()
}

fn dor(deadlock: DeadlockAvoidance) -> RoutingConfig {
    RoutingConfig::DimensionOrder {
        deadlock,
        tie: TieRule::Positive,
    }
}

/// A packet injected at `src` for `dst`, as the network prepares it, ready to be routed at its
/// first router.
fn injected(r: &Routing, topo: &Topology, src: NodeId, dst: NodeId, class: u8) -> Packet {
    let mut p = Packet::new(0, src, dst, 256, 16, hpcnet_des::SimTime::ZERO);
    p.credits = 5;
    r.on_inject(topo, &mut p, class).unwrap();
    p.hops = 1;
    p
}

/// One hop of a traced route: (router, output port, VC).
fn hop(r: u32, p: u16, vc: u8) -> (RouterId, PortIdx, u8) {
    (RouterId(r), PortIdx(p), vc)
}

/// Free credits per port (every VC alike); ports not listed have none.
struct Ports(Vec<(PortIdx, u32)>);
impl CreditView for Ports {
    fn free(&mut self, port: PortIdx, _: u8) -> u32 {
        self.0.iter().find(|(p, _)| *p == port).map_or(0, |(_, f)| *f)
    }
}

#[test]
fn dimension_order_corrects_the_first_differing_dimension() {
    let t = torus(&[4, 4, 4]);
    let r = Routing::new(&t, &dor(DeadlockAvoidance::Bubble), 2, &[]).unwrap();
    let id = |x: u32, y: u32, z: u32| x + 4 * y + 16 * z;
    // (dimension, plus, crosses the wrap-around link)
    assert_eq!(
        r.dor_step(RouterId(id(1, 2, 3)), RouterId(id(1, 3, 0)), TieRule::Positive, 0),
        Some((1, true, false))
    );
    assert_eq!(
        r.dor_step(RouterId(id(1, 2, 3)), RouterId(id(1, 1, 0)), TieRule::Positive, 0),
        Some((1, false, false))
    );
    assert_eq!(
        r.dor_step(RouterId(id(1, 2, 3)), RouterId(id(0, 3, 0)), TieRule::Positive, 0),
        Some((0, false, false))
    );
    assert_eq!(
        r.dor_step(RouterId(id(3, 2, 3)), RouterId(id(0, 3, 0)), TieRule::Positive, 0),
        Some((0, true, true))
    );
    assert_eq!(
        r.dor_step(RouterId(id(1, 2, 3)), RouterId(id(1, 2, 0)), TieRule::Positive, 0),
        Some((2, true, true))
    );
    // Half way round (k even) goes the plus way.
    assert_eq!(
        r.dor_step(RouterId(id(0, 1, 0)), RouterId(id(0, 3, 0)), TieRule::Positive, 0),
        Some((1, true, false))
    );
    assert_eq!(
        r.dor_step(RouterId(id(1, 2, 3)), RouterId(id(1, 2, 3)), TieRule::Positive, 0),
        None
    );
    // The whole path: y first, then z over the wrap-around link, then ejection on port 6; each
    // new dimension enters a ring (bubble).
    let hops = r.trace(&t, NodeId(id(1, 2, 3)), NodeId(id(1, 3, 0)), 0, 0).unwrap();
    assert_eq!(hops, vec![hop(57, 2, 0), hop(61, 4, 0), hop(13, 6, 0)]);
    let mut p = injected(&r, &t, NodeId(57), NodeId(13), 0);
    let c = r.route(&t, RouterId(57), PortIdx(6), &mut p, &mut Idle).unwrap();
    assert_eq!(
        c,
        Choice {
            port: PortIdx(2),
            vc: 0,
            enters_ring: true
        }
    );
    // At router 61 the packet turns to dimension 2: another ring, another bubble.
    p.hops += 1;
    let c = r.route(&t, RouterId(61), PortIdx(3), &mut p, &mut Idle).unwrap();
    assert_eq!((c.port, c.enters_ring), (PortIdx(4), true));
}

#[test]
fn staying_in_a_ring_does_not_ask_for_a_bubble() {
    let t = torus(&[8]);
    let r = Routing::new(&t, &dor(DeadlockAvoidance::Bubble), 1, &[]).unwrap();
    let mut p = injected(&r, &t, NodeId(0), NodeId(3), 0);
    let first = r.route(&t, RouterId(0), PortIdx(2), &mut p, &mut Idle).unwrap();
    p.hops += 1;
    let second = r.route(&t, RouterId(1), PortIdx(1), &mut p, &mut Idle).unwrap();
    assert_eq!((first.port, first.enters_ring), (PortIdx(0), true));
    assert_eq!((second.port, second.enters_ring), (PortIdx(0), false));
    // On a mesh there is no ring and no bubble.
    let m = build(&TopologyConfig::Mesh(GridConfig {
        k: vec![8],
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let r = Routing::new(&m, &dor(DeadlockAvoidance::Bubble), 1, &[]).unwrap();
    assert!(!r.uses_bubble());
    let mut p = injected(&r, &m, NodeId(0), NodeId(3), 0);
    assert!(
        !r.route(&m, RouterId(0), PortIdx(2), &mut p, &mut Idle)
            .unwrap()
            .enters_ring
    );
}

#[test]
fn hypercube_routes_the_lowest_differing_bit_first() {
    let t = build(&TopologyConfig::Hypercube(HypercubeConfig {
        n: 3,
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let r = Routing::new(&t, &dor(DeadlockAvoidance::Bubble), 1, &[]).unwrap();
    // 101 → 011: bit 1 (set), then bit 2 (clear), then the node on port 3.
    assert_eq!(
        r.dor_step(RouterId(5), RouterId(3), TieRule::Positive, 0),
        Some((1, true, false))
    );
    assert_eq!(
        r.trace(&t, NodeId(5), NodeId(3), 0, 0).unwrap(),
        vec![hop(5, 1, 0), hop(7, 2, 0), hop(3, 3, 0)]
    );
}

#[test]
fn dateline_switches_to_the_upper_vc_on_the_wrap_link_and_back_in_a_new_dimension() {
    let ring = torus(&[4]);
    let r = Routing::new(&ring, &dor(DeadlockAvoidance::Dateline), 2, &[]).unwrap();
    assert_eq!(r.classes(), 1);
    // 2 → 0 the plus way (tie): VC 0 to router 3, VC 1 over the wrap-around link 3 → 0.
    assert_eq!(
        r.trace(&ring, NodeId(2), NodeId(0), 0, 0).unwrap(),
        vec![hop(2, 0, 0), hop(3, 0, 1), hop(0, 2, 1)]
    );
    // 2 → 1 the minus way, no wrap: VC 0 throughout.
    assert_eq!(
        r.trace(&ring, NodeId(2), NodeId(1), 0, 0).unwrap(),
        vec![hop(2, 1, 0), hop(1, 2, 0)]
    );

    let t = torus(&[4, 4]);
    let r = Routing::new(&t, &dor(DeadlockAvoidance::Dateline), 4, &[]).unwrap();
    assert_eq!((r.classes(), r.injection_vc(1)), (2, 2));
    // (3,0) → (1,1): x over the wrap (VC 1), then y on a fresh ring (VC 0).
    assert_eq!(
        r.trace(&t, NodeId(3), NodeId(5), 0, 0).unwrap(),
        vec![hop(3, 0, 1), hop(0, 0, 1), hop(1, 2, 0), hop(5, 4, 0)]
    );
    // Class 1 uses VCs 2 and 3 the same way.
    assert_eq!(
        r.trace(&t, NodeId(3), NodeId(5), 0, 1).unwrap(),
        vec![hop(3, 0, 3), hop(0, 0, 3), hop(1, 2, 2), hop(5, 4, 2)]
    );
}

fn fat_tree(k: u32, n: u32) -> Topology {
    build(&TopologyConfig::FatTree(FatTreeConfig { k, n, radix: None })).unwrap()
}

#[test]
fn d_mod_k_takes_digit_l_of_the_destination_at_level_l() {
    let t = fat_tree(3, 3);
    let r = Routing::new(
        &t,
        &RoutingConfig::UpDown {
            selection: Selection::Deterministic,
        },
        1,
        &[],
    )
    .unwrap();
    for dst in 3..27u32 {
        let hops = r.trace(&t, NodeId(0), NodeId(dst), 0, 0).unwrap();
        // Leaf: up port k + digit 0 of dst.
        assert_eq!(hops[0], hop(0, 3 + (dst % 3) as u16, 0), "dst {dst}");
        if dst >= 9 {
            // Outside the first level-1 subtree: up again on k + digit 1.
            assert_eq!(hops[1].1, PortIdx(3 + (dst / 3 % 3) as u16), "dst {dst}");
            assert_eq!(hops.len(), 5, "up 2, down 2, eject: dst {dst}");
        } else {
            assert_eq!(hops.len(), 3, "dst {dst}");
        }
    }
}

#[test]
fn tree_selection_deterministic_ignores_credits_adaptive_follows_them() {
    let t = fat_tree(3, 2);
    for (sel, expect_busy) in [(Selection::Deterministic, 3 + 5 % 3), (Selection::Adaptive, 4)] {
        let r = Routing::new(&t, &RoutingConfig::UpDown { selection: sel }, 1, &[]).unwrap();
        // Node 0 on leaf 0 to node 5: D-mod-k order starts at up port 3 + 5 mod 3 = 5.
        let mut p = injected(&r, &t, NodeId(0), NodeId(5), 0);
        let idle = r.route(&t, RouterId(0), PortIdx(0), &mut p.clone(), &mut Idle).unwrap();
        assert_eq!(idle.port, PortIdx(5), "{sel:?}: ties keep the D-mod-k port");
        let busy = r
            .route(
                &t,
                RouterId(0),
                PortIdx(0),
                &mut p,
                &mut Ports(vec![(PortIdx(3), 2), (PortIdx(4), 9), (PortIdx(5), 1)]),
            )
            .unwrap();
        assert_eq!(busy.port, PortIdx(expect_busy), "{sel:?}");
    }
}

#[test]
fn dead_up_port_falls_back_to_the_next_in_d_mod_k_order() {
    let t = fat_tree(3, 2);
    // Leaf 0's up port 5 is the D-mod-k choice for node 5; with it dead, port 3 is next (circular).
    let r = Routing::new(
        &t,
        &RoutingConfig::UpDown {
            selection: Selection::Deterministic,
        },
        1,
        &[(RouterId(0), PortIdx(5))],
    )
    .unwrap();
    assert!(r.is_dead(RouterId(0), PortIdx(5)));
    assert_eq!(r.trace(&t, NodeId(0), NodeId(5), 0, 0).unwrap()[0], hop(0, 3, 0));
    assert_eq!(
        r.trace(&t, NodeId(0), NodeId(4), 0, 0).unwrap()[0],
        hop(0, 4, 0),
        "other destinations unchanged"
    );
}

fn gft(planes: u32, leaves: u32, spines: u32, npl: u32, sib: u32) -> Topology {
    build(&TopologyConfig::GeneralizedFatTree(GeneralizedFatTreeConfig {
        planes,
        leaves,
        spines,
        nodes_per_leaf: npl,
        sibling_links: sib,
        nodes: None,
        radix: None,
    }))
    .unwrap()
}

#[test]
fn table_routing_makes_the_up_down_decisions_and_reports_its_memory() {
    let t = gft(2, 4, 3, 2, 1);
    for selection in [Selection::Deterministic, Selection::Adaptive] {
        let table = Routing::new(&t, &RoutingConfig::Table { selection }, 1, &[]).unwrap();
        let updown = Routing::new(&t, &RoutingConfig::UpDown { selection }, 1, &[]).unwrap();
        assert!(updown.table_memory.is_none());
        for rail in 0..2 {
            for s in 0..8 {
                for d in (0..8).filter(|&d| d != s) {
                    assert_eq!(
                        table.trace(&t, NodeId(s), NodeId(d), rail, 0).unwrap(),
                        updown.trace(&t, NodeId(s), NodeId(d), rail, 0).unwrap(),
                        "{selection:?} {s}->{d} rail {rail}"
                    );
                }
            }
        }
        // 8 endpoints, supernodes of 2 (nodes per leaf), one bit per port of the 40-port chip.
        let m = table.table_memory.clone().unwrap();
        assert_eq!(
            (
                m.supernode_size,
                m.supernodes,
                m.flat_entries,
                m.two_level_entries,
                m.entry_bits
            ),
            (2, 4, 8, 6, 40)
        );
    }
    // The Sunway prototype's figures: 512 endpoints in supernodes of 18, 40-port routers.
    let m = TableMemory::compute(512, 18, 40);
    assert_eq!((m.supernodes, m.two_level_entries), (29, 47));
    assert_eq!((m.flat_bytes_per_router, m.two_level_bytes_per_router), (2560, 235));
    assert!((m.saving_percent - 100.0 * (1.0 - 47.0 / 512.0)).abs() < 1e-9);
}

#[test]
fn spine_with_a_dead_down_link_bypasses_through_the_sibling_leaf() {
    // Leaves 0, 1 (siblings), spines 2, 3. Leaf ports: nodes 0–1, up 2–3, sibling 4.
    let t = gft(1, 2, 2, 2, 1);
    for cfg in [
        RoutingConfig::UpDown {
            selection: Selection::Deterministic,
        },
        RoutingConfig::Table {
            selection: Selection::Deterministic,
        },
    ] {
        let healthy = Routing::new(&t, &cfg, 1, &[]).unwrap();
        assert_eq!(
            healthy.trace(&t, NodeId(0), NodeId(2), 0, 0).unwrap(),
            vec![hop(0, 2, 0), hop(2, 1, 0), hop(1, 0, 0)]
        );
        // Spine 2's link down to leaf 1 (its port 1) fails.
        let r = Routing::new(&t, &cfg, 1, &[(RouterId(2), PortIdx(1))]).unwrap();
        assert_eq!(
            r.trace(&t, NodeId(0), NodeId(2), 0, 0).unwrap(),
            vec![hop(0, 2, 0), hop(2, 0, 0), hop(0, 4, 0), hop(1, 0, 0)],
            "{cfg:?}"
        );
    }
}

#[test]
fn dragonfly_minimal_uses_one_vc_per_router_hop() {
    let t = build(&TopologyConfig::Dragonfly(DragonflyConfig {
        a: 2,
        p: 1,
        h: 1,
        g: None,
        radix: None,
    }))
    .unwrap();
    let r = Routing::new(&t, &RoutingConfig::Minimal, 3, &[]).unwrap();
    let n = t.nodes.len() as u32;
    let mut longest = 0;
    for s in 0..n {
        for d in (0..n).filter(|&d| d != s) {
            let hops = r.trace(&t, NodeId(s), NodeId(d), 0, 0).unwrap();
            let (links, eject) = hops.split_at(hops.len() - 1);
            for (i, h) in links.iter().enumerate() {
                assert_eq!(h.2 as usize, i, "{s}->{d}: {hops:?}");
            }
            assert_eq!(
                eject[0].2 as usize,
                links.len().saturating_sub(1),
                "ejection keeps the VC"
            );
            longest = longest.max(links.len());
        }
    }
    assert_eq!(longest, 3, "local, global, local");
    // Fewer VCs than the diameter are refused.
    let err = Routing::new(&t, &RoutingConfig::Minimal, 2, &[]).unwrap_err();
    assert_eq!(err.key, "router.vcs");
}

#[test]
fn minimal_adaptive_takes_the_roomiest_productive_vc_and_escapes_when_none_fits() {
    let t = torus(&[4, 4]);
    let r = Routing::new(
        &t,
        &RoutingConfig::MinimalAdaptive {
            deadlock: DeadlockAvoidance::Bubble,
            tie: TieRule::Positive,
        },
        3,
        &[],
    )
    .unwrap();
    // (0,0) → (1,1): +x (port 0) and +y (port 2) are both productive.
    let p = injected(&r, &t, NodeId(0), NodeId(5), 0);
    let c = r
        .route(
            &t,
            RouterId(0),
            PortIdx(4),
            &mut p.clone(),
            &mut Ports(vec![(PortIdx(0), 6), (PortIdx(2), 9)]),
        )
        .unwrap();
    assert_eq!((c.port, c.enters_ring), (PortIdx(2), false));
    assert!(c.vc >= 1, "adaptive VCs are 1..");
    // -x (port 1) is not productive, however free.
    let c = r
        .route(
            &t,
            RouterId(0),
            PortIdx(4),
            &mut p.clone(),
            &mut Ports(vec![(PortIdx(0), 6), (PortIdx(1), 50)]),
        )
        .unwrap();
    assert_eq!(c.port, PortIdx(0));
    // Nothing fits (5 credits needed): escape, dimension order on VC 0 with a bubble.
    let c = r
        .route(
            &t,
            RouterId(0),
            PortIdx(4),
            &mut p.clone(),
            &mut Ports(vec![(PortIdx(0), 4), (PortIdx(2), 4)]),
        )
        .unwrap();
    assert_eq!(
        c,
        Choice {
            port: PortIdx(0),
            vc: 0,
            enters_ring: true
        }
    );
}

/// On an 8-ring every destination 4 away is a tie: `positive` always goes plus, `balanced`
/// plus from even and minus from odd coordinates (4 of the 8 sources each way), `random` by
/// bit d of the packet's random bits; other distances are never affected.
#[test]
fn tie_rules_split_half_way_traffic_as_specified() {
    let t = torus(&[8]);
    let rule = |tie| {
        Routing::new(
            &t,
            &RoutingConfig::DimensionOrder {
                deadlock: DeadlockAvoidance::Bubble,
                tie,
            },
            1,
            &[],
        )
        .unwrap()
    };
    let (pos, bal, rnd) = (rule(TieRule::Positive), rule(TieRule::Balanced), rule(TieRule::Random));
    let mut balanced_plus = 0;
    for c in 0..8u32 {
        let d = (c + 4) % 8;
        assert!(pos.dor_step(RouterId(c), RouterId(d), TieRule::Positive, 0).unwrap().1);
        let b = bal.dor_step(RouterId(c), RouterId(d), TieRule::Balanced, 0).unwrap().1;
        assert_eq!(b, c % 2 == 0, "balanced from {c}");
        balanced_plus += usize::from(b);
        for salt in [0u8, 1, 2, 0xFE, 0xFF] {
            let x = rnd.dor_step(RouterId(c), RouterId(d), TieRule::Random, salt).unwrap().1;
            assert_eq!(x, salt & 1 == 0, "random from {c}, salt {salt}");
        }
        // Not a tie: every rule takes the shorter way.
        for rule in [TieRule::Positive, TieRule::Balanced, TieRule::Random] {
            assert!(bal.dor_step(RouterId(c), RouterId((c + 3) % 8), rule, 0xFF).unwrap().1);
            assert!(!bal.dor_step(RouterId(c), RouterId((c + 5) % 8), rule, 0xFF).unwrap().1);
        }
    }
    assert_eq!(balanced_plus, 4);
    // The whole path keeps its direction after the first step: 4 hops the minus way from 1
    // (odd) under `balanced`, the plus way under `positive`.
    let hops = bal.trace(&t, NodeId(1), NodeId(5), 0, 0).unwrap();
    assert_eq!(hops.len(), 5, "{hops:?}");
    assert!(hops[..4].iter().all(|h| h.1 == PortIdx(1)), "{hops:?}");
    let hops = pos.trace(&t, NodeId(1), NodeId(5), 0, 0).unwrap();
    assert!(hops[..4].iter().all(|h| h.1 == PortIdx(0)), "{hops:?}");
    assert!(rnd.needs_salt() && !bal.needs_salt() && !pos.needs_salt());
    assert_eq!(rnd.expectation_salts(), &[0, 0xFF]);
}

/// Oblivious random up ports: the port a packet takes up from a leaf depends on its random
/// bits, not on its destination, and the draws reach every up port.
#[test]
fn random_selection_spreads_up_ports_whatever_the_destination() {
    let t = fat_tree(3, 3);
    let r = Routing::new(
        &t,
        &RoutingConfig::UpDown {
            selection: Selection::Random,
        },
        1,
        &[],
    )
    .unwrap();
    assert!(r.needs_salt());
    let mut seen = std::collections::BTreeSet::new();
    for salt in 0..=255u8 {
        let mut first = None;
        for dst in [9u32, 13, 26] {
            let mut hops = Vec::new();
            r.walk_salted(&t, NodeId(0), NodeId(dst), 0, 0, salt, |rr, p, vc| {
                hops.push((rr, p, vc))
            })
            .unwrap();
            assert_eq!(hops.len(), 5, "up 2, down 2, eject: dst {dst}");
            assert!((3..6).contains(&hops[0].1 .0), "{hops:?}");
            // Same salt, same first up port, whatever the destination.
            assert_eq!(*first.get_or_insert(hops[0].1), hops[0].1, "salt {salt}");
        }
        seen.insert(first.unwrap());
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
}

/// The dimension-order next-step table gives every (router, destination router) pair the step
/// the coordinates give, on 2D and 3D tori and meshes with even and odd sizes, under the
/// deterministic tie rules; under `random` the tie steps stay computed per packet (both
/// draws reachable) and the others come from the table. Whole traced routes agree with the
/// routing built without the table.
#[test]
fn dimension_order_table_matches_the_computed_steps() {
    let mesh = |k: &[u32]| {
        build(&TopologyConfig::Mesh(GridConfig {
            k: k.to_vec(),
            concentration: 1,
            radix: None,
        }))
        .unwrap()
    };
    let shapes = [
        torus(&[4, 4, 4]),
        torus(&[5, 3]),
        torus(&[6, 7, 2]),
        mesh(&[4, 5]),
        mesh(&[3, 2, 4]),
    ];
    for t in &shapes {
        let n = t.routers.len() as u32;
        for tie in [TieRule::Positive, TieRule::Balanced, TieRule::Random] {
            for deadlock in [DeadlockAvoidance::Bubble, DeadlockAvoidance::Dateline] {
                let cfg = RoutingConfig::DimensionOrder { deadlock, tie };
                let r = Routing::new(t, &cfg, 4, &[]).unwrap();
                assert!(r.has_dor_table());
                let mut computed = 0;
                for a in 0..n {
                    for b in 0..n {
                        let (ra, rb) = (RouterId(a), RouterId(b));
                        match r.dor_table_step(ra, rb) {
                            Some(step) => {
                                assert_eq!(step, r.dor_step(ra, rb, tie, 0), "{a}->{b} {tie:?}");
                                assert_eq!(step, r.dor_step(ra, rb, tie, 0xFF), "{a}->{b} {tie:?}");
                            }
                            None => {
                                // Only a random tie is left to the packet.
                                assert_eq!(tie, TieRule::Random, "{a}->{b}");
                                let (p, m) = (r.dor_step(ra, rb, tie, 0), r.dor_step(ra, rb, tie, 0xFF));
                                assert_ne!(p, m, "{a}->{b}: not a tie");
                                computed += 1;
                            }
                        }
                    }
                }
                let even_ring = matches!(&t.shape, Shape::Torus { k, wrap: true, .. } if k.iter().any(|k| k % 2 == 0));
                assert_eq!(computed > 0, tie == TieRule::Random && even_ring, "{tie:?}");
                let plain = r.clone().without_dor_table();
                assert!(!plain.has_dor_table());
                for src in 0..t.nodes.len() as u32 {
                    for dst in 0..t.nodes.len() as u32 {
                        if src == dst {
                            continue;
                        }
                        for salt in [0u8, 0x5A, 0xFF] {
                            let (mut a, mut b) = (Vec::new(), Vec::new());
                            r.walk_salted(t, NodeId(src), NodeId(dst), 0, 1, salt, |x, p, v| a.push((x, p, v)))
                                .unwrap();
                            plain
                                .walk_salted(t, NodeId(src), NodeId(dst), 0, 1, salt, |x, p, v| b.push((x, p, v)))
                                .unwrap();
                            assert_eq!(a, b, "{src}->{dst} {tie:?} salt {salt}");
                        }
                    }
                }
            }
        }
    }
}

/// Route a packet from `src` to `dst` (class `class`, random bits `salt`) with the full route
/// and with `fast` side by side, hop by hop, asserting at every hop the same port, VC and ring
/// entry and the same packet state (flags, dimension); returns the number of hops. `fast`
/// gets the router, the input port and its global index.
fn same_route_hop_by_hop(
    r: &Routing,
    t: &Topology,
    (src, dst, class, salt): (u32, u32, u8, u8),
    mut fast: impl FnMut(RouterId, PortIdx, u32, &mut Packet) -> Result<Choice, RouteError>,
) -> usize {
    let offsets = t.port_offsets();
    let mut full = Packet::new(0, NodeId(src), NodeId(dst), 0, 0, hpcnet_des::SimTime::ZERO);
    full.salt = salt;
    r.on_inject(t, &mut full, class).unwrap();
    let mut quick = full.clone();
    let (mut at, mut in_port) = r.attach(NodeId(src), 0);
    let mut hops = 0;
    loop {
        full.hops += 1;
        quick.hops += 1;
        let a = r.route(t, at, in_port, &mut full, &mut Idle).unwrap();
        let g = offsets[at.index()] + in_port.0 as u32;
        let b = fast(at, in_port, g, &mut quick).unwrap();
        assert_eq!(
            (a.port, a.vc, a.enters_ring),
            (b.port, b.vc, b.enters_ring),
            "{src}->{dst} at {at:?}, class {class}, salt {salt}"
        );
        assert_eq!((full.flags, full.last_dim), (quick.flags, quick.last_dim));
        full.vc = a.vc;
        quick.vc = b.vc;
        hops += 1;
        match t.routers[at.index()].ports[a.port.index()] {
            Peer::Router { router, port } => {
                at = router;
                in_port = port;
            }
            _ => return hops,
        }
    }
}

/// The plain path's dimension-order route (`route_dor_fast`) chooses what `route` chooses at
/// every hop of every node pair — port, VC, ring entry, and the packet's dimension state —
/// under every tie rule and deadlock rule, random ties (left to the full route) included; and
/// it is offered only where it applies.
#[test]
fn fast_dimension_order_route_equals_the_full_route() {
    for t in [torus(&[4, 4, 4]), torus(&[6, 3]), torus(&[5, 2, 3])] {
        for tie in [TieRule::Positive, TieRule::Balanced, TieRule::Random] {
            for deadlock in [DeadlockAvoidance::Bubble, DeadlockAvoidance::Dateline] {
                let cfg = RoutingConfig::DimensionOrder { deadlock, tie };
                let r = Routing::new(&t, &cfg, 4, &[]).unwrap();
                assert!(r.dor_fast(), "{tie:?} {deadlock:?}");
                assert!(!r.clone().without_dor_table().dor_fast());
                let mut hops = 0;
                for src in 0..t.nodes.len() as u32 {
                    for dst in 0..t.nodes.len() as u32 {
                        for (salt, class) in [(0u8, 0u8), (0xA5, 1)] {
                            hops += same_route_hop_by_hop(&r, &t, (src, dst, class, salt), |at, _, _, p| {
                                r.route_dor_fast(&t, at, p)
                            });
                        }
                    }
                }
                assert!(hops > 2 * t.nodes.len() * t.nodes.len());
            }
        }
    }
    // Not offered: source routing, a dead port, no table (a fat tree's up/down).
    let t = torus(&[4, 4]);
    let cfg = RoutingConfig::DimensionOrder {
        deadlock: DeadlockAvoidance::Bubble,
        tie: TieRule::Positive,
    };
    let mut r = Routing::new(&t, &cfg, 2, &[]).unwrap();
    assert!(r.dor_fast());
    r.set_dead(RouterId(0), PortIdx(0), true);
    assert!(!r.dor_fast());
    r.set_dead(RouterId(0), PortIdx(0), false);
    assert!(r.dor_fast());
}

/// The plain path's up/down hop (`route_tree_fast`) chooses what `route` chooses at every hop
/// of every node pair — port and VC — on a k-ary n-tree and on generalized fat trees with and
/// without sibling links, under deterministic (D-mod-k) and random selection with several
/// salts; and it is offered only where it applies.
#[test]
fn fast_tree_route_equals_the_full_route() {
    for t in [fat_tree(4, 3), fat_tree(2, 4), gft(2, 4, 2, 2, 1), gft(1, 6, 3, 2, 0)] {
        let offsets = t.port_offsets();
        for selection in [Selection::Deterministic, Selection::Random] {
            let r = Routing::new(&t, &RoutingConfig::UpDown { selection }, 2, &[]).unwrap();
            assert!(r.tree_fast(), "{selection:?}");
            let mut hops = 0;
            for src in 0..t.nodes.len() as u32 {
                for dst in 0..t.nodes.len() as u32 {
                    for salt in [0u8, 0x3C, 0xFF] {
                        hops += same_route_hop_by_hop(&r, &t, (src, dst, 1, salt), |at, in_port, g, p| {
                            r.route_tree_fast(&t, at, in_port, g, p)
                        });
                    }
                }
            }
            assert!(hops > 3 * t.nodes.len() * t.nodes.len());
            // Arrivals no up/down route makes (from above or from a sibling leaf, at every
            // router, toward every node): the same answer, an error included.
            let mut odd = 0;
            for (ri, info) in t.routers.iter().enumerate() {
                for (p, kind) in info.kinds.iter().enumerate() {
                    if !matches!(kind, PortKind::Up | PortKind::Sibling) {
                        continue;
                    }
                    let (at, in_port) = (RouterId(ri as u32), PortIdx(p as u16));
                    let g = offsets[ri] + p as u32;
                    for dst in 0..t.nodes.len() as u32 {
                        let mut full = Packet::new(0, NodeId(0), NodeId(dst), 0, 0, hpcnet_des::SimTime::ZERO);
                        r.on_inject(&t, &mut full, 0).unwrap();
                        full.hops = 2;
                        let mut fast = full.clone();
                        let a = r.route(&t, at, in_port, &mut full, &mut Idle).map(|c| (c.port, c.vc));
                        let b = r.route_tree_fast(&t, at, in_port, g, &mut fast).map(|c| (c.port, c.vc));
                        assert_eq!(format!("{a:?}"), format!("{b:?}"), "r{ri}.p{p} -> {dst}");
                        odd += usize::from(a.is_err());
                    }
                }
            }
            assert!(odd > 0, "some arrival from above finds nothing below");
        }
    }
    // Not offered: adaptive selection, a dead port (until repaired), dimension order.
    let t = fat_tree(4, 2);
    let up_down = |selection| Routing::new(&t, &RoutingConfig::UpDown { selection }, 2, &[]).unwrap();
    assert!(!up_down(Selection::Adaptive).tree_fast());
    let mut r = up_down(Selection::Deterministic);
    assert!(r.tree_fast());
    r.set_dead(RouterId(0), PortIdx(0), true);
    assert!(!r.tree_fast());
    r.set_dead(RouterId(0), PortIdx(0), false);
    assert!(r.tree_fast());
    assert!(!Routing::new(&torus(&[4, 4]), &dor(DeadlockAvoidance::Bubble), 2, &[])
        .unwrap()
        .tree_fast());
}

/// A small balanced dragonfly: a = 4 routers per group, one node each, h = 2 global links per
/// router, g = 9 groups.
fn dragonfly_4_1_2() -> Topology {
    build(&TopologyConfig::Dragonfly(DragonflyConfig {
        a: 4,
        p: 1,
        h: 2,
        g: None,
        radix: None,
    }))
    .unwrap()
}

/// The route of a packet from `s` to `d` whose 16 random bits are `bits`, decided under
/// `view`: (router, output port, VC) per hop, ejection last.
fn walk_bits(
    r: &Routing,
    t: &Topology,
    s: NodeId,
    d: NodeId,
    bits: u16,
    view: &mut impl CreditView,
) -> Vec<(RouterId, PortIdx, u8)> {
    let mut p = Packet::new(0, s, d, 256, 16, hpcnet_des::SimTime::ZERO);
    p.credits = 5;
    p.salt = (bits >> 8) as u8;
    p.last_dim = bits as u8;
    r.on_inject(t, &mut p, 0).unwrap();
    let (mut at, mut in_port) = r.attach(s, 0);
    let mut path = Vec::new();
    loop {
        p.hops += 1;
        let c = r.route(t, at, in_port, &mut p, view).unwrap();
        path.push((at, c.port, c.vc));
        p.vc = c.vc;
        match t.routers[at.index()].ports[c.port.index()] {
            Peer::Router { router, port } => {
                at = router;
                in_port = port;
            }
            Peer::Node { node, .. } => {
                assert_eq!(node, d, "{s}->{d}: ejected at the wrong node: {path:?}");
                return path;
            }
            Peer::None => panic!("{s}->{d}: routed into a dead end: {path:?}"),
        }
        assert!(path.len() <= 12, "{s}->{d}: no end: {path:?}");
    }
}

/// Random bits whose intermediate group is `grp` of `g`.
fn bits_for_group(grp: u32, g: u32) -> u16 {
    ((grp as u64 * 65536).div_ceil(g as u64)) as u16
}

/// Valiant on a dragonfly: every path between groups passes through its intermediate group
/// (unless that is the source's or destination's group, then it is minimal), takes at most
/// local–global–local–global–local, and rides VC = hop index, strictly increasing along the
/// path, so the channel dependency graph is acyclic. Fewer than 5 VCs are refused.
#[test]
fn valiant_routes_through_the_intermediate_group_on_increasing_vcs() {
    let t = dragonfly_4_1_2();
    let (a, g) = (4u32, 9u32);
    let r = Routing::new(&t, &RoutingConfig::Valiant, 5, &[]).unwrap();
    let minimal = Routing::new(&t, &RoutingConfig::Minimal, 5, &[]).unwrap();
    assert!(r.needs_salt() && r.needs_wide_salt() && r.bound_untraced().is_some());
    let n = t.nodes.len() as u32;
    let group = |x: RouterId| x.0 / a;
    let mut detours = 0;
    for grp in 0..g {
        let bits = bits_for_group(grp, g);
        assert_eq!(
            Routing::intermediate(r.groups.as_ref().unwrap(), &{
                let mut p = Packet::new(0, NodeId(0), NodeId(1), 0, 0, hpcnet_des::SimTime::ZERO);
                p.salt = (bits >> 8) as u8;
                p.last_dim = bits as u8;
                p
            }),
            grp
        );
        for s in 0..n {
            for d in (0..n).filter(|&d| d != s) {
                let path = walk_bits(&r, &t, NodeId(s), NodeId(d), bits, &mut Idle);
                let (links, eject) = path.split_at(path.len() - 1);
                for (i, h) in links.iter().enumerate() {
                    assert_eq!(h.2 as usize, i, "{s}->{d} via {grp}: {path:?}");
                }
                assert_eq!(eject[0].2 as usize, links.len().saturating_sub(1));
                let (sg, dg) = (group(path[0].0), group(path.last().unwrap().0));
                let min_len = minimal.trace(&t, NodeId(s), NodeId(d), 0, 0).unwrap().len();
                if sg == dg || grp == sg || grp == dg {
                    assert_eq!(path.len(), min_len, "{s}->{d} via {grp}: minimal expected: {path:?}");
                } else {
                    detours += 1;
                    assert!(
                        path.iter().any(|h| group(h.0) == grp),
                        "{s}->{d} misses group {grp}: {path:?}"
                    );
                    assert!(links.len() <= 5, "{s}->{d} via {grp}: {path:?}");
                }
            }
        }
    }
    assert!(detours > 0);
    let err = Routing::new(&t, &RoutingConfig::Valiant, 4, &[]).unwrap_err();
    assert_eq!(err.key, "router.vcs");
    assert!(err.reason.contains("takes 5 hops"), "{}", err.reason);
    let err = Routing::new(&torus(&[4, 4]), &RoutingConfig::Ugal { threshold: 0 }, 8, &[]).unwrap_err();
    assert_eq!(err.key, "routing.algorithm");
}

/// A credit view in which one port's buffers are full and every other port's empty.
struct Full(PortIdx);
impl CreditView for Full {
    fn free(&mut self, port: PortIdx, _: u8) -> u32 {
        if port == self.0 {
            0
        } else {
            16
        }
    }
}

/// UGAL-L decides at the source router: on an idle network (equal, empty queues) the minimal
/// path; when the minimal path's first output is full and the detour's is empty, the detour
/// (unless the threshold outweighs the difference); the choice holds for the whole path.
#[test]
fn ugal_takes_the_detour_only_when_the_minimal_queue_outweighs_it() {
    let t = dragonfly_4_1_2();
    let (a, g) = (4u32, 9u32);
    let minimal = Routing::new(&t, &RoutingConfig::Minimal, 5, &[]).unwrap();
    let mut ugal = Routing::new(&t, &RoutingConfig::Ugal { threshold: 0 }, 5, &[]).unwrap();
    ugal.set_buffer_credits(16);
    let mut patient = Routing::new(&t, &RoutingConfig::Ugal { threshold: 1000 }, 5, &[]).unwrap();
    patient.set_buffer_credits(16);
    assert!(
        ugal.bound_untraced().is_none(),
        "UGAL's idle choice is minimal, which is traced"
    );
    let n = t.nodes.len() as u32;
    let group = |x: RouterId| x.0 / a;
    let (mut detoured, mut cases) = (0, 0);
    for grp in 0..g {
        let bits = bits_for_group(grp, g);
        for s in 0..n {
            for d in (0..n).filter(|&d| d != s) {
                let min_path = minimal.trace(&t, NodeId(s), NodeId(d), 0, 0).unwrap();
                assert_eq!(walk_bits(&ugal, &t, NodeId(s), NodeId(d), bits, &mut Idle), min_path);
                let (sg, dg) = (group(min_path[0].0), group(min_path.last().unwrap().0));
                if sg == dg || grp == sg || grp == dg {
                    continue;
                }
                let blocked = min_path[0].1;
                let path = walk_bits(&ugal, &t, NodeId(s), NodeId(d), bits, &mut Full(blocked));
                let valiant_first = {
                    let v = Routing::new(&t, &RoutingConfig::Valiant, 5, &[]).unwrap();
                    walk_bits(&v, &t, NodeId(s), NodeId(d), bits, &mut Idle)[0].1
                };
                if valiant_first == blocked {
                    // Both paths start on the full port: equal queues, the shorter path.
                    assert_eq!(path, min_path);
                    continue;
                }
                cases += 1;
                assert_ne!(path[0].1, blocked, "{s}->{d} via {grp}: {path:?}");
                assert!(path.iter().any(|h| group(h.0) == grp), "{s}->{d} via {grp}: {path:?}");
                detoured += 1;
                assert_eq!(
                    walk_bits(&patient, &t, NodeId(s), NodeId(d), bits, &mut Full(blocked)),
                    min_path,
                    "a threshold of 1000 credit-hops keeps the minimal path"
                );
            }
        }
    }
    assert!(cases > 100 && detoured == cases, "{detoured} of {cases}");
}
