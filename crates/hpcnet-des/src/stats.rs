//! Statistics registry (being written).
