//! Errors of collective calls: every bad call is reported to the rank program as a value.

use hpcnet_msg::verbs::VerbsError;
use hpcnet_nic::Rank;

/// Why a collective call failed. `call` names the collective (`"allreduce"`, ...).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CollError {
    /// Bitwise operators are defined on integers only.
    #[error("{call}: operator {op} is not defined on {dtype} (bitwise operators take integers only)")]
    OpOnType {
        call: &'static str,
        op: &'static str,
        dtype: &'static str,
    },
    /// A buffer length is not a whole number of elements, or not what the call needs.
    #[error("{call}: {reason}")]
    BadBuffer { call: &'static str, reason: String },
    /// A root or peer index is not a member of the communicator.
    #[error("{call}: rank {index} is outside the communicator of {size} ranks")]
    RankOutside {
        call: &'static str,
        index: usize,
        size: usize,
    },
    /// The algorithm does not implement this collective.
    #[error("{call}: algorithm {algorithm:?} does not implement this collective")]
    Unsupported {
        call: &'static str,
        algorithm: crate::Algorithm,
    },
    /// The algorithm implements this collective, but not for this communicator or buffer.
    #[error("{call}: algorithm {algorithm:?} {reason}")]
    AlgorithmLimit {
        call: &'static str,
        algorithm: crate::Algorithm,
        reason: String,
    },
    /// Ranks of one communicator disagree about the call (its size, datatype, operator, root,
    /// or which collective comes next), found when a message from `peer` arrived.
    #[error("{call}: rank {peer} disagrees: {reason}")]
    Mismatch {
        call: &'static str,
        peer: Rank,
        reason: String,
    },
    /// Another member found an error in a call and left the communicator.
    #[error("{call}: rank {peer} aborted the communicator after an error")]
    Aborted { call: &'static str, peer: Rank },
    /// A communicator could not be built.
    #[error("communicator: {0}")]
    BadComm(String),
    /// A verbs call was refused or a transfer completed with an error.
    #[error("{call}: transport: {reason}")]
    Transport { call: &'static str, reason: String },
    /// Members posted hardware collective descriptors that disagree; the NICs found it where
    /// the descriptors met in the tree and every member's call failed.
    #[error("{call}: members posted hardware collective descriptors that disagree (collective, root, datatype, operator or size)")]
    HardwareMismatch { call: &'static str },
    /// An earlier call on this communicator failed; its message state is no longer consistent.
    #[error("{call}: the communicator failed in an earlier call and cannot be used")]
    Poisoned { call: &'static str },
}

impl CollError {
    pub(crate) fn verbs(call: &'static str, e: VerbsError) -> CollError {
        CollError::Transport {
            call,
            reason: e.to_string(),
        }
    }
}
