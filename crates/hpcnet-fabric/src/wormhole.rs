//! Flit-level wormhole switching (`link.switching = "wormhole"`): its own buffers, credits,
//! events and scenario checks, beside the packet-level engine of [`super`].
//!
//! Model (Dally & Towles, *Principles and Practices of Interconnection Networks*, ch. 13 and
//! 16; BookSim's input-queued VC router):
//! - A packet of `L` bytes is `⌈L / link.flit_bytes⌉` flits; the last may be partial. Every
//!   router input VC is a FIFO of `router.private_credits × router.credit_unit / flit_bytes`
//!   flit slots, and the upstream output counts one credit per slot: a flit may be sent only
//!   into a free slot, and a slot is free again upstream one link latency after its flit left
//!   the downstream buffer (per-flit credits).
//! - The head flit is routed `router.latency` after it arrived and requests its output and the
//!   downstream VC routing chose; it must win that VC, which the packet then holds until its
//!   tail flit has been sent (VC held head to tail). The next packet may follow into the same
//!   downstream buffer right behind that tail, so two packets never interleave on one VC.
//! - Flits of a packet advance one per flit time on a link as long as the next flit has arrived
//!   (each flit spends `router.latency` in the router pipeline) and the downstream VC has a
//!   credit, so a blocked packet spans several routers.
//! - **Switch allocation**: an output grants one requesting input VC (round robin over its
//!   requests, or the oldest packet under `age`) and then keeps sending that packet's flits
//!   back to back until one is not there yet, has no credit, or the tail has gone — the
//!   allocator holds the switch for the packet while it can move (BookSim's
//!   `hold_switch_for_packet`). Then the output arbitrates again, so packets on other VCs take
//!   the link whenever the holder stalls. With `router.input_speedup` below the VC count an
//!   input port feeds one such run at a time per read slot. Separable allocators (iSLIP,
//!   input-/output-first) and output speedup are not modelled in this mode (refused).
//! - **Cost**: a run of flits is one decision and at most one event per hop, however many
//!   flits it carries (each flit costs a few stores in two rings, no event); a packet costs
//!   one head event per hop plus one decision per stall. Memory: two times per flit slot.
//! - Endpoints: node injection queues as in the packet engine (a packet counts as injected when
//!   its head flit leaves); ejection into a node never blocks. The packet is delivered when its
//!   tail flit has arrived.
//!
//! Refused in this mode (one message naming the key): the bubble rule on tori (it reserves
//! room for whole packets; use the dateline VCs), minimal adaptive routing, shared credit
//! pools, output speedup, separable allocators, link-level bit errors and retransmission,
//! mixed switching per link, failed links and dynamic faults, and multicast.

use super::{Blocked, Dest, Drop, NetEvent, NetStat, Network, OutPort, NIL};
use crate::config::{ConfigError, DeadlockAvoidance, FabricConfig, RoutingConfig, Switching, MAX_VCS};
use crate::packet::{PacketId, F_MCAST};
use crate::routing::{CreditView, RouteError};
use crate::topology::{NodeId, PortIdx};
use hpcnet_des::stats::{Registry, StatRecord};
use hpcnet_des::{BitsPerSec, Bytes, EventQueue, Origin, SimTime};
use serde::Serialize;
use std::collections::VecDeque;

/// Default flit: 16 B, the Sunway router's buffer slice (spec 01, 64 B credits = 4 slices), and
/// the default packet header, so a head flit carries exactly the header.
pub const DEFAULT_FLIT: Bytes = Bytes(16);

/// Flit size of a configuration (the default when `link.flit_bytes` is not given).
pub fn flit_bytes(cfg: &FabricConfig) -> Bytes {
    cfg.link.flit_bytes.unwrap_or(DEFAULT_FLIT)
}

/// Flits sent by sources, flits sent into destination nodes, flits of dropped packets, and
/// flits held in router buffers (or on the link into one): `injected = ejected + dropped +
/// buffered` at every instant.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct FlitCounters {
    pub injected: u64,
    pub ejected: u64,
    pub dropped: u64,
    pub buffered: u64,
}

/// One router input VC buffer: a ring of flit slots and the packets whose flits are in it.
#[derive(Clone, Default)]
pub(crate) struct Buf {
    /// Packets with flits in (or on the link into) this buffer, oldest first. The first is the
    /// one whose flits leave; the others follow it in the ring.
    pkts: VecDeque<PacketId>,
    /// Ring positions: next slot to write (upstream), next slot to leave.
    wr: u32,
    rd: u32,
    /// Occupied slots (flits written, not yet departed).
    held: u32,
    /// Flits of the first packet that have left.
    sent: u16,
    /// Output the first packet is routed to (NIL: not routed yet) and the downstream VC.
    out: u32,
    vc: u8,
    /// The first packet holds that downstream VC.
    granted: bool,
    /// The upstream output waits for a slot of this buffer whose departure is not known yet.
    up_wait: bool,
    /// The first packet had no route: its flits are discarded as they arrive.
    sink: bool,
}

/// A node injection queue: the packet whose flits are leaving it.
#[derive(Copy, Clone)]
struct Src {
    cur: PacketId,
    sent: u16,
    /// The VC it is injected on (the packet's own `vc` follows its head).
    vc: u8,
}

/// A flit sent (tests): output, downstream VC, packet, flit index, flits of the packet.
#[cfg(test)]
pub(crate) type FlitSent = (u32, u8, PacketId, u16, u16);

/// Flits of packet `id` from flit `a` on, written into buffer `db`, the first ready at `t`.
#[derive(Copy, Clone)]
struct Written {
    db: u32,
    id: PacketId,
    a: u16,
    t: SimTime,
}

/// The wormhole side of an output port (the link itself stays in the network's `OutPort`).
#[derive(Clone)]
struct WOut {
    /// Router input buffers whose first packet is routed here, in arrival order.
    reqs: Vec<u32>,
    rr: u32,
    /// Holder of each downstream VC (NIL: free).
    owner: [u32; MAX_VCS],
    /// First buffer of the downstream input port (`gport << vc_shift`; NIL: a node, or none).
    down: u32,
    /// Serialisation table of the link's rate (index into `Worm::tabs`).
    tab: u8,
    /// Last packet size whose serialisation was computed here, and that time.
    ser_memo: (u32, SimTime),
    arb_at: SimTime,
}

/// The flit-level engine's state.
pub(crate) struct Worm {
    depth: u32,
    tr: SimTime,
    bufs: Vec<Buf>,
    /// Per buffer slot: when its flit may leave (arrival plus the router pipeline).
    ready: Vec<SimTime>,
    /// Per buffer slot: when the upstream may write it again (MAX: occupied, departure unknown).
    free: Vec<SimTime>,
    src: Vec<Src>,
    outs: Vec<WOut>,
    /// Flit count of each packet id.
    flits: Vec<u16>,
    /// Serialisation time of `j` whole flits, per distinct link rate.
    tabs: Vec<(BitsPerSec, Vec<SimTime>)>,
    counters: FlitCounters,
    /// Latest time of any scheduled event or planned flit movement.
    horizon: SimTime,
    /// Head and decision events scheduled and not yet handled.
    pending: u64,
    /// Every flit sent: (output, downstream VC, packet, flit index, flits of the packet), for tests.
    #[cfg(test)]
    pub(crate) trace: Option<Vec<FlitSent>>,
}

/// Name, unit and description of the flit counters reported in wormhole mode.
const FLIT_STATS: [(&str, &str, &str); 2] = [
    ("net.flits_injected", "flits", "flits that left their source node"),
    (
        "net.flits_ejected",
        "flits",
        "flits that entered their destination node",
    ),
];

#[inline(always)]
fn step(x: u32, depth: u32) -> u32 {
    if x + 1 == depth {
        0
    } else {
        x + 1
    }
}

impl Worm {
    pub(super) fn new(net: &Network) -> Worm {
        let cfg = &net.cfg;
        let f = flit_bytes(cfg).0;
        let depth = (u64::from(cfg.router.private_credits) * cfg.router.credit_unit.0 / f) as u32;
        let nbufs = net.node_q0 as usize;
        let max_pkt = (cfg.packet.header + cfg.packet.max_payload).0;
        let nmax = max_pkt.div_ceil(f) as usize;
        let mut tabs: Vec<(BitsPerSec, Vec<SimTime>)> = Vec::new();
        let mut outs = Vec::with_capacity(net.out.len());
        for o in &net.out {
            let tab = match tabs.iter().position(|t| t.0 == o.rate) {
                Some(i) => i,
                None => {
                    let t = (0..=nmax).map(|j| o.rate.serialization(Bytes(j as u64 * f))).collect();
                    tabs.push((o.rate, t));
                    tabs.len() - 1
                }
            };
            let down = match o.to {
                Dest::Router { gport } => gport << net.vc_shift,
                _ => NIL,
            };
            outs.push(WOut {
                reqs: Vec::new(),
                rr: 0,
                owner: [NIL; MAX_VCS],
                down,
                tab: tab.min(u8::MAX as usize) as u8,
                ser_memo: (u32::MAX, SimTime::ZERO),
                arb_at: SimTime::MAX,
            });
        }
        Worm {
            depth,
            tr: cfg.router.latency,
            bufs: vec![
                Buf {
                    out: NIL,
                    ..Buf::default()
                };
                nbufs
            ],
            ready: vec![SimTime::ZERO; nbufs * depth as usize],
            free: vec![SimTime::ZERO; nbufs * depth as usize],
            src: vec![
                Src {
                    cur: NIL,
                    sent: 0,
                    vc: 0
                };
                net.inq.count() - nbufs
            ],
            outs,
            flits: Vec::new(),
            tabs,
            counters: FlitCounters::default(),
            horizon: SimTime::ZERO,
            pending: 0,
            #[cfg(test)]
            trace: None,
        }
    }

    /// Whether anything is scheduled or planned to happen after `now`.
    pub(super) fn moving(&self, now: SimTime) -> bool {
        self.pending > 0 || self.horizon > now
    }

    pub(super) fn statistics(&self) -> Vec<StatRecord> {
        Registry::of_counters(&FLIT_STATS, &[self.counters.injected, self.counters.ejected]).report()
    }

    #[inline(always)]
    fn slot(&self, b: u32, i: u32) -> usize {
        (b * self.depth + i) as usize
    }

    /// Offset, from the start of flit 0 of a back-to-back run, of the start of flit `i` on
    /// output `oi` (whole flits before it).
    #[inline(always)]
    fn start_off(&self, oi: u32, i: u16) -> SimTime {
        self.tabs[self.outs[oi as usize].tab as usize].1[i as usize]
    }

    /// Offset of the end of flit `i` (of `n`, packet of `size` bytes) on output `oi`: the last
    /// flit ends when the whole packet has been serialised, so a packet sent in one run takes
    /// exactly its packet-level serialisation time.
    #[inline(always)]
    fn end_off(&mut self, oi: u32, rate: BitsPerSec, i: u16, n: u16, size: u32) -> SimTime {
        if i + 1 < n {
            return self.start_off(oi, i + 1);
        }
        let o = &mut self.outs[oi as usize];
        if o.ser_memo.0 != size {
            o.ser_memo = (size, rate.serialization(Bytes(size as u64)));
        }
        o.ser_memo.1
    }

    #[inline(always)]
    fn note(&mut self, t: SimTime) {
        if t > self.horizon {
            self.horizon = t;
        }
    }

    /// Make sure output `oi` decides at `t` (one pending decision per output: an earlier
    /// request supersedes a later one, which is then ignored).
    #[inline(always)]
    fn wake<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, by: Origin, oi: u32, t: SimTime) {
        let o = &mut self.outs[oi as usize];
        if t < o.arb_at {
            o.arb_at = t;
            self.note(t);
            self.pending += 1;
            q.schedule_by(by, t, NetEvent::flit_arb(oi).into());
        }
    }
}

/// Free flit slots of the downstream VC buffers of a router's outputs (adaptive routing).
struct FlitView<'a> {
    out: &'a [OutPort],
    bufs: &'a [Buf],
    depth: u32,
    vc_shift: u32,
}

impl CreditView for FlitView<'_> {
    fn free(&mut self, port: PortIdx, vc: u8) -> u32 {
        match self.out[port.index()].to {
            Dest::Router { gport } => {
                let db = (gport << self.vc_shift) | vc as u32;
                self.depth - self.bufs[db as usize].held
            }
            Dest::Node => u32::MAX,
            Dest::None => 0,
        }
    }
}

impl Network {
    /// The flit counters in wormhole mode (None in the packet-level modes).
    pub fn flit_counters(&self) -> Option<FlitCounters> {
        let w = self.worm.as_ref()?;
        let mut c = w.counters.clone();
        c.buffered = w.bufs.iter().map(|b| b.held as u64).sum();
        Some(c)
    }

    /// Whether the fabric switches flits in wormhole mode.
    pub fn is_wormhole(&self) -> bool {
        self.worm.is_some()
    }

    fn worm_take(&mut self) -> Box<Worm> {
        self.worm.take().expect("wormhole engine")
    }

    /// Queue `pkt` (prepared by [`Network::inject`]) at its node's injection queue.
    pub(super) fn worm_inject<E: From<NetEvent>, S: crate::net::Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        id: PacketId,
        fresh: bool,
        ep: &mut S,
    ) -> Result<(), RouteError> {
        let pkt = &self.packets[id as usize];
        if pkt.flags & F_MCAST != 0 {
            let (router, port) = self.routing.attach(pkt.src, pkt.rail);
            let group = pkt.dst.0;
            self.unalloc(id, fresh);
            return Err(RouteError::NoMulticastTable { router, port, group });
        }
        let f = flit_bytes(&self.cfg).0;
        let n = (pkt.size as u64).div_ceil(f).max(1) as u16;
        let (node, rail) = (pkt.src, pkt.rail);
        let slot = match self.cfg.router.node_injection {
            crate::config::NodeInjection::PerVc => pkt.vc as u32,
            crate::config::NodeInjection::Fifo => 0,
        };
        let qi = self.node_queue(node.0 * self.rails as u32 + rail as u32) + slot;
        let mut w = self.worm_take();
        if w.flits.len() < self.packets.len() {
            w.flits.resize(self.packets.len(), 0);
        }
        w.flits[id as usize] = n;
        if self.inq.push_back(qi, id) == 1 {
            let oi = self.node_oport(node, rail);
            self.worm_arb(&mut w, q, oi, ep);
        }
        self.worm = Some(w);
        Ok(())
    }

    pub(super) fn worm_arb_event<E: From<NetEvent>, S: crate::net::Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        ep: &mut S,
    ) {
        let mut w = self.worm_take();
        w.pending -= 1;
        let o = &mut w.outs[oi as usize];
        if o.arb_at == q.now() {
            o.arb_at = SimTime::MAX;
            self.worm_arb(&mut w, q, oi, ep);
        }
        self.worm = Some(w);
    }

    /// The head flit of the first packet of buffer `b` is routable: route it and request.
    pub(super) fn worm_head<E: From<NetEvent>, S: crate::net::Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        b: u32,
        ep: &mut S,
    ) {
        let mut w = self.worm_take();
        w.pending -= 1;
        let Some(&id) = w.bufs[b as usize].pkts.front() else {
            self.worm = Some(w);
            return;
        };
        let g = b >> self.vc_shift;
        let router = self.router_of[g as usize];
        let base = self.port_base[router.index()];
        let end = self.port_base[router.index() + 1];
        let in_port = PortIdx((g - base) as u16);
        let p = &mut self.packets[id as usize];
        p.hops += 1;
        let mut view = FlitView {
            out: &self.out[base as usize..end as usize],
            bufs: &w.bufs,
            depth: w.depth,
            vc_shift: self.vc_shift,
        };
        match self.routing.route(&self.topo, router, in_port, p, &mut view) {
            Ok(c) => {
                let oi = base + c.port.0 as u32;
                let bf = &mut w.bufs[b as usize];
                bf.out = oi;
                bf.vc = c.vc;
                bf.granted = false;
                w.outs[oi as usize].reqs.push(b);
                self.worm_arb(&mut w, q, oi, ep);
            }
            Err(reason) => {
                self.stats.add(NetStat::Dropped, 1);
                self.drops.push(Drop {
                    packet: self.packets[id as usize].clone(),
                    at: q.now(),
                    reason,
                });
                w.bufs[b as usize].sink = true;
                self.worm_sink(&mut w, q, b);
            }
        }
        self.worm = Some(w);
    }

    /// Discard the arrived flits of the unroutable first packet of buffer `b`.
    #[cold]
    fn worm_sink<E: From<NetEvent>>(&mut self, w: &mut Worm, q: &mut EventQueue<E>, b: u32) {
        let now = q.now();
        let up = self.upstream[(b >> self.vc_shift) as usize];
        let lat_in = self.out[up as usize].latency;
        let mut first_free = SimTime::MAX;
        while w.bufs[b as usize].sink && w.bufs[b as usize].held > 0 {
            let id = *w.bufs[b as usize].pkts.front().expect("a sinking packet");
            let n = w.flits[id as usize];
            let s = w.slot(b, w.bufs[b as usize].rd);
            let t = w.ready[s].max(now);
            w.free[s] = t + lat_in;
            first_free = first_free.min(t + lat_in);
            w.note(t + lat_in);
            let depth = w.depth;
            let bf = &mut w.bufs[b as usize];
            bf.rd = step(bf.rd, depth);
            bf.held -= 1;
            bf.sent += 1;
            w.counters.dropped += 1;
            if bf.sent == n {
                bf.pkts.pop_front();
                bf.sent = 0;
                bf.sink = false;
                self.take(id);
                if !bf.pkts.is_empty() {
                    let t = w.ready[w.slot(b, w.bufs[b as usize].rd)].max(now);
                    w.note(t);
                    w.pending += 1;
                    q.schedule_by(self.port_origin(up), t, NetEvent::flit_head(b).into());
                }
            }
        }
        if first_free != SimTime::MAX && w.bufs[b as usize].up_wait {
            w.bufs[b as usize].up_wait = false;
            let by = Origin(self.router_of[(b >> self.vc_shift) as usize].0);
            w.wake(q, by, up, first_free);
        }
    }

    /// Whether the first packet of buffer `b`, routed to router output `oi`, can send a flit
    /// now; if not, when it may (MAX: when something else tells the output).
    #[inline(always)]
    fn worm_ready(&self, w: &mut Worm, oi: u32, b: u32, now: SimTime) -> Result<(), SimTime> {
        let bf = &w.bufs[b as usize];
        let vc = bf.vc;
        if !bf.granted && w.outs[oi as usize].owner[vc as usize] != NIL {
            return Err(SimTime::MAX);
        }
        if bf.held == 0 {
            return Err(SimTime::MAX);
        }
        let r = w.ready[w.slot(b, bf.rd)];
        if r > now {
            return Err(r);
        }
        let down = w.outs[oi as usize].down;
        if down != NIL {
            let db = down | vc as u32;
            let f = w.free[w.slot(db, w.bufs[db as usize].wr)];
            if f > now {
                if f == SimTime::MAX {
                    w.bufs[db as usize].up_wait = true;
                }
                return Err(f);
            }
        }
        if self.in_speedup != 0 {
            let t = self.input_ready::<super::Full>(b);
            if t > now {
                return Err(t);
            }
        }
        Ok(())
    }

    /// Decide at output `oi`: grant a request that can move now and send its run of flits, or
    /// wait until one can.
    fn worm_arb<E: From<NetEvent>, S: crate::net::Endpoints>(
        &mut self,
        w: &mut Worm,
        q: &mut EventQueue<E>,
        oi: u32,
        ep: &mut S,
    ) {
        let now = q.now();
        let busy = self.out[oi as usize].busy_until;
        if busy > now {
            w.wake(q, self.port_origin(oi), oi, busy);
            return;
        }
        if oi >= self.router_ports {
            self.worm_arb_node(w, q, oi, ep);
            return;
        }
        let n = w.outs[oi as usize].reqs.len();
        if n == 0 {
            return;
        }
        let start = w.outs[oi as usize].rr as usize % n;
        let mut best: Option<(usize, SimTime)> = None;
        let mut wait = SimTime::MAX;
        for k in 0..n {
            let idx = (start + k) % n;
            let b = w.outs[oi as usize].reqs[idx];
            match self.worm_ready(w, oi, b, now) {
                Ok(()) => {
                    if !self.by_age {
                        best = Some((idx, SimTime::ZERO));
                        break;
                    }
                    let id = *w.bufs[b as usize].pkts.front().expect("a requesting packet");
                    let created = self.packets[id as usize].created;
                    if best.is_none_or(|(_, c)| created < c) {
                        best = Some((idx, created));
                    }
                }
                Err(t) => wait = wait.min(t),
            }
        }
        match best {
            Some((idx, _)) => self.worm_send(w, q, oi, idx),
            None if wait != SimTime::MAX => w.wake(q, self.port_origin(oi), oi, wait),
            None => {}
        }
    }

    /// Router output `oi` serves its request `idx`: the run of flits that can go back to back.
    fn worm_send<E: From<NetEvent>>(&mut self, w: &mut Worm, q: &mut EventQueue<E>, oi: u32, idx: usize) {
        let now = q.now();
        let b = w.outs[oi as usize].reqs[idx];
        let id = *w.bufs[b as usize].pkts.front().expect("a requesting packet");
        let n = w.flits[id as usize];
        let vc = w.bufs[b as usize].vc;
        if !w.bufs[b as usize].granted {
            w.outs[oi as usize].owner[vc as usize] = b;
            w.bufs[b as usize].granted = true;
            self.packets[id as usize].vc = vc;
        }
        let down = w.outs[oi as usize].down;
        let db = if down == NIL { NIL } else { down | vc as u32 };
        let (lat, rate) = (self.out[oi as usize].latency, self.out[oi as usize].rate);
        let up = self.upstream[(b >> self.vc_shift) as usize];
        let lat_in = self.out[up as usize].latency;
        let arrive = lat + w.tr;
        let depth = w.depth;
        let a = w.bufs[b as usize].sent;
        let base = w.start_off(oi, a);
        let mut i = a;
        {
            // The run, on local copies of the two buffers' ring positions and slices of the
            // rings (the loop runs once per flit: no re-indexing of the buffer records).
            let bufs = &mut w.bufs;
            let ready = &mut w.ready;
            let free = &mut w.free;
            let tab = &w.tabs[w.outs[oi as usize].tab as usize].1;
            let d = depth as usize;
            let bs = b as usize * d;
            let (mut rd, mut held) = (bufs[b as usize].rd, bufs[b as usize].held);
            let (ds, mut dwr, mut dheld) = if db != NIL {
                let x = &bufs[db as usize];
                (db as usize * d, x.wr, x.held)
            } else {
                (0, 0, 0)
            };
            loop {
                let st = now + (tab[i as usize] - base);
                if i > a {
                    if held == 0 || ready[bs + rd as usize] > st {
                        break;
                    }
                    if db != NIL && free[ds + dwr as usize] > st {
                        break;
                    }
                }
                // The flit leaves this buffer: its slot is free upstream one link latency later.
                free[bs + rd as usize] = st + lat_in;
                rd = step(rd, depth);
                held -= 1;
                if db != NIL {
                    ready[ds + dwr as usize] = st + arrive;
                    free[ds + dwr as usize] = SimTime::MAX;
                    dwr = step(dwr, depth);
                    dheld += 1;
                }
                #[cfg(test)]
                if let Some(t) = &mut w.trace {
                    t.push((oi, vc, id, i, n));
                }
                i += 1;
                if i == n {
                    break;
                }
            }
            let x = &mut bufs[b as usize];
            (x.rd, x.held) = (rd, held);
            if db != NIL {
                let x = &mut bufs[db as usize];
                (x.wr, x.held) = (dwr, dheld);
            }
        }
        let size = self.packets[id as usize].size;
        let end = now + (w.end_off(oi, rate, i - 1, n, size) - base);
        let moved = (i - a) as u64;
        w.bufs[b as usize].sent = i;
        let o = &mut self.out[oi as usize];
        o.busy_until = end;
        o.busy_ps += (end - now).0;
        o.ser_size = u32::MAX;
        o.ser_time = end - now;
        if i == n {
            o.packets += 1;
        }
        if self.in_speedup != 0 {
            self.occupy_input::<super::Full>(b, id, end);
        }
        self.last_progress = now;
        w.note(end + arrive);
        let by = self.port_origin(oi);
        if db != NIL {
            self.worm_wrote(
                w,
                q,
                by,
                Written {
                    db,
                    id,
                    a,
                    t: now + arrive,
                },
            );
        } else {
            w.counters.ejected += moved;
            if i == n {
                self.on_wire += 1;
                w.note(end + lat);
                q.schedule_by(by, end + lat, NetEvent::deliver(id).into());
            }
        }
        // Slots freed here: the upstream output may be waiting for one.
        if w.bufs[b as usize].up_wait {
            w.bufs[b as usize].up_wait = false;
            w.wake(q, by, up, now + lat_in);
        }
        let wo = &mut w.outs[oi as usize];
        if i == n {
            // The tail has passed: the downstream VC is free, the buffer's next packet may go.
            wo.owner[vc as usize] = NIL;
            wo.reqs.remove(idx);
            wo.rr = idx as u32;
            let bf = &mut w.bufs[b as usize];
            bf.pkts.pop_front();
            bf.sent = 0;
            bf.out = NIL;
            bf.granted = false;
            if !bf.pkts.is_empty() {
                let t = w.ready[w.slot(b, w.bufs[b as usize].rd)].max(end);
                w.note(t);
                w.pending += 1;
                q.schedule_by(by, t, NetEvent::flit_head(b).into());
            }
        } else {
            wo.rr = idx as u32 + 1;
        }
        if !w.outs[oi as usize].reqs.is_empty() {
            w.wake(q, by, oi, end);
        }
    }

    /// Flits of `id` from flit `a` on were written into buffer `db` by a component of origin
    /// `by`, the first ready at `t`: a new head is routed when it is the buffer's first packet;
    /// a routed first packet waiting for its flits looks again.
    #[inline(always)]
    fn worm_wrote<E: From<NetEvent>>(&mut self, w: &mut Worm, q: &mut EventQueue<E>, by: Origin, wr: Written) {
        let Written { db, id, a, t } = wr;
        let d = &mut w.bufs[db as usize];
        if a == 0 {
            d.pkts.push_back(id);
            if d.pkts.len() == 1 {
                w.pending += 1;
                w.note(t);
                q.schedule_by(by, t, NetEvent::flit_head(db).into());
            }
        } else if d.pkts.front() == Some(&id) {
            if d.sink {
                self.worm_sink(w, q, db);
            } else if d.out != NIL {
                let out = d.out;
                let by = self.port_origin(out);
                w.wake(q, by, out, t);
            }
        }
    }

    /// Decide at node output `oi`: round robin over the node's injection queues whose next
    /// packet can move (its VC free, or held by it; a credit downstream).
    fn worm_arb_node<E: From<NetEvent>, S: crate::net::Endpoints>(
        &mut self,
        w: &mut Worm,
        q: &mut EventQueue<E>,
        oi: u32,
        ep: &mut S,
    ) {
        let now = q.now();
        let k = oi - self.router_ports;
        let qb = self.node_queue(k);
        let down = w.outs[oi as usize].down;
        if down == NIL {
            return;
        }
        let vcs = self.vcs;
        let rr = self.out[oi as usize].rr;
        let mut wait = SimTime::MAX;
        let mut chosen = None;
        for j in 0..vcs {
            let v = (rr + j) % vcs;
            let qs = qb + v;
            let s = w.src[(qs - self.node_q0) as usize];
            let id = if s.cur != NIL {
                s.cur
            } else if let Some(f) = self.inq.front(qs) {
                f
            } else {
                continue;
            };
            let vc = if s.cur != NIL {
                s.vc
            } else {
                self.packets[id as usize].vc
            };
            if s.cur == NIL && w.outs[oi as usize].owner[vc as usize] != NIL {
                continue;
            }
            let db = down | vc as u32;
            let f = w.free[w.slot(db, w.bufs[db as usize].wr)];
            if f > now {
                if f == SimTime::MAX {
                    w.bufs[db as usize].up_wait = true;
                } else {
                    wait = wait.min(f);
                }
                continue;
            }
            chosen = Some((qs, id, vc));
            break;
        }
        let Some((qs, id, vc)) = chosen else {
            if wait != SimTime::MAX {
                w.wake(q, self.port_origin(oi), oi, wait);
            }
            return;
        };
        self.out[oi as usize].rr = (qs - qb + 1) % vcs;
        let si = (qs - self.node_q0) as usize;
        if w.src[si].cur == NIL {
            self.inq.pop_front(qs);
            w.src[si] = Src { cur: id, sent: 0, vc };
            w.outs[oi as usize].owner[vc as usize] = qs;
            self.stats.add(NetStat::Injected, 1);
            self.packets[id as usize].injected = now;
            ep.injected(NodeId(k / self.rails as u32), (k % self.rails as u32) as u8);
        }
        let n = w.flits[id as usize];
        let db = down | vc as u32;
        let (lat, rate) = (self.out[oi as usize].latency, self.out[oi as usize].rate);
        let arrive = lat + w.tr;
        let depth = w.depth;
        let a = w.src[si].sent;
        let base = w.start_off(oi, a);
        let mut i = a;
        loop {
            let st = now + (w.start_off(oi, i) - base);
            if i > a && w.free[w.slot(db, w.bufs[db as usize].wr)] > st {
                break;
            }
            let d = &mut w.bufs[db as usize];
            let s = (db * depth + d.wr) as usize;
            d.wr = step(d.wr, depth);
            d.held += 1;
            w.ready[s] = st + arrive;
            w.free[s] = SimTime::MAX;
            #[cfg(test)]
            if let Some(t) = &mut w.trace {
                t.push((oi, vc, id, i, n));
            }
            i += 1;
            if i == n {
                break;
            }
        }
        let size = self.packets[id as usize].size;
        let end = now + (w.end_off(oi, rate, i - 1, n, size) - base);
        w.counters.injected += (i - a) as u64;
        w.src[si].sent = i;
        let o = &mut self.out[oi as usize];
        o.busy_until = end;
        o.busy_ps += (end - now).0;
        o.ser_size = u32::MAX;
        o.ser_time = end - now;
        self.last_progress = now;
        w.note(end + arrive);
        let by = self.port_origin(oi);
        self.worm_wrote(
            w,
            q,
            by,
            Written {
                db,
                id,
                a,
                t: now + arrive,
            },
        );
        if i == n {
            w.src[si] = Src {
                cur: NIL,
                sent: 0,
                vc: 0,
            };
            w.outs[oi as usize].owner[vc as usize] = NIL;
            self.out[oi as usize].packets += 1;
        }
        let more = (0..vcs).any(|v| w.src[(qb + v - self.node_q0) as usize].cur != NIL || !self.inq.is_empty(qb + v));
        if more {
            w.wake(q, by, oi, end);
        }
    }

    /// Router input VCs and node queues holding packets, with what their first packet waits
    /// for (credits counted in flit slots).
    pub(super) fn worm_blocked(&self, w: &Worm, limit: usize) -> Vec<Blocked> {
        let mut v = Vec::new();
        for (b, bf) in w.bufs.iter().enumerate() {
            if v.len() >= limit {
                break;
            }
            let Some(&id) = bf.pkts.front() else { continue };
            let g = (b as u32) >> self.vc_shift;
            let router = self.router_of[g as usize];
            let base = self.port_base[router.index()];
            let in_port = PortIdx((g - base) as u16);
            let (out_port, credits_free) = if bf.out == NIL {
                (in_port, 0)
            } else {
                let down = w.outs[bf.out as usize].down;
                let free = if down == NIL {
                    u32::MAX
                } else {
                    w.depth - w.bufs[(down | bf.vc as u32) as usize].held
                };
                (PortIdx((bf.out - base) as u16), free)
            };
            v.push(Blocked {
                source_node: None,
                router,
                in_port,
                vc: (b & ((1 << self.vc_shift) - 1)) as u8,
                queued: bf.pkts.len(),
                head_dst: self.packets[id as usize].dst,
                out_port,
                out_vc: bf.vc,
                credits_needed: 1,
                credits_free,
            });
        }
        for qs in self.node_q0..self.inq.count() as u32 {
            if v.len() >= limit {
                break;
            }
            let s = w.src[(qs - self.node_q0) as usize];
            let id = if s.cur != NIL {
                s.cur
            } else if let Some(f) = self.inq.front(qs) {
                f
            } else {
                continue;
            };
            let k = (qs - self.node_q0) >> self.vc_shift;
            let (node, rail) = (NodeId(k / self.rails as u32), (k % self.rails as u32) as u8);
            let (router, port) = self.routing.attach(node, rail);
            let p = &self.packets[id as usize];
            let vc = if s.cur != NIL { s.vc } else { p.vc };
            let down = w.outs[(self.router_ports + k) as usize].down;
            let free = if down == NIL {
                0
            } else {
                w.depth - w.bufs[(down | vc as u32) as usize].held
            };
            v.push(Blocked {
                source_node: Some(node),
                router,
                in_port: port,
                vc,
                queued: self.inq.len(qs) as usize + (s.cur != NIL) as usize,
                head_dst: p.dst,
                out_port: port,
                out_vc: vc,
                credits_needed: 1,
                credits_free: free,
            });
        }
        v
    }

    /// In wormhole mode a deadlock shows as packets in the network with nothing scheduled or
    /// planned to move any more; the evidence reported is the list of occupied input VCs and
    /// what their first packets wait for (not reduced to one cycle).
    pub(super) fn worm_deadlock(&self, w: &Worm) -> Option<Vec<Blocked>> {
        let stuck = w.pending == 0 && self.on_wire == 0 && w.bufs.iter().any(|b| b.held > 0);
        stuck.then(|| self.worm_blocked(w, 64))
    }
}

/// The wormhole keys and what the mode refuses, checked before a network is built.
pub(crate) fn validate(cfg: &FabricConfig, kind: &str) -> Result<(), ConfigError> {
    let l = &cfg.link;
    if l.switching != Switching::Wormhole {
        if l.flit_bytes.is_some() {
            return Err(ConfigError::new(
                "link.flit_bytes",
                "applies only to link.switching = \"wormhole\"",
            ));
        }
        for (i, o) in cfg.link_overrides.iter().enumerate() {
            if o.switching == Some(Switching::Wormhole) {
                return Err(ConfigError::new(
                    format!("link_overrides[{i}].switching"),
                    "wormhole switching applies to the whole fabric: set link.switching = \"wormhole\" instead",
                ));
            }
        }
        return Ok(());
    }
    let f = flit_bytes(cfg);
    let max_pkt = cfg.packet.header + cfg.packet.max_payload;
    if f.0 == 0 {
        return Err(ConfigError::new("link.flit_bytes", "must be at least 1 B"));
    }
    if f > max_pkt {
        return Err(ConfigError::new(
            "link.flit_bytes",
            format!("{f} is larger than a maximum-size packet ({max_pkt} = packet.header + packet.max_payload)"),
        ));
    }
    if max_pkt.0.div_ceil(f.0) > u64::from(u16::MAX) {
        return Err(ConfigError::new(
            "link.flit_bytes",
            format!(
                "a maximum-size packet ({max_pkt}) would be more than {} flits of {f}",
                u16::MAX
            ),
        ));
    }
    let r = &cfg.router;
    if !r.credit_unit.0.is_multiple_of(f.0) {
        return Err(ConfigError::new(
            "router.credit_unit",
            format!(
                "wormhole buffers count flits: router.credit_unit ({}) must be a multiple of link.flit_bytes ({f})",
                r.credit_unit
            ),
        ));
    }
    let depth = u64::from(r.private_credits) * r.credit_unit.0 / f.0;
    if depth == 0 {
        return Err(ConfigError::new(
            "router.private_credits",
            "a wormhole VC buffer must hold at least one flit, got 0 credits",
        ));
    }
    if depth > 1 << 16 {
        return Err(ConfigError::new(
            "router.private_credits",
            format!(
                "{} credits of {} are {depth} flits of {f} per VC; at most 65536 are supported",
                r.private_credits, r.credit_unit
            ),
        ));
    }
    if r.shared_credits > 0 {
        return Err(ConfigError::new(
            "router.shared_credits",
            "wormhole VC buffers are private (counted in flits); a shared pool is not modelled in this mode: set router.shared_credits = 0",
        ));
    }
    if r.output_speedup > 1 {
        return Err(ConfigError::new(
            "router.output_speedup",
            format!(
                "output buffering is not modelled under wormhole switching: set it to 1, got {}",
                r.output_speedup
            ),
        ));
    }
    let alloc = r.switch_allocator();
    if alloc.separable() {
        return Err(ConfigError::new(
            "router.allocator",
            format!(
                "'{}' is not modelled under wormhole switching; use 'round_robin' or 'age'",
                alloc.name()
            ),
        ));
    }
    match &cfg.routing {
        RoutingConfig::MinimalAdaptive { .. } => {
            return Err(ConfigError::new(
                "routing.algorithm",
                "'minimal_adaptive' is not modelled under wormhole switching; use 'dimension_order' with deadlock = \"dateline\"",
            ));
        }
        RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Bubble,
            ..
        } if kind == "torus" => {
            return Err(ConfigError::new(
                "routing.deadlock",
                "bubble flow control is a virtual cut-through rule (a packet enters a ring only with room for another whole packet); wormhole switching on a torus needs deadlock = \"dateline\"",
            ));
        }
        _ => {}
    }
    if l.ber != 0.0 {
        return Err(ConfigError::new(
            "link.ber",
            format!(
                "wormhole switching does not model link-level bit errors and retransmission: set link.ber = 0 (got {}, the default is 1e-12)",
                l.ber
            ),
        ));
    }
    for (key, set) in [
        ("link.replay_buffer", l.replay_buffer.is_some()),
        ("link.replay_packets", l.replay_packets.is_some()),
        ("link.fallback_errors", l.fallback_errors > 0),
    ] {
        if set {
            return Err(ConfigError::new(
                key,
                "link-level retransmission is not modelled under wormhole switching; remove the key",
            ));
        }
    }
    for (i, o) in cfg.link_overrides.iter().enumerate() {
        if o.switching.is_some_and(|s| s != Switching::Wormhole) {
            return Err(ConfigError::new(
                format!("link_overrides[{i}].switching"),
                "wormhole switching applies to the whole fabric; links cannot switch otherwise",
            ));
        }
        if o.ber.is_some_and(|b| b != 0.0) {
            return Err(ConfigError::new(
                format!("link_overrides[{i}].ber"),
                "wormhole switching does not model link-level bit errors: set it to 0 or remove it",
            ));
        }
    }
    let fl = &cfg.faults;
    for (key, set) in [
        ("faults.failed_links", !fl.failed_links.is_empty()),
        ("faults.events", !fl.events.is_empty()),
        ("faults.random", !fl.random.is_empty()),
        ("faults.torus_bypass", fl.torus_bypass),
    ] {
        if set {
            return Err(ConfigError::new(
                key,
                "failed links and dynamic faults are not modelled under wormhole switching; use link.switching = \"cut_through\"",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "wormhole_tests.rs"]
mod tests;
