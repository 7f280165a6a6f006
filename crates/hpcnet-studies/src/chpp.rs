//! What the cHPP studies share: the four message primitives of spec 02's tables.

use crate::Fitted;
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

/// The two-controller scenario of the latency, bandwidth and VF studies.
pub(crate) const PAIR_TOML: &str = include_str!("../../../scenarios/chpp-pair.toml");
pub(crate) const PAIR_PATH: &str = "scenarios/chpp-pair.toml";

// The calibration of `scenarios/chpp-pair.toml`: each parameter, the published point it was
// fitted to (spec/02-chpp.md) and the study whose calibration row shows the fit.
pub(crate) const FIT_DOORBELL: Fitted = Fitted {
    key: "nic.host.doorbell_latency",
    point: "PUT 1 B latency = 1.762 µs (latency table)",
    study: "chpp-latency",
};
pub(crate) const FIT_NAP_UPLOAD: Fitted = Fitted {
    key: "nic.nap_upload_per_tlp",
    point: "NAP-indirect 1024 B latency = 2.858 µs (latency table)",
    study: "chpp-latency",
};
pub(crate) const FIT_IMMEDIATE: Fitted = Fitted {
    key: "nic.immediate_rate",
    point: "NAP-immediate 1024 B latency = 2.514 µs (latency table)",
    study: "chpp-latency",
};
pub(crate) const FIT_WRITEBACK: Fitted = Fitted {
    key: "nic.writeback_overhead",
    point: "GET 1 B latency = 1.838 µs (latency table)",
    study: "chpp-latency",
};
pub(crate) const FIT_PACKET: Fitted = Fitted {
    key: "nic.packet_overhead",
    point: "3.2 GB/s peak at MTU 128 B: one processing cycle per 128 B packet (bandwidth vs MTU)",
    study: "chpp-bandwidth",
};
/// Every fitted parameter of `scenarios/chpp-pair.toml`.
pub(crate) const PAIR_FITTED: [Fitted; 5] = [FIT_DOORBELL, FIT_NAP_UPLOAD, FIT_IMMEDIATE, FIT_WRITEBACK, FIT_PACKET];
