//! Sweeps for the charts (memory against batch, resolution, sequence length, checkpoint
//! segments) and the solver for the largest batch that fits a memory budget.

use super::config::{Checkpointing, Plan};
use super::error::EstimateError;
use super::timeline::Category;
use super::units::Bytes;
use super::{estimate, Estimate, MAX_BATCH};

/// One point of a sweep: the swept value and the peak broken down by category.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Point {
    pub x: u64,
    pub peak_allocated: Bytes,
    pub device_total: Bytes,
    pub by_category: Vec<(Category, Bytes)>,
    pub recompute_flops: f64,
    pub forward_flops: f64,
}

impl Point {
    fn of(x: u64, e: &Estimate) -> Point {
        Point {
            x,
            peak_allocated: e.peak_allocated,
            device_total: e.device_total,
            by_category: e.breakdown.iter().map(|r| (r.category, r.bytes)).collect(),
            recompute_flops: e.recompute_flops,
            forward_flops: e.forward_flops,
        }
    }
}

/// Which plan field a sweep varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    Batch,
    Resolution,
    SeqLen,
    Segments,
}

fn with(plan: &Plan, axis: Axis, x: u64) -> Plan {
    let mut p = plan.clone();
    match axis {
        Axis::Batch => p.batch = x,
        Axis::Resolution => p.res = Some(x),
        Axis::SeqLen => p.seq = Some(x),
        Axis::Segments => p.ckpt = if x == 0 { Checkpointing::None } else { Checkpointing::Segments(x as u32) },
    }
    p
}

/// Estimates `plan` at each value of `axis`; values the model cannot take are skipped.
pub fn sweep(plan: &Plan, axis: Axis, xs: &[u64]) -> Vec<Point> {
    xs.iter().filter_map(|&x| estimate(&with(plan, axis, x)).ok().map(|e| Point::of(x, &e))).collect()
}

/// `n` values from `lo` to `hi`, evenly spaced on a log scale, deduplicated.
pub fn log_points(lo: u64, hi: u64, n: usize) -> Vec<u64> {
    let (lo, hi) = (lo.max(1), hi.max(lo.max(1)));
    let mut v: Vec<u64> = (0..n)
        .map(|i| {
            let t = if n <= 1 { 0.0 } else { i as f64 / (n - 1) as f64 };
            ((lo as f64).ln() + t * ((hi as f64).ln() - (lo as f64).ln())).exp().round() as u64
        })
        .collect();
    v.dedup();
    v
}

/// The largest batch whose device total fits `capacity`, found by doubling then bisection
/// (memory never falls as the batch grows). `Ok(None)` when even batch 1 does not fit.
pub fn max_batch(plan: &Plan, capacity: Bytes) -> Result<Option<u64>, EstimateError> {
    let fits = |b: u64| -> Result<bool, EstimateError> {
        match estimate(&with(plan, Axis::Batch, b)) {
            Ok(e) => Ok(e.device_total <= capacity),
            Err(EstimateError::TooLarge) => Ok(false),
            Err(e) => Err(e),
        }
    };
    if !fits(1)? {
        return Ok(None);
    }
    let mut lo = 1u64;
    let mut hi = 2u64;
    while hi <= MAX_BATCH && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    if hi > MAX_BATCH {
        return Ok(Some(lo));
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}
