//! `hpcnet` — the command line of the hpcnet interconnect simulator.
//!
//! `main` → `try_main` with fixed exit codes (as ripgrep): 0 success, 1 the model reported a
//! failure (deadlock, conservation), 2 bad input (arguments, scenario files).

/// `println!` for results: when stdout is closed early (`hpcnet topo x.toml | head -1`) the
/// process ends quietly, as ripgrep does, instead of panicking with "failed printing to stdout".
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::stdout_failed(e)
        }
    }};
}

mod bench;
mod coll;
mod nas;
mod p2p;
mod replicas;
mod reproduce;
mod run;
mod shmem;
mod shmem_c;
mod sweep;
mod topo;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Simulator and message-library laboratory for HPC interconnection networks.
#[derive(Parser)]
#[command(name = "hpcnet", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Options every scenario command takes.
#[derive(clap::Args, Clone)]
pub struct Common {
    /// Override a scenario key: --set traffic.load=0.5 (repeatable; value parsed as TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulate a scenario's synthetic traffic and print the summary.
    Run {
        /// Scenario TOML file.
        scenario: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Also write per-link busy time and packet counts as CSV.
        #[arg(long, value_name = "FILE", conflicts_with = "replications")]
        links: Option<PathBuf>,
        /// Run N independent replications (seeds seed, seed+1, ...) and report each figure's
        /// mean with its 95 % confidence interval (2-1000).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=1000))]
        replications: Option<u32>,
        /// Worker threads for the replications (default: available cores).
        #[arg(long, requires = "replications")]
        threads: Option<usize>,
        /// Stop the replications (at most --replications, at least 3) once the 95 % intervals of
        /// the mean latency and the accepted load are within ±P of their means (0 < P < 1).
        #[arg(long, value_name = "P", requires = "replications", value_parser = parse_precision)]
        precision: Option<f64>,
    },
    /// Run a scenario at a range of offered loads; write CSV and an SVG latency–load plot.
    Sweep {
        scenario: PathBuf,
        /// Loads as START:END:STEP, fractions of node injection bandwidth (e.g. 0.1:0.9:0.1).
        #[arg(long, value_name = "A:B:STEP")]
        load: String,
        /// Output directory for the CSV and SVG (default: out/).
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Worker threads (default: available cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Independent replications per load (seeds seed, seed+1, ...): the CSV and plot give
        /// each figure's mean over them and its 95 % confidence interval (1-1000).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        replications: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Describe a scenario's topology: counts, diameter, mean distance, bisection.
    Topo {
        scenario: PathBuf,
        /// Write the topology as Graphviz DOT.
        #[arg(long, value_name = "FILE")]
        dot: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Measure simulator speed on fixed scenarios (packet-hops/s, events/s, peak memory).
    Bench {
        /// Only the bench cases whose name contains this (repeatable).
        #[arg(long)]
        only: Vec<String>,
        /// Run every case this many times (1-100) and report the run of median speed with the
        /// minimum and maximum (wall-clock figures are noisy on shared machines).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
        repeat: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Rerun a paper's published experiment on the models: paper vs simulated, with verdicts.
    #[command(
        override_usage = "hpcnet reproduce <NAME> [--set KEY=VALUE]... [--json] [--out DIR] [--quick | --paper-scale]\n       hpcnet reproduce <NAME> --sensitivity [--set KEY=VALUE]... [--quick]\n       hpcnet reproduce --all [--json] [--out DIR] [--quick]\n       hpcnet reproduce --list"
    )]
    Reproduce {
        /// Study to run (see --list).
        #[arg(required_unless_present_any = ["all", "list"], conflicts_with_all = ["all", "list"])]
        name: Option<String>,
        /// Run every study and write one combined report (JSON + HTML) to --out (default out/).
        #[arg(long, conflicts_with = "list")]
        all: bool,
        /// List the studies and exit.
        #[arg(long)]
        list: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Directory for the JSON report and SVG plots (and with --all the HTML page).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Shortened runs for smoke tests; the report is marked quick and is not a reproduction.
        #[arg(long)]
        quick: bool,
        /// Run at the paper's own scale where the study has such a mode (ib-nas: class E at
        /// 2048-16384 processes; hours of CPU, up to ≈ 7 GB; progress on stderr).
        #[arg(long, conflicts_with_all = ["all", "list", "quick", "sensitivity"])]
        paper_scale: bool,
        /// What-if: override a key of the study's scenario, as `hpcnet run --set` (repeatable);
        /// the study reruns on the modified machine and prints the same table.
        #[arg(long = "set", value_name = "KEY=VALUE", conflicts_with_all = ["all", "list"])]
        set: Vec<String>,
        /// Scale each fitted parameter of the study by ±10 % in turn and print how every judged
        /// row moves.
        #[arg(long, conflicts_with_all = ["all", "list", "json", "out"])]
        sensitivity: bool,
    },
    /// Point-to-point benchmarks on the scenario's NICs: latency, ping-pong, bandwidth, message rate.
    P2p {
        scenario: PathBuf,
        /// What to measure.
        #[arg(long, value_enum, default_value = "bw")]
        test: p2p::Test,
        /// Primitive for --test latency.
        #[arg(long, value_enum, default_value = "write")]
        op: p2p::OpArg,
        /// Message sizes MIN:MAX (powers of two in between), e.g. 1:4M [default: 1:4M, capped at
        /// a primitive's limit]
        #[arg(long)]
        sizes: Option<String>,
        /// Sending rank.
        #[arg(long, default_value_t = 0)]
        from: u32,
        /// Receiving rank (default: the last rank).
        #[arg(long)]
        to: Option<u32>,
        /// Messages in flight (bandwidth, rate).
        #[arg(long, default_value_t = 64)]
        window: u32,
        /// Messages per size (bandwidth, rate) or iterations (ping-pong).
        #[arg(long, default_value_t = 64)]
        messages: u64,
        /// Queue pairs the messages alternate over (engines).
        #[arg(long, default_value_t = 1)]
        qps: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Collective benchmark (IMB style) on the scenario's ranks: time per call of one collective.
    Coll {
        scenario: PathBuf,
        /// The collective.
        #[arg(long, value_enum)]
        op: coll::OpArg,
        /// The algorithm (auto: the default selection table, per size).
        #[arg(long, value_parser = coll::algorithm_parser(), default_value = "auto")]
        algorithm: hpcnet_coll::Algorithm,
        /// Message sizes per rank MIN:MAX in bytes (powers of two in between), multiples of 8:
        /// the vector (bcast, reduce, allreduce), each rank's block (allgather, reduce-scatter
        /// result), the block to each rank (alltoall); ignored for barrier.
        #[arg(long, default_value = coll::DEFAULT_SIZES)]
        sizes: String,
        /// Ranks of the communicator: N (ranks 0..N-1) or A-B [default: every rank]
        #[arg(long)]
        ranks: Option<String>,
        /// Timed calls per size.
        #[arg(long, default_value_t = 20)]
        iterations: u64,
        /// Untimed calls before them.
        #[arg(long, default_value_t = 2)]
        warmup: u64,
        /// Element type of the buffers.
        #[arg(long = "type", value_enum, default_value = "i64")]
        dtype: coll::TypeArg,
        /// Reduction operator of reduce, allreduce and reduce-scatter (band, bor, bxor: integer
        /// types only).
        #[arg(long, value_enum, default_value = "sum")]
        reduce_op: coll::ReduceOpArg,
        /// Root of bcast and reduce: a member index of the communicator (0 .. size-1).
        #[arg(long, default_value_t = 0)]
        root: usize,
        /// Split the ranks into K disjoint communicators of consecutive ranks (equal sizes) that
        /// run the collective at the same time; each communicator's time is reported.
        #[arg(long, value_name = "K", allow_hyphen_values = true)]
        concurrent: Option<usize>,
        /// Lay the ranks out as R rows (consecutive ranks) and run the collective at the same time
        /// on every row and every column communicator (overlapping: each rank is in two);
        /// each communicator's time is reported.
        #[arg(long, value_name = "R", allow_hyphen_values = true, conflicts_with = "concurrent")]
        grid: Option<usize>,
        /// Split the ranks into K interleaved communicators (communicator g holds every K-th
        /// rank from the g-th: with `--set nic.hosts=K`, one process per node and communicator)
        /// that run the collective at the same time; each communicator's time is reported.
        #[arg(long, value_name = "K", allow_hyphen_values = true, conflicts_with_all = ["concurrent", "grid"])]
        interleave: Option<usize>,
        /// Network model: packet, or flow (max-min fair flows; software algorithms only)
        /// [default: the scenario's mpi.network, packet if absent].
        #[arg(long, value_enum)]
        network: Option<nas::NetworkArg>,
        #[command(flatten)]
        common: Common,
    },
    /// NAS FT or LU communication skeleton on the scenario's ranks under a connection policy.
    Nas {
        scenario: PathBuf,
        /// The benchmark.
        #[arg(long, value_enum)]
        bench: nas::BenchArg,
        /// NAS class: S, W, A, B, C, D or E.
        #[arg(long, default_value = "S")]
        class: String,
        /// Connection policy: rc, rc-srq, xrc-s, xrc-m, ud, or one of the first four with
        /// -g<group size> (group connection), e.g. xrc-s-g4096 [default: the scenario's
        /// mpi.policy, rc-srq if absent].
        #[arg(long)]
        policy: Option<String>,
        /// Sustained flop rate of one process (computation model; an assumption).
        #[arg(long, default_value_t = 1e9)]
        flops: f64,
        /// Run only this many iterations [default: the class's].
        #[arg(long)]
        iterations: Option<u32>,
        /// Network model [default: the scenario's mpi.network, packet if absent].
        #[arg(long, value_enum)]
        network: Option<nas::NetworkArg>,
        /// Move real payload bytes through the model (slower, more memory; the simulated
        /// times are the same) [default: payload-free buffers, headers only].
        #[arg(long)]
        real_bytes: bool,
        #[command(flatten)]
        common: Common,
    },
    /// OpenSHMEM benchmarks on the scenario's NICs: put/get/atomic latency, put bandwidth and
    /// message rate, barrier latency (classic or fast), HPCC RandomAccess.
    Shmem {
        scenario: PathBuf,
        /// What to measure.
        #[arg(long, value_enum, default_value = "put-latency")]
        test: shmem::Test,
        /// Message sizes MIN:MAX (powers of two in between).
        #[arg(long, default_value = "8:4K")]
        sizes: String,
        /// PEs of the job (ranks 0..N-1) [default: every rank].
        #[arg(long)]
        pes: Option<usize>,
        /// First PE of the point-to-point tests.
        #[arg(long, default_value_t = 0)]
        from: usize,
        /// Second PE of the point-to-point tests.
        #[arg(long, default_value_t = 1)]
        to: usize,
        /// Measured calls per point (round trips, calls, messages, barriers).
        #[arg(long, default_value_t = 100)]
        iterations: u64,
        /// Puts between quiets (put-bw).
        #[arg(long, default_value_t = 64)]
        window: u64,
        /// Barrier flavour (barrier test).
        #[arg(long, value_enum, default_value = "classic")]
        barrier: shmem::BarrierArg,
        /// RandomAccess update method.
        #[arg(long, value_enum, default_value = "atomic")]
        variant: shmem::VariantArg,
        /// RandomAccess: log2 of the table words per PE.
        #[arg(long, default_value_t = 12)]
        log_table: u32,
        /// RandomAccess: updates per PE.
        #[arg(long, default_value_t = 4096)]
        updates: u64,
        /// CG: NAS problem class (S, W, A, B, C, D, E).
        #[arg(long, default_value = "S")]
        class: char,
        /// CG: rows per block of the block-cyclic partition; 0 = row-block partition.
        #[arg(long, default_value_t = 0)]
        block: u64,
        /// CG: how the vector is exchanged.
        #[arg(long, value_enum, default_value = "puts")]
        exchange: shmem::ExchangeArg,
        /// CG: floating-point rate of one PE for the computation between exchanges (flop/s).
        #[arg(long, default_value_t = 1e9)]
        flops: f64,
        /// Network model: packet, or flow (max-min fair flows; not the imb-* tests)
        /// [default: the scenario's mpi.network, packet if absent].
        #[arg(long, value_enum)]
        network: Option<nas::NetworkArg>,
        #[command(flatten)]
        common: Common,
    },
    /// Run an OpenSHMEM C program (built with `hpcnet shmem-cc`) as one simulated job: one
    /// process per PE, every SHMEM call carried out on the scenario's NICs and network; each
    /// PE's standard output is printed with a [PE n] prefix.
    ShmemRun {
        scenario: PathBuf,
        /// PEs of the job (ranks 0..N-1).
        #[arg(long)]
        pes: usize,
        /// Symmetric heap per PE (e.g. 64M) [default: SHMEM_SYMMETRIC_SIZE, else 64 MiB].
        #[arg(long)]
        heap: Option<String>,
        /// Simulated time of the program's own work between calls: zero, call:DURATION (fixed
        /// per call) or cpu:FACTOR (measured host CPU time × FACTOR; not deterministic).
        #[arg(long, default_value = "zero")]
        compute: String,
        /// What shmem_barrier_all is.
        #[arg(long, value_enum, default_value = "classic")]
        barrier: shmem::BarrierArg,
        /// Also keep each PE's standard output as DIR/pe-N.out.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
        /// The program and its arguments, after --.
        #[arg(last = true, required = true, value_name = "PROGRAM")]
        program: Vec<std::ffi::OsString>,
    },
    /// Compile and link an OpenSHMEM C program against hpcnet's shmem.h and runtime (like
    /// oshcc): every argument goes to the C compiler ($CC, else cc).
    ShmemCc {
        /// Write include/shmem.h and lib/libhpcnet_shmem.a into DIR (for other build systems).
        #[arg(long, value_name = "DIR")]
        emit: Option<PathBuf>,
        /// Arguments for the C compiler.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CC_ARGS")]
        args: Vec<std::ffi::OsString>,
    },
    /// (internal) run one bench case in this process and print its JSON line.
    #[command(hide = true)]
    BenchOne {
        name: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
}

/// An error with its exit code.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn input(m: impl std::fmt::Display) -> Self {
        Failure {
            code: 2,
            message: m.to_string(),
        }
    }
    pub fn model(m: impl std::fmt::Display) -> Self {
        Failure {
            code: 1,
            message: m.to_string(),
        }
    }
}

/// Creates `dir` if needed and checks that files can be written in it, so that a command finds
/// out before its work, not after, that its results cannot be saved; `what` names the option.
pub fn check_writable_dir(dir: &std::path::Path, what: &str) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::input(format!("{what} {}: cannot write there: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".hpcnet-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Ends the process after a failed write to stdout: silently (success) if the reader went away,
/// else with an input/output error.
pub fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: cannot write to stdout: {e}");
    std::process::exit(2)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// Help and version go to stdout as clap renders them; a usage error is one line on stderr
/// (clap's own rendering adds a usage block and a hint), exit code 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(2);
    }
    // The message is what precedes the usage block and hint, possibly over several lines
    // ("required arguments were not provided:" then the arguments): join it into one.
    let text = e.render().to_string();
    let parts: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
        .collect();
    let line = parts.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    eprintln!("error: {line} (see hpcnet --help)");
    ExitCode::from(2)
}

/// `--precision P`: a fraction in (0, 1).
fn parse_precision(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p < 1.0 => Ok(p),
        _ => Err(format!(
            "'{s}' is not a fraction between 0 and 1 (0.02: within ±2 % of the mean)"
        )),
    }
}

fn try_main(cli: Cli) -> Result<(), Failure> {
    match cli.cmd {
        Cmd::Run {
            scenario,
            common,
            links,
            replications: None,
            ..
        } => run::run(&scenario, &common, links.as_deref()),
        Cmd::Run {
            scenario,
            common,
            replications: Some(n),
            threads,
            precision,
            ..
        } => run::run_replicated(&scenario, &common, n, threads, precision),
        Cmd::Sweep {
            scenario,
            load,
            out,
            threads,
            replications,
            common,
        } => sweep::sweep(&scenario, &load, &out, threads, replications, &common),
        Cmd::Topo { scenario, dot, common } => topo::topo(&scenario, dot.as_deref(), &common),
        Cmd::Bench { only, repeat, common } => bench::bench(&only, repeat, &common),
        Cmd::BenchOne { name, set } => bench::bench_one(&name, &set),
        Cmd::P2p {
            scenario,
            test,
            op,
            sizes,
            from,
            to,
            window,
            messages,
            qps,
            common,
        } => p2p::p2p(&p2p::Args {
            scenario: &scenario,
            test,
            op,
            sizes: sizes.as_deref(),
            from,
            to,
            window,
            messages,
            qps,
            common: &common,
        }),
        Cmd::Coll {
            scenario,
            op,
            algorithm,
            sizes,
            ranks,
            iterations,
            warmup,
            dtype,
            reduce_op,
            root,
            concurrent,
            grid,
            interleave,
            network,
            common,
        } => coll::coll(&coll::Args {
            scenario: &scenario,
            op,
            algorithm,
            sizes: &sizes,
            ranks: ranks.as_deref(),
            iterations,
            warmup,
            dtype,
            reduce_op,
            root,
            concurrent,
            grid,
            interleave,
            network,
            common: &common,
        }),
        Cmd::Nas {
            scenario,
            bench,
            class,
            policy,
            flops,
            iterations,
            network,
            real_bytes,
            common,
        } => nas::nas(&nas::Args {
            scenario: &scenario,
            bench,
            class: &class,
            policy: policy.as_deref(),
            flops,
            iterations,
            network,
            real_bytes,
            common: &common,
        }),
        Cmd::Shmem {
            scenario,
            test,
            sizes,
            pes,
            from,
            to,
            iterations,
            window,
            barrier,
            variant,
            log_table,
            updates,
            class,
            block,
            exchange,
            flops,
            network,
            common,
        } => shmem::shmem(&shmem::Args {
            scenario: &scenario,
            test,
            sizes: &sizes,
            pes,
            from,
            to,
            iterations,
            window,
            barrier,
            variant,
            log_table,
            updates,
            class,
            block,
            exchange,
            flops,
            network,
            common: &common,
        }),
        Cmd::ShmemRun {
            scenario,
            pes,
            heap,
            compute,
            barrier,
            out,
            common,
            program,
        } => shmem_c::shmem_run(&shmem_c::RunArgs {
            scenario: &scenario,
            pes,
            heap: heap.as_deref(),
            compute: &compute,
            barrier,
            out: out.as_deref(),
            program: &program,
            common: &common,
        }),
        Cmd::ShmemCc { emit, args } => shmem_c::shmem_cc(emit.as_deref(), &args),
        Cmd::Reproduce {
            name,
            all,
            list,
            json,
            out,
            quick,
            paper_scale,
            set,
            sensitivity,
        } => reproduce::reproduce(&reproduce::Args {
            name,
            all,
            list,
            json,
            out,
            quick,
            paper_scale,
            set,
            sensitivity,
        }),
    }
}
