//! Packet keys of the triggered offload unit (spec 04, "Order-preserving triggering").
//!
//! Every collective packet carries JobID (8 bits: 256 concurrent collectives), NodeID (24 bits:
//! the sending node), VP (11 bits: 2048 virtual ports) and SeqID (5 bits: 32 steps), 48 bits in
//! all. This module owns the packing of those fields into one 48-bit key and the check of their
//! widths: a field out of range is a [`KeyError`] naming the field and its width, never a
//! truncation or a panic.
//!
//! Layout (most significant first): `JobID[47:40] NodeID[39:16] VP[15:5] SeqID[4:0]`.

use std::fmt;

/// Width of the JobID field in bits.
pub const JOB_BITS: u32 = 8;
/// Width of the NodeID field in bits.
pub const NODE_BITS: u32 = 24;
/// Width of the VP (virtual port) field in bits.
pub const VP_BITS: u32 = 11;
/// Width of the SeqID field in bits.
pub const SEQ_BITS: u32 = 5;
/// Width of a whole key in bits.
pub const KEY_BITS: u32 = JOB_BITS + NODE_BITS + VP_BITS + SEQ_BITS;

const SEQ_SHIFT: u32 = 0;
const VP_SHIFT: u32 = SEQ_BITS;
const NODE_SHIFT: u32 = SEQ_BITS + VP_BITS;
const JOB_SHIFT: u32 = SEQ_BITS + VP_BITS + NODE_BITS;

/// A field of a packet key or a descriptor that does not fit its width.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value} does not fit in {bits} bits (largest {max})")]
pub struct KeyError {
    /// Name of the field (as the spec names it, e.g. "JobID").
    pub field: &'static str,
    /// Its width in bits.
    pub bits: u32,
    /// The value that was given.
    pub value: u64,
    /// The largest value the field holds.
    pub max: u64,
}

/// Check that `value` fits in a field of `bits` bits.
pub fn check_width(field: &'static str, bits: u32, value: u64) -> Result<(), KeyError> {
    let max = (1u64 << bits) - 1;
    if value > max {
        Err(KeyError {
            field,
            bits,
            value,
            max,
        })
    } else {
        Ok(())
    }
}

/// A 48-bit packet key: JobID + NodeID + VP + SeqID.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PacketKey(u64);

impl PacketKey {
    /// Pack the four fields; each must fit its width.
    pub fn new(job: u32, node: u32, vp: u32, seq: u32) -> Result<Self, KeyError> {
        check_width("JobID", JOB_BITS, job.into())?;
        check_width("NodeID", NODE_BITS, node.into())?;
        check_width("VP", VP_BITS, vp.into())?;
        check_width("SeqID", SEQ_BITS, seq.into())?;
        Ok(PacketKey(
            u64::from(job) << JOB_SHIFT
                | u64::from(node) << NODE_SHIFT
                | u64::from(vp) << VP_SHIFT
                | u64::from(seq) << SEQ_SHIFT,
        ))
    }

    /// The key whose four fields are zero (a placeholder where no packet is held).
    pub(crate) const ZERO: PacketKey = PacketKey(0);

    /// A key from its 48-bit packed form (bits above 47 must be zero).
    pub fn from_raw(raw: u64) -> Result<Self, KeyError> {
        check_width("key", KEY_BITS, raw)?;
        Ok(PacketKey(raw))
    }

    /// The same key with JobID `job` (which must fit its 8 bits): the keys of a pulse that
    /// repeats a checked sequence differ from the sequence's in this field alone.
    #[inline]
    pub fn with_job(self, job: u32) -> PacketKey {
        debug_assert!(job < 1 << JOB_BITS, "JobID {job} does not fit in {JOB_BITS} bits");
        let mask = ((1u64 << JOB_BITS) - 1) << JOB_SHIFT;
        PacketKey(self.0 & !mask | u64::from(job) << JOB_SHIFT)
    }

    /// The packed 48-bit value.
    pub fn raw(self) -> u64 {
        self.0
    }

    fn field(self, shift: u32, bits: u32) -> u32 {
        ((self.0 >> shift) & ((1u64 << bits) - 1)) as u32
    }

    pub fn job(self) -> u32 {
        self.field(JOB_SHIFT, JOB_BITS)
    }
    pub fn node(self) -> u32 {
        self.field(NODE_SHIFT, NODE_BITS)
    }
    pub fn vp(self) -> u32 {
        self.field(VP_SHIFT, VP_BITS)
    }
    pub fn seq(self) -> u32 {
        self.field(SEQ_SHIFT, SEQ_BITS)
    }
}

impl fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key(job {}, node {}, vp {}, seq {})",
            self.job(),
            self.node(),
            self.vp(),
            self.seq()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_at_their_limits() {
        let k = PacketKey::new(255, (1 << 24) - 1, 2047, 31).unwrap();
        assert_eq!((k.job(), k.node(), k.vp(), k.seq()), (255, (1 << 24) - 1, 2047, 31));
        assert_eq!(k.raw(), (1u64 << 48) - 1);
        let k = PacketKey::new(3, 70_000, 5, 17).unwrap();
        assert_eq!((k.job(), k.node(), k.vp(), k.seq()), (3, 70_000, 5, 17));
        assert_eq!(PacketKey::from_raw(k.raw()).unwrap(), k);
        assert_eq!(PacketKey::new(0, 0, 0, 0).unwrap().raw(), 0);
        assert_eq!(k.with_job(200), PacketKey::new(200, 70_000, 5, 17).unwrap());
    }

    #[test]
    fn overflow_names_the_field_and_width() {
        let e = PacketKey::new(256, 0, 0, 0).unwrap_err();
        assert_eq!((e.field, e.bits, e.value, e.max), ("JobID", 8, 256, 255));
        assert_eq!(e.to_string(), "JobID = 256 does not fit in 8 bits (largest 255)");
        assert_eq!(PacketKey::new(0, 1 << 24, 0, 0).unwrap_err().field, "NodeID");
        let e = PacketKey::new(0, 0, 2048, 0).unwrap_err();
        assert_eq!((e.field, e.bits), ("VP", 11));
        let e = PacketKey::new(0, 0, 0, 32).unwrap_err();
        assert_eq!((e.field, e.bits), ("SeqID", 5));
        assert_eq!(PacketKey::from_raw(1 << 48).unwrap_err().bits, 48);
    }

    #[test]
    fn distinct_fields_give_distinct_keys() {
        let a = PacketKey::new(1, 2, 3, 4).unwrap();
        for b in [
            PacketKey::new(2, 2, 3, 4).unwrap(),
            PacketKey::new(1, 3, 3, 4).unwrap(),
            PacketKey::new(1, 2, 4, 4).unwrap(),
            PacketKey::new(1, 2, 3, 5).unwrap(),
        ] {
            assert_ne!(a, b);
        }
    }
}
