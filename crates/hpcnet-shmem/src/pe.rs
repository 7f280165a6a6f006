//! One PE's handle: set-up, completions, the symmetric heap, remote memory access (put, get,
//! strided forms), atomics, and ordering (fence, quiet, syncreads).

use crate::fast::FastPlan;
use crate::heap::{AllocLog, Allocator};
use crate::{BarrierKind, ShmemConfig, ShmemError, Sym, MAX_HEAP};
use hpcnet_coll::Comm;
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{AtomicOp, Context, Cq, Machine, Mr, Qp, Rank, RemoteBuf, WriteWr};
use hpcnet_msg::NicBackend;
use hpcnet_nic::{Cqe, CqeStatus};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// Bytes of the library's fixed synchronisation words per PE (barrier flags, flush word, lock
/// nodes, split-phase barrier words); the fast barrier's mailboxes follow them.
pub(crate) const SYNC_BYTES: u64 = 4096;
/// Offset of the flush word (target of the acknowledged write behind a quiet).
pub(crate) const FLUSH_WORD: u64 = 0;
/// Split-phase barrier: arrival counter (on PE 0) and release word.
pub(crate) const NOTIFY_COUNT: u64 = 8;
pub(crate) const NOTIFY_RELEASE: u64 = 16;
/// MCS lock nodes: `LOCK_SLOTS` × (locked, next) u64 pairs.
pub(crate) const LOCK_NODES: u64 = 64;
pub(crate) const LOCK_SLOTS: u64 = 8;
/// Dissemination barrier flags: `BARRIER_SLOTS` teams × 32 rounds × u64.
pub(crate) const BARRIER_FLAGS: u64 = 1024;
pub(crate) const BARRIER_SLOTS: u64 = 8;

/// An integer type the atomics and point-synchronisation calls take (OpenSHMEM's standard AMO
/// types of 4 and 8 bytes).
pub trait ShmemInt: Copy + PartialOrd + std::fmt::Debug + 'static {
    const WIDTH: u8;
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Self;
}

macro_rules! shmem_int {
    ($t:ty, $w:expr) => {
        impl ShmemInt for $t {
            const WIDTH: u8 = $w;
            fn to_u64(self) -> u64 {
                self as u64
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
        }
    };
}
shmem_int!(i32, 4);
shmem_int!(u32, 4);
shmem_int!(i64, 8);
shmem_int!(u64, 8);

/// What an outstanding operation is, for its completion.
#[derive(Clone, Copy, Debug)]
enum Pending {
    /// A put (or non-fetching atomic) to `pe`: counts towards quiet.
    Write {
        call: &'static str,
        pe: usize,
        staged: bool,
    },
    /// An acknowledged flush write behind unacknowledged puts.
    Flush { pe: usize },
    /// A get or a fetching atomic, awaited by its caller or by syncreads/quiet.
    Read {
        call: &'static str,
        pe: usize,
        staged: bool,
    },
}

/// The outstanding operations of a PE by work-request id. Ids are handed out in increasing
/// order and operations mostly complete in that order, so they sit in a ring indexed by
/// `id - base`: an operation goes in at the back, a completion takes its slot, and completed
/// slots at the front are dropped. Insertion and removal cost O(1) amortised; the ring spans
/// the ids from the oldest outstanding operation to the newest.
#[derive(Default)]
struct PendingOps {
    /// Work-request id of the ring's front slot.
    base: u64,
    slots: VecDeque<Option<Pending>>,
}

impl PendingOps {
    /// Record operation `id`, the next id after every one recorded so far.
    #[inline]
    fn insert(&mut self, id: u64, p: Pending) {
        if self.slots.is_empty() {
            self.base = id;
        }
        debug_assert_eq!(id, self.base + self.slots.len() as u64, "work-request ids in order");
        self.slots.push_back(Some(p));
    }

    /// The operation `id`, taken out (None if it is not outstanding).
    #[inline]
    fn remove(&mut self, id: u64) -> Option<Pending> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        let p = self.slots.get_mut(i)?.take()?;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(p)
    }
}

/// Communicators of teams, made on first use: per member list, one handle per member (taken
/// by each member when it first needs it).
pub(crate) type TeamComms = HashMap<Rc<[usize]>, Vec<Option<Comm>>>;

/// What every PE shares: where everything is, the allocation log, the teams' communicators.
pub(crate) struct Shared {
    pub(crate) npes: usize,
    pub(crate) heap: Vec<RemoteBuf>,
    /// Every PE's second key of its heap: writes and atomics made after an odd number of fast
    /// barriers use it, so that the NIC counts them apart (the fast barrier's arrival count).
    pub(crate) heap_alt: Vec<u32>,
    pub(crate) sync: Vec<RemoteBuf>,
    pub(crate) allocs: AllocLog,
    pub(crate) comms: RefCell<TeamComms>,
    /// Barrier flag slots of teams (world is slot 0), in order of first use.
    pub(crate) barrier_slots: RefCell<Vec<Rc<[usize]>>>,
    pub(crate) cfg: ShmemConfig,
    pub(crate) in_order: bool,
    /// The fast barrier's rounds and mailboxes.
    pub(crate) fast: Rc<FastPlan>,
}

/// One PE of a SHMEM job. Calls are methods; those that communicate are `async`.
pub struct Pe {
    pub(crate) me: usize,
    pub(crate) ctx: Context,
    cq: Cq,
    pub(crate) heap: Mr,
    /// The heap under its second key (see [`Shared::heap_alt`]).
    heap_alt: Mr,
    pub(crate) sync: Mr,
    stage: Mr,
    qps: Vec<Option<Qp>>,
    pub(crate) shared: Rc<Shared>,
    alloc: Allocator,
    allocs_made: usize,
    next_wr: u64,
    pending: PendingOps,
    /// Puts since the last quiet that nobody acknowledged, per destination (ordered mode).
    unacked: Vec<bool>,
    /// Outstanding writes (puts, non-fetching atomics, flushes) and reads.
    writes: u64,
    reads: u64,
    /// Staging buffer: next free byte, and operations still using it.
    stage_top: u64,
    staged: u64,
    /// Messages this PE has sent into each PE's heap since its last fast barrier.
    pub(crate) sent: Vec<u64>,
    /// The fast barrier's partial sums (kept to reuse the allocation).
    pub(crate) fast_acc: Vec<u64>,
    /// Messages this PE expects to have arrived in its heap under each key (fast barrier).
    pub(crate) expected: [u64; 2],
    /// Per barrier slot: barriers done.
    pub(crate) epochs: Vec<u64>,
    /// Split-phase barrier: notifications sent / releases seen.
    pub(crate) notify_epoch: u64,
    pub(crate) notified: bool,
    /// Fast barriers done.
    pub(crate) fast_epoch: u64,
    /// This PE's communicators of teams.
    pub(crate) comms: HashMap<Rc<[usize]>, Comm>,
    /// Held or awaited locks: lock offset → node slot.
    pub(crate) locks: HashMap<u64, u64>,
    /// The host is busy with this PE's library calls until then ([`Pe::owe`]).
    busy_until: Cell<SimTime>,
}

pub(crate) fn init<B: NicBackend + 'static>(
    m: &Machine<B>,
    npes: usize,
    cfg: &ShmemConfig,
    external: Option<Vec<Box<dyn hpcnet_nic::ExternalBytes>>>,
) -> Result<Vec<Pe>, ShmemError> {
    let call = "shmem_init";
    if npes == 0 {
        return Err(ShmemError::BadArgument {
            call,
            reason: "a job needs at least one PE".into(),
        });
    }
    let ranks = m.context(Rank(0)).size();
    if npes > ranks {
        return Err(ShmemError::BadArgument {
            call,
            reason: format!("{npes} PEs asked, but the machine has {ranks} ranks"),
        });
    }
    if cfg.heap == 0 || cfg.heap > MAX_HEAP || !cfg.heap.is_multiple_of(8) {
        return Err(ShmemError::BadArgument {
            call,
            reason: format!(
                "symmetric heap of {} bytes: it must be a positive multiple of 8 bytes, at most {MAX_HEAP}",
                cfg.heap
            ),
        });
    }
    if cfg.reserved > cfg.heap || !cfg.reserved.is_multiple_of(8) {
        return Err(ShmemError::BadArgument {
            call,
            reason: format!(
                "{} reserved bytes: they must be a multiple of 8 within the symmetric heap of {} bytes",
                cfg.reserved, cfg.heap
            ),
        });
    }
    if let Some(ext) = &external {
        if ext.len() != npes {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("{} heaps given for {npes} PEs", ext.len()),
            });
        }
        if let Some((i, e)) = ext.iter().enumerate().find(|(_, e)| e.bytes().len() as u64 != cfg.heap) {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!(
                    "the heap of PE {i} has {} bytes, the job's heap {} bytes",
                    e.bytes().len(),
                    cfg.heap
                ),
            });
        }
    }
    if cfg.staging < 64 || cfg.staging > MAX_HEAP {
        return Err(ShmemError::BadArgument {
            call,
            reason: format!(
                "staging buffer of {} bytes: it must hold 64 bytes to {MAX_HEAP}",
                cfg.staging
            ),
        });
    }
    let ctxs: Vec<Context> = (0..npes).map(|i| m.context(Rank(i as u32))).collect();
    let heaps: Vec<Mr> = match external {
        None => ctxs.iter().map(|c| c.reg_mr(cfg.heap)).collect(),
        Some(ext) => ctxs.iter().zip(ext).map(|(c, e)| c.reg_mr_external(e)).collect(),
    };
    let fast = Rc::new(FastPlan::new(npes, cfg.fast_radix));
    let syncs: Vec<Mr> = ctxs.iter().map(|c| c.reg_mr(SYNC_BYTES + fast.bytes)).collect();
    let mut alts = Vec::with_capacity(npes);
    for (c, (h, s)) in ctxs.iter().zip(heaps.iter().zip(&syncs)) {
        let err = |source| ShmemError::Verbs { call, source };
        let alt = c.add_key(h).map_err(err)?;
        c.watch_memory(h).map_err(err)?;
        c.watch_memory(&alt).map_err(err)?;
        c.watch_memory(s).map_err(err)?;
        alts.push(alt);
    }
    let world: Rc<[usize]> = (0..npes).collect();
    let shared = Rc::new(Shared {
        npes,
        heap: heaps.iter().map(|h| h.remote(0)).collect(),
        heap_alt: alts.iter().map(|h| h.rkey).collect(),
        sync: syncs.iter().map(|s| s.remote(0)).collect(),
        allocs: AllocLog::default(),
        comms: RefCell::new(HashMap::new()),
        barrier_slots: RefCell::new(vec![world]),
        cfg: cfg.clone(),
        in_order: ctxs[0].in_order(),
        fast,
    });
    Ok(ctxs
        .into_iter()
        .zip(heaps.into_iter().zip(syncs).zip(alts))
        .enumerate()
        .map(|(me, (ctx, ((heap, sync), heap_alt)))| Pe {
            me,
            cq: ctx.create_cq(),
            stage: ctx.reg_mr(cfg.staging),
            ctx,
            heap,
            heap_alt,
            sync,
            qps: vec![None; npes],
            shared: shared.clone(),
            alloc: Allocator::with_reserved(cfg.heap, cfg.reserved),
            allocs_made: 0,
            next_wr: 0,
            pending: PendingOps::default(),
            unacked: vec![false; npes],
            writes: 0,
            reads: 0,
            stage_top: 0,
            staged: 0,
            busy_until: Cell::new(SimTime::ZERO),
            sent: vec![0; npes],
            fast_acc: Vec::new(),
            expected: [0; 2],
            epochs: vec![0; BARRIER_SLOTS as usize],
            notify_epoch: 0,
            notified: false,
            fast_epoch: 0,
            comms: HashMap::new(),
            locks: HashMap::new(),
        })
        .collect())
}

impl Pe {
    /// This PE's number (`shmem_my_pe`).
    pub fn my_pe(&self) -> usize {
        self.me
    }

    /// PEs in the job (`shmem_n_pes`).
    pub fn n_pes(&self) -> usize {
        self.shared.npes
    }

    /// Simulated time now.
    pub fn now(&self) -> SimTime {
        self.ctx.now()
    }

    /// The library's host costs this PE is charged ([`crate::ShmemCosts`]).
    pub fn costs(&self) -> &crate::ShmemCosts {
        &self.shared.cfg.costs
    }

    /// The verbs context of this PE (for programs that mix SHMEM with verbs calls).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The registered region holding this PE's symmetric heap (for tools and tests that look
    /// at a PE's memory from outside its program).
    pub fn heap_region(&self) -> &Mr {
        &self.heap
    }

    /// Whether `pe` can be reached with SHMEM calls (`shmem_pe_accessible`).
    pub fn pe_accessible(&self, pe: usize) -> bool {
        pe < self.shared.npes
    }

    /// Whether `sym` lies in the symmetric heap (`shmem_addr_accessible`).
    pub fn addr_accessible(&self, sym: Sym) -> bool {
        sym.off.checked_add(sym.len).is_some_and(|e| e <= self.shared.cfg.heap)
    }

    /// Spend `t` of host time (computation between calls).
    pub async fn compute(&self, t: SimTime) {
        if t > SimTime::ZERO {
            self.ctx.sleep(t).await;
        }
    }

    // ---- checks --------------------------------------------------------------------------

    pub(crate) fn check_pe(&self, call: &'static str, pe: usize) -> Result<(), ShmemError> {
        if pe < self.shared.npes {
            Ok(())
        } else {
            Err(ShmemError::NoSuchPe {
                call,
                pe,
                npes: self.shared.npes,
            })
        }
    }

    pub(crate) fn check_sym(&self, call: &'static str, off: u64, len: u64) -> Result<(), ShmemError> {
        let heap = self.shared.cfg.heap;
        if off.checked_add(len).is_none_or(|e| e > heap) {
            return Err(ShmemError::OutsideHeap { call, off, len, heap });
        }
        Ok(())
    }

    /// Charge `d` of host time without waiting for it yet: the PE is busy until `d` after now
    /// or after the host time already owed, whichever is later. Only work nothing outside the
    /// PE can observe (bookkeeping, stores into its own staging buffer) goes on meanwhile;
    /// [`Pe::settle`] waits for the owed time before the PE posts an operation, looks at its
    /// completion queue, creates a queue pair or returns from the call. The PE's timeline is
    /// the one of waiting for each cost in turn, with one timer for consecutive costs (the
    /// entry cost and the post of a put, get or atomic) instead of one each.
    fn owe(&self, d: SimTime) {
        if d > SimTime::ZERO {
            let now = self.ctx.now();
            self.busy_until.set(self.busy_until.get().max(now) + d);
        }
    }

    /// Wait until the host time owed so far has passed.
    async fn settle(&self) {
        let until = self.busy_until.get();
        if until > SimTime::ZERO {
            let now = self.ctx.now();
            if until > now {
                self.ctx.sleep(until - now).await;
            }
        }
    }

    /// Library entry whose host time is owed ([`Pe::owe`]), for calls that post at once.
    fn enter_owed(&self, copied: u64) {
        self.owe(self.shared.cfg.costs.per_call + self.copy_time(copied));
    }

    /// Library entry: the call's host time, plus a copy of `copied` bytes.
    pub(crate) async fn enter(&self, copied: u64) {
        let t = self.shared.cfg.costs.per_call + self.copy_time(copied);
        if t > SimTime::ZERO {
            self.ctx.sleep(t).await;
        }
    }

    /// CPU time of copying `bytes` (`copy_rate`).
    fn copy_time(&self, bytes: u64) -> SimTime {
        let c = &self.shared.cfg.costs;
        if bytes > 0 && c.copy_rate.0 > 0 {
            SimTime::from_ps(bytes.saturating_mul(8).saturating_mul(1_000_000_000_000) / c.copy_rate.0)
        } else {
            SimTime::ZERO
        }
    }

    /// Host time of copying `bytes` into the staging buffer.
    pub(crate) async fn copying(&self, bytes: u64) {
        let t = self.copy_time(bytes);
        if t > SimTime::ZERO {
            self.ctx.sleep(t).await;
        }
    }

    /// Host time of handing the NIC one operation (`per_post`), after the host time owed,
    /// before it is posted.
    pub(crate) async fn posting(&self) {
        self.owe(self.shared.cfg.costs.per_post);
        self.settle().await;
    }

    /// Host time of looking again after a wait (`per_poll`).
    pub(crate) async fn looked(&self) {
        let t = self.shared.cfg.costs.per_poll;
        if t > SimTime::ZERO {
            self.ctx.sleep(t).await;
        }
    }

    /// Wait until the NIC next writes into this PE's memory, then pay the look at it.
    pub(crate) async fn woken(&self) {
        self.ctx.memory_changed().await;
        self.looked().await;
    }

    /// The queue pair to `pe`, created on first use once the host time owed has passed (queue
    /// pair numbers are handed out in creation order across PEs).
    async fn qp_settled(&mut self, pe: usize) -> Qp {
        if self.qps[pe].is_none() {
            self.settle().await;
        }
        self.qp(pe)
    }

    fn qp(&mut self, pe: usize) -> Qp {
        if self.qps[pe].is_none() {
            self.qps[pe] = Some(self.ctx.create_qp(&self.cq, Rank(pe as u32)));
        }
        self.qps[pe].clone().expect("made above")
    }

    fn wr(&mut self, p: Pending) -> u64 {
        self.next_wr += 1;
        self.pending.insert(self.next_wr, p);
        self.next_wr
    }

    // ---- completions ----------------------------------------------------------------------

    async fn next_cqe(&self) -> Cqe {
        self.settle().await;
        match self.cq.poll() {
            Some(c) => c,
            None => {
                let c = self.cq.next().await;
                self.looked().await;
                c
            }
        }
    }

    /// Book a completion; its error, if the operation failed.
    fn account(&mut self, c: &Cqe) -> Result<(), ShmemError> {
        let Some(p) = self.pending.remove(c.wr_id) else {
            return Ok(());
        };
        let (call, pe, staged) = match p {
            Pending::Write { call, pe, staged } => {
                self.writes -= 1;
                (call, pe, staged)
            }
            Pending::Flush { pe } => {
                self.writes -= 1;
                ("shmem_quiet", pe, true)
            }
            Pending::Read { call, pe, staged } => {
                self.reads -= 1;
                (call, pe, staged)
            }
        };
        if staged {
            self.staged -= 1;
            if self.staged == 0 {
                self.stage_top = 0;
            }
        }
        if c.status != CqeStatus::Ok {
            return Err(ShmemError::Failed {
                call,
                pe,
                status: c.status.clone(),
            });
        }
        Ok(())
    }

    /// Wait for the completion of operation `wr`, booking the others on the way.
    async fn wait_wr(&mut self, wr: u64) -> Result<Cqe, ShmemError> {
        loop {
            let c = self.next_cqe().await;
            self.account(&c)?;
            if c.wr_id == wr {
                return Ok(c);
            }
        }
    }

    /// Wait until no write (or, with `reads`, no read either) is outstanding.
    async fn drain(&mut self, reads: bool) -> Result<(), ShmemError> {
        while self.writes > 0 || (reads && self.reads > 0) {
            let c = self.next_cqe().await;
            self.account(&c)?;
        }
        Ok(())
    }

    /// `len` bytes of the staging buffer (waiting for staged operations to finish when full).
    async fn stage(&mut self, len: u64) -> Result<u64, ShmemError> {
        let len = len.div_ceil(8) * 8;
        if self.stage_top + len > self.stage.len {
            while self.staged > 0 {
                let c = self.next_cqe().await;
                self.account(&c)?;
            }
            self.stage_top = 0;
        }
        let off = self.stage_top;
        self.stage_top += len;
        Ok(off)
    }

    fn verbs(call: &'static str) -> impl Fn(hpcnet_msg::verbs::VerbsError) -> ShmemError {
        move |source| ShmemError::Verbs { call, source }
    }

    // ---- symmetric heap -------------------------------------------------------------------

    async fn collective_alloc(
        &mut self,
        call: &'static str,
        what: String,
        len: u64,
        align: u64,
    ) -> Result<Sym, ShmemError> {
        self.shared.allocs.check(call, self.allocs_made, self.me, what)?;
        self.allocs_made += 1;
        let off = self.alloc.alloc(call, len, align)?;
        self.barrier_all().await?;
        Ok(Sym { off, len })
    }

    /// Allocate `len` bytes of the symmetric heap, 8-byte aligned (`shmem_malloc`). Collective:
    /// every PE must make the same allocation calls in the same order; ends with a barrier.
    pub async fn malloc(&mut self, len: u64) -> Result<Sym, ShmemError> {
        self.collective_alloc("shmem_malloc", format!("malloc({len})"), len, 8)
            .await
    }

    /// `shmem_calloc`: `count` zeroed elements of `size` bytes.
    pub async fn calloc(&mut self, count: u64, size: u64) -> Result<Sym, ShmemError> {
        let call = "shmem_calloc";
        let len = count.checked_mul(size).ok_or(ShmemError::BadArgument {
            call,
            reason: format!("{count} × {size} bytes overflows"),
        })?;
        let s = self
            .collective_alloc(call, format!("calloc({count}, {size})"), len, 8)
            .await?;
        // Freed memory may hold old bytes: zero it (a local store).
        self.ctx
            .write_local(&self.heap, s.off, &vec![0; len as usize])
            .map_err(Self::verbs(call))?;
        Ok(s)
    }

    /// `shmem_align`: `len` bytes aligned to `align` (a power of two).
    pub async fn align(&mut self, align: u64, len: u64) -> Result<Sym, ShmemError> {
        let call = "shmem_align";
        if !align.is_power_of_two() {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("alignment {align} is not a power of two"),
            });
        }
        self.collective_alloc(call, format!("align({align}, {len})"), len, align.max(8))
            .await
    }

    /// `shmem_free`: collective; starts with a barrier.
    pub async fn free(&mut self, sym: Sym) -> Result<(), ShmemError> {
        let call = "shmem_free";
        self.shared
            .allocs
            .check(call, self.allocs_made, self.me, format!("free({:#x})", sym.off))?;
        self.allocs_made += 1;
        self.barrier_all().await?;
        self.alloc.free(call, sym.off)?;
        Ok(())
    }

    /// The symmetric object allocated at `off` (for programs that keep offsets).
    pub fn sym_at(&self, off: u64) -> Option<Sym> {
        self.alloc.len_of(off).map(|len| Sym { off, len })
    }

    /// CPU load of this PE's own copy of `sym`.
    pub fn read_bytes(&self, sym: Sym) -> Result<Vec<u8>, ShmemError> {
        self.check_sym("local load", sym.off, sym.len)?;
        self.ctx
            .read_local(&self.heap, sym.off, sym.len)
            .map_err(Self::verbs("local load"))
    }

    /// CPU store into this PE's own copy of `sym` (at its start).
    pub fn write_bytes(&self, sym: Sym, bytes: &[u8]) -> Result<(), ShmemError> {
        self.check_sym("local store", sym.off, bytes.len() as u64)?;
        self.ctx
            .write_local(&self.heap, sym.off, bytes)
            .map_err(Self::verbs("local store"))
    }

    /// CPU load of element `i` of this PE's copy of `sym` seen as `T`s.
    pub fn read<T: ShmemInt>(&self, sym: Sym, i: u64) -> Result<T, ShmemError> {
        let w = u64::from(T::WIDTH);
        let e = sym.at(i * w);
        if e.len < w {
            return Err(ShmemError::OutsideHeap {
                call: "local load",
                off: e.off,
                len: w,
                heap: sym.off + sym.len,
            });
        }
        let b = self.read_bytes(Sym { off: e.off, len: w })?;
        let mut a = [0u8; 8];
        a[..b.len()].copy_from_slice(&b);
        Ok(T::from_u64(u64::from_le_bytes(a)))
    }

    /// CPU store of `v` as element `i` of this PE's copy of `sym`.
    pub fn write<T: ShmemInt>(&self, sym: Sym, i: u64, v: T) -> Result<(), ShmemError> {
        let w = usize::from(T::WIDTH);
        let e = sym.at(i * w as u64);
        if e.len < w as u64 {
            return Err(ShmemError::OutsideHeap {
                call: "local store",
                off: e.off,
                len: w as u64,
                heap: sym.off + sym.len,
            });
        }
        self.write_bytes(e, &v.to_u64().to_le_bytes()[..w])
    }

    // ---- put ------------------------------------------------------------------------------

    /// Post one write of `len` bytes from `local` at `loff` to `pe`'s `region` at `roff`;
    /// `counted`: it lands in the heap (the fast barrier counts it).
    #[allow(clippy::too_many_arguments)]
    fn post_write(
        &mut self,
        call: &'static str,
        pe: usize,
        remote: RemoteBuf,
        local: (&Mr, u64),
        len: u64,
        staged: bool,
        counted: bool,
    ) -> Result<(), ShmemError> {
        let qp = self.qp(pe);
        let wr = self.wr(Pending::Write { call, pe, staged });
        self.writes += 1;
        if staged {
            self.staged += 1;
        }
        let mut w = WriteWr::new(local.0, local.1, len, remote).wr_id(wr);
        if self.shared.in_order {
            // Ordered delivery: acknowledge only a flush behind the last write (at quiet).
            w = w.local_completion();
            self.unacked[pe] = true;
        }
        qp.post_write(w).map_err(Self::verbs(call))?;
        if counted {
            self.sent[pe] += 1;
        }
        Ok(())
    }

    /// Byte `off` of `pe`'s heap, under the key of the current fast-barrier epoch: messages
    /// sent after an even number of fast barriers use the heap's first key, the others its
    /// second, so that a PE still in a fast barrier does not count a message sent after it.
    pub(crate) fn heap_remote(&self, pe: usize, off: u64) -> RemoteBuf {
        let b = self.shared.heap[pe];
        let rkey = if self.fast_epoch.is_multiple_of(2) {
            b.rkey
        } else {
            self.shared.heap_alt[pe]
        };
        RemoteBuf {
            addr: b.addr + off,
            rkey,
            ..b
        }
    }

    /// Whether `r` names `pe`'s heap (under either key).
    fn is_heap(&self, pe: usize, r: &RemoteBuf) -> bool {
        r.rkey == self.shared.heap[pe].rkey || r.rkey == self.shared.heap_alt[pe]
    }

    pub(crate) fn sync_remote(&self, pe: usize, off: u64) -> RemoteBuf {
        let b = self.shared.sync[pe];
        RemoteBuf {
            addr: b.addr + off,
            ..b
        }
    }

    /// Put private bytes into `pe`'s copy of `dest` (at its start), through the staging buffer.
    async fn put_staged(
        &mut self,
        call: &'static str,
        remote: impl Fn(&Self, u64) -> RemoteBuf,
        pe: usize,
        bytes: &[u8],
        counted: bool,
    ) -> Result<(), ShmemError> {
        let piece = self.stage.len;
        let mut done = 0u64;
        let total = bytes.len() as u64;
        while done < total || (total == 0 && done == 0) {
            let len = (total - done).min(piece);
            let off = self.stage(len).await?;
            self.ctx
                .write_local(&self.stage, off, &bytes[done as usize..(done + len) as usize])
                .map_err(Self::verbs(call))?;
            let stage = self.stage.clone();
            let r = remote(self, done);
            self.posting().await;
            self.post_write(call, pe, r, (&stage, off), len, true, counted)?;
            done += len;
            if total == 0 {
                break;
            }
        }
        Ok(())
    }

    /// `shmem_putmem` / `shmem_put`: copy `src` (private data) into `pe`'s copy of `dest`.
    /// Returns when `src` may be reused: the bytes were copied into the staging buffer.
    pub async fn put_bytes(&mut self, dest: Sym, src: &[u8], pe: usize) -> Result<(), ShmemError> {
        let call = "shmem_putmem";
        self.check_pe(call, pe)?;
        self.check_sym(call, dest.off, src.len() as u64)?;
        self.enter_owed(src.len() as u64);
        let off = dest.off;
        let r = self
            .put_staged(call, move |s, d| s.heap_remote(pe, off + d), pe, src, true)
            .await;
        self.settle().await;
        r
    }

    /// Typed put of integers.
    pub async fn put<T: ShmemInt>(&mut self, dest: Sym, src: &[T], pe: usize) -> Result<(), ShmemError> {
        let bytes: Vec<u8> = src
            .iter()
            .flat_map(|v| v.to_u64().to_le_bytes()[..usize::from(T::WIDTH)].to_vec())
            .collect();
        self.put_bytes(dest, &bytes, pe).await
    }

    /// `shmem_p`: one element.
    pub async fn p<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<(), ShmemError> {
        self.put(dest, &[v], pe).await
    }

    /// `shmem_putmem_nbi` from symmetric data: `len` bytes of this PE's copy of `src` into
    /// `pe`'s copy of `dest`, zero-copy; `src` must not change until the next quiet.
    pub async fn put_from_nbi(&mut self, dest: Sym, src: Sym, len: u64, pe: usize) -> Result<(), ShmemError> {
        let call = "shmem_putmem_nbi";
        self.check_pe(call, pe)?;
        self.check_sym(call, dest.off, len)?;
        self.check_sym(call, src.off, len)?;
        self.enter_owed(0);
        let heap = self.heap.clone();
        let r = self.heap_remote(pe, dest.off);
        self.posting().await;
        self.post_write(call, pe, r, (&heap, src.off), len, false, true)
    }

    /// `shmem_putmem` from symmetric data: returns when this PE's `src` may be reused (its
    /// bytes have left the NIC, or, without ordered delivery, have been acknowledged).
    pub async fn put_from(&mut self, dest: Sym, src: Sym, len: u64, pe: usize) -> Result<(), ShmemError> {
        self.put_from_nbi(dest, src, len, pe).await?;
        let wr = self.next_wr;
        self.wait_wr(wr).await.map(|_| ())
    }

    /// `shmem_iput`: `nelems` elements of `T` from private `src` (every `sst`-th) into `pe`'s
    /// `dest` (every `dst`-th), one put per element.
    pub async fn iput<T: ShmemInt>(
        &mut self,
        dest: Sym,
        src: &[T],
        dst: u64,
        sst: u64,
        nelems: u64,
        pe: usize,
    ) -> Result<(), ShmemError> {
        let call = "shmem_iput";
        if dst == 0 || sst == 0 {
            return Err(ShmemError::BadArgument {
                call,
                reason: "strides must be positive".into(),
            });
        }
        if nelems > 0 && (nelems - 1) * sst >= src.len() as u64 {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!(
                    "{nelems} elements at stride {sst} need {} source elements, {} given",
                    (nelems - 1) * sst + 1,
                    src.len()
                ),
            });
        }
        let w = u64::from(T::WIDTH);
        for i in 0..nelems {
            self.put(dest.at(i * dst * w), &[src[(i * sst) as usize]], pe).await?;
        }
        Ok(())
    }

    // ---- get ------------------------------------------------------------------------------

    /// `shmem_getmem_nbi` into symmetric memory: `len` bytes of `pe`'s copy of `src` into this
    /// PE's copy of `dest`; complete after `quiet` or `syncreads`.
    pub async fn get_into_nbi(&mut self, dest: Sym, src: Sym, len: u64, pe: usize) -> Result<(), ShmemError> {
        let call = "shmem_getmem_nbi";
        self.check_pe(call, pe)?;
        self.check_sym(call, dest.off, len)?;
        self.check_sym(call, src.off, len)?;
        self.enter_owed(0);
        let heap = self.heap.clone();
        self.posting().await;
        self.post_read(call, pe, (&heap, dest.off), self.heap_remote(pe, src.off), len, false)?;
        Ok(())
    }

    fn post_read(
        &mut self,
        call: &'static str,
        pe: usize,
        local: (&Mr, u64),
        remote: RemoteBuf,
        len: u64,
        staged: bool,
    ) -> Result<u64, ShmemError> {
        let qp = self.qp(pe);
        let wr = self.wr(Pending::Read { call, pe, staged });
        self.reads += 1;
        if staged {
            self.staged += 1;
        }
        qp.post_read(local.0, local.1, len, remote, wr)
            .map_err(Self::verbs(call))?;
        Ok(wr)
    }

    /// `shmem_getmem`: `len` bytes of `pe`'s copy of `src` (blocking).
    pub async fn get_bytes(&mut self, src: Sym, len: u64, pe: usize) -> Result<Vec<u8>, ShmemError> {
        let call = "shmem_getmem";
        self.check_pe(call, pe)?;
        self.check_sym(call, src.off, len)?;
        self.enter(0).await;
        let mut out = Vec::with_capacity(len as usize);
        let piece = self.stage.len;
        let mut done = 0;
        while done < len {
            let l = (len - done).min(piece);
            let off = self.stage(l).await?;
            let stage = self.stage.clone();
            self.posting().await;
            let wr = self.post_read(call, pe, (&stage, off), self.heap_remote(pe, src.off + done), l, true)?;
            self.wait_wr(wr).await?;
            self.ctx
                .read_local_append(&self.stage, off, l, &mut out)
                .map_err(Self::verbs(call))?;
            done += l;
        }
        // The copy out of the staging buffer.
        self.enter(len).await;
        Ok(out)
    }

    /// Typed blocking get of `n` integers.
    pub async fn get<T: ShmemInt>(&mut self, src: Sym, n: u64, pe: usize) -> Result<Vec<T>, ShmemError> {
        let w = usize::from(T::WIDTH);
        let b = self.get_bytes(src, n * w as u64, pe).await?;
        Ok(b.chunks(w)
            .map(|c| {
                let mut a = [0u8; 8];
                a[..w].copy_from_slice(c);
                T::from_u64(u64::from_le_bytes(a))
            })
            .collect())
    }

    /// `shmem_g`: one element.
    pub async fn g<T: ShmemInt>(&mut self, src: Sym, pe: usize) -> Result<T, ShmemError> {
        Ok(self.get::<T>(src, 1, pe).await?[0])
    }

    /// `shmem_iget`: `nelems` elements from `pe`'s `src` (every `sst`-th), returned in order
    /// (the caller places them at its own stride).
    pub async fn iget<T: ShmemInt>(
        &mut self,
        src: Sym,
        sst: u64,
        nelems: u64,
        pe: usize,
    ) -> Result<Vec<T>, ShmemError> {
        if sst == 0 {
            return Err(ShmemError::BadArgument {
                call: "shmem_iget",
                reason: "strides must be positive".into(),
            });
        }
        let w = u64::from(T::WIDTH);
        let mut out = Vec::with_capacity(nelems as usize);
        for i in 0..nelems {
            out.push(self.g::<T>(src.at(i * sst * w), pe).await?);
        }
        Ok(out)
    }

    // ---- atomics --------------------------------------------------------------------------

    /// Post an atomic on `pe`'s `target`; the old value when `fetch`.
    pub(crate) async fn amo<T: ShmemInt>(
        &mut self,
        call: &'static str,
        op: AtomicOp,
        target: RemoteBuf,
        (operand, compare): (T, T),
        pe: usize,
        fetch: bool,
    ) -> Result<Option<T>, ShmemError> {
        self.check_pe(call, pe)?;
        if !target.addr.is_multiple_of(u64::from(T::WIDTH)) {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!(
                    "address {:#x} is not aligned to the {} bytes of the type",
                    target.addr,
                    T::WIDTH
                ),
            });
        }
        self.enter_owed(0);
        let qp = self.qp_settled(pe).await;
        let p = if fetch {
            self.reads += 1;
            Pending::Read {
                call,
                pe,
                staged: false,
            }
        } else {
            self.writes += 1;
            Pending::Write {
                call,
                pe,
                staged: false,
            }
        };
        self.posting().await;
        let wr = self.wr(p);
        let r = if T::WIDTH == 4 {
            qp.post_atomic32(op, target, operand.to_u64() as u32, compare.to_u64() as u32, None, wr)
        } else {
            qp.post_atomic(op, target, operand.to_u64(), compare.to_u64(), None, wr)
        };
        r.map_err(Self::verbs(call))?;
        if self.is_heap(pe, &target) {
            self.sent[pe] += 1;
        }
        if !fetch {
            return Ok(None);
        }
        let c = self.wait_wr(wr).await?;
        Ok(Some(T::from_u64(c.value)))
    }

    fn amo_target<T: ShmemInt>(&self, call: &'static str, dest: Sym, pe: usize) -> Result<RemoteBuf, ShmemError> {
        self.check_pe(call, pe)?;
        self.check_sym(call, dest.off, u64::from(T::WIDTH))?;
        Ok(self.heap_remote(pe, dest.off))
    }

    /// `shmem_atomic_fetch`.
    pub async fn atomic_fetch<T: ShmemInt>(&mut self, src: Sym, pe: usize) -> Result<T, ShmemError> {
        let call = "shmem_atomic_fetch";
        let t = self.amo_target::<T>(call, src, pe)?;
        let zero = T::from_u64(0);
        Ok(self
            .amo(call, AtomicOp::Add, t, (zero, zero), pe, true)
            .await?
            .expect("fetching"))
    }

    /// `shmem_atomic_set`.
    pub async fn atomic_set<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<(), ShmemError> {
        let call = "shmem_atomic_set";
        let t = self.amo_target::<T>(call, dest, pe)?;
        self.amo(call, AtomicOp::Swap, t, (v, v), pe, false).await.map(|_| ())
    }

    /// `shmem_atomic_swap`: the old value.
    pub async fn atomic_swap<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<T, ShmemError> {
        let call = "shmem_atomic_swap";
        let t = self.amo_target::<T>(call, dest, pe)?;
        Ok(self
            .amo(call, AtomicOp::Swap, t, (v, v), pe, true)
            .await?
            .expect("fetching"))
    }

    /// `shmem_atomic_compare_swap`: writes `v` if the value equals `cond`; the old value.
    pub async fn atomic_compare_swap<T: ShmemInt>(
        &mut self,
        dest: Sym,
        cond: T,
        v: T,
        pe: usize,
    ) -> Result<T, ShmemError> {
        let call = "shmem_atomic_compare_swap";
        let t = self.amo_target::<T>(call, dest, pe)?;
        Ok(self
            .amo(call, AtomicOp::CompareSwap, t, (v, cond), pe, true)
            .await?
            .expect("fetching"))
    }

    /// `shmem_atomic_add` (non-fetching: complete at the next quiet).
    pub async fn atomic_add<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<(), ShmemError> {
        self.op_nf("shmem_atomic_add", AtomicOp::Add, dest, v, pe).await
    }

    /// `shmem_atomic_inc`.
    pub async fn atomic_inc<T: ShmemInt>(&mut self, dest: Sym, pe: usize) -> Result<(), ShmemError> {
        self.op_nf("shmem_atomic_inc", AtomicOp::Add, dest, T::from_u64(1), pe)
            .await
    }

    /// `shmem_atomic_and`.
    pub async fn atomic_and<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<(), ShmemError> {
        self.op_nf("shmem_atomic_and", AtomicOp::And, dest, v, pe).await
    }

    /// `shmem_atomic_or`.
    pub async fn atomic_or<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<(), ShmemError> {
        self.op_nf("shmem_atomic_or", AtomicOp::Or, dest, v, pe).await
    }

    /// `shmem_atomic_xor`.
    pub async fn atomic_xor<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<(), ShmemError> {
        self.op_nf("shmem_atomic_xor", AtomicOp::Xor, dest, v, pe).await
    }

    /// `shmem_atomic_fetch_add`.
    pub async fn atomic_fetch_add<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<T, ShmemError> {
        self.op_f("shmem_atomic_fetch_add", AtomicOp::FetchAdd, dest, v, pe)
            .await
    }

    /// `shmem_atomic_fetch_inc`.
    pub async fn atomic_fetch_inc<T: ShmemInt>(&mut self, dest: Sym, pe: usize) -> Result<T, ShmemError> {
        self.op_f("shmem_atomic_fetch_inc", AtomicOp::FetchAdd, dest, T::from_u64(1), pe)
            .await
    }

    /// `shmem_atomic_fetch_and`.
    pub async fn atomic_fetch_and<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<T, ShmemError> {
        self.op_f("shmem_atomic_fetch_and", AtomicOp::And, dest, v, pe).await
    }

    /// `shmem_atomic_fetch_or`.
    pub async fn atomic_fetch_or<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<T, ShmemError> {
        self.op_f("shmem_atomic_fetch_or", AtomicOp::Or, dest, v, pe).await
    }

    /// `shmem_atomic_fetch_xor`.
    pub async fn atomic_fetch_xor<T: ShmemInt>(&mut self, dest: Sym, v: T, pe: usize) -> Result<T, ShmemError> {
        self.op_f("shmem_atomic_fetch_xor", AtomicOp::Xor, dest, v, pe).await
    }

    async fn op_nf<T: ShmemInt>(
        &mut self,
        call: &'static str,
        op: AtomicOp,
        dest: Sym,
        v: T,
        pe: usize,
    ) -> Result<(), ShmemError> {
        let t = self.amo_target::<T>(call, dest, pe)?;
        self.amo(call, op, t, (v, v), pe, false).await.map(|_| ())
    }

    async fn op_f<T: ShmemInt>(
        &mut self,
        call: &'static str,
        op: AtomicOp,
        dest: Sym,
        v: T,
        pe: usize,
    ) -> Result<T, ShmemError> {
        let t = self.amo_target::<T>(call, dest, pe)?;
        Ok(self.amo(call, op, t, (v, v), pe, true).await?.expect("fetching"))
    }

    // ---- ordering -------------------------------------------------------------------------

    /// `shmem_fence`: puts and atomics to one PE issued before arrive before those issued
    /// after. Free when the machine keeps a pair's order; otherwise a quiet.
    pub async fn fence(&mut self) -> Result<(), ShmemError> {
        if self.shared.in_order {
            return Ok(());
        }
        self.quiet().await
    }

    /// `shmem_quiet`: every put, atomic and non-blocking get issued so far is complete. With
    /// ordered delivery, one acknowledged flush write per destination written since the last
    /// quiet stands for all the writes before it.
    pub async fn quiet(&mut self) -> Result<(), ShmemError> {
        self.enter_owed(0);
        let r = self.quiet_owed().await;
        self.settle().await;
        r
    }

    /// [`Pe::quiet`] after its entry, whose host time is owed.
    async fn quiet_owed(&mut self) -> Result<(), ShmemError> {
        if self.shared.in_order {
            for pe in 0..self.shared.npes {
                if !std::mem::take(&mut self.unacked[pe]) {
                    continue;
                }
                let qp = self.qp(pe);
                let off = self.stage(8).await?;
                let wr = self.wr(Pending::Flush { pe });
                self.writes += 1;
                self.staged += 1;
                let w = WriteWr::new(&self.stage, off, 8, self.sync_remote(pe, FLUSH_WORD)).wr_id(wr);
                self.posting().await;
                qp.post_write(w).map_err(Self::verbs("shmem_quiet"))?;
            }
        }
        self.drain(true).await
    }

    /// `shmem_syncreads` (spec 03): block until every issued get has returned.
    pub async fn syncreads(&mut self) -> Result<(), ShmemError> {
        self.enter(0).await;
        while self.reads > 0 {
            let c = self.next_cqe().await;
            self.account(&c)?;
        }
        Ok(())
    }

    /// Whether this machine keeps the order of a pair's messages (fence is then free).
    pub fn ordered_delivery(&self) -> bool {
        self.shared.in_order
    }

    /// The barrier [`Pe::barrier_all`] runs.
    pub fn barrier_kind(&self) -> BarrierKind {
        self.shared.cfg.barrier
    }

    /// Post an 8-byte write of `v` into `pe`'s synchronisation region at `off` (library
    /// protocol messages: barrier flags, lock hand-over).
    pub(crate) async fn sync_put(&mut self, pe: usize, off: u64, v: u64) -> Result<(), ShmemError> {
        let s = self.stage(8).await?;
        self.ctx
            .write_local(&self.stage, s, &v.to_le_bytes())
            .map_err(Self::verbs("shmem_barrier"))?;
        let stage = self.stage.clone();
        let r = self.sync_remote(pe, off);
        self.posting().await;
        self.post_write("shmem_barrier", pe, r, (&stage, s), 8, true, false)
    }

    /// Post a write of `bytes` into `pe`'s synchronisation region at `off` whose landing
    /// increments `pe`'s word at `counter` (a write with reply word): the count rises only
    /// once the whole write is in `pe`'s memory. The payload's copy into the staging buffer is
    /// charged at `copy_rate`.
    pub(crate) async fn sync_put_bytes(
        &mut self,
        pe: usize,
        off: u64,
        bytes: &[u8],
        counter: u64,
    ) -> Result<(), ShmemError> {
        let call = "shmem_barrier_all";
        let len = bytes.len() as u64;
        let s = self.stage(len).await?;
        self.ctx.write_local(&self.stage, s, bytes).map_err(Self::verbs(call))?;
        self.copying(len).await;
        let stage = self.stage.clone();
        let qp = self.qp(pe);
        let wr = self.wr(Pending::Write { call, pe, staged: true });
        self.writes += 1;
        self.staged += 1;
        let mut w = WriteWr::new(&stage, s, len, self.sync_remote(pe, off))
            .reply_word(self.sync_remote(pe, counter))
            .wr_id(wr);
        if self.shared.in_order {
            w = w.local_completion();
            self.unacked[pe] = true;
        }
        self.posting().await;
        qp.post_write(w).map_err(Self::verbs(call))
    }

    /// `len` bytes of this PE's own synchronisation region at `off`.
    pub(crate) fn sync_bytes(&self, off: u64, len: u64) -> Vec<u8> {
        self.ctx
            .read_local(&self.sync, off, len)
            .expect("inside the synchronisation region")
    }

    /// This PE's own synchronisation word at `off`.
    pub(crate) fn sync_word(&self, off: u64) -> u64 {
        self.ctx
            .read_u64(&self.sync, off)
            .expect("inside the synchronisation region")
    }

    pub(crate) fn set_sync_word(&self, off: u64, v: u64) {
        self.ctx
            .write_local(&self.sync, off, &v.to_le_bytes())
            .expect("inside the synchronisation region");
    }

    /// Messages landed in this PE's heap so far under the key of fast-barrier epochs of
    /// `parity` (the NIC's counter).
    pub(crate) fn heap_arrivals(&self, parity: u64) -> u64 {
        let mr = if parity == 0 { &self.heap } else { &self.heap_alt };
        self.ctx.memory_writes(mr)
    }

    /// Wait until the NIC next writes into this PE's memory, then pay the look at it
    /// (`per_poll`): for point synchronisation written outside the library, e.g. by its C
    /// interface.
    pub async fn memory_changed(&self) {
        self.woken().await
    }

    /// Wait for the put-like operations posted so far to complete (before a signal in
    /// unordered mode).
    pub(crate) async fn drain_writes(&mut self) -> Result<(), ShmemError> {
        self.drain(false).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(pe: usize) -> Pending {
        Pending::Write {
            call: "t",
            pe,
            staged: false,
        }
    }

    /// Completions in any order find their operation exactly once; unknown and repeated ids
    /// find nothing; the ring keeps only the span from the oldest outstanding id.
    #[test]
    fn pending_ops_out_of_order_and_unknown_ids() {
        let mut p = PendingOps::default();
        assert!(p.remove(1).is_none());
        for id in 1..=5 {
            p.insert(id, write(id as usize));
        }
        assert!(matches!(p.remove(3), Some(Pending::Write { pe: 3, .. })));
        assert!(p.remove(3).is_none(), "taken once");
        assert!(matches!(p.remove(1), Some(Pending::Write { pe: 1, .. })));
        assert_eq!((p.base, p.slots.len()), (2, 4));
        assert!(matches!(p.remove(2), Some(Pending::Write { pe: 2, .. })));
        assert_eq!((p.base, p.slots.len()), (4, 2), "completed front slots dropped");
        assert!(p.remove(0).is_none() && p.remove(9).is_none() && p.remove(u64::MAX).is_none());
        assert!(p.remove(5).is_some() && p.remove(4).is_some());
        assert!(p.slots.is_empty());
        // Empty again: the next id starts a new span.
        p.insert(6, write(6));
        assert!(matches!(p.remove(6), Some(Pending::Write { pe: 6, .. })));
    }
}
