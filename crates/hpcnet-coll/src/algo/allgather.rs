//! Allgather algorithms.

use crate::transport::{Call, Transport};
use crate::CollError;
use std::ops::Range;

/// Ring allgather: in step s member i forwards block i − s to i + 1 and receives block
/// i − s − 1 from i − 1; p − 1 steps of one block each.
pub(crate) async fn ring(t: &mut Transport, call: &Call, mine: &[u8]) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let b = mine.len();
    let mut out = vec![0u8; n * b];
    out[me * b..(me + 1) * b].copy_from_slice(mine);
    let ranges: Vec<Range<usize>> = (0..n).map(|k| k * b..(k + 1) * b).collect();
    ring_pass(t, call, &mut out, &ranges, me, (me + 1) % n, (me + n - 1) % n).await?;
    Ok(out)
}

/// The ring pass of an allgather, shared by the ring allgather, the ring allreduce's second
/// half and the scatter + allgather broadcast: the member at ring position `pos` holds block
/// `pos` of `buf` (blocks `ranges`, indexed by ring position); in step s it forwards block
/// pos − s to `right` and receives block pos − s − 1 from `left`. After p − 1 steps every block
/// is in place.
pub(crate) async fn ring_pass(
    t: &mut Transport,
    call: &Call,
    buf: &mut [u8],
    ranges: &[Range<usize>],
    pos: usize,
    right: usize,
    left: usize,
) -> Result<(), CollError> {
    let n = ranges.len();
    for s in 0..n.saturating_sub(1) {
        let sb = (pos + n - s) % n;
        let rb = (pos + 2 * n - s - 1) % n;
        let got = t
            .exchange_one(call, (right, &buf[ranges[sb].clone()]), (left, ranges[rb].len()))
            .await?;
        buf[ranges[rb].clone()].copy_from_slice(&got);
        t.recycle(got);
    }
    Ok(())
}

/// Bruck's allgather (Bruck et al., IEEE TPDS 1997; Thakur et al. 2005, section 4.1): member i
/// keeps the blocks of members i, i+1, ... in that order; in round k it sends the first
/// min(2^k, p − 2^k) blocks it holds to i − 2^k and appends those it receives from i + 2^k.
/// ⌈log2 p⌉ rounds for any p; a final local rotation puts the blocks in member order.
pub(crate) async fn bruck(t: &mut Transport, call: &Call, mine: &[u8]) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let b = mine.len();
    let mut held = mine.to_vec();
    let mut have = 1;
    while have < n {
        let cnt = have.min(n - have);
        let to = (me + n - have) % n;
        let from = (me + have) % n;
        let got = t
            .exchange(call, &[(to, &held[..cnt * b])], &[(from, cnt * b)])
            .await?
            .remove(0);
        held.extend_from_slice(&got);
        have += cnt;
    }
    let mut out = vec![0u8; n * b];
    for j in 0..n {
        let owner = (me + j) % n;
        out[owner * b..(owner + 1) * b].copy_from_slice(&held[j * b..(j + 1) * b]);
    }
    Ok(out)
}

/// Recursive-doubling allgather (Thakur et al. 2005, section 4.1): in round k member i swaps
/// everything it holds (an aligned group of 2^k blocks) with member i xor 2^k; log2 p rounds for
/// a power-of-two p. Other sizes fold as the recursive-doubling allreduce does: with p' the
/// largest power of two ≤ p and r = p − p', members 2i (i < r) first hand their block to 2i + 1,
/// the p' remaining members run the rounds on their folded indices (a folded group of 2^k
/// indices holds a contiguous range of blocks), and the odd members hand the whole result back:
/// ⌊log2 p⌋ + 2 rounds.
pub(crate) async fn recursive_doubling(t: &mut Transport, call: &Call, mine: &[u8]) -> Result<Vec<u8>, CollError> {
    use super::allreduce::{pof2_rem, unfold};
    let (n, me) = (t.size(), t.me());
    let b = mine.len();
    let mut out = vec![0u8; n * b];
    out[me * b..(me + 1) * b].copy_from_slice(mine);
    let (pof2, rem) = pof2_rem(n);
    // First member (block) of folded index `nr`; `first(pof2)` is p.
    let first = |nr: usize| if nr < rem { 2 * nr } else { nr + rem };
    if me < 2 * rem {
        if me % 2 == 0 {
            t.exchange(call, &[(me + 1, mine)], &[]).await?;
            return Ok(t.exchange(call, &[], &[(me + 1, n * b)]).await?.remove(0));
        }
        let got = t.exchange(call, &[], &[(me - 1, b)]).await?.remove(0);
        out[(me - 1) * b..me * b].copy_from_slice(&got);
    }
    let nr = if me < 2 * rem { me / 2 } else { me - rem };
    let mut mask = 1;
    while mask < pof2 {
        let nd = nr ^ mask;
        let dst = unfold(nd, rem);
        let (mine_lo, peer_lo) = (nr & !(mask - 1), nd & !(mask - 1));
        let mine_r = first(mine_lo) * b..first(mine_lo + mask) * b;
        let peer_r = first(peer_lo) * b..first(peer_lo + mask) * b;
        let got = t
            .exchange(call, &[(dst, &out[mine_r])], &[(dst, peer_r.len())])
            .await?
            .remove(0);
        out[peer_r].copy_from_slice(&got);
        mask <<= 1;
    }
    if me < 2 * rem {
        t.exchange(call, &[(me - 1, &out)], &[]).await?;
    }
    Ok(out)
}
