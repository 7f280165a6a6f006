//! The world: the packet network plus one NIC and one host memory per node, on one event queue.
//!
//! Message path (spec 01 SWHNI, spec 02 cHPP send/receive engines):
//! 1. **Doorbell**: the CPU posts a descriptor and rings the doorbell; it reaches the NIC
//!    `host.doorbell_latency` later and queues on a message engine (chosen by the request, or by
//!    its queue pair).
//! 2. **Engine** (one message at a time, in order): fetches the descriptor by DMA (one read round
//!    trip), spends `message_overhead`, then reads the data by DMA: the first bytes arrive one read
//!    round trip later and the rest stream at the host read rate (PCIe rate, TLP overhead, read
//!    tags). Packets of `packet.max_payload` bytes leave as soon as their data is in the NIC. An
//!    engine keeps at most `max_in_flight` messages awaiting completion.
//! 3. **Ports**: each packet goes to the rail named in the request (fixed) or to the rail with
//!    the shorter queue (adaptive), so packets of one message may arrive out of order.
//! 4. **Receive**: each packet is processed (`rx_overhead`) and written to host memory by DMA at
//!    the host write rate, in arrival order; the target checks range and key on the first
//!    packet (a refused message writes nothing). When every byte has landed the message completes
//!    at the target: reply word incremented, notification queued, acknowledgement sent back.
//! 5. **Completion** at the initiator when the acknowledgement arrives (writes) or when the last
//!    byte of the returned data has landed (reads).
//!
//! An RDMA read sends a request packet; the target's engine executes it as a write back to the
//! requester ("R2W", spec 01). Messages between the two host interfaces of one NIC never enter
//! the network: they cross the NIC after `loopback_latency`.
//!
//! Simplifications: the source data is copied when the engine starts the message (not TLP by
//! TLP); descriptor fetch is not overlapped with the previous message's data; the receive DMA is
//! one write channel per NIC; acknowledgements are header-only packets on the request's rail.

use crate::config::{NicConfig, PortSelect};
use crate::memory::{Memory, MemoryError};
use hpcnet_des::{Bytes, EventQueue, SimTime};
use hpcnet_fabric::net::{NetEvent, Network};
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::Packet;
use serde::Serialize;
use std::collections::VecDeque;
use std::task::Waker;

/// A process: one per node in this model.
pub type Rank = NodeId;

/// Identifies a completion queue.
pub type CqId = u32;

/// A one-sided operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// RDMA write of `len` bytes from local `local` to `remote` at the target, key `rkey`.
    Write {
        local: u64,
        len: u64,
        remote: u64,
        rkey: u32,
        /// Queue a notification on the target's `notify_cq` when the data has landed.
        notify_cq: Option<CqId>,
        /// Increment the u64 at this target address when the data has landed (reply word).
        reply_word: Option<u64>,
    },
    /// RDMA read of `len` bytes from `remote` at the target into local `local`.
    Read {
        local: u64,
        len: u64,
        remote: u64,
        rkey: u32,
    },
}

/// A work request handed to the NIC.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub src: Rank,
    pub dst: Rank,
    pub op: Op,
    /// Local completion queue.
    pub cq: CqId,
    pub wr_id: u64,
    /// Post a completion on success (errors are always reported).
    pub signaled: bool,
    /// Engine (defaults to queue-pair order: `qp % engines`).
    pub qp: u32,
    /// Rail for fixed port selection.
    pub rail: u8,
}

/// Completion status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CqeStatus {
    Ok,
    /// The target refused the access (range or key); nothing was written.
    RemoteAccess(MemoryError),
}

/// What completed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CqeKind {
    Write,
    Read,
    /// A write with notification landed here (target side).
    Notify,
}

/// A completion queue entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cqe {
    pub wr_id: u64,
    pub kind: CqeKind,
    pub status: CqeStatus,
    pub bytes: u64,
    /// The peer (target for writes/reads, source for notifications).
    pub peer: Rank,
    pub at: SimTime,
}

/// Events of the world.
#[derive(Copy, Clone, Debug)]
pub enum WorldEvent {
    Net(NetEvent),
    Doorbell {
        msg: u32,
    },
    EngineFree {
        node: NodeId,
        engine: u32,
    },
    Inject {
        pkt: u32,
    },
    /// A packet reached its destination NIC without the network (loopback).
    Local {
        pkt: u32,
    },
    Landed {
        pkt: u32,
    },
    Timer {
        slot: u32,
    },
}

impl From<NetEvent> for WorldEvent {
    fn from(e: NetEvent) -> Self {
        WorldEvent::Net(e)
    }
}

#[derive(Clone, Debug)]
enum PktKind {
    Data { off: u64, len: u64 },
    ReadReq,
    Ack { status: CqeStatus },
}

#[derive(Clone, Debug)]
struct PktInfo {
    msg: u32,
    kind: PktKind,
    from: NodeId,
    to: NodeId,
    rail: u8,
}

#[derive(Clone, Debug)]
struct Msg {
    req: Request,
    /// Bytes being moved (copied from the source when the engine starts).
    data: Vec<u8>,
    /// Data node and destination address/key of the data movement: for writes (src → dst),
    /// for the R2W of a read (dst → src).
    landed: u64,
    status: CqeStatus,
    checked: bool,
    /// This message is the write-back of read message `of`.
    r2w_of: Option<u32>,
    engine: u32,
}

#[derive(Clone, Debug, Default)]
struct Engine {
    queue: VecDeque<u32>,
    busy: bool,
    in_flight: u32,
}

#[derive(Clone, Debug)]
struct Nic {
    engines: Vec<Engine>,
    /// DMA read and write channels, one of each per PCIe link: busy until.
    read_busy: Vec<SimTime>,
    write_busy: Vec<SimTime>,
}

#[derive(Default)]
struct Cq {
    entries: VecDeque<Cqe>,
    waiter: Option<Waker>,
}

/// NIC-level counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NicCounters {
    pub messages: u64,
    pub data_packets: u64,
    pub control_packets: u64,
    pub payload_bytes: u64,
    pub wire_bytes: u64,
    pub refused: u64,
    /// Packets that could not be routed at injection.
    pub unroutable: u64,
    /// Data packets that arrived before a packet sent earlier in the same message.
    pub out_of_order: u64,
}

/// Network + NICs + memories on one event queue.
pub struct World {
    pub q: EventQueue<WorldEvent>,
    pub net: Network,
    pub cfg: NicConfig,
    header: u32,
    mtu: u32,
    nics: Vec<Nic>,
    pub mem: Vec<Memory>,
    msgs: Vec<Option<Msg>>,
    free_msgs: Vec<u32>,
    pkts: Vec<Option<PktInfo>>,
    free_pkts: Vec<u32>,
    /// Highest data offset seen per message at its receiver (for out-of-order counting).
    cqs: Vec<Cq>,
    cq_owner: Vec<NodeId>,
    timers: Vec<Option<Waker>>,
    free_timers: Vec<u32>,
    pub counters: NicCounters,
    next_seen: Vec<u64>,
    next_qp: u32,
}

/// A request the NIC cannot accept.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PostError {
    #[error("rank {0} does not exist")]
    NoSuchRank(Rank),
    #[error("completion queue {0} does not exist or belongs to another rank")]
    BadCq(CqId),
    #[error("local buffer: {0}")]
    Local(MemoryError),
    #[error("rail {rail} does not exist (the NIC has {rails})")]
    BadRail { rail: u8, rails: u8 },
}

impl World {
    pub fn new(net: Network, cfg: NicConfig) -> World {
        let n = net.topo.nodes.len();
        let header = net.config().packet.header.0 as u32;
        let mtu = net.config().packet.max_payload.0 as u32;
        let nics = (0..n)
            .map(|_| Nic {
                engines: vec![Engine::default(); cfg.engines as usize],
                read_busy: vec![SimTime::ZERO; cfg.host.links as usize],
                write_busy: vec![SimTime::ZERO; cfg.host.links as usize],
            })
            .collect();
        World {
            q: EventQueue::new(),
            net,
            header,
            mtu,
            nics,
            mem: (0..n as u32).map(Memory::new).collect(),
            msgs: Vec::new(),
            free_msgs: Vec::new(),
            pkts: Vec::new(),
            free_pkts: Vec::new(),
            cqs: Vec::new(),
            cq_owner: Vec::new(),
            timers: Vec::new(),
            free_timers: Vec::new(),
            counters: NicCounters::default(),
            next_seen: Vec::new(),
            next_qp: 0,
            cfg,
        }
    }

    pub fn now(&self) -> SimTime {
        self.q.now()
    }

    pub fn ranks(&self) -> usize {
        self.nics.len()
    }

    /// Payload bytes per packet.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Fraction of wire bytes that are payload for full packets.
    pub fn payload_efficiency(&self) -> f64 {
        self.mtu as f64 / (self.mtu + self.header) as f64
    }

    /// A new queue-pair number; it selects the message engine (`qp % engines`).
    pub fn alloc_qp(&mut self) -> u32 {
        self.next_qp += 1;
        self.next_qp - 1
    }

    pub fn create_cq(&mut self, owner: Rank) -> CqId {
        self.cqs.push(Cq::default());
        self.cq_owner.push(owner);
        (self.cqs.len() - 1) as CqId
    }

    /// Take the oldest entry of `cq`, or register `waker` to be woken when one arrives.
    pub fn poll_cq(&mut self, cq: CqId, waker: Option<&Waker>) -> Option<Cqe> {
        let c = &mut self.cqs[cq as usize];
        let e = c.entries.pop_front();
        if e.is_none() {
            if let Some(w) = waker {
                c.waiter = Some(w.clone());
            }
        }
        e
    }

    fn push_cqe(&mut self, cq: CqId, e: Cqe) {
        let c = &mut self.cqs[cq as usize];
        c.entries.push_back(e);
        if let Some(w) = c.waiter.take() {
            w.wake();
        }
    }

    /// Wake `waker` at time `t`.
    pub fn wake_at(&mut self, t: SimTime, waker: Waker) {
        let slot = if let Some(s) = self.free_timers.pop() {
            self.timers[s as usize] = Some(waker);
            s
        } else {
            self.timers.push(Some(waker));
            (self.timers.len() - 1) as u32
        };
        self.q.schedule(t.max(self.q.now()), WorldEvent::Timer { slot });
    }

    /// Hand a request to the NIC of `req.src` (the doorbell rings now).
    pub fn post(&mut self, req: Request) -> Result<(), PostError> {
        let n = self.nics.len() as u32;
        if req.src >= n {
            return Err(PostError::NoSuchRank(req.src));
        }
        if req.dst >= n {
            return Err(PostError::NoSuchRank(req.dst));
        }
        if self.cq_owner.get(req.cq as usize) != Some(&req.src) {
            return Err(PostError::BadCq(req.cq));
        }
        let rails = self.net.rails();
        if req.rail >= rails {
            return Err(PostError::BadRail { rail: req.rail, rails });
        }
        let (local, len) = match req.op {
            Op::Write {
                local, len, notify_cq, ..
            } => {
                if let Some(c) = notify_cq {
                    if self.cq_owner.get(c as usize) != Some(&req.dst) {
                        return Err(PostError::BadCq(c));
                    }
                }
                (local, len)
            }
            Op::Read { local, len, .. } => (local, len),
        };
        self.mem[req.src as usize].read(local, len).map_err(PostError::Local)?;
        let engine = req.qp % self.cfg.engines;
        let id = self.alloc_msg(Msg {
            req,
            data: Vec::new(),
            landed: 0,
            status: CqeStatus::Ok,
            checked: false,
            r2w_of: None,
            engine,
        });
        self.counters.messages += 1;
        let t = self.q.now() + self.cfg.host.doorbell_latency;
        self.q.schedule(t, WorldEvent::Doorbell { msg: id });
        Ok(())
    }

    fn alloc_msg(&mut self, m: Msg) -> u32 {
        if let Some(i) = self.free_msgs.pop() {
            self.msgs[i as usize] = Some(m);
            i
        } else {
            self.msgs.push(Some(m));
            self.next_seen.push(0);
            (self.msgs.len() - 1) as u32
        }
    }

    fn msg(&self, id: u32) -> &Msg {
        self.msgs[id as usize].as_ref().expect("live message")
    }

    fn msg_mut(&mut self, id: u32) -> &mut Msg {
        self.msgs[id as usize].as_mut().expect("live message")
    }

    fn alloc_pkt(&mut self, p: PktInfo) -> u32 {
        if let Some(i) = self.free_pkts.pop() {
            self.pkts[i as usize] = Some(p);
            i
        } else {
            self.pkts.push(Some(p));
            (self.pkts.len() - 1) as u32
        }
    }

    /// Pop and handle one event; false when nothing is left.
    pub fn step(&mut self) -> bool {
        let Some((_, ev)) = self.q.pop() else { return false };
        self.handle(ev);
        true
    }

    fn handle(&mut self, ev: WorldEvent) {
        match ev {
            WorldEvent::Net(e) => {
                self.net.handle(&mut self.q, e);
                let deliveries: Vec<_> = self.net.deliveries.drain(..).collect();
                for d in deliveries {
                    self.arrive(d.packet.tag as u32);
                }
                // Dropped packets (no route) are lost; the message never completes and the
                // run's report shows the drop.
            }
            WorldEvent::Doorbell { msg } => {
                let (node, engine) = {
                    let m = self.msg(msg);
                    (m.req.src, m.engine)
                };
                self.enqueue(node, engine, msg);
            }
            WorldEvent::EngineFree { node, engine } => {
                self.nics[node as usize].engines[engine as usize].busy = false;
                self.start_next(node, engine);
            }
            WorldEvent::Inject { pkt } => self.send_packet(pkt),
            WorldEvent::Local { pkt } => self.arrive(pkt),
            WorldEvent::Landed { pkt } => self.landed(pkt),
            WorldEvent::Timer { slot } => {
                if let Some(w) = self.timers[slot as usize].take() {
                    self.free_timers.push(slot);
                    w.wake();
                }
            }
        }
    }

    fn enqueue(&mut self, node: NodeId, engine: u32, msg: u32) {
        self.nics[node as usize].engines[engine as usize].queue.push_back(msg);
        self.start_next(node, engine);
    }

    /// Start the next queued message of an idle engine.
    fn start_next(&mut self, node: NodeId, engine: u32) {
        let max = self.cfg.max_in_flight;
        let e = &mut self.nics[node as usize].engines[engine as usize];
        if e.busy || e.in_flight >= max {
            return;
        }
        let Some(id) = e.queue.pop_front() else { return };
        e.busy = true;
        e.in_flight += 1;
        let now = self.q.now();
        let host = self.cfg.host.clone();
        let internal = self.msg(id).r2w_of.is_some();
        // Descriptor fetch (a DMA read), unless the descriptor came in a packet (R2W).
        let mut t = now + self.cfg.message_overhead;
        if !internal {
            t += host.read_latency;
        }
        let m = self.msg(id).clone();
        match m.req.op {
            Op::Read { .. } if !internal => {
                // Send the read request; the engine is free once it has left.
                let (from, to) = (m.req.src, m.req.dst);
                let p = self.alloc_pkt(PktInfo {
                    msg: id,
                    kind: PktKind::ReadReq,
                    from,
                    to,
                    rail: m.req.rail,
                });
                self.q.schedule(t, WorldEvent::Inject { pkt: p });
                self.q.schedule(t, WorldEvent::EngineFree { node, engine });
            }
            _ => {
                // Data movement: a write, or the write-back of a read at its target.
                let (from, to, src_addr, len) = match (&m.req.op, internal) {
                    (Op::Write { local, len, .. }, _) => (m.req.src, m.req.dst, *local, *len),
                    (Op::Read { remote, len, .. }, true) => (m.req.dst, m.req.src, *remote, *len),
                    (Op::Read { .. }, false) => unreachable!("handled above"),
                };
                let data = self.mem[from as usize]
                    .read(src_addr, len)
                    .map(|d| d.to_vec())
                    .unwrap_or_default();
                self.msg_mut(id).data = data;
                let rate = host.read_rate();
                let mtu = self.mtu as u64;
                let npk = len.div_ceil(mtu).max(1);
                // The engine's PCIe link streams one message's data at a time.
                let link = (engine % host.links) as usize;
                let first = (t + host.read_latency).max(self.nics[node as usize].read_busy[link]);
                let mut last = first;
                for k in 0..npk {
                    let off = k * mtu;
                    let plen = (len - off).min(mtu);
                    let ready = first + rate.serialization(Bytes(off + plen));
                    last = ready;
                    let p = self.alloc_pkt(PktInfo {
                        msg: id,
                        kind: PktKind::Data { off, len: plen },
                        from,
                        to,
                        rail: m.req.rail,
                    });
                    self.q.schedule(ready, WorldEvent::Inject { pkt: p });
                }
                self.nics[node as usize].read_busy[link] = last;
                self.q.schedule(last, WorldEvent::EngineFree { node, engine });
            }
        }
        if internal {
            // A write-back does not occupy an in-flight slot of the target's engine beyond its
            // transmission.
            self.nics[node as usize].engines[engine as usize].in_flight -= 1;
        }
    }

    /// A packet's data is in the NIC: give it to a port (or the internal path).
    fn send_packet(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].clone().expect("live packet");
        let (payload, ctrl) = match info.kind {
            PktKind::Data { len, .. } => (len as u32, false),
            _ => (0, true),
        };
        if ctrl {
            self.counters.control_packets += 1;
        } else {
            self.counters.data_packets += 1;
            self.counters.payload_bytes += payload as u64;
        }
        self.counters.wire_bytes += (payload + self.header) as u64;
        if info.from == info.to {
            let t = self.q.now() + self.cfg.loopback_latency;
            self.q.schedule(t, WorldEvent::Local { pkt: pid });
            return;
        }
        let rails = self.net.rails();
        let rail = match self.cfg.port_select {
            PortSelect::Fixed => info.rail,
            PortSelect::Adaptive => {
                let start = (pid as u8) % rails;
                (0..rails)
                    .map(|k| (start + k) % rails)
                    .min_by_key(|&r| self.net.source_queue_len(info.from, r))
                    .unwrap_or(0)
            }
        };
        let mut p = Packet::new(pid as u64, info.from, info.to, payload, self.header, self.q.now());
        p.rail = rail;
        if self.net.inject(&mut self.q, p).is_err() {
            // No route at all: the packet is lost and its message never completes.
            self.counters.unroutable += 1;
        }
    }

    /// A packet reached the NIC of its destination.
    fn arrive(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].clone().expect("live packet");
        let now = self.q.now();
        match info.kind {
            PktKind::Data { off, len } => {
                // Out-of-order accounting: offsets should arrive increasing.
                let seen = &mut self.next_seen[info.msg as usize];
                if off + len <= *seen && off != 0 {
                    self.counters.out_of_order += 1;
                } else {
                    *seen = (*seen).max(off + len);
                }
                // Protection check on the first packet to arrive.
                if !self.msg(info.msg).checked {
                    let status = self.check_target(info.msg);
                    let m = self.msg_mut(info.msg);
                    m.checked = true;
                    m.status = status;
                }
                // The first free PCIe link writes the payload into host memory.
                let nic = &mut self.nics[info.to as usize];
                let (link, free) = nic
                    .write_busy
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by_key(|&(_, t)| t)
                    .expect("at least one link");
                let start = (now + self.cfg.rx_overhead).max(free);
                let done = start + self.cfg.host.write_rate().serialization(Bytes(len));
                nic.write_busy[link] = done;
                self.q.schedule(done, WorldEvent::Landed { pkt: pid });
            }
            PktKind::ReadReq => {
                self.free_pkt(pid);
                let status = self.check_target(info.msg);
                if status != CqeStatus::Ok {
                    self.counters.refused += 1;
                    self.msg_mut(info.msg).status = status.clone();
                    self.send_ack(info.msg, info.to, info.from, info.rail, status);
                    return;
                }
                // R2W: the target's engine writes the data back to the requester.
                let m = self.msg(info.msg).clone();
                let engine = m.req.qp % self.cfg.engines;
                let w = self.alloc_msg(Msg {
                    req: m.req.clone(),
                    data: Vec::new(),
                    landed: 0,
                    status: CqeStatus::Ok,
                    checked: true,
                    r2w_of: Some(info.msg),
                    engine,
                });
                self.nics[info.to as usize].engines[engine as usize].queue.push_back(w);
                self.start_next(info.to, engine);
            }
            PktKind::Ack { status } => {
                self.free_pkt(pid);
                self.complete_at_source(info.msg, status);
            }
        }
    }

    fn free_pkt(&mut self, pid: u32) {
        self.pkts[pid as usize] = None;
        self.free_pkts.push(pid);
    }

    /// Range and key check of a message's remote buffer at its target.
    fn check_target(&self, id: u32) -> CqeStatus {
        let m = self.msg(id);
        let (node, addr, len, key) = match &m.req.op {
            Op::Write { remote, len, rkey, .. } => (m.req.dst, *remote, *len, *rkey),
            Op::Read { remote, len, rkey, .. } => (m.req.dst, *remote, *len, *rkey),
        };
        if m.r2w_of.is_some() {
            return CqeStatus::Ok;
        }
        match self.mem[node as usize].check(addr, len, key) {
            Ok(()) => CqeStatus::Ok,
            Err(e) => CqeStatus::RemoteAccess(e),
        }
    }

    /// A data packet's DMA write has finished.
    fn landed(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].clone().expect("live packet");
        self.free_pkt(pid);
        let PktKind::Data { off, len } = info.kind else { return };
        let id = info.msg;
        let ok = self.msg(id).status == CqeStatus::Ok;
        if ok {
            let m = self.msg(id);
            let dst_addr = match (&m.req.op, m.r2w_of.is_some()) {
                (Op::Write { remote, .. }, _) => *remote,
                (Op::Read { local, .. }, true) => *local,
                (Op::Read { .. }, false) => unreachable!("reads move data only as R2W"),
            };
            let bytes = m.data[off as usize..(off + len) as usize].to_vec();
            self.mem[info.to as usize]
                .write(dst_addr + off, &bytes)
                .expect("checked on arrival");
        }
        let m = self.msg_mut(id);
        m.landed += len;
        let total = match m.req.op {
            Op::Write { len, .. } | Op::Read { len, .. } => len,
        };
        if m.landed < total && !(total == 0 && m.landed == 0) {
            return;
        }
        // Every byte is in place.
        let m = self.msg(id).clone();
        if let Some(read) = m.r2w_of {
            // The read is complete at the requester; the write-back message is done.
            self.release_msg(id);
            self.complete_at_source(read, CqeStatus::Ok);
            return;
        }
        if m.status == CqeStatus::Ok {
            if let Op::Write {
                reply_word,
                notify_cq,
                len,
                ..
            } = m.req.op
            {
                if let Some(a) = reply_word {
                    // The reply word lies in the target's registered memory; a bad address is
                    // reported like a bad buffer.
                    let _ = self.mem[m.req.dst as usize].fetch_add_u64(a, 1);
                }
                if let Some(cq) = notify_cq {
                    let now = self.q.now();
                    self.push_cqe(
                        cq,
                        Cqe {
                            wr_id: m.req.wr_id,
                            kind: CqeKind::Notify,
                            status: CqeStatus::Ok,
                            bytes: len,
                            peer: m.req.src,
                            at: now,
                        },
                    );
                }
            }
        } else {
            self.counters.refused += 1;
        }
        self.send_ack(id, m.req.dst, m.req.src, m.req.rail, m.status.clone());
    }

    fn send_ack(&mut self, msg: u32, from: NodeId, to: NodeId, rail: u8, status: CqeStatus) {
        let p = self.alloc_pkt(PktInfo {
            msg,
            kind: PktKind::Ack { status },
            from,
            to,
            rail,
        });
        self.send_packet(p);
    }

    fn release_msg(&mut self, id: u32) {
        self.msgs[id as usize] = None;
        self.next_seen[id as usize] = 0;
        self.free_msgs.push(id);
    }

    /// The initiator learns that its message is complete.
    fn complete_at_source(&mut self, id: u32, status: CqeStatus) {
        let m = self.msg(id).clone();
        let (kind, len) = match m.req.op {
            Op::Write { len, .. } => (CqeKind::Write, len),
            Op::Read { len, .. } => (CqeKind::Read, len),
        };
        if m.req.signaled || status != CqeStatus::Ok {
            let now = self.q.now();
            self.push_cqe(
                m.req.cq,
                Cqe {
                    wr_id: m.req.wr_id,
                    kind,
                    status,
                    bytes: len,
                    peer: m.req.dst,
                    at: now,
                },
            );
        }
        let node = m.req.src;
        let e = &mut self.nics[node as usize].engines[m.engine as usize];
        e.in_flight -= 1;
        self.release_msg(id);
        self.start_next(node, m.engine);
    }
}
