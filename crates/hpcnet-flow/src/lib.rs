//! hpcnet-flow — a flow-level network and NIC model behind the message library.
//!
//! [`FlowWorld`] implements [`hpcnet_msg::NicBackend`], so the same rank programs and message
//! layers (verbs, `hpcnet-mpi`) run on it unchanged. A message is a *flow*: after a start-up
//! latency at the source NIC it moves its bytes over the links of its route (the fabric's own
//! routing function, traced on the idle network) at a rate given by **max-min fairness** among all
//! flows in progress (progressive filling, recomputed whenever a flow starts or ends, for the
//! flows that share links with it directly or through others — the rest keep their rates); when its
//! last byte has crossed, it lands after the route's latency, and the initiator's completion
//! follows after the same latency back. No packet, credit or buffer is simulated.
//!
//! Link capacity: lanes × lane rate × coding efficiency × max_payload / (max_payload + header)
//! (the packet format's payload share). Each node's host interface is more links of the PCIe
//! rate × MPS / (MPS + TLP overhead): DMA reads when sending, one per PCIe link (a message is
//! read through its queue pair's engine's link, `qp mod engines mod links`, as at packet level),
//! and DMA writes when receiving, one for all the node's PCIe links (written on whichever is
//! free). **Rails**: on a multi-plane fabric a message takes its request's rail (fixed port
//! selection); with adaptive selection a message to another node is split into an equal part
//! per rail, each a flow on its rail's route (the packet-level NIC sends every packet to the
//! port whose queue drains first), and has crossed when every part has; a short message takes
//! the rail whose injection link frees first.
//! Messages queue for the node's message engines in doorbell order; an engine reads the
//! descriptor (PCIe read latency), works `message_overhead` (`writeback_overhead` for the data
//! of a read), reads the first data (read latency) and then holds on until the message's last
//! byte has left — or, with `descriptor_prefetch`, takes the next message at once, as the
//! packet-level NIC does. Latencies: doorbell; route = per hop router + link latency, plus the
//! receive overhead; completion = the route back. Every node has an injection link; processes of one
//! node reach each other through the NIC's loopback (one link per node, `loopback_latency`).
//!
//! A pushed message's bytes (RDMA write, queue message) move from the source's memory to the
//! target's when it lands, in one copy: verbs require a source to stay unchanged until its
//! completion, which follows the landing (the packet-level NIC reads them when its engine
//! takes the message). A read's data is taken at the target when the request arrives.
//!
//! Supported operations: RDMA write (with notification and reply word), RDMA read, queue
//! messages (send/receive, reliable or not), remote atomics (4 and 8 bytes: the request
//! queues for an engine, which is free once it has processed the descriptor, and crosses as a
//! short message; the read-modify-write is applied at the target at its arrival, with nothing
//! between its read and its write; the answer leaves after the receive overhead and one memory
//! round trip and crosses as a short message — see [`FlowWorld::set_short_messages`] — so that
//! thousands of atomics in flight cost no max-min recomputation); others are refused with
//! [`PostError::Unsupported`]. Messages of at most `nic.pio_limit` bytes and atomic requests
//! are written into the NIC by the CPU (64 B of descriptor and the payload at the host write
//! rate) instead of being read by the engine, as at packet level. Writes and atomics landing
//! in a watched region are counted and reported ([`NicBackend::watch_memory`]). **Order**: the
//! model does not keep the order of a pair's messages (max-min sharing lets a short flow end
//! before a longer one started earlier, and an atomic's request is not a shared flow), so
//! [`NicBackend::in_order`] is false and OpenSHMEM's `fence` waits as `quiet` does. Not modelled: DMA read tags, per-packet engine and receive costs, link-level flow
//! control and congestion trees (max-min fairness assumes ideal sharing), per-link overrides.
//!
//! Approximations selectable per scenario (off by default): local sharing
//! ([`FlowWorld::set_local_sharing`]) and small messages outside sharing
//! ([`FlowWorld::set_short_messages`]: a message up to a size takes its route's residual rate and
//! leaves the other flows' rates alone).
//!
//! Cost: O((L + F·h)·log L) per flow start or end (F flows of h links each in the changed flow's
//! component, L links they use; O(h) for a flow alone on its links) plus O(log F) for the next
//! finish, independent of message size — against O(bytes × hops) at packet level. Pending
//! events wait in the simulation kernel's calendar queue. A route is traced once per (source
//! node, destination node, rail, PCIe link) and kept in a dense table of route ids (one row per
//! source, 4 bytes per destination, allocated at its first message) while nodes² × rails ×
//! links ≤ 2²⁴ — at most 64 MiB — and in a hash map of the pairs met beyond.

use hpcnet_des::hash::IdMap;
use hpcnet_des::{Bytes, EventQueue, SimTime};
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::Network;
use hpcnet_msg::NicBackend;
use hpcnet_nic::{
    CqId, Cqe, CqeKind, CqeStatus, Memory, MemoryError, NicConfig, Notice, Op, Placement, PortSelect, PostError, QpNum,
    Rank, Request, RqId, TimerId,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;

const MODEL: &str = "flow-level";
/// Payload of an atomic's request (operand and comparand) and answer (the old value), as the
/// packet-level NIC's packets carry them (`hpcnet-nic` `pkt.rs`).
const ATOMIC_REQUEST_BYTES: u64 = 16;
const ATOMIC_RESPONSE_BYTES: u64 = 8;

/// What happens when a flow's bytes have crossed. A read's `bytes` are the target's stored
/// bytes at the read request's arrival ([`Memory::read_trimmed`]: all of an ordinary region,
/// the header of a payload-free buffer); they land padded with zeros to the read's length.
#[derive(Clone, Debug)]
enum Then {
    /// Push data of `req` lands at the target: its bytes move from the source's memory to
    /// the target's now ([`Memory::write_from`]; the source range was checked at posting, and
    /// verbs require a source to stay unchanged until its completion, which follows the
    /// landing). `route`: the id of the route of the request's own rail and PCIe link, once
    /// the flow has taken it (its way back gives the completion's latency), else [`NO_ROUTE`].
    Land { req: Request, route: u32 },
    /// Read data lands back at the initiator.
    ReadBack { req: Request, bytes: Vec<u8> },
    /// Atomic `req`'s request packet reaches its target.
    AtomicReq { req: Request },
    /// The answer of atomic `req` (the target's old value, or the refusal) lands back at the
    /// initiator.
    AtomicBack { req: Request, status: CqeStatus, old: u64 },
    /// One rail's part of a message spread over the rails: join `0` of the world's `joins`
    /// holds what follows once every part has crossed.
    Part(u32),
}

impl Then {
    /// The request the flow belongs to (its rail), if any.
    fn request(&self) -> Option<&Request> {
        match self {
            Then::Land { req, .. }
            | Then::ReadBack { req, .. }
            | Then::AtomicReq { req }
            | Then::AtomicBack { req, .. } => Some(req),
            Then::Part(_) => None,
        }
    }

    /// The flow of a pushed message takes route `id` (that of its request's rail and PCIe
    /// link).
    fn take_route(&mut self, id: usize) {
        if let Then::Land { route, .. } = self {
            *route = u32::try_from(id).expect("fewer than 2^32 routes");
        }
    }
}

/// What follows a message, held in the world's `held` slab from its posting to its end:
/// events, queues and flows name it by this 4-byte handle instead of carrying the request
/// (so that an event is small, and a message's request is stored once, not moved from event
/// to queue to flow to event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held(u32);

/// A message spread over the rails: parts still crossing, the engine it holds, what follows.
struct Join {
    left: u32,
    engine: Option<usize>,
    then: Option<Held>,
}

#[derive(Clone, Debug)]
struct Flow {
    /// Identity (start order): ties between equal finish times go to the lower.
    id: u64,
    /// Bytes left at `since`, moving at `rate` since then.
    remaining: f64,
    since: SimTime,
    rate: f64,
    /// Bumped at every change of rate: older finish entries are stale.
    version: u64,
    /// Epoch of the last recomputation that met this flow, and the rate it gave.
    mark: u64,
    new_rate: f64,
    links: Rc<[usize]>,
    /// Route latency added when the flow ends.
    latency: SimTime,
    /// Node whose engine the flow holds until its last byte has left.
    engine: Option<usize>,
    /// Node whose network port the flow holds (port FIFO: its node's next flow to another
    /// node starts when this one ends).
    port: Option<usize>,
    then: Held,
}

#[derive(Clone, Debug)]
enum Ev {
    /// Start a flow of `bytes` over `src` → `dst`.
    Start {
        src: Rank,
        dst: Rank,
        size: u64,
        then: Held,
    },
    /// A message reaches the engines of its node (doorbell rung, or read request arrived).
    Enqueue {
        src: Rank,
        dst: Rank,
        size: u64,
        then: Held,
        work: SimTime,
    },
    /// The flow's data arrives.
    Arrive(Held),
    /// A completion entry appears.
    Complete(CqId, Cqe),
    /// A read request reaches its target.
    ReadRequest(Box<Request>),
    /// A request packet (an atomic's) has been sent by the engine of `node`, which is free
    /// again: it crosses `src` → `dst` as a short message of `size` bytes.
    RequestOut {
        node: usize,
        src: Rank,
        dst: Rank,
        size: u64,
        then: Held,
    },
    /// The answer of an atomic leaves its target (`then` holds it: [`Then::AtomicBack`]): a
    /// flow of `size` bytes back.
    AtomicAnswer {
        then: Held,
        size: u64,
    },
    Timer(TimerId),
    /// A short message's last byte has left: its node's engine is free again.
    Release(usize),
}

/// A message waiting for an engine: (source, target, bytes, what follows, engine work).
type Waiting = (Rank, Rank, u64, Held, SimTime);
/// A flow waiting for its node's port: (links, latency, least capacity of the links, bytes,
/// what follows).
type PortWait = (Rc<[usize]>, SimTime, f64, u64, Held);
/// Posted receive buffers: `count` buffers of `len` bytes back to back from `addr`, receive
/// ids from `wr_id` (one entry for a run posted at once, e.g. a shared receive queue's
/// pre-posted buffers; a re-posted buffer is a run of one).
struct Posted {
    addr: u64,
    len: u64,
    wr_id: u64,
    count: u64,
}

/// Takes the oldest posted buffer of `q`: (address, length, receive id). O(1).
fn take_posted(q: &mut VecDeque<Posted>) -> Option<(u64, u64, u64)> {
    let p = q.front_mut()?;
    let b = (p.addr, p.len, p.wr_id);
    p.count -= 1;
    if p.count == 0 {
        q.pop_front();
    } else {
        p.addr += p.len;
        p.wr_id += 1;
    }
    Some(b)
}
/// No flow (an empty [`OnLink`]).
const NO_FLOW: u32 = u32::MAX;

/// The flows in progress on one link (slots), in the order they started on it: the first in
/// place — most links carry one flow at a time, and its start and end then read no other
/// memory — the others after it.
#[derive(Clone, Debug)]
struct OnLink {
    first: u32,
    rest: Vec<u32>,
}

impl Default for OnLink {
    fn default() -> Self {
        OnLink {
            first: NO_FLOW,
            rest: Vec::new(),
        }
    }
}

impl OnLink {
    fn is_empty(&self) -> bool {
        self.first == NO_FLOW
    }

    fn len(&self) -> usize {
        usize::from(self.first != NO_FLOW) + self.rest.len()
    }

    fn push(&mut self, slot: u32) {
        if self.first == NO_FLOW {
            self.first = slot;
        } else {
            self.rest.push(slot);
        }
    }

    /// Take `slot` out, keeping the order of the others.
    fn remove(&mut self, slot: u32) {
        if self.first == slot {
            self.first = if self.rest.is_empty() {
                NO_FLOW
            } else {
                self.rest.remove(0)
            };
        } else if let Some(i) = self.rest.iter().position(|&x| x == slot) {
            self.rest.remove(i);
        }
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (self.first != NO_FLOW)
            .then_some(self.first)
            .into_iter()
            .chain(self.rest.iter().copied())
    }
}

/// A traced route.
struct Route {
    links: Rc<[usize]>,
    latency: SimTime,
    /// The least capacity of its links: the rate of a flow alone on them.
    least: f64,
    /// The latency of its way back (same rail and PCIe link, from its target node to its
    /// source node), once asked for ([`NO_LATENCY`]: not yet).
    back: SimTime,
}

/// A way back not asked for yet ([`Route::back`]).
const NO_LATENCY: SimTime = SimTime::from_ps(u64::MAX);
/// Route cache: a dense table (one row of route ids per source node, rail and PCIe link,
/// allocated at its first message) while nodes² × rails × links is at most this many entries —
/// 64 MiB of 4-byte ids, 4096 nodes of one rail and one link — and a hash map of the pairs met
/// beyond.
const DENSE_ENTRIES: usize = 1 << 24;
/// Bit of a queue entry that is a timer's expiry (the low bits: the timer's id) rather than
/// the slot of an event.
const TIMER_EVENT: u32 = 1 << 31;
/// An unknown route in a dense row.
const NO_ROUTE: u32 = u32::MAX;

/// The flow-level model of a scenario's machine.
pub struct FlowWorld {
    now: SimTime,
    events: u64,
    place: Placement,
    ranks: usize,
    mem: Vec<Memory>,
    cqs: Vec<(Rank, VecDeque<Cqe>)>,
    rqs: Vec<(Rank, CqId, VecDeque<Posted>)>,
    next_qp: u32,
    next_timer: u32,
    /// Pending events in (time, scheduling order): the simulation kernel's calendar queue
    /// (one origin) of slots in `slots`, so that the queue moves 4-byte slot numbers, not
    /// events — or of timers' expiries, which need no slot ([`TIMER_EVENT`]); the free slots.
    queue: EventQueue<u32>,
    slots: Vec<Option<Ev>>,
    free_slots: Vec<u32>,
    /// What follows each message in progress ([`Held`]), and the free entries.
    held: Vec<Option<Then>>,
    free_held: Vec<u32>,
    /// Flows in progress by slot (`on_link` and the finish heap name slots; a slot is reused
    /// once its flow has ended), the free slots and the number in progress.
    flows: Vec<Option<Flow>>,
    free_flows: Vec<u32>,
    live: usize,
    next_flow: u64,
    /// Capacity of every link, bytes per second.
    cap: Vec<f64>,
    links: IdMap<(usize, usize), usize>,
    /// Injection link of every (node, rail): index `node × rails + rail`.
    inject: Vec<usize>,
    rails: u8,
    /// Adaptive port selection on a multi-rail NIC (`nic.port_select = "adaptive"`): a message
    /// to another node is spread over the rails, a short one takes the rail that frees first.
    adaptive: bool,
    /// Messages spread over the rails whose parts are still crossing, and the free entries.
    joins: Vec<Join>,
    free_joins: Vec<u32>,
    loopback: Vec<usize>,
    /// Host interface of every node: DMA reads (sending) of every (node, PCIe link) — index
    /// `node × host_links + link`, the link of the message's engine — and DMA writes
    /// (receiving) of every node, on whichever link is free (the node's links pooled).
    pcie_tx: Vec<usize>,
    host_links: u8,
    pcie_rx: Vec<usize>,
    /// Messages waiting for a message engine, and engines busy, per node.
    waiting: Vec<VecDeque<Waiting>>,
    busy: Vec<u32>,
    /// Port FIFO ([`FlowWorld::set_port_fifo`]): per node, whether a flow to another node is
    /// in progress, and the flows waiting behind it (links, latency, bytes, what follows).
    port_held: Vec<bool>,
    port_queue: Vec<VecDeque<PortWait>>,
    fifo: bool,
    /// Routes traced so far, named by id; the ids by (source node, destination node, rail,
    /// PCIe link): dense rows up to [`DENSE_ENTRIES`], a hash map beyond.
    routes: Vec<Route>,
    route_rows: Vec<Vec<u32>>,
    route_map: IdMap<(u32, u32), u32>,
    dense: bool,
    net: Network,
    cfg: NicConfig,
    start_latency: SimTime,
    header: u64,
    notices: Vec<Notice>,
    /// Watched regions of every rank ([`NicBackend::watch_memory`]): (key, arrivals so far).
    watched: Vec<Vec<(u32, u64)>>,
    /// Flows in progress on every link.
    on_link: Vec<OnLink>,
    /// When each flow ends at its current rate: (time, flow id, version, slot); stale entries
    /// are skipped.
    finish: BinaryHeap<Reverse<(SimTime, u64, u64, u32)>>,
    scratch_left: Vec<f64>,
    scratch_count: Vec<u32>,
    /// Scratch of [`FlowWorld::share`]: the component's links and flows, the search stack and
    /// the links' heap.
    scratch_links: Vec<usize>,
    scratch_comp: Vec<u32>,
    scratch_stack: Vec<usize>,
    scratch_heap: BinaryHeap<Reverse<(u64, usize)>>,
    scratch_next: Vec<usize>,
    /// Local sharing: levels of flows around a changed flow that get new rates (`None`: the
    /// whole component, exact max-min).
    depth: Option<u32>,
    /// Epoch marks of the links and flows met by the current recomputation.
    link_mark: Vec<u64>,
    epoch: u64,
    /// Short messages (an approximation, 0: none): a flow of at most this many bytes of
    /// operation (packet header excluded) does not enter max-min sharing.
    short: u64,
    /// Per link: when the short messages already started on it have crossed it.
    short_free: Vec<SimTime>,
    /// Per link: the last (bytes, time) a short message took on it alone (at full capacity).
    short_memo: Vec<(u64, SimTime)>,
}

impl FlowWorld {
    /// The model of `net` with NICs configured by `cfg` (the scenario's `[nic]`).
    pub fn new(net: Network, cfg: NicConfig) -> FlowWorld {
        let place = Placement::new(cfg.hosts);
        let nodes = net.topo.num_nodes();
        let rails = net.rails().max(1);
        let ranks = nodes * place.hosts() as usize;
        let fc = net.config();
        let (num, den) = fc.link.encoding.ratio();
        let raw = fc.link.lane_rate.as_bytes_per_sec_f64() * f64::from(fc.link.lanes) * num as f64 / den as f64;
        let payload = fc.packet.max_payload.0 as f64;
        let header = fc.packet.header.0;
        let cap_link = raw * payload / (payload + header as f64);
        let mut cap = Vec::new();
        let mut inject = Vec::new();
        let mut loopback = Vec::new();
        let (mut pcie_tx, mut pcie_rx) = (Vec::new(), Vec::new());
        let h = &cfg.host;
        // PCIe data rate per lane (bits/s after line coding) by generation.
        let lane = match h.pcie_gen {
            1 => 2.0e9,
            2 => 4.0e9,
            3 => 8.0e9 * 128.0 / 130.0,
            4 => 16.0e9 * 128.0 / 130.0,
            _ => 32.0e9 * 128.0 / 130.0,
        };
        let mps = h.max_payload.0.max(1) as f64;
        // One PCIe link's DMA reads: a message engine reads through its own link.
        let cap_pcie_link = lane * f64::from(h.lanes) / 8.0 * mps / (mps + h.tlp_overhead.0 as f64);
        let cap_pcie =
            lane * f64::from(h.lanes) * f64::from(h.links.max(1)) / 8.0 * mps / (mps + h.tlp_overhead.0 as f64);
        let host_links = u8::try_from(h.links.clamp(1, 255)).expect("at most 255 PCIe links");
        let dense = nodes
            .saturating_mul(nodes)
            .saturating_mul(usize::from(rails) * usize::from(host_links))
            <= DENSE_ENTRIES;
        for _ in 0..nodes {
            inject.push(cap.len());
            cap.push(cap_link);
            loopback.push(cap.len());
            cap.push(cap_link);
            pcie_tx.push(cap.len());
            cap.push(cap_pcie_link);
            pcie_rx.push(cap.len());
            cap.push(cap_pcie);
        }
        // The read links of the other PCIe links and the injection links of the other rails
        // come after every node's own links, so that the links of a machine with one PCIe link
        // and one rail keep their numbers: `pcie_tx[node × host_links + link]`,
        // `inject[node × rails + rail]`.
        // Each node's own link first, then `per_node − 1` new links of capacity `c` after it.
        let widen = |first: Vec<usize>, per_node: u8, c: f64, cap: &mut Vec<f64>| {
            let mut all = Vec::with_capacity(first.len() * usize::from(per_node));
            for l in first {
                all.push(l);
                for _ in 1..per_node {
                    all.push(cap.len());
                    cap.push(c);
                }
            }
            all
        };
        if host_links > 1 {
            pcie_tx = widen(pcie_tx, host_links, cap_pcie_link, &mut cap);
        }
        if rails > 1 {
            inject = widen(inject, rails, cap_link, &mut cap);
        }
        // The doorbell reaches the NIC; the engine then reads the descriptor and the data.
        let start_latency = h.doorbell_latency;
        FlowWorld {
            now: SimTime::ZERO,
            events: 0,
            place,
            ranks,
            mem: (0..ranks as u32).map(Memory::new).collect(),
            cqs: Vec::new(),
            rqs: Vec::new(),
            next_qp: 0,
            next_timer: 0,
            queue: EventQueue::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            held: Vec::new(),
            free_held: Vec::new(),
            flows: Vec::new(),
            free_flows: Vec::new(),
            live: 0,
            next_flow: 0,
            cap,
            links: IdMap::default(),
            inject,
            host_links,
            rails,
            adaptive: rails > 1 && cfg.port_select == PortSelect::Adaptive,
            joins: Vec::new(),
            free_joins: Vec::new(),
            loopback,
            pcie_tx,
            pcie_rx,
            waiting: vec![VecDeque::new(); nodes],
            busy: vec![0; nodes],
            port_held: vec![false; nodes],
            port_queue: vec![VecDeque::new(); nodes],
            fifo: false,
            routes: Vec::new(),
            route_rows: if dense {
                vec![Vec::new(); nodes * rails as usize * host_links as usize]
            } else {
                Vec::new()
            },
            route_map: IdMap::default(),
            dense,
            net,
            cfg,
            start_latency,
            header,
            notices: Vec::new(),
            watched: Vec::new(),
            on_link: Vec::new(),
            finish: BinaryHeap::new(),
            scratch_left: Vec::new(),
            scratch_count: Vec::new(),
            scratch_links: Vec::new(),
            scratch_comp: Vec::new(),
            scratch_stack: Vec::new(),
            scratch_heap: BinaryHeap::new(),
            scratch_next: Vec::new(),
            depth: None,
            link_mark: Vec::new(),
            epoch: 0,
            short: 0,
            short_free: Vec::new(),
            short_memo: Vec::new(),
        }
    }

    fn at(&mut self, t: SimTime, ev: Ev) {
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(ev);
                i
            }
            None => {
                self.slots.push(Some(ev));
                let i = self.slots.len() - 1;
                assert!(i < TIMER_EVENT as usize, "fewer than 2^31 pending events");
                i as u32
            }
        };
        self.queue.schedule(t, slot);
    }

    /// Keep `then` until the message it follows ends.
    fn hold(&mut self, then: Then) -> Held {
        match self.free_held.pop() {
            Some(i) => {
                self.held[i as usize] = Some(then);
                Held(i)
            }
            None => {
                self.held.push(Some(then));
                Held(u32::try_from(self.held.len() - 1).expect("fewer than 2^32 messages in flight"))
            }
        }
    }

    /// What follows a message, kept by [`FlowWorld::hold`].
    fn held(&self, h: Held) -> &Then {
        self.held[h.0 as usize].as_ref().expect("a held message")
    }

    fn held_mut(&mut self, h: Held) -> &mut Then {
        self.held[h.0 as usize].as_mut().expect("a held message")
    }

    /// Take back what follows a message (its entry is free again).
    fn release(&mut self, h: Held) -> Then {
        let then = self.held[h.0 as usize].take().expect("a held message");
        self.free_held.push(h.0);
        then
    }

    /// Schedule the expiry of timer `id` at `t`: in the queue itself (no slot, nothing to
    /// store or read back) when the id fits beside [`TIMER_EVENT`], else as an event in a slot
    /// — either way at the same place in the order of events.
    fn at_timer(&mut self, t: SimTime, id: TimerId) {
        match u32::try_from(id.index()) {
            Ok(i) if i < TIMER_EVENT => self.queue.schedule(t, TIMER_EVENT | i),
            _ => self.at(t, Ev::Timer(id)),
        }
    }

    /// Id of the route from `src`'s node to `dst`'s node on `rail`, read through the source's
    /// PCIe link `host` (links and latency: `self.routes[id]`), traced once per pair of nodes,
    /// rail and PCIe link. O(1) after the first time.
    fn route(&mut self, src: Rank, dst: Rank, (rail, host): (u8, u8)) -> usize {
        let (a, b) = (self.place.node_of(src), self.place.node_of(dst));
        // Within a node the NIC's loopback: no rail.
        let rail = if a == b { 0 } else { rail };
        let row_of = (a.index() * self.rails as usize + rail as usize) * self.host_links as usize + host as usize;
        if self.dense {
            let row = &self.route_rows[row_of];
            if let Some(&id) = row.get(b.index()) {
                if id != NO_ROUTE {
                    return id as usize;
                }
            }
        } else if let Some(&id) = self.route_map.get(&(row_of as u32, b.0)) {
            return id as usize;
        }
        let id = self.trace_route(a, b, rail, host);
        let id32 = u32::try_from(id).expect("fewer than 2^32 routes");
        if self.dense {
            let nodes = self.route_rows.len() / (self.rails as usize * self.host_links as usize);
            let row = &mut self.route_rows[row_of];
            if row.is_empty() {
                *row = vec![NO_ROUTE; nodes];
            }
            row[b.index()] = id32;
        } else {
            self.route_map.insert((row_of as u32, b.0), id32);
        }
        id
    }

    /// Latency of the route from `src`'s node to `dst`'s node on `path`.
    fn latency(&mut self, src: Rank, dst: Rank, path: (u8, u8)) -> SimTime {
        let id = self.route(src, dst, path);
        self.routes[id].latency
    }

    /// Latency of the way back of route `id` from `src` to `dst` on `path` (the route from
    /// `dst`'s node to `src`'s node on `path`), kept with the route after its first use.
    fn back_latency(&mut self, id: u32, src: Rank, dst: Rank, path: (u8, u8)) -> SimTime {
        if id == NO_ROUTE {
            return self.latency(dst, src, path);
        }
        let b = self.routes[id as usize].back;
        if b != NO_LATENCY {
            return b;
        }
        let b = self.latency(dst, src, path);
        self.routes[id as usize].back = b;
        b
    }

    /// The rail a request names (fixed port selection, as at packet level; a rail beyond the
    /// NIC's ports wraps around) and the PCIe link its data is read through: that of its
    /// queue pair's engine (`qp mod engines`, whose link is `engine mod links`), as at packet
    /// level.
    fn rail_of(&self, req: &Request) -> (u8, u8) {
        let engine = req.qp.index() as u32 % self.cfg.engines.max(1);
        (req.rail % self.rails, (engine % u32::from(self.host_links)) as u8)
    }

    /// Id of the route a short message (one packet) takes from `src` to `dst`: on its
    /// request's rail `fixed`, or with adaptive port selection on the rail whose injection link is
    /// free first of short messages, then with fewer flows on it (the packet-level NIC's
    /// per-packet choice of the port whose queue drains first).
    fn short_route(&mut self, fixed: (u8, u8), src: Rank, dst: Rank) -> usize {
        if !self.adaptive {
            return self.route(src, dst, fixed);
        }
        let node = self.place.node_of(src).index();
        let mut best = (0u8, (SimTime::ZERO, usize::MAX));
        for rail in 0..self.rails {
            let l = self.inject[node * self.rails as usize + rail as usize];
            let free = self.short_free.get(l).map_or(self.now, |&t| t.max(self.now));
            let key = (free, self.on_link.get(l).map_or(0, OnLink::len));
            if rail == 0 || key < best.1 {
                best = (rail, key);
            }
        }
        self.route(src, dst, (best.0, fixed.1))
    }

    /// Traces the route from node `a` to node `b` on `rail` on the idle network and stores
    /// it: its id.
    fn trace_route(&mut self, a: NodeId, b: NodeId, rail: u8, host: u8) -> usize {
        let tx = self.pcie_tx[a.index() * self.host_links as usize + host as usize];
        let rx = self.pcie_rx[b.index()];
        let r: (Rc<[usize]>, SimTime) = if a == b {
            (
                Rc::from([tx, self.loopback[a.index()], rx]),
                self.cfg.loopback_latency + self.cfg.rx_overhead,
            )
        } else {
            let fc = self.net.config();
            let per_hop = fc.router.latency + fc.link.latency;
            let hops = self
                .net
                .routing
                .trace(&self.net.topo, NodeId(a.0), NodeId(b.0), rail, 0)
                .unwrap_or_default();
            let mut links = vec![tx, self.inject[a.index() * self.rails as usize + rail as usize]];
            for (r, p, _) in &hops {
                let key = (r.index(), p.index());
                let next = self.cap.len();
                let id = *self.links.entry(key).or_insert(next);
                if id == next {
                    let c = self.cap[self.inject[0]];
                    self.cap.push(c);
                }
                links.push(id);
            }
            links.push(rx);
            let lat = fc.link.latency + SimTime::from_ps(per_hop.ps() * hops.len() as u64) + self.cfg.rx_overhead;
            (Rc::from(links), lat)
        };
        let least = r.0.iter().map(|&l| self.cap[l]).fold(f64::INFINITY, f64::min);
        self.routes.push(Route {
            links: r.0,
            latency: r.1,
            least,
            back: NO_LATENCY,
        });
        self.routes.len() - 1
    }

    /// Starts waiting messages of `node` on its free engines: each fetches its descriptor
    /// (PCIe read latency), does its `work`, reads its first data (read latency), then sends.
    fn run_engines(&mut self, node: usize) {
        while self.busy[node] < self.cfg.engines.max(1) {
            let Some((src, dst, size, then, work)) = self.waiting[node].pop_front() else {
                break;
            };
            self.busy[node] += 1;
            let rl = self.cfg.host.read_latency;
            let request = matches!(self.held(then), Then::AtomicReq { .. });
            // PIO (`nic.pio_limit`): the CPU writes the descriptor and a short message's data
            // into the NIC (64 B of descriptor and the payload at the host write rate), so the
            // engine reads neither — as the packet-level engine does for such messages and for
            // every request.
            let payload = if request { 0 } else { size.saturating_sub(self.header) };
            let pio = self.cfg.pio_limit.0 > 0 && (request || payload <= self.cfg.pio_limit.0);
            if pio {
                let t = self.now + self.cfg.host.write_rate().serialization(Bytes(64 + payload)) + work;
                let ev = if request {
                    Ev::RequestOut {
                        node,
                        src,
                        dst,
                        size,
                        then,
                    }
                } else {
                    Ev::Start { src, dst, size, then }
                };
                self.at(t, ev);
                continue;
            }
            if request {
                // A request carries no data: the engine is free once it has read the
                // descriptor and processed it, as at packet level.
                self.at(
                    self.now + rl + work,
                    Ev::RequestOut {
                        node,
                        src,
                        dst,
                        size,
                        then,
                    },
                );
                continue;
            }
            self.at(self.now + rl + work + rl, Ev::Start { src, dst, size, then });
        }
    }

    /// Max-min fair rates (progressive filling: repeatedly the link with the least capacity
    /// left per unfrozen flow fixes the rate of its flows) of the flows that share a link,
    /// directly or through other flows, with `seeds` — the links of a flow that started or
    /// ended. Flows of other components keep their rates: max-min fairness of independent
    /// components is independent. The component's links wait in a heap keyed by their share
    /// (stale entries skipped). Cost: O((L + F·h)·log L) for the component's L links and F
    /// flows of h links — in an all-to-all on a fat tree with one engine per node, a few flows.
    fn share(&mut self, seeds: &[usize]) {
        if seeds.iter().all(|&l| self.on_link.get(l).is_none_or(OnLink::is_empty)) {
            // No flow in the component: nothing to share.
            return;
        }
        let nl = self.cap.len();
        self.on_link.resize_with(nl, OnLink::default);
        self.link_mark.resize(nl, 0);
        self.epoch += 1;
        let epoch = self.epoch;
        // The component: links reached through flows, flows through links.
        let mut links = std::mem::take(&mut self.scratch_links);
        let mut comp = std::mem::take(&mut self.scratch_comp);
        let mut stack = std::mem::take(&mut self.scratch_stack);
        let mut heap = std::mem::take(&mut self.scratch_heap);
        links.clear();
        comp.clear();
        stack.clear();
        heap.clear();
        let mut next = std::mem::take(&mut self.scratch_next);
        next.clear();
        for &l in seeds {
            if self.link_mark[l] != epoch {
                self.link_mark[l] = epoch;
                stack.push(l);
            }
        }
        // Level by level: the flows on the seeds are level 1, the flows sharing a link with
        // those level 2, and so on. Under local sharing the links first met at the last level
        // are kept (their other flows keep their rates) but not searched.
        let limit = self.depth.unwrap_or(u32::MAX);
        let mut level = 0u32;
        while !stack.is_empty() {
            level += 1;
            let expand = level < limit;
            for &l in &stack {
                links.push(l);
                for id in self.on_link[l].iter() {
                    let f = self.flows[id as usize].as_mut().expect("flow on a link");
                    if f.mark != epoch {
                        f.mark = epoch;
                        f.new_rate = f64::NAN;
                        comp.push(id);
                        for &x in f.links.iter() {
                            if self.link_mark[x] != epoch {
                                self.link_mark[x] = epoch;
                                if expand {
                                    next.push(x);
                                } else {
                                    links.push(x);
                                }
                            }
                        }
                    }
                }
            }
            stack.clear();
            std::mem::swap(&mut stack, &mut next);
        }
        self.scratch_next = next;
        if !comp.is_empty() {
            // No sort needed: the links' heap orders by (share, link) and every flow's new
            // rate is set on its own, so the result does not depend on the search order.
            let mut left = std::mem::take(&mut self.scratch_left);
            let mut count = std::mem::take(&mut self.scratch_count);
            left.resize(nl, 0.0);
            count.resize(nl, 0);
            if self.depth.is_none() {
                for &l in &links {
                    left[l] = self.cap[l];
                    count[l] = self.on_link[l].len() as u32;
                }
            } else {
                // Flows outside the neighbourhood keep their rates: a link offers what they
                // leave of it.
                for &l in &links {
                    let (mut used, mut n) = (0.0, 0u32);
                    for id in self.on_link[l].iter() {
                        let f = self.flows[id as usize].as_ref().expect("flow on a link");
                        if f.mark == epoch {
                            n += 1;
                        } else {
                            used += f.rate;
                        }
                    }
                    left[l] = (self.cap[l] - used).max(0.0);
                    count[l] = n;
                }
            }
            // Shares are non-negative, so their IEEE bit patterns order like the values; ties
            // go to the lower link index, as a scan in index order would.
            let key = |left: f64, n: u32| (left.max(0.0) / f64::from(n)).to_bits();
            heap.extend(
                links
                    .iter()
                    .filter(|&&l| count[l] > 0)
                    .map(|&l| Reverse((key(left[l], count[l]), l))),
            );
            while let Some(Reverse((k, l))) = heap.pop() {
                if count[l] == 0 || key(left[l], count[l]) != k {
                    continue;
                }
                let r = f64::from_bits(k);
                for id in self.on_link[l].iter() {
                    let f = self.flows[id as usize].as_mut().expect("flow on a link");
                    if f.mark != epoch || !f.new_rate.is_nan() {
                        continue;
                    }
                    f.new_rate = r;
                    for &x in f.links.iter() {
                        left[x] -= r;
                        count[x] -= 1;
                        if x != l && count[x] > 0 {
                            heap.push(Reverse((key(left[x], count[x]), x)));
                        }
                    }
                }
            }
            let now = self.now;
            for &slot in &comp {
                let f = self.flows[slot as usize].as_mut().expect("flow of the component");
                let r = if f.new_rate.is_nan() { 0.0 } else { f.new_rate };
                if r == f.rate {
                    continue;
                }
                f.remaining -= f.rate * (now - f.since).as_secs_f64();
                f.since = now;
                f.rate = r;
                f.version += 1;
                if r > 0.0 {
                    let end = now + SimTime::from_ps((f.remaining.max(0.0) / r * 1e12).ceil() as u64);
                    self.finish.push(Reverse((end, f.id, f.version, slot)));
                }
            }
            self.scratch_left = left;
            self.scratch_count = count;
        }
        self.scratch_links = links;
        self.scratch_comp = comp;
        self.scratch_stack = stack;
        self.scratch_heap = heap;
    }

    /// When a short message of `size` bytes starting now has crossed `links`: every link
    /// carries the short messages one after another (in start order) at its residual rate —
    /// what the flows in progress leave of its capacity, but at least the share of one more
    /// flow, capacity / (flows + 1) — and the message is over when its last reservation ends.
    /// O(links × flows per link).
    /// On a link without flows the rate is the capacity and the time is remembered per link
    /// (`short_memo`: the last size), so a stream of equal short messages (atomics) divides
    /// once per link.
    fn short_transfer(&mut self, route: usize, size: u64) -> SimTime {
        if self.short_free.len() < self.cap.len() {
            self.short_free.resize(self.cap.len(), SimTime::ZERO);
            self.short_memo.resize(self.cap.len(), (u64::MAX, SimTime::ZERO));
        }
        let mut end = self.now;
        for &l in self.routes[route].links.iter() {
            let cap = self.cap[l];
            let on = self.on_link.get(l);
            let t = if on.is_none_or(OnLink::is_empty) {
                // (cap - 0).max(cap / 1) = cap, as below.
                let memo = &mut self.short_memo[l];
                if memo.0 != size {
                    *memo = (size, SimTime::from_ps((size as f64 / cap * 1e12).ceil() as u64));
                }
                memo.1
            } else {
                let on = on.expect("a link with flows");
                let used: f64 = on
                    .iter()
                    .map(|s| self.flows[s as usize].as_ref().map_or(0.0, |f| f.rate))
                    .sum();
                let rate = (cap - used).max(cap / (on.len() + 1) as f64);
                SimTime::from_ps((size as f64 / rate * 1e12).ceil() as u64)
            };
            let free = &mut self.short_free[l];
            *free = (*free).max(self.now) + t;
            end = end.max(*free);
        }
        end
    }

    /// When the next flow ends, if any (stale entries dropped).
    fn next_finish(&mut self) -> Option<(SimTime, u32)> {
        while let Some(&Reverse((t, id, v, slot))) = self.finish.peek() {
            if self.flows[slot as usize]
                .as_ref()
                .is_some_and(|f| f.id == id && f.version == v)
            {
                return Some((t, slot));
            }
            self.finish.pop();
        }
        None
    }

    fn complete(&mut self, req: &Request, kind: CqeKind, status: CqeStatus, bytes: u64, after: SimTime) {
        if req.signaled || status != CqeStatus::Ok {
            let c = Cqe {
                wr_id: req.wr_id,
                kind,
                status,
                bytes,
                peer: req.dst,
                addr: 0,
                value: 0,
                at: SimTime::ZERO,
            };
            self.at(self.now + after, Ev::Complete(req.cq, c));
        }
    }

    fn push_cqe(&mut self, cq: CqId, mut c: Cqe) {
        c.at = self.now;
        self.cqs[cq.index()].1.push_back(c);
        self.notices.push(Notice::Cq(cq));
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Timer(t) => self.notices.push(Notice::Timer(t)),
            Ev::Release(node) => {
                self.busy[node] -= 1;
                self.run_engines(node);
            }
            Ev::Complete(cq, c) => self.push_cqe(cq, c),
            Ev::Enqueue {
                src,
                dst,
                size,
                then,
                work,
            } => {
                let node = self.place.node_of(src).index();
                self.waiting[node].push_back((src, dst, size, then, work));
                self.run_engines(node);
            }
            Ev::Start { src, dst, size, then } => {
                let node = self.place.node_of(src).index();
                // With descriptor prefetch the engine takes the next message while this one's
                // data moves; without, only when its last byte has left.
                let engine = if self.cfg.descriptor_prefetch > 0 {
                    self.busy[node] -= 1;
                    self.run_engines(node);
                    None
                } else {
                    Some(node)
                };
                let rail = self.rail_of(self.held(then).request().expect("a message's request"));
                if self.short > 0 && size <= self.short.saturating_add(self.header) {
                    // A short message: its bytes cross the route at the links' residual
                    // rates, after the short messages before it, and no flow's rate changes.
                    let id = self.short_route(rail, src, dst);
                    if !self.adaptive {
                        self.held_mut(then).take_route(id);
                    }
                    let end = self.short_transfer(id, size);
                    if let Some(node) = engine {
                        self.at(end, Ev::Release(node));
                    }
                    self.at(end + self.routes[id].latency, Ev::Arrive(then));
                    return;
                }
                let remote = self.place.node_of(src) != self.place.node_of(dst);
                if self.adaptive && remote && !self.fifo {
                    // Adaptive ports: the packets of a message go to the rail whose queue
                    // drains first, so its bytes spread over the rails — an equal part on
                    // each, crossing as its own flow; the message has crossed when every part
                    // has, and holds its engine until then.
                    let j = Join {
                        left: u32::from(self.rails),
                        engine,
                        then: Some(then),
                    };
                    let join = match self.free_joins.pop() {
                        Some(i) => {
                            self.joins[i as usize] = j;
                            i
                        }
                        None => {
                            self.joins.push(j);
                            u32::try_from(self.joins.len() - 1).expect("fewer than 2^32 messages in flight")
                        }
                    };
                    let part = size as f64 / f64::from(self.rails);
                    for r in 0..self.rails {
                        let id = self.route(src, dst, (r, rail.1));
                        let r = &self.routes[id];
                        let (links, latency, least) = (r.links.clone(), r.latency, r.least);
                        let h = self.hold(Then::Part(join));
                        self.start_flow(links, latency, least, part, h, None, None);
                    }
                    return;
                }
                let id = self.route(src, dst, rail);
                self.held_mut(then).take_route(id);
                let r = &self.routes[id];
                let (links, latency, least) = (r.links.clone(), r.latency, r.least);
                let mut engine = engine;
                let mut port = None;
                if self.fifo && remote {
                    if let Some(n) = engine.take() {
                        let solo = links[..2].iter().map(|&l| self.cap[l]).fold(f64::INFINITY, f64::min);
                        let t = self.now + SimTime::from_ps((size as f64 / solo * 1e12).ceil() as u64);
                        self.at(t, Ev::Release(n));
                    }
                    if self.port_held[node] {
                        self.port_queue[node].push_back((links, latency, least, size, then));
                        return;
                    }
                    self.port_held[node] = true;
                    port = Some(node);
                }
                self.start_flow(links, latency, least, size as f64, then, engine, port);
            }
            Ev::ReadRequest(req) => {
                let req = *req;
                let Op::Read { len, remote, rkey, .. } = req.op else {
                    return;
                };
                let m = &self.mem[req.dst.0 as usize];
                match m.check(remote, len, rkey).and_then(|_| m.read_trimmed(remote, len)) {
                    Ok(bytes) => {
                        let size = len + self.header;
                        let work = self.cfg.writeback_overhead.unwrap_or(self.cfg.message_overhead);
                        let (src, dst) = (req.dst, req.src);
                        let then = self.hold(Then::ReadBack { req, bytes });
                        let ev = Ev::Enqueue {
                            src,
                            dst,
                            size,
                            then,
                            work,
                        };
                        self.handle(ev);
                    }
                    Err(e) => {
                        let lat = self.latency(req.dst, req.src, self.rail_of(&req));
                        self.complete(&req, CqeKind::Read, CqeStatus::RemoteAccess(e), 0, lat);
                    }
                }
            }
            Ev::Arrive(then) => {
                let then = self.release(then);
                self.arrive(then);
            }
            Ev::RequestOut {
                node,
                src,
                dst,
                size,
                then,
            } => {
                self.busy[node] -= 1;
                self.run_engines(node);
                let rail = self.rail_of(self.held(then).request().expect("an atomic's request"));
                let id = self.short_route(rail, src, dst);
                let end = self.short_transfer(id, size);
                self.at(end + self.routes[id].latency, Ev::Arrive(then));
            }
            Ev::AtomicAnswer { then, size } => {
                // The answer (header and old value) crosses as a short message whatever
                // `set_short_messages` says: thousands of answers in flight (RandomAccess) as
                // max-min flows would cost two recomputations over one large component each.
                let req = self.held(then).request().expect("an atomic's request");
                let (rail, from, to) = (self.rail_of(req), req.dst, req.src);
                let id = self.short_route(rail, from, to);
                let end = self.short_transfer(id, size);
                let latency = self.routes[id].latency;
                self.at(end + latency, Ev::Arrive(then));
            }
        }
    }

    /// Atomic `req` reached its target: the read-modify-write is applied there at once (no other
    /// access comes between its read and its write), and the answer leaves after the receive
    /// overhead and one memory round trip, as at packet level.
    fn atomic_at_target(&mut self, req: Request) {
        let Op::Atomic {
            op,
            width,
            remote,
            rkey,
            operand,
            compare,
            ..
        } = req.op
        else {
            return;
        };
        let w = u64::from(width);
        let mem = &mut self.mem[req.dst.0 as usize];
        let (status, old) = match mem
            .check(remote, w, rkey)
            .and_then(|_| mem.read(remote, w).map(|b| b.into_owned()))
        {
            Ok(b) => {
                let mut v = [0u8; 8];
                v[..b.len()].copy_from_slice(&b);
                let old = u64::from_le_bytes(v);
                if let Some(new) = op.apply_width(width, old, operand, compare) {
                    let _ = mem.write(remote, &new.to_le_bytes()[..w as usize]);
                }
                self.memory_touched(req.dst, rkey);
                (CqeStatus::Ok, old)
            }
            Err(e) => (CqeStatus::RemoteAccess(e), 0),
        };
        let size = self.header + ATOMIC_RESPONSE_BYTES;
        let t = self.now + self.cfg.rx_overhead + self.cfg.host.read_latency;
        let then = self.hold(Then::AtomicBack { req, status, old });
        self.at(t, Ev::AtomicAnswer { then, size });
    }

    /// Moves the `len` bytes at `from` of `src`'s memory to `to` of `dst`'s ([`Memory::write_from`]:
    /// one copy from region to region, no intermediate buffer; within one memory, through a
    /// trimmed read).
    fn move_bytes(&mut self, src: Rank, from: u64, dst: Rank, to: u64, len: u64) -> Result<(), MemoryError> {
        let (s, d) = (src.0 as usize, dst.0 as usize);
        if s == d {
            let bytes = self.mem[s].read_trimmed(from, len)?;
            return self.mem[d].write_padded(to, len, &bytes);
        }
        let (a, b) = if s < d {
            let (lo, hi) = self.mem.split_at_mut(d);
            (&lo[s], &mut hi[0])
        } else {
            let (lo, hi) = self.mem.split_at_mut(s);
            (&hi[0], &mut lo[d])
        };
        b.write_from(to, len, a, from)
    }

    /// The model wrote into `rank`'s memory in the region of key `rkey`: tell a watcher.
    fn memory_touched(&mut self, rank: Rank, rkey: u32) {
        if let Some(w) = self
            .watched
            .get_mut(rank.0 as usize)
            .and_then(|ws| ws.iter_mut().find(|w| w.0 == rkey))
        {
            w.1 += 1;
            self.notices.push(Notice::Memory(rank));
        }
    }

    /// Starts a max-min flow of `size` bytes over `links` (whose least capacity is `least`),
    /// landing `latency` after its last byte; it holds `engine` and `port` (nodes) until then.
    #[allow(clippy::too_many_arguments)]
    fn start_flow(
        &mut self,
        links: Rc<[usize]>,
        latency: SimTime,
        least: f64,
        size: f64,
        then: Held,
        engine: Option<usize>,
        port: Option<usize>,
    ) {
        let id = self.next_flow;
        self.next_flow += 1;
        let slot = match self.free_flows.pop() {
            Some(i) => i,
            None => {
                self.flows.push(None);
                u32::try_from(self.flows.len() - 1).expect("fewer than 2^32 flows in progress")
            }
        };
        let mut alone = true;
        for &l in links.iter() {
            if l >= self.on_link.len() {
                self.on_link.resize_with(l + 1, OnLink::default);
            }
            alone &= self.on_link[l].is_empty();
            self.on_link[l].push(slot);
        }
        self.live += 1;
        // A flow alone on its links is a component of its own: max-min gives it the least
        // capacity of its links (what `share` computes for it, with the same arithmetic).
        let (rate, version) = if alone {
            let r = least;
            if r > 0.0 {
                let end = self.now + SimTime::from_ps((size / r * 1e12).ceil() as u64);
                self.finish.push(Reverse((end, id, 1, slot)));
                (r, 1)
            } else {
                (0.0, 0)
            }
        } else {
            (0.0, 0)
        };
        let seeds = (!alone).then(|| links.clone());
        self.flows[slot as usize] = Some(Flow {
            id,
            remaining: size,
            since: self.now,
            rate,
            version,
            mark: 0,
            new_rate: 0.0,
            links,
            latency,
            engine,
            port,
            then,
        });
        if let Some(seeds) = seeds {
            self.share(&seeds);
        }
    }

    fn arrive(&mut self, then: Then) {
        match then {
            Then::AtomicReq { req } => self.atomic_at_target(req),
            Then::AtomicBack { req, status, old } => {
                let Op::Atomic { result, width, .. } = req.op else {
                    return;
                };
                if status == CqeStatus::Ok {
                    if let Some(a) = result {
                        let _ = self.mem[req.src.0 as usize].write(a, &old.to_le_bytes()[..usize::from(width)]);
                    }
                }
                if req.signaled || status != CqeStatus::Ok {
                    let c = Cqe {
                        wr_id: req.wr_id,
                        kind: CqeKind::Atomic,
                        status,
                        bytes: u64::from(width),
                        peer: req.dst,
                        addr: 0,
                        value: old,
                        at: SimTime::ZERO,
                    };
                    self.push_cqe(req.cq, c);
                }
            }
            Then::ReadBack { req, bytes } => {
                let Op::Read { local, len, .. } = req.op else { return };
                let status = match self.mem[req.src.0 as usize].write_padded(local, len, &bytes) {
                    Ok(()) => CqeStatus::Ok,
                    Err(e) => CqeStatus::RemoteAccess(e),
                };
                self.complete(&req, CqeKind::Read, status, len, SimTime::ZERO);
            }
            Then::Part(_) => {}
            Then::Land { req, route } => {
                let back = self.back_latency(route, req.src, req.dst, self.rail_of(&req));
                match req.op {
                    Op::Send {
                        local,
                        len,
                        rq,
                        reliable,
                        ..
                    } => {
                        let Some(q) = self.rqs.get_mut(rq.index()).filter(|q| q.0 == req.dst) else {
                            return;
                        };
                        let cq = q.1;
                        let status = match take_posted(&mut q.2) {
                            None => CqeStatus::NoBuffer,
                            Some((_, blen, _)) if blen < len => CqeStatus::BufferTooSmall,
                            Some((addr, _, wr_id)) => {
                                let _ = self.move_bytes(req.src, local, req.dst, addr, len);
                                let c = Cqe {
                                    wr_id,
                                    kind: CqeKind::Recv,
                                    status: CqeStatus::Ok,
                                    bytes: len,
                                    peer: req.src,
                                    addr,
                                    value: 0,
                                    at: SimTime::ZERO,
                                };
                                self.push_cqe(cq, c);
                                CqeStatus::Ok
                            }
                        };
                        if reliable || status == CqeStatus::Ok {
                            self.complete(&req, CqeKind::Send, status, len, back);
                        }
                    }
                    Op::Write {
                        local,
                        len,
                        remote,
                        rkey,
                        notify_cq,
                        reply_word,
                        ..
                    } => {
                        let m = &self.mem[req.dst.0 as usize];
                        let check = m
                            .check(remote, len, rkey)
                            .and_then(|_| match reply_word {
                                Some((a, k)) => m.check(a, 8, k),
                                None => Ok(()),
                            })
                            .and_then(|_| self.move_bytes(req.src, local, req.dst, remote, len));
                        let status = match check {
                            Ok(()) => {
                                if let Some((a, _)) = reply_word {
                                    let _ = self.mem[req.dst.0 as usize].fetch_add_u64(a, 1);
                                }
                                self.memory_touched(req.dst, rkey);
                                if let Some(cq) = notify_cq {
                                    let c = Cqe {
                                        wr_id: req.wr_id,
                                        kind: CqeKind::Notify,
                                        status: CqeStatus::Ok,
                                        bytes: len,
                                        peer: req.src,
                                        addr: remote,
                                        value: 0,
                                        at: SimTime::ZERO,
                                    };
                                    self.push_cqe(cq, c);
                                }
                                CqeStatus::Ok
                            }
                            Err(e) => CqeStatus::RemoteAccess(e),
                        };
                        self.complete(&req, CqeKind::Write, status, len, back);
                    }
                    _ => {}
                }
            }
        }
    }

    /// Local sharing (`Some(depth)`, an approximation): at a flow's start or end only the flows
    /// within `depth` levels of it (level 1: the flows sharing one of its links; level k + 1:
    /// those sharing a link with level k) get new max-min rates, within what the flows beyond
    /// leave of their links; the others keep theirs until a flow near them starts or ends.
    /// Rates stay feasible (no link carries more than its capacity), but a flow far from a
    /// departure does not speed up at once. `None` (the default): exact max-min over the whole
    /// component. Cost per start or end: O(the neighbourhood's flows × links per flow),
    /// independent of the number of flows in progress.
    pub fn set_local_sharing(&mut self, depth: Option<u32>) {
        self.depth = depth.map(|d| d.max(1));
    }

    /// Short messages (`limit` > 0, an approximation): a message of at most `limit` bytes
    /// (operation length; the packet header is added on top) does not enter max-min sharing.
    /// Every link of its route carries it after the short messages started on that link before
    /// it, at the link's residual rate when it starts (what the flows in progress leave of the
    /// capacity, at least the share of one more flow: capacity / (flows + 1)); it is over when
    /// its last link is, and it changes no flow's rate. `0` (the default): every message is a
    /// shared flow. Cost of a short message: O(links × flows per link) instead of two max-min
    /// recomputations.
    pub fn set_short_messages(&mut self, limit: u64) {
        self.short = limit;
    }

    /// Port FIFO (`true`, an approximation of the packet-level NIC's send path, off by
    /// default): a message to another node holds its engine only for its bytes at the unshared
    /// rate of the node's host read and injection links (the engine reads the data into an
    /// unlimited transmit queue, as the packet-level NIC with `nic.tx_queue = 0`), and the
    /// node's flows to other nodes move one after another in engine order — the next starts
    /// when the previous one's last byte has crossed its route (the port's FIFO, with its
    /// head-of-line blocking). The engine's per-message work thus overlaps the previous
    /// message's transfer. Messages within a node and short messages are unchanged. Cost: O(1)
    /// per flow more.
    pub fn set_port_fifo(&mut self, on: bool) {
        self.fifo = on;
    }

    /// Flows in progress.
    pub fn flows_in_progress(&self) -> usize {
        self.live
    }
}

impl NicBackend for FlowWorld {
    fn now(&self) -> SimTime {
        self.now
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn register(&mut self, rank: Rank, len: u64) -> (u64, u32) {
        self.mem[rank.0 as usize].register(len)
    }
    fn register_external(&mut self, rank: Rank, bytes: Box<dyn hpcnet_nic::ExternalBytes>) -> (u64, u32) {
        self.mem[rank.0 as usize].register_external(bytes)
    }
    fn register_sparse(&mut self, rank: Rank, len: u64, stride: u64, keep: u64) -> (u64, u32) {
        self.mem[rank.0 as usize].register_sparse(len, stride, keep)
    }
    fn load(&self, rank: Rank, addr: u64, len: u64) -> Result<Vec<u8>, MemoryError> {
        self.mem[rank.0 as usize]
            .read(addr, len)
            .map(std::borrow::Cow::into_owned)
    }
    fn load_into(&self, rank: Rank, addr: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        self.mem[rank.0 as usize].read_into(addr, out)
    }
    fn load_append(&self, rank: Rank, addr: u64, len: u64, out: &mut Vec<u8>) -> Result<(), MemoryError> {
        self.mem[rank.0 as usize].read_append(addr, len, out)
    }
    fn store(&mut self, rank: Rank, addr: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        self.mem[rank.0 as usize].write(addr, bytes)
    }
    fn discard(&mut self, rank: Rank, addr: u64, len: u64) -> Result<(), MemoryError> {
        self.mem[rank.0 as usize].discard(addr, len)
    }
    fn alloc_qp(&mut self) -> QpNum {
        self.next_qp += 1;
        QpNum::from_index(self.next_qp as usize - 1)
    }
    fn create_cq(&mut self, owner: Rank) -> CqId {
        self.cqs.push((owner, VecDeque::new()));
        CqId::from_index(self.cqs.len() - 1)
    }
    fn create_rq(&mut self, owner: Rank, cq: CqId) -> Result<RqId, PostError> {
        if self.cqs.get(cq.index()).is_none_or(|c| c.0 != owner) {
            return Err(PostError::BadCq(cq));
        }
        self.rqs.push((owner, cq, VecDeque::new()));
        Ok(RqId::from_index(self.rqs.len() - 1))
    }
    fn post_recv(&mut self, rq: RqId, addr: u64, len: u64, wr_id: u64) -> Result<(), PostError> {
        self.post_recv_run(rq, addr, len, 1, wr_id)
    }
    fn post_recv_run(&mut self, rq: RqId, addr: u64, len: u64, count: u64, wr_id: u64) -> Result<(), PostError> {
        let q = self.rqs.get_mut(rq.index()).ok_or(PostError::BadRq(rq))?;
        if count > 0 {
            q.2.push_back(Posted {
                addr,
                len,
                wr_id,
                count,
            });
        }
        Ok(())
    }
    fn nap_buffer_size(&self) -> u64 {
        0
    }
    fn post_nap_buffers(&mut self, _: Rank, _: u64, _: u64, _: CqId) -> Result<(), PostError> {
        Err(PostError::Unsupported {
            op: "NAP",
            model: MODEL,
        })
    }
    fn repost_nap_buffer(&mut self, _: Rank, _: u64) {}
    fn post(&mut self, req: Request) -> Result<(), PostError> {
        for r in [req.src, req.dst] {
            if r.0 as usize >= self.ranks {
                return Err(PostError::NoSuchRank(r));
            }
        }
        if self.cqs.get(req.cq.index()).is_none_or(|c| c.0 != req.src) {
            return Err(PostError::BadCq(req.cq));
        }
        let start = self.now + self.start_latency;
        let work = self.cfg.message_overhead;
        let m = &self.mem[req.src.0 as usize];
        match req.op {
            Op::Send { local, len, .. } | Op::Write { local, len, .. } => {
                m.check_local(local, len).map_err(PostError::Local)?;
                let size = len + self.header;
                let (src, dst) = (req.src, req.dst);
                let then = self.hold(Then::Land { req, route: NO_ROUTE });
                self.at(
                    start,
                    Ev::Enqueue {
                        src,
                        dst,
                        size,
                        then,
                        work,
                    },
                );
                Ok(())
            }
            Op::Read { local, len, .. } => {
                m.check_local(local, len).map_err(PostError::Local)?;
                let lat = self.latency(req.src, req.dst, self.rail_of(&req));
                // The request leaves once an engine has taken it (no data to move).
                self.at(
                    start + lat + self.cfg.host.read_latency + work,
                    Ev::ReadRequest(Box::new(req)),
                );
                Ok(())
            }
            Op::Put { .. } => Err(PostError::Unsupported {
                op: "PUT",
                model: MODEL,
            }),
            Op::Get { .. } => Err(PostError::Unsupported {
                op: "GET",
                model: MODEL,
            }),
            Op::Nap { .. } => Err(PostError::Unsupported {
                op: "NAP",
                model: MODEL,
            }),
            Op::Fsm { .. } => Err(PostError::Unsupported {
                op: "FSM",
                model: MODEL,
            }),
            Op::Atomic {
                width, remote, result, ..
            } => {
                if width != 4 && width != 8 {
                    return Err(PostError::AtomicWidth(width));
                }
                let w = u64::from(width);
                if !remote.is_multiple_of(w) {
                    return Err(PostError::AtomicAlignment { addr: remote, width });
                }
                if let Some(a) = result {
                    m.check_local(a, w).map_err(PostError::Local)?;
                }
                // The request queues for an engine like any message (the NIC's message rate
                // limits a stream of atomics) and crosses as a short message.
                let (src, dst) = (req.src, req.dst);
                let size = self.header + ATOMIC_REQUEST_BYTES;
                let then = self.hold(Then::AtomicReq { req });
                self.at(
                    start,
                    Ev::Enqueue {
                        src,
                        dst,
                        size,
                        then,
                        work,
                    },
                );
                Ok(())
            }
        }
    }
    fn poll_cq(&mut self, cq: CqId) -> Option<Cqe> {
        self.cqs.get_mut(cq.index())?.1.pop_front()
    }
    fn set_timer(&mut self, _rank: Rank, t: SimTime) -> TimerId {
        let id = TimerId::from_index(self.next_timer as usize);
        self.next_timer += 1;
        self.at_timer(t.max(self.now), id);
        id
    }
    fn step(&mut self) -> bool {
        // An event at or before the next flow's end goes first.
        let fin = self.next_finish();
        let ev = match fin {
            Some((ft, _)) => self.queue.pop_before(SimTime::from_ps(ft.ps() + 1)),
            None => self.queue.pop(),
        };
        if let Some((t, slot)) = ev {
            self.events += 1;
            self.now = t;
            if slot & TIMER_EVENT != 0 {
                let id = TimerId::from_index((slot & !TIMER_EVENT) as usize);
                self.notices.push(Notice::Timer(id));
                return true;
            }
            let ev = self.slots[slot as usize].take().expect("a scheduled event");
            self.free_slots.push(slot);
            self.handle(ev);
        } else {
            let Some((t, slot)) = fin else {
                return false;
            };
            self.events += 1;
            self.finish.pop();
            self.now = t;
            let f = self.flows[slot as usize].take().expect("flow");
            self.free_flows.push(slot);
            self.live -= 1;
            for &l in f.links.iter() {
                self.on_link[l].remove(slot);
            }
            let (engine, then) = match *self.held(f.then) {
                Then::Part(j) => {
                    self.release(f.then);
                    let join = &mut self.joins[j as usize];
                    join.left -= 1;
                    if join.left > 0 {
                        (None, None)
                    } else {
                        self.free_joins.push(j);
                        (join.engine.take(), join.then.take())
                    }
                }
                _ => (f.engine, Some(f.then)),
            };
            if let Some(node) = engine {
                self.busy[node] -= 1;
                self.run_engines(node);
            }
            self.share(&f.links);
            if let Some(node) = f.port {
                match self.port_queue[node].pop_front() {
                    Some((links, latency, least, size, then)) => {
                        self.start_flow(links, latency, least, size as f64, then, None, Some(node));
                    }
                    None => self.port_held[node] = false,
                }
            }
            if let Some(then) = then {
                self.at(t + f.latency, Ev::Arrive(then));
            }
        }
        true
    }
    fn take_notices(&mut self, out: &mut Vec<Notice>) {
        out.append(&mut self.notices);
    }
    fn watch_memory(&mut self, rank: Rank, rkey: u32) -> bool {
        let i = rank.0 as usize;
        if self.watched.len() <= i {
            self.watched.resize_with(i + 1, Vec::new);
        }
        if !self.watched[i].iter().any(|w| w.0 == rkey) {
            self.watched[i].push((rkey, 0));
        }
        true
    }
    fn memory_writes(&self, rank: Rank, rkey: u32) -> u64 {
        self.watched
            .get(rank.0 as usize)
            .and_then(|w| w.iter().find(|w| w.0 == rkey))
            .map_or(0, |w| w.1)
    }
    fn add_key(&mut self, rank: Rank, rkey: u32) -> Option<u32> {
        self.mem[rank.0 as usize].add_key(rkey)
    }
    fn events(&self) -> u64 {
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of posted buffers yields them in address order with consecutive receive ids, as
    /// posting them one by one would, and a buffer posted after it comes after it.
    #[test]
    fn posted_runs_yield_their_buffers_in_order() {
        let mut q = VecDeque::new();
        q.push_back(Posted {
            addr: 1000,
            len: 100,
            wr_id: 7,
            count: 3,
        });
        q.push_back(Posted {
            addr: 50,
            len: 8,
            wr_id: 2,
            count: 1,
        });
        let got: Vec<_> = std::iter::from_fn(|| take_posted(&mut q)).collect();
        assert_eq!(got, [(1000, 100, 7), (1100, 100, 8), (1200, 100, 9), (50, 8, 2)]);
        assert!(q.is_empty());
    }

    /// A link's flows keep their start order through removals, the first of them in place.
    #[test]
    fn flows_on_a_link_keep_their_start_order() {
        let mut on = OnLink::default();
        assert!(on.is_empty() && on.iter().next().is_none());
        assert_eq!(on.len(), 0);
        for s in [4, 9, 2, 7] {
            on.push(s);
        }
        assert_eq!(on.len(), 4);
        assert_eq!(on.iter().collect::<Vec<_>>(), [4, 9, 2, 7]);
        on.remove(4);
        assert_eq!(on.iter().collect::<Vec<_>>(), [9, 2, 7]);
        on.remove(2);
        on.remove(5);
        assert_eq!(on.iter().collect::<Vec<_>>(), [9, 7]);
        on.remove(9);
        on.remove(7);
        assert!(on.is_empty() && on.rest.is_empty());
        on.push(3);
        assert_eq!(on.iter().collect::<Vec<_>>(), [3]);
    }
}
