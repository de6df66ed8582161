//! What fits a GPU, for fine-tuning and serving plans: the largest batch ([`sweep::max_batch`]
//! on any mode), the longest prompt served ([`max_context`]), memory against context length for
//! the inference chart ([`context_sweep`], the KV cache as its own category) and several plans
//! side by side ([`compare`]). Every answer is a full estimate: nothing is extrapolated.

use super::sweep::{self, Point};
use super::{estimate, Plan, PlanError};
use crate::estimator::error::EstimateError;
use crate::estimator::timeline::Category;
use crate::estimator::tune::Mode;
use crate::estimator::units::Bytes;
use crate::estimator::{Estimate, MAX_SEQ};

fn with_context(plan: &Plan, c: u64) -> Plan {
    let mut p = plan.clone();
    p.context = Some(c);
    p
}

fn fits(plan: &Plan, capacity: Bytes) -> Result<bool, PlanError> {
    match estimate(plan) {
        Ok(e) => Ok(e.device_total <= capacity),
        Err(PlanError::Estimate(EstimateError::TooLarge | EstimateError::TooBig { .. })) => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The largest batch whose device total (reserved segments, workspaces, CUDA context) fits
/// `capacity`; `Ok(None)` when batch 1 does not.
pub fn max_batch(plan: &Plan, capacity: Bytes) -> Result<Option<u64>, PlanError> {
    sweep::max_batch(plan, capacity)
}

/// The longest prompt (`context`, with the plan's `new_tokens` generated after it) whose device
/// total fits `capacity`: memory only grows with the context (cache, prefill activations), so an
/// exponential search and a bisection of full estimates find the exact boundary. `Ok(None)` when
/// a one-token prompt does not fit.
pub fn max_context(plan: &Plan, capacity: Bytes) -> Result<Option<u64>, PlanError> {
    if plan.mode != Mode::Infer {
        return Err(PlanError::Estimate(EstimateError::Unsupported(
            "the longest context applies to \"mode\": \"infer\"".into(),
        )));
    }
    let new_tokens = plan.new_tokens.unwrap_or(1);
    let max = MAX_SEQ.saturating_sub(new_tokens).max(1);
    sweep::largest_fitting(max, |c| fits(&with_context(plan, c), capacity))
}

/// Memory against prompt length for an inference plan: one point per context in `xs` (values
/// the model cannot take are skipped), broken down by category with the KV cache as its own band
/// ([`Category::KvCache`]).
pub fn context_sweep(plan: &Plan, xs: &[u64]) -> Vec<Point> {
    xs.iter()
        .filter_map(|&x| {
            estimate(&with_context(plan, x)).ok().map(|e| Point {
                x,
                peak_allocated: e.peak_allocated,
                device_total: e.device_total,
                by_category: Category::ALL.iter().map(|&c| (c, e.category(c))).collect(),
                recompute_flops: e.recompute_flops,
                forward_flops: e.forward_flops,
            })
        })
        .collect()
}

/// Several configurations estimated side by side (the comparison view).
pub fn compare(plans: &[Plan]) -> Vec<Result<Estimate, PlanError>> {
    plans.iter().map(estimate).collect()
}
