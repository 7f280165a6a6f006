//! The synthetic-traffic driver: open-loop sources on every node, warm-up, measurement and drain
//! phases, and the run report.
//!
//! Phases (as in BookSim): sources run from time 0; packets *created* in
//! [warmup, warmup + measure) are measured; at the end of measurement the sources stop and the
//! network drains (all queued and in-flight packets are delivered) for at most `sim.drain`.
//! Latency runs from creation (so source queueing counts) to the tail's arrival at the
//! destination. Offered and accepted load are bytes on the wire (header included) created /
//! delivered during the measurement window, divided by the window length and the total node
//! injection bandwidth; a delivered packet's bytes arrive over its last serialisation, and one
//! that straddles a window edge counts only its share inside (likewise link busy time).
//! Conservation (`injected = delivered + dropped + in flight`, no packet delivered twice) is
//! checked at the end of every run. The deadlock watchdog declares a deadlock only when it finds
//! a cycle of input queues waiting on each other ([`Network::deadlock_cycle`]).
//!
//! With dynamic faults (`[[faults.events]]`, `[[faults.random]]`) the report adds a `faults`
//! section: every failure and repair with its detection time, the losses by cause, the table
//! rewrites, and a timeline of the measurement window in [`TIMELINE_BINS`] equal bins (packets
//! delivered, accepted load, mean latency of the measured packets delivered in the bin, packets
//! lost or dropped), so a run shows its figures before and after a fault.

use crate::scenario::Scenario;
use crate::traffic::{Destinations, Process, RailChoice, SizeSampler, TrafficConfig};
use hpcnet_des::driver::{Driver, Model, Step, Stop};
use hpcnet_des::rng::SimRng;
use hpcnet_des::stats::{HistId, Registry, StatRecord, StatValue, SummaryId};
use hpcnet_des::{Bytes, EventQueue, RngStreams, SimTime};
use hpcnet_fabric::net::{Blocked, Endpoints, NetEvent, Network};
use hpcnet_fabric::routing::TableMemory;
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::{Packet, RouteError};
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

enum Ev {
    Net(NetEvent),
    Gen(NodeId),
}

// The network's event is one word whose kind byte leaves room for this enum's tag: the queue's
// node stays 32 bytes and the popped event fits a register.
const _: () = assert!(std::mem::size_of::<Ev>() == 8);

impl From<NetEvent> for Ev {
    fn from(e: NetEvent) -> Self {
        Ev::Net(e)
    }
}

/// Latency figures in nanoseconds; each is `None` (JSON `null`) when no measured packet was
/// delivered, so a run that measured nothing cannot pass for one with zero latency.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LatencyNs {
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
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
    /// Sources traced (all, or a deterministic sample of large machines; with `by_symmetry`,
    /// the nodes of one router).
    pub sources_traced: usize,
    /// Exact loads of uniform traffic on a torus or hypercube with dimension-order routing, from
    /// the paths of one router's nodes to every node (every router carries the same load on the
    /// same port); reported only when true (networks of more than 1024 nodes).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub by_symmetry: bool,
}

/// A detected deadlock: time and the blocked input channels.
#[derive(Clone, Debug, Serialize)]
pub struct DeadlockReport {
    pub at_ns: f64,
    pub in_flight: u64,
    /// Packets still waiting in node injection queues.
    pub queued_at_sources: usize,
    /// Input queues each waiting for credits held by the next, the last waiting on the first:
    /// the evidence of the deadlock (empty when the run ended with packets left but no event,
    /// e.g. behind a failed link, without such a cycle).
    pub cycle: Vec<Blocked>,
    /// Set when the fabric switches wormhole: `cycle` then lists every occupied VC of a fabric
    /// in which nothing is scheduled to move, not one cycle walked through them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub occupied_vcs: bool,
    pub blocked: Vec<Blocked>,
}

/// Bins of the fault timeline over the measurement window.
pub const TIMELINE_BINS: usize = 10;

/// One bin of the fault timeline.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TimelineBin {
    pub from_ns: f64,
    pub to_ns: f64,
    /// Packets delivered in the bin (measured or not).
    pub delivered: u64,
    /// Bytes delivered in the bin over the bin's length and the nodes' injection bandwidth.
    pub accepted_load: f64,
    /// Mean creation-to-delivery latency of the measured packets delivered in the bin.
    pub mean_latency_ns: Option<f64>,
    /// Packets lost or dropped in the bin.
    pub dropped: u64,
}

/// What the faults of a run did (`faults` in the report).
#[derive(Clone, Debug, Serialize)]
pub struct FaultReport {
    pub stats: hpcnet_fabric::net::FaultStats,
    pub events: Vec<hpcnet_fabric::net::FaultRecord>,
    pub timeline: Vec<TimelineBin>,
    /// The channel-load bound of the routing the run ended with (failed links and rewritten
    /// tables; pairs with no route counted up to where they stop), beside `channel_load_bound`
    /// of the routing it started with. None when tracing it would take more than a quarter of
    /// [`BOUND_HOP_BUDGET`].
    pub channel_load_bound_at_end: Option<ChannelLoadBound>,
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
    /// Mean injection-to-delivery latency of the measured packets (`None`: no packet measured).
    pub network_latency_ns: Option<f64>,
    /// Mean analytical zero-load latency of the measured packets: for H routers on the path,
    /// (H + 1) × link latency + H × router latency + serialisation at the injection rate.
    pub zero_load_latency_ns: Option<f64>,
    /// Mean routers traversed by the measured packets.
    pub mean_hops: Option<f64>,
    /// Router traversals of all delivered packets (measured or not).
    pub total_hops: u64,
    pub link_utilisation: LinkUtilisation,
    pub channel_load_bound: Option<ChannelLoadBound>,
    /// Why `channel_load_bound` is missing, when it was not computed (too many router hops to
    /// trace, see [`BOUND_HOP_BUDGET`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_load_bound_skipped: Option<String>,
    /// accepted_load / saturation_bound.
    pub accepted_over_bound: Option<f64>,
    pub table_memory: Option<TableMemory>,
    /// Every packet was delivered or dropped before the end of the run (nothing left in the
    /// network or at the sources).
    pub drained: bool,
    /// Packets injected and neither delivered nor dropped when the run ended.
    pub packets_in_flight: u64,
    /// Packets created and still waiting at their sources when the run ended.
    pub packets_queued_at_sources: u64,
    /// injected = delivered + dropped + in flight, and no packet delivered twice.
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
    /// Link-level reliability counters of every link direction where one is not zero
    /// (corrupted packets, retransmissions, replay-buffer stalls, store-and-forward
    /// fallbacks; the totals are the `link.*` statistics).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub link_errors: Vec<hpcnet_fabric::net::LinkErrors>,
    /// Dynamic faults: what happened and the figures around it (only with dynamic faults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultReport>,
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

/// Name of the latency histogram (creation to tail delivery of measured packets).
const LATENCY_STAT: &str = "packet.latency";

struct Stats {
    reg: Registry,
    latency: HistId,
    net_latency: HistId,
    hops: SummaryId,
    zero_load: SummaryId,
}

/// The delivery side of a synthetic run: what the network hands the nodes is counted here
/// (window throughput, duplicate check, latency statistics of measured packets).
struct Collector {
    warm: SimTime,
    meas_end: SimTime,
    link_lat: SimTime,
    router_lat: SimTime,
    rail_rate: hpcnet_des::BitsPerSec,
    bytes_delivered_window: u64,
    measured_delivered: u64,
    /// Delivered tags (tags are the generation sequence 0, 1, ...), one bit each: a duplicate
    /// delivery is caught on the spot, without collecting and sorting every tag afterwards.
    seen_tags: Vec<u64>,
    duplicate: bool,
    stats: Stats,
    /// Per timeline bin (dynamic faults only): bytes and packets delivered, latency sum and
    /// count of measured packets.
    bins: Option<Vec<[u64; 4]>>,
}

impl Collector {
    fn new(
        warm: SimTime,
        meas_end: SimTime,
        link_lat: SimTime,
        router_lat: SimTime,
        rail_rate: hpcnet_des::BitsPerSec,
    ) -> Collector {
        let mut reg = Registry::new();
        let stats = Stats {
            latency: reg
                .histogram(LATENCY_STAT, "ps", "creation to tail delivery, measured packets")
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
        Collector {
            warm,
            meas_end,
            link_lat,
            router_lat,
            rail_rate,
            bytes_delivered_window: 0,
            measured_delivered: 0,
            seen_tags: Vec::new(),
            duplicate: false,
            stats,
            bins: None,
        }
    }
}

impl Endpoints for Collector {
    #[inline(always)]
    fn deliver(&mut self, p: &mut Packet, at: SimTime) {
        // The packet's bytes arrive during its last serialisation, [at − ser, at]: the share
        // inside the window counts, so a packet straddling an edge counts in part.
        let ser = self.rail_rate.serialization(Bytes(p.size as u64));
        let from = at.saturating_sub(ser).max(self.warm);
        let to = at.min(self.meas_end);
        if to > from {
            // A packet wholly inside the window (the common case) counts whole: the same value
            // as the proportional share, without its 128-bit division.
            let inside = if ser.0 == 0 || (to - from) == ser {
                p.size as u64
            } else {
                (p.size as u128 * (to - from).0 as u128 / ser.0 as u128) as u64
            };
            self.bytes_delivered_window += inside;
        }
        if let Some(bins) = self.bins.as_mut() {
            if at >= self.warm && at < self.meas_end {
                let w = (self.meas_end - self.warm).0;
                let i = (((at - self.warm).0 as u128 * TIMELINE_BINS as u128) / w as u128) as usize;
                let b = &mut bins[i.min(TIMELINE_BINS - 1)];
                b[0] += p.size as u64;
                b[1] += 1;
                if p.measured() {
                    b[2] += (at - p.created).0;
                    b[3] += 1;
                }
            }
        }
        let (word, bit) = ((p.tag / 64) as usize, 1u64 << (p.tag % 64));
        if word >= self.seen_tags.len() {
            self.seen_tags.resize(word + 1, 0);
        }
        self.duplicate |= self.seen_tags[word] & bit != 0;
        self.seen_tags[word] |= bit;
        if p.measured() {
            let s = &mut self.stats;
            self.measured_delivered += 1;
            s.reg.record(s.latency, (at - p.created).0);
            s.reg.record(s.net_latency, (at - p.injected).0);
            s.reg.push(s.hops, p.hops as u64);
            let h = p.hops as u64;
            let zl = self.link_lat * (h + 1) + self.router_lat * h + ser;
            s.reg.push(s.zero_load, zl.0);
        }
    }
}

/// The traffic sources: one open-loop generator per node.
struct Generator<'a> {
    sources: Vec<Source>,
    dests: &'a Destinations,
    tc: &'a TrafficConfig,
    sizes: SizeSampler<'a>,
    header: u32,
    rails: u8,
    warm: SimTime,
    meas_end: SimTime,
    /// Mean time between packets of a node at full load (the Bernoulli slot), and at the
    /// offered load, in ps.
    slot_ps: f64,
    period_ps: f64,
    /// ln(1 − load), for Bernoulli gaps.
    ln_idle: f64,
    generated: u64,
    measured: u64,
    bytes_created_window: u64,
}

/// Time to a source's next packet: `period_ps` apart (periodic), or a geometric number of
/// `slot_ps` slots (Bernoulli; `ln_idle` = ln(1 − load)).
fn gap(tc: &TrafficConfig, slot_ps: f64, period_ps: f64, ln_idle: f64, rng: &mut SimRng) -> SimTime {
    match tc.process {
        Process::Periodic => SimTime(period_ps.round().max(1.0) as u64),
        Process::Bernoulli => {
            // Geometric number of slots (≥ 1) with success probability = load.
            let u: f64 = rng.gen::<f64>();
            let k = if tc.load >= 1.0 {
                1.0
            } else {
                floor_nonneg((1.0 - u).ln() / ln_idle) + 1.0
            };
            SimTime(round_nonneg(k * slot_ps).max(1.0) as u64)
        }
    }
}

/// Below this, an `f64` converts to `i64` and back exactly, and `x − trunc(x)` is exact.
const EXACT_INT: f64 = (1u64 << 52) as f64;

/// `x.floor()` for the gap's quotient, which is never negative: a truncating conversion in
/// the usual range (the library call cost about 10 instructions per packet), `floor` outside it.
/// Bit for bit equal to `x.floor()` for every `x`.
#[inline(always)]
fn floor_nonneg(x: f64) -> f64 {
    if x > 0.0 && x < EXACT_INT {
        (x as i64) as f64
    } else {
        x.floor()
    }
}

/// `y.round()` (halves away from zero) for a non-negative time in ps: truncation plus the exact
/// fractional part in the usual range, `round` outside it. Bit for bit equal to `y.round()`.
#[inline(always)]
fn round_nonneg(y: f64) -> f64 {
    if y > 0.0 && y < EXACT_INT {
        // Signed conversions: one instruction each way (the unsigned ones branch).
        let t = y as i64;
        let r = if y - t as f64 >= 0.5 { t + 1 } else { t };
        r as f64
    } else {
        y.round()
    }
}

impl Generator<'_> {
    /// Node `node`'s source fires at `now`: it injects the packet it creates (none when the
    /// pattern sends this one to the node itself and `traffic.allow_self` is false), built in
    /// the network's packet slot, and returns its next firing.
    #[inline(always)]
    fn fire(
        &mut self,
        node: NodeId,
        now: SimTime,
        net: &mut Network,
        q: &mut EventQueue<Ev>,
        col: &mut Collector,
    ) -> Result<Option<SimTime>, RouteError> {
        let (tc, rails) = (self.tc, self.rails);
        let s = &mut self.sources[node.index()];
        let dst = self.dests.next(node, s.seq, &mut s.rng);
        let payload = self.sizes.sample(&mut s.rng);
        s.seq += 1;
        if dst != node || tc.allow_self {
            let rail = match tc.rails {
                // One rail: every choice is rail 0 (no call, no division per packet).
                _ if rails == 1 => 0,
                RailChoice::Fixed => 0,
                RailChoice::RoundRobin => {
                    s.rr_rail = (s.rr_rail + 1) % rails;
                    s.rr_rail
                }
                RailChoice::Adaptive => net.least_loaded_rail_to(node, dst, (s.seq % rails as u64) as u8),
            };
            let in_window = now >= self.warm && now < self.meas_end;
            let (tag, header) = (self.generated, self.header);
            if in_window {
                self.measured += 1;
                self.bytes_created_window += (payload as u32 + header) as u64;
            }
            self.generated += 1;
            net.inject_with(q, col, |p| {
                *p = Packet::new(tag, node, dst, payload as u32, header, now);
                p.rail = rail;
                p.set_measured(in_window);
            })?;
        }
        let s = &mut self.sources[node.index()];
        let g = gap(tc, self.slot_ps, self.period_ps, self.ln_idle, &mut s.rng);
        Ok((now + g < self.meas_end).then_some(now + g))
    }
}

/// A synthetic run as the kernel's driver sees it: sources, network and collector on one event
/// queue.
struct Run<'a> {
    q: EventQueue<Ev>,
    net: Network,
    col: Collector,
    gen: Generator<'a>,
    /// Link busy snapshots at the end of warm-up and of measurement.
    busy: [Option<Vec<u64>>; 2],
    error: Option<RunError>,
    /// When the watchdog last found no deadlock (its clock restarts there).
    checked_at: SimTime,
    /// The wait cycle that confirmed a deadlock.
    cycle: Vec<Blocked>,
}

impl Model for Run<'_> {
    fn now(&self) -> SimTime {
        self.q.now()
    }

    #[inline(always)]
    fn step_before(&mut self, limit: SimTime) -> Step {
        let Some(ev) = self.q.pop_event_before(limit) else {
            return if self.q.is_empty() { Step::Empty } else { Step::Limit };
        };
        let now = self.q.now();
        match ev {
            Ev::Net(e) => self.net.handle(&mut self.q, e, &mut self.col),
            Ev::Gen(node) => match self.gen.fire(node, now, &mut self.net, &mut self.q, &mut self.col) {
                Ok(next) => {
                    if let Some(t) = next {
                        let by = self.net.node_origin(node);
                        self.q.schedule_by(by, t, Ev::Gen(node));
                    }
                }
                Err(e) => {
                    self.error = Some(routing_error(e));
                    return Step::Empty;
                }
            },
        }
        Step::Handled
    }

    #[inline(always)]
    fn stalled_for(&self) -> Option<SimTime> {
        // Time test first: it is almost always false, and `in_flight` costs three loads.
        let since = self.net.last_progress().max(self.checked_at);
        let s = self.q.now().saturating_sub(since);
        (s > SimTime::ZERO && self.net.in_flight() > 0).then_some(s)
    }

    /// Deadlock only on evidence: a cycle of input queues each waiting for credits held by the
    /// next. Without one, the packets are slow (long links, slow serialisation), not stuck.
    #[cold]
    fn confirm_stall(&mut self) -> bool {
        match self.net.deadlock_cycle() {
            Some(cycle) => {
                self.cycle = cycle;
                true
            }
            None => {
                self.checked_at = self.q.now();
                false
            }
        }
    }

    #[inline(never)]
    fn boundary(&mut self, index: usize) {
        let at = if index == 0 { self.gen.warm } else { self.gen.meas_end };
        self.busy[index] = Some(self.net.busy_snapshot_at(at));
    }
}

/// A packet a source created has no route (kept out of the event loop's code).
#[cold]
#[inline(never)]
fn routing_error(e: RouteError) -> RunError {
    RunError::Config(format!("routing: {e}"))
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
    net.set_seed(sc.file.seed);
    let tc: &TrafficConfig = &sc.traffic;
    let streams = RngStreams::new(sc.file.seed);
    let mut pattern_rng = streams.stream("pattern", 0);
    let dests = Destinations::new(tc, &net.topo, &mut pattern_rng);
    let n = net.topo.nodes.len();
    let rails = net.rails();
    let header = sc.fabric.packet.header.0;
    let mean_wire = tc.size.mean() + header as f64;
    // Node bandwidth = sum of its rails; each rail is offered load × its own rate.
    let rail_rate = net.injection_rate(NodeId(0), 0);
    let use_rails = if tc.rails == RailChoice::Fixed { 1 } else { rails };
    let node_bps: f64 = (0..rails).map(|r| net.injection_rate(NodeId(0), r).0 as f64).sum();
    // Mean time between packets of a node, in ps, and the Bernoulli slot.
    let slot_ps = mean_wire * 8.0 * 1e12 / node_bps;
    let period_ps = slot_ps / tc.load;
    let warm = sc.file.sim.warmup;
    let meas_end = warm + sc.file.sim.measure;
    let drain_end = meas_end + sc.file.sim.drain;
    let watchdog = sc.fabric.faults.watchdog;

    let mut col = Collector::new(
        warm,
        meas_end,
        sc.fabric.link.latency,
        sc.fabric.router.latency,
        rail_rate,
    );
    if net.has_dynamic_faults() {
        col.bins = Some(vec![[0; 4]; TIMELINE_BINS]);
    }

    let mut q: EventQueue<Ev> = EventQueue::new();
    q.reserve_origins(net.origins());
    net.schedule_faults(&mut q);
    let mut sources: Vec<Source> = (0..n)
        .map(|i| Source {
            rng: streams.stream("source", i as u64),
            seq: 0,
            rr_rail: 0,
        })
        .collect();
    for (i, s) in sources.iter_mut().enumerate() {
        // Random phase so periodic sources do not inject in lock-step. Like every later packet,
        // the first is created only before the end of measurement: a short run on a large
        // machine (phase up to one mean gap, measurement shorter than that) would otherwise
        // create one packet per node after the sources stopped, all of it drain work.
        let phase = SimTime((s.rng.gen::<f64>() * period_ps) as u64);
        if phase < meas_end {
            q.schedule_by(net.node_origin(NodeId(i as u32)), phase, Ev::Gen(NodeId(i as u32)));
        }
    }
    // The bound of the routing the run starts with (faults may change it during the run; the
    // fault report adds the bound of the routing it ends with).
    let bound_at_start = channel_load_bound(&net, &dests, tc, use_rails, node_bps, &streams);
    let mut run = Run {
        q,
        net,
        col,
        gen: Generator {
            sources,
            dests: &dests,
            tc,
            sizes: tc.size.sampler(),
            header: header as u32,
            rails,
            warm,
            meas_end,
            slot_ps,
            period_ps,
            ln_idle: (1.0 - tc.load).ln(),
            generated: 0,
            measured: 0,
            bytes_created_window: 0,
        },
        busy: [None, None],
        error: None,
        checked_at: SimTime::ZERO,
        cycle: Vec::new(),
    };
    // Phase boundaries: warm-up end and measurement end (link busy snapshots); the run ends
    // after the drain (`sim.drain` after the measurement) at the latest.
    let drain_stop = SimTime(drain_end.0.saturating_add(1));
    let mut cb = |now: SimTime| {
        if let Some(p) = progress.as_mut() {
            p(now, meas_end)
        }
    };
    let loop_start = Instant::now();
    let out = Driver::new()
        .phases(vec![warm.min(meas_end), meas_end])
        .end(drain_stop)
        .watchdog(watchdog)
        .progress(&mut cb)
        .run(&mut run);
    let loop_seconds = loop_start.elapsed().as_secs_f64();
    let Run {
        q,
        net,
        col,
        gen,
        busy: [busy_start, busy_end],
        error,
        checked_at: _,
        cycle,
    } = run;
    if let Some(e) = error {
        return Err(match e {
            RunError::Config(m) => RunError::Config(format!("{}: {m}", sc.source)),
            e => e,
        });
    }
    let (generated, measured, bytes_created_window) = (gen.generated, gen.measured, gen.bytes_created_window);
    let events = q.events_processed();
    let end = q.now();
    let stuck = net.in_flight() > 0 || net.queued_at_sources() > 0;
    let deadlock = (matches!(out.stop, Stop::Watchdog { .. }) || (stuck && q.is_empty())).then(|| {
        // The watchdog found a cycle of waiting queues, or nothing was left to happen but
        // packets remain: they can never move.
        DeadlockReport {
            at_ns: end.as_ns_f64(),
            in_flight: net.in_flight(),
            queued_at_sources: net.queued_at_sources(),
            cycle: if cycle.is_empty() {
                net.deadlock_cycle().unwrap_or_default()
            } else {
                cycle
            },
            occupied_vcs: net.config().link.switching == hpcnet_fabric::config::Switching::Wormhole,
            blocked: net.blocked(32),
        }
    });
    let busy_start = busy_start.unwrap_or_else(|| net.busy_snapshot_at(warm));
    let busy_end = busy_end.unwrap_or_else(|| net.busy_snapshot_at(meas_end));
    let drained = net.in_flight() == 0 && net.queued_at_sources() == 0;

    // Conservation: every injected packet delivered or dropped, none twice.
    let c = net.counters();
    let dup = col.duplicate;
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
    let accepted_load = col.bytes_delivered_window as f64 / denom;

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

    let (bound, channel_load_bound_skipped) = match bound_at_start {
        Ok(b) => (b, None),
        Err(why) => (None, Some(why)),
    };
    let accepted_over_bound = bound.as_ref().map(|b| accepted_load / b.saturation_bound);

    let mut drops_by_reason = BTreeMap::new();
    for d in net.drops() {
        *drops_by_reason.entry(d.reason.cause().to_string()).or_insert(0) += 1;
    }

    let faults = net.fault_stats().filter(|_| net.has_dynamic_faults()).map(|stats| {
        let bins = col.bins.clone().unwrap_or_default();
        let w = sc.file.sim.measure.0 as f64 / TIMELINE_BINS as f64;
        let timeline = bins
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let (from, to) = (warm.0 as f64 + i as f64 * w, warm.0 as f64 + (i + 1) as f64 * w);
                let dropped = net
                    .drops()
                    .iter()
                    .filter(|d| (d.at.0 as f64) >= from && (d.at.0 as f64) < to)
                    .count() as u64;
                TimelineBin {
                    from_ns: from / 1e3,
                    to_ns: to / 1e3,
                    delivered: b[1],
                    accepted_load: b[0] as f64 / (w / 1e12 * node_bps / 8.0 * n as f64),
                    mean_latency_ns: (b[3] > 0).then(|| b[2] as f64 / b[3] as f64 / 1e3),
                    dropped,
                }
            })
            .collect();
        FaultReport {
            stats,
            events: net.fault_log().to_vec(),
            timeline,
            // Traced (failures break the symmetry), within a quarter of the hop budget: it is
            // an addition to the report, not worth seconds on large machines.
            channel_load_bound_at_end: traced_bound(
                &net,
                &dests,
                tc,
                use_rails,
                node_bps,
                &streams,
                BOUND_HOP_BUDGET / 4,
            )
            .ok()
            .flatten(),
        }
    });
    let measured_delivered = col.measured_delivered;
    let mut stats = col.stats;
    // Every figure below is of measured packets only: none when none was delivered.
    let any = measured_delivered > 0;
    let ps_to_ns = |v: Option<u64>| v.filter(|_| any).map(|x| x as f64 / 1e3);
    // The collector's statistics (the report's percentiles of the latency are read from them,
    // so that each is computed once).
    let collector_stats = stats.reg.report();
    let (lat_p50, lat_p99) = collector_stats
        .iter()
        .find_map(|r| match &r.value {
            StatValue::Histogram(h) if r.name == LATENCY_STAT => Some((h.p50, h.p99)),
            _ => None,
        })
        .expect("the latency histogram is registered");
    let lat = stats.reg.histogram_of(stats.latency);
    let latency_ns = LatencyNs {
        mean: lat.summary().mean().filter(|_| any).map(|m| m / 1e3),
        p50: ps_to_ns(lat_p50),
        p99: ps_to_ns(lat_p99),
        max: ps_to_ns(lat.summary().max()),
    };
    let network_latency_ns = stats
        .reg
        .histogram_of(stats.net_latency)
        .summary()
        .mean()
        .filter(|_| any)
        .map(|m| m / 1e3);
    let zero_load_latency_ns = stats
        .reg
        .summary_of(stats.zero_load)
        .mean()
        .filter(|_| any)
        .map(|m| m / 1e3);
    let mean_hops = stats.reg.summary_of(stats.hops).mean().filter(|_| any);

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
        channel_load_bound_skipped,
        accepted_over_bound,
        table_memory: net.routing.table_memory.clone(),
        drained,
        packets_in_flight: net.in_flight(),
        packets_queued_at_sources: net.queued_at_sources() as u64,
        conservation_ok,
        deadlock,
        events,
        sim_time_ns: end.as_ns_f64(),
        wall_seconds: wall.elapsed().as_secs_f64(),
        loop_seconds,
        stats: {
            // The collector's statistics, then the network's own counters.
            let mut v = collector_stats;
            v.extend(net.statistics());
            v
        },
        links,
        link_errors: net.link_errors(),
        faults,
        resolved_scenario: sc.resolved_json(),
    })
}

/// Sources traced for the channel-load bound: all of them up to this many nodes, and above it
/// as long as tracing all fits [`BOUND_HOP_BUDGET`]; beyond, a deterministic sample of this many
/// (or, on symmetric networks, one router's, see [`symmetric_bound`]).
const BOUND_SOURCES: usize = 1024;

/// Router hops the sampled channel-load trace may take (~5 s on the reference machine), projected
/// from the first source; above it the bound is not computed and the report says why. Uniform
/// traffic traces every destination of each sampled source, so without the limit the cost grows
/// as 1024 × nodes × path length: hours for millions of nodes.
pub const BOUND_HOP_BUDGET: u64 = 1 << 28;

/// Channel-load bound (Dally & Towles §3.3): trace the idle-network path of every flow and add
/// its rate to every channel it crosses; the busiest channel bounds the accepted load.
/// Random patterns use their exact destination distribution; adaptive routing is traced with
/// its idle-network (deterministic) choice, so the bound is that of the deterministic paths.
/// `Err` explains why the bound was not computed.
fn channel_load_bound(
    net: &Network,
    dests: &Destinations,
    tc: &TrafficConfig,
    rails: u8,
    node_bps: f64,
    streams: &RngStreams,
) -> Result<Option<ChannelLoadBound>, String> {
    if let Some(why) = net.routing.bound_untraced() {
        return Err(why.to_string());
    }
    let n = net.topo.nodes.len();
    let uniform = matches!(
        tc.pattern,
        crate::traffic::Pattern::Uniform | crate::traffic::Pattern::AllToAll
    );
    if n > BOUND_SOURCES && uniform && !tc.allow_self && net.routing.translation_invariant(&net.topo) {
        return Ok(symmetric_bound(net, rails, node_bps));
    }
    traced_bound(net, dests, tc, rails, node_bps, streams, BOUND_HOP_BUDGET)
}

/// The flows of `src`: (destination, fraction of its traffic).
fn flows_of(src: NodeId, n: usize, dests: &Destinations, tc: &TrafficConfig, rng: &mut SimRng) -> Vec<(NodeId, f64)> {
    match tc.pattern {
        crate::traffic::Pattern::Uniform if tc.allow_self => {
            (0..n as u32).map(NodeId).map(|d| (d, 1.0 / n as f64)).collect()
        }
        crate::traffic::Pattern::Uniform | crate::traffic::Pattern::AllToAll => (0..n as u32)
            .map(NodeId)
            .filter(|&d| d != src)
            .map(|d| (d, 1.0 / (n - 1) as f64))
            .collect(),
        crate::traffic::Pattern::Hotspot => {
            let hot = if tc.hotspot_nodes.is_empty() {
                vec![NodeId(0)]
            } else {
                tc.hotspot_nodes.clone()
            };
            let mut v: Vec<(NodeId, f64)> = (0..n as u32)
                .map(NodeId)
                .filter(|&d| d != src)
                .map(|d| (d, (1.0 - tc.hotspot_fraction) / (n - 1) as f64))
                .collect();
            for h in &hot {
                v.push((*h, tc.hotspot_fraction / hot.len() as f64));
            }
            v.retain(|(d, _)| *d != src);
            v
        }
        crate::traffic::Pattern::GroupShift => match dests.next_group(src) {
            Some(group) => {
                let w = 1.0 / group.len() as f64;
                group.map(|d| (NodeId(d), w)).collect()
            }
            None => Vec::new(),
        },
        _ => {
            let d = dests.next(src, 0, rng);
            if d == src && !tc.allow_self {
                Vec::new()
            } else {
                vec![(d, 1.0)]
            }
        }
    }
}

/// The bound from the traced flows of every source, or, when that would exceed `hop_budget`, of
/// a sample of [`BOUND_SOURCES`] spread evenly over node order (loads scaled up by the stride). `Err` when the first source's paths,
/// times the number of sources, project more than `hop_budget` router hops.
fn traced_bound(
    net: &Network,
    dests: &Destinations,
    tc: &TrafficConfig,
    rails: u8,
    node_bps: f64,
    streams: &RngStreams,
    hop_budget: u64,
) -> Result<Option<ChannelLoadBound>, String> {
    let n = net.topo.nodes.len();
    let base: Vec<usize> = net.topo.port_offsets().into_iter().map(|b| b as usize).collect();
    let mut load = vec![0.0f64; *base.last().expect("total")];
    // Node injection channels carry load/rails each; they are never the binding channel below 1.
    // Every source is traced when that fits the hop budget (a sample's busiest channel is
    // biased high); otherwise a sample of BOUND_SOURCES.
    let step = if n > BOUND_SOURCES
        && first_source_hops(net, n, dests, tc, rails, streams).saturating_mul(n as u64) > hop_budget
    {
        n.div_ceil(BOUND_SOURCES)
    } else {
        1
    };
    let sources = n.div_ceil(step);
    let mut traced = 0usize;
    let mut hops = 0u64;
    let mut rng = streams.stream("bound", 0);
    for src in (0..n).step_by(step) {
        traced += 1;
        for (dst, w) in flows_of(NodeId(src as u32), n, dests, tc, &mut rng) {
            let salts = net.routing.expectation_salts();
            for rail in 0..rails {
                let share = w * node_bps / rails as f64 / salts.len() as f64;
                for &salt in salts {
                    // Unroutable pairs are reported by the run itself (dropped packets).
                    let _ = net
                        .routing
                        .walk_salted(&net.topo, NodeId(src as u32), dst, rail, 0, salt, |r, p, _| {
                            load[base[r.index()] + p.index()] += share;
                            hops += 1;
                        });
                }
            }
        }
        let projected = hops.saturating_mul(sources as u64);
        if traced == 1 && projected > hop_budget {
            return Err(format!(
                "tracing the flows of {sources} sources over {n} nodes would take about {projected:.1e} router hops, more than the limit of {budget:.1e}",
                projected = projected as f64,
                budget = hop_budget as f64
            ));
        }
    }
    let rate = net.config().link.data_rate().0 as f64;
    let Some((g, &l)) = load.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)) else {
        return Ok(None);
    };
    let r = base.partition_point(|&b| b <= g) - 1;
    let p = g - base[r];
    let gamma = l / rate * step as f64;
    Ok(Some(ChannelLoadBound {
        max_channel_load: gamma,
        saturation_bound: (1.0 / gamma).min(1.0),
        channel: format!("r{r}.p{p}"),
        sources_traced: traced,
        by_symmetry: false,
    }))
}

/// Router hops of the traced flows of source 0 (the probe that sizes the trace).
fn first_source_hops(
    net: &Network,
    n: usize,
    dests: &Destinations,
    tc: &TrafficConfig,
    rails: u8,
    streams: &RngStreams,
) -> u64 {
    let mut rng = streams.stream("bound", 0);
    let mut hops = 0u64;
    for (dst, _) in flows_of(NodeId(0), n, dests, tc, &mut rng) {
        for rail in 0..rails {
            let _ = net
                .routing
                .walk(&net.topo, NodeId(0), dst, rail, 0, |_, _, _| hops += 1);
        }
    }
    hops
}

/// Exact bound of uniform traffic on a translation-invariant network
/// ([`hpcnet_fabric::routing::Routing::translation_invariant`]): every router's port p carries
/// the same load, the sum over the flows of one router's nodes of the shares of their hops that
/// leave by port p (translate each flow so that its source sits on router 0). Cost: one path per
/// node, instead of a sample of sources times all nodes.
fn symmetric_bound(net: &Network, rails: u8, node_bps: f64) -> Option<ChannelLoadBound> {
    let n = net.topo.nodes.len();
    let r0 = net.routing.attach(NodeId(0), 0).0;
    let mut load = vec![0.0f64; net.topo.routers[r0.index()].ports.len()];
    let w = 1.0 / (n - 1) as f64;
    let mut traced = 0;
    for src in (0..n as u32).map(NodeId).filter(|&s| net.routing.attach(s, 0).0 == r0) {
        traced += 1;
        for dst in (0..n as u32).map(NodeId).filter(|&d| d != src) {
            for rail in 0..rails {
                let share = w * node_bps / rails as f64;
                let _ = net.routing.walk(&net.topo, src, dst, rail, 0, |_, p, _| {
                    load[p.index()] += share;
                });
            }
        }
    }
    let rate = net.config().link.data_rate().0 as f64;
    let (p, &l) = load.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1))?;
    let gamma = l / rate;
    Some(ChannelLoadBound {
        max_channel_load: gamma,
        saturation_bound: (1.0 / gamma).min(1.0),
        channel: format!("r{r0}.p{p}"),
        sources_traced: traced,
        by_symmetry: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(topology: &str, routing: &str, extra: &str) -> Scenario {
        let text = format!(
            "seed = 3\n[topology]\n{topology}\n[link]\nlanes = 1\nlane_rate = \"10 Gb/s\"\nencoding = \"none\"\nlatency = \"10 ns\"\n\
             [router]\nvcs = 3\nprivate_credits = 16\nlatency = \"20 ns\"\n[routing]\n{routing}\n\
             [traffic]\npattern = \"uniform\"\nload = 0.3\n[sim]\nwarmup = \"1 us\"\nmeasure = \"2 us\"\n{extra}\n"
        );
        Scenario::from_str_named(&text, "test.toml", "test", &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    fn network(sc: &Scenario) -> Network {
        Network::new(sc.topology.clone(), sc.fabric.clone()).expect("network")
    }

    /// The gap's floor and round agree bit for bit with the library's on every value class:
    /// halves, the largest double below a half, signed zero, the edge of the exact range,
    /// huge values, infinity and NaN, and a million random quotients of the Bernoulli gap.
    #[test]
    fn gap_floor_and_round_match_the_library() {
        let mut xs = vec![
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            0.49999999999999994,
            1.0 - f64::EPSILON / 2.0,
            4503599627370495.5,
            EXACT_INT,
            EXACT_INT + 1.0,
            1e300,
            f64::INFINITY,
            f64::NAN,
            -1.5,
        ];
        let mut rng = RngStreams::new(9).stream("gap-test", 0);
        let ln_idle = (1.0f64 - 0.45).ln();
        for _ in 0..1_000_000 {
            let u: f64 = rng.gen();
            xs.push((1.0 - u).ln() / ln_idle);
            xs.push(rng.gen::<f64>() * 1e6);
        }
        for x in xs {
            assert_eq!(floor_nonneg(x).to_bits(), x.floor().to_bits(), "floor of {x:e}");
            assert_eq!(round_nonneg(x).to_bits(), x.round().to_bits(), "round of {x:e}");
        }
    }

    /// [`traced_bound`] of the scenario's traffic on one rail with a hop budget.
    fn traced_within(sc: &Scenario, net: &Network, budget: u64) -> Result<Option<ChannelLoadBound>, String> {
        let streams = RngStreams::new(sc.file.seed);
        let dests = Destinations::new(&sc.traffic, &net.topo, &mut streams.stream("pattern", 0));
        let rate = net.injection_rate(NodeId(0), 0).0 as f64;
        traced_bound(net, &dests, &sc.traffic, 1, rate, &streams, budget)
    }

    /// The bound from every source's traced flows (no sample, no budget).
    fn traced(sc: &Scenario, net: &Network) -> ChannelLoadBound {
        traced_within(sc, net, u64::MAX).expect("within budget").expect("bound")
    }

    const DOR: &str = "algorithm = \"dimension_order\"";

    #[test]
    fn one_router_of_a_torus_or_hypercube_gives_the_exact_uniform_bound() {
        for topology in [
            // Even radices: distance k/2 ties go the plus way (tie = "positive"), so + and −
            // channels differ.
            "kind = \"torus\"\nk = [4, 6]\nconcentration = 2",
            "kind = \"torus\"\nk = [3, 5]\nconcentration = 2",
            "kind = \"torus\"\nk = [3, 4, 5]",
            "kind = \"torus\"\nk = [2, 5]\nconcentration = 3",
            "kind = \"hypercube\"\nn = 5\nconcentration = 2",
        ] {
            for routing in [
                format!("{DOR}\ndeadlock = \"bubble\"\ntie = \"positive\""),
                format!("{DOR}\ndeadlock = \"dateline\"\ntie = \"positive\""),
                "algorithm = \"source\"".to_string(),
            ] {
                if topology.contains("hypercube") && routing.contains("deadlock") {
                    continue;
                }
                let sc = scenario(topology, &routing, "");
                let net = network(&sc);
                // Source routes follow the default tie rule (`balanced`), which turns with the
                // coordinate's parity: no symmetry on rings of even size.
                let even = topology.contains('4') || topology.contains('6') || topology.contains("[2");
                if routing.contains("source") && even && !topology.contains("hypercube") {
                    assert!(!net.routing.translation_invariant(&net.topo), "{topology} {routing}");
                    continue;
                }
                assert!(net.routing.translation_invariant(&net.topo), "{topology} {routing}");
                let all = traced(&sc, &net);
                let rate = net.injection_rate(NodeId(0), 0).0 as f64;
                let sym = symmetric_bound(&net, 1, rate).expect("bound");
                assert!(sym.by_symmetry && !all.by_symmetry);
                assert_eq!(all.sources_traced, net.topo.nodes.len());
                let c = net.topo.nodes.len() / net.topo.routers.len();
                assert_eq!(sym.sources_traced, c);
                let rel = (sym.max_channel_load - all.max_channel_load).abs() / all.max_channel_load;
                assert!(
                    rel < 1e-12,
                    "{topology}: symmetric {} vs traced {}",
                    sym.max_channel_load,
                    all.max_channel_load
                );
            }
        }
    }

    #[test]
    fn ring_loads_by_hand() {
        // 8-ary 1-cube, one node per router, 10 Gb/s links and nodes: a source sends 1/7 of its
        // traffic to each other node. The + link of router 0 carries the flows that reach
        // forward distance 1..4 (4 included: ties go plus) through it: 4 from router 0, 3 from
        // router 7, 2 from router 6 and 1 from router 5, so 10 flows of 1/7.
        let positive = format!("{DOR}\ntie = \"positive\"");
        let sc = scenario("kind = \"torus\"\nk = [8]", &positive, "");
        let net = network(&sc);
        let rate = net.injection_rate(NodeId(0), 0).0 as f64;
        let sym = symmetric_bound(&net, 1, rate).expect("bound");
        assert!(
            (sym.max_channel_load - 10.0 / 7.0).abs() < 1e-12,
            "{}",
            sym.max_channel_load
        );
        assert_eq!(sym.channel, "r0.p0");
        assert!((traced(&sc, &net).max_channel_load - 10.0 / 7.0).abs() < 1e-12);
        // Balanced ties (the default): each link carries the 6 flows of distance 1..3 through
        // it plus 2 of the 4 half-way flows that could use it (from the even sources on the
        // plus links, the odd ones on the minus links): 8 flows of 1/7 everywhere.
        let sc = scenario("kind = \"torus\"\nk = [8]", DOR, "");
        let net = network(&sc);
        assert!(!net.routing.translation_invariant(&net.topo));
        assert!((traced(&sc, &net).max_channel_load - 8.0 / 7.0).abs() < 1e-12);
        // Random ties: the expectation, 6 + 4 · ½ flows.
        let random = format!("{DOR}\ntie = \"random\"");
        let sc = scenario("kind = \"torus\"\nk = [8]", &random, "");
        let net = network(&sc);
        assert!((traced(&sc, &net).max_channel_load - 8.0 / 7.0).abs() < 1e-12);
    }

    #[test]
    fn symmetry_needs_a_torus_dimension_order_and_no_failed_link() {
        let not = [
            scenario("kind = \"mesh\"\nk = [4, 4]", DOR, ""),
            scenario(
                "kind = \"torus\"\nk = [4, 4]",
                "algorithm = \"minimal_adaptive\"\ndeadlock = \"bubble\"",
                "",
            ),
            scenario(
                "kind = \"torus\"\nk = [4, 4]",
                DOR,
                "[faults]\nfailed_links = [{ router = 0, port = 0 }]",
            ),
            scenario("kind = \"fat_tree\"\nk = 4\nn = 2", "algorithm = \"up_down\"", ""),
        ];
        for sc in &not {
            let net = network(sc);
            assert!(!net.routing.translation_invariant(&net.topo), "{}", net.topo.name);
        }
    }

    #[test]
    fn tracing_beyond_the_hop_budget_is_refused_with_the_reason() {
        let sc = scenario("kind = \"mesh\"\nk = [4, 4]", DOR, "");
        let net = network(&sc);
        // Node 0 of a 4×4 mesh (a corner) reaches the 15 others through |dx| + |dy| + 1 routers:
        // 48 + 15 = 63 router hops, so 16 sources project 1008.
        let why = traced_within(&sc, &net, 63 * 16 - 1).unwrap_err();
        assert_eq!(
            why,
            "tracing the flows of 16 sources over 16 nodes would take about 1.0e3 router hops, more than the limit of 1.0e3"
        );
        assert!(traced_within(&sc, &net, 63 * 16).is_ok());
    }

    #[test]
    fn large_networks_are_traced_whole_when_it_fits_the_budget_and_sampled_beyond() {
        // 33×33 mesh: 1089 nodes (more than BOUND_SOURCES), not translation-invariant.
        let sc = scenario("kind = \"mesh\"\nk = [33, 33]", DOR, "");
        let net = network(&sc);
        let n = net.topo.nodes.len();
        let whole = traced(&sc, &net);
        assert_eq!(whole.sources_traced, n);
        // A budget for the sample but not for every source: every other source is traced.
        let streams = RngStreams::new(sc.file.seed);
        let dests = Destinations::new(&sc.traffic, &net.topo, &mut streams.stream("pattern", 0));
        let probe = first_source_hops(&net, n, &dests, &sc.traffic, 1, &streams);
        let sampled = traced_within(&sc, &net, probe * n as u64 - 1).unwrap().unwrap();
        assert_eq!(sampled.sources_traced, n.div_ceil(n.div_ceil(BOUND_SOURCES)));
        // Exact under DOR (X first): the + channel between columns 16 and 17 of a row carries
        // the flows from the row's 17 nodes left of it to the 16 × 33 nodes right of it, each
        // 1/(n − 1) of a node's traffic: 17 · 16 · 33 / 1088 = 8.25.
        let exact = 17.0 * 16.0 * 33.0 / (n - 1) as f64;
        assert!(
            (whole.max_channel_load - exact).abs() < 1e-9,
            "{} vs {exact}",
            whole.max_channel_load
        );
    }

    #[test]
    fn no_packet_is_created_after_the_measurement_window() {
        // 0.1 % load: a node's first packet comes after ~100 us on average, far beyond this
        // 30 ns run; none may be created once the sources have stopped.
        let o = ["traffic.load=0.001", "sim.warmup=\"10 ns\"", "sim.measure=\"20 ns\""];
        let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
        let text = "[topology]\nkind = \"torus\"\nk = [4, 4]\n[link]\nlanes = 1\nlane_rate = \"10 Gb/s\"\nlatency = \"10 ns\"\n[router]\nvcs = 2\nprivate_credits = 16\nlatency = \"20 ns\"\n";
        let short = Scenario::from_str_named(text, "t.toml", "t", &o).expect("scenario");
        let rep = run_synthetic(&short, RunOptions::default()).expect("run");
        assert_eq!(rep.packets_generated, 0);
        assert_eq!(rep.events, 0);
        assert!(rep.conservation_ok);
    }
}
