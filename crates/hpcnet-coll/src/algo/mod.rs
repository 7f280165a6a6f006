//! Software collective algorithms, one module per collective, and the default selection table.
//!
//! Every algorithm is written on the transport's `exchange` (send some messages, receive some,
//! concurrently), works for any communicator size, and fixes the order of the operands of every
//! reduction, so that floating-point results are reproducible for a given algorithm and size.

pub(crate) mod allgather;
pub(crate) mod allreduce;
pub(crate) mod alltoall;
pub(crate) mod barrier;
pub(crate) mod bcast;
pub(crate) mod reduce;
pub(crate) mod reduce_scatter;

/// A collective operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    Barrier,
    Broadcast,
    Reduce,
    Allreduce,
    Allgather,
    Alltoall,
    /// Reduce, then scatter equal blocks (`MPI_Reduce_scatter_block`).
    ReduceScatter,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::Barrier => "barrier",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Allreduce => "allreduce",
            Collective::Allgather => "allgather",
            Collective::Alltoall => "alltoall",
            Collective::ReduceScatter => "reduce_scatter",
        }
    }
}

/// A software algorithm, chosen per call; [`Algorithm::Auto`] takes the one [`select`] names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Auto,
    /// Barrier: dissemination (Hensgen, Finkel and Manber, 1988): ⌈log2 p⌉ rounds, in round k
    /// member i signals i + 2^k and waits for i − 2^k.
    Dissemination,
    /// Barrier: an empty binomial reduce to member 0 followed by an empty binomial broadcast;
    /// 2⌈log2 p⌉ rounds.
    BinomialTree,
    /// Broadcast and reduce: binomial tree rooted at the root (MPICH `MPIR_Bcast_binomial`,
    /// `MPIR_Reduce_binomial`): ⌈log2 p⌉ rounds, whole message per edge.
    Binomial,
    /// Allreduce: recursive doubling (Thakur, Rabenseifner and Gropp, IJHPCA 2005, section
    /// 4.4) with the excess ranks of a non-power-of-two size folded into their neighbour first:
    /// ⌊log2 p⌋ + 2 rounds of the whole message. Allgather: recursive doubling, log2 p rounds
    /// for a power-of-two size; other sizes fold the same way (⌊log2 p⌋ + 2 rounds).
    RecursiveDoubling,
    /// Broadcast: binomial scatter of p blocks, then ring allgather (van de Geijn); about 2n
    /// bytes per member.
    ScatterAllgather,
    /// Broadcast: double binary tree (Sanders, Speck and Träff 2009): each half of the message
    /// goes down its own binary tree, in chunk-sized segments.
    DoubleBinaryTree,
    /// Broadcast: pipelined chain, one transport chunk per segment (time ≈ p − 2 + m/chunk
    /// segment steps).
    Chain,
    /// Allreduce and reduce: Rabenseifner (ICCS 2004): reduce-scatter by recursive halving, then
    /// allgather by recursive doubling (allreduce) or binomial gather (reduce), after the same
    /// folding as [`Algorithm::RecursiveDoubling`]; about 2n bytes per member.
    Rabenseifner,
    /// Allreduce: two-level — reduce to one leader per node (NIC), allreduce among the leaders
    /// with the algorithm the default table picks for them, hand the result back on each node.
    /// Uses the node of each member given to [`crate::Comm::create_on_nodes`].
    TwoLevel,
    /// Allgather and alltoall: Bruck et al. (TPDS 1997): ⌈log2 p⌉ rounds for any p, with local
    /// rotations before (alltoall) and after.
    Bruck,
    /// Allreduce (reduce-scatter then allgather around a ring, Patarasuk and Yuan, JPDC 2009)
    /// allgather and reduce-scatter (ring): 2(p − 1) (resp. p − 1) rounds of n/p bytes.
    Ring,
    /// Alltoall: pairwise exchange (Thakur et al. 2005, section 4.6): p − 1 rounds; in round k
    /// member i sends to i + k and receives from i − k. Reduce-scatter: the same exchange of
    /// blocks, each folded into the receiver's own (MPICH's long-message reduce-scatter).
    Pairwise,
    /// Barrier, broadcast, reduce and allreduce by the NICs' hardware collective unit (spec 01):
    /// one descriptor per member; gather up the NICs' logical tree with in-NIC reduction, then
    /// broadcast by router multicast. Needs a communicator created with
    /// [`crate::CommConfig::hardware`].
    Hardware,
    /// Reduce-scatter: recursive halving (Thakur et al. 2005, section 4.5), for a power-of-two
    /// number of members: log2 p steps, halving the exchanged range each step.
    RecursiveHalving,
    /// Broadcast, reduce and allreduce by the NICs' triggered offload units (spec 04): each
    /// member posts its descriptor sequences once, per pulse; broadcast by double binary tree,
    /// reduce by vector halving + distance doubling + binomial gather, allreduce by
    /// Rabenseifner ([`crate::offload`]). Needs a communicator created with
    /// [`crate::CommConfig::offload`].
    Offload,
}

/// The default algorithm for a collective on `bytes` bytes per member (the buffer each member
/// passes) in a communicator of `size` members. One table, after MPICH's defaults (Thakur,
/// Rabenseifner and Gropp 2005): latency-bound algorithms for short messages, bandwidth-bound
/// ones for long. Thresholds are MPICH's (2 KiB allreduce, 12 KiB broadcast, 80 KiB allgather
/// total; 512 KiB broadcast for the pipelined chain as in MPICH's later pipelined broadcast),
/// except that the longest allreduces use the ring (about 2n bytes per member like Rabenseifner, but with p − 1
/// neighbours' links only, as NCCL and Open MPI's tuned module do for large vectors).
pub fn select(c: Collective, bytes: usize, size: usize) -> Algorithm {
    use Algorithm::*;
    match c {
        Collective::Barrier => Dissemination,
        Collective::Broadcast if bytes < 12 * 1024 || size < 8 => Binomial,
        Collective::Broadcast if bytes < 512 * 1024 => ScatterAllgather,
        Collective::Broadcast => Chain,
        Collective::Reduce if bytes <= 2048 || bytes < 8 * size => Binomial,
        Collective::Reduce => Rabenseifner,
        Collective::Allreduce if bytes <= 2048 || bytes < 8 * size => RecursiveDoubling,
        Collective::Allreduce if bytes <= 512 * 1024 => Rabenseifner,
        Collective::Allreduce => Ring,
        Collective::Allgather if bytes.saturating_mul(size) < 80 * 1024 && !size.is_power_of_two() => Bruck,
        Collective::Allgather if bytes.saturating_mul(size) < 512 * 1024 && size.is_power_of_two() => RecursiveDoubling,
        Collective::Allgather => Ring,
        Collective::Alltoall => Pairwise,
        Collective::ReduceScatter if size.is_power_of_two() && bytes < 512 * 1024 => RecursiveHalving,
        Collective::ReduceScatter => Ring,
    }
}

/// [`select`] for a communicator whose members sit `per_node` to a node (NIC) on every node
/// (pass 1 for one member per node or an uneven placement). With two members per node, short
/// allreduces (≤ 256 B per member) use [`Algorithm::TwoLevel`]: measured on the Sunway
/// prototype scenario (two processes per NIC) at 256 and 1024 ranks, it beats recursive doubling
/// on the sum over 8 B … 256 B at both sizes (by 0.5–2 µs at most sizes, slower at a few), and
/// not consistently from 512 B on, where moving the whole vector twice more through the node's
/// leader costs about what the halved number of network rounds saves (docs/model-reference.md,
/// default table).
pub fn select_on_nodes(c: Collective, bytes: usize, size: usize, per_node: usize) -> Algorithm {
    if c == Collective::Allreduce && per_node == 2 && size > 2 && bytes <= 256 {
        return Algorithm::TwoLevel;
    }
    select(c, bytes, size)
}

/// Whether `a` implements `c`.
pub fn implements(a: Algorithm, c: Collective) -> bool {
    use Algorithm::*;
    match c {
        Collective::Barrier => matches!(a, Auto | Dissemination | BinomialTree | Hardware),
        Collective::Broadcast => matches!(
            a,
            Auto | Binomial | ScatterAllgather | DoubleBinaryTree | Chain | Hardware | Offload
        ),
        Collective::Reduce => matches!(a, Auto | Binomial | Rabenseifner | Hardware | Offload),
        Collective::Allreduce => matches!(
            a,
            Auto | RecursiveDoubling | Rabenseifner | Ring | TwoLevel | Hardware | Offload
        ),
        Collective::Allgather => matches!(a, Auto | Ring | Bruck | RecursiveDoubling),
        Collective::Alltoall => matches!(a, Auto | Pairwise | Bruck),
        Collective::ReduceScatter => matches!(a, Auto | Ring | RecursiveHalving | Pairwise),
    }
}

/// Sizes of `parts` nearly equal blocks of `count` elements (the first ones one larger).
pub(crate) fn blocks(count: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| count / parts + usize::from(i < count % parts))
        .collect()
}
