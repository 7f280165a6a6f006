//! `[mpi]`: the scenario section configuring the connection policy, the allocation sizes and
//! the point-to-point protocols of `hpcnet-mpi` (every key optional; defaults of
//! [`ConnParams::default`] and [`P2pParams::default`]).

use crate::p2p::{JobConfig, P2pParams};
use crate::policy::{ConnParams, Policy};
use hpcnet_des::{Bytes, SimTime};
use serde::{Deserialize, Serialize};

/// The network model MPI-level workloads (`hpcnet nas`) run on.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkModel {
    /// Packets through the router and NIC models.
    #[default]
    Packet,
    /// Max-min fair flows over the same routes (`hpcnet-flow`).
    Flow,
}

/// `[mpi]` as written in a scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MpiSettings {
    /// Network model: `"packet"` (default) or `"flow"`.
    #[serde(default)]
    pub network: NetworkModel,
    /// Flow level only: 0 (default) recomputes max-min rates exactly over the changed flow's
    /// whole component; k ≥ 1 only over the flows within k links of it (an approximation whose
    /// cost does not grow with the number of flows in progress; `hpcnet-flow`).
    #[serde(default)]
    pub flow_local_depth: u32,
    /// Flow level only: messages of at most this many bytes (MPI header included) do not enter
    /// max-min sharing — they leave at their route's residual rate and change no other flow's
    /// rate (an approximation for runs dominated by small messages; `hpcnet-flow`). `0 B`
    /// (default): every message is a shared flow.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flow_small_message: Bytes,
    /// Flow level only: a node's messages to other nodes move one after another in engine
    /// order and release the engine at the unshared rate (the packet-level NIC's transmit FIFO;
    /// an approximation, `hpcnet-flow`). `false` (default): the engine is held until the
    /// message's last byte has crossed its route.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flow_port_fifo: bool,
    /// Connection policy: `rc`, `rc-srq`, `xrc-s`, `xrc-m`, `ud`, or one of the first four with
    /// `-g<size>` (group connection). Default `rc-srq`.
    #[serde(default = "d_policy")]
    pub policy: String,
    /// n: buffers pre-posted per RC queue pair (default 5).
    #[serde(default = "d_prepost")]
    pub prepost: u64,
    /// s1: receive (eager) buffer size (default 8 KiB).
    #[serde(default = "d_buffer")]
    pub buffer: Bytes,
    /// sd: send WQEs per queue pair (default 16).
    #[serde(default = "d_send_depth")]
    pub send_depth: u64,
    /// rd: WQEs of a queue pair's own receive queue (default 16).
    #[serde(default = "d_recv_depth")]
    pub recv_depth: u64,
    /// s2: bytes per WQE (default 64 B).
    #[serde(default = "d_wqe")]
    pub wqe: Bytes,
    /// XRC_M buffer classes (default 6).
    #[serde(default = "d_xrc_classes")]
    pub xrc_classes: u32,
    /// QP context bytes counted per queue pair (default 0 B).
    #[serde(default)]
    pub qp_context: Bytes,
    /// Bytes per completion-queue entry counted (default 0 B).
    #[serde(default)]
    pub cqe: Bytes,
    /// UD datagram size, header included (default 2 KiB), and receive buffers (default 512).
    #[serde(default = "d_ud_mtu")]
    pub ud_mtu: Bytes,
    #[serde(default = "d_ud_recv_depth")]
    pub ud_recv_depth: u64,
    /// Creating and connecting one queue pair on demand (default 30 us).
    #[serde(default = "d_qp_create")]
    pub qp_create: SimTime,
    /// Kernel transition of an on-demand connection (default 5 us).
    #[serde(default = "d_kernel_transition")]
    pub kernel_transition: SimTime,
    /// Largest eager message, header included (default 8 KiB).
    #[serde(default = "d_eager_threshold")]
    pub eager_threshold: Bytes,
    /// Registered send buffers (default 64).
    #[serde(default = "d_send_buffers")]
    pub send_buffers: u64,
    /// Wait before resending a message that found no receive buffer (default 10 us).
    #[serde(default = "d_rnr_retry")]
    pub rnr_retry: SimTime,
}

fn is_zero(b: &Bytes) -> bool {
    b.0 == 0
}
fn d_policy() -> String {
    "rc-srq".into()
}
fn d_prepost() -> u64 {
    ConnParams::default().prepost
}
fn d_buffer() -> Bytes {
    Bytes(ConnParams::default().buffer)
}
fn d_send_depth() -> u64 {
    ConnParams::default().send_depth
}
fn d_recv_depth() -> u64 {
    ConnParams::default().recv_depth
}
fn d_wqe() -> Bytes {
    Bytes(ConnParams::default().wqe)
}
fn d_xrc_classes() -> u32 {
    ConnParams::default().xrc_classes
}
fn d_ud_mtu() -> Bytes {
    Bytes(ConnParams::default().ud_mtu)
}
fn d_ud_recv_depth() -> u64 {
    ConnParams::default().ud_recv_depth
}
fn d_qp_create() -> SimTime {
    ConnParams::default().qp_create
}
fn d_kernel_transition() -> SimTime {
    ConnParams::default().kernel_transition
}
fn d_eager_threshold() -> Bytes {
    Bytes(P2pParams::default().eager_threshold)
}
fn d_send_buffers() -> u64 {
    P2pParams::default().send_buffers
}
fn d_rnr_retry() -> SimTime {
    P2pParams::default().rnr_retry
}

impl Default for MpiSettings {
    fn default() -> Self {
        MpiSettings {
            network: NetworkModel::Packet,
            flow_local_depth: 0,
            flow_small_message: Bytes(0),
            flow_port_fifo: false,
            policy: d_policy(),
            prepost: d_prepost(),
            buffer: d_buffer(),
            send_depth: d_send_depth(),
            recv_depth: d_recv_depth(),
            wqe: d_wqe(),
            xrc_classes: d_xrc_classes(),
            qp_context: Bytes(0),
            cqe: Bytes(0),
            ud_mtu: d_ud_mtu(),
            ud_recv_depth: d_ud_recv_depth(),
            qp_create: d_qp_create(),
            kernel_transition: d_kernel_transition(),
            eager_threshold: d_eager_threshold(),
            send_buffers: d_send_buffers(),
            rnr_retry: d_rnr_retry(),
        }
    }
}

impl MpiSettings {
    /// The job configuration these settings describe, or (key, reason) for the first bad one.
    pub fn job_config(&self) -> Result<JobConfig, (String, String)> {
        let policy = Policy::parse(&self.policy).map_err(|e| ("mpi.policy".to_string(), e.to_string()))?;
        let conn = ConnParams {
            prepost: self.prepost,
            buffer: self.buffer.0,
            send_depth: self.send_depth,
            recv_depth: self.recv_depth,
            wqe: self.wqe.0,
            xrc_classes: self.xrc_classes,
            qp_context: self.qp_context.0,
            cqe: self.cqe.0,
            ud_mtu: self.ud_mtu.0,
            ud_recv_depth: self.ud_recv_depth,
            qp_create: self.qp_create,
            kernel_transition: self.kernel_transition,
        };
        conn.check().map_err(|e| match e {
            crate::ConnError::Param(k, r) => (format!("mpi.{k}"), r),
            crate::ConnError::Policy(_, r) => ("mpi.policy".to_string(), r),
        })?;
        if self.send_buffers == 0 || self.send_buffers > 1 << 20 {
            return Err((
                "mpi.send_buffers".into(),
                format!("must be 1 to 1048576, got {}", self.send_buffers),
            ));
        }
        if self.eager_threshold.0 < crate::p2p::HEADER {
            return Err((
                "mpi.eager_threshold".into(),
                format!(
                    "must hold the {}-byte header, got {}",
                    crate::p2p::HEADER,
                    self.eager_threshold
                ),
            ));
        }
        if self.ud_mtu.0 <= crate::p2p::HEADER {
            return Err((
                "mpi.ud_mtu".into(),
                format!(
                    "must exceed the {}-byte header, got {}",
                    crate::p2p::HEADER,
                    self.ud_mtu
                ),
            ));
        }
        if self.rnr_retry == SimTime::ZERO {
            return Err(("mpi.rnr_retry".into(), "must be longer than 0".into()));
        }
        Ok(JobConfig {
            policy,
            conn,
            p2p: P2pParams {
                eager_threshold: self.eager_threshold.0,
                send_buffers: self.send_buffers,
                rnr_retry: self.rnr_retry,
                ..P2pParams::default()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_libraries_and_bad_keys_are_named() {
        let d = MpiSettings::default().job_config().unwrap();
        assert_eq!(d, JobConfig::new(Policy::parse("rc-srq").unwrap()));
        let bad = |f: fn(&mut MpiSettings)| {
            let mut s = MpiSettings::default();
            f(&mut s);
            s.job_config().unwrap_err().0
        };
        assert_eq!(bad(|s| s.policy = "tcp".into()), "mpi.policy");
        assert_eq!(bad(|s| s.buffer = Bytes(0)), "mpi.buffer");
        assert_eq!(bad(|s| s.send_buffers = 0), "mpi.send_buffers");
        assert_eq!(bad(|s| s.eager_threshold = Bytes(8)), "mpi.eager_threshold");
        assert_eq!(bad(|s| s.rnr_retry = SimTime::ZERO), "mpi.rnr_retry");
    }
}
