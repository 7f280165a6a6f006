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
