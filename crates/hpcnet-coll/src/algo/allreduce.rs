//! Allreduce algorithms.

use super::reduce_scatter::{block_ranges, ring_phase};
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
    let n = t.size();
    let len = acc.len();
    let (pof2, rem) = pof2_rem(n);
    let folded = fold_in(t, call, dtype, op, &mut acc).await?;
    if let Some(nr) = folded {
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let dst = unfold(nd, rem);
            let mut got = t.exchange_one(call, (dst, &acc), (dst, len)).await?;
            if nd < nr {
                t.reduce(dtype, op, &mut got, &acc).await?;
                acc = got;
            } else {
                t.reduce(dtype, op, &mut acc, &got).await?;
            }
            mask <<= 1;
        }
    }
    fold_out(t, call, &mut acc).await?;
    Ok(acc)
}

/// The largest power of two ≤ `n`, and the excess `n` − that.
pub(crate) fn pof2_rem(n: usize) -> (usize, usize) {
    let mut pof2 = 1;
    while pof2 * 2 <= n {
        pof2 *= 2;
    }
    (pof2, n - pof2)
}

/// The member a folded index stands for.
pub(crate) fn unfold(nr: usize, rem: usize) -> usize {
    if nr < rem {
        nr * 2 + 1
    } else {
        nr + rem
    }
}

/// Fold the first 2r members pairwise (even into odd, even's data on the left), leaving a
/// power of two; this member's folded index, or `None` if it sits out.
pub(crate) async fn fold_in(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    acc: &mut Vec<u8>,
) -> Result<Option<usize>, CollError> {
    let me = t.me();
    let (_, rem) = pof2_rem(t.size());
    if me >= 2 * rem {
        return Ok(Some(me - rem));
    }
    if me.is_multiple_of(2) {
        t.exchange(call, &[(me + 1, acc)], &[]).await?;
        return Ok(None);
    }
    let mut left = t.exchange(call, &[], &[(me - 1, acc.len())]).await?.remove(0);
    t.reduce(dtype, op, &mut left, acc).await?;
    *acc = left;
    Ok(Some(me / 2))
}

/// Give the members that sat out the result of their odd neighbour.
async fn fold_out(t: &mut Transport, call: &Call, acc: &mut Vec<u8>) -> Result<(), CollError> {
    let me = t.me();
    let (_, rem) = pof2_rem(t.size());
    let kept = call.kept();
    if me < 2 * rem {
        if me % 2 == 1 {
            t.exchange(&kept, &[(me - 1, acc)], &[]).await?;
        } else {
            *acc = t.exchange(&kept, &[], &[(me + 1, acc.len())]).await?.remove(0);
        }
    }
    Ok(())
}

/// What a reduce-scatter by recursive halving leaves with a member.
pub(crate) struct Halved {
    /// Byte ranges of the p' blocks.
    ranges: Vec<std::ops::Range<usize>>,
    /// Blocks [lo, hi) this member holds complete (one block).
    pub own: (usize, usize),
    /// Per step, the partner and the blocks given to it.
    pub steps: Vec<(usize, (usize, usize))>,
}

impl Halved {
    /// Bytes of blocks [lo, hi).
    pub fn bytes(&self, lo: usize, hi: usize) -> std::ops::Range<usize> {
        self.ranges[lo].start..self.ranges[hi - 1].end
    }
}

/// Reduce-scatter by recursive halving among the p' members left after [`fold_in`] (`nr` is
/// this member's folded index): partners at distance 1, 2, 4, ... each keep half of their current
/// range of blocks and send the other half; the lower-numbered partner's data is the left
/// operand, so each block is reduced in the same balanced tree as recursive doubling.
pub(crate) async fn halving(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    acc: &mut [u8],
    nr: usize,
) -> Result<Halved, CollError> {
    let (pof2, rem) = pof2_rem(t.size());
    let mut h = Halved {
        ranges: block_ranges(dtype, acc.len(), pof2),
        own: (0, pof2),
        steps: Vec::new(),
    };
    let mut mask = 1;
    while mask < pof2 {
        let nd = nr ^ mask;
        let dst = unfold(nd, rem);
        let (lo, hi) = h.own;
        let mid = (lo + hi) / 2;
        let (keep, give) = if nr < nd {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let k = h.bytes(keep.0, keep.1);
        let got = t
            .exchange_one(call, (dst, &acc[h.bytes(give.0, give.1)]), (dst, k.len()))
            .await?;
        if nd < nr {
            t.reduce_right(dtype, op, &got, &mut acc[k]).await?;
        } else {
            t.reduce(dtype, op, &mut acc[k], &got).await?;
        }
        t.recycle(got);
        h.steps.push((dst, give));
        h.own = keep;
        mask <<= 1;
    }
    Ok(h)
}

/// Rabenseifner's allreduce (Rabenseifner, "Optimization of collective reduction operations",
/// ICCS 2004; Thakur et al. 2005, section 4.4): after the same folding as recursive doubling,
/// a reduce-scatter by recursive halving (partners at distance 1, 2, 4, ...; each keeps half of
/// its current range and sends the other half) leaves one of p' nearly equal blocks complete
/// at each member, then an allgather by recursive doubling retraces the halving steps. About
/// 2·n bytes move per member instead of n·log2 p. The operands combine exactly as in recursive
/// doubling (lower half on the left), so the result has the same bits.
pub(crate) async fn rabenseifner(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    if let Some(nr) = fold_in(t, call, dtype, op, &mut acc).await? {
        let h = halving(t, call, dtype, op, &mut acc, nr).await?;
        let (mut lo, mut hi) = h.own;
        let kept = call.kept();
        for &(dst, (glo, ghi)) in h.steps.iter().rev() {
            let g = h.bytes(glo, ghi);
            let got = t
                .exchange(&kept, &[(dst, &acc[h.bytes(lo, hi)])], &[(dst, g.len())])
                .await?
                .remove(0);
            acc[g].copy_from_slice(&got);
            (lo, hi) = (lo.min(glo), hi.max(ghi));
        }
    }
    fold_out(t, call, &mut acc).await?;
    Ok(acc)
}

/// Ring allreduce (Patarasuk and Yuan 2009): the vector is cut into p nearly equal blocks of
/// whole elements; a ring reduce-scatter leaves block b complete at member b (reduced in the
/// order x_{b+1}, ..., x_b), then the complete blocks travel once around the ring (allgather).
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
    super::allgather::ring_pass(t, &call.kept(), &mut acc, &ranges, me, (me + 1) % n, (me + n - 1) % n).await?;
    Ok(acc)
}

/// Two-level allreduce for several processes per NIC (the hierarchical scheme of MPICH's SMP-aware
/// collectives and of Sunway's two processors per NIC): the members on one node send their data
/// to the node's first member (its leader), which folds them in in member order; the leaders run
/// `inner` among themselves; each leader hands the result back to its node. Only one process
/// per node crosses the network. The intra-node messages go through the NIC's loopback path
/// here, not through shared memory.
pub(crate) async fn two_level(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
    nodes: &[u32],
    inner: crate::Algorithm,
) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.members(), t.member());
    let len = acc.len();
    let local: Vec<usize> = (0..n).filter(|&i| nodes[i] == nodes[me]).collect();
    let leader = local[0];
    if me != leader {
        t.exchange(call, &[(leader, &acc)], &[]).await?;
        return Ok(t.exchange(&call.kept(), &[], &[(leader, len)]).await?.remove(0));
    }
    let recvs: Vec<(usize, usize)> = local[1..].iter().map(|&o| (o, len)).collect();
    for got in t.exchange(call, &[], &recvs).await? {
        t.reduce(dtype, op, &mut acc, &got).await?;
    }
    let leaders: Vec<usize> = (0..n).filter(|&i| nodes[..i].iter().all(|&m| m != nodes[i])).collect();
    t.set_view(leaders)?;
    let r = match inner {
        crate::Algorithm::RecursiveDoubling => recursive_doubling(t, call, dtype, op, acc).await,
        crate::Algorithm::Rabenseifner => rabenseifner(t, call, dtype, op, acc).await,
        crate::Algorithm::Ring => ring(t, call, dtype, op, acc).await,
        a => Err(CollError::Unsupported {
            call: call.name,
            algorithm: a,
        }),
    };
    t.clear_view();
    let acc = r?;
    let sends: Vec<(usize, &[u8])> = local[1..].iter().map(|&o| (o, &acc[..])).collect();
    t.exchange(&call.kept(), &sends, &[]).await?;
    Ok(acc)
}
