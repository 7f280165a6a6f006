//! `chpp-bandwidth`: cHPP bandwidth against MTU (2 MB PUT) and against payload at MTU 128 B
//! (spec 02, "Published results", bandwidth vs MTU and bandwidth vs payload).
//!
//! (a) MTU sweep: one 2 MiB PUT on a fresh world of `scenarios/chpp-pair.toml`, bandwidth =
//! 2 MiB / (doorbell to last byte written at the receiver, `p2p::op_latency`). The MTU is the
//! cHPP packet payload, and since a cHPP packet is a PCIe TLP it is also the host interface's TLP
//! payload and, one packet's data per read, the DMA read request size: `packet.max_payload`,
//! `nic.host.max_payload` and `nic.host.read_request` are all set to the MTU. For MTUs whose
//! packet does not fit the 1 KiB VC buffer twice, `router.private_credits` is raised to two
//! maximum-size packets (virtual cut-through needs a whole packet of room).
//!
//! (b) Payload sweep at MTU 128 B with 32 read tags (the scenario as written): streams of PUT,
//! GET, NAP-immediate and NAP-indirect messages from rank 0 to rank 1, 32 in flight (the doorbell
//! FIFO depth), written here on the verbs API as `p2p::stream` is for RDMA writes; bandwidth =
//! bytes / (last completion − first post). PUTs are real cHPP PUTs (`post_put`), not RDMA writes.

use crate::chpp::Prim;
use crate::plot::{Figure, Mark, Series, Style};
use crate::report::fmt_num;
use crate::{Ctx, Row, Study, StudyError, StudyReport};
use hpcnet_des::{Bytes, SimTime};
use hpcnet_msg::verbs::{Machine, RemoteSeg, Sge};
use hpcnet_nic::{CqeStatus, World};
use hpcnet_workloads::p2p::{op_latency, stream, LatencyOp, Options};
use hpcnet_workloads::Scenario;
use std::cell::Cell;
use std::rc::Rc;

const SCENARIO_TOML: &str = include_str!("../../../scenarios/chpp-pair.toml");
const SCENARIO_PATH: &str = "scenarios/chpp-pair.toml";

// Published values: spec/02-chpp.md, "Published results".
/// Bandwidth vs MTU (2 MB PUT): peaks near 3.2 GB/s at MTU 128 B, no gain beyond.
const PAPER_MTU128_GBS: f64 = 3.2;
/// Bandwidth vs payload (MTU 128 B, 32 tags): PUT 512 KB.
const PAPER_PUT_512K_GBS: f64 = 3.19;
// spec/02-chpp.md, "Implementation facts": one memory read round trip ≈ 130 cycles.
const PAPER_READ_RTT_CYCLES: f64 = 130.0;

/// Tolerance of the predictions.
const TOLERANCE: f64 = 0.05;
/// An ordering claim ("below", "grows", "highest") holds only by more than this relative margin:
/// a difference of a fraction of a percent is a tie (invisible on the paper's plots, and in the
/// model it comes from a stream's first and last message, not from its steady-state rate).
/// Added after the pipelined engine made NAP-imm "best" at 64 B by 0.03 %; it only makes the
/// verdicts stricter.
const ORDER_MARGIN: f64 = 0.01;

const MTUS: [u64; 7] = [16, 32, 64, 128, 256, 512, 1024];
/// Transfer of the MTU sweep: 2 MB.
const TRANSFER: u64 = 2 << 20;
/// Sizes of the single-message reading of the payload sweep.
const SINGLE_SIZES: [u64; 4] = [64, 1024, 2048, 512 << 10];
/// Messages in flight in the payload sweep: the doorbell FIFO depth (spec 02).
const WINDOW: u64 = 32;
/// Extended PCIe tags (spec 02).
const EXTENDED_TAGS: u32 = 256;
const KB512: u64 = 512 << 10;

pub struct ChppBandwidth;

fn load(over: &[String]) -> Result<Scenario, StudyError> {
    Ok(Scenario::from_str_named(
        SCENARIO_TOML,
        SCENARIO_PATH,
        "chpp-pair",
        over,
    )?)
}

/// Overrides of the MTU sweep (see the module comment).
fn mtu_overrides(base: &Scenario, mtu: u64, tags: u32, host_fixed: bool) -> Vec<String> {
    let mut o = vec![format!("packet.max_payload=\"{mtu} B\"")];
    if !host_fixed {
        o.push(format!("nic.host.max_payload=\"{mtu} B\""));
        o.push(format!("nic.host.read_request=\"{mtu} B\""));
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

/// Streams `count` messages of `size` bytes of primitive `p` from rank 0 to rank 1 (for GET:
/// rank 0 fetches from rank 1) with `window` in flight; returns payload GB/s.
fn stream_prim(world: World, p: Prim, size: u64, window: u64, count: u64) -> Result<f64, StudyError> {
    let nap_buffer = world.cfg.nap_buffer.0;
    let mut m = Machine::new(world);
    let (ca, cb) = (m.context(0), m.context(1));
    let local = ca.reg_mr(size.max(8));
    let remote = cb.reg_mr(size.max(8));
    let cq = ca.create_cq();
    let qp = ca.create_qp(&cq, 1);
    if p.is_nap() {
        // A pool at the target larger than the window; each event gives its buffer back.
        let rx = cb.create_cq();
        let pool = cb.reg_mr(nap_buffer * 2 * window);
        cb.post_nap_buffers(&pool, 0, 2 * window, &rx)
            .map_err(|e| StudyError::Model(e.to_string()))?;
        let cb2 = cb.clone();
        m.spawn(async move {
            for _ in 0..count {
                let c = rx.next().await;
                cb2.repost_nap_buffer(c.addr);
            }
        });
    }
    let start = ca.now();
    let finish = Rc::new(Cell::new(None));
    let fin = finish.clone();
    let err: Rc<Cell<Option<String>>> = Rc::new(Cell::new(None));
    let err2 = err.clone();
    m.spawn(async move {
        let (mut posted, mut done) = (0u64, 0u64);
        let dst = [RemoteSeg {
            buf: remote.remote(0),
            len: size,
        }];
        let src = [Sge {
            mr: &local,
            offset: 0,
            len: size,
        }];
        while done < count {
            while posted < count && posted - done < window {
                let r = match p {
                    Prim::Put => qp.post_put(&src, &dst, None, posted),
                    Prim::Get => qp.post_get(&src, &dst, posted),
                    Prim::NapImm | Prim::NapInd => qp.post_nap(1, &local, 0, size, p == Prim::NapImm, posted),
                };
                if let Err(e) = r {
                    err2.set(Some(e.to_string()));
                    return;
                }
                posted += 1;
            }
            let c = cq.next().await;
            if c.status != CqeStatus::Ok {
                err2.set(Some(format!("{:?} completed with {:?}", c.kind, c.status)));
                return;
            }
            done += 1;
        }
        fin.set(Some(ca.now()));
    });
    let end = m.run();
    if let Some(e) = err.take() {
        return Err(StudyError::Model(format!("{SCENARIO_PATH}: {} stream: {e}", p.name())));
    }
    let Some(t) = finish.get() else {
        return Err(StudyError::Model(format!(
            "{SCENARIO_PATH}: {} stream of {size} B did not finish ({} tasks stuck)",
            p.name(),
            end.stuck_tasks
        )));
    };
    Ok((count * size) as f64 / (t - start).as_secs_f64() / 1e9)
}

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
    /// One 2 MB PUT at an MTU with a number of read tags; `host_fixed`: the host's PCIe max
    /// payload and read request stay at the scenario's instead of following the MTU.
    Mtu { mtu: u64, tags: u32, host_fixed: bool },
    /// A stream of one primitive at MTU 128.
    Stream { p: Prim, size: u64, count: u64 },
    /// The RDMA-write stream of `p2p::stream` (cross-check of the PUT path).
    Write { size: u64, count: u64 },
    /// One message at a time: size / (doorbell to data written at the receiver).
    Single { p: Prim, size: u64 },
}

fn run_job(base: &Scenario, job: &Job) -> Result<f64, StudyError> {
    match *job {
        Job::Mtu { mtu, tags, host_fixed } => {
            let sc = load(&mtu_overrides(base, mtu, tags, host_fixed))?;
            let t = op_latency(sc.world()?, 0, 1, LatencyOp::Put, TRANSFER);
            Ok(TRANSFER as f64 / t.as_secs_f64() / 1e9)
        }
        Job::Stream { p, size, count } => stream_prim(base.world()?, p, size, WINDOW, count),
        Job::Single { p, size } => {
            let t = op_latency(base.world()?, 0, 1, p.op(), size);
            Ok(size as f64 / t.as_secs_f64() / 1e9)
        }
        Job::Write { size, count } => {
            let opts = Options {
                window: WINDOW as u32,
                messages: count,
                qps: 1,
                rail: 0,
            };
            Ok(stream(base.world()?, 0, 1, size, false, &opts).gbytes_per_s)
        }
    }
}

/// Rate limits of the model at one MTU, from its configuration (GB/s).
struct Limits {
    /// `HostConfig::read_rate`: TLP-limited or tag-limited DMA reads.
    read: f64,
    /// Tag limit alone: tags × read request / read round trip.
    tags: f64,
    /// Engine data path: payload / ((payload + header) / engine rate + per-packet cycle).
    engine: f64,
}

fn limits(sc: &Scenario) -> Limits {
    let h = &sc.nic.host;
    let mtu = sc.fabric.packet.max_payload.0 as f64;
    let header = sc.fabric.packet.header.0 as f64;
    let engine = sc.nic.engine_rate.map_or(f64::INFINITY, |r| {
        let per_packet_ns = (mtu + header) / (r.as_bytes_per_sec_f64() / 1e9) + sc.nic.packet_overhead.as_ns_f64();
        mtu / per_packet_ns
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

fn size_label(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KB", s >> 10),
        s => format!("{s} B"),
    }
}

impl Study for ChppBandwidth {
    fn name(&self) -> &'static str {
        "chpp-bandwidth"
    }

    fn title(&self) -> &'static str {
        "cHPP bandwidth vs MTU (2 MB PUT) and vs payload at MTU 128 B (PUT, GET, NAP)"
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let q = ctx.quick;
        let base = load(&[])?;
        let tags = base.nic.host.read_tags;
        let mut jobs = Vec::new();
        for mtu in MTUS {
            jobs.push(Job::Mtu {
                mtu,
                tags,
                host_fixed: false,
            });
        }
        for mtu in MTUS {
            jobs.push(Job::Mtu {
                mtu,
                tags: EXTENDED_TAGS,
                host_fixed: false,
            });
        }
        for mtu in MTUS.into_iter().filter(|&m| m > base.nic.host.max_payload.0) {
            jobs.push(Job::Mtu {
                mtu,
                tags,
                host_fixed: true,
            });
        }
        for p in PRIMS {
            for size in payload_sizes(p, q) {
                jobs.push(Job::Stream {
                    p,
                    size,
                    count: messages(size, q),
                });
            }
        }
        // The single-message reading of the payload sweep (information, see the discrepancies).
        for p in PRIMS {
            for size in SINGLE_SIZES.iter().copied().filter(|&s| !p.is_nap() || s <= 2048) {
                jobs.push(Job::Single { p, size });
            }
        }
        jobs.push(Job::Write {
            size: KB512,
            count: messages(KB512, q),
        });
        let out: Vec<f64> = crate::par_map(&jobs, |j| run_job(&base, j))
            .into_iter()
            .collect::<Result<_, _>>()?;
        let mtu_bw = |m: u64, t: u32| {
            jobs.iter()
                .zip(&out)
                .find(|(j, _)| matches!(j, Job::Mtu { mtu, tags, host_fixed: false } if *mtu == m && *tags == t))
                .map(|(_, &g)| g)
                .expect("MTU run")
        };
        let host_fixed_bw: Vec<(u64, f64)> = jobs
            .iter()
            .zip(&out)
            .filter_map(|(j, &g)| match j {
                Job::Mtu {
                    mtu, host_fixed: true, ..
                } => Some((*mtu, g)),
                _ => None,
            })
            .collect();
        let curve = |p: Prim| -> Vec<(u64, f64)> {
            jobs.iter()
                .zip(&out)
                .filter_map(|(j, &g)| match j {
                    Job::Stream { p: x, size, .. } if *x == p => Some((*size, g)),
                    _ => None,
                })
                .collect()
        };
        let at = |p: Prim, s: u64| curve(p).into_iter().find(|x| x.0 == s).map(|x| x.1);
        let write_512k = *out.last().expect("write run");
        let single = |p: Prim, s: u64| -> f64 {
            jobs.iter()
                .zip(&out)
                .find(|(j, _)| matches!(j, Job::Single { p: x, size } if *x == p && *size == s))
                .map(|(_, &g)| g)
                .expect("single-message run")
        };

        let mut rows = vec![Row::prediction(
            "2 MB PUT at MTU 128 B, 32 tags",
            PAPER_MTU128_GBS,
            mtu_bw(128, tags),
            "GB/s",
            TOLERANCE,
        )
        .with_note(
            "the engine's per-packet cost (16 B header + 128 B at 4 GB/s + one 4 ns processing cycle) is the \
             paper's own account of this peak; it is configured, not fitted",
        )];
        let put_512k = at(Prim::Put, KB512).expect("512 KB PUT in the sweep");
        rows.push(Row::prediction(
            "PUT stream, 512 KB messages, MTU 128 B, 32 tags",
            PAPER_PUT_512K_GBS,
            put_512k,
            "GB/s",
            TOLERANCE,
        ));
        let get_512k = at(Prim::Get, KB512).expect("512 KB GET in the sweep");
        rows.push(Row::claim(
            "GET bandwidth below PUT at 512 KB",
            true,
            get_512k < put_512k * (1.0 - ORDER_MARGIN),
        ));
        let grows = |p: Prim| curve(p).windows(2).all(|w| w[1].1 > w[0].1 * (1.0 + ORDER_MARGIN));
        rows.push(Row::claim(
            "NAP bandwidth (immediate and indirect) grows with size up to 2 KB",
            true,
            grows(Prim::NapImm) && grows(Prim::NapInd),
        ));
        let small = 64;
        let best_small = PRIMS
            .iter()
            .map(|&p| (p, at(p, small).unwrap_or(0.0)))
            .fold((Prim::Put, f64::MIN), |a, b| if b.1 > a.1 { b } else { a })
            .0;
        rows.push(Row::claim(
            "NAP-immediate has the highest bandwidth of the four primitives at 64 B",
            true,
            best_small == Prim::NapImm && {
                let imm = at(Prim::NapImm, small).unwrap_or(0.0);
                PRIMS
                    .iter()
                    .filter(|&&p| p != Prim::NapImm)
                    .all(|&p| imm > at(p, small).unwrap_or(0.0) * (1.0 + ORDER_MARGIN))
            },
        ));

        // The single-message reading, as information: one message at a time, bandwidth = size /
        // (doorbell to data written), i.e. the latency test's own timing.
        for p in PRIMS {
            for size in SINGLE_SIZES.iter().copied().filter(|&s| !p.is_nap() || s <= 2048) {
                let row = Row::info(
                    format!("{} one message at a time, {}", p.name(), Bytes(size)),
                    None,
                    single(p, size),
                    "GB/s",
                );
                rows.push(if p == Prim::Put && size == SINGLE_SIZES[0] {
                    row.with_note(
                        "these rows: single-message reading of the payload sweep, added after the windowed \
                         reading's claims failed; information, not judged (see discrepancies)",
                    )
                } else {
                    row
                });
            }
        }
        for mtu in MTUS {
            if mtu == 128 {
                continue;
            }
            let paper = (mtu > 128).then_some(PAPER_MTU128_GBS);
            let mut row = Row::info(
                format!("2 MB PUT at MTU {mtu} B, 32 tags"),
                paper,
                mtu_bw(mtu, tags),
                "GB/s",
            );
            if mtu > 128 {
                row = row.with_note("paper: no gain beyond MTU 128 (≈ 3.2 GB/s); see discrepancies");
            }
            rows.push(row);
        }
        for mtu in MTUS {
            rows.push(Row::info(
                format!("2 MB PUT at MTU {mtu} B, 256 extended tags (what-if, not published)"),
                None,
                mtu_bw(mtu, EXTENDED_TAGS),
                "GB/s",
            ));
        }
        let host_mps = base.nic.host.max_payload.0;
        for &(mtu, g) in &host_fixed_bw {
            rows.push(
                Row::info(
                    format!(
                        "2 MB PUT at MTU {mtu} B, 32 tags, host PCIe payload and read request kept at {host_mps} B"
                    ),
                    Some(PAPER_MTU128_GBS),
                    g,
                    "GB/s",
                )
                .with_note(
                    "alternative reading of the MTU sweep, added after the first reading's results; see discrepancies",
                ),
            );
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
        for p in PRIMS {
            for (size, g) in curve(p) {
                if p == Prim::Put && size == KB512 {
                    continue;
                }
                rows.push(Row::info(
                    format!("{} stream, {} messages, MTU 128 B", p.name(), size_label(size)),
                    None,
                    g,
                    "GB/s",
                ));
            }
        }
        // Why the model keeps growing beyond MTU 128: its limits at each MTU, from the configuration.
        let lim: Vec<(u64, Limits)> = MTUS
            .iter()
            .map(|&m| Ok((m, limits(&load(&mtu_overrides(&base, m, tags, false))?))))
            .collect::<Result<_, StudyError>>()?;
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
            .filter(|(_, l)| l.tags <= l.read * (1.0 + 1e-6))
            .map(|(m, _)| *m)
            .collect();
        let enough = MTUS.iter().find(|&&m| paper_min_tags(m) <= 32.0).copied().unwrap_or(0);
        let min_tags: Vec<String> = MTUS
            .iter()
            .map(|&m| format!("{m} B → {}", fmt_num(paper_min_tags(m))))
            .collect();
        let keeps_growing = mtu_bw(256, tags) > 1.02 * mtu_bw(128, tags);
        let mut discrepancies = Vec::new();
        if keeps_growing {
            discrepancies.push(format!(
                "The paper says bandwidth stops growing beyond MTU 128 B because only 32 read tags exist. The model \
                 keeps growing ({} GB/s at 256 B, {} GB/s at 1024 B): with 32 tags of one MTU each and a \
                 {} read round trip, the tag limit 32 × S / t is far above the other limits at these MTUs. Model \
                 limits in GB/s (HostConfig::read_rate is the smaller of the TLP-limited PCIe rate and the tag \
                 limit): {}. Tags bind only at MTU {:?} B. The paper's own minimum-tag formula (t = 130 cycles, \
                 S = MTU) agrees with the model, not with the paper's explanation: tags needed {}, i.e. 32 tags keep \
                 reads continuous at every MTU ≥ {enough} B and are short only below. These rows are information, \
                 not tuned.",
                fmt_num(mtu_bw(256, tags)),
                fmt_num(mtu_bw(1024, tags)),
                base.nic.host.read_latency,
                describe.join("; "),
                tag_bound,
                min_tags.join(", "),
            ));
        }
        if let (Some(lo), Some(hi)) = (
            host_fixed_bw.iter().map(|x| x.1).reduce(f64::min),
            host_fixed_bw.iter().map(|x| x.1).reduce(f64::max),
        ) {
            let mps = base.nic.host.max_payload.0;
            let tlp = base.nic.host.tlp_overhead.0;
            discrepancies.push(format!(
                "Alternative reading (added in a later session, after the first reading above was seen to keep \
                 growing, so it is shown as information and not judged): the host's PCIe max payload and read \
                 request size are set by the host, not by the cHPP MTU, so they stay at {mps} B while only the \
                 packet MTU grows. Then every DMA moves {mps} B TLPs with {tlp} B of overhead, the PCIe rate \
                 {mps}/({mps}+{tlp}) of the link binds instead of the engine, and the model is flat beyond MTU {mps} \
                 B: {} to {} GB/s at MTU {:?} B, against {} GB/s at MTU 128 B. This reproduces the paper's shape \
                 (no gain beyond 128 B) with a different cause than the paper gives (PCIe TLP efficiency, not \
                 tags); its level is {:+.1} % from the published ≈ 3.2 GB/s, and nic.host.tlp_overhead ({tlp} B) is \
                 an assumption, not fitted.",
                fmt_num(lo),
                fmt_num(hi),
                host_fixed_bw.iter().map(|x| x.0).collect::<Vec<_>>(),
                fmt_num(mtu_bw(128, tags)),
                (hi / PAPER_MTU128_GBS - 1.0) * 100.0,
            ));
        }
        discrepancies.push(
            "MTU sweep: the MTU sets packet.max_payload, nic.host.max_payload (a cHPP packet is a PCIe TLP) and \
             nic.host.read_request (one read request per packet); the paper does not say how it varied the read \
             request size. MTUs whose packet does not fit the 1 KiB VC buffer twice get router.private_credits = \
             two maximum-size packets. Bandwidth = 2 MiB / (doorbell to last byte written at the receiver)."
                .into(),
        );
        discrepancies.push(format!(
            "Payload sweep: real PUT, GET and NAP work requests on the verbs API (not p2p::stream, which posts RDMA \
             writes; its 512 KB result is shown as a cross-check), {WINDOW} in flight (the doorbell FIFO depth), \
             bandwidth = bytes / (last completion at the initiator − first post). A PUT or NAP completes when the \
             target's acknowledgement returns, a GET when its data has landed at the requester. The paper does not \
             give its window."
        ));
        if let Some(per_tlp) = base.nic.nap_upload_per_tlp {
            // The receive side's NAP upload bounds a NAP-indirect stream; say where the curve flattens.
            let mps = base.nic.host.max_payload.0.max(1);
            let upload_gbs = mps as f64 / (per_tlp.0 as f64 / 1e3);
            let steps: Vec<String> = curve(Prim::NapInd)
                .windows(2)
                .map(|w| format!("{} → {} B {:+.2} %", w[0].0, w[1].0, (w[1].1 / w[0].1 - 1.0) * 100.0))
                .collect();
            discrepancies.push(format!(
                "NAP growth: the NAP-indirect stream ({}) is bounded by the receiver's NAP upload, {mps} B per \
                 nic.nap_upload_per_tlp = {per_tlp} ({} GB/s; fitted on the NAP-indirect 1 KB latency, it also gives \
                 the paper's 1 → 2 KB latency increment, 1.12 us). With the pipelined engine nothing \
                 per message remains exposed once that bound is reached, so the curve is flat from 1 KB and the \
                 \"grows with size up to 2 KB\" row fails. Not modelled and a candidate cause: the completion event \
                 every NAP writes into the receive ring (spec 02) as a write occupying the upload path after the \
                 data. Nothing was changed for this row.",
                steps.join(", "),
                fmt_num(upload_gbs),
            ));
        }
        let nic = &base.nic;
        if nic.descriptor_prefetch > 0 {
            discrepancies.extend(pipelined_notes(&base, &at, get_512k, put_512k, small, best_small));
        } else {
            let rtt = nic.host.read_latency;
            let put_engine = rtt + rtt + nic.message_overhead;
            let get_requester = rtt + nic.get_overhead.unwrap_or(nic.message_overhead);
            let writeback = nic.writeback_overhead.unwrap_or(nic.message_overhead);
            let get_target = writeback + rtt;
            // A 64 B NAP-immediate at its engine: descriptor fetch, processing, then its one packet
            // through the data path (or the extraction of the immediate data beyond the inline bytes,
            // if that takes longer).
            let (nap_imm_engine, nap_imm_how) = {
                let extract = nic.immediate_rate.or(nic.engine_rate).map_or(SimTime::ZERO, |r| {
                    r.serialization(Bytes(small.saturating_sub(nic.immediate_inline.0)))
                });
                let emit = nic.engine_rate.map_or(SimTime::ZERO, |r| {
                    r.serialization(Bytes(small + base.fabric.packet.header.0))
                }) + nic.packet_overhead;
                let how = if small <= nic.immediate_inline.0 {
                    format!(
                        "needs no data read and no extraction (its data is within the {} of nic.immediate_inline that \
                         come with the descriptor) and holds its engine for descriptor fetch + nic.nap_overhead + one \
                         packet through the data path",
                        nic.immediate_inline
                    )
                } else {
                    "needs no data read and holds its engine for descriptor fetch + nic.nap_overhead + the extraction \
                     of its data beyond nic.immediate_inline or its packet's pass through the data path, whichever is \
                     longer"
                        .to_string()
                };
                (
                    rtt + nic.nap_overhead.unwrap_or(nic.message_overhead) + extract.max(emit),
                    how,
                )
            };
            discrepancies.push(format!(
                "GET against PUT: the model's GET stream is {} than its PUT stream at 512 KB ({} vs {} GB/s) and much \
                 faster at small sizes (64 B: {} vs {} GB/s). A message engine handles one message at a time and does \
                 not overlap a descriptor fetch with the previous message's data (nic.descriptor_prefetch = 0), so a PUT holds the sender's engine for descriptor fetch + processing + first data read = {} \
                 before its data streams, while a GET splits that work between two engines: the requester's ({} for \
                 the descriptor and the request) and the target's write-back ({}: nic.writeback_overhead and the \
                 first data read; the descriptor came in the GET packet, so no fetch and no extraction). The \
                 paper's GET is slightly slower; the claim row fails and is not tuned.",
                if get_512k > put_512k { "faster" } else { "slower" },
                fmt_num(get_512k),
                fmt_num(put_512k),
                fmt_num(at(Prim::Get, small).unwrap_or(f64::NAN)),
                fmt_num(at(Prim::Put, small).unwrap_or(f64::NAN)),
                put_engine,
                get_requester,
                get_target,
            ));
            let mut ranking: Vec<(Prim, f64)> = PRIMS.iter().map(|&p| (p, at(p, small).unwrap_or(f64::NAN))).collect();
            ranking.sort_by(|a, b| b.1.total_cmp(&a.1));
            let why = match best_small {
                Prim::NapImm => "so NAP-immediate has the highest bandwidth, as the paper says".to_string(),
                Prim::Get => format!(
                    "a GET stream is paced by the busier of its two engines, {} per message against \
                     NAP-immediate's {}, so GET's split of the work over two engines (above) edges NAP-immediate out",
                    get_requester.max(get_target),
                    nap_imm_engine
                ),
                p => format!("{} is highest", p.name()),
            };
            discrepancies.push(format!(
                "At 64 B the model ranks the primitives {} GB/s. A 64 B NAP-immediate {nap_imm_how} = {}; a GET holds \
                 the requester's engine for {} and the target's for {} before its data: {why}.",
                ranking
                    .iter()
                    .map(|(p, g)| format!("{} {}", p.name(), fmt_num(*g)))
                    .collect::<Vec<_>>()
                    .join(", "),
                nap_imm_engine,
                get_requester,
                get_target,
            ));
        }
        {
            // The three ordering claims under the single-message reading, with the same margin.
            let m = 1.0 + ORDER_MARGIN;
            let get_below = single(Prim::Get, KB512) * m < single(Prim::Put, KB512);
            let imm64 = single(Prim::NapImm, 64);
            let imm_best = PRIMS
                .iter()
                .filter(|&&p| p != Prim::NapImm)
                .all(|&p| imm64 > single(p, 64) * m);
            let nap_grows = [Prim::NapImm, Prim::NapInd]
                .iter()
                .all(|&p| single(p, 1024) > single(p, 64) * m && single(p, 2048) > single(p, 1024) * m);
            let yn = |b: bool| if b { "holds" } else { "does not hold" };
            discrepancies.push(format!(
                "Single-message reading (added in a later session, after the windowed reading's three ordering \
                 claims failed, so it is information only): the paper does not say how many messages its payload \
                 sweep kept in flight. If it sent one message at a time and divided size by the doorbell-to-data \
                 latency of its latency table, the model gives PUT {} and GET {} GB/s at 512 KB (GET below PUT by more \
                 than 1 %: {}), at 64 B NAP-imm {}, NAP-ind {}, PUT {}, GET {} GB/s (NAP-immediate highest by more \
                 than 1 %: {}), and NAP 64 B → 1 KB → 2 KB NAP-imm {} → {} → {}, NAP-ind {} → {} → {} GB/s (grows: \
                 {}). These follow from the latency table the model reproduces (chpp-latency); GET trails PUT at \
                 512 KB only by the constant latency difference ({:.3} %), a tie by the 1 % margin, as the \
                 paper's own 76 ns difference would be. The 512 KB PUT figure is {:+.1} % from the published 3.19 \
                 GB/s. Which reading the paper used is \
                 not stated; the verdict stays on the windowed one, chosen before the first run.",
                fmt_num(single(Prim::Put, KB512)),
                fmt_num(single(Prim::Get, KB512)),
                yn(get_below),
                fmt_num(imm64),
                fmt_num(single(Prim::NapInd, 64)),
                fmt_num(single(Prim::Put, 64)),
                fmt_num(single(Prim::Get, 64)),
                yn(imm_best),
                fmt_num(single(Prim::NapImm, 64)),
                fmt_num(single(Prim::NapImm, 1024)),
                fmt_num(single(Prim::NapImm, 2048)),
                fmt_num(single(Prim::NapInd, 64)),
                fmt_num(single(Prim::NapInd, 1024)),
                fmt_num(single(Prim::NapInd, 2048)),
                yn(nap_grows),
                (1.0 - single(Prim::Get, KB512) / single(Prim::Put, KB512)) * 100.0,
                (single(Prim::Put, KB512) / PAPER_PUT_512K_GBS - 1.0) * 100.0,
            ));
        }
        discrepancies.push(
            "\"NAP-immediate best at small sizes\" is read as: at 64 B it has the highest bandwidth of the four \
             primitives; \"GET slightly lower\" as: GET below PUT at 512 KB (both readings fixed before the first \
             run). Every ordering claim (below, grows, highest) must hold by more than 1 % (ORDER_MARGIN): smaller \
             differences are ties. This margin was added after the pipelined engine made NAP-immediate highest at \
             64 B by 0.03 % from end-of-stream effects; it only makes verdicts stricter."
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
        report.figures = figures(&mtu_bw, tags, &curve);
        Ok(report)
    }
}

/// The GET-vs-PUT and 64 B notes for a pipelined engine (`nic.descriptor_prefetch > 0`): each
/// primitive's per-message pacing, from the configuration, against the measured streams.
fn pipelined_notes(
    base: &Scenario,
    at: &dyn Fn(Prim, u64) -> Option<f64>,
    get_512k: f64,
    put_512k: f64,
    small: u64,
    best_small: Prim,
) -> Vec<String> {
    let nic = &base.nic;
    let rtt = nic.host.read_latency;
    let nap_overhead = nic.nap_overhead.unwrap_or(nic.message_overhead);
    // Descriptor stages: fetch + processing (+ for a NAP-immediate, the extraction of its data
    // beyond the inline bytes, which is part of the descriptor).
    let put_desc = rtt + nic.message_overhead;
    let get_desc = rtt + nic.get_overhead.unwrap_or(nic.message_overhead);
    let writeback = nic.writeback_overhead.unwrap_or(nic.message_overhead);
    let extract = nic.immediate_rate.or(nic.engine_rate).map_or(SimTime::ZERO, |r| {
        r.serialization(Bytes(small.saturating_sub(nic.immediate_inline.0)))
    });
    let nap_imm_desc = rtt + nap_overhead + extract;
    let nap_ind_desc = rtt + nap_overhead;
    let emit = nic.engine_rate.map_or(SimTime::ZERO, |r| {
        r.serialization(Bytes(small + base.fabric.packet.header.0))
    }) + nic.packet_overhead;
    let engine_gbs = limits(base).engine;
    let rel = |a: f64, b: f64| (a / b - 1.0) * 100.0;
    let order = if get_512k > put_512k {
        "faster than"
    } else if get_512k < put_512k {
        "slower than"
    } else {
        "as fast as"
    };
    let get_put = format!(
        "GET against PUT: the model's GET stream is {order} its PUT stream at 512 KB ({:.6} vs {:.6} GB/s, {:+.4} %). The \
         scenario's message engine is pipelined (nic.descriptor_prefetch = {}; spec 02's send engine: doorbell FIFO → \
         descriptor read → descriptor extract → data read → ...): a message's descriptor stage (a PUT: descriptor \
         fetch + nic.message_overhead = {put_desc}; a GET at the requester: fetch + nic.get_overhead = {get_desc}; \
         the write-back at the GET's target: nic.writeback_overhead = {writeback}, its descriptor came in the GET \
         packet) runs while the previous message's data is read and sent. Beyond a few KB both streams are therefore \
         paced by the same engine data path ({} GB/s: header + MTU at nic.engine_rate plus nic.packet_overhead per \
         packet) and differ only in their first and last message: a GET's data starts later (its request crosses \
         to the target first) and it completes when its data has landed, a PUT completes when the target's \
         acknowledgement is back. The paper's GET is slightly slower; the model has no mechanism that slows a \
         streaming GET below a PUT, and nothing is tuned for this row. At {small} B a PUT stream is paced by its \
         descriptor stage ({put_desc} per message), a GET stream by the requester's ({get_desc}): {} vs {} GB/s.",
        get_512k,
        put_512k,
        rel(get_512k, put_512k),
        nic.descriptor_prefetch,
        fmt_num(engine_gbs),
        fmt_num(at(Prim::Get, small).unwrap_or(f64::NAN)),
        fmt_num(at(Prim::Put, small).unwrap_or(f64::NAN)),
    );
    let pace = |p: Prim| match p {
        Prim::Put => put_desc,
        Prim::Get => get_desc,
        Prim::NapImm => nap_imm_desc.max(emit),
        Prim::NapInd => nap_ind_desc,
    };
    let mut ranking: Vec<(Prim, f64)> = PRIMS.iter().map(|&p| (p, at(p, small).unwrap_or(f64::NAN))).collect();
    ranking.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (top, second) = (ranking[0], ranking[1]);
    let verdict = if pace(top.0) == pace(second.0) {
        format!(
            "{} and {} are paced alike ({} per message), so their order comes from the stream's first and last \
             message ({} ahead by {:.3} %), not from a difference in steady-state rate",
            top.0.name(),
            second.0.name(),
            pace(top.0),
            top.0.name(),
            rel(top.1, second.1),
        )
    } else {
        format!("{} is paced fastest ({} per message)", top.0.name(), pace(top.0))
    };
    let claim = if best_small == Prim::NapImm && rel(top.1, second.1) > ORDER_MARGIN * 100.0 {
        "the claim row passes"
    } else if best_small == Prim::NapImm {
        "a lead below the study's 1 % ordering margin is a tie, so the claim row fails"
    } else {
        "the claim row fails"
    };
    let small_note = format!(
        "At {small} B the model ranks the primitives {} GB/s. With the pipelined engine each is paced by the slower \
         of its descriptor stage and its data stage: a NAP-immediate's descriptor stage is descriptor fetch + \
         nic.nap_overhead + the extraction of its data beyond nic.immediate_inline ({extract}; immediate data is part \
         of the descriptor) = {nap_imm_desc}, and its packet's pass through the data path ({emit}) overlaps the next \
         descriptor; a NAP-indirect's is fetch + nic.nap_overhead = {nap_ind_desc} (its data read overlaps the next \
         descriptor); a GET's (requester) {get_desc}; a PUT's {put_desc}. {verdict}; {claim}.",
        ranking
            .iter()
            .map(|(p, g)| format!("{} {}", p.name(), fmt_num(*g)))
            .collect::<Vec<_>>()
            .join(", "),
    );
    vec![get_put, small_note]
}

fn figures(mtu_bw: &dyn Fn(u64, u32) -> f64, tags: u32, curve: &dyn Fn(Prim) -> Vec<(u64, f64)>) -> Vec<Figure> {
    let x = |s: u64| (s as f64).log2();
    let mtu = Figure {
        title: "2 MB PUT bandwidth vs MTU".into(),
        x_label: "log2 MTU (B)".into(),
        y_label: "bandwidth (GB/s)".into(),
        y_log: false,
        series: vec![
            Series {
                label: format!("model, {tags} tags"),
                points: MTUS.iter().map(|&m| (x(m), mtu_bw(m, tags))).collect(),
                style: Style::Line,
                color: 0,
            },
            Series {
                label: format!("model, {EXTENDED_TAGS} tags (what-if)"),
                points: MTUS.iter().map(|&m| (x(m), mtu_bw(m, EXTENDED_TAGS))).collect(),
                style: Style::Dashed,
                color: 1,
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
        title: "bandwidth vs payload, MTU 128 B, 32 tags".into(),
        x_label: "log2 payload (B)".into(),
        y_label: "bandwidth (GB/s)".into(),
        y_log: false,
        series: PRIMS
            .iter()
            .enumerate()
            .map(|(c, &p)| Series {
                label: format!("{} model", p.name()),
                points: curve(p).into_iter().map(|(s, g)| (x(s), g)).collect(),
                style: Style::Line,
                color: c,
            })
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
        let base = load(&[]).unwrap();
        for mtu in MTUS {
            let sc = load(&mtu_overrides(&base, mtu, EXTENDED_TAGS, false)).unwrap();
            assert_eq!(sc.fabric.packet.max_payload.0, mtu);
            assert_eq!(sc.nic.host.read_request.0, mtu);
            assert_eq!(sc.nic.host.read_tags, EXTENDED_TAGS);
            let need = (mtu + 16).div_ceil(16);
            assert!(u64::from(sc.fabric.router.private_credits) >= need.min(64), "{mtu}");
        }
        // The scenario's own MTU changes nothing but the tags.
        let o = mtu_overrides(&base, 128, 32, false);
        assert_eq!(o.len(), 5);
        // The alternative reading moves only the packet MTU; the host keeps its PCIe sizes.
        let sc = load(&mtu_overrides(&base, 1024, 32, true)).unwrap();
        assert_eq!(sc.fabric.packet.max_payload.0, 1024);
        assert_eq!(sc.nic.host.max_payload, base.nic.host.max_payload);
        assert_eq!(sc.nic.host.read_request, base.nic.host.read_request);
        // The paper's tag formula: 13 tags at MTU 128, more than 32 below 64 B.
        assert_eq!(paper_min_tags(128), 13.0);
        assert_eq!(paper_min_tags(32), 33.0);
        assert_eq!(paper_min_tags(16), 44.0);
    }

    #[test]
    fn quick_run_roles_and_invariants() {
        let r = ChppBandwidth.run(&Ctx { quick: true }).unwrap();
        assert!(crate::calibration_labels(&r).is_empty(), "{}", r.to_text());
        let row = |l: &str| r.rows.iter().find(|x| x.label.starts_with(l)).unwrap();
        assert_eq!(row("2 MB PUT at MTU 128 B").role, Role::Prediction);
        assert_eq!(row("PUT stream, 512 KB").role, Role::Prediction);
        assert_eq!(row("2 MB PUT at MTU 512 B, 32 tags").role, Role::Info);
        // Bandwidth grows with the MTU up to 128 B and never exceeds the 4 GB/s bus.
        let m: Vec<f64> = [16, 32, 64, 128]
            .iter()
            .map(|m| row(&format!("2 MB PUT at MTU {m} B, 32 tags")).simulated)
            .collect();
        assert!(m.windows(2).all(|w| w[1] > w[0]), "{m:?}");
        assert!(r.rows.iter().filter(|x| x.unit == "GB/s").all(|x| x.simulated < 4.0));
        // Extended tags never hurt.
        for mtu in MTUS {
            let a = row(&format!("2 MB PUT at MTU {mtu} B, 32 tags")).simulated;
            let b = row(&format!("2 MB PUT at MTU {mtu} B, 256")).simulated;
            assert!(b >= a * 0.999, "{mtu}: {a} {b}");
        }
        // PUT bandwidth grows with payload up to the engine's data-path limit (the pipelined
        // engine of chpp-pair reaches it within a few KB, then stays there).
        let put = &r.figures[1].series[0].points;
        assert!(put.windows(2).all(|w| w[1].1 >= w[0].1), "{put:?}");
        assert!(put[1].1 > put[0].1, "{put:?}");
        let engine = limits(&load(&[]).unwrap()).engine;
        assert!(put.iter().all(|p| p.1 <= engine), "{put:?} above {engine}");
        assert_eq!(r.figures.len(), 2);
        crate::plot::svg(&r.figures).unwrap();
    }
}
