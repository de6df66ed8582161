//! Inference memory against context length: the allocated peak of a context sweep
//! ([`crate::estimator::fit::context_sweep`]) stacked by category, the KV cache as its own band.
//! The chart itself is the shared [`super::batch::StackedChart`], labelled in the page's language
//! by `ui::logic::mode::context_chart`.

use super::batch::bands;
use crate::estimator::sweep::Point;
use crate::estimator::timeline::Category;

/// The bands bottom to top, as every stacked chart draws them ([`super::batch::bands`]): the
/// KV cache is the last category, so it sits on top of the weights and activations and its growth
/// with the context is visible. Each edge is (context, lower GiB, upper GiB).
pub fn context_bands(points: &[Point]) -> Vec<(Category, Vec<(f64, f64, f64)>)> {
    bands(points)
        .into_iter()
        .map(|b| (b.category, b.edges))
        .collect()
}
