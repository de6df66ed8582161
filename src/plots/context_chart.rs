//! Inference memory against context length: the allocated peak of a context sweep
//! ([`crate::plan::fit::context_sweep`]) stacked by category, the KV cache as its own band.
//! The chart itself is the shared [`super::batch::StackedChart`], labelled in the page's language
//! by `ui::logic::mode::context_chart`.

use super::batch::bands;
use crate::estimator::timeline::Category;
use crate::plan::sweep::Point;

/// One edge of a band: (context, lower GiB, upper GiB).
pub type Edge = (f64, f64, f64);

/// The bands bottom to top, as every stacked chart draws them ([`super::batch::bands`]): the
/// KV cache is the last category, so it sits on top of the weights and activations and its growth
/// with the context is visible. Each edge is (context, lower GiB, upper GiB).
pub fn context_bands(points: &[Point]) -> Vec<(Category, Vec<Edge>)> {
    bands(points)
        .into_iter()
        .map(|b| (b.category, b.edges))
        .collect()
}
