//! Minimal adaptive routing with a bubble escape VC, simulated at saturation: Duato's condition
//! must hold in the running router, not only in the routing function. A packet whose adaptive
//! request cannot be served (another packet took the credits it saw when it was routed) must be
//! able to fall back on the escape VC; a packet committed to an adaptive VC for good waits on a
//! resource outside the escape sub-network, and a ring of such waits deadlocks.
//!
//! The traffic is the one that exposed it: on a 4×4 torus with NICEVT-like buffers (64 credits
//! of 16 B per VC, 272-byte maximum packets = 17-credit bubble slots, 4 VCs, no response class),
//! every node sends rounds of a 2 KiB block (eight maximum-size packets) followed by a one-flit
//! flag to the node across. Every packet must arrive exactly once and the network must drain.

use hpcnet_des::{BitsPerSec, Bytes, EventQueue, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::topology::{build, GridConfig, NodeId, TopologyConfig};
use hpcnet_fabric::{Collect, NetEvent, Network, Packet};

fn nicevt_like(routing: RoutingConfig, vcs: u8) -> FabricConfig {
    FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: BitsPerSec::gbps(3.25),
            encoding: Encoding::B8B10,
            latency: SimTime::from_ns(20),
            switching: Switching::CutThrough,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs,
            credit_unit: Bytes(16),
            private_credits: 64,
            shared_credits: 0,
            latency: SimTime::from_ns(100),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
            ..RouterConfig::default()
        },
        packet: PacketConfig {
            header: Bytes(16),
            max_payload: Bytes(256),
        },
        routing,
        faults: FaultConfig::default(),
    }
}

fn adaptive() -> RoutingConfig {
    RoutingConfig::MinimalAdaptive {
        deadlock: DeadlockAvoidance::Bubble,
        tie: TieRule::Balanced,
    }
}

/// What a burst left behind: packets delivered (by tag, in delivery order), packets still in
/// the network, and whether the network reports a wait cycle.
struct Outcome {
    delivered: Vec<u64>,
    injected: u64,
    in_flight: u64,
    cycle: Option<String>,
    end: SimTime,
}

/// Every node of a 4×4 torus sends `rounds` × (2 KiB in maximum-size packets, then an 8-byte
/// flag) to `dst(node)`, all queued at time 0; runs until no event is left.
fn burst(cfg: FabricConfig, rounds: u32, dst: impl Fn(u32) -> u32) -> Outcome {
    let topo = build(&TopologyConfig::Torus(GridConfig {
        k: vec![4, 4],
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let mut net = Network::new(topo, cfg).unwrap();
    let mut q: EventQueue<NetEvent> = EventQueue::new();
    let mut sink = Collect::default();
    let mut tag = 0u64;
    for _ in 0..rounds {
        for src in 0..16u32 {
            for payload in [256, 256, 256, 256, 256, 256, 256, 256, 8] {
                let p = Packet::new(tag, NodeId(src), NodeId(dst(src)), payload, 16, q.now());
                net.inject(&mut q, p, &mut sink).unwrap();
                tag += 1;
            }
        }
    }
    let mut end = SimTime::ZERO;
    while let Some((t, ev)) = q.pop() {
        end = t;
        net.handle(&mut q, ev, &mut sink);
    }
    assert!(net.drops().is_empty(), "no packet is dropped on a healthy torus");
    Outcome {
        delivered: sink.delivered.iter().map(|(p, _)| p.tag).collect(),
        injected: tag,
        in_flight: net.in_flight(),
        cycle: net.deadlock_cycle().map(|c| format!("{c:?}")),
        end,
    }
}

/// Node `x + 4y` to the node across in y (the SHMEM test's "PE + n/2"), or across in both
/// dimensions.
fn across_y(n: u32) -> u32 {
    (n + 8) % 16
}
fn across_xy(n: u32) -> u32 {
    let (x, y) = (n % 4, n / 4);
    (x + 2) % 4 + 4 * ((y + 2) % 4)
}

fn assert_exactly_once(o: &Outcome, what: &str) {
    assert!(o.cycle.is_none(), "{what}: a wait cycle: {:?}", o.cycle);
    assert_eq!(o.in_flight, 0, "{what}: packets left in the network");
    let mut tags = o.delivered.clone();
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags.len(), o.delivered.len(), "a packet was delivered twice");
    assert_eq!(tags, (0..o.injected).collect::<Vec<_>>(), "every packet delivered");
}

#[test]
fn adaptive_bubble_torus_drains_puts_and_flags_to_the_node_across() {
    for dst in [across_y as fn(u32) -> u32, across_xy] {
        let o = burst(nicevt_like(adaptive(), 4), 24, dst);
        assert_exactly_once(&o, "4 VCs, 64 credits");
    }
}

/// More adaptive VCs, fewer, and tighter buffers (two slots per VC): each must drain too.
#[test]
fn adaptive_bubble_torus_drains_with_two_to_four_vcs_and_tight_buffers() {
    let mut jammed = Vec::new();
    for vcs in [2, 3, 4] {
        for credits in [34, 40, 64] {
            let mut cfg = nicevt_like(adaptive(), vcs);
            cfg.router.private_credits = credits;
            for (name, dst) in [("y", across_y as fn(u32) -> u32), ("xy", across_xy)] {
                let o = burst(cfg.clone(), 12, dst);
                if o.cycle.is_some() || o.in_flight > 0 {
                    jammed.push(format!(
                        "{vcs} VCs, {credits} credits, across {name}: {} left",
                        o.in_flight
                    ));
                } else {
                    assert_exactly_once(&o, &format!("{vcs} VCs, {credits} credits"));
                }
            }
        }
    }
    assert!(jammed.is_empty(), "jammed: {jammed:#?}");
}

/// The same burst twice gives the same deliveries in the same order at the same end time.
#[test]
fn adaptive_bubble_burst_is_deterministic() {
    let a = burst(nicevt_like(adaptive(), 4), 8, across_xy);
    let b = burst(nicevt_like(adaptive(), 4), 8, across_xy);
    assert_eq!((a.delivered, a.end), (b.delivered, b.end));
}
