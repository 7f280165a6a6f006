//! hpcnet-msg — the message library that rank programs call.
pub mod verbs;
