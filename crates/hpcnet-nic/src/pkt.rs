//! What a NIC puts on the wire: packet kinds and their payload sizes.
//!
//! Data packets carry up to `packet.max_payload` bytes of a message; control packets carry what
//! their operation needs and nothing else (sizes below). Every packet also pays the fabric's
//! `packet.header`.

use crate::cq::CqeStatus;
use crate::ids::Rank;
use hpcnet_fabric::topology::NodeId;

/// Payload of a read / GET request packet: it carries the descriptor the target's engine
/// executes (cHPP: "the GET packet carries the descriptor").
pub const READ_REQUEST_BYTES: u64 = 32;

/// Payload of an atomic request: operand and compare value.
pub const ATOMIC_REQUEST_BYTES: u64 = 16;

/// Payload of an atomic response: the old value.
pub const ATOMIC_RESPONSE_BYTES: u64 = 8;

/// Payload of a transport probe and of the probe's answer without a packet map: the message's
/// identity and the attempt (and the answer's state).
pub const PROBE_BYTES: u64 = 8;

/// What the target of a reliable message answers to a probe ([`crate::reliability`]).
#[derive(Clone, Debug)]
pub(crate) enum ProbeState {
    /// The message has completed at the target (with this status; an atomic's old value): the
    /// answer is the completion notification sent again.
    Done { status: CqeStatus, old: u64 },
    /// The target's engine has the read's write-back queued or is sending it: wait.
    Busy,
    /// Packets (or the request) did not arrive: send again what the packet map (`map_bytes` of
    /// it on the wire) says is missing.
    Missing { map_bytes: u32 },
}

#[derive(Clone, Debug)]
pub(crate) enum PktKind {
    /// Bytes `off .. off + len` of the message.
    Data {
        off: u64,
        len: u64,
    },
    ReadReq,
    /// Header-only acknowledgement of a message that landed (or was refused).
    Ack {
        status: CqeStatus,
    },
    AtomicReq,
    AtomicResp {
        status: CqeStatus,
        old: u64,
    },
    /// Transport probe of a reliable message whose timer expired (initiator → target).
    Probe,
    /// The target's answer to a probe.
    ProbeResp {
        state: ProbeState,
    },
}

impl PktKind {
    /// Payload bytes on the wire.
    #[inline]
    pub(crate) fn payload(&self) -> u32 {
        match self {
            PktKind::Data { len, .. } => *len as u32,
            PktKind::ReadReq => READ_REQUEST_BYTES as u32,
            PktKind::AtomicReq => ATOMIC_REQUEST_BYTES as u32,
            PktKind::AtomicResp { .. } => ATOMIC_RESPONSE_BYTES as u32,
            PktKind::Ack { .. } => 0,
            PktKind::Probe => PROBE_BYTES as u32,
            PktKind::ProbeResp { state } => match state {
                ProbeState::Missing { map_bytes } => PROBE_BYTES as u32 + map_bytes,
                _ => PROBE_BYTES as u32,
            },
        }
    }
}

/// A packet the NIC model tracks (the fabric's packet carries its index as tag).
#[derive(Clone, Debug)]
pub(crate) struct PktInfo {
    pub(crate) msg: u32,
    pub(crate) kind: PktKind,
    pub(crate) from: Rank,
    pub(crate) to: Rank,
    pub(crate) rail: u8,
    /// Receive-buffer space the packet holds at its destination NIC until consumed:
    /// (node, rail, (vc, private, shared)).
    pub(crate) held: Option<Held>,
    /// Generation of the message slot when the packet was made: a packet of a message that
    /// has since completed (a duplicate, or a late original) is told apart and discarded.
    pub(crate) gen: u32,
    /// Transmission attempt of its message (0: the first; reliable messages only).
    pub(crate) attempt: u8,
    /// Its injection starts the message's retransmission timer (the last packet of a
    /// transmission, a request, a probe).
    pub(crate) arm: bool,
    /// The engine whose transmit backlog it waits in (`nic.tx_queue`).
    pub(crate) tx_engine: Option<u16>,
}

/// Receive-buffer credits a delivered packet holds: (node, rail, (vc, private, shared)).
pub(crate) type Held = (NodeId, u8, (u8, u16, u16));
