//! The fault schedule of a scenario: failures and repairs at given times (`[[faults.events]]`)
//! and random failures drawn from a seeded MTBF model (`[[faults.random]]`).
//!
//! Everything is checked before the run, naming the key: a router, port or plane that does not
//! exist, keys that do not belong to the event's kind, a repair of something that is not failed
//! at that time (or a failure of something already failed), lane widths other than those a link
//! renegotiates to by halving (4 → 2 → 1 on a 4-lane link), random classes with a zero mean
//! time between failures. The resolved schedule is a list of [`Action`]s in time order.
//!
//! Random failures (spec 01, "Reliability": the machine survives the loss of a port, a router
//! chip or a plane; the paper gives no failure rates, so the rates are the scenario's): each
//! component of a class fails after an exponentially distributed time of mean `mtbf`, so the
//! class as a whole fails at rate (components up) / `mtbf`; the component is drawn uniformly
//! among those up, and it is repaired `repair` later. Failures start at `from` and none starts
//! at or after `until`. The draws come from the run's seeded stream `faults.random`, one per
//! class entry, so a seed gives the same failures on every machine.

use crate::config::{ConfigError, DeadlockAvoidance, RoutingConfig, TieRule};
use crate::topology::{Peer, PortIdx, RouterId, Topology};
use hpcnet_des::SimTime;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What fails or is repaired.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// One cable, both directions, named by one end (`router`, `port`): a router–router link or
    /// a node's cable to its router.
    Cable,
    /// A router chip (`router`): every port and cable of it, and the packets in its buffers.
    Router,
    /// A whole plane (`plane`): every router of that rail and the nodes' cables to them.
    Plane,
    /// Lanes of one cable (`router`, `port`): the link renegotiates to `lanes` lanes (fail) or
    /// back to more (repair, default the configured width).
    Lanes,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Cable => "cable",
            FaultKind::Router => "router",
            FaultKind::Plane => "plane",
            FaultKind::Lanes => "lanes",
        }
    }
}

/// Fail or repair.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FaultAction {
    #[default]
    Fail,
    Repair,
}

/// One entry of `[[faults.events]]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultEvent {
    /// When it happens, e.g. "10 us".
    pub at: SimTime,
    pub kind: FaultKind,
    /// "fail" (default) or "repair".
    #[serde(default)]
    pub action: FaultAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortIdx>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<u8>,
    /// Working lanes after the event (kind "lanes").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes: Option<u32>,
}

/// Component classes of random failures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultClass {
    /// Router–router cables.
    Cable,
    /// Router chips.
    Router,
    /// Lane failures of router–router cables: each halves a cable's width (down to one lane);
    /// the repair restores the configured width.
    Lanes,
}

impl FaultClass {
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::Cable => "cable",
            FaultClass::Router => "router",
            FaultClass::Lanes => "lanes",
        }
    }
}

/// One entry of `[[faults.random]]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomFaults {
    pub class: FaultClass,
    /// Mean time between failures of one component of the class.
    pub mtbf: SimTime,
    /// Time from a failure to its repair.
    pub repair: SimTime,
    /// No failure before this time (default 0).
    #[serde(default)]
    pub from: SimTime,
    /// No failure at or after this time (repairs still happen).
    pub until: SimTime,
}

/// A resolved component of a fault.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    Cable {
        router: RouterId,
        port: PortIdx,
    },
    Router {
        router: RouterId,
    },
    Plane {
        plane: u8,
    },
    Lanes {
        router: RouterId,
        port: PortIdx,
        lanes: u32,
    },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Cable { router, port } => write!(f, "cable r{router}.p{port}"),
            Target::Router { router } => write!(f, "router {router}"),
            Target::Plane { plane } => write!(f, "plane {plane}"),
            Target::Lanes { router, port, lanes } => write!(f, "cable r{router}.p{port} at {lanes} lanes"),
        }
    }
}

/// A failure or repair to apply at a time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Action {
    pub at: SimTime,
    pub target: Target,
    pub fail: bool,
}

/// The lane widths a link of `full` lanes renegotiates to: `full`, then halved down to one.
pub fn lane_widths(full: u32) -> Vec<u32> {
    let mut v = Vec::new();
    let mut w = full;
    while w >= 1 {
        v.push(w);
        if w == 1 {
            break;
        }
        w /= 2;
    }
    v
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// Checks that need no topology: the keys each event kind takes, lane widths against
/// `link.lanes`, random classes, and whether `faults.torus_bypass` applies to the routing.
pub fn validate_for_kind(
    events: &[FaultEvent],
    random: &[RandomFaults],
    torus_bypass: bool,
    kind: &str,
    routing: &RoutingConfig,
    vcs: u8,
    link_lanes: u32,
) -> Result<(), ConfigError> {
    let widths = lane_widths(link_lanes);
    for (i, e) in events.iter().enumerate() {
        let key = |k: &str| format!("faults.events[{i}].{k}");
        let kind_name = e.kind.name();
        let (need, forbid): (&[&str], &[&str]) = match e.kind {
            FaultKind::Cable => (&["router", "port"], &["plane", "lanes"]),
            FaultKind::Router => (&["router"], &["port", "plane", "lanes"]),
            FaultKind::Plane => (&["plane"], &["router", "port", "lanes"]),
            FaultKind::Lanes => (&["router", "port"], &["plane"]),
        };
        let has = |k: &str| match k {
            "router" => e.router.is_some(),
            "port" => e.port.is_some(),
            "plane" => e.plane.is_some(),
            _ => e.lanes.is_some(),
        };
        for k in need {
            if !has(k) {
                return Err(ConfigError::new(
                    key(k),
                    format!("missing: a '{kind_name}' event names its {}", need.join(" and ")),
                ));
            }
        }
        for k in forbid {
            if has(k) {
                return Err(ConfigError::new(
                    key(k),
                    format!(
                        "not used by a '{kind_name}' event (it names its {})",
                        need.join(" and ")
                    ),
                ));
            }
        }
        if e.kind == FaultKind::Lanes {
            match (e.action, e.lanes) {
                (FaultAction::Fail, None) => {
                    return Err(ConfigError::new(
                        key("lanes"),
                        format!(
                            "missing: a lane failure gives the width the link renegotiates to ({})",
                            list(&widths[1..])
                        ),
                    ))
                }
                (_, Some(w)) if !widths.contains(&w) => {
                    return Err(ConfigError::new(
                        key("lanes"),
                        format!(
                            "must be a width a {link_lanes}-lane link renegotiates to ({}), got {w}",
                            list(&widths)
                        ),
                    ))
                }
                _ => {}
            }
        }
    }
    for (i, r) in random.iter().enumerate() {
        let key = |k: &str| format!("faults.random[{i}].{k}");
        if r.mtbf == SimTime::ZERO {
            return Err(ConfigError::new(key("mtbf"), "must be longer than 0"));
        }
        if r.repair == SimTime::ZERO {
            return Err(ConfigError::new(
                key("repair"),
                "must be longer than 0 (a component comes back this long after it failed)",
            ));
        }
        if r.until <= r.from {
            return Err(ConfigError::new(
                key("until"),
                format!("must be later than from ({}), got {}", r.from, r.until),
            ));
        }
        if r.class == FaultClass::Lanes && link_lanes == 1 {
            return Err(ConfigError::new(
                key("class"),
                "lane failures need links of more than one lane (link.lanes = 1)",
            ));
        }
    }
    if torus_bypass {
        let key = "faults.torus_bypass";
        if kind != "torus" {
            return Err(ConfigError::new(
                key,
                format!("the first/last-step bypass is for a torus with dimension-order routing, not '{kind}'"),
            ));
        }
        match routing {
            RoutingConfig::DimensionOrder {
                deadlock: DeadlockAvoidance::Bubble,
                tie,
            } => {
                if *tie == TieRule::Random {
                    return Err(ConfigError::new(
                        key,
                        "needs a deterministic routing.tie (balanced or positive): the bypass tables follow each pair's one path",
                    ));
                }
            }
            other => {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "needs routing.algorithm = \"dimension_order\" with deadlock = \"bubble\" (NICEVT), got '{}'",
                        other.name()
                    ),
                ))
            }
        }
        if !vcs.is_multiple_of(2) {
            return Err(ConfigError::new(
                "router.vcs",
                format!(
                    "faults.torus_bypass gives every VC class a second VC for last steps, so router.vcs must be even, got {vcs}"
                ),
            ));
        }
    }
    Ok(())
}

/// The cable end that names a cable in checks: the smaller of its two (router, port) ends.
fn canonical(topo: &Topology, r: RouterId, p: PortIdx) -> (RouterId, PortIdx) {
    match topo.routers[r.index()].ports[p.index()] {
        Peer::Router { router, port } => (r, p).min((router, port)),
        _ => (r, p),
    }
}

/// Checks against the built topology: routers, ports and planes exist, cables named by events
/// are not down for the whole run, and every component's events alternate failure and repair
/// in time (a lane event narrows or widens the link). Returns the resolved actions, in time
/// order (events at one time in the order written).
pub fn resolve(
    events: &[FaultEvent],
    topo: &Topology,
    static_failed: &[(RouterId, PortIdx)],
    link_lanes: u32,
) -> Result<Vec<Action>, ConfigError> {
    let mut out = Vec::with_capacity(events.len());
    let planes = topo.rails.max(1);
    for (i, e) in events.iter().enumerate() {
        let key = |k: &str| format!("faults.events[{i}].{k}");
        let router = match e.router {
            Some(r) if r.index() >= topo.routers.len() => {
                return Err(ConfigError::new(
                    key("router"),
                    format!("router {r} does not exist (the topology has {})", topo.routers.len()),
                ))
            }
            r => r,
        };
        if let (Some(r), Some(p)) = (router, e.port) {
            let info = &topo.routers[r.index()];
            if p.index() >= info.ports.len() || matches!(info.ports[p.index()], Peer::None) {
                return Err(ConfigError::new(
                    key("port"),
                    format!("router {r} has no cabled port {p}"),
                ));
            }
            let c = canonical(topo, r, p);
            if static_failed.iter().any(|&(sr, sp)| canonical(topo, sr, sp) == c) {
                return Err(ConfigError::new(
                    key("port"),
                    format!("router {r} port {p} is in faults.failed_links, down for the whole run"),
                ));
            }
        }
        if let Some(pl) = e.plane {
            if pl >= planes {
                return Err(ConfigError::new(
                    key("plane"),
                    format!(
                        "plane {pl} does not exist (the machine has {planes} plane{}, numbered from 0)",
                        if planes == 1 { "" } else { "s" }
                    ),
                ));
            }
        }
        let target = match e.kind {
            FaultKind::Cable => Target::Cable {
                router: router.expect("validated"),
                port: e.port.expect("validated"),
            },
            FaultKind::Router => Target::Router {
                router: router.expect("validated"),
            },
            FaultKind::Plane => Target::Plane {
                plane: e.plane.expect("validated"),
            },
            FaultKind::Lanes => Target::Lanes {
                router: router.expect("validated"),
                port: e.port.expect("validated"),
                lanes: e.lanes.unwrap_or(link_lanes),
            },
        };
        out.push((
            i,
            Action {
                at: e.at,
                target,
                fail: e.action == FaultAction::Fail,
            },
        ));
    }
    // Time order, events at one time in the order written.
    out.sort_by_key(|(i, a)| (a.at, *i));
    // Per component: failed or not (lane width for lane events), event by event.
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Comp {
        Cable(RouterId, PortIdx),
        Router(RouterId),
        Plane(u8),
        Lanes(RouterId, PortIdx),
    }
    let mut state: BTreeMap<Comp, (u32, SimTime)> = BTreeMap::new();
    for (i, a) in &out {
        let key = |k: &str| format!("faults.events[{i}].{k}");
        let (comp, what) = match a.target {
            Target::Cable { router, port } => {
                let (r, p) = canonical(topo, router, port);
                (Comp::Cable(r, p), format!("cable r{router}.p{port}"))
            }
            Target::Router { router } => (Comp::Router(router), format!("router {router}")),
            Target::Plane { plane } => (Comp::Plane(plane), format!("plane {plane}")),
            Target::Lanes { router, port, .. } => {
                let (r, p) = canonical(topo, router, port);
                (Comp::Lanes(r, p), format!("cable r{router}.p{port}"))
            }
        };
        let up = if matches!(comp, Comp::Lanes(..)) { link_lanes } else { 1 };
        let (cur, since) = state.get(&comp).copied().unwrap_or((up, SimTime::ZERO));
        let next = match a.target {
            Target::Lanes { lanes, .. } => {
                if a.fail && lanes >= cur {
                    return Err(ConfigError::new(
                        key("lanes"),
                        format!(
                            "{what} has {cur} lanes at {} (since {since}); a lane failure narrows it, got {lanes}",
                            a.at
                        ),
                    ));
                }
                if !a.fail && lanes <= cur {
                    return Err(ConfigError::new(
                        key("lanes"),
                        format!(
                            "{what} has {cur} lanes at {} (since {since}); a repair widens it, got {lanes}",
                            a.at
                        ),
                    ));
                }
                lanes
            }
            _ => {
                if a.fail && cur == 0 {
                    return Err(ConfigError::new(
                        key("action"),
                        format!(
                            "{what} has been failed since {since}; it cannot fail again at {} before a repair",
                            a.at
                        ),
                    ));
                }
                if !a.fail && cur == 1 {
                    let when = if since == SimTime::ZERO && !state.contains_key(&comp) {
                        "has not failed before".to_string()
                    } else {
                        format!("has been working since {since}")
                    };
                    return Err(ConfigError::new(
                        key("action"),
                        format!("{what} {when}; a repair at {} needs an earlier failure", a.at),
                    ));
                }
                u32::from(!a.fail)
            }
        };
        state.insert(comp, (next, a.at));
    }
    Ok(out.into_iter().map(|(_, a)| a).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{build, GridConfig, TopologyConfig};

    fn torus() -> Topology {
        build(&TopologyConfig::Torus(GridConfig {
            k: vec![4, 4],
            concentration: 1,
            radix: None,
        }))
        .unwrap()
    }

    fn ev(at: u64, kind: FaultKind, action: FaultAction) -> FaultEvent {
        FaultEvent {
            at: SimTime::from_us(at),
            kind,
            action,
            router: None,
            port: None,
            plane: None,
            lanes: None,
        }
    }

    fn dor() -> RoutingConfig {
        RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Bubble,
            tie: TieRule::Balanced,
        }
    }

    fn kind_err(events: &[FaultEvent]) -> ConfigError {
        validate_for_kind(events, &[], false, "torus", &dor(), 2, 4).unwrap_err()
    }

    #[test]
    fn lane_widths_halve_down_to_one() {
        assert_eq!(lane_widths(4), vec![4, 2, 1]);
        assert_eq!(lane_widths(16), vec![16, 8, 4, 2, 1]);
        assert_eq!(lane_widths(1), vec![1]);
        assert_eq!(lane_widths(3), vec![3, 1]);
    }

    #[test]
    fn each_kind_takes_its_own_keys() {
        let mut e = ev(1, FaultKind::Cable, FaultAction::Fail);
        e.router = Some(RouterId(0));
        let err = kind_err(&[e.clone()]);
        assert_eq!(err.key, "faults.events[0].port");
        assert!(err.reason.contains("router and port"), "{err}");
        e.port = Some(PortIdx(0));
        e.plane = Some(0);
        assert_eq!(kind_err(&[e]).key, "faults.events[0].plane");
        let mut l = ev(1, FaultKind::Lanes, FaultAction::Fail);
        l.router = Some(RouterId(0));
        l.port = Some(PortIdx(0));
        assert_eq!(kind_err(&[l.clone()]).key, "faults.events[0].lanes");
        l.lanes = Some(3);
        let err = kind_err(&[l.clone()]);
        assert_eq!(err.key, "faults.events[0].lanes");
        assert!(
            err.reason.contains("(4, 2, 1)") && err.reason.contains("got 3"),
            "{err}"
        );
        l.lanes = Some(2);
        validate_for_kind(&[l], &[], false, "torus", &dor(), 2, 4).unwrap();
    }

    #[test]
    fn random_classes_and_bypass_are_checked() {
        let r = RandomFaults {
            class: FaultClass::Cable,
            mtbf: SimTime::ZERO,
            repair: SimTime::from_us(5),
            from: SimTime::ZERO,
            until: SimTime::from_us(100),
        };
        let err = validate_for_kind(&[], std::slice::from_ref(&r), false, "torus", &dor(), 2, 4).unwrap_err();
        assert_eq!(err.key, "faults.random[0].mtbf");
        let late = RandomFaults {
            mtbf: SimTime::from_us(1),
            until: SimTime::ZERO,
            ..r
        };
        let err = validate_for_kind(&[], &[late], false, "torus", &dor(), 2, 4).unwrap_err();
        assert_eq!(err.key, "faults.random[0].until");
        let err = validate_for_kind(&[], &[], true, "fat_tree", &dor(), 2, 4).unwrap_err();
        assert_eq!(err.key, "faults.torus_bypass");
        let err = validate_for_kind(&[], &[], true, "torus", &dor(), 3, 4).unwrap_err();
        assert_eq!(err.key, "router.vcs");
        let random_tie = RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Bubble,
            tie: TieRule::Random,
        };
        let err = validate_for_kind(&[], &[], true, "torus", &random_tie, 2, 4).unwrap_err();
        assert!(err.reason.contains("routing.tie"), "{err}");
        validate_for_kind(&[], &[], true, "torus", &dor(), 4, 4).unwrap();
    }

    #[test]
    fn components_must_exist_and_alternate() {
        let t = torus();
        let mut e = ev(5, FaultKind::Router, FaultAction::Fail);
        e.router = Some(RouterId(16));
        let err = resolve(&[e.clone()], &t, &[], 4).unwrap_err();
        assert_eq!(err.key, "faults.events[0].router");
        assert!(err.reason.contains("the topology has 16"), "{err}");
        e.router = Some(RouterId(3));
        let mut repair = e.clone();
        repair.action = FaultAction::Repair;
        repair.at = SimTime::from_us(2);
        // The repair comes first in time: nothing to repair then.
        let err = resolve(&[e.clone(), repair.clone()], &t, &[], 4).unwrap_err();
        assert_eq!(err.key, "faults.events[1].action");
        assert!(err.reason.contains("has not failed before"), "{err}");
        repair.at = SimTime::from_us(9);
        let acts = resolve(&[repair.clone(), e.clone()], &t, &[], 4).unwrap();
        assert_eq!(acts.len(), 2);
        assert!(acts[0].fail && !acts[1].fail && acts[0].at < acts[1].at);
        // Failing twice.
        let mut again = e.clone();
        again.at = SimTime::from_us(7);
        let err = resolve(&[e.clone(), again], &t, &[], 4).unwrap_err();
        assert!(err.reason.contains("failed since 5 us"), "{err}");
        // A cable named from either end is one cable: router 1 port 1 is router 0 port 0.
        let mut c = ev(1, FaultKind::Cable, FaultAction::Fail);
        c.router = Some(RouterId(0));
        c.port = Some(PortIdx(0));
        let mut c2 = c.clone();
        c2.router = Some(RouterId(1));
        c2.port = Some(PortIdx(1));
        c2.at = SimTime::from_us(3);
        let err = resolve(&[c.clone(), c2], &t, &[], 4).unwrap_err();
        assert_eq!(err.key, "faults.events[1].action");
        let err = resolve(&[c.clone()], &t, &[(RouterId(1), PortIdx(1))], 4).unwrap_err();
        assert!(err.reason.contains("faults.failed_links"), "{err}");
        c.port = Some(PortIdx(9));
        assert_eq!(resolve(&[c], &t, &[], 4).unwrap_err().key, "faults.events[0].port");
        let mut p = ev(1, FaultKind::Plane, FaultAction::Fail);
        p.plane = Some(1);
        assert_eq!(resolve(&[p], &t, &[], 4).unwrap_err().key, "faults.events[0].plane");
    }

    #[test]
    fn lane_events_narrow_then_widen() {
        let t = torus();
        let lane = |at, w: Option<u32>, action| {
            let mut e = ev(at, FaultKind::Lanes, action);
            e.router = Some(RouterId(0));
            e.port = Some(PortIdx(0));
            e.lanes = w;
            e
        };
        let ok = [
            lane(1, Some(2), FaultAction::Fail),
            lane(2, Some(1), FaultAction::Fail),
            lane(3, None, FaultAction::Repair),
        ];
        let acts = resolve(&ok, &t, &[], 4).unwrap();
        assert_eq!(
            acts[2].target,
            Target::Lanes {
                router: RouterId(0),
                port: PortIdx(0),
                lanes: 4
            }
        );
        let bad = [lane(1, Some(2), FaultAction::Fail), lane(2, Some(2), FaultAction::Fail)];
        let err = resolve(&bad, &t, &[], 4).unwrap_err();
        assert!(err.reason.contains("narrows"), "{err}");
    }
}
