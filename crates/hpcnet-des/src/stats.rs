//! Statistics registry: named, unit-carrying statistics that components push into.
//!
//! A component registers each statistic once, with a name, a unit and a description (as SST
//! declares its statistics), and keeps the small typed handle it gets back ([`CounterId`],
//! [`SummaryId`], [`HistId`]). Pushing a value is then an index into a vector, never a string
//! lookup, so it is cheap enough for per-packet paths. Reports take a [`Registry::report`]
//! snapshot: one [`StatRecord`] per statistic, in registration order, serialisable to JSON.
//!
//! Three kinds:
//! - **counter**: a `u64` that only grows (packets sent, bytes delivered);
//! - **summary**: count, sum, min, max and mean of pushed values, in constant memory;
//! - **histogram**: samples kept exactly, with exact percentiles by the nearest-rank definition
//!   (see [`percentile_nearest_rank`]), up to [`EXACT_SAMPLES`] samples (8 bytes each). Exact is
//!   simpler than bucketed estimates and has no bucket-boundary error to explain when comparing
//!   against published latency distributions. Beyond that, so that memory does not grow with the
//!   length of a run, the samples move into log-linear buckets ([`SUB_BUCKET_BITS`] bits of
//!   mantissa: values below 512 stay exact, larger ones fall in buckets 1/512 of their octave
//!   wide) and a percentile is the midpoint of its bucket, clamped to the observed min and max:
//!   within 0.1 % of the exact nearest-rank value. Count, sum, min, max and mean stay exact.
//!
//! Handles are only meaningful for the registry that issued them.

use serde::Serialize;
use std::collections::HashSet;

/// Errors from registering statistics.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    #[error("statistic '{0}' is already registered")]
    Duplicate(String),
}

/// Handle of a counter statistic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CounterId(u32);
/// Handle of a summary statistic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SummaryId(u32);
/// Handle of a histogram statistic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct HistId(u32);

/// Name, unit and description of a statistic.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Meta {
    name: String,
    unit: String,
    description: String,
}

/// Where a statistic lives, in registration order.
#[derive(Copy, Clone, Debug)]
enum Slot {
    Counter(u32),
    Summary(u32),
    Histogram(u32),
}

/// Count, sum, min, max of pushed values, in constant memory. Empty, `min` is `u64::MAX` and
/// `max` 0, so that a push needs no test of the count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Summary {
    #[inline]
    pub fn push(&mut self, v: u64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.count += 1;
        self.sum += u128::from(v);
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn sum(&self) -> u128 {
        self.sum
    }
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }
    fn values(&self) -> SummaryValues {
        SummaryValues {
            count: self.count,
            sum: self.sum,
            min: self.min(),
            max: self.max(),
            mean: self.mean(),
        }
    }
}

/// Samples a histogram keeps exactly before it switches to log-linear buckets (2 MiB of samples).
pub const EXACT_SAMPLES: usize = 1 << 18;
/// Mantissa bits of the log-linear buckets: 2^9 = 512 buckets per octave.
pub const SUB_BUCKET_BITS: u32 = 9;

/// Bucket of `v`: values below 2^SUB_BUCKET_BITS have their own bucket; above, bucket width is
/// 2^(octave − SUB_BUCKET_BITS).
#[inline]
fn bucket_of(v: u64) -> usize {
    let sub = 1u64 << SUB_BUCKET_BITS;
    if v < sub {
        return v as usize;
    }
    let shift = 63 - v.leading_zeros() - SUB_BUCKET_BITS;
    (((shift as u64 + 1) << SUB_BUCKET_BITS) + ((v >> shift) - sub)) as usize
}

/// Smallest and largest value of bucket `i` (inverse of [`bucket_of`]).
fn bucket_range(i: usize) -> (u64, u64) {
    let sub = 1u64 << SUB_BUCKET_BITS;
    let i = i as u64;
    if i < sub {
        return (i, i);
    }
    let shift = (i >> SUB_BUCKET_BITS) - 1;
    let top = (i & (sub - 1)) + sub;
    let lo = top << shift;
    (lo, lo + ((1u64 << shift) - 1))
}

/// Samples, exact up to [`EXACT_SAMPLES`] and then bucketed (see the module documentation).
/// A percentile of exact samples is found by selection in place (`select_nth_unstable`) within
/// the stretch between the ranks already selected since the last push, and several at once
/// ([`Histogram::percentiles`], as a report does for p50, p90 and p99) by counting the samples in
/// ranges of values first: no sort's n log n (sorting 2^18 samples to read three of them cost
/// more than the run's histogram pushes).
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    samples: Vec<u64>,
    summary: Summary,
    /// Samples the fast path of [`Histogram::push`] may still keep without a test: below it, a
    /// push only appends. [`EXACT_SAMPLES`] once the first sample is kept, 0 before it and once
    /// the histogram has switched to buckets (pushes then take the slow path).
    room: usize,
    /// Number of samples when `sorted` and `pivots` were last brought up to date: they are
    /// only meaningful while the samples still number that many (pushes only add samples).
    selected_at: usize,
    sorted: bool,
    /// Ranks (0-based indices into `samples`) selected since the last push, ascending: the
    /// sample at each is in its sorted place, every sample before it is ≤ it and every one
    /// after is ≥ it.
    pivots: Vec<u32>,
    /// Bucket counts once the histogram stopped keeping exact samples (empty until then).
    buckets: Vec<u64>,
}

impl Histogram {
    #[inline]
    pub fn push(&mut self, v: u64) {
        self.summary.push(v);
        if self.samples.len() < self.room {
            self.samples.push(v);
        } else {
            self.push_slow(v);
        }
    }

    /// A push that is the first, the one beyond [`EXACT_SAMPLES`], or into buckets.
    #[cold]
    #[inline(never)]
    fn push_slow(&mut self, v: u64) {
        if !self.buckets.is_empty() {
            self.count_in_bucket(v);
            return;
        }
        self.samples.push(v);
        if self.samples.len() > EXACT_SAMPLES {
            self.switch_to_buckets();
        } else {
            self.room = EXACT_SAMPLES;
        }
    }

    /// Forget the sorted state and the selected ranks if samples were pushed since.
    fn refresh_selection(&mut self) {
        if self.selected_at != self.samples.len() {
            self.selected_at = self.samples.len();
            self.sorted = false;
            self.pivots.clear();
        }
    }

    fn count_in_bucket(&mut self, v: u64) {
        let b = bucket_of(v);
        if b >= self.buckets.len() {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
    }

    #[cold]
    fn switch_to_buckets(&mut self) {
        let samples = std::mem::take(&mut self.samples);
        self.room = 0;
        self.selected_at = 0;
        self.sorted = false;
        self.pivots.clear();
        self.buckets = vec![0; 1];
        for v in samples {
            self.count_in_bucket(v);
        }
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }
    /// Whether every sample is still kept (percentiles exact).
    pub fn is_exact(&self) -> bool {
        self.buckets.is_empty()
    }
    /// The exact samples, in push order unless a percentile has been computed since the last
    /// push (then partly or wholly reordered); empty once the histogram has switched to buckets (see [`Histogram::is_exact`]).
    pub fn samples(&self) -> &[u64] {
        &self.samples
    }
    /// Nearest-rank percentile `p` (in percent, 0 < p ≤ 100); `None` when empty. Exact while
    /// [`Histogram::is_exact`] (selects the sample of that rank in place, between the ranks
    /// selected before; sorts once after [`MAX_PIVOTS`] selections), else the midpoint of the
    /// bucket holding that rank, clamped to the observed range.
    pub fn percentile(&mut self, p: f64) -> Option<u64> {
        if !self.buckets.is_empty() {
            return self.bucket_percentile(p);
        }
        self.refresh_selection();
        let n = self.samples.len();
        if self.sorted || n == 0 {
            return percentile_nearest_rank(&self.samples, p);
        }
        let k = nearest_rank(n, p) - 1;
        match self.pivots.binary_search(&(k as u32)) {
            Ok(_) => Some(self.samples[k]),
            Err(_) if self.pivots.len() >= MAX_PIVOTS => {
                self.samples.sort_unstable();
                self.sorted = true;
                self.pivots.clear();
                Some(self.samples[k])
            }
            Err(at) => {
                // The stretch between the neighbouring selected ranks holds rank k.
                let lo = if at == 0 { 0 } else { self.pivots[at - 1] as usize + 1 };
                let hi = self.pivots.get(at).map_or(n, |&h| h as usize);
                let v = *self.samples[lo..hi].select_nth_unstable(k - lo).1;
                self.pivots.insert(at, k as u32);
                Some(v)
            }
        }
    }

    fn bucket_percentile(&self, p: f64) -> Option<u64> {
        let n = self.summary.count();
        if n == 0 {
            return None;
        }
        let rank = nearest_rank(n as usize, p) as u64;
        let mut seen = 0u64;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bucket_range(i);
                let mid = lo + (hi - lo) / 2;
                let (min, max) = (self.summary.min()?, self.summary.max()?);
                return Some(mid.clamp(min, max));
            }
        }
        self.summary.max()
    }

    /// Nearest-rank percentiles `ps` (each in percent, 0 < p ≤ 100) at once, the same values
    /// as [`Histogram::percentile`] for each; `None` when empty. Exact samples are read, not
    /// reordered: one pass counts them in up to 2^[`COUNT_BITS`] equal-width ranges of values
    /// between min and max, a second pass copies out the samples of the ranges holding the
    /// wanted ranks, and a selection among those gives each value. The cost is two cheap
    /// passes over the samples whatever the number of percentiles, where selecting in place
    /// partitions about 1.6 n samples for three.
    pub fn percentiles<const N: usize>(&mut self, ps: [f64; N]) -> [Option<u64>; N] {
        self.refresh_selection();
        let n = self.samples.len();
        if !self.buckets.is_empty() || n == 0 || self.sorted {
            return ps.map(|p| self.percentile(p));
        }
        assert!(N < u8::MAX as usize, "at most 254 percentiles at once");
        let ranks = ps.map(|p| nearest_rank(n, p) - 1);
        let (lo, hi) = (self.summary.min, self.summary.max);
        let range = hi - lo;
        if range == 0 {
            return ps.map(|_| Some(lo));
        }
        // Width 2^shift, so that (hi − lo) >> shift < 2^bits; bits grow with n up to COUNT_BITS.
        let bits = (usize::BITS - n.leading_zeros()).clamp(1, COUNT_BITS);
        let shift = (u64::BITS - range.leading_zeros()).saturating_sub(bits);
        let mask = (1usize << bits) - 1;
        let range_of = |v: u64| ((v - lo) >> shift) as usize & mask;
        let mut counts = vec![0u32; 1 << bits];
        for &v in &self.samples {
            counts[range_of(v)] += 1;
        }
        // The range holding each wanted rank, and the rank within it.
        let mut at = [(0usize, 0usize); N];
        for (a, &k) in at.iter_mut().zip(&ranks) {
            let mut before = 0usize;
            for (r, &c) in counts.iter().enumerate() {
                if before + c as usize > k {
                    *a = (r, k - before);
                    break;
                }
                before += c as usize;
            }
        }
        // Copy out the samples of the wanted ranges: slot[r] is 1 + the index of range r's
        // buffer, 0 when range r is not wanted.
        let mut slot = vec![0u8; 1 << bits];
        let mut bufs: Vec<Vec<u64>> = Vec::with_capacity(N);
        for &(r, _) in &at {
            if slot[r] == 0 {
                bufs.push(Vec::with_capacity(counts[r] as usize));
                slot[r] = bufs.len() as u8;
            }
        }
        for &v in &self.samples {
            let s = slot[range_of(v)];
            if s != 0 {
                bufs[s as usize - 1].push(v);
            }
        }
        at.map(|(r, k)| Some(*bufs[slot[r] as usize - 1].select_nth_unstable(k).1))
    }

    fn values(&mut self) -> HistogramValues {
        let [p50, p90, p99] = self.percentiles([50.0, 90.0, 99.0]);
        HistogramValues {
            summary: self.summary.values(),
            p50,
            p90,
            p99,
        }
    }
}

/// Most ranges of values [`Histogram::percentiles`] counts samples in: 2^12 (16 KiB of counts).
pub const COUNT_BITS: u32 = 12;

/// Ranks selected after a push before the samples are sorted once instead.
pub const MAX_PIVOTS: usize = 32;

/// The 1-based nearest rank of percentile `p` among `n` > 0 values (see
/// [`percentile_nearest_rank`]).
fn nearest_rank(n: usize, p: f64) -> usize {
    let x = p.clamp(0.0, 100.0) * n as f64 / 100.0;
    // Treat a value within rounding noise of an integer as that integer (99.9 · 1000 / 100 must
    // give rank 999, not 1000).
    let rank = if (x - x.round()).abs() <= 1e-9 * x.max(1.0) {
        x.round()
    } else {
        x.ceil()
    };
    (rank as usize).clamp(1, n)
}

/// Nearest-rank percentile of sorted `samples`: the smallest sample such that at least `p`
/// percent of the samples are ≤ it, i.e. the sample of rank ⌈p/100 · n⌉ (1-based, at least 1).
/// It is always an observed value. For 1..=100, p50 = 50 and p99 = 99. `None` when empty.
pub fn percentile_nearest_rank(samples: &[u64], p: f64) -> Option<u64> {
    let n = samples.len();
    if n == 0 {
        return None;
    }
    Some(samples[nearest_rank(n, p) - 1])
}

/// Values of a summary in a report. `min`, `max`, `mean` are `null` when nothing was pushed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SummaryValues {
    pub count: u64,
    pub sum: u128,
    pub min: Option<u64>,
    pub max: Option<u64>,
    pub mean: Option<f64>,
}

/// Values of a histogram in a report: its summary plus nearest-rank percentiles.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HistogramValues {
    #[serde(flatten)]
    pub summary: SummaryValues,
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p99: Option<u64>,
}

/// The value part of a [`StatRecord`], tagged by kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StatValue {
    Counter { value: u64 },
    Summary(SummaryValues),
    Histogram(HistogramValues),
}

/// One statistic in a report. Serialises flat, e.g.
/// `{"name":"nic0.tx_packets","unit":"packets","description":"…","kind":"counter","value":3}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatRecord {
    pub name: String,
    pub unit: String,
    pub description: String,
    #[serde(flatten)]
    pub value: StatValue,
}

/// The statistics of one simulation.
#[derive(Default)]
pub struct Registry {
    names: HashSet<String>,
    order: Vec<Slot>,
    /// Counter metadata and values apart: a component's counters share a cache line on the
    /// hot path.
    counter_meta: Vec<Meta>,
    counters: Vec<u64>,
    summaries: Vec<(Meta, Summary)>,
    histograms: Vec<(Meta, Histogram)>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    fn claim(&mut self, name: &str, unit: &str, description: &str) -> Result<Meta, StatsError> {
        if !self.names.insert(name.to_owned()) {
            return Err(StatsError::Duplicate(name.to_owned()));
        }
        Ok(Meta {
            name: name.to_owned(),
            unit: unit.to_owned(),
            description: description.to_owned(),
        })
    }

    fn next_index(len: usize) -> u32 {
        u32::try_from(len).expect("more than 2^32 statistics of one kind")
    }

    /// A registry of counters declared in a table of (name, unit, description) with their
    /// values (a component keeps its hot counters in a fixed array and reports them through
    /// this). Names must be distinct.
    pub fn of_counters(table: &[(&str, &str, &str)], values: &[u64]) -> Registry {
        let mut r = Registry::new();
        for (&(name, unit, description), &v) in table.iter().zip(values) {
            let id = r.counter(name, unit, description).expect("distinct counter names");
            r.add(id, v);
        }
        r
    }

    /// Register a counter (starts at 0).
    pub fn counter(&mut self, name: &str, unit: &str, description: &str) -> Result<CounterId, StatsError> {
        let meta = self.claim(name, unit, description)?;
        let i = Self::next_index(self.counters.len());
        self.counter_meta.push(meta);
        self.counters.push(0);
        self.order.push(Slot::Counter(i));
        Ok(CounterId(i))
    }

    /// Register a summary (count, sum, min, max, mean).
    pub fn summary(&mut self, name: &str, unit: &str, description: &str) -> Result<SummaryId, StatsError> {
        let meta = self.claim(name, unit, description)?;
        let i = Self::next_index(self.summaries.len());
        self.summaries.push((meta, Summary::default()));
        self.order.push(Slot::Summary(i));
        Ok(SummaryId(i))
    }

    /// Register a histogram (exact samples, nearest-rank percentiles).
    pub fn histogram(&mut self, name: &str, unit: &str, description: &str) -> Result<HistId, StatsError> {
        let meta = self.claim(name, unit, description)?;
        let i = Self::next_index(self.histograms.len());
        self.histograms.push((meta, Histogram::default()));
        self.order.push(Slot::Histogram(i));
        Ok(HistId(i))
    }

    #[inline]
    pub fn add(&mut self, id: CounterId, n: u64) {
        self.counters[id.0 as usize] += n;
    }
    #[inline]
    pub fn incr(&mut self, id: CounterId) {
        self.add(id, 1);
    }
    #[inline]
    pub fn push(&mut self, id: SummaryId, v: u64) {
        self.summaries[id.0 as usize].1.push(v);
    }
    #[inline]
    pub fn record(&mut self, id: HistId, v: u64) {
        self.histograms[id.0 as usize].1.push(v);
    }

    #[inline]
    pub fn counter_value(&self, id: CounterId) -> u64 {
        self.counters[id.0 as usize]
    }
    pub fn summary_of(&self, id: SummaryId) -> &Summary {
        &self.summaries[id.0 as usize].1
    }
    /// Mutable because percentiles sort the samples lazily.
    pub fn histogram_of(&mut self, id: HistId) -> &mut Histogram {
        &mut self.histograms[id.0 as usize].1
    }

    /// Number of registered statistics.
    pub fn len(&self) -> usize {
        self.order.len()
    }
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Snapshot every statistic, in registration order. Takes `&mut self` because histogram
    /// percentiles keep their selection state with the samples.
    pub fn report(&mut self) -> Vec<StatRecord> {
        let record = |m: &Meta, value| StatRecord {
            name: m.name.clone(),
            unit: m.unit.clone(),
            description: m.description.clone(),
            value,
        };
        let mut out = Vec::with_capacity(self.order.len());
        for slot in &self.order {
            out.push(match *slot {
                Slot::Counter(i) => {
                    let (m, v) = (&self.counter_meta[i as usize], self.counters[i as usize]);
                    record(m, StatValue::Counter { value: v })
                }
                Slot::Summary(i) => {
                    let (m, s) = &self.summaries[i as usize];
                    record(m, StatValue::Summary(s.values()))
                }
                Slot::Histogram(i) => {
                    let (m, h) = &mut self.histograms[i as usize];
                    let v = StatValue::Histogram(h.values());
                    record(m, v)
                }
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any value lands in a bucket whose range holds it and is at most 1/512 of it wide, so
        /// a bucketed percentile (the bucket midpoint, clamped to min..max) is within 0.1 % of
        /// the exact one.
        #[test]
        fn every_value_is_in_its_bucket(v in proptest::prelude::any::<u64>()) {
            let (lo, hi) = bucket_range(bucket_of(v));
            proptest::prop_assert!(lo <= v && v <= hi);
            proptest::prop_assert!((hi - lo) as f64 <= (lo as f64 / 512.0).max(0.0));
        }

        #[test]
        fn bucketed_percentiles_stay_within_a_tenth_of_a_percent(
            vals in proptest::collection::vec(1_000u64..1_000_000_000, 1..400),
            p in 1.0f64..100.0,
        ) {
            let mut h = Histogram::default();
            for &v in &vals {
                h.push(v);
            }
            h.switch_to_buckets();
            let mut exact = vals.clone();
            exact.sort_unstable();
            let want = percentile_nearest_rank(&exact, p).unwrap() as f64;
            let got = h.percentile(p).unwrap() as f64;
            proptest::prop_assert!((got - want).abs() <= want * 1e-3, "p{}: {} vs {}", p, got, want);
        }
        /// Exact percentiles by selection (up to `MAX_PIVOTS` after a push) and by sorting (more)
        /// give the nearest-rank value of the sorted samples, also when pushes come between
        /// queries.
        #[test]
        fn exact_percentiles_by_selection_match_the_sorted_samples(
            vals in proptest::collection::vec(0u64..1_000, 1..300),
            more in proptest::collection::vec(0u64..1_000, 0..50),
            ps in proptest::collection::vec(0.5f64..100.0, 1..40),
        ) {
            let mut h = Histogram::default();
            let mut all = Vec::new();
            for (round, extra) in [&vals, &more].into_iter().enumerate() {
                for &v in extra.iter() {
                    h.push(v);
                    all.push(v);
                }
                let mut sorted = all.clone();
                sorted.sort_unstable();
                for &p in &ps {
                    let want = percentile_nearest_rank(&sorted, p);
                    proptest::prop_assert_eq!(h.percentile(p), want, "round {}, p{}", round, p);
                }
                let mut kept = h.samples().to_vec();
                kept.sort_unstable();
                proptest::prop_assert_eq!(&kept, &sorted, "no sample lost or changed");
            }
        }
    }

    proptest::proptest! {
        /// Several percentiles at once (counting in ranges of values, then selecting within
        /// the wanted ranges) give the nearest-rank values of the sorted samples: few and many
        /// samples, many ties (narrow value ranges), wide ranges, and an outlier that puts most
        /// samples in one range.
        #[test]
        fn percentiles_at_once_match_the_sorted_samples(
            vals in proptest::collection::vec(0u64..1_000_000, 1..3000),
            narrow in 1u64..20,
            outlier in proptest::prelude::any::<bool>(),
            ps in proptest::collection::vec(0.1f64..100.0, 4),
        ) {
            for spread in [narrow, 1_000_000] {
                let mut h = Histogram::default();
                let mut all: Vec<u64> = vals.iter().map(|&v| 7 + v % spread).collect();
                if outlier {
                    all.push(u64::MAX - 3);
                }
                for &v in &all {
                    h.push(v);
                }
                let mut sorted = all.clone();
                sorted.sort_unstable();
                let want = |p: f64| percentile_nearest_rank(&sorted, p);
                let fixed = h.percentiles([50.0, 90.0, 99.0]);
                proptest::prop_assert_eq!(fixed, [want(50.0), want(90.0), want(99.0)]);
                let any = h.percentiles([ps[0], ps[1], ps[2], ps[3], 100.0, 0.0]);
                let expected = [want(ps[0]), want(ps[1]), want(ps[2]), want(ps[3]), want(100.0), want(0.0)];
                proptest::prop_assert_eq!(any, expected);
                // The samples are only read, and single percentiles agree afterwards.
                proptest::prop_assert_eq!(h.samples(), &all[..]);
                proptest::prop_assert_eq!(h.percentile(ps[0]), want(ps[0]));
            }
        }
    }

    #[test]
    fn percentiles_at_once_on_small_and_large_histograms() {
        let mut h = Histogram::default();
        assert_eq!(h.percentiles([50.0, 99.0]), [None, None]);
        h.push(5);
        assert_eq!(h.percentiles([50.0, 90.0, 99.0]), [Some(5); 3]);
        h.push(3);
        assert_eq!(h.percentiles([50.0, 90.0, 99.0]), [Some(3), Some(5), Some(5)]);
        // 200 000 skewed, scrambled latencies: straightforward sort against the counted ranges.
        let n = 200_000u64;
        let mut h = Histogram::default();
        let mut exact = Vec::new();
        for i in 0..n {
            let v = 100_000 + (i * 7919 % n).pow(3) / (n * n / 50).max(1) + i % 3;
            h.push(v);
            exact.push(v);
        }
        exact.sort_unstable();
        let ps = [1.0, 50.0, 90.0, 99.0, 99.9, 100.0];
        let want = ps.map(|p| percentile_nearest_rank(&exact, p));
        assert_eq!(h.percentiles(ps), want);
        // After pushes, selections in place, and a sort.
        h.push(1);
        exact.insert(0, 1);
        assert_eq!(h.percentile(50.0), percentile_nearest_rank(&exact, 50.0));
        assert_eq!(h.percentiles(ps), ps.map(|p| percentile_nearest_rank(&exact, p)));
        for p in 1..=40 {
            assert_eq!(h.percentile(p as f64), percentile_nearest_rank(&exact, p as f64));
        }
        assert_eq!(h.percentiles(ps), ps.map(|p| percentile_nearest_rank(&exact, p)));
        // Bucketed: the same as one at a time.
        h.switch_to_buckets();
        let one_by_one = ps.map(|p| h.percentile(p));
        assert_eq!(h.percentiles(ps), one_by_one);
    }

    #[test]
    fn buckets_invert_and_tile_the_value_range() {
        let mut next = 0u64;
        for i in 0..(40 << SUB_BUCKET_BITS) {
            let (lo, hi) = bucket_range(i);
            assert_eq!(lo, next, "bucket {i} starts where the previous ended");
            assert!(hi >= lo);
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(hi), i);
            // Width at most 1/512 of the bucket's values.
            assert!((hi - lo) as f64 <= lo as f64 / 512.0, "bucket {i}: {lo}..={hi}");
            next = hi + 1;
        }
        assert_eq!(bucket_of(u64::MAX), bucket_of(u64::MAX - 1));
        let (lo, hi) = bucket_range(bucket_of(u64::MAX));
        assert!(lo < hi && hi == u64::MAX);
    }

    #[test]
    fn long_histograms_switch_to_buckets_within_a_tenth_of_a_percent() {
        let n = EXACT_SAMPLES as u64 * 3;
        let mut h = Histogram::default();
        let mut exact = Vec::new();
        // A skewed, scrambled sequence of latencies in picoseconds (100 ns .. ~10 us).
        for i in 0..n {
            let v = 100_000 + (i * 7919 % n).pow(2) / (n / 10).max(1);
            h.push(v);
            exact.push(v);
        }
        assert!(!h.is_exact());
        assert!(h.samples().is_empty(), "exact samples are released");
        exact.sort_unstable();
        for p in [1.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            let want = percentile_nearest_rank(&exact, p).unwrap() as f64;
            let got = h.percentile(p).unwrap() as f64;
            assert!((got - want).abs() <= want * 1e-3, "p{p}: {got} vs exact {want}");
        }
        assert_eq!(h.summary().count(), n);
        assert_eq!(h.summary().min(), Some(exact[0]));
        assert_eq!(h.summary().max(), exact.last().copied());
        assert_eq!(h.summary().sum(), exact.iter().map(|&v| v as u128).sum::<u128>());

        // Up to the limit, percentiles stay exact.
        let mut small = Histogram::default();
        for v in (0..EXACT_SAMPLES as u64).rev() {
            small.push(v * 3);
        }
        assert!(small.is_exact());
        assert_eq!(small.percentile(50.0), Some((EXACT_SAMPLES as u64 / 2 - 1) * 3));
    }

    #[test]
    fn register_push_and_read() {
        let mut r = Registry::new();
        let c = r.counter("tx", "packets", "packets sent").unwrap();
        let s = r.summary("lat", "ps", "latency").unwrap();
        let h = r.histogram("hops", "hops", "path length").unwrap();
        r.incr(c);
        r.add(c, 4);
        for v in [3, 9, 6] {
            r.push(s, v);
            r.record(h, v);
        }
        assert_eq!(r.counter_value(c), 5);
        let sum = r.summary_of(s);
        assert_eq!(
            (sum.count(), sum.sum(), sum.min(), sum.max()),
            (3, 18, Some(3), Some(9))
        );
        assert_eq!(sum.mean(), Some(6.0));
        assert_eq!(r.histogram_of(h).percentile(50.0), Some(6));
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_nearest_rank(&v, 50.0), Some(50));
        assert_eq!(percentile_nearest_rank(&v, 99.0), Some(99));
        assert_eq!(percentile_nearest_rank(&v, 100.0), Some(100));
        assert_eq!(percentile_nearest_rank(&v, 0.0), Some(1));
        assert_eq!(percentile_nearest_rank(&v, 0.5), Some(1));
        assert_eq!(percentile_nearest_rank(&v, 99.5), Some(100));
        let w: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile_nearest_rank(&w, 99.9), Some(999));
        assert_eq!(percentile_nearest_rank(&[15, 20, 35, 40, 50], 30.0), Some(20));
        assert_eq!(percentile_nearest_rank(&[15, 20, 35, 40, 50], 40.0), Some(20));
        assert_eq!(percentile_nearest_rank(&[], 50.0), None);
    }

    #[test]
    fn histogram_selects_lazily() {
        let mut h = Histogram::default();
        for v in (1..=100).rev() {
            h.push(v);
        }
        assert_eq!(h.percentile(50.0), Some(50));
        h.push(0);
        assert_eq!(h.percentile(0.0), Some(0));
        assert_eq!(h.summary().count(), 101);
    }

    #[test]
    fn duplicates_rejected_across_kinds() {
        let mut r = Registry::new();
        r.counter("x", "B", "bytes").unwrap();
        assert_eq!(r.summary("x", "B", "again"), Err(StatsError::Duplicate("x".into())));
        assert!(r.histogram("x", "B", "again").is_err());
        assert!(r.counter("x", "B", "again").is_err());
        assert_eq!(r.len(), 1);
        assert_eq!(
            StatsError::Duplicate("x".into()).to_string(),
            "statistic 'x' is already registered"
        );
    }

    #[test]
    fn json_shape() {
        let mut r = Registry::new();
        let c = r.counter("nic0.tx", "packets", "packets sent").unwrap();
        let h = r.histogram("lat", "ps", "latency").unwrap();
        r.add(c, 3);
        for v in (1..=100).rev() {
            r.record(h, v);
        }
        let json = serde_json::to_value(r.report()).unwrap();
        let expected = serde_json::json!([
            {"name": "nic0.tx", "unit": "packets", "description": "packets sent",
             "kind": "counter", "value": 3},
            {"name": "lat", "unit": "ps", "description": "latency", "kind": "histogram",
             "count": 100, "sum": 5050, "min": 1, "max": 100, "mean": 50.5,
             "p50": 50, "p90": 90, "p99": 99},
        ]);
        assert_eq!(json, expected);
    }

    #[test]
    fn empty_stats_report_nulls() {
        let mut r = Registry::new();
        r.summary("s", "ps", "d").unwrap();
        r.histogram("h", "ps", "d").unwrap();
        let rep = r.report();
        let json = serde_json::to_value(&rep).unwrap();
        assert_eq!(json[0]["count"], 0);
        assert!(json[0]["min"].is_null() && json[0]["mean"].is_null());
        assert!(json[1]["p50"].is_null());
    }
}
