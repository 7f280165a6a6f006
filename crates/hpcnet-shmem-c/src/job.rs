//! The job runner: start one process per PE, map each one's symmetric memory, and serve every
//! PE's calls as an async rank program on `hpcnet-shmem`.
//!
//! Cost: per call, two socket messages and two context switches of the host (the figure users
//! see as calls per second of real time); simulated cost is whatever the SHMEM library and the
//! NIC and network models charge, plus the compute model's charge for the time between calls.

use crate::conn::{Conn, Mapping};
use crate::proto::{amo, op, Req, BAD_CALL, ENDING, OK};
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::Machine;
use hpcnet_msg::NicBackend;
use hpcnet_shmem::{init_external, Cmp, Pe, ShmemConfig, ShmemError, ShmemOp, Sym, Team};
use std::cell::{Cell, RefCell};
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How simulated time advances for the program's own computation between two calls.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ComputeModel {
    /// None: only the calls take simulated time (deterministic; the default).
    Zero,
    /// A fixed time per call, charged before it (deterministic).
    PerCall(SimTime),
    /// The host CPU time the process spent since its previous call, times a factor (the
    /// program's real computation scaled to the simulated machine; NOT deterministic: it
    /// varies from run to run with the host).
    Cpu(f64),
}

impl ComputeModel {
    fn charge(&self, cpu_ns: u64) -> SimTime {
        match *self {
            ComputeModel::Zero => SimTime::ZERO,
            ComputeModel::PerCall(t) => t,
            ComputeModel::Cpu(f) => SimTime::from_ps((cpu_ns as f64 * f * 1000.0).round() as u64),
        }
    }

    /// Whether runs give identical results.
    pub fn deterministic(&self) -> bool {
        !matches!(self, ComputeModel::Cpu(_))
    }
}

impl std::fmt::Display for ComputeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComputeModel::Zero => write!(f, "zero"),
            ComputeModel::PerCall(t) => write!(f, "call:{}ns", t.as_ns_f64()),
            ComputeModel::Cpu(x) => write!(f, "cpu:{x}"),
        }
    }
}

/// One job.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// The program and its arguments (every PE runs the same).
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub npes: usize,
    /// Symmetric heap bytes per PE (besides the program's static data).
    pub heap: u64,
    pub compute: ComputeModel,
    /// The SHMEM library's configuration (its `heap` and `reserved` are set from the program).
    pub shmem: ShmemConfig,
    /// Where PE i's standard output goes: `stdout_dir/pe-i.out`.
    pub stdout_dir: PathBuf,
}

/// What a finished job measured.
#[derive(Clone, Debug)]
pub struct JobReport {
    pub npes: usize,
    /// Simulated time when the last PE finalized.
    pub time: SimTime,
    /// SHMEM calls served (all PEs).
    pub calls: u64,
    /// Real time of the job (process start to the last exit).
    pub wall: Duration,
    /// Bytes of the program's symmetric static data.
    pub static_bytes: u64,
    /// Each PE's standard output file.
    pub stdout: Vec<PathBuf>,
}

/// Why a job gave no result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum JobError {
    /// The job could not start (program, machine, memory).
    #[error("{0}")]
    Setup(String),
    /// A PE made an invalid call (the reason names the C call).
    #[error("PE {pe}: {reason}")]
    BadCall { pe: usize, reason: String },
    /// A PE ended abnormally (crash, exit before shmem_finalize, non-zero exit status).
    #[error("PE {pe} {what}")]
    PeEnded { pe: usize, what: String },
    /// A PE called shmem_global_exit with a non-zero status.
    #[error("PE {pe} called shmem_global_exit({status})")]
    GlobalExit { pe: usize, status: i32 },
    /// Nothing was left to happen while PEs still waited (a deadlock of the program).
    #[error("the job can never finish: {0}")]
    Stuck(String),
}

impl JobError {
    /// The command line's exit code: 2 for invalid input (bad calls, a program that cannot
    /// start), 1 for a run that gave no result.
    pub fn exit_code(&self) -> u8 {
        match self {
            JobError::Setup(_) | JobError::BadCall { .. } => 2,
            _ => 1,
        }
    }
}

/// What the PEs' tasks share.
struct State {
    children: RefCell<Vec<Option<Child>>>,
    /// The job is ending: a failure, or shmem_global_exit.
    ending: Cell<bool>,
    failure: RefCell<Option<JobError>>,
    calls: Cell<u64>,
    /// Per PE: the call it is in (for a stuck job's message), and whether it finished.
    current: RefCell<Vec<&'static str>>,
    done: RefCell<Vec<bool>>,
    finish: Cell<SimTime>,
}

impl State {
    fn ending(&self) -> bool {
        self.ending.get()
    }

    /// Record the job's failure (the first one counts) and stop every other PE.
    fn fail(&self, e: JobError, except: usize) {
        if !self.ending.get() {
            *self.failure.borrow_mut() = Some(e);
        }
        self.stop_others(except);
    }

    /// End the job: stop every PE but `except`.
    fn stop_others(&self, except: usize) {
        self.ending.set(true);
        for (i, c) in self.children.borrow_mut().iter_mut().enumerate() {
            if i != except {
                if let Some(c) = c {
                    let _ = c.kill();
                }
            }
        }
    }

    fn wait(&self, pe: usize) -> Option<ExitStatus> {
        self.children.borrow_mut()[pe].as_mut().and_then(|c| c.wait().ok())
    }
}

fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}{}", signal_name(sig)),
        _ => "an unknown end".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => ", SIGSEGV: a memory fault",
        libc::SIGABRT => ", SIGABRT",
        libc::SIGBUS => ", SIGBUS",
        libc::SIGFPE => ", SIGFPE",
        libc::SIGKILL => ", SIGKILL",
        _ => "",
    }
}

/// Run `cfg.program` as a job of `cfg.npes` PEs on machine `m`.
pub fn run_job<B: NicBackend + 'static>(mut m: Machine<B>, cfg: &JobConfig) -> Result<JobReport, JobError> {
    let start = Instant::now();
    let n = cfg.npes;
    let ranks = m.context(hpcnet_msg::verbs::Rank(0)).size();
    if n == 0 || n > ranks {
        return Err(JobError::Setup(format!(
            "--pes {n}: needs 1 to {ranks} (the machine's ranks)"
        )));
    }
    if cfg.heap == 0 || !cfg.heap.is_multiple_of(8) || cfg.heap > hpcnet_shmem::MAX_HEAP / 2 {
        return Err(JobError::Setup(format!(
            "symmetric heap of {} bytes: it must be a positive multiple of 8 bytes, at most {}",
            cfg.heap,
            hpcnet_shmem::MAX_HEAP / 2
        )));
    }
    std::fs::create_dir_all(&cfg.stdout_dir)
        .map_err(|e| JobError::Setup(format!("{}: {e}", cfg.stdout_dir.display())))?;
    let state = Rc::new(State {
        children: RefCell::new(Vec::new()),
        ending: Cell::new(false),
        failure: RefCell::new(None),
        calls: Cell::new(0),
        current: RefCell::new(vec!["shmem_init"; n]),
        done: RefCell::new(vec![false; n]),
        finish: Cell::new(SimTime::ZERO),
    });
    let mut conns = Vec::with_capacity(n);
    let mut outs = Vec::with_capacity(n);
    let kill_all = |state: &State| {
        for c in state.children.borrow_mut().iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    for pe in 0..n {
        let (ours, theirs) = UnixStream::pair().map_err(|e| JobError::Setup(format!("socket: {e}")))?;
        let path = cfg.stdout_dir.join(format!("pe-{pe}.out"));
        let out = File::create(&path).map_err(|e| JobError::Setup(format!("{}: {e}", path.display())))?;
        outs.push(path);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
        let mut cmd = Command::new(&cfg.program);
        cmd.args(&cfg.args)
            .env("HPCNET_SHMEM_FD", fd.to_string())
            .env("HPCNET_SHMEM_HEAP", cfg.heap.to_string())
            .env_remove("HPCNET_SHMEM_CPU")
            .stdin(Stdio::null())
            .stdout(out);
        if matches!(cfg.compute, ComputeModel::Cpu(_)) {
            cmd.env("HPCNET_SHMEM_CPU", "1");
        }
        // SAFETY: fcntl is async-signal-safe; it only clears close-on-exec on the PE's end.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(c) => state.children.borrow_mut().push(Some(c)),
            Err(e) => {
                kill_all(&state);
                return Err(JobError::Setup(format!("cannot start {}: {e}", cfg.program.display())));
            }
        }
        drop(theirs);
        conns.push(Conn::new(ours, pe));
    }

    // Every PE's shmem_init, in PE order: its memory file, mapped here.
    let mut maps: Vec<Box<dyn hpcnet_nic::ExternalBytes>> = Vec::with_capacity(n);
    let mut init_cpu = Vec::with_capacity(n);
    let mut static_bytes = None;
    for (pe, conn) in conns.iter_mut().enumerate() {
        let fail = |state: &State, e: JobError| {
            kill_all(state);
            Err(e)
        };
        let got = match conn.read() {
            Ok(g) => g,
            Err(e) => return fail(&state, JobError::Setup(format!("PE {pe}: reading shmem_init: {e}"))),
        };
        let (req, fd) = match got {
            Some((r, _)) if r.op == op::ABORT => {
                let reason = String::from_utf8_lossy(&conn.payload).into_owned();
                let _ = conn.reply(OK, [0, 0], &[]);
                let _ = state.wait(pe);
                return fail(&state, JobError::BadCall { pe, reason });
            }
            Some((r, Some(fd))) if r.op == op::INIT => (r, fd),
            Some((r, _)) => {
                return fail(
                    &state,
                    JobError::Setup(format!("PE {pe}: expected shmem_init, got request {}", r.op)),
                )
            }
            None => {
                let what = match state.wait(pe) {
                    Some(s) => describe(s),
                    None => "an unknown end".into(),
                };
                return fail(
                    &state,
                    JobError::PeEnded {
                        pe,
                        what: format!("ended before shmem_init ({what})"),
                    },
                );
            }
        };
        let (d, h) = (req.a[0], req.a[1]);
        if h != cfg.heap {
            return fail(
                &state,
                JobError::Setup(format!("PE {pe}: heap of {h} bytes, {} asked", cfg.heap)),
            );
        }
        match static_bytes {
            None => static_bytes = Some(d),
            Some(first) if first != d => {
                return fail(
                    &state,
                    JobError::Setup(format!(
                        "PE {pe} has {d} bytes of static data, PE 0 {first}: every PE must run the same executable"
                    )),
                )
            }
            _ => {}
        }
        match Mapping::new(&fd, d + h) {
            Ok(map) => maps.push(Box::new(map)),
            Err(e) => return fail(&state, JobError::Setup(format!("PE {pe}: mapping its memory: {e}"))),
        }
        init_cpu.push(req.cpu_ns);
    }
    let d = static_bytes.unwrap_or(0);
    let shmem = ShmemConfig {
        heap: d + cfg.heap,
        reserved: d,
        ..cfg.shmem.clone()
    };
    let pes = match init_external(&m, n, &shmem, maps) {
        Ok(p) => p,
        Err(e) => {
            kill_all(&state);
            return Err(JobError::Setup(e.to_string()));
        }
    };
    for ((pe, conn), cpu) in pes.into_iter().zip(conns).zip(init_cpu) {
        let st = state.clone();
        let model = cfg.compute;
        let call_cost = shmem.costs.per_call;
        m.spawn(serve(pe, conn, st, model, call_cost, cpu));
    }
    let end = m.run();
    let failure = state.failure.borrow_mut().take();
    if let Some(e) = failure {
        kill_all(&state);
        return Err(e);
    }
    let unfinished: Vec<usize> = (0..n).filter(|&i| !state.done.borrow()[i]).collect();
    if !state.ending() && (!unfinished.is_empty() || end.stuck_tasks > 0) {
        let cur = state.current.borrow();
        let list: Vec<String> = unfinished.iter().map(|&i| format!("PE {i} in {}", cur[i])).collect();
        kill_all(&state);
        return Err(JobError::Stuck(format!(
            "every PE still running waits for another ({})",
            list.join(", ")
        )));
    }
    Ok(JobReport {
        npes: n,
        time: state.finish.get(),
        calls: state.calls.get(),
        wall: start.elapsed(),
        static_bytes: d,
        stdout: outs,
    })
}

/// Reason of a refused call, without the library's own call name (the PE names its C call).
fn reason(e: &ShmemError) -> String {
    let s = e.to_string();
    match s.split_once(": ") {
        Some((call, rest)) if call.starts_with("shmem_") || call.starts_with("local ") => rest.to_string(),
        _ => s,
    }
}

/// One PE: reply to its shmem_init, then serve its calls until it ends.
async fn serve(mut pe: Pe, mut conn: Conn, st: Rc<State>, model: ComputeModel, call_cost: SimTime, init_cpu: u64) {
    let me = pe.my_pe();
    let npes = pe.n_pes() as u64;
    let t = model.charge(init_cpu);
    pe.compute(t).await;
    if conn.reply(OK, [me as u64, npes], &[]).is_err() {
        return;
    }
    let mut finalized = false;
    // A call refused by the library: the PE answers with the same reason naming its C call.
    let mut refused: Option<String> = None;
    let mut out = Vec::new();
    loop {
        if st.ending() {
            let _ = conn.reply(ENDING, [0, 0], &[]);
            return;
        }
        let got = conn.read();
        let (req, _) = match got {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => {
                if st.ending() {
                    return;
                }
                if let Some(reason) = refused.take() {
                    st.fail(JobError::BadCall { pe: me, reason }, me);
                    let _ = st.wait(me);
                    return;
                }
                let status = st.wait(me);
                match status {
                    Some(s) if finalized && s.success() => {
                        st.done.borrow_mut()[me] = true;
                    }
                    Some(s) if finalized => {
                        // The others are past shmem_finalize too: let them end on their own.
                        st.done.borrow_mut()[me] = true;
                        st.failure.borrow_mut().get_or_insert(JobError::PeEnded {
                            pe: me,
                            what: format!("ended with {} after shmem_finalize", describe(s)),
                        });
                    }
                    s => st.fail(
                        JobError::PeEnded {
                            pe: me,
                            what: format!(
                                "ended without shmem_finalize ({}), while the others ran on",
                                s.map_or("an unknown end".into(), describe)
                            ),
                        },
                        me,
                    ),
                }
                return;
            }
        };
        if req.op == op::ABORT {
            // The PE stops at an invalid call, named by the PE.
            let reason = String::from_utf8_lossy(&conn.payload).into_owned();
            let _ = conn.reply(OK, [0, 0], &[]);
            st.fail(JobError::BadCall { pe: me, reason }, me);
            let _ = st.wait(me);
            return;
        }
        st.calls.set(st.calls.get() + 1);
        st.current.borrow_mut()[me] = op_name(req.op);
        if finalized || refused.is_some() {
            let why = if finalized {
                "called after shmem_finalize"
            } else {
                "called after a refused call"
            };
            let _ = conn.reply(BAD_CALL, [0, 0], why.as_bytes());
            refused.get_or_insert_with(|| why.into());
            continue;
        }
        let t = model.charge(req.cpu_ns);
        pe.compute(t).await;
        out.clear();
        let payload = std::mem::take(&mut conn.payload);
        let r = execute(&mut pe, &req, &payload, &mut out, call_cost, &st).await;
        conn.payload = payload;
        match r {
            Ok(Done::Reply(v)) => {
                if conn.reply(OK, v, &out).is_err() && !st.ending() {
                    // The process went away: its end is read on the next turn.
                    continue;
                }
            }
            Ok(Done::Finalized) => {
                finalized = true;
                st.finish.set(st.finish.get().max(pe.now()));
                let _ = conn.reply(OK, [0, 0], &[]);
            }
            Ok(Done::GlobalExit(status)) => {
                st.finish.set(st.finish.get().max(pe.now()));
                if status != 0 {
                    st.fail(JobError::GlobalExit { pe: me, status }, me);
                } else {
                    st.stop_others(me);
                }
                let _ = conn.reply(OK, [0, 0], &[]);
                let _ = st.wait(me);
                return;
            }
            Err(reason) => {
                let _ = conn.reply(BAD_CALL, [0, 0], reason.as_bytes());
                refused = Some(reason);
            }
        }
    }
}

/// How a served call ended.
enum Done {
    Reply([u64; 2]),
    Finalized,
    GlobalExit(i32),
}

/// The C call family of a request (for the message of a stuck job).
fn op_name(o: u32) -> &'static str {
    match o {
        op::INIT => "shmem_init",
        op::FINALIZE => "shmem_finalize",
        op::MALLOC | op::CALLOC | op::ALIGN | op::REALLOC => "shmem_malloc (a collective call)",
        op::FREE => "shmem_free (a collective call)",
        op::PUT | op::PUT_SYM_NBI | op::IPUT | op::PUT_SIGNAL => "a put",
        op::GET | op::GET_SYM_NBI | op::IGET => "a get",
        op::AMO => "an atomic",
        op::FENCE | op::QUIET => "shmem_quiet",
        op::BARRIER_ALL => "shmem_barrier_all",
        op::BARRIER => "shmem_barrier",
        op::SYNC_ALL => "shmem_sync_all",
        op::SYNC => "shmem_sync",
        op::WAIT | op::WAIT_VEC => "shmem_wait_until",
        op::SIGNAL_WAIT => "shmem_signal_wait_until",
        op::LOCK_SET | op::LOCK_TEST | op::LOCK_CLEAR => "shmem_set_lock",
        op::BCAST => "a broadcast",
        op::COLLECT | op::FCOLLECT => "a collect",
        op::ALLTOALL => "an alltoall",
        op::REDUCE => "a reduction",
        op::TIME => "clock_gettime",
        _ => "a call",
    }
}

fn cmp_of(c: u64) -> Result<Cmp, String> {
    Ok(match c {
        0 => Cmp::Eq,
        1 => Cmp::Ne,
        2 => Cmp::Gt,
        3 => Cmp::Le,
        4 => Cmp::Lt,
        5 => Cmp::Ge,
        _ => return Err(format!("comparison {c} is not one of SHMEM_CMP_*")),
    })
}

/// A point-synchronisation value of `code` (width in bytes, 0x10 when signed) as an i128.
fn value_of(code: u32, bits: u64) -> i128 {
    let w = code & 0xf;
    let signed = code & 0x10 != 0;
    let shift = 64 - 8 * w;
    if signed {
        i128::from(((bits << shift) as i64) >> shift)
    } else {
        i128::from((bits << shift) >> shift)
    }
}

/// The PEs of a set given as (start, stride, size) in world numbering.
fn team(pe: &Pe, call: &str, start: u64, stride: u64, size: u64) -> Result<Team, String> {
    let n = pe.n_pes() as u64;
    let last = start.saturating_add(stride.saturating_mul(size.saturating_sub(1)));
    if size == 0 || stride == 0 || last >= n {
        return Err(format!(
            "{call}: the PE set (start {start}, stride {stride}, size {size}) is not within the job's {n} PEs"
        ));
    }
    Team::world(pe)
        .split_strided(start as usize, stride as usize, size as usize)
        .map_err(|e| reason(&e))
}

/// Carry out one request on `pe`; reply payload into `out`.
async fn execute(
    pe: &mut Pe,
    r: &Req,
    payload: &[u8],
    out: &mut Vec<u8>,
    call_cost: SimTime,
    st: &State,
) -> Result<Done, String> {
    let a = r.a;
    let e = |e: ShmemError| reason(&e);
    let sym = Sym::from_offset;
    let pe_of = |x: u64| x as usize;
    let v = match r.op {
        op::FINALIZE => {
            pe.barrier_all().await.map_err(e)?;
            return Ok(Done::Finalized);
        }
        op::GLOBAL_EXIT => {
            let _ = st;
            return Ok(Done::GlobalExit(a[0] as i64 as i32));
        }
        op::ABORT => return Err(String::from_utf8_lossy(payload).into_owned()),
        op::MALLOC => [or_null(pe.malloc(a[0]).await).map_err(e)?, 0],
        op::CALLOC => [or_null(pe.calloc(a[0], a[1]).await).map_err(e)?, 0],
        op::ALIGN => [or_null(pe.align(a[0], a[1]).await).map_err(e)?, 0],
        op::FREE => {
            pe.free(sym(a[0], 0)).await.map_err(e)?;
            [0, 0]
        }
        op::REALLOC => {
            let old = pe
                .sym_at(a[0])
                .ok_or_else(|| format!("{:#x} is not the start of a live allocation", a[0]))?;
            let new = match pe.malloc(a[1]).await {
                Err(ShmemError::HeapFull { .. }) => return Ok(Done::Reply([u64::MAX, 0])),
                r => r.map_err(e)?,
            };
            let keep = old.len().min(a[1]);
            let bytes = pe.read_bytes(old.with_len(keep)).map_err(e)?;
            pe.write_bytes(new, &bytes).map_err(e)?;
            pe.free(old).await.map_err(e)?;
            [new.offset(), 0]
        }
        op::PUT => {
            pe.put_bytes(sym(a[0], payload.len() as u64), payload, pe_of(a[1]))
                .await
                .map_err(e)?;
            [0, 0]
        }
        op::PUT_SYM_NBI => {
            pe.put_from_nbi(sym(a[0], a[2]), sym(a[1], a[2]), a[2], pe_of(a[3]))
                .await
                .map_err(e)?;
            [0, 0]
        }
        op::GET => {
            let b = pe.get_bytes(sym(a[0], a[1]), a[1], pe_of(a[2])).await.map_err(e)?;
            out.extend_from_slice(&b);
            [0, 0]
        }
        op::GET_SYM_NBI => {
            pe.get_into_nbi(sym(a[0], a[2]), sym(a[1], a[2]), a[2], pe_of(a[3]))
                .await
                .map_err(e)?;
            [0, 0]
        }
        op::IPUT => {
            let w = u64::from(r.aux);
            if w == 0 || payload.len() as u64 != w * a[2] {
                return Err("malformed strided put".into());
            }
            for (i, el) in payload.chunks(w as usize).enumerate() {
                let off = a[0] + i as u64 * a[1] * w;
                pe.put_bytes(sym(off, w), el, pe_of(a[3])).await.map_err(e)?;
            }
            [0, 0]
        }
        op::IGET => {
            let w = u64::from(r.aux);
            for i in 0..a[2] {
                let off = a[0] + i * a[1] * w;
                let b = pe.get_bytes(sym(off, w), w, pe_of(a[3])).await.map_err(e)?;
                out.extend_from_slice(&b);
            }
            [0, 0]
        }
        op::PUT_SIGNAL => {
            pe.put_signal(
                sym(a[0], payload.len() as u64),
                payload,
                sym(a[1], 8),
                a[2],
                a[3] == 1,
                pe_of(a[4]),
            )
            .await
            .map_err(e)?;
            [0, 0]
        }
        op::AMO => [atomic(pe, r.aux, a).await.map_err(e)?, 0],
        op::FENCE => {
            pe.fence().await.map_err(e)?;
            [0, 0]
        }
        op::QUIET => {
            pe.quiet().await.map_err(e)?;
            [0, 0]
        }
        op::BARRIER_ALL => {
            pe.barrier_all().await.map_err(e)?;
            [0, 0]
        }
        op::SYNC_ALL => {
            pe.sync_all().await.map_err(e)?;
            [0, 0]
        }
        op::BARRIER | op::SYNC => {
            let t = team(pe, op_name(r.op), a[0], a[1], a[2])?;
            if t.my_pe(pe).is_none() {
                return Err(format!("PE {} is not in the PE set it synchronises", pe.my_pe()));
            }
            pe.team_barrier(&t).await.map_err(e)?;
            [0, 0]
        }
        op::WAIT => {
            let cmp = cmp_of(u64::from(r.aux & 0xff))?;
            let code = (r.aux >> 8) & 0xff;
            let w = u64::from(code & 0xf);
            let want = value_of(code, a[1]);
            loop {
                let b = pe.read_bytes(sym(a[0], w)).map_err(e)?;
                if cmp.holds(value_of(code, bytes_u64(&b)), want) {
                    break;
                }
                pe.memory_changed().await;
            }
            [0, 0]
        }
        op::WAIT_VEC => wait_vec(pe, r, payload, out, call_cost).await?,
        op::SIGNAL_WAIT => {
            let cmp = cmp_of(a[1])?;
            [pe.signal_wait_until(sym(a[0], 8), cmp, a[2]).await.map_err(e)?, 0]
        }
        op::LOCK_SET => {
            pe.set_lock(sym(a[0], 8)).await.map_err(e)?;
            [0, 0]
        }
        op::LOCK_CLEAR => {
            pe.clear_lock(sym(a[0], 8)).await.map_err(e)?;
            [0, 0]
        }
        op::LOCK_TEST => [u64::from(pe.test_lock(sym(a[0], 8)).await.map_err(e)?), 0],
        op::BCAST | op::COLLECT | op::FCOLLECT | op::ALLTOALL | op::REDUCE => collective(pe, r).await?,
        op::TIME => [pe.now().ps(), 0],
        other => return Err(format!("unknown request {other} (a runtime of another version?)")),
    };
    Ok(Done::Reply(v))
}

/// An allocation's offset; a full heap is a null pointer (`u64::MAX`), as OpenSHMEM says
/// (every PE's allocator makes the same decision).
fn or_null(r: Result<Sym, ShmemError>) -> Result<u64, ShmemError> {
    match r {
        Ok(s) => Ok(s.offset()),
        Err(ShmemError::HeapFull { .. }) => Ok(u64::MAX),
        Err(e) => Err(e),
    }
}

fn bytes_u64(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(x)
}

async fn atomic(pe: &mut Pe, aux: u32, a: [u64; 7]) -> Result<u64, ShmemError> {
    let o = aux & 0xff;
    let w = (aux >> 8) & 0xff;
    let (value, cond, target) = (a[1], a[2], a[3] as usize);
    macro_rules! run {
        ($t:ty) => {{
            let d = Sym::from_offset(a[0], std::mem::size_of::<$t>() as u64);
            let v = value as $t;
            let old: $t = match o {
                amo::FETCH => pe.atomic_fetch::<$t>(d, target).await?,
                amo::SET => {
                    pe.atomic_set::<$t>(d, v, target).await?;
                    0
                }
                amo::SWAP => pe.atomic_swap::<$t>(d, v, target).await?,
                amo::CSWAP => pe.atomic_compare_swap::<$t>(d, cond as $t, v, target).await?,
                amo::ADD => {
                    pe.atomic_add::<$t>(d, v, target).await?;
                    0
                }
                amo::FADD => pe.atomic_fetch_add::<$t>(d, v, target).await?,
                amo::AND => {
                    pe.atomic_and::<$t>(d, v, target).await?;
                    0
                }
                amo::FAND => pe.atomic_fetch_and::<$t>(d, v, target).await?,
                amo::OR => {
                    pe.atomic_or::<$t>(d, v, target).await?;
                    0
                }
                amo::FOR => pe.atomic_fetch_or::<$t>(d, v, target).await?,
                amo::XOR => {
                    pe.atomic_xor::<$t>(d, v, target).await?;
                    0
                }
                amo::FXOR => pe.atomic_fetch_xor::<$t>(d, v, target).await?,
                _ => {
                    return Err(ShmemError::BadArgument {
                        call: "shmem_atomic",
                        reason: format!("unknown atomic operation {o}"),
                    })
                }
            };
            Ok(u64::from(old))
        }};
    }
    match w {
        4 => run!(u32),
        8 => run!(u64),
        _ => Err(ShmemError::BadArgument {
            call: "shmem_atomic",
            reason: format!("atomics take 4- or 8-byte integers, not {w} bytes"),
        }),
    }
}

/// The `_all`/`_any`/`_some` forms of wait_until and test (and plain test).
async fn wait_vec(
    pe: &mut Pe,
    r: &Req,
    status: &[u8],
    out: &mut Vec<u8>,
    call_cost: SimTime,
) -> Result<[u64; 2], String> {
    let e = |e: ShmemError| reason(&e);
    let cmp = cmp_of(u64::from(r.aux & 0xff))?;
    let code = (r.aux >> 8) & 0xff;
    let kind = (r.aux >> 16) & 0xff;
    let test = (r.aux >> 24) & 0xff != 0;
    let w = u64::from(code & 0xf);
    let (base, n) = (r.a[0], r.a[1]);
    let want = value_of(code, r.a[2]);
    if !status.is_empty() && status.len() as u64 != n {
        return Err(format!("{} status entries for {n} variables", status.len()));
    }
    let active = |i: u64| status.is_empty() || status[i as usize] == 0;
    let n_active = (0..n).filter(|&i| active(i)).count() as u64;
    if test {
        // A test is a call like any other: it takes the library's call time (so a polling
        // loop advances simulated time).
        pe.compute(call_cost.max(SimTime::from_ns(1))).await;
    }
    loop {
        let bytes = pe.read_bytes(Sym::from_offset(base, n * w)).map_err(e)?;
        let hits: Vec<u64> = (0..n)
            .filter(|&i| active(i))
            .filter(|&i| {
                let at = (i * w) as usize;
                cmp.holds(value_of(code, bytes_u64(&bytes[at..at + w as usize])), want)
            })
            .collect();
        let done = match kind {
            0 => hits.len() as u64 == n_active,
            _ => !hits.is_empty() || n_active == 0,
        };
        if done || test {
            return Ok(match kind {
                0 => [u64::from(done), 0],
                1 => [hits.first().copied().unwrap_or(u64::MAX), 0],
                _ => {
                    for h in &hits {
                        out.extend_from_slice(&h.to_ne_bytes());
                    }
                    [hits.len() as u64, 0]
                }
            });
        }
        pe.memory_changed().await;
    }
}

async fn collective(pe: &mut Pe, r: &Req) -> Result<[u64; 2], String> {
    let e = |e: ShmemError| reason(&e);
    let a = r.a;
    let call = op_name(r.op);
    let t = team(pe, call, a[4], a[5], a[6])?;
    let Some(me) = t.my_pe(pe) else {
        return Err(format!("PE {} is not in the PE set of the collective", pe.my_pe()));
    };
    let n = a[2];
    if r.op == op::REDUCE {
        let opcode = r.aux & 0xff;
        let op = [
            ShmemOp::Sum,
            ShmemOp::Prod,
            ShmemOp::Min,
            ShmemOp::Max,
            ShmemOp::And,
            ShmemOp::Or,
            ShmemOp::Xor,
        ]
        .get(opcode as usize)
        .copied()
        .ok_or_else(|| format!("unknown reduction {opcode}"))?;
        let size = if (r.aux >> 8) & 1 == 0 { 4 } else { 8 };
        let (d, s) = (Sym::from_offset(a[0], n * size), Sym::from_offset(a[1], n * size));
        match (r.aux >> 8) & 0xff {
            0 => pe.reduce::<i32>(&t, d, s, n, op).await,
            1 => pe.reduce::<i64>(&t, d, s, n, op).await,
            2 => pe.reduce::<f32>(&t, d, s, n, op).await,
            3 => pe.reduce::<f64>(&t, d, s, n, op).await,
            x => return Err(format!("unknown reduction type {x}")),
        }
        .map_err(e)?;
        return Ok([0, 0]);
    }
    let w = u64::from(r.aux & 0xff);
    let members = t.n_pes() as u64;
    let (d, s) = (Sym::from_offset(a[0], n * w * members), Sym::from_offset(a[1], n * w));
    macro_rules! each {
        ($t:ty) => {
            match r.op {
                op::BCAST => {
                    let root = a[3];
                    if root >= members {
                        return Err(format!("root {root} is outside the PE set of {members}"));
                    }
                    // The active-set form leaves the root's dest alone (OpenSHMEM 1.4); the team
                    // form writes it too.
                    let keep = if r.aux & 0x100 != 0 && me as u64 == root {
                        Some(pe.read_bytes(d.with_len(n * w)).map_err(e)?)
                    } else {
                        None
                    };
                    pe.broadcast::<$t>(&t, d, s, n, root as usize).await.map_err(e)?;
                    if let Some(k) = keep {
                        pe.write_bytes(d, &k).map_err(e)?;
                    }
                    0
                }
                op::COLLECT => pe.collect::<$t>(&t, d, s, n).await.map_err(e)?,
                op::FCOLLECT => {
                    pe.fcollect::<$t>(&t, d, s, n).await.map_err(e)?;
                    0
                }
                _ => {
                    pe.alltoall::<$t>(&t, d, Sym::from_offset(a[1], n * w * members), n)
                        .await
                        .map_err(e)?;
                    0
                }
            }
        };
    }
    let total = match w {
        4 => each!(i32),
        8 => each!(i64),
        _ => return Err(format!("collectives move 4- or 8-byte elements, not {w} bytes")),
    };
    Ok([total, 0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronisation_values_keep_their_sign_and_width() {
        assert_eq!(value_of(0x12, 0xffff), -1, "short -1");
        assert_eq!(value_of(0x02, 0xffff), 65535, "unsigned short");
        assert_eq!(value_of(0x14, 0xffff_fffe), -2);
        assert_eq!(value_of(0x08, u64::MAX), i128::from(u64::MAX));
        assert_eq!(value_of(0x18, u64::MAX), -1);
        assert!(value_of(0x14, 0xffff_ffff) < value_of(0x14, 0));
        assert_eq!(cmp_of(3).unwrap(), Cmp::Le);
        assert!(cmp_of(6).unwrap_err().contains("SHMEM_CMP_"));
    }

    #[test]
    fn compute_models_charge_as_documented() {
        assert_eq!(ComputeModel::Zero.charge(5_000), SimTime::ZERO);
        assert_eq!(
            ComputeModel::PerCall(SimTime::from_ns(100)).charge(5_000),
            SimTime::from_ns(100)
        );
        assert_eq!(ComputeModel::Cpu(2.0).charge(5_000), SimTime::from_ns(10_000));
        assert!(!ComputeModel::Cpu(1.0).deterministic() && ComputeModel::Zero.deterministic());
        assert_eq!(ComputeModel::PerCall(SimTime::from_ns(100)).to_string(), "call:100ns");
    }

    #[test]
    fn a_library_error_loses_the_library_call_name() {
        let e = ShmemError::NoSuchPe {
            call: "shmem_putmem",
            pe: 9,
            npes: 4,
        };
        assert_eq!(reason(&e), "PE 9 does not exist (the job has 4 PEs)");
    }
}
