//! Point-to-point benchmarks on the shipped NIC scenarios: the figures have the right shape
//! (bandwidth approaches the payload-efficiency bound, latency is linear in size), functions
//! share an engine fairly under round-robin and not under priority, and runs are deterministic.

use hpcnet_des::SimTime;
use hpcnet_workloads::p2p::{
    function_shares, op_latency, pingpong, stream, try_op_latency, try_pingpong, try_stream, LatencyOp, Options,
    P2pError,
};
use hpcnet_workloads::Rank;
use hpcnet_workloads::Scenario;
use std::path::Path;

fn scenario(name: &str, set: &[&str]) -> Scenario {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(name);
    let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
    Scenario::load(&p, &set).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn sunway_bandwidth_approaches_the_software_peak() {
    let sc = scenario("sunway-prototype.toml", &[]);
    let w = sc.world().unwrap();
    // Software peak: link data rate x payload efficiency (1024 / 1048).
    let peak = sc.fabric.link.data_rate().as_bytes_per_sec_f64() / 1e9 * w.payload_efficiency();
    assert!((peak - 13.324).abs() < 0.01, "software peak {peak}");
    let opts = Options {
        window: 64,
        messages: 24,
        qps: 1,
        rail: 0,
    };
    let big = stream(sc.world().unwrap(), Rank(0), Rank(511), 1 << 20, false, &opts);
    assert!(
        big.gbytes_per_s < peak && big.gbytes_per_s > 0.99 * peak,
        "{}",
        big.gbytes_per_s
    );
    let small = stream(
        sc.world().unwrap(),
        Rank(0),
        Rank(511),
        4096,
        false,
        &Options {
            messages: 256,
            ..opts.clone()
        },
    );
    assert!(
        small.gbytes_per_s < 0.7 * peak,
        "4 KB is overhead-bound: {}",
        small.gbytes_per_s
    );
    // Deterministic.
    let again = stream(
        sc.world().unwrap(),
        Rank(0),
        Rank(511),
        4096,
        false,
        &Options { messages: 256, ..opts },
    );
    assert_eq!(small, again);
}

#[test]
fn chpp_latency_is_linear_beyond_a_few_packets() {
    let sc = scenario("chpp-pair.toml", &[]);
    let t = |n: u64| op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::Put, n).as_us_f64();
    let (a, b, c) = (t(64 * 1024), t(128 * 1024), t(256 * 1024));
    let (s1, s2) = (b - a, c - b);
    assert!((s2 / s1 - 2.0).abs() < 0.01, "slopes {s1} {s2}");
    // ~3.2 GB/s: 16 B header + 128 B payload + 1 cycle per packet on a 4 GB/s engine path.
    let rate = 64.0 * 1024.0 / (s1 * 1e3);
    assert!((rate - 3.2).abs() < 0.05, "PUT streaming rate {rate} GB/s");
    // GET costs more than PUT (the request crosses the network first).
    assert!(
        op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::Get, 1)
            > op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::Put, 1)
    );
    // NAP-immediate saves the data read of NAP-indirect at small sizes.
    assert!(
        op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::NapImmediate, 1)
            < op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::NapIndirect, 1)
    );
}

#[test]
fn chpp_nap_immediate_is_flat_within_the_inline_bytes_and_rises_beyond() {
    let sc = scenario("chpp-pair.toml", &[]);
    let nic = &sc.nic;
    let inline = nic.immediate_inline.0;
    assert_eq!(inline, 112, "one 128 B read request less the 16 B descriptor header");
    let ns = |sc: &Scenario, n: u64| {
        op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::NapImmediate, n).as_ns_f64()
    };
    // Up to the inline bytes only the payload's serialisation adds: the engine's data path and the
    // link, per byte (plus rounding to whole picoseconds).
    let engine = nic.engine_rate.unwrap().as_bytes_per_sec_f64();
    let link = sc.fabric.link.data_rate().as_bytes_per_sec_f64();
    let serialisation = 1e9 / engine + 1e9 / link;
    let flat: Vec<f64> = [1, 2, 16, 64, inline].iter().map(|&n| ns(&sc, n)).collect();
    for (n, t) in [1u64, 2, 16, 64, inline].iter().zip(&flat) {
        let extra = t - flat[0];
        assert!(
            (extra - (n - 1) as f64 * serialisation).abs() < 1.0,
            "{n} B: {extra} ns over 1 B, serialisation {serialisation} ns/B"
        );
    }
    assert!(flat[3] - flat[0] < 40.0, "1 to 64 B: {} ns", flat[3] - flat[0]);
    // Without inline bytes the same sizes pay the extraction from the first byte.
    let none = scenario("chpp-pair.toml", &["nic.immediate_inline=\"0 B\""]);
    assert!(ns(&none, 64) - ns(&none, 1) > 63.0 * 1e9 / nic.immediate_rate.unwrap().as_bytes_per_sec_f64());
    // Beyond the inline bytes every byte is extracted at immediate_rate: 256 B -> 1024 B adds
    // 768 B of extraction (the data path and the per-TLP upload keep up).
    let rate = nic.immediate_rate.unwrap().as_bytes_per_sec_f64();
    let rise = ns(&sc, 1024) - ns(&sc, 256);
    let expect = 768.0 * 1e9 / rate;
    assert!(
        (rise / expect - 1.0).abs() < 0.05,
        "256 -> 1024 B: {rise} ns, 768 B at immediate_rate {expect} ns"
    );
}

#[test]
fn chpp_get_write_back_costs_writeback_overhead_not_a_puts_processing() {
    let sc = scenario("chpp-pair.toml", &[]);
    let wb = sc
        .nic
        .writeback_overhead
        .expect("chpp-pair sets nic.writeback_overhead");
    assert!(wb < sc.nic.message_overhead);
    let get = |sc: &Scenario| op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::Get, 64);
    // Unset, a write-back costs message_overhead (a PUT's processing): the GET is slower by exactly
    // the difference; PUT latency does not depend on the key.
    let unset = {
        let mut s = sc.clone();
        s.nic.writeback_overhead = None;
        s
    };
    assert_eq!(get(&unset).0 - get(&sc).0, (sc.nic.message_overhead.0 - wb.0));
    assert_eq!(
        op_latency(unset.world().unwrap(), Rank(0), Rank(1), LatencyOp::Put, 64),
        op_latency(sc.world().unwrap(), Rank(0), Rank(1), LatencyOp::Put, 64)
    );
}

#[test]
fn pingpong_latency_is_half_the_round_trip() {
    let sc = scenario("sunway-prototype.toml", &[]);
    let p = pingpong(sc.world().unwrap(), Rank(0), Rank(511), 8, 20);
    let one = op_latency(sc.world().unwrap(), Rank(0), Rank(511), LatencyOp::Write, 8);
    let lat = p.latency_us.unwrap();
    // Each half round trip is one notified write (posted as soon as the notification arrives).
    assert!(
        (lat - one.as_us_f64()).abs() / lat < 0.02,
        "pingpong {lat} us vs one write {}",
        one.as_us_f64()
    );
}

fn shares(arb: &str) -> Vec<f64> {
    let sc = scenario(
        "chpp-pair.toml",
        &[
            "nic.functions=8",
            "nic.doorbell_fifo=32",
            &format!("nic.function_arbitration={arb}"),
        ],
    );
    let s = function_shares(
        sc.world().unwrap(),
        Rank(0),
        Rank(1),
        (64, 8192),
        SimTime::from_us(400),
        SimTime::from_us(100),
        7,
    )
    .unwrap();
    let last = &s.last().expect("samples").1;
    let total: u64 = last.iter().sum();
    last.iter().map(|&b| b as f64 / total as f64).collect()
}

#[test]
fn round_robin_functions_share_fairly_priority_does_not() {
    let rr = shares("round_robin");
    assert_eq!(rr.len(), 8);
    assert!(rr.iter().all(|s| (s - 0.125).abs() < 0.02), "round robin shares {rr:?}");
    let pr = shares("priority");
    assert!(pr[0] > 0.9, "priority: the PF takes the engine {pr:?}");
}

#[test]
fn doorbell_fifo_depth_is_enforced() {
    use hpcnet_msg::verbs::{Machine, WriteWr};
    let sc = scenario("chpp-pair.toml", &["nic.functions=2", "nic.doorbell_fifo=4"]);
    let m = Machine::new(sc.world().unwrap());
    let a = m.context(Rank(0));
    let s = a.reg_mr(64);
    let d = m.context(Rank(1)).reg_mr(64);
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(1)).on_function(1);
    for _ in 0..4 {
        qp.post_write(WriteWr::new(&s, 0, 64, d.remote(0))).unwrap();
    }
    let e = qp.post_write(WriteWr::new(&s, 0, 64, d.remote(0))).unwrap_err();
    assert!(e.to_string().contains("doorbell FIFO of function 1 is full"), "{e}");
    let bad = a
        .create_qp(&cq, Rank(1))
        .on_function(2)
        .post_write(WriteWr::new(&s, 0, 64, d.remote(0)))
        .unwrap_err();
    assert!(bad.to_string().contains("function 2 does not exist"), "{bad}");
}

/// chpp-pair with bounded NIC buffers, where GETs sharing the PUT channel deadlock: 4 packets of
/// receive buffer per VC, 4 packets of transmit queue, router VCs of 2 packets; the NIC chooses
/// each packet's VC class. Two engines: one sends this rank's GET requests, the other serves the
/// peer's GETs (R2W); the receive side hands at most 2 GETs to the send engine before it stalls.
const GET_DEADLOCK: [&str; 6] = [
    "router.vc_select=packet",
    "router.private_credits=18",
    "nic.rx_buffer=\"576 B\"",
    "nic.tx_queue=4",
    "nic.get_queue=2",
    "nic.engines=2",
];

#[test]
fn gets_sharing_the_put_channel_deadlock_and_their_own_channel_fixes_it() {
    use hpcnet_workloads::p2p::get_exchange;
    let base = GET_DEADLOCK;
    let same: Vec<&str> = base.to_vec();
    let sc = scenario("chpp-pair.toml", &same);
    let end = get_exchange(sc.world().unwrap(), Rank(0), Rank(1), 65536, 64, 32).unwrap();
    assert!(
        end.deadlock && end.stuck_tasks == 2 && end.net_in_flight > 0,
        "expected a deadlock: {end:?}"
    );
    assert!(!end.blocked.is_empty());
    let mut own = base.to_vec();
    own.push("nic.get_vc=1");
    let sc = scenario("chpp-pair.toml", &own);
    let end = get_exchange(sc.world().unwrap(), Rank(0), Rank(1), 65536, 64, 32).unwrap();
    assert_eq!(
        (end.deadlock, end.stuck_tasks, end.net_in_flight),
        (false, 0, 0),
        "GETs on their own VC complete: {end:?}"
    );
}

#[test]
fn descriptor_prefetch_leaves_single_message_latency_unchanged() {
    // chpp-pair pipelines its engine (nic.descriptor_prefetch = 1); an idle engine must behave
    // exactly as the one-message-at-a-time engine the latency table was calibrated on.
    let on = scenario("chpp-pair.toml", &[]);
    assert_eq!(on.nic.descriptor_prefetch, 1);
    let off = scenario("chpp-pair.toml", &["nic.descriptor_prefetch=0"]);
    let deep = scenario("chpp-pair.toml", &["nic.descriptor_prefetch=8"]);
    for op in [
        LatencyOp::NapImmediate,
        LatencyOp::NapIndirect,
        LatencyOp::Put,
        LatencyOp::Get,
        LatencyOp::Write,
    ] {
        let nap = matches!(op, LatencyOp::NapImmediate | LatencyOp::NapIndirect);
        for size in [1u64, 64, 256, 1024, 2048, 4096, 65536] {
            if nap && size > 2048 {
                continue;
            }
            let t = |sc: &hpcnet_workloads::Scenario| op_latency(sc.world().unwrap(), Rank(0), Rank(1), op, size);
            let base = t(&off);
            assert_eq!(t(&on), base, "{op:?} {size} B");
            assert_eq!(t(&deep), base, "{op:?} {size} B, depth 8");
        }
    }
}

/// The message period of a stream of `size`-byte writes on chpp-pair's single engine, from the
/// configuration: with prefetch, the slower of the descriptor stage (descriptor fetch + PUT
/// processing) and the data stage (the message's DMA read at the read rate, or its packets
/// through the engine's data path, whichever is slower).
fn pipelined_period_ns(sc: &hpcnet_workloads::Scenario, size: u64) -> f64 {
    let nic = &sc.nic;
    let mtu = sc.fabric.packet.max_payload.0;
    let header = sc.fabric.packet.header.0;
    let descriptor = (nic.host.read_latency + nic.message_overhead).as_ns_f64();
    let rate = nic.engine_rate.expect("chpp-pair sets nic.engine_rate");
    let emit: f64 = (0..size.div_ceil(mtu))
        .map(|k| {
            let plen = (size - k * mtu).min(mtu);
            (rate.serialization(hpcnet_des::Bytes(plen + header)) + nic.packet_overhead).as_ns_f64()
        })
        .sum();
    let read = nic.host.read_rate().serialization(hpcnet_des::Bytes(size)).as_ns_f64();
    descriptor.max(read.max(emit))
}

#[test]
fn descriptor_prefetch_raises_the_message_rate_to_the_slowest_stage() {
    let on = scenario("chpp-pair.toml", &[]);
    let off = scenario("chpp-pair.toml", &["nic.descriptor_prefetch=0"]);
    let opts = Options {
        window: 32,
        messages: 1000,
        qps: 1,
        rail: 0,
    };
    // Small messages: the descriptor stage (520 ns fetch + 192 ns processing) paces the stream.
    let small = stream(on.world().unwrap(), Rank(0), Rank(1), 64, false, &opts);
    let bound = 1e9 / pipelined_period_ns(&on, 64);
    assert!((bound - 1e9 / 712.0).abs() < 1.0, "{bound}");
    assert!(
        small.messages_per_s <= bound && small.messages_per_s > 0.99 * bound,
        "{} msg/s against the descriptor-stage bound {bound}",
        small.messages_per_s
    );
    // Without prefetch the next descriptor waits for the data: fetch + processing + the data's
    // read round trip per message at least.
    let serial = stream(off.world().unwrap(), Rank(0), Rank(1), 64, false, &opts);
    let nic = &off.nic;
    let serial_bound = 1e9 / (2.0 * nic.host.read_latency.as_ns_f64() + nic.message_overhead.as_ns_f64());
    assert!(serial.messages_per_s <= serial_bound, "{}", serial.messages_per_s);
    assert!(
        small.messages_per_s > 1.6 * serial.messages_per_s,
        "{} vs {}",
        small.messages_per_s,
        serial.messages_per_s
    );
    // Large messages: the engine's data path (16 B header + 128 B per 40 ns) paces the stream.
    let big_opts = Options { messages: 60, ..opts };
    let big = stream(on.world().unwrap(), Rank(0), Rank(1), 65536, false, &big_opts);
    let bound = 1e9 / pipelined_period_ns(&on, 65536);
    assert!((bound * 65536.0 / 1e9 - 3.2).abs() < 0.001, "{bound}");
    assert!(
        big.messages_per_s <= bound && big.messages_per_s > 0.99 * bound,
        "{} msg/s against the data-stage bound {bound}",
        big.messages_per_s
    );
    // Deterministic.
    assert_eq!(stream(on.world().unwrap(), Rank(0), Rank(1), 64, false, &opts), small);
}

/// The software peak of a sunway-prototype link direction in GB/s: data rate x payload
/// efficiency.
fn sunway_peak(sc: &Scenario) -> f64 {
    sc.fabric.link.data_rate().as_bytes_per_sec_f64() / 1e9 * sc.world().unwrap().payload_efficiency()
}

#[test]
fn bidirectional_bandwidth_is_twice_one_direction_on_full_duplex_links() {
    let opts = Options {
        window: 64,
        messages: 200,
        qps: 1,
        rail: 0,
    };
    // Sunway: each direction approaches the software peak of its own link direction.
    let sw = scenario("sunway-prototype.toml", &[]);
    let peak = sunway_peak(&sw);
    let bw = stream(sw.world().unwrap(), Rank(0), Rank(511), 65536, false, &opts);
    let bibw = stream(sw.world().unwrap(), Rank(0), Rank(511), 65536, true, &opts);
    assert_eq!(bibw.messages, 200, "messages per direction");
    assert!(
        bibw.gbytes_per_s < 2.0 * peak && bibw.gbytes_per_s > 0.99 * 2.0 * peak,
        "bibw {} GB/s against twice the software peak {peak}",
        bibw.gbytes_per_s
    );
    let ratio = bibw.gbytes_per_s / bw.gbytes_per_s;
    assert!((ratio - 2.0).abs() < 0.01, "bibw / bw = {ratio}");
    // cHPP pair: one engine per NIC sends, so each direction keeps its engine's data-stage bound.
    let ch = scenario("chpp-pair.toml", &[]);
    for size in [4096u64, 65536] {
        let bound = 2.0 * size as f64 / pipelined_period_ns(&ch, size);
        let bibw = stream(ch.world().unwrap(), Rank(0), Rank(1), size, true, &opts);
        let bw = stream(ch.world().unwrap(), Rank(0), Rank(1), size, false, &opts);
        assert!(
            bibw.gbytes_per_s <= bound && bibw.gbytes_per_s > 0.98 * bound,
            "{size} B: bibw {} GB/s against twice the engine bound, {bound}",
            bibw.gbytes_per_s
        );
        assert!((bibw.gbytes_per_s / bw.gbytes_per_s - 2.0).abs() < 0.01, "{size} B");
        // Messages per second are summed over both directions.
        assert!((bibw.messages_per_s / bw.messages_per_s - 2.0).abs() < 0.01, "{size} B");
    }
}

#[test]
fn message_rate_is_bounded_by_the_engines_per_message_time() {
    // Sunway engines handle one message at a time (no descriptor prefetch): the descriptor's
    // read round trip, the engine processing, then the data's read round trip.
    let sc = scenario("sunway-prototype.toml", &[]);
    assert_eq!(sc.nic.descriptor_prefetch, 0);
    let per_message = 2.0 * sc.nic.host.read_latency.as_ns_f64() + sc.nic.message_overhead.as_ns_f64();
    assert!((per_message - 295.0).abs() < 1e-9, "{per_message} ns");
    let engine_rate = 1e9 / per_message;
    let engines = sc.nic.engines;
    assert_eq!(engines, 2);
    let rate = |qps: u32| {
        let opts = Options {
            window: 64,
            messages: 1000,
            qps,
            rail: 0,
        };
        stream(sc.world().unwrap(), Rank(0), Rank(511), 8, false, &opts).messages_per_s
    };
    // One queue pair: one engine.
    let one = rate(1);
    assert!(
        one <= engine_rate && one > 0.99 * engine_rate,
        "{one} msg/s against 1 / {per_message} ns"
    );
    // Two queue pairs use both engines; more queue pairs cannot add a third.
    let two = rate(2);
    assert!(two <= engines as f64 * engine_rate, "{two} msg/s");
    assert!((two / one - 2.0).abs() < 0.01, "two engines: {two} vs {one}");
    assert_eq!(rate(4), two);
}

#[test]
fn four_megabyte_messages_land_and_stay_below_the_link_limit() {
    use hpcnet_msg::verbs::{Machine, WriteWr};
    let opts = Options {
        window: 4,
        messages: 4,
        qps: 1,
        rail: 0,
    };
    let size = 4u64 << 20;
    let sw = scenario("sunway-prototype.toml", &[]);
    let peak = sunway_peak(&sw);
    let p = stream(sw.world().unwrap(), Rank(0), Rank(511), size, false, &opts);
    assert_eq!((p.size, p.messages), (size, 4));
    assert!(
        p.gbytes_per_s < peak && p.gbytes_per_s > 0.99 * peak,
        "4 MiB: {} GB/s against the software peak {peak}",
        p.gbytes_per_s
    );
    let ch = scenario("chpp-pair.toml", &[]);
    let bound = size as f64 / pipelined_period_ns(&ch, size);
    let p = stream(ch.world().unwrap(), Rank(0), Rank(1), size, false, &opts);
    assert!(
        p.gbytes_per_s <= bound && p.gbytes_per_s > 0.99 * bound,
        "4 MiB on chpp-pair: {} GB/s against {bound}",
        p.gbytes_per_s
    );
    // Ping-pong: half a round trip is at least the message's serialisation on the link.
    let pp = pingpong(sw.world().unwrap(), Rank(0), Rank(511), size, 2);
    let wire_us = size as f64 / (sw.fabric.link.data_rate().as_bytes_per_sec_f64()) * 1e6;
    assert!(
        pp.latency_us.unwrap() > wire_us,
        "{:?} us vs {wire_us} us",
        pp.latency_us
    );
    // The bytes of a 4 MiB write land intact.
    let mut m = Machine::new(ch.world().unwrap());
    let (a, b) = (m.context(Rank(0)), m.context(Rank(1)));
    let (src, dst) = (a.reg_mr(size), b.reg_mr(size));
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    a.write_local(&src, 0, &data).unwrap();
    let cq = a.create_cq();
    a.create_qp(&cq, Rank(1))
        .post_write(WriteWr::new(&src, 0, size, dst.remote(0)))
        .unwrap();
    let end = m.run();
    assert_eq!((end.stuck_tasks, end.net_in_flight), (0, 0));
    assert_eq!(cq.poll().map(|c| c.status), Some(hpcnet_nic::CqeStatus::Ok));
    assert!(
        m.context(Rank(1)).read_local(&dst, 0, size).unwrap() == data,
        "4 MiB landed intact"
    );
}

#[test]
fn unfinished_runs_and_refused_posts_are_errors_not_figures() {
    // The cable between the two routers down (router 0 port 0): every packet between the ranks is
    // dropped as unreachable, so no message ever completes.
    let down = scenario("chpp-pair.toml", &["faults.failed_links=[{router=0, port=0}]"]);
    let opts = Options {
        messages: 8,
        ..Options::default()
    };
    for bidirectional in [false, true] {
        match try_stream(down.world().unwrap(), Rank(0), Rank(1), 64, bidirectional, &opts) {
            Err(P2pError::Stuck(end)) => {
                assert_eq!(end.stuck_tasks, if bidirectional { 2 } else { 1 });
                let e = P2pError::Stuck(end).to_string();
                assert!(e.starts_with("the run did not finish: "), "{e}");
                assert!(e.contains("rank program(s) still waiting"), "{e}");
            }
            other => panic!("expected a stuck run, got {other:?}"),
        }
    }
    assert!(matches!(
        try_pingpong(down.world().unwrap(), Rank(0), Rank(1), 64, 4),
        Err(P2pError::Stuck(ref end)) if end.stuck_tasks == 2
    ));
    assert!(matches!(
        try_op_latency(down.world().unwrap(), Rank(0), Rank(1), LatencyOp::Put, 64),
        Err(P2pError::Stuck(ref end)) if end.stuck_tasks == 1
    ));
    // A run stopped by the watchdog (the GET deadlock of spec 02) names the blocked queue.
    let get_deadlock = scenario("chpp-pair.toml", &GET_DEADLOCK);
    let end =
        hpcnet_workloads::p2p::get_exchange(get_deadlock.world().unwrap(), Rank(0), Rank(1), 65536, 64, 32).unwrap();
    assert!(
        end.deadlock && end.net_in_flight > 0 && !end.blocked.is_empty(),
        "{end:?}"
    );
    let e = P2pError::Stuck(end).to_string();
    assert!(
        e.contains("stuck in the network (deadlock); first blocked: router"),
        "{e}"
    );
    // A GET window deeper than the doorbell FIFO is a refused post, not a panic.
    let shallow = scenario("chpp-pair.toml", &["nic.doorbell_fifo=4"]);
    let e = hpcnet_workloads::p2p::get_exchange(shallow.world().unwrap(), Rank(0), Rank(1), 4096, 64, 32).unwrap_err();
    assert!(matches!(e, P2pError::Refused(_)), "{e:?}");
    // A NAP above nic.nap_buffer and a window beyond the doorbell FIFO are refused posts.
    let ch = scenario("chpp-pair.toml", &[]);
    let nap = try_op_latency(ch.world().unwrap(), Rank(0), Rank(1), LatencyOp::NapImmediate, 4096).unwrap_err();
    assert!(matches!(nap, P2pError::Refused(_)), "{nap:?}");
    assert_eq!(
        nap.to_string(),
        "post refused: post: a NAP carries at most 2048 bytes, asked for 4096"
    );
    let fifo = scenario("chpp-pair.toml", &["nic.doorbell_fifo=4"]);
    let e = try_stream(fifo.world().unwrap(), Rank(0), Rank(1), 64, false, &opts).unwrap_err();
    assert!(e.to_string().contains("doorbell FIFO of function 0 is full"), "{e}");
    // The same runs without the fault give figures.
    assert!(try_stream(ch.world().unwrap(), Rank(0), Rank(1), 64, false, &opts).is_ok());
}
