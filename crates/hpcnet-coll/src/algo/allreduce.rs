//! Allreduce algorithms.

use super::blocks;
use crate::transport::{Call, Transport};
use crate::{CollError, Datatype, ReduceOp};

/// Recursive doubling (Thakur, Rabenseifner and Gropp 2005, section 4.4). With `p'` the largest
/// power of two ≤ p and `r = p − p'`, the first `2r` members pair up (2i, 2i+1) and the even one
/// folds its data into the odd one, leaving `p'` members. They exchange whole vectors with the
/// partner at distance 1, 2, 4, ... (in the folded numbering) and combine them, the block of the
/// lower-numbered half always as the left operand, so every member computes the same bits. The
/// folded members get the result back at the end.
pub(crate) async fn recursive_doubling(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let len = acc.len();
    let mut pof2 = 1;
    while pof2 * 2 <= n {
        pof2 *= 2;
    }
    let rem = n - pof2;
    let folded = if me < 2 * rem {
        if me % 2 == 0 {
            t.exchange(call, &[(me + 1, &acc)], &[]).await?;
            None
        } else {
            let mut left = t.exchange(call, &[], &[(me - 1, len)]).await?.remove(0);
            t.reduce(dtype, op, &mut left, &acc).await?;
            acc = left;
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    };
    if let Some(nr) = folded {
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let dst = if nd < rem { nd * 2 + 1 } else { nd + rem };
            let mut got = t.exchange(call, &[(dst, &acc)], &[(dst, len)]).await?.remove(0);
            if nd < nr {
                t.reduce(dtype, op, &mut got, &acc).await?;
                acc = got;
            } else {
                t.reduce(dtype, op, &mut acc, &got).await?;
            }
            mask <<= 1;
        }
    }
    if me < 2 * rem {
        if me % 2 == 1 {
            t.exchange(call, &[(me - 1, &acc)], &[]).await?;
        } else {
            acc = t.exchange(call, &[], &[(me + 1, len)]).await?.remove(0);
        }
    }
    Ok(acc)
}

/// Ring allreduce (Patarasuk and Yuan 2009): the vector is cut into p nearly equal blocks of
/// whole elements. Reduce-scatter: in step s member i sends block i − s to i + 1 and folds the
/// block i − s − 1 it receives from i − 1 into its own (received partial on the left), so block
/// b is reduced in the order x_b, x_{b+1}, ..., x_{b−1} and ends complete at member b − 1.
/// Allgather: the complete blocks travel once more around the ring.
pub(crate) async fn ring(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    if n == 1 {
        return Ok(acc);
    }
    let es = dtype.size();
    let sizes: Vec<usize> = blocks(acc.len() / es, n).into_iter().map(|c| c * es).collect();
    let mut offs = vec![0; n + 1];
    for i in 0..n {
        offs[i + 1] = offs[i] + sizes[i];
    }
    let range = |b: usize| offs[b]..offs[b + 1];
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    for s in 0..n - 1 {
        let sb = (me + n - s) % n;
        let rb = (me + 2 * n - s - 1) % n;
        let mut got = t
            .exchange(call, &[(right, &acc[range(sb)])], &[(left, sizes[rb])])
            .await?
            .remove(0);
        t.reduce(dtype, op, &mut got, &acc[range(rb)]).await?;
        acc[range(rb)].copy_from_slice(&got);
    }
    for s in 0..n - 1 {
        let sb = (me + 1 + n - s) % n;
        let rb = (me + n - s) % n;
        let got = t
            .exchange(call, &[(right, &acc[range(sb)])], &[(left, sizes[rb])])
            .await?
            .remove(0);
        acc[range(rb)].copy_from_slice(&got);
    }
    Ok(acc)
}
