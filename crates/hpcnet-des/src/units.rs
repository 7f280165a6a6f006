//! Unit newtypes: integer picosecond time, bytes and bit rates.
//!
//! Time is never floating point inside the model: [`SimTime`] counts picoseconds in a `u64`
//! (enough for 213 days of simulated time). Conversions to `f64` exist only for reporting.
//! All three types parse from strings with a unit (`"20 ns"`, `"4 KiB"`, `"28.125 Gb/s"`) and
//! serialise back to such strings, so scenario files always say which unit they mean.

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, Sub, SubAssign};
use std::str::FromStr;

/// A value that could not be read as a quantity of the expected unit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(pub String);

/// Split `"12.5 ns"` / `"12.5ns"` into the number and the unit suffix.
fn split_quantity(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    // 'e' may begin a unit ("e" is not a unit we use, so this only matters for exponents).
    let (num, unit) = s.split_at(end);
    let v: f64 = num.trim().parse().ok()?;
    if !v.is_finite() {
        return None;
    }
    Some((v, unit.trim()))
}

fn to_integer(v: f64, scale: f64, what: &str, text: &str) -> Result<u64, UnitError> {
    let x = v * scale;
    if x < 0.0 {
        return Err(UnitError(format!("{what} must not be negative, got '{text}'")));
    }
    if x > u64::MAX as f64 / 2.0 {
        return Err(UnitError(format!("{what} '{text}' is too large")));
    }
    // Quantities are integers of their finest unit (1 ps, 1 B, 1 b/s) and round to the nearest;
    // a non-zero value that would round to nothing is refused rather than silently become 0.
    if x > 0.0 && x < 0.5 {
        return Err(UnitError(format!(
            "{what} '{text}' is below the resolution of {} and would round to 0",
            match what {
                "a time" => "1 ps",
                "a size" => "1 B",
                _ => "1 b/s",
            }
        )));
    }
    Ok(x.round() as u64)
}

// ---------------------------------------------------------------------------------------------
// SimTime

/// A point in simulated time or a duration, in integer picoseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub const MAX: SimTime = SimTime(u64::MAX);

    pub const fn from_ps(ps: u64) -> Self {
        SimTime(ps)
    }
    pub const fn from_ns(ns: u64) -> Self {
        SimTime(ns * 1_000)
    }
    pub const fn from_us(us: u64) -> Self {
        SimTime(us * 1_000_000)
    }
    pub const fn from_ms(ms: u64) -> Self {
        SimTime(ms * 1_000_000_000)
    }
    pub const fn ps(self) -> u64 {
        self.0
    }
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / 1e3
    }
    pub fn as_us_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e12
    }
    pub fn saturating_sub(self, o: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(o.0))
    }
    pub fn max(self, o: SimTime) -> SimTime {
        if self >= o {
            self
        } else {
            o
        }
    }
}

impl Add for SimTime {
    type Output = SimTime;
    fn add(self, o: SimTime) -> SimTime {
        SimTime(self.0 + o.0)
    }
}
impl AddAssign for SimTime {
    fn add_assign(&mut self, o: SimTime) {
        self.0 += o.0;
    }
}
impl Sub for SimTime {
    type Output = SimTime;
    fn sub(self, o: SimTime) -> SimTime {
        SimTime(self.0 - o.0)
    }
}
impl SubAssign for SimTime {
    fn sub_assign(&mut self, o: SimTime) {
        self.0 -= o.0;
    }
}
impl Mul<u64> for SimTime {
    type Output = SimTime;
    fn mul(self, k: u64) -> SimTime {
        SimTime(self.0 * k)
    }
}
impl Div<u64> for SimTime {
    type Output = SimTime;
    fn div(self, k: u64) -> SimTime {
        SimTime(self.0 / k)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ps = self.0;
        for (scale, unit) in [
            (1_000_000_000_000u64, "s"),
            (1_000_000_000, "ms"),
            (1_000_000, "us"),
            (1_000, "ns"),
        ] {
            if ps >= scale && ps.is_multiple_of(scale) {
                return write!(f, "{} {unit}", ps / scale);
            }
        }
        if ps >= 1_000 && ps.is_multiple_of(100) {
            // Exact with one decimal in ns: "12.5 ns".
            return write!(f, "{} ns", ps as f64 / 1e3);
        }
        write!(f, "{ps} ps")
    }
}

impl FromStr for SimTime {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let bad = || {
            UnitError(format!(
                "expected a time with a unit (ps, ns, us, ms, s), e.g. '20 ns', got '{s}'"
            ))
        };
        let (v, unit) = split_quantity(s).ok_or_else(bad)?;
        let scale = match unit {
            "ps" => 1.0,
            "ns" => 1e3,
            "us" | "µs" => 1e6,
            "ms" => 1e9,
            "s" => 1e12,
            _ => return Err(bad()),
        };
        Ok(SimTime(to_integer(v, scale, "a time", s)?))
    }
}

// ---------------------------------------------------------------------------------------------
// Bytes

/// A size in bytes. Parsed multipliers are binary: `KB` = `KiB` = 1024 B, as the papers use them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    pub const fn new(b: u64) -> Self {
        Bytes(b)
    }
    pub const fn get(self) -> u64 {
        self.0
    }
    /// Number of `unit`-sized blocks needed to hold `self` (at least one for a non-empty size).
    pub fn blocks_of(self, unit: Bytes) -> u64 {
        self.0.div_ceil(unit.0.max(1))
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, o: Bytes) -> Bytes {
        Bytes(self.0 + o.0)
    }
}
impl Sub for Bytes {
    type Output = Bytes;
    fn sub(self, o: Bytes) -> Bytes {
        Bytes(self.0 - o.0)
    }
}
impl Mul<u64> for Bytes {
    type Output = Bytes;
    fn mul(self, k: u64) -> Bytes {
        Bytes(self.0 * k)
    }
}

impl Bytes {
    /// Parses a size as [`FromStr`] does, but refuses one that is not a whole number of bytes
    /// ("1.5" or "0.3 KiB") instead of rounding it: for counts of bytes a user lists exactly.
    pub fn parse_whole(s: &str) -> Result<Bytes, UnitError> {
        let b: Bytes = s.parse()?;
        if let Some((v, unit)) = split_quantity(s) {
            let scale = match unit {
                "KB" | "KiB" | "kB" | "K" => 1024.0,
                "MB" | "MiB" | "M" => 1024.0 * 1024.0,
                "GB" | "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
                _ => 1.0,
            };
            if (v * scale - b.0 as f64).abs() > 1e-6 {
                return Err(UnitError(format!(
                    "a size '{}' is not a whole number of bytes",
                    s.trim()
                )));
            }
        }
        Ok(b)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (scale, unit) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
            if b >= scale && b.is_multiple_of(scale) {
                return write!(f, "{} {unit}", b / scale);
            }
        }
        write!(f, "{b} B")
    }
}

impl FromStr for Bytes {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let bad = || {
            UnitError(format!(
                "expected a size with a unit (B, KiB, MiB, GiB), e.g. '64 B', got '{s}'"
            ))
        };
        let (v, unit) = split_quantity(s).ok_or_else(bad)?;
        let scale = match unit {
            "B" | "" => 1.0,
            "KB" | "KiB" | "kB" | "K" => 1024.0,
            "MB" | "MiB" | "M" => 1024.0 * 1024.0,
            "GB" | "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
            _ => return Err(bad()),
        };
        Ok(Bytes(to_integer(v, scale, "a size", s)?))
    }
}

// ---------------------------------------------------------------------------------------------
// BitsPerSec

/// A data rate in bits per second.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BitsPerSec(pub u64);

impl BitsPerSec {
    pub const fn new(bps: u64) -> Self {
        BitsPerSec(bps)
    }
    pub fn gbps(g: f64) -> Self {
        BitsPerSec((g * 1e9).round() as u64)
    }
    pub const fn get(self) -> u64 {
        self.0
    }
    pub fn as_gbps_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// Bytes per second as `f64`, for reports (GB/s = 1e9 B/s).
    pub fn as_bytes_per_sec_f64(self) -> f64 {
        self.0 as f64 / 8.0
    }
    /// Time to put `b` bytes on a channel of this rate, rounded up to the next picosecond.
    pub fn serialization(self, b: Bytes) -> SimTime {
        if self.0 == 0 {
            return SimTime::MAX;
        }
        // Fast path in 64-bit arithmetic (sizes below 2 MiB), exact 128-bit otherwise.
        if b.0 < (1 << 21) {
            return SimTime((b.0 * 8_000_000_000_000).div_ceil(self.0));
        }
        let bits = b.0 as u128 * 8 * 1_000_000_000_000u128;
        SimTime(bits.div_ceil(self.0 as u128) as u64)
    }
    /// Scale by a rational efficiency `num/den` (e.g. 64/66 for 64b/66b coding).
    pub fn scaled(self, num: u64, den: u64) -> Self {
        BitsPerSec((self.0 as u128 * num as u128 / den as u128) as u64)
    }
}

impl Mul<u64> for BitsPerSec {
    type Output = BitsPerSec;
    fn mul(self, k: u64) -> BitsPerSec {
        BitsPerSec(self.0 * k)
    }
}

impl fmt::Display for BitsPerSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (scale, unit) in [(1_000_000_000u64, "Gb/s"), (1_000_000, "Mb/s"), (1_000, "kb/s")] {
            if b >= scale {
                let v = b as f64 / scale as f64;
                return write!(f, "{v} {unit}");
            }
        }
        write!(f, "{b} b/s")
    }
}

impl FromStr for BitsPerSec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let bad = || {
            UnitError(format!(
                "expected a rate with a unit (Gb/s, Mb/s, GB/s, MB/s), e.g. '28 Gb/s', got '{s}'"
            ))
        };
        let (v, unit) = split_quantity(s).ok_or_else(bad)?;
        let scale = match unit {
            "b/s" | "bps" => 1.0,
            "kb/s" | "Kb/s" | "kbps" => 1e3,
            "Mb/s" | "Mbps" => 1e6,
            "Gb/s" | "Gbps" => 1e9,
            "Tb/s" | "Tbps" => 1e12,
            "B/s" => 8.0,
            "KB/s" | "kB/s" => 8e3,
            "MB/s" => 8e6,
            "GB/s" => 8e9,
            _ => return Err(bad()),
        };
        Ok(BitsPerSec(to_integer(v, scale, "a rate", s)?))
    }
}

// ---------------------------------------------------------------------------------------------
// serde: every quantity is a string with a unit; sizes may also be a bare integer (bytes).

macro_rules! serde_via_str {
    ($t:ty, $expect:expr, $allow_int:expr) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> de::Visitor<'de> for V {
                    type Value = $t;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expect)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$t, E> {
                        v.parse::<$t>().map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$t, E> {
                        if $allow_int {
                            Ok(<$t>::from_int(v))
                        } else {
                            Err(E::custom(format!(
                                "{v} has no unit; write it as a string with a unit, {}",
                                $expect
                            )))
                        }
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$t, E> {
                        if v < 0 {
                            return Err(E::custom(format!("{v} must not be negative")));
                        }
                        self.visit_u64(v as u64)
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$t, E> {
                        Err(E::custom(format!(
                            "{v} has no unit; write it as a string with a unit, {}",
                            $expect
                        )))
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

impl SimTime {
    fn from_int(v: u64) -> Self {
        SimTime(v)
    }
}
impl Bytes {
    fn from_int(v: u64) -> Self {
        Bytes(v)
    }
}
impl BitsPerSec {
    fn from_int(v: u64) -> Self {
        BitsPerSec(v)
    }
}

serde_via_str!(SimTime, "a time such as \"20 ns\"", false);
serde_via_str!(Bytes, "a size such as \"64 B\" or \"4 KiB\"", true);
serde_via_str!(BitsPerSec, "a rate such as \"28 Gb/s\"", false);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_time() {
        assert_eq!("20 ns".parse::<SimTime>().unwrap(), SimTime(20_000));
        assert_eq!("12.5ns".parse::<SimTime>().unwrap(), SimTime(12_500));
        assert_eq!("1.2 us".parse::<SimTime>().unwrap(), SimTime(1_200_000));
        assert_eq!(SimTime(12_500).to_string(), "12.5 ns");
        assert_eq!(SimTime(3_000_000).to_string(), "3 us");
        assert_eq!(SimTime(7).to_string(), "7 ps");
        assert!("20 GB".parse::<SimTime>().is_err());
        assert!("twenty ns".parse::<SimTime>().is_err());
    }

    #[test]
    fn parse_sizes_and_rates() {
        assert_eq!("4 KiB".parse::<Bytes>().unwrap(), Bytes(4096));
        assert_eq!("64".parse::<Bytes>().unwrap(), Bytes(64));
        assert_eq!("28.125 Gb/s".parse::<BitsPerSec>().unwrap(), BitsPerSec(28_125_000_000));
        assert_eq!("4 GB/s".parse::<BitsPerSec>().unwrap(), BitsPerSec(32_000_000_000));
        assert!("28 ns".parse::<BitsPerSec>().is_err());
    }

    #[test]
    fn values_below_the_resolution_are_refused_not_zeroed() {
        let e = "1e-9 ps".parse::<SimTime>().unwrap_err();
        assert_eq!(
            e.0,
            "a time '1e-9 ps' is below the resolution of 1 ps and would round to 0"
        );
        assert!("0.4 B".parse::<Bytes>().unwrap_err().0.contains("resolution of 1 B"));
        assert!("0.1 b/s"
            .parse::<BitsPerSec>()
            .unwrap_err()
            .0
            .contains("resolution of 1 b/s"));
        // Zero stays zero, and values round to the nearest unit.
        assert_eq!("0 ns".parse::<SimTime>().unwrap(), SimTime::ZERO);
        assert_eq!("0.6 ps".parse::<SimTime>().unwrap(), SimTime(1));
        assert_eq!("1.5 KiB".parse::<Bytes>().unwrap(), Bytes(1536));
    }

    #[test]
    fn whole_sizes_refuse_fractions_of_a_byte() {
        assert_eq!(Bytes::parse_whole("1.5 KiB").unwrap(), Bytes(1536));
        assert_eq!(Bytes::parse_whole("4").unwrap(), Bytes(4));
        let e = Bytes::parse_whole("1.5").unwrap_err();
        assert_eq!(e.0, "a size '1.5' is not a whole number of bytes");
        assert!(Bytes::parse_whole("0.3 KiB").is_err());
    }

    #[test]
    fn serialization_time_rounds_up() {
        // 64 B at 8 Gb/s = 64 ns exactly.
        assert_eq!(BitsPerSec::gbps(8.0).serialization(Bytes(64)), SimTime::from_ns(64));
        // 1 B at 3 b/s rounds up.
        let t = BitsPerSec(3).serialization(Bytes(1));
        assert_eq!(t.0, (8_000_000_000_000u64).div_ceil(3));
    }

    #[test]
    fn round_trip_display_parse() {
        for ps in [1u64, 999, 1_000, 12_500, 1_234_567, 5_000_000_000_000] {
            let t = SimTime(ps);
            assert_eq!(t.to_string().parse::<SimTime>().unwrap(), t, "{t}");
        }
    }
}
