//! Estimates from independent replications.
//!
//! A run repeated with different seeds gives one value of a figure (mean latency, accepted
//! load, ...) per replication. The replications are independent and identically distributed,
//! so [`Estimate::of`] reports their mean, their sample standard deviation and a two-sided
//! Student-t confidence interval for the mean: mean ± t(1 − (1 − level)/2, n − 1) · s/√n. The
//! interval assumes the replications' values are close to normally distributed, which holds for
//! figures that are themselves averages over many packets (central limit theorem); it says how
//! far the figure of a run of this length may lie from its expected value because of the seed,
//! not how far the model lies from a machine.
//!
//! Cost: O(n) in the number of replications, plus one Student-t quantile.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// A figure over `n` independent replications.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// Replications.
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator).
    pub std_dev: f64,
    /// Confidence level of the interval (0.95: 95 %).
    pub level: f64,
    /// Half-width of the confidence interval for the mean: the interval is mean ± half_width.
    pub half_width: f64,
    pub min: f64,
    pub max: f64,
}

impl Estimate {
    /// The estimate of the replications' `values` at confidence `level`; None with fewer than
    /// two values (no spread to estimate), with a value that is not finite, or with a level
    /// outside (0, 1).
    pub fn of(values: &[f64], level: f64) -> Option<Estimate> {
        let n = values.len();
        if n < 2 || !(level > 0.0 && level < 1.0) || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
        let std_dev = var.sqrt();
        let t = student_t_quantile(0.5 + level / 2.0, (n - 1) as f64)?;
        Some(Estimate {
            n,
            mean,
            std_dev,
            level,
            half_width: t * std_dev / (n as f64).sqrt(),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    /// Whether `x` lies inside the confidence interval.
    pub fn covers(&self, x: f64) -> bool {
        (x - self.mean).abs() <= self.half_width
    }
}

/// The `p` quantile of Student's t distribution with `dof` degrees of freedom.
fn student_t_quantile(p: f64, dof: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, dof).ok()?.inverse_cdf(p);
    t.is_finite().then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two-sided 95 % critical values from statistical tables (t(0.975, ν)).
    #[test]
    fn quantiles_match_the_tables() {
        for (dof, t) in [
            (1.0, 12.706),
            (2.0, 4.303),
            (4.0, 2.776),
            (9.0, 2.262),
            (29.0, 2.045),
            (120.0, 1.980),
        ] {
            let q = student_t_quantile(0.975, dof).unwrap();
            assert!((q - t).abs() < 5e-4, "t(0.975, {dof}) = {q}, table {t}");
        }
        let q99 = student_t_quantile(0.995, 9.0).unwrap();
        assert!((q99 - 3.250).abs() < 5e-4, "{q99}");
    }

    #[test]
    fn an_estimate_of_known_values() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample variance 32/7.
        let e = Estimate::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], 0.95).unwrap();
        assert_eq!(e.n, 8);
        assert!((e.mean - 5.0).abs() < 1e-12);
        assert!((e.std_dev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        // t(0.975, 7) = 2.3646.
        assert!((e.half_width - 2.3646 * e.std_dev / 8f64.sqrt()).abs() < 1e-3, "{e:?}");
        assert_eq!((e.min, e.max), (2.0, 9.0));
        assert!(e.covers(5.0 + e.half_width * 0.99) && !e.covers(5.0 - e.half_width * 1.01));
        // Equal values: no spread, a zero-width interval.
        let flat = Estimate::of(&[3.0; 4], 0.95).unwrap();
        assert_eq!((flat.mean, flat.std_dev, flat.half_width), (3.0, 0.0, 0.0));
        // A higher level widens the interval.
        let e99 = Estimate::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], 0.99).unwrap();
        assert!(e99.half_width > e.half_width);
    }

    #[test]
    fn no_estimate_without_spread_to_measure() {
        assert!(Estimate::of(&[], 0.95).is_none());
        assert!(Estimate::of(&[1.0], 0.95).is_none());
        assert!(Estimate::of(&[1.0, f64::NAN], 0.95).is_none());
        assert!(Estimate::of(&[1.0, f64::INFINITY], 0.95).is_none());
        for level in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
            assert!(Estimate::of(&[1.0, 2.0], level).is_none(), "level {level}");
        }
    }

    /// Coverage: of many sets of 10 draws from a known distribution, about 95 % of the 95 %
    /// intervals hold the true mean (a deterministic generator, so the count is fixed).
    #[test]
    fn intervals_cover_the_true_mean_at_their_level() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        let trials = 4000;
        let mut covered = 0;
        for _ in 0..trials {
            // The sum of 12 uniforms less 6: mean 0, variance 1, nearly normal.
            let xs: Vec<f64> = (0..10)
                .map(|_| (0..12).map(|_| rng.gen::<f64>()).sum::<f64>() - 6.0)
                .collect();
            covered += usize::from(Estimate::of(&xs, 0.95).unwrap().covers(0.0));
        }
        let rate = covered as f64 / trials as f64;
        assert!((rate - 0.95).abs() < 0.012, "coverage {rate}");
    }
}
