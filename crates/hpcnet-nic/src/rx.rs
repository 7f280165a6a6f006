//! Receive: what a NIC does with the packets the network delivers to it.
//!
//! The dispatcher takes the packets of each VC in arrival order (a GET request waits while the
//! send engines' write-back queue is full, `nic.get_queue`). On a message's first packet the
//! target checks range and key (or takes a NAP pool buffer, or a posted receive buffer); a
//! refused message writes nothing. Each data packet is processed (`rx_overhead`) and written to
//! host memory by DMA through the host interface ([`crate::host`]), in any order; when every
//! byte has landed the message completes at the target (reply word incremented, notification
//! queued) and an acknowledgement goes back. Read/GET requests become write-backs on the
//! target's engine; atomics are applied at arrival and answered with the old value.
//!
//! A read or atomic request waits at the head of its FIFO until the DMA writes issued before
//! it have landed (PCIe ordering: a read does not pass posted writes). With
//! `nic.rx_aggregation`, short data packets are gathered into blocks first ([`crate::rx_agg`]).
//!
//! [`World::landed`] is the plug-in point for NIC units that consume arriving data (a
//! collective unit, a triggered-offload unit): the one place a packet's data lands.

use crate::cq::{Cqe, CqeKind, CqeStatus};
use crate::ids::Rank;
use crate::op::{Msg, Op, RelMsg};
use crate::pkt::{Held, PktInfo, PktKind};
use crate::world::{NicStat, World, WorldEvent};
use hpcnet_des::SimTime;
use hpcnet_fabric::topology::NodeId;

impl World {
    /// Give receive-buffer space back to the network.
    pub(crate) fn release(&mut self, held: Option<Held>) {
        if let Some((node, rail, c)) = held {
            self.net.release_ejection(&mut self.q, node, rail, c);
        }
    }

    /// A packet reached the NIC of `node` on VC `vc`: the receive dispatcher takes packets of a
    /// VC in arrival order.
    pub(crate) fn receive(&mut self, pid: u32, (node, vc): (NodeId, u8)) {
        self.nics[node.index()].rx_fifo[vc as usize].push_back(pid);
        if self.nics[node.index()].rx_fifo[vc as usize].len() == 1 {
            self.dispatch(node, vc);
        }
    }

    /// Dispatch the packets at the head of a receive FIFO until it is empty or its head is a GET
    /// the send engine cannot take yet (`nic.get_queue`).
    fn dispatch(&mut self, node: NodeId, vc: u8) {
        let limit = self.cfg.get_queue as usize;
        while let Some(&pid) = self.nics[node.index()].rx_fifo[vc as usize].front() {
            if self.rx_waits_for_writes(node, pid) {
                return; // retried when the writes before it have landed
            }
            let is_get = matches!(
                self.pkts[pid as usize].as_ref().expect("live packet").kind,
                PktKind::ReadReq
            );
            if is_get && limit > 0 {
                let waiting: usize = self.nics[node.index()].engines.iter().map(|e| e.internal.len()).sum();
                if waiting >= limit {
                    return; // stalled: retried when an engine takes a write-back
                }
            }
            self.nics[node.index()].rx_fifo[vc as usize].pop_front();
            self.arrive(pid);
        }
    }

    /// Must packet `pid`, at the head of a receive FIFO of `node`, wait for earlier writes? A
    /// read or atomic request reads host memory outside the DMA write channel, so it waits
    /// until every DMA write issued before it has landed (PCIe: a read does not pass posted
    /// writes; an aggregation block waiting in NIC memory is written first), and the FIFO
    /// behind it waits too. Without this an atomic applied at arrival could be seen before a
    /// put that arrived earlier (a `put_signal` signal before its data).
    #[inline]
    fn rx_waits_for_writes(&mut self, node: NodeId, pid: u32) -> bool {
        let reads = matches!(
            self.pkts[pid as usize].as_ref().expect("live packet").kind,
            PktKind::ReadReq | PktKind::AtomicReq
        );
        if !reads {
            return false;
        }
        let now = self.q.now();
        if let Some(t) = self.nics[node.index()].rx_hold {
            if now < t {
                return true; // a wake-up is scheduled
            }
            self.nics[node.index()].rx_hold = None;
            return false;
        }
        if self.cfg.rx_aggregation.is_some() {
            self.flush_block(node);
        }
        let t = self.nics[node.index()].writes_done;
        if t < now {
            return false;
        }
        // Wake after the landings due at `t` (scheduled before this wake-up).
        self.nics[node.index()].rx_hold = Some(t);
        let by = self.net.node_origin(node);
        self.q.schedule_by(by, t, WorldEvent::RxWake { node });
        true
    }

    /// The writes a held request waited for have landed: retry the receive FIFOs.
    pub(crate) fn rx_wake(&mut self, node: NodeId) {
        self.redispatch(node);
    }

    /// Retry every stalled receive FIFO of `node`.
    pub(crate) fn redispatch(&mut self, node: NodeId) {
        for vc in 0..self.nics[node.index()].rx_fifo.len() {
            if !self.nics[node.index()].rx_fifo[vc].is_empty() {
                self.dispatch(node, vc as u8);
            }
        }
    }

    /// The dispatcher processes a packet.
    fn arrive(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].clone().expect("live packet");
        let now = self.q.now();
        if !self.live(info.msg, info.gen) {
            // A late copy of a message that has completed (or failed) meanwhile; a late answer
            // (acknowledgement, probe answer) is dropped without being counted.
            let data = matches!(info.kind, PktKind::Data { .. } | PktKind::ReadReq | PktKind::AtomicReq);
            if data {
                self.stats.add(NicStat::Duplicates, 1);
            }
            self.release(info.held);
            return self.free_pkt(pid);
        }
        match info.kind {
            PktKind::Data { off, len } => {
                if (self.rel.on || self.msg(info.msg).r2w_of.is_some()) && !self.rel_accept_data(pid, &info, off) {
                    return;
                }
                let seen = &mut self.next_seen[info.msg as usize];
                if off + len <= *seen && off != 0 {
                    self.stats.add(NicStat::OutOfOrder, 1);
                } else {
                    *seen = (*seen).max(off + len);
                }
                // Protection check (or NAP buffer allocation) on the first packet to arrive.
                if !self.msg(info.msg).checked {
                    let status = self.accept(info.msg, info.to);
                    let m = self.msg_mut(info.msg);
                    m.checked = true;
                    m.status = status;
                }
                // DMA write into host memory on the first free PCIe link.
                let nap_tlp = match self.msg(info.msg).req.op {
                    Op::Nap { .. } => self.cfg.nap_upload_per_tlp,
                    _ => None,
                };
                let ready = now + self.cfg.rx_overhead;
                let node = self.place.node_of(info.to);
                if nap_tlp.is_none() && self.aggregates(len) {
                    return self.aggregate(node, pid, len, ready);
                }
                // Not aggregated: a waiting block is written first.
                self.flush_block(node);
                let write = match nap_tlp {
                    Some(per) => per * len.div_ceil(self.cfg.host.max_payload.0).max(1),
                    None => self.timing.write_time(len),
                };
                self.count_host_write(len);
                let nic = self.nic_of(info.to);
                let done = nic.host.write(ready, write);
                nic.writes_done = nic.writes_done.max(done);
                let by = self.net.node_origin(self.place.node_of(info.to));
                self.q.schedule_by(by, done, WorldEvent::Landed { pkt: pid });
            }
            PktKind::ReadReq => {
                let reliable = self.msg(info.msg).reliable;
                if reliable && self.msg(info.msg).rel.writeback.is_some_and(|t| now < t) {
                    // A repeated request while the write-back is queued or being sent.
                    return self.discard(pid, &info, NicStat::Duplicates);
                }
                self.free_pkt(pid);
                let status = self.accept(info.msg, info.to);
                if status != CqeStatus::Ok {
                    self.release(info.held);
                    self.stats.add(NicStat::Refused, 1);
                    self.msg_mut(info.msg).status = status.clone();
                    self.send_ack(info.msg, info.to, info.from, info.rail, status);
                    return;
                }
                // R2W: the target's engine writes the data back to the requester.
                let m = self.msg(info.msg).clone();
                let engine = m.req.qp.0 % self.cfg.engines;
                if reliable {
                    self.msg_mut(info.msg).rel.writeback = Some(SimTime::MAX);
                }
                // The request keeps its receive-buffer space until the engine takes it.
                let w = self.alloc_msg(Msg {
                    r2w_of: Some(info.msg),
                    checked: true,
                    data: Vec::new(),
                    landed: 0,
                    held: info.held,
                    reliable: false,
                    pending: 0,
                    rel: RelMsg {
                        pull_gen: info.gen,
                        ..RelMsg::default()
                    },
                    ..m
                });
                let node = self.place.node_of(info.to);
                self.nics[node.index()].engines[engine as usize].internal.push_back(w);
                self.start_next(node, engine);
                self.serve_response_while_blocked(node, engine);
            }
            PktKind::Ack { status } => {
                self.free_pkt(pid);
                self.release(info.held);
                self.acked(info.msg, status);
            }
            PktKind::AtomicReq => {
                self.free_pkt(pid);
                self.release(info.held);
                // Read-modify-write in the target's memory, atomically at arrival; the response
                // leaves after the receive processing and one memory round trip. A repeated
                // request of a reliable atomic gets the first answer again, never applied twice.
                let reliable = self.msg(info.msg).reliable;
                let done = reliable && self.msg(info.msg).rel.done;
                let status = if done {
                    self.stats.add(NicStat::Duplicates, 1);
                    self.msg(info.msg).status.clone()
                } else {
                    self.accept(info.msg, info.to)
                };
                let mut old = if done { self.msg(info.msg).rel.old } else { 0 };
                if done {
                    // answered below from the record
                } else if status == CqeStatus::Ok {
                    let m = self.msg(info.msg);
                    if let Op::Atomic {
                        op,
                        width,
                        remote,
                        rkey,
                        operand,
                        compare,
                        ..
                    } = m.req.op
                    {
                        let w = usize::from(width);
                        let mem = &mut self.mem[info.to.index()];
                        let mut b = [0u8; 8];
                        b[..w].copy_from_slice(&mem.read(remote, w as u64).expect("checked"));
                        old = u64::from_le_bytes(b);
                        if let Some(new) = op.apply_width(width, old, operand, compare) {
                            mem.write(remote, &new.to_le_bytes()[..w]).expect("checked");
                        }
                        self.memory_touched(info.to, rkey);
                    }
                } else {
                    self.stats.add(NicStat::Refused, 1);
                }
                if reliable && !done {
                    let m = self.msg_mut(info.msg);
                    m.rel.done = true;
                    m.rel.old = old;
                    m.status = status.clone();
                }
                let p = self.alloc_pkt(PktInfo {
                    msg: info.msg,
                    kind: PktKind::AtomicResp { status, old },
                    from: info.to,
                    to: info.from,
                    rail: info.rail,
                    held: None,
                    gen: info.gen,
                    attempt: info.attempt,
                    arm: false,
                    tx_engine: None,
                });
                let t = now + self.cfg.rx_overhead + self.timing.read_latency;
                let by = self.net.node_origin(self.place.node_of(info.to));
                self.q.schedule_by(by, t, WorldEvent::Inject { pkt: p });
            }
            PktKind::AtomicResp { status, old } => {
                self.free_pkt(pid);
                self.release(info.held);
                self.atomic_answered(info.msg, status, old);
            }
            PktKind::Probe => {
                self.free_pkt(pid);
                self.release(info.held);
                self.rel_probe_arrived(&info);
            }
            PktKind::ProbeResp { state } => {
                self.free_pkt(pid);
                self.release(info.held);
                self.rel_answer(info.msg, state);
            }
        }
    }

    /// The answer of atomic `id` (the old value `old`) reached its initiator: the result is
    /// written and the atomic completes.
    pub(crate) fn atomic_answered(&mut self, id: u32, status: CqeStatus, old: u64) {
        if status == CqeStatus::Ok {
            let m = self.msg(id);
            if let Op::Atomic {
                result: Some(a), width, ..
            } = m.req.op
            {
                let src = m.req.src;
                self.mem[src.index()]
                    .write(a, &old.to_le_bytes()[..usize::from(width)])
                    .expect("checked at post");
            }
        }
        self.complete_at_source(id, status, old);
    }

    /// May message `id` write into the memory of `rank`? Range and key for addressed
    /// operations; a pool buffer for a NAP, a posted buffer for a queue message (taken here).
    fn accept(&mut self, id: u32, rank: Rank) -> CqeStatus {
        let m = self.msg(id);
        if m.r2w_of.is_some() {
            return CqeStatus::Ok;
        }
        if let Op::Send { len, rq, .. } = m.req.op {
            return match self.rqs[rq.index()].bufs.pop_front() {
                Some((addr, blen, wr)) if blen >= len => {
                    let m = self.msg_mut(id);
                    m.dst_segs = vec![(addr, len)];
                    m.recv_wr = wr;
                    CqeStatus::Ok
                }
                Some((addr, blen, wr)) => {
                    // The buffer is consumed with an error completion at the receiver.
                    let cq = self.rqs[rq.index()].cq;
                    let now = self.q.now();
                    let src = self.msg(id).req.src;
                    let e = Cqe {
                        wr_id: wr,
                        kind: CqeKind::Recv,
                        status: CqeStatus::BufferTooSmall,
                        bytes: blen,
                        peer: src,
                        addr,
                        value: 0,
                        at: now,
                    };
                    self.push_cqe(cq, e);
                    CqeStatus::BufferTooSmall
                }
                None => CqeStatus::NoBuffer,
            };
        }
        if let Op::Nap { len, .. } = m.req.op {
            let nic = self.nic_of(rank);
            return match (nic.nap_pool.pop_front(), nic.nap_cq) {
                (Some(buf), Some(_)) => {
                    self.msg_mut(id).dst_segs = vec![(buf, len)];
                    CqeStatus::Ok
                }
                _ => CqeStatus::NoBuffer,
            };
        }
        for &(a, l) in &m.remote_segs {
            if let Err(e) = self.mem[rank.index()].check(a, l, m.rkey) {
                return CqeStatus::RemoteAccess(e);
            }
        }
        if let Op::Atomic { remote, width, .. } = m.req.op {
            if let Err(e) = self.mem[rank.index()].check(remote, u64::from(width), m.rkey) {
                return CqeStatus::RemoteAccess(e);
            }
        }
        if let Op::Write {
            reply_word: Some((a, key)),
            ..
        } = m.req.op
        {
            if let Err(e) = self.mem[rank.index()].check(a, 8, key) {
                return CqeStatus::RemoteAccess(e);
            }
        }
        CqeStatus::Ok
    }

    /// Plug-in point: a data packet's DMA write has finished and its bytes are in host memory.
    pub(crate) fn landed(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].take().expect("live packet");
        self.free_pkts.push(pid);
        // Written to memory: the receive buffer is free again.
        self.release(info.held);
        let PktKind::Data { off, len } = info.kind else { return };
        let id = info.msg;
        if !self.live(id, info.gen) {
            return; // its message failed while the packet was being written
        }
        // A write-back's bytes count for the read it serves.
        let (rec, write) = match self.msg(id).r2w_of {
            Some(pull) => {
                let alive = self.live(pull, self.msg(id).rel.pull_gen);
                (pull, alive)
            }
            None => (id, true),
        };
        let m = self.msgs[id as usize].as_mut().expect("live message");
        m.pending = m.pending.saturating_sub(1);
        if write && m.status == CqeStatus::Ok {
            // Scatter [off, off + len) of the message over the landing segments.
            let mem = &mut self.mem[info.to.index()];
            let mut base = 0u64;
            for &(a, l) in &m.dst_segs {
                let (lo, hi) = (off.max(base), (off + len).min(base + l));
                if lo < hi {
                    mem.write(a + (lo - base), &m.data[lo as usize..hi as usize])
                        .expect("checked on arrival");
                }
                base += l;
            }
        }
        if rec != id {
            // The read completes at the requester when its last byte has landed; the
            // write-back is released when none of its packets is left.
            let complete = write && {
                let r = self.msg_mut(rec);
                r.landed += len;
                r.landed >= r.len
            };
            self.settle_record(id);
            if complete {
                self.complete_at_source(rec, CqeStatus::Ok, 0);
            }
            return;
        }
        let m = self.msgs[id as usize].as_mut().expect("live message");
        m.landed += len;
        if m.landed < m.len {
            if m.rel.lost {
                self.settle_record(id);
            }
            return;
        }
        // Every byte is in place: the data buffer can serve another message.
        let data = std::mem::take(&mut m.data);
        self.data_pool.push(data);
        m.rel.done = true;
        let m = self.msg(id);
        if m.status == CqeStatus::Ok {
            let rkey = m.rkey;
            self.memory_touched(info.to, rkey);
        }
        let m = self.msg(id);
        let (bytes, src, dst, rail, status, unreliable_copy) = (
            m.len,
            m.req.src,
            m.req.dst,
            m.req.rail,
            m.status.clone(),
            m.unreliable_copy,
        );
        if status == CqeStatus::Ok {
            // The reply word to increment and the notification to queue (cq, wr_id, kind, addr).
            let mut reply = None;
            let mut notify = None;
            match &m.req.op {
                Op::Write {
                    reply_word, notify_cq, ..
                } => {
                    reply = reply_word.map(|(a, _)| a);
                    notify = notify_cq.map(|cq| (cq, m.req.wr_id, CqeKind::Notify, 0));
                }
                Op::Put {
                    notify_cq: Some(cq), ..
                } => notify = Some((*cq, m.req.wr_id, CqeKind::Notify, 0)),
                Op::Send { rq, .. } => {
                    let cq = self.rqs[rq.index()].cq;
                    let buf = m.dst_segs.first().map_or(0, |s| s.0);
                    notify = Some((cq, m.recv_wr, CqeKind::Recv, buf));
                }
                Op::Nap { .. } => {
                    let cq = self.nics[self.place.node_of(dst).index()]
                        .nap_cq
                        .expect("NAP accepted only with a pool");
                    let buf = m.dst_segs.first().map_or(0, |s| s.0);
                    notify = Some((cq, m.req.wr_id, CqeKind::NapReceived, buf));
                }
                _ => {}
            }
            if let Some(a) = reply {
                self.mem[dst.index()]
                    .fetch_add_u64(a, 1)
                    .expect("reply word checked when the write was accepted");
            }
            if let Some((cq, wr_id, kind, addr)) = notify {
                let now = self.q.now();
                let e = Cqe {
                    wr_id,
                    kind,
                    status: CqeStatus::Ok,
                    bytes,
                    peer: src,
                    addr,
                    value: 0,
                    at: now,
                };
                self.push_cqe(cq, e);
            }
        } else {
            self.stats.add(NicStat::Refused, 1);
        }
        if unreliable_copy && !self.msg(id).reliable {
            // Nobody waits for an acknowledgement.
            self.release_msg(id);
            return;
        }
        self.send_ack(id, dst, src, rail, status);
    }

    /// Acknowledge message `msg` (landed, or refused with `status`) from `from` to `to`.
    pub(crate) fn send_ack(&mut self, msg: u32, from: Rank, to: Rank, rail: u8, status: CqeStatus) {
        let gen = self.gens[msg as usize];
        let p = self.alloc_pkt(PktInfo {
            msg,
            kind: PktKind::Ack { status },
            from,
            to,
            rail,
            held: None,
            gen,
            attempt: 0,
            arm: false,
            tx_engine: None,
        });
        self.send_packet(p);
    }
}
