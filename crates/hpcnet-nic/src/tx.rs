//! Transmit: a packet whose data is in the NIC goes to a port.
//!
//! Three paths (spec 01): loopback inside the engine (same host interface), the NIC's on-chip
//! crossbar (the other host interface of the same NIC), or the network. On the network, the
//! rail is the request's (`nic.port_select = "fixed"`) or the one whose queue drains first
//! among the rails the routers know to be working at both ends (`"adaptive"`,
//! [`hpcnet_fabric::Network::least_loaded_rail_to`]: a dead rail is avoided once its failure is
//! detected), so packets of one message may arrive out of order. With `nic.tx_queue = N` each (rail, VC class) has a transmit queue of N
//! packets; packets beyond wait in the NIC's backlog, in order, and their engine takes no new
//! message until they are queued. GET requests may use their own VC class (`nic.get_vc`).

use crate::config::PortSelect;
use crate::pkt::PktKind;
use crate::world::{NicStat, World, WorldEvent};
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::Packet;

impl World {
    /// A packet's data is in the NIC: give it to a port (or the internal path).
    pub(crate) fn send_packet(&mut self, pid: u32) {
        if !self.pkt_live(pid) {
            // Its message completed (or failed) while the packet waited to be sent again.
            self.free_pkt(pid);
            return;
        }
        let info = self.pkts[pid as usize].as_ref().expect("live packet");
        let (from, to, req_rail) = (info.from, info.to, info.rail);
        let payload = info.kind.payload();
        if info.attempt > 0 && matches!(info.kind, PktKind::Data { .. } | PktKind::ReadReq | PktKind::AtomicReq) {
            self.stats.add(NicStat::Retransmitted, 1);
        }
        if let PktKind::Data { len, .. } = info.kind {
            self.stats.add(NicStat::DataPackets, 1);
            self.stats.add(NicStat::PayloadBytes, len);
        } else {
            self.stats.add(NicStat::ControlPackets, 1);
        }
        self.stats.add(NicStat::WireBytes, (payload + self.header) as u64);
        let (from_node, to_node) = (self.place.node_of(from), self.place.node_of(to));
        if from_node == to_node {
            let lat = if from == to {
                self.cfg.loopback_latency
            } else {
                self.cfg.crossbar_latency
            };
            let t = self.q.now() + lat;
            self.q
                .schedule_by(self.net.node_origin(from_node), t, WorldEvent::Local { pkt: pid });
            return;
        }
        let rail = match self.cfg.port_select {
            PortSelect::Fixed => self.fixed_rail(from_node, to_node, req_rail),
            PortSelect::Adaptive => {
                let start = (pid % self.net.rails() as u32) as u8;
                self.net.least_loaded_rail_to(from_node, to_node, start)
            }
        };
        // A bounded transmit queue per (rail, VC class): packets wait in the NIC, in order, while
        // the link's queue for their VC is full.
        let limit = self.cfg.tx_queue as usize;
        if limit > 0 {
            let class = self.class_of(pid);
            let vc = self.net.routing.injection_vc(class);
            let slot = rail as usize * self.vcs() + class as usize;
            let waiting = !self.nics[from_node.index()].tx_backlog[slot].is_empty();
            if waiting || self.net.source_queue_len_vc(from_node, rail, vc) >= limit {
                if let Some(e) = self.engine_of(pid) {
                    let eng = &mut self.nics[from_node.index()].engines[e as usize];
                    eng.pending_tx += 1;
                    eng.pending_tx_resp += (Some(class) == self.cfg.response_vc) as u32;
                    self.pkts[pid as usize].as_mut().expect("live packet").tx_engine = Some(e as u16);
                }
                self.nics[from_node.index()].tx_backlog[slot].push_back(pid);
                return;
            }
        }
        self.inject(pid, from_node, to_node, rail, payload);
    }

    /// The engine that emitted a packet (data, requests); None for the receive side's answers.
    fn engine_of(&self, pid: u32) -> Option<u32> {
        let info = self.pkts[pid as usize].as_ref().expect("live packet");
        match info.kind {
            PktKind::Data { .. } | PktKind::ReadReq | PktKind::AtomicReq => Some(self.msg(info.msg).engine),
            PktKind::Ack { .. } | PktKind::AtomicResp { .. } | PktKind::Probe | PktKind::ProbeResp { .. } => None,
        }
    }

    fn vcs(&self) -> usize {
        self.net.config().router.vcs as usize
    }

    /// VC class of a packet: GET requests may have their own (`nic.get_vc`), responses too
    /// (`nic.response_vc`); everything else takes class 0.
    fn class_of(&self, pid: u32) -> u8 {
        let Some(info) = self.pkts[pid as usize].as_ref() else {
            return 0;
        };
        match info.kind {
            PktKind::ReadReq => self.cfg.get_vc.unwrap_or(0),
            PktKind::Ack { .. } | PktKind::AtomicResp { .. } | PktKind::ProbeResp { .. } => {
                self.cfg.response_vc.unwrap_or(0)
            }
            PktKind::Data { .. } if self.cfg.response_vc.is_some() && self.msg(info.msg).r2w_of.is_some() => {
                self.cfg.response_vc.unwrap_or(0)
            }
            _ => 0,
        }
    }

    fn inject(&mut self, pid: u32, from: NodeId, to: NodeId, rail: u8, payload: u32) {
        let info = self.pkts[pid as usize].as_ref().expect("live packet");
        if info.arm {
            // The last packet of a transmission: its message's timer starts.
            let msg = info.msg;
            self.rel_arm_at_injection(msg, from, rail);
        }
        // GET requests may travel on their own VC class (cHPP's fix for the GET deadlock).
        let (class, header, now) = (self.class_of(pid), self.header, self.q.now());
        // A packet leaving at once is reported like any other (refilled at the next network
        // event). The packet is built in the network's slot.
        let built = self.net.inject_with(&mut self.q, &mut self.arrivals, |p| {
            *p = Packet::new(pid as u64, from, to, payload, header, now);
            p.rail = rail;
            p.class = class;
        });
        if built.is_err() {
            // No route at all: the packet is lost and its message never completes.
            self.stats.add(NicStat::Unroutable, 1);
        }
    }

    /// Packets left the nodes `from` (node, rail): move waiting packets into the freed transmit
    /// queues, and let engines blocked on a full queue go on when their packets are all queued.
    pub(crate) fn refill_tx(&mut self, from: &[(NodeId, u8)]) {
        let limit = self.cfg.tx_queue as usize;
        let vcs = self.vcs();
        for &(node, rail) in from {
            for class in 0..vcs {
                let slot = rail as usize * vcs + class;
                let vc = self.net.routing.injection_vc(class as u8);
                while self.net.source_queue_len_vc(node, rail, vc) < limit {
                    let Some(pid) = self.nics[node.index()].tx_backlog[slot].pop_front() else {
                        break;
                    };
                    if let Some(e) = self.pkts[pid as usize].as_ref().expect("live packet").tx_engine {
                        let eng = &mut self.nics[node.index()].engines[e as usize];
                        eng.pending_tx -= 1;
                        eng.pending_tx_resp -= (Some(class as u8) == self.cfg.response_vc) as u32;
                    }
                    if !self.pkt_live(pid) {
                        self.free_pkt(pid);
                        continue;
                    }
                    let info = self.pkts[pid as usize].as_ref().expect("live packet");
                    let to = self.place.node_of(info.to);
                    let payload = info.kind.payload();
                    self.inject(pid, node, to, rail, payload);
                }
            }
            for e in 0..self.nics[node.index()].engines.len() {
                let eng = &mut self.nics[node.index()].engines[e];
                if eng.blocked_on_tx && eng.pending_tx == 0 {
                    eng.blocked_on_tx = false;
                    eng.busy = false;
                    self.start_next(node, e as u32);
                }
            }
        }
    }
}
