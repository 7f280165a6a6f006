//! The network's side of dynamic faults ([`crate::faults`]): what happens to links, buffers and
//! packets when a cable, a router chip or a whole plane fails or is repaired during a run.
//!
//! Model (docs/model-reference.md, "Dynamic faults"):
//! - **Failure** at time t: the component's links are down at once. A packet on a cable at that
//!   moment — its transmission started at or before t and its head had not yet been routed at
//!   the far end — is lost (`lost_in_cable`); so are the packets in the buffers of a failed
//!   router (`lost_in_router`). The credits they held go back to their senders, so buffer
//!   accounting stays exact and a repaired component starts empty.
//! - **Before detection** the routers and NICs next to the failure do not know of it: what they
//!   send into a dead link is lost at once (`sent_before_detection`), taking no time.
//! - **Detection**, `faults.detection` after the failure: the routers mark the dead ports. Table
//!   routers skip them at once (first live port of the entry); packets already waiting for a
//!   dead port are routed again; a node whose own cable is dead drops what it sends
//!   (`source_cable_down`) and an adaptive NIC picks another rail
//!   ([`Network::least_loaded_rail_to`]). A torus router has no other port to take: packets
//!   whose next hop is dead are dropped (`unreachable`) until the tables are rewritten.
//! - **Table rewrite**, `faults.table_update` after detection: recomputed up*/down* tables on
//!   trees ([`crate::faults::tables`]); first/last-step routes on a torus with
//!   `faults.torus_bypass` ([`crate::faults::bypass`]). They are computed from what the routers
//!   know at that moment.
//! - **Repair**: the links come back (empty buffers); routers use them again after detection,
//!   the tables follow after the management delay.
//! - **Lanes**: the link renegotiates its width at once, both directions; a transmission under
//!   way keeps its timing.
//!
//! Cost: nothing per packet without dynamic faults (one flag tested per arrival); after the
//! first failure, an arrival on a link that has failed at some point costs one serialisation
//! time computation. A failure costs O(ports of the component); a router failure also
//! O(packets in it); a table rewrite the cost of the tables (see their modules).

use super::*;
use crate::config::{shape_kind, ConfigError};
use crate::faults::schedule::{lane_widths, Action, Target};
use crate::faults::{bypass, schedule, tables, FaultClass, FaultEvent, RandomFaults};
use hpcnet_des::rng::SimRng;
use hpcnet_des::stats::Registry;
use hpcnet_des::{Bytes, RngStreams};
use rand::Rng;

/// A step of the fault machinery, scheduled on the event queue as [`NetEvent`] of kind [`NetKind::Fault`](crate::net::NetKind::Fault).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FaultStep {
    /// Apply action `i` of the schedule (a failure or a repair).
    Apply(u32),
    /// The routers detect the change of action `i`.
    Detect(u32),
    /// Install tables recomputed from what the routers know.
    Tables,
    /// The next random failure of random class entry `i`.
    Random(u32),
}

/// One failure or repair as it happened.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FaultRecord {
    pub at_ns: f64,
    /// "fail" or "repair".
    pub action: &'static str,
    pub component: Target,
    /// Drawn by the random failure model (not in the schedule).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub random: bool,
    /// When the routers knew of it (lane changes need no detection).
    pub detected_ns: Option<f64>,
}

/// Counters of the fault machinery.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FaultStats {
    pub failures: u64,
    pub repairs: u64,
    pub lost_in_cable: u64,
    pub lost_in_router: u64,
    pub sent_before_detection: u64,
    /// Times recomputed tables were installed.
    pub table_updates: u64,
    /// Router pairs with a bypass route, and without any, in the tables installed last.
    #[serde(skip_serializing_if = "is_zero")]
    pub bypass_pairs: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub bypass_unreachable: u64,
    /// Of the bypass routes: with a first step, with a last step, taking a ring the long way.
    #[serde(skip_serializing_if = "is_zero")]
    pub bypass_first_steps: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub bypass_last_steps: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub bypass_long_way: u64,
}

const FAULT_STATS: [(&str, &str, &str); 6] = [
    ("faults.failures", "events", "components failed during the run"),
    ("faults.repairs", "events", "components repaired during the run"),
    (
        "net.packets_lost_in_cable",
        "packets",
        "packets on a cable when it (or a router at its end) failed",
    ),
    (
        "net.packets_lost_in_router",
        "packets",
        "packets in the buffers of a router when it failed",
    ),
    (
        "net.packets_sent_before_detection",
        "packets",
        "packets sent into a failed cable before its failure was detected",
    ),
    ("faults.table_updates", "events", "recomputed routing tables installed"),
];

/// Never (a link that has not failed).
const NEVER: SimTime = SimTime::MAX;

/// The state of dynamic faults in one network.
pub(crate) struct FaultRuntime {
    /// The schedule, then the failures and repairs drawn at random, in the order created.
    actions: Vec<Action>,
    /// Per action: drawn at random; its record in `log` once applied.
    random_action: Vec<bool>,
    record: Vec<u32>,
    random: Vec<(RandomFaults, Option<SimRng>)>,
    scheduled: bool,
    /// Whether faults may change during the run (a schedule, random failures, or an event
    /// added through [`Network::schedule_fault`]).
    dynamic: bool,
    detection: SimTime,
    table_update: SimTime,
    bypass: bool,
    /// Active failures of each cable (indexed by the global port of each router end), router
    /// and plane: a failure adds one, its repair takes one off.
    cable_failed: Vec<u8>,
    router_failed: Vec<u8>,
    plane_failed: Vec<u8>,
    /// Per output port (router ports, then node rails): when its link last went down.
    cut_at: Vec<SimTime>,
    /// Working lanes of the cable at each global router port, and the configured width.
    lanes: Vec<u32>,
    full_lanes: Vec<u32>,
    log: Vec<FaultRecord>,
    stats: FaultStats,
}

impl FaultRuntime {
    pub(crate) fn dynamic(&self) -> bool {
        self.dynamic
    }
}

fn bump(c: &mut u8, fail: bool) {
    *c = if fail { c.saturating_add(1) } else { c.saturating_sub(1) };
}

/// An exponentially distributed time of mean `mean`.
fn exponential(rng: &mut SimRng, mean: SimTime) -> SimTime {
    let u: f64 = rng.gen();
    let t = -(1.0 - u).ln() * mean.0 as f64;
    SimTime((t.round() as u64).max(1))
}

impl Network {
    /// Build the fault state when the scenario schedules faults, draws random ones or asks for
    /// the torus bypass (then also the bypass routes around `faults.failed_links`).
    pub(super) fn init_faults(&mut self) -> Result<(), ConfigError> {
        let f = &self.cfg.faults;
        if !f.dynamic() && !f.torus_bypass {
            return Ok(());
        }
        let actions = self.cfg.fault_schedule(&self.topo)?;
        let rt = self.new_runtime(actions);
        self.faults = Some(Box::new(rt));
        if self.cfg.faults.torus_bypass {
            self.routing.reserve_last_step_vcs();
            if self.routing.dead_ports() > 0 {
                self.install_tables(SimTime::ZERO, false);
            }
        }
        Ok(())
    }

    fn new_runtime(&self, actions: Vec<Action>) -> FaultRuntime {
        let f = &self.cfg.faults;
        let total = self.router_ports as usize;
        let lanes: Vec<u32> = (0..total as u32)
            .map(|g| {
                let r = self.router_of[g as usize];
                link_params(
                    &self.cfg,
                    &self.topo,
                    r,
                    PortIdx((g - self.port_base[r.index()]) as u16),
                )
                .0
            })
            .collect();
        FaultRuntime {
            random_action: vec![false; actions.len()],
            record: vec![u32::MAX; actions.len()],
            actions,
            random: f.random.iter().map(|r| (r.clone(), None)).collect(),
            scheduled: false,
            dynamic: f.dynamic(),
            detection: f.detection,
            table_update: f.table_update,
            bypass: f.torus_bypass,
            cable_failed: vec![0; total],
            router_failed: vec![0; self.topo.routers.len()],
            plane_failed: vec![0; self.rails.max(1) as usize],
            cut_at: vec![NEVER; self.out.len()],
            full_lanes: lanes.clone(),
            lanes,
            log: Vec::new(),
            stats: FaultStats::default(),
        }
    }

    /// Put the fault schedule (and the first random failure of each class) on the event queue.
    /// Every driver calls it once, before the run; later calls do nothing.
    pub fn schedule_faults<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>) {
        let seed = self.seed;
        let Some(f) = self.faults.as_ref() else { return };
        if f.scheduled {
            return;
        }
        let counts: Vec<usize> = f
            .random
            .iter()
            .map(|r| self.random_candidates(r.0.class).len())
            .collect();
        let f = self.faults.as_mut().expect("checked above");
        f.scheduled = true;
        let streams = RngStreams::new(seed);
        for (i, a) in f.actions.iter().enumerate() {
            q.schedule_by(
                Origin(target_origin(&a.target)),
                a.at.max(q.now()),
                NetEvent::fault(FaultStep::Apply(i as u32)).into(),
            );
        }
        for (c, (cfg, rng)) in f.random.iter_mut().enumerate() {
            let mut g = streams.stream("faults.random", c as u64);
            let n = counts[c];
            if n > 0 {
                let t = cfg.from + exponential(&mut g, SimTime(cfg.mtbf.0 / n as u64).max(SimTime(1)));
                if t < cfg.until {
                    q.schedule_by(
                        Origin(0),
                        t.max(q.now()),
                        NetEvent::fault(FaultStep::Random(c as u32)).into(),
                    );
                }
            }
            *rng = Some(g);
        }
    }

    /// Schedule one more failure or repair (checked like a `[[faults.events]]` entry; a time
    /// before now is refused). The component must be in the state the event changes when the
    /// event comes; otherwise the event does nothing but is logged.
    pub fn schedule_fault<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        event: &FaultEvent,
    ) -> Result<(), ConfigError> {
        if event.at < q.now() {
            return Err(ConfigError::new(
                "faults.events.at",
                format!("{} is in the past (the run is at {})", event.at, q.now()),
            ));
        }
        let cfg = &self.cfg;
        schedule::validate_for_kind(
            std::slice::from_ref(event),
            &[],
            false,
            shape_kind(&self.topo.shape),
            &cfg.routing,
            cfg.router.vcs,
            cfg.link.lanes,
        )?;
        let static_failed: Vec<(RouterId, PortIdx)> =
            cfg.faults.failed_links.iter().map(|f| (f.router, f.port)).collect();
        let a = schedule::resolve(std::slice::from_ref(event), &self.topo, &static_failed, cfg.link.lanes)?[0];
        if self.faults.is_none() {
            let rt = self.new_runtime(Vec::new());
            self.faults = Some(Box::new(rt));
            // Faults leave the plain configuration (their tests are on the hot path).
            self.refresh_plain();
        }
        let f = self.faults.as_mut().expect("built above");
        f.dynamic = true;
        f.scheduled = true;
        f.actions.push(a);
        f.random_action.push(false);
        f.record.push(u32::MAX);
        let i = (f.actions.len() - 1) as u32;
        q.schedule_by(
            Origin(target_origin(&a.target)),
            a.at,
            NetEvent::fault(FaultStep::Apply(i)).into(),
        );
        Ok(())
    }

    /// Failures and repairs so far, in the order they happened.
    pub fn fault_log(&self) -> &[FaultRecord] {
        self.faults.as_ref().map_or(&[], |f| &f.log)
    }

    /// Counters of the fault machinery (None without dynamic faults or the torus bypass).
    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.faults.as_ref().map(|f| f.stats.clone())
    }

    /// Whether faults may change during the run.
    pub fn has_dynamic_faults(&self) -> bool {
        self.faults.as_ref().is_some_and(|f| f.dynamic)
    }

    /// Statistics of the fault machinery, when it is in use.
    pub(super) fn fault_statistics(&self) -> Vec<StatRecord> {
        let Some(f) = self.faults.as_ref().filter(|f| f.dynamic) else {
            return Vec::new();
        };
        let s = &f.stats;
        let values = [
            s.failures,
            s.repairs,
            s.lost_in_cable,
            s.lost_in_router,
            s.sent_before_detection,
            s.table_updates,
        ];
        Registry::of_counters(&FAULT_STATS, &values).report()
    }

    /// Whether the routers know `node`'s cable on `rail` to be working.
    pub fn rail_usable(&self, node: NodeId, rail: u8) -> bool {
        let (r, p) = self.routing.attach(node, rail);
        !self.routing.is_dead(r, p)
    }

    /// The rail of `node` whose injection queue drains first ([`Network::least_loaded_rail`])
    /// among the rails whose cables at `node` and at `dst` the routers know to be working (the
    /// NIC's adaptive port choice avoids a dead rail, spec 01 "NIC"). With no such rail, the
    /// plain choice.
    #[inline]
    pub fn least_loaded_rail_to(&self, node: NodeId, dst: NodeId, start: u8) -> u8 {
        if self.rails == 1 || self.routing.dead_ports() == 0 {
            return self.least_loaded_rail(node, start);
        }
        self.least_loaded_live_rail(node, dst, start)
    }

    /// [`Network::least_loaded_rail_to`] once some port is known dead.
    #[cold]
    #[inline(never)]
    fn least_loaded_live_rail(&self, node: NodeId, dst: NodeId, start: u8) -> u8 {
        let usable = |r: u8| self.rail_usable(node, r) && self.rail_usable(dst, r);
        let rails = self.rails;
        let order = (0..rails).map(|k| (start % rails + k) % rails).filter(|&r| usable(r));
        order
            .min_by_key(|&r| {
                let q = self.source_queue_len(node, r) as u128 + 1;
                q * 1_000_000_000_000 / self.injection_rate(node, r).0.max(1) as u128
            })
            .unwrap_or_else(|| self.least_loaded_rail(node, start))
    }

    /// Handle a step of the fault machinery (out of line: the network's event handler is inlined
    /// into the run loop, which must stay as small as it was without faults).
    #[cold]
    #[inline(never)]
    pub(super) fn fault_step<E: From<NetEvent>, S: Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        step: FaultStep,
        ep: &mut S,
    ) {
        match step {
            FaultStep::Apply(i) => self.apply_fault(q, i, ep),
            FaultStep::Detect(i) => self.detect_fault(q, i, ep),
            FaultStep::Tables => self.install_tables(q.now(), true),
            FaultStep::Random(c) => self.random_failure(q, c, ep),
        }
    }

    fn router_down(&self, f: &FaultRuntime, r: RouterId) -> bool {
        f.router_failed[r.index()] > 0 || f.plane_failed[self.topo.routers[r.index()].plane as usize] > 0
    }

    /// Whether the link leaving output port `oi` is down now.
    fn phys_down(&self, f: &FaultRuntime, oi: u32) -> bool {
        if self.out[oi as usize].to == Dest::None {
            return false; // uncabled, or down for the whole run
        }
        let (r, g) = if oi < self.router_ports {
            (self.router_of[oi as usize], oi)
        } else {
            let k = oi - self.router_ports;
            let (r, p) = self
                .routing
                .attach(NodeId(k / self.rails as u32), (k % self.rails as u32) as u8);
            (r, self.port_base[r.index()] + p.0 as u32)
        };
        if self.router_down(f, r) || f.cable_failed[g as usize] > 0 {
            return true;
        }
        let p = g - self.port_base[r.index()];
        match self.topo.routers[r.index()].ports[p as usize] {
            Peer::Router { router, .. } => self.router_down(f, router),
            _ => false,
        }
    }

    /// Global port of port `p` of router `r`.
    fn gport(&self, r: RouterId, p: PortIdx) -> u32 {
        self.port_base[r.index()] + p.0 as u32
    }

    /// Both output ports of the cable at port `p` of router `r` (its two directions).
    fn cable_ports(&self, r: RouterId, p: PortIdx) -> [u32; 2] {
        let g = self.gport(r, p);
        match self.topo.routers[r.index()].ports[p.index()] {
            Peer::Router { router, port } => [g, self.gport(router, port)],
            Peer::Node { node, rail } => [g, self.node_oport(node, rail)],
            Peer::None => [g, g],
        }
    }

    /// Routers a target covers.
    fn target_routers(&self, t: &Target) -> Vec<RouterId> {
        match *t {
            Target::Router { router } => vec![router],
            Target::Plane { plane } => (0..self.topo.routers.len() as u32)
                .map(RouterId)
                .filter(|r| self.topo.routers[r.index()].plane == plane)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Output ports whose link a target can take down.
    fn target_ports(&self, t: &Target) -> Vec<u32> {
        match *t {
            Target::Cable { router, port } | Target::Lanes { router, port, .. } => {
                self.cable_ports(router, port).to_vec()
            }
            _ => self
                .target_routers(t)
                .into_iter()
                .flat_map(|r| {
                    (0..self.topo.routers[r.index()].ports.len())
                        .flat_map(move |p| self.cable_ports(r, PortIdx(p as u16)))
                })
                .collect(),
        }
    }

    fn apply_fault<E: From<NetEvent>, S: Endpoints>(&mut self, q: &mut EventQueue<E>, i: u32, ep: &mut S) {
        let now = q.now();
        let mut f = self.faults.take().expect("fault events come from the fault state");
        let a = f.actions[i as usize];
        f.record[i as usize] = f.log.len() as u32;
        f.log.push(FaultRecord {
            at_ns: now.as_ns_f64(),
            action: if a.fail { "fail" } else { "repair" },
            component: a.target,
            random: f.random_action[i as usize],
            detected_ns: None,
        });
        if a.fail {
            f.stats.failures += 1;
        } else {
            f.stats.repairs += 1;
        }
        let routers = self.target_routers(&a.target);
        let was_down: Vec<bool> = routers.iter().map(|&r| self.router_down(&f, r)).collect();
        match a.target {
            Target::Lanes { router, port, lanes } => {
                self.set_lanes(&mut f, router, port, lanes);
                self.faults = Some(f);
                return;
            }
            Target::Cable { router, port } => {
                let g = self.gport(router, port);
                bump(&mut f.cable_failed[g as usize], a.fail);
                if let Peer::Router { router, port } = self.topo.routers[router.index()].ports[port.index()] {
                    let g2 = self.gport(router, port);
                    bump(&mut f.cable_failed[g2 as usize], a.fail);
                }
            }
            Target::Router { router } => bump(&mut f.router_failed[router.index()], a.fail),
            Target::Plane { plane } => bump(&mut f.plane_failed[plane as usize], a.fail),
        }
        let mut newly_down = Vec::new();
        for oi in self.target_ports(&a.target) {
            let d = self.phys_down(&f, oi);
            let o = &mut self.out[oi as usize];
            if d != o.down {
                o.down = d;
                if d {
                    f.cut_at[oi as usize] = now;
                    newly_down.push(oi);
                }
            }
        }
        if !newly_down.is_empty() {
            self.fault_cut = true;
        }
        let detection = f.detection;
        let flush: Vec<RouterId> = routers
            .iter()
            .zip(&was_down)
            .filter(|(r, was)| !**was && self.router_down(&f, **r))
            .map(|(r, _)| *r)
            .collect();
        self.faults = Some(f);
        for r in flush {
            self.flush_router(q, r);
        }
        if detection == SimTime::ZERO {
            self.detect_fault(q, i, ep);
        } else {
            q.schedule_by(
                Origin(target_origin(&a.target)),
                now + detection,
                NetEvent::fault(FaultStep::Detect(i)).into(),
            );
        }
        // What waits for a dead link is now sent into it (and lost), unless detection came first.
        for oi in newly_down {
            self.wake_at(q, self.port_origin(oi), oi, now);
        }
    }

    /// The packets in the buffers of router `r` are lost; its outputs have nothing to send.
    fn flush_router<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, r: RouterId) {
        let now = q.now();
        for g in self.port_base[r.index()]..self.port_base[r.index() + 1] {
            for v in 0..self.vcs {
                let qi = self.qi(g, v as u8);
                while let Some(id) = self.inq.pop_front(qi) {
                    self.release_input(q, qi, id, now);
                    self.lose(id, now, RouteError::LostInRouter { router: r });
                }
                self.mc_left[qi as usize] = 0;
            }
            let o = &mut self.out[g as usize];
            o.req_head = NIL;
            o.req_tail = NIL;
            o.rr_q = NIL;
            o.starved = false;
        }
    }

    /// Count packet `id` as dropped for `reason` (a loss or a refusal) and free it.
    fn lose(&mut self, id: PacketId, at: SimTime, reason: RouteError) {
        if let Some(f) = self.faults.as_mut() {
            match reason {
                RouteError::LostInCable { .. } => f.stats.lost_in_cable += 1,
                RouteError::LostInRouter { .. } => f.stats.lost_in_router += 1,
                RouteError::SentIntoFailure { .. } => f.stats.sent_before_detection += 1,
                _ => {}
            }
        }
        let packet = self.take(id);
        self.stats.add(NetStat::Dropped, 1);
        self.drops.push(Drop { packet, at, reason });
    }

    /// The routers learn of action `i`: dead ports are skipped from now on, and what waited for
    /// one is routed again.
    fn detect_fault<E: From<NetEvent>, S: Endpoints>(&mut self, q: &mut EventQueue<E>, i: u32, ep: &mut S) {
        let now = q.now();
        let mut f = self.faults.take().expect("fault events come from the fault state");
        let a = f.actions[i as usize];
        if let Some(rec) = f.log.get_mut(f.record[i as usize] as usize) {
            rec.detected_ns = Some(now.as_ns_f64());
        }
        let ports = self.target_ports(&a.target);
        let (update, delay) = (self.routing.is_tree() || f.bypass, f.table_update);
        self.faults = Some(f);
        let mut newly_dead = Vec::new();
        let mut dead_nodes = Vec::new();
        for oi in ports {
            let down = self.out[oi as usize].down;
            if oi >= self.router_ports {
                if down {
                    dead_nodes.push(oi);
                }
                continue;
            }
            if self.out[oi as usize].to == Dest::None {
                continue;
            }
            let r = self.router_of[oi as usize];
            let p = PortIdx((oi - self.port_base[r.index()]) as u16);
            if self.routing.is_dead(r, p) != down {
                self.routing.set_dead(r, p, down);
                if down {
                    newly_dead.push(oi);
                }
            }
        }
        for g in newly_dead {
            self.reroute_waiting(q, g);
        }
        // A node that knows its cable is dead does not send into it.
        for oi in dead_nodes {
            self.lose_node_queue(oi - self.router_ports, now, ep, |node, router, _| {
                RouteError::SourceCableDown { node, router }
            });
        }
        if update {
            q.schedule_by(
                Origin(target_origin(&a.target)),
                now + delay,
                NetEvent::fault(FaultStep::Tables).into(),
            );
        }
    }

    /// Unlink the request of input queue `qi` from output `oi`'s list.
    fn unlink_request(&mut self, oi: u32, qi: u32) {
        let recs = &mut self.inq.q;
        let (next, prev) = {
            let r = &recs[qi as usize];
            (r.req_next, r.req_prev)
        };
        let o = &mut self.out[oi as usize];
        if prev == NIL {
            o.req_head = next;
        } else {
            recs[prev as usize].req_next = next;
        }
        if next == NIL {
            o.req_tail = prev;
        } else {
            recs[next as usize].req_prev = prev;
        }
        if o.rr_q == qi {
            o.rr_q = next;
        }
    }

    /// Route again the head packets waiting for output `g`, which has just been found dead.
    fn reroute_waiting<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, g: u32) {
        let router = self.router_of[g as usize];
        while self.out[g as usize].req_head != NIL {
            let qi = self.out[g as usize].req_head;
            self.unlink_request(g, qi);
            self.mc_left[qi as usize] = 0;
            // The output it asks for now arbitrates at once (as an event: the arbitration chain
            // of the hot path is not entered from here).
            if let Some(k) = self.new_head::<E, Full>(q, qi, router) {
                self.wake_at(q, self.port_origin(k), k, q.now());
            }
        }
        self.out[g as usize].starved = false;
    }

    /// Every packet waiting in node queue `k` (node × rail) is injected into its dead cable and
    /// lost, for the reason `why(node, router, port)` gives (the cable's router end).
    fn lose_node_queue<S: Endpoints>(
        &mut self,
        k: u32,
        now: SimTime,
        ep: &mut S,
        why: impl Fn(NodeId, RouterId, PortIdx) -> RouteError,
    ) {
        let (node, rail) = (NodeId(k / self.rails as u32), (k % self.rails as u32) as u8);
        let (router, port) = self.routing.attach(node, rail);
        let base = self.node_queue(k);
        for v in 0..self.vcs {
            while let Some(id) = self.inq.pop_front(base + v) {
                self.stats.add(NetStat::Injected, 1);
                self.packets[id as usize].injected = now;
                ep.injected(node, rail);
                self.lose(id, now, why(node, router, port));
            }
        }
    }

    /// Output `oi`'s link is down: whatever waits for it is sent into it and lost, at once.
    #[cold]
    #[inline(never)]
    pub(super) fn sink<E: From<NetEvent>, S: Endpoints>(&mut self, q: &mut EventQueue<E>, oi: u32, ep: &mut S) {
        let now = q.now();
        if oi >= self.router_ports {
            self.lose_node_queue(oi - self.router_ports, now, ep, |_, router, port| {
                RouteError::SentIntoFailure { router, port }
            });
            return;
        }
        let router = self.router_of[oi as usize];
        let port = PortIdx((oi - self.port_base[router.index()]) as u16);
        while self.out[oi as usize].req_head != NIL {
            let qi = self.out[oi as usize].req_head;
            self.unlink_request(oi, qi);
            self.mc_left[qi as usize] = 0;
            let id = self.inq.pop_front(qi).expect("a requesting queue has a head");
            self.release_input(q, qi, id, now);
            self.lose(id, now, RouteError::SentIntoFailure { router, port });
            if let Some(k) = self.new_head::<E, Full>(q, qi, router) {
                if k != oi {
                    self.wake_at(q, self.port_origin(k), k, now);
                }
            }
        }
        self.out[oi as usize].starved = false;
    }

    /// Whether packet `pkt`, arriving now at global router input port `at` (None: delivered to its node), was on
    /// its cable when the cable went down; then it is lost and its credits go back to the
    /// sender.
    #[cold]
    #[inline(never)]
    pub(super) fn lost_on_cable<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        pkt: PacketId,
        at: Option<u32>,
    ) -> bool {
        let now = q.now();
        let up = match at {
            Some(g) => self.upstream[g as usize],
            None => {
                let p = &self.packets[pkt as usize];
                let (r, port) = self.routing.attach(p.dst, p.rail);
                self.gport(r, port)
            }
        };
        if up == u32::MAX {
            return false;
        }
        let Some(f) = self.faults.as_ref() else { return false };
        let cut = f.cut_at[up as usize];
        if cut > now {
            return false;
        }
        let p = &self.packets[pkt as usize];
        let o = &self.out[up as usize];
        let ser = o.rate.serialization(Bytes(p.size as u64));
        let start = p.tail_at.saturating_sub(o.latency + ser);
        if cut < start {
            return false;
        }
        // The credits it took downstream will never be freed there.
        let (vc, shared) = (p.vc, p.shared_used);
        let private = p.credits - shared;
        let o = &mut self.out[up as usize];
        if matches!(o.to, Dest::Router { .. }) || o.limited {
            o.returning.push((now, vc, private, shared));
            o.ret_min = o.ret_min.min(now);
            if o.starved {
                self.wake_at(q, self.port_origin(up), up, now);
            }
        }
        let (router, port) = if up < self.router_ports {
            let r = self.router_of[up as usize];
            (r, PortIdx((up - self.port_base[r.index()]) as u16))
        } else {
            let k = up - self.router_ports;
            self.routing
                .attach(NodeId(k / self.rails as u32), (k % self.rails as u32) as u8)
        };
        self.lose(pkt, now, RouteError::LostInCable { router, port });
        true
    }

    /// The cable at port `p` of router `r` works with `lanes` lanes from now on.
    fn set_lanes(&mut self, f: &mut FaultRuntime, r: RouterId, p: PortIdx, lanes: u32) {
        // The link layer's width renegotiation (both directions); the schedule's widths were
        // checked against the same rule before the run.
        let set = self.set_link_lanes(r, p, lanes);
        debug_assert!(set.is_ok(), "{set:?}");
        let g = self.gport(r, p) as usize;
        f.lanes[g] = lanes;
        if let Peer::Router { router, port } = self.topo.routers[r.index()].ports[p.index()] {
            f.lanes[self.gport(router, port) as usize] = lanes;
        }
    }

    /// Install tables recomputed from what the routers know now (`count`: a rewrite during the
    /// run, as opposed to the tables a machine starts with).
    fn install_tables(&mut self, now: SimTime, count: bool) {
        let _ = now;
        let Some(mut f) = self.faults.take() else { return };
        if count {
            f.stats.table_updates += 1;
        }
        if self.routing.is_tree() {
            let t = (self.routing.dead_ports() > 0).then(|| {
                let routing = &self.routing;
                Box::new(tables::compute(&self.topo, |r, p| routing.is_dead(r, p)))
            });
            self.routing.install_tables(t);
        }
        if f.bypass {
            let b = bypass::compute(&self.routing, &self.topo);
            f.stats.bypass_pairs = b.rerouted() as u64;
            f.stats.bypass_unreachable = b.unreachable() as u64;
            f.stats.bypass_first_steps = b.first_steps;
            f.stats.bypass_last_steps = b.last_steps;
            f.stats.bypass_long_way = b.long_way;
            self.routing.install_bypass((!b.is_empty()).then(|| Box::new(b)));
        }
        self.faults = Some(f);
    }

    /// The components of class `class` that can fail now: live router–router cables, live
    /// routers, or cables with more than one working lane (as global ports of one end).
    fn random_candidates(&self, class: FaultClass) -> Vec<u32> {
        let Some(f) = self.faults.as_ref() else {
            return Vec::new();
        };
        match class {
            FaultClass::Router => (0..self.topo.routers.len() as u32)
                .filter(|&r| f.router_failed[r as usize] == 0)
                .collect(),
            FaultClass::Cable | FaultClass::Lanes => self
                .topo
                .links()
                .map(|l| self.gport(l.a.0, l.a.1))
                .filter(|&g| self.out[g as usize].to != Dest::None)
                .filter(|&g| match class {
                    FaultClass::Cable => f.cable_failed[g as usize] == 0,
                    _ => f.lanes[g as usize] > 1,
                })
                .collect(),
        }
    }

    /// The next random failure of class entry `c`: fail a component drawn among those up,
    /// schedule its repair, and draw the time of the next failure.
    fn random_failure<E: From<NetEvent>, S: Endpoints>(&mut self, q: &mut EventQueue<E>, c: u32, ep: &mut S) {
        let now = q.now();
        let class = self.faults.as_ref().expect("fault state").random[c as usize].0.class;
        let cands = self.random_candidates(class);
        let f = self.faults.as_mut().expect("fault state");
        let (cfg, rng) = &mut f.random[c as usize];
        let cfg = cfg.clone();
        let rng = rng.as_mut().expect("seeded when scheduled");
        if cands.is_empty() {
            // Nothing to fail now: look again after one mean time between failures.
            let next = now + exponential(rng, cfg.mtbf);
            if next < cfg.until {
                q.schedule_by(Origin(0), next, NetEvent::fault(FaultStep::Random(c)).into());
            }
            return;
        }
        let g = cands[rng.gen_range(0..cands.len())];
        let (fail, repair) = match class {
            FaultClass::Router => {
                let t = Target::Router { router: RouterId(g) };
                (t, t)
            }
            FaultClass::Cable | FaultClass::Lanes => {
                let r = self.router_of[g as usize];
                let p = PortIdx((g - self.port_base[r.index()]) as u16);
                if class == FaultClass::Cable {
                    let t = Target::Cable { router: r, port: p };
                    (t, t)
                } else {
                    let cur = f.lanes[g as usize];
                    let narrower = lane_widths(f.full_lanes[g as usize])
                        .into_iter()
                        .find(|&w| w < cur)
                        .unwrap_or(1);
                    (
                        Target::Lanes {
                            router: r,
                            port: p,
                            lanes: narrower,
                        },
                        Target::Lanes {
                            router: r,
                            port: p,
                            lanes: f.full_lanes[g as usize],
                        },
                    )
                }
            }
        };
        // The next failure of the class, at the rate of the components up after this one.
        let up = match class {
            FaultClass::Lanes => cands.len(),
            _ => cands.len() - 1,
        };
        let next = now + exponential(rng, SimTime(cfg.mtbf.0 / up.max(1) as u64).max(SimTime(1)));
        let i = f.actions.len() as u32;
        f.actions.push(Action {
            at: now,
            target: fail,
            fail: true,
        });
        f.actions.push(Action {
            at: now + cfg.repair,
            target: repair,
            fail: false,
        });
        f.random_action.extend([true, true]);
        f.record.extend([u32::MAX, u32::MAX]);
        q.schedule_by(
            Origin(target_origin(&fail)),
            now + cfg.repair,
            NetEvent::fault(FaultStep::Apply(i + 1)).into(),
        );
        if next < cfg.until {
            q.schedule_by(Origin(0), next, NetEvent::fault(FaultStep::Random(c)).into());
        }
        self.apply_fault(q, i, ep);
    }
}

/// The event origin of a fault on `t`: its router (router origins are their indices), or
/// router 0 for a plane.
fn target_origin(t: &Target) -> u32 {
    match *t {
        Target::Cable { router, .. } | Target::Router { router } | Target::Lanes { router, .. } => router.0,
        Target::Plane { .. } => 0,
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
