//! The NPB-CG-like exchange on the NICEVT M2 torus: the vector really moves, the partitions
//! differ in message count, and bad arguments are refused.

use hpcnet_shmem::ShmemConfig;
use hpcnet_workloads::shmem::{cg, CgExchange, CgPartition};
use hpcnet_workloads::Scenario;

fn m2_with(set: &[&str]) -> Scenario {
    let over: Vec<String> = set.iter().map(|s| s.to_string()).collect();
    Scenario::from_str_named(
        include_str!("../../../scenarios/nicevt-m2.toml"),
        "scenarios/nicevt-m2.toml",
        "nicevt-m2",
        &over,
    )
    .unwrap()
}

fn m2() -> Scenario {
    m2_with(&[])
}

#[test]
fn row_block_and_block_cyclic_move_the_vector_and_differ_in_messages() {
    // Every message by DMA descriptors (no PIO path), so that a message costs the same engine
    // time whatever its size up to a packet.
    let sc = m2_with(&["nic.pio_limit=\"0 B\""]);
    let cfg = ShmemConfig::default();
    let run = |p, x| cg(sc.world().unwrap(), 8, 'S', p, x, 3, 1e9, &cfg).unwrap();
    let rb = run(CgPartition::RowBlock, CgExchange::OwnerPuts);
    let bc = run(CgPartition::BlockCyclic { block: 25 }, CgExchange::OwnerPuts);
    let ag = run(CgPartition::RowBlock, CgExchange::Allgather);
    assert_eq!(rb.messages_per_pe, 7);
    assert_eq!(
        bc.messages_per_pe,
        7 * 7,
        "1400 / (25 × 8) = 7 blocks per PE, to 7 peers"
    );
    // Same bytes in seven times as many messages: block-cyclic costs more.
    assert!(bc.communication_us > rb.communication_us, "{bc:?} vs {rb:?}");
    for p in [&rb, &bc, &ag] {
        assert!(p.communication_us > 0.0 && p.communication_us < p.iteration_us, "{p:?}");
        // Class S: 15 × 25 iterations at the simulated pace.
        assert!((p.class_time_s - p.iteration_us * 375.0 / 1e6).abs() < 1e-9, "{p:?}");
    }
    // Deterministic.
    assert_eq!(run(CgPartition::RowBlock, CgExchange::OwnerPuts), rb);
}

#[test]
fn bad_cg_arguments_are_refused() {
    let sc = m2();
    let cfg = ShmemConfig::default();
    let err = |pes, class, p, x| {
        cg(sc.world().unwrap(), pes, class, p, x, 1, 1e9, &cfg)
            .unwrap_err()
            .to_string()
    };
    assert!(err(8, 'Q', CgPartition::RowBlock, CgExchange::OwnerPuts).contains("class Q"));
    assert!(err(1, 'S', CgPartition::RowBlock, CgExchange::OwnerPuts).contains("needs 2"));
    assert!(err(8, 'S', CgPartition::BlockCyclic { block: 3 }, CgExchange::OwnerPuts).contains("block of 3"));
    assert!(err(8, 'S', CgPartition::BlockCyclic { block: 25 }, CgExchange::Allgather).contains("row-block"));
}
