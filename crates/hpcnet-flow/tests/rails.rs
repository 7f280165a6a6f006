//! The flow model on a dual-rail NIC: the request's rail under fixed port selection, a message
//! spread over both rails under adaptive selection, and a queue pair's PCIe link — with the
//! bytes landing intact and every message completing exactly once.

use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::topology::{build, GeneralizedFatTreeConfig, TopologyConfig};
use hpcnet_fabric::Network;
use hpcnet_flow::FlowWorld;
use hpcnet_msg::verbs::{Machine, Rank, RemoteBuf, WriteWr};
use hpcnet_nic::{CqeKind, CqeStatus, HostConfig, NicConfig, PortSelect};
use std::cell::RefCell;
use std::rc::Rc;

/// Two planes of a 4-leaf generalized fat tree (16 nodes each); links of 4 × 28.125 Gb/s
/// (64b/66b), 1 KiB packets with 24 B of header.
fn dual_rail(nic: NicConfig) -> FlowWorld {
    let topo = build(&TopologyConfig::GeneralizedFatTree(GeneralizedFatTreeConfig {
        planes: 2,
        leaves: 4,
        spines: 4,
        nodes_per_leaf: 4,
        sibling_links: 2,
        nodes: None,
        radix: Some(10),
    }))
    .unwrap();
    let fabric = FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: BitsPerSec::gbps(28.125),
            encoding: Encoding::B64B66,
            latency: SimTime::from_ns(10),
            ..LinkConfig::default()
        },
        router: RouterConfig {
            vcs: 4,
            credit_unit: Bytes(64),
            private_credits: 64,
            shared_credits: 64,
            latency: SimTime::from_ns(50),
            ..RouterConfig::default()
        },
        packet: PacketConfig {
            header: Bytes(24),
            max_payload: Bytes(1024),
        },
        link_overrides: Vec::new(),
        routing: RoutingConfig::UpDown {
            selection: Selection::Adaptive,
        },
        faults: FaultConfig::default(),
    };
    FlowWorld::new(Network::new(topo, fabric).unwrap(), nic)
}

fn nic(sel: PortSelect) -> NicConfig {
    NicConfig {
        port_select: sel,
        engines: 2,
        host: HostConfig {
            links: 2,
            ..Default::default()
        },
        ..NicConfig::default()
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect()
}

/// Rank 0 writes 1 MiB to rank 12 (another leaf) in `qps.len()` equal messages (a power of
/// two of them), message i on
/// a queue pair of its own on rail `qps[i]`: the run's end time, after checking that the
/// bytes landed intact and that each message completed exactly once.
fn write_time(sel: PortSelect, qps: &[u8]) -> SimTime {
    let mut m = Machine::new(dual_rail(nic(sel)));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(12)));
    let n = 1u64 << 20;
    let src = a.reg_mr(n);
    let dst = b.reg_mr(n);
    let data = pattern(n as usize);
    a.write_local(&src, 0, &data).unwrap();
    let cq = a.create_cq();
    let part = n / qps.len() as u64;
    let posts: Vec<_> = qps
        .iter()
        .enumerate()
        .map(|(i, &rail)| {
            let qp = a.create_qp(&cq, Rank(12)).on_rail(rail);
            let r = dst.remote(0);
            let at = RemoteBuf {
                addr: r.addr + i as u64 * part,
                ..r
            };
            (qp, i as u64 * part, at)
        })
        .collect();
    let done = Rc::new(RefCell::new(Vec::new()));
    let d = done.clone();
    let count = qps.len();
    let src2 = src.clone();
    m.spawn(async move {
        for (i, (qp, off, at)) in posts.iter().enumerate() {
            qp.post_write(WriteWr::new(&src2, *off, part, *at).wr_id(i as u64))
                .unwrap();
        }
        for _ in 0..count {
            let c = cq.next().await;
            assert_eq!((c.kind, c.status), (CqeKind::Write, CqeStatus::Ok));
            d.borrow_mut().push(c.wr_id);
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    assert!(b.read_local(&dst, 0, n).unwrap() == data, "bytes landed intact");
    let mut got = done.borrow().clone();
    got.sort_unstable();
    assert_eq!(
        got,
        (0..count as u64).collect::<Vec<_>>(),
        "each message completes once"
    );
    end.time
}

#[test]
fn fixed_selection_follows_the_requests_rail() {
    // Two queue pairs (two engines, two PCIe links): on one rail they share its injection
    // link; on a rail each, each has a link of its own.
    let one = write_time(PortSelect::Fixed, &[0, 0]);
    let two = write_time(PortSelect::Fixed, &[0, 1]);
    let ratio = one.0 as f64 / two.0 as f64;
    assert!(
        ratio > 1.6,
        "rails 0 and 1 should double the rate: one rail {one}, two {two}"
    );
    // Rail 1 alone is as fast as rail 0 alone (the planes are alike).
    assert_eq!(write_time(PortSelect::Fixed, &[1]), write_time(PortSelect::Fixed, &[0]));
}

#[test]
fn adaptive_selection_spreads_a_message_over_both_rails() {
    // Two queue pairs on rail 0: adaptive selection spreads their bytes over both rails.
    let fixed = write_time(PortSelect::Fixed, &[0, 0]);
    let adaptive = write_time(PortSelect::Adaptive, &[0, 0]);
    let ratio = fixed.0 as f64 / adaptive.0 as f64;
    assert!(
        ratio > 1.6,
        "adaptive should use both rails: fixed {fixed}, adaptive {adaptive}"
    );
    // One queue pair reads through its engine's PCIe link (about 14.4 GB/s of PCIe 3.0 x16
    // against 13.3 GB/s of one network link): both rails barely help.
    let fixed = write_time(PortSelect::Fixed, &[0]);
    let adaptive = write_time(PortSelect::Adaptive, &[0]);
    let ratio = fixed.0 as f64 / adaptive.0 as f64;
    assert!(
        (1.0..1.2).contains(&ratio),
        "one queue pair is bound by its PCIe link: fixed {fixed}, adaptive {adaptive}"
    );
}

#[test]
fn spread_messages_are_deterministic() {
    let a = write_time(PortSelect::Adaptive, &[0, 1, 0, 1]);
    let b = write_time(PortSelect::Adaptive, &[0, 1, 0, 1]);
    assert_eq!(a, b);
}
