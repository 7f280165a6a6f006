//! An ideal, untimed executor of descriptor sequences: the reference against which sequences
//! and (later) the timed NIC integration are checked.
//!
//! This module owns one rule: how units exchange packets when time is left out. Each endpoint
//! (node, VP, JobID) runs one sequence with its own [`HashBuf`]; packets in flight are delivered one
//! at a time in an order drawn from a seed (any order the network could produce, including
//! overtaking); a full buffer refuses a packet, which stays in flight and is retried later
//! (back-pressure, nothing lost). After each delivery the receiving unit reads the keys its
//! walker names (parking absent ones) and fires what it can.
//!
//! The run fails with an [`IdealError`] rather than a panic: a walk error, a packet for an
//! endpoint without a sequence, a unit left waiting when no packet is in flight, or every
//! packet in flight refused (buffers too small for the sequences: a deadlock).
//!
//! Cost: O(packets × (probe length + units in flight)) — small, for tests and checks.

use super::desc::{CollDescriptor, DescError, TrigAction, TrigPacket, WalkError, Walker};
use super::hashbuf::{HashBuf, HashBufConfig, HashBufConfigError, HashBufError, HashBufStats, Inserted, Read};
use super::key::PacketKey;
use std::collections::{BTreeMap, BTreeSet};

/// One endpoint's sequence (its JobID is the sequence's).
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub node: u32,
    pub vp: u32,
    pub seq: Vec<CollDescriptor>,
}

/// A completion written by a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub job: u32,
    pub data: Vec<u8>,
    pub addr: Option<u64>,
}

/// What an ideal run produced.
#[derive(Clone, Debug)]
pub struct IdealRun {
    /// Per endpoint, in the order given.
    pub completions: Vec<Completion>,
    /// Per endpoint, its buffer's statistics at the end.
    pub buffers: Vec<HashBufStats>,
    /// Packets sent.
    pub packets: u64,
}

/// Why an ideal run failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdealError {
    #[error("endpoint {index}: {source}")]
    Sequence { index: usize, source: DescError },
    #[error("endpoint {index}: {source}")]
    Walk { index: usize, source: WalkError },
    #[error("endpoint {index}: {source}")]
    Buffer { index: usize, source: HashBufError },
    #[error("{0}")]
    Config(HashBufConfigError),
    #[error("two sequences of job {job} at node {node} VP {vp}")]
    DuplicateEndpoint { node: u32, vp: u32, job: u32 },
    #[error("{key:?} sent to node {node} VP {vp}, which runs no sequence of its job")]
    NoEndpoint { key: PacketKey, node: u32, vp: u32 },
    #[error("endpoint {index} (node {node}) completed twice")]
    CompletedTwice { index: usize, node: u32 },
    #[error("endpoint {index} (node {node}) stuck at descriptor {step}, waiting for {missing:?}")]
    Stuck {
        index: usize,
        node: u32,
        step: usize,
        missing: Vec<PacketKey>,
    },
    #[error("endpoint {index} (node {node}) finished without a completion")]
    NoCompletion { index: usize, node: u32 },
    #[error("all {0} packets in flight refused by full buffers (deadlock)")]
    Deadlock(usize),
}

struct Unit {
    node: u32,
    walker: Walker,
    buf: HashBuf<TrigPacket, ()>,
    issued: BTreeSet<PacketKey>,
    done: Option<Completion>,
}

/// Run `endpoints` to completion with delivery order drawn from `seed`; every endpoint gets a
/// buffer of geometry `buf`; `fetch(endpoint, addr, len)` reads local data of address payloads.
pub fn run_ideal(
    endpoints: Vec<Endpoint>,
    seed: u64,
    buf: HashBufConfig,
    fetch: &mut dyn FnMut(usize, u64, u64) -> Vec<u8>,
) -> Result<IdealRun, IdealError> {
    let mut at: BTreeMap<(u32, u32, u32), usize> = BTreeMap::new();
    let mut units = Vec::with_capacity(endpoints.len());
    for (index, e) in endpoints.into_iter().enumerate() {
        let job = e.seq.first().map_or(0, |d| d.job);
        if at.insert((e.node, e.vp, job), index).is_some() {
            return Err(IdealError::DuplicateEndpoint {
                node: e.node,
                vp: e.vp,
                job,
            });
        }
        units.push(Unit {
            node: e.node,
            walker: Walker::new(e.node, e.seq).map_err(|source| IdealError::Sequence { index, source })?,
            buf: HashBuf::new(buf).map_err(IdealError::Config)?,
            issued: BTreeSet::new(),
            done: None,
        });
    }
    let mut flight: Vec<TrigPacket> = Vec::new();
    let mut packets = 0;
    for (i, u) in units.iter_mut().enumerate() {
        pump(i, u, &mut flight, &mut packets, fetch)?;
    }
    let mut rng = seed;
    let mut refusals = 0;
    while !flight.is_empty() {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let p = flight.swap_remove((rng >> 33) as usize % flight.len());
        let (key, node, vp) = (p.key, p.dest, p.dest_vp);
        let d = *at
            .get(&(node, vp, key.job()))
            .ok_or(IdealError::NoEndpoint { key, node, vp })?;
        let u = &mut units[d];
        let bytes = p.data.len() as u64;
        match u
            .buf
            .insert(key, bytes, p)
            .map_err(|source| IdealError::Buffer { index: d, source })?
        {
            Inserted::Stored { .. } => refusals = 0,
            Inserted::Woke { packet, .. } => {
                refusals = 0;
                u.walker
                    .deliver(packet)
                    .map_err(|source| IdealError::Walk { index: d, source })?;
            }
            Inserted::Refused(p) => {
                flight.push(p);
                refusals += 1;
                // Many more refusals in a row than packets in flight: nothing can move.
                if refusals > 64 * flight.len() {
                    return Err(IdealError::Deadlock(flight.len()));
                }
            }
        }
        pump(d, u, &mut flight, &mut packets, fetch)?;
    }
    let mut completions = Vec::with_capacity(units.len());
    let mut buffers = Vec::with_capacity(units.len());
    for (index, u) in units.into_iter().enumerate() {
        if !u.walker.is_done() {
            return Err(IdealError::Stuck {
                index,
                node: u.node,
                step: u.walker.step(),
                missing: u.walker.missing(),
            });
        }
        buffers.push(u.buf.stats());
        completions.push(u.done.ok_or(IdealError::NoCompletion { index, node: u.node })?);
    }
    Ok(IdealRun {
        completions,
        buffers,
        packets,
    })
}

/// Read what unit `i` waits for and fire what it can, until it waits for an absent packet.
fn pump(
    i: usize,
    u: &mut Unit,
    flight: &mut Vec<TrigPacket>,
    packets: &mut u64,
    fetch: &mut dyn FnMut(usize, u64, u64) -> Vec<u8>,
) -> Result<(), IdealError> {
    loop {
        for k in u.walker.missing() {
            if u.issued.insert(k) {
                let r = u
                    .buf
                    .read(k, ())
                    .map_err(|source| IdealError::Buffer { index: i, source })?;
                if let Read::Taken(p) = r {
                    u.walker
                        .deliver(p)
                        .map_err(|source| IdealError::Walk { index: i, source })?;
                }
            }
        }
        let before = u.walker.step();
        let acts = u
            .walker
            .advance(&mut |a, l| fetch(i, a, l))
            .map_err(|source| IdealError::Walk { index: i, source })?;
        // A step may fire without an action (a reduction kept for a later send): the next
        // step's keys must still be read.
        let moved = u.walker.step() != before;
        for a in acts {
            match a {
                TrigAction::Send(p) => {
                    *packets += 1;
                    flight.push(p);
                }
                TrigAction::Complete { job, data, addr } => {
                    if u.done.replace(Completion { job, data, addr }).is_some() {
                        return Err(IdealError::CompletedTwice { index: i, node: u.node });
                    }
                }
            }
        }
        if !moved {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::desc::{Payload, Source};
    use super::*;
    use crate::coll::{CollOp, CollType};

    fn one(job: u32) -> CollDescriptor {
        let mut d = CollDescriptor::new(job, CollType::I64, CollOp::Sum);
        d.ch = true;
        d.ct = true;
        d.coll_end_flag = true;
        d
    }
    fn no_fetch(_: usize, _: u64, _: u64) -> Vec<u8> {
        Vec::new()
    }

    #[test]
    fn a_pair_exchanges_and_reads_address_payloads() {
        // Node 0 sends its local data (read from "memory" by address) to node 1, which adds its
        // own operands.
        let mut a = one(1).send(1, 0, 4);
        a.swap_local_data = true;
        a.payload = Payload::Address { addr: 64, len: 8 };
        let mut b = one(1).wait(4, &[Source { node: 0, vp: 0 }]);
        b.swap_local_data = true;
        b.reduce_flag = true;
        b.payload = Payload::Operands(5i64.to_le_bytes().to_vec());
        let eps = vec![
            Endpoint {
                node: 0,
                vp: 0,
                seq: vec![a],
            },
            Endpoint {
                node: 1,
                vp: 0,
                seq: vec![b],
            },
        ];
        let mut reads = vec![];
        let r = run_ideal(eps, 7, HashBufConfig::default(), &mut |i, addr, len| {
            reads.push((i, addr, len));
            37i64.to_le_bytes().to_vec()
        })
        .unwrap();
        assert_eq!(reads, vec![(0, 64, 8)]);
        assert_eq!(r.packets, 1);
        assert_eq!(r.completions[1].data, 42i64.to_le_bytes().to_vec());
        assert_eq!(r.completions[0].addr, Some(64));
    }

    #[test]
    fn a_step_without_action_still_reads_the_next_steps_packet() {
        // Node 0 combines two packets of node 1 in two steps, the first with no action; node 1
        // sends them in the opposite order, so the second is buffered before the first fires.
        let from = [Source { node: 1, vp: 0 }];
        let mut a0 = one(3).wait(0, &from);
        a0.swap_remote_data = true;
        (a0.ct, a0.coll_end_flag) = (false, false);
        let mut a1 = one(3).wait(1, &from);
        a1.reduce_flag = true;
        a1.ch = false;
        let mut b0 = one(3).send(0, 0, 1);
        b0.swap_local_data = true;
        b0.payload = Payload::Operands(4i64.to_le_bytes().to_vec());
        (b0.ct, b0.coll_end_flag) = (false, false);
        let mut b1 = one(3).send(0, 0, 0);
        b1.ch = false;
        for seed in 0..8 {
            let eps = vec![
                Endpoint {
                    node: 0,
                    vp: 0,
                    seq: vec![a0.clone(), a1.clone()],
                },
                Endpoint {
                    node: 1,
                    vp: 0,
                    seq: vec![b0.clone(), b1.clone()],
                },
            ];
            let r = run_ideal(eps, seed, HashBufConfig::default(), &mut no_fetch).unwrap();
            assert_eq!(r.completions[0].data, 8i64.to_le_bytes().to_vec());
        }
    }

    #[test]
    fn a_missing_sender_or_endpoint_is_reported() {
        let w = one(2).wait(0, &[Source { node: 5, vp: 1 }]);
        let e = run_ideal(
            vec![Endpoint {
                node: 0,
                vp: 0,
                seq: vec![w],
            }],
            0,
            HashBufConfig::default(),
            &mut no_fetch,
        )
        .unwrap_err();
        assert!(
            matches!(e, IdealError::Stuck { index: 0, node: 0, step: 0, ref missing } if missing.len() == 1),
            "{e}"
        );
        let s = one(2).send(9, 3, 0);
        let e = run_ideal(
            vec![Endpoint {
                node: 0,
                vp: 0,
                seq: vec![s],
            }],
            0,
            HashBufConfig::default(),
            &mut no_fetch,
        )
        .unwrap_err();
        assert!(matches!(e, IdealError::NoEndpoint { node: 9, vp: 3, .. }), "{e}");
        let eps = vec![
            Endpoint {
                node: 0,
                vp: 0,
                seq: vec![one(2)],
            },
            Endpoint {
                node: 0,
                vp: 0,
                seq: vec![one(2)],
            },
        ];
        assert_eq!(
            run_ideal(eps, 0, HashBufConfig::default(), &mut no_fetch).unwrap_err(),
            IdealError::DuplicateEndpoint { node: 0, vp: 0, job: 2 }
        );
        let mut bad = one(2);
        bad.ch = false;
        let e = run_ideal(
            vec![Endpoint {
                node: 0,
                vp: 0,
                seq: vec![bad],
            }],
            0,
            HashBufConfig::default(),
            &mut no_fetch,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "endpoint 0: descriptor 0: first descriptor without CH");
    }
}
