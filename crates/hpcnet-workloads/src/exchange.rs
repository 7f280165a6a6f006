//! Exchanges that check their own delivery, for runs in which the network loses packets
//! (dynamic faults, `nic.loss_rate`) and the transport (`[nic.reliability]`) must recover them.
//!
//! - [`Exchange::Alltoall`]: in each round every member writes a block of `size` bytes to
//!   every other member (RDMA write with notification; targets in the order m+1, m+2, …, so
//!   the load spreads); a round ends at a member when its own writes have completed and the
//!   blocks of every other member have arrived.
//! - [`Exchange::Allreduce`]: recursive doubling on a vector of `size / 8` 64-bit integers
//!   (the number of members must be a power of two): in step k every member writes its partial
//!   sum to member m xor 2^k and adds what it receives; after log2(P) steps every member holds
//!   the sum of all inputs.
//!
//! Each member checks, as data arrives, that every notification comes exactly once per
//! (source, round, step) and that every block holds the bytes its source wrote; the allreduce
//! result is compared with a sum computed here, outside the simulated data path. A run that
//! does not finish (a lost message nothing recovers) is reported as such, with what finished,
//! not as an error: the fault studies compare both.
//!
//! [`rdma_stream`] is the one-way RDMA-write stream of `p2p::stream` with the NIC's counters.
//!
//! Cost: memory of `rounds × P × size` bytes per member for the all-to-all (every round lands
//! in its own region, so a fast member's next round cannot overwrite a block before it is
//! checked), `rounds × log2 P × size` for the allreduce.

use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Machine, Mr, WriteWr};
use hpcnet_nic::{CqeStatus, NicCounters, Rank, World};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// The communication pattern.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Exchange {
    Alltoall,
    Allreduce,
}

impl Exchange {
    pub fn name(self) -> &'static str {
        match self {
            Exchange::Alltoall => "all-to-all",
            Exchange::Allreduce => "allreduce (recursive doubling)",
        }
    }
}

/// What a run of an exchange showed.
#[derive(Clone, Debug)]
pub struct ExchangeOutcome {
    /// Every member finished every round.
    pub finished: bool,
    /// From the start to the last member's end (the run's end if it did not finish).
    pub time: SimTime,
    /// Payload bytes the members wrote.
    pub payload_bytes: u64,
    /// Writes posted.
    pub messages: u64,
    /// Every notification arrived exactly once (none twice, none missing, none extra).
    pub delivered_once: bool,
    /// Every block checked held its source's bytes, and every allreduce result was the sum.
    pub bytes_correct: bool,
    /// Writes that completed with an error status at their initiator.
    pub failed_writes: u64,
    pub counters: NicCounters,
}

impl ExchangeOutcome {
    /// Finished, every message exactly once with its bytes, no error completion.
    pub fn intact(&self) -> bool {
        self.finished && self.delivered_once && self.bytes_correct && self.failed_writes == 0
    }
}

/// The bytes member `src` writes to member `dst` in round `round` (all-to-all).
fn block(src: usize, dst: usize, round: usize, size: u64) -> Vec<u8> {
    let seed = (src as u64) << 40 ^ (dst as u64) << 20 ^ round as u64;
    (0..size)
        .map(|i| ((i.wrapping_mul(0x9E37_79B9) ^ seed.wrapping_mul(0x2545_F491)) >> 7) as u8)
        .collect()
}

/// Element `k` of member `m`'s allreduce input in repetition `rep`.
fn input(m: usize, k: usize, rep: usize) -> i64 {
    (m as i64 + 1) * 1_048_576 + ((k as i64 * 7919 + rep as i64 * 31) % 1_048_573)
}

fn to_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Shared record of what the members saw.
#[derive(Default)]
struct Seen {
    /// Notifications per (receiver, source, tag).
    notes: HashMap<(usize, usize, u64), u32>,
    bad_bytes: u64,
    failed_writes: u64,
    done: usize,
    end: SimTime,
}

/// Run `ex` over `ranks` (the members, in order) for `rounds` repetitions with blocks of
/// `size` bytes.
///
/// # Errors
/// A message naming the problem for fewer than two members, a size that is not a positive
/// multiple of 8 bytes, an allreduce on a member count that is not a power of two, no round,
/// or a post the NIC refuses.
pub fn run_exchange(
    world: World,
    ranks: &[Rank],
    ex: Exchange,
    size: u64,
    rounds: usize,
) -> Result<ExchangeOutcome, String> {
    let p = ranks.len();
    if p < 2 {
        return Err(format!("an exchange needs at least 2 members, got {p}"));
    }
    if size == 0 || !size.is_multiple_of(8) {
        return Err(format!(
            "the block size must be a positive multiple of 8 bytes, got {size}"
        ));
    }
    if rounds == 0 {
        return Err("an exchange needs at least one round".into());
    }
    if ex == Exchange::Allreduce && !p.is_power_of_two() {
        return Err(format!("recursive doubling needs a power-of-two member count, got {p}"));
    }
    let steps = p.trailing_zeros() as usize;
    // Slots per member: one per (round, peer) or per (round, step), for sending and landing.
    let slots = match ex {
        Exchange::Alltoall => rounds * p,
        Exchange::Allreduce => rounds * steps,
    } as u64;
    let messages = match ex {
        Exchange::Alltoall => rounds * p * (p - 1),
        Exchange::Allreduce => rounds * p * steps,
    } as u64;
    let mut m = Machine::new(world);
    let ctxs: Vec<_> = ranks.iter().map(|&r| m.context(r)).collect();
    let land: Vec<Mr> = ctxs.iter().map(|c| c.reg_mr(slots * size)).collect();
    let ncqs: Vec<_> = ctxs.iter().map(|c| c.create_cq()).collect();
    let member: Rc<HashMap<Rank, usize>> = Rc::new(ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect());
    // The allreduce results every member must reach, per round.
    let sums: Rc<Vec<Vec<i64>>> = Rc::new(if ex == Exchange::Allreduce {
        (0..rounds)
            .map(|round| {
                (0..(size / 8) as usize)
                    .map(|k| (0..p).map(|mm| input(mm, k, round)).fold(0i64, i64::wrapping_add))
                    .collect()
            })
            .collect()
    } else {
        Vec::new()
    });
    let seen = Rc::new(RefCell::new(Seen::default()));
    let refused: Rc<RefCell<Option<String>>> = Rc::default();
    for me in 0..p {
        let ctx = ctxs[me].clone();
        let cq = ctx.create_cq();
        let qps: Vec<_> = (0..p)
            .map(|d| (d != me).then(|| ctx.create_qp(&cq, ranks[d])))
            .collect();
        let src = ctx.reg_mr(slots * size);
        let remote: Vec<Mr> = land.clone();
        let mine = land[me].clone();
        let ncq = ncqs[me].clone();
        let ncqs = ncqs.clone();
        let (seen, refused, member, sums) = (seen.clone(), refused.clone(), member.clone(), sums.clone());
        m.spawn(async move {
            // Notifications that arrived ahead of the step waiting for them: tag -> count.
            let mut arrived: HashMap<u64, usize> = HashMap::new();
            // Take notifications until `want` of tag `tag` have come, checking each block.
            macro_rules! await_notes {
                ($tag:expr, $want:expr, $expect:expr) => {
                    while arrived.get(&$tag).copied().unwrap_or(0) < $want {
                        let c = ncq.next().await;
                        let from = member.get(&c.peer).copied().unwrap_or(usize::MAX);
                        let mut s = seen.borrow_mut();
                        *s.notes.entry((me, from, c.wr_id)).or_insert(0) += 1;
                        // Err: a tag this member should never see; Ok(Some): the bytes due.
                        let expect: &dyn Fn(usize, u64) -> Result<Option<Vec<u8>>, ()> = &$expect;
                        match expect(from, c.wr_id) {
                            Ok(Some(want)) => {
                                let off = c.wr_id * size;
                                if c.status != CqeStatus::Ok
                                    || ctx.read_local(&mine, off, size).ok().as_deref() != Some(&want[..])
                                {
                                    s.bad_bytes += 1;
                                }
                            }
                            Ok(None) => {}
                            Err(()) => s.bad_bytes += 1,
                        }
                        drop(s);
                        *arrived.entry(c.wr_id).or_insert(0) += 1;
                    }
                };
            }
            macro_rules! post {
                ($d:expr, $off:expr, $slot:expr, $tag:expr) => {{
                    let wr = WriteWr::new(&src, $off, size, remote[$d].remote($slot * size))
                        .wr_id($tag)
                        .notify(&ncqs[$d]);
                    let qp = qps[$d].as_ref().expect("a peer");
                    if let Err(e) = qp.post_write(wr) {
                        refused.borrow_mut().get_or_insert(e.to_string());
                        return;
                    }
                }};
            }
            macro_rules! await_own {
                ($n:expr) => {
                    for _ in 0..$n {
                        if cq.next().await.status != CqeStatus::Ok {
                            seen.borrow_mut().failed_writes += 1;
                        }
                    }
                };
            }
            for round in 0..rounds {
                match ex {
                    Exchange::Alltoall => {
                        // Block for d sits at send slot round·p + d and lands at d's slot
                        // round·p + me; the notification's tag is that landing slot.
                        for k in 1..p {
                            let d = (me + k) % p;
                            let off = (round * p + d) as u64 * size;
                            ctx.write_local(&src, off, &block(me, d, round, size))
                                .expect("own buffer");
                            let slot = (round * p + me) as u64;
                            post!(d, off, slot, slot);
                        }
                        await_own!(p - 1);
                        for from in (0..p).filter(|&f| f != me) {
                            let tag = (round * p + from) as u64;
                            await_notes!(tag, 1, |f: usize, t: u64| {
                                let (r, src) = ((t as usize) / p, (t as usize) % p);
                                if src == f && f < p && r < rounds {
                                    Ok(Some(block(f, me, r, size)))
                                } else {
                                    Err(())
                                }
                            });
                        }
                    }
                    Exchange::Allreduce => {
                        let mut acc: Vec<i64> = (0..(size / 8) as usize).map(|k| input(me, k, round)).collect();
                        for step in 0..steps {
                            let d = me ^ (1 << step);
                            let slot = (round * steps + step) as u64;
                            ctx.write_local(&src, slot * size, &to_bytes(&acc)).expect("own buffer");
                            post!(d, slot * size, slot, slot);
                            await_own!(1);
                            // What the partner sent is checked by the final sum.
                            await_notes!(slot, 1, |f: usize, t: u64| {
                                // From the partner of that step; its bytes are checked by the
                                // final sum.
                                let (r, st) = ((t as usize) / steps, (t as usize) % steps);
                                if r < rounds && f == me ^ (1 << st) {
                                    Ok(None)
                                } else {
                                    Err(())
                                }
                            });
                            let got = ctx.read_local(&mine, slot * size, size).expect("own buffer");
                            for (a, b) in acc.iter_mut().zip(from_bytes(&got)) {
                                *a = a.wrapping_add(b);
                            }
                        }
                        if acc != sums[round] {
                            seen.borrow_mut().bad_bytes += 1;
                        }
                    }
                }
            }
            let mut s = seen.borrow_mut();
            s.done += 1;
            s.end = s.end.max(ctx.now());
        });
    }
    let end = m.run();
    if let Some(e) = refused.borrow_mut().take() {
        return Err(e);
    }
    let s = seen.borrow();
    let finished = s.done == p && end.stuck_tasks == 0;
    // Exactly once: one notification per message, none twice, nothing left over.
    let leftover = ncqs.iter().any(|c| c.poll().is_some());
    let delivered_once = !leftover && s.notes.len() as u64 == messages && s.notes.values().all(|&n| n == 1);
    let counters = m.world().counters();
    Ok(ExchangeOutcome {
        finished,
        time: if finished { s.end } else { end.time },
        payload_bytes: messages * size,
        messages,
        delivered_once,
        bytes_correct: s.bad_bytes == 0,
        failed_writes: s.failed_writes,
        counters,
    })
}

/// What [`rdma_stream`] measured.
#[derive(Clone, Debug)]
pub struct StreamOutcome {
    /// Every write completed without error and the target holds the bytes.
    pub intact: bool,
    /// Payload bandwidth in GB/s (10^9 B/s), first post to last completion.
    pub gbytes_per_s: f64,
    pub counters: NicCounters,
}

/// `count` RDMA writes of `size` bytes from `a` to `b` on one queue pair (rail `rail`),
/// `window` in flight: `p2p::stream`, with the NIC's counters and the target's bytes checked.
///
/// # Errors
/// A refused post, or a run that does not finish (a lost write nothing recovers).
pub fn rdma_stream(
    world: World,
    a: Rank,
    b: Rank,
    size: u64,
    count: u64,
    window: u64,
) -> Result<StreamOutcome, String> {
    let mut m = Machine::new(world);
    let (ca, cb) = (m.context(a), m.context(b));
    let src = ca.reg_mr(size.max(8));
    let dst = cb.reg_mr(size.max(8));
    let want = block(0, 1, 0, size);
    ca.write_local(&src, 0, &want).map_err(|e| e.to_string())?;
    let cq = ca.create_cq();
    let qp = ca.create_qp(&cq, b);
    let out: Rc<RefCell<(SimTime, u64, Option<String>)>> = Rc::default();
    let (o, r, ctx) = (out.clone(), dst.remote(0), ca.clone());
    let window = window.max(1);
    m.spawn(async move {
        let start = ctx.now();
        let (mut posted, mut done) = (0u64, 0u64);
        while done < count {
            while posted < count && posted - done < window {
                if let Err(e) = qp.post_write(WriteWr::new(&src, 0, size, r).wr_id(posted)) {
                    o.borrow_mut().2 = Some(e.to_string());
                    return;
                }
                posted += 1;
            }
            if cq.next().await.status != CqeStatus::Ok {
                o.borrow_mut().1 += 1;
            }
            done += 1;
        }
        o.borrow_mut().0 = ctx.now() - start;
    });
    let end = m.run();
    let (took, failed, refused) = out.borrow().clone();
    if let Some(e) = refused {
        return Err(e);
    }
    if end.stuck_tasks > 0 {
        return Err(format!(
            "RDMA-write stream of {count} × {size} B: {}",
            crate::p2p::describe_stuck(&end)
        ));
    }
    let bytes_ok = cb.read_local(&dst, 0, size).map(|v| v == want).unwrap_or(false);
    let counters = m.world().counters();
    Ok(StreamOutcome {
        intact: failed == 0 && bytes_ok,
        gbytes_per_s: (count * size) as f64 / took.as_secs_f64().max(1e-30) / 1e9,
        counters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    const SUNWAY: &str = include_str!("../../../scenarios/sunway-prototype.toml");

    fn world(set: &[&str]) -> World {
        let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        Scenario::from_str_named(SUNWAY, "sunway-prototype.toml", "t", &set)
            .unwrap()
            .world()
            .unwrap()
    }

    /// Eight ranks on eight leaves (ranks 2·18·i live on leaf i of each plane).
    fn members() -> Vec<Rank> {
        (0..8).map(|i| Rank(36 * i)).collect()
    }

    #[test]
    fn exchanges_check_their_bytes_and_deliveries() {
        for ex in [Exchange::Alltoall, Exchange::Allreduce] {
            let o = run_exchange(world(&[]), &members(), ex, 2048, 2).unwrap();
            assert!(o.intact(), "{ex:?}: {o:?}");
            let p = 8u64;
            let per_round = if ex == Exchange::Alltoall { p * (p - 1) } else { p * 3 };
            assert_eq!(o.messages, 2 * per_round);
            assert_eq!(o.counters.messages, o.messages);
            assert!(o.time > SimTime::ZERO);
        }
        assert!(run_exchange(world(&[]), &members()[..6], Exchange::Allreduce, 64, 1).is_err());
        assert!(run_exchange(world(&[]), &members(), Exchange::Alltoall, 12, 1).is_err());
    }

    #[test]
    fn a_plane_failure_loses_messages_unless_the_transport_recovers_them() {
        let plane = r#"faults.events=[{at="3 us", kind="plane", plane=0}]"#;
        let lossy = run_exchange(world(&[plane]), &members(), Exchange::Alltoall, 4096, 2).unwrap();
        assert!(!lossy.finished && lossy.counters.lost > 0, "{lossy:?}");
        let kept = run_exchange(
            world(&[plane, "nic.reliability.enabled=true"]),
            &members(),
            Exchange::Alltoall,
            4096,
            2,
        )
        .unwrap();
        assert!(kept.intact() && kept.counters.lost > 0, "{kept:?}");
        assert!(kept.counters.retransmitted > 0);
    }

    #[test]
    fn the_stream_reports_losses_and_recovers_them() {
        let o = rdma_stream(
            world(&["nic.loss_rate=1e-3", "nic.reliability.enabled=true"]),
            Rank(0),
            Rank(1023),
            256 << 10,
            16,
            16,
        )
        .unwrap();
        assert!(o.intact && o.counters.lost > 0 && o.gbytes_per_s > 10.0, "{o:?}");
        assert!(rdma_stream(world(&["nic.loss_rate=1e-2"]), Rank(0), Rank(1023), 256 << 10, 16, 16).is_err());
    }
}
