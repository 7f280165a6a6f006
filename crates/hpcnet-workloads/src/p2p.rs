//! Point-to-point micro-benchmarks written as rank programs on the verbs API: ping-pong
//! latency, uni- and bi-directional streaming bandwidth with a window of outstanding messages,
//! and message rate (as IMB PingPong / OSU bw, bibw, mbw_mr do).
//!
//! Each benchmark builds a fresh world (so runs are independent and deterministic), registers
//! buffers, and measures simulated time from the first post to the last completion.

use hpcnet_des::{Bytes, SimTime};
use hpcnet_msg::verbs::{Machine, RunEnd, VerbsError, WriteWr};
use hpcnet_nic::{Rank, World};
use serde::Serialize;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Largest message the benchmarks accept (1 GiB). The model moves real bytes: every run
/// allocates its source and destination buffers (up to four of `size` bytes, ping-pong), so a
/// size beyond the host's memory aborts the process instead of giving a figure; frontends
/// (`hpcnet p2p --sizes`) refuse larger sizes up front.
pub const MAX_MESSAGE_SIZE: u64 = 1 << 30;

/// Why a benchmark gave no figure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum P2pError {
    /// A rank program's post was refused: an operation this scenario does not allow (a NAP above
    /// `nic.nap_buffer`, a full doorbell FIFO, a rail that does not exist, ...).
    #[error("post refused: {0}")]
    Refused(#[from] VerbsError),
    /// The run ended with rank programs still waiting for completions (deadlock or hang), or
    /// with packets that can never move: the measured time would be meaningless.
    #[error("{}", describe_stuck(.0))]
    Stuck(RunEnd),
}

/// One line saying what is stuck at the end of an unfinished run.
pub(crate) fn describe_stuck(end: &RunEnd) -> String {
    let at = end.time.as_us_f64();
    let mut s = if end.stuck_tasks > 0 {
        format!(
            "the run did not finish: {} rank program(s) still waiting at {at:.3} us",
            end.stuck_tasks
        )
    } else {
        format!("the run did not finish: every rank program is done but packets are stuck at {at:.3} us")
    };
    if end.net_in_flight == 0 {
        s.push_str(", no packet in the network (a completion never came)");
        return s;
    }
    s.push_str(&format!(
        ", {} packet(s) stuck in the network{}",
        end.net_in_flight,
        if end.deadlock { " (deadlock)" } else { "" }
    ));
    if let Some(b) = end.blocked.first() {
        let queue = match b.source_node {
            Some(n) => format!("injection queue of node {n} (router {} port {})", b.router, b.in_port),
            None => format!("router {} input port {}", b.router, b.in_port),
        };
        s.push_str(&format!(
            "; first blocked: {queue} VC {}, {} packet(s) queued, head to node {} needs {} credit(s) \
             at output port {} VC {}",
            b.vc, b.queued, b.head_dst, b.credits_needed, b.out_port, b.out_vc
        ));
        // Output ports to nodes report no credit count (u32::MAX).
        if b.credits_free != u32::MAX {
            s.push_str(&format!(" ({} free)", b.credits_free));
        }
        if end.blocked.len() > 1 {
            s.push_str(&format!(" ({} blocked queues listed)", end.blocked.len()));
        }
    }
    s
}

/// The first refused post of a run's rank programs, if any.
type Refusal = Rc<RefCell<Option<VerbsError>>>;

fn record(refusal: &Refusal, e: VerbsError) {
    refusal.borrow_mut().get_or_insert(e);
}

/// How a run ended, as a result: a refused post first (it leaves the other programs waiting),
/// then any program still waiting.
fn finished(end: RunEnd, refusal: &Refusal) -> Result<(), P2pError> {
    if let Some(e) = refusal.borrow_mut().take() {
        return Err(P2pError::Refused(e));
    }
    if end.stuck_tasks > 0 || end.deadlock || end.net_in_flight > 0 {
        return Err(P2pError::Stuck(end));
    }
    Ok(())
}

/// One measured point.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Point {
    /// Message size in bytes.
    pub size: u64,
    /// Messages moved (per direction).
    pub messages: u64,
    /// Simulated time of the measurement.
    pub time_ns: f64,
    /// Payload bandwidth in GB/s (10^9 B/s), summed over directions.
    pub gbytes_per_s: f64,
    /// Messages per second (summed over directions).
    pub messages_per_s: f64,
    /// One-way latency (ping-pong only): half the round-trip time.
    pub latency_us: Option<f64>,
}

/// Benchmark options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Messages in flight per direction (0 is taken as 1).
    pub window: u32,
    /// Messages per direction.
    pub messages: u64,
    /// Queue pairs per direction (messages alternate between them, and so between engines; 0 is
    /// taken as 1). Only the first `messages` are created: the others would carry nothing.
    pub qps: u32,
    /// Rail of the queue pairs (fixed port selection).
    pub rail: u8,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            window: 64,
            messages: 64,
            qps: 1,
            rail: 0,
        }
    }
}

fn buffers(m: &Machine, r: Rank, size: u64) -> hpcnet_msg::verbs::Mr {
    m.context(r).reg_mr(size.max(8))
}

/// Stream `opts.messages` RDMA writes of `size` bytes from `a` to `b` (and from `b` to `a` when
/// `bidirectional`), keeping `opts.window` in flight; bandwidth = bytes / (last completion −
/// first post).
///
/// # Errors
/// [`P2pError::Refused`] when a post is refused, [`P2pError::Stuck`] when the run ends before
/// every message completed (e.g. a receive buffer smaller than one packet).
pub fn try_stream(
    world: World,
    a: Rank,
    b: Rank,
    size: u64,
    bidirectional: bool,
    opts: &Options,
) -> Result<Point, P2pError> {
    stream_of(world, a, b, LatencyOp::Write, size, bidirectional, opts)
}

/// [`try_stream`] with another primitive: RDMA writes, cHPP PUTs, GETs (`a` fetches from `b`)
/// or NAPs (immediate or indirect; `b` keeps a pool of twice the window of NAP buffers and
/// gives each back when its event arrives). Unidirectional.
///
/// # Errors
/// As [`try_stream`].
pub fn try_stream_op(
    world: World,
    a: Rank,
    b: Rank,
    op: LatencyOp,
    size: u64,
    opts: &Options,
) -> Result<Point, P2pError> {
    stream_of(world, a, b, op, size, false, opts)
}

fn stream_of(
    world: World,
    a: Rank,
    b: Rank,
    op: LatencyOp,
    size: u64,
    bidirectional: bool,
    opts: &Options,
) -> Result<Point, P2pError> {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    let nap_buffer = world.config().nap_buffer.0;
    let mut m = Machine::new(world);
    let start = m.context(a).now();
    let finish = Rc::new(Cell::new(SimTime::ZERO));
    let refusal = Refusal::default();
    let dirs: Vec<(Rank, Rank)> = if bidirectional {
        vec![(a, b), (b, a)]
    } else {
        vec![(a, b)]
    };
    let (window, total) = (u64::from(opts.window.max(1)), opts.messages);
    let nap = matches!(op, LatencyOp::NapImmediate | LatencyOp::NapIndirect);
    for &(s, d) in &dirs {
        let ctx = m.context(s);
        let src = buffers(&m, s, size);
        let dst = buffers(&m, d, size);
        let cq = ctx.create_cq();
        let nqps = u64::from(opts.qps.max(1)).min(opts.messages.max(1));
        let qps: Vec<_> = (0..nqps).map(|_| ctx.create_qp(&cq, d).on_rail(opts.rail)).collect();
        if nap {
            // A pool at the target larger than the window; each event gives its buffer back.
            let target = m.context(d);
            let rx = target.create_cq();
            let pool = target.reg_mr(nap_buffer * 2 * window);
            target.post_nap_buffers(&pool, 0, 2 * window, &rx)?;
            m.spawn(async move {
                for _ in 0..total {
                    let c = rx.next().await;
                    target.repost_nap_buffer(c.addr);
                }
            });
        }
        let remote = dst.remote(0);
        let fin = finish.clone();
        let refused = refusal.clone();
        m.spawn(async move {
            let mut posted = 0u64;
            let mut done = 0u64;
            let seg = [RemoteSeg { buf: remote, len: size }];
            let sge = [Sge {
                mr: &src,
                offset: 0,
                len: size,
            }];
            while done < total {
                while posted < total && posted - done < window {
                    let qp = &qps[(posted % qps.len() as u64) as usize];
                    let r = match op {
                        LatencyOp::Write => qp.post_write(WriteWr::new(&src, 0, size, remote).wr_id(posted)),
                        LatencyOp::Put => qp.post_put(&sge, &seg, None, posted),
                        LatencyOp::Get => qp.post_get(&sge, &seg, posted),
                        LatencyOp::NapImmediate | LatencyOp::NapIndirect => {
                            qp.post_nap(d, &src, 0, size, op == LatencyOp::NapImmediate, posted)
                        }
                    };
                    if let Err(e) = r {
                        return record(&refused, e);
                    }
                    posted += 1;
                }
                cq.next().await;
                done += 1;
            }
            fin.set(fin.get().max(ctx.now()));
        });
    }
    finished(m.run(), &refusal)?;
    let t = (finish.get() - start).as_secs_f64();
    let msgs = opts.messages * dirs.len() as u64;
    Ok(Point {
        size,
        messages: opts.messages,
        time_ns: t * 1e9,
        gbytes_per_s: (msgs * size) as f64 / t / 1e9,
        messages_per_s: msgs as f64 / t,
        latency_us: None,
    })
}

/// [`try_stream`] for callers whose runs are known to finish (the shipped studies).
///
/// # Panics
/// When [`try_stream`] fails: a run that did not finish never gives a figure.
pub fn stream(world: World, a: Rank, b: Rank, size: u64, bidirectional: bool, opts: &Options) -> Point {
    try_stream(world, a, b, size, bidirectional, opts)
        .unwrap_or_else(|e| panic!("p2p stream of {} messages: {e}", Bytes(size)))
}

/// Ping-pong: `a` writes `size` bytes to `b` with notification, `b` answers the same way;
/// latency = round-trip time / 2, averaged over `iterations`.
///
/// # Errors
/// As [`try_stream`].
pub fn try_pingpong(world: World, a: Rank, b: Rank, size: u64, iterations: u64) -> Result<Point, P2pError> {
    let mut m = Machine::new(world);
    let (ca, cb) = (m.context(a), m.context(b));
    let (sa, sb) = (buffers(&m, a, size), buffers(&m, b, size));
    let (da, db) = (buffers(&m, a, size), buffers(&m, b, size));
    let (cqa, cqb) = (ca.create_cq(), cb.create_cq());
    let (na, nb) = (ca.create_cq(), cb.create_cq());
    let qa = ca.create_qp(&cqa, b);
    let qb = cb.create_qp(&cqb, a);
    let (ra, rb) = (da.remote(0), db.remote(0));
    let start = ca.now();
    let finish = Rc::new(Cell::new(SimTime::ZERO));
    let refusal = Refusal::default();
    let (fin, refused_a, refused_b) = (finish.clone(), refusal.clone(), refusal.clone());
    let nb2 = nb.clone();
    let na2 = na.clone();
    m.spawn(async move {
        for _ in 0..iterations {
            if let Err(e) = qa.post_write(WriteWr::new(&sa, 0, size, rb).notify(&nb2).unsignaled()) {
                return record(&refused_a, e);
            }
            na.next().await;
        }
        fin.set(ca.now());
    });
    m.spawn(async move {
        for _ in 0..iterations {
            nb.next().await;
            if let Err(e) = qb.post_write(WriteWr::new(&sb, 0, size, ra).notify(&na2).unsignaled()) {
                return record(&refused_b, e);
            }
        }
    });
    finished(m.run(), &refusal)?;
    let t = (finish.get() - start).as_secs_f64();
    let lat = t / (2 * iterations) as f64;
    Ok(Point {
        size,
        messages: iterations,
        time_ns: t * 1e9,
        gbytes_per_s: size as f64 / lat / 1e9,
        messages_per_s: 1.0 / lat,
        latency_us: Some(lat * 1e6),
    })
}

/// [`try_pingpong`] for callers whose runs are known to finish.
///
/// # Panics
/// When [`try_pingpong`] fails.
pub fn pingpong(world: World, a: Rank, b: Rank, size: u64, iterations: u64) -> Point {
    try_pingpong(world, a, b, size, iterations)
        .unwrap_or_else(|e| panic!("p2p ping-pong of {} messages: {e}", Bytes(size)))
}

/// Sizes 1 B, 2 B, 4 B, ... up to `max` (powers of two).
pub fn sizes_up_to(max: u64) -> Vec<u64> {
    std::iter::successors(Some(1u64), |s| (s * 2 <= max).then_some(s * 2)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two() {
        assert_eq!(sizes_up_to(8), vec![1, 2, 4, 8]);
        assert_eq!(sizes_up_to(4 << 20).len(), 23);
    }
}

/// Operations whose one-message latency [`op_latency`] measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyOp {
    NapImmediate,
    NapIndirect,
    Put,
    Get,
    Write,
}

/// Latency of one message of `size` bytes from `a` to `b`, from the doorbell (the post) to the
/// data written at the receiver (the target for NAP/PUT/write; the requester for GET), as
/// the cHPP latency table defines it (spec 02). Each call builds on a fresh world.
///
/// # Errors
/// [`P2pError::Refused`] for an operation the scenario refuses (a NAP above `nic.nap_buffer`),
/// [`P2pError::Stuck`] when the message never lands.
pub fn try_op_latency(world: World, a: Rank, b: Rank, op: LatencyOp, size: u64) -> Result<SimTime, P2pError> {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    let mut m = Machine::new(world);
    let (ca, cb) = (m.context(a), m.context(b));
    let src = buffers(&m, a, size);
    let dst = buffers(&m, b, size);
    let cqa = ca.create_cq();
    let cqb = cb.create_cq();
    let pool = cb.reg_mr(cb_nap_buffer(&m));
    cb.post_nap_buffers(&pool, 0, 1, &cqb)?;
    let qp = ca.create_qp(&cqa, b);
    let start = ca.now();
    let done = Rc::new(Cell::new(SimTime::ZERO));
    let d = done.clone();
    let refusal = Refusal::default();
    let refused = refusal.clone();
    m.spawn(async move {
        let at = match op {
            LatencyOp::NapImmediate | LatencyOp::NapIndirect => {
                if let Err(e) = qp.post_nap(b, &src, 0, size, op == LatencyOp::NapImmediate, 0) {
                    return record(&refused, e);
                }
                cqb.next().await.at
            }
            LatencyOp::Put => {
                let remote = [RemoteSeg {
                    buf: dst.remote(0),
                    len: size,
                }];
                if let Err(e) = qp.post_put(
                    &[Sge {
                        mr: &src,
                        offset: 0,
                        len: size,
                    }],
                    &remote,
                    Some(&cqb),
                    0,
                ) {
                    return record(&refused, e);
                }
                cqb.next().await.at
            }
            LatencyOp::Write => {
                if let Err(e) = qp.post_write(WriteWr::new(&src, 0, size, dst.remote(0)).notify(&cqb)) {
                    return record(&refused, e);
                }
                cqb.next().await.at
            }
            LatencyOp::Get => {
                let remote = [RemoteSeg {
                    buf: dst.remote(0),
                    len: size,
                }];
                if let Err(e) = qp.post_get(
                    &[Sge {
                        mr: &src,
                        offset: 0,
                        len: size,
                    }],
                    &remote,
                    0,
                ) {
                    return record(&refused, e);
                }
                cqa.next().await.at
            }
        };
        d.set(at);
    });
    finished(m.run(), &refusal)?;
    Ok(done.get() - start)
}

/// [`try_op_latency`] for callers whose runs are known to finish (the cHPP studies).
///
/// # Panics
/// When [`try_op_latency`] fails.
pub fn op_latency(world: World, a: Rank, b: Rank, op: LatencyOp, size: u64) -> SimTime {
    try_op_latency(world, a, b, op, size).unwrap_or_else(|e| panic!("p2p {op:?} latency of {}: {e}", Bytes(size)))
}

fn cb_nap_buffer(m: &Machine) -> u64 {
    m.world().config().nap_buffer.0
}

/// Bandwidth shares of PCIe functions (SR-IOV): every function of rank `a` keeps its doorbell
/// FIFO full of PUTs to `b` with sizes drawn uniformly from `sizes` (seeded), for `duration`.
/// Returns, every `sample` of simulated time, the cumulative payload bytes completed per
/// function. [`P2pError::Refused`] if a post is refused (e.g. a doorbell FIFO shallower than
/// the one assumed), [`P2pError::Stuck`] if the run does not finish.
pub fn function_shares(
    world: World,
    a: Rank,
    b: Rank,
    sizes: (u64, u64),
    duration: SimTime,
    sample: SimTime,
    seed: u64,
) -> Result<Vec<(SimTime, Vec<u64>)>, P2pError> {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    use rand::Rng;
    let mut m = Machine::new(world);
    let (functions, depth) = {
        let w = m.world();
        (
            w.config().functions,
            if w.config().doorbell_fifo == 0 {
                32
            } else {
                w.config().doorbell_fifo
            },
        )
    };
    let ca = m.context(a);
    let src = buffers(&m, a, sizes.1);
    let dst = buffers(&m, b, sizes.1);
    let done: Rc<std::cell::RefCell<Vec<u64>>> = Rc::new(std::cell::RefCell::new(vec![0; functions as usize]));
    let streams = hpcnet_des::RngStreams::new(seed);
    let refusal = Refusal::default();
    for f in 0..functions {
        let cq = ca.create_cq();
        let qp = ca.create_qp(&cq, b).on_function(f as u8);
        let (src, remote) = (src.clone(), dst.remote(0));
        let done = done.clone();
        let ctx = ca.clone();
        let mut rng = streams.stream("function", f as u64);
        let refused = refusal.clone();
        m.spawn(async move {
            let post = |rng: &mut hpcnet_des::rng::SimRng| {
                let len = rng.gen_range(sizes.0..=sizes.1);
                qp.post_put(
                    &[Sge {
                        mr: &src,
                        offset: 0,
                        len,
                    }],
                    &[RemoteSeg { buf: remote, len }],
                    None,
                    len,
                )
            };
            for _ in 0..depth {
                if let Err(e) = post(&mut rng) {
                    return record(&refused, e);
                }
            }
            loop {
                let c = cq.next().await;
                if ctx.now() > duration {
                    break;
                }
                done.borrow_mut()[f as usize] += c.wr_id;
                if let Err(e) = post(&mut rng) {
                    return record(&refused, e);
                }
            }
        });
    }
    // A sampler task records the cumulative shares.
    let samples = Rc::new(std::cell::RefCell::new(Vec::new()));
    let (s2, d2, c2) = (samples.clone(), done.clone(), ca.clone());
    m.spawn(async move {
        while c2.now() < duration {
            c2.sleep(sample).await;
            s2.borrow_mut().push((c2.now(), d2.borrow().clone()));
        }
    });
    finished(m.run(), &refusal)?;
    let out = samples.borrow().clone();
    Ok(out)
}

/// [`get_exchange`] as a measured point: both directions' bytes over the run's time;
/// [`P2pError::Stuck`] when it deadlocks (or hangs).
pub fn try_get_exchange(world: World, a: Rank, b: Rank, size: u64, count: u64, window: u64) -> Result<Point, P2pError> {
    let end = get_exchange(world, a, b, size, count, window)?;
    if end.stuck_tasks > 0 || end.deadlock || end.net_in_flight > 0 {
        return Err(P2pError::Stuck(end));
    }
    let t = end.time.as_ns_f64();
    Ok(Point {
        size,
        messages: count,
        time_ns: t,
        gbytes_per_s: (2 * count * size) as f64 / t,
        messages_per_s: 2.0 * count as f64 * 1e9 / t,
        latency_us: None,
    })
}

/// Ranks `a` and `b` GET from each other at full rate: each keeps `window` GETs of `size` bytes
/// outstanding until it has done `count`. With GET requests and PUT data sharing one virtual
/// channel and bounded NIC buffers this can deadlock (spec 02); the returned [`RunEnd`] then
/// shows stuck tasks and the blocked channels. [`P2pError::Refused`] if a GET is refused.
pub fn get_exchange(
    world: World,
    a: Rank,
    b: Rank,
    size: u64,
    count: u64,
    window: u64,
) -> Result<hpcnet_msg::verbs::RunEnd, P2pError> {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    let mut m = Machine::new(world);
    let refusal = Refusal::default();
    for (me, peer) in [(a, b), (b, a)] {
        let refused = refusal.clone();
        let ctx = m.context(me);
        let local = buffers(&m, me, size);
        let remote = buffers(&m, peer, size);
        let cq = ctx.create_cq();
        let qp = ctx.create_qp(&cq, peer);
        m.spawn(async move {
            let (mut posted, mut done) = (0u64, 0u64);
            while done < count {
                while posted < count && posted - done < window {
                    let r = [RemoteSeg {
                        buf: remote.remote(0),
                        len: size,
                    }];
                    let local = [Sge {
                        mr: &local,
                        offset: 0,
                        len: size,
                    }];
                    if let Err(e) = qp.post_get(&local, &r, posted) {
                        return record(&refused, e);
                    }
                    posted += 1;
                }
                cq.next().await;
                done += 1;
            }
        });
    }
    let end = m.run();
    if let Some(e) = refusal.borrow_mut().take() {
        return Err(P2pError::Refused(e));
    }
    Ok(end)
}
