//! hpcnet-des — the discrete-event simulation kernel of hpcnet.
//!
//! Everything above this crate (fabric, NICs, message library, workloads) is built on what is
//! defined here:
//! - [`SimTime`], [`Bytes`] and [`BitsPerSec`]: integer picosecond time and unit newtypes, so a unit
//!   slip does not compile;
//! - [`EventQueue`]: events ordered by (time, origin, the origin's own sequence), so equal-time
//!   events of one component run in the order it scheduled them, of different components by
//!   component number, and a run is reproducible;
//! - [`RngStreams`]: independent random streams derived from the scenario seed and a component id;
//! - [`stats`]: a statistics registry (name, unit, description) that components push into;
//! - [`estimate`]: means and confidence intervals of a figure over independent replications;
//! - [`exec`]: a single-threaded executor for async rank programs, woken by simulator events;
//! - [`driver`]: the one run loop (phases, end, deadlock watchdog, progress) every run uses;
//! - [`hash`]: a fast deterministic hasher for maps keyed by integer ids.

pub mod driver;
pub mod estimate;
pub mod exec;
pub mod hash;
pub mod queue;
pub mod rng;
pub mod stats;
pub mod units;

pub use driver::{Driver, Model};
pub use estimate::Estimate;
pub use exec::{Executor, Spawner};
pub use queue::{EventQueue, Origin};
pub use rng::RngStreams;
pub use stats::Registry;
pub use units::{BitsPerSec, Bytes, SimTime, UnitError};
