//! The Tianhe triggered collective offload unit (spec 04: "Tianhe NIC collective offload:
//! order-preserving triggering and data buffering") — its core mechanisms as building blocks.
//!
//! - [`key`]: the 48-bit packet key JobID(8) + NodeID(24) + VP(11) + SeqID(5), with field
//!   widths enforced;
//! - [`hashbuf`]: the hash-table packet buffer (open addressing, 10 % collision reserve,
//!   validity bitmap, parked reads, occupancy and collision statistics);
//! - [`pulse`]: the pulsed credit controller that bounds the reduction data in flight;
//! - [`desc`]: the collective descriptor with every field of the spec, sequence validation,
//!   and the sequence walker — a pure state machine that names the packets a step waits for,
//!   fires the step (replace data / VP / address, or reduce in a fixed order) and says what to
//!   send and when the collective completes;
//! - [`ideal`]: an untimed executor that runs the sequences of many endpoints, each with its
//!   own hash buffer, over a network delivering packets in a seeded random order — the
//!   reference for checking descriptor sequences.
//!
//! These pieces are not yet wired into the [`World`](crate::World): no virtual ports,
//! descriptor queues, scheduler or timing exist for them, and nothing posted through the verbs
//! layer reaches them. They are tested as pure state machines.

pub mod desc;
pub mod hashbuf;
pub mod ideal;
pub mod key;
pub mod pulse;

pub use desc::{CollDescriptor, DescError, Payload, Source, TrigAction, TrigPacket, WalkError, Walker};
pub use hashbuf::{HashBuf, HashBufConfig, HashBufConfigError, HashBufError, HashBufStats, Inserted, Read};
pub use ideal::{run_ideal, Completion, Endpoint, IdealError, IdealRun};
pub use key::{KeyError, PacketKey};
pub use pulse::{Acquire, PulseConfig, PulseController, PulseError, PulseStats};
