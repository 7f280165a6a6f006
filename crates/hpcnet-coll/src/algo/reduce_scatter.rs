//! Reduce-scatter algorithms (equal blocks, `MPI_Reduce_scatter_block`), and the ring
//! reduce-scatter phase the ring allreduce shares.

use super::blocks;
use crate::transport::{Call, Transport};
use crate::{CollError, Datatype, ReduceOp};
use std::ops::Range;

/// Byte ranges of p nearly equal blocks of whole `dtype` elements of a `len`-byte vector.
pub(crate) fn block_ranges(dtype: Datatype, len: usize, p: usize) -> Vec<Range<usize>> {
    let es = dtype.size();
    let mut start = 0;
    blocks(len / es, p)
        .into_iter()
        .map(|c| {
            let r = start..start + c * es;
            start = r.end;
            r
        })
        .collect()
}

/// Ring reduce-scatter in place: in step s member i sends block i − s − 1 to i + 1 and folds
/// the block i − s − 2 it receives from i − 1 into its own (received partial on the left). Block
/// b is reduced in the order x_{b+1}, x_{b+2}, ..., x_b and ends complete at member b.
pub(crate) async fn ring_phase(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    acc: &mut [u8],
    ranges: &[Range<usize>],
) -> Result<(), CollError> {
    let (n, me) = (t.size(), t.me());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    for s in 0..n.saturating_sub(1) {
        let sb = (me + 2 * n - s - 1) % n;
        let rb = (me + 2 * n - s - 2) % n;
        let got = t
            .exchange_one(call, (right, &acc[ranges[sb].clone()]), (left, ranges[rb].len()))
            .await?;
        // The received partial is the left operand; the result goes straight into `acc`.
        t.reduce_right(dtype, op, &got, &mut acc[ranges[rb].clone()]).await?;
        t.recycle(got);
    }
    Ok(())
}

/// Ring reduce-scatter: `acc` holds p equal blocks; member i returns the reduction of block i.
pub(crate) async fn ring(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let ranges = block_ranges(dtype, acc.len(), n);
    ring_phase(t, call, dtype, op, &mut acc, &ranges).await?;
    Ok(acc[ranges[me].clone()].to_vec())
}

/// Reduce-scatter by recursive halving (Thakur, Rabenseifner and Gropp 2005, section 4.5), for a
/// power-of-two number of members: in the step of distance d = p/2, p/4, ..., 1 a member
/// exchanges with `me xor d` the half of its current range of blocks the partner keeps and
/// folds in the half it keeps (the lower-numbered partner's data as the left operand); log2 p
/// steps, n/2 + n/4 + ... bytes per member.
pub(crate) async fn recursive_halving(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    if !n.is_power_of_two() {
        return Err(CollError::AlgorithmLimit {
            call: call.name,
            algorithm: crate::Algorithm::RecursiveHalving,
            reason: format!("needs a power-of-two number of members, the communicator has {n}"),
        });
    }
    let b = acc.len() / n;
    let (mut lo, mut hi) = (0, n);
    let mut mask = n / 2;
    while mask > 0 {
        let peer = me ^ mask;
        let mid = (lo + hi) / 2;
        let (keep, give) = if me & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let k = keep.0 * b..keep.1 * b;
        let got = t
            .exchange_one(call, (peer, &acc[give.0 * b..give.1 * b]), (peer, k.len()))
            .await?;
        if peer < me {
            t.reduce_right(dtype, op, &got, &mut acc[k]).await?;
        } else {
            t.reduce(dtype, op, &mut acc[k], &got).await?;
        }
        t.recycle(got);
        (lo, hi) = keep;
        mask >>= 1;
    }
    Ok(acc[me * b..(me + 1) * b].to_vec())
}

/// Pairwise-exchange reduce-scatter (Thakur et al. 2005, section 4.5, MPICH's long-message
/// algorithm), for any number of members: in step k (1 ≤ k < p) member i sends its block for
/// i + k to that member and folds in the block member i − k sent it, in the order
/// x_i, x_{i−1}, x_{i−2}, ...; p − 1 steps of n/p bytes, every pair of members exchanging
/// directly.
pub(crate) async fn pairwise(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    acc: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let b = acc.len() / n;
    let mut mine = acc[me * b..(me + 1) * b].to_vec();
    for k in 1..n {
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        let got = t
            .exchange(call, &[(to, &acc[to * b..(to + 1) * b])], &[(from, b)])
            .await?
            .remove(0);
        t.reduce(dtype, op, &mut mine, &got).await?;
    }
    Ok(mine)
}
