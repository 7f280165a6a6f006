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

/// A collective operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    Barrier,
    Broadcast,
    Reduce,
    Allreduce,
    Allgather,
    Alltoall,
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
    /// Broadcast and reduce: binomial tree rooted at the root (MPICH `MPIR_Bcast_binomial`,
    /// `MPIR_Reduce_binomial`): ⌈log2 p⌉ rounds, whole message per edge.
    Binomial,
    /// Allreduce: recursive doubling (Thakur, Rabenseifner and Gropp, IJHPCA 2005, section
    /// 4.4) with the excess ranks of a non-power-of-two size folded into their neighbour first:
    /// ⌊log2 p⌋ + 2 rounds of the whole message.
    RecursiveDoubling,
    /// Allreduce (reduce-scatter then allgather around a ring, Patarasuk and Yuan, JPDC 2009)
    /// and allgather (ring): 2(p − 1) (resp. p − 1) rounds of n/p bytes.
    Ring,
    /// Alltoall: pairwise exchange (Thakur et al. 2005, section 4.6): p − 1 rounds; in round k
    /// member i sends to i + k and receives from i − k.
    Pairwise,
}

/// The default algorithm for a collective on `bytes` bytes per member (the message size the
/// collective is called with) in a communicator of `size` members. One table, after MPICH's
/// defaults (Thakur et al. 2005): recursive doubling for short allreduces, a bandwidth-optimal
/// ring above 2 KiB when every member gets at least one element's worth of bytes.
pub fn select(c: Collective, bytes: usize, size: usize) -> Algorithm {
    match c {
        Collective::Barrier => Algorithm::Dissemination,
        Collective::Broadcast | Collective::Reduce => Algorithm::Binomial,
        Collective::Allreduce if bytes <= 2048 || bytes < 8 * size => Algorithm::RecursiveDoubling,
        Collective::Allreduce => Algorithm::Ring,
        Collective::Allgather => Algorithm::Ring,
        Collective::Alltoall => Algorithm::Pairwise,
    }
}

/// Whether `a` implements `c`.
pub fn implements(a: Algorithm, c: Collective) -> bool {
    use Algorithm::*;
    match c {
        Collective::Barrier => matches!(a, Auto | Dissemination),
        Collective::Broadcast | Collective::Reduce => matches!(a, Auto | Binomial),
        Collective::Allreduce => matches!(a, Auto | RecursiveDoubling | Ring),
        Collective::Allgather => matches!(a, Auto | Ring),
        Collective::Alltoall => matches!(a, Auto | Pairwise),
    }
}

/// Sizes of `parts` nearly equal blocks of `count` elements (the first ones one larger).
pub(crate) fn blocks(count: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| count / parts + usize::from(i < count % parts))
        .collect()
}
