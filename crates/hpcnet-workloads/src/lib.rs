//! hpcnet-workloads — what runs on the simulated machine: the scenario format (a TOML file
//! describing machine and workload), synthetic traffic (patterns, injection processes, packet
//! sizes, warm-up/measurement/drain phases) and the drivers that run them and report results.

pub mod coll;
pub mod exchange;
pub mod imb;
pub mod msgload;
pub mod nas;
pub mod p2p;
pub mod scenario;
pub mod shmem;
pub mod synthetic;
pub mod traffic;

pub use scenario::{Scenario, ScenarioError};
pub use synthetic::{run_synthetic, RunReport};

pub use hpcnet_nic::Rank;
