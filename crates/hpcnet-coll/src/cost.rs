//! The host software cost model: what the CPU spends inside a collective besides waiting for the
//! network. Each cost is charged as simulated time ([`hpcnet_msg::Context::sleep`]) at the point
//! in the rank program where the software would spend it, so it delays the next post. Under
//! operating-system noise ([`HostNoise`]) an interval of host work is stretched by the detours
//! that fall in it.
//!
//! The defaults are round figures for one core of a current server driving an RDMA NIC; none is
//! calibrated against a particular system yet, and each says where it comes from.

use crate::{Datatype, HostNoise};
use hpcnet_des::{BitsPerSec, Bytes, SimTime};

/// Host software costs of the collectives.
#[derive(Clone, Debug, PartialEq)]
pub struct HostCosts {
    /// Entering a collective: argument checks, algorithm selection, schedule set-up.
    /// Default 200 ns — assumption: a few hundred instructions and cache misses of library
    /// code before the first post, the order of the software overhead `o` that LogP/LogGP
    /// fits give for MPI on RDMA hosts (hundreds of ns).
    pub per_call: SimTime,
    /// Building one work request and ringing the doorbell (the copy into the staging slot is
    /// charged separately by `copy_rate`). Default 100 ns — assumption: filling a descriptor
    /// and one uncached doorbell store, the order of `ibv_post_send` costs reported for
    /// current InfiniBand hosts.
    pub per_post: SimTime,
    /// Taking one completion from a completion queue. Default 50 ns — assumption: one cache
    /// miss on the completion entry plus bookkeeping, as a successful `ibv_poll_cq` costs on
    /// current hosts.
    pub per_poll: SimTime,
    /// Copying message bytes between user buffers and the registered staging and landing
    /// buffers (eager protocol). Default 80 Gb/s (10 GB/s) — assumption: `memcpy` bandwidth of
    /// one core on data in cache or local DRAM.
    pub copy_rate: BitsPerSec,
    /// Reduction throughput per datatype, in bits of one operand's input per second, indexed
    /// by [`Datatype`] (`f32`, `f64`, `i32`, `i64`). Default 32 Gb/s (4 GB/s) for every type —
    /// assumption: a vectorised loop streaming two operands and one result from memory on one
    /// core is memory bound at about 12 GB/s of traffic, i.e. 4 GB/s of each operand.
    pub reduce_rate: [BitsPerSec; 4],
    /// Operating-system detours that stretch every interval of the host work above (see
    /// [`crate::noise`]). Default none.
    pub noise: HostNoise,
    /// Seed of the detours' random streams (a scenario uses its own seed). Unused without noise.
    pub noise_seed: u64,
}

impl Default for HostCosts {
    fn default() -> Self {
        HostCosts {
            per_call: SimTime::from_ns(200),
            per_post: SimTime::from_ns(100),
            per_poll: SimTime::from_ns(50),
            copy_rate: BitsPerSec::gbps(80.0),
            reduce_rate: [BitsPerSec::gbps(32.0); 4],
            noise: HostNoise::None,
            noise_seed: 0,
        }
    }
}

impl HostCosts {
    /// No host costs: only the network and the NIC take time.
    pub fn zero() -> Self {
        HostCosts {
            per_call: SimTime::ZERO,
            per_post: SimTime::ZERO,
            per_poll: SimTime::ZERO,
            copy_rate: BitsPerSec(0),
            reduce_rate: [BitsPerSec(0); 4],
            noise: HostNoise::None,
            noise_seed: 0,
        }
    }

    /// Time to copy `bytes` (zero when `copy_rate` is zero, meaning "free").
    pub fn copy(&self, bytes: usize) -> SimTime {
        rate_time(self.copy_rate, bytes)
    }

    /// Time to reduce two operands of `bytes` each.
    pub fn reduce(&self, dtype: Datatype, bytes: usize) -> SimTime {
        rate_time(self.reduce_rate[dtype.code() as usize], bytes)
    }
}

fn rate_time(rate: BitsPerSec, bytes: usize) -> SimTime {
    if rate.get() == 0 || bytes == 0 {
        SimTime::ZERO
    } else {
        rate.serialization(Bytes(bytes as u64))
    }
}
