//! Quick look at the point-to-point figures of a scenario:
//! `cargo run --release -p hpcnet-workloads --example probe -- scenarios/sunway-prototype.toml`.
use hpcnet_workloads::p2p::{pingpong, stream, Options};
use hpcnet_workloads::Rank;
use hpcnet_workloads::Scenario;

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "scenarios/sunway-prototype.toml".into());
    let sc = Scenario::load(std::path::Path::new(&path), &[]).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    let last = Rank(sc.topology.nodes.len() as u32 - 1);
    for size in [8u64, 4096, 65536, 1 << 20] {
        let msgs = if size > 100_000 { 32 } else { 512 };
        let p = stream(
            sc.world().expect("world"),
            Rank(0),
            last,
            size,
            false,
            &Options {
                window: 64,
                messages: msgs,
                qps: 1,
                rail: 0,
            },
        );
        println!(
            "stream {size:>8} B: {:8.3} GB/s {:12.0} msg/s",
            p.gbytes_per_s, p.messages_per_s
        );
    }
    let p = pingpong(sc.world().expect("world"), Rank(0), last, 8, 100);
    println!("pingpong 8 B: {:.3} us", p.latency_us.unwrap_or(0.0));
}
