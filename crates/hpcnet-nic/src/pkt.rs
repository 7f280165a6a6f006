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
}

/// Receive-buffer credits a delivered packet holds: (node, rail, (vc, private, shared)).
pub(crate) type Held = (NodeId, u8, (u8, u16, u16));
