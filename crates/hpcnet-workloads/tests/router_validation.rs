//! Router micro-architecture against the textbook shape of saturation throughput: on the
//! shipped 8 × 8 and 8 × 8 × 8 tori and the 4-ary 3-tree under uniform traffic, a router with
//! input speedup 1 and a one-iteration iSLIP allocator saturates well below the channel-load
//! bound, and its saturation throughput grows with more VCs and with input speedup (Dally &
//! Towles, *Principles and Practices of Interconnection Networks*, ch. 13 and 17: throughput
//! rising with VCs and with speedup; Karol, Hluchyj & Morgan 1987: one FIFO per input
//! saturates at 2 − √2 ≈ 0.586 of capacity under uniform traffic; McKeown 1999 for iSLIP).
//!
//! Saturation throughput is measured as the accepted load at offered load 1.0 (every source
//! always has packets), as a fraction of the channel-load bound the run reports, over the
//! model reference's run length (the scenario's warm-up, 20 µs measured, seed 1), so each
//! value is a figure of its table ("Saturation of the router models"). Shorter windows are
//! still in the transient: at 2 µs warm-up and 6 µs measured, 2 VCs / 4 VCs / speedup 2 give
//! 0.626 / 0.661 / 0.708 on 8 × 8, 0.575 / 0.629 / 0.658 on 8 × 8 × 8 and 0.778 / 0.862 /
//! 0.892 on the fat tree, against the table's 0.638 / 0.732 / 0.725, 0.591 / 0.691 / 0.680 and
//! 0.776 / 0.865 / 0.886 — the 4-VC tori most of all, whose larger buffers take longer to fill.

use hpcnet_workloads::synthetic::{run_synthetic, RunOptions};
use hpcnet_workloads::Scenario;
use std::path::PathBuf;

fn scenario(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios")).join(name)
}

/// Accepted load over the channel-load bound at offered load 1.0, with `set` on top; the run
/// must drain (no deadlock) and conserve packets.
fn saturation(name: &str, set: &[&str]) -> f64 {
    let mut o: Vec<String> = vec![
        "traffic.load=1.0".into(),
        "traffic.pattern=uniform".into(),
        "router.allocator=islip".into(),
        "router.islip_iterations=1".into(),
        "sim.measure=20us".into(),
    ];
    o.extend(set.iter().map(|s| s.to_string()));
    let sc = Scenario::load(&scenario(name), &o).unwrap_or_else(|e| panic!("{name}: {e}"));
    let r = run_synthetic(&sc, RunOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(r.conservation_ok, "{name} {set:?}: conservation");
    assert!(r.drained && r.deadlock.is_none(), "{name} {set:?}: drains");
    r.accepted_over_bound.expect("the run reports its channel-load bound")
}

/// The model reference's figures of one network (3 decimals): input speedup 1 with 2 VCs,
/// 4 VCs, input speedup 2 with 2 VCs.
struct Documented {
    base: f64,
    more_vcs: f64,
    speedup: f64,
}

/// One network: each figure as documented (within one unit of its last printed digit: the
/// table rounds, and 0.7755 prints as 0.776); speedup 1 well below
/// the bound, inside the band the literature gives for input-queued routers with FIFO inputs
/// (0.55–0.80: Karol et al.'s 0.586 for one FIFO per input, up to the fat tree's fewer input
/// conflicts); 4 VCs and speedup 2 each at least 0.05 higher (the table's rises are
/// 0.087–0.110).
fn check(name: &str, doc: Documented) {
    let credits = "router.private_credits=16";
    let base = saturation(name, &["router.vcs=2", credits, "router.input_speedup=1"]);
    let more_vcs = saturation(name, &["router.vcs=4", credits, "router.input_speedup=1"]);
    let speedup = saturation(name, &["router.vcs=2", credits, "router.input_speedup=2"]);
    eprintln!("{name}: speedup 1 {base:.4}, more VCs {more_vcs:.4}, speedup 2 {speedup:.4}");
    for (what, got, want) in [
        ("speedup 1, 2 VCs", base, doc.base),
        ("4 VCs", more_vcs, doc.more_vcs),
        ("speedup 2", speedup, doc.speedup),
    ] {
        assert!(
            (got - want).abs() <= 1e-3,
            "{name} {what}: {got:.4} of the bound, documented {want:.3}"
        );
    }
    assert!(
        (0.55..0.80).contains(&base),
        "{name}: input speedup 1 saturates at {base:.3} of the bound"
    );
    assert!(more_vcs > base + 0.05, "{name}: more VCs {more_vcs:.3} vs {base:.3}");
    assert!(speedup > base + 0.05, "{name}: speedup 2 {speedup:.3} vs {base:.3}");
}

#[test]
fn torus_8x8_saturates_below_the_bound_and_gains_with_vcs_and_speedup() {
    check(
        "torus-8x8.toml",
        Documented {
            base: 0.638,
            more_vcs: 0.732,
            speedup: 0.725,
        },
    );
}

#[test]
fn torus_8x8x8_saturates_below_the_bound_and_gains_with_vcs_and_speedup() {
    check(
        "torus-8x8x8.toml",
        Documented {
            base: 0.591,
            more_vcs: 0.691,
            speedup: 0.680,
        },
    );
}

#[test]
fn fat_tree_4ary_3tree_saturates_below_the_bound_and_gains_with_vcs_and_speedup() {
    check(
        "fattree-4ary-3tree.toml",
        Documented {
            base: 0.776,
            more_vcs: 0.865,
            speedup: 0.886,
        },
    );
}
