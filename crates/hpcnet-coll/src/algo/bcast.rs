//! Broadcast algorithms.

use crate::transport::{Call, Transport};
use crate::CollError;

/// Binomial-tree broadcast (MPICH `MPIR_Bcast_binomial`): with ranks relative to the root, a
/// member receives from the member that differs in its lowest set bit, then sends to members
/// `v + mask` for the masks below that bit, largest first.
pub(crate) async fn binomial(t: &mut Transport, call: &Call, buf: &mut [u8], root: usize) -> Result<(), CollError> {
    let (n, me) = (t.size(), t.me());
    let v = (me + n - root) % n;
    let abs = |rel: usize| (rel + root) % n;
    let mut mask = 1;
    while mask < n {
        if v & mask != 0 {
            let got = t.exchange(call, &[], &[(abs(v - mask), buf.len())]).await?;
            buf.copy_from_slice(&got[0]);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let mut children = Vec::new();
    while mask > 0 {
        if v + mask < n {
            children.push(abs(v + mask));
        }
        mask >>= 1;
    }
    let sends: Vec<(usize, &[u8])> = children.iter().map(|&c| (c, &*buf)).collect();
    t.exchange(call, &sends, &[]).await?;
    Ok(())
}

/// Pipelined chain broadcast: members in order from the root form a chain; the message is cut
/// into segments of `segment` bytes and each member forwards segment i to its successor as soon
/// as it has it, so segments flow down the chain one behind the other (time ≈ (p − 2 + m/s)
/// segment steps instead of (p − 1) whole-message steps).
pub(crate) async fn chain(
    t: &mut Transport,
    call: &Call,
    buf: &mut [u8],
    root: usize,
    segment: usize,
) -> Result<(), CollError> {
    let (n, me) = (t.size(), t.me());
    let v = (me + n - root) % n;
    let prev = (me + n - 1) % n;
    let next = (me + 1) % n;
    let segment = segment.max(1);
    let segs = buf.len().div_ceil(segment).max(1);
    for i in 0..segs {
        let r = (i * segment).min(buf.len())..((i + 1) * segment).min(buf.len());
        if v > 0 {
            let got = t.exchange(call, &[], &[(prev, r.len())]).await?;
            buf[r.clone()].copy_from_slice(&got[0]);
        }
        if v + 1 < n {
            t.exchange(call, &[(next, &buf[r])], &[]).await?;
        }
    }
    Ok(())
}
