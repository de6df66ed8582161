//! Sweeps for the charts (memory against batch, resolution, sequence length, checkpoint
//! segments) and the solver for the largest batch that fits a memory budget.

use super::{estimate, EstimateSteps, Plan, PlanError};
use crate::estimator::config::Checkpointing;
use crate::estimator::error::EstimateError;
use crate::estimator::timeline::{column_ranges, Category, Live, Phase};
use crate::estimator::units::{insert_sorted, Bytes};
use crate::estimator::{Estimate, MAX_BATCH};

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
        Axis::Segments => {
            p.ckpt = if x == 0 {
                Checkpointing::None
            } else {
                Checkpointing::Segments(x as u32)
            }
        }
    }
    p
}

/// Estimates `plan` at each value of `axis`; values the model cannot take are skipped. Batch
/// sweeps use [`BatchLines`] (two simulations, then every point in microseconds).
pub fn sweep(plan: &Plan, axis: Axis, xs: &[u64]) -> Vec<Point> {
    if axis == Axis::Batch {
        if let Ok(lines) = BatchLines::new(plan, xs.iter().copied().max().unwrap_or(1)) {
            return xs
                .iter()
                .filter(|&&x| (1..=MAX_BATCH).contains(&x))
                .map(|&x| lines.point(x))
                .collect();
        }
    }
    xs.iter()
        .filter_map(|&x| {
            estimate(&with(plan, axis, x))
                .ok()
                .map(|e| Point::of(x, &e))
        })
        .collect()
}

/// Memory as a function of the batch size. Every activation, gradient and temporary of a step is
/// proportional to the batch while parameters, buffers and optimizer state are constant, and the
/// step runs the same ops in the same order at any batch; so each timeline event's live bytes are
/// an affine function `p + b·a` of the batch `b`, and the peak is the upper envelope of those lines.
/// Two simulations (at batch 1 and a larger one) give every line; the only inexactness is the
/// 512-byte block rounding (a few KiB).
#[derive(Clone, Debug)]
pub struct BatchLines {
    /// Per kept event, per category: bytes at batch 0 (intercept) and per sample (slope). An
    /// event is kept when it can be the highest of its timeline column at some batch (below).
    lines: Vec<[(f64, f64); Category::COUNT]>,
    /// Per kept event, the total's intercept and slope (the sum of the categories').
    totals: Vec<(f64, f64)>,
    /// Per kept event: the phase of the step it belongs to.
    phases: Vec<Phase>,
    /// The step's timeline in at most [`TIMELINE_COLUMNS`] columns (plus one per phase change):
    /// per column, the end of its kept events. A column stands for consecutive events of one
    /// phase and shows the highest of them, so only its lines' upper envelope is kept: a
    /// 600,000-event step (DeepSeek-V3) then weighs a few hundred KiB instead of ~100 MB, and
    /// the page can cache many plans' lines.
    columns: Vec<u32>,
    /// How many events the step has.
    events: usize,
    /// Kept events whose total line is the largest at some batch in `1..=MAX_BATCH` (the upper
    /// envelope), in event order: the only ones the peak can come from, so a point costs a few
    /// lines instead of the whole step.
    peak_candidates: Vec<u32>,
    /// What the caching allocator's replay reserves over the allocated peak (fragmentation,
    /// cached blocks) at the two estimates' batches, `(batch, peak, excess)`: the excess is
    /// held below the first, interpolated between them, and grows with the peak beyond the
    /// second. Which cached block serves which request changes with the sizes, so the replay's
    /// reserved bytes are not affine in the batch (ResNet-18 at 64 px: 1.40 × the peak at batch
    /// 300, 1.24 at 256): this is the preview's one approximation beyond block rounding, which
    /// the exact estimate replaces.
    excess: [(f64, f64, f64); 2],
    fixed: Bytes,
    forward_flops_per_sample: f64,
    recompute_flops_per_sample: f64,
}

/// How many columns [`BatchLines`] keeps of a step's timeline ([`column_ranges`]): the timeline
/// chart's width (about one column per two CSS pixels of a wide chart).
pub const TIMELINE_COLUMNS: usize = 480;

/// The lines' first sample: batch 1 can skip layout copies (the LSTM), so it may lie off the line.
pub const LINE_B1: u64 = 2;

impl BatchLines {
    pub fn new(plan: &Plan, hi: u64) -> Result<BatchLines, PlanError> {
        BatchLines::from_first(plan, &BatchLines::first(plan)?, hi)
    }

    /// The first of the lines' two estimates, at batch [`LINE_B1`] (for a caller that makes
    /// them in separate steps).
    pub fn first(plan: &Plan) -> Result<Estimate, PlanError> {
        estimate(&with(plan, Axis::Batch, LINE_B1))
    }

    /// The lines from [`BatchLines::first`]'s estimate and a second at `hi` (within 4–1024).
    pub fn from_first(plan: &Plan, e1: &Estimate, hi: u64) -> Result<BatchLines, PlanError> {
        let b2 = hi.clamp(4, 1024);
        let e2 = estimate(&with(plan, Axis::Batch, b2))?;
        BatchLines::from_estimates(e1, LINE_B1, &e2, b2)
    }

    /// The lines through two estimates of the same plan at batches `b1 < b2` (for callers that
    /// keep the two estimates for other uses, such as the planner page's per-layer chart).
    pub fn from_estimates(
        e1: &Estimate,
        b1: u64,
        e2: &Estimate,
        b2: u64,
    ) -> Result<BatchLines, PlanError> {
        if e1.timeline.events.len() != e2.timeline.events.len() || b2 <= b1 {
            return Err(PlanError::Estimate(EstimateError::Unsupported(
                "the step's ops change with the batch size".into(),
            )));
        }
        let d = (b2 - b1) as f64;
        // The line through `x` bytes at `b1` and `y` at `b2`.
        let affine = |x: u64, y: u64| {
            let slope = (y as f64 - x as f64) / d;
            (x as f64 - slope * b1 as f64, slope)
        };
        let range = (1.0, MAX_BATCH as f64);
        let (ev1, ev2) = (&e1.timeline.events, &e2.timeline.events);
        let (mut lines, mut totals, mut phases, mut columns) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in column_ranges(ev1.iter().map(|e| e.phase), ev1.len(), TIMELINE_COLUMNS) {
            let col_totals: Vec<(f64, f64)> = r
                .clone()
                .map(|i| affine(ev1[i].live.total().0, ev2[i].live.total().0))
                .collect();
            for k in envelope(&col_totals, range) {
                let (a, b) = (&ev1[r.start + k as usize], &ev2[r.start + k as usize]);
                lines.push(std::array::from_fn(|c| affine(a.live.0[c], b.live.0[c])));
                totals.push(col_totals[k as usize]);
                phases.push(a.phase);
            }
            columns.push(lines.len() as u32);
        }
        let excess_at = |b: u64, e: &Estimate| {
            let peak = e.peak_allocated.0 as f64;
            (b as f64, peak, e.reserved.0 as f64 - peak)
        };
        Ok(BatchLines {
            excess: [excess_at(b1, e1), excess_at(b2, e2)],
            peak_candidates: envelope(&totals, range),
            lines,
            totals,
            phases,
            columns,
            events: ev1.len(),
            fixed: e1.workspaces + e1.context,
            forward_flops_per_sample: e1.forward_flops / b1 as f64,
            recompute_flops_per_sample: e1.recompute_flops / b1 as f64,
        })
    }

    /// Number of timeline events (the step's ops, its frees and the optimizer's steps).
    pub fn events(&self) -> usize {
        self.events
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The phase of kept event `i` (as [`BatchLines::peak_event`] numbers them).
    pub fn phase(&self, i: usize) -> Phase {
        self.phases[i]
    }

    /// Live bytes by category ([`Category::ALL`] order) after kept event `i` at batch `b`.
    fn live_at(&self, i: usize, b: u64) -> [u64; Category::COUNT] {
        let bf = b as f64;
        self.lines[i].map(|(p, a)| (p + a * bf).max(0.0).round() as u64)
    }

    /// Number of columns [`BatchLines::timeline_at`] yields.
    pub fn columns(&self) -> usize {
        self.columns.len()
    }

    /// The step's timeline at batch `b`, one column of events at a time: the phase and live
    /// bytes by category of the column's highest event (the first on ties).
    pub fn timeline_at(
        &self,
        b: u64,
    ) -> impl Iterator<Item = (Phase, [u64; Category::COUNT])> + '_ {
        let starts = std::iter::once(0).chain(self.columns.iter().copied());
        starts.zip(&self.columns).map(move |(start, &end)| {
            let (mut best, mut best_total) = ([0u64; Category::COUNT], None);
            for i in start as usize..end as usize {
                let live = self.live_at(i, b);
                let t = Live(live).total();
                if best_total.is_none_or(|bt| t > bt) {
                    (best, best_total) = (live, Some(t));
                }
            }
            // Every column keeps at least one line (an envelope is never empty).
            (self.phases[start as usize], best)
        })
    }

    /// Category `c`'s bytes after event `i` as `intercept + slope × batch`.
    pub fn category_line(&self, i: usize, c: Category) -> (f64, f64) {
        self.lines[i][c.index()]
    }

    /// The event holding the allocated peak at batch `b` (the first one on ties).
    pub fn peak_event(&self, b: u64) -> usize {
        let bf = b as f64;
        let (mut best, mut best_v) = (0usize, f64::MIN);
        for &i in &self.peak_candidates {
            let (p, a) = self.totals[i as usize];
            let v = p + a * bf;
            if v > best_v {
                best = i as usize;
                best_v = v;
            }
        }
        best
    }

    /// The estimate's headline numbers at batch `b`.
    pub fn point(&self, b: u64) -> Point {
        self.point_at(self.peak_event(b), b)
    }

    /// [`BatchLines::point`] at an event already known to peak at `b` (`peak_event(b)`).
    pub fn point_at(&self, ev: usize, b: u64) -> Point {
        let bf = b as f64;
        let Some(l) = self.lines.get(ev) else {
            return Point {
                x: b,
                peak_allocated: Bytes::ZERO,
                device_total: self.fixed,
                by_category: Vec::new(),
                recompute_flops: 0.0,
                forward_flops: 0.0,
            };
        };
        let by_category: Vec<(Category, Bytes)> = Category::ALL
            .iter()
            .map(|&c| {
                (
                    c,
                    Bytes((l[c.index()].0 + l[c.index()].1 * bf).max(0.0).round() as u64),
                )
            })
            .collect();
        let peak: Bytes = by_category.iter().map(|(_, b)| *b).sum();
        let reserved = peak.0 as f64;
        let [(b1, _, x1), (b2, p2, x2)] = self.excess;
        let excess = if bf <= b2 {
            x1 + (x2 - x1) * ((bf - b1) / (b2 - b1)).clamp(0.0, 1.0)
        } else {
            reserved * x2 / p2.max(1.0)
        };
        let reserved = reserved + excess.max(0.0);
        Point {
            x: b,
            peak_allocated: peak,
            device_total: Bytes(reserved.round() as u64) + self.fixed,
            by_category,
            recompute_flops: self.recompute_flops_per_sample * bf,
            forward_flops: self.forward_flops_per_sample * bf,
        }
    }
}

/// Indices of the lines `(intercept, slope)` that are the largest somewhere in `range` (their
/// upper envelope, the convex-hull trick), in index order. Identical lines keep the first;
/// lines that only touch the envelope at a single point are kept, so the first-on-ties rule of
/// a full scan still holds.
fn envelope(lines: &[(f64, f64)], range: (f64, f64)) -> Vec<u32> {
    // By slope, then intercept downwards, then index: a total order, so any sort gives the
    // same result; a small merge sort here keeps the standard library's stable sort, with its
    // own copy of the sorting code, out of the page's first load.
    let before = |i: usize, j: usize| {
        lines[i]
            .1
            .total_cmp(&lines[j].1)
            .then(lines[j].0.total_cmp(&lines[i].0))
            .then(i.cmp(&j))
            .is_lt()
    };
    let mut order: Vec<usize> = (0..lines.len()).collect();
    let mut buf = order.clone();
    let mut width = 1;
    while width < order.len() {
        for (start, out) in (0..order.len())
            .step_by(2 * width)
            .zip(buf.chunks_mut(2 * width))
        {
            let mid = (start + width).min(order.len());
            let end = (start + 2 * width).min(order.len());
            let (mut a, mut b) = (start, mid);
            for slot in out.iter_mut() {
                let take_a = b >= end || (a < mid && !before(order[b], order[a]));
                *slot = if take_a { order[a] } else { order[b] };
                if take_a {
                    a += 1;
                } else {
                    b += 1;
                }
            }
        }
        std::mem::swap(&mut order, &mut buf);
        width *= 2;
    }
    // Where line `k` overtakes line `j` (slope of k > slope of j).
    let cross = |j: usize, k: usize| (lines[j].0 - lines[k].0) / (lines[k].1 - lines[j].1);
    let mut hull: Vec<usize> = Vec::new();
    for k in order {
        if let Some(&last) = hull.last() {
            if lines[last].1 == lines[k].1 {
                // Same slope: the one already kept is at least as high everywhere, and earlier on
                // ties only if it is the same line; keep an identical later line out.
                if lines[last].0 > lines[k].0 || lines[last] == lines[k] {
                    continue;
                }
            }
        }
        while hull.len() >= 2 {
            let (a, b) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            if cross(a, k) < cross(a, b) {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(k);
    }
    let kept = (0..hull.len())
        .filter(|&i| {
            let from = if i == 0 {
                f64::NEG_INFINITY
            } else {
                cross(hull[i - 1], hull[i])
            };
            let to = if i + 1 == hull.len() {
                f64::INFINITY
            } else {
                cross(hull[i], hull[i + 1])
            };
            from <= range.1 && to >= range.0
        })
        .map(|i| hull[i]);
    let mut keep: Vec<usize> = Vec::new();
    for i in kept {
        insert_sorted(&mut keep, i);
    }
    keep.into_iter().map(|i| i as u32).collect()
}

/// `n` values from `lo` to `hi`, evenly spaced on a log scale, deduplicated.
pub fn log_points(lo: u64, hi: u64, n: usize) -> Vec<u64> {
    let (lo, hi) = (lo.max(1), hi.max(lo.max(1)));
    let mut v: Vec<u64> = (0..n)
        .map(|i| {
            let t = if n <= 1 {
                0.0
            } else {
                i as f64 / (n - 1) as f64
            };
            ((lo as f64).ln() + t * ((hi as f64).ln() - (lo as f64).ln()))
                .exp()
                .round() as u64
        })
        .collect();
    v.dedup();
    v
}

/// The largest batch whose device total fits `capacity` (memory never falls as the batch grows).
/// [`BatchLines`] predicts it; full estimates around the prediction confirm it, so the answer is
/// exactly what [`estimate`] says. `Ok(None)` when even batch 1 does not fit.
pub fn max_batch(plan: &Plan, capacity: Bytes) -> Result<Option<u64>, PlanError> {
    let mut search = MaxBatchSearch::new(plan, capacity);
    loop {
        if let Some(answer) = search.step() {
            return answer;
        }
    }
}

/// [`max_batch`] a step at a time, for a page that answers input between steps: each
/// [`MaxBatchSearch::step`] runs one slice of a new estimate ([`EstimateSteps`]; the lines' two
/// estimates take a step each).
/// A step replays the search from the start with the answers it already has, which costs no
/// estimate, until it reaches a question it has not asked; it asks that one and stops there.
pub struct MaxBatchSearch {
    plan: Plan,
    capacity: Bytes,
    lines: Option<Option<BatchLines>>,
    /// The lines' first estimate, once made and until the second is.
    first: Option<Result<Estimate, PlanError>>,
    known: Vec<(u64, Result<bool, PlanError>)>,
    /// The question under way: its batch and its estimate's remaining slices.
    asking: Option<(u64, EstimateSteps)>,
}

impl MaxBatchSearch {
    pub fn new(plan: &Plan, capacity: Bytes) -> MaxBatchSearch {
        MaxBatchSearch {
            plan: plan.clone(),
            capacity,
            lines: None,
            first: None,
            known: Vec::new(),
            asking: None,
        }
    }

    /// One step: `None` while the search needs another, then its answer.
    pub fn step(&mut self) -> Option<Result<Option<u64>, PlanError>> {
        use std::cell::{Cell, RefCell};
        let budget = Cell::new(1u32);
        let paused = Cell::new(false);
        let spend = || {
            if budget.get() == 0 {
                paused.set(true);
                false
            } else {
                budget.set(budget.get() - 1);
                true
            }
        };
        let (plan, capacity) = (&self.plan, self.capacity);
        let known = RefCell::new(std::mem::take(&mut self.known));
        let lines = RefCell::new(self.lines.take());
        let first = RefCell::new(self.first.take());
        let asking = RefCell::new(self.asking.take());
        // A question past the step's one slice of estimate gets a stand-in answer; the step's
        // result is then thrown away (`paused`), and a later step goes on with it.
        let fits = |b: u64| -> Result<bool, PlanError> {
            if let Some((_, r)) = known.borrow().iter().find(|(x, _)| *x == b) {
                return r.clone();
            }
            if !spend() {
                return Ok(false);
            }
            let mut steps = match asking.borrow_mut().take() {
                Some((x, steps)) if x == b => steps,
                _ => EstimateSteps::new(&with(plan, Axis::Batch, b)),
            };
            let Some(e) = steps.step() else {
                *asking.borrow_mut() = Some((b, steps));
                paused.set(true);
                return Ok(false);
            };
            let r = fits_of(e, capacity);
            known.borrow_mut().push((b, r.clone()));
            r
        };
        let answer = (|| {
            if !fits(1)? {
                return Ok(None);
            }
            if lines.borrow().is_none() {
                // `BatchLines::new(plan, 1024)`, its two estimates in two steps.
                if first.borrow().is_none() {
                    if !spend() {
                        return Ok(None);
                    }
                    *first.borrow_mut() = Some(BatchLines::first(plan));
                }
                if !spend() {
                    return Ok(None);
                }
                let e1 = first.borrow_mut().take();
                *lines.borrow_mut() = Some(
                    e1.and_then(Result::ok)
                        .and_then(|e1| BatchLines::from_first(plan, &e1, 1024).ok()),
                );
            }
            let lines = lines.borrow();
            match lines.as_ref().and_then(|l| l.as_ref()) {
                Some(l) => bracket(l, capacity, &fits),
                None => largest_fitting(MAX_BATCH, &fits),
            }
        })();
        self.known = known.into_inner();
        self.lines = lines.into_inner();
        self.first = first.into_inner();
        self.asking = asking.into_inner();
        (!paused.get()).then_some(answer)
    }
}

/// The boundary predicted from the lines, then a bracket confirmed by real estimates: walk down
/// from the guess until it fits, then up until it does not, widening the step each time, then
/// bisect.
fn bracket(
    lines: &BatchLines,
    capacity: Bytes,
    fits: &dyn Fn(u64) -> Result<bool, PlanError>,
) -> Result<Option<u64>, PlanError> {
    let (mut lo, mut hi) = (1u64, MAX_BATCH);
    let guess =
        largest_fitting(MAX_BATCH, |m| Ok(lines.point(m).device_total <= capacity))?.unwrap_or(1);
    let mut step = (guess / 64).max(1);
    let mut probe = guess;
    while probe > 1 && !fits(probe)? {
        hi = probe;
        probe = probe.saturating_sub(step).max(1);
        step *= 2;
    }
    lo = lo.max(probe);
    let mut step = (guess / 64).max(1);
    let mut up = lo;
    loop {
        let next = up.saturating_add(step).min(MAX_BATCH);
        if next >= hi || next == up {
            break;
        }
        if fits(next)? {
            up = next;
            step *= 2;
        } else {
            hi = next;
            break;
        }
    }
    lo = up;
    if hi == MAX_BATCH && fits(MAX_BATCH)? {
        return Ok(Some(MAX_BATCH));
    }
    bisect(lo, hi, fits).map(Some)
}

/// Whether `plan` with `axis` set to `x` fits `capacity`; sizes past the supported limits do not.
pub fn fits_at(plan: &Plan, axis: Axis, x: u64, capacity: Bytes) -> Result<bool, PlanError> {
    fits_of(estimate(&with(plan, axis, x)), capacity)
}

/// Whether an estimate's device total fits `capacity` (a plan too large to count does not).
fn fits_of(e: Result<Estimate, PlanError>, capacity: Bytes) -> Result<bool, PlanError> {
    match e {
        Ok(e) => Ok(e.device_total <= capacity),
        Err(PlanError::Estimate(EstimateError::TooLarge | EstimateError::TooBig { .. })) => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The largest `x` in `1..=max` with `fits(x)`, for a predicate that only turns false as `x`
/// grows: doubling from 1, then bisection. `Ok(None)` when `fits(1)` is false.
pub fn largest_fitting(
    max: u64,
    mut fits: impl FnMut(u64) -> Result<bool, PlanError>,
) -> Result<Option<u64>, PlanError> {
    if !fits(1)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while hi <= max && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    if hi > max {
        if fits(max)? {
            return Ok(Some(max));
        }
        hi = max;
    }
    bisect(lo, hi, fits).map(Some)
}

/// Narrows `lo` (fits) and `hi` (does not) to adjacent values; returns `lo`.
fn bisect(
    mut lo: u64,
    mut hi: u64,
    mut fits: impl FnMut(u64) -> Result<bool, PlanError>,
) -> Result<u64, PlanError> {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page's search asks at most one question (one estimate, a slice of it per step, or
    /// the lines' two) per step, and lands where a plain bisection over real estimates lands.
    #[test]
    fn the_search_asks_one_question_a_step_and_answers_as_a_bisection() {
        let plan = Plan {
            gpu: Some("rtx4090".into()),
            ..Plan::new("resnet50")
        };
        let cap = crate::presets::gpus::find("rtx4090").unwrap().memory;
        let mut search = MaxBatchSearch::new(&plan, cap);
        let asked = |s: &MaxBatchSearch| s.known.len() + usize::from(s.lines.is_some());
        let mut steps = 0;
        let answer = loop {
            let before = asked(&search);
            let r = search.step();
            assert!(
                asked(&search) - before <= 1,
                "step {steps} asked more than once"
            );
            steps += 1;
            if let Some(r) = r {
                break r.unwrap();
            }
        };
        assert!(steps > 3, "{steps} steps");
        let plain = largest_fitting(MAX_BATCH, |b| fits_at(&plan, Axis::Batch, b, cap)).unwrap();
        assert_eq!(answer, plain);
    }

    #[test]
    fn batch_lines_match_full_estimates() {
        let mut p = Plan::new("resnet18");
        p.res = Some(64);
        let lines = BatchLines::new(&p, 512).unwrap();
        for b in [1u64, 3, 17, 100, 511] {
            let e = estimate(&with(&p, Axis::Batch, b)).unwrap();
            let pt = lines.point(b);
            let err = (pt.peak_allocated.0 as f64 - e.peak_allocated.0 as f64).abs()
                / e.peak_allocated.0 as f64;
            assert!(
                err < 1e-3,
                "batch {b}: lines {} vs estimate {}",
                pt.peak_allocated,
                e.peak_allocated
            );
        }
    }

    #[test]
    fn envelope_agrees_with_a_full_scan() {
        // Lines from a small generator: many crossings, duplicates and equal slopes.
        let mut seed = 12345u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % 50
        };
        for _ in 0..200 {
            let lines: Vec<(f64, f64)> = (0..30)
                .map(|_| (rnd() as f64 * 100.0, rnd() as f64))
                .collect();
            let cand = envelope(&lines, (1.0, 1e6));
            for b in [1.0, 2.0, 3.0, 7.0, 10.0, 33.0, 100.0, 1e3, 1e5, 1e6] {
                let full = (0..lines.len()).fold(0, |best, i| {
                    if lines[i].0 + lines[i].1 * b > lines[best].0 + lines[best].1 * b {
                        i
                    } else {
                        best
                    }
                });
                let fast = cand.iter().fold(cand[0] as usize, |best, &i| {
                    if lines[i as usize].0 + lines[i as usize].1 * b
                        > lines[best].0 + lines[best].1 * b
                    {
                        i as usize
                    } else {
                        best
                    }
                });
                assert_eq!(full, fast, "b = {b}: {lines:?}");
            }
        }
    }

    #[test]
    fn batch_lines_keep_few_candidates() {
        let lines = BatchLines::new(&Plan::new("gpt2"), 512).unwrap();
        assert!(
            lines.peak_candidates.len() < 20 && lines.events() > 500,
            "{} of {} events",
            lines.peak_candidates.len(),
            lines.events()
        );
    }

    /// The kept columns draw the same chart as every event of the step would.
    #[test]
    fn kept_columns_match_the_whole_timeline() {
        use crate::plots::timeline::{columns, Columns};
        for (id, seq) in [
            ("gpt2", Some(256)),
            ("resnet18", None),
            ("lstm-lm", None),
            ("resnet152", None),
            ("qwen3-30b-a3b", Some(128)),
        ] {
            let mut p = Plan::new(id);
            p.seq = seq;
            let (b1, b2) = (LINE_B1, 64);
            let e1 = estimate(&with(&p, Axis::Batch, b1)).unwrap();
            let e2 = estimate(&with(&p, Axis::Batch, b2)).unwrap();
            let lines = BatchLines::from_estimates(&e1, b1, &e2, b2).unwrap();
            let n = e1.timeline.events.len();
            assert_eq!(lines.events(), n);
            assert!(
                lines.lines.len() <= n.min(3 * lines.columns()),
                "{id}: kept {} of {n} events",
                lines.lines.len()
            );
            for b in [1u64, 2, 7, 64, 300, 4096] {
                let full = e1
                    .timeline
                    .events
                    .iter()
                    .zip(&e2.timeline.events)
                    .map(|(x, y)| {
                        let live = std::array::from_fn(|c| {
                            let slope =
                                (y.live.0[c] as f64 - x.live.0[c] as f64) / (b2 - b1) as f64;
                            let at0 = x.live.0[c] as f64 - slope * b1 as f64;
                            (at0 + slope * b as f64).max(0.0).round() as u64
                        });
                        (x.phase, live)
                    });
                let want = columns(full, TIMELINE_COLUMNS);
                let got = Columns::of(lines.timeline_at(b));
                assert_eq!(got, want, "{id} at batch {b}");
            }
        }
    }

    #[test]
    fn max_batch_is_the_exact_boundary() {
        let mut p = Plan::new("resnet50");
        p.res = Some(224);
        let cap = Bytes(24 << 30);
        let b = max_batch(&p, cap).unwrap().unwrap();
        let at = |b| estimate(&with(&p, Axis::Batch, b)).unwrap().device_total;
        assert!(
            at(b) <= cap && at(b + 1) > cap,
            "batch {b}: {} / {}",
            at(b),
            at(b + 1)
        );
        assert_eq!(max_batch(&p, Bytes(1 << 20)).unwrap(), None);
    }
}
