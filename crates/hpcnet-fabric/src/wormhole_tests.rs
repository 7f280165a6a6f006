//! Tests of the wormhole engine: zero-load latency against the cut-through formula, per-flit
//! credits with a one-flit buffer, flit conservation and non-interleaving on every VC under
//! load, deadlock freedom of dateline VCs at saturation (and a deadlock found without them),
//! determinism, one run of flits per input port at input speedup 1, and the keys the mode
//! refuses.
//!
//! Links run at 8 Gb/s (1 byte per ns) with 10 ns latency and routers take 20 ns; flits are
//! 16 B (16 ns), a maximum-size packet is 272 B (17 flits, 272 ns).

use super::super::*;
use crate::config::{
    Arbitration, DeadlockAvoidance, Encoding, FaultConfig, LinkConfig, NodeInjection, PacketConfig, RouterConfig,
    RoutingConfig, Switching, TieRule, VcSelect,
};
use crate::topology::{build, CrossbarConfig, GridConfig, TopologyConfig};
use hpcnet_des::Bytes;
use std::collections::{BTreeMap, BTreeSet};

const L: u64 = 10;
const R: u64 = 20;
const SER: u64 = 272;

fn ns(t: u64) -> SimTime {
    SimTime::from_ns(t)
}

fn fabric(switching: Switching, deadlock: DeadlockAvoidance, vcs: u8, credit_unit: u64, private: u32) -> FabricConfig {
    FabricConfig {
        link: LinkConfig {
            lanes: 1,
            lane_rate: BitsPerSec::gbps(8.0),
            encoding: Encoding::None,
            latency: ns(L),
            switching,
            ber: 0.0,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs,
            credit_unit: Bytes(credit_unit),
            private_credits: private,
            shared_credits: 0,
            latency: ns(R),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            ..RouterConfig::default()
        },
        packet: PacketConfig {
            header: Bytes(16),
            max_payload: Bytes(256),
        },
        routing: RoutingConfig::DimensionOrder {
            deadlock,
            tie: TieRule::Positive,
        },
        faults: FaultConfig::default(),
    }
}

fn worm(vcs: u8, credit_unit: u64, private: u32) -> FabricConfig {
    fabric(
        Switching::Wormhole,
        DeadlockAvoidance::Dateline,
        vcs,
        credit_unit,
        private,
    )
}

fn grid(k: &[u32], wrap: bool) -> Topology {
    let g = GridConfig {
        k: k.to_vec(),
        concentration: 1,
        radix: None,
    };
    build(&if wrap {
        TopologyConfig::Torus(g)
    } else {
        TopologyConfig::Mesh(g)
    })
    .unwrap()
}

/// Runs every pending event; returns the deliveries (tag, time, hops) in order. After each
/// event, checks the flit conservation law when the network is in wormhole mode.
fn run(net: &mut Network, q: &mut EventQueue<NetEvent>) -> Vec<(u64, SimTime, u16)> {
    let mut out = Vec::new();
    while let Some((_, ev)) = q.pop() {
        let mut sink = Collect::default();
        net.handle(q, ev, &mut sink);
        out.extend(sink.delivered.into_iter().map(|(p, at)| (p.tag, at, p.hops)));
        if let Some(c) = net.flit_counters() {
            assert_eq!(c.injected, c.ejected + c.dropped + c.buffered, "flits conserved: {c:?}");
        }
    }
    out
}

fn send(net: &mut Network, q: &mut EventQueue<NetEvent>, tag: u64, src: u32, dst: u32, payload: u32) {
    net.inject(
        q,
        Packet::new(tag, NodeId(src), NodeId(dst), payload, 16, q.now()),
        &mut Collect::default(),
    )
    .unwrap();
}

fn one(topo: Topology, cfg: FabricConfig, src: u32, dst: u32, payload: u32) -> (SimTime, u16) {
    let mut net = Network::new(topo, cfg).unwrap();
    let mut q = EventQueue::new();
    send(&mut net, &mut q, 1, src, dst, payload);
    let d = run(&mut net, &mut q);
    assert_eq!(d.len(), 1);
    (d[0].1, d[0].2)
}

#[test]
fn zero_load_latency_is_the_cut_through_formula() {
    // (H + 1) link latencies, H router latencies, one serialisation of the packet: a packet
    // alone on the network is pipelined flit by flit exactly as virtual cut-through pipelines it,
    // when a VC buffer covers the credit round trip (here 32 flits for 2L + R + a flit = 56 ns).
    for (topo, src, dst, hops) in [
        (grid(&[4], false), 0, 3, 4u64),
        (grid(&[4, 4], true), 0, 10, 5),
        (
            build(&TopologyConfig::Crossbar(CrossbarConfig { ports: 2, radix: None })).unwrap(),
            0,
            1,
            1,
        ),
    ] {
        for payload in [256u32, 100, 1] {
            let bytes = payload as u64 + 16;
            let formula = ns((hops + 1) * L + hops * R + bytes);
            let w = one(topo.clone(), worm(2, 64, 8), src, dst, payload);
            let vct = one(
                topo.clone(),
                fabric(Switching::CutThrough, DeadlockAvoidance::Dateline, 2, 64, 8),
                src,
                dst,
                payload,
            );
            assert_eq!(w, (formula, hops as u16), "wormhole, {payload} B payload");
            assert_eq!(vct, w, "cut-through and wormhole agree at zero load");
        }
    }
    assert_eq!(SER, 16 + 256);
}

#[test]
fn one_flit_buffers_send_one_flit_per_credit_round_trip() {
    // A one-flit VC buffer: flit i leaves the node only when flit i − 1 has left the router and
    // its credit is back, every 2L + R = 40 ns. The last of 17 flits leaves at 16 × 40 ns,
    // crosses the router (L + R) and its 16 ns, and reaches the node L later.
    let topo = build(&TopologyConfig::Crossbar(CrossbarConfig { ports: 2, radix: None })).unwrap();
    let (at, _) = one(topo, worm(1, 16, 1), 0, 1, 256);
    assert_eq!(at, ns(16 * (2 * L + R) + L + R + 16 + L));
    assert!(
        at > ns(2 * L + R + SER),
        "slower than cut-through with whole-packet buffers"
    );
}

/// Checks the flit trace: on every (output, VC) the flits of one packet go in order 0 … n−1,
/// and a packet starts only after the previous one's tail.
fn check_no_interleaving(trace: &[super::FlitSent]) {
    let mut chan: BTreeMap<(u32, u8), (PacketId, u16, u16)> = BTreeMap::new();
    for &(o, vc, id, i, n) in trace {
        let e = chan.entry((o, vc)).or_insert((NIL, 0, 0));
        if i == 0 {
            assert_eq!(
                e.1, e.2,
                "packet {id} starts on output {o} VC {vc} before the tail of packet {}",
                e.0
            );
            *e = (id, 1, n);
        } else {
            assert_eq!(
                (e.0, e.1),
                (id, i),
                "output {o} VC {vc}: flit {i} of packet {id} out of turn"
            );
            e.1 += 1;
        }
    }
    assert!(chan.values().all(|e| e.1 == e.2), "every packet's tail was sent");
}

/// Every node sends `per_node` packets of `payload` bytes to random destinations at time 0
/// (a burst far beyond saturation); returns the deliveries and the network.
fn burst(
    topo: Topology,
    cfg: FabricConfig,
    per_node: u64,
    payload: u32,
    seed: u64,
) -> (Vec<(u64, SimTime, u16)>, Network) {
    let n = topo.nodes.len() as u64;
    let mut net = Network::new(topo, cfg).unwrap();
    net.worm.as_mut().unwrap().trace = Some(Vec::new());
    let mut q = EventQueue::new();
    let mut x = seed;
    for k in 0..per_node {
        for s in 0..n {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let d = (s + 1 + (x >> 33) % (n - 1)) % n;
            send(&mut net, &mut q, k * n + s, s as u32, d as u32, payload);
        }
    }
    let d = run(&mut net, &mut q);
    (d, net)
}

#[test]
fn saturated_torus_with_dateline_vcs_delivers_everything_once_in_order_per_vc() {
    // 4×4×4 torus, 2 VCs (dateline), buffers of 8 flits (less than a 17-flit packet, so
    // blocked packets span several routers), 20 packets from every node at once.
    let (d, net) = burst(grid(&[4, 4, 4], true), worm(2, 64, 2), 20, 256, 7);
    assert_eq!(d.len(), 64 * 20);
    let tags: BTreeSet<u64> = d.iter().map(|x| x.0).collect();
    assert_eq!(tags.len(), d.len(), "each packet delivered exactly once");
    let c = net.flit_counters().unwrap();
    assert_eq!((c.injected, c.ejected, c.buffered), (64 * 20 * 17, 64 * 20 * 17, 0));
    assert_eq!(net.in_flight(), 0);
    assert!(net.deadlock_cycle().is_none());
    check_no_interleaving(net.worm.as_ref().unwrap().trace.as_ref().unwrap());
}

#[test]
fn short_packets_at_saturation_on_an_8x8_torus() {
    let (d, net) = burst(grid(&[8, 8], true), worm(2, 16, 2), 30, 16, 3);
    assert_eq!(d.len(), 64 * 30);
    assert_eq!(net.flit_counters().unwrap().ejected, 64 * 30 * 2);
    check_no_interleaving(net.worm.as_ref().unwrap().trace.as_ref().unwrap());
}

#[test]
fn without_dateline_vcs_small_buffers_deadlock_and_are_reported() {
    // The same burst on a ring with no deadlock scheme and 4-flit buffers: worms close the
    // ring's cycle and stop. The watchdog's evidence names the stuck VCs.
    let cfg = fabric(Switching::Wormhole, DeadlockAvoidance::None, 1, 64, 1);
    let (d, net) = burst(grid(&[8], true), cfg, 20, 256, 1);
    assert!(d.len() < 8 * 20, "some packets are stuck");
    let cycle = net.deadlock_cycle().expect("a deadlock");
    assert!(!cycle.is_empty());
    assert!(!net.moving(SimTime::from_us(1_000)));
}

#[test]
fn same_injections_give_identical_deliveries() {
    let a = burst(grid(&[4, 4], true), worm(2, 64, 2), 10, 200, 5).0;
    let b = burst(grid(&[4, 4], true), worm(2, 64, 2), 10, 200, 5).0;
    assert_eq!(a, b);
}

/// Delivery times (ns) by tag of the input-port contention case of the packet engine's tests,
/// in wormhole mode on a 6-port crossbar with 2 VCs of 80 flits: nodes 3 and 4 occupy the
/// outputs to nodes 1 and 2 with one packet each (X on VC 0, Y on VC 1, both sending from
/// L + R to L + R + SER); node 0 sends a 2-flit packet Z, then A to node 1 on VC 1 and B to
/// node 2 on VC 0, back to back on its link. A's head reaches the crossbar at 32 + L + R and
/// waits for X; A's run of flits then holds the input port from L + R + SER until its tail
/// has left. B's head is routed at 32 + SER + L + R, while A is still being read out of the
/// same input port on the other VC.
fn input_contention(input_speedup: u32) -> BTreeMap<u64, u64> {
    let mut cfg = fabric(Switching::Wormhole, DeadlockAvoidance::None, 2, 64, 20);
    cfg.router.vc_select = VcSelect::Packet;
    cfg.router.input_speedup = input_speedup;
    let topo = build(&TopologyConfig::Crossbar(CrossbarConfig { ports: 6, radix: None })).unwrap();
    let mut net = Network::new(topo, cfg).unwrap();
    net.worm.as_mut().unwrap().trace = Some(Vec::new());
    let mut q = EventQueue::new();
    for (tag, src, dst, payload, class) in [
        (10, 3, 1, 256, 0), // X
        (11, 4, 2, 256, 1), // Y
        (1, 0, 5, 16, 0),   // Z: 32 B, 2 flits, 32 ns
        (2, 0, 1, 256, 1),  // A
        (3, 0, 2, 256, 0),  // B
    ] {
        let mut p = Packet::new(tag, NodeId(src), NodeId(dst), payload, 16, q.now());
        p.class = class;
        net.inject(&mut q, p, &mut Collect::default()).unwrap();
    }
    let d = run(&mut net, &mut q);
    let c = net.flit_counters().unwrap();
    assert_eq!((c.injected, c.ejected, c.buffered), (2 + 4 * 17, 2 + 4 * 17, 0));
    check_no_interleaving(net.worm.as_ref().unwrap().trace.as_ref().unwrap());
    d.into_iter().map(|(tag, at, _)| (tag, at.0 / 1000)).collect()
}

/// One run of flits per input port at a time at input speedup 1 (two VCs contending for one
/// input port), the same times as the packet engine gives in this case: with speedup 2 (= VCs,
/// no constraint) B crosses the crossbar as soon as it is routed, while A is still being read
/// out of the same input on the other VC; with speedup 1 B waits for A's tail, a whole
/// serialisation later. Every other packet is unaffected.
#[test]
fn input_speedup_one_lets_one_packet_leave_an_input_port_at_a_time() {
    let z = 32;
    let a_start = L + R + SER; // after X on the output to node 1
    let b_routed = z + SER + L + R; // B's head, behind Z and A on node 0's link
    let free = input_contention(2);
    let one = input_contention(1);
    assert_eq!(free[&1], 2 * L + R + z, "Z alone");
    for t in [&free, &one] {
        assert_eq!((t[&10], t[&11]), (2 * L + R + SER, 2 * L + R + SER), "X and Y");
        assert_eq!(t[&2], a_start + SER + L, "A waits for X only");
        assert_eq!(t[&1], free[&1]);
        assert_eq!(t.len(), 5);
    }
    assert!(
        b_routed < a_start + SER,
        "B is routed while A is read out: the case contends"
    );
    assert_eq!(free[&3], b_routed + SER + L, "without the constraint B leaves at once");
    assert_eq!(one[&3], a_start + SER + SER + L, "speedup 1: B follows A's tail");
}

#[test]
fn refused_combinations_name_their_key() {
    let torus = grid(&[4, 4], true);
    let err = |cfg: FabricConfig| Network::new(torus.clone(), cfg).err().expect("refused").key;
    let bubble = fabric(Switching::Wormhole, DeadlockAvoidance::Bubble, 2, 64, 16);
    assert_eq!(err(bubble), "routing.deadlock");
    let mut c = worm(2, 64, 8);
    c.link.flit_bytes = Some(Bytes(24));
    assert_eq!(err(c), "router.credit_unit");
    let mut c = worm(2, 64, 8);
    c.link.flit_bytes = Some(Bytes(0));
    assert_eq!(err(c), "link.flit_bytes");
    let mut c = worm(2, 64, 8);
    c.link.ber = 1e-12;
    assert_eq!(err(c), "link.ber");
    let mut c = worm(2, 64, 8);
    c.router.shared_credits = 4;
    assert_eq!(err(c), "router.shared_credits");
    let mut c = worm(2, 64, 8);
    c.router.allocator = Some(crate::alloc::Allocator::Islip);
    assert_eq!(err(c), "router.allocator");
    let mut c = fabric(Switching::CutThrough, DeadlockAvoidance::Dateline, 2, 64, 8);
    c.link.flit_bytes = Some(Bytes(16));
    assert_eq!(err(c), "link.flit_bytes");
    // Buffers smaller than a packet are the point of wormhole switching: accepted.
    assert!(Network::new(torus.clone(), worm(2, 16, 1)).is_ok());
    let mut net = Network::new(torus.clone(), worm(2, 64, 8)).unwrap();
    let e = net.program_multicast(3, 0, NodeId(0), &[NodeId(1)]).unwrap_err();
    assert!(matches!(e, crate::MulticastError::Unsupported { group: 3 }), "{e}");
}
