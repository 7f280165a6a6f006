//! Reduce algorithms.

use crate::transport::{Call, Transport};
use crate::{CollError, Datatype, ReduceOp};

/// Binomial-tree reduce (MPICH `MPIR_Reduce_binomial`): with ranks relative to the root, in
/// round k a member whose bit k is clear receives the partial result of `v + 2^k` and combines it
/// as the right operand (the lower-ranked block stays on the left); a member whose bit k is set
/// sends its partial result to `v − 2^k` and is done. The root returns the result.
pub(crate) async fn binomial(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
    root: usize,
) -> Result<Option<Vec<u8>>, CollError> {
    let (n, me) = (t.size(), t.me());
    let v = (me + n - root) % n;
    let abs = |rel: usize| (rel + root) % n;
    let mut mask = 1;
    while mask < n {
        if v & mask == 0 {
            let src = v | mask;
            if src < n {
                let got = t.exchange(call, &[], &[(abs(src), acc.len())]).await?;
                t.reduce(dtype, op, &mut acc, &got[0]).await?;
            }
        } else {
            t.exchange(call, &[(abs(v & !mask), &acc)], &[]).await?;
            return Ok(None);
        }
        mask <<= 1;
    }
    Ok(Some(acc))
}

/// Rabenseifner's reduce (ICCS 2004; Thakur et al. 2005, section 4.3): the folding and the
/// reduce-scatter by recursive halving of Rabenseifner's allreduce, then a binomial gather of
/// the blocks to folded index 0, retracing the halving steps from the last (a member sends
/// everything it holds at the first retraced step where its bit is set, and is done); if that
/// member is not the root it forwards the result. About 2n bytes per member; the operands
/// combine as in recursive doubling.
pub(crate) async fn rabenseifner(
    t: &mut Transport,
    call: &Call,
    dtype: Datatype,
    op: ReduceOp,
    mut acc: Vec<u8>,
    root: usize,
) -> Result<Option<Vec<u8>>, CollError> {
    use super::allreduce::{fold_in, halving, pof2_rem, unfold};
    let me = t.me();
    let (_, rem) = pof2_rem(t.size());
    let len = acc.len();
    let gatherer = unfold(0, rem);
    // The gather and the hand-over to the root move finished blocks as they are.
    let kept = call.kept();
    if let Some(nr) = fold_in(t, call, dtype, op, &mut acc).await? {
        let h = halving(t, call, dtype, op, &mut acc, nr).await?;
        let (mut lo, mut hi) = h.own;
        let mut mask = h.steps.len();
        for (dst, (glo, ghi)) in h.steps.iter().rev() {
            mask -= 1;
            if nr & (1 << mask) != 0 {
                t.exchange(&kept, &[(*dst, &acc[h.bytes(lo, hi)])], &[]).await?;
                break;
            }
            let g = h.bytes(*glo, *ghi);
            let got = t.exchange(&kept, &[], &[(*dst, g.len())]).await?.remove(0);
            acc[g].copy_from_slice(&got);
            (lo, hi) = (lo.min(*glo), hi.max(*ghi));
        }
    }
    match (me == gatherer, me == root) {
        (true, true) => Ok(Some(acc)),
        (true, false) => {
            t.exchange(&kept, &[(root, &acc)], &[]).await?;
            Ok(None)
        }
        (false, true) => Ok(Some(t.exchange(&kept, &[], &[(gatherer, len)]).await?.remove(0))),
        (false, false) => Ok(None),
    }
}
