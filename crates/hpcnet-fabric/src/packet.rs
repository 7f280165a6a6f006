//! The packet: the unit the fabric moves.
//!
//! hpcnet is packet level with cut-through timing: a packet occupies buffers and links as one
//! unit; its head and tail times are tracked so virtual cut-through pipelining, serialisation and
//! credit return are exact without simulating flits one by one.

use crate::topology::{NodeId, PortIdx};
use hpcnet_des::SimTime;

/// Index of a packet in the network's packet slab.
pub type PacketId = u32;

/// Routing state bits.
pub(crate) const F_CROSSED: u8 = 1; // crossed the dateline of the current dimension
pub(crate) const F_ESCAPE: u8 = 2; // travelling on the escape VC (minimal adaptive)
pub(crate) const F_MEASURED: u8 = 4; // generated inside the measurement window
pub(crate) const F_MCAST: u8 = 8; // multicast: `dst` holds the group until ejection
pub(crate) const F_GHOST: u8 = 16; // corrupted copy in a cut-through receiver (crate::linkerr)
pub(crate) const F_STOMPED: u8 = 32; // corrupted copy forwarded with a bad end marker
pub(crate) const F_BYPASS: u8 = 64; // `path` is a fault-bypass route (VCs relative to the class)
pub(crate) const F_DETOUR: u8 = 128; // Valiant/UGAL: on the way to the intermediate group
/// Valiant/UGAL (dragonfly, no dateline there): the source router has chosen the path. Shares
/// the bit of [`F_CROSSED`], which only torus routing uses.
pub(crate) const F_CHOSEN: u8 = F_CROSSED;

/// No dimension yet (just injected).
pub(crate) const NO_DIM: u8 = u8::MAX;

/// A packet in flight: 64 bytes, aligned to a cache line, so each router traversal touches one
/// line of it (at 80 bytes most packets straddled two). Routing decisions at the current router
/// live with the input queue's request, not here; the source route is behind one pointer.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub struct Packet {
    /// Caller's identifier (message id, sequence number...); the fabric never reads it.
    pub tag: u64,
    pub src: NodeId,
    pub dst: NodeId,
    /// NIC port (plane) the packet travels on.
    pub rail: u8,
    /// Bytes on the wire: header + payload.
    pub size: u32,
    /// VC class chosen at injection (spreads load over VCs under deterministic routing).
    pub class: u8,
    /// VC of the buffer the packet currently occupies.
    pub vc: u8,
    /// Router traversals so far.
    pub hops: u16,
    /// Torus routing: the dimension of the last step. Valiant and UGAL (dragonfly): the second
    /// byte of the packet's random bits, with `salt` the 16 bits that pick its intermediate group.
    pub(crate) last_dim: u8,
    /// Random bits for oblivious routing choices (the direction of a k/2 tie under the
    /// `random` tie rule, the start of a `random` port selection), drawn by the network at
    /// injection from the run's seeded stream when the routing uses them; 0 otherwise.
    pub salt: u8,
    pub(crate) flags: u8,
    /// Credits the packet occupies in a buffer.
    pub(crate) credits: u16,
    /// Of those, credits taken from the shared pool of the buffer it occupies.
    pub(crate) shared_used: u16,
    /// When the caller created the packet (source queueing counts in latency).
    pub created: SimTime,
    /// When its head left the source NIC.
    pub injected: SimTime,
    /// When its tail is fully in the buffer it occupies.
    pub(crate) tail_at: SimTime,
    /// Source route: output port and VC (bit 7: enters a ring) at each router, computed at
    /// injection, or a fault-bypass route shared by the packets of a pair of routers (a thin
    /// pointer: 8 bytes in the packet instead of 16).
    #[allow(clippy::rc_buffer)]
    pub(crate) path: Option<std::sync::Arc<Vec<(PortIdx, u8)>>>,
}

const _: () = assert!(std::mem::size_of::<Packet>() == 64);

impl Packet {
    /// A new packet of `payload` bytes plus `header`; the rest is filled at injection.
    pub fn new(tag: u64, src: NodeId, dst: NodeId, payload: u32, header: u32, created: SimTime) -> Self {
        Packet {
            tag,
            src,
            dst,
            rail: 0,
            size: payload + header,
            class: 0,
            vc: 0,
            hops: 0,
            last_dim: NO_DIM,
            salt: 0,
            flags: 0,
            credits: 0,
            shared_used: 0,
            created,
            injected: SimTime::ZERO,
            tail_at: SimTime::ZERO,
            path: None,
        }
    }

    /// A multicast packet of `group` ([`crate::multicast`]): routers copy it along the group's
    /// tables. Until a copy leaves the fabric its `dst` holds the group number; each delivered
    /// copy has `dst` set to the node it reached.
    pub fn multicast(tag: u64, src: NodeId, group: u32, payload: u32, header: u32, created: SimTime) -> Self {
        let mut p = Packet::new(tag, src, NodeId(group), payload, header, created);
        p.flags |= F_MCAST;
        p
    }

    /// Move the packet out, leaving a cheap placeholder (an endpoint keeping a delivered
    /// packet takes it out of the network's slot this way).
    pub fn take(&mut self) -> Packet {
        std::mem::replace(self, Packet::new(0, NodeId(0), NodeId(0), 0, 0, SimTime::ZERO))
    }

    /// Whether this is a multicast packet (or a copy of one).
    pub fn is_multicast(&self) -> bool {
        self.flags & F_MCAST != 0
    }

    pub fn measured(&self) -> bool {
        self.flags & F_MEASURED != 0
    }

    pub fn set_measured(&mut self, m: bool) {
        if m {
            self.flags |= F_MEASURED;
        } else {
            self.flags &= !F_MEASURED;
        }
    }
}
