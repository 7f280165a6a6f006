//! Receive-side aggregation of short messages (NICEVT, spec 03: "receive-side aggregation in
//! NIC memory flushed to the host in large blocks"; M3 aggregates short messages from different
//! nodes), configured by `[nic.rx_aggregation]`.
//!
//! Data packets of at most `short` payload bytes, from any sender, enter one block in NIC
//! memory after their receive processing. The block is written to host memory by one DMA write
//! when it holds `block` bytes (a packet that would overfill it first flushes it) or `timeout`
//! after its first packet was ready; its packets land together, in the order they entered,
//! when that write is done — their acknowledgements, completions and memory notices follow
//! then, as for any packet. The saving is on the host interface: one write of many small
//! payloads instead of one each (with `nic.host.write_cost = "per_tlp"`, one TLP header per
//! block instead of one per packet).
//!
//! Order and visibility: a packet that is not aggregated flushes a waiting block first, so the
//! block's writes are on the host interface before its own (one write channel serves in
//! order); a read or atomic request flushes it too, and waits, as for any earlier write, until
//! it has landed ([`crate::rx`]: a read does not pass posted writes). So `quiet`
//! (acknowledgements sent after landing), `fence` and `put_signal` (a pair's later packets never
//! overtake), and `wait_until` (woken when the data lands) keep their meaning.
//!
//! Cost: O(1) per packet; one pending event per NIC for the time-out (stale ones are ignored by
//! generation); a block's packet list is reused, never reallocated once grown.

use crate::world::{World, WorldEvent};
use hpcnet_des::stats::{Registry, StatRecord};
use hpcnet_des::SimTime;
use hpcnet_fabric::topology::NodeId;

/// The block of one NIC.
#[derive(Clone, Debug, Default)]
pub(crate) struct RxBlock {
    /// Packets in the block, in the order they entered.
    pkts: Vec<u32>,
    /// Their payload bytes.
    bytes: u64,
    /// When the last of them is processed and ready to be written.
    ready: SimTime,
    /// Bumped at every flush: a time-out of an earlier block is stale.
    gen: u32,
}

/// Counters of the aggregation unit and of the receive-side host writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RxAggCounters {
    /// Data packets that entered a block.
    pub aggregated: u64,
    /// Blocks written to host memory.
    pub blocks: u64,
    /// Of those, blocks written at their time-out rather than full.
    pub timeouts: u64,
    /// Write TLPs of the receive side's DMA writes into host memory (packets and blocks;
    /// counted with or without aggregation): the host-interface transactions aggregation saves.
    pub host_writes: u64,
}

const AGG_STATS: [(&str, &str, &str); 4] = [
    (
        "nic.rx_aggregated",
        "packets",
        "short data packets gathered into receive blocks",
    ),
    ("nic.rx_blocks", "blocks", "receive blocks written to host memory"),
    (
        "nic.rx_block_timeouts",
        "blocks",
        "receive blocks written at their time-out",
    ),
    (
        "nic.rx_host_writes",
        "TLPs",
        "write TLPs of the receive side's DMA writes into host memory",
    ),
];

impl World {
    /// Whether a data packet of `len` payload bytes (not a NAP's upload) enters a block.
    #[inline]
    pub(crate) fn aggregates(&self, len: u64) -> bool {
        self.cfg.rx_aggregation.as_ref().is_some_and(|a| len <= a.short.0)
    }

    /// Data packet `pid` of `len` bytes, processed at `ready`, enters the block of `node`.
    pub(crate) fn aggregate(&mut self, node: NodeId, pid: u32, len: u64, ready: SimTime) {
        let a = self.cfg.rx_aggregation.as_ref().expect("aggregation configured");
        let (block, timeout) = (a.block.0, a.timeout);
        if self.nics[node.index()].agg.bytes + len > block {
            self.flush_block(node);
        }
        let b = &mut self.nics[node.index()].agg;
        if b.pkts.is_empty() {
            let gen = b.gen;
            let by = self.net.node_origin(node);
            self.q
                .schedule_by(by, ready + timeout, WorldEvent::RxFlush { node, gen });
        }
        let b = &mut self.nics[node.index()].agg;
        b.pkts.push(pid);
        b.bytes += len;
        b.ready = b.ready.max(ready);
        self.agg_stats.aggregated += 1;
        if b.bytes >= block {
            self.flush_block(node);
        }
    }

    /// Write the block of `node` to host memory (nothing if it is empty): one DMA write; its
    /// packets land when it is done.
    pub(crate) fn flush_block(&mut self, node: NodeId) {
        let now = self.q.now();
        let b = &mut self.nics[node.index()].agg;
        if b.pkts.is_empty() {
            return;
        }
        let (bytes, ready) = (b.bytes, b.ready.max(now));
        let mut pkts = std::mem::take(&mut b.pkts);
        let write = self.timing.write_time(bytes);
        self.agg_stats.host_writes += self.timing.write_tlps(bytes);
        self.agg_stats.blocks += 1;
        let nic = &mut self.nics[node.index()];
        let done = nic.host.write(ready, write);
        nic.agg.bytes = 0;
        nic.agg.gen = nic.agg.gen.wrapping_add(1);
        nic.writes_done = nic.writes_done.max(done);
        let by = self.net.node_origin(node);
        for &pid in &pkts {
            self.q.schedule_by(by, done, WorldEvent::Landed { pkt: pid });
        }
        pkts.clear();
        self.nics[node.index()].agg.pkts = pkts;
    }

    /// The time-out of block generation `gen` of `node`.
    pub(crate) fn block_timeout(&mut self, node: NodeId, gen: u32) {
        let b = &self.nics[node.index()].agg;
        if b.gen == gen && !b.pkts.is_empty() {
            self.agg_stats.timeouts += 1;
            self.flush_block(node);
        }
    }

    /// Count the write TLPs of a receive-side DMA write of `len` bytes that is not a block.
    #[inline]
    pub(crate) fn count_host_write(&mut self, len: u64) {
        self.agg_stats.host_writes += self.timing.write_tlps(len);
    }

    /// The aggregation counters (zero blocks without `nic.rx_aggregation`).
    pub fn rx_aggregation_counters(&self) -> RxAggCounters {
        self.agg_stats.clone()
    }

    /// The aggregation unit's statistics, when it is configured.
    pub(crate) fn agg_statistics(&self) -> Vec<StatRecord> {
        if self.cfg.rx_aggregation.is_none() {
            return Vec::new();
        }
        let s = &self.agg_stats;
        let v = [s.aggregated, s.blocks, s.timeouts, s.host_writes];
        Registry::of_counters(&AGG_STATS, &v).report()
    }
}
