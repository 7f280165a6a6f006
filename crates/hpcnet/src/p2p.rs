//! `hpcnet p2p`: point-to-point benchmarks on a scenario's NICs (rank programs on the verbs
//! API): one-message latency per primitive, ping-pong, streaming bandwidth (uni/bi) and
//! message rate over a range of sizes.

use crate::{run::load, Common, Failure};
use clap::ValueEnum;
use hpcnet_des::Bytes;
use hpcnet_workloads::p2p::{
    sizes_up_to, try_get_exchange, try_op_latency, try_pingpong, try_stream, LatencyOp, Options, P2pError, Point,
    MAX_MESSAGE_SIZE,
};
use hpcnet_workloads::Rank;
use std::path::Path;

/// What to measure.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum Test {
    /// One message, doorbell to data written at the receiver (see --op).
    Latency,
    /// Ping-pong of notified writes: half the round trip.
    Pingpong,
    /// Streaming RDMA-write bandwidth, one direction, --window messages in flight.
    Bw,
    /// Streaming bandwidth in both directions at once.
    Bibw,
    /// Both ranks GET from each other at full rate, --window outstanding, --messages each (the
    /// cHPP GET-deadlock experiment, spec 02): a deadlock exits 1 naming the blocked channel.
    GetExchange,
    /// Message rate (as bw, reported in messages per second).
    Rate,
}

/// Primitive for `--test latency`.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum OpArg {
    Write,
    Put,
    Get,
    NapImm,
    NapInd,
}

/// Options of `hpcnet p2p`.
pub struct Args<'a> {
    pub scenario: &'a Path,
    pub test: Test,
    pub op: OpArg,
    /// `--sizes`, if given (default [`DEFAULT_SIZES`]).
    pub sizes: Option<&'a str>,
    pub from: u32,
    pub to: Option<u32>,
    pub window: u32,
    pub messages: u64,
    pub qps: u32,
    pub common: &'a Common,
}

/// `--sizes` when the user gives none: the whole range, which is capped at a primitive's limit
/// (with a note) where an explicit range is refused.
pub const DEFAULT_SIZES: &str = "1:4M";

/// `--sizes MIN:MAX` as (MIN, MAX), both within 1 B ..= [`MAX_MESSAGE_SIZE`].
pub(crate) fn parse_range(spec: &str) -> Result<(u64, u64), Failure> {
    let bad = |why: String| {
        Failure::input(format!(
            "--sizes {spec}: {why} (expected MIN:MAX, e.g. 1:4M, powers of two in between; see hpcnet --help)"
        ))
    };
    let (a, b) = spec.split_once(':').ok_or_else(|| bad("needs MIN:MAX".into()))?;
    let a = Bytes::parse_whole(a.trim()).map_err(|e| bad(e.0))?;
    let b = Bytes::parse_whole(b.trim()).map_err(|e| bad(e.0))?;
    if a.0 == 0 || a > b {
        return Err(bad("need 0 < MIN <= MAX".into()));
    }
    if b.0 > MAX_MESSAGE_SIZE {
        return Err(bad(format!(
            "{b} is above the largest message size, {} (the model allocates every message buffer)",
            Bytes(MAX_MESSAGE_SIZE)
        )));
    }
    Ok((a.0, b.0))
}

/// MIN, the powers of two between, and MAX.
pub(crate) fn sizes_between(min: u64, max: u64) -> Vec<u64> {
    let mut v: Vec<u64> = sizes_up_to(max).into_iter().filter(|&s| s >= min).collect();
    if v.first() != Some(&min) {
        v.insert(0, min);
    }
    if v.last() != Some(&max) {
        v.push(max);
    }
    v
}

#[cfg(test)]
fn parse_sizes(spec: &str) -> Result<Vec<u64>, Failure> {
    parse_range(spec).map(|(a, b)| sizes_between(a, b))
}

/// `--window`, `--messages`, `--qps`: each must be at least 1.
fn check_counts(args: &Args) -> Result<(), Failure> {
    for (flag, value, what) in [
        ("--window", u64::from(args.window), "messages in flight"),
        ("--messages", args.messages, "messages per size"),
        ("--qps", u64::from(args.qps), "queue pairs"),
    ] {
        if value == 0 {
            return Err(Failure::input(format!(
                "{flag} 0: needs at least 1 ({what}) (see hpcnet --help)"
            )));
        }
    }
    if args.qps > MAX_QPS {
        return Err(Failure::input(format!(
            "--qps {}: at most {MAX_QPS} queue pairs (see hpcnet --help)",
            args.qps
        )));
    }
    Ok(())
}

/// Round trips per size of `--test pingpong` at most: on the otherwise idle machine of a p2p
/// test the round trips repeat, so more would only cost time.
const MAX_ROUND_TRIPS: u64 = 1000;

/// Most queue pairs `--qps` may ask for: each is real state in the model, and far more than a
/// NIC offers (Sunway: 128 virtual interfaces).
const MAX_QPS: u32 = 65_536;

fn op_name(op: OpArg) -> String {
    use clap::ValueEnum;
    op.to_possible_value()
        .map_or_else(|| format!("{op:?}"), |v| v.get_name().to_string())
}

pub fn p2p(args: &Args) -> Result<(), Failure> {
    check_counts(args)?;
    let sizes = args.sizes.unwrap_or(DEFAULT_SIZES);
    let (min, max) = parse_range(sizes)?;
    let sc = load(args.scenario, args.common)?;
    let probe = sc.world().map_err(Failure::input)?;
    let ranks = probe.ranks() as u32;
    let to = args.to.unwrap_or(ranks - 1);
    for (name, r) in [("--from", args.from), ("--to", to)] {
        if r >= ranks {
            return Err(Failure::input(format!(
                "{}: {name} {r}: the machine has {ranks} ranks",
                sc.source
            )));
        }
    }
    if args.from == to {
        return Err(Failure::input(format!(
            "{}: --from and --to are the same rank {to}",
            sc.source
        )));
    }
    // A NAP carries at most nic.nap_buffer bytes: an explicit range beyond is refused, the
    // default range is capped there.
    let nap = matches!(args.test, Test::Latency) && matches!(args.op, OpArg::NapImm | OpArg::NapInd);
    let limit = if nap {
        probe.config().nap_buffer.0
    } else {
        MAX_MESSAGE_SIZE
    };
    let max = if max <= limit {
        max
    } else if args.sizes.is_none() && min <= limit {
        eprintln!(
            "note: --op {} carries at most {} (nic.nap_buffer of {}): sizes capped at {} (give --sizes to choose)",
            op_name(args.op),
            Bytes(limit),
            sc.source,
            Bytes(limit)
        );
        limit
    } else {
        return Err(Failure::input(format!(
            "--sizes {}: --op {} carries at most {} (nic.nap_buffer of {}) (see hpcnet --help)",
            sizes,
            op_name(args.op),
            Bytes(limit),
            sc.source
        )));
    };
    if matches!(args.test, Test::Pingpong) && args.messages > MAX_ROUND_TRIPS {
        eprintln!(
            "note: --test pingpong runs at most {MAX_ROUND_TRIPS} round trips per size (--messages {})",
            args.messages
        );
    }
    let sizes = sizes_between(min, max);
    let opts = Options {
        window: args.window,
        messages: args.messages,
        qps: args.qps,
        rail: 0,
    };
    let test = match args.test {
        Test::Latency => format!("latency --op {}", op_name(args.op)),
        t => t
            .to_possible_value()
            .map_or_else(|| format!("{t:?}"), |v| v.get_name().to_string()),
    };
    let mut points: Vec<Point> = Vec::new();
    for &size in &sizes {
        let world = sc.world().map_err(Failure::input)?;
        let p = match args.test {
            Test::Latency => {
                let op = match args.op {
                    OpArg::Write => LatencyOp::Write,
                    OpArg::Put => LatencyOp::Put,
                    OpArg::Get => LatencyOp::Get,
                    OpArg::NapImm => LatencyOp::NapImmediate,
                    OpArg::NapInd => LatencyOp::NapIndirect,
                };
                try_op_latency(world, Rank(args.from), Rank(to), op, size).map(|t| Point {
                    size,
                    messages: 1,
                    time_ns: t.as_ns_f64(),
                    gbytes_per_s: size as f64 / t.as_ns_f64(),
                    messages_per_s: 1e9 / t.as_ns_f64(),
                    latency_us: Some(t.as_us_f64()),
                })
            }
            Test::Pingpong => try_pingpong(
                world,
                Rank(args.from),
                Rank(to),
                size,
                args.messages.min(MAX_ROUND_TRIPS),
            ),
            Test::Bw | Test::Rate => try_stream(world, Rank(args.from), Rank(to), size, false, &opts),
            Test::Bibw => try_stream(world, Rank(args.from), Rank(to), size, true, &opts),
            Test::GetExchange => try_get_exchange(
                world,
                Rank(args.from),
                Rank(to),
                size,
                args.messages,
                u64::from(args.window),
            ),
        };
        let p = p.map_err(|e| {
            let what = format!(
                "{}: p2p {test}, {} messages, rank {} -> {to}: {e}",
                sc.source,
                Bytes(size),
                args.from
            );
            match e {
                P2pError::Refused(_) => Failure::input(what),
                P2pError::Stuck(_) => Failure::model(what),
            }
        })?;
        points.push(p);
    }
    if args.common.json {
        let v = serde_json::json!({
            "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
            "test": args.test.to_possible_value().map_or_else(|| format!("{:?}", args.test), |v| v.get_name().to_string()), "from": args.from, "to": to,
            "points": points, "resolved_scenario": sc.resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    outln!(
        "hpcnet {} — p2p {} on '{}' (seed {}), rank {} -> {}",
        env!("CARGO_PKG_VERSION"),
        test,
        sc.name,
        sc.file.seed,
        args.from,
        to
    );
    outln!(
        "  {:>10} {:>12} {:>12} {:>14}",
        "size B",
        "latency us",
        "GB/s",
        "messages/s"
    );
    for p in &points {
        let lat = p.latency_us.map_or("-".to_string(), |l| format!("{l:.3}"));
        outln!(
            "  {:>10} {:>12} {:>12.3} {:>14.0}",
            p.size,
            lat,
            p.gbytes_per_s,
            p.messages_per_s
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_ranges() {
        assert_eq!(parse_sizes("1:8").ok().unwrap(), vec![1, 2, 4, 8]);
        assert_eq!(parse_sizes("3:16").ok().unwrap(), vec![3, 4, 8, 16]);
        assert_eq!(parse_sizes("1K:4K").ok().unwrap(), vec![1024, 2048, 4096]);
        assert!(parse_sizes("0:8").is_err());
        assert!(parse_sizes("8:1").is_err());
        assert!(parse_sizes("8").is_err());
        // Up to MAX_MESSAGE_SIZE (1 GiB), not beyond.
        assert_eq!(parse_sizes("1G:1G").ok().unwrap(), vec![1 << 30]);
        let e = parse_sizes("64G:64G").err().unwrap();
        assert_eq!(e.code, 2);
        assert!(
            e.message
                .starts_with("--sizes 64G:64G: 64 GiB is above the largest message size, 1 GiB"),
            "{}",
            e.message
        );
        assert!(parse_sizes("1:1025M").is_err());
    }
}
