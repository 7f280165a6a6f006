//! The NICEVT fast barrier (spec 03: "a PE leaves as soon as it has received every message
//! that was sent to it before the barrier"): a dissemination-shaped exchange of message counts
//! — the plan of its rounds, the layout of its mailboxes in the synchronisation region, and the
//! barrier itself.
//!
//! Every PE counts the messages it has put into each PE's heap since the last fast barrier.
//! PE j may leave once its heap has received Σᵢ cᵢⱼ messages (the NIC counts arrivals,
//! `World::memory_writes`), so the barrier is a reduce-scatter of the count vectors followed by
//! a wait on that counter. The reduce-scatter is Bruck's, in radix `r`
//! ([`crate::ShmemConfig::fast_radix`]): a PE holds partial sums indexed by the destination's
//! offset `o = (j − me) mod n`; in round k it sends, to the PE `m·r^k` ahead (m = 1 … r − 1),
//! the sums whose offset has base-r digit k equal to m, and adds what the PE `m·r^k` behind
//! sends it into its own sums at offset `o − m·r^k`. After ⌈log_r n⌉ rounds offset 0 holds
//! the total sent to this PE. A PE sends at most (r − 1)·⌈log_r n⌉ messages and about n
//! counts in all; with `r ≥ n` it is one round of n − 1 messages. The exchange does not rely
//! on the order of a pair's messages, so it holds under adaptive routing as under dimension
//! order.
//!
//! A round's message carries its counts as 32-bit words — all of them, or only the non-zero
//! ones as (index, count) pairs when that is shorter (with nothing sent since the last
//! barrier, an 8-byte header alone) — and lands in a mailbox of the receiver's synchronisation
//! region; its landing increments the mailbox's counter (a write with reply word), so the
//! receiver reads only whole messages. Each (round, sender) has two mailboxes, used by odd and
//! even barriers: a PE cannot be two barriers ahead of a PE that has not yet read its message
//! (it would need that PE's counts of the barrier in between).

use crate::pe::{Pe, SYNC_BYTES};
use crate::ShmemError;

/// Header value of a message that carries every count of its list.
const DENSE: u32 = u32::MAX;

/// One message of the exchange: in round `round` to the PE `step` ahead, carrying the partial
/// sums at offsets `first, first + stride, …` below n.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FastMsg {
    pub(crate) step: usize,
    pub(crate) first: usize,
    pub(crate) stride: usize,
    pub(crate) counts: usize,
    /// Offset of its two mailboxes (odd, even barrier) in the synchronisation region.
    pub(crate) mailbox: [u64; 2],
}

impl FastMsg {
    /// Largest payload: the header and every count (the pair form is used only when shorter).
    pub(crate) fn payload_max(&self) -> u64 {
        8 + 4 * self.counts as u64
    }
}

/// The rounds of the exchange for `n` PEs in radix `r`, and the mailboxes' layout: every PE
/// computes the same plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FastPlan {
    pub(crate) rounds: Vec<Vec<FastMsg>>,
    /// Bytes of mailboxes after the synchronisation region's fixed words.
    pub(crate) bytes: u64,
}

impl FastPlan {
    pub(crate) fn new(n: usize, radix: usize) -> FastPlan {
        let r = radix.max(2);
        let mut rounds = Vec::new();
        let mut at = SYNC_BYTES;
        let mut dist = 1usize;
        while dist < n {
            let stride = dist.saturating_mul(r);
            let mut msgs = Vec::new();
            for m in 1..r {
                let Some(step) = m.checked_mul(dist).filter(|&s| s < n) else {
                    break;
                };
                let counts = (n - step).div_ceil(stride);
                // Counter word, header word, the counts (4 bytes each), rounded to 8 bytes.
                let size = 16 + (4 * counts as u64).div_ceil(8) * 8;
                msgs.push(FastMsg {
                    step,
                    first: step,
                    stride,
                    counts,
                    mailbox: [at, at + size],
                });
                at += 2 * size;
            }
            rounds.push(msgs);
            dist = stride;
        }
        FastPlan {
            rounds,
            bytes: at - SYNC_BYTES,
        }
    }
}

/// The payload of one message: the counts at `first, first + stride, …` of `acc`, dense or as
/// non-zero (index, count) pairs, whichever is shorter. None if a count exceeds 32 bits.
fn encode(acc: &[u64], msg: &FastMsg, out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let vals = (0..msg.counts).map(|t| acc[msg.first + t * msg.stride]);
    let nonzero = vals.clone().filter(|&v| v != 0).count();
    if 2 * nonzero < msg.counts {
        out.extend_from_slice(&(nonzero as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for (t, v) in vals.enumerate().filter(|&(_, v)| v != 0) {
            out.extend_from_slice(&(t as u32).to_le_bytes());
            out.extend_from_slice(&u32::try_from(v).ok()?.to_le_bytes());
        }
    } else {
        out.extend_from_slice(&DENSE.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for v in vals {
            out.extend_from_slice(&u32::try_from(v).ok()?.to_le_bytes());
        }
    }
    Some(())
}

/// Add a received payload into `acc`: count t of the sender's list is this PE's offset
/// `t · stride`.
fn decode(bytes: &[u8], msg: &FastMsg, acc: &mut [u64]) {
    let word = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let head = word(0);
    if head == DENSE {
        for t in 0..msg.counts {
            acc[t * msg.stride] += u64::from(word(2 + t));
        }
    } else {
        for p in 0..head as usize {
            acc[word(2 + 2 * p) as usize * msg.stride] += u64::from(word(3 + 2 * p));
        }
    }
}

impl Pe {
    /// The NICEVT fast barrier (spec 03): this PE leaves as soon as every message sent into
    /// its heap before the barrier has arrived — no acknowledgement is awaited (gets issued
    /// before it are not waited for either: use `syncreads`). The PEs sum their
    /// per-destination message counts by a radix-r dissemination exchange (module doc), and
    /// each waits until the NIC's arrival counter of its heap reaches its total.
    pub async fn barrier_all_fast(&mut self) -> Result<(), ShmemError> {
        let call = "shmem_barrier_all";
        self.enter(0).await;
        let n = self.shared.npes;
        // Messages sent since the last fast barrier went under the heap key of this parity
        // (`Pe::heap_remote`); those sent after this one will use the other.
        let key = self.fast_epoch % 2;
        self.fast_epoch += 1;
        let parity = (self.fast_epoch % 2) as usize;
        // Barriers of this parity so far: the count each mailbox's counter must reach.
        let due = self.fast_epoch.div_ceil(2);
        // Partial sums by offset from this PE: start with what this PE sent.
        let mut acc = std::mem::take(&mut self.fast_acc);
        acc.clear();
        acc.extend((0..n).map(|o| self.sent[(self.me + o) % n]));
        self.sent.iter_mut().for_each(|s| *s = 0);
        let plan = self.shared.fast.clone();
        let mut payload = Vec::new();
        for round in &plan.rounds {
            for msg in round {
                encode(&acc, msg, &mut payload).ok_or(ShmemError::BadArgument {
                    call,
                    reason: "more than 2^32 messages sent to one PE between two barriers".into(),
                })?;
                let to = (self.me + msg.step) % n;
                self.sync_put_bytes(to, msg.mailbox[parity] + 8, &payload, msg.mailbox[parity])
                    .await?;
            }
            // Wait for every sender of the round, then add in what each carried.
            while !round.iter().all(|m| self.sync_word(m.mailbox[parity]) >= due) {
                self.woken().await;
            }
            for msg in round {
                let bytes = self.sync_bytes(msg.mailbox[parity] + 8, msg.payload_max());
                decode(&bytes, msg, &mut acc);
            }
        }
        self.expected[key as usize] += acc[0];
        self.fast_acc = acc;
        while self.heap_arrivals(key) < self.expected[key as usize] {
            self.woken().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run the exchange's arithmetic for every PE at once (no network): each PE must end with
    /// the column sum of the count matrix.
    fn simulate(n: usize, r: usize, sent: &[Vec<u64>]) -> Vec<u64> {
        let plan = FastPlan::new(n, r);
        let mut acc: Vec<Vec<u64>> = (0..n)
            .map(|me| (0..n).map(|o| sent[me][(me + o) % n]).collect())
            .collect();
        let mut buf = Vec::new();
        for round in &plan.rounds {
            let mut inbox: Vec<Vec<(FastMsg, Vec<u8>)>> = vec![Vec::new(); n];
            for me in 0..n {
                for msg in round {
                    encode(&acc[me], msg, &mut buf).unwrap();
                    let mut b = buf.clone();
                    assert!(b.len() as u64 <= msg.payload_max());
                    b.resize(msg.payload_max() as usize, 0);
                    inbox[(me + msg.step) % n].push((msg.clone(), b));
                }
            }
            for (me, msgs) in inbox.into_iter().enumerate() {
                for (msg, b) in msgs {
                    decode(&b, &msg, &mut acc[me]);
                }
            }
        }
        acc.iter().map(|a| a[0]).collect()
    }

    #[test]
    fn the_exchange_sums_every_column_for_any_n_and_radix() {
        for n in [1usize, 2, 3, 5, 7, 8, 12, 16, 27, 64, 100] {
            for r in [2usize, 3, 4, 8, 16, 1000] {
                // Dense rows, sparse rows and empty rows.
                let sent: Vec<Vec<u64>> = (0..n)
                    .map(|i| {
                        (0..n)
                            .map(|j| match i % 3 {
                                0 => (i * 7 + j * 3) as u64 % 5,
                                1 => u64::from((i + j) % 9 == 0) * (j as u64 + 1),
                                _ => 0,
                            })
                            .collect()
                    })
                    .collect();
                let want: Vec<u64> = (0..n).map(|j| sent.iter().map(|row| row[j]).sum()).collect();
                assert_eq!(simulate(n, r, &sent), want, "n {n} radix {r}");
            }
        }
    }

    #[test]
    fn a_pe_sends_at_most_radix_minus_one_messages_per_round() {
        let p = FastPlan::new(512, 8);
        assert_eq!(p.rounds.len(), 3);
        assert!(p.rounds.iter().all(|r| r.len() == 7));
        let counts: usize = p.rounds.iter().flatten().map(|m| m.counts).sum();
        assert_eq!(counts, 511);
        let p = FastPlan::new(512, 2);
        assert_eq!((p.rounds.len(), p.rounds.iter().flatten().count()), (9, 9));
        let p = FastPlan::new(6, 8);
        assert_eq!((p.rounds.len(), p.rounds[0].len()), (1, 5));
        assert!(FastPlan::new(1, 8).rounds.is_empty());
    }
}
