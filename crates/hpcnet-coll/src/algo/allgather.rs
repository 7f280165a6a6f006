//! Allgather algorithms.

use crate::transport::{Call, Transport};
use crate::CollError;

/// Ring allgather: in step s member i forwards block i − s to i + 1 and receives block
/// i − s − 1 from i − 1; p − 1 steps of one block each.
pub(crate) async fn ring(t: &mut Transport, call: &Call, mine: &[u8]) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let b = mine.len();
    let mut out = vec![0u8; n * b];
    out[me * b..(me + 1) * b].copy_from_slice(mine);
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    for s in 0..n.saturating_sub(1) {
        let sb = (me + n - s) % n;
        let rb = (me + 2 * n - s - 1) % n;
        let got = t
            .exchange(call, &[(right, &out[sb * b..(sb + 1) * b])], &[(left, b)])
            .await?
            .remove(0);
        out[rb * b..(rb + 1) * b].copy_from_slice(&got);
    }
    Ok(out)
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

/// Recursive-doubling allgather (Thakur et al. 2005, section 4.1), for a power-of-two number of
/// members: in round k member i swaps everything it holds (an aligned group of 2^k blocks) with
/// member i xor 2^k; log2 p rounds.
pub(crate) async fn recursive_doubling(t: &mut Transport, call: &Call, mine: &[u8]) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    if !n.is_power_of_two() {
        return Err(CollError::AlgorithmLimit {
            call: call.name,
            algorithm: crate::Algorithm::RecursiveDoubling,
            reason: format!("needs a power-of-two number of members, the communicator has {n}"),
        });
    }
    let b = mine.len();
    let mut out = vec![0u8; n * b];
    out[me * b..(me + 1) * b].copy_from_slice(mine);
    let mut mask = 1;
    while mask < n {
        let peer = me ^ mask;
        let (mine_lo, peer_lo) = (me & !(mask - 1), peer & !(mask - 1));
        let got = t
            .exchange(
                call,
                &[(peer, &out[mine_lo * b..(mine_lo + mask) * b])],
                &[(peer, mask * b)],
            )
            .await?
            .remove(0);
        out[peer_lo * b..(peer_lo + mask) * b].copy_from_slice(&got);
        mask <<= 1;
    }
    Ok(out)
}
