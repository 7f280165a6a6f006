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
