//! Dynamic faults: what a scenario may schedule to fail and be repaired during a run, how it is
//! checked before the run, and the routing state recomputed around what has failed.
//!
//! - [`schedule`]: the `[[faults.events]]` schedule (cable, router chip, whole plane, lane
//!   width; fail or repair at a given time) and the seeded random failures of `[[faults.random]]`
//!   (per component class: mean time between failures, repair time), their validation, and the
//!   resolved list of actions the network applies;
//! - [`tables`]: the route tables a management system installs after a failure has been detected
//!   and the management delay has passed: up*/down* tables recomputed on the live tree (spec 01,
//!   "route-table reconstruction");
//! - [`bypass`]: the NICEVT torus fault bypass, "non-standard first and last step" routes per
//!   pair of routers (spec 03), written into the network interfaces' tables.
//!
//! What happens in the network when a fault strikes (packets lost in the failed component, sent
//! into it before it is detected, routers skipping dead ports once they know) is the network's
//! side, in `net_faults.rs`; the model and its sources are described in docs/model-reference.md
//! ("Dynamic faults").

pub mod bypass;
pub mod schedule;
pub mod tables;

pub use schedule::{FaultAction, FaultClass, FaultEvent, FaultKind, RandomFaults};
