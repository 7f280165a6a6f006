//! SHMEM benchmarks written as PE programs on `hpcnet-shmem`: put ping-pong latency, get and
//! atomic latency, put bandwidth and message rate (OSU-like), barrier latency against the
//! number of PEs (classic or fast), and HPCC RandomAccess with its verification (owner-update
//! by remote xor, or reader get + put).
//!
//! Each benchmark builds a fresh world (independent, deterministic runs) and measures simulated
//! time on the PEs themselves: all PEs start together; a figure is the time from the first
//! measured call to the last PE's completion, divided as the test says.

use hpcnet_des::SimTime;
use hpcnet_msg::verbs::Machine;
use hpcnet_msg::NicBackend;
use hpcnet_shmem::{init, BarrierKind, Cmp, Pe, ShmemConfig, ShmemError};
use serde::Serialize;
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

/// Why a benchmark gave no figure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ShmemBenchError {
    /// A SHMEM call was refused (a bad argument for this machine).
    #[error("{0}")]
    Call(#[from] ShmemError),
    /// The run ended with PE programs still waiting: the figure would be meaningless.
    #[error("{}", crate::p2p::describe_stuck(.0))]
    Stuck(hpcnet_msg::verbs::RunEnd),
}

/// One measured point.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ShmemPoint {
    /// Message size in bytes (0 for barriers and RandomAccess).
    pub size: u64,
    /// PEs taking part.
    pub pes: usize,
    /// Measured calls (round trips, messages, barriers, updates).
    pub count: u64,
    /// Simulated time of the measured part.
    pub time_ns: f64,
    /// Time per call (half a round trip for ping-pong).
    pub latency_us: f64,
    pub gbytes_per_s: f64,
    pub messages_per_s: f64,
    /// RandomAccess: giga-updates per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gups: Option<f64>,
    /// RandomAccess: table entries that differ from the reference (HPCC accepts ≤ 1 %).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
}

impl ShmemPoint {
    fn new(size: u64, pes: usize, count: u64, time: SimTime, per_call: f64) -> Self {
        let ns = time.as_ns_f64().max(f64::MIN_POSITIVE);
        ShmemPoint {
            size,
            pes,
            count,
            time_ns: time.as_ns_f64(),
            latency_us: time.as_ns_f64() / per_call / 1000.0,
            gbytes_per_s: (size * count) as f64 / ns,
            messages_per_s: count as f64 * 1e9 / ns,
            gups: None,
            errors: None,
        }
    }
}

type Errors = Rc<RefCell<Option<ShmemError>>>;

/// Run one program per PE on `world`; the first error any PE met, or a stuck run, is an error.
fn run_job<B: NicBackend + 'static, F, Fut>(
    world: B,
    npes: usize,
    cfg: &ShmemConfig,
    f: F,
) -> Result<(), ShmemBenchError>
where
    F: Fn(Pe, Errors) -> Fut,
    Fut: Future<Output = Result<(), ShmemError>> + 'static,
{
    let mut m = Machine::new(world);
    let pes = init(&m, npes, cfg)?;
    let errors: Errors = Rc::new(RefCell::new(None));
    for pe in pes {
        let e = errors.clone();
        let fut = f(pe, errors.clone());
        m.spawn(async move {
            if let Err(err) = fut.await {
                e.borrow_mut().get_or_insert(err);
            }
        });
    }
    let end = m.run();
    if let Some(e) = errors.borrow_mut().take() {
        return Err(e.into());
    }
    if end.stuck_tasks > 0 || end.net_in_flight > 0 {
        return Err(ShmemBenchError::Stuck(end));
    }
    Ok(())
}

/// Shared (start, end) of the measured part.
type Span = Rc<RefCell<(SimTime, SimTime)>>;

fn span() -> Span {
    Rc::new(RefCell::new((SimTime::MAX, SimTime::ZERO)))
}

fn mark(s: &Span, start: SimTime, end: SimTime) {
    let mut s = s.borrow_mut();
    s.0 = s.0.min(start);
    s.1 = s.1.max(end);
}

fn elapsed(s: &Span) -> SimTime {
    let s = s.borrow();
    s.1 - s.0
}

/// Put ping-pong between PEs `a` and `b` (of a job of `npes`): `size` bytes, fence, flag;
/// the peer waits for the flag and answers alike. Latency: half the round trip.
pub fn put_pingpong<B: NicBackend + 'static>(
    world: B,
    npes: usize,
    a: usize,
    b: usize,
    size: u64,
    iters: u64,
    cfg: &ShmemConfig,
) -> Result<ShmemPoint, ShmemBenchError> {
    let s = span();
    let sp = s.clone();
    run_job(world, npes, cfg, move |mut pe, _| {
        let s = sp.clone();
        async move {
            let buf = pe.malloc(size.max(8)).await?;
            let flag = pe.malloc(8).await?;
            let data = vec![0x5A; size as usize];
            let me = pe.my_pe();
            if me != a && me != b {
                return Ok(());
            }
            let peer = if me == a { b } else { a };
            let t0 = pe.now();
            for i in 1..=iters {
                if me == a {
                    pe.put_bytes(buf, &data, peer).await?;
                    pe.fence().await?;
                    pe.p::<u64>(flag, i, peer).await?;
                    pe.wait_until::<u64>(flag, Cmp::Ge, i).await?;
                } else {
                    pe.wait_until::<u64>(flag, Cmp::Ge, i).await?;
                    pe.put_bytes(buf, &data, peer).await?;
                    pe.fence().await?;
                    pe.p::<u64>(flag, i, peer).await?;
                }
            }
            if me == a {
                mark(&s, t0, pe.now());
            }
            Ok(())
        }
    })?;
    Ok(ShmemPoint::new(size, 2, iters, elapsed(&s), 2.0 * iters as f64))
}

/// What a latency loop calls.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LatencyCall {
    /// Blocking `shmem_getmem`.
    Get,
    /// `shmem_atomic_fetch_add` on a 64-bit word.
    FetchAdd,
}

/// Mean time of one blocking call from `a` to `b`, `iters` in a row.
#[allow(clippy::too_many_arguments)]
pub fn call_latency<B: NicBackend + 'static>(
    world: B,
    npes: usize,
    a: usize,
    b: usize,
    call: LatencyCall,
    size: u64,
    iters: u64,
    cfg: &ShmemConfig,
) -> Result<ShmemPoint, ShmemBenchError> {
    let s = span();
    let sp = s.clone();
    run_job(world, npes, cfg, move |mut pe, _| {
        let s = sp.clone();
        async move {
            let buf = pe.malloc(size.max(8)).await?;
            if pe.my_pe() != a {
                return Ok(());
            }
            let t0 = pe.now();
            for _ in 0..iters {
                match call {
                    LatencyCall::Get => {
                        pe.get_bytes(buf, size, b).await?;
                    }
                    LatencyCall::FetchAdd => {
                        pe.atomic_fetch_add::<u64>(buf, 1, b).await?;
                    }
                }
            }
            mark(&s, t0, pe.now());
            Ok(())
        }
    })?;
    Ok(ShmemPoint::new(size, 2, iters, elapsed(&s), iters as f64))
}

/// Streaming puts from `a` to `b`: `messages` non-blocking puts of `size` bytes from the
/// symmetric heap, a quiet after every `window`. Bandwidth and message rate.
#[allow(clippy::too_many_arguments)]
pub fn put_stream<B: NicBackend + 'static>(
    world: B,
    npes: usize,
    a: usize,
    b: usize,
    size: u64,
    messages: u64,
    window: u64,
    cfg: &ShmemConfig,
) -> Result<ShmemPoint, ShmemBenchError> {
    let s = span();
    let sp = s.clone();
    run_job(world, npes, cfg, move |mut pe, _| {
        let s = sp.clone();
        async move {
            let src = pe.malloc(size.max(8)).await?;
            let dst = pe.malloc(size.max(8)).await?;
            if pe.my_pe() != a {
                return Ok(());
            }
            let t0 = pe.now();
            for i in 0..messages {
                pe.put_from_nbi(dst, src, size, b).await?;
                if (i + 1) % window.max(1) == 0 {
                    pe.quiet().await?;
                }
            }
            pe.quiet().await?;
            mark(&s, t0, pe.now());
            Ok(())
        }
    })?;
    Ok(ShmemPoint::new(size, 2, messages, elapsed(&s), messages as f64))
}

/// Message rate of short puts: every PE in `pairs` sends `messages` puts of `size` bytes
/// (`shmem_putmem` of private data: staged, non-blocking for the caller) to its partner, then
/// quiet. The rate is all messages over the time until the last PE is done.
pub fn put_rate<B: NicBackend + 'static>(
    world: B,
    npes: usize,
    pairs: &[(usize, usize)],
    size: u64,
    messages: u64,
    cfg: &ShmemConfig,
) -> Result<ShmemPoint, ShmemBenchError> {
    let s = span();
    let sp = s.clone();
    let pairs: Rc<[(usize, usize)]> = pairs.into();
    let np = pairs.len() as u64;
    run_job(world, npes, cfg, move |mut pe, _| {
        let s = sp.clone();
        let pairs = pairs.clone();
        async move {
            let dst = pe.malloc(size.max(8)).await?;
            let Some(&(_, to)) = pairs.iter().find(|p| p.0 == pe.my_pe()) else {
                return Ok(());
            };
            let data = vec![1u8; size as usize];
            let t0 = pe.now();
            for _ in 0..messages {
                pe.put_bytes(dst, &data, to).await?;
            }
            pe.quiet().await?;
            mark(&s, t0, pe.now());
            Ok(())
        }
    })?;
    Ok(ShmemPoint::new(
        size,
        2 * np as usize,
        np * messages,
        elapsed(&s),
        messages as f64,
    ))
}

/// Mean time of a barrier over `npes` PEs (`iters` after `warmup`), classic or fast.
pub fn barrier<B: NicBackend + 'static>(
    world: B,
    npes: usize,
    kind: BarrierKind,
    iters: u64,
    warmup: u64,
    cfg: &ShmemConfig,
) -> Result<ShmemPoint, ShmemBenchError> {
    let s = span();
    let sp = s.clone();
    let cfg = ShmemConfig {
        barrier: kind,
        ..cfg.clone()
    };
    run_job(world, npes, &cfg, move |mut pe, _| {
        let s = sp.clone();
        async move {
            for _ in 0..warmup {
                pe.barrier_all().await?;
            }
            let t0 = pe.now();
            for _ in 0..iters {
                pe.barrier_all().await?;
            }
            mark(&s, t0, pe.now());
            Ok(())
        }
    })?;
    Ok(ShmemPoint::new(0, npes, iters, elapsed(&s), iters as f64))
}

/// How RandomAccess updates remote table entries.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum RaVariant {
    /// The owner's entry is updated by a remote atomic xor (one packet: the paper's "owner
    /// puts").
    Atomic,
    /// The reader gets the entry, xors it and puts it back (two round trips' worth of packets;
    /// races between PEs may lose updates, which the verification counts).
    GetPut,
}

/// HPCC RandomAccess's generator polynomial.
const POLY: u64 = 0x7;
const PERIOD: i64 = 1_317_624_576_693_539_401;

/// The next value of HPCC's random stream.
fn next_ran(r: u64) -> u64 {
    (r << 1) ^ if (r as i64) < 0 { POLY } else { 0 }
}

/// HPCC_starts: the stream's value after `n` steps.
fn starts(n: i64) -> u64 {
    let mut n = n;
    while n < 0 {
        n += PERIOD;
    }
    while n > PERIOD {
        n -= PERIOD;
    }
    if n == 0 {
        return 1;
    }
    let mut m2 = [0u64; 64];
    let mut temp = 1u64;
    for m in m2.iter_mut() {
        *m = temp;
        temp = next_ran(next_ran(temp));
    }
    let mut i = 62;
    while i >= 0 && (n >> i) & 1 == 0 {
        i -= 1;
    }
    let mut ran = 2u64;
    while i > 0 {
        temp = 0;
        for (j, &m) in m2.iter().enumerate() {
            if (ran >> j) & 1 == 1 {
                temp ^= m;
            }
        }
        ran = temp;
        i -= 1;
        if (n >> i) & 1 == 1 {
            ran = next_ran(ran);
        }
    }
    ran
}

/// HPCC RandomAccess on `npes` PEs: a table of `2^log_local` 64-bit words per PE, initialised
/// to its global index; `updates` updates per PE from HPCC's stream (PE p starts at step
/// p · updates), each `table[ran mod size] ^= ran`; a quiet every `batch` updates (HPCC's
/// look-ahead). Then the standard verification: the reference table is computed outside the
/// simulation and the differing entries counted. GUPS = all updates / simulated time.
pub fn random_access<B: NicBackend + 'static>(
    world: B,
    npes: usize,
    log_local: u32,
    updates: u64,
    variant: RaVariant,
    batch: u64,
    cfg: &ShmemConfig,
) -> Result<ShmemPoint, ShmemBenchError> {
    let call = "RandomAccess";
    if !npes.is_power_of_two() {
        return Err(ShmemError::BadArgument {
            call,
            reason: format!("{npes} PEs: the HPCC table layout needs a power of two"),
        }
        .into());
    }
    if log_local > 24 {
        return Err(ShmemError::BadArgument {
            call,
            reason: format!("2^{log_local} words per PE: at most 2^24 (the model keeps the table's bytes)"),
        }
        .into());
    }
    let local = 1u64 << log_local;
    let total = local * npes as u64;
    let cfg = ShmemConfig {
        heap: cfg.heap.max(local * 8 + 4096),
        ..cfg.clone()
    };
    let s = span();
    let sp = s.clone();
    let tables: Rc<RefCell<Vec<Vec<u8>>>> = Rc::new(RefCell::new(vec![Vec::new(); npes]));
    let tp = tables.clone();
    run_job(world, npes, &cfg, move |mut pe, _| {
        let s = sp.clone();
        let tables = tp.clone();
        async move {
            let me = pe.my_pe();
            let table = pe.malloc(local * 8).await?;
            let init: Vec<u8> = (0..local).flat_map(|i| (me as u64 * local + i).to_le_bytes()).collect();
            pe.write_bytes(table, &init)?;
            pe.barrier_all().await?;
            let t0 = pe.now();
            let mut ran = starts((me as u64 * updates) as i64);
            for u in 0..updates {
                ran = next_ran(ran);
                let idx = ran & (total - 1);
                let (owner, off) = ((idx / local) as usize, idx % local);
                let entry = table.elem::<u64>(off);
                match variant {
                    RaVariant::Atomic => pe.atomic_xor::<u64>(entry, ran, owner).await?,
                    RaVariant::GetPut => {
                        let v = pe.g::<u64>(entry, owner).await?;
                        pe.p::<u64>(entry, v ^ ran, owner).await?;
                    }
                }
                if (u + 1) % batch.max(1) == 0 {
                    pe.quiet().await?;
                }
            }
            pe.barrier_all().await?;
            mark(&s, t0, pe.now());
            tables.borrow_mut()[me] = pe.read_bytes(table)?;
            Ok(())
        }
    })?;
    // Verification: the reference table, with every PE's updates applied in turn.
    let mut reference: Vec<u64> = (0..total).collect();
    for p in 0..npes as u64 {
        let mut ran = starts((p * updates) as i64);
        for _ in 0..updates {
            ran = next_ran(ran);
            reference[(ran & (total - 1)) as usize] ^= ran;
        }
    }
    let tables = tables.borrow();
    let mut errors = 0u64;
    for (p, t) in tables.iter().enumerate() {
        for (i, w) in t.chunks(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            if v != reference[p * local as usize + i] {
                errors += 1;
            }
        }
    }
    let n = updates * npes as u64;
    let mut point = ShmemPoint::new(8, npes, n, elapsed(&s), n as f64);
    point.gups = Some(n as f64 / elapsed(&s).as_ns_f64().max(f64::MIN_POSITIVE));
    point.errors = Some(errors);
    Ok(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m3(sets: &[&str]) -> crate::Scenario {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/nicevt-m3.toml");
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        crate::Scenario::load(&path, &sets).expect("scenario")
    }

    /// Remote atomics on the flow-level model are atomic (fetch-adds from every PE onto one
    /// word return distinct old values and sum up; a 32-bit add wraps at 32 bits), puts and
    /// gets move their bytes, and the model says it does not keep a pair's order (so fence is
    /// a quiet).
    #[test]
    fn shmem_atomics_puts_and_gets_on_the_flow_model() {
        let sc = m3(&[]);
        let npes = 8;
        let olds = Rc::new(RefCell::new(Vec::new()));
        let finals = Rc::new(RefCell::new(Vec::new()));
        let (o, f) = (olds.clone(), finals.clone());
        run_job(sc.flow_world().unwrap(), npes, &sc.shmem_config(), move |mut pe, _| {
            let (o, f) = (o.clone(), f.clone());
            async move {
                assert!(!pe.ordered_delivery(), "max-min sharing keeps no pair's order");
                let me = pe.my_pe();
                let counter = pe.malloc(8).await?;
                let small = pe.malloc(8).await?;
                let data = pe.malloc(64).await?;
                pe.barrier_all().await?;
                for _ in 0..5 {
                    let old: u64 = pe.atomic_fetch_add(counter, 1, 0).await?;
                    o.borrow_mut().push(old);
                }
                pe.atomic_add::<u32>(small, u32::MAX, 0).await?;
                let words: Vec<u64> = (0..8).map(|k| (me * 100 + k) as u64).collect();
                pe.put(data, &words, (me + 1) % npes).await?;
                pe.fence().await?;
                pe.barrier_all().await?;
                let from = (me + npes - 1) % npes;
                let got: Vec<u64> = pe.get(data, 8, me).await?;
                assert_eq!(got, (0..8).map(|k| (from * 100 + k) as u64).collect::<Vec<_>>());
                let remote: Vec<u64> = pe.get(data, 8, (me + 1) % npes).await?;
                assert_eq!(remote, words, "get reads what this PE put there");
                if me == 0 {
                    let c: u64 = pe.g(counter, 0).await?;
                    let w: u32 = pe.g(small, 0).await?;
                    f.borrow_mut().extend([c, u64::from(w)]);
                }
                pe.barrier_all().await?;
                Ok(())
            }
        })
        .unwrap();
        let mut olds = olds.borrow().clone();
        olds.sort_unstable();
        assert_eq!(olds, (0..40).collect::<Vec<u64>>(), "every fetch-add applied once");
        let w = (u64::from(u32::MAX) * npes as u64) & u64::from(u32::MAX);
        assert_eq!(*finals.borrow(), vec![40, w]);
    }

    /// RandomAccess with remote xors verifies exactly on the flow model, deterministically;
    /// atomic latency between neighbours is within 10 % of packet level (measured +4.7 %:
    /// 0.944 against 0.902 µs; the flow model charges the request's and answer's packet costs
    /// once each), and at 2 PEs, where the host's posting dominates, the GUPS agree within 1 %.
    #[test]
    fn randomaccess_and_atomic_latency_on_the_flow_model() {
        let sc = m3(&[]);
        let cfg = sc.shmem_config();
        let ra = |pes| random_access(sc.flow_world().unwrap(), pes, 10, 256, RaVariant::Atomic, 1024, &cfg).unwrap();
        let a = ra(16);
        assert_eq!(a.errors, Some(0), "remote xors are atomic");
        assert_eq!(a, ra(16), "deterministic");
        let two = ra(2);
        let two_packet = random_access(sc.world().unwrap(), 2, 10, 256, RaVariant::Atomic, 1024, &cfg).unwrap();
        let (g, gp) = (two.gups.unwrap(), two_packet.gups.unwrap());
        assert!((g / gp - 1.0).abs() < 0.01, "2 PEs: flow {g} GUPS, packet {gp}");
        let lat = |flow: bool| {
            let r = if flow {
                call_latency(sc.flow_world().unwrap(), 2, 0, 1, LatencyCall::FetchAdd, 8, 50, &cfg)
            } else {
                call_latency(sc.world().unwrap(), 2, 0, 1, LatencyCall::FetchAdd, 8, 50, &cfg)
            };
            r.unwrap().latency_us
        };
        let (f, p) = (lat(true), lat(false));
        assert!((f / p - 1.0).abs() < 0.1, "atomic latency: flow {f} us, packet {p} us");
    }

    #[test]
    fn hpcc_starts_agrees_with_stepping() {
        let mut r = 1u64;
        for n in 0..300i64 {
            assert_eq!(starts(n), r, "step {n}");
            r = next_ran(r);
        }
    }
}

/// NAS CG problem classes: (order `na`, non-zeros per generated row `nonzer`, outer iterations
/// `niter`) from the NPB specification; each outer iteration runs 25 CG iterations.
pub const CG_CLASSES: [(char, u64, u64, u64); 7] = [
    ('S', 1400, 7, 15),
    ('W', 7000, 8, 15),
    ('A', 14000, 11, 15),
    ('B', 75000, 13, 75),
    ('C', 150000, 15, 75),
    ('D', 1500000, 21, 100),
    ('E', 9000000, 26, 100),
];

/// How the rows of the CG matrix (and the matching entries of the vectors) are dealt to PEs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CgPartition {
    /// Contiguous row blocks: PE p owns rows p·na/P … (p+1)·na/P − 1; one put per peer.
    RowBlock,
    /// Blocks of `block` rows dealt round-robin: one put per block per peer.
    BlockCyclic { block: u64 },
}

/// How the vector is exchanged each CG iteration.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CgExchange {
    /// SHMEM style: every PE puts its pieces of the direction vector into every peer's copy, then
    /// a barrier (the PE's own configured flavour); dot products by SHMEM sum reductions.
    OwnerPuts,
    /// MPI style: the vector gathered by the collectives layer's allgather (`shmem_fcollect`),
    /// dot products by its allreduce (row-block only).
    Allgather,
}

/// One CG run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CgPoint {
    pub class: char,
    pub pes: usize,
    pub partition: CgPartition,
    pub exchange: CgExchange,
    /// Simulated CG iterations.
    pub iterations: u64,
    /// Mean simulated time of one CG iteration, µs.
    pub iteration_us: f64,
    /// Of which waiting for communication (exchange and dot products), µs.
    pub communication_us: f64,
    /// The class's whole run (niter × 25 iterations) at that pace, s.
    pub class_time_s: f64,
    /// Messages each PE sends per iteration for the vector exchange.
    pub messages_per_pe: u64,
}

/// An NPB-CG-like sparse matrix–vector exchange on `npes` PEs: per CG iteration, the PEs
/// exchange the direction vector (`na` doubles) so that each has every entry its rows need
/// (all of them: NPB CG's matrix touches the whole vector), compute the matrix–vector product
/// and the vector updates (`2·nnz/P + 10·na/P` flops at `flops` per second, nnz =
/// na·(nonzer+1)², NPB's bound), and sum two dot products across all PEs. The vector's bytes
/// really move and are checked at the end: every PE's copy must hold every owner's values.
/// Cost: per iteration and PE, P − 1 puts (row-block) or na/block puts (block-cyclic).
#[allow(clippy::too_many_arguments)]
pub fn cg<B: NicBackend + 'static>(
    world: B,
    npes: usize,
    class: char,
    partition: CgPartition,
    exchange: CgExchange,
    iterations: u64,
    flops: f64,
    cfg: &ShmemConfig,
) -> Result<CgPoint, ShmemBenchError> {
    let call = "NPB CG";
    let bad = |reason: String| ShmemBenchError::Call(ShmemError::BadArgument { call, reason });
    let Some(&(_, na, nonzer, niter)) = CG_CLASSES.iter().find(|c| c.0 == class.to_ascii_uppercase()) else {
        return Err(bad(format!("class {class}: one of S, W, A, B, C, D, E")));
    };
    if npes < 2 || npes as u64 > na {
        return Err(bad(format!("{npes} PEs: needs 2 to the class's order {na}")));
    }
    if iterations == 0 || flops <= 0.0 || !flops.is_finite() {
        return Err(bad("needs at least one iteration and a positive flop rate".into()));
    }
    // Each PE's pieces of the vector: (first entry, entries).
    let p = npes as u64;
    let pieces: Vec<Vec<(u64, u64)>> = match partition {
        // Rows p·na/P … (p+1)·na/P − 1 (as NPB splits an order that P does not divide).
        CgPartition::RowBlock => (0..p)
            .map(|q| vec![(q * na / p, (q + 1) * na / p - q * na / p)])
            .collect(),
        CgPartition::BlockCyclic { block } => {
            if block == 0 || na % (block * p) != 0 {
                return Err(bad(format!(
                    "block of {block} rows: {npes} PEs × the block must divide the order {na}"
                )));
            }
            (0..p)
                .map(|q| (0..na / (block * p)).map(|b| ((b * p + q) * block, block)).collect())
                .collect()
        }
    };
    if exchange == CgExchange::Allgather && partition != CgPartition::RowBlock {
        return Err(bad("the allgather exchange needs the row-block partition".into()));
    }
    let pieces: Rc<[Vec<(u64, u64)>]> = pieces.into();
    let largest = pieces.iter().flatten().map(|x| x.1).max().unwrap_or(1);
    let pieces_per_pe = pieces[0].len() as u64;
    // The heap holds the vector, a piece and the dot products: grow it if the class needs it.
    let mut cfg = cfg.clone();
    cfg.heap = cfg.heap.max((na + largest) * 8 + 64 * 1024);
    let cfg = &cfg;
    let nnz = na * (nonzer + 1) * (nonzer + 1);
    let work = SimTime::from_ps(((2 * nnz + 10 * na) as f64 / npes as f64 / flops * 1e12).round() as u64);
    let s = span();
    let comm = Rc::new(RefCell::new(SimTime::ZERO));
    let intact = Rc::new(RefCell::new(0usize));
    let (sp, cm, ok) = (s.clone(), comm.clone(), intact.clone());
    // Value of vector entry `i` in iteration `it` (owner-independent, so copies can be checked).
    let value = |i: u64, it: u64| (i * 7 + it * 13) as f64;
    // The whole vector of the last iteration, built once: every PE's copy is compared with it
    // (one memory comparison per PE instead of an entry-by-entry rebuild).
    let expected: Rc<[u8]> = (0..na).flat_map(|i| value(i, iterations - 1).to_le_bytes()).collect();
    run_job(world, npes, cfg, move |mut pe, _| {
        let (s, cm, ok, pieces) = (sp.clone(), cm.clone(), ok.clone(), pieces.clone());
        let expected = expected.clone();
        async move {
            let me = pe.my_pe();
            let vec = pe.malloc(na * 8).await?;
            let dots = pe.malloc(16).await?;
            let sums = pe.malloc(16).await?;
            let scratch = pe.malloc(largest * 8).await?;
            let team = hpcnet_shmem::Team::world(&pe);
            let n = pe.n_pes();
            pe.barrier_all().await?;
            let t0 = pe.now();
            let mut waited = SimTime::ZERO;
            for it in 0..iterations {
                // My pieces of this iteration's direction vector, in my copy.
                let mine = &pieces[me];
                for &(first, len) in mine.iter() {
                    let mut bytes = Vec::with_capacity(len as usize * 8);
                    for i in first..first + len {
                        bytes.extend_from_slice(&value(i, it).to_le_bytes());
                    }
                    pe.write_bytes(vec.at(first * 8).with_len(len * 8), &bytes)?;
                }
                let c0 = pe.now();
                match exchange {
                    CgExchange::OwnerPuts => {
                        for k in 1..n {
                            let peer = (me + k) % n;
                            for &(first, len) in mine.iter() {
                                let at = vec.at(first * 8).with_len(len * 8);
                                pe.put_from_nbi(at, at, len * 8, peer).await?;
                            }
                        }
                        pe.barrier_all().await?;
                    }
                    CgExchange::Allgather => {
                        let (first, len) = mine[0];
                        let own = pe.read_bytes(vec.at(first * 8).with_len(len * 8))?;
                        pe.write_bytes(scratch.with_len(len * 8), &own)?;
                        pe.collect::<f64>(&team, vec, scratch, len).await?;
                    }
                }
                waited += pe.now() - c0;
                pe.compute(work).await;
                // Two dot products per CG iteration.
                for _ in 0..2 {
                    pe.write_bytes(dots.with_len(8), &1.0f64.to_le_bytes())?;
                    let c1 = pe.now();
                    pe.reduce::<f64>(&team, sums, dots, 1, hpcnet_shmem::ShmemOp::Sum)
                        .await?;
                    waited += pe.now() - c1;
                }
            }
            mark(&s, t0, pe.now());
            {
                let mut c = cm.borrow_mut();
                *c = (*c).max(waited);
            }
            // Every copy holds every owner's values of the last iteration.
            let got = pe.read_bytes(vec.with_len(na * 8))?;
            if got[..] == expected[..] {
                *ok.borrow_mut() += 1;
            } else {
                return Err(ShmemError::BadArgument {
                    call,
                    reason: format!("PE {me}: its copy of the vector misses values of other PEs"),
                });
            }
            Ok(())
        }
    })?;
    debug_assert_eq!(*intact.borrow(), npes);
    let per = elapsed(&s).as_ns_f64() / iterations as f64;
    let waited = *comm.borrow();
    let messages_per_pe = match exchange {
        CgExchange::OwnerPuts => (npes as u64 - 1) * pieces_per_pe,
        CgExchange::Allgather => (npes as u64).next_power_of_two().trailing_zeros() as u64,
    };
    Ok(CgPoint {
        class: class.to_ascii_uppercase(),
        pes: npes,
        partition,
        exchange,
        iterations,
        iteration_us: per / 1e3,
        communication_us: waited.as_ns_f64() / iterations as f64 / 1e3,
        class_time_s: per * (niter * 25) as f64 / 1e9,
        messages_per_pe,
    })
}
