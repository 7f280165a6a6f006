//! Collective descriptors and the sequence walker of an offload unit (spec 04, "Collective
//! descriptor fields" and "Order-preserving triggering").
//!
//! This module owns what a collective descriptor says ([`CollDescriptor`], every field of the
//! spec), which descriptor sequences are well formed, and what a unit does when it walks one
//! ([`Walker`]): a pure state machine with no time, no buffer and no network. The unit around
//! it reads the packets the walker names from its hash buffer, hands them over in any order,
//! and carries out the actions the walker returns (send a packet, write a completion).
//!
//! **Fields.** C (collective), CH (first of a sequence), CT (last), CP (the sent packet
//! triggers a step at its destination), CPCount, SwapLocalData, SwapLocalVP, SwapRemoteData,
//! SwapRemoteAddr, ReduceFlag, CollEndFlag, DestID, SourceVP, DestVP and the payload (operands,
//! or address + length). The spec gives CPCount two roles — the step's number, compared with
//! the SeqID of incoming packets, and how many packets the step waits for. The model keeps
//! them apart: `cp_count` is the number of packets, `seq_id` the SeqID they carry, so one step
//! can wait for several packets of one stage (a binomial-tree parent with several children).
//! Because a key names its sender (NodeID + VP), a step also lists its senders (`wait_from`),
//! in the order it combines them; `send_seq` is the SeqID stamped on the packet the step sends
//! and `job` the JobID of the whole sequence. Algorithms that halve the vector (recursive
//! halving, Rabenseifner) need a step to send or combine part of the intermediate buffer; the
//! spec's payload address + length does this in the hardware, the model adds `send_part` and
//! `recv_part` (offset and length in the intermediate buffer). Field widths follow the packet key: JobID 8 bits,
//! NodeID/DestID 24, VPs 11, SeqIDs and CPCount 5.
//!
//! **C and CP.** A sequence holds collective descriptors only (C = 1); a point-to-point
//! descriptor (C = 0: an MP or RDMA descriptor writing data to a remote address) is its own
//! post on a VP ([`super::timed::TrigP2p`]) and never enters a unit. CP is read where a packet
//! arrives: a CP = 1 packet is handed to the units (it triggers a step there), a CP = 0 packet
//! is written to host memory at the address it carries. In a sequence CP and DestID go
//! together: a step that sends must set CP (a collective packet that triggered nothing would
//! be data no step reads) and CP without DestID is refused too, so the only CP = 0 packets are
//! point-to-point ones.
//!
//! **Firing a step.** The walker's current descriptor expects `cp_count` packets, keys
//! `(job, sender node, sender VP, seq_id)`. When all are in (whatever their order of arrival)
//! it fires, in this order, on the unit's intermediate-result buffer `work`:
//! 1. SwapLocalData: `work` ← the descriptor's local data (operands, or the bytes at address
//!    + length, read through the caller);
//! 2. SwapRemoteData: `work` (or its receive part) ← the data of the first listed packet
//!    (forwarding, broadcast, allgather);
//! 3. ReduceFlag: `work` (or its receive part) ← `((work ∘ p₁) ∘ p₂) ∘ …` in `wait_from` order
//!    (`work` empty: start from p₁) — a fixed combine order, so floating-point results are
//!    bit-identical whatever the arrival order;
//! 4. SwapLocalVP: the sent packet's source VP is the first packet's VP instead of SourceVP;
//!    SwapRemoteAddr: the sent packet carries the address the first packet carried instead of
//!    the descriptor's payload address;
//! 5. DestID set: send `work` (or its send part) to (DestID, DestVP) with SeqID `send_seq` and the CP and
//!    CollEndFlag bits;
//! 6. CollEndFlag: the collective is complete at this unit — a completion carrying `work`
//!    (and the payload address, where the host's result goes).
//!
//! Then the walker moves to the next descriptor; after CT the sequence is done.
//!
//! **Shapes and walks.** [`Shape::new`] checks a sequence once; a [`Walker`] walks a shape
//! with its own JobID, address shift and local data ([`Walker::start`]), so the pulses that
//! repeat one sequence over a long vector share its checked descriptors and keys (a key of a
//! walk is the shape's with the walk's JobID, [`PacketKey::with_job`]).
//!
//! Simplifications: no timing here (the walker counts the steps it fired and the bytes it
//! reduced, [`Walker::work`]; [`super::timed`] charges them on the unit's reduction pipeline
//! and charges the descriptor fetch); data are whole packets (no segmentation of a step's
//! data).
//!
//! Cost: O(d log d) to check a sequence of d descriptors and keys (once per shape),
//! O(keys of the first step) to start a walk, O(cp_count) per step to track packets,
//! O(bytes) per reduction.

use super::key::{check_width, KeyError, PacketKey, JOB_BITS, NODE_BITS, SEQ_BITS, VP_BITS};
use crate::coll::{reduce_into, CollOp, CollType};
use std::sync::Arc;

/// Data of a descriptor: operands carried in it (MP), or where they are in host memory (RDMA).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    Operands(Vec<u8>),
    Address { addr: u64, len: u64 },
}

/// A sender a step waits for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Source {
    pub node: u32,
    pub vp: u32,
}

/// A collective descriptor.
#[derive(Clone, Debug, PartialEq)]
pub struct CollDescriptor {
    /// C: a collective descriptor (0 would be point-to-point).
    pub c: bool,
    /// CH: first of its sequence.
    pub ch: bool,
    /// CT: last of its sequence.
    pub ct: bool,
    /// CP: the packet this step sends triggers a step at its destination.
    pub cp: bool,
    /// CPCount: packets this step waits for (5 bits).
    pub cp_count: u32,
    /// SeqID of the packets this step waits for (5 bits).
    pub seq_id: u32,
    /// Their senders, in combine order (`cp_count` of them).
    pub wait_from: Vec<Source>,
    pub swap_local_data: bool,
    pub swap_local_vp: bool,
    pub swap_remote_data: bool,
    pub swap_remote_addr: bool,
    pub reduce_flag: bool,
    pub coll_end_flag: bool,
    /// JobID (8 bits).
    pub job: u32,
    /// DestID: node the step sends to (24 bits); `None`: the step sends nothing.
    pub dest_id: Option<u32>,
    /// SeqID of the sent packet (5 bits).
    pub send_seq: u32,
    /// SourceVP and DestVP (11 bits each).
    pub source_vp: u32,
    pub dest_vp: u32,
    pub payload: Payload,
    /// Element type and operator of ReduceFlag.
    pub dtype: CollType,
    pub op: CollOp,
    /// Model addition: the bytes of the intermediate buffer (offset, length) the step sends;
    /// `None`: all of it.
    pub send_part: Option<(u64, u64)>,
    /// Model addition: where in the intermediate buffer (offset, length) received data are
    /// reduced into (ReduceFlag) or copied to (SwapRemoteData); `None`: the whole buffer.
    pub recv_part: Option<(u64, u64)>,
}

impl CollDescriptor {
    /// A collective descriptor of job `job` with every flag clear, no wait, no send and no
    /// data; set the fields a step needs.
    pub fn new(job: u32, dtype: CollType, op: CollOp) -> Self {
        CollDescriptor {
            c: true,
            ch: false,
            ct: false,
            cp: false,
            cp_count: 0,
            seq_id: 0,
            wait_from: Vec::new(),
            swap_local_data: false,
            swap_local_vp: false,
            swap_remote_data: false,
            swap_remote_addr: false,
            reduce_flag: false,
            coll_end_flag: false,
            job,
            dest_id: None,
            send_seq: 0,
            source_vp: 0,
            dest_vp: 0,
            payload: Payload::Operands(Vec::new()),
            dtype,
            op,
            send_part: None,
            recv_part: None,
        }
    }

    /// Wait for one packet of SeqID `seq` from each of `from`, in this combine order.
    pub fn wait(mut self, seq: u32, from: &[Source]) -> Self {
        self.seq_id = seq;
        self.cp_count = from.len() as u32;
        self.wait_from = from.to_vec();
        self
    }

    /// Send to `(node, vp)` with SeqID `seq`, triggering a step there (CP).
    pub fn send(mut self, node: u32, vp: u32, seq: u32) -> Self {
        self.dest_id = Some(node);
        self.dest_vp = vp;
        self.send_seq = seq;
        self.cp = true;
        self
    }

    /// The keys of the packets this step waits for, in combine order.
    pub fn expected_keys(&self) -> Result<Vec<PacketKey>, KeyError> {
        self.wait_from
            .iter()
            .map(|s| PacketKey::new(self.job, s.node, s.vp, self.seq_id))
            .collect()
    }

    fn validate(&self, index: usize) -> Result<(), DescError> {
        let bad = |reason: String| DescError::Invalid { index, reason };
        let width = |field, bits, value: u32| {
            check_width(field, bits, value.into()).map_err(|source| DescError::Field { index, source })
        };
        if !self.c {
            return Err(bad(
                "C = 0 (a point-to-point descriptor) inside a collective sequence".into()
            ));
        }
        width("JobID", JOB_BITS, self.job)?;
        width("CPCount", SEQ_BITS, self.cp_count)?;
        width("SeqID", SEQ_BITS, self.seq_id)?;
        width("send SeqID", SEQ_BITS, self.send_seq)?;
        width("SourceVP", VP_BITS, self.source_vp)?;
        width("DestVP", VP_BITS, self.dest_vp)?;
        if let Some(d) = self.dest_id {
            width("DestID", NODE_BITS, d)?;
        }
        for s in &self.wait_from {
            width("sender NodeID", NODE_BITS, s.node)?;
            width("sender VP", VP_BITS, s.vp)?;
        }
        match (self.dest_id.is_some(), self.cp) {
            (true, false) => {
                return Err(bad(
                    "DestID set with CP = 0: a collective step's packet triggers a step at its destination \
                     (data for host memory go in a point-to-point descriptor, C = 0)"
                        .into(),
                ))
            }
            (false, true) => return Err(bad("CP = 1 but the step sends nothing (no DestID)".into())),
            _ => {}
        }
        if self.cp_count as usize != self.wait_from.len() {
            return Err(bad(format!(
                "CPCount = {} but {} senders listed",
                self.cp_count,
                self.wait_from.len()
            )));
        }
        let mut senders = self.wait_from.clone();
        senders.sort();
        if senders.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("a sender is listed twice (its packets would share one key)".into()));
        }
        let needs_packet = [
            (self.swap_remote_data, "SwapRemoteData"),
            (self.swap_local_vp, "SwapLocalVP"),
            (self.swap_remote_addr, "SwapRemoteAddr"),
            (self.reduce_flag, "ReduceFlag"),
        ];
        for (on, name) in needs_packet {
            if on && self.cp_count == 0 {
                return Err(bad(format!("{name} needs a received packet but CPCount = 0")));
            }
        }
        if self.recv_part.is_some() && !self.reduce_flag && !self.swap_remote_data {
            return Err(bad("a receive part without ReduceFlag or SwapRemoteData".into()));
        }
        if self.swap_remote_data && self.reduce_flag {
            return Err(bad("SwapRemoteData and ReduceFlag both set".into()));
        }
        if self.reduce_flag && self.dtype.is_float() && matches!(self.op, CollOp::Band | CollOp::Bor | CollOp::Bxor) {
            return Err(bad(format!("bitwise {:?} on floating-point {:?}", self.op, self.dtype)));
        }
        let len = match &self.payload {
            Payload::Operands(v) => v.len() as u64,
            Payload::Address { len, .. } => *len,
        };
        if self.reduce_flag && len % self.dtype.size() != 0 {
            return Err(bad(format!(
                "payload of {len} bytes is not whole {:?} elements of {} bytes",
                self.dtype,
                self.dtype.size()
            )));
        }
        Ok(())
    }
}

/// A malformed descriptor or sequence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescError {
    #[error("descriptor {index}: {source}")]
    Field { index: usize, source: KeyError },
    #[error("descriptor {index}: {reason}")]
    Invalid { index: usize, reason: String },
    #[error("sequence: {0}")]
    Sequence(String),
}

/// A collective packet on the wire between units.
#[derive(Clone, Debug, PartialEq)]
pub struct TrigPacket {
    /// JobID + sending node + source VP + SeqID.
    pub key: PacketKey,
    /// Destination node and VP.
    pub dest: u32,
    pub dest_vp: u32,
    /// CP: triggers a step at the destination.
    pub cp: bool,
    /// CollEndFlag of the step that sent it.
    pub end: bool,
    /// Address carried (RDMA payload or a rendezvous address).
    pub addr: Option<u64>,
    pub data: Vec<u8>,
}

/// What the unit must do after a step fires.
#[derive(Clone, Debug, PartialEq)]
pub enum TrigAction {
    Send(TrigPacket),
    /// The collective is complete here: write a completion (and `data` to `addr`, if any).
    Complete {
        job: u32,
        data: Vec<u8>,
        addr: Option<u64>,
    },
}

/// A walk that cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error("{0:?} is not awaited by the current step")]
    Unexpected(PacketKey),
    #[error("{0:?} delivered twice")]
    Duplicate(PacketKey),
    #[error("descriptor {index}: reducing {got} bytes into {have} bytes")]
    LengthMismatch { index: usize, have: usize, got: usize },
    #[error("descriptor {index}: part {offset}+{len} outside the {have}-byte intermediate buffer")]
    PartOutside {
        index: usize,
        offset: u64,
        len: u64,
        have: usize,
    },
    #[error("the sequence is finished")]
    Finished,
}

/// Most buffers a [`BufPool`] keeps.
pub const POOL_BUFFERS: usize = 256;

/// Buffers of packet data kept for reuse: a walk takes one for each packet it sends and gives
/// back the data of the packets it consumed, so the packets of a unit's steady stream of
/// pulses reuse a few buffers instead of an allocation and a free each. At most
/// [`POOL_BUFFERS`] are kept; data are copied, never shared, so reuse changes no result.
#[derive(Debug, Default)]
pub struct BufPool {
    free: Vec<Vec<u8>>,
}

impl BufPool {
    /// A buffer holding a copy of `data`.
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        match self.free.pop() {
            Some(mut v) if v.capacity() >= data.len() => {
                v.clear();
                v.extend_from_slice(data);
                v
            }
            _ => data.to_vec(),
        }
    }

    /// Keep `v` for reuse (if it holds memory and the pool is not full).
    pub fn give(&mut self, v: Vec<u8>) {
        if v.capacity() > 0 && self.free.len() < POOL_BUFFERS {
            self.free.push(v);
        }
    }

    /// Buffers kept.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Whether no buffer is kept.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }
}

/// A checked descriptor sequence (CH … CT) at one node: what every walk of it shares. Built
/// once ([`Shape::new`] checks every field, flag and key); the pulses that repeat one
/// sequence over successive elements walk one shape, each with its own JobID, address shift
/// and local data ([`Walker::start`]), so a pulse costs no re-validation, no sort of its keys
/// and no copy of its descriptors.
#[derive(Debug)]
pub struct Shape {
    node: u32,
    seq: Vec<CollDescriptor>,
    /// Keys awaited by every descriptor, in combine order, one after the other (with the
    /// sequence's JobID); descriptor `i`'s are `keys[starts[i]..starts[i + 1]]`.
    keys: Vec<PacketKey>,
    starts: Vec<usize>,
    /// Distinct senders of the whole sequence (the streams it takes on a unit).
    senders: usize,
}

impl Shape {
    /// Check `seq` for node `node` (its NodeID goes into the keys of the packets it sends).
    /// Cost O(d log d) for d descriptors and keys.
    pub fn new(node: u32, seq: Vec<CollDescriptor>) -> Result<Self, DescError> {
        check_width("NodeID", NODE_BITS, node.into()).map_err(|source| DescError::Field { index: 0, source })?;
        let n = seq.len();
        if n == 0 {
            return Err(DescError::Sequence("empty".into()));
        }
        for (i, d) in seq.iter().enumerate() {
            d.validate(i)?;
            if d.ch != (i == 0) {
                return Err(DescError::Invalid {
                    index: i,
                    reason: if i == 0 {
                        "first descriptor without CH".into()
                    } else {
                        "CH inside the sequence".into()
                    },
                });
            }
            if d.ct != (i == n - 1) {
                return Err(DescError::Invalid {
                    index: i,
                    reason: if i == n - 1 {
                        "last descriptor without CT".into()
                    } else {
                        "CT before the end".into()
                    },
                });
            }
            if d.job != seq[0].job {
                return Err(DescError::Invalid {
                    index: i,
                    reason: format!("JobID {} differs from the sequence's {}", d.job, seq[0].job),
                });
            }
        }
        let ends = seq.iter().filter(|d| d.coll_end_flag).count();
        if ends != 1 {
            return Err(DescError::Sequence(format!(
                "{ends} descriptors with CollEndFlag, need exactly 1"
            )));
        }
        let mut keys = Vec::new();
        let mut starts = Vec::with_capacity(n + 1);
        for (i, d) in seq.iter().enumerate() {
            starts.push(keys.len());
            for s in &d.wait_from {
                keys.push(
                    PacketKey::new(d.job, s.node, s.vp, d.seq_id)
                        .map_err(|source| DescError::Field { index: i, source })?,
                );
            }
        }
        starts.push(keys.len());
        let mut all = keys.clone();
        all.sort_unstable();
        if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
            return Err(DescError::Sequence(format!("{:?} awaited by two steps", w[0])));
        }
        let mut senders: Vec<Source> = seq.iter().flat_map(|d| d.wait_from.iter().copied()).collect();
        senders.sort_unstable();
        senders.dedup();
        Ok(Shape {
            node,
            seq,
            keys,
            starts,
            senders: senders.len(),
        })
    }

    /// The descriptors, as checked.
    pub fn descriptors(&self) -> &[CollDescriptor] {
        &self.seq
    }

    /// JobID of the sequence as checked.
    pub fn job(&self) -> u32 {
        self.seq[0].job
    }

    /// Distinct senders of the sequence.
    pub fn senders(&self) -> usize {
        self.senders
    }
}

/// Packets a step holds in the walker itself; more go to a vector kept from step to step.
/// The offloaded allreduce's steps wait for one or two.
const INLINE_PACKETS: usize = 2;

/// The packets delivered for a walker's current step, by position in combine order: the
/// first [`INLINE_PACKETS`] places inline, so a walk of small steps allocates nothing for
/// them; a bit per place marks a packet delivered (a step awaits at most 31: CPCount has
/// [`SEQ_BITS`] bits). A place not marked holds a stale packet with no data.
#[derive(Clone, Debug)]
struct StepPackets {
    n: usize,
    have: u64,
    inline: [TrigPacket; INLINE_PACKETS],
    spill: Vec<TrigPacket>,
}

fn no_packet() -> TrigPacket {
    TrigPacket {
        key: PacketKey::ZERO,
        dest: 0,
        dest_vp: 0,
        cp: false,
        end: false,
        addr: None,
        data: Vec::new(),
    }
}

impl Default for StepPackets {
    fn default() -> Self {
        StepPackets {
            n: 0,
            have: 0,
            inline: std::array::from_fn(|_| no_packet()),
            spill: Vec::new(),
        }
    }
}

impl StepPackets {
    /// Places for a step of `n` packets, none delivered.
    fn reset(&mut self, n: usize) {
        debug_assert!(n < 64, "a step awaits at most 31 packets");
        self.n = n;
        self.have = 0;
        if n > INLINE_PACKETS {
            self.spill.clear();
            self.spill.resize_with(n, no_packet);
        }
    }

    fn has(&self, i: usize) -> bool {
        self.have >> i & 1 == 1
    }

    /// Every place holds its packet.
    fn complete(&self) -> bool {
        self.have == (1u64 << self.n) - 1
    }

    fn put(&mut self, i: usize, p: TrigPacket) {
        self.have |= 1 << i;
        self.packets_mut()[i] = p;
    }

    /// The step's places, in combine order.
    fn packets_mut(&mut self) -> &mut [TrigPacket] {
        if self.n <= INLINE_PACKETS {
            &mut self.inline[..self.n]
        } else {
            &mut self.spill[..self.n]
        }
    }
}

/// Walks one descriptor sequence (CH … CT) at one node.
#[derive(Clone, Debug)]
pub struct Walker {
    shape: Arc<Shape>,
    /// This walk's JobID (the shape's keys carry the shape's; only the JobID field differs)
    /// and the shift of its address payloads.
    job: u32,
    shift: u64,
    /// Local data given for descriptors (index, bytes): taken when the descriptor fires,
    /// instead of its payload.
    locals: Vec<(usize, Vec<u8>)>,
    pc: usize,
    /// Where the current step's keys start in the shape's (they are those keys with this
    /// walk's JobID), and the packets delivered for them.
    key0: usize,
    got: StepPackets,
    work: Vec<u8>,
    /// Steps fired so far and operand bytes reduced per type (F32, F64, I32, I64): what a
    /// timed unit charges.
    fired: u64,
    reduced: [u64; 4],
}

/// Work a walker or a unit has done: steps fired and operand bytes reduced per type.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Work {
    pub steps: u64,
    /// Bytes reduced, indexed F32, F64, I32, I64.
    pub reduced: [u64; 4],
}

impl Work {
    /// `self − before`.
    pub fn since(&self, before: &Work) -> Work {
        Work {
            steps: self.steps - before.steps,
            reduced: std::array::from_fn(|i| self.reduced[i] - before.reduced[i]),
        }
    }
}

fn type_index(t: CollType) -> usize {
    match t {
        CollType::F32 => 0,
        CollType::F64 => 1,
        CollType::I32 => 2,
        CollType::I64 => 3,
    }
}

impl Walker {
    /// Check `seq` and start at its first descriptor; `node` is the unit's node (its NodeID
    /// goes into the keys of the packets it sends).
    pub fn new(node: u32, seq: Vec<CollDescriptor>) -> Result<Self, DescError> {
        let mut shape = Shape::new(node, seq)?;
        // The descriptors' own operands move into the walk's local data: a descriptor fires
        // once, so they are not copied.
        let mut locals = Vec::new();
        for (i, d) in shape.seq.iter_mut().enumerate() {
            if let (true, Payload::Operands(v)) = (d.swap_local_data, &mut d.payload) {
                locals.push((i, std::mem::take(v)));
            }
        }
        let job = shape.job();
        Ok(Walker::start(Arc::new(shape), job, 0, locals))
    }

    /// Walk a checked sequence as JobID `job` (0 … 255; every key the walk awaits or sends
    /// carries it), its address payloads moved by `shift` bytes, with `locals` (descriptor
    /// index, bytes) as the local data of those descriptors (they replace the payload, as
    /// operands read into the descriptor: its step then names no payload address). The shape's keys are distinct,
    /// so are this walk's (they differ from them in the JobID field alone). Cost O(keys of
    /// the first step).
    pub fn start(shape: Arc<Shape>, job: u32, shift: u64, locals: Vec<(usize, Vec<u8>)>) -> Self {
        debug_assert!(job < 1 << JOB_BITS, "JobID {job} does not fit its field");
        debug_assert!(locals
            .iter()
            .all(|(i, _)| shape.seq.get(*i).is_some_and(|d| d.swap_local_data)));
        #[cfg(debug_assertions)]
        {
            // The walk is the sequence with its JobID and addresses changed: checked whole, it
            // passes and awaits the keys the walk derives from the shape's.
            let seq = shape
                .seq
                .iter()
                .map(|d| {
                    let mut d = d.clone();
                    d.job = job;
                    if let Payload::Address { addr, .. } = &mut d.payload {
                        *addr += shift;
                    }
                    d
                })
                .collect();
            let again = Shape::new(shape.node, seq).expect("a walk of a checked shape is a valid sequence");
            debug_assert!(again.keys.iter().zip(&shape.keys).all(|(a, b)| *a == b.with_job(job)));
        }
        let mut w = Walker {
            shape,
            job,
            shift,
            locals,
            pc: 0,
            key0: 0,
            got: StepPackets::default(),
            work: Vec::new(),
            fired: 0,
            reduced: [0; 4],
        };
        w.load_step();
        w
    }

    /// Place the current step's keys and clear its packets.
    fn load_step(&mut self) {
        let (a, b) = match (self.shape.starts.get(self.pc), self.shape.starts.get(self.pc + 1)) {
            (Some(&a), Some(&b)) => (a, b),
            _ => (0, 0),
        };
        self.key0 = a;
        self.got.reset(b - a);
    }

    /// Key `i` of the current step (`i` below its count), with this walk's JobID.
    #[inline]
    fn key(&self, i: usize) -> PacketKey {
        self.shape.keys[self.key0 + i].with_job(self.job)
    }

    /// The checked sequence this walk follows.
    pub fn shape(&self) -> &Arc<Shape> {
        &self.shape
    }

    /// This walk's JobID.
    pub fn job(&self) -> u32 {
        self.job
    }

    /// Steps fired and bytes reduced so far.
    pub fn work(&self) -> Work {
        Work {
            steps: self.fired,
            reduced: self.reduced,
        }
    }

    /// The sequence is finished (CT fired).
    pub fn is_done(&self) -> bool {
        self.pc == self.shape.seq.len()
    }

    /// The current step has every packet it awaits: [`Walker::advance`] fires it.
    pub fn ready(&self) -> bool {
        !self.is_done() && self.got.complete()
    }

    /// Index of the current descriptor.
    pub fn step(&self) -> usize {
        self.pc
    }

    /// Keys the current step waits for, in combine order (empty when done).
    pub fn expected(&self) -> Vec<PacketKey> {
        (0..self.got.n).map(|i| self.key(i)).collect()
    }

    /// How many keys the current step waits for (0 when done).
    pub fn expected_len(&self) -> usize {
        self.got.n
    }

    /// Keys of the current step not delivered yet.
    pub fn missing(&self) -> Vec<PacketKey> {
        (0..self.got.n).filter_map(|i| self.missing_key(i)).collect()
    }

    /// Key `i` of the current step (combine order), if its packet is not delivered yet; an
    /// allocation-free [`Walker::missing`] for the units' pump loop.
    pub fn missing_key(&self, i: usize) -> Option<PacketKey> {
        (i < self.got.n && !self.got.has(i)).then(|| self.key(i))
    }

    /// Keys the walk still needs: those of the current step not delivered yet and every key
    /// of the later steps (what a cancelled sequence leaves behind in a buffer).
    pub fn remaining_keys(&self) -> impl Iterator<Item = PacketKey> + '_ {
        let job = self.job;
        let here = (0..self.got.n).filter_map(|i| self.missing_key(i));
        let from = self
            .shape
            .starts
            .get(self.pc + 1)
            .copied()
            .unwrap_or(self.shape.keys.len());
        let later = self.shape.keys[from..].iter().map(move |k| k.with_job(job));
        here.chain(later)
    }

    /// Hand over a packet read for the current step.
    pub fn deliver(&mut self, p: TrigPacket) -> Result<(), WalkError> {
        if self.is_done() {
            return Err(WalkError::Finished);
        }
        let i = (0..self.got.n)
            .find(|&i| self.key(i) == p.key)
            .ok_or(WalkError::Unexpected(p.key))?;
        if self.got.has(i) {
            return Err(WalkError::Duplicate(p.key));
        }
        self.got.put(i, p);
        Ok(())
    }

    /// Fire every step whose packets are all in; `fetch(addr, len)` reads local data of an
    /// address payload from host memory. Returns the actions in order.
    pub fn advance(&mut self, fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>) -> Result<Vec<TrigAction>, WalkError> {
        let mut out = Vec::new();
        self.advance_into(fetch, &mut out)?;
        Ok(out)
    }

    /// [`Walker::advance`] appending the actions to `out` (a caller's reused vector).
    pub fn advance_into(
        &mut self,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<TrigAction>,
    ) -> Result<(), WalkError> {
        self.advance_pooled(fetch, out, &mut BufPool::default())
    }

    /// [`Walker::advance_into`] taking the data buffers of sent packets from `pool` and giving
    /// it those of the packets consumed.
    pub fn advance_pooled(
        &mut self,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<TrigAction>,
        pool: &mut BufPool,
    ) -> Result<(), WalkError> {
        // The step fires on its packets in place; their data then go to the pool.
        while self.ready() {
            let fired = self.fire(fetch, out, pool);
            for p in self.got.packets_mut() {
                pool.give(std::mem::take(&mut p.data));
            }
            fired?;
            self.pc += 1;
            self.load_step();
        }
        Ok(())
    }

    /// Fire the current step on its packets (their data may be moved out: the step is their
    /// last reader).
    fn fire(
        &mut self,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<TrigAction>,
        pool: &mut BufPool,
    ) -> Result<(), WalkError> {
        let pkts = self.got.packets_mut();
        let d = &self.shape.seq[self.pc];
        self.fired += 1;
        if d.reduce_flag {
            let first_is_start = d.recv_part.is_none() && !d.swap_local_data && self.work.is_empty();
            let bytes: u64 = pkts.iter().map(|p| p.data.len() as u64).sum();
            let skip = if first_is_start {
                pkts.first().map_or(0, |p| p.data.len() as u64)
            } else {
                0
            };
            self.reduced[type_index(d.dtype)] += bytes - skip;
        }
        // Local data given to the walk replace the descriptor's payload as its operands (so
        // the step names no payload address, as a descriptor whose data were read into it).
        let mut given = false;
        if d.swap_local_data {
            // They move into the intermediate buffer (a descriptor fires once); otherwise the
            // payload's operands, or the bytes at its address.
            self.work = match self.locals.iter().position(|(i, _)| *i == self.pc) {
                Some(i) => {
                    given = true;
                    self.locals.swap_remove(i).1
                }
                None => match &d.payload {
                    Payload::Operands(v) => v.clone(),
                    Payload::Address { addr, len } => fetch(addr + self.shift, *len),
                },
            };
        }
        let index = self.pc;
        let part = |part: Option<(u64, u64)>, have: usize| -> Result<Option<std::ops::Range<usize>>, WalkError> {
            match part {
                None => Ok(None),
                Some((offset, len)) if offset + len <= have as u64 => {
                    Ok(Some(offset as usize..(offset + len) as usize))
                }
                Some((offset, len)) => Err(WalkError::PartOutside {
                    index,
                    offset,
                    len,
                    have,
                }),
            }
        };
        let recv = part(d.recv_part, self.work.len())?;
        if let Some(r) = &recv {
            for p in pkts.iter() {
                if p.data.len() != r.len() {
                    return Err(WalkError::LengthMismatch {
                        index,
                        have: r.len(),
                        got: p.data.len(),
                    });
                }
            }
        }
        if d.swap_remote_data {
            match &recv {
                // A reducing step still reads the packet below: copy; otherwise move.
                None if d.reduce_flag => self.work = pkts[0].data.clone(),
                None => self.work = std::mem::take(&mut pkts[0].data),
                Some(r) => self.work[r.clone()].copy_from_slice(&pkts[0].data),
            }
        }
        if let (true, Some(r)) = (d.reduce_flag, &recv) {
            for p in pkts.iter() {
                reduce_into(d.dtype, d.op, &mut self.work[r.clone()], &p.data);
            }
        } else if d.reduce_flag {
            for p in pkts.iter_mut() {
                if self.work.is_empty() {
                    self.work = std::mem::take(&mut p.data);
                } else if self.work.len() != p.data.len() {
                    return Err(WalkError::LengthMismatch {
                        index: self.pc,
                        have: self.work.len(),
                        got: p.data.len(),
                    });
                } else {
                    reduce_into(d.dtype, d.op, &mut self.work, &p.data);
                }
            }
        }
        let payload_addr = match d.payload {
            Payload::Address { addr, .. } if !given => Some(addr + self.shift),
            _ => None,
        };
        if let Some(dest) = d.dest_id {
            let vp = if d.swap_local_vp { pkts[0].key.vp() } else { d.source_vp };
            let addr = if d.swap_remote_addr { pkts[0].addr } else { payload_addr };
            let key =
                PacketKey::new(self.job, self.shape.node, vp, d.send_seq).expect("fields validated at construction");
            out.push(TrigAction::Send(TrigPacket {
                key,
                dest,
                dest_vp: d.dest_vp,
                cp: d.cp,
                end: d.coll_end_flag,
                addr,
                data: match part(d.send_part, self.work.len())? {
                    None => pool.copy_of(&self.work),
                    Some(r) => pool.copy_of(&self.work[r]),
                },
            }));
        }
        if d.coll_end_flag {
            out.push(TrigAction::Complete {
                job: self.job,
                // After CT nothing reads the intermediate buffer: its data move.
                data: if d.ct {
                    std::mem::take(&mut self.work)
                } else {
                    self.work.clone()
                },
                addr: payload_addr,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::hashbuf::HashBufConfig;
    use super::super::ideal::{run_ideal, Endpoint};
    use super::*;
    use proptest::prelude::*;

    const JOB: u32 = 3;

    fn vp(node: u32) -> u32 {
        10 + node
    }
    fn src(node: u32) -> Source {
        Source { node, vp: vp(node) }
    }
    fn f64_bytes(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn bits(b: &[u8]) -> Vec<u64> {
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    /// Values of mixed magnitude, so that the order of a floating-point sum shows in its bits.
    fn contribution(node: u32) -> Vec<f64> {
        (0..16u32)
            .map(|j| match (node + j) % 4 {
                0 => 1e16 + f64::from(j),
                1 => 1.0 + 0.1 * f64::from(node),
                2 => -1e16 + 0.5 * f64::from(j),
                _ => 3.3e-3 * f64::from(j + 1) + f64::from(node) * 0.7,
            })
            .collect()
    }
    fn sum(a: &[f64], b: &[f64]) -> Vec<f64> {
        a.iter().zip(b).map(|(x, y)| x + y).collect()
    }
    fn no_fetch(_: u64, _: u64) -> Vec<u8> {
        panic!("no address payloads here")
    }

    fn desc() -> CollDescriptor {
        CollDescriptor::new(JOB, CollType::F64, CollOp::Sum)
    }

    /// Children of `r` in a binomial tree rooted at 0 over `p` nodes (increasing distance),
    /// and its parent.
    fn binomial(r: u32, p: u32) -> (Vec<u32>, Option<u32>) {
        let mut children = vec![];
        let mut mask = 1;
        while mask < p {
            if r & mask != 0 {
                return (children, Some(r - mask));
            }
            if r + mask < p {
                children.push(r + mask);
            }
            mask <<= 1;
        }
        (children, None)
    }

    /// Binomial-tree reduce to node 0 with one trigger per node: wait for every child (SeqID
    /// 0), reduce local ∘ children in order, send to the parent.
    fn tree_reduce(p: u32) -> Vec<Vec<CollDescriptor>> {
        (0..p)
            .map(|r| {
                let (children, parent) = binomial(r, p);
                let from: Vec<Source> = children.iter().map(|&c| src(c)).collect();
                let mut d = desc().wait(0, &from);
                d.ch = true;
                d.ct = true;
                d.swap_local_data = true;
                d.reduce_flag = !from.is_empty();
                d.coll_end_flag = true;
                d.source_vp = vp(r);
                d.payload = Payload::Operands(f64_bytes(&contribution(r)));
                if let Some(q) = parent {
                    d = d.send(q, vp(q), 0);
                }
                vec![d]
            })
            .collect()
    }
    fn tree_reference(r: u32, p: u32) -> Vec<f64> {
        let (children, _) = binomial(r, p);
        children
            .iter()
            .fold(contribution(r), |acc, &c| sum(&acc, &tree_reference(c, p)))
    }

    /// Recursive-doubling allreduce over `p` (a power of two) nodes: stage s exchanges with
    /// r xor 2^s; the SeqID is the stage.
    fn doubling_allreduce(p: u32) -> Vec<Vec<CollDescriptor>> {
        let stages = p.trailing_zeros();
        (0..p)
            .map(|r| {
                let mut seq = vec![];
                let mut d0 = desc().send(r ^ 1, vp(r ^ 1), 0);
                d0.ch = true;
                d0.swap_local_data = true;
                d0.source_vp = vp(r);
                d0.payload = Payload::Operands(f64_bytes(&contribution(r)));
                seq.push(d0);
                for s in 1..=stages {
                    let mut d = desc().wait(s - 1, &[src(r ^ (1 << (s - 1)))]);
                    d.reduce_flag = true;
                    d.source_vp = vp(r);
                    if s < stages {
                        d = d.send(r ^ (1 << s), vp(r ^ (1 << s)), s);
                    } else {
                        d.ct = true;
                        d.coll_end_flag = true;
                    }
                    seq.push(d);
                }
                seq
            })
            .collect()
    }
    fn doubling_reference(p: u32) -> Vec<Vec<f64>> {
        let mut w: Vec<Vec<f64>> = (0..p).map(contribution).collect();
        let mut s = 1;
        while s < p {
            w = (0..p).map(|r| sum(&w[r as usize], &w[(r ^ s) as usize])).collect();
            s <<= 1;
        }
        w
    }

    /// Binomial-tree broadcast from node 0: a node takes its parent's packet (SwapRemoteData)
    /// and forwards it to its children, one descriptor per child.
    fn tree_broadcast(p: u32, data: &[u8]) -> Vec<Vec<CollDescriptor>> {
        (0..p)
            .map(|r| {
                let (children, parent) = binomial(r, p);
                let mut seq = vec![];
                let mut first = desc();
                first.source_vp = vp(r);
                match parent {
                    Some(q) => {
                        first = first.wait(0, &[src(q)]);
                        first.swap_remote_data = true;
                    }
                    None => {
                        first.swap_local_data = true;
                        first.payload = Payload::Operands(data.to_vec());
                    }
                }
                seq.push(first);
                for (i, &c) in children.iter().enumerate() {
                    if i > 0 {
                        let mut d = desc();
                        d.source_vp = vp(r);
                        seq.push(d);
                    }
                    let last = seq.len() - 1;
                    seq[last] = seq[last].clone().send(c, vp(c), 0);
                }
                seq[0].ch = true;
                let last = seq.len() - 1;
                seq[last].ct = true;
                seq[last].coll_end_flag = true;
                seq
            })
            .collect()
    }

    /// Run the sequences of nodes 0 … n − 1 (at VP `vp(node)`) on the ideal executor with
    /// buffers of `slots` slots; returns each node's completion data and the largest buffer
    /// occupancy seen.
    fn run(seqs: Vec<Vec<CollDescriptor>>, seed: u64, slots: u32) -> (Vec<Vec<u8>>, u32) {
        let eps = seqs
            .into_iter()
            .enumerate()
            .map(|(i, seq)| Endpoint {
                node: i as u32,
                vp: vp(i as u32),
                seq,
            })
            .collect();
        let cfg = HashBufConfig {
            capacity: u64::from(slots) * 256,
            slots,
        };
        let r = run_ideal(eps, seed, cfg, &mut |_, _, _| panic!("no address payloads here")).unwrap();
        let mut peak = 0;
        for s in &r.buffers {
            assert_eq!((s.occupancy, s.stored), (0, s.taken));
            peak = peak.max(s.peak_occupancy);
        }
        let done = r
            .completions
            .into_iter()
            .map(|c| {
                assert_eq!((c.job, c.addr), (JOB, None));
                c.data
            })
            .collect();
        (done, peak)
    }

    #[test]
    fn binomial_reduce_equals_the_reference_in_every_order() {
        for p in [4, 8] {
            let want = bits(&f64_bytes(&tree_reference(0, p)));
            for seed in 0..50 {
                let (done, _) = run(tree_reduce(p), seed, 4);
                assert_eq!(bits(&done[0]), want, "p = {p}, seed {seed}");
            }
        }
    }

    #[test]
    fn the_values_make_the_combine_order_visible() {
        // Root of 8 nodes: children 1, 2, 4. Combining them in another order than the fixed
        // one changes the bits, so the order-independence above is not an accident of the data.
        let parts: Vec<Vec<f64>> = vec![
            contribution(0),
            tree_reference(1, 8),
            tree_reference(2, 8),
            tree_reference(4, 8),
        ];
        let fold = |order: &[usize]| {
            bits(&f64_bytes(
                &order
                    .iter()
                    .skip(1)
                    .fold(parts[order[0]].clone(), |a, &i| sum(&a, &parts[i])),
            ))
        };
        let fixed = fold(&[0, 1, 2, 3]);
        assert_eq!(fixed, bits(&f64_bytes(&tree_reference(0, 8))));
        let orders = [[0, 3, 2, 1], [3, 1, 0, 2], [2, 3, 1, 0], [0, 2, 3, 1]];
        assert!(orders.iter().any(|o| fold(o) != fixed));
    }

    #[test]
    fn broadcast_forwards_the_root_data_to_every_node() {
        let data = f64_bytes(&contribution(5));
        for p in [4, 7, 8] {
            for seed in 0..20 {
                let (done, _) = run(tree_broadcast(p, &data), seed, 2);
                assert!(done.iter().all(|d| *d == data), "p = {p}, seed {seed}");
            }
        }
    }

    proptest! {
        /// Recursive-doubling allreduce on 4 and 8 nodes under random delivery orders and small
        /// buffers: every node's result is bit-identical to the reference.
        #[test]
        fn doubling_allreduce_is_bit_identical_across_orders(seed in any::<u64>(), slots in 2u32..6, eight in any::<bool>()) {
            let p = if eight { 8 } else { 4 };
            let want = doubling_reference(p);
            let (done, peak) = run(doubling_allreduce(p), seed, slots);
            prop_assert!(peak <= slots);
            for r in 0..p as usize {
                prop_assert_eq!(bits(&done[r]), bits(&f64_bytes(&want[r])));
                prop_assert_eq!(bits(&done[r]), bits(&done[0]));
            }
        }
    }

    #[test]
    fn steps_of_many_packets_combine_in_order_whatever_the_delivery_order() {
        // Step 0 awaits five senders (more than the inline places), step 1 one, step 2 two:
        // each step reduces its packets in combine order (sender order), whatever order they
        // are delivered in, and a step is ready only once every packet is in.
        let five: Vec<Source> = (1..=5).map(src).collect();
        let mut d0 = desc().wait(1, &five);
        d0.ch = true;
        d0.reduce_flag = true;
        let mut d1 = desc().wait(2, &[src(6)]);
        d1.reduce_flag = true;
        let mut d2 = desc().wait(3, &[src(7), src(8)]);
        d2.reduce_flag = true;
        d2.ct = true;
        d2.coll_end_flag = true;
        let mut w = Walker::new(0, vec![d0, d1, d2]).unwrap();
        let key = |node, seq| PacketKey::new(JOB, node, vp(node), seq).unwrap();
        let pkt = |k: PacketKey, v: f64| TrigPacket {
            key: k,
            dest: 0,
            dest_vp: 0,
            cp: true,
            end: false,
            addr: None,
            data: f64_bytes(&[v, -v]),
        };
        assert_eq!(w.expected_len(), 5);
        assert_eq!(w.expected(), (1..=5).map(|n| key(n, 1)).collect::<Vec<_>>());
        // Values whose floating-point sum depends on the order of addition (3 in combine
        // order, 4 in delivery order).
        let vals = [1e16, 1.0, 1.0, -1e16, 3.0];
        for &n in &[4u32, 2, 5] {
            w.deliver(pkt(key(n, 1), vals[n as usize - 1])).unwrap();
        }
        assert!(!w.ready());
        assert_eq!(w.missing(), vec![key(1, 1), key(3, 1)]);
        assert!(w.advance(&mut no_fetch).unwrap().is_empty());
        assert_eq!(w.step(), 0);
        assert_eq!(w.deliver(pkt(key(4, 1), 0.0)), Err(WalkError::Duplicate(key(4, 1))));
        assert_eq!(w.deliver(pkt(key(6, 2), 0.0)), Err(WalkError::Unexpected(key(6, 2))));
        w.deliver(pkt(key(3, 1), vals[2])).unwrap();
        w.deliver(pkt(key(1, 1), vals[0])).unwrap();
        assert!(w.ready());
        assert!(w.advance(&mut no_fetch).unwrap().is_empty());
        assert_eq!((w.step(), w.expected_len()), (1, 1));
        assert_eq!(w.missing_key(0), Some(key(6, 2)));
        assert_eq!(w.missing_key(1), None);
        w.deliver(pkt(key(6, 2), 10.0)).unwrap();
        w.advance(&mut no_fetch).unwrap();
        assert_eq!(w.remaining_keys().collect::<Vec<_>>(), vec![key(7, 3), key(8, 3)]);
        w.deliver(pkt(key(8, 3), 100.0)).unwrap();
        assert_eq!(w.remaining_keys().collect::<Vec<_>>(), vec![key(7, 3)]);
        w.deliver(pkt(key(7, 3), 1000.0)).unwrap();
        let acts = w.advance(&mut no_fetch).unwrap();
        assert!(w.is_done() && !w.ready() && w.expected_len() == 0);
        // The first packet starts the intermediate buffer; the others add in combine order.
        let want = vals[1..]
            .iter()
            .chain(&[10.0, 1000.0, 100.0])
            .fold(vals[0], |a, v| a + v);
        assert_eq!(want, 1113.0);
        let [TrigAction::Complete { data, .. }] = acts.as_slice() else {
            panic!("one completion, got {acts:?}")
        };
        assert_eq!(bits(data), bits(&f64_bytes(&[want, -want])));
        assert_eq!(w.work().steps, 3);
        assert_eq!(w.deliver(pkt(key(7, 3), 0.0)), Err(WalkError::Finished));
    }

    #[test]
    fn swaps_and_address_payloads() {
        let mut d0 = desc().wait(2, &[Source { node: 9, vp: 33 }]).send(5, 6, 3);
        d0.ch = true;
        d0.dtype = CollType::I64;
        d0.swap_local_data = true;
        d0.reduce_flag = true;
        d0.swap_local_vp = true;
        d0.swap_remote_addr = true;
        d0.source_vp = 1;
        d0.payload = Payload::Address { addr: 0x1000, len: 16 };
        let mut d1 = desc();
        d1.ct = true;
        d1.coll_end_flag = true;
        d1.payload = Payload::Address { addr: 0x2000, len: 16 };
        let mut w = Walker::new(4, vec![d0, d1]).unwrap();
        let key = PacketKey::new(JOB, 9, 33, 2).unwrap();
        assert_eq!(w.expected(), &[key]);
        let i64s = |v: [i64; 2]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut fetched = vec![];
        let mut fetch = |a: u64, l: u64| {
            fetched.push((a, l));
            i64s([5, -7])
        };
        assert!(w.advance(&mut fetch).unwrap().is_empty());
        let other = PacketKey::new(JOB, 9, 33, 1).unwrap();
        let pkt = |key| TrigPacket {
            key,
            dest: 4,
            dest_vp: 0,
            cp: true,
            end: false,
            addr: Some(0x7700),
            data: i64s([10, 20]),
        };
        assert_eq!(w.deliver(pkt(other)), Err(WalkError::Unexpected(other)));
        w.deliver(pkt(key)).unwrap();
        assert_eq!(w.deliver(pkt(key)), Err(WalkError::Duplicate(key)));
        let acts = w.advance(&mut fetch).unwrap();
        assert_eq!(fetched, vec![(0x1000, 16)]);
        assert_eq!(
            acts,
            vec![
                TrigAction::Send(TrigPacket {
                    key: PacketKey::new(JOB, 4, 33, 3).unwrap(),
                    dest: 5,
                    dest_vp: 6,
                    cp: true,
                    end: false,
                    addr: Some(0x7700),
                    data: i64s([15, 13]),
                }),
                TrigAction::Complete {
                    job: JOB,
                    data: i64s([15, 13]),
                    addr: Some(0x2000)
                },
            ]
        );
        assert!(w.is_done());
        assert_eq!(w.deliver(pkt(key)), Err(WalkError::Finished));
    }

    #[test]
    fn a_walk_of_a_shape_is_the_sequence_with_its_job_and_addresses_moved() {
        // Node 1 of a two-node exchange: load 2 elements from an address, wait for node 0's
        // packet, reduce, send back and complete at another address.
        let seq = |job: u32, shift: u64| {
            let mut d0 = desc().wait(4, &[src(0)]).send(0, vp(0), 5);
            (d0.ch, d0.swap_local_data, d0.reduce_flag, d0.job) = (true, true, true, job);
            d0.source_vp = vp(1);
            d0.payload = Payload::Address {
                addr: 0x100 + shift,
                len: 16,
            };
            let mut d1 = desc();
            (d1.ct, d1.coll_end_flag, d1.job) = (true, true, job);
            d1.payload = Payload::Address {
                addr: 0x800 + shift,
                len: 16,
            };
            vec![d0, d1]
        };
        let shape = Arc::new(Shape::new(1, seq(JOB, 0)).unwrap());
        assert_eq!((shape.job(), shape.senders()), (JOB, 1));
        let run = |mut w: Walker| {
            let key = w.expected()[0];
            let mut fetched = vec![];
            let mut fetch = |a: u64, l: u64| {
                fetched.push((a, l));
                f64_bytes(&[1.5, 2.5])
            };
            w.advance(&mut fetch).unwrap();
            let rest: Vec<PacketKey> = w.remaining_keys().collect();
            w.deliver(TrigPacket {
                key,
                dest: 1,
                dest_vp: vp(1),
                cp: true,
                end: false,
                addr: None,
                data: f64_bytes(&[0.25, 0.5]),
            })
            .unwrap();
            let acts = w.advance(&mut fetch).unwrap();
            assert!(w.is_done());
            (key, rest, fetched, acts)
        };
        for (job, shift) in [(JOB, 0), (200, 0x40), (0, 0x1000)] {
            let want = run(Walker::new(1, seq(job, shift)).unwrap());
            let got = run(Walker::start(shape.clone(), job, shift, vec![]));
            assert_eq!(got, want, "job {job}, shift {shift}");
            assert_eq!(got.0, PacketKey::new(job, 0, vp(0), 4).unwrap());
            assert_eq!(got.1, vec![got.0]);
            assert_eq!(got.2, vec![(0x100 + shift, 16)]);
            // Local data given to the walk replace the read and the payload: the packet sent
            // by their step carries no payload address.
            let given = run(Walker::start(
                shape.clone(),
                job,
                shift,
                vec![(0, f64_bytes(&[1.5, 2.5]))],
            ));
            assert_eq!((&given.0, &given.3[1]), (&want.0, &want.3[1]));
            let (TrigAction::Send(a), TrigAction::Send(b)) = (&given.3[0], &want.3[0]) else {
                panic!("a send first")
            };
            assert_eq!((&a.data, a.addr, b.addr), (&b.data, None, Some(0x100 + shift)));
            assert!(given.2.is_empty());
        }
    }

    #[test]
    fn a_reduction_of_unequal_lengths_is_an_error() {
        let mut d = desc().wait(0, &[src(1)]);
        d.ch = true;
        d.ct = true;
        d.coll_end_flag = true;
        d.swap_local_data = true;
        d.reduce_flag = true;
        d.payload = Payload::Operands(f64_bytes(&[1.0, 2.0]));
        let mut w = Walker::new(0, vec![d]).unwrap();
        let key = w.expected()[0];
        w.deliver(TrigPacket {
            key,
            dest: 0,
            dest_vp: 0,
            cp: true,
            end: false,
            addr: None,
            data: f64_bytes(&[1.0]),
        })
        .unwrap();
        assert_eq!(
            w.advance(&mut no_fetch),
            Err(WalkError::LengthMismatch {
                index: 0,
                have: 16,
                got: 8
            })
        );
        // Parts of the intermediate buffer: outside it, or of another length than the packet.
        let mut d = desc().wait(0, &[src(1)]);
        (d.ch, d.ct, d.coll_end_flag, d.swap_local_data, d.reduce_flag) = (true, true, true, true, true);
        d.payload = Payload::Operands(f64_bytes(&[1.0, 2.0]));
        d.recv_part = Some((8, 16));
        let mut w = Walker::new(0, vec![d.clone()]).unwrap();
        let pkt = |data| TrigPacket {
            key,
            dest: 0,
            dest_vp: 0,
            cp: true,
            end: false,
            addr: None,
            data,
        };
        w.deliver(pkt(f64_bytes(&[1.0, 1.0]))).unwrap();
        assert_eq!(
            w.advance(&mut no_fetch).unwrap_err().to_string(),
            "descriptor 0: part 8+16 outside the 16-byte intermediate buffer"
        );
        d.recv_part = Some((8, 8));
        let mut w = Walker::new(0, vec![d.clone()]).unwrap();
        w.deliver(pkt(f64_bytes(&[1.0, 1.0]))).unwrap();
        assert_eq!(
            w.advance(&mut no_fetch),
            Err(WalkError::LengthMismatch {
                index: 0,
                have: 8,
                got: 16
            })
        );
        let mut w = Walker::new(0, vec![d.clone()]).unwrap();
        w.deliver(pkt(f64_bytes(&[0.5]))).unwrap();
        let acts = w.advance(&mut no_fetch).unwrap();
        assert_eq!(
            acts[0],
            TrigAction::Complete {
                job: JOB,
                data: f64_bytes(&[1.0, 2.5]),
                addr: None
            }
        );
        d.reduce_flag = false;
        assert_eq!(
            Walker::new(0, vec![d]).unwrap_err().to_string(),
            "descriptor 0: a receive part without ReduceFlag or SwapRemoteData"
        );
    }

    #[test]
    fn malformed_sequences_are_refused_with_the_reason() {
        let ok = || {
            let mut d = desc();
            d.ch = true;
            d.ct = true;
            d.coll_end_flag = true;
            d
        };
        assert!(Walker::new(0, vec![ok()]).is_ok());
        let err = |f: &dyn Fn(&mut CollDescriptor)| {
            let mut d = ok();
            f(&mut d);
            Walker::new(0, vec![d]).unwrap_err().to_string()
        };
        assert_eq!(
            err(&|d| d.dest_id = Some(1 << 24)),
            "descriptor 0: DestID = 16777216 does not fit in 24 bits (largest 16777215)"
        );
        assert_eq!(
            err(&|d| d.job = 256),
            "descriptor 0: JobID = 256 does not fit in 8 bits (largest 255)"
        );
        assert_eq!(
            err(&|d| d.dest_vp = 2048),
            "descriptor 0: DestVP = 2048 does not fit in 11 bits (largest 2047)"
        );
        assert_eq!(
            err(&|d| d.seq_id = 32),
            "descriptor 0: SeqID = 32 does not fit in 5 bits (largest 31)"
        );
        assert_eq!(
            err(&|d| {
                *d = d.clone().send(1, 0, 0);
                d.cp = false;
            }),
            "descriptor 0: DestID set with CP = 0: a collective step's packet triggers a step at its destination \
             (data for host memory go in a point-to-point descriptor, C = 0)"
        );
        assert_eq!(
            err(&|d| d.cp = true),
            "descriptor 0: CP = 1 but the step sends nothing (no DestID)"
        );
        assert_eq!(
            err(&|d| d.c = false),
            "descriptor 0: C = 0 (a point-to-point descriptor) inside a collective sequence"
        );
        assert_eq!(err(&|d| d.ch = false), "descriptor 0: first descriptor without CH");
        assert_eq!(err(&|d| d.ct = false), "descriptor 0: last descriptor without CT");
        assert_eq!(
            err(&|d| d.coll_end_flag = false),
            "sequence: 0 descriptors with CollEndFlag, need exactly 1"
        );
        assert_eq!(
            err(&|d| d.reduce_flag = true),
            "descriptor 0: ReduceFlag needs a received packet but CPCount = 0"
        );
        assert_eq!(
            err(&|d| d.cp_count = 2),
            "descriptor 0: CPCount = 2 but 0 senders listed"
        );
        assert_eq!(
            err(&|d| {
                *d = d.clone().wait(0, &[src(1)]);
                d.reduce_flag = true;
                d.payload = Payload::Operands(vec![0; 12]);
            }),
            "descriptor 0: payload of 12 bytes is not whole F64 elements of 8 bytes"
        );
        assert_eq!(
            err(&|d| {
                d.op = CollOp::Bxor;
                *d = d.clone().wait(0, &[src(1)]);
                d.reduce_flag = true;
            }),
            "descriptor 0: bitwise Bxor on floating-point F64"
        );
        assert_eq!(
            err(&|d| *d = d.clone().wait(0, &[src(1), src(1)])),
            "descriptor 0: a sender is listed twice (its packets would share one key)"
        );
        assert!(Walker::new(1 << 24, vec![ok()])
            .unwrap_err()
            .to_string()
            .contains("NodeID"));
        assert_eq!(Walker::new(0, vec![]).unwrap_err(), DescError::Sequence("empty".into()));
        // Two steps awaiting the same key.
        let mut a = desc().wait(0, &[src(1)]);
        a.ch = true;
        let mut b = desc().wait(0, &[src(1)]);
        b.ct = true;
        b.coll_end_flag = true;
        let e = Walker::new(0, vec![a.clone(), b]).unwrap_err().to_string();
        assert!(e.contains("awaited by two steps"), "{e}");
        let mut c = desc();
        c.ch = true;
        c.ct = true;
        c.coll_end_flag = true;
        c.job = 4;
        assert_eq!(
            Walker::new(0, vec![a.clone(), c.clone()]).unwrap_err().to_string(),
            "descriptor 1: CH inside the sequence"
        );
        c.ch = false;
        assert_eq!(
            Walker::new(0, vec![a, c]).unwrap_err().to_string(),
            "descriptor 1: JobID 4 differs from the sequence's 3"
        );
    }
}
