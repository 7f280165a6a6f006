//! The OpenSHMEM C interface end to end: C programs written against the standard API only
//! (`examples/shmem-c/` and the test programs in `tests/shmem-c/`) are compiled with
//! `hpcnet shmem-cc` and the system C compiler, run with `hpcnet shmem-run` on the NICEVT
//! scenarios, and judged by what they print: values, verification verdicts, and figures that
//! must equal what the Rust benchmarks of `hpcnet shmem` give for the same calls.
//!
//! A C compiler is required: without one these tests fail and say so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const EXE: &str = env!("CARGO_BIN_EXE_hpcnet");

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn scenario(name: &str) -> String {
    root().join("scenarios").join(name).to_str().unwrap().to_string()
}

/// Where the programs are built (one directory for the test binary).
fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shmem-c");
        std::fs::create_dir_all(&d).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let found = Command::new(&cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "no C compiler: '{cc}' cannot be run. The OpenSHMEM C interface tests need one \
             (apt-get install gcc, or set CC)."
        );
        d
    })
}

/// Compile `src` (relative to the repository) with `hpcnet shmem-cc`; the executable's path.
fn build(src: &str, extra: &[&str]) -> String {
    let name = Path::new(src).file_stem().unwrap().to_str().unwrap().to_string();
    let tag = extra.join("").replace(['-', '=', ' '], "");
    let out = build_dir().join(format!("{name}{tag}"));
    let o = Command::new(EXE)
        .arg("shmem-cc")
        .args(["-O2", "-Wall", "-Werror"])
        .args(extra)
        .arg(root().join(src))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "shmem-cc {src} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.to_str().unwrap().to_string()
}

fn hpcnet(args: &[&str]) -> Output {
    Command::new(EXE).args(args).output().unwrap()
}

/// `hpcnet shmem-run SCENARIO --pes N [opts] -- PROGRAM ARGS`.
fn run(scen: &str, pes: usize, opts: &[&str], prog: &str, args: &[&str]) -> Output {
    let pes = pes.to_string();
    let mut a = vec!["shmem-run", scen, "--pes", &pes];
    a.extend_from_slice(opts);
    a.push("--");
    a.push(prog);
    a.extend_from_slice(args);
    hpcnet(&a)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

/// The number in column `col` (whitespace-separated) of the line starting with `prefix`.
fn figure(text: &str, prefix: &str, col: usize) -> f64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no line '{prefix}' in:\n{text}"));
    line.split_whitespace().nth(col).unwrap().parse().unwrap()
}

#[test]
fn hello_moves_data_through_static_and_heap_objects() {
    let p = build("examples/shmem-c/hello.c", &[]);
    let o = run(&scenario("nicevt-m3.toml"), 4, &[], &p, &[]);
    let out = ok(&o);
    for pe in 0..4 {
        let left = (pe + 3) % 4;
        let want = format!(
            "[PE {pe}] Hello from PE {pe} of 4: got {left} and {} from PE {left}: ok",
            100 + left
        );
        assert!(out.contains(&want), "missing '{want}' in:\n{out}");
    }
    assert!(out.contains("4 PEs, compute zero"), "{out}");
    // Same scenario and seed: byte-identical output.
    assert_eq!(stdout(&run(&scenario("nicevt-m3.toml"), 4, &[], &p, &[])), out);
}

#[test]
fn put_latency_equals_the_rust_benchmark() {
    let p = build("examples/shmem-c/latency.c", &[]);
    let c = ok(&run(&scenario("nicevt-m3.toml"), 2, &[], &p, &["20", "256"]));
    assert!(c.contains("[PE 0] data ok"), "{c}");
    let r = ok(&hpcnet(&[
        "shmem",
        &scenario("nicevt-m3.toml"),
        "--test",
        "put-latency",
        "--pes",
        "2",
        "--sizes",
        "8:256",
        "--iterations",
        "20",
    ]));
    for size in [8, 64, 256] {
        let from_c = figure(&c.replace("[PE 0] ", ""), &format!("put {size:>8}"), 2);
        let from_rust = figure(&r, &format!("{size} "), 1);
        assert_eq!(from_c, from_rust, "put latency at {size} B: C program vs hpcnet shmem");
        // Of the order of spec 03's neighbour latency (<= 1.2 us) on the PIO send path.
        assert!(from_c > 0.3 && from_c < 5.0, "{from_c}");
    }
    let get8 = figure(&c.replace("[PE 0] ", ""), "get        8", 2);
    assert!(get8 > 0.5 && get8 < 5.0, "{c}");
}

#[test]
fn bandwidth_grows_with_message_size() {
    let p = build("examples/shmem-c/bandwidth.c", &[]);
    let out = ok(&run(&scenario("nicevt-m3.toml"), 2, &[], &p, &["4", "16", "8192"]));
    assert!(out.contains("[PE 1] data ok"), "{out}");
    let out = out.replace("[PE 0] ", "");
    let small = figure(&out, "8 ", 1);
    let large = figure(&out, "8192 ", 1);
    assert!(large > 10.0 * small && large < 5.0, "GB/s 8 B {small}, 8 KiB {large}");
}

#[test]
fn atomics_hand_out_every_value_once() {
    let p = build("examples/shmem-c/atomics.c", &[]);
    let out = ok(&run(&scenario("nicevt-m3.toml"), 8, &[], &p, &["50"]));
    assert!(
        out.contains("counter 400 of 400, every value handed out once: yes"),
        "{out}"
    );
    assert!(out.contains("xor mask 0xff (want 0xff)"), "{out}");
    assert!(out.contains("[PE 0] atomics ok"), "{out}");
}

#[test]
fn barriers_classic_and_fast() {
    let p = build("examples/shmem-c/barrier.c", &[]);
    let mut lat = Vec::new();
    for kind in ["classic", "fast"] {
        let out = ok(&run(&scenario("nicevt-m3.toml"), 8, &["--barrier", kind], &p, &["20"]));
        for pe in 0..8 {
            assert!(
                out.contains(&format!("[PE {pe}] PE {pe}: barriers ok")),
                "{kind}: {out}"
            );
        }
        lat.push(figure(&out.replace("[PE 0] ", ""), "barrier_all on 8 PEs:", 4));
    }
    assert!(
        lat[1] < lat[0],
        "fast barrier {} us is not below classic {} us",
        lat[1],
        lat[0]
    );
}

#[test]
fn ring_passes_the_token() {
    let p = build("examples/shmem-c/ring.c", &[]);
    let out = ok(&run(&scenario("nicevt-m2.toml"), 6, &[], &p, &["4"]));
    assert!(out.contains("token 60 (want 60) ok"), "{out}");
}

#[test]
fn the_compute_model_charges_time_between_calls() {
    let p = build("examples/shmem-c/latency.c", &[]);
    let lat = |opts: &[&str]| {
        let out = ok(&run(&scenario("nicevt-m3.toml"), 2, opts, &p, &["20", "8"])).replace("[PE 0] ", "");
        (figure(&out, "put        8", 2), figure(&out, "get        8", 2))
    };
    let (put0, get0) = lat(&[]);
    let (put1, get1) = lat(&["--compute", "call:1us"]);
    // A blocking get is one call: 1 us more each, plus the closing clock read's 1 us over the
    // 20 iterations.
    let dg = get1 - get0;
    assert!((1.0..=1.06).contains(&dg), "get latency grew by {dg} us");
    // Half a ping-pong round trip is three calls before the flag (put, fence, flag put), plus
    // the closing clock read's share; the NIC may send the data while the program computes, so
    // part of the 3 us can overlap.
    let dp = put1 - put0;
    assert!((2.0..=3.1).contains(&dp), "put latency grew by {dp} us");
}

#[test]
fn host_computation_is_charged_only_by_the_cpu_model() {
    let p = build("crates/hpcnet/tests/shmem-c/compute.c", &[]);
    let sim = |opts: &[&str]| {
        let out = ok(&run(&scenario("nicevt-m3.toml"), 2, opts, &p, &[]));
        figure(&out.replace("[PE 0] ", ""), "simulated", 1)
    };
    // The wall clock reads simulated time: 20 ms of host CPU between two reads is invisible
    // with the default model, and counted (times the factor) with the CPU model.
    assert_eq!(sim(&[]), 0.0);
    let cpu = sim(&["--compute", "cpu:2"]);
    assert!(
        (39_000.0..200_000.0).contains(&cpu),
        "cpu:2 charged {cpu} us for 20 ms of CPU"
    );
    let out = ok(&run(&scenario("nicevt-m3.toml"), 2, &["--compute", "cpu:2"], &p, &[]));
    assert!(out.contains("compute cpu:2 (not deterministic)"), "{out}");
}

#[test]
fn compile_only_and_c_runtime_are_separate_steps() {
    let obj = build_dir().join("hello.o");
    let o = hpcnet(&[
        "shmem-cc",
        "-c",
        root().join("examples/shmem-c/hello.c").to_str().unwrap(),
        "-o",
        obj.to_str().unwrap(),
    ]);
    ok(&o);
    let exe = build_dir().join("hello-linked");
    ok(&hpcnet(&[
        "shmem-cc",
        obj.to_str().unwrap(),
        "-o",
        exe.to_str().unwrap(),
    ]));
    let out = ok(&run(&scenario("nicevt-m3.toml"), 2, &[], exe.to_str().unwrap(), &[]));
    assert!(out.contains("[PE 1] Hello from PE 1 of 2"), "{out}");
}

#[test]
fn randomaccess_verifies_and_matches_the_rust_benchmark() {
    let p = build("examples/shmem-c/randomaccess.c", &[]);
    let out = ok(&run(&scenario("nicevt-m3.toml"), 8, &[], &p, &["8"]));
    assert!(out.contains("verification: 0 of 2048 words wrong: PASSED"), "{out}");
    let gups_c = figure(&out.replace("[PE 0] ", ""), "table", 12);
    let r = ok(&hpcnet(&[
        "shmem",
        &scenario("nicevt-m3.toml"),
        "--test",
        "randomaccess",
        "--pes",
        "8",
        "--log-table",
        "8",
        "--updates",
        "1024",
    ]));
    let gups_rust = figure(&r, "updates", 6);
    assert!(
        (gups_c / gups_rust - 1.0).abs() < 0.02,
        "GUPS C {gups_c} vs Rust {gups_rust}"
    );
}

/// On the torus scenarios (ordered delivery: fence free, quiet acknowledges the last write per
/// destination) and on a fat tree with unordered delivery.
#[test]
fn every_api_family_with_real_data() {
    let p = build("crates/hpcnet/tests/shmem-c/api.c", &["-std=c11"]);
    for (scen, pes, opts) in [
        ("nicevt-m3.toml", 4, vec![]),
        ("nicevt-m3.toml", 5, vec!["--barrier", "fast"]),
        ("nicevt-m2.toml", 6, vec!["--heap", "1M"]),
        // A fat tree that does not keep a pair's order: every put acknowledged, fence = quiet.
        ("ib-qdr-fattree.toml", 6, vec![]),
    ] {
        let out = ok(&run(&scenario(scen), pes, &opts, &p, &[]));
        assert!(
            out.contains("[PE 0] api: 198 checks per PE, 0 failed"),
            "{scen} {pes}: {out}"
        );
        assert!(!out.contains("FAIL"), "{out}");
    }
}

#[test]
fn classic_programs_use_the_deprecated_names() {
    let p = build("crates/hpcnet/tests/shmem-c/classic.c", &["-std=c99"]);
    let out = ok(&run(&scenario("nicevt-m3.toml"), 3, &[], &p, &[]));
    for pe in 0..3 {
        assert!(out.contains(&format!("[PE {pe}] classic PE {pe} of 3: ok")), "{out}");
    }
}

#[test]
fn bad_calls_end_the_job_with_one_message_naming_the_call() {
    for (src, code, want) in [
        ("bad_address", 2, "PE 1: shmem_long_put: address"),
        ("bad_pe", 2, "shmem_long_p: PE 6 does not exist (the job has 3 PEs)"),
        ("misaligned", 2, "shmem_long_atomic_add: address"),
        (
            "mismatch",
            2,
            "PE 1: shmem_malloc: PE 1 made collective allocation 0 as malloc(128)",
        ),
        ("crash", 1, "PE 1 ended without shmem_finalize (killed by signal 11"),
        ("deadlock", 1, "the job can never finish"),
        ("global_exit", 1, "PE 0 called shmem_global_exit(7)"),
    ] {
        let p = build(&format!("crates/hpcnet/tests/shmem-c/{src}.c"), &[]);
        let o = run(&scenario("nicevt-m3.toml"), 3, &[], &p, &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{src}: {err}");
        assert!(err.contains(want), "{src}: '{want}' not in: {err}");
        assert_eq!(err.lines().count(), 1, "{src}: one line: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn bad_command_lines_and_programs_outside_a_job() {
    let hello = build("examples/shmem-c/hello.c", &[]);
    for (args, want) in [
        (vec!["--compute", "fast"], "--compute fast"),
        (vec!["--heap", "lots"], "--heap lots"),
    ] {
        let o = run(&scenario("nicevt-m3.toml"), 2, &args, &hello, &[]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
    }
    let o = run(&scenario("nicevt-m3.toml"), 100_000, &[], &hello, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--pes 100000"), "{}", stderr(&o));
    let o = run(&scenario("nicevt-m3.toml"), 2, &[], "/nonexistent/program", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot start /nonexistent/program"),
        "{}",
        stderr(&o)
    );
    // Run directly, the program says how to run it.
    let o = Command::new(&hello).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("hpcnet shmem-run SCENARIO --pes N"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn outputs_are_kept_per_pe_and_in_json() {
    let p = build("examples/shmem-c/hello.c", &[]);
    let dir = build_dir().join("hello-out");
    let _ = std::fs::remove_dir_all(&dir);
    let o = run(
        &scenario("nicevt-m3.toml"),
        2,
        &["--out", dir.to_str().unwrap(), "--json"],
        &p,
        &[],
    );
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(v["pes"], 2);
    assert_eq!(v["deterministic"], true);
    assert!(v["calls"].as_u64().unwrap() > 10);
    assert!(v["stdout"][1][0].as_str().unwrap().starts_with("Hello from PE 1 of 2"));
    let file = std::fs::read_to_string(dir.join("pe-1.out")).unwrap();
    assert!(file.starts_with("Hello from PE 1 of 2"), "{file}");
}

#[test]
fn emit_writes_the_header_and_library() {
    let dir = build_dir().join("emitted");
    let o = hpcnet(&["shmem-cc", "--emit", dir.to_str().unwrap()]);
    ok(&o);
    let h = std::fs::read_to_string(dir.join("include/shmem.h")).unwrap();
    assert!(h.contains("void shmem_barrier_all(void);"));
    let lib = std::fs::read(dir.join("lib/libhpcnet_shmem.a")).unwrap();
    assert!(lib.starts_with(b"!<arch>"), "a static library");
}
