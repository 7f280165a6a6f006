//! hpcnet-coll — collective operations (barrier, broadcast, reduce, allreduce, allgather,
//! alltoall, reduce-scatter) for async rank programs, computed on real bytes by software algorithms over the
//! verbs API of `hpcnet-msg`.
//!
//! - [`Comm`]: a communicator (any ordered subset of ranks, or a [`Comm::split`] by colour and
//!   key) and its typed calls;
//! - [`Algorithm`] chosen per call, with the default table [`select`] ([`select_on_nodes`] when
//!   the placement is known: two members per NIC send short allreduces through node leaders):
//!   barrier (dissemination, binomial tree), broadcast (binomial, scatter + ring allgather,
//!   double binary tree on two complementary trees, pipelined chain), reduce (binomial,
//!   Rabenseifner), allreduce (recursive doubling, Rabenseifner, ring, two-level per node),
//!   allgather (ring, recursive doubling for any size, Bruck), reduce-scatter (ring, recursive
//!   halving, pairwise), alltoall (pairwise, Bruck); and [`Algorithm::Hardware`] for barrier, broadcast, reduce and
//!   allreduce — the NICs' hardware collective unit and router multicast (`hpcnet_nic::coll`) on
//!   communicators created with [`CommConfig::hardware`] (one descriptor per member per call:
//!   cost O(1) host work per member); and [`Algorithm::Offload`] for broadcast, reduce and
//!   allreduce — the NICs' triggered offload units (`hpcnet_nic::triggered`) on communicators
//!   created with [`CommConfig::offload`]: each member posts one sequence per pulse (two for the
//!   double binary tree) in one call (host work O(pulses · log p) per member, plus O(p log p)
//!   per distinct pulse size to generate the sequences);
//! - [`Datatype`] / [`ReduceOp`]: `f32`, `f64`, `i32`, `i64` with sum, max, min and (integers
//!   only) bitwise and, or, xor, applied to little-endian bytes;
//! - [`HostCosts`]: the host software cost model (per call, per post, per poll, copy and
//!   reduction rates), and [`noise`]: operating-system detours that stretch the host work;
//! - [`offload`]: descriptor sequences for the Tianhe triggered offload unit of the NIC
//!   (binomial-tree reduce and broadcast, double-binary-tree broadcast, recursive-doubling and
//!   Rabenseifner allreduce, halving reduce), one sequence per member;
//! - the transport: eager RDMA writes with notification and credits (see `transport.rs`).
//!
//! Cost. Memory: a member registers `8 · p` bytes of credit words and keeps one 4-byte slot per
//! member; for each peer it actually exchanges data with (about log2 p peers for the tree and
//! doubling algorithms, 2 for rings, p − 1 for alltoall) it keeps one queue pair, a small state
//! record and `2 · window · (32 B + chunk)` bytes of staging and landing slots, made on first
//! use. Time to simulate: a call moves the bytes its algorithm prescribes (e.g. allreduce by
//! recursive doubling: ⌈log2 p⌉ rounds of the whole vector; ring: 2(p − 1)/p of it) in chunks
//! of at most `chunk` bytes. Each chunk costs one RDMA write and one 8-byte credit write — their
//! packets through the NIC and network models, about six host-time waits (post, completion
//! polls, copy), one wake-up of each rank program per completion — plus copies and reductions
//! linear in its bytes. So the simulator's work grows with the number of chunks (for a ring
//! allreduce about 2p² chunks of n/p bytes when n/p fits a chunk, 2p²·⌈n/(p·chunk)⌉ in general;
//! for recursive doubling p·⌈log2 p⌉·⌈n/chunk⌉) and with the bytes (p·n per pass over the data).
//! Figures: docs/PERFORMANCE.md.
//!
//! ```
//! use hpcnet_coll::{Algorithm, Comm, CommConfig, ReduceOp};
//! use hpcnet_msg::verbs::{Machine, Rank};
//! let mut m = Machine::new(hpcnet_msg::verbs::doc_world());
//! let comms = Comm::create(&m, &[Rank(0), Rank(1)], &CommConfig::default()).unwrap();
//! for mut c in comms {
//!     m.spawn(async move {
//!         let me = c.rank() as i64;
//!         let sum = c.allreduce(&[me, 10], ReduceOp::Sum, Algorithm::Auto).await.unwrap();
//!         assert_eq!(sum, vec![1, 20]);
//!         c.barrier(Algorithm::Auto).await.unwrap();
//!     });
//! }
//! assert_eq!(m.run().stuck_tasks, 0);
//! ```
//!
//! Every bad call returns a [`CollError`]: a bitwise operator on floats, a length that is not
//! whole elements, a root outside the communicator, and — found when the first message arrives —
//! members that disagree on sizes, datatypes, operators, roots or the order of collectives.

mod algo;
mod comm;
mod cost;
mod error;
pub mod noise;
pub mod offload;
mod transport;
mod types;

pub use algo::{implements, select, select_on_nodes, Algorithm, Collective};
pub use comm::{Comm, CommConfig};
pub use cost::HostCosts;
pub use error::CollError;
pub use noise::{HostNoise, NoiseClock};
pub use transport::TransportConfig;
pub use types::{check_op, from_bytes, reduce_into, reduce_into_right, to_bytes, Datatype, Element, ReduceOp};

/// A call signature (collective, datatype, operator), as carried in message headers, in words.
pub(crate) fn signature_name(s: u32) -> String {
    let coll = match s >> 16 {
        0 => "barrier",
        1 => "broadcast",
        2 => "reduce",
        3 => "allreduce",
        4 => "allgather",
        5 => "alltoall",
        6 => "reduce_scatter",
        _ => "an unknown collective",
    };
    let dt = match (s >> 8) & 0xff {
        0 => " on f32",
        1 => " on f64",
        2 => " on i32",
        3 => " on i64",
        _ => "",
    };
    let op = match s & 0xff {
        0 => " with sum",
        1 => " with max",
        2 => " with min",
        3 => " with band",
        4 => " with bor",
        5 => " with bxor",
        _ => "",
    };
    format!("{coll}{dt}{op}")
}
