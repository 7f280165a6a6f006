//! Link-level reliability in the packet network ([`hpcnet_fabric::linkerr`]): the throughput a
//! bounded replay buffer leaves a link and the goodput of go-back-N under bit errors, against
//! their closed forms; every packet delivered exactly once under errors, deterministically;
//! corrupted copies forwarded by cut-through receivers and the fallback to store-and-forward on
//! a noisy link only; lane renegotiation; and the refusal of bad link-level keys.
//!
//! Links run at 8 Gb/s (1 byte per ns), so a 272-byte packet (16 B header + 256 B payload)
//! serialises in T = 272 ns and every closed form below is a small sum of nanoseconds.

use hpcnet_des::{BitsPerSec, Bytes, EventQueue, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::linkerr::{gbn_goodput, packet_error_probability, replay_throughput};
use hpcnet_fabric::topology::{build, CrossbarConfig, GridConfig, NodeId, PortIdx, RouterId, TopologyConfig};
use hpcnet_fabric::{Collect, NetEvent, Network, Packet};
use std::collections::BTreeSet;

const T: u64 = 272; // ns
const ROUTER: u64 = 20; // ns

fn ns(t: u64) -> SimTime {
    SimTime::from_ns(t)
}

fn fabric(latency_ns: u64, ber: f64) -> FabricConfig {
    FabricConfig {
        link: LinkConfig {
            lanes: 1,
            lane_rate: BitsPerSec::gbps(8.0),
            encoding: Encoding::None,
            latency: ns(latency_ns),
            switching: Switching::CutThrough,
            ber,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs: 1,
            credit_unit: Bytes(16),
            // Far more than a credit round trip's worth: credits never limit here.
            private_credits: 4000,
            shared_credits: 0,
            latency: ns(ROUTER),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
        },
        packet: PacketConfig {
            header: Bytes(16),
            max_payload: Bytes(256),
        },
        routing: RoutingConfig::default_for_kind("crossbar"),
        faults: FaultConfig::default(),
    }
}

fn crossbar_net(cfg: FabricConfig, seed: u64) -> Network {
    let topo = build(&TopologyConfig::Crossbar(CrossbarConfig { ports: 2, radix: None })).unwrap();
    let mut net = Network::new(topo, cfg).unwrap();
    net.set_seed(seed);
    net
}

/// Queue `n` maximum-size packets from node 0 to node 1 at time 0 and run to the end; the
/// delivery times in delivery order, checked to be the `n` tags exactly once.
fn stream(net: &mut Network, n: u64) -> Vec<SimTime> {
    let mut q: EventQueue<NetEvent> = EventQueue::new();
    let mut sink = Collect::default();
    let before = net.counters();
    for tag in 0..n {
        net.inject(
            &mut q,
            Packet::new(tag, NodeId(0), NodeId(1), 256, 16, SimTime::ZERO),
            &mut sink,
        )
        .unwrap();
    }
    while let Some((_, ev)) = q.pop() {
        net.handle(&mut q, ev, &mut sink);
    }
    let tags: Vec<u64> = sink.delivered.iter().map(|(p, _)| p.tag).collect();
    let misplaced = tags.iter().enumerate().find(|(i, t)| *i as u64 != **t);
    assert!(
        tags.len() as u64 == n && misplaced.is_none(),
        "every packet once, in order (go-back-N): {} delivered, first misplaced {misplaced:?}",
        tags.len()
    );
    let c = net.counters();
    assert_eq!(
        (
            c.injected - before.injected,
            c.delivered - before.delivered,
            c.dropped,
            net.in_flight()
        ),
        (n, n, 0, 0)
    );
    sink.delivered.iter().map(|(_, t)| *t).collect()
}

#[test]
fn replay_buffer_and_round_trip_bound_the_link_rate() {
    // Round trip R = 2 × 300 ns + 20 ns; a buffer of two packets: 2 T / (T + R) = 544 / 892.
    let mut cfg = fabric(300, 0.0);
    cfg.link.replay_buffer = Some(Bytes(2 * 272));
    cfg.link.ack_delay = ns(20);
    let mut net = crossbar_net(cfg.clone(), 1);
    let n = 400;
    let at = stream(&mut net, n);
    // The first two packets leave back to back, the next waits for the first acknowledgement:
    // pairs of deliveries T apart, one pair every T + R.
    for k in 0..(n as usize - 2) {
        assert_eq!(at[k + 2] - at[k], ns(T + 620), "packet {k}");
    }
    let per_packet = (at[n as usize - 1] - at[1]).ps() as f64 / (n as f64 - 2.0);
    let simulated = T as f64 * 1000.0 / per_packet;
    let closed = replay_throughput(544, None, 272, ns(T), ns(620));
    assert!((simulated / closed - 1.0).abs() < 1e-9, "{simulated} vs {closed}");
    assert!((closed - 544.0 / 892.0).abs() < 1e-12);
    let c = net.link_counters();
    assert!(c.replay_stalls > 0 && c.retransmissions == 0);

    // A packet limit of one: T / (T + R), whatever the bytes.
    let mut one = cfg.clone();
    one.link.replay_buffer = Some(Bytes(64 << 10));
    one.link.replay_packets = Some(1);
    let at = stream(&mut crossbar_net(one, 1), 50);
    assert!(at.windows(2).all(|w| w[1] - w[0] == ns(T + 620)));

    // A buffer covering the round trip: line rate.
    let mut big = cfg;
    big.link.replay_buffer = Some(Bytes(4 * 272));
    assert_eq!(replay_throughput(4 * 272, None, 272, ns(T), ns(620)), 1.0);
    let at = stream(&mut crossbar_net(big, 1), 50);
    assert!(at.windows(2).all(|w| w[1] - w[0] == ns(T)));
}

#[test]
fn go_back_n_goodput_matches_its_closed_form() {
    // Errors on node 0's cable only (both directions; node 0 only sends), b = 1e-4 per bit:
    // p = 1 − (1 − b)^2176 ≈ 0.196 of transmissions corrupted; round trip 1 us; the replay
    // buffer does not limit. Store-and-forward at the router, so no corrupted copy travels on.
    let mut cfg = fabric(500, 0.0);
    cfg.link_overrides.push(LinkOverride {
        router: RouterId(0),
        port: PortIdx(0),
        lanes: None,
        latency: None,
        switching: Some(Switching::StoreAndForward),
        ber: Some(1e-4),
    });
    let mut net = crossbar_net(cfg, 7);
    let n = 100_000u64;
    let at = stream(&mut net, n);
    let c = net.link_counters();
    let k = c.retransmissions;
    let (t, r) = (ns(T), ns(1000));
    // Exact: the source link sends back to back, each corrupted transmission costing T + R;
    // a store-and-forward router forwards each packet once its tail is in (lat + T + router),
    // and the ejection link is free: the last packet lands at
    // (n − 1) T + k (T + R) + [lat + T + router] + [T + lat].
    let last = t * (n - 1) + (t + r) * k + ns(500 + T + ROUTER) + ns(T + 500);
    assert_eq!(*at.last().unwrap(), last);
    // The error process: k of n + k transmissions corrupted, p within 4 standard deviations.
    let p = packet_error_probability(1e-4, 272);
    let m = (n + k) as f64;
    let p_hat = k as f64 / m;
    assert!((p_hat - p).abs() < 4.0 * (p * (1.0 - p) / m).sqrt(), "{p_hat} vs {p}");
    assert!(c.corrupted_packets <= k && c.corrupted_packets as f64 > 0.9 * k as f64 * (1.0 - p));
    // Goodput against go-back-N's closed form: the per-packet time has a standard deviation of
    // (T + R) sqrt(p)/(1 − p); allow 4 of its standard errors.
    let simulated = (t * n).ps() as f64 / (t * (n - 1) + (t + r) * k + t).ps() as f64;
    let closed = gbn_goodput(1e-4, 272, t, r);
    let mean = t.ps() as f64 / closed;
    let sd = (t + r).ps() as f64 * p.sqrt() / (1.0 - p) / (n as f64).sqrt();
    let tol = 4.0 * sd / mean;
    assert!(
        (simulated / closed - 1.0).abs() < tol,
        "{simulated} vs {closed} (tolerance {tol})"
    );
    assert!(tol < 0.02, "tolerance {tol}");
    // The round trip matters: the same errors with a short cable cost less.
    assert!(gbn_goodput(1e-4, 272, t, ns(20)) > closed + 0.2);
    assert_eq!(c.corrupt_forwarded, 0, "store-and-forward forwards no corrupted packet");
}

#[test]
fn cut_through_forwards_corrupted_copies_that_the_next_receiver_discards() {
    // The same noisy cable, cut-through at the router: the head of each corrupted copy is
    // forwarded before its tail shows the bad CRC (router latency 20 ns < T), so node 1's NIC
    // sees it and drops it. Deliveries are the same packets, once each.
    let mut cfg = fabric(500, 0.0);
    cfg.link_overrides.push(LinkOverride {
        router: RouterId(0),
        port: PortIdx(0),
        lanes: None,
        latency: None,
        switching: None,
        ber: Some(1e-4),
    });
    let mut net = crossbar_net(cfg, 7);
    stream(&mut net, 2000);
    let c = net.link_counters();
    assert!(c.retransmissions > 100);
    assert_eq!(c.corrupt_forwarded, c.retransmissions);
    let per_link = net.link_errors();
    assert_eq!(per_link.len(), 1, "{per_link:?}");
    assert_eq!(per_link[0].from, "n0.rail0");
}

/// A 4×4 torus with uniform random traffic: `n` packets per node over 2 us; returns the
/// deliveries (tag, time) and the network.
fn torus_run(cfg: FabricConfig, seed: u64, n: u64) -> (Vec<(u64, SimTime)>, Network) {
    let topo = build(&TopologyConfig::Torus(GridConfig {
        k: vec![4, 4],
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let mut net = Network::new(topo, cfg).unwrap();
    net.set_seed(seed);
    let mut q: EventQueue<NetEvent> = EventQueue::new();
    let mut sink = Collect::default();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut pkts = Vec::new();
    for src in 0..16u32 {
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let dst = (src + 1 + (x % 15) as u32) % 16;
            let at = ns(i * 2000 / n);
            pkts.push((
                at,
                Packet::new(src as u64 * n + i, NodeId(src), NodeId(dst), 256, 16, at),
            ));
        }
    }
    pkts.sort_by_key(|p| p.0);
    for (at, p) in pkts {
        while let Some((_, ev)) = q.pop_before(at) {
            net.handle(&mut q, ev, &mut sink);
        }
        q.advance_to(at);
        net.inject(&mut q, p, &mut sink).unwrap();
    }
    while let Some((_, ev)) = q.pop() {
        net.handle(&mut q, ev, &mut sink);
    }
    let d = sink.delivered.iter().map(|(p, t)| (p.tag, *t)).collect();
    (d, net)
}

fn torus_cfg(ber: f64) -> FabricConfig {
    let mut cfg = fabric(10, ber);
    cfg.routing = RoutingConfig::default_for_kind("torus");
    cfg.router.private_credits = 64;
    cfg.link.replay_buffer = Some(Bytes(2048));
    cfg
}

fn mean_latency(d: &[(u64, SimTime)], n: u64) -> f64 {
    // Creation times are i × 2000 / n ns for tag src × n + i.
    d.iter()
        .map(|(tag, t)| (*t - ns((tag % n) * 2000 / n)).ps() as f64)
        .sum::<f64>()
        / d.len() as f64
}

#[test]
fn errors_lose_nothing_cost_latency_and_repeat_exactly() {
    let n = 40;
    let (clean, net0) = torus_run(torus_cfg(0.0), 3, n);
    let (noisy, net) = torus_run(torus_cfg(1e-5), 3, n);
    // Every packet exactly once.
    let tags: BTreeSet<u64> = noisy.iter().map(|d| d.0).collect();
    assert_eq!((tags.len(), noisy.len()), (16 * n as usize, 16 * n as usize));
    let c = net.counters();
    assert_eq!((c.injected, c.delivered, c.dropped, net.in_flight()), (640, 640, 0, 0));
    let l = net.link_counters();
    assert!(l.retransmissions > 10, "{l:?}");
    assert_eq!(net0.link_counters().retransmissions, 0);
    // Retransmissions cost time.
    let (a, b) = (mean_latency(&clean, n), mean_latency(&noisy, n));
    assert!(b > a * 1.01, "mean latency {a} ps without errors, {b} ps with");
    // Same seed, same run; another seed, other errors.
    let (again, net2) = torus_run(torus_cfg(1e-5), 3, n);
    assert_eq!(noisy, again);
    assert_eq!(net2.link_counters(), l);
    let (other, _) = torus_run(torus_cfg(1e-5), 4, n);
    assert_ne!(noisy, other);
}

#[test]
fn a_noisy_link_falls_back_to_store_and_forward_and_clean_ones_do_not() {
    let noisy = (RouterId(5), PortIdx(0));
    let mut cfg = torus_cfg(1e-9);
    cfg.link.fallback_errors = 3;
    cfg.link.fallback_window = SimTime::from_us(5);
    cfg.link_overrides.push(LinkOverride {
        router: noisy.0,
        port: noisy.1,
        lanes: None,
        latency: None,
        switching: None,
        ber: Some(2e-4),
    });
    let (d, net) = torus_run(cfg.clone(), 3, 40);
    assert_eq!(d.len(), 640);
    let per_link = net.link_errors();
    let fell: Vec<&str> = per_link
        .iter()
        .filter(|l| l.counters.saf_fallbacks > 0)
        .map(|l| l.from.as_str())
        .collect();
    assert!(!fell.is_empty(), "{per_link:?}");
    // Only the two directions of the noisy cable (r5.p0 and its peer's port back) fell back.
    let topo = &net.topo;
    let peer = match topo.routers[5].ports[0] {
        hpcnet_fabric::topology::Peer::Router { router, port } => format!("r{}.p{}", router.0, port.0),
        _ => unreachable!(),
    };
    assert!(fell.iter().all(|f| *f == "r5.p0" || *f == peer), "{fell:?}");
    assert!(net.receives_store_and_forward(noisy.0, noisy.1));
    // After the switch, corrupted packets stop at the receiver: fewer are forwarded than
    // were corrupted.
    let l = per_link.iter().find(|l| l.from == "r5.p0").unwrap();
    assert!(l.counters.corrupt_forwarded < l.counters.retransmissions, "{l:?}");
    // Without the fallback rule every corrupted packet's head had been forwarded.
    cfg.link.fallback_errors = 0;
    let (_, net) = torus_run(cfg, 3, 40);
    let l = net.link_errors().into_iter().find(|l| l.from == "r5.p0").unwrap();
    assert_eq!(l.counters.saf_fallbacks, 0);
    assert!(!net.receives_store_and_forward(noisy.0, noisy.1));
}

#[test]
fn lane_renegotiation_changes_the_rate_and_refuses_other_widths() {
    let mut cfg = fabric(10, 0.0);
    cfg.link.lanes = 4;
    cfg.link.lane_rate = BitsPerSec::gbps(2.0);
    let mut net = crossbar_net(cfg, 1);
    let at = stream(&mut net, 3);
    assert_eq!(at[1] - at[0], ns(T));
    let rate = net.set_link_lanes(RouterId(0), PortIdx(1), 2).unwrap();
    assert_eq!(rate, BitsPerSec::gbps(4.0));
    // The ejection link to node 1 now takes 2 T per packet.
    let at = stream(&mut net, 3);
    assert_eq!(at[2] - at[1], ns(2 * T));
    for bad in [3, 8, 0] {
        let e = net.set_link_lanes(RouterId(0), PortIdx(1), bad).unwrap_err();
        assert!(
            e.key.contains("router 0 port 1")
                && e.reason.contains("4, 2, 1")
                && e.reason.contains(&format!("got {bad}")),
            "{e}"
        );
    }
    assert!(net.set_link_lanes(RouterId(0), PortIdx(7), 2).is_err());
}

#[test]
fn bad_link_level_values_are_refused_naming_the_key() {
    let check = |f: &dyn Fn(&mut FabricConfig), key: &str, words: &str| {
        let mut cfg = fabric(10, 0.0);
        f(&mut cfg);
        let e = cfg.validate_for_kind("crossbar").unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.reason.contains(words), "{e}");
    };
    check(&|c| c.link.ber = -1e-9, "link.ber", "at least 0 and below 1");
    check(&|c| c.link.ber = 1.0, "link.ber", "at least 0 and below 1");
    check(&|c| c.link.ber = f64::NAN, "link.ber", "at least 0 and below 1");
    check(&|c| c.link.ber = 0.01, "link.ber", "transmissions on average");
    check(
        &|c| c.link.replay_buffer = Some(Bytes(0)),
        "link.replay_buffer",
        "at least one",
    );
    check(
        &|c| c.link.replay_buffer = Some(Bytes(100)),
        "link.replay_buffer",
        "cannot hold",
    );
    check(
        &|c| c.link.replay_packets = Some(0),
        "link.replay_packets",
        "at least 1",
    );
    check(&|c| c.link.fallback_errors = 5000, "link.fallback_errors", "at most");
    check(
        &|c| {
            c.link_overrides.push(LinkOverride {
                router: RouterId(0),
                port: PortIdx(0),
                lanes: Some(3),
                latency: None,
                switching: None,
                ber: None,
            })
        },
        "link_overrides[0].lanes",
        "got 3",
    );
    check(
        &|c| {
            c.link_overrides.push(LinkOverride {
                router: RouterId(0),
                port: PortIdx(0),
                lanes: None,
                latency: None,
                switching: None,
                ber: Some(2.0),
            })
        },
        "link_overrides[0].ber",
        "below 1",
    );
}

#[test]
fn stomped_copies_give_back_the_receive_buffer_they_took() {
    // Node 1 accepts packets only into two packets' worth of credited receive buffer, freed as
    // it consumes each delivery. Corrupted copies forwarded by the cut-through router take that
    // buffer too; the NIC drops them and the credits must come back, or node 1 starves.
    let mut cfg = fabric(10, 0.0);
    cfg.link_overrides.push(LinkOverride {
        router: RouterId(0),
        port: PortIdx(0),
        lanes: None,
        latency: None,
        switching: None,
        ber: Some(1e-4),
    });
    let mut net = crossbar_net(cfg, 7);
    net.set_ejection_credits(34); // two 272-byte packets in 16-byte credits
    let mut q: EventQueue<NetEvent> = EventQueue::new();
    let mut sink = Collect::default();
    let n = 300;
    for tag in 0..n {
        net.inject(
            &mut q,
            Packet::new(tag, NodeId(0), NodeId(1), 256, 16, SimTime::ZERO),
            &mut sink,
        )
        .unwrap();
    }
    let mut got = Vec::new();
    while let Some((_, ev)) = q.pop() {
        net.handle(&mut q, ev, &mut sink);
        for (p, _) in sink.delivered.drain(..) {
            net.release_ejection(&mut q, p.dst, p.rail, Network::buffer_credits(&p));
            got.push(p.tag);
        }
    }
    assert_eq!(got, (0..n).collect::<Vec<_>>());
    let c = net.link_counters();
    assert!(c.corrupt_forwarded > 20, "{c:?}");
    assert_eq!(net.in_flight(), 0);
}
