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
//! and `job` the JobID of the whole sequence. Field widths follow the packet key: JobID 8 bits,
//! NodeID/DestID 24, VPs 11, SeqIDs and CPCount 5.
//!
//! **Firing a step.** The walker's current descriptor expects `cp_count` packets, keys
//! `(job, sender node, sender VP, seq_id)`. When all are in (whatever their order of arrival)
//! it fires, in this order, on the unit's intermediate-result buffer `work`:
//! 1. SwapLocalData: `work` ← the descriptor's local data (operands, or the bytes at address
//!    + length, read through the caller);
//! 2. SwapRemoteData: `work` ← the data of the first listed packet (forwarding, broadcast);
//! 3. ReduceFlag: `work` ← `((work ∘ p₁) ∘ p₂) ∘ …` in `wait_from` order (`work` empty: start
//!    from p₁) — a fixed combine order, so floating-point results are bit-identical whatever
//!    the arrival order;
//! 4. SwapLocalVP: the sent packet's source VP is the first packet's VP instead of SourceVP;
//!    SwapRemoteAddr: the sent packet carries the address the first packet carried instead of
//!    the descriptor's payload address;
//! 5. DestID set: send `work` to (DestID, DestVP) with SeqID `send_seq` and the CP and
//!    CollEndFlag bits;
//! 6. CollEndFlag: the collective is complete at this unit — a completion carrying `work`
//!    (and the payload address, where the host's result goes).
//!
//! Then the walker moves to the next descriptor; after CT the sequence is done.
//!
//! Simplifications: no timing (the pipelined reduction unit and descriptor fetch are the
//! integration's business); data are whole packets (no segmentation of a step's data).
//!
//! Cost: O(cp_count) per step to track packets, O(bytes) per reduction.

use super::key::{check_width, KeyError, PacketKey, JOB_BITS, NODE_BITS, SEQ_BITS, VP_BITS};
use crate::coll::{reduce_into, CollOp, CollType};

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
        if len % self.dtype.size() != 0 {
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
    #[error("the sequence is finished")]
    Finished,
}

/// Walks one descriptor sequence (CH … CT) at one node.
#[derive(Clone, Debug)]
pub struct Walker {
    node: u32,
    seq: Vec<CollDescriptor>,
    /// Keys per descriptor (validated at construction).
    keys: Vec<Vec<PacketKey>>,
    pc: usize,
    got: Vec<Option<TrigPacket>>,
    work: Vec<u8>,
}

impl Walker {
    /// Check `seq` and start at its first descriptor; `node` is the unit's node (its NodeID
    /// goes into the keys of the packets it sends).
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
        let keys: Vec<Vec<PacketKey>> = seq
            .iter()
            .enumerate()
            .map(|(i, d)| {
                d.expected_keys()
                    .map_err(|source| DescError::Field { index: i, source })
            })
            .collect::<Result<_, _>>()?;
        let mut all: Vec<PacketKey> = keys.iter().flatten().copied().collect();
        all.sort();
        if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
            return Err(DescError::Sequence(format!("{:?} awaited by two steps", w[0])));
        }
        let got = vec![None; keys[0].len()];
        Ok(Walker {
            node,
            seq,
            keys,
            pc: 0,
            got,
            work: Vec::new(),
        })
    }

    /// The sequence is finished (CT fired).
    pub fn is_done(&self) -> bool {
        self.pc == self.seq.len()
    }

    /// Index of the current descriptor.
    pub fn step(&self) -> usize {
        self.pc
    }

    /// Keys the current step waits for, in combine order (empty when done).
    pub fn expected(&self) -> &[PacketKey] {
        self.keys.get(self.pc).map_or(&[], Vec::as_slice)
    }

    /// Keys of the current step not delivered yet.
    pub fn missing(&self) -> Vec<PacketKey> {
        self.expected()
            .iter()
            .zip(&self.got)
            .filter(|(_, g)| g.is_none())
            .map(|(k, _)| *k)
            .collect()
    }

    /// Hand over a packet read for the current step.
    pub fn deliver(&mut self, p: TrigPacket) -> Result<(), WalkError> {
        if self.is_done() {
            return Err(WalkError::Finished);
        }
        let i = self.keys[self.pc]
            .iter()
            .position(|k| *k == p.key)
            .ok_or(WalkError::Unexpected(p.key))?;
        if self.got[i].is_some() {
            return Err(WalkError::Duplicate(p.key));
        }
        self.got[i] = Some(p);
        Ok(())
    }

    /// Fire every step whose packets are all in; `fetch(addr, len)` reads local data of an
    /// address payload from host memory. Returns the actions in order.
    pub fn advance(&mut self, fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>) -> Result<Vec<TrigAction>, WalkError> {
        let mut out = Vec::new();
        while !self.is_done() && self.got.iter().all(Option::is_some) {
            let pkts: Vec<TrigPacket> = self.got.drain(..).map(|p| p.expect("all in")).collect();
            self.fire(&pkts, fetch, &mut out)?;
            self.pc += 1;
            self.got = vec![None; self.keys.get(self.pc).map_or(0, Vec::len)];
        }
        Ok(out)
    }

    fn fire(
        &mut self,
        pkts: &[TrigPacket],
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<TrigAction>,
    ) -> Result<(), WalkError> {
        let d = &self.seq[self.pc];
        if d.swap_local_data {
            self.work = match &d.payload {
                Payload::Operands(v) => v.clone(),
                Payload::Address { addr, len } => fetch(*addr, *len),
            };
        }
        if d.swap_remote_data {
            self.work = pkts[0].data.clone();
        }
        if d.reduce_flag {
            for p in pkts {
                if self.work.is_empty() {
                    self.work = p.data.clone();
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
            Payload::Address { addr, .. } => Some(addr),
            Payload::Operands(_) => None,
        };
        if let Some(dest) = d.dest_id {
            let vp = if d.swap_local_vp { pkts[0].key.vp() } else { d.source_vp };
            let addr = if d.swap_remote_addr { pkts[0].addr } else { payload_addr };
            let key = PacketKey::new(d.job, self.node, vp, d.send_seq).expect("fields validated at construction");
            out.push(TrigAction::Send(TrigPacket {
                key,
                dest,
                dest_vp: d.dest_vp,
                cp: d.cp,
                end: d.coll_end_flag,
                addr,
                data: self.work.clone(),
            }));
        }
        if d.coll_end_flag {
            out.push(TrigAction::Complete {
                job: d.job,
                data: self.work.clone(),
                addr: payload_addr,
            });
        }
        Ok(())
    }
}
