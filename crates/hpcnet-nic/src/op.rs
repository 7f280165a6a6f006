//! The operation model: what a request posted to a NIC is, and what it becomes.
//!
//! [`World::post`] checks a [`Request`] against the NIC's limits (ranks, completion queues,
//! rails, functions, doorbell FIFO, Chain-DMA totals, NAP and FSM sizes, the initiator's own
//! buffers) and normalises its [`Op`] into a message: a [`Class`] (data pushed to the target,
//! pulled from it, or an atomic), a length, where the data is read, where it lands and which
//! target segments are checked against the key. The doorbell then rings
//! `host.doorbell_latency` later at the message's engine ([`crate::engine`]).

use crate::cq::CqeStatus;
use crate::ids::{CqId, QpNum, Rank, RqId, Seg};
use crate::memory::MemoryError;
use crate::world::{NicStat, World, WorldEvent};
use hpcnet_des::SimTime;
use hpcnet_fabric::topology::NodeId;
use serde::Serialize;

/// An operation a NIC performs for its host.
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
        /// Increment the u64 at this target address, protected by this key, when the data has
        /// landed (reply word). A bad address or key refuses the whole write.
        reply_word: Option<(u64, u32)>,
    },
    /// RDMA read of `len` bytes from `remote` at the target into local `local`.
    Read {
        local: u64,
        len: u64,
        remote: u64,
        rkey: u32,
    },
    /// cHPP PUT with Chain-DMA lists: gather `local`, scatter into `remote` (totals must match).
    Put {
        local: Vec<Seg>,
        remote: Vec<Seg>,
        rkey: u32,
        notify_cq: Option<CqId>,
    },
    /// cHPP GET with Chain-DMA lists: gather `remote` at the target, scatter into `local`.
    Get {
        local: Vec<Seg>,
        remote: Vec<Seg>,
        rkey: u32,
    },
    /// cHPP NAP: `len` bytes from `local` to a buffer of the target's pool; the completion event
    /// goes to the pool's CQ. Immediate: the data travels inside the descriptor.
    Nap { local: u64, len: u64, immediate: bool },
    /// Asynchronous queue message (send/receive): `len` bytes from `local` land in the next
    /// buffer posted to receive queue `rq` of the target (a QP's own queue or a shared receive
    /// queue). Reliable: acknowledged, and a missing buffer is an error at the sender;
    /// unreliable: completes when sent, and a message finding no buffer is dropped (spec 01).
    Send {
        local: u64,
        len: u64,
        rq: RqId,
        reliable: bool,
    },
    /// Sunway FSM (fast short message): descriptor and data (gathered from `gather`, at most
    /// [`FSM_MAX`] bytes) are written by PIO into NIC memory, saving the descriptor fetch and the
    /// data read; then an RDMA write to `remote`.
    Fsm { gather: Vec<Seg>, remote: u64, rkey: u32 },
    /// Remote atomic on the little-endian integer of `width` bytes (4 or 8) at `remote`; the
    /// old value is written to local `result` (if given, `width` bytes) and reported in the
    /// completion.
    Atomic {
        op: AtomicOp,
        width: u8,
        remote: u64,
        rkey: u32,
        operand: u64,
        compare: u64,
        result: Option<u64>,
    },
}

/// Payload of a read / GET request packet: it carries the descriptor the target's engine
/// executes (cHPP: "the GET packet carries the descriptor").
pub const READ_REQUEST_BYTES: u64 = 32;

/// Largest FSM payload (spec 01).
pub const FSM_MAX: u64 = 128;

/// Remote atomic operations: add and xor (the NICEVT and Sunway hardware operations),
/// fetch-add and compare-swap, and the and / or / swap that OpenSHMEM atomics need. Every
/// operation returns the old value; "fetching" or not is the caller's choice of waiting for it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum AtomicOp {
    Add,
    Xor,
    FetchAdd,
    /// Write `operand` if the value equals `compare`.
    CompareSwap,
    And,
    Or,
    /// Write `operand` unconditionally (swap; set when the old value is not wanted).
    Swap,
}

impl AtomicOp {
    /// New value from old (returns None when compare-swap does not match).
    pub fn apply(self, old: u64, operand: u64, compare: u64) -> Option<u64> {
        match self {
            AtomicOp::Add | AtomicOp::FetchAdd => Some(old.wrapping_add(operand)),
            AtomicOp::Xor => Some(old ^ operand),
            AtomicOp::CompareSwap => (old == compare).then_some(operand),
            AtomicOp::And => Some(old & operand),
            AtomicOp::Or => Some(old | operand),
            AtomicOp::Swap => Some(operand),
        }
    }

    /// [`AtomicOp::apply`] on an integer of `width` bytes (4 or 8): operands, comparison and
    /// result are taken modulo 2^(8·width), so a 32-bit add wraps at 32 bits.
    pub fn apply_width(self, width: u8, old: u64, operand: u64, compare: u64) -> Option<u64> {
        let mask = if width >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * u32::from(width))) - 1
        };
        self.apply(old & mask, operand & mask, compare & mask).map(|v| v & mask)
    }
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
    /// Queue pair number; selects the engine (`qp % engines`).
    pub qp: QpNum,
    /// Rail for fixed port selection.
    pub rail: u8,
    /// PCIe function (0 = physical function, 1.. = virtual functions).
    pub function: u8,
    /// Sunway "fast" flag: the engine serves flagged messages before all others.
    pub fast: bool,
    /// Complete at the initiator as soon as the last packet has left (a local event), instead
    /// of when the target acknowledges that the data landed.
    pub local_completion: bool,
}

/// How a message moves data, normalised from its [`Op`] at post time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Data from the initiator to the target (write, PUT, NAP).
    Push,
    /// A request to the target, data back (read, GET).
    Pull,
    /// A request carrying operands, the old value back.
    Atomic,
}

/// A message in the NIC: the request and its normalised form, with the state the engine and
/// receive stages keep about it.
#[derive(Clone, Debug)]
pub(crate) struct Msg {
    pub(crate) req: Request,
    pub(crate) class: Class,
    /// Bytes to move.
    pub(crate) len: u64,
    /// Where the data is read, on the node that sends it.
    pub(crate) src_segs: Vec<Seg>,
    /// Where it lands, on the node that receives it (for a NAP: set on arrival).
    pub(crate) dst_segs: Vec<Seg>,
    /// Segments to check against `rkey` at the target (its memory).
    pub(crate) remote_segs: Vec<Seg>,
    pub(crate) rkey: u32,
    /// Bytes being moved (copied from the source when the engine starts).
    pub(crate) data: Vec<u8>,
    pub(crate) landed: u64,
    pub(crate) status: CqeStatus,
    pub(crate) checked: bool,
    /// This message is the write-back of pull message `of`.
    pub(crate) r2w_of: Option<u32>,
    /// Receive-buffer space its request packet holds until the engine takes it (R2W).
    pub(crate) held: Option<(NodeId, u8, (u8, u16, u16))>,
    /// Target-side record of a message the sender completed when it was sent (unreliable queue
    /// message, or local completion).
    pub(crate) unreliable_copy: bool,
    /// Receive buffer's wr_id (queue messages), set when a buffer is taken.
    pub(crate) recv_wr: u64,
    pub(crate) engine: u32,
    /// Covered by the transport's reliability (`[nic.reliability]`): timed out, probed, sent
    /// again and de-duplicated ([`crate::reliability`]).
    pub(crate) reliable: bool,
    /// Packets of this message made and not yet consumed (landed, discarded or lost): a
    /// target-side record (a write-back, the copy of a message completed when sent) is released
    /// when the last one is.
    pub(crate) pending: u32,
    /// The reliability unit's state of the message.
    pub(crate) rel: RelMsg,
}

/// The reliability unit's record of one message ([`crate::reliability`]). The initiator's and
/// the target's views of a message share one record in this model; each side reads only its
/// own fields.
#[derive(Clone, Debug, Default)]
pub(crate) struct RelMsg {
    /// Initiator: timeouts without progress so far.
    pub(crate) attempt: u8,
    /// Initiator: the armed timer's tag (a timer whose tag differs is stale).
    pub(crate) tag: u32,
    /// Receiver: bit k set when packet k has arrived (empty until the first arrival).
    pub(crate) got: Vec<u64>,
    /// Target: the message has completed here (landed, or an atomic applied).
    pub(crate) done: bool,
    /// Target: an atomic's old value, answered again to a repeated request.
    pub(crate) old: u64,
    /// Target: the last attempt whose duplicate was acknowledged again (queue messages).
    pub(crate) acked_attempt: u8,
    /// Reliable queue message: its sliding window and sequence number.
    pub(crate) win: Option<(u32, u32)>,
    /// Receiver: the queue message was admitted by its window (in sequence).
    pub(crate) admitted: bool,
    /// Target of a read: its write-back is queued (`SimTime::MAX`) or being sent until then.
    pub(crate) writeback: Option<SimTime>,
    /// Write-back: generation of the read it serves.
    pub(crate) pull_gen: u32,
    /// Copy of an unreliable message: one of its packets was lost.
    pub(crate) lost: bool,
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
    #[error("Chain-DMA lists move {local} bytes locally but {remote} bytes remotely; the totals must match")]
    LengthMismatch { local: u64, remote: u64 },
    #[error("NAP pool buffers must be aligned to their {size} bytes (spec 02), got address {addr:#x}")]
    NapPoolAlignment { addr: u64, size: u64 },
    #[error("a NAP carries at most {max} bytes, asked for {len}")]
    NapTooLarge { len: u64, max: u64 },
    #[error("receive queue {0} does not exist at the target")]
    BadRq(RqId),
    #[error("an FSM carries at most {FSM_MAX} bytes, asked for {0}")]
    FsmTooLarge(u64),
    #[error("atomics operate on 4- or 8-byte integers, asked for {0} bytes")]
    AtomicWidth(u8),
    #[error("an atomic on {width}-byte integers needs an address aligned to {width} bytes, got {addr:#x}")]
    AtomicAlignment { addr: u64, width: u8 },
    #[error("function {function} does not exist (the NIC has {functions})")]
    NoSuchFunction { function: u8, functions: u32 },
    #[error("the doorbell FIFO of function {function} is full ({depth} messages outstanding)")]
    DoorbellFifoFull { function: u8, depth: u32 },
    #[error("collective group {0} does not exist")]
    NoSuchGroup(u32),
    #[error("rank {rank} is not a member of collective group {group}")]
    NotMember { rank: Rank, group: u32 },
    #[error("collective: {0}")]
    BadCollective(String),
    #[error("this NIC model has no hardware collective unit")]
    NoCollectiveUnit,
    #[error(
        "this NIC model has no triggered offload unit (the packet-level NIC gets one from a [nic.triggered] section)"
    )]
    NoOffloadUnit,
    #[error("virtual port {vp} is not open for rank {rank}")]
    NoSuchVp { vp: u32, rank: Rank },
    #[error("point-to-point descriptor: {0}")]
    BadP2p(String),
    /// A NIC model that does not implement this operation (e.g. the flow-level model).
    #[error("{op} is not supported by the {model} model")]
    Unsupported { op: &'static str, model: &'static str },
}

impl World {
    /// Hand a request to the NIC of `req.src` (the doorbell rings now).
    pub fn post(&mut self, req: Request) -> Result<(), PostError> {
        let n = self.ranks() as u32;
        for r in [req.src, req.dst] {
            if r.0 >= n {
                return Err(PostError::NoSuchRank(r));
            }
        }
        if !self.cq_owned_by(req.cq, req.src) {
            return Err(PostError::BadCq(req.cq));
        }
        let rails = self.net.rails();
        if req.rail >= rails {
            return Err(PostError::BadRail { rail: req.rail, rails });
        }
        if req.function as u32 >= self.cfg.functions {
            return Err(PostError::NoSuchFunction {
                function: req.function,
                functions: self.cfg.functions,
            });
        }
        let depth = self.cfg.doorbell_fifo;
        if depth > 0 && self.nic_of(req.src).outstanding[req.function as usize] >= depth {
            return Err(PostError::DoorbellFifoFull {
                function: req.function,
                depth,
            });
        }
        let total = |segs: &[Seg]| segs.iter().map(|s| s.1).sum::<u64>();
        // Normalise: class, length, source / landing / checked segments.
        let (class, len, src_segs, dst_segs, remote_segs, rkey) = match &req.op {
            Op::Write {
                local,
                len,
                remote,
                rkey,
                notify_cq,
                ..
            } => {
                self.check_cq_of(*notify_cq, req.dst)?;
                (
                    Class::Push,
                    *len,
                    self.segs(&[(*local, *len)]),
                    self.segs(&[(*remote, *len)]),
                    self.segs(&[(*remote, *len)]),
                    *rkey,
                )
            }
            Op::Put {
                local,
                remote,
                rkey,
                notify_cq,
            } => {
                self.check_cq_of(*notify_cq, req.dst)?;
                let (l, r) = (total(local), total(remote));
                if l != r {
                    return Err(PostError::LengthMismatch { local: l, remote: r });
                }
                (
                    Class::Push,
                    l,
                    self.segs(local),
                    self.segs(remote),
                    self.segs(remote),
                    *rkey,
                )
            }
            Op::Read {
                local,
                len,
                remote,
                rkey,
            } => (
                Class::Pull,
                *len,
                self.segs(&[(*remote, *len)]),
                self.segs(&[(*local, *len)]),
                self.segs(&[(*remote, *len)]),
                *rkey,
            ),
            Op::Get { local, remote, rkey } => {
                let (l, r) = (total(local), total(remote));
                if l != r {
                    return Err(PostError::LengthMismatch { local: l, remote: r });
                }
                (
                    Class::Pull,
                    l,
                    self.segs(remote),
                    self.segs(local),
                    self.segs(remote),
                    *rkey,
                )
            }
            Op::Nap { local, len, .. } => {
                let max = self.cfg.nap_buffer.0;
                if *len > max {
                    return Err(PostError::NapTooLarge { len: *len, max });
                }
                (
                    Class::Push,
                    *len,
                    self.segs(&[(*local, *len)]),
                    Vec::new(),
                    Vec::new(),
                    0,
                )
            }
            Op::Send { local, len, rq, .. } => {
                if self.rqs.get(rq.index()).map(|r| r.owner) != Some(req.dst) {
                    return Err(PostError::BadRq(*rq));
                }
                (
                    Class::Push,
                    *len,
                    self.segs(&[(*local, *len)]),
                    Vec::new(),
                    Vec::new(),
                    0,
                )
            }
            Op::Fsm { gather, remote, rkey } => {
                let l = total(gather);
                if l > FSM_MAX {
                    return Err(PostError::FsmTooLarge(l));
                }
                (
                    Class::Push,
                    l,
                    self.segs(gather),
                    self.segs(&[(*remote, l)]),
                    self.segs(&[(*remote, l)]),
                    *rkey,
                )
            }
            Op::Atomic {
                remote,
                rkey,
                result,
                width,
                ..
            } => {
                if *width != 4 && *width != 8 {
                    return Err(PostError::AtomicWidth(*width));
                }
                let w = u64::from(*width);
                if !remote.is_multiple_of(w) {
                    return Err(PostError::AtomicAlignment {
                        addr: *remote,
                        width: *width,
                    });
                }
                let local = result.map(|a| self.segs(&[(a, w)])).unwrap_or_default();
                // The target checks the one word in the operation itself ([`World::accept`]): no
                // segment list to allocate per atomic.
                (Class::Atomic, w, Vec::new(), local, Vec::new(), *rkey)
            }
        };
        // The initiator's own buffers must be registered.
        let local_segs = if class == Class::Push { &src_segs } else { &dst_segs };
        // (an atomic's local segment is its optional result buffer)
        for &(a, l) in local_segs {
            self.mem[req.src.index()].check_local(a, l).map_err(PostError::Local)?;
        }
        let engine = req.qp.0 % self.cfg.engines;
        let reliable = self.rel.on && !matches!(req.op, Op::Send { reliable: false, .. });
        let src = req.src;
        self.nic_of(src).outstanding[req.function as usize] += 1;
        if class != Class::Push {
            self.reads_outstanding[src.index()] += 1;
        }
        let id = self.alloc_msg(Msg {
            req,
            class,
            len,
            src_segs,
            dst_segs,
            remote_segs,
            rkey,
            data: Vec::new(),
            landed: 0,
            status: CqeStatus::Ok,
            checked: false,
            r2w_of: None,
            held: None,
            unreliable_copy: false,
            recv_wr: 0,
            engine,
            reliable,
            pending: 0,
            rel: RelMsg::default(),
        });
        self.stats.add(NicStat::Messages, 1);
        let t = self.q.now() + self.cfg.host.doorbell_latency;
        let by = self.net.node_origin(self.place.node_of(src));
        self.q.schedule_by(by, t, WorldEvent::Doorbell { msg: id });
        Ok(())
    }

    pub(crate) fn check_cq_of(&self, cq: Option<CqId>, owner: Rank) -> Result<(), PostError> {
        match cq {
            Some(c) if !self.cq_owned_by(c, owner) => Err(PostError::BadCq(c)),
            _ => Ok(()),
        }
    }

    /// Engine processing time of a message's operation.
    pub(crate) fn overhead(&self, op: &Op) -> SimTime {
        let c = &self.cfg;
        match op {
            Op::Nap { .. } => c.nap_overhead.unwrap_or(c.message_overhead),
            Op::Read { .. } | Op::Get { .. } => c.get_overhead.unwrap_or(c.message_overhead),
            _ => c.message_overhead,
        }
    }

    /// A segment list holding `segs` (from the pool when it can).
    pub(crate) fn segs(&mut self, segs: &[Seg]) -> Vec<Seg> {
        let mut v = self.seg_pool.pop().unwrap_or_default();
        v.extend_from_slice(segs);
        v
    }
}
