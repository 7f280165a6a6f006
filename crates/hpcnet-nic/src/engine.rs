//! Send engines: the doorbell → descriptor → data pipeline of each NIC message engine (spec 01
//! SWHNI message engines, spec 02 cHPP send engine), and which message an engine takes next.
//!
//! An engine takes one message at a time from its sources: fast messages first (Sunway "fast"
//! flag), then its send queues (one per function × virtual interface, `nic.virtual_interfaces`)
//! and the write-backs of reads/GETs the receive side hands over, arbitrated by
//! `nic.function_arbitration`. For each message it fetches the descriptor (one DMA read round
//! trip; an FSM's was written by PIO; a write-back's came in its request packet), spends the
//! operation's processing time, reads the data through the host interface and emits packets no
//! faster than its data path allows. With `nic.descriptor_prefetch = N` the descriptor stage of
//! later messages overlaps the data stage of earlier ones (at most N processed descriptors
//! ahead). The transmit stage ([`crate::tx`]) takes the packets from there.
//!
//! [`World::next_message`] is the plug-in point for NIC units that originate messages (a
//! collective unit, a triggered-offload unit): the one place an engine's next message is chosen.

use crate::config::FunctionArbitration;
use crate::op::{Class, Msg, Op};
use crate::pkt::{PktInfo, PktKind};
use crate::world::{World, WorldEvent};
use hpcnet_des::{Bytes, SimTime};
use hpcnet_fabric::topology::NodeId;
use std::collections::VecDeque;

/// One message engine.
#[derive(Clone, Debug, Default)]
pub(crate) struct Engine {
    /// Send queues: per function, `nic.virtual_interfaces` FIFOs (queue pair mod that count),
    /// arbitrated by `nic.function_arbitration`.
    pub(crate) queues: Vec<VecDeque<u32>>,
    /// Bit q set when send queue q is not empty: arbitration skips empty queues a word at a time.
    pub(crate) ready: Vec<u64>,
    /// Write-backs of reads/GETs (driven by request packets).
    pub(crate) internal: VecDeque<u32>,
    /// Messages posted with the "fast" flag: served before everything else.
    pub(crate) fast: VecDeque<u32>,
    pub(crate) rr: usize,
    /// It takes no new message: without prefetch until the current message's last packet is
    /// out; with `nic.descriptor_prefetch` while its descriptor stage is occupied.
    pub(crate) busy: bool,
    /// The engine is ready for its next message but its packets wait for room in the transmit
    /// queue: it takes no new message until they are queued.
    pub(crate) blocked_on_tx: bool,
    /// Its packets waiting in the NIC's transmit backlog.
    pub(crate) pending_tx: u32,
    /// Of those, packets of the response class (`nic.response_vc`).
    pub(crate) pending_tx_resp: u32,
    /// The next pick takes a write-back (a response served while request packets wait).
    pub(crate) serve_writeback: bool,
    pub(crate) in_flight: u32,
    /// When the engine's data path (data extraction and packet emission) has sent the last
    /// packet of the messages it has taken so far; the next message's data stage starts no
    /// earlier, which keeps an engine's packets in message order.
    pub(crate) data_free: SimTime,
    /// With `nic.descriptor_prefetch = N > 0`: when each of the last N messages entered the data
    /// stage, oldest first. A message may start its descriptor stage once the message N places
    /// before it has entered the data stage.
    pub(crate) entered: VecDeque<SimTime>,
}

impl Engine {
    /// An idle engine with `queues` send queues.
    pub(crate) fn new(queues: usize) -> Engine {
        Engine {
            queues: vec![VecDeque::new(); queues],
            ready: vec![0; queues.div_ceil(64)],
            ..Engine::default()
        }
    }

    /// Queue `msg` on send queue `q`, or with the fast messages.
    #[inline]
    fn enqueue(&mut self, q: usize, msg: u32, fast: bool) {
        if fast {
            self.fast.push_back(msg);
        } else {
            self.queues[q].push_back(msg);
            self.ready[q / 64] |= 1 << (q % 64);
        }
    }

    /// The first non-empty send queue in `lo..hi`.
    fn first_ready(&self, lo: usize, hi: usize) -> Option<usize> {
        if lo >= hi {
            return None;
        }
        let mut w = lo / 64;
        let mut bits = self.ready[w] & (!0u64 << (lo % 64));
        loop {
            if bits != 0 {
                let q = w * 64 + bits.trailing_zeros() as usize;
                return (q < hi).then_some(q);
            }
            w += 1;
            if w * 64 >= hi {
                return None;
            }
            bits = self.ready[w];
        }
    }

    /// The engine's own choice of its next message: fast messages first, then its send queues
    /// and the write-backs, by `arb`.
    #[inline]
    fn pick(&mut self, arb: FunctionArbitration) -> Option<u32> {
        let e = self;
        if e.serve_writeback {
            e.serve_writeback = false;
            return e.internal.pop_front();
        }
        if let Some(id) = e.fast.pop_front() {
            return Some(id);
        }
        // Sources: the send queues 0..n (function-major, then virtual interface) and, as source
        // n, the write-backs handed over by the receive side. Round robin treats them alike (host work and GET service
        // alternate); priority serves write-backs first, then functions in order.
        let n = e.queues.len();
        let internal = !e.internal.is_empty();
        let s = match arb {
            // The first non-empty source from `rr` on, cyclically: queues rr..n, the write-backs
            // (n), queues 0..rr.
            FunctionArbitration::RoundRobin => {
                let r = e.rr;
                e.first_ready(r, n)
                    .or_else(|| internal.then_some(n))
                    .or_else(|| e.first_ready(0, r))?
            }
            FunctionArbitration::Priority => {
                if internal {
                    n
                } else {
                    e.first_ready(0, n)?
                }
            }
        };
        e.rr = (s + 1) % (n + 1);
        if s == n {
            e.internal.pop_front()
        } else {
            let id = e.queues[s].pop_front();
            if e.queues[s].is_empty() {
                e.ready[s / 64] &= !(1 << (s % 64));
            }
            id
        }
    }
}

impl World {
    /// The doorbell of message `msg` has reached its NIC: queue it on its engine (a reliable
    /// queue message once its window has room, [`crate::reliability`]).
    pub(crate) fn doorbell(&mut self, msg: u32) {
        if self.rel.on && !self.rel_window_admit(msg) {
            return;
        }
        self.enqueue_on_engine(msg);
    }

    /// Queue message `msg` on its engine.
    pub(crate) fn enqueue_on_engine(&mut self, msg: u32) {
        let m = self.msg(msg);
        let (node, engine) = (self.place.node_of(m.req.src), m.engine);
        let r = &m.req;
        let vis = self.cfg.virtual_interfaces.max(1);
        // Queue pairs alternate over engines first (`qp % engines`), then over an engine's
        // virtual interfaces.
        let vi = (r.qp.0 / self.cfg.engines.max(1)) % vis;
        let (q, fast) = ((r.function as u32 * vis + vi) as usize, r.fast);
        self.nics[node.index()].engines[engine as usize].enqueue(q, msg, fast);
        self.start_next(node, engine);
    }

    /// The engine may take its next message (its last one's stage is done).
    pub(crate) fn engine_free(&mut self, node: NodeId, engine: u32) {
        let e = &mut self.nics[node.index()].engines[engine as usize];
        if e.pending_tx > 0 {
            // Its packets are not all queued yet: wait for the link (see `refill_tx`).
            e.blocked_on_tx = true;
            self.serve_response_while_blocked(node, engine);
            return;
        }
        e.busy = false;
        self.start_next(node, engine);
    }

    /// With `nic.response_vc`, an engine whose request-class packets wait for transmit-queue
    /// room may still serve a write-back: its packets are responses and go to the response
    /// class's queue, so they wait behind nothing (spec 03: responses never wait behind
    /// requests). Without this the engine would couple the classes again: its own request
    /// waits for room that only the peers' answers can make, and the answer it owes waits for
    /// the engine.
    pub(crate) fn serve_response_while_blocked(&mut self, node: NodeId, engine: u32) {
        if self.cfg.response_vc.is_none() {
            return;
        }
        let e = &mut self.nics[node.index()].engines[engine as usize];
        if !e.blocked_on_tx || e.pending_tx_resp > 0 || e.internal.is_empty() || e.in_flight >= self.cfg.max_in_flight {
            return;
        }
        // Busy with the write-back now; when its stage ends `engine_free` finds the request
        // packets still waiting (or not) and blocks again (or goes on).
        e.blocked_on_tx = false;
        e.busy = false;
        e.serve_writeback = true;
        self.start_next(node, engine);
    }

    /// Plug-in point: the next message engine `engine` of `node` serves. Units that originate
    /// messages hook in here.
    #[inline]
    pub(crate) fn next_message(&mut self, node: NodeId, engine: u32) -> Option<u32> {
        let arb = self.cfg.function_arbitration;
        self.nics[node.index()].engines[engine as usize].pick(arb)
    }

    /// Start the next queued message of an idle engine.
    pub(crate) fn start_next(&mut self, node: NodeId, engine: u32) {
        let max = self.cfg.max_in_flight;
        let e = &self.nics[node.index()].engines[engine as usize];
        if e.busy || e.in_flight >= max {
            return;
        }
        let Some(id) = self.next_message(node, engine) else {
            return;
        };
        let by = self.net.node_origin(node);
        let e = &mut self.nics[node.index()].engines[engine as usize];
        e.busy = true;
        e.in_flight += 1;
        let now = self.q.now();
        // What the engine needs of the message (no copy of its segment lists).
        let m = self.msg(id);
        let (len, class, src, dst, rail, held) = (m.len, m.class, m.req.src, m.req.dst, m.req.rail, m.held);
        let internal = m.r2w_of.is_some();
        // PIO-written (FSM, or a `nic.pio_limit` send): descriptor and data come with the CPU's
        // stores; a read or atomic request's descriptor alone.
        let fsm = matches!(m.req.op, Op::Fsm { .. })
            || (!internal && self.cfg.pio_limit.0 > 0 && (class != Class::Push || m.len <= self.cfg.pio_limit.0));
        let pio_bytes = if class == Class::Push { len } else { 0 };
        let immediate = matches!(m.req.op, Op::Nap { immediate: true, .. });
        let op_overhead = self.overhead(&m.req.op);
        // An unreliable queue message completes at the sender once sent; its packets belong to a
        // target-side copy of the message.
        let sent_completes = matches!(m.req.op, Op::Send { reliable: false, .. }) || m.req.local_completion;
        let unreliable_copy = m.unreliable_copy;
        let reliable = m.reliable;
        let gen = self.gens[id as usize];
        if internal {
            // A write-back is driven by a request packet, not a doorbell: its descriptor is in
            // the packet, and it holds no in-flight slot beyond its transmission. Taking it
            // frees the request's receive buffer.
            self.nics[node.index()].engines[engine as usize].in_flight -= 1;
            self.release(held);
            // Room in the hand-over queue: a stalled receive side may go on.
            if self.cfg.get_queue > 0 {
                self.redispatch(node);
            }
        }
        // Descriptor fetch (a DMA read), then the operation's processing; a write-back is a PUT
        // of the target's send engine whose descriptor came in the request packet (cHPP: GET →
        // local send engine): no fetch, and `writeback_overhead` of processing.
        let mut t = now;
        if fsm {
            // PIO: the descriptor (64 B) and the data were written into NIC memory by the CPU.
            t += self.timing.write_rate.serialization(Bytes(64 + pio_bytes));
        } else if !internal {
            t += self.timing.read_latency;
        }
        t += if internal {
            self.cfg.writeback_overhead.unwrap_or(self.cfg.message_overhead)
        } else {
            op_overhead
        };
        // Atomics and reads/GETs send one request packet; the engine is free once it has left.
        let request = match class {
            Class::Atomic => Some(PktKind::AtomicReq),
            Class::Pull if !internal => Some(PktKind::ReadReq),
            _ => None,
        };
        // The message's data stage starts when its descriptor is processed and the engine's
        // data path has sent the previous message's packets (always `t` without prefetch: the
        // engine took this message only after that).
        let entry = t.max(self.nics[node.index()].engines[engine as usize].data_free);
        if let Some(kind) = request {
            let info = PktInfo {
                msg: id,
                kind,
                from: src,
                to: dst,
                rail,
                held: None,
                gen,
                attempt: 0,
                arm: reliable,
                tx_engine: None,
            };
            let p = self.alloc_pkt(info);
            // The request leaves through the data path, after the previous message's packets.
            self.q.schedule_by(by, entry, WorldEvent::Inject { pkt: p });
            let free = self.leave_data_stage(node, engine, t, entry, entry);
            self.q.schedule_by(by, free, WorldEvent::EngineFree { node, engine });
            return;
        }
        let id = if sent_completes && !unreliable_copy && class == Class::Push && !internal {
            let copy = self.alloc_msg(Msg {
                unreliable_copy: true,
                ..self.msg(id).clone()
            });
            // The copy carries the message's place in its window.
            self.msg_mut(id).rel.win = None;
            self.unreliable_sent.push(id);
            copy
        } else {
            id
        };
        // Data movement: gather the source bytes.
        let (from, to) = if internal { (dst, src) } else { (src, dst) };
        let mut data = self.data_pool.pop().unwrap_or_default();
        data.clear();
        data.reserve(len as usize);
        let m = self.msgs[id as usize].as_mut().expect("live message");
        let mem = &self.mem[from.index()];
        for &(a, l) in &m.src_segs {
            // A segment outside a region adds nothing (its bytes are zeros below).
            let _ = mem.read_append(a, l, &mut data);
        }
        data.resize(len as usize, 0);
        m.data = data;
        let mtu = self.mtu as u64;
        let npk = len.div_ceil(mtu).max(1);
        let gen = self.gens[id as usize];
        // A write-back for a reliable read sends only the packets the requester lacks (the
        // repeated request carries its packet map).
        let pull = self.msg(id).r2w_of.filter(|&p| {
            let g = self.msg(id).rel.pull_gen;
            self.live(p, g) && self.msg(p).reliable
        });
        let lacks = |w: &World, k: u64| {
            pull.is_none_or(|p| {
                w.msg(p)
                    .rel
                    .got
                    .get((k / 64) as usize)
                    .is_none_or(|b| b & (1 << (k % 64)) == 0)
            })
        };
        let last_k = (0..npk).rev().find(|&k| lacks(self, k));
        let mut emitted = 0u32;
        // When the data is in the NIC: immediate data comes with the descriptor (its first
        // `immediate_inline` bytes with the descriptor's first read, the rest extracted at the
        // immediate rate); otherwise DMA reads through the engine's PCIe link.
        let link = (engine % self.timing.links) as usize;
        // DMA reads are issued when the descriptor is processed and queue behind the link's
        // earlier reads (`read_busy`). Immediate data is part of the descriptor: its extraction
        // belongs to the descriptor stage (spec 02: descriptor read → descriptor extract), which
        // it holds until the last byte is out (`desc_done`); the packets stream out as it goes.
        let (first, rate) = if fsm {
            (t, None)
        } else if immediate {
            (t, self.cfg.immediate_rate.or(self.cfg.engine_rate))
        } else {
            let start = self.nics[node.index()]
                .host
                .read_start(link, t, self.timing.read_latency);
            (start, Some(self.timing.read_rate))
        };
        let inline = if immediate { self.cfg.immediate_inline.0 } else { 0 };
        let desc_done = if immediate {
            first + rate.map_or(SimTime::ZERO, |r| r.serialization(Bytes(len.saturating_sub(inline))))
        } else {
            t
        };
        let eng_rate = self.cfg.engine_rate;
        // Data read from host memory enters the engine as read completions of at most
        // `min(read_request, max_payload)` bytes, each costing a header and a processing cycle
        // (spec 02's account of the 80 % peak is per returned completion); a packet assembled
        // from several completions pays for each, and every packet for at least one.
        let compl = if immediate || fsm { mtu } else { self.timing.completion };
        let mut emit_free = entry;
        let mut last = first;
        for k in 0..npk {
            if pull.is_some() && !lacks(self, k) {
                continue;
            }
            emitted += 1;
            let off = k * mtu;
            let plen = (len - off).min(mtu);
            let data_ready = first
                + rate.map_or(SimTime::ZERO, |r| {
                    r.serialization(Bytes((off + plen).saturating_sub(inline)))
                });
            // The engine's data path handles one packet at a time.
            let units = ((off + plen).div_ceil(compl) - off.div_ceil(compl)).max(1);
            let emit = eng_rate.map_or(SimTime::ZERO, |r| {
                r.serialization(Bytes(plen + units * self.header as u64))
            }) + self.cfg.packet_overhead * units;
            let ready = data_ready.max(emit_free + emit);
            emit_free = ready;
            last = ready;
            let p = self.alloc_pkt(PktInfo {
                msg: id,
                kind: PktKind::Data { off, len: plen },
                from,
                to,
                rail,
                held: None,
                gen,
                attempt: 0,
                arm: reliable && !internal && Some(k) == last_k,
                tx_engine: None,
            });
            self.q.schedule_by(by, ready, WorldEvent::Inject { pkt: p });
        }
        if !immediate && !fsm {
            self.nics[node.index()].host.read_until(link, last);
        }
        self.msg_mut(id).pending = emitted;
        if let Some(p) = pull {
            // The read's target is busy with it until its last packet is out.
            self.msg_mut(p).rel.writeback = Some(last);
        }
        if internal && emitted == 0 {
            // The requester has every byte already: nothing to send.
            self.release_msg(id);
        }
        let free = self.leave_data_stage(node, engine, desc_done, entry, last);
        self.q.schedule_by(by, free, WorldEvent::EngineFree { node, engine });
        for orig in std::mem::take(&mut self.unreliable_sent) {
            self.q.schedule_by(by, last, WorldEvent::Sent { msg: orig });
        }
    }

    /// Record a message's data stage (entered at `entry`, its last packet out at `last`; its
    /// descriptor stage done at `t`) and return when the engine may take its next message:
    /// without prefetch when the last packet is out; with `nic.descriptor_prefetch = N` when
    /// the descriptor stage is done and the message N − 1 places earlier has entered the data
    /// stage (for N = 1: this message), so that at most N processed descriptors wait ahead of
    /// the data stage.
    fn leave_data_stage(&mut self, node: NodeId, engine: u32, t: SimTime, entry: SimTime, last: SimTime) -> SimTime {
        let depth = self.cfg.descriptor_prefetch as usize;
        let e = &mut self.nics[node.index()].engines[engine as usize];
        e.data_free = e.data_free.max(last);
        if depth == 0 {
            return last;
        }
        e.entered.push_back(entry);
        while e.entered.len() > depth {
            e.entered.pop_front();
        }
        let oldest = e.entered.front().copied().unwrap_or(entry);
        t.max(oldest)
    }
}
