//! hpcnet-coll — collective operations (barrier, broadcast, reduce, allreduce, allgather,
//! alltoall, reduce-scatter) for async rank programs, computed on real bytes by software algorithms over the
//! verbs API of `hpcnet-msg`.
//!
//! - [`Comm`]: a communicator (any ordered subset of ranks, or a [`Comm::split`] by colour and
//!   key) and its typed calls;
//! - [`Algorithm`] chosen per call, with the default table [`select`];
//! - [`Datatype`] / [`ReduceOp`]: `f32`, `f64`, `i32`, `i64` with sum, max, min and (integers
//!   only) bitwise and, or, xor, applied to little-endian bytes;
//! - [`HostCosts`]: the host software cost model (per call, per post, per poll, copy and
//!   reduction rates);
//! - the transport: eager RDMA writes with notification and credits (see `transport.rs`).
//!
//! Cost: a communicator of p members registers `2 · p · window · (32 B + chunk)` bytes and p − 1
//! queue pairs per member. A call moves the bytes its algorithm prescribes (e.g. allreduce by
//! recursive doubling: ⌈log2 p⌉ rounds of the whole vector; ring: 2(p − 1)/p of it) in chunks
//! of at most `chunk` bytes, each one RDMA write and one credit write, and the simulator's work
//! grows with the packets those writes make.
//!
//! Every bad call returns a [`CollError`]: a bitwise operator on floats, a length that is not
//! whole elements, a root outside the communicator, and — found when the first message arrives —
//! members that disagree on sizes, datatypes, operators or the order of collectives.

mod algo;
mod comm;
mod cost;
mod error;
mod transport;
mod types;

pub use algo::{implements, select, Algorithm, Collective};
pub use comm::{Comm, CommConfig};
pub use cost::HostCosts;
pub use error::CollError;
pub use transport::TransportConfig;
pub use types::{check_op, from_bytes, reduce_into, to_bytes, Datatype, Element, ReduceOp};

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
