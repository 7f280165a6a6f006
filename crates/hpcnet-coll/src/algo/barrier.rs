//! Barrier algorithms.

use crate::transport::{Call, Transport};
use crate::CollError;

/// Dissemination barrier: in round k, signal member `me + 2^k` and wait for `me − 2^k`. After
/// ⌈log2 p⌉ rounds every member has heard, directly or through others, from every member.
pub(crate) async fn dissemination(t: &mut Transport, call: &Call) -> Result<(), CollError> {
    let (n, me) = (t.size(), t.me());
    let mut dist = 1;
    while dist < n {
        let to = (me + dist) % n;
        let from = (me + n - dist) % n;
        t.exchange(call, &[(to, &[])], &[(from, 0)]).await?;
        dist *= 2;
    }
    Ok(())
}

/// Binomial-tree barrier: an empty binomial reduce to member 0 (every member has entered once
/// member 0 has heard from its whole tree), then an empty binomial broadcast releasing everyone;
/// 2⌈log2 p⌉ rounds on the critical path, one message per member each way.
pub(crate) async fn binomial_tree(t: &mut Transport, call: &Call) -> Result<(), CollError> {
    super::reduce::binomial(t, call, crate::Datatype::I32, crate::ReduceOp::Bor, Vec::new(), 0).await?;
    super::bcast::binomial(t, call, &mut [], 0).await
}
