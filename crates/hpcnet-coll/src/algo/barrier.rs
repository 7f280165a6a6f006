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
