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
        let mut got = t
            .exchange(call, &[(right, &acc[ranges[sb].clone()])], &[(left, ranges[rb].len())])
            .await?
            .remove(0);
        t.reduce(dtype, op, &mut got, &acc[ranges[rb].clone()]).await?;
        acc[ranges[rb].clone()].copy_from_slice(&got);
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
