//! Typed identities of the NIC layer, and where ranks live.
//!
//! A rank is a process; a NIC (one per fabric node) serves `nic.hosts` host interfaces, one
//! process each, numbered node-major: ranks `n·hosts … n·hosts + hosts − 1` live on node `n`.
//! [`Placement`] is the one place that mapping is computed. Queue pairs, completion queues and
//! receive queues are numbered by the world that creates them; their newtypes keep a completion
//! queue from being passed where a rank or a receive queue is expected.

use hpcnet_fabric::topology::NodeId;
use serde::Serialize;
use std::fmt;

/// A process (rank) of the simulated machine.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Rank(pub u32);

impl Rank {
    /// Position of the rank in per-rank tables.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u32> for Rank {
    fn from(r: u32) -> Self {
        Rank(r)
    }
}

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub(crate) u32);

        impl $name {
            /// Position in the world's table of these objects.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }

            /// The id at position `i`, for NIC models other than [`crate::World`] that keep
            /// their own tables (e.g. a flow-level model behind the message library).
            #[inline]
            pub fn from_index(i: usize) -> Self {
                $name(i as u32)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id!(
    /// A completion queue.
    CqId
);
id!(
    /// A receive queue (one queue pair's own, or shared by several: SRQ).
    RqId
);
id!(
    /// A queue-pair number; it selects the message engine (`qp % nic.engines`) and, within the
    /// engine, the virtual interface.
    QpNum
);
id!(
    /// A one-shot timer a rank program waits on.
    TimerId
);

/// A contiguous piece of memory: (address, length).
pub type Seg = (u64, u64);

/// Which host interface of which NIC a rank uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    hosts: u32,
}

impl Placement {
    /// `hosts` processes per NIC (at least one).
    pub fn new(hosts: u32) -> Placement {
        Placement { hosts: hosts.max(1) }
    }

    /// Processes per NIC.
    pub fn hosts(self) -> u32 {
        self.hosts
    }

    /// The node (NIC) rank `r` lives on.
    #[inline]
    pub fn node_of(self, r: Rank) -> NodeId {
        NodeId(r.0 / self.hosts)
    }

    /// The host interface of its NIC rank `r` uses (0 … hosts − 1).
    #[inline]
    pub fn host_of(self, r: Rank) -> u32 {
        r.0 % self.hosts
    }

    /// The first rank living on `node`.
    #[inline]
    pub fn first_rank(self, node: NodeId) -> Rank {
        Rank(node.0 * self.hosts)
    }
}
