//! The host interface: a NIC's PCIe links to host memory, each with one DMA read channel and one
//! DMA write channel (spec 01: two PCIe links per SWHNI; spec 02: the cHPP host interface).
//!
//! Timing only: the rates, latencies and read-tag limits come from [`crate::HostConfig`]; the
//! bytes themselves are copied by the engine and receive stages. A channel serves its transfers
//! one after another in the order they were issued.

use hpcnet_des::SimTime;

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
