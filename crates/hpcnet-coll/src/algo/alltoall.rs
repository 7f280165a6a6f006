//! Alltoall algorithms.

use crate::transport::{Call, Transport};
use crate::CollError;

/// Pairwise exchange: block j of member i's input goes to member j; in step k (1 ≤ k < p)
/// member i sends its block for i + k and receives the block from i − k.
pub(crate) async fn pairwise(t: &mut Transport, call: &Call, input: &[u8]) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let b = input.len() / n;
    let mut out = vec![0u8; n * b];
    out[me * b..(me + 1) * b].copy_from_slice(&input[me * b..(me + 1) * b]);
    for k in 1..n {
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        let got = t
            .exchange(call, &[(to, &input[to * b..(to + 1) * b])], &[(from, b)])
            .await?
            .remove(0);
        out[from * b..(from + 1) * b].copy_from_slice(&got);
    }
    Ok(out)
}
