//! hpcnet-msg — the message library that rank programs call.
//!
//! - [`verbs`]: the verbs-like API (queue pairs, completion and receive queues, memory regions,
//!   RDMA with notification and reply word, FSM, atomics, cHPP NAP/PUT/GET) and the [`Machine`]
//!   that runs rank programs on a NIC model;
//! - [`nic`]: the narrow interface ([`NicBackend`]) through which the library reaches a NIC
//!   model.

pub mod nic;
pub mod verbs;

pub use nic::NicBackend;
pub use verbs::{Context, Machine, Rank};
