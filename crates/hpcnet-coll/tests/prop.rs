//! Property: for any communicator size, vector length, root, algorithm and transport protocol
//! (eager, or rendezvous for kept messages from 0 or 40 bytes), integer collectives give exactly
//! the reference result at every member, and every rank program finishes.

use hpcnet_coll::{Algorithm, Comm, CommConfig, ReduceOp, TransportConfig};
use hpcnet_msg::verbs::Machine;
use hpcnet_nic::Rank;
use hpcnet_workloads::Scenario;
use proptest::prelude::*;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

fn machine() -> Machine {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/torus-8x8.toml");
    Machine::new(Scenario::load(&path, &[]).unwrap().world().unwrap())
}

const ALLREDUCE: [Algorithm; 5] = [
    Algorithm::Auto,
    Algorithm::RecursiveDoubling,
    Algorithm::Rabenseifner,
    Algorithm::Ring,
    Algorithm::TwoLevel,
];
const BCAST: [Algorithm; 5] = [
    Algorithm::Auto,
    Algorithm::Binomial,
    Algorithm::ScatterAllgather,
    Algorithm::DoubleBinaryTree,
    Algorithm::Chain,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn integer_collectives_are_exact(
        n in 1usize..=12,
        count in 0usize..40,
        root_pick in 0usize..100,
        ar in 0usize..5,
        bc in 0usize..5,
        chunk in prop::sample::select(vec![8usize, 40, 4096]),
        window in 1usize..=3,
        offset in 0u32..64,
        rendezvous in prop::sample::select(vec![None, Some(0usize), Some(40)]),
    ) {
        let root = root_pick % n;
        let (ar, bc) = (ALLREDUCE[ar], BCAST[bc]);
        let mut m = machine();
        // Members on distinct, shuffled ranks; two-level sees pairs of members as nodes.
        let ranks: Vec<Rank> = (0..n as u32).map(|i| Rank((i * 23 + offset) % 64)).collect();
        let cfg = CommConfig { transport: TransportConfig { chunk, window, rendezvous }, ..CommConfig::default() };
        let comms = Comm::create_on_nodes(&m, &ranks, |r| r.0 / 2, &cfg).unwrap();
        let out = Rc::new(RefCell::new(Vec::new()));
        for mut c in comms {
            let o = out.clone();
            m.spawn(async move {
                let me = c.rank() as i64;
                let x: Vec<i64> = (0..count as i64).map(|j| (j + 1) * (me * 7 + 3)).collect();
                let s = c.allreduce(&x, ReduceOp::Sum, ar).await.unwrap();
                let mx = c.allreduce(&x, ReduceOp::Max, ar).await.unwrap();
                let mut b: Vec<i64> = if c.rank() == root { x.clone() } else { vec![0; count] };
                c.broadcast(&mut b, root, bc).await.unwrap();
                let r = c.reduce(&x, ReduceOp::Bxor, root, Algorithm::Auto).await.unwrap();
                c.barrier(Algorithm::Auto).await.unwrap();
                o.borrow_mut().push((c.rank(), s, mx, b, r));
            });
        }
        let end = m.run();
        prop_assert_eq!(end.stuck_tasks, 0);
        let out = out.borrow();
        prop_assert_eq!(out.len(), n);
        let n64 = n as i64;
        for (me, s, mx, b, r) in out.iter() {
            let sum: Vec<i64> = (0..count as i64).map(|j| (j + 1) * (7 * n64 * (n64 - 1) / 2 + 3 * n64)).collect();
            prop_assert_eq!(s, &sum);
            let max: Vec<i64> = (0..count as i64).map(|j| (j + 1) * ((n64 - 1) * 7 + 3)).collect();
            prop_assert_eq!(mx, &max);
            let sent: Vec<i64> = (0..count as i64).map(|j| (j + 1) * (root as i64 * 7 + 3)).collect();
            prop_assert_eq!(b, &sent);
            if *me == root {
                let x: Vec<i64> = (0..count as i64)
                    .map(|j| (0..n64).fold(0, |a, k| a ^ ((j + 1) * (k * 7 + 3))))
                    .collect();
                prop_assert_eq!(r.as_ref(), Some(&x));
            } else {
                prop_assert!(r.is_none());
            }
        }
    }
}
