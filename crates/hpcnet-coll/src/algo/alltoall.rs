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

/// Bruck's alltoall (Bruck et al., IEEE TPDS 1997; Thakur et al. 2005, section 4.6): rotate
/// locally so that position j holds the block for member i + j; in round k (k = 1, 2, 4, ...)
/// send every block whose position has bit k set to member i + k and take the blocks received
/// from i − k in their place. A block for d from s travels d − s = its position, so it ends at d
/// in position d − s; a last local rotation puts it at s. ⌈log2 p⌉ rounds of about n/2 bytes:
/// fewer messages than pairwise exchange, more bytes.
pub(crate) async fn bruck(t: &mut Transport, call: &Call, input: &[u8]) -> Result<Vec<u8>, CollError> {
    let (n, me) = (t.size(), t.me());
    let b = input.len() / n;
    let mut pos: Vec<Vec<u8>> = (0..n)
        .map(|j| {
            let d = (me + j) % n;
            input[d * b..(d + 1) * b].to_vec()
        })
        .collect();
    let mut k = 1;
    while k < n {
        let moved: Vec<usize> = (0..n).filter(|j| j & k != 0).collect();
        let mut out = Vec::with_capacity(moved.len() * b);
        for &j in &moved {
            out.extend_from_slice(&pos[j]);
        }
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        let got = t.exchange(call, &[(to, &out)], &[(from, out.len())]).await?.remove(0);
        for (i, &j) in moved.iter().enumerate() {
            pos[j].copy_from_slice(&got[i * b..(i + 1) * b]);
        }
        k <<= 1;
    }
    let mut result = vec![0u8; n * b];
    for (j, blk) in pos.iter().enumerate() {
        let s = (me + n - j) % n;
        result[s * b..(s + 1) * b].copy_from_slice(blk);
    }
    Ok(result)
}
