//! hpcnet-mpi — connection policies and an MPI-like point-to-point layer over the verbs API
//! (spec 05, InfiniBand connection scalability).
//!
//! - [`policy`]: the transports (RC, RC+SRQ, XRC with one or several buffer sizes, UD), group
//!   connection, the allocation parameters and the process layout;
//! - [`alloc`]: the per-process connection allocator and its memory account — the one place
//!   that decides what the library allocates, used both by simulated runs and by memory
//!   studies at 10⁴–10⁶ processes;
//! - [`p2p`]: the MPI-like point-to-point layer (tag matching, eager sends through pre-posted
//!   buffers, rendezvous by RDMA read, on-demand connections, non-blocking calls) on the verbs
//!   API, executing the allocator's decisions;
//! - [`config`]: the `[mpi]` scenario section.
//!
//! Layering: above `hpcnet-msg` (verbs) and below the workloads; it owns connection decisions,
//! memory accounting and (in [`p2p`]) matching and protocols, nothing of the NIC or fabric.

pub mod alloc;
pub mod config;
pub mod p2p;
pub mod policy;

pub use alloc::{Action, Allocator, MemoryAccount, Target};
pub use config::{MpiSettings, NetworkModel};
pub use p2p::{Endpoint, Job, JobConfig, MpiError, P2pParams, Request, Status};
pub use policy::{ConnError, ConnParams, Layout, Policy, Transport};
