//! `hpcnet p2p`: point-to-point benchmarks on a scenario's NICs (rank programs on the verbs
//! API): one-message latency per primitive, ping-pong, streaming bandwidth (uni/bi) and
//! message rate over a range of sizes.

use crate::{run::load, Common, Failure};
use hpcnet_des::Bytes;
use hpcnet_workloads::p2p::{op_latency, pingpong, sizes_up_to, stream, LatencyOp, Options, Point};
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
    pub sizes: &'a str,
    pub from: u32,
    pub to: Option<u32>,
    pub window: u32,
    pub messages: u64,
    pub qps: u32,
    pub common: &'a Common,
}

fn parse_sizes(spec: &str) -> Result<Vec<u64>, Failure> {
    let bad = |why: String| {
        Failure::input(format!(
            "--sizes {spec}: {why} (expected MIN:MAX, e.g. 1:4M, powers of two in between)"
        ))
    };
    let (a, b) = spec.split_once(':').ok_or_else(|| bad("needs MIN:MAX".into()))?;
    let a: Bytes = a.trim().parse().map_err(|e: hpcnet_des::UnitError| bad(e.0))?;
    let b: Bytes = b.trim().parse().map_err(|e: hpcnet_des::UnitError| bad(e.0))?;
    if a.0 == 0 || a > b {
        return Err(bad("need 0 < MIN <= MAX".into()));
    }
    let mut v: Vec<u64> = sizes_up_to(b.0).into_iter().filter(|&s| s >= a.0).collect();
    if v.first() != Some(&a.0) {
        v.insert(0, a.0);
    }
    if v.last() != Some(&b.0) {
        v.push(b.0);
    }
    Ok(v)
}

pub fn p2p(args: &Args) -> Result<(), Failure> {
    let sc = load(args.scenario, args.common)?;
    let sizes = parse_sizes(args.sizes)?;
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
    let nap_max = probe.cfg.nap_buffer.0;
    let opts = Options {
        window: args.window.max(1),
        messages: args.messages.max(1),
        qps: args.qps.max(1),
        rail: 0,
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
                if matches!(args.op, OpArg::NapImm | OpArg::NapInd) && size > nap_max {
                    continue;
                }
                let t = op_latency(world, args.from, to, op, size);
                Point {
                    size,
                    messages: 1,
                    time_ns: t.as_ns_f64(),
                    gbytes_per_s: size as f64 / t.as_ns_f64(),
                    messages_per_s: 1e9 / t.as_ns_f64(),
                    latency_us: Some(t.as_us_f64()),
                }
            }
            Test::Pingpong => pingpong(world, args.from, to, size, args.messages.clamp(1, 1000)),
            Test::Bw | Test::Rate => stream(world, args.from, to, size, false, &opts),
            Test::Bibw => stream(world, args.from, to, size, true, &opts),
        };
        points.push(p);
    }
    if args.common.json {
        let v = serde_json::json!({
            "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
            "test": format!("{:?}", args.test).to_lowercase(), "from": args.from, "to": to,
            "points": points, "resolved_scenario": sc.resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    outln!(
        "hpcnet {} — p2p {:?} on '{}' (seed {}), rank {} -> {}",
        env!("CARGO_PKG_VERSION"),
        args.test,
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
    }
}
