//! Dynamic faults in the packet network: failures and repairs of cables, routers and planes
//! during a run, their detection and the tables rewritten after them, lane renegotiation, the
//! NICEVT torus first/last-step bypass, the Sunway generalized fat tree's sibling bypass and
//! dual rails, and random failures.
//!
//! Every test drives a [`Network`] with its own event loop and checks, besides its own claim,
//! that each packet sent is delivered exactly once or dropped exactly once with a cause, and
//! that nothing is left in the network at the end (conservation).
//!
//! Links run at 8 Gb/s (1 byte per ns) with 10 ns latency and routers take 20 ns, so a
//! maximum-size packet (16 B header + 256 B payload) serialises in 272 ns.

mod common;
use common::gft;
use hpcnet_des::{BitsPerSec, Bytes, EventQueue, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::faults::{FaultAction, FaultClass, FaultEvent, FaultKind, RandomFaults};
use hpcnet_fabric::net::FaultStats;
use hpcnet_fabric::topology::{
    build, GridConfig, LeafSpineConfig, NodeId, Peer, PortIdx, PortKind, RouterId, Topology, TopologyConfig,
};
use hpcnet_fabric::{Collect, NetEvent, Network, Packet, RouteError};
use std::collections::BTreeMap;

fn ns(t: u64) -> SimTime {
    SimTime::from_ns(t)
}

fn us(t: u64) -> SimTime {
    SimTime::from_us(t)
}

fn fabric(routing: RoutingConfig, vcs: u8, private_credits: u32) -> FabricConfig {
    FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: BitsPerSec::gbps(2.0),
            encoding: Encoding::None,
            latency: ns(10),
            switching: Switching::CutThrough,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs,
            credit_unit: Bytes(64),
            private_credits,
            shared_credits: 0,
            latency: ns(20),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
        },
        packet: PacketConfig {
            header: Bytes(16),
            max_payload: Bytes(256),
        },
        routing,
        faults: FaultConfig::default(),
    }
}

fn dor() -> RoutingConfig {
    RoutingConfig::DimensionOrder {
        deadlock: DeadlockAvoidance::Bubble,
        tie: TieRule::Balanced,
    }
}

fn up_down() -> RoutingConfig {
    RoutingConfig::UpDown {
        selection: Selection::Deterministic,
    }
}

fn torus(k: &[u32]) -> Topology {
    build(&TopologyConfig::Torus(GridConfig {
        k: k.to_vec(),
        concentration: 1,
        radix: None,
    }))
    .unwrap()
}

fn event(at: SimTime, kind: FaultKind, action: FaultAction) -> FaultEvent {
    FaultEvent {
        at,
        kind,
        action,
        router: None,
        port: None,
        plane: None,
        lanes: None,
    }
}

fn cable(at: SimTime, r: u32, p: u16, action: FaultAction) -> FaultEvent {
    FaultEvent {
        router: Some(RouterId(r)),
        port: Some(PortIdx(p)),
        ..event(at, FaultKind::Cable, action)
    }
}

fn router(at: SimTime, r: u32, action: FaultAction) -> FaultEvent {
    FaultEvent {
        router: Some(RouterId(r)),
        ..event(at, FaultKind::Router, action)
    }
}

use FaultAction::{Fail, Repair};

enum Ev {
    Net(NetEvent),
    Send(usize),
}

impl From<NetEvent> for Ev {
    fn from(e: NetEvent) -> Self {
        Ev::Net(e)
    }
}

/// A network, its event loop, and batches of packets to send at given times.
struct Bench {
    net: Network,
    q: EventQueue<Ev>,
    sink: Collect,
    batches: Vec<Vec<Packet>>,
    sent: u64,
    next_tag: u64,
    /// Choose each packet's rail with [`Network::least_loaded_rail_to`] when it is sent.
    adaptive_rails: bool,
}

impl Bench {
    fn new(topo: Topology, cfg: FabricConfig, seed: u64) -> Bench {
        let mut net = Network::new(topo, cfg).expect("valid configuration");
        net.set_seed(seed);
        let mut q = EventQueue::new();
        q.reserve_origins(net.origins());
        net.schedule_faults(&mut q);
        Bench {
            net,
            q,
            sink: Collect::default(),
            batches: Vec::new(),
            sent: 0,
            next_tag: 0,
            adaptive_rails: false,
        }
    }

    /// Send a maximum-size packet from `src` to `dst` for every pair, at `t`, on `rail`.
    fn send_at(&mut self, t: SimTime, pairs: &[(u32, u32)], rail: u8) -> Vec<u64> {
        let mut tags = Vec::new();
        let batch = pairs
            .iter()
            .map(|&(s, d)| {
                let mut p = Packet::new(self.next_tag, NodeId(s), NodeId(d), 256, 16, t);
                p.rail = rail;
                tags.push(self.next_tag);
                self.next_tag += 1;
                p
            })
            .collect();
        self.batches.push(batch);
        self.q.schedule(t, Ev::Send(self.batches.len() - 1));
        tags
    }

    fn all_pairs(&self) -> Vec<(u32, u32)> {
        let n = self.net.topo.nodes.len() as u32;
        (0..n)
            .flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d)))
            .collect()
    }

    /// Handle events until none is left, or until the next one is at or after `until`.
    fn run_until(&mut self, until: SimTime) {
        while let Some(t) = self.q.peek_time() {
            if t >= until {
                break;
            }
            let (_, ev) = self.q.pop().expect("peeked");
            match ev {
                Ev::Net(e) => self.net.handle(&mut self.q, e, &mut self.sink),
                Ev::Send(i) => {
                    for mut p in std::mem::take(&mut self.batches[i]) {
                        if self.adaptive_rails {
                            p.rail = self.net.least_loaded_rail_to(p.src, p.dst, 0);
                        }
                        self.net.inject(&mut self.q, p, &mut self.sink).expect("injection");
                        self.sent += 1;
                    }
                }
            }
        }
    }

    fn run(&mut self) {
        self.run_until(SimTime::MAX);
    }

    /// Every packet sent was delivered once or dropped once, nothing is left: the outcome by
    /// tag (None: delivered).
    fn outcome(&self) -> BTreeMap<u64, Option<RouteError>> {
        let c = self.net.counters();
        assert_eq!(self.net.in_flight(), 0, "packets left in flight");
        assert_eq!(self.net.queued_at_sources(), 0, "packets left at their sources");
        assert_eq!(c.injected, self.sent);
        assert_eq!(c.injected, c.delivered + c.dropped, "conservation");
        let mut out = BTreeMap::new();
        for (p, _) in &self.sink.delivered {
            assert!(out.insert(p.tag, None).is_none(), "{} delivered twice", p.tag);
        }
        for d in self.net.drops() {
            assert!(
                out.insert(d.packet.tag, Some(d.reason.clone())).is_none(),
                "{} delivered and dropped, or dropped twice",
                d.packet.tag
            );
        }
        assert_eq!(out.len() as u64, self.sent);
        out
    }

    fn stats(&self) -> FaultStats {
        self.net.fault_stats().expect("fault state")
    }

    fn causes(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for d in self.net.drops() {
            *m.entry(d.reason.cause()).or_insert(0) += 1;
        }
        m
    }
}

/// Failures at time 0, known at once, with tables rewritten at once: the machine as its tables
/// are after a failure.
fn known_at_start(cfg: &mut FabricConfig, events: Vec<FaultEvent>) {
    cfg.faults.events = events;
    cfg.faults.detection = SimTime::ZERO;
    cfg.faults.table_update = SimTime::ZERO;
}

/// Torus 4×4×4 with the first/last-step bypass: every pair is delivered around one failed
/// cable; around one failed router every pair is delivered except those from its node (which
/// cannot send: `source_cable_down`) and to it (undeliverable, dropped at the source:
/// `unreachable`). The bypass routes are at most two hops longer than dimension order.
#[test]
fn torus_bypass_delivers_every_pair_around_one_failed_cable_or_router() {
    let topo = torus(&[4, 4, 4]);
    // Router 21 = (1, 1, 1); router 22 = (2, 1, 1) is a corner of many paths.
    for (what, ev, dead_node) in [
        ("cable r21.p0", cable(SimTime::ZERO, 21, 0, Fail), None),
        ("cable r0.p5", cable(SimTime::ZERO, 0, 5, Fail), None),
        ("router 21", router(SimTime::ZERO, 21, Fail), Some(21u32)),
        ("router 22", router(SimTime::ZERO, 22, Fail), Some(22)),
    ] {
        let mut cfg = fabric(dor(), 2, 16);
        cfg.faults.torus_bypass = true;
        known_at_start(&mut cfg, vec![ev]);
        let healthy = Network::new(topo.clone(), fabric(dor(), 2, 16)).unwrap();
        let mut b = Bench::new(topo.clone(), cfg, 1);
        b.run_until(ns(1));
        let pairs = b.all_pairs();
        b.send_at(ns(1), &pairs, 0);
        b.run();
        let out = b.outcome();
        let s = b.stats();
        assert!(s.bypass_pairs > 0, "{what}: no pair rerouted");
        assert!(s.bypass_last_steps > 0, "{what}: no last step");
        for (i, &(src, dst)) in pairs.iter().enumerate() {
            let got = &out[&(i as u64)];
            match dead_node {
                Some(n) if src == n => assert!(
                    matches!(got, Some(RouteError::SourceCableDown { .. })),
                    "{what}: {src}->{dst}: {got:?}"
                ),
                Some(n) if dst == n => assert!(
                    matches!(got, Some(RouteError::Unreachable { .. })),
                    "{what}: {src}->{dst}: {got:?}"
                ),
                _ => assert!(got.is_none(), "{what}: {src}->{dst} not delivered: {got:?}"),
            }
        }
        for (p, _) in &b.sink.delivered {
            let plain = healthy
                .routing
                .trace(&topo, p.src, p.dst, 0, 0)
                .expect("healthy path")
                .len() as u16;
            assert!(
                p.hops <= plain + 2,
                "{what}: {}->{} took {} routers, plain {plain}",
                p.src,
                p.dst,
                p.hops
            );
        }
        if dead_node.is_some() {
            assert_eq!(
                s.bypass_unreachable, 63,
                "{what}: every source lacks a route to the dead router"
            );
        }
    }
}

/// Deadlock freedom at saturation: every node of a 4×4×4 torus with a failed router sends a
/// burst of 40 packets to pseudo-random destinations at once, many of them on first/last-step
/// routes; the network drains completely (a deadlock would leave packets stuck when the events
/// run out).
#[test]
fn torus_bypass_drains_a_saturating_burst() {
    let topo = torus(&[4, 4, 4]);
    for dead in [21u32, 0, 42] {
        let mut cfg = fabric(dor(), 2, 10);
        cfg.faults.torus_bypass = true;
        known_at_start(&mut cfg, vec![router(SimTime::ZERO, dead, Fail)]);
        let mut b = Bench::new(topo.clone(), cfg, 1);
        b.run_until(ns(1));
        let mut x = 0x2545_F491_4F6C_DD1Du64 ^ dead as u64;
        let mut pairs = Vec::new();
        for s in 0..64u32 {
            for _ in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let d = (x % 64) as u32;
                if d != s && d != dead && s != dead {
                    pairs.push((s, d));
                }
            }
        }
        b.send_at(ns(1), &pairs, 0);
        b.run();
        let out = b.outcome();
        assert!(out.values().all(Option::is_none), "router {dead}: {:?}", b.causes());
        assert!(b.stats().bypass_pairs > 100, "router {dead}");
    }
}

/// A packet on a cable when it fails is lost; the credits it held come back, so after the repair
/// the link carries traffic again at full speed (a mesh with room for exactly one packet per VC
/// would stall for good if one packet's credits leaked).
#[test]
fn a_packet_on_a_failing_cable_is_lost_and_its_credits_come_back() {
    let topo = build(&TopologyConfig::Mesh(GridConfig {
        k: vec![4],
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let healthy = fabric(dor(), 1, 5);
    let mut cfg = healthy.clone();
    // Node 0 → node 2: node 0's cable, then r0 → r1 (from 30 ns), r1 → r2 (from 60 ns; its head
    // is routed at r2 at 90 ns). The cable r1.p0 fails at 75 ns with the packet on it.
    cfg.faults.events = vec![cable(ns(75), 1, 0, Fail), cable(us(5), 1, 0, Repair)];
    cfg.faults.detection = us(1);
    let mut reference = Bench::new(topo.clone(), healthy, 1);
    reference.send_at(us(10), &[(0, 2); 20], 0);
    reference.run();
    let gaps = |b: &Bench| -> Vec<SimTime> { b.sink.delivered.windows(2).map(|w| w[1].1 - w[0].1).collect() };
    let mut b = Bench::new(topo, cfg, 1);
    b.send_at(SimTime::ZERO, &[(0, 2)], 0);
    let later = b.send_at(us(10), &[(0, 2); 20], 0);
    b.run();
    let out = b.outcome();
    assert_eq!(
        out[&0],
        Some(RouteError::LostInCable {
            router: RouterId(1),
            port: PortIdx(0)
        })
    );
    assert!(later.iter().all(|t| out[t].is_none()));
    assert_eq!(b.stats().lost_in_cable, 1);
    // As fast as on a cable that never failed (one packet of buffer: a credit round trip
    // behind the serialisation).
    assert_eq!(gaps(&b), gaps(&reference));
    assert_eq!(gaps(&reference)[18], ns(312));
    let log = b.net.fault_log();
    assert_eq!(log.len(), 2);
    assert_eq!((log[0].action, log[0].detected_ns), ("fail", Some(1075.0)));
}

/// The three phases of a failure on a torus: before detection a packet is sent into the dead
/// cable (lost); after detection, before the tables are rewritten, the router ahead of it has
/// no other port (dropped, `unreachable`); after the rewrite the first/last-step route delivers
/// it. After the repair, once the tables are rewritten again, the plain path is back.
#[test]
fn torus_failure_phases_lost_then_unreachable_then_bypassed() {
    let topo = torus(&[4, 4]);
    let mut cfg = fabric(dor(), 2, 16);
    cfg.faults.torus_bypass = true;
    // Router 1's +x cable (to router 2), on the path of node 0 → node 2 (distance 2 on a ring
    // of 4, a tie that the balanced rule sends the plus way from x = 0): 0 → 1 → 2.
    cfg.faults.events = vec![cable(us(1), 1, 0, Fail), cable(us(20), 1, 0, Repair)];
    cfg.faults.detection = us(2);
    cfg.faults.table_update = us(5);
    let mut b = Bench::new(topo.clone(), cfg, 1);
    let t = [2, 4, 10, 24, 40].map(us);
    let tags: Vec<u64> = t.iter().flat_map(|&at| b.send_at(at, &[(0, 2)], 0)).collect();
    b.run();
    let out = b.outcome();
    assert_eq!(
        out[&tags[0]],
        Some(RouteError::SentIntoFailure {
            router: RouterId(1),
            port: PortIdx(0)
        })
    );
    assert_eq!(
        out[&tags[1]],
        Some(RouteError::Unreachable {
            router: RouterId(1),
            dst: NodeId(2)
        })
    );
    assert_eq!(out[&tags[2]], None);
    assert_eq!(out[&tags[3]], None, "bypass routes stay valid after the repair");
    assert_eq!(out[&tags[4]], None);
    let hops: Vec<u16> = b.sink.delivered.iter().map(|(p, _)| p.hops).collect();
    assert_eq!(hops[0], 3, "plain path 0 → 1 → 2 is 3 routers; the bypass is no longer");
    assert_eq!(hops[2], 3, "back on the plain path after the repair and rewrite");
    let s = b.stats();
    assert_eq!((s.failures, s.repairs, s.table_updates), (1, 1, 2));
    assert_eq!((s.sent_before_detection, s.bypass_pairs), (1, 0));
}

/// Lane renegotiation 4 → 2 → 1 halves the link's bandwidth each step: a stream across the
/// narrowed cable arrives 272, 544, then 1088 ns apart.
#[test]
fn lane_failures_halve_the_bandwidth_each_step() {
    let topo = torus(&[4]);
    let lanes = |at, w: Option<u32>, action| FaultEvent {
        router: Some(RouterId(0)),
        port: Some(PortIdx(0)),
        lanes: w,
        ..event(at, FaultKind::Lanes, action)
    };
    let mut cfg = fabric(dor(), 2, 16);
    cfg.faults.events = vec![
        lanes(us(20), Some(2), Fail),
        lanes(us(40), Some(1), Fail),
        lanes(us(80), None, Repair),
    ];
    let mut b = Bench::new(topo, cfg, 1);
    // Streams of 30 packets from node 0 to node 1 (over cable r0.p0) in each phase.
    for start in [0, 21, 41, 81] {
        b.send_at(us(start), &[(0, 1); 30], 0);
    }
    b.run();
    let out = b.outcome();
    assert!(out.values().all(Option::is_none));
    let times: Vec<SimTime> = b.sink.delivered.iter().map(|(_, t)| *t).collect();
    let gap = |phase: usize| times[phase * 30 + 29] - times[phase * 30 + 28];
    assert_eq!([gap(0), gap(1), gap(2), gap(3)], [272, 544, 1088, 272].map(ns));
    assert_eq!(b.net.injection_rate(NodeId(0), 0), BitsPerSec::gbps(8.0));
}

/// Sunway-like generalized fat tree (2 planes × 4 leaves × 2 spines, 2 nodes per leaf, 2
/// sibling cables per pair).
fn sunway_small() -> Topology {
    build(&gft(2, 4, 2, 2, 2)).unwrap()
}

/// The port of spine `spine` (a router index) going down to leaf router `leaf`.
fn down_port(topo: &Topology, spine: u32, leaf: u32) -> u16 {
    topo.routers[spine as usize]
        .ports
        .iter()
        .position(|p| matches!(p, Peer::Router { router, .. } if router.0 == leaf))
        .expect("spine above leaf") as u16
}

/// A spine's down cable to leaf 1 fails (detected at once, tables rewritten much later): a
/// packet routed to that spine descends to leaf 0, leaf 1's sibling, and crosses the sibling
/// cable (spec 01). Nothing is lost. After the rewrite the leaves send around that spine.
#[test]
fn sibling_cables_carry_the_bypass_of_a_failed_down_cable() {
    let topo = sunway_small();
    let p = down_port(&topo, 4, 1);
    let mut cfg = fabric(up_down(), 2, 16);
    cfg.faults.events = vec![cable(SimTime::ZERO, 4, p, Fail)];
    cfg.faults.detection = SimTime::ZERO;
    cfg.faults.table_update = us(50);
    let mut b = Bench::new(topo, cfg, 1);
    // Every node to nodes 2 and 3 (on leaf 1), before and after the rewrite, on plane 0.
    let pairs: Vec<(u32, u32)> = (0..8)
        .flat_map(|s| [2, 3].map(|d| (s, d)))
        .filter(|(s, d)| s != d)
        .collect();
    b.send_at(us(1), &pairs, 0);
    b.send_at(us(60), &pairs, 0);
    b.run();
    let out = b.outcome();
    assert!(out.values().all(Option::is_none), "{:?}", b.causes());
    let n = pairs.len();
    let detours = |range: std::ops::Range<usize>| {
        b.sink
            .delivered
            .iter()
            .filter(|(p, _)| range.contains(&(p.tag as usize)) && p.hops > 3)
            .count()
    };
    assert!(detours(0..n) > 0, "some packets took the sibling bypass");
    assert_eq!(detours(n..2 * n), 0, "recomputed tables avoid the spine");
}

/// The same failure on a plain leaf–spine (no sibling cables): packets sent to that spine are
/// dropped (`unreachable`) until the recomputed up*/down* tables are installed; afterwards none.
#[test]
fn recomputed_tables_route_a_plain_tree_around_a_failed_down_cable() {
    let topo = build(&TopologyConfig::LeafSpine(LeafSpineConfig {
        leaves: 4,
        spines: 2,
        nodes_per_leaf: 2,
        links_per_spine: 1,
        nodes: None,
        radix: None,
    }))
    .unwrap();
    let p = down_port(&topo, 4, 1);
    let mut cfg = fabric(up_down(), 2, 16);
    cfg.faults.events = vec![cable(SimTime::ZERO, 4, p, Fail)];
    cfg.faults.detection = SimTime::ZERO;
    cfg.faults.table_update = us(50);
    let mut b = Bench::new(topo, cfg, 1);
    let pairs = b.all_pairs();
    let before = b.send_at(us(1), &pairs, 0);
    let after = b.send_at(us(60), &pairs, 0);
    b.run();
    let out = b.outcome();
    let dropped = |tags: &[u64]| tags.iter().filter(|t| out[t].is_some()).count();
    assert!(dropped(&before) > 0);
    assert!(before.iter().filter_map(|t| out[t].as_ref()).all(|r| matches!(
        r,
        RouteError::Unreachable {
            router: RouterId(4),
            ..
        }
    )));
    assert_eq!(dropped(&after), 0);
    assert_eq!(b.stats().table_updates, 1);
}

/// Failures injected while no packet is inside the failed component, detected at once: zero
/// packets lost — a spine router, a leaf's up cable, and a whole plane (the NICs' adaptive rail
/// choice moves everything to the other plane).
#[test]
fn failures_with_nothing_inside_lose_nothing() {
    let topo = sunway_small();
    let up_port = |leaf: usize| {
        topo.routers[leaf]
            .kinds
            .iter()
            .position(|k| *k == PortKind::Up)
            .expect("leaf has up ports") as u16
    };
    let plane = FaultEvent {
        plane: Some(0),
        ..event(us(30), FaultKind::Plane, Fail)
    };
    for (what, fault, adaptive) in [
        ("spine 5", router(us(30), 5, Fail), false),
        ("up cable of leaf 2", cable(us(30), 2, up_port(2), Fail), false),
        ("plane 0", plane, true),
    ] {
        let mut cfg = fabric(up_down(), 2, 16);
        cfg.faults.events = vec![fault];
        cfg.faults.detection = SimTime::ZERO;
        let mut b = Bench::new(topo.clone(), cfg, 1);
        b.adaptive_rails = adaptive;
        let pairs = b.all_pairs();
        // Bursts that have drained long before the failure at 30 us, and after it.
        for t in [0, 10, 31, 40, 50] {
            b.send_at(us(t), &pairs, 0);
        }
        b.run();
        let out = b.outcome();
        assert!(out.values().all(Option::is_none), "{what}: {:?}", b.causes());
        assert_eq!(b.stats().failures, 1, "{what}");
        if adaptive {
            // After the failure, plane 0 carries nothing.
            let late = b
                .sink
                .delivered
                .iter()
                .filter(|(p, _)| p.tag as usize >= 2 * pairs.len());
            assert!(
                late.clone().count() > 0 && late.into_iter().all(|(p, _)| p.rail == 1),
                "{what}"
            );
        }
    }
}

/// Failures under load: the packets inside the failed router (or on its cables, or sent into
/// them before detection) are lost and counted by cause; every other packet is delivered and
/// the conservation law holds.
#[test]
fn packets_inside_a_failing_router_are_lost_and_counted() {
    let topo = sunway_small();
    let mut cfg = fabric(up_down(), 2, 16);
    cfg.faults.events = vec![router(ns(1500), 4, Fail)];
    cfg.faults.detection = ns(500);
    let mut b = Bench::new(topo, cfg, 1);
    let pairs = b.all_pairs();
    // Four rounds of all-to-all at once: queues at every spine when it fails.
    for _ in 0..4 {
        b.send_at(SimTime::ZERO, &pairs, 0);
    }
    b.run();
    let out = b.outcome();
    let s = b.stats();
    assert!(s.lost_in_router > 0, "{s:?}");
    let lost = out.values().filter(|o| o.is_some()).count() as u64;
    assert_eq!(lost, s.lost_in_router + s.lost_in_cable + s.sent_before_detection);
    assert!(out
        .values()
        .flatten()
        .all(|r| r.is_loss() && !matches!(r, RouteError::Unreachable { .. })));
    assert!(lost < out.len() as u64 / 4, "most packets are delivered");
}

/// Random failures from the MTBF model are a function of the seed: two runs with one seed fail
/// the same components at the same times and lose the same packets; another seed differs.
#[test]
fn random_failures_are_deterministic_per_seed() {
    let topo = torus(&[4, 4]);
    let run = |seed: u64| {
        let mut cfg = fabric(dor(), 2, 16);
        cfg.faults.torus_bypass = true;
        cfg.faults.random = vec![
            RandomFaults {
                class: FaultClass::Cable,
                mtbf: us(100),
                repair: us(3),
                from: SimTime::ZERO,
                until: us(40),
            },
            RandomFaults {
                class: FaultClass::Router,
                mtbf: us(400),
                repair: us(5),
                from: us(5),
                until: us(40),
            },
        ];
        cfg.faults.detection = ns(200);
        cfg.faults.table_update = us(1);
        let mut b = Bench::new(topo.clone(), cfg, seed);
        let pairs = b.all_pairs();
        for t in 0..40 {
            b.send_at(us(t), &pairs, 0);
        }
        b.run();
        let out = b.outcome();
        let log: Vec<String> = b.net.fault_log().iter().map(|r| format!("{r:?}")).collect();
        (log, out, b.stats())
    };
    let (a, b, c) = (run(7), run(7), run(8));
    assert!(a.0.len() >= 6, "{:?}", a.0);
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    assert_eq!(a.2, b.2);
    assert_ne!(a.0, c.0);
    assert!(a.2.failures > 0 && a.2.repairs > 0);
}

/// A fault scheduled during a run at a time already past is refused, naming the key.
#[test]
fn a_fault_in_the_past_is_refused() {
    let topo = torus(&[4, 4]);
    let mut b = Bench::new(topo, fabric(dor(), 2, 16), 1);
    b.send_at(us(2), &[(0, 1)], 0);
    b.run();
    let err = b.net.schedule_fault(&mut b.q, &router(us(1), 3, Fail)).unwrap_err();
    assert_eq!(err.key, "faults.events.at");
    assert!(err.reason.contains("in the past"), "{err}");
    let err = b.net.schedule_fault(&mut b.q, &router(us(10), 99, Fail)).unwrap_err();
    assert!(err.reason.contains("does not exist"), "{err}");
    b.net.schedule_fault(&mut b.q, &router(us(10), 3, Fail)).unwrap();
    b.run();
    assert_eq!(b.net.fault_log().len(), 1);
}
