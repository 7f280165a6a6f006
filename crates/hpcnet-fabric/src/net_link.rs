//! The network's side of link-level reliability ([`crate::linkerr`]): sending a packet through
//! the link layer (errors, go-back-N resends, the replay buffer, the fallback switch), the
//! corrupted copies a cut-through receiver forwards and the receivers that discard them, the
//! link counters, and a cable's lane width changed while the network runs.
//!
//! Everything here runs out of line: the packet path only tests a port flag, a per-port count
//! of error-free bits and the network's count of live corrupted copies; a stomped copy's end
//! is an event of its own ([`NetKind::Corrupt`](super::NetKind::Corrupt)).

use super::*;
use crate::config::{ConfigError, LANE_WIDTHS};
use crate::linkerr::LinkCounters;
use crate::packet::F_STOMPED;

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
        if let Dest::Router { gport } = to {
            if flags & F_MCAST == 0 {
                for &(t, saf) in &buf {
                    if !saf {
                        self.spawn_ghost(q, oi, id, vc, gport, t, ser, lat);
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
        gport: u32,
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
        self.plain = false;
        self.on_wire += 1;
        q.schedule_by(
            self.port_origin(oi),
            at + lat + self.cfg.router.latency,
            NetEvent::arrive(gid, gport).into(),
        );
    }

    /// A corrupted copy is gone: once none is alive the network may be plain again.
    fn ghost_gone(&mut self) {
        self.ghosts -= 1;
        if self.ghosts == 0 {
            self.refresh_plain();
        }
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
        self.ghost_gone();
        true
    }

    /// Output `oi` was granted, into downstream VC `vc`, to the corrupted copy `id` at the
    /// head of input queue `qi`, to start at `start` and serialise in `ser`. If its tail is in
    /// by then, the receiver knows the CRC failed: the copy is dropped and nothing is sent.
    /// Otherwise it leaves stomped (charged to the link it came in by): it takes the link and
    /// the downstream credits like a packet, and the next receiver drops it when its tail
    /// arrives ([`NetKind::Corrupt`](super::NetKind::Corrupt)). Returns the output the queue's next head requests.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ghost_granted<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        qi: u32,
        id: PacketId,
        vc: u8,
        start: SimTime,
        ser: SimTime,
    ) -> Option<u32> {
        let now = q.now();
        let tail_at = self.packets[id as usize].tail_at;
        if start >= tail_at {
            self.take(id);
            self.ghost_gone();
        } else {
            let up = self.upstream[(qi >> self.vc_shift) as usize];
            if up != u32::MAX {
                self.link.count_forwarded(up);
            }
            let p = &mut self.packets[id as usize];
            p.flags = (p.flags & !F_GHOST) | F_STOMPED;
            let credits = p.credits;
            // Its bits go through the link's error process like any (errors in it are moot).
            let o = &mut self.out[oi as usize];
            let bits = (p.size as u64) << 3;
            if o.lk == 0 && o.err_left >= bits {
                o.err_left -= bits;
            } else {
                self.link_send(q, oi, id, vc, start, ser);
            }
            let o = &mut self.out[oi as usize];
            o.busy_until = start + ser;
            o.busy_ps += ser.0;
            o.packets += 1;
            let mut shared_used = 0u16;
            if matches!(o.to, Dest::Router { .. }) || o.limited {
                let v = vc as usize;
                let from_private = credits.min(o.free_private[v]);
                o.free_private[v] -= from_private;
                shared_used = credits - from_private;
                o.free_shared -= shared_used as u32;
            }
            let lat = o.latency;
            let p = &mut self.packets[id as usize];
            p.vc = vc;
            p.shared_used = shared_used;
            self.last_progress = now;
            self.on_wire += 1;
            q.schedule_by(
                self.port_origin(oi),
                start + ser + lat,
                NetEvent::corrupt(id, oi).into(),
            );
        }
        // The queue's next head requests its output; this port serves its other requests once
        // the link is free.
        let kick = if self.inq.is_empty(qi) {
            None
        } else {
            let router = self.router_of[(qi >> self.vc_shift) as usize];
            self.new_head::<E, Full>(q, qi, router)
        };
        let o = &self.out[oi as usize];
        if o.req_head != NIL {
            let t = o.busy_until.max(now);
            self.wake_at(q, self.port_origin(oi), oi, t);
        }
        kick
    }

    /// The tail of the stomped copy `pkt` sent by output `oi` reached its receiver, which drops
    /// it and frees the buffer credits it took (a router input, or a node's receive buffer).
    #[cold]
    #[inline(never)]
    pub(super) fn corrupt_dropped<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, pkt: PacketId, oi: u32) {
        self.on_wire -= 1;
        match self.out[oi as usize].to {
            Dest::Router { gport } => {
                let qi = self.qi(gport, self.packets[pkt as usize].vc);
                self.release_input(q, qi, pkt, q.now());
                self.take(pkt);
            }
            _ => {
                let p = self.take(pkt);
                self.release_ejection(q, p.dst, p.rail, Self::buffer_credits(&p));
            }
        }
        self.ghost_gone();
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
            o.ser_size = u32::MAX;
            o.ser_time = SimTime::ZERO;
        }
        Ok(rate)
    }
}
