//! The `hpcnet` command line, end to end: the real binary on real and deliberately broken
//! scenario files.
//!
//! Bad input of every kind must end with exit code 2 and exactly one line on stderr,
//! `error: <file>: <key path>: <reason>`, never a panic or a backtrace. Good input must give one
//! JSON document with `--json`, record the resolved scenario, seed and version, and repeat
//! byte for byte under the same scenario and seed.
//!
//! Runs are shortened with `--set sim.measure=... --set sim.warmup=...` so each test takes well
//! under a second; scenario files for the error cases are written to a fresh directory under
//! the system temporary directory.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const EXE: &str = env!("CARGO_BIN_EXE_hpcnet");

/// Overrides that make a run short (a few microseconds of simulated time).
const SHORT: [&str; 4] = ["--set", "sim.measure=\"2 us\"", "--set", "sim.warmup=\"1 us\""];

fn scenarios_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios"))
}

fn torus() -> String {
    path_str(&scenarios_dir().join("torus-8x8.toml"))
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("test paths are UTF-8").to_string()
}

/// A directory of its own under the system temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hpcnet-cli-{}-{tag}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn path(&self, name: &str) -> String {
        path_str(&self.0.join(name))
    }

    /// Writes `text` as `name` and returns its path.
    fn write(&self, name: &str, text: impl AsRef<[u8]>) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write scenario");
        path_str(&p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn hpcnet<S: AsRef<str>>(args: &[S]) -> Output {
    Command::new(EXE)
        .args(args.iter().map(|a| a.as_ref()))
        // A panic must show up as such, not be hidden by (or depend on) the caller's settings.
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run hpcnet")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Succeeded; returns stdout.
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}\nstdout: {}",
        out.status.code(),
        stderr(out),
        stdout(out)
    );
    stdout(out)
}

/// Succeeded and stdout is exactly one JSON document.
fn json(out: &Output) -> Value {
    let text = ok(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("stdout is not one JSON document: {e}\n{text}"))
}

/// Exit code 2, nothing on stdout, and stderr is the single line
/// `error: <file>: <key>: <reason>`; returns the reason.
#[track_caller]
fn bad_input(out: &Output, file: &str, key: &str) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "exit code\nstderr: {err}");
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "thread 'main'"] {
        assert!(!err.contains(bad), "stderr shows a panic: {err}");
    }
    assert!(err.ends_with('\n'), "stderr is not a finished line: {err:?}");
    let line = &err[..err.len() - 1];
    assert!(!line.contains('\n'), "stderr is more than one line:\n{err}");
    let prefix = format!("error: {file}: {key}: ");
    let reason = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("stderr does not start with {prefix:?}:\n{line}"));
    assert!(!reason.trim().is_empty(), "no reason given: {line}");
    assert!(out.stdout.is_empty(), "stdout is not empty: {}", stdout(out));
    reason.to_string()
}

/// The torus-8x8 scenario with `from` replaced by `to` (which must occur in it).
fn torus_with(from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(torus()).expect("read torus-8x8.toml");
    assert!(text.contains(from), "torus-8x8.toml no longer contains {from:?}");
    text.replacen(from, to, 1)
}

/// Runs `run FILE --set ...` (short) and expects bad input at `key`; returns the reason.
#[track_caller]
fn run_rejects(file: &str, set: &[&str], key: &str) -> String {
    let mut args = vec!["run".to_string(), file.to_string()];
    args.extend(SHORT.iter().map(|s| s.to_string()));
    for s in set {
        args.push("--set".into());
        args.push(s.to_string());
    }
    bad_input(&hpcnet(&args), file, key)
}

/// A top-level key of a report, which must be present.
fn field<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key).unwrap_or_else(|| panic!("no `{key}` in {v:#}"))
}

/// The report of one run, with the wall-clock fields (which differ run to run) removed from the
/// text: every other byte must repeat.
fn without_wall_time(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with("\"wall_seconds\"") || l.starts_with("\"loop_seconds\""))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// Bad input: each class of the issue, in the file and through --set.

#[test]
fn unknown_key_is_named_with_its_path() {
    let dir = TempDir::new("unknown");
    let f = dir.write("router.toml", torus_with("vcs = 2", "vcs = 2\nvc_count = 2"));
    let why = run_rejects(&f, &[], "router.vc_count");
    assert!(
        why.starts_with("unknown field `vc_count`, expected one of `vcs`"),
        "{why}"
    );

    // Inside the tagged [topology] table serde loses the path; the key must still be exact.
    let f = dir.write("topology.toml", torus_with("concentration = 1", "concentraton = 1"));
    let why = run_rejects(&f, &[], "topology.concentraton");
    assert!(why.contains("`concentration`"), "{why}");

    let f = dir.write("top.toml", torus_with("seed = 1", "seed = 1\ncolour = \"blue\""));
    run_rejects(&f, &[], "colour");

    // Through --set, and the message says the value came from the command line.
    let why = run_rejects(&torus(), &["traffic.patern=uniform"], "traffic.patern");
    assert!(why.ends_with("(set by --set traffic.patern)"), "{why}");
    let why = run_rejects(&torus(), &["routing.selection=adaptive"], "routing.selection");
    assert!(
        why.starts_with("unknown field `selection`, expected `deadlock`"),
        "{why}"
    );
}

#[test]
fn missing_field_names_table_and_field() {
    let dir = TempDir::new("missing");
    let f = dir.write("no-lane-rate.toml", torus_with("lane_rate = \"13 Gb/s\"\n", ""));
    assert_eq!(run_rejects(&f, &[], "link"), "missing field `lane_rate`");

    let f = dir.write("no-k.toml", torus_with("k = [8, 8]\n", ""));
    assert_eq!(run_rejects(&f, &[], "topology"), "missing field `k`");

    let f = dir.write("no-kind.toml", torus_with("kind = \"torus\"\n", ""));
    assert_eq!(run_rejects(&f, &[], "topology"), "missing field `kind`");

    // A missing table: the key path is the document root, so the line is `file: reason`.
    let f = dir.write("empty.toml", "");
    let out = hpcnet(&["run", &f]);
    assert_eq!(stderr(&out), format!("error: {f}: missing field `topology`\n"));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn wrong_unit_says_what_was_expected() {
    let dir = TempDir::new("unit");
    let f = dir.write("latency.toml", torus_with("latency = \"10 ns\"", "latency = \"20 GB\""));
    let out = hpcnet(&["run", &f]);
    bad_input(&out, &f, "link.latency");
    assert_eq!(
        stderr(&out),
        format!(
            "error: {f}: link.latency: expected a time with a unit (ps, ns, us, ms, s), e.g. '20 ns', got '20 GB'\n"
        )
    );

    let f = dir.write("rate.toml", torus_with("lane_rate = \"13 Gb/s\"", "lane_rate = 13"));
    let why = run_rejects(&f, &[], "link.lane_rate");
    assert!(why.contains("has no unit"), "{why}");

    let why = run_rejects(&torus(), &["router.credit_unit=\"64 ns\""], "router.credit_unit");
    assert!(why.starts_with("expected a size with a unit"), "{why}");
    let why = run_rejects(&torus(), &["link.latency=-5 ns"], "link.latency");
    assert!(why.contains("must not be negative"), "{why}");
    let why = run_rejects(
        &torus(),
        &["traffic.size={ min = \"64 B\", max = \"1 XB\" }"],
        "traffic.size.max",
    );
    assert!(why.contains("got '1 XB'"), "{why}");
}

#[test]
fn radix_exceeded_names_role_and_both_counts() {
    let why = run_rejects(&torus(), &["topology.radix=4"], "topology.radix");
    assert!(why.contains("needs 5 ports") && why.contains("radix is 4"), "{why}");

    let dir = TempDir::new("radix");
    let text = std::fs::read_to_string(scenarios_dir().join("fattree-4ary-3tree.toml")).unwrap();
    let f = dir.write("fat.toml", text.replacen("\nn = 3\n", "\nn = 3\nradix = 6\n", 1));
    let why = run_rejects(&f, &[], "topology.radix");
    assert!(why.contains("needs 8 ports") && why.contains("radix is 6"), "{why}");
}

#[test]
fn zero_or_too_many_vcs_are_refused() {
    let dir = TempDir::new("vcs");
    let f = dir.write("zero.toml", torus_with("vcs = 2 ", "vcs = 0 "));
    assert_eq!(run_rejects(&f, &[], "router.vcs"), "must be at least 1");
    let why = run_rejects(&torus(), &["router.vcs=9"], "router.vcs");
    assert!(why.contains("at most 8"), "{why}");
    let why = run_rejects(&torus(), &["router.vcs=300"], "router.vcs");
    assert!(why.contains("expected u8"), "{why}");
    // Too few for the routing: the reason names both the need and the setting.
    let why = run_rejects(&torus(), &["routing.deadlock=dateline", "router.vcs=1"], "router.vcs");
    assert!(why.contains("at least 2") && why.contains("router.vcs = 1"), "{why}");
}

#[test]
fn load_outside_zero_one_is_refused() {
    let dir = TempDir::new("load");
    let f = dir.write("zero.toml", torus_with("load = 0.45", "load = 0.0"));
    let why = run_rejects(&f, &[], "traffic.load");
    assert!(why.starts_with("must be in (0, 1]") && why.ends_with("got 0"), "{why}");
    for load in ["1.5", "-0.1", "nan", "inf", "0"] {
        let why = run_rejects(&torus(), &[&format!("traffic.load={load}")], "traffic.load");
        assert!(why.starts_with("must be in (0, 1]"), "{load}: {why}");
    }
    let why = run_rejects(&torus(), &["traffic.load=\"0.5\""], "traffic.load");
    assert!(why.contains("expected f64"), "{why}");
    // The edge of the interval is allowed.
    ok(&hpcnet(&["topo", &torus(), "--set", "traffic.load=1"]));
}

#[test]
fn impossible_topologies_are_refused() {
    for (set, key, part) in [
        ("topology.k=[1, 8]", "topology.k[0]", "at least 2"),
        ("topology.k=[]", "topology.k", "at least one dimension"),
        ("topology.k=[8, \"x\"]", "topology.k[1]", "expected u32"),
        ("topology.k=[100000, 100000]", "topology.k", "more than the limit"),
        ("topology.concentration=0", "topology.concentration", "at least 1"),
        (
            "topology={ kind = \"dragonfly\", a = 4, p = 2, h = 2, g = 100 }",
            "topology.g",
            "a × h + 1 = 9",
        ),
        (
            "topology={ kind = \"leaf_spine\", leaves = 4, spines = 2, nodes_per_leaf = 4, nodes = 100 }",
            "topology.nodes",
            "= 16, got 100",
        ),
        (
            "topology={ kind = \"generalized_fat_tree\", leaves = 3 }",
            "topology.leaves",
            "must be even",
        ),
        ("topology={ kind = \"hypercube\", n = 40 }", "topology.n", "at most 24"),
        ("topology.kind=ring", "topology.kind", "unknown variant `ring`"),
    ] {
        // Another family comes with its own routing (torus-8x8 names dimension order, which is
        // refused for other kinds before the topology is built).
        let routing: &[&str] = match set.split("kind = \"").nth(1).and_then(|r| r.split('"').next()) {
            Some("dragonfly") => &["routing={ algorithm = \"minimal\" }", "router.vcs=3"],
            Some("leaf_spine" | "generalized_fat_tree") => &["routing={ algorithm = \"up_down\" }"],
            _ => &[],
        };
        let mut sets = vec![set];
        sets.extend_from_slice(routing);
        let why = run_rejects(&torus(), &sets, key);
        assert!(why.contains(part), "{set}: {why}");
    }
    // A routing algorithm that does not apply to the topology.
    let why = run_rejects(&torus(), &["routing={ algorithm = \"up_down\" }"], "routing.algorithm");
    assert!(
        why.contains("'up_down' does not apply to topology kind 'torus'"),
        "{why}"
    );
}

#[test]
fn other_cross_field_and_range_errors() {
    for (set, key, part) in [
        (
            &["router.private_credits=2"][..],
            "router.private_credits",
            "needs 5 credits",
        ),
        (
            &["traffic.size=\"1 KiB\""],
            "traffic.size",
            "exceeds packet.max_payload = 256 B",
        ),
        (
            &["traffic.pattern=transpose", "topology.k=[8, 4]"],
            "traffic.pattern",
            "even number",
        ),
        (&["sim.measure=\"0 ns\""], "sim.measure", "longer than 0"),
        (&["faults.watchdog=\"0 ns\""], "faults.watchdog", "longer than 0"),
        (
            &["sim.warmup=\"9000000 s\"", "sim.measure=\"9000000 s\""],
            "sim",
            "must be at most",
        ),
        // These once overflowed integer arithmetic and panicked.
        (
            &["link.lanes=4294967295", "link.lane_rate=\"1000 Tb/s\""],
            "link.lanes",
            "exceed the largest rate",
        ),
        (
            &["link.lane_rate=\"1 b/s\"", "link.encoding=\"64b/66b\""],
            "link.lane_rate",
            "no data rate",
        ),
        (
            &[
                "packet.max_payload=\"8 GiB\"",
                "traffic.size=\"8 GiB\"",
                "router.private_credits=300000000",
            ],
            "packet.max_payload",
            "smaller than 4 GiB",
        ),
        (
            &[
                "packet.max_payload=\"8 MiB\"",
                "traffic.size=\"8 MiB\"",
                "router.private_credits=300000000",
            ],
            "router.credit_unit",
            "more than the 65535",
        ),
        (
            &["link_overrides=[{ router = 999, port = 0 }]"],
            "link_overrides[0].router",
            "does not exist",
        ),
        (
            &["nic.max_in_flight=8", "nic.descriptor_prefetch=9"],
            "nic.descriptor_prefetch",
            "must be at most nic.max_in_flight = 8 (the messages an engine may have in flight), got 9",
        ),
        (
            &["nic.descriptor_prefetch=-1"],
            "nic.descriptor_prefetch",
            "invalid value: integer `-1`, expected u32",
        ),
        (
            &["nic.descriptor_prefetch=true"],
            "nic.descriptor_prefetch",
            "invalid type: boolean `true`, expected u32",
        ),
    ] {
        let why = run_rejects(&torus(), set, key);
        assert!(why.contains(part), "{set:?}: {why}");
    }
    // Credits are bounded (a VC counts them in 16 bits), instead of being cut silently.
    let why = run_rejects(
        &torus(),
        &["router.private_credits=4294967295"],
        "router.private_credits",
    );
    assert!(why.contains("must be at most 65535"), "{why}");
    ok(&hpcnet(&[
        "topo",
        &torus(),
        "--set",
        "router.private_credits=65535",
        "--set",
        "router.shared_credits=65535",
    ]));
}

#[test]
fn bad_set_syntax_is_refused() {
    let t = torus();
    for (spec, key, part) in [
        ("traffic.load", "--set traffic.load", "key.path=value"),
        ("=3", "--set =3", "empty key"),
        ("traffic..load=3", "--set traffic..load=3", "empty key"),
        ("traffic.load=", "--set traffic.load", "no value"),
        ("topology.k=[8,", "--set topology.k", "not valid TOML"),
        ("link.latency.x=1", "--set link.latency", "not a table"),
    ] {
        let why = bad_input(&hpcnet(&["run", &t, "--set", spec]), &t, key);
        assert!(why.contains(part), "{spec}: {why}");
    }
    // Every command takes --set and checks it the same way.
    for cmd in [&["topo", &t][..], &["sweep", &t, "--load", "0.1:0.2:0.1"]] {
        let mut args = cmd.to_vec();
        args.extend(["--set", "traffic.load"]);
        bad_input(&hpcnet(&args), &t, "--set traffic.load");
    }
}

#[test]
fn bad_load_spec_is_refused() {
    let t = torus();
    let dir = TempDir::new("badload");
    for (spec, part) in [
        ("0.1:x:0.1", "'x', which is not a number"),
        ("0.1:0.5", "three numbers"),
        ("0:0.5:0.1", "0 < START <= END <= 1"),
        ("0.5:0.1:0.1", "0 < START <= END <= 1"),
        ("0.1:1.5:0.1", "0 < START <= END <= 1"),
        ("0.1:0.5:0", "positive STEP"),
        ("0.1:0.5:nan", "positive STEP"),
        ("0.1:0.9:0.0000001", "more than 1000 points"),
    ] {
        let out = hpcnet(&["sweep", &t, "--load", spec, "--out", &dir.path("out")]);
        let why = bad_input(&out, &t, "--load");
        assert!(
            why.starts_with(&format!("'{spec}' ")) && why.contains(part),
            "{spec}: {why}"
        );
    }
    assert!(!dir.0.join("out").exists(), "nothing is written on bad input");
}

#[test]
fn missing_or_unreadable_files_are_refused() {
    let dir = TempDir::new("files");
    let missing = dir.path("no-such.toml");
    for cmd in ["run", "topo"] {
        let why = bad_input(&hpcnet(&[cmd, &missing]), &missing, "cannot read");
        assert!(!why.is_empty());
    }
    // No key: the line is `error: <file>: cannot read: <os error>`.
    let out = hpcnet(&["sweep", &missing, "--load", "0.1:0.2:0.1", "--out", &dir.path("out")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with(&format!("error: {missing}: cannot read: ")),
        "{}",
        stderr(&out)
    );

    let binary = dir.write("binary.toml", [0xff, 0xfe, 0x00, 0x41]);
    let out = hpcnet(&["run", &binary]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("valid UTF-8"), "{}", stderr(&out));

    let a_dir = path_str(&dir.0);
    let out = hpcnet(&["topo", &a_dir]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with(&format!("error: {a_dir}: cannot read: ")));
}

#[test]
fn toml_syntax_errors_are_one_line_with_position() {
    let dir = TempDir::new("syntax");
    // toml's own messages span lines ("invalid table header\nexpected `.`, `]`") and come with
    // a source snippet; neither may leak.
    let f = dir.write("header.toml", "seed = 1\n[topology\nkind = \"torus\"\n");
    let why = bad_input(&hpcnet(&["run", &f]), &f, "line 2, column 10");
    assert_eq!(why, "TOML syntax: invalid table header: expected `.`, `]`");

    let f = dir.write("dup.toml", torus_with("seed = 1", "seed = 1\nseed = 2"));
    let why = bad_input(&hpcnet(&["topo", &f]), &f, "line 6, column 1");
    assert!(why.contains("duplicate key `seed`"), "{why}");

    let f = dir.write("string.toml", "name = \"x\"\ndescription = \"open\nseed = 1\n");
    let why = bad_input(&hpcnet(&["run", &f]), &f, "line 2, column 20");
    assert!(why.starts_with("TOML syntax: invalid basic string"), "{why}");
    for snippet in ["|", "^"] {
        assert!(!why.contains(snippet), "snippet leaked: {why}");
    }
}

#[test]
fn every_command_reports_a_bad_scenario_alike() {
    let dir = TempDir::new("alike");
    let f = dir.write("bad.toml", torus_with("vcs = 2 ", "vcs = 0 "));
    let (dot, out_dir) = (dir.path("x.dot"), dir.path("out"));
    for a in [
        vec!["run", &f],
        vec!["run", &f, "--json"],
        vec!["topo", &f],
        vec!["topo", &f, "--json", "--dot", &dot],
        vec!["sweep", &f, "--load", "0.1:0.2:0.1", "--json", "--out", &out_dir],
    ] {
        assert_eq!(bad_input(&hpcnet(&a), &f, "router.vcs"), "must be at least 1", "{a:?}");
    }
    assert!(!Path::new(&dot).exists() && !Path::new(&out_dir).exists());
}

#[test]
fn model_failures_exit_with_code_1() {
    // Dimension order without deadlock avoidance on a saturated torus deadlocks.
    let out = hpcnet(&[
        "run",
        &torus(),
        "--json",
        "--set",
        "sim.measure=\"5 us\"",
        "--set",
        "routing.deadlock=none",
        "--set",
        "traffic.load=1",
        "--set",
        "faults.watchdog=\"1 us\"",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: deadlock: ") && err.lines().count() == 1,
        "{err}"
    );
    // The report is still printed, as one JSON document.
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert!(!field(&v, "deadlock").is_null());
}

// ---------------------------------------------------------------------------------------------
// Good input: outputs.

#[test]
fn run_json_has_the_required_fields() {
    let mut args = vec!["run".to_string(), torus(), "--json".into()];
    args.extend(SHORT.iter().map(|s| s.to_string()));
    let v = json(&hpcnet(&args));
    for key in [
        "packets_injected",
        "packets_delivered",
        "packets_dropped",
        "offered_load",
        "accepted_load",
        "mean_hops",
        "events",
        "wall_seconds",
    ] {
        assert!(field(&v, key).is_number(), "{key} is not a number: {}", v[key]);
    }
    for key in ["mean", "p50", "p99", "max"] {
        assert!(field(field(&v, "latency_ns"), key).is_number(), "latency_ns.{key}");
    }
    assert_eq!(field(&v, "version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field(&v, "seed"), 1);
    assert_eq!(field(&v, "scenario"), "torus-8x8");
    let injected = v["packets_injected"].as_u64().unwrap();
    assert!(injected > 0);
    assert_eq!(
        injected,
        v["packets_delivered"].as_u64().unwrap() + v["packets_dropped"].as_u64().unwrap()
    );
    assert!(v["deadlock"].is_null());

    // The resolved scenario carries the overrides and the filled-in defaults.
    let r = field(&v, "resolved_scenario");
    assert_eq!(r["seed"], 1);
    assert_eq!(r["sim"]["measure"], "2 us");
    assert_eq!(r["sim"]["warmup"], "1 us");
    assert_eq!(r["sim"]["drain"], "1 ms");
    assert_eq!(r["topology"]["kind"], "torus");
    assert_eq!(r["routing"]["algorithm"], "dimension_order");
    assert_eq!(r["traffic"]["load"], 0.45);
    assert_eq!(r["faults"]["watchdog"], "10 us");
}

#[test]
fn run_text_names_scenario_seed_and_version() {
    let mut args = vec!["run".to_string(), torus()];
    args.extend(SHORT.iter().map(|s| s.to_string()));
    let text = ok(&hpcnet(&args));
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.contains(env!("CARGO_PKG_VERSION")) && first.contains("torus-8x8") && first.contains("seed 1"),
        "{first}"
    );
    assert!(text.contains("latency (ns)"), "{text}");
}

#[test]
fn run_links_writes_csv() {
    let dir = TempDir::new("links");
    let csv = dir.path("links.csv");
    let mut args = vec![
        "run".to_string(),
        torus(),
        "--json".into(),
        "--links".into(),
        csv.clone(),
    ];
    args.extend(SHORT.iter().map(|s| s.to_string()));
    let v = json(&hpcnet(&args));
    assert!(v.get("links").is_none(), "per-link records go to the CSV, not the JSON");
    let text = std::fs::read_to_string(&csv).expect("links CSV written");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("link,busy_ps,utilisation"));
    assert!(lines.count() >= 64 * 4, "one row per link direction");
}

#[test]
fn same_scenario_and_seed_give_identical_json() {
    let mut args = vec!["run".to_string(), torus(), "--json".into()];
    args.extend(SHORT.iter().map(|s| s.to_string()));
    let a = ok(&hpcnet(&args));
    let b = ok(&hpcnet(&args));
    assert!(a.contains("\"wall_seconds\""));
    assert_eq!(without_wall_time(&a), without_wall_time(&b));

    // Another seed gives another run.
    args.extend(["--set".into(), "seed=2".into()]);
    let c = ok(&hpcnet(&args));
    let (va, vc): (Value, Value) = (serde_json::from_str(&a).unwrap(), serde_json::from_str(&c).unwrap());
    assert_eq!(vc["seed"], 2);
    assert_eq!(vc["resolved_scenario"]["seed"], 2);
    assert_ne!(
        (&va["packets_generated"], &va["latency_ns"]),
        (&vc["packets_generated"], &vc["latency_ns"]),
        "seed 2 gave the same traffic as seed 1"
    );
}

#[test]
fn topo_json_describes_the_topology() {
    let v = json(&hpcnet(&["topo", &torus(), "--json"]));
    let m = field(&v, "metrics");
    assert_eq!(m["nodes"], 64);
    assert_eq!(m["routers"], 64);
    assert_eq!(m["diameter"], 8);
    assert_eq!(field(&v, "version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field(&v, "seed"), 1);
    assert_eq!(
        field(&v, "resolved_scenario")["topology"]["k"],
        serde_json::json!([8, 8])
    );
    assert!(field(&v, "topology").is_object());

    // --set reaches topo as well.
    let v = json(&hpcnet(&[
        "topo",
        &torus(),
        "--json",
        "--set",
        "topology.k=[4, 4]",
        "--set",
        "seed=9",
    ]));
    assert_eq!(v["metrics"]["nodes"], 16);
    assert_eq!(v["seed"], 9);
}

#[test]
fn topo_writes_dot() {
    let dir = TempDir::new("dot");
    let dot = dir.path("torus.dot");
    let text = ok(&hpcnet(&["topo", &torus(), "--dot", &dot]));
    assert!(text.contains(&dot), "{text}");
    let graph = std::fs::read_to_string(&dot).expect("DOT written");
    assert!(
        graph.starts_with("graph") || graph.starts_with("digraph"),
        "{}",
        &graph[..graph.len().min(80)]
    );
    assert!(graph.trim_end().ends_with('}'));

    // With --json, stdout stays one JSON document.
    let dot2 = dir.path("torus2.dot");
    json(&hpcnet(&["topo", &torus(), "--dot", &dot2, "--json"]));
    assert_eq!(std::fs::read_to_string(&dot2).unwrap(), graph);

    // An unwritable destination is an input error naming the file.
    let bad = dir.path("no-such-dir/x.dot");
    let out = hpcnet(&["topo", &torus(), "--dot", &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with(&format!("error: {bad}: ")), "{}", stderr(&out));
}

#[test]
fn sweep_writes_csv_and_svg() {
    let dir = TempDir::new("sweep");
    let out_dir = dir.path("out");
    let mut args = vec![
        "sweep".to_string(),
        torus(),
        "--load".into(),
        "0.1:0.3:0.1".into(),
        "--out".into(),
        out_dir.clone(),
        "--json".into(),
    ];
    args.extend(SHORT.iter().map(|s| s.to_string()));
    let v = json(&hpcnet(&args));
    assert_eq!(field(&v, "version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field(&v, "seed"), 1);
    assert_eq!(field(&v, "resolved_scenario")["sim"]["measure"], "2 us");
    let points = field(&v, "points").as_array().expect("points");
    let loads: Vec<f64> = points.iter().map(|p| p["load"].as_f64().unwrap()).collect();
    assert_eq!(loads, [0.1, 0.2, 0.3]);

    let csv_path = field(&v, "csv").as_str().unwrap();
    assert_eq!(Path::new(csv_path), Path::new(&out_dir).join("torus-8x8-sweep.csv"));
    let csv = std::fs::read_to_string(csv_path).expect("CSV written");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "header + 3 rows:\n{csv}");
    assert!(
        lines[0].starts_with("load,offered_load,accepted_load,latency_mean_ns"),
        "{}",
        lines[0]
    );
    let columns = lines[0].split(',').count();
    for (row, load) in lines[1..].iter().zip(["0.1", "0.2", "0.3"]) {
        assert_eq!(row.split(',').count(), columns, "{row}");
        assert!(row.starts_with(&format!("{load},")), "{row}");
    }

    let svg = std::fs::read_to_string(field(&v, "svg").as_str().unwrap()).expect("SVG written");
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{}",
        &svg[..svg.len().min(80)]
    );
}

#[test]
fn sweep_results_do_not_depend_on_threads() {
    let dir = TempDir::new("threads");
    let points = |threads: &str| {
        let mut args = vec![
            "sweep".to_string(),
            torus(),
            "--load".into(),
            "0.2:0.4:0.1".into(),
            "--out".into(),
            dir.path(threads),
            "--threads".into(),
            threads.into(),
            "--json".into(),
        ];
        args.extend(SHORT.iter().map(|s| s.to_string()));
        json(&hpcnet(&args))["points"].clone()
    };
    assert_eq!(points("1"), points("3"));
}

#[test]
fn every_shipped_scenario_loads() {
    let mut found = 0;
    for entry in std::fs::read_dir(scenarios_dir()).expect("scenarios/") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        found += 1;
        let p = path_str(&path);
        let v = json(&hpcnet(&["topo", &p, "--json"]));
        let stem = path.file_stem().unwrap().to_str().unwrap();
        assert_eq!(v["scenario"], stem, "{p}: name differs from the file name");
        assert!(v["metrics"]["nodes"].as_u64().unwrap() >= 2, "{p}");
        ok(&hpcnet(&["topo", &p]));
    }
    assert!(found >= 5, "only {found} scenarios found");
}

#[test]
fn every_shipped_scenario_runs_briefly() {
    for entry in std::fs::read_dir(scenarios_dir()).expect("scenarios/") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let p = path_str(&path);
        let v = json(&hpcnet(&[
            "run",
            &p,
            "--json",
            "--set",
            "sim.warmup=\"0 us\"",
            "--set",
            "sim.measure=\"1 us\"",
        ]));
        assert!(v["conservation_ok"].as_bool().unwrap(), "{p}");
        assert!(v["deadlock"].is_null(), "{p}");
        assert!(v["packets_delivered"].as_u64().unwrap() > 0, "{p}");
    }
}

#[test]
fn bench_takes_set_and_json() {
    let v = json(&hpcnet(&[
        "bench",
        "--only",
        "dragonfly",
        "--json",
        "--set",
        "sim.measure=\"1 us\"",
        "--set",
        "sim.warmup=\"1 us\"",
    ]));
    assert_eq!(field(&v, "version"), env!("CARGO_PKG_VERSION"));
    let cases = field(&v, "cases").as_array().unwrap();
    assert_eq!(cases.len(), 1);
    assert_eq!(cases[0]["seed"], 1);
    assert_eq!(cases[0]["resolved_scenario"]["sim"]["measure"], "1 us");

    assert_eq!(cases[0]["repeats"], 1);

    // --repeat: the run of median speed, within the reported spread; every run simulates the
    // same thing.
    let v = json(&hpcnet(&[
        "bench",
        "--only",
        "dragonfly",
        "--json",
        "--repeat",
        "3",
        "--set",
        "sim.measure=\"1 us\"",
        "--set",
        "sim.warmup=\"1 us\"",
    ]));
    let c = &field(&v, "cases").as_array().unwrap()[0];
    assert_eq!(c["repeats"], 3);
    let (lo, mid, hi) = (
        c["packet_hops_per_sec_min"].as_f64().unwrap(),
        c["packet_hops_per_sec"].as_f64().unwrap(),
        c["packet_hops_per_sec_max"].as_f64().unwrap(),
    );
    assert!(lo > 0.0 && lo <= mid && mid <= hi, "{lo} {mid} {hi}");
    assert_eq!(c["packet_hops"], cases[0]["packet_hops"]);
    let out = hpcnet(&["bench", "--repeat", "0"]);
    assert_eq!(out.status.code(), Some(2));

    // The message-level case runs the whole NIC model and reports messages/s.
    let v = json(&hpcnet(&["bench", "--only", "verbs", "--json"]));
    let c = &field(&v, "cases").as_array().unwrap()[0];
    assert_eq!(c["name"], "sunway-verbs-random-writes-4k");
    assert!(c["messages_per_sec"].as_f64().unwrap() > 0.0);
    // 1024 ranks x 64 writes of 4 KB in 1 KiB packets: at least 4 data packets per write
    // between NICs, fewer between the two processes of one NIC.
    let delivered = c["packets_delivered"].as_u64().unwrap();
    assert!(delivered > 1024 * 64 * 4 && delivered < 1024 * 64 * 5, "{delivered}");
    let out = hpcnet(&["bench", "--only", "no-such-case"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: --only no-such-case: matches no bench case"));
    bad_input(
        &hpcnet(&["bench", "--only", "dragonfly", "--set", "traffic.load=2"]),
        "dragonfly-small-uniform-0.40",
        "traffic.load",
    );
}

#[test]
fn help_and_version() {
    let text = ok(&hpcnet(&["--version"]));
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    let text = ok(&hpcnet(&["--help"]));
    for cmd in ["run", "sweep", "topo", "bench"] {
        assert!(text.contains(cmd), "{text}");
    }
    assert!(!text.contains("bench-one"), "internal command is hidden");
    // Usage errors: one line naming the argument and the reason, exit code 2, like other bad
    // input.
    for (args, says) in [
        (&["run"][..], "<SCENARIO>"),
        (&["frobnicate"][..], "'frobnicate'"),
        (&["run", "scenarios/torus-8x8.toml", "--bogus"][..], "'--bogus'"),
        (&["bench", "--repeat", "0"][..], "--repeat"),
        (&["sweep", "scenarios/torus-8x8.toml"][..], "--load"),
    ] {
        let out = hpcnet(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: ") && err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn reproduce_prints_the_study_json_shape_and_exit_codes() {
    let out = hpcnet(&["reproduce", "loggp", "--json"]);
    let v = json(&out);
    assert_eq!(v["study"], "loggp");
    assert!(v["pass"].is_boolean());
    let rows = v["rows"].as_array().expect("rows");
    assert!(!rows.is_empty());
    for r in rows {
        for k in [
            "label",
            "paper",
            "simulated",
            "unit",
            "rel_error",
            "role",
            "tolerance",
            "pass",
        ] {
            assert!(r.get(k).is_some(), "row lacks {k}: {r}");
        }
    }
    let listed = ok(&hpcnet(&["reproduce", "--list"]));
    assert!(listed.contains("loggp") && listed.contains("chpp-crossbar"), "{listed}");
    let unknown = hpcnet(&["reproduce", "no-such-study"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("loggp"), "the error lists the known studies");
}

#[test]
fn p2p_reports_bandwidth_and_latency() {
    let sunway = path_str(&scenarios_dir().join("sunway-prototype.toml"));
    let v = json(&hpcnet(&[
        "p2p",
        &sunway,
        "--sizes",
        "4K:64K",
        "--messages",
        "16",
        "--json",
    ]));
    let pts = v["points"].as_array().expect("points");
    assert_eq!(pts.len(), 5);
    let bw: Vec<f64> = pts.iter().map(|p| p["gbytes_per_s"].as_f64().unwrap()).collect();
    assert!(bw.windows(2).all(|w| w[1] > w[0]), "bandwidth grows with size: {bw:?}");
    assert!(v.get("resolved_scenario").is_some() && v.get("seed").is_some());
    let chpp = path_str(&scenarios_dir().join("chpp-pair.toml"));
    let v = json(&hpcnet(&[
        "p2p", &chpp, "--test", "latency", "--op", "put", "--sizes", "1:1", "--json",
    ]));
    let lat = v["points"][0]["latency_us"].as_f64().unwrap();
    assert!(lat > 1.0 && lat < 3.0, "PUT 1 B latency {lat} us");
    let bad = hpcnet(&["p2p", &chpp, "--to", "7"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--to 7"), "{}", stderr(&bad));
}

/// Exit code `code`, nothing on stdout, no panic, and stderr is one line `error: ...` containing
/// every one of `says`; returns the line.
#[track_caller]
fn one_error_line(out: &Output, code: i32, says: &[&str]) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "exit code\nstderr: {err}");
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "thread 'main'"] {
        assert!(!err.contains(bad), "stderr shows a panic: {err}");
    }
    assert!(err.starts_with("error: ") && err.ends_with('\n'), "{err:?}");
    assert_eq!(err.lines().count(), 1, "stderr is more than one line:\n{err}");
    for s in says {
        assert!(err.contains(s), "stderr does not name {s:?}: {err}");
    }
    assert!(out.stdout.is_empty(), "stdout is not empty: {}", stdout(out));
    err.trim_end().to_string()
}

fn chpp() -> String {
    path_str(&scenarios_dir().join("chpp-pair.toml"))
}

#[test]
fn p2p_runs_that_do_not_finish_exit_1_naming_test_size_and_what_is_stuck() {
    let chpp = chpp();
    // The routers' cable down: every packet is dropped as unreachable, the programs wait.
    let cut = "faults.failed_links=[{router=0, port=0}]";
    for (test, names) in [
        ("bw", "p2p bw, 64 B messages, rank 0 -> 1: "),
        ("bibw", "p2p bibw, 64 B messages, rank 0 -> 1: "),
        ("rate", "p2p rate, 64 B messages, rank 0 -> 1: "),
        ("pingpong", "p2p pingpong, 64 B messages, rank 0 -> 1: "),
        ("latency", "p2p latency --op write, 64 B messages, rank 0 -> 1: "),
    ] {
        for json in [false, true] {
            let mut args = vec!["p2p", &chpp, "--test", test, "--sizes", "64:64", "--set", cut];
            if json {
                args.push("--json");
            }
            let line = one_error_line(
                &hpcnet(&args),
                1,
                &[names, "the run did not finish: ", "rank program(s) still waiting"],
            );
            assert!(!line.contains("inf") && !line.contains("NaN"), "{line}");
        }
    }
    // Node 0's cable down (both ways): what rank 0 sends is dropped at its node, the programs
    // wait; the message says no packet is left in the network.
    let line = one_error_line(
        &hpcnet(&[
            "p2p",
            &chpp,
            "--sizes",
            "4K:4K",
            "--set",
            "faults.failed_links=[{router=0, port=2}]",
        ]),
        1,
        &[
            "p2p bw, 4 KiB messages",
            "rank program(s) still waiting",
            "no packet in the network",
        ],
    );
    assert!(line.starts_with(&format!("error: {chpp}: ")), "{line}");
    // A receive buffer smaller than one packet is refused before any run (bad input).
    let out = hpcnet(&["p2p", &chpp, "--sizes", "64:64", "--set", "nic.rx_buffer=\"8 B\""]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nic.rx_buffer"), "{}", stderr(&out));
}

#[test]
fn p2p_nap_sizes_are_limited_by_the_pool_buffer() {
    let chpp = chpp();
    // An explicit size above nic.nap_buffer (2 KiB) is a usage error naming --sizes, the op and
    // the limit, for both NAP kinds.
    // An explicit --sizes equal to the default range is explicit too.
    for (op, sizes) in [
        ("nap-imm", "4K:4K"),
        ("nap-ind", "1K:8K"),
        ("nap-imm", "1:4097"),
        ("nap-ind", "1:4M"),
    ] {
        let line = one_error_line(
            &hpcnet(&["p2p", &chpp, "--test", "latency", "--op", op, "--sizes", sizes]),
            2,
            &[
                &format!("--sizes {sizes}"),
                &format!("--op {op}"),
                "at most 2 KiB",
                "nic.nap_buffer",
            ],
        );
        assert!(line.ends_with("(see hpcnet --help)"), "{line}");
    }
    // Up to the limit is fine.
    let v = json(&hpcnet(&[
        "p2p", &chpp, "--test", "latency", "--op", "nap-imm", "--sizes", "2K:2K", "--json",
    ]));
    assert_eq!(v["points"][0]["size"], 2048);
    // Without --sizes the default range 1:4M is capped at the limit, with one note on stderr.
    let out = hpcnet(&["p2p", &chpp, "--test", "latency", "--op", "nap-ind", "--json"]);
    let v = json(&out);
    let sizes: Vec<u64> = v["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| p["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, (0..12).map(|k| 1u64 << k).collect::<Vec<_>>(), "1 B ... 2 KiB");
    let note = stderr(&out);
    assert_eq!(note.lines().count(), 1, "{note}");
    assert!(
        note.starts_with("note: --op nap-ind carries at most 2 KiB (nic.nap_buffer of ")
            && note.contains("sizes capped at 2 KiB"),
        "{note}"
    );
    // The other primitives are not capped.
    let out = hpcnet(&[
        "p2p", &chpp, "--test", "latency", "--op", "put", "--sizes", "4K:4K", "--json",
    ]);
    assert_eq!(json(&out)["points"][0]["size"], 4096);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn p2p_sizes_above_one_gib_are_refused_before_any_allocation() {
    let chpp = chpp();
    for sizes in ["64G:64G", "1:2G", "1K:1025M"] {
        let line = one_error_line(
            &hpcnet(&["p2p", &chpp, "--test", "latency", "--sizes", sizes]),
            2,
            &[&format!("--sizes {sizes}: "), "above the largest message size, 1 GiB"],
        );
        assert!(line.ends_with("see hpcnet --help)"), "{line}");
    }
    // Usage errors come before the scenario is read.
    one_error_line(
        &hpcnet(&["p2p", "no-such.toml", "--sizes", "64G:64G"]),
        2,
        &["--sizes 64G:64G"],
    );
}

#[test]
fn p2p_get_exchange_deadlocks_on_one_channel_and_completes_with_its_own() {
    // spec 02's GET deadlock: bounded NIC buffers, GETs and PUT data on one VC.
    let chpp = chpp();
    let mut args = vec![
        "p2p",
        &chpp,
        "--test",
        "get-exchange",
        "--sizes",
        "64K:64K",
        "--messages",
        "64",
        "--window",
        "32",
    ];
    for set in [
        "router.vc_select=packet",
        "router.private_credits=18",
        "nic.rx_buffer=\"576 B\"",
        "nic.tx_queue=4",
        "nic.get_queue=2",
        "nic.engines=2",
    ] {
        args.extend(["--set", set]);
    }
    one_error_line(
        &hpcnet(&args),
        1,
        &["p2p get-exchange, 64 KiB messages", "stuck in the network (deadlock)"],
    );
    // GETs on their own VC: both directions complete.
    args.extend(["--set", "nic.get_vc=1", "--json"]);
    let v = json(&hpcnet(&args));
    assert_eq!(v["test"], "get-exchange");
    assert_eq!(v["points"][0]["messages"], 64);
    let gbs = v["points"][0]["gbytes_per_s"].as_f64().unwrap();
    // Two directions over 4 GB/s links: more than one link's worth, less than two.
    assert!(gbs > 4.0 && gbs < 8.0, "{gbs}");
}

#[test]
fn p2p_zero_counts_are_usage_errors() {
    let chpp = chpp();
    for flag in ["--window", "--messages", "--qps"] {
        let line = one_error_line(
            &hpcnet(&["p2p", &chpp, "--sizes", "64:64", flag, "0"]),
            2,
            &[&format!("{flag} 0: needs at least 1")],
        );
        assert!(line.ends_with("(see hpcnet --help)"), "{line}");
    }
    // Queue pairs are real state: a huge count is refused before anything is built.
    one_error_line(
        &hpcnet(&["p2p", &chpp, "--qps", "4000000000", "--messages", "4000000000"]),
        2,
        &["--qps 4000000000: at most 65536 queue pairs"],
    );
    // 1 is accepted: one message, one in flight, one queue pair.
    let v = json(&hpcnet(&[
        "p2p",
        &chpp,
        "--sizes",
        "64:64",
        "--window",
        "1",
        "--messages",
        "1",
        "--qps",
        "1",
        "--json",
    ]));
    assert_eq!(v["points"][0]["messages"], 1);
    assert!(v["points"][0]["gbytes_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn p2p_refused_posts_are_bad_input() {
    // A window deeper than the doorbell FIFO: the post is refused (no panic), exit 2.
    let chpp = chpp();
    one_error_line(
        &hpcnet(&["p2p", &chpp, "--sizes", "64:64", "--set", "nic.doorbell_fifo=4"]),
        2,
        &[
            "p2p bw, 64 B messages, rank 0 -> 1: post refused: ",
            "doorbell FIFO of function 0 is full",
        ],
    );
}

/// Words about how the studies came to be, which have no place in what they print.
const HISTORY_WORDS: [&str; 10] = [
    "session",
    "adopted",
    "earlier work",
    "earlier reading",
    "first run",
    "full disclosure",
    "helper",
    "before running",
    "judged from",
    "was added",
];

#[test]
fn reproduce_all_speaks_of_model_and_paper_and_counts_roles_apart() {
    let dir = TempDir::new("reproduce-all");
    let out = hpcnet(&["reproduce", "--all", "--quick", "--out", &dir.path("out")]);
    let text = stdout(&out);
    let html = std::fs::read_to_string(dir.path("out/reproduce.html")).expect("HTML report");
    for w in HISTORY_WORDS {
        for (what, t) in [("text", &text), ("HTML", &html)] {
            assert!(!t.to_lowercase().contains(w), "{what} output says {w:?}");
        }
    }
    let summary: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "summary")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(summary.len(), hpcnet_studies::all().len(), "{text}");
    assert!(summary.len() >= 9, "{text}");
    for l in &summary {
        assert!(
            (l.contains(" predictions within tolerance; ") || l.contains(" prediction within tolerance; "))
                && (l.contains(" post-hoc rows within tolerance; ") || l.contains(" post-hoc row within tolerance; "))
                && (l.ends_with(" calibration points") || l.ends_with(" calibration point")),
            "{l}"
        );
    }
    // The VF convergence time is judged and missed: the run says so and exits 1.
    assert!(
        summary
            .iter()
            .any(|l| l.contains("chpp-vf-fairness") && l.contains("FAIL")),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(html.contains("post-hoc within tolerance") && html.contains("fitted parameter"));
}

#[test]
fn reproduce_set_reruns_a_study_on_the_modified_scenario() {
    let bw = |set: &[&str]| -> f64 {
        let mut args = vec!["reproduce", "sunway-rdma-bandwidth", "--quick", "--json"];
        for s in set {
            args.extend(["--set", s]);
        }
        // A what-if run still judges against the paper: it may exit 1, the JSON is on stdout.
        let out = hpcnet(&args);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        let row = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["label"].as_str().unwrap().starts_with("RDMAW bandwidth, 1 MB"))
            .expect("1 MB row")
            .clone();
        row["simulated"].as_f64().unwrap()
    };
    let ratio = bw(&["link.lane_rate=\"14.0625 Gb/s\""]) / bw(&[]);
    assert!((0.45..0.55).contains(&ratio), "halving the lane rate: {ratio}");
    // The what-if run says so.
    let t = stdout(&hpcnet(&[
        "reproduce",
        "chpp-latency",
        "--quick",
        "--set",
        "nic.host.doorbell_latency=\"500 ns\"",
    ]));
    assert!(
        t.contains("WHAT-IF: scenario changed with --set nic.host.doorbell_latency=\"500 ns\""),
        "{t}"
    );
}

#[test]
fn reproduce_bad_set_is_one_line_exit_2() {
    for (args, says) in [
        (
            &["reproduce", "chpp-latency", "--quick", "--set", "nic.no_such=1"][..],
            &["nic.no_such"][..],
        ),
        (
            &["reproduce", "loggp", "--set", "link.lanes=2"][..],
            &["loggp", "--set"][..],
        ),
        (
            &[
                "reproduce",
                "chpp-bandwidth",
                "--quick",
                "--set",
                "nic.nap_buffer=\"1 KiB\"",
            ][..],
            &["NAP"][..],
        ),
        (&["reproduce", "--all", "--set", "link.lanes=2"][..], &["--set"][..]),
    ] {
        one_error_line(&hpcnet(args), 2, says);
    }
}

#[test]
fn reproduce_sensitivity_prints_one_column_pair_per_fitted_parameter() {
    let out = hpcnet(&["reproduce", "sunway-rdma-bandwidth", "--sensitivity", "--quick"]);
    let t = ok(&out);
    for k in [
        "[1] nic.message_overhead = 55 ns",
        "[2] link.lane_rate",
        "[3] packet.header",
    ] {
        assert!(t.contains(k), "{t}");
    }
    let row = t
        .lines()
        .find(|l| l.contains("RDMAW bandwidth, 1 MB"))
        .expect("1 MB row");
    // Lane rate −10 %: the 1 MB bandwidth falls by about 10 %.
    assert!(row.contains("-10.0"), "{row}");
}

#[test]
fn coll_reports_time_per_call_and_refuses_bad_input() {
    let v = json(&hpcnet(&[
        "coll",
        &torus(),
        "--op",
        "allreduce",
        "--ranks",
        "8",
        "--sizes",
        "8:4K",
        "--iterations",
        "3",
        "--json",
    ]));
    assert_eq!((v["op"].as_str(), v["ranks"].as_u64()), (Some("allreduce"), Some(8)));
    let pts = v["points"].as_array().expect("points");
    assert_eq!(pts.len(), 10, "8 B to 4 KiB, powers of two");
    for p in pts {
        let (mean, min, max) = (
            p["mean_us"].as_f64().unwrap(),
            p["min_us"].as_f64().unwrap(),
            p["max_us"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= mean && mean <= max, "{p}");
        assert!(p["checked_elements"].as_u64().unwrap() > 0, "results compared: {p}");
    }
    assert_eq!(
        pts[0]["algorithm"], "recursive-doubling",
        "auto resolved through the table"
    );
    assert_eq!(pts[9]["algorithm"], "rabenseifner");
    assert!(v.get("resolved_scenario").is_some() && v.get("seed").is_some());

    let t = torus();
    for (args, says) in [
        (
            vec!["--op", "allreduce", "--algorithm", "pairwise"],
            vec!["--algorithm pairwise", "allreduce"],
        ),
        (
            vec!["--op", "allreduce", "--ranks", "65"],
            vec!["--ranks 65", "64 ranks"],
        ),
        (vec!["--op", "allreduce", "--iterations", "0"], vec!["--iterations 0"]),
        (vec!["--op", "gossip"], vec!["--op"]),
        (vec!["--op", "allreduce", "--sizes", "12:16"], vec!["--sizes 12:16"]),
    ] {
        let mut a = vec!["coll", t.as_str()];
        a.extend(args);
        one_error_line(&hpcnet(&a), 2, &says);
    }
}

#[test]
fn coll_types_operators_roots_and_concurrent_communicators() {
    let t = torus();
    let v = json(&hpcnet(&[
        "coll",
        &t,
        "--op",
        "reduce",
        "--type",
        "f32",
        "--reduce-op",
        "max",
        "--root",
        "5",
        "--ranks",
        "7",
        "--sizes",
        "4:64",
        "--iterations",
        "1",
        "--json",
    ]));
    assert_eq!(
        (v["datatype"].as_str(), v["reduce_op"].as_str()),
        (Some("f32"), Some("max"))
    );
    assert_eq!(v["root"].as_u64(), Some(5));
    assert_eq!(v["points"].as_array().map(Vec::len), Some(5), "4 B to 64 B");
    let v = json(&hpcnet(&[
        "coll",
        &t,
        "--op",
        "allreduce",
        "--grid",
        "4",
        "--ranks",
        "16",
        "--sizes",
        "64:64",
        "--iterations",
        "2",
        "--json",
    ]));
    assert_eq!(v["layout"].as_str(), Some("grid"));
    let comms = v["communicators"].as_array().expect("communicators");
    assert_eq!(comms.len(), 8, "4 rows and 4 columns");
    assert_eq!(comms[4]["name"].as_str(), Some("column 0"));
    assert_eq!(comms[4]["ranks"], serde_json::json!([0, 4, 8, 12]));
    for c in comms {
        let p = &c["points"][0];
        assert!(
            p["mean_us"].as_f64().unwrap() > 0.0 && p["checked_elements"].as_u64() == Some(4 * 8),
            "{c}"
        );
    }
    let v = json(&hpcnet(&[
        "coll",
        &t,
        "--op",
        "bcast",
        "--concurrent",
        "4",
        "--ranks",
        "16",
        "--sizes",
        "64:64",
        "--iterations",
        "1",
        "--json",
    ]));
    assert_eq!(v["communicators"].as_array().map(Vec::len), Some(4));
    for (args, says) in [
        (
            vec!["--op", "allreduce", "--type", "f64", "--reduce-op", "bxor"],
            vec!["--reduce-op bxor", "f64"],
        ),
        (
            vec!["--op", "bcast", "--ranks", "8", "--root", "8"],
            vec!["--root 8", "8 ranks"],
        ),
        (
            vec!["--op", "reduce", "--ranks", "8", "--concurrent", "3"],
            vec!["--concurrent 3"],
        ),
        (
            vec!["--op", "reduce", "--ranks", "8", "--concurrent", "4", "--root", "2"],
            vec!["--root 2"],
        ),
        (
            vec!["--op", "allreduce", "--ranks", "8", "--grid", "3"],
            vec!["--grid 3"],
        ),
        (
            vec!["--op", "allreduce", "--type", "i32", "--sizes", "2:8"],
            vec!["--sizes 2:8", "i32"],
        ),
    ] {
        let mut a = vec!["coll", t.as_str()];
        a.extend(args);
        one_error_line(&hpcnet(&a), 2, &says);
    }
}

#[test]
fn coll_on_the_flow_model_checks_results_and_refuses_hardware_algorithms() {
    let t = torus();
    let run = |net: &str| {
        json(&hpcnet(&[
            "coll",
            &t,
            "--op",
            "allreduce",
            "--algorithm",
            "ring",
            "--ranks",
            "8",
            "--sizes",
            "64K:64K",
            "--iterations",
            "2",
            "--network",
            net,
            "--json",
        ]))
    };
    let (flow, packet) = (run("flow"), run("packet"));
    assert_eq!(flow["network"], "flow");
    assert!(packet.get("network").is_none(), "packet output unchanged");
    let (f, p) = (&flow["points"][0], &packet["points"][0]);
    assert_eq!(f["checked_elements"].as_u64(), Some(8 * 8192), "results compared: {f}");
    let (tf, tp) = (f["mean_us"].as_f64().unwrap(), p["mean_us"].as_f64().unwrap());
    assert!((tf / tp - 1.0).abs() < 0.1, "flow {tf} us, packet {tp} us");
    let sunway = path_str(&scenarios_dir().join("sunway-prototype.toml"));
    for (alg, unit) in [("hardware", "hardware collective unit"), ("offload", "offload unit")] {
        one_error_line(
            &hpcnet(&[
                "coll",
                &sunway,
                "--op",
                "allreduce",
                "--algorithm",
                alg,
                "--network",
                "flow",
            ]),
            2,
            &[&format!("--algorithm {alg}"), "--network flow", unit],
        );
    }
}

#[test]
fn coll_runs_that_do_not_finish_exit_1() {
    // Node 0's cable down: the collective never completes, and no time is reported.
    let chpp = chpp();
    one_error_line(
        &hpcnet(&[
            "coll",
            &chpp,
            "--op",
            "allreduce",
            "--sizes",
            "64:64",
            "--json",
            "--set",
            "faults.failed_links=[{router=0, port=2}]",
        ]),
        1,
        &["coll allreduce", "64 B per rank", "the run did not finish"],
    );
}

#[test]
fn coll_hardware_algorithm_runs_and_refuses_what_it_cannot_do() {
    let sunway = path_str(&scenarios_dir().join("sunway-prototype.toml"));
    let v = json(&hpcnet(&[
        "coll",
        &sunway,
        "--op",
        "allreduce",
        "--algorithm",
        "hardware",
        "--ranks",
        "64",
        "--sizes",
        "8:2K",
        "--iterations",
        "2",
        "--json",
    ]));
    let pts = v["points"].as_array().expect("points");
    assert_eq!(pts.len(), 9);
    for p in pts {
        assert_eq!(p["algorithm"], "hardware");
        assert!(p["checked_elements"].as_u64().unwrap() > 0, "results compared: {p}");
        assert!(p["mean_us"].as_f64().unwrap() > 0.0);
    }
    // Larger vectors take longer (more packets per tree edge, more bytes to reduce).
    assert!(pts[8]["mean_us"].as_f64() > pts[0]["mean_us"].as_f64());
    for op in ["barrier", "bcast", "reduce"] {
        ok(&hpcnet(&[
            "coll",
            &sunway,
            "--op",
            op,
            "--algorithm",
            "hardware",
            "--ranks",
            "10-40",
            "--sizes",
            "8:64",
            "--iterations",
            "1",
        ]));
    }
    one_error_line(
        &hpcnet(&[
            "coll",
            &sunway,
            "--op",
            "allgather",
            "--algorithm",
            "hardware",
            "--ranks",
            "8",
        ]),
        2,
        &["--algorithm hardware", "allgather"],
    );
    // No multicast table at all: the communicator cannot be created.
    one_error_line(
        &hpcnet(&[
            "coll",
            &sunway,
            "--op",
            "barrier",
            "--algorithm",
            "hardware",
            "--ranks",
            "8",
            "--set",
            "router.multicast_tables=0",
        ]),
        2,
        &["router.multicast_tables"],
    );
}

fn nicevt_m2() -> String {
    path_str(&scenarios_dir().join("nicevt-m2.toml"))
}

#[test]
fn shmem_randomaccess_verifies_and_reports_json() {
    let out = hpcnet(&[
        "shmem",
        &nicevt_m2(),
        "--test",
        "randomaccess",
        "--pes",
        "16",
        "--updates",
        "256",
        "--log-table",
        "8",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["test"], "randomaccess");
    assert_eq!(v["ordered_delivery"], true);
    let p = &v["points"][0];
    assert_eq!(p["count"], 16 * 256);
    assert_eq!(p["errors"], 0, "remote xor atomics lose no update");
    assert!(p["gups"].as_f64().unwrap() > 0.0);
}

#[test]
fn shmem_on_the_flow_model_verifies_randomaccess_and_refuses_imb_tests() {
    let out = hpcnet(&[
        "shmem",
        &nicevt_m2(),
        "--test",
        "randomaccess",
        "--pes",
        "16",
        "--updates",
        "256",
        "--log-table",
        "8",
        "--network",
        "flow",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["network"], "flow");
    assert_eq!(v["ordered_delivery"], false, "max-min sharing keeps no pair's order");
    let p = &v["points"][0];
    assert_eq!(p["count"], 16 * 256);
    assert_eq!(p["errors"], 0, "remote xor atomics lose no update");
    one_error_line(
        &hpcnet(&["shmem", &nicevt_m2(), "--test", "imb-pingpong", "--network", "flow"]),
        2,
        &["--test imb-pingpong", "--network flow"],
    );
}

#[test]
fn shmem_latency_and_barrier_tables() {
    let out = hpcnet(&[
        "shmem",
        &nicevt_m2(),
        "--test",
        "put-latency",
        "--sizes",
        "8:64",
        "--iterations",
        "5",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(text.contains("ordered delivery (fence free)"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .count(),
        4,
        "{text}"
    );
    let out = hpcnet(&[
        "shmem",
        &nicevt_m2(),
        "--test",
        "barrier",
        "--pes",
        "8",
        "--iterations",
        "3",
        "--barrier",
        "fast",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .map(String::from)
        .collect();
    assert_eq!(rows.len(), 3, "2, 4 and 8 PEs");
}

#[test]
fn shmem_imb_pingpong_and_bcast() {
    let out = hpcnet(&[
        "shmem",
        &nicevt_m2(),
        "--test",
        "imb-pingpong",
        "--sizes",
        "8:64K",
        "--iterations",
        "5",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let pts = v["points"].as_array().unwrap();
    assert_eq!(pts.len(), 14, "8 B to 64 KiB");
    let lat: Vec<f64> = pts.iter().map(|p| p["latency_us"].as_f64().unwrap()).collect();
    assert!(lat.windows(2).all(|w| w[1] >= w[0]), "latency grows with size: {lat:?}");
    // The 6.25 Gb/s links bound the bandwidth (781 MB/s).
    let bw = pts[13]["gbytes_per_s"].as_f64().unwrap();
    assert!(bw > 0.3 && bw < 0.782, "{bw}");
    let out = hpcnet(&[
        "shmem",
        &nicevt_m2(),
        "--test",
        "imb-bcast",
        "--pes",
        "6",
        "--sizes",
        "8:1K",
        "--iterations",
        "3",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = stdout(&out)
        .lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .count();
    assert_eq!(rows, 8, "8 B to 1 KiB");
}

#[test]
fn shmem_cg_reports_iteration_and_communication_time() {
    let out = hpcnet(&[
        "shmem",
        &nicevt_m2(),
        "--test",
        "cg",
        "--pes",
        "8",
        "--class",
        "S",
        "--block",
        "25",
        "--iterations",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let cg = &v["cg"];
    assert_eq!(cg["messages_per_pe"], 49);
    let (it, comm) = (
        cg["iteration_us"].as_f64().unwrap(),
        cg["communication_us"].as_f64().unwrap(),
    );
    assert!(comm > 0.0 && comm < it, "{cg}");
    let out = hpcnet(&["shmem", &nicevt_m2(), "--test", "cg", "--pes", "6", "--block", "7"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("must divide the order"), "{}", stderr(&out));
}

#[test]
fn shmem_bad_arguments_exit_2_with_one_line() {
    for (args, want) in [
        (vec!["--pes", "1"], "--pes 1: needs 2 to 64"),
        (vec!["--to", "99", "--pes", "8"], "--to 99: the job has 8 PEs"),
        (vec!["--iterations", "0"], "--iterations 0: needs 1"),
        (vec!["--test", "randomaccess", "--pes", "6"], "needs a power of two"),
        (
            vec!["--test", "randomaccess", "--pes", "8", "--log-table", "40"],
            "at most 2^24",
        ),
    ] {
        let mut a = vec!["shmem".to_string(), nicevt_m2()];
        a.extend(args.iter().map(|s| s.to_string()));
        let out = hpcnet(&a);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// Honest runs: bounded inputs, refused impossible requests, and no silent success.

/// Runs `hpcnet ARGS` and returns (exit code, stdout, stderr).
fn outcome<S: AsRef<str>>(args: &[S]) -> (Option<i32>, String, String) {
    let out = hpcnet(args);
    let err = stderr(&out);
    for bad in ["panicked", "backtrace", "thread 'main'"] {
        assert!(!err.contains(bad), "stderr shows a panic: {err}");
    }
    (out.status.code(), stdout(&out), err)
}

fn chpp_pair() -> String {
    path_str(&scenarios_dir().join("chpp-pair.toml"))
}

#[test]
fn counts_that_size_memory_are_bounded() {
    let pair = chpp_pair();
    let out = hpcnet(&["p2p", &pair, "--sizes", "64:64", "--set", "nic.engines=4294967295"]);
    let why = bad_input(&out, &pair, "nic.engines");
    assert!(why.starts_with("must be 1 to 256, got 4294967295"), "{why}");
    for (set, key, part) in [
        (
            "nic.virtual_interfaces=1024",
            "nic.virtual_interfaces",
            "send queues per NIC",
        ),
        ("nic.host.links=100000", "nic.host.links", "must be 1 to 64"),
        (
            "nic.host.read_tags=4294967295",
            "nic.host.read_tags",
            "must be 1 to 1024",
        ),
        ("nic.max_in_flight=4294967295", "nic.max_in_flight", "at most 1048576"),
        ("router.shared_credits=100000", "router.shared_credits", "at most 65535"),
        (
            "router.multicast_tables=100000",
            "router.multicast_tables",
            "at most 65535",
        ),
        ("mpi.prepost=100000000000", "mpi.prepost", "must be 1 to 1048576"),
        ("mpi.ud_recv_depth=0", "mpi.ud_recv_depth", "must be 1 to 1048576"),
    ] {
        let why = run_rejects(&torus(), &["nic.functions=64", set], key);
        assert!(why.contains(part), "{set}: {why}");
    }
}

#[test]
fn scenario_files_are_read_up_to_16_mib() {
    let dir = TempDir::new("huge");
    let huge = dir.write("huge.toml", vec![b'#'; (16 << 20) + 1]);
    let (code, out, err) = outcome(&["run", &huge]);
    assert_eq!(code, Some(2), "{err}");
    assert!(out.is_empty());
    assert_eq!(
        err,
        format!("error: {huge}: is larger than 16 MiB, the largest scenario file read (is it a scenario?)\n")
    );
    // A device that never ends is refused the same way instead of filling memory.
    let (code, _, err) = outcome(&["run", "/dev/zero"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is larger than 16 MiB"), "{err}");
}

#[test]
fn a_run_that_measures_nothing_says_so_and_fails() {
    let t = torus();
    let mut args = vec!["run", &t, "--set", "traffic.load=1e-300"];
    let (code, out, err) = outcome(&args);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.contains("latency (ns)    no packet measured"), "{out}");
    assert!(!out.contains("latency (ns)    mean"), "{out}");
    assert!(err.starts_with("error: no packet measured: 0 packets created"), "{err}");
    args.push("--json");
    let (code, out, _) = outcome(&args);
    assert_eq!(code, Some(1));
    let v: Value = serde_json::from_str(&out).expect("one JSON document");
    for key in ["mean", "p50", "p99", "max"] {
        assert!(
            v["latency_ns"][key].is_null(),
            "latency_ns.{key} = {}",
            v["latency_ns"][key]
        );
    }
    assert!(v["network_latency_ns"].is_null() && v["mean_hops"].is_null());
    // Every packet dropped: two nodes whose only cable failed.
    let (code, out, err) = outcome(&[
        "run",
        &t,
        "--set",
        "topology={ kind = \"mesh\", k = [2] }",
        "--set",
        "routing.deadlock=\"none\"",
        "--set",
        "faults.failed_links=[{ router = 0, port = 0 }]",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.contains("delivered 0  dropped 139"), "{out}");
    assert!(out.contains("no packet measured (115 created"), "{out}");
    assert!(err.contains("0 delivered (139 dropped in the run)"), "{err}");
}

#[test]
fn an_undrained_run_counts_what_is_left_and_fails_unless_accepted() {
    let t = torus();
    let (code, out, err) = outcome(&["run", &t, "--set", "sim.drain=\"0 ns\""]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        out.contains(
            "drained false, conservation ok, 136 packets still in flight and 0 at sources at the end (not drained)"
        ),
        "{out}"
    );
    assert!(
        err.starts_with("error: not drained: 136 packets still in flight and 0 at sources"),
        "{err}"
    );
    assert!(err.contains("sim.allow_undrained = true"), "{err}");
    let (code, out, err) = outcome(&[
        "run",
        &t,
        "--json",
        "--set",
        "sim.drain=\"0 ns\"",
        "--set",
        "sim.allow_undrained=true",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}"));
    assert_eq!(v["drained"], false);
    assert_eq!(v["conservation_ok"], true);
    assert_eq!(n("packets_in_flight"), 136);
    assert_eq!(n("packets_queued_at_sources"), 0);
    assert_eq!(
        n("packets_injected"),
        n("packets_delivered") + n("packets_dropped") + n("packets_in_flight")
    );
    assert_eq!(
        n("packets_generated"),
        n("packets_injected") + n("packets_queued_at_sources")
    );
}

#[test]
fn a_sweep_marks_a_deadlocked_point_and_fails() {
    let dir = TempDir::new("sweep-deadlock");
    let out_dir = dir.path("out");
    let t = torus();
    let (code, out, err) = outcome(&[
        "sweep",
        &t,
        "--load",
        "0.5:1.0:0.5",
        "--set",
        "routing.deadlock=none",
        "--out",
        &out_dir,
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("1.000") && l.ends_with("DEADLOCK")),
        "{out}"
    );
    assert!(
        err.contains("error: 1 of 2 sweep points did not complete (load 1: deadlock)"),
        "{err}"
    );
    let csv = std::fs::read_to_string(dir.0.join("out/torus-8x8-sweep.csv")).expect("csv written");
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].contains(",deadlock,status,"), "{}", rows[0]);
    assert!(rows[1].contains(",true,false,ok,"), "{}", rows[1]);
    assert!(rows[2].contains(",false,true,deadlock,"), "{}", rows[2]);
    let svg = std::fs::read_to_string(dir.0.join("out/torus-8x8-sweep.svg")).expect("svg written");
    assert!(svg.contains("deadlock at load 1.000"), "the plot marks the point");
}

#[test]
fn output_directories_are_checked_before_any_work() {
    let dir = TempDir::new("unwritable");
    let file = dir.write("not-a-dir", "x");
    let t = torus();
    let (code, out, err) = outcome(&["sweep", &t, "--load", "0.1:0.9:0.1", "--out", &file]);
    assert_eq!(code, Some(2), "{err}");
    assert!(out.is_empty());
    assert!(
        err.starts_with(&format!("error: --out {file}: cannot write there: ")),
        "{err}"
    );
    assert!(!err.contains("load 0.1"), "no point ran: {err}");
    let (code, _, err) = outcome(&["reproduce", "chpp-latency", "--out", &file]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with(&format!("error: --out {file}: cannot write there: ")),
        "{err}"
    );
}

#[test]
fn errors_name_the_key_that_is_wrong() {
    let t = torus();
    let why = run_rejects(&t, &["packet.header=\"1e12 B\""], "packet.header");
    assert!(why.contains("must be smaller than 4 GiB"), "{why}");
    let why = run_rejects(&t, &["nic.host.read_request=\"0 B\""], "nic.host.read_request");
    assert!(why.starts_with("must be 1 B to 4096 B, got 0 B"), "{why}");
    let why = run_rejects(&t, &["routing.algorithm=up_down"], "routing.algorithm");
    assert!(
        why.starts_with("'up_down' does not apply to topology kind 'torus' (it applies to fat_tree, leaf_spine, generalized_fat_tree; on 'torus' use dimension_order or minimal_adaptive or source)"),
        "{why}"
    );
    let df = path_str(&scenarios_dir().join("dragonfly-small.toml"));
    let why = run_rejects(
        &df,
        &["faults.failed_links=[{ router = 0, port = 5 }]"],
        "faults.failed_links",
    );
    assert!(
        why.starts_with("with 1 failed link the longest shortest route takes 4 router hops"),
        "{why}"
    );
}

#[test]
fn inputs_are_refused_rather_than_silently_changed() {
    let t = torus();
    let why = run_rejects(
        &t,
        &["traffic.pattern=hotspot", "traffic.hotspot_nodes=[]"],
        "traffic.hotspot_nodes",
    );
    assert!(why.starts_with("names no node"), "{why}");
    let why = run_rejects(&t, &["link.latency=\"1e-9 ps\""], "link.latency");
    assert!(why.contains("below the resolution of 1 ps"), "{why}");
    let why = run_rejects(
        &t,
        &["link_overrides=[{ router = 0, port = 0, lanes = 3 }]"],
        "link_overrides[0].lanes",
    );
    assert!(why.contains("(1, 2, 4, 8, 16), got 3"), "{why}");
    let why = run_rejects(
        &t,
        &["link_overrides=[{ router = 0, port = 0, lanes = 8 }]"],
        "link_overrides[0].lanes",
    );
    assert!(why.contains("at most its link.lanes = 1 working lanes, got 8"), "{why}");
    let pair = chpp_pair();
    let (code, out, err) = outcome(&["p2p", &pair, "--sizes", "1.5:4"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(out.is_empty());
    assert!(
        err.starts_with("error: --sizes 1.5:4: a size '1.5' is not a whole number of bytes"),
        "{err}"
    );
    // Seeds cover the whole u64 range: above 2^63 - 1 as a string (TOML integers are i64).
    for seed in ["18446744073709551615", "\"18446744073709551615\""] {
        let mut args = vec![
            "run".to_string(),
            t.clone(),
            "--json".into(),
            "--set".into(),
            format!("seed={seed}"),
        ];
        args.extend(SHORT.iter().map(|s| s.to_string()));
        let v = json(&hpcnet(&args));
        assert_eq!(v["seed"].as_u64(), Some(u64::MAX), "{seed}");
    }
    let why = run_rejects(&t, &["seed=-1"], "seed");
    assert!(why.starts_with("a seed must not be negative"), "{why}");
}

#[test]
fn every_scenario_command_takes_set() {
    let t = torus();
    let pair = chpp_pair();
    for (args, file) in [
        (vec!["run", &t], &t),
        (vec!["sweep", &t, "--load", "0.1:0.1:0.1"], &t),
        (vec!["topo", &t], &t),
        (vec!["p2p", &pair, "--sizes", "64:64"], &pair),
        (vec!["coll", &t, "--op", "barrier"], &t),
        (vec!["nas", &t, "--bench", "ft"], &t),
    ] {
        let mut a = args.clone();
        a.extend(["--set", "nosuch.key=1"]);
        let why = bad_input(&hpcnet(&a), file, "nosuch");
        assert!(why.starts_with("unknown field `nosuch`"), "{args:?}: {why}");
    }
    let (code, _, err) = outcome(&["reproduce", "chpp-latency", "--set", "nosuch.key=1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("nosuch: unknown field `nosuch`"), "{err}");
    let (code, _, err) = outcome(&["bench", "--only", "torus-8x8x8-uniform-0.45", "--set", "nosuch.key=1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("nosuch"), "{err}");
}

#[test]
fn coll_interleave_refuses_bad_values_naming_the_flag() {
    let tianhe = path_str(&scenarios_dir().join("tianhe-32.toml"));
    for (args, says) in [
        (
            vec!["--interleave", "0"],
            vec!["--interleave 0", "divisor of the 32 ranks"],
        ),
        (
            vec!["--interleave", "33"],
            vec!["--interleave 33", "divisor of the 32 ranks"],
        ),
        (
            vec!["--interleave", "5"],
            vec!["--interleave 5", "divisor of the 32 ranks"],
        ),
        (
            vec!["--interleave", "8", "--ranks", "4"],
            vec!["--interleave 8", "divisor of the 4 ranks"],
        ),
        (vec!["--interleave", "x"], vec!["'x'", "--interleave"]),
        (vec!["--interleave", "-1"], vec!["'-1'", "--interleave"]),
        (
            vec!["--interleave", "4", "--concurrent", "2"],
            vec!["--interleave", "--concurrent"],
        ),
        (vec!["--interleave", "4", "--grid", "2"], vec!["--interleave", "--grid"]),
        // Interleaved communicators of 8 members: roots are 0 … 7.
        (
            vec!["--interleave", "4", "--root", "8"],
            vec!["--root 8", "'stride 0' of 8 ranks"],
        ),
    ] {
        for algorithm in ["offload", "double-binary-tree"] {
            let mut a = vec![
                "coll",
                tianhe.as_str(),
                "--op",
                "bcast",
                "--algorithm",
                algorithm,
                "--sizes",
                "8:8",
                "--iterations",
                "1",
            ];
            a.extend(args.iter().copied());
            one_error_line(&hpcnet(&a), 2, &says);
        }
    }
}

#[test]
fn coll_offload_algorithm_runs_reports_its_statistics_and_refuses_what_it_cannot_do() {
    let tianhe = path_str(&scenarios_dir().join("tianhe-32.toml"));
    let v = json(&hpcnet(&[
        "coll",
        &tianhe,
        "--op",
        "allreduce",
        "--algorithm",
        "offload",
        "--type",
        "f64",
        "--sizes",
        "8:4K",
        "--iterations",
        "2",
        "--json",
    ]));
    let pts = v["points"].as_array().expect("points");
    assert_eq!(pts.len(), 10);
    let stat = |p: &Value, name: &str| {
        p["statistics"]
            .as_array()
            .expect("statistics")
            .iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["value"].as_u64())
            .unwrap_or_else(|| panic!("{name} in {p}"))
    };
    for p in pts {
        assert_eq!(p["algorithm"], "offload");
        assert!(p["checked_elements"].as_u64().unwrap() > 0, "results compared: {p}");
        // 4 calls (2 warm-up + 2 timed) of 32 members, each completing once.
        assert_eq!(stat(p, "nic.trig.completed"), 4 * 32);
        assert_eq!(stat(p, "nic.trig.errors"), 0);
        assert!(stat(p, "nic.trig.packets") > 0);
    }
    // 4 KiB of f64 is 4 pulses of 128 elements, 8 B one pulse.
    assert_eq!(stat(&pts[9], "nic.trig.pulses"), 4 * stat(&pts[0], "nic.trig.pulses"));
    assert!(pts[9]["mean_us"].as_f64() > pts[0]["mean_us"].as_f64());
    // Text output: one statistics line per size.
    let text = ok(&hpcnet(&[
        "coll",
        &tianhe,
        "--op",
        "bcast",
        "--algorithm",
        "offload",
        "--sizes",
        "8:64",
        "--iterations",
        "1",
    ]));
    assert_eq!(text.lines().filter(|l| l.contains("nic.trig @")).count(), 4, "{text}");
    // A machine without the unit, a collective the unit does not do, a bad key.
    let sunway = path_str(&scenarios_dir().join("sunway-prototype.toml"));
    let e = stderr(&hpcnet(&[
        "coll",
        &sunway,
        "--op",
        "allreduce",
        "--algorithm",
        "offload",
        "--ranks",
        "4",
        "--sizes",
        "8:8",
    ]));
    assert!(e.contains("[nic.triggered]"), "{e}");
    let e = stderr(&hpcnet(&["coll", &tianhe, "--op", "barrier", "--algorithm", "offload"]));
    assert!(e.contains("does not implement"), "{e}");
    bad_input(
        &hpcnet(&[
            "coll",
            &tianhe,
            "--op",
            "allreduce",
            "--algorithm",
            "offload",
            "--set",
            "nic.triggered.slots=1",
        ]),
        &tianhe,
        "nic.triggered.slots",
    );
}

#[test]
fn slow_links_are_not_a_deadlock_but_a_wait_cycle_is() {
    // One hop (11 us) longer than the watchdog (10 us): slow, not stuck.
    let ft = path_str(&scenarios_dir().join("fattree-4ary-3tree.toml"));
    let (code, out, err) = outcome(&["run", &ft, "--set", "link.latency=\"11 us\""]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("drained true, conservation ok"), "{out}");
    assert!(!out.contains("DEADLOCK"), "{out}");
    // Serialising one packet takes longer than the watchdog.
    let t = torus();
    let (code, out, err) = outcome(&[
        "run",
        &t,
        "--set",
        "link.lane_rate=\"0.1 Gb/s\"",
        "--set",
        "traffic.load=1.0",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("drained true, conservation ok"), "{out}");
    // Rank programs on the NICs: the same long hop is waited for, not called a deadlock.
    let pair = chpp_pair();
    let (code, out, err) = outcome(&["p2p", &pair, "--sizes", "64:64", "--set", "link.latency=\"11 us\""]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().any(|l| l.trim_start().starts_with("64 ")), "{out}");
    let (code, out, err) = outcome(&["coll", &t, "--op", "barrier", "--set", "link.latency=\"11 us\""]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("dissemination"), "{out}");
    // Without deadlock avoidance the rings jam: the verdict names the cycle.
    let (code, out, err) = outcome(&["run", &t, "--set", "traffic.load=1.0", "--set", "routing.deadlock=none"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.contains("DEADLOCK cycle  r"), "{out}");
    assert!(err.contains("; cycle of 8 waiting queues: r"), "{err}");
    let first = err
        .split("waiting queues: ")
        .nth(1)
        .and_then(|c| c.split(" -> ").next())
        .unwrap();
    assert!(
        err.contains(&format!("-> {first} (")),
        "the cycle closes on its first queue: {err}"
    );
    // Wormhole without a scheme: the evidence is the occupied VCs, not called a cycle.
    let (code, out, err) = outcome(&[
        "run",
        &t,
        "--set",
        "link.switching=\"wormhole\"",
        "--set",
        "link.ber=0",
        "--set",
        "routing.deadlock=none",
        "--set",
        "traffic.load=1.0",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.contains("DEADLOCK occupied VCs  r"), "{out}");
    assert!(err.contains(" occupied VCs, none able to move: r"), "{err}");
    assert!(!err.contains("cycle of"), "{err}");
}

#[test]
fn accepted_load_and_utilisation_stay_within_their_physical_maximum() {
    for (file, extra) in [
        ("chpp-pair.toml", None),
        ("sunway-prototype.toml", None),
        ("torus-8x8.toml", Some("link.lane_rate=\"0.1 Gb/s\"")),
    ] {
        let path = path_str(&scenarios_dir().join(file));
        let mut args = vec!["run", &path, "--json", "--set", "traffic.load=1.0"];
        if let Some(e) = extra {
            args.extend(["--set", e]);
        }
        let v = json(&hpcnet(&args));
        let accepted = v["accepted_load"].as_f64().unwrap();
        let busiest = v["link_utilisation"]["max"].as_f64().unwrap();
        assert!(accepted > 0.3 && accepted <= 1.0, "{file}: accepted {accepted}");
        assert!(busiest > 0.5 && busiest <= 1.0, "{file}: busiest link {busiest}");
    }
}

#[test]
fn machines_that_cannot_fit_are_refused_before_they_are_built() {
    let t = torus();
    let started = std::time::Instant::now();
    let why = run_rejects(&t, &["topology.k=[8,8,8,8,8,8,8,8]"], "topology");
    assert!(
        why.starts_with("16777216 routers, 16777216 nodes and 301989888 ports need about 269.3 GiB of simulator memory, more than the "),
        "{why}"
    );
    assert!(why.contains("GiB available (MemAvailable)"), "{why}");
    assert!(why.contains("set sim.memory_check = false"), "{why}");
    // A dragonfly too large for minimal routing's distance table is refused before it is built.
    let df = path_str(&scenarios_dir().join("dragonfly-small.toml"));
    let why = run_rejects(
        &df,
        &["topology={ kind = \"dragonfly\", a = 64, p = 32, h = 32 }"],
        "routing.algorithm",
    );
    assert!(
        why.starts_with("minimal table routing keeps a 131136×131136 distance table"),
        "{why}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "refused without building"
    );
}

/// Fault schedules are checked before the run, each error naming its key; a run with a fault
/// reports it (the failure, its detection, the losses by cause, the table rewrite, a timeline)
/// and repeats byte for byte.
#[test]
fn fault_schedules_are_checked_before_the_run_and_runs_report_them() {
    let t = torus();
    let ev = |s: &str| format!("faults.events=[{s}]");
    for (sets, key, says) in [
        (
            vec![ev(r#"{at="5 us", kind="router", router=999}"#)],
            "faults.events[0].router",
            "router 999 does not exist",
        ),
        (
            vec![
                ev(r#"{at="5 us", kind="lanes", router=0, port=0, lanes=3}"#),
                "link.lanes=4".into(),
            ],
            "faults.events[0].lanes",
            "(4, 2, 1), got 3",
        ),
        (
            vec![ev(r#"{at="5 us", kind="cable", router=0, port=0, action="repair"}"#)],
            "faults.events[0].action",
            "has not failed before",
        ),
        (
            vec![ev(
                r#"{at="5 us", kind="router", router=3}, {at="9 us", kind="router", router=3}"#,
            )],
            "faults.events[1].action",
            "cannot fail again",
        ),
        (
            vec![ev(r#"{at="5 us", kind="plane", plane=1}"#)],
            "faults.events[0].plane",
            "plane 1 does not exist",
        ),
        (
            vec![ev(r#"{at="-5 us", kind="router", router=1}"#)],
            "faults.events[0].at",
            "must not be negative",
        ),
        (
            vec![ev(r#"{at="5 us", kind="router", router=1, port=2}"#)],
            "faults.events[0].port",
            "not used by a 'router' event",
        ),
        (
            vec![r#"faults.random=[{class="cable", mtbf="0 s", repair="1 us", until="10 us"}]"#.into()],
            "faults.random[0].mtbf",
            "longer than 0",
        ),
        (
            vec!["faults.torus_bypass=true".into(), "router.vcs=3".into()],
            "router.vcs",
            "must be even",
        ),
    ] {
        let mut args = vec!["run".to_string(), t.clone()];
        for s in &sets {
            args.push("--set".into());
            args.push(s.clone());
        }
        let reason = bad_input(&hpcnet(&args), &t, key);
        assert!(reason.contains(says), "{key}: {reason}");
    }
    // Router 27 fails at 2 us, known 0.5 us later; the tables give the pairs around it a
    // first/last-step route 1 us after that.
    let mut args: Vec<String> = vec!["run".into(), t.clone(), "--json".into()];
    for s in [
        ev(r#"{at="2 us", kind="router", router=27}"#),
        "faults.torus_bypass=true".into(),
        "faults.detection=\"500 ns\"".into(),
        "faults.table_update=\"1 us\"".into(),
        "sim.warmup=\"1 us\"".into(),
        "sim.measure=\"5 us\"".into(),
    ] {
        args.push("--set".into());
        args.push(s);
    }
    let first = json(&hpcnet(&args));
    let f = field(&first, "faults");
    assert_eq!(f["stats"]["failures"], 1);
    assert_eq!(f["stats"]["table_updates"], 1);
    assert!(f["stats"]["bypass_pairs"].as_u64().unwrap() > 0, "{f}");
    assert_eq!(f["stats"]["bypass_unreachable"], 63);
    assert_eq!(f["events"][0]["component"]["kind"], "router");
    assert_eq!(f["events"][0]["detected_ns"], 2500.0);
    assert_eq!(f["timeline"].as_array().unwrap().len(), 10);
    assert_eq!(first["conservation_ok"], true);
    let drops = first["drops_by_reason"].as_object().unwrap();
    assert!(drops.contains_key("unreachable"), "{drops:?}");
    let dropped: u64 = drops.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(first["packets_dropped"].as_u64().unwrap(), dropped);
    assert_eq!(first["resolved_scenario"]["faults"]["torus_bypass"], true);
    let strip = |mut v: Value| {
        for k in ["wall_seconds", "loop_seconds"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v
    };
    assert_eq!(strip(first), strip(json(&hpcnet(&args))));
}

#[test]
fn p2p_under_random_loss_finishes_only_with_transport_reliability() {
    let chpp = chpp();
    let base = [
        "p2p",
        &chpp,
        "--test",
        "bw",
        "--sizes",
        "64K:64K",
        "--set",
        "nic.loss_rate=0.01",
    ];
    // Without the unit a lost packet's message never completes.
    one_error_line(
        &hpcnet(&base),
        1,
        &["the run did not finish: ", "rank program(s) still waiting"],
    );
    let mut args = base.to_vec();
    args.extend(["--set", "nic.reliability.enabled=true", "--json"]);
    let v = json(&hpcnet(&args));
    assert!(v.to_string().contains("\"gbytes_per_s\""), "{v}");
    // Bad values name their key.
    let bad = hpcnet(&["p2p", &chpp, "--set", "nic.loss_rate=1"]);
    assert!(bad_input(&bad, &chpp, "nic.loss_rate").contains("probability"));
    let bad = hpcnet(&["p2p", &chpp, "--set", "nic.reliability.window=0"]);
    assert!(bad_input(&bad, &chpp, "nic.reliability.window").contains("got 0"));
    let bad = hpcnet(&["p2p", &chpp, "--set", "nic.reliability.retries=101"]);
    bad_input(&bad, &chpp, "nic.reliability.retries");
}

/// Unit strings may be given to `--set` without TOML quotes (`link.latency=2us`,
/// `link.lane_rate=26Gb/s`): a value that is not valid TOML is taken as a string, so the run is
/// the same as with the quoted form.
#[test]
fn set_takes_unquoted_unit_strings() {
    let t = torus();
    let run = |set: &[&str]| {
        let mut args = vec!["run", t.as_str(), "--json"];
        args.extend(SHORT);
        for s in set {
            args.extend(["--set", s]);
        }
        json(&hpcnet(&args))
    };
    let quoted = run(&["link.latency=\"2 us\"", "link.lane_rate=\"26 Gb/s\""]);
    let bare = run(&["link.latency=2us", "link.lane_rate=26Gb/s"]);
    let spaced = run(&["link.latency=2 us", "link.lane_rate=26 Gb/s"]);
    for v in [&quoted, &bare, &spaced] {
        assert_eq!(v["resolved_scenario"]["link"]["latency"], "2 us");
        assert_eq!(v["resolved_scenario"]["link"]["lane_rate"], "26 Gb/s");
    }
    for k in ["zero_load_latency_ns", "latency_ns", "packets_delivered", "total_hops"] {
        assert_eq!(bare[k], quoted[k], "{k}");
        assert_eq!(spaced[k], quoted[k], "{k}");
    }
    // A bare word that is not a time is still refused by the key that reads it.
    let why = bad_input(
        &hpcnet(&["run", &t, "--set", "link.latency=2parsecs"]),
        &t,
        "link.latency",
    );
    assert!(why.contains("2parsecs"), "{why}");
}

/// The `--set` arguments that switch torus-8x8 to wormhole switching.
const WORMHOLE: [&str; 6] = [
    "--set",
    "link.switching=\"wormhole\"",
    "--set",
    "routing.deadlock=\"dateline\"",
    "--set",
    "link.ber=0",
];

#[test]
fn wormhole_runs_are_deterministic_and_conserve_packets_and_flits() {
    let mut args = vec!["run".to_string(), torus(), "--json".into()];
    args.extend(SHORT.iter().chain(WORMHOLE.iter()).map(|s| s.to_string()));
    let a = ok(&hpcnet(&args));
    let b = ok(&hpcnet(&args));
    assert_eq!(without_wall_time(&a), without_wall_time(&b));
    let v: Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["conservation_ok"], true);
    assert_eq!(v["packets_injected"], v["packets_delivered"]);
    let stat = |name: &str| {
        field(&v, "stats")
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))["value"]
            .as_u64()
            .unwrap()
    };
    // 256 B payloads + 16 B header: 17 flits of 16 B per packet, all delivered.
    let delivered = v["packets_delivered"].as_u64().unwrap();
    assert_eq!(stat("net.flits_injected"), 17 * delivered);
    assert_eq!(stat("net.flits_ejected"), 17 * delivered);
}

#[test]
fn wormhole_refusals_are_bad_input() {
    let t = torus();
    let r = run_rejects(&t, &["link.switching=\"wormhole\"", "link.ber=0"], "routing.deadlock");
    assert!(r.contains("dateline"), "{r}");
    let r = run_rejects(
        &t,
        &["link.switching=\"wormhole\"", "routing.deadlock=\"dateline\""],
        "link.ber",
    );
    assert!(r.contains("link.ber = 0"), "{r}");
    run_rejects(&t, &["link.flit_bytes=\"16 B\""], "link.flit_bytes");
    run_rejects(
        &t,
        &[
            "link.switching=\"wormhole\"",
            "routing.deadlock=\"dateline\"",
            "link.ber=0",
            "link.flit_bytes=\"48 B\"",
        ],
        "router.credit_unit",
    );
}

#[test]
fn wormhole_p2p_latency_matches_cut_through_on_an_idle_network() {
    let base = [
        "p2p",
        &torus(),
        "--test",
        "latency",
        "--set",
        "routing.deadlock=\"dateline\"",
        "--set",
        "link.ber=0",
    ];
    let vct = ok(&hpcnet(&base));
    let mut args: Vec<&str> = base.to_vec();
    args.extend(WORMHOLE.iter().copied());
    let wh = ok(&hpcnet(&args));
    assert_eq!(vct, wh, "one message at a time: the zero-load identity");
    // One 64 B credit per VC is a 4-flit buffer (16 B flits), below the credit round trip
    // 2L + R = 60 ns (10 ns links, 40 ns routers): each hop passes at most 4 flits per 60 ns,
    // 64 B / 60 ns instead of the link's 13 Gb/s (64 B in 39.4 ns). Packets of at most 4 flits
    // (messages up to 32 B here: 48 B with the header) are not held back; every larger message
    // is slower, and long messages stream at that rate, 256/272 of it payload.
    args.extend(["--set", "router.private_credits=1"]);
    let small = ok(&hpcnet(&args));
    let (wh, small) = (latency_table(&wh), latency_table(&small));
    assert_eq!(wh.len(), small.len());
    for (&(size, w), &(s2, s)) in wh.iter().zip(&small) {
        assert_eq!(size, s2);
        if size <= 32 {
            assert_eq!(s, w, "{size} B: at most 4 flits, not held back");
        } else {
            assert!(s > w, "{size} B: 4-flit buffers {s} us, not slower than {w} us");
        }
    }
    // Streaming rate (GB/s of payload) from the two largest messages.
    let rate = |t: &[(u64, f64)]| {
        let ((s0, t0), (s1, t1)) = (t[t.len() - 2], t[t.len() - 1]);
        (s1 - s0) as f64 / (t1 - t0) / 1e3
    };
    let payload = 256.0 / 272.0;
    let (link, credit_bound) = (13.0 / 8.0 * payload, 64.0 / 60.0 * payload);
    let (rw, rs) = (rate(&wh), rate(&small));
    assert!(
        (rw / link - 1.0).abs() < 1e-3,
        "whole packets buffered: {rw} GB/s, link {link}"
    );
    assert!(
        (rs / credit_bound - 1.0).abs() < 1e-3,
        "4-flit buffers: {rs} GB/s, credit round trip allows {credit_bound}"
    );
}

/// (size B, latency us) rows of a `p2p --test latency` table.
fn latency_table(out: &str) -> Vec<(u64, f64)> {
    let rows: Vec<(u64, f64)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert!(rows.len() > 10, "a latency table: {out}");
    rows
}

// ---------------------------------------------------------------------------------------------
// The router's crossbar model (`router.crossbar`).

/// `router.crossbar = "ideal"` is the default: setting it leaves the sunway-prototype report
/// byte for byte as it was; "tiled" (the SWHRC 5 × 8 tile array) runs, conserves packets,
/// repeats byte for byte, and adds column contention (a higher mean latency at the same load).
#[test]
fn crossbar_ideal_is_the_default_and_tiled_runs_on_sunway() {
    let file = path_str(&scenarios_dir().join("sunway-prototype.toml"));
    let run = |set: &[&str]| {
        let mut args = vec!["run".to_string(), file.clone(), "--json".into()];
        args.extend(SHORT.iter().map(|s| s.to_string()));
        for s in set {
            args.push("--set".into());
            args.push(s.to_string());
        }
        without_wall_time(&ok(&hpcnet(&args)))
    };
    let default = run(&[]);
    assert_eq!(run(&["router.crossbar=\"ideal\""]), default);
    let tiled = run(&["router.crossbar=\"tiled\""]);
    assert_eq!(run(&["router.crossbar=\"tiled\""]), tiled);
    assert_ne!(tiled, default);
    let v: Value = serde_json::from_str(&tiled).expect("one JSON document");
    let d: Value = serde_json::from_str(&default).expect("one JSON document");
    let lat = |v: &Value| {
        v.pointer("/latency_ns/mean")
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("no latency_ns.mean in {v:#}"))
    };
    assert!(lat(&v) > lat(&d), "tiled {} vs ideal {}", lat(&v), lat(&d));
}

/// Too few tiles for the 40-port SWHRC, or a tile key without the tiled crossbar, is bad input
/// naming the key.
#[test]
fn crossbar_tile_keys_are_checked() {
    let file = path_str(&scenarios_dir().join("sunway-prototype.toml"));
    let reason = run_rejects(
        &file,
        &["router.crossbar=\"tiled\"", "router.tile_rows=4"],
        "router.tile_rows",
    );
    assert!(reason.contains("32 tiles") && reason.contains("40 ports"), "{reason}");
    let reason = run_rejects(
        &file,
        &["router.column_channel=\"per_output\""],
        "router.column_channel",
    );
    assert!(reason.contains("tiled"), "{reason}");
}

/// `run --replications N` with a short run of the 8×8 torus, as JSON.
fn replicated(n: &str, threads: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", "--replications", n, "--threads", threads, "--json"];
    let t = torus();
    args.push(&t);
    args.extend(SHORT);
    args.extend(extra);
    json(&hpcnet(&args))
}

/// Each replication is the run of its seed alone (`--set seed=S`), the seeds count up from
/// the scenario's, the estimates are the mean and Student-t interval of the runs' figures, and
/// nothing but wall time depends on the thread count.
#[test]
fn replications_are_the_runs_of_their_seeds_and_their_estimates() {
    let v = replicated("4", "2", &["--set", "seed=41"]);
    assert_eq!(field(&v, "seeds"), &serde_json::json!([41, 42, 43, 44]));
    assert_eq!(field(&v, "complete"), 4);
    let runs = field(&v, "runs").as_array().expect("runs");
    let means: Vec<f64> = runs.iter().map(|r| r["latency_ns"]["mean"].as_f64().unwrap()).collect();
    for (r, seed) in runs.iter().zip(41..) {
        assert_eq!(r["status"], "ok");
        let mut args = vec!["run".to_string(), torus(), "--json".into()];
        args.extend(SHORT.iter().map(|s| s.to_string()));
        args.extend(["--set".to_string(), format!("seed={seed}")]);
        let alone = json(&hpcnet(&args));
        for key in [
            "latency_ns",
            "accepted_load",
            "events",
            "packets_delivered",
            "mean_hops",
        ] {
            assert_eq!(r[key], alone[key], "seed {seed}: {key}");
        }
    }
    assert!(
        means.windows(2).any(|w| w[0] != w[1]),
        "seeds give different runs: {means:?}"
    );
    // The estimate, by hand: mean, sample standard deviation, t(0.975, 3) = 3.182.
    let e = &field(&v, "estimates")["latency_mean_ns"];
    let mean = means.iter().sum::<f64>() / 4.0;
    let sd = (means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
    assert!((e["mean"].as_f64().unwrap() - mean).abs() < 1e-9 * mean, "{e}");
    assert!((e["std_dev"].as_f64().unwrap() - sd).abs() < 1e-9 * sd.max(1.0), "{e}");
    let hw = e["half_width"].as_f64().unwrap();
    assert!((hw - 3.182 * sd / 2.0).abs() < 1e-3 * hw, "{e}");
    assert_eq!(e["n"], 4);
    assert_eq!(field(&v, "confidence_level"), 0.95);
    // The thread count changes nothing but wall time.
    let one = replicated("4", "1", &["--set", "seed=41"]);
    let strip = |v: &Value| {
        let mut v = v.clone();
        for r in v["runs"].as_array_mut().unwrap() {
            let r = r.as_object_mut().unwrap();
            r.remove("wall_seconds");
            r.remove("loop_seconds");
        }
        v
    };
    assert_eq!(strip(&v), strip(&one));
}

/// The text report lists each seed and the estimates; a replication that does not complete is
/// left out of the estimates, named, and fails the command (exit 1); bad counts are usage
/// errors (exit 2).
#[test]
fn replications_report_estimates_and_fail_on_incomplete_runs() {
    let t = torus();
    let mut args = vec!["run", &t, "--replications", "3"];
    args.extend(SHORT);
    let text = ok(&hpcnet(&args));
    assert!(text.contains("3 replications (seeds 1 to 3)"), "{text}");
    assert!(
        text.contains("95 % confidence interval (Student t, 2 degrees of freedom)"),
        "{text}"
    );
    for name in ["accepted_load", "latency_mean_ns", "latency_p99_ns", "mean_hops"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {text}"));
        assert!(
            line.contains(" ± ") && line.contains("sd ") && line.contains("range "),
            "{line}"
        );
    }
    // Too short a drain at a high load: no replication drains.
    let out = hpcnet(&[
        "run",
        &t,
        "--replications",
        "2",
        "--set",
        "traffic.load=0.9",
        "--set",
        "sim.drain=\"10 ns\"",
        "--set",
        "sim.measure=\"2 us\"",
        "--set",
        "sim.warmup=\"1 us\"",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains("NOT DRAINED (left out)"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("no estimates: 0 of 2 replications completed"),
        "{}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(
        err.contains("2 of 2 replications did not complete (seed 1: not drained, seed 2: not drained)"),
        "{err}"
    );
    for (extra, words) in [
        (vec!["--replications", "1"], vec!["--replications", "2..=1000"]),
        (vec!["--replications", "1001"], vec!["--replications", "2..=1000"]),
        (vec!["--threads", "2"], vec!["--replications"]),
        (
            vec!["--replications", "2", "--links", "l.csv"],
            vec!["--links", "--replications"],
        ),
    ] {
        let mut args = vec!["run", t.as_str()];
        args.extend(extra);
        let line = one_error_line(&hpcnet(&args), 2, &words);
        assert!(line.ends_with("(see hpcnet --help)"), "{line}");
    }
}

/// A sweep with replications: the CSV keeps its columns (now means over the replications) and
/// adds the interval half-widths, which bracket what the replications spread over; the text
/// shows mean ± half-width; one replication per load is the plain sweep.
#[test]
fn sweep_replications_add_confidence_intervals() {
    let dir = TempDir::new("sweep-reps");
    let run = |reps: &str, out: &str| {
        let mut args = vec![
            "sweep".to_string(),
            torus(),
            "--load".into(),
            "0.2:0.4:0.2".into(),
            "--out".into(),
            dir.path(out),
            "--replications".into(),
            reps.into(),
            "--json".into(),
        ];
        args.extend(SHORT.iter().map(|s| s.to_string()));
        json(&hpcnet(&args))
    };
    let v = run("3", "three");
    assert_eq!(field(&v, "replications"), 3);
    let csv = std::fs::read_to_string(field(&v, "csv").as_str().unwrap()).expect("CSV");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].ends_with(",wall_seconds,replications,accepted_load_ci95,latency_mean_ns_ci95,latency_p99_ns_ci95"),
        "{}",
        lines[0]
    );
    for (row, p) in lines[1..].iter().zip(field(&v, "points").as_array().unwrap()) {
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells.len(), 17, "{row}");
        assert_eq!(cells[13], "3");
        let e = &p["estimates"]["latency_mean_ns"];
        assert_eq!(p["seeds"], serde_json::json!([1, 2, 3]));
        assert!(
            (cells[3].parse::<f64>().unwrap() - e["mean"].as_f64().unwrap()).abs() < 1e-3,
            "{row}"
        );
        assert!(
            (cells[15].parse::<f64>().unwrap() - e["half_width"].as_f64().unwrap()).abs() < 1e-3,
            "{row}"
        );
        // The interval of three runs is wider than half their range (t(0.975, 2) = 4.3).
        let (lo, hi) = (e["min"].as_f64().unwrap(), e["max"].as_f64().unwrap());
        assert!(lo < hi && e["half_width"].as_f64().unwrap() > (hi - lo) / 2.0, "{e}");
    }
    // One replication: the plain sweep's CSV.
    let one = run("1", "one");
    let csv1 = std::fs::read_to_string(field(&one, "csv").as_str().unwrap()).expect("CSV");
    assert!(csv1.lines().next().unwrap().ends_with(",events,wall_seconds"), "{csv1}");
    assert!(one["points"][0].get("estimates").is_none());
}

/// `--precision P` stops at the first replication count (seed order, at least 3) whose 95 %
/// intervals of the mean latency and accepted load are within ±P of the means: the same count
/// on any thread count, one fewer does not reach it, and the result is the plain
/// `--replications k` of that count.
#[test]
fn a_precision_target_stops_at_the_first_count_that_reaches_it() {
    let v = replicated("30", "2", &["--precision", "0.04"]);
    let k = field(&v, "replications").as_u64().unwrap();
    let p = field(&v, "precision");
    assert_eq!(p["reached"], true, "{p}");
    assert!((3..30).contains(&k), "stopped at {k}");
    for (name, r) in p["relative_half_widths"].as_object().unwrap() {
        assert!(r.as_f64().unwrap() <= 0.04, "{name}: {r}");
    }
    assert_eq!(field(&v, "max_replications"), 30);
    assert_eq!(field(&v, "seeds").as_array().unwrap().len() as u64, k);
    let three = replicated("30", "3", &["--precision", "0.04"]);
    assert_eq!(
        field(&three, "replications"),
        k,
        "the stop does not depend on the threads"
    );
    let plain = replicated(&k.to_string(), "2", &[]);
    assert_eq!(field(&plain, "estimates"), field(&v, "estimates"));
    if k > 3 {
        let fewer = replicated(&(k - 1).to_string(), "2", &["--precision", "0.04"]);
        assert_eq!(field(&fewer, "precision")["reached"], false);
        assert_eq!(field(&fewer, "replications"), k - 1);
    }
    let t = torus();
    for (extra, words) in [
        (
            vec!["--replications", "3", "--precision", "0"],
            vec!["--precision", "between 0 and 1"],
        ),
        (
            vec!["--replications", "3", "--precision", "1"],
            vec!["--precision", "between 0 and 1"],
        ),
        (vec!["--precision", "0.1"], vec!["--replications"]),
    ] {
        let mut args = vec!["run", t.as_str()];
        args.extend(extra);
        one_error_line(&hpcnet(&args), 2, &words);
    }
}

/// Valiant and UGAL (and the group-shift pattern) run on the dragonfly only, with at least 5
/// VCs, on the packet network; a
/// Valiant run reports why it has no channel-load bound, a UGAL run has one (its idle-network
/// choice is the minimal path).
#[test]
fn valiant_and_ugal_are_dragonfly_routings_of_the_packet_network() {
    let df = path_str(&scenarios_dir().join("dragonfly-small.toml"));
    let t = torus();
    let reason = bad_input(
        &hpcnet(&["run", &t, "--set", "routing.algorithm=valiant"]),
        &t,
        "routing.algorithm",
    );
    assert!(reason.contains("applies to dragonfly"), "{reason}");
    let reason = bad_input(
        &hpcnet(&["run", &t, "--set", "traffic.pattern=group_shift"]),
        &t,
        "traffic.pattern",
    );
    assert!(reason.contains("not a dragonfly"), "{reason}");
    let reason = bad_input(
        &hpcnet(&["run", &df, "--set", "routing.algorithm=ugal"]),
        &df,
        "router.vcs",
    );
    assert!(reason.contains("at least 5 virtual channels"), "{reason}");
    let reason = bad_input(
        &hpcnet(&[
            "coll",
            &df,
            "--op",
            "allreduce",
            "--ranks",
            "8",
            "--network",
            "flow",
            "--set",
            "routing.algorithm=valiant",
            "--set",
            "router.vcs=5",
        ]),
        &df,
        "routing.algorithm",
    );
    assert!(reason.contains("packet network"), "{reason}");
    let run = |algorithm: &str| {
        let mut args = vec!["run".to_string(), df.clone(), "--json".into()];
        args.extend(SHORT.iter().map(|s| s.to_string()));
        for s in [format!("routing.algorithm={algorithm}"), "router.vcs=5".into()] {
            args.extend(["--set".to_string(), s]);
        }
        json(&hpcnet(&args))
    };
    let v = run("valiant");
    assert_eq!(v["routing"], "valiant");
    assert!(v["channel_load_bound"].is_null());
    assert!(
        v["channel_load_bound_skipped"]
            .as_str()
            .unwrap()
            .contains("random intermediate group"),
        "{}",
        v["channel_load_bound_skipped"]
    );
    let u = run("ugal");
    assert!(u["channel_load_bound"]["saturation_bound"].as_f64().unwrap() > 0.0);
    assert!(u["conservation_ok"].as_bool().unwrap() && v["conservation_ok"].as_bool().unwrap());
}
