//! `chpp-bandwidth`: cHPP bandwidth against MTU (2 MB PUT) and against payload at MTU 128 B
//! (spec 02, "Published results", bandwidth vs MTU and bandwidth vs payload).
//!
//! Both sweeps time one transfer on a fresh world of `scenarios/chpp-pair.toml`: bandwidth =
//! bytes / (doorbell to last byte written at the receiver, `p2p::op_latency`), the latency
//! table's own timing. The paper's §5.1 describes its MTU test as one request of 2 MB, and its
//! §5.2 payload sweep was measured "under that condition".
//!
//! (a) MTU sweep: one 2 MiB PUT per MTU. The MTU sets the cHPP packet payload
//! (`packet.max_payload`) and, as §5.1 says, the DMA read request size (`nic.host.read_request`).
//! Reading A (judged): the host's PCIe max payload (`nic.host.max_payload`, the size of the read
//! completions the host returns) is the host's setting and stays at the scenario's 128 B, and
//! each completion costs the engine a header and a processing cycle, the paper's account of its
//! 80 % peak. Reading B (information): the host's completions grow with the MTU. MTUs whose
//! packet does not fit the 1 KiB VC buffer twice get `router.private_credits` raised to two
//! maximum-size packets (virtual cut-through needs a whole packet of room).
//!
//! (b) Payload sweep at MTU 128 B with 32 read tags (the scenario as written). Reading A
//! (judged): one PUT, GET, NAP-immediate or NAP-indirect transfer per size. Reading B
//! (information): streams of each primitive with 32 in flight (the doorbell FIFO depth),
//! `p2p::try_stream_op`.
//!
//! Declared calibration ([`Study::fitted`]): `nic.packet_overhead`, one processing cycle per
//! packet, is the paper's own account of the 3.2 GB/s peak at MTU 128 B, so that row is a
//! calibration point; `nic.host.doorbell_latency` (fitted to PUT 1 B in `chpp-latency`) is part
//! of every one-transfer time. The scenario's other fits (NAP and GET latencies) shape only the
//! information rows and the yes/no ordering claims. Roles:
//! "bandwidth grows with the MTU up to 128 B" is a prediction. The rows beyond MTU 128 B depend
//! on reading A of the MTU sweep, and the 512 KB level and the four ordering claims of the
//! payload sweep on reading A of the payload sweep; both readings were chosen knowing that
//! reading B misses those published points, so those rows are post-hoc.

use crate::chpp::{Prim, FIT_DOORBELL, FIT_PACKET, PAIR_PATH as SCENARIO_PATH, PAIR_TOML as SCENARIO_TOML};
use crate::plot::{Figure, Mark, Series, Style};
use crate::report::fmt_num;
use crate::{Ctx, Fitted, Row, Study, StudyError, StudyReport};
use hpcnet_des::{Bytes, SimTime};
use hpcnet_workloads::p2p::{try_op_latency, try_stream, try_stream_op, LatencyOp, Options};
use hpcnet_workloads::Rank;
use hpcnet_workloads::Scenario;

// Published values: spec/02-chpp.md, "Published results".
/// Bandwidth vs MTU (2 MB PUT): peaks near 3.2 GB/s at MTU 128 B, no gain beyond.
const PAPER_MTU128_GBS: f64 = 3.2;
/// Bandwidth vs payload (MTU 128 B, 32 tags): PUT 512 KB.
const PAPER_PUT_512K_GBS: f64 = 3.19;
// spec/02-chpp.md, "Implementation facts": one memory read round trip ≈ 130 cycles.
const PAPER_READ_RTT_CYCLES: f64 = 130.0;
/// spec/02-chpp.md latency table: PUT at 262 116 B and 1 MiB (µs), to interpolate the paper's
/// own single-transfer time at 512 KB for a discrepancy note.
const PAPER_PUT_LAT: [(f64, f64); 2] = [(262_116.0, 83.694), (1_048_576.0, 329.454)];

/// Tolerance of the predictions.
const TOLERANCE: f64 = 0.05;

const MTUS: [u64; 7] = [16, 32, 64, 128, 256, 512, 1024];
/// Transfer of the MTU sweep: 2 MB.
const TRANSFER: u64 = 2 << 20;
/// Messages in flight in the streaming reading of the payload sweep: the doorbell FIFO depth.
const WINDOW: u64 = 32;
/// Extended PCIe tags (spec 02).
const EXTENDED_TAGS: u32 = 256;
const KB512: u64 = 512 << 10;
/// The small size of the "NAP-immediate best at small sizes" claim.
const SMALL: u64 = 64;
/// Largest NAP (spec 02: NAP ≤ 2 KB).
const NAP_MAX: u64 = 2048;

pub struct ChppBandwidth;

fn load(ctx: &Ctx, over: &[String]) -> Result<Scenario, StudyError> {
    ctx.load(SCENARIO_TOML, SCENARIO_PATH, "chpp-pair", over)
}

/// Overrides of the MTU sweep (see the module comment); `host_follows`: the host's PCIe max
/// payload grows with the MTU too (the information reading).
fn mtu_overrides(base: &Scenario, mtu: u64, tags: u32, host_follows: bool) -> Vec<String> {
    let mut o = vec![
        format!("packet.max_payload=\"{mtu} B\""),
        format!("nic.host.read_request=\"{mtu} B\""),
    ];
    if host_follows {
        o.push(format!("nic.host.max_payload=\"{mtu} B\""));
    }
    o.extend([
        format!("nic.host.read_tags={tags}"),
        // Unused by these runs; the scenario's synthetic traffic must fit a packet to validate.
        format!("traffic.size=\"{mtu} B\""),
    ]);
    let unit = base.fabric.router.credit_unit.0;
    let need = 2 * (mtu + base.fabric.packet.header.0).div_ceil(unit);
    if need > u64::from(base.fabric.router.private_credits) {
        o.push(format!("router.private_credits={need}"));
    }
    o
}

/// The primitives of the payload sweep, in the order the study lists them.
const PRIMS: [Prim; 4] = [Prim::Put, Prim::Get, Prim::NapImm, Prim::NapInd];

/// Messages per point of the payload sweep: about 4 MiB (quick 512 KiB), 64 to 2048 (16 to 256).
fn messages(size: u64, quick: bool) -> u64 {
    let (total, min, max) = if quick {
        (512 << 10, 16, 256)
    } else {
        (4 << 20, 64, 2048)
    };
    (total / size).clamp(min, max)
}

fn payload_sizes(p: Prim, quick: bool) -> Vec<u64> {
    let top = if p.is_nap() {
        11
    } else if quick {
        19
    } else {
        20
    };
    let step = if quick { 3 } else { 1 };
    let mut v: Vec<u64> = (6..=top).step_by(step).map(|k| 1u64 << k).collect();
    if !v.contains(&(1 << top)) {
        v.push(1 << top);
    }
    v
}

#[derive(Clone, Debug)]
enum Job {
    /// One 2 MB PUT at an MTU with a number of read tags; `host_follows`: the host's PCIe max
    /// payload grows with the MTU (information reading) instead of staying at the scenario's.
    Mtu { mtu: u64, tags: u32, host_follows: bool },
    /// One transfer: size / (doorbell to data written at the receiver).
    Single { p: Prim, size: u64 },
    /// A stream of one primitive at MTU 128, `WINDOW` in flight (information reading).
    Stream { p: Prim, size: u64, count: u64 },
    /// The RDMA-write stream of `p2p::stream` (cross-check of the PUT path).
    Write { size: u64, count: u64 },
}

fn run_job(ctx: &Ctx, base: &Scenario, job: &Job) -> Result<f64, StudyError> {
    let window = |count: u64| Options {
        window: WINDOW as u32,
        messages: count,
        qps: 1,
        rail: 0,
    };
    let err = |what: String| move |e| crate::p2p_error(&format!("{SCENARIO_PATH}: {what}"), e);
    match *job {
        Job::Mtu {
            mtu,
            tags,
            host_follows,
        } => {
            let sc = load(ctx, &mtu_overrides(base, mtu, tags, host_follows))?;
            let t = try_op_latency(sc.world()?, Rank(0), Rank(1), LatencyOp::Put, TRANSFER)
                .map_err(err(format!("2 MiB PUT at MTU {mtu} B")))?;
            Ok(TRANSFER as f64 / t.as_secs_f64() / 1e9)
        }
        Job::Single { p, size } => {
            let t = try_op_latency(base.world()?, Rank(0), Rank(1), p.op(), size)
                .map_err(err(format!("one {} of {size} B", p.name())))?;
            Ok(size as f64 / t.as_secs_f64() / 1e9)
        }
        Job::Stream { p, size, count } => {
            Ok(
                try_stream_op(base.world()?, Rank(0), Rank(1), p.op(), size, &window(count))
                    .map_err(err(format!("{} stream of {size} B", p.name())))?
                    .gbytes_per_s,
            )
        }
        Job::Write { size, count } => Ok(try_stream(base.world()?, Rank(0), Rank(1), size, false, &window(count))
            .map_err(err(format!("RDMA-write stream of {size} B")))?
            .gbytes_per_s),
    }
}

/// Rate limits of the model at one MTU, from its configuration (GB/s).
struct Limits {
    /// `HostConfig::read_rate`: TLP-limited or tag-limited DMA reads.
    read: f64,
    /// Tag limit alone: tags × read request / read round trip.
    tags: f64,
    /// Engine data path: payload / ((payload + header per completion) / engine rate + one
    /// processing cycle per completion); a completion is min(read request, host max payload).
    engine: f64,
}

fn limits(sc: &Scenario) -> Limits {
    let h = &sc.nic.host;
    let mtu = sc.fabric.packet.max_payload.0;
    let header = sc.fabric.packet.header.0 as f64;
    let completion = h.completion_size().0;
    let units = mtu.div_ceil(completion).max(1) as f64;
    let engine = sc.nic.engine_rate.map_or(f64::INFINITY, |r| {
        let per_packet_ns = (mtu as f64 + header * units) / (r.as_bytes_per_sec_f64() / 1e9)
            + sc.nic.packet_overhead.as_ns_f64() * units;
        mtu as f64 / per_packet_ns
    });
    Limits {
        read: h.read_rate().as_bytes_per_sec_f64() / 1e9,
        tags: f64::from(h.read_tags) * h.read_request.0 as f64 / h.read_latency.as_ns_f64(),
        engine,
    }
}

/// The tags the paper's formula asks for continuous reads, ceil(t / (S/16 + 2·ceil(S/MTU))), with
/// t = 130 cycles and S = MTU (one packet per read request), before the paper caps it at 32.
fn paper_min_tags(mtu: u64) -> f64 {
    let s = mtu as f64;
    (PAPER_READ_RTT_CYCLES / (s / 16.0 + 2.0 * (s / mtu as f64).ceil())).ceil()
}

/// The paper's own single-transfer bandwidth for a PUT of `size` bytes, from its latency table
/// (linear between its two largest PUT points).
fn paper_put_single_gbs(size: u64) -> f64 {
    let [(s0, t0), (s1, t1)] = PAPER_PUT_LAT;
    let t_us = t0 + (size as f64 - s0) * (t1 - t0) / (s1 - s0);
    size as f64 / (t_us * 1e3)
}

fn size_label(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KB", s >> 10),
        s => format!("{s} B"),
    }
}

/// Strictly increasing along the sweep.
fn grows(curve: &[(u64, f64)]) -> bool {
    curve.len() > 1 && curve.windows(2).all(|w| w[1].1 > w[0].1)
}

/// Sizes of the streaming reading shown as information rows.
const STREAM_ROWS: [u64; 4] = [64, 1024, 2048, KB512];

impl Study for ChppBandwidth {
    fn name(&self) -> &'static str {
        "chpp-bandwidth"
    }

    fn title(&self) -> &'static str {
        "cHPP bandwidth vs MTU (2 MB PUT) and vs payload at MTU 128 B (PUT, GET, NAP)"
    }

    fn scenario(&self) -> Option<(&'static str, &'static str)> {
        Some((SCENARIO_TOML, SCENARIO_PATH))
    }

    fn fitted(&self) -> &'static [Fitted] {
        &[FIT_PACKET, FIT_DOORBELL]
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let q = ctx.quick;
        let base = load(ctx, &[])?;
        let tags = base.nic.host.read_tags;
        let host_mps = base.nic.host.max_payload.0;
        let mut jobs = Vec::new();
        for t in [tags, EXTENDED_TAGS] {
            for mtu in MTUS {
                jobs.push(Job::Mtu {
                    mtu,
                    tags: t,
                    host_follows: false,
                });
            }
        }
        for mtu in MTUS.into_iter().filter(|&m| m > 128) {
            jobs.push(Job::Mtu {
                mtu,
                tags,
                host_follows: true,
            });
        }
        for p in PRIMS {
            for size in payload_sizes(p, q) {
                jobs.push(Job::Single { p, size });
                jobs.push(Job::Stream {
                    p,
                    size,
                    count: messages(size, q),
                });
            }
        }
        jobs.push(Job::Write {
            size: KB512,
            count: messages(KB512, q),
        });
        let out: Vec<f64> = crate::par_map(&jobs, |j| run_job(ctx, &base, j))
            .into_iter()
            .collect::<Result<_, _>>()?;
        let find =
            |f: &dyn Fn(&Job) -> bool| -> Option<f64> { jobs.iter().zip(&out).find(|(j, _)| f(j)).map(|(_, &g)| g) };
        let mtu_run = |m: u64, t: u32, follows: bool| {
            find(&|j| matches!(j, Job::Mtu { mtu, tags, host_follows } if *mtu == m && *tags == t && *host_follows == follows))
                .expect("MTU run")
        };
        let mtu_bw = |m: u64, t: u32| mtu_run(m, t, false);
        let curve_of = |stream: bool, p: Prim| -> Vec<(u64, f64)> {
            jobs.iter()
                .zip(&out)
                .filter_map(|(j, &g)| match (j, stream) {
                    (Job::Single { p: x, size }, false) | (Job::Stream { p: x, size, .. }, true) if *x == p => {
                        Some((*size, g))
                    }
                    _ => None,
                })
                .collect()
        };
        let single_curve = |p: Prim| curve_of(false, p);
        let stream_curve = |p: Prim| curve_of(true, p);
        let single = |p: Prim, s: u64| {
            single_curve(p)
                .into_iter()
                .find(|x| x.0 == s)
                .map(|x| x.1)
                .expect("single run")
        };
        let streamed = |p: Prim, s: u64| stream_curve(p).into_iter().find(|x| x.0 == s).map(|x| x.1);
        let write_512k = *out.last().expect("write run");
        let payload_a = "reading A of the payload sweep (one transfer per size), chosen knowing this point; reading B \
                         (32 in flight) in the information rows and the discrepancies";

        // (a) Bandwidth vs MTU.
        let mut rows = vec![Row::calibration(
            "2 MB PUT at MTU 128 B, 32 tags",
            PAPER_MTU128_GBS,
            mtu_bw(128, tags),
            "GB/s",
            TOLERANCE,
        )
        .with_note(
            "nic.packet_overhead (one 4 ns processing cycle per packet) is set from the paper's own account of this \
             peak: 16 B header + 128 B data + 1 processing cycle = 10 cycles of the 4 GB/s bus",
        )];
        let below: Vec<(u64, f64)> = MTUS
            .iter()
            .filter(|&&m| m <= 128)
            .map(|&m| (m, mtu_bw(m, tags)))
            .collect();
        rows.push(Row::claim(
            "2 MB PUT bandwidth grows with the MTU from 16 B to 128 B",
            true,
            grows(&below),
        ));
        for mtu in MTUS.into_iter().filter(|&m| m > 128) {
            rows.push(
                Row::post_hoc(
                    format!("2 MB PUT at MTU {mtu} B, 32 tags (no gain beyond 128 B)"),
                    PAPER_MTU128_GBS,
                    mtu_bw(mtu, tags),
                    "GB/s",
                    TOLERANCE,
                )
                .with_note(format!(
                    "reading A of the MTU sweep: read requests of {mtu} B returned by the host in {host_mps} B \
                     completions, with a header and a processing cycle per completion, chosen knowing this point; \
                     reading B (completions growing with the MTU) in the information rows"
                )),
            );
        }

        // (b) Bandwidth vs payload, one transfer per size.
        let top = *payload_sizes(Prim::Put, q).last().expect("sizes");
        rows.push(
            Row::post_hoc(
                "PUT, one 512 KB transfer, MTU 128 B, 32 tags",
                PAPER_PUT_512K_GBS,
                single(Prim::Put, KB512),
                "GB/s",
                TOLERANCE,
            )
            .with_note(format!(
                "bandwidth = size / (doorbell to last byte written); {payload_a}"
            )),
        );
        let (put, get) = (single_curve(Prim::Put), single_curve(Prim::Get));
        rows.push(
            Row::claim(
                format!("GET bandwidth below PUT at every payload, 64 B to {}", size_label(top)),
                true,
                !put.is_empty() && put.len() == get.len() && put.iter().zip(&get).all(|(a, b)| b.1 < a.1),
            )
            .with_role(crate::Role::PostHoc)
            .with_note(payload_a),
        );
        rows.push(
            Row::claim(
                "NAP-immediate and NAP-indirect bandwidth grow with payload up to 2 KB",
                true,
                grows(&single_curve(Prim::NapImm)) && grows(&single_curve(Prim::NapInd)),
            )
            .with_role(crate::Role::PostHoc)
            .with_note(payload_a),
        );
        let imm_small = single(Prim::NapImm, SMALL);
        rows.push(
            Row::claim(
                "NAP-immediate has the highest bandwidth of the four primitives at 64 B",
                true,
                PRIMS
                    .iter()
                    .filter(|&&p| p != Prim::NapImm)
                    .all(|&p| imm_small > single(p, SMALL)),
            )
            .with_role(crate::Role::PostHoc)
            .with_note(payload_a),
        );
        let lead = |s: u64| single(Prim::NapImm, s) / single(Prim::NapInd, s);
        rows.push(
            Row::claim(
                "the NAP-immediate lead over NAP-indirect shrinks from 64 B to 2 KB",
                true,
                lead(NAP_MAX) < lead(SMALL),
            )
            .with_role(crate::Role::PostHoc)
            .with_note(format!(
                "paper §5.2 text; NAP-imm/NAP-ind {} at 64 B, {} at 2 KB; {payload_a}",
                fmt_num(lead(SMALL)),
                fmt_num(lead(NAP_MAX))
            )),
        );

        // Information: the rest of both sweeps and the other readings.
        for mtu in MTUS.into_iter().filter(|&m| m < 128) {
            rows.push(Row::info(
                format!("2 MB PUT at MTU {mtu} B, 32 tags"),
                None,
                mtu_bw(mtu, tags),
                "GB/s",
            ));
        }
        for mtu in MTUS {
            rows.push(Row::info(
                format!("2 MB PUT at MTU {mtu} B, 256 extended tags (what-if, not published)"),
                None,
                mtu_bw(mtu, EXTENDED_TAGS),
                "GB/s",
            ));
        }
        for mtu in MTUS.into_iter().filter(|&m| m > 128) {
            rows.push(
                Row::info(
                    format!("2 MB PUT at MTU {mtu} B, 32 tags, host completions growing with the MTU"),
                    Some(PAPER_MTU128_GBS),
                    mtu_run(mtu, tags, true),
                    "GB/s",
                )
                .with_note("reading B of the MTU sweep; see discrepancies"),
            );
        }
        for p in PRIMS {
            for (size, g) in single_curve(p) {
                if p == Prim::Put && size == KB512 {
                    continue;
                }
                rows.push(Row::info(
                    format!("{}, one {} transfer", p.name(), size_label(size)),
                    None,
                    g,
                    "GB/s",
                ));
            }
        }
        for p in PRIMS {
            for size in STREAM_ROWS {
                if let Some(g) = streamed(p, size) {
                    let row = Row::info(
                        format!("{} stream, {} messages, {WINDOW} in flight", p.name(), size_label(size)),
                        (p == Prim::Put && size == KB512).then_some(PAPER_PUT_512K_GBS),
                        g,
                        "GB/s",
                    );
                    rows.push(if p == Prim::Put && size == SMALL {
                        row.with_note("reading B of the payload sweep; see discrepancies")
                    } else {
                        row
                    });
                }
            }
        }
        rows.push(
            Row::info(
                "RDMA-write stream (p2p::stream), 512 KB, MTU 128 B (cross-check of the PUT path)",
                Some(PAPER_PUT_512K_GBS),
                write_512k,
                "GB/s",
            )
            .with_note("Op::Write and Op::Put take the same engine path; only the gather list differs"),
        );

        let mut discrepancies = Vec::new();
        discrepancies.push(mtu_note(ctx, &base, tags, &|m| mtu_run(m, tags, true)));
        let put_512k_stream = streamed(Prim::Put, KB512).unwrap_or(f64::NAN);
        let get_512k_stream = streamed(Prim::Get, KB512).unwrap_or(f64::NAN);
        let imm_ind_steps: Vec<String> = stream_curve(Prim::NapInd)
            .windows(2)
            .filter(|w| w[1].0 >= 1024)
            .map(|w| format!("{} → {} B {:+.2} %", w[0].0, w[1].0, (w[1].1 / w[0].1 - 1.0) * 100.0))
            .collect();
        let best_other_small = PRIMS
            .iter()
            .filter(|&&p| p != Prim::NapImm)
            .map(|&p| streamed(p, SMALL).unwrap_or(0.0))
            .fold(f64::MIN, f64::max);
        discrepancies.push(format!(
            "Payload sweep method: the paper does not say how many messages its payload sweep kept in flight. \
             Reading A (judged): one transfer per size, as §5.1 does for its 2 MB request (§5.2 was measured \
             \"under that condition\"); it is also the reading under which the paper's reason for GET's lower \
             bandwidth (the target hands the GET to its send engine, \"so latency increases\") lowers bandwidth. \
             Reading B (information rows): streams of {WINDOW} in flight. Under reading B the model's ordering \
             claims are ties and fail: GET against PUT at 512 KB {:+.4} %; NAP-immediate against the best other \
             primitive at 64 B {:+.2} %; NAP-indirect stream steps {}. Reading A was chosen knowing this, so the \
             rows that depend on it are post-hoc.",
            (get_512k_stream / put_512k_stream - 1.0) * 100.0,
            (streamed(Prim::NapImm, SMALL).unwrap_or(f64::NAN) / best_other_small - 1.0) * 100.0,
            imm_ind_steps.join(", "),
        ));
        let put_single_512k = single(Prim::Put, KB512);
        discrepancies.push(format!(
            "512 KB level: one 512 KB PUT gives {} GB/s ({:+.1} % from the published 3.19). The paper's own latency \
             table, interpolated between its 262 116 B and 1 MiB PUT points, puts a single 512 KB PUT at {} GB/s, \
             {:.1} % below its quoted 3.19; reading B (32 in flight) gives {} GB/s. Both readings are within the \
             tolerance.",
            fmt_num(put_single_512k),
            (put_single_512k / PAPER_PUT_512K_GBS - 1.0) * 100.0,
            fmt_num(paper_put_single_gbs(KB512)),
            (1.0 - paper_put_single_gbs(KB512) / PAPER_PUT_512K_GBS) * 100.0,
            fmt_num(put_512k_stream),
        ));
        let gaps: Vec<f64> = put
            .iter()
            .zip(&get)
            .map(|(a, b)| a.0 as f64 / b.1 - a.0 as f64 / a.1)
            .collect();
        let (gmin, gmax) = (
            gaps.iter().copied().fold(f64::INFINITY, f64::min),
            gaps.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
        let (top_put, top_get) = (single(Prim::Put, top), single(Prim::Get, top));
        discrepancies.push(format!(
            "GET against PUT: a GET takes {} ns longer than a PUT of the same size across the sweep (the \
             paper's table: 76 ns at every size). The gap at 1 B is calibrated (nic.writeback_overhead is fitted \
             on GET 1 B and nic.host.doorbell_latency on PUT 1 B in chpp-latency), so the \"GET below PUT\" row checks mainly that the gap stays as the size \
             grows; at {} it is {:.3} % of the bandwidth, a difference no plot shows.",
            if (gmax - gmin).abs() < 0.5 {
                format!("{:.0}", gmin)
            } else {
                format!("{:.0}–{:.0}", gmin, gmax)
            },
            size_label(top),
            (1.0 - top_get / top_put) * 100.0,
        ));
        discrepancies.extend(stream_notes(&base, &streamed, get_512k_stream, put_512k_stream));
        discrepancies.push(
            "Readings of the claims: \"NAP-immediate best at small sizes\" as highest of the four at 64 B; \"GET \
             slightly lower\" as GET below PUT at every size of the sweep; \"the gap between the two NAP kinds \
             narrows\" (§5.2 of the paper) as NAP-imm/NAP-ind lower at 2 KB than at 64 B."
                .into(),
        );
        let mut report = StudyReport::new(
            self.name(),
            self.title(),
            "spec/02-chpp.md, \"Published results\" (bandwidth vs MTU, bandwidth vs payload)",
            rows,
            discrepancies,
            q,
        );
        report.seed = Some(base.file.seed);
        report.figures = figures(&mtu_run, tags, &single_curve, &stream_curve);
        Ok(report)
    }
}

/// Why the model's MTU curve is flat beyond 128 B, and what the other reading gives.
fn mtu_note(ctx: &Ctx, base: &Scenario, tags: u32, host_follows: &dyn Fn(u64) -> f64) -> String {
    let lim: Vec<(u64, Limits)> = MTUS
        .iter()
        .filter_map(|&m| {
            load(ctx, &mtu_overrides(base, m, tags, false))
                .ok()
                .map(|sc| (m, limits(&sc)))
        })
        .collect();
    let describe: Vec<String> = lim
        .iter()
        .map(|(m, l)| {
            format!(
                "MTU {m}: tags {} / PCIe read {} / engine {}",
                fmt_num(l.tags),
                fmt_num(l.read),
                fmt_num(l.engine)
            )
        })
        .collect();
    let tag_bound: Vec<u64> = lim
        .iter()
        .filter(|(_, l)| l.tags <= l.read.min(l.engine) * (1.0 + 1e-6))
        .map(|(m, _)| *m)
        .collect();
    let enough = MTUS.iter().find(|&&m| paper_min_tags(m) <= 32.0).copied().unwrap_or(0);
    let min_tags: Vec<String> = MTUS
        .iter()
        .map(|&m| format!("{m} B → {}", fmt_num(paper_min_tags(m))))
        .collect();
    let mps = base.nic.host.max_payload;
    format!(
        "MTU sweep: the paper attributes the flat top beyond MTU 128 B to its 32 read tags. Its own minimum-tag \
         formula (t = 130 cycles, S = MTU) asks for {}: 32 tags keep reads continuous at every MTU ≥ {enough} B. \
         The model agrees: tags bind only at MTU {tag_bound:?} B (limits in GB/s: {}), which is where 256 extended \
         tags help (what-if rows). In the model the top is flat because the host returns read data in {mps} \
         completions (nic.host.max_payload, the host's setting) whatever the MTU, and the engine pays a header and \
         a processing cycle per completion, the paper's own account of its 80 % peak (reading A, judged). Under \
         reading B, where the host's completions grow with the MTU, the model keeps growing: {} GB/s at 256 B, {} \
         GB/s at 1024 B, against the paper's flat top. Reading A was chosen knowing this, so the rows beyond \
         MTU 128 B are post-hoc; the two readings agree at MTU 128 B and below. \
         Bandwidth = 2 MiB / (doorbell to last byte written at the receiver); MTUs whose packet does not fit the \
         1 KiB VC buffer twice get router.private_credits = two maximum-size packets.",
        min_tags.join(", "),
        describe.join("; "),
        fmt_num(host_follows(256)),
        fmt_num(host_follows(1024)),
    )
}

/// Why reading B (streams) ties: each primitive's per-message pacing in the pipelined engine
/// (`nic.descriptor_prefetch > 0`), from the configuration, against the measured streams.
fn stream_notes(
    base: &Scenario,
    streamed: &dyn Fn(Prim, u64) -> Option<f64>,
    get_512k: f64,
    put_512k: f64,
) -> Vec<String> {
    let nic = &base.nic;
    let rtt = nic.host.read_latency;
    let nap_overhead = nic.nap_overhead.unwrap_or(nic.message_overhead);
    let put_desc = rtt + nic.message_overhead;
    let get_desc = rtt + nic.get_overhead.unwrap_or(nic.message_overhead);
    let writeback = nic.writeback_overhead.unwrap_or(nic.message_overhead);
    let extract = nic.immediate_rate.or(nic.engine_rate).map_or(SimTime::ZERO, |r| {
        r.serialization(Bytes(SMALL.saturating_sub(nic.immediate_inline.0)))
    });
    let nap_imm_desc = rtt + nap_overhead + extract;
    let nap_ind_desc = rtt + nap_overhead;
    let engine_gbs = limits(base).engine;
    let mut ranking: Vec<(Prim, f64)> = PRIMS
        .iter()
        .map(|&p| (p, streamed(p, SMALL).unwrap_or(f64::NAN)))
        .collect();
    ranking.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut notes = vec![format!(
        "Streams (information): the scenario's engine is pipelined (nic.descriptor_prefetch = {}; spec 02's send \
         engine: doorbell FIFO → descriptor read → descriptor extract → data read → ...), so a stream is paced by \
         its slowest stage. Beyond a few KB that is the engine data path ({} GB/s) for PUT and GET alike ({} vs {} \
         GB/s at 512 KB; a GET's write-back at the target costs nic.writeback_overhead = {writeback} and no \
         descriptor fetch). At {SMALL} B it is the descriptor stage: PUT fetch + nic.message_overhead = \
         {put_desc}, GET {get_desc}, NAP-indirect {nap_ind_desc}, NAP-immediate {nap_imm_desc} (with the \
         extraction of its data beyond nic.immediate_inline, {extract}); ranking {} GB/s.",
        nic.descriptor_prefetch,
        fmt_num(engine_gbs),
        fmt_num(get_512k),
        fmt_num(put_512k),
        ranking
            .iter()
            .map(|(p, g)| format!("{} {}", p.name(), fmt_num(*g)))
            .collect::<Vec<_>>()
            .join(", "),
    )];
    if let Some(per_tlp) = nic.nap_upload_per_tlp {
        let mps = nic.host.max_payload.0.max(1);
        notes.push(format!(
            "A NAP-indirect stream is bounded from 1 KB by the receiver's NAP upload, {mps} B per \
             nic.nap_upload_per_tlp = {per_tlp} ({} GB/s; fitted on the NAP-indirect 1 KB latency, it also gives \
             the paper's 1 → 2 KB latency increment, 1.12 us), so its stream curve is flat from 1 KB while its \
             one-transfer curve grows.",
            fmt_num(mps as f64 / (per_tlp.0 as f64 / 1e3)),
        ));
    }
    notes
}

type Curve<'a> = &'a dyn Fn(Prim) -> Vec<(u64, f64)>;

fn figures(mtu_run: &dyn Fn(u64, u32, bool) -> f64, tags: u32, single: Curve, streams: Curve) -> Vec<Figure> {
    let x = |s: u64| (s as f64).log2();
    let mtu = Figure {
        title: "2 MB PUT bandwidth vs MTU".into(),
        x_label: "log2 MTU (B)".into(),
        y_label: "bandwidth (GB/s)".into(),
        y_log: false,
        series: vec![
            Series {
                label: format!("model, {tags} tags"),
                points: MTUS.iter().map(|&m| (x(m), mtu_run(m, tags, false))).collect(),
                style: Style::Line,
                color: 0,
            },
            Series {
                label: format!("model, {EXTENDED_TAGS} tags (what-if)"),
                points: MTUS.iter().map(|&m| (x(m), mtu_run(m, EXTENDED_TAGS, false))).collect(),
                style: Style::Dashed,
                color: 1,
            },
            Series {
                label: "model, host completions = MTU (info)".into(),
                points: MTUS
                    .iter()
                    .filter(|&&m| m >= 128)
                    .map(|&m| {
                        (
                            x(m),
                            if m == 128 {
                                mtu_run(m, tags, false)
                            } else {
                                mtu_run(m, tags, true)
                            },
                        )
                    })
                    .collect(),
                style: Style::Dashed,
                color: 3,
            },
            Series {
                label: "paper: 3.2 GB/s at MTU 128, flat beyond".into(),
                points: vec![(x(128), PAPER_MTU128_GBS), (x(1024), PAPER_MTU128_GBS)],
                style: Style::Dashed,
                color: 2,
            },
        ],
        marks: vec![Mark::X("MTU 128".into(), x(128))],
    };
    let payload = Figure {
        title: "bandwidth vs payload, MTU 128 B, 32 tags (lines: one transfer; dashed: streams)".into(),
        x_label: "log2 payload (B)".into(),
        y_label: "bandwidth (GB/s)".into(),
        y_log: false,
        series: PRIMS
            .iter()
            .enumerate()
            .map(|(c, &p)| Series {
                label: format!("{} model", p.name()),
                points: single(p).into_iter().map(|(s, g)| (x(s), g)).collect(),
                style: Style::Line,
                color: c,
            })
            .chain(PRIMS.iter().enumerate().map(|(c, &p)| Series {
                label: format!("{} stream (info)", p.name()),
                points: streams(p).into_iter().map(|(s, g)| (x(s), g)).collect(),
                style: Style::Dashed,
                color: c,
            }))
            .chain(std::iter::once(Series {
                label: "paper PUT 512 KB".into(),
                points: vec![(x(KB512), PAPER_PUT_512K_GBS)],
                style: Style::Points,
                color: 5,
            }))
            .collect(),
        marks: Vec::new(),
    };
    vec![mtu, payload]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn mtu_overrides_load_and_keep_a_packet_in_a_vc() {
        let base = load(&Ctx::default(), &[]).unwrap();
        for mtu in MTUS {
            let sc = load(&Ctx::default(), &mtu_overrides(&base, mtu, EXTENDED_TAGS, false)).unwrap();
            assert_eq!(sc.fabric.packet.max_payload.0, mtu);
            assert_eq!(sc.nic.host.read_request.0, mtu);
            assert_eq!(sc.nic.host.max_payload, base.nic.host.max_payload);
            assert_eq!(sc.nic.host.read_tags, EXTENDED_TAGS);
            let need = (mtu + 16).div_ceil(16);
            assert!(u64::from(sc.fabric.router.private_credits) >= need.min(64), "{mtu}");
            let sc = load(&Ctx::default(), &mtu_overrides(&base, mtu, 32, true)).unwrap();
            assert_eq!(sc.nic.host.max_payload.0, mtu);
        }
        // The scenario's own MTU changes nothing but the tags.
        let o = mtu_overrides(&base, 128, 32, false);
        assert_eq!(o.len(), 4);
        // The paper's tag formula: 13 tags at MTU 128, more than 32 below 64 B.
        assert_eq!(paper_min_tags(128), 13.0);
        assert_eq!(paper_min_tags(32), 33.0);
        assert_eq!(paper_min_tags(16), 44.0);
        // The paper's own single 512 KB PUT, from its latency table: about 3.166 GB/s.
        assert!(
            (paper_put_single_gbs(KB512) - 3.166).abs() < 0.001,
            "{}",
            paper_put_single_gbs(KB512)
        );
    }

    #[test]
    fn engine_limit_counts_one_header_and_cycle_per_read_completion() {
        let base = load(&Ctx::default(), &[]).unwrap();
        // 128 B completions: (16 + 128) B at 4 GB/s + 4 ns = 40 ns per 128 B = 3.2 GB/s, at any
        // MTU ≥ 128 while the host returns 128 B completions.
        for mtu in [128, 256, 1024] {
            let l = limits(&load(&Ctx::default(), &mtu_overrides(&base, mtu, 32, false)).unwrap());
            assert!((l.engine - 3.2).abs() < 1e-9, "{mtu}: {}", l.engine);
        }
        // Completions that grow with the MTU: (16 + 256) B / 4 GB/s + 4 ns = 72 ns per 256 B.
        let l = limits(&load(&Ctx::default(), &mtu_overrides(&base, 256, 32, true)).unwrap());
        assert!((l.engine - 256.0 / 72.0).abs() < 1e-9, "{}", l.engine);
    }

    #[test]
    fn quick_run_roles_and_invariants() {
        let r = ChppBandwidth.run(&Ctx::quick(true)).unwrap();
        assert_eq!(
            crate::calibration_labels(&r),
            ["2 MB PUT at MTU 128 B, 32 tags"],
            "{}",
            r.to_text()
        );
        let row = |l: &str| {
            r.rows
                .iter()
                .find(|x| x.label.starts_with(l))
                .unwrap_or_else(|| panic!("no row {l}"))
        };
        assert_eq!(row("2 MB PUT bandwidth grows with the MTU").role, Role::Prediction);
        assert_eq!(row("2 MB PUT at MTU 512 B, 32 tags (no gain").role, Role::PostHoc);
        assert_eq!(row("PUT, one 512 KB transfer").role, Role::PostHoc);
        assert_eq!(row("GET bandwidth below PUT").role, Role::PostHoc);
        assert_eq!(r.counts().predictions, 1);
        assert_eq!(row("2 MB PUT at MTU 512 B, 32 tags, host completions").role, Role::Info);
        assert_eq!(row("PUT stream, 512 KB").role, Role::Info);
        // Bandwidth grows with the MTU up to 128 B and never exceeds the 4 GB/s bus.
        let m: Vec<f64> = [16, 32, 64, 128]
            .iter()
            .map(|m| row(&format!("2 MB PUT at MTU {m} B, 32 tags")).simulated)
            .collect();
        assert!(m.windows(2).all(|w| w[1] > w[0]), "{m:?}");
        assert!(r.rows.iter().filter(|x| x.unit == "GB/s").all(|x| x.simulated < 4.0));
        // With the host's completions at 128 B the engine bound holds beyond MTU 128; with
        // completions growing with the MTU the bandwidth rises past it.
        let at128 = row("2 MB PUT at MTU 128 B, 32 tags").simulated;
        for mtu in [256, 512, 1024] {
            let flat = row(&format!("2 MB PUT at MTU {mtu} B, 32 tags (no gain")).simulated;
            assert!((flat / at128 - 1.0).abs() < 0.005, "{mtu}: {flat} vs {at128}");
            let follows = row(&format!("2 MB PUT at MTU {mtu} B, 32 tags, host completions")).simulated;
            assert!(follows > flat * 1.05, "{mtu}: {follows} vs {flat}");
        }
        // Extended tags never hurt.
        for mtu in MTUS {
            let a = mtu_row(&r, mtu, "32 tags");
            let b = mtu_row(&r, mtu, "256");
            assert!(b >= a * 0.999, "{mtu}: {a} {b}");
        }
        // One-transfer PUT bandwidth grows with payload and stays below the engine limit;
        // streams are never slower than one transfer at a time.
        let put = &r.figures[1].series[0].points;
        assert!(put.windows(2).all(|w| w[1].1 > w[0].1), "{put:?}");
        let engine = limits(&load(&Ctx::default(), &[]).unwrap()).engine;
        assert!(put.iter().all(|p| p.1 <= engine), "{put:?} above {engine}");
        for c in 0..PRIMS.len() {
            let (one, st) = (
                &r.figures[1].series[c].points,
                &r.figures[1].series[c + PRIMS.len()].points,
            );
            assert_eq!(one.len(), st.len());
            assert!(
                one.iter().zip(st).all(|(a, b)| b.1 >= a.1 * 0.999),
                "{c}: {one:?} {st:?}"
            );
        }
        assert_eq!(r.figures.len(), 2);
        crate::plot::svg(&r.figures).unwrap();
    }

    fn mtu_row(r: &StudyReport, mtu: u64, what: &str) -> f64 {
        r.rows
            .iter()
            .find(|x| x.label.starts_with(&format!("2 MB PUT at MTU {mtu} B, {what}")))
            .map(|x| x.simulated)
            .unwrap_or_else(|| panic!("MTU {mtu} {what}"))
    }
}
