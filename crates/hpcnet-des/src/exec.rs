//! Rank-program executor (being written).
