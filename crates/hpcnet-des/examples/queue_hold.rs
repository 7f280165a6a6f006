//! The event queue alone, in the classic "hold" model: a fixed number of pending events; each
//! pop schedules one new event a random delay later, by a random origin. It measures what an
//! event costs the queue (schedule, ordered insertion, pop), everything inlined as in a model,
//! without any model around it; `docs/PERFORMANCE.md` ("The event queue") differences two run
//! lengths under callgrind.
//!
//! The delays imitate the 512-node torus benchmark (`scenarios/torus-8x8x8.toml` at 45 % load,
//! ~16 events per ns, so ~1 700 pending at a mean delay of ~104 ns): a link's 10 ns, a
//! router's 40 ns and a 272 B packet's 167 ns serialisation, each with up to a few ns of
//! spread, and a traffic source's gap (a geometric number of 167 ns slots at load 0.45, so
//! some beyond the ring's 2.1 µs horizon). 1 536 origins (512 routers, 512 nodes, 512
//! sources). Delays and origins come from a table of 65 536 drawn beforehand and used in turn,
//! so two run lengths differ by queue work, a table read and a checksum.
//!
//! Usage: `cargo run --release -p hpcnet-des --example queue_hold -- [pops] [pending]`; prints
//! the pops, the final time and a checksum of the popped order (equal across queue versions
//! that keep the (time, origin, sequence) order).

use hpcnet_des::{EventQueue, Origin, SimTime};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| {
        a.parse::<u64>().unwrap_or_else(|_| {
            eprintln!("queue_hold: arguments are [pops] [pending], whole numbers; got {a:?}");
            std::process::exit(2)
        })
    });
    let pops = args.next().unwrap_or(1_000_000);
    let pending = args.next().unwrap_or(1_700);
    let mut rng = Pcg64Mcg::seed_from_u64(1);
    let mut q: EventQueue<u32> = EventQueue::new();
    q.reserve_origins(1_536);
    let delay = |rng: &mut Pcg64Mcg| -> u64 {
        let spread = rng.gen_range(0..4_000);
        match rng.gen_range(0..10) {
            0..=2 => 10_000 + spread,
            3..=5 => 40_000 + spread,
            6..=8 => 167_000 + spread,
            _ => {
                // Geometric number of slots, success probability 0.45.
                let mut slots = 1;
                while rng.gen_range(0..100) >= 45 {
                    slots += 1;
                }
                slots * 167_000 + spread
            }
        }
    };
    const TABLE: usize = 1 << 16;
    let draws: Vec<(u64, u32)> = (0..TABLE).map(|_| (delay(&mut rng), rng.gen_range(0..1_536))).collect();
    let mut k = 0;
    let mut next = || {
        k = (k + 1) & (TABLE - 1);
        draws[k]
    };
    for i in 0..pending {
        let (d, o) = next();
        q.schedule_by(Origin(o), SimTime(d), i as u32);
    }
    let mut sum = 0u64;
    for n in 0..pops {
        let (t, e) = q.pop().expect("the hold model keeps its events");
        sum = sum.wrapping_mul(31).wrapping_add(u64::from(e) ^ t.0);
        let (d, o) = next();
        q.schedule_by(Origin(o), t + SimTime(d), n as u32);
    }
    println!(
        "pops {pops} pending {} now {} ps checksum {sum:016x}",
        q.len(),
        q.now().0
    );
}
