//! Point-to-point micro-benchmarks written as rank programs on the verbs API: ping-pong
//! latency, uni- and bi-directional streaming bandwidth with a window of outstanding messages,
//! and message rate (as IMB PingPong / OSU bw, bibw, mbw_mr do).
//!
//! Each benchmark builds a fresh world (so runs are independent and deterministic), registers
//! buffers, and measures simulated time from the first post to the last completion.

use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Machine, WriteWr};
use hpcnet_nic::{Rank, World};
use serde::Serialize;
use std::cell::Cell;
use std::rc::Rc;

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
    /// Messages in flight per direction.
    pub window: u32,
    /// Messages per direction.
    pub messages: u64,
    /// Queue pairs per direction (messages alternate between them, and so between engines).
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
pub fn stream(world: World, a: Rank, b: Rank, size: u64, bidirectional: bool, opts: &Options) -> Point {
    let mut m = Machine::new(world);
    let start = m.context(a).now();
    let finish = Rc::new(Cell::new(SimTime::ZERO));
    let dirs: Vec<(Rank, Rank)> = if bidirectional {
        vec![(a, b), (b, a)]
    } else {
        vec![(a, b)]
    };
    for &(s, d) in &dirs {
        let ctx = m.context(s);
        let src = buffers(&m, s, size);
        let dst = buffers(&m, d, size);
        let cq = ctx.create_cq();
        let qps: Vec<_> = (0..opts.qps.max(1))
            .map(|_| ctx.create_qp(&cq, d).on_rail(opts.rail))
            .collect();
        let remote = dst.remote(0);
        let (window, total) = (opts.window.max(1) as u64, opts.messages);
        let fin = finish.clone();
        m.spawn(async move {
            let mut posted = 0u64;
            let mut done = 0u64;
            while done < total {
                while posted < total && posted - done < window {
                    let qp = &qps[(posted % qps.len() as u64) as usize];
                    qp.post_write(WriteWr::new(&src, 0, size, remote).wr_id(posted))
                        .expect("valid write");
                    posted += 1;
                }
                cq.next().await;
                done += 1;
            }
            fin.set(fin.get().max(ctx.now()));
        });
    }
    m.run();
    let t = (finish.get() - start).as_secs_f64();
    let msgs = opts.messages * dirs.len() as u64;
    Point {
        size,
        messages: opts.messages,
        time_ns: t * 1e9,
        gbytes_per_s: (msgs * size) as f64 / t / 1e9,
        messages_per_s: msgs as f64 / t,
        latency_us: None,
    }
}

/// Ping-pong: `a` writes `size` bytes to `b` with notification, `b` answers the same way;
/// latency = round-trip time / 2, averaged over `iterations`.
pub fn pingpong(world: World, a: Rank, b: Rank, size: u64, iterations: u64) -> Point {
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
    let fin = finish.clone();
    let nb2 = nb.clone();
    let na2 = na.clone();
    m.spawn(async move {
        for _ in 0..iterations {
            qa.post_write(WriteWr::new(&sa, 0, size, rb).notify(&nb2).unsignaled())
                .expect("valid write");
            na.next().await;
        }
        fin.set(ca.now());
    });
    m.spawn(async move {
        for _ in 0..iterations {
            nb.next().await;
            qb.post_write(WriteWr::new(&sb, 0, size, ra).notify(&na2).unsignaled())
                .expect("valid write");
        }
    });
    m.run();
    let t = (finish.get() - start).as_secs_f64();
    let lat = t / (2 * iterations) as f64;
    Point {
        size,
        messages: iterations,
        time_ns: t * 1e9,
        gbytes_per_s: size as f64 / lat / 1e9,
        messages_per_s: 1.0 / lat,
        latency_us: Some(lat * 1e6),
    }
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
pub fn op_latency(world: World, a: Rank, b: Rank, op: LatencyOp, size: u64) -> SimTime {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    let mut m = Machine::new(world);
    let (ca, cb) = (m.context(a), m.context(b));
    let src = buffers(&m, a, size);
    let dst = buffers(&m, b, size);
    let cqa = ca.create_cq();
    let cqb = cb.create_cq();
    let pool = cb.reg_mr(cb_nap_buffer(&m));
    cb.post_nap_buffers(&pool, 0, 1, &cqb).expect("pool buffer");
    let qp = ca.create_qp(&cqa, b);
    let start = ca.now();
    let done = Rc::new(Cell::new(SimTime::ZERO));
    let d = done.clone();
    m.spawn(async move {
        let at = match op {
            LatencyOp::NapImmediate | LatencyOp::NapIndirect => {
                qp.post_nap(b, &src, 0, size, op == LatencyOp::NapImmediate, 0)
                    .expect("valid NAP");
                cqb.next().await.at
            }
            LatencyOp::Put => {
                let remote = [RemoteSeg {
                    buf: dst.remote(0),
                    len: size,
                }];
                qp.post_put(
                    &[Sge {
                        mr: &src,
                        offset: 0,
                        len: size,
                    }],
                    &remote,
                    Some(&cqb),
                    0,
                )
                .expect("valid PUT");
                cqb.next().await.at
            }
            LatencyOp::Write => {
                qp.post_write(WriteWr::new(&src, 0, size, dst.remote(0)).notify(&cqb))
                    .expect("valid write");
                cqb.next().await.at
            }
            LatencyOp::Get => {
                let remote = [RemoteSeg {
                    buf: dst.remote(0),
                    len: size,
                }];
                qp.post_get(
                    &[Sge {
                        mr: &src,
                        offset: 0,
                        len: size,
                    }],
                    &remote,
                    0,
                )
                .expect("valid GET");
                cqa.next().await.at
            }
        };
        d.set(at);
    });
    m.run();
    done.get() - start
}

fn cb_nap_buffer(m: &Machine) -> u64 {
    m.world().cfg.nap_buffer.0
}

/// Bandwidth shares of PCIe functions (SR-IOV): every function of rank `a` keeps its doorbell
/// FIFO full of PUTs to `b` with sizes drawn uniformly from `sizes` (seeded), for `duration`.
/// Returns, every `sample` of simulated time, the cumulative payload bytes completed per
/// function.
pub fn function_shares(
    world: World,
    a: Rank,
    b: Rank,
    sizes: (u64, u64),
    duration: SimTime,
    sample: SimTime,
    seed: u64,
) -> Vec<(SimTime, Vec<u64>)> {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    use rand::Rng;
    let mut m = Machine::new(world);
    let (functions, depth) = {
        let w = m.world();
        (
            w.cfg.functions,
            if w.cfg.doorbell_fifo == 0 {
                32
            } else {
                w.cfg.doorbell_fifo
            },
        )
    };
    let ca = m.context(a);
    let src = buffers(&m, a, sizes.1);
    let dst = buffers(&m, b, sizes.1);
    let done: Rc<std::cell::RefCell<Vec<u64>>> = Rc::new(std::cell::RefCell::new(vec![0; functions as usize]));
    let streams = hpcnet_des::RngStreams::new(seed);
    for f in 0..functions {
        let cq = ca.create_cq();
        let qp = ca.create_qp(&cq, b).on_function(f as u8);
        let (src, remote) = (src.clone(), dst.remote(0));
        let done = done.clone();
        let ctx = ca.clone();
        let mut rng = streams.stream("function", f as u64);
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
                .expect("FIFO has room");
            };
            for _ in 0..depth {
                post(&mut rng);
            }
            loop {
                let c = cq.next().await;
                if ctx.now() > duration {
                    break;
                }
                done.borrow_mut()[f as usize] += c.wr_id;
                post(&mut rng);
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
    m.run();
    let out = samples.borrow().clone();
    out
}

/// Ranks `a` and `b` GET from each other at full rate: each keeps `window` GETs of `size` bytes
/// outstanding until it has done `count`. With GET requests and PUT data sharing one virtual
/// channel and bounded NIC buffers this can deadlock (spec 02); the returned [`RunEnd`] then
/// shows stuck tasks and the blocked channels.
pub fn get_exchange(world: World, a: Rank, b: Rank, size: u64, count: u64, window: u64) -> hpcnet_msg::verbs::RunEnd {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    let mut m = Machine::new(world);
    for (me, peer) in [(a, b), (b, a)] {
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
                    qp.post_get(
                        &[Sge {
                            mr: &local,
                            offset: 0,
                            len: size,
                        }],
                        &r,
                        posted,
                    )
                    .expect("valid GET");
                    posted += 1;
                }
                cq.next().await;
                done += 1;
            }
        });
    }
    m.run()
}
