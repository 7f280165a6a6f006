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

/// A binary tree over positions 0..m: each position's parent and children, and the root.
pub(crate) struct Tree {
    pub parent: Vec<Option<usize>>,
    pub kids: Vec<Vec<usize>>,
    pub root: usize,
}

/// A binary tree over positions 0..m whose interior nodes are `inner` (in heap order: `inner[j]`
/// has the children `inner[2j + 1]`, `inner[2j + 2]`) and whose other positions `leaves` fill the
/// free child slots of the interior nodes, shallowest first. Needs `leaves.len() ≤ inner.len() + 1`
/// (a single leaf and no interior node is a one-node tree).
fn tree_over(m: usize, inner: &[usize], leaves: &[usize]) -> Tree {
    let mut t = Tree {
        parent: vec![None; m],
        kids: vec![Vec::new(); m],
        root: inner.first().or(leaves.first()).copied().unwrap_or(0),
    };
    let k = inner.len();
    let mut free = Vec::new();
    for j in 0..k {
        for c in [2 * j + 1, 2 * j + 2] {
            if c < k {
                t.parent[inner[c]] = Some(inner[j]);
                t.kids[inner[j]].push(inner[c]);
            } else {
                free.push(inner[j]);
            }
        }
    }
    for (&leaf, &up) in leaves.iter().zip(&free) {
        t.parent[leaf] = Some(up);
        t.kids[up].push(leaf);
    }
    t
}

/// The two trees of the double binary tree broadcast over positions 0..m (Sanders, Speck and
/// Träff 2009): the even positions are the interior nodes of tree A and the leaves of tree B,
/// the odd positions the interior nodes of tree B and the leaves of tree A, so every position
/// forwards data in at most one tree, for any m. Each tree is a heap-ordered binary tree on its
/// interior nodes with the other half attached as leaves: depth about log2 m + 1.
pub(crate) fn two_trees(m: usize) -> [Tree; 2] {
    let even: Vec<usize> = (0..m).step_by(2).collect();
    let odd: Vec<usize> = (1..m).step_by(2).collect();
    [tree_over(m, &even, &odd), tree_over(m, &odd, &even)]
}

/// Double binary tree broadcast (Sanders, Speck and Träff, "Two-tree algorithms for full
/// bandwidth broadcast, reduction and scan", Parallel Computing 2009): the root sends one half of
/// the message down each of two binary trees over the other p − 1 members, in segments of
/// `segment` bytes. The trees are complementary for every p ([`two_trees`]): a member that
/// forwards in one tree is a leaf of the other, so each member sends at most about the message
/// once and both halves flow at once. (NCCL builds its second tree by mirroring or shifting the
/// first, which leaves one member interior in both when p − 1 is odd.)
/// Pipelined as a stream ([`Transport::stream`]): a member posts the receives of every segment
/// of both halves at once and forwards each segment of the tree it is interior in to its
/// children as soon as that segment has landed, so segments flow down both trees one behind
/// the other and the trees never wait on each other.
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
    let trees = two_trees(m);
    // Position q of a tree is relative rank q + 1; the root (relative 0) feeds both tree roots.
    let rel = |q: usize| q + 1;
    let half = buf.len() / 2;
    let spans = [0..half, half..buf.len()];
    let segment = segment.max(1);
    let segs = |tree: usize| spans[tree].len().div_ceil(segment).max(1);
    let seg = |tree: usize, i: usize| {
        let s = &spans[tree];
        (s.start + i * segment).min(s.end)..(s.start + (i + 1) * segment).min(s.end)
    };
    // This member's parent (absolute) and children in each tree.
    let links: Vec<(Option<usize>, Vec<usize>)> = trees
        .iter()
        .map(|tr| {
            if v == 0 {
                (None, vec![abs(rel(tr.root))])
            } else {
                let q = v - 1;
                let up = tr.parent[q].map_or(0, rel);
                (Some(abs(up)), tr.kids[q].iter().map(|&k| abs(rel(k))).collect())
            }
        })
        .collect();
    let mut recvs = Vec::new();
    let mut sends = Vec::new();
    for j in 0..segs(0).max(segs(1)) {
        for (tree, (up, kids)) in links.iter().enumerate() {
            if j >= segs(tree) {
                continue;
            }
            let after = up.map(|up| {
                recvs.push((up, seg(tree, j)));
                recvs.len() - 1
            });
            sends.extend(kids.iter().map(|&c| (c, seg(tree, j), after)));
        }
    }
    t.stream(call, buf, &sends, &recvs).await
}

/// Parent and children of positions 1..=m in a balanced in-order binary tree (the root is the
/// middle position, each subtree the middle of its range); index 0 is unused. The offloaded
/// double-binary-tree sequences of `crate::offload` are built on it.
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

#[cfg(test)]
mod tests {
    use super::two_trees;

    /// Both trees span positions 0..m with one root and at most two children each, and no
    /// position has children in both trees, for every m.
    #[test]
    fn two_trees_span_and_complement() {
        for m in 1..=300 {
            let trees = two_trees(m);
            for (i, t) in trees.iter().enumerate() {
                assert_eq!((0..m).filter(|&p| t.parent[p].is_none()).count(), 1, "m={m} tree {i}");
                assert!(t.parent[t.root].is_none());
                let mut seen = vec![false; m];
                let mut stack = vec![(t.root, 0usize)];
                let mut depth = 0;
                while let Some((p, d)) = stack.pop() {
                    assert!(!seen[p] && t.kids[p].len() <= 2, "m={m} tree {i} position {p}");
                    seen[p] = true;
                    depth = depth.max(d);
                    stack.extend(t.kids[p].iter().map(|&k| (k, d + 1)));
                }
                assert!(seen.iter().all(|&s| s), "m={m} tree {i}: does not span");
                assert!(
                    depth <= 2 + (m as f64).log2().ceil() as usize,
                    "m={m} tree {i}: depth {depth}"
                );
            }
            let both = (0..m)
                .filter(|&p| !trees[0].kids[p].is_empty() && !trees[1].kids[p].is_empty())
                .count();
            assert_eq!(both, 0, "m={m}: {both} positions interior in both trees");
        }
    }
}
