//! Operating-system noise on the host CPU: detours (timer interrupts, daemons, kernel work) that
//! take the core away from the collectives library, so that host work of length `d` started at
//! `t` ends later than `t + d` when detours fall in it.
//!
//! The model is the one of the noise-simulation studies (Hoefler, Schneider and Lumsdaine,
//! "Characterizing the influence of system noise on large-scale applications by simulation",
//! SC 2010; Ferreira, Bridges and Brightwell, "Characterizing application sensitivity to OS
//! interference using kernel-level noise injection", SC 2008): each rank's CPU has its own
//! sequence of detours; a detour delays only the host work it interrupts (a rank that waits for
//! the network loses nothing to a detour that ends before the data arrives), and the delays
//! propagate through the messages the algorithm sends, so a collective waits for the most
//! delayed of the ranks it depends on.
//!
//! Two detour patterns:
//! - **periodic**: a detour of `duration` every `interval`, at a phase drawn uniformly in
//!   `[0, interval)` per rank (unsynchronised timer ticks). The end of an interval of work is
//!   computed in closed form, O(1).
//! - **poisson**: detours of `duration` arriving as a Poisson process with mean gap `interval`
//!   per rank; a detour arriving while another runs waits for it (the core serves them in turn),
//!   so the fraction of time lost is `duration / interval` as for the periodic pattern. Detours
//!   are drawn lazily as time advances: amortised O(detours) per rank.
//!
//! Both draw from the scenario's seeded streams (stream `coll.noise`, index = rank), so the
//! detours of a rank do not depend on the communicator or on the other ranks: the same seed gives
//! the same detours, another seed other phases and arrivals.
//!
//! Simplifications: every detour of a pattern has the same length (the studies also use measured
//! length distributions); the network and the NIC are never delayed by host noise; detours are
//! seen only by the host work the collectives library charges (per call, per post, per poll,
//! copies and reductions), not by the SHMEM or MPI layers' own host costs.

use hpcnet_des::rng::SimRng;
use hpcnet_des::{RngStreams, SimTime};
use rand::Rng;

/// Name of the random stream of the detours (one per rank).
pub const NOISE_STREAM: &str = "coll.noise";

/// The detour pattern of every rank's host CPU.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum HostNoise {
    /// No detours: host work takes exactly its cost.
    #[default]
    None,
    /// A detour of `duration` every `interval`, at a random phase per rank.
    Periodic { interval: SimTime, duration: SimTime },
    /// Detours of `duration` arriving as a Poisson process with mean gap `interval`.
    Poisson { interval: SimTime, duration: SimTime },
}

impl HostNoise {
    /// Why the pattern cannot run, if it cannot: a zero interval, or a duration that is not
    /// positive or not shorter than the interval (the core would never run the program).
    pub fn check(&self) -> Result<(), String> {
        match *self {
            HostNoise::None => Ok(()),
            HostNoise::Periodic { interval, duration } | HostNoise::Poisson { interval, duration } => {
                if interval == SimTime::ZERO {
                    Err("the noise interval must be positive".into())
                } else if duration == SimTime::ZERO {
                    Err("the noise duration must be positive".into())
                } else if duration >= interval {
                    Err(format!(
                        "the noise duration {duration} must be shorter than the interval {interval}"
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The detours of `rank`'s CPU under this pattern with the run's `seed`; `None` without
    /// noise (or for a pattern [`HostNoise::check`] refuses).
    pub fn clock(&self, seed: u64, rank: u32) -> Option<NoiseClock> {
        self.check().ok()?;
        let rng = || RngStreams::new(seed).stream(NOISE_STREAM, u64::from(rank));
        match *self {
            HostNoise::None => None,
            HostNoise::Periodic { interval, duration } => {
                let phase = rng().gen_range(0..interval.ps());
                Some(NoiseClock::Periodic {
                    interval: interval.ps(),
                    duration: duration.ps(),
                    phase,
                })
            }
            HostNoise::Poisson { interval, duration } => Some(NoiseClock::Poisson(Box::new(Poisson::new(
                rng(),
                interval.ps(),
                duration.ps(),
            )))),
        }
    }
}

/// The detours of one rank's CPU, asked in order of time.
#[derive(Clone, Debug)]
pub enum NoiseClock {
    /// Detours `[phase + k·interval, phase + k·interval + duration)` for every integer `k`.
    Periodic { interval: u64, duration: u64, phase: u64 },
    /// Poisson arrivals, drawn as time advances.
    Poisson(Box<Poisson>),
}

impl NoiseClock {
    /// When host work of `work` that may start at `start` ends: the core runs the work only
    /// outside detours (work that would start inside a detour starts at its end).
    pub fn finish(&mut self, start: SimTime, work: SimTime) -> SimTime {
        if work == SimTime::ZERO {
            return start;
        }
        match self {
            NoiseClock::Periodic {
                interval,
                duration,
                phase,
            } => SimTime::from_ps(periodic_finish(*interval, *duration, *phase, start.ps(), work.ps())),
            NoiseClock::Poisson(p) => SimTime::from_ps(p.finish(start.ps(), work.ps())),
        }
    }
}

/// [`NoiseClock::finish`] for periodic detours, in picoseconds: closed form.
fn periodic_finish(interval: u64, duration: u64, phase: u64, start: u64, work: u64) -> u64 {
    // Shift time so that a detour begins at u = 0 (phase − interval ≤ 0 is a detour too): in u,
    // detours are [k·interval, k·interval + duration) for k ≥ 0.
    let u = start + interval - phase;
    let r = u % interval;
    // Work starts at the end of the detour it falls in, or at once.
    let (u0, r0) = if r < duration {
        (u - r + duration, duration)
    } else {
        (u, r)
    };
    let free_now = interval - r0;
    let end = if work <= free_now {
        u0 + work
    } else {
        // The rest runs in the free part (interval − duration) of the following periods.
        let rest = work - free_now;
        let free = interval - duration;
        let full = (rest - 1) / free;
        let last = rest - full * free;
        u0 - r0 + interval + full * interval + duration + last
    };
    end + phase - interval
}

/// Poisson detours of one rank: arrivals with exponential gaps of mean `interval`, each served
/// for `duration` after the previous one ends.
#[derive(Clone, Debug)]
pub struct Poisson {
    rng: SimRng,
    /// The generator as it was at time 0, to draw again from the start if asked about an
    /// earlier time than the detours kept.
    origin: SimRng,
    interval: u64,
    duration: u64,
    /// Arrival of the last detour drawn.
    arrival: u64,
    /// The earliest detour `[start, end)` not known to end before the last time asked about.
    current: (u64, u64),
    /// End of the last detour passed over (0: none).
    passed: u64,
}

impl Poisson {
    fn new(rng: SimRng, interval: u64, duration: u64) -> Poisson {
        let mut p = Poisson {
            origin: rng.clone(),
            rng,
            interval,
            duration,
            arrival: 0,
            current: (0, 0),
            passed: 0,
        };
        p.current = p.draw(0);
        p
    }

    /// The next detour after one that ended at `prev_end`.
    fn draw(&mut self, prev_end: u64) -> (u64, u64) {
        let u: f64 = self.rng.gen();
        let gap = (-(self.interval as f64) * (1.0 - u).ln()).round() as u64;
        self.arrival += gap;
        let start = self.arrival.max(prev_end);
        (start, start + self.duration)
    }

    fn finish(&mut self, mut t: u64, mut work: u64) -> u64 {
        if t < self.passed {
            // Asked about a time before detours already passed over: draw again from time 0.
            *self = Poisson::new(self.origin.clone(), self.interval, self.duration);
        }
        loop {
            let (s, e) = self.current;
            if e <= t {
                self.passed = e;
                self.current = self.draw(e);
            } else if t >= s {
                t = e;
            } else if t + work <= s {
                return t + work;
            } else {
                work -= s - t;
                t = e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// End of `work` from `start` by walking the detours one at a time (no closed form).
    fn walk(detours: impl Iterator<Item = (u64, u64)>, mut t: u64, mut work: u64) -> u64 {
        for (s, e) in detours {
            if e <= t {
                continue;
            }
            if t >= s {
                t = e;
                continue;
            }
            if t + work <= s {
                return t + work;
            }
            work -= s - t;
            t = e;
        }
        unreachable!("detours never end")
    }

    fn periodic(interval: u64, duration: u64, phase: u64) -> impl Iterator<Item = (u64, u64)> {
        (0u64..).map(move |k| {
            let s = (k * interval + phase).saturating_sub(interval);
            let e = (k * interval + phase + duration).saturating_sub(interval);
            (s, e)
        })
    }

    #[test]
    fn periodic_stretch_is_the_closed_form() {
        // Interval 1000, duration 100, phase 250: detours [250, 350), [1250, 1350), ...
        let (i, d, ph) = (1000, 100, 250);
        // Entirely before the first detour.
        assert_eq!(periodic_finish(i, d, ph, 0, 250), 250);
        // One detour inside: 200 of work from 200 = 50 before, 100 lost, 150 after.
        assert_eq!(periodic_finish(i, d, ph, 200, 200), 500);
        // Starting inside a detour: from its end.
        assert_eq!(periodic_finish(i, d, ph, 300, 10), 360);
        // Three periods' free time (2700 ps) from the end of a detour: two detours are crossed,
        // and the work ends where the third begins.
        assert_eq!(periodic_finish(i, d, ph, 350, 2700), 350 + 2700 + 2 * 100);
        assert_eq!(periodic_finish(i, d, ph, 350, 2701), 350 + 2701 + 3 * 100);
        // Ending exactly at a detour's start is not delayed.
        assert_eq!(periodic_finish(i, d, ph, 350, 900), 1250);
        assert_eq!(periodic_finish(i, d, ph, 350, 901), 1351);
        // A detour straddling time 0 (phase + duration > interval): [−50, 50).
        assert_eq!(periodic_finish(1000, 100, 950, 0, 10), 60);
        // Against the walk over many starts, works and phases.
        for ph in [0, 1, 99, 100, 500, 901, 950, 999] {
            for start in (0..5000).step_by(37) {
                for work in [1, 7, 99, 100, 899, 900, 901, 1800, 4321] {
                    assert_eq!(
                        periodic_finish(i, d, ph, start, work),
                        walk(periodic(i, d, ph), start, work),
                        "phase {ph} start {start} work {work}"
                    );
                }
            }
        }
    }

    #[test]
    fn long_work_loses_the_noise_fraction() {
        // 10 % noise: 9 ms of work takes 10 ms (± one detour), whatever the phase.
        let noise = HostNoise::Periodic {
            interval: SimTime::from_us(100),
            duration: SimTime::from_us(10),
        };
        for seed in 0..20 {
            let mut c = noise.clock(seed, 3).unwrap();
            let end = c.finish(SimTime::ZERO, SimTime::from_us(9000));
            assert!(
                end >= SimTime::from_us(9990) && end <= SimTime::from_us(10_010),
                "seed {seed}: {end}"
            );
        }
        let noise = HostNoise::Poisson {
            interval: SimTime::from_us(100),
            duration: SimTime::from_us(10),
        };
        let mut c = noise.clock(7, 3).unwrap();
        let end = c.finish(SimTime::ZERO, SimTime::from_ms(90)).ps() as f64;
        let want = SimTime::from_ms(100).ps() as f64;
        assert!((end / want - 1.0).abs() < 0.02, "poisson: {end} vs {want}");
    }

    #[test]
    fn poisson_matches_a_walk_over_its_detours() {
        let noise = HostNoise::Poisson {
            interval: SimTime::from_ps(1000),
            duration: SimTime::from_ps(300),
        };
        let mut c = noise.clock(11, 0).unwrap();
        let NoiseClock::Poisson(p) = &c else {
            panic!("a Poisson clock")
        };
        // The detours, drawn once ahead by a copy.
        let mut copy = Poisson::new(p.origin.clone(), 1000, 300);
        let mut detours = vec![copy.current];
        for _ in 0..2000 {
            let e = detours.last().unwrap().1;
            detours.push(copy.draw(e));
        }
        assert!(detours.windows(2).all(|w| w[1].0 >= w[0].1), "detours do not overlap");
        let mut t = 0;
        for k in 0..400u64 {
            let work = 1 + (k * 7919) % 2500;
            let want = walk(detours.iter().copied(), t, work);
            assert_eq!(
                c.finish(SimTime::from_ps(t), SimTime::from_ps(work)).ps(),
                want,
                "k {k}"
            );
            t = want + (k * 104_729) % 1500;
        }
        // Asking about an earlier time again gives the same answer.
        let want = walk(detours.iter().copied(), 10, 500);
        assert_eq!(c.finish(SimTime::from_ps(10), SimTime::from_ps(500)).ps(), want);
    }

    #[test]
    fn phases_follow_the_seed_and_rank() {
        let noise = HostNoise::Periodic {
            interval: SimTime::from_ms(1),
            duration: SimTime::from_us(5),
        };
        let phase = |seed, rank| match noise.clock(seed, rank).unwrap() {
            NoiseClock::Periodic { phase, .. } => phase,
            NoiseClock::Poisson(_) => unreachable!(),
        };
        assert_eq!(phase(1, 4), phase(1, 4));
        let ranks: Vec<u64> = (0..16).map(|r| phase(1, r)).collect();
        let other: Vec<u64> = (0..16).map(|r| phase(2, r)).collect();
        assert_ne!(ranks, other, "another seed gives other phases");
        let mut distinct = ranks.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 16, "ranks have their own phases");
        assert!(ranks.iter().all(|&p| p < SimTime::from_ms(1).ps()));
    }

    #[test]
    fn bad_patterns_are_refused() {
        let us = SimTime::from_us;
        assert!(HostNoise::None.check().is_ok());
        for n in [
            HostNoise::Periodic {
                interval: us(0),
                duration: us(0),
            },
            HostNoise::Periodic {
                interval: us(10),
                duration: us(10),
            },
            HostNoise::Poisson {
                interval: us(10),
                duration: us(0),
            },
            HostNoise::Poisson {
                interval: us(10),
                duration: us(11),
            },
        ] {
            assert!(n.check().is_err(), "{n:?}");
            assert!(n.clock(1, 0).is_none());
        }
        assert!(HostNoise::None.clock(1, 0).is_none());
    }
}
