//! Inference memory against context length: the allocated peak of a context sweep
//! ([`crate::estimator::fit::context_sweep`]) stacked by category, the KV cache as its own band,
//! the device total (what `nvidia-smi` shows) as a line, and the GPU's capacity and the current
//! context marked.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::batch::{bands, draw_stacked_chart, Marker, StackedChart};
use super::theme::Theme;
use super::PlotError;
use crate::estimator::sweep::Point;
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;

/// What the chart shows; every number comes from the estimator.
#[derive(Clone, Copy, Debug)]
pub struct ContextChart<'a> {
    /// A context sweep, in increasing context order.
    pub points: &'a [Point],
    /// The plan's context and its device total.
    pub current: Option<(u64, Bytes)>,
    /// Usable memory of the chosen GPU.
    pub capacity: Option<Bytes>,
}

/// The bands bottom to top, as every stacked chart draws them ([`super::batch::bands`]): the
/// KV cache is the last category, so it sits on top of the weights and activations and its growth
/// with the context is visible. Each edge is (context, lower GiB, upper GiB).
pub fn context_bands(points: &[Point]) -> Vec<(Category, Vec<(f64, f64, f64)>)> {
    bands(points).into_iter().map(|b| (b.category, b.edges)).collect()
}

/// Draws the chart onto `area` (canvas on the page, SVG in tests): the shared stacked chart with
/// the device total, the capacity and the current context marked.
pub fn draw_context_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, data: &ContextChart, theme: &Theme) -> Result<(), PlotError> {
    let mut chart = StackedChart::new(data.points, "Context length (tokens)");
    chart.y_desc = "Memory (GiB)".into();
    chart.current = data.current.map(|(ctx, total)| Marker { x: ctx, y: total, label: format!("context {ctx}: {total}") });
    chart.capacity = data.capacity.map(|cap| (cap, format!("GPU capacity {cap}")));
    chart.device_label = Some("Device total (reserved + CUDA context)");
    chart.empty = "No context length can be estimated for this plan";
    draw_stacked_chart(area, &chart, theme)
}
