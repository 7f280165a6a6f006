//! The network's side of link-level reliability ([`crate::linkerr`]): sending a packet through
//! the link layer (errors, go-back-N resends, the replay buffer, the fallback switch), the
//! corrupted copies a cut-through receiver forwards and the receivers that discard them, the
//! link counters, and a cable's lane width changed while the network runs.
//!
//! Everything here runs out of line: the packet path only tests a port flag, a per-port count
//! of error-free bits and the network's count of live corrupted copies.

use super::*;
use crate::config::{ConfigError, LANE_WIDTHS};
use crate::linkerr::LinkCounters;

/// Link-level counters of one link direction.
#[derive(Clone, Debug, Serialize)]
pub struct LinkErrors {
    /// "r3.p2" or "n7.rail0": the sending end.
    pub from: String,
    #[serde(flatten)]
    pub counters: LinkCounters,
    /// Whether the receiving router works store-and-forward on this link now.
    pub store_and_forward: bool,
}

impl Network {
    /// Output `oi` is free to serve the packet at the head of queue `qi`: whether its bounded
    /// replay buffer refuses it now (the port then waits for the acknowledgement that makes
    /// room). Corrupted copies are not kept for replay and pass.
    #[cold]
    #[inline(never)]
    pub(super) fn replay_stalls<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        qi: u32,
        now: SimTime,
    ) -> bool {
        let Some(id) = self.inq.front(qi) else { return false };
        let p = &self.packets[id as usize];
        if p.flags & (F_GHOST | F_STOMPED) != 0 {
            return false;
        }
        match self.link.replay_ready(oi, p.size, now) {
            Some(t) => {
                self.wake_at(q, self.port_origin(oi), oi, t);
                true
            }
            None => false,
        }
    }

    /// Send packet `id` on output `oi` (into downstream VC `vc`) through the link layer, its
    /// first transmission starting at `start`: draws its errors, resends it after each NAK, sends the corrupted copies a
    /// cut-through receiver forwards on their way, counts the extra wire time. Returns the
    /// start of the transmission that arrives intact.
    #[cold]
    #[inline(never)]
    pub(super) fn link_send<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        id: PacketId,
        vc: u8,
        start: SimTime,
        ser: SimTime,
    ) -> SimTime {
        let flags = self.packets[id as usize].flags;
        let bits = (self.packets[id as usize].size as u64) << 3;
        let mut buf = std::mem::take(&mut self.corrupt_buf);
        buf.clear();
        let o = &mut self.out[oi as usize];
        let rtt = self.link.rtt(o.latency);
        let sent = self.link.send(
            oi,
            &mut o.err_left,
            &mut o.lk,
            &mut o.saf,
            start,
            ser,
            rtt,
            bits,
            flags & F_STOMPED != 0,
            |t, saf| buf.push((t, saf)),
        );
        o.busy_ps += ser.0 * sent.failed as u64;
        let (to, lat) = (o.to, o.latency);
        if let Dest::Router { router, port } = to {
            if flags & F_MCAST == 0 {
                for &(t, saf) in &buf {
                    if !saf {
                        self.spawn_ghost(q, oi, id, vc, (router, port), t, ser, lat);
                    }
                }
            }
        }
        self.corrupt_buf = buf;
        sent.start
    }

    /// A corrupted transmission of `id` started at `at` on `oi` into a cut-through receiver:
    /// its head is routed there like the packet's and may be forwarded before the tail shows
    /// the bad CRC. The copy holds no input credits (it shares its retransmission's).
    #[allow(clippy::too_many_arguments)]
    fn spawn_ghost<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        id: PacketId,
        vc: u8,
        (router, port): (RouterId, PortIdx),
        at: SimTime,
        ser: SimTime,
        lat: SimTime,
    ) {
        let mut g = self.packets[id as usize].clone();
        g.flags |= F_GHOST;
        g.vc = vc;
        g.shared_used = 0;
        g.tail_at = at + ser + lat;
        let gid = self.alloc(g);
        self.ghosts += 1;
        self.on_wire += 1;
        q.schedule_by(
            self.port_origin(oi),
            at + lat + self.cfg.router.latency,
            NetEvent::Arrive { pkt: gid, router, port }.into(),
        );
    }

    /// The corrupted copy `id` at the head of `qi` is discarded before it is routed if its tail
    /// has arrived by `now`.
    #[cold]
    #[inline(never)]
    pub(super) fn ghost_expired(&mut self, qi: u32, id: PacketId, now: SimTime) -> bool {
        if now < self.packets[id as usize].tail_at {
            return false;
        }
        self.inq.pop_front(qi);
        self.take(id);
        self.ghosts -= 1;
        true
    }

    /// An output was granted to the corrupted copy `id` of input queue `qi`, to start at
    /// `start`. If its tail is in by then, the receiver knows the CRC failed: the copy is
    /// discarded and nothing is sent (returns true). Otherwise it leaves stomped, charged to
    /// the link it came in by.
    #[cold]
    #[inline(never)]
    pub(super) fn ghost_granted(&mut self, qi: u32, id: PacketId, start: SimTime) -> bool {
        let tail_at = self.packets[id as usize].tail_at;
        if start >= tail_at {
            self.take(id);
            self.ghosts -= 1;
            return true;
        }
        let p = &mut self.packets[id as usize];
        p.flags = (p.flags & !F_GHOST) | F_STOMPED;
        let up = self.upstream[(qi >> self.vc_shift) as usize];
        if up != u32::MAX {
            self.link.count_forwarded(up);
        }
        false
    }

    /// After a grant that sent nothing (a corrupted copy discarded): the queue's next head
    /// requests its output, and the port looks at its other requests now.
    #[cold]
    #[inline(never)]
    pub(super) fn served_nothing<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, oi: u32, qi: u32) -> Option<u32> {
        let kick = if self.inq.is_empty(qi) {
            None
        } else {
            let router = self.router_of[(qi >> self.vc_shift) as usize];
            self.new_head(q, qi, router)
        };
        if self.out[oi as usize].req_head != NIL {
            self.wake_at(q, self.port_origin(oi), oi, q.now());
        }
        kick
    }

    /// A stomped copy's head reached input `port` of `router`: the receiver drops it as its
    /// tail arrives, and returns the credits it took then.
    #[cold]
    #[inline(never)]
    pub(super) fn stomped_arrived<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        pkt: PacketId,
        router: RouterId,
        port: PortIdx,
    ) {
        let p = &self.packets[pkt as usize];
        let (vc, tail) = (p.vc, p.tail_at);
        let qi = self.qi(self.port_base[router.index()] + port.0 as u32, vc);
        self.release_input(q, qi, pkt, tail.max(q.now()));
        self.take(pkt);
        self.ghosts -= 1;
    }

    /// A stomped copy reached a node: its NIC drops it (and frees the receive buffer it took).
    #[cold]
    #[inline(never)]
    pub(super) fn stomped_delivered<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, pkt: PacketId) {
        let p = self.take(pkt);
        self.ghosts -= 1;
        self.release_ejection(q, p.dst, p.rail, Self::buffer_credits(&p));
    }

    /// Link-level counters summed over every link direction.
    pub fn link_counters(&self) -> LinkCounters {
        self.link.totals()
    }

    /// Link-level counters of every link direction where one is not zero, in port order.
    pub fn link_errors(&self) -> Vec<LinkErrors> {
        self.link
            .per_port()
            .into_iter()
            .map(|(oi, counters)| LinkErrors {
                from: self.snapshot_name(oi as usize),
                counters,
                store_and_forward: self.out[oi as usize].saf,
            })
            .collect()
    }

    /// Whether the router at the far end of the link leaving `router` by `port` receives in
    /// store-and-forward mode now (configured, or fallen back after errors).
    pub fn receives_store_and_forward(&self, router: RouterId, port: PortIdx) -> bool {
        self.out[(self.port_base[router.index()] + port.0 as u32) as usize].saf
    }

    /// Renegotiate the cable at `port` of `router` (both directions) to `lanes` working lanes,
    /// from now on: one of the widths a link renegotiates to (4 → 2 → 1) and at most
    /// `link.lanes`. A transmission under way keeps its timing. Returns the new data rate.
    pub fn set_link_lanes(&mut self, router: RouterId, port: PortIdx, lanes: u32) -> Result<BitsPerSec, ConfigError> {
        let key = format!("lanes of the link at router {router} port {port}");
        let Some(info) = self.topo.routers.get(router.index()) else {
            return Err(ConfigError::new(key, format!("router {router} does not exist")));
        };
        let peer = match info.ports.get(port.index()) {
            Some(Peer::Router { router, port }) => Some(self.port_base[router.index()] + port.0 as u32),
            Some(Peer::Node { node, .. }) => {
                let node = *node;
                (0..self.rails)
                    .find(|&r| self.routing.attach(node, r) == (router, port))
                    .map(|r| self.node_oport(node, r))
            }
            _ => {
                return Err(ConfigError::new(
                    key,
                    format!("router {router} has no cabled port {port}"),
                ))
            }
        };
        let link = &self.cfg.link;
        if !LANE_WIDTHS.contains(&lanes) || lanes > link.lanes {
            let widths: Vec<String> = LANE_WIDTHS
                .iter()
                .filter(|&&w| w <= link.lanes)
                .rev()
                .map(|w| w.to_string())
                .collect();
            return Err(ConfigError::new(
                key,
                format!(
                    "a link of link.lanes = {} renegotiates to {} lanes, got {lanes}",
                    link.lanes,
                    widths.join(", ")
                ),
            ));
        }
        link.check_rate(lanes, &key)?;
        let rate = base_rate_for(&self.cfg, lanes, link.data_rate());
        let me = self.port_base[router.index()] + port.0 as u32;
        for oi in std::iter::once(me).chain(peer) {
            let o = &mut self.out[oi as usize];
            o.rate = rate;
            o.ser_memo = (u32::MAX, SimTime::ZERO);
        }
        Ok(rate)
    }
}
