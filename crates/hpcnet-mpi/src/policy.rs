//! Connection policies, their parameters and the process layout (spec 05, "Transport services"
//! and "Memory models").
//!
//! A [`Policy`] says which transport carries point-to-point messages ([`Transport`]) and,
//! optionally, that connections follow the *group connection* scheme ([`Policy::group`]). The
//! [`ConnParams`] hold the sizes the library allocates with (the spec's n, s1, sd, rd, s2) and
//! the cost of opening a connection on demand. A [`Layout`] places N processes on nodes of c
//! processes each (rank r on node r / c).

use hpcnet_des::SimTime;
use serde::Serialize;
use std::fmt;

/// The transport service a policy uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Reliable connection, one QP per peer process, each QP with its own receive queue of n
    /// pre-posted buffers.
    Rc,
    /// Reliable connection, one QP per peer process, one shared receive queue whose depth is the
    /// number of QPs.
    RcSrq,
    /// Extended reliable connection: one QP per remote node; the sender names the target
    /// process's SRQ. One buffer size.
    XrcS,
    /// XRC with several SRQs of buffer sizes s1, s1/2, …, s1/2^(k−1) (k = `xrc_classes`), equal
    /// buffer counts; the sender picks the smallest buffer that fits.
    XrcM,
    /// Unreliable datagram: one QP serves every peer; no RDMA, messages of at most one MTU.
    Ud,
}

impl Transport {
    pub const ALL: [Transport; 5] = [
        Transport::Rc,
        Transport::RcSrq,
        Transport::XrcS,
        Transport::XrcM,
        Transport::Ud,
    ];

    /// The paper's name (RC, RC_SRQ, XRC_S, XRC_M, UD).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::RcSrq => "RC_SRQ",
            Transport::XrcS => "XRC_S",
            Transport::XrcM => "XRC_M",
            Transport::Ud => "UD",
        }
    }

    /// Connections go to nodes (XRC) rather than to processes.
    pub fn per_node(self) -> bool {
        matches!(self, Transport::XrcS | Transport::XrcM)
    }

    /// Receive buffers come from shared receive queues.
    pub fn shared_rq(self) -> bool {
        matches!(self, Transport::RcSrq | Transport::XrcS | Transport::XrcM)
    }
}

/// A connection policy: a transport, and optionally group connection with groups of `group`
/// processes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub transport: Transport,
    /// Group size of group connection: full connection inside each group of this many
    /// consecutive ranks and among ranks with the same index in every group; any other pair
    /// connects on demand. `None`: every pair is connected at start (full connection).
    pub group: Option<u64>,
}

impl Policy {
    /// Full connection over `transport`.
    pub fn full(transport: Transport) -> Policy {
        Policy { transport, group: None }
    }

    /// Group connection with groups of `size` processes over `transport`.
    pub fn grouped(transport: Transport, size: u64) -> Policy {
        Policy {
            transport,
            group: Some(size),
        }
    }

    /// Parses `rc`, `rc-srq`, `xrc-s`, `xrc-m`, `ud`, optionally followed by `-g<size>` (group
    /// connection), e.g. `xrc-s-g4096`.
    pub fn parse(s: &str) -> Result<Policy, ConnError> {
        let lower = s.to_ascii_lowercase().replace('_', "-");
        let (base, group) = match lower.rfind("-g") {
            Some(i) if lower[i + 2..].chars().all(|c| c.is_ascii_digit()) && i + 2 < lower.len() => {
                let g: u64 = lower[i + 2..]
                    .parse()
                    .map_err(|_| ConnError::Policy(s.to_string(), "group size is not a number".into()))?;
                (&lower[..i], Some(g))
            }
            _ => (lower.as_str(), None),
        };
        let transport = match base {
            "rc" => Transport::Rc,
            "rc-srq" => Transport::RcSrq,
            "xrc-s" => Transport::XrcS,
            "xrc-m" => Transport::XrcM,
            "ud" => Transport::Ud,
            _ => {
                return Err(ConnError::Policy(
                    s.to_string(),
                    "expected rc, rc-srq, xrc-s, xrc-m or ud, optionally followed by -g<group size>".into(),
                ))
            }
        };
        let p = Policy { transport, group };
        p.check()?;
        Ok(p)
    }

    /// Rejects group connection over UD (nothing to connect) and empty groups.
    pub fn check(&self) -> Result<(), ConnError> {
        match (self.transport, self.group) {
            (Transport::Ud, Some(_)) => Err(ConnError::Policy(
                self.to_string(),
                "UD has no connections, so group connection does not apply".into(),
            )),
            (_, Some(0)) => Err(ConnError::Policy(
                self.to_string(),
                "group size must be at least 1".into(),
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.transport.name())?;
        if let Some(g) = self.group {
            write!(f, "_G{g}")?;
        }
        Ok(())
    }
}

/// What the library allocates per connection and what opening one costs.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct ConnParams {
    /// n: receive buffers pre-posted per QP (RC without SRQ). Spec 05: 5.
    pub prepost: u64,
    /// s1: receive (eager) buffer size in bytes. Spec 05: 8 KB.
    pub buffer: u64,
    /// sd: send queue depth (send WQEs per QP). Spec 05: 16.
    pub send_depth: u64,
    /// rd: receive queue depth of a QP's own receive queue (RC). Spec 05: 16.
    pub recv_depth: u64,
    /// s2: work-request (WQE) size in bytes. Spec 05: 64 B (ConnectX minimum).
    pub wqe: u64,
    /// XRC_M: number of SRQ buffer classes (s1, s1/2, …). Spec 05: 6.
    pub xrc_classes: u32,
    /// Bytes of QP context the library allocates per QP. The paper's formulas count none (0).
    pub qp_context: u64,
    /// Bytes per completion-queue entry; the CQ holds one entry per WQE. The paper's formulas
    /// count none (0).
    pub cqe: u64,
    /// UD: MTU (largest datagram, header included) and the receive queue depth of the one QP.
    pub ud_mtu: u64,
    pub ud_recv_depth: u64,
    /// Time to create and connect one QP on demand (verbs calls, QP state transitions).
    pub qp_create: SimTime,
    /// Time of the kernel transition that opening a connection on demand needs.
    pub kernel_transition: SimTime,
}

impl Default for ConnParams {
    /// The example values of spec 05 (n = 5, s1 = 8 KB = 8192 B, sd = rd = 16, s2 = 64 B, six
    /// XRC_M classes); QP context and CQ entries not counted, as in the paper's formulas;
    /// UD MTU 2048 B with 512 receive buffers; on-demand connection 30 µs + 5 µs (assumed: the
    /// paper gives no figure).
    fn default() -> Self {
        ConnParams {
            prepost: 5,
            buffer: 8192,
            send_depth: 16,
            recv_depth: 16,
            wqe: 64,
            xrc_classes: 6,
            qp_context: 0,
            cqe: 0,
            ud_mtu: 2048,
            ud_recv_depth: 512,
            qp_create: SimTime::from_us(30),
            kernel_transition: SimTime::from_us(5),
        }
    }
}

impl ConnParams {
    /// Buffer size of XRC_M class `k` (0 = largest): s1 / 2^k.
    pub fn class_buffer(&self, k: u32) -> u64 {
        self.buffer >> k
    }

    /// Rejects sizes the library cannot allocate with.
    pub fn check(&self) -> Result<(), ConnError> {
        let bad = |key: &str, why: &str| Err(ConnError::Param(key.to_string(), why.to_string()));
        if self.buffer == 0 {
            return bad("buffer", "must be at least 1 byte");
        }
        // Counts of buffers and work requests size the library's state per queue pair.
        for (key, v, min) in [
            ("prepost", self.prepost, 1),
            ("send_depth", self.send_depth, 1),
            ("recv_depth", self.recv_depth, 0),
            ("ud_recv_depth", self.ud_recv_depth, 1),
        ] {
            if v < min || v > MAX_DEPTH {
                return Err(ConnError::Param(
                    key.to_string(),
                    format!("must be {min} to {MAX_DEPTH}, got {v}"),
                ));
            }
        }
        if self.xrc_classes == 0 || self.xrc_classes > 16 {
            return bad("xrc_classes", "must be 1 to 16");
        }
        if self.class_buffer(self.xrc_classes - 1) == 0 {
            return bad(
                "xrc_classes",
                "the smallest class buffer (buffer / 2^(classes-1)) is 0 bytes",
            );
        }
        if self.ud_mtu == 0 {
            return bad("ud_mtu", "must be at least 1 byte");
        }
        Ok(())
    }
}

/// Largest count of pre-posted buffers or work requests per queue pair.
pub const MAX_DEPTH: u64 = 1 << 20;

/// N processes on nodes of `per_node` processes: rank r on node r / per_node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub ranks: u64,
    pub per_node: u64,
}

impl Layout {
    pub fn new(ranks: u64, per_node: u64) -> Result<Layout, ConnError> {
        if ranks == 0 || per_node == 0 {
            return Err(ConnError::Param(
                "layout".into(),
                format!("{ranks} ranks on nodes of {per_node}: both must be at least 1"),
            ));
        }
        Ok(Layout { ranks, per_node })
    }

    pub fn node(&self, rank: u64) -> u64 {
        rank / self.per_node
    }

    pub fn nodes(&self) -> u64 {
        self.ranks.div_ceil(self.per_node)
    }
}

/// Invalid policies and parameters.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConnError {
    #[error("connection policy '{0}': {1}")]
    Policy(String, String),
    #[error("connection parameter '{0}': {1}")]
    Param(String, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print() {
        assert_eq!(Policy::parse("rc").unwrap(), Policy::full(Transport::Rc));
        assert_eq!(Policy::parse("RC_SRQ").unwrap(), Policy::full(Transport::RcSrq));
        assert_eq!(
            Policy::parse("xrc-s-g4096").unwrap(),
            Policy::grouped(Transport::XrcS, 4096)
        );
        assert_eq!(Policy::parse("xrc-m").unwrap().to_string(), "XRC_M");
        assert_eq!(Policy::grouped(Transport::XrcS, 8).to_string(), "XRC_S_G8");
        assert!(Policy::parse("ud-g4").is_err());
        assert!(Policy::parse("rc-g0").is_err());
        let e = Policy::parse("tcp").unwrap_err().to_string();
        assert!(e.contains("'tcp'") && e.contains("rc-srq"), "{e}");
    }

    #[test]
    fn params_are_checked() {
        assert!(ConnParams::default().check().is_ok());
        let p = ConnParams {
            buffer: 16,
            xrc_classes: 6,
            ..ConnParams::default()
        };
        assert!(p.check().unwrap_err().to_string().contains("xrc_classes"));
        assert_eq!(ConnParams::default().class_buffer(5), 256);
        assert!(Layout::new(0, 4).is_err());
        assert_eq!(Layout::new(10, 4).unwrap().nodes(), 3);
    }
}
