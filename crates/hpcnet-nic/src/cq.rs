//! Completion: completion queues, receive queues (a queue pair's own or shared: SRQ), the NAP
//! buffer pools, and the completion of a message at its initiator.
//!
//! A completion queue is a FIFO of [`Cqe`]s owned by one rank. Pushing an entry also records a
//! [`Notice::Cq`] for the software above (the message library wakes whoever waits on the
//! queue); polling never blocks.

use crate::ids::{CqId, Rank, RqId};
use crate::memory::MemoryError;
use crate::op::{Class, Op, PostError};
use crate::world::{Notice, World};
use hpcnet_des::SimTime;
use serde::Serialize;
use std::collections::VecDeque;

/// Completion status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CqeStatus {
    Ok,
    /// The target refused the access (range or key); nothing was written.
    RemoteAccess(MemoryError),
    /// A NAP or reliable queue message found no free buffer; nothing was written.
    NoBuffer,
    /// The posted receive buffer is smaller than the message.
    BufferTooSmall,
    /// Members of a hardware collective posted descriptors that disagree (kind, root, type,
    /// operator or size); no result was written.
    CollMismatch,
    /// An offloaded (triggered) collective waited for a pulse counter longer than
    /// `nic.triggered.pulse_timeout`.
    TrigTimeout,
    /// An offloaded (triggered) collective failed at its offload unit (the reason).
    TrigFailed(String),
    /// The transport gave up on the message after `nic.reliability.retries` timeouts without
    /// progress (its target may have received part of it); or a hardware collective was given
    /// up after `nic.coll.recovery.retries` restarts (no result was written).
    RetryExceeded,
}

/// What completed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CqeKind {
    Write,
    Read,
    Put,
    Get,
    Nap,
    Fsm,
    Atomic,
    /// A write or PUT with notification landed here (target side).
    Notify,
    /// A NAP landed here (target side); `addr` is the pool buffer holding it.
    NapReceived,
    Send,
    /// A queue message landed in a posted receive buffer (`wr_id` is the receive's).
    Recv,
    /// A hardware collective completed at this member.
    Coll,
    /// An offloaded (triggered) collective completed at this member.
    Trig,
    /// A point-to-point descriptor of a virtual port was sent: its packets left the NIC.
    TrigP2p,
}

/// A completion queue entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cqe {
    pub wr_id: u64,
    pub kind: CqeKind,
    pub status: CqeStatus,
    pub bytes: u64,
    /// The peer (target for operations, source for notifications and received NAPs).
    pub peer: Rank,
    /// Buffer address of a received NAP (0 otherwise).
    pub addr: u64,
    /// Old value of an atomic (0 otherwise).
    pub value: u64,
    pub at: SimTime,
}

/// A receive queue: posted buffers (address, length, receive wr_id) and its completion queue.
pub(crate) struct Rq {
    pub(crate) owner: Rank,
    pub(crate) cq: CqId,
    pub(crate) bufs: VecDeque<(u64, u64, u64)>,
}

/// A completion queue and the rank that owns it.
pub(crate) struct Cq {
    owner: Rank,
    entries: VecDeque<Cqe>,
}

impl World {
    /// A new, empty completion queue of `owner`.
    pub fn create_cq(&mut self, owner: Rank) -> CqId {
        self.cqs.push(Cq {
            owner,
            entries: VecDeque::new(),
        });
        CqId((self.cqs.len() - 1) as u32)
    }

    /// Whether `cq` exists and belongs to `rank`.
    pub(crate) fn cq_owned_by(&self, cq: CqId, rank: Rank) -> bool {
        self.cqs.get(cq.index()).is_some_and(|c| c.owner == rank)
    }

    /// Take the oldest entry of `cq` (None when it is empty or does not exist).
    pub fn poll_cq(&mut self, cq: CqId) -> Option<Cqe> {
        self.cqs.get_mut(cq.index())?.entries.pop_front()
    }

    pub(crate) fn push_cqe(&mut self, cq: CqId, e: Cqe) {
        self.cqs[cq.index()].entries.push_back(e);
        self.notices.push(Notice::Cq(cq));
    }

    /// A receive queue of `owner` whose completions go to `cq`; several queue pairs may share
    /// it (SRQ).
    pub fn create_rq(&mut self, owner: Rank, cq: CqId) -> Result<RqId, PostError> {
        if !self.cq_owned_by(cq, owner) {
            return Err(PostError::BadCq(cq));
        }
        self.rqs.push(Rq {
            owner,
            cq,
            bufs: VecDeque::new(),
        });
        Ok(RqId((self.rqs.len() - 1) as u32))
    }

    /// Post a receive buffer of `len` bytes at `addr` to `rq`.
    pub fn post_recv(&mut self, rq: RqId, addr: u64, len: u64, wr_id: u64) -> Result<(), PostError> {
        let owner = self.rqs.get(rq.index()).ok_or(PostError::BadRq(rq))?.owner;
        self.mem[owner.index()]
            .check_local(addr, len)
            .map_err(PostError::Local)?;
        self.rqs[rq.index()].bufs.push_back((addr, len, wr_id));
        Ok(())
    }

    /// Pre-post NAP receive buffers: `count` buffers of `nic.nap_buffer` bytes starting at
    /// `addr` (inside a registered region of `rank`), their events going to `cq`.
    pub fn post_nap_buffers(&mut self, rank: Rank, addr: u64, count: u64, cq: CqId) -> Result<(), PostError> {
        if rank.index() >= self.ranks() {
            return Err(PostError::NoSuchRank(rank));
        }
        if !self.cq_owned_by(cq, rank) {
            return Err(PostError::BadCq(cq));
        }
        let size = self.cfg.nap_buffer.0;
        if !addr.is_multiple_of(size) {
            return Err(PostError::NapPoolAlignment { addr, size });
        }
        self.mem[rank.index()]
            .check_local(addr, size * count)
            .map_err(PostError::Local)?;
        let nic = self.nic_of(rank);
        nic.nap_cq = Some(cq);
        nic.nap_pool.extend((0..count).map(|i| addr + i * size));
        Ok(())
    }

    /// Give a consumed NAP buffer back to the pool.
    pub fn repost_nap_buffer(&mut self, rank: Rank, addr: u64) {
        let node = self.place.node_of(rank).index();
        if let Some(nic) = self.nics.get_mut(node) {
            nic.nap_pool.push_back(addr);
        }
    }

    /// The initiator learns that its message is complete.
    pub(crate) fn complete_at_source(&mut self, id: u32, status: CqeStatus, value: u64) {
        let m = self.msg(id);
        let kind = match m.req.op {
            Op::Write { .. } => CqeKind::Write,
            Op::Read { .. } => CqeKind::Read,
            Op::Put { .. } => CqeKind::Put,
            Op::Get { .. } => CqeKind::Get,
            Op::Nap { .. } => CqeKind::Nap,
            Op::Fsm { .. } => CqeKind::Fsm,
            Op::Atomic { .. } => CqeKind::Atomic,
            Op::Send { .. } => CqeKind::Send,
        };
        let (src, function, engine) = (m.req.src, m.req.function, m.engine);
        let win = m.rel.win;
        let read = m.class != Class::Push;
        if m.req.signaled || status != CqeStatus::Ok {
            let now = self.q.now();
            let (cq, e) = (
                m.req.cq,
                Cqe {
                    wr_id: m.req.wr_id,
                    kind,
                    status,
                    bytes: m.len,
                    peer: m.req.dst,
                    addr: 0,
                    value,
                    at: now,
                },
            );
            self.push_cqe(cq, e);
        }
        if read {
            self.reads_outstanding[src.index()] -= 1;
        }
        let node = self.place.node_of(src);
        self.nics[node.index()].outstanding[function as usize] -= 1;
        self.nics[node.index()].engines[engine as usize].in_flight -= 1;
        self.release_msg(id);
        self.start_next(node, engine);
        if let Some((w, _)) = win {
            self.rel_window_free(w);
        }
    }
}
