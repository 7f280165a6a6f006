//! hpcnet-shmem — an OpenSHMEM library for async rank programs, on the verbs API of
//! `hpcnet-msg` and the collectives of `hpcnet-coll` (spec 03, "SHMEM library"; names and
//! semantics follow OpenSHMEM 1.5 where it has them).
//!
//! A job of `n` processing elements (PEs) is made with [`init`]: PE `i` is rank `i` of the
//! machine. Each PE gets a [`Pe`] handle holding its symmetric heap, and every call is a method
//! on it:
//!
//! ```
//! use hpcnet_shmem::{init, Cmp, ShmemConfig};
//! use hpcnet_msg::verbs::Machine;
//! let mut m = Machine::new(hpcnet_msg::verbs::doc_world());
//! for mut pe in init(&m, 2, &ShmemConfig::default()).unwrap() {
//!     m.spawn(async move {
//!         let x = pe.malloc(8).await.unwrap(); // collective: same offset on every PE
//!         if pe.my_pe() == 0 {
//!             pe.p::<i64>(x, 42, 1).await.unwrap(); // store into PE 1's copy
//!             pe.quiet().await.unwrap();
//!         } else {
//!             pe.wait_until::<i64>(x, Cmp::Eq, 42).await.unwrap();
//!         }
//!         pe.barrier_all().await.unwrap();
//!     });
//! }
//! assert_eq!(m.run().stuck_tasks, 0);
//! ```
//!
//! What the library does on the NIC, and why (spec 03):
//! - **Symmetric heap**: one registered region of [`ShmemConfig::heap`] bytes per PE; a
//!   symmetric object ([`Sym`]) is an offset into it, the same on every PE, so a PE names remote
//!   data by its own address. Allocation is collective: the k-th `malloc` of every PE must ask
//!   the same size (checked), and ends with a barrier, as the standard says.
//! - **put** is an RDMA write from the heap or from a private staging buffer (a copy at the
//!   host's copy rate, as write-combined PIO sends copy into the NIC); **get** an RDMA read;
//!   **atomics** the NIC's remote atomics on 4- and 8-byte integers (add and xor are NICEVT's
//!   hardware operations; and, or, swap, fetch-add and compare-swap are modelled at the same
//!   cost).
//! - **Ordering**: when the machine keeps the order of a pair's messages
//!   ([`hpcnet_msg::verbs::Context::in_order`]: deterministic routing, one VC class per kind of
//!   packet, one rail), puts complete locally with no acknowledgement, `fence` is free, and
//!   `quiet` acknowledges only the last write to each destination (an acknowledged flush
//!   write behind them) — the spec's "acknowledge the last operation to each destination".
//!   Otherwise every put is acknowledged, and `fence` waits for all of them as `quiet` does.
//! - **Barriers**: [`Pe::barrier_all`] is the classic one (quiet, then a dissemination
//!   barrier over puts of an epoch number); [`Pe::barrier_all_fast`] is the NICEVT fast
//!   barrier — every PE leaves once it has received every message sent to it before the
//!   barrier: the PEs sum their per-destination message counts by a radix-r dissemination
//!   exchange (⌈log_r n⌉ rounds, [`ShmemConfig::fast_radix`]) and each waits until the NIC's
//!   arrival counter of its heap reaches its sum (module `fast`). No acknowledgement is
//!   awaited.
//! - **Point synchronisation** (`wait_until`, `test`, `signal_wait_until`) sleeps until the NIC
//!   writes into the PE's memory (no polling events), then re-checks.
//! - **Locks** are MCS queue locks: one swap on the lock word (on PE 0), then the waiter spins
//!   on its own memory; release hands the lock to the successor with one put.
//! - **Collectives** on teams and active sets go through `hpcnet-coll` communicators, made when
//!   a team first uses them; `prod` reductions, which the collectives layer does not offer, are
//!   an allgather followed by the product in member order.
//!
//! Host time: every call, post and look after a wait costs the CPU time of [`ShmemCosts`]
//! (scenario `[shmem]`).
//!
//! Cost: a put, get or atomic is one message through the NIC and network models (plus a staged
//! copy for puts from private data); `quiet` in ordered mode one flush write per destination
//! written since the last quiet; a dissemination barrier ⌈log2 n⌉ rounds of one 8-byte write; a
//! fast barrier at most (r − 1)·⌈log_r n⌉ writes per PE carrying about `4n` bytes of counts
//! in all, and O(n) host work; memory per PE: the heap, a synchronisation region of 4 KiB plus
//! the fast barrier's mailboxes (about 2 × 4n bytes), the staging buffer, and one queue pair
//! per PE it talks to (made on first use).
//!
//! Every invalid call returns a [`ShmemError`] naming the OpenSHMEM call and the reason — a
//! remote address outside the symmetric heap, a PE outside the job or team, a misaligned
//! atomic, mismatched collective allocations — never a panic.

mod coll;
mod fast;
mod heap;
mod pe;
mod sync;

pub use coll::{ShmemOp, Team};
pub use pe::{Pe, ShmemInt};
pub use sync::Cmp;

use hpcnet_coll::{CollError, CommConfig};
use hpcnet_des::{BitsPerSec, SimTime};
use hpcnet_msg::verbs::{Machine, VerbsError};
use hpcnet_msg::NicBackend;
use hpcnet_nic::CqeStatus;

/// A symmetric object: `len` bytes at offset `off` of every PE's symmetric heap.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sym {
    off: u64,
    len: u64,
}

impl Sym {
    /// The `len` bytes at offset `off` of the symmetric heap (for programs that name symmetric
    /// data by offset, as the C interface does; calls check the range against the heap).
    pub fn from_offset(off: u64, len: u64) -> Sym {
        Sym { off, len }
    }
    /// Offset in the symmetric heap (the same on every PE).
    pub fn offset(&self) -> u64 {
        self.off
    }
    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The part of this object from byte `from` to its end (empty past the end).
    pub fn at(&self, from: u64) -> Sym {
        let from = from.min(self.len);
        Sym {
            off: self.off + from,
            len: self.len - from,
        }
    }
    /// The first `len` bytes of this object's place (they may reach past its end: calls check
    /// them against the heap).
    pub fn with_len(&self, len: u64) -> Sym {
        Sym { off: self.off, len }
    }
    /// Element `i` of this object seen as an array of `T`.
    pub fn elem<T>(&self, i: u64) -> Sym {
        let size = std::mem::size_of::<T>() as u64;
        let from = (i * size).min(self.len);
        Sym {
            off: self.off + from,
            len: size.min(self.len - from),
        }
    }
}

/// Which barrier [`Pe::barrier_all`] is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum BarrierKind {
    /// quiet + dissemination barrier (OpenSHMEM's `shmem_barrier_all`).
    #[default]
    Classic,
    /// The NICEVT fast barrier (spec 03): leave once everything sent to this PE has arrived.
    Fast,
}

/// Host software costs of the library: the CPU time a PE spends in it besides waiting for the
/// NIC and the network, charged as simulated time where the software spends it (as the
/// collectives layer's [`hpcnet_coll::HostCosts`]). Scenario key `[shmem]` sets them.
///
/// - `per_call`: once per library call, on entry;
/// - `per_post`: before each operation the library hands the NIC (put, get, atomic, the flush
///   write of `quiet`, every barrier or lock notification), so back-to-back posts are spaced by
///   it;
/// - `per_poll`: each time the library looks again after waiting — a completion it waited
///   for, or a memory word it re-reads after the NIC wrote into its memory (`wait_until`,
///   barriers, locks). Completions already queued when it looks are taken at no extra cost
///   (the NICEVT library reads the NIC's counters, not one completion entry per put).
/// - `copy_rate`: the CPU copy of private data into the staging buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct ShmemCosts {
    /// Default 50 ns — assumption: a few dozen instructions of argument checks and address
    /// translation (symmetric offset → remote address) before the first post.
    pub per_call: SimTime,
    /// Default 100 ns — the collectives layer's `coll.per_post`: building a descriptor and one
    /// uncached doorbell store, the order of `ibv_post_send` on current InfiniBand hosts.
    /// NICs written by write-combined PIO stores cost less (scenario `shmem.per_post`).
    pub per_post: SimTime,
    /// Default 50 ns — the collectives layer's `coll.per_poll`: one cache miss on the
    /// completion entry or the watched word, plus bookkeeping.
    pub per_poll: SimTime,
    /// Default 64 Gb/s — assumption: one core's memcpy.
    pub copy_rate: BitsPerSec,
}

impl Default for ShmemCosts {
    fn default() -> Self {
        ShmemCosts {
            per_call: SimTime::from_ns(50),
            per_post: SimTime::from_ns(100),
            per_poll: SimTime::from_ns(50),
            copy_rate: BitsPerSec::gbps(64.0),
        }
    }
}

impl ShmemCosts {
    /// No host costs: only the NIC and the network take time.
    pub fn zero() -> Self {
        ShmemCosts {
            per_call: SimTime::ZERO,
            per_post: SimTime::ZERO,
            per_poll: SimTime::ZERO,
            copy_rate: BitsPerSec(0),
        }
    }
}

/// How a job is set up.
#[derive(Clone, Debug, PartialEq)]
pub struct ShmemConfig {
    /// Symmetric heap bytes per PE (default 1 MiB).
    pub heap: u64,
    /// Bytes at the start of the symmetric heap that the allocator never hands out (default
    /// 0): the C interface keeps a program's static symmetric data there.
    pub reserved: u64,
    /// Private staging buffer bytes per PE for puts of private data and blocking gets
    /// (default 256 KiB); larger transfers are cut into pieces of this size.
    pub staging: u64,
    pub costs: ShmemCosts,
    /// What [`Pe::barrier_all`] is (default classic).
    pub barrier: BarrierKind,
    /// Radix of the fast barrier's count exchange (default 8): a PE sends up to `radix − 1`
    /// messages in each of ⌈log_radix n⌉ rounds; a radix of at least n is one round of n − 1
    /// messages. Values below 2 are taken as 2.
    pub fast_radix: usize,
    /// Collectives' communicators (transport and host costs of `hpcnet-coll`).
    pub coll: CommConfig,
}

impl Default for ShmemConfig {
    fn default() -> Self {
        ShmemConfig {
            heap: 1 << 20,
            reserved: 0,
            staging: 256 << 10,
            costs: ShmemCosts::default(),
            barrier: BarrierKind::Classic,
            fast_radix: 8,
            coll: CommConfig::default(),
        }
    }
}

/// Largest symmetric heap per PE (the model keeps real bytes).
pub const MAX_HEAP: u64 = 1 << 32;

/// An invalid call or a failed operation, naming the OpenSHMEM call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ShmemError {
    #[error("{call}: PE {pe} does not exist (the job has {npes} PEs)")]
    NoSuchPe { call: &'static str, pe: usize, npes: usize },
    #[error("{call}: {len} bytes at symmetric offset {off:#x} lie outside the symmetric heap of {heap} bytes")]
    OutsideHeap {
        call: &'static str,
        off: u64,
        len: u64,
        heap: u64,
    },
    #[error("{call}: {reason}")]
    BadArgument { call: &'static str, reason: String },
    #[error("{call}: the symmetric heap has no room for {len} bytes ({free} bytes free in all, heap {heap} bytes)")]
    HeapFull {
        call: &'static str,
        len: u64,
        free: u64,
        heap: u64,
    },
    #[error(
        "{call}: PE {pe} made collective allocation {index} as {got}, but PE {first} made it as {want} \
         (symmetric allocations must be made in the same order with the same sizes on every PE)"
    )]
    AllocMismatch {
        call: &'static str,
        index: usize,
        pe: usize,
        got: String,
        first: usize,
        want: String,
    },
    #[error("{call}: the operation failed at PE {pe}: {status:?}")]
    Failed {
        call: &'static str,
        pe: usize,
        status: CqeStatus,
    },
    #[error("{call}: {source}")]
    Verbs { call: &'static str, source: VerbsError },
    #[error("{call}: {source}")]
    Coll { call: &'static str, source: CollError },
}

/// Start a job of `npes` PEs on the machine (ranks `0..npes`): register every PE's symmetric
/// heap, synchronisation region and staging buffer, and return one handle per PE, in PE order
/// (OpenSHMEM `shmem_init` for all PEs at once, as a launcher does).
pub fn init<B: NicBackend + 'static>(m: &Machine<B>, npes: usize, cfg: &ShmemConfig) -> Result<Vec<Pe>, ShmemError> {
    pe::init(m, npes, cfg, None)
}

/// [`init`] with every PE's symmetric heap living in memory outside the model, one per PE in
/// PE order, each [`ShmemConfig::heap`] bytes long (they keep their contents): the memory of
/// the processes of a C program, so that what the NICs write lands in those processes.
pub fn init_external<B: NicBackend + 'static>(
    m: &Machine<B>,
    npes: usize,
    cfg: &ShmemConfig,
    heaps: Vec<Box<dyn hpcnet_nic::ExternalBytes>>,
) -> Result<Vec<Pe>, ShmemError> {
    pe::init(m, npes, cfg, Some(heaps))
}
