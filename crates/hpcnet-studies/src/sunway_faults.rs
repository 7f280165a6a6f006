//! `sunway-faults`: the Sunway prototype keeps running through the loss of a port, a router
//! chip or a whole plane with no message lost, and RDMA bandwidth stays near peak under packet
//! loss (spec 01, "Reliability").
//!
//! On `scenarios/sunway-prototype.toml` with transport reliability on (`[nic.reliability]`,
//! defaults), an all-to-all and an allreduce-like exchange (recursive doubling) among ranks
//! spread over the leaves (`hpcnet_workloads::exchange`, which checks that every notification
//! comes exactly once and every block holds its source's bytes, and compares the allreduce
//! result with a reference sum) run while, at half of the exchange's fault-free duration,
//! (a) the plane-0 cable (port) of the first member's node, (b) the plane-0 leaf router chip of
//! that node, or (c) the whole plane 0 fails. Judged (yes/no claims): every message delivered exactly once with correct bytes, the failure having lost
//! packets (so that the row tests recovery, not luck). Information: time and bandwidth against
//! the fault-free run, packets lost and re-sent, and whether the same run finishes without the
//! transport.
//!
//! RDMA bandwidth under random loss (`nic.loss_rate` 1e-6 … 1e-3): the one-port RDMA-write
//! stream of `sunway-rdma-bandwidth` (rank 0 to the last rank, 1 MB writes, window 64) with the
//! target's bytes checked. Judged: the bandwidth at each rate is within 5 % of the loss-free
//! bandwidth (the paper: "bandwidth stays near peak"; the 5 % bound is this study's reading of
//! it).
//!
//! Sibling bypass: the same all-to-all while the first member's leaf loses a leaf–spine cable,
//! on the generalized fat tree and on the same tree without sibling links
//! (`topology.sibling_links = 0`). Judged: the sibling links lose fewer packets (a spine whose
//! down link died descends through the sibling leaf instead of dropping until the tables are
//! rewritten).
//!
//! Nothing here is fitted: the study's rows depend on no calibrated parameter beyond those of
//! the scenario's own studies (link rate, header, message overhead), declared there.

use crate::{Ctx, Fitted, Row, Study, StudyError, StudyReport};
use hpcnet_fabric::topology::Peer;
use hpcnet_workloads::exchange::{rdma_stream, run_exchange, Exchange, ExchangeOutcome, StreamOutcome};
use hpcnet_workloads::{Rank, Scenario};

const SCENARIO_TOML: &str = include_str!("../../../scenarios/sunway-prototype.toml");
const SCENARIO_PATH: &str = "scenarios/sunway-prototype.toml";

// Published: spec/01-sunway.md, "Reliability".
/// "Apps keep running through the loss of a port, a router chip, or a whole switch (plane)"
/// with transport-level message retransmission: no message lost.
const PAPER_SURVIVES: bool = true;
/// "RDMA reliability ... Bandwidth stays near peak."
const PAPER_NEAR_PEAK: bool = true;
/// The generalized fat tree's sibling links keep a leaf reachable when its down link fails
/// (spec 01, "Topology").
const PAPER_SIBLING_HELPS: bool = true;
/// RDMAW bandwidth of 1 MB messages on one port (spec 01, "Published results"), for context.
const PAPER_1M_GBS: f64 = 13.269;

/// "Near peak": within this fraction of the loss-free bandwidth (the study's reading).
const NEAR_PEAK: f64 = 0.05;
/// Loss rates of the bandwidth rows.
const LOSS_RATES: [f64; 4] = [1e-6, 1e-5, 1e-4, 1e-3];
const RELIABLE: &str = "nic.reliability.enabled=true";

pub struct SunwayFaults;

/// No parameter is fitted to a point of this study.
const FITTED: [Fitted; 0] = [];

/// What fails.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Fault {
    Port,
    Router,
    Plane,
}

impl Fault {
    fn label(self) -> &'static str {
        match self {
            Fault::Port => "a port (its node's plane-0 cable)",
            Fault::Router => "a router chip (plane-0 leaf of the first member)",
            Fault::Plane => "a whole plane (plane 0)",
        }
    }
}

/// One run of the study.
#[derive(Clone, Debug)]
enum Job {
    Exchange { ex: Exchange, set: Vec<String> },
    Stream { set: Vec<String> },
}

enum Out {
    Exchange(ExchangeOutcome),
    Stream(StreamOutcome),
}

/// Members: `p` ranks spread evenly over the nodes (so over the leaves).
fn members(sc: &Scenario, p: usize) -> Vec<Rank> {
    let nodes = sc.topology.nodes.len();
    let hosts = sc.nic.hosts as usize;
    (0..p).map(|i| Rank((i * nodes / p * hosts) as u32)).collect()
}

/// Sizes: members, block bytes, rounds; stream message size and count.
struct Sizes {
    members: usize,
    block: u64,
    rounds: usize,
    msg: u64,
    count: u64,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            members: 8,
            block: 4 << 10,
            rounds: 2,
            msg: 256 << 10,
            count: 32,
        }
    } else {
        Sizes {
            members: 32,
            block: 16 << 10,
            rounds: 4,
            msg: 1 << 20,
            count: 128,
        }
    }
}

fn at(t_ns: u64) -> String {
    format!("{t_ns} ns")
}

impl SunwayFaults {
    fn run_job(ctx: &Ctx, job: &Job, who: &[Rank], s: &Sizes) -> Result<Out, StudyError> {
        let set = match job {
            Job::Exchange { set, .. } | Job::Stream { set } => set,
        };
        let sc = ctx.load(SCENARIO_TOML, SCENARIO_PATH, "sunway-prototype", set)?;
        let world = sc.world()?;
        match job {
            Job::Exchange { ex, .. } => run_exchange(world, who, *ex, s.block, s.rounds)
                .map(Out::Exchange)
                .map_err(|e| StudyError::Unsupported(format!("{SCENARIO_PATH}: {}: {e}", ex.name()))),
            Job::Stream { .. } => {
                let last = Rank(world.ranks() as u32 - 1);
                rdma_stream(world, Rank(0), last, s.msg, s.count, 64)
                    .map(Out::Stream)
                    .map_err(|e| StudyError::Model(format!("{SCENARIO_PATH}: {e}")))
            }
        }
    }

    fn run_all(ctx: &Ctx, jobs: &[Job], who: &[Rank], s: &Sizes) -> Result<Vec<Out>, StudyError> {
        crate::par_map(jobs, |j| Self::run_job(ctx, j, who, s))
            .into_iter()
            .collect()
    }
}

fn exchange(o: &Out) -> &ExchangeOutcome {
    match o {
        Out::Exchange(e) => e,
        Out::Stream(_) => unreachable!("an exchange job"),
    }
}

fn stream(o: &Out) -> &StreamOutcome {
    match o {
        Out::Stream(s) => s,
        Out::Exchange(_) => unreachable!("a stream job"),
    }
}

fn gbs(o: &ExchangeOutcome) -> f64 {
    o.payload_bytes as f64 / o.time.as_secs_f64().max(1e-30) / 1e9
}

fn counts(o: &ExchangeOutcome) -> String {
    let c = &o.counters;
    format!(
        "{} packets lost, {} timeouts, {} probes, {} re-sent, {} duplicates discarded, {} failed",
        c.lost, c.timeouts, c.probes, c.retransmitted, c.duplicates, c.messages_failed
    )
}

impl Study for SunwayFaults {
    fn name(&self) -> &'static str {
        "sunway-faults"
    }

    fn title(&self) -> &'static str {
        "Sunway prototype under a port, router-chip or plane failure and packet loss: every message exactly once, bandwidth near peak"
    }

    fn scenario(&self) -> Option<(&'static str, &'static str)> {
        Some((SCENARIO_TOML, SCENARIO_PATH))
    }

    fn fitted(&self) -> &'static [Fitted] {
        &FITTED
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let s = sizes(ctx.quick);
        let base = ctx.load(SCENARIO_TOML, SCENARIO_PATH, "sunway-prototype", &[])?;
        let who = members(&base, s.members);
        let world = base.world()?;
        let node0 = world.placement().node_of(who[0]).index();
        drop(world);
        let (leaf, port) = *base.topology.nodes[node0]
            .ports
            .first()
            .ok_or_else(|| StudyError::Unsupported(format!("{SCENARIO_PATH}: node {node0} has no network port")))?;
        // The first up port of that leaf: a leaf–spine cable.
        let up = base.topology.routers[leaf.index()]
            .ports
            .iter()
            .position(|p| matches!(p, Peer::Router { .. }))
            .ok_or_else(|| StudyError::Unsupported(format!("{SCENARIO_PATH}: leaf {leaf} has no up port")))?;
        let fault_event = |f: Fault, t: u64| match f {
            Fault::Port => format!(
                "faults.events=[{{at=\"{}\", kind=\"cable\", router={}, port={}}}]",
                at(t),
                leaf.0,
                port.0
            ),
            Fault::Router => format!(
                "faults.events=[{{at=\"{}\", kind=\"router\", router={}}}]",
                at(t),
                leaf.0
            ),
            Fault::Plane => format!("faults.events=[{{at=\"{}\", kind=\"plane\", plane=0}}]", at(t)),
        };
        let exchanges = [Exchange::Alltoall, Exchange::Allreduce];

        // Phase 1: fault-free durations (with the transport on) fix the failure times.
        let clean_jobs: Vec<Job> = exchanges
            .iter()
            .map(|&ex| Job::Exchange {
                ex,
                set: vec![RELIABLE.into()],
            })
            .collect();
        let clean = Self::run_all(ctx, &clean_jobs, &who, &s)?;
        let mid: Vec<u64> = clean.iter().map(|o| (exchange(o).time.0 / 2_000).max(1)).collect();

        // Phase 2: each failure with and without the transport; the sibling comparison; the
        // loss-rate streams.
        let faults = [Fault::Port, Fault::Router, Fault::Plane];
        let mut jobs = Vec::new();
        for (i, &ex) in exchanges.iter().enumerate() {
            for &f in &faults {
                jobs.push(Job::Exchange {
                    ex,
                    set: vec![RELIABLE.into(), fault_event(f, mid[i])],
                });
                jobs.push(Job::Exchange {
                    ex,
                    set: vec![fault_event(f, mid[i])],
                });
            }
        }
        let cable = format!(
            "faults.events=[{{at=\"{}\", kind=\"cable\", router={}, port={up}}}]",
            at(mid[0]),
            leaf.0
        );
        for plain in [false, true] {
            let mut set = vec![RELIABLE.into(), cable.clone()];
            if plain {
                set.push("topology.sibling_links=0".into());
            }
            jobs.push(Job::Exchange {
                ex: Exchange::Alltoall,
                set,
            });
        }
        jobs.push(Job::Stream {
            set: vec![RELIABLE.into()],
        });
        for p in LOSS_RATES {
            jobs.push(Job::Stream {
                set: vec![RELIABLE.into(), format!("nic.loss_rate={p:e}")],
            });
        }
        let out = Self::run_all(ctx, &jobs, &who, &s)?;

        let mut rows = Vec::new();
        let mut k = 0;
        for (i, &ex) in exchanges.iter().enumerate() {
            let c = exchange(&clean[i]);
            if !c.intact() {
                return Err(StudyError::Model(format!(
                    "{SCENARIO_PATH}: the fault-free {} did not deliver every message exactly once ({})",
                    ex.name(),
                    counts(c)
                )));
            }
            rows.push(
                Row::info(
                    format!("{}, fault-free: time", ex.name()),
                    None,
                    c.time.as_us_f64(),
                    "us",
                )
                .with_note(format!("transport reliability on: {}", counts(c))),
            );
            rows.push(Row::info(
                format!("{}, fault-free: bandwidth per member", ex.name()),
                None,
                gbs(c) / s.members as f64,
                "GB/s",
            ));
            for &f in &faults {
                let (with, without) = (exchange(&out[k]), exchange(&out[k + 1]));
                k += 2;
                let t = crate::report::fmt_num(mid[i] as f64 / 1000.0);
                rows.push(
                    Row::claim(
                        format!(
                            "{}: every message exactly once with correct bytes when {} fails at {t} us",
                            ex.name(),
                            f.label()
                        ),
                        PAPER_SURVIVES,
                        with.intact() && with.counters.lost > 0,
                    )
                    .with_note(format!(
                        "{}; the row also requires that the failure lost packets, so that it tests recovery",
                        counts(with)
                    )),
                );
                rows.push(
                    Row::info(
                        format!("{}, {} failing: time / fault-free", ex.name(), f.label()),
                        None,
                        100.0 * with.time.as_secs_f64() / c.time.as_secs_f64(),
                        "%",
                    )
                    .with_note(format!(
                        "{} us against {} us; bandwidth per member {} GB/s",
                        crate::report::fmt_num(with.time.as_us_f64()),
                        crate::report::fmt_num(c.time.as_us_f64()),
                        crate::report::fmt_num(gbs(with) / s.members as f64)
                    )),
                );
                rows.push(
                    Row::info(
                        format!(
                            "{}, {} failing, transport reliability off: every message exactly once",
                            ex.name(),
                            f.label()
                        ),
                        None,
                        if without.intact() { 1.0 } else { 0.0 },
                        crate::report::YES_NO,
                    )
                    .with_note(counts(without)),
                );
            }
        }
        let (gft, plain) = (exchange(&out[k]), exchange(&out[k + 1]));
        k += 2;
        let t = crate::report::fmt_num(mid[0] as f64 / 1000.0);
        rows.push(
            Row::claim(
                format!(
                    "all-to-all, leaf–spine cable of leaf {leaf} failing at {t} us: sibling links lose fewer packets than a plain fat tree"
                ),
                PAPER_SIBLING_HELPS,
                gft.intact() && plain.intact() && gft.counters.lost < plain.counters.lost,
            )
            .with_note(format!(
                "generalized fat tree: {}; plain fat tree: {}",
                counts(gft),
                counts(plain)
            )),
        );
        for (name, o) in [("generalized fat tree (sibling links)", gft), ("plain fat tree", plain)] {
            rows.push(Row::info(
                format!("all-to-all, leaf–spine cable failing, {name}: time / fault-free"),
                None,
                100.0 * o.time.as_secs_f64() / exchange(&clean[0]).time.as_secs_f64(),
                "%",
            ));
        }

        let base_bw = stream(&out[k]);
        k += 1;
        if !base_bw.intact {
            return Err(StudyError::Model(format!(
                "{SCENARIO_PATH}: the loss-free stream did not deliver its bytes"
            )));
        }
        let msg = if s.msg >= 1 << 20 {
            format!("{} MB", s.msg >> 20)
        } else {
            format!("{} KB", s.msg >> 10)
        };
        rows.push(
            Row::info(
                format!("RDMAW bandwidth, {msg} messages, one port, no loss"),
                (s.msg == 1 << 20).then_some(PAPER_1M_GBS),
                base_bw.gbytes_per_s,
                "GB/s",
            )
            .with_note("with transport reliability on; the published value is the 1 MB point of spec 01"),
        );
        for p in LOSS_RATES {
            let o = stream(&out[k]);
            k += 1;
            let ratio = o.gbytes_per_s / base_bw.gbytes_per_s;
            let c = &o.counters;
            rows.push(
                Row::claim(
                    format!(
                        "RDMAW bandwidth at loss rate {p:e} within {} % of the loss-free bandwidth",
                        100.0 * NEAR_PEAK
                    ),
                    PAPER_NEAR_PEAK,
                    o.intact && ratio >= 1.0 - NEAR_PEAK,
                )
                .with_note(format!(
                    "{} GB/s = {} % of {} GB/s; {} packets lost, {} timeouts, {} re-sent",
                    crate::report::fmt_num(o.gbytes_per_s),
                    crate::report::fmt_num(100.0 * ratio),
                    crate::report::fmt_num(base_bw.gbytes_per_s),
                    c.lost,
                    c.timeouts,
                    c.retransmitted
                )),
            );
            rows.push(Row::info(
                format!("RDMAW bandwidth at loss rate {p:e}"),
                None,
                o.gbytes_per_s,
                "GB/s",
            ));
        }

        let discrepancies = vec![
            format!(
                "The paper states the survival claims without a workload, a failure time or a transport \
                 parameter. Choices: {} members on as many leaves (ranks {}…), blocks of {} B, {} rounds; each \
                 failure strikes at half of the exchange's fault-free duration; the transport's timeout, retries \
                 and window are the assumed defaults of [nic.reliability] (20 us, 7, 64); failures are detected \
                 after faults.detection and tables rewritten after faults.table_update (scenario defaults, \
                 assumptions of the dynamic-fault model). Port selection stays fixed (rail 0): with the transport \
                 on, a NIC avoids a rail the routers know to be dead and rotates the rail on every retransmission.",
                s.members,
                who.iter()
                    .map(|r| r.0.to_string())
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(", "),
                s.block,
                s.rounds
            ),
            format!(
                "\"Bandwidth stays near peak\" is read as: within {} % of the loss-free bandwidth of the same \
                 stream ({} messages of {msg}, window 64, rank 0 to the last rank). Losses are drawn per packet at \
                 the receiving NIC (nic.loss_rate); re-sent packets take the other rail, so recovery overlaps the \
                 stream. For comparison, the transport's tests on a 16-node tree give 99.3 % at 1e-3.",
                100.0 * NEAR_PEAK,
                s.count
            ),
            "Where the first member is the only member on its leaf (the quick run), the leaf chip's failure \
             costs the same packets as the port's: no other member's traffic crosses that chip. At the lowest \
             loss rates the stream may lose no packet at all (the notes give the counts): those rows then show \
             only that the transport costs nothing without losses."
                .into(),
            "Losses are recovered by timers, never by the simulator's record of which packets were lost; \
             every exchange checks its own deliveries (exactly one notification per message, every block's \
             bytes, the allreduce sum against a reference computed outside the simulated data path)."
                .into(),
        ];
        let mut report = StudyReport::new(
            self.name(),
            self.title(),
            "spec/01-sunway.md, \"Reliability\" (transport retransmission, survival of port, chip and plane \
             failures, RDMA bandwidth near peak) and \"Topology\" (sibling links)",
            rows,
            discrepancies,
            ctx.quick,
        );
        report.seed = Some(base.file.seed);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn quick_run_judges_survival_and_bandwidth() {
        let r = SunwayFaults.run(&Ctx::quick(true)).unwrap();
        assert!(r.quick);
        let claims: Vec<_> = r.rows.iter().filter(|x| x.role == Role::Prediction).collect();
        // 2 exchanges × 3 failures, the sibling comparison, 4 loss rates.
        assert_eq!(claims.len(), 11, "{}", r.to_text());
        assert!(r.pass, "{}", r.to_text());
        // Without the transport the failures cost messages.
        let lost_without = r
            .rows
            .iter()
            .filter(|x| x.label.contains("reliability off") && x.simulated == 0.0)
            .count();
        assert!(lost_without >= 4, "{}", r.to_text());
    }
}
