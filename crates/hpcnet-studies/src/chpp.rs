//! What the cHPP studies share: the four message primitives of spec 02's tables.

use hpcnet_workloads::p2p::LatencyOp;

/// A cHPP message primitive (spec 02): NAP with immediate or indirect data, PUT, GET.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Prim {
    NapImm,
    NapInd,
    Put,
    Get,
}

impl Prim {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Prim::NapImm => "NAP-imm",
            Prim::NapInd => "NAP-ind",
            Prim::Put => "PUT",
            Prim::Get => "GET",
        }
    }

    /// The single-message latency test of this primitive (doorbell to data written).
    pub(crate) fn op(self) -> LatencyOp {
        match self {
            Prim::NapImm => LatencyOp::NapImmediate,
            Prim::NapInd => LatencyOp::NapIndirect,
            Prim::Put => LatencyOp::Put,
            Prim::Get => LatencyOp::Get,
        }
    }

    pub(crate) fn is_nap(self) -> bool {
        matches!(self, Prim::NapImm | Prim::NapInd)
    }
}
