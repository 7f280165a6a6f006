//! The synthetic-traffic driver: open-loop sources on every node, warm-up, measurement and drain
//! phases, and the run report.
//!
//! Phases (as in BookSim): sources run from time 0; packets *created* in
//! [warmup, warmup + measure) are measured; at the end of measurement the sources stop and the
//! network drains (all queued and in-flight packets are delivered) for at most `sim.drain`.
//! Latency runs from creation (so source queueing counts) to the tail's arrival at the
//! destination. Offered and accepted load are bytes on the wire (header included) created /
//! delivered during the measurement window, divided by the window length and the total node
//! injection bandwidth. Conservation (`injected = delivered + dropped`, no packet delivered
//! twice) is checked at the end of every run.

use crate::scenario::Scenario;
use crate::traffic::{Destinations, Process, RailChoice, TrafficConfig};
use hpcnet_des::rng::SimRng;
use hpcnet_des::stats::{HistId, Registry, StatRecord, SummaryId};
use hpcnet_des::{Bytes, EventQueue, RngStreams, SimTime};
use hpcnet_fabric::net::{Blocked, NetEvent, Network};
use hpcnet_fabric::routing::TableMemory;
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::Packet;
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

enum Ev {
    Net(NetEvent),
    Gen(NodeId),
}

impl From<NetEvent> for Ev {
    fn from(e: NetEvent) -> Self {
        Ev::Net(e)
    }
}

/// Latency figures in nanoseconds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LatencyNs {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Link utilisation over the measurement window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LinkUtilisation {
    /// Mean over cabled link directions (router–router and node–router).
    pub mean: f64,
    pub max: f64,
    /// The busiest link direction ("r3.p2" = router 3 output port 2, "n5.rail0" = node 5's rail 0).
    pub max_link: String,
    /// Mean over router–router link directions only.
    pub mean_router_links: f64,
}

/// The analytical channel-load bound of the pattern under the routing function.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChannelLoadBound {
    /// Load of the busiest channel when every node injects at full bandwidth (load 1).
    pub max_channel_load: f64,
    /// Highest load the network could accept: min(1, 1 / max_channel_load).
    pub saturation_bound: f64,
    /// The busiest channel.
    pub channel: String,
    /// Sources traced (all, or a deterministic sample of large machines).
    pub sources_traced: usize,
}

/// A detected deadlock: time and the blocked input channels.
#[derive(Clone, Debug, Serialize)]
pub struct DeadlockReport {
    pub at_ns: f64,
    pub in_flight: u64,
    /// Packets still waiting in node injection queues.
    pub queued_at_sources: usize,
    pub blocked: Vec<Blocked>,
}

/// Everything a synthetic run reports (`hpcnet run --json`).
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub scenario: String,
    pub version: String,
    pub seed: u64,
    pub topology: String,
    pub routing: String,
    pub nodes: usize,
    pub packets_generated: u64,
    pub packets_injected: u64,
    pub packets_delivered: u64,
    pub packets_dropped: u64,
    pub drops_by_reason: BTreeMap<String, u64>,
    pub measured_packets: u64,
    pub measured_delivered: u64,
    pub offered_load: f64,
    pub accepted_load: f64,
    /// Node injection bandwidth (all rails) in GB/s.
    pub node_bandwidth_gbytes: f64,
    pub accepted_gbytes_per_node: f64,
    pub latency_ns: LatencyNs,
    pub network_latency_ns: f64,
    /// Mean analytical zero-load latency of the measured packets: for H routers on the path,
    /// (H + 1) × link latency + H × router latency + serialisation at the injection rate.
    pub zero_load_latency_ns: f64,
    pub mean_hops: f64,
    /// Router traversals of all delivered packets (measured or not).
    pub total_hops: u64,
    pub link_utilisation: LinkUtilisation,
    pub channel_load_bound: Option<ChannelLoadBound>,
    /// accepted_load / saturation_bound.
    pub accepted_over_bound: Option<f64>,
    pub table_memory: Option<TableMemory>,
    pub drained: bool,
    pub conservation_ok: bool,
    pub deadlock: Option<DeadlockReport>,
    pub events: u64,
    pub sim_time_ns: f64,
    pub wall_seconds: f64,
    /// Wall time of the event loop alone (without building the network and the bound).
    pub loop_seconds: f64,
    pub stats: Vec<StatRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<LinkRecord>>,
    pub resolved_scenario: serde_json::Value,
}

impl RunReport {
    /// JSON without wall-clock fields (for determinism checks).
    pub fn deterministic_json(&self) -> String {
        let mut v = serde_json::to_value(self).expect("report serialises");
        let o = v.as_object_mut().expect("object");
        o.remove("wall_seconds");
        o.remove("loop_seconds");
        serde_json::to_string(&v).expect("json")
    }
}

/// Failure of a run that is not a property of the model (those are reported, not errors).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(String),
    #[error("conservation violated: {0}")]
    Conservation(String),
}

/// Per-node source state.
struct Source {
    rng: SimRng,
    seq: u64,
    rr_rail: u8,
}

struct Stats {
    reg: Registry,
    latency: HistId,
    net_latency: HistId,
    hops: SummaryId,
    zero_load: SummaryId,
}

/// Progress callback: (simulated now, planned end of measurement).
pub type Progress<'a> = &'a mut dyn FnMut(SimTime, SimTime);

/// Options of a run that do not change its results.
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Called every 65 536 events.
    pub progress: Option<Progress<'a>>,
    /// Include every link direction's utilisation in the report.
    pub link_detail: bool,
}

/// Utilisation of one link direction over the measurement window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LinkRecord {
    pub link: String,
    pub busy_ps: u64,
    pub utilisation: f64,
}

/// Run the scenario's synthetic traffic and report.
pub fn run_synthetic(sc: &Scenario, opts: RunOptions<'_>) -> Result<RunReport, RunError> {
    let mut progress = opts.progress;
    let wall = Instant::now();
    let mut net = Network::new(sc.topology.clone(), sc.fabric.clone())
        .map_err(|e| RunError::Config(format!("{}: {e}", sc.source)))?;
    let tc: &TrafficConfig = &sc.traffic;
    let streams = RngStreams::new(sc.file.seed);
    let mut pattern_rng = streams.stream("pattern", 0);
    let dests = Destinations::new(tc, &net.topo, &mut pattern_rng);
    let n = net.topo.nodes.len();
    let rails = net.rails();
    let header = sc.fabric.packet.header.0;
    let mean_wire = tc.size.mean() + header as f64;
    // Node bandwidth = sum of its rails; each rail is offered load × its own rate.
    let rail_rate = net.injection_rate(0, 0);
    let use_rails = if tc.rails == RailChoice::Fixed { 1 } else { rails };
    let node_bps: f64 = (0..rails).map(|r| net.injection_rate(0, r).0 as f64).sum();
    // Mean time between packets of a node, in ps, and the Bernoulli slot.
    let slot_ps = mean_wire * 8.0 * 1e12 / node_bps;
    let period_ps = slot_ps / tc.load;
    let warm = sc.file.sim.warmup;
    let meas_end = warm + sc.file.sim.measure;
    let drain_end = meas_end + sc.file.sim.drain;
    let watchdog = sc.fabric.faults.watchdog;

    let mut reg = Registry::new();
    let stats = Stats {
        latency: reg
            .histogram("packet.latency", "ps", "creation to tail delivery, measured packets")
            .expect("fresh registry"),
        net_latency: reg
            .histogram(
                "packet.network_latency",
                "ps",
                "injection to tail delivery, measured packets",
            )
            .expect("fresh"),
        hops: reg
            .summary("packet.hops", "routers", "routers traversed, measured packets")
            .expect("fresh"),
        zero_load: reg
            .summary(
                "packet.zero_load_latency",
                "ps",
                "analytical zero-load latency of measured packets",
            )
            .expect("fresh"),
        reg,
    };
    let mut stats = stats;

    let mut q: EventQueue<Ev> = EventQueue::new();
    let mut sources: Vec<Source> = (0..n)
        .map(|i| Source {
            rng: streams.stream("source", i as u64),
            seq: 0,
            rr_rail: 0,
        })
        .collect();
    let gap = |rng: &mut SimRng| -> SimTime {
        match tc.process {
            Process::Periodic => SimTime(period_ps.round().max(1.0) as u64),
            Process::Bernoulli => {
                // Geometric number of slots (≥ 1) with success probability = load.
                let u: f64 = rng.gen::<f64>();
                let k = if tc.load >= 1.0 {
                    1.0
                } else {
                    ((1.0 - u).ln() / (1.0 - tc.load).ln()).floor() + 1.0
                };
                SimTime((k * slot_ps).round().max(1.0) as u64)
            }
        }
    };
    for (i, s) in sources.iter_mut().enumerate() {
        // Random phase so periodic sources do not inject in lock-step.
        let phase = SimTime((s.rng.gen::<f64>() * period_ps) as u64);
        q.schedule(phase, Ev::Gen(i as NodeId));
    }

    let mut generated = 0u64;
    let mut measured = 0u64;
    let mut measured_delivered = 0u64;
    let mut bytes_created_window = 0u64;
    let mut bytes_delivered_window = 0u64;
    let mut busy_start: Option<Vec<u64>> = None;
    let mut busy_end: Option<Vec<u64>> = None;
    // Delivered tags (tags are the generation sequence 0, 1, ...), one bit each: a duplicate
    // delivery is caught on the spot, without collecting and sorting every tag afterwards.
    let mut seen_tags: Vec<u64> = Vec::new();
    let mut duplicate = false;
    let mut deadlock = None;
    let router_lat = sc.fabric.router.latency;
    let link_lat = sc.fabric.link.latency;
    let mut events = 0u64;
    // Phase boundaries (warm-up snapshot, end of measurement, end of drain) are checked with one
    // comparison per event against the next one due (the separate checks were ~20 instructions
    // per hop in callgrind). `now > drain_end` is `now >= drain_end + 1` in integer picoseconds.
    let drain_stop = SimTime(drain_end.0.saturating_add(1));
    let mut next_boundary = warm.min(meas_end).min(drain_stop);
    let loop_start = Instant::now();

    while let Some((now, ev)) = q.pop() {
        events += 1;
        if now >= next_boundary {
            if busy_start.is_none() && now >= warm {
                busy_start = Some(net.busy_snapshot());
            }
            if busy_end.is_none() && now >= meas_end {
                busy_end = Some(net.busy_snapshot());
            }
            if now >= drain_stop {
                break;
            }
            next_boundary = drain_stop;
            if busy_start.is_none() {
                next_boundary = next_boundary.min(warm);
            }
            if busy_end.is_none() {
                next_boundary = next_boundary.min(meas_end);
            }
        }
        match ev {
            Ev::Net(e) => net.handle(&mut q, e),
            Ev::Gen(node) => {
                let s = &mut sources[node as usize];
                let dst = dests.next(node, s.seq, &mut s.rng);
                let payload = tc.size.sample(&mut s.rng);
                s.seq += 1;
                if dst != node {
                    let mut p = Packet::new(generated, node, dst, payload as u32, header as u32, now);
                    p.rail = match tc.rails {
                        RailChoice::Fixed => 0,
                        RailChoice::RoundRobin => {
                            s.rr_rail = (s.rr_rail + 1) % rails;
                            s.rr_rail
                        }
                        RailChoice::Adaptive => {
                            let start = (s.seq % rails as u64) as u8;
                            (0..rails)
                                .map(|k| (start + k) % rails)
                                .min_by_key(|&r| net.source_queue_len(node, r))
                                .unwrap_or(0)
                        }
                    };
                    let in_window = now >= warm && now < meas_end;
                    p.set_measured(in_window);
                    if in_window {
                        measured += 1;
                        bytes_created_window += p.size as u64;
                    }
                    generated += 1;
                    if let Err(e) = net.inject(&mut q, p) {
                        return Err(RunError::Config(format!("{}: routing: {e}", sc.source)));
                    }
                }
                let g = gap(&mut sources[node as usize].rng);
                if now + g < meas_end {
                    q.schedule(now + g, Ev::Gen(node));
                }
            }
        }
        // Read deliveries in place (draining them copied each ~112-byte record out).
        for d in &net.deliveries {
            let p = &d.packet;
            if d.at >= warm && d.at < meas_end {
                bytes_delivered_window += p.size as u64;
            }
            let (word, bit) = ((p.tag / 64) as usize, 1u64 << (p.tag % 64));
            if word >= seen_tags.len() {
                seen_tags.resize(word + 1, 0);
            }
            duplicate |= seen_tags[word] & bit != 0;
            seen_tags[word] |= bit;
            if p.measured() {
                measured_delivered += 1;
                stats.reg.record(stats.latency, (d.at - p.created).0);
                stats.reg.record(stats.net_latency, (d.at - p.injected).0);
                stats.reg.push(stats.hops, p.hops as u64);
                let h = p.hops as u64;
                let zl = link_lat * (h + 1) + router_lat * h + rail_rate.serialization(Bytes(p.size as u64));
                stats.reg.push(stats.zero_load, zl.0);
            }
        }
        net.deliveries.clear();
        // Time test first: it is almost always false, and `in_flight` costs three loads.
        if now.saturating_sub(net.last_progress) > watchdog && net.in_flight() > 0 {
            deadlock = Some(DeadlockReport {
                at_ns: now.as_ns_f64(),
                in_flight: net.in_flight(),
                queued_at_sources: net.queued_at_sources(),
                blocked: net.blocked(32),
            });
            break;
        }
        if events & 0xffff == 0 {
            if let Some(cb) = progress.as_mut() {
                cb(now, meas_end);
            }
        }
    }
    let end = q.now();
    let loop_seconds = loop_start.elapsed().as_secs_f64();
    if deadlock.is_none() && (net.in_flight() > 0 || net.queued_at_sources() > 0) && q.is_empty() {
        // Nothing left to happen but packets remain: they can never move.
        deadlock = Some(DeadlockReport {
            at_ns: end.as_ns_f64(),
            in_flight: net.in_flight(),
            queued_at_sources: net.queued_at_sources(),
            blocked: net.blocked(32),
        });
    }
    let busy_start = busy_start.unwrap_or_else(|| net.busy_snapshot());
    let busy_end = busy_end.unwrap_or_else(|| net.busy_snapshot());
    let drained = net.in_flight() == 0 && net.queued_at_sources() == 0;

    // Conservation: every injected packet delivered or dropped, none twice.
    let c = &net.counters;
    let dup = duplicate;
    let conservation_ok = !dup
        && c.injected == c.delivered + c.dropped + net.in_flight()
        && (!drained || c.injected + net.queued_at_sources() as u64 == generated);
    if dup {
        return Err(RunError::Conservation("a packet was delivered twice".into()));
    }
    if drained && c.injected != c.delivered + c.dropped {
        return Err(RunError::Conservation(format!(
            "injected {} != delivered {} + dropped {}",
            c.injected, c.delivered, c.dropped
        )));
    }

    let window = sc.file.sim.measure.as_secs_f64();
    let denom = window * node_bps / 8.0 * n as f64;
    let offered_load = bytes_created_window as f64 / denom;
    let accepted_load = bytes_delivered_window as f64 / denom;

    // Link utilisation over the window.
    let wps = sc.file.sim.measure.0 as f64;
    let mut sum = 0.0;
    let mut cnt = 0usize;
    let mut sum_r = 0.0;
    let mut cnt_r = 0usize;
    let mut max = (0.0, 0usize);
    let mut links = opts.link_detail.then(Vec::new);
    let router_link: Vec<bool> = net
        .topo
        .routers
        .iter()
        .flat_map(|r| {
            r.ports
                .iter()
                .map(|p| matches!(p, hpcnet_fabric::topology::Peer::Router { .. }))
        })
        .collect();
    for i in 0..busy_end.len() {
        if !net.snapshot_is_link(i) {
            continue;
        }
        let u = (busy_end[i] - busy_start[i]) as f64 / wps;
        if let Some(l) = links.as_mut() {
            l.push(LinkRecord {
                link: net.snapshot_name(i),
                busy_ps: busy_end[i] - busy_start[i],
                utilisation: u,
            });
        }
        sum += u;
        cnt += 1;
        if router_link.get(i).copied().unwrap_or(false) {
            sum_r += u;
            cnt_r += 1;
        }
        if u > max.0 {
            max = (u, i);
        }
    }
    let link_utilisation = LinkUtilisation {
        mean: sum / cnt.max(1) as f64,
        max: max.0,
        max_link: net.snapshot_name(max.1),
        mean_router_links: sum_r / cnt_r.max(1) as f64,
    };

    let bound = channel_load_bound(&net, &dests, tc, use_rails, node_bps, &streams);
    let accepted_over_bound = bound.as_ref().map(|b| accepted_load / b.saturation_bound);

    let mut drops_by_reason = BTreeMap::new();
    for d in &net.drops {
        let key = match d.reason {
            hpcnet_fabric::RouteError::Unreachable { .. } => "unreachable",
            hpcnet_fabric::RouteError::Loop { .. } => "routing_loop",
        };
        *drops_by_reason.entry(key.to_string()).or_insert(0) += 1;
    }

    let ps_to_ns = |v: Option<u64>| v.map_or(0.0, |x| x as f64 / 1e3);
    let lat = stats.reg.histogram_of(stats.latency);
    let mean_ps = lat.summary().mean().unwrap_or(0.0);
    let latency_ns = LatencyNs {
        mean: mean_ps / 1e3,
        p50: ps_to_ns(lat.percentile(50.0)),
        p99: ps_to_ns(lat.percentile(99.0)),
        max: ps_to_ns(lat.summary().max()),
    };
    let network_latency_ns = stats
        .reg
        .histogram_of(stats.net_latency)
        .summary()
        .mean()
        .unwrap_or(0.0)
        / 1e3;
    let zero_load_latency_ns = stats.reg.summary_of(stats.zero_load).mean().unwrap_or(0.0) / 1e3;
    let mean_hops = stats.reg.summary_of(stats.hops).mean().unwrap_or(0.0);

    Ok(RunReport {
        scenario: sc.name.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        seed: sc.file.seed,
        topology: net.topo.name.clone(),
        routing: sc.fabric.routing.name().to_string(),
        nodes: n,
        packets_generated: generated,
        packets_injected: c.injected,
        packets_delivered: c.delivered,
        packets_dropped: c.dropped,
        drops_by_reason,
        measured_packets: measured,
        measured_delivered,
        offered_load,
        accepted_load,
        node_bandwidth_gbytes: node_bps / 8e9,
        accepted_gbytes_per_node: accepted_load * node_bps / 8e9,
        latency_ns,
        network_latency_ns,
        zero_load_latency_ns,
        mean_hops,
        total_hops: c.hops,
        link_utilisation,
        channel_load_bound: bound,
        accepted_over_bound,
        table_memory: net.routing.table_memory.clone(),
        drained,
        conservation_ok,
        deadlock,
        events,
        sim_time_ns: end.as_ns_f64(),
        wall_seconds: wall.elapsed().as_secs_f64(),
        loop_seconds,
        stats: stats.reg.report(),
        links,
        resolved_scenario: sc.resolved_json(),
    })
}

/// Channel-load bound (Dally & Towles §3.3): trace the idle-network path of every flow and add
/// its rate to every channel it crosses; the busiest channel bounds the accepted load.
/// Random patterns use their exact destination distribution; adaptive routing is traced with
/// its idle-network (deterministic) choice, so the bound is that of the deterministic paths.
fn channel_load_bound(
    net: &Network,
    dests: &Destinations,
    tc: &TrafficConfig,
    rails: u8,
    node_bps: f64,
    streams: &RngStreams,
) -> Option<ChannelLoadBound> {
    let n = net.topo.nodes.len();
    let base: Vec<usize> = net.topo.port_offsets().into_iter().map(|b| b as usize).collect();
    let mut load = vec![0.0f64; *base.last().expect("total")];
    // Node injection channels carry load/rails each; they are never the binding channel below 1.
    let step = if n > 1024 { n.div_ceil(1024) } else { 1 };
    let mut traced = 0usize;
    let mut rng = streams.stream("bound", 0);
    for src in (0..n).step_by(step) {
        traced += 1;
        // Destination distribution of this source.
        let flows: Vec<(NodeId, f64)> = match tc.pattern {
            crate::traffic::Pattern::Uniform | crate::traffic::Pattern::AllToAll => (0..n as NodeId)
                .filter(|&d| d != src as NodeId)
                .map(|d| (d, 1.0 / (n - 1) as f64))
                .collect(),
            crate::traffic::Pattern::Hotspot => {
                let hot = if tc.hotspot_nodes.is_empty() {
                    vec![0]
                } else {
                    tc.hotspot_nodes.clone()
                };
                let mut v: Vec<(NodeId, f64)> = (0..n as NodeId)
                    .filter(|&d| d != src as NodeId)
                    .map(|d| (d, (1.0 - tc.hotspot_fraction) / (n - 1) as f64))
                    .collect();
                for h in &hot {
                    v.push((*h, tc.hotspot_fraction / hot.len() as f64));
                }
                v.retain(|(d, _)| *d != src as NodeId);
                v
            }
            _ => {
                let d = dests.next(src as NodeId, 0, &mut rng);
                if d == src as NodeId {
                    Vec::new()
                } else {
                    vec![(d, 1.0)]
                }
            }
        };
        for (dst, w) in flows {
            for rail in 0..rails {
                let share = w * node_bps / rails as f64;
                // Unroutable pairs are reported by the run itself (dropped packets).
                let _ = net.routing.walk(&net.topo, src as NodeId, dst, rail, 0, |r, p, _| {
                    load[base[r as usize] + p as usize] += share;
                });
            }
        }
    }
    let rate = net.config().link.data_rate().0 as f64;
    let (g, &l) = load.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1))?;
    let r = base.partition_point(|&b| b <= g) - 1;
    let p = g - base[r];
    let gamma = l / rate * step as f64;
    Some(ChannelLoadBound {
        max_channel_load: gamma,
        saturation_bound: (1.0 / gamma).min(1.0),
        channel: format!("r{r}.p{p}"),
        sources_traced: traced,
    })
}
