//! The reliability unit: end-to-end recovery of the packets the network loses (spec 01,
//! "Reliability": transport-level message retransmission, so that applications keep running
//! through the loss of a port, a router chip or a whole plane), and the seeded random loss of
//! `nic.loss_rate`.
//!
//! Two protocols, as the spec describes them (`[nic.reliability]`, off unless the scenario has
//! the section):
//! - **Asynchronous queue messages** (reliable sends): many lightweight sliding windows, one
//!   per (sender, receive queue). A sender has at most `window` messages unacknowledged in a
//!   window; each gets the window's next sequence number. The receiver admits a window's
//!   messages in sequence: a packet of the next expected message admits it (it takes its
//!   receive buffer then), packets of admitted messages land, packets of later messages are
//!   discarded (no buffering out of order), packets already received are discarded
//!   (de-duplication) and a repeated message that has completed is acknowledged again. There is
//!   no handshake and no credit feedback: the sender re-sends a whole message when its timer
//!   expires and learns only from acknowledgements.
//! - **RDMA** (writes, PUTs, NAPs, FSMs, reads, GETs, atomics): acknowledgement plus status
//!   probing. When a message's timer expires its NIC sends a probe; the target answers from its
//!   state: completed (the answer is the completion notification sent again, with an atomic's
//!   old value, which is never applied twice), busy (a read's write-back is queued or being
//!   sent: wait), or missing (with the map of the packets that arrived: the initiator re-sends
//!   the missing data, or the read or atomic request).
//!
//! Timers: a message's timer starts when the last packet of a transmission (or its request, or
//! the probe) is expected on the wire — when it enters the node's injection queue, plus the
//! time to send the packets queued ahead of it at the port's rate — and expires `timeout`
//! later. A timeout without progress counts towards `retries`; after that many the message
//! fails with a `RetryExceeded` completion. A "busy" answer is progress. Timers wait in a heap
//! here, not on the event queue: [`World::step`] takes the earliest live timer before the next
//! event when it is due first (a timer of a completed message is dropped when it reaches the top),
//! so a run whose messages have all completed ends at its last event, not at a stale timeout.
//!
//! What is simplified: a re-sent packet's data is read again by DMA on the engine's PCIe link
//! (one read round trip, then the host read rate) without occupying the engine; the packet map
//! travels in the probe's answer (one bit per packet, at most one packet's payload); the
//! initiator's and target's records of a message are one structure, each side reading its own
//! fields. Packets of a message that completed in the meantime (a late original, a duplicate)
//! are recognised by the message's generation and discarded. With reliability on, packets of
//! reliable messages avoid a rail the routers know to be dead at either end, and each
//! retransmission starts its rail choice one rail further. Hardware collectives and the offload
//! units have no transport reliability here (the spec leaves collectives to software
//! time-outs). Unreliable queue messages are not recovered: a lost one is counted
//! (`nic.messages_lost`) and its target record dropped.
//!
//! Cost: nothing without the section. With it, one heap entry per transmission (O(log n)), one
//! packet map per reliable message at its receiver (one bit per packet, reused), one hash lookup
//! per queue message.

use crate::config::{NicConfig, PortSelect, ReliabilityConfig};
use crate::cq::CqeStatus;
use crate::op::{Class, Op};
use crate::pkt::{PktInfo, PktKind, ProbeState};
use crate::world::{NicStat, World, WorldEvent};
use hpcnet_des::{Bytes, SimTime};
use hpcnet_fabric::config::NodeInjection;
use hpcnet_fabric::topology::NodeId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// One sliding window of reliable queue messages: a sender towards one receive queue.
#[derive(Default)]
struct Window {
    /// Sender: next sequence number, messages unacknowledged, messages waiting for a place.
    next: u32,
    open: u32,
    waiting: VecDeque<u32>,
    /// Receiver: sequence number of the next message to admit.
    expected: u32,
}

/// The reliability unit of all NICs of a world.
#[derive(Default)]
pub(crate) struct RelUnit {
    /// Reliability is on (`[nic.reliability]` present and enabled).
    pub(crate) on: bool,
    cfg: ReliabilityConfig,
    /// Armed timers: (expiry, message, tag), earliest first.
    timers: BinaryHeap<Reverse<(SimTime, u32, u32)>>,
    next_tag: u32,
    /// Window of each (sender rank, receive queue).
    windows: HashMap<(u32, u32), u32>,
    wins: Vec<Window>,
    /// Random loss: a packet is discarded when its draw falls below this (p · 2^64).
    loss_threshold: u64,
    loss_key: u64,
    /// Draws made per receiving node (each node's own stream).
    draws: Vec<u64>,
    /// Packet maps of finished messages, reused.
    map_pool: Vec<Vec<u64>>,
}

/// SplitMix64 finaliser.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl RelUnit {
    pub(crate) fn new(cfg: &NicConfig, seed: u64, nodes: usize) -> RelUnit {
        let rel = cfg.reliability.clone().filter(|r| r.enabled);
        let p = cfg.loss_rate;
        RelUnit {
            on: rel.is_some(),
            cfg: rel.unwrap_or_default(),
            next_tag: 1,
            loss_threshold: if p > 0.0 {
                ((p * 18_446_744_073_709_551_616.0) as u64).max(1)
            } else {
                0
            },
            loss_key: mix64(seed ^ 0x6c6f_7373_5f72_6174),
            draws: if p > 0.0 { vec![0; nodes] } else { Vec::new() },
            ..RelUnit::default()
        }
    }

    /// Whether packets may be lost at random.
    #[inline]
    pub(crate) fn lossy(&self) -> bool {
        self.loss_threshold != 0
    }

    /// A packet map of `bits` bits, all clear.
    pub(crate) fn new_map(&mut self, bits: u64) -> Vec<u64> {
        let mut v = self.map_pool.pop().unwrap_or_default();
        v.clear();
        v.resize(bits.div_ceil(64) as usize, 0);
        v
    }

    pub(crate) fn recycle_map(&mut self, v: Vec<u64>) {
        if v.capacity() > 0 {
            self.map_pool.push(v);
        }
    }
}

impl World {
    /// Whether message slot `id` still holds the message of generation `gen`.
    #[inline]
    pub(crate) fn live(&self, id: u32, gen: u32) -> bool {
        self.gens.get(id as usize) == Some(&gen) && self.msgs[id as usize].is_some()
    }

    /// Whether packet `pid` belongs to a message that is still live.
    #[inline]
    pub(crate) fn pkt_live(&self, pid: u32) -> bool {
        let info = self.pkts[pid as usize].as_ref().expect("live packet");
        self.live(info.msg, info.gen)
    }

    /// Packets this many per message: a message of `len` bytes.
    #[inline]
    pub(crate) fn packets_of(&self, len: u64) -> u64 {
        len.div_ceil(self.mtu as u64).max(1)
    }

    /// The seeded draw of `nic.loss_rate` for a packet reaching `node`: whether it is lost.
    pub(crate) fn random_loss(&mut self, node: NodeId) -> bool {
        let u = &mut self.rel.draws[node.index()];
        *u += 1;
        let z = mix64(self.rel.loss_key ^ (u64::from(node.0) << 40) ^ *u);
        z < self.rel.loss_threshold
    }

    /// The rail a packet of a reliable message takes under fixed port selection: the one asked
    /// for, unless the routers know its cable at either end to be dead; then the next usable.
    pub(crate) fn usable_rail(&self, from: NodeId, to: NodeId, rail: u8) -> u8 {
        let rails = self.net.rails();
        if rails == 1 || self.net.routing.dead_ports() == 0 {
            return rail;
        }
        (0..rails)
            .map(|k| (rail % rails + k) % rails)
            .find(|&r| self.net.rail_usable(from, r) && self.net.rail_usable(to, r))
            .unwrap_or(rail)
    }

    /// Start the timer of message `id` for a packet entering `node`'s injection queue on
    /// `rail` now: it expires `timeout` after the packets queued ahead have been sent. With one
    /// injection queue per VC, served in turn, a packet waits for as many packets of every VC as
    /// are in the longest queue (an upper bound: a queue shorter than that empties first).
    pub(crate) fn rel_arm_at_injection(&mut self, id: u32, node: NodeId, rail: u8) {
        let queued = match self.net.config().router.node_injection {
            NodeInjection::PerVc => {
                let vcs = self.net.config().router.vcs;
                let longest = (0..vcs)
                    .map(|v| self.net.source_queue_len_vc(node, rail, v))
                    .max()
                    .unwrap_or(0);
                (longest * vcs as usize) as u64
            }
            NodeInjection::Fifo => self.net.source_queue_len(node, rail) as u64,
        };
        let wire = self
            .net
            .injection_rate(node, rail)
            .serialization(Bytes(u64::from(self.mtu + self.header)));
        let on_wire = self.q.now() + SimTime(wire.0.saturating_mul(queued));
        self.rel_arm(id, on_wire);
    }

    /// Start (or restart) the timer of message `id`: it expires `timeout` after `from`.
    pub(crate) fn rel_arm(&mut self, id: u32, from: SimTime) {
        let tag = self.rel.next_tag;
        self.rel.next_tag = self.rel.next_tag.wrapping_add(1).max(1);
        self.msg_mut(id).rel.tag = tag;
        let at = from + self.rel.cfg.timeout;
        self.rel.timers.push(Reverse((at, id, tag)));
    }

    /// Handle the earliest live timer if it expires before the next event; whether one did.
    /// Queue events at the same time go first.
    pub(crate) fn rel_due(&mut self) -> bool {
        while let Some(&Reverse((t, id, tag))) = self.rel.timers.peek() {
            let live = self.msgs[id as usize].as_ref().is_some_and(|m| m.rel.tag == tag);
            if !live {
                self.rel.timers.pop();
                continue;
            }
            if self.q.peek_time().is_some_and(|next| next <= t) {
                return false;
            }
            self.rel.timers.pop();
            self.q.advance_to(t);
            self.rel_timeout(id);
            return true;
        }
        false
    }

    /// Whether any timer is armed (live or not).
    #[inline]
    pub(crate) fn rel_timers(&self) -> bool {
        !self.rel.timers.is_empty()
    }

    /// The timer of message `id` expired: give up, send the queue message again, or probe.
    fn rel_timeout(&mut self, id: u32) {
        self.stats.add(NicStat::Timeouts, 1);
        let retries = self.rel.cfg.retries;
        let m = self.msg_mut(id);
        m.rel.attempt = m.rel.attempt.saturating_add(1);
        if u32::from(m.rel.attempt) > retries {
            self.rel_fail(id);
        } else if matches!(m.req.op, Op::Send { .. }) {
            self.rel_resend(id, false);
        } else {
            self.rel_probe(id);
        }
    }

    /// Message `id` ran out of retries: an error completion (or, for a message its initiator
    /// was told of when sent, a count).
    fn rel_fail(&mut self, id: u32) {
        self.stats.add(NicStat::MessagesFailed, 1);
        if self.msg(id).unreliable_copy {
            self.release_copy(id);
        } else {
            self.complete_at_source(id, CqeStatus::RetryExceeded, 0);
        }
    }

    /// The rail a retransmission of `id` starts its choice from: one further per attempt.
    fn retry_rail(&self, id: u32) -> u8 {
        let m = self.msg(id);
        let rails = self.net.rails().max(1);
        ((u32::from(m.req.rail) + u32::from(m.rel.attempt)) % u32::from(rails)) as u8
    }

    /// A control packet of message `id` from its initiator to its target, sent now.
    fn rel_control(&mut self, id: u32, kind: PktKind) {
        let m = self.msg(id);
        let (from, to, attempt) = (m.req.src, m.req.dst, m.rel.attempt);
        let rail = self.retry_rail(id);
        let gen = self.gens[id as usize];
        let p = self.alloc_pkt(PktInfo {
            msg: id,
            kind,
            from,
            to,
            rail,
            held: None,
            gen,
            attempt,
            arm: true,
            tx_engine: None,
        });
        self.send_packet(p);
    }

    /// Probe the target of message `id`.
    fn rel_probe(&mut self, id: u32) {
        self.stats.add(NicStat::Probes, 1);
        self.rel_control(id, PktKind::Probe);
    }

    /// Send message `id` again: its data packets the target lacks (`only_missing`, from the
    /// packet map of the probe's answer) or all of them; a read or an atomic, its request.
    fn rel_resend(&mut self, id: u32, only_missing: bool) {
        let m = self.msg(id);
        match m.class {
            Class::Pull => return self.rel_control(id, PktKind::ReadReq),
            Class::Atomic => return self.rel_control(id, PktKind::AtomicReq),
            Class::Push => {}
        }
        let (len, from, to, engine, attempt) = (m.len, m.req.src, m.req.dst, m.engine, m.rel.attempt);
        let mtu = self.mtu as u64;
        let npk = self.packets_of(len);
        let missing: Vec<u64> = (0..npk)
            .filter(|&k| {
                !only_missing
                    || m.rel
                        .got
                        .get((k / 64) as usize)
                        .is_none_or(|w| w & (1 << (k % 64)) == 0)
            })
            .collect();
        if missing.is_empty() {
            // Everything arrived; the last bytes are still being written at the target.
            let now = self.q.now();
            return self.rel_arm(id, now);
        }
        let rail = self.retry_rail(id);
        let gen = self.gens[id as usize];
        // The data is read again from host memory on the engine's PCIe link.
        let node = self.place.node_of(from);
        let link = (engine % self.timing.links) as usize;
        let now = self.q.now();
        let start = self.nics[node.index()]
            .host
            .read_start(link, now, self.timing.read_latency);
        let rate = self.timing.read_rate;
        let by = self.net.node_origin(node);
        let (mut read, mut ready) = (0u64, start);
        let last = *missing.last().expect("not empty");
        for &k in &missing {
            let off = k * mtu;
            let plen = (len - off).min(mtu);
            read += plen;
            ready = start + rate.serialization(Bytes(read));
            let p = self.alloc_pkt(PktInfo {
                msg: id,
                kind: PktKind::Data { off, len: plen },
                from,
                to,
                rail,
                held: None,
                gen,
                attempt,
                arm: k == last,
                tx_engine: None,
            });
            self.q.schedule_by(by, ready, WorldEvent::Inject { pkt: p });
        }
        self.nics[node.index()].host.read_until(link, ready);
        // Until the last packet is queued (and its timer restarts), time runs from when its
        // data will have been read.
        self.rel_arm(id, ready);
    }

    /// The target of reliable message `id` answers a probe.
    pub(crate) fn rel_probe_arrived(&mut self, info: &PktInfo) {
        let now = self.q.now();
        let m = self.msg(info.msg);
        let map = || (m.len.div_ceil(self.mtu as u64).max(1).div_ceil(8)).min(u64::from(self.mtu)) as u32;
        let state = match m.class {
            Class::Push if m.rel.done => ProbeState::Done {
                status: m.status.clone(),
                old: 0,
            },
            Class::Push => ProbeState::Missing { map_bytes: map() },
            Class::Pull => match m.rel.writeback {
                Some(t) if now < t => ProbeState::Busy,
                _ if m.status != CqeStatus::Ok => ProbeState::Done {
                    status: m.status.clone(),
                    old: 0,
                },
                _ => ProbeState::Missing { map_bytes: map() },
            },
            Class::Atomic if m.rel.done => ProbeState::Done {
                status: m.status.clone(),
                old: m.rel.old,
            },
            Class::Atomic => ProbeState::Missing { map_bytes: 0 },
        };
        let p = self.alloc_pkt(PktInfo {
            msg: info.msg,
            kind: PktKind::ProbeResp { state },
            from: info.to,
            to: info.from,
            rail: info.rail,
            held: None,
            gen: info.gen,
            attempt: info.attempt,
            arm: false,
            tx_engine: None,
        });
        self.send_packet(p);
    }

    /// The initiator of reliable message `id` has the target's answer to its probe.
    pub(crate) fn rel_answer(&mut self, id: u32, state: ProbeState) {
        match state {
            ProbeState::Done { status, old } => {
                if self.msg(id).class == Class::Atomic {
                    self.atomic_answered(id, status, old);
                } else {
                    self.acked(id, status);
                }
            }
            ProbeState::Busy => {
                // The target is working on it: progress, not a failed attempt.
                self.msg_mut(id).rel.attempt = 0;
                let now = self.q.now();
                self.rel_arm(id, now);
            }
            ProbeState::Missing { .. } => self.rel_resend(id, true),
        }
    }

    /// A data packet reached the receiver of its message's bytes: whether it is new (it may
    /// land). Duplicates, packets of a queue message ahead of its window and packets of a read
    /// that has completed are discarded here (and a repeated queue message that has completed
    /// is acknowledged again).
    pub(crate) fn rel_accept_data(&mut self, pid: u32, info: &PktInfo, off: u64) -> bool {
        let m = self.msg(info.msg);
        // The record holding the packet map: the read a write-back serves, or the message.
        let rec = match m.r2w_of {
            Some(pull) if !self.live(pull, m.rel.pull_gen) => {
                self.discard(pid, info, NicStat::Duplicates);
                return false;
            }
            Some(pull) => pull,
            None => info.msg,
        };
        let r = self.msg(rec);
        if !r.reliable {
            return true;
        }
        if r.rel.done {
            if matches!(r.req.op, Op::Send { .. }) && info.attempt > r.rel.acked_attempt {
                // The acknowledgement was lost: send it again, once per transmission.
                let (to, from, rail, status) = (r.req.dst, r.req.src, info.rail, r.status.clone());
                self.msg_mut(rec).rel.acked_attempt = info.attempt;
                self.send_ack(rec, to, from, rail, status);
            }
            self.discard(pid, info, NicStat::Duplicates);
            return false;
        }
        if let Some((w, seq)) = r.rel.win {
            if !r.rel.admitted {
                let win = &mut self.rel.wins[w as usize];
                if seq != win.expected {
                    self.discard(pid, info, NicStat::OutOfWindow);
                    return false;
                }
                win.expected = win.expected.wrapping_add(1);
                self.msg_mut(rec).rel.admitted = true;
            }
        }
        let k = off / self.mtu as u64;
        if self.msg(rec).rel.got.is_empty() {
            let npk = self.packets_of(self.msg(rec).len);
            let map = self.rel.new_map(npk);
            self.msg_mut(rec).rel.got = map;
        }
        let got = &mut self.msg_mut(rec).rel.got;
        let (w, bit) = ((k / 64) as usize, 1u64 << (k % 64));
        if got[w] & bit != 0 {
            self.discard(pid, info, NicStat::Duplicates);
            return false;
        }
        got[w] |= bit;
        true
    }

    /// Drop packet `pid` at its receiver (counted under `why`): its buffer space is given back.
    pub(crate) fn discard(&mut self, pid: u32, info: &PktInfo, why: NicStat) {
        self.stats.add(why, 1);
        self.release(info.held);
        self.free_pkt(pid);
        if matches!(info.kind, PktKind::Data { .. }) {
            self.consumed(info.msg, info.gen, false);
        }
    }

    /// A data packet of message `id` will not land (discarded, or `lost` in the network): a
    /// target-side record whose packets are all accounted for is released.
    pub(crate) fn consumed(&mut self, id: u32, gen: u32, lost: bool) {
        if !self.live(id, gen) {
            return;
        }
        let m = self.msg_mut(id);
        m.pending = m.pending.saturating_sub(1);
        m.rel.lost |= lost;
        self.settle_record(id);
    }

    /// Release target-side record `id` (a write-back; the copy of an unreliable message that
    /// lost a packet) once none of its packets is left.
    pub(crate) fn settle_record(&mut self, id: u32) {
        let m = self.msg(id);
        if m.pending > 0 {
            return;
        }
        if m.r2w_of.is_some() {
            self.release_msg(id);
        } else if m.unreliable_copy && !m.reliable && m.rel.lost {
            self.stats.add(NicStat::MessagesLost, 1);
            self.release_msg(id);
        }
    }

    /// The acknowledgement (or a "done" answer) of message `id` reached its initiator.
    pub(crate) fn acked(&mut self, id: u32, status: CqeStatus) {
        if self.msg(id).unreliable_copy {
            // Its initiator was told when it was sent: nothing waits.
            self.release_copy(id);
        } else {
            self.complete_at_source(id, status, 0);
        }
    }

    /// Release the copy of a message completed when sent, and its window place.
    fn release_copy(&mut self, id: u32) {
        let win = self.msg(id).rel.win;
        self.release_msg(id);
        if let Some((w, _)) = win {
            self.rel_window_free(w);
        }
    }

    /// Whether message `id` may go to its engine now: a reliable queue message needs a place
    /// in its window (it waits for one otherwise, in posting order).
    pub(crate) fn rel_window_admit(&mut self, id: u32) -> bool {
        let m = self.msg(id);
        let Op::Send { rq, reliable: true, .. } = m.req.op else {
            return true;
        };
        if !m.reliable {
            return true;
        }
        let key = (m.req.src.0, rq.0);
        let n = self.rel.wins.len() as u32;
        let w = *self.rel.windows.entry(key).or_insert(n);
        if w == n {
            self.rel.wins.push(Window::default());
        }
        let cap = self.rel.cfg.window;
        let win = &mut self.rel.wins[w as usize];
        if win.open >= cap {
            win.waiting.push_back(id);
            return false;
        }
        win.open += 1;
        let seq = win.next;
        win.next = win.next.wrapping_add(1);
        self.msg_mut(id).rel.win = Some((w, seq));
        true
    }

    /// A message of window `w` was acknowledged (or failed): the next waiting one goes.
    pub(crate) fn rel_window_free(&mut self, w: u32) {
        let win = &mut self.rel.wins[w as usize];
        win.open -= 1;
        if let Some(next) = win.waiting.pop_front() {
            win.open += 1;
            let seq = win.next;
            win.next = win.next.wrapping_add(1);
            self.msg_mut(next).rel.win = Some((w, seq));
            self.enqueue_on_engine(next);
        }
    }

    /// The rail of a packet under fixed port selection (see [`World::usable_rail`]).
    #[inline]
    pub(crate) fn fixed_rail(&self, from: NodeId, to: NodeId, rail: u8) -> u8 {
        if self.rel.on && self.cfg.port_select == PortSelect::Fixed {
            self.usable_rail(from, to, rail)
        } else {
            rail
        }
    }
}
