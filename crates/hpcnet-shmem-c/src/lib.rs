//! hpcnet-shmem-c — the OpenSHMEM C interface: unmodified OpenSHMEM C programs run as one
//! simulated job on a scenario's machine, every SHMEM call carried out by `hpcnet-shmem` on the
//! NIC and network models.
//!
//! Three parts:
//! - [`HEADER`] (`include/shmem.h`) and the PE-side runtime (`runtime/shmem_rt.c`, built by
//!   cargo into [`runtime_archive`]) that programs are linked with (`hpcnet shmem-cc`);
//! - the wire format between a PE process and the simulator ([`proto`]);
//! - the job runner ([`run_job`]): one OS process per PE, each connected to the simulator by a
//!   Unix socket; in the simulator each PE is an async rank program that reads its process's next
//!   request, carries it out on its [`hpcnet_shmem::Pe`] and replies. The simulator is
//!   sequential and a PE process runs only between a reply and its next request, so exactly one
//!   of {the simulator, one PE process} runs at a time: a run is deterministic when the compute
//!   model is.
//!
//! Memory: at `shmem_init` the runtime moves the program's writable static data (the main
//! executable's writable `PT_LOAD` segment less its `PT_GNU_RELRO` pages) onto a shared memory
//! file, maps its symmetric heap behind it in the same file and passes the file to the
//! simulator, which maps it and registers it as the PE's symmetric region
//! ([`hpcnet_nic::ExternalBytes`]): symmetric offset `o < D` is static data, `o ≥ D` the heap.
//! What the simulated NIC writes is the process's memory; nothing is copied at call boundaries.

pub mod proto;

mod conn;
mod job;

pub use job::{run_job, ComputeModel, JobConfig, JobError, JobReport};

/// The OpenSHMEM 1.5 header programs include.
pub const HEADER: &str = include_str!("../include/shmem.h");

/// The PE-side runtime's source (for tools that build it themselves).
pub const RUNTIME_SOURCE: &str = include_str!("../runtime/shmem_rt.c");

const ARCHIVE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libhpcnet_shmem.a"));

/// The PE-side runtime as a static library (`libhpcnet_shmem.a`), built by cargo with the
/// system C compiler; an error when no C compiler was found at build time.
pub fn runtime_archive() -> Result<&'static [u8], String> {
    if ARCHIVE.is_empty() {
        Err(
            "the OpenSHMEM C runtime was not built: no C compiler was found when hpcnet was built \
             (install gcc, e.g. `apt-get install gcc`, and rebuild)"
                .into(),
        )
    } else {
        Ok(ARCHIVE)
    }
}
