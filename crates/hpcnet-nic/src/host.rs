//! The host interface: a NIC's PCIe links to host memory, each with one DMA read channel and one
//! DMA write channel (spec 01: two PCIe links per SWHNI; spec 02: the cHPP host interface).
//!
//! Timing only: the rates, latencies and read-tag limits come from [`crate::HostConfig`]; the
//! bytes themselves are copied by the engine and receive stages. A channel serves its transfers
//! one after another in the order they were issued. A DMA write is charged at the write payload
//! rate (`nic.host.write_cost = "fluid"`) or TLP by TLP (`"per_tlp"`: a short write pays a
//! whole TLP header, which receive-side aggregation amortises).

use crate::config::{HostConfig, WriteCost};
use hpcnet_des::{BitsPerSec, Bytes, SimTime};

/// The host interface's derived rates, computed once from [`HostConfig`] (the configuration
/// of a world does not change while it runs).
#[derive(Clone, Debug)]
pub(crate) struct HostTiming {
    /// DMA read payload rate ([`HostConfig::read_rate`]).
    pub(crate) read_rate: BitsPerSec,
    /// DMA write payload rate ([`HostConfig::write_rate`]).
    pub(crate) write_rate: BitsPerSec,
    /// Bytes per read completion ([`HostConfig::completion_size`]).
    pub(crate) completion: u64,
    pub(crate) read_latency: SimTime,
    pub(crate) links: u32,
    /// TLP payload bytes (`host.max_payload`).
    mps: u64,
    /// Charge writes TLP by TLP: (link rate, overhead per TLP).
    per_tlp: Option<(BitsPerSec, u64)>,
    /// The last DMA write duration computed: (bytes, time). Packets repeat sizes.
    write_memo: (u64, SimTime),
}

impl HostTiming {
    pub(crate) fn new(h: &HostConfig) -> HostTiming {
        HostTiming {
            read_rate: h.read_rate(),
            write_rate: h.write_rate(),
            completion: h.completion_size().0,
            read_latency: h.read_latency,
            links: h.links.max(1),
            mps: h.max_payload.0.max(1),
            per_tlp: (h.write_cost == WriteCost::PerTlp).then(|| (h.link_rate(), h.tlp_overhead.0)),
            write_memo: (u64::MAX, SimTime::ZERO),
        }
    }

    /// Write TLPs (transactions on the host interface) a DMA write of `len` bytes takes.
    #[inline]
    pub(crate) fn write_tlps(&self, len: u64) -> u64 {
        len.div_ceil(self.mps).max(1)
    }

    /// Time to write `len` bytes into host memory by DMA.
    #[inline]
    pub(crate) fn write_time(&mut self, len: u64) -> SimTime {
        if self.write_memo.0 != len {
            let t = match self.per_tlp {
                Some((rate, ovh)) => rate.serialization(Bytes(len + self.write_tlps(len) * ovh)),
                None => self.write_rate.serialization(Bytes(len)),
            };
            self.write_memo = (len, t);
        }
        self.write_memo.1
    }
}

/// The DMA channels of one NIC: busy until.
#[derive(Clone, Debug)]
pub(crate) struct HostLinks {
    read_busy: Vec<SimTime>,
    write_busy: Vec<SimTime>,
}

impl HostLinks {
    pub(crate) fn new(links: usize) -> HostLinks {
        HostLinks {
            read_busy: vec![SimTime::ZERO; links.max(1)],
            write_busy: vec![SimTime::ZERO; links.max(1)],
        }
    }

    /// When the first bytes of a DMA read issued at `issue` on `link` reach the NIC: one read
    /// round trip (`latency`) later, and not before the link's earlier reads are done.
    #[inline]
    pub(crate) fn read_start(&self, link: usize, issue: SimTime, latency: SimTime) -> SimTime {
        (issue + latency).max(self.read_busy[link])
    }

    /// The read channel of `link` is busy until `t`.
    #[inline]
    pub(crate) fn read_until(&mut self, link: usize, t: SimTime) {
        self.read_busy[link] = t;
    }

    /// A DMA write that may start at `ready` and takes `duration`, on the first link whose write
    /// channel is free (ties: the lowest link): returns when it is done.
    #[inline]
    pub(crate) fn write(&mut self, ready: SimTime, duration: SimTime) -> SimTime {
        let (link, free) = self
            .write_busy
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("at least one link");
        let done = ready.max(free) + duration;
        self.write_busy[link] = done;
        done
    }
}
