//! The cHPP latency table from the model: `cargo run --release -p hpcnet-workloads --example chpp`.
use hpcnet_workloads::p2p::{op_latency, LatencyOp};
use hpcnet_workloads::Rank;
use hpcnet_workloads::Scenario;

fn main() {
    let sc = Scenario::load(std::path::Path::new("scenarios/chpp-pair.toml"), &[]).expect("scenario");
    for size in [1u64, 64, 256, 1024, 2048, 4096, 10284, 51036, 262116, 1048576] {
        let mut row = format!("{size:>8}");
        for op in [
            LatencyOp::NapImmediate,
            LatencyOp::NapIndirect,
            LatencyOp::Put,
            LatencyOp::Get,
        ] {
            let nap = matches!(op, LatencyOp::NapImmediate | LatencyOp::NapIndirect);
            if nap && size > 2048 {
                row.push_str("        -");
                continue;
            }
            let t = op_latency(sc.world().expect("world"), Rank(0), Rank(1), op, size);
            row.push_str(&format!(" {:8.3}", t.as_us_f64()));
        }
        println!("{row}");
    }
}
