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
    let ranges: Vec<_> = (0..n).map(|k| span(k, k + 1)).collect();
    super::allgather::ring_pass(t, call, buf, &ranges, v, abs(v + 1), abs(v + n - 1)).await
}

/// Parent and children of positions 1..=m in a balanced in-order binary tree (the root is the
/// middle position, each subtree the middle of its range); index 0 is unused.
pub(crate) fn inorder_tree(m: usize) -> (Vec<Option<usize>>, Vec<Vec<usize>>) {
    let mut parent = vec![None; m + 1];
    let mut kids = vec![Vec::new(); m + 1];
    let mut stack = vec![(1usize, m, None::<usize>)];
    while let Some((lo, hi, up)) = stack.pop() {
        if lo > hi {
            continue;
        }
        let mid = (lo + hi) / 2;
        parent[mid] = up;
        if let Some(u) = up {
            kids[u].push(mid);
        }
        stack.push((mid + 1, hi, Some(mid)));
        if mid > lo {
            stack.push((lo, mid - 1, Some(mid)));
        }
    }
    (parent, kids)
}

/// Double binary tree broadcast (Sanders, Speck and Träff, "Two-tree algorithms for full
/// bandwidth broadcast, reduction and scan", Parallel Computing 2009; NCCL's trees): the root
/// sends one half of the message down each of two binary trees over the other members, in
/// segments of `segment` bytes. Tree A is the in-order tree on relative ranks 1..p−1; tree B
/// is tree A with every position moved to the next rank (NCCL's shift construction), so interior
/// members of one tree are leaves of the other — exactly when p − 1 = 2^k − 1; otherwise up to
/// about a third of the members are interior in both (Sanders et al.'s exact two-tree colouring
/// is not built) — and both halves flow at once.
/// Each member handles segment i of tree A, then segment i of tree B, then segment i + 1: a
/// member never waits for tree B's segment i before forwarding tree A's, so the two trees cannot
/// wait on each other in a cycle.
pub(crate) async fn double_binary_tree(
    t: &mut Transport,
    call: &Call,
    buf: &mut [u8],
    root: usize,
    segment: usize,
) -> Result<(), CollError> {
    let (n, me) = (t.size(), t.me());
    if n == 1 {
        return Ok(());
    }
    let v = (me + n - root) % n;
    let abs = |rel: usize| (rel + root) % n;
    let m = n - 1;
    let (parent, kids) = inorder_tree(m);
    let tree_root = parent.iter().skip(1).position(Option::is_none).map_or(1, |i| i + 1);
    // Relative rank at position p of tree A, of tree B; and this member's positions.
    let rel_a = |p: usize| p;
    let rel_b = |p: usize| p % m + 1;
    let pos = [v, if v == 1 { m } else { v.saturating_sub(1) }];
    let rel = |tree: usize, p: usize| if tree == 0 { rel_a(p) } else { rel_b(p) };
    let half = buf.len() / 2;
    let spans = [0..half, half..buf.len()];
    let segment = segment.max(1);
    let segs = |tree: usize| spans[tree].len().div_ceil(segment).max(1);
    let seg = |tree: usize, i: usize| {
        let s = &spans[tree];
        (s.start + i * segment).min(s.end)..(s.start + (i + 1) * segment).min(s.end)
    };
    for i in 0..segs(0).max(segs(1)) {
        for tree in 0..2 {
            if i >= segs(tree) {
                continue;
            }
            let r = seg(tree, i);
            let children: Vec<usize> = if v == 0 {
                vec![abs(rel(tree, tree_root))]
            } else {
                let up = parent[pos[tree]].map_or(0, |p| rel(tree, p));
                let got = t.exchange(call, &[], &[(abs(up), r.len())]).await?;
                buf[r.clone()].copy_from_slice(&got[0]);
                kids[pos[tree]].iter().map(|&k| abs(rel(tree, k))).collect()
            };
            let sends: Vec<(usize, &[u8])> = children.iter().map(|&c| (c, &buf[r.clone()])).collect();
            t.exchange(call, &sends, &[]).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::inorder_tree;

    /// The in-order tree spans positions 1..=m with one root and at most two children each;
    /// shifted by one (tree B), most interior positions of tree A are leaves.
    #[test]
    fn inorder_tree_spans_and_complements() {
        for m in 1..=40 {
            let (parent, kids) = inorder_tree(m);
            assert_eq!((1..=m).filter(|&p| parent[p].is_none()).count(), 1, "m={m}");
            let root = (1..=m).find(|&p| parent[p].is_none()).unwrap();
            let mut seen = vec![false; m + 1];
            let mut stack = vec![root];
            while let Some(p) = stack.pop() {
                assert!(!seen[p] && kids[p].len() <= 2);
                seen[p] = true;
                stack.extend(&kids[p]);
            }
            assert!(seen[1..].iter().all(|&s| s), "m={m}: tree does not span");
            // Members interior in both tree A and tree B (positions moved to the next rank):
            // none when m = 2^k − 1, up to about a third of them otherwise.
            let interior_a: Vec<usize> = (1..=m).filter(|&p| !kids[p].is_empty()).collect();
            let both = interior_a
                .iter()
                .filter(|&&r| {
                    let pb = if r == 1 { m } else { r - 1 };
                    !kids[pb].is_empty()
                })
                .count();
            if (m + 1).is_power_of_two() {
                assert_eq!(both, 0, "m={m}");
            }
            assert!(both <= m / 3 + 1, "m={m}: {both} members interior in both trees");
        }
    }
}
