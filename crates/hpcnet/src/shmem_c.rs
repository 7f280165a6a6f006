//! `hpcnet shmem-cc` and `hpcnet shmem-run`: compile an unmodified OpenSHMEM C program against
//! hpcnet's `shmem.h` and runtime (as `oshcc` does), and run it as one simulated job on a
//! scenario's machine, one process per PE (as `oshrun` does; `hpcnet-shmem-c` serves the calls).

use crate::run::load;
use crate::shmem::BarrierArg;
use crate::{Common, Failure};
use hpcnet_des::{Bytes, SimTime};
use hpcnet_msg::verbs::Machine;
use hpcnet_shmem::{BarrierKind, ShmemConfig};
use hpcnet_shmem_c::{run_job, ComputeModel, JobConfig};
use std::ffi::OsString;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Default symmetric heap per PE when neither --heap nor SHMEM_SYMMETRIC_SIZE says.
const DEFAULT_HEAP: u64 = 64 << 20;

/// Options of `hpcnet shmem-run`.
pub struct RunArgs<'a> {
    pub scenario: &'a Path,
    pub pes: usize,
    pub heap: Option<&'a str>,
    pub compute: &'a str,
    pub barrier: BarrierArg,
    pub out: Option<&'a Path>,
    pub program: &'a [OsString],
    pub common: &'a Common,
}

/// `--compute zero | call:DURATION | cpu:FACTOR`.
pub fn parse_compute(s: &str) -> Result<ComputeModel, Failure> {
    let bad = |why: String| {
        Failure::input(format!(
            "--compute {s}: {why} (expected zero, call:DURATION such as call:100ns, or cpu:FACTOR such as cpu:1.0)"
        ))
    };
    match s.split_once(':') {
        None if s == "zero" => Ok(ComputeModel::Zero),
        Some(("call", d)) => d.parse::<SimTime>().map(ComputeModel::PerCall).map_err(|e| bad(e.0)),
        Some(("cpu", f)) => match f.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(ComputeModel::Cpu(x)),
            _ => Err(bad(format!("'{f}' is not a non-negative factor"))),
        },
        _ => Err(bad("unknown model".into())),
    }
}

fn parse_heap(arg: Option<&str>) -> Result<u64, Failure> {
    let (src, text) = match arg {
        Some(h) => ("--heap", h.to_string()),
        None => match std::env::var("SHMEM_SYMMETRIC_SIZE") {
            Ok(v) => ("SHMEM_SYMMETRIC_SIZE", v),
            Err(_) => return Ok(DEFAULT_HEAP),
        },
    };
    let b = Bytes::parse_whole(text.trim()).map_err(|e| Failure::input(format!("{src} {text}: {}", e.0)))?;
    // Whole 8-byte words.
    Ok(b.0.div_ceil(8) * 8)
}

pub fn shmem_run(a: &RunArgs) -> Result<(), Failure> {
    let compute = parse_compute(a.compute)?;
    let heap = parse_heap(a.heap)?;
    let Some((program, args)) = a.program.split_first() else {
        return Err(Failure::input(
            "no program: give it after --, e.g. hpcnet shmem-run SCENARIO --pes 2 -- ./hello",
        ));
    };
    let sc = load(a.scenario, a.common)?;
    let world = sc.world().map_err(Failure::input)?;
    let ranks = world.ranks();
    if a.pes == 0 || a.pes > ranks {
        return Err(Failure::input(format!(
            "{}: --pes {}: needs 1 to {ranks} (the machine's ranks)",
            sc.source, a.pes
        )));
    }
    let (dir, keep) = match a.out {
        Some(d) => {
            crate::check_writable_dir(d, "--out")?;
            (d.to_path_buf(), true)
        }
        None => (
            std::env::temp_dir().join(format!("hpcnet-shmem-run-{}", std::process::id())),
            false,
        ),
    };
    let cfg = JobConfig {
        program: PathBuf::from(program),
        args: args.to_vec(),
        npes: a.pes,
        heap,
        compute,
        shmem: ShmemConfig {
            barrier: match a.barrier {
                BarrierArg::Classic => BarrierKind::Classic,
                BarrierArg::Fast => BarrierKind::Fast,
            },
            ..sc.shmem_config()
        },
        stdout_dir: dir.clone(),
    };
    let result = run_job(Machine::new(world), &cfg);
    // The PEs' output, in PE order, whatever the outcome.
    let mut outputs = Vec::with_capacity(a.pes);
    for pe in 0..a.pes {
        let path = dir.join(format!("pe-{pe}.out"));
        let lines: Vec<String> = match std::fs::File::open(&path) {
            Ok(f) => std::io::BufReader::new(f)
                .split(b'\n')
                .map(|l| String::from_utf8_lossy(&l.unwrap_or_default()).into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        outputs.push(lines);
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if !a.common.json {
        for (pe, lines) in outputs.iter().enumerate() {
            for l in lines {
                outln!("[PE {pe}] {l}");
            }
        }
    }
    let rep = result.map_err(|e| Failure {
        code: e.exit_code(),
        message: format!("shmem-run: {e}"),
    })?;
    let secs = rep.wall.as_secs_f64().max(1e-9);
    if a.common.json {
        let v = serde_json::json!({
            "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
            "program": program.to_string_lossy(), "pes": rep.npes, "compute": compute.to_string(),
            "deterministic": compute.deterministic(), "heap_bytes": heap,
            "static_bytes": rep.static_bytes, "calls": rep.calls,
            "simulated_time_us": rep.time.as_ns_f64() / 1000.0,
            "stdout": outputs, "resolved_scenario": sc.resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        outln!(
            "hpcnet {} — shmem-run on '{}' (seed {}): {} PEs, compute {}{}, {} SHMEM calls, simulated time {:.3} us",
            env!("CARGO_PKG_VERSION"),
            sc.name,
            sc.file.seed,
            rep.npes,
            compute,
            if compute.deterministic() {
                ""
            } else {
                " (not deterministic)"
            },
            rep.calls,
            rep.time.as_ns_f64() / 1000.0
        );
    }
    // Real-time figures vary from run to run: they go to stderr.
    eprintln!(
        "shmem-run: {:.3} s of real time, {:.0} calls/s",
        rep.wall.as_secs_f64(),
        rep.calls as f64 / secs
    );
    Ok(())
}

/// Write `include/shmem.h` and `lib/libhpcnet_shmem.a` under `dir`.
fn emit(dir: &Path) -> Result<(), Failure> {
    let archive = hpcnet_shmem_c::runtime_archive().map_err(Failure::input)?;
    let io = |p: &Path, e: std::io::Error| Failure::input(format!("{}: {e}", p.display()));
    for (sub, name, bytes) in [
        ("include", "shmem.h", hpcnet_shmem_c::HEADER.as_bytes()),
        ("lib", "libhpcnet_shmem.a", archive),
    ] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
        let p = d.join(name);
        // Write beside, then rename: concurrent compilations never see half a file.
        let tmp = d.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &p).map_err(|e| io(&p, e))?;
    }
    Ok(())
}

/// `hpcnet shmem-cc [--emit DIR] [CC ARGS...]`.
pub fn shmem_cc(emit_dir: Option<&Path>, args: &[OsString]) -> Result<(), Failure> {
    if let Some(d) = emit_dir {
        emit(d)?;
        if args.is_empty() {
            outln!("{}", d.display());
            return Ok(());
        }
    }
    if args.is_empty() {
        return Err(Failure::input(
            "no compiler arguments: e.g. hpcnet shmem-cc prog.c -o prog (or --emit DIR)",
        ));
    }
    // The header and library live in a directory named after their contents.
    let archive = hpcnet_shmem_c::runtime_archive().map_err(Failure::input)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in hpcnet_shmem_c::HEADER.as_bytes().iter().chain(archive) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let dir = std::env::temp_dir().join(format!("hpcnet-shmem-cc-{h:016x}"));
    if !dir.join("lib/libhpcnet_shmem.a").exists() || !dir.join("include/shmem.h").exists() {
        emit(&dir)?;
    }
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let link = !args
        .iter()
        .any(|a| matches!(a.to_str(), Some("-c" | "-S" | "-E" | "-M" | "-MM")));
    let mut cmd = Command::new(&cc);
    cmd.arg(format!("-I{}", dir.join("include").display())).args(args);
    if link {
        cmd.arg(dir.join("lib/libhpcnet_shmem.a"));
    }
    let status = cmd.status().map_err(|e| {
        Failure::input(format!(
            "no C compiler: cannot run '{}': {e} (install one, e.g. apt-get install gcc, or set CC)",
            cc.to_string_lossy()
        ))
    })?;
    if !status.success() {
        return Err(Failure {
            code: status.code().map_or(1, |c| c.clamp(1, 255) as u8),
            message: format!("shmem-cc: {} failed ({status})", cc.to_string_lossy()),
        });
    }
    Ok(())
}
