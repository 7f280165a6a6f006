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

/// Scatter + ring allgather broadcast (van de Geijn; Thakur et al. 2005, section 4.2): the
/// root scatters p nearly equal byte blocks down a binomial tree (member v, relative to the
/// root, gets blocks v .. v + its subtree size), then the blocks go around a ring in relative
/// order. About 2n bytes per member instead of n·log2 p.
pub(crate) async fn scatter_allgather(
    t: &mut Transport,
    call: &Call,
    buf: &mut [u8],
    root: usize,
) -> Result<(), CollError> {
    let (n, me) = (t.size(), t.me());
    let v = (me + n - root) % n;
    let abs = |rel: usize| (rel + root) % n;
    let mut starts = vec![0; n + 1];
    for (i, c) in super::blocks(buf.len(), n).into_iter().enumerate() {
        starts[i + 1] = starts[i] + c;
    }
    let span = |lo: usize, hi: usize| starts[lo]..starts[hi.min(n)];
    let mut mask = 1;
    while mask < n {
        if v & mask != 0 {
            let r = span(v, v + mask);
            let got = t.exchange(call, &[], &[(abs(v - mask), r.len())]).await?;
            buf[r].copy_from_slice(&got[0]);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let mut children = Vec::new();
    while mask > 0 {
        if v + mask < n {
            children.push((abs(v + mask), span(v + mask, v + 2 * mask)));
        }
        mask >>= 1;
    }
    let sends: Vec<(usize, &[u8])> = children.iter().map(|(c, r)| (*c, &buf[r.clone()])).collect();
    t.exchange(call, &sends, &[]).await?;
    let (right, left) = (abs(v + 1), abs(v + n - 1));
    for s in 0..n.saturating_sub(1) {
        let sb = (v + n - s) % n;
        let rb = (v + 2 * n - s - 1) % n;
        let got = t
            .exchange(
                call,
                &[(right, &buf[span(sb, sb + 1)])],
                &[(left, span(rb, rb + 1).len())],
            )
            .await?
            .remove(0);
        buf[span(rb, rb + 1)].copy_from_slice(&got);
    }
    Ok(())
}
