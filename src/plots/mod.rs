//! The planner's charts as plain functions over any plotters [`DrawingBackend`]: the page hands
//! them a canvas, the tests an SVG string, so what the tests check is what users see.
//! Drawing code takes data already computed by the estimator and never estimates anything itself.
//!
//! ```
//! use plotters::prelude::*;
//! use vram_planner::estimator::{config::Plan, sweep::{sweep, Axis}};
//! use vram_planner::plots::{draw_batch_chart, BatchChart, Theme};
//!
//! let points = sweep(&Plan::new("resnet18"), Axis::Batch, &[1, 8, 64]);
//! let data = BatchChart { points: &points, current: None, capacity: None };
//! let mut svg = String::new();
//! {
//!     let root = SVGBackend::with_string(&mut svg, (640, 360)).into_drawing_area();
//!     draw_batch_chart(&root, &data, &Theme::default()).unwrap();
//!     root.present().unwrap();
//! }
//! assert!(svg.contains("Batch size"));
//! ```

pub mod batch;
pub mod context_chart; // ui2: issue #6 inference chart
pub mod rank_chart; // ui2: issue #5 per-rank chart
pub mod theme;
pub mod zero_chart; // ui2: issue #5 ZeRO chart

use std::fmt;

use plotters::drawing::DrawingAreaErrorKind;

pub use batch::{draw_batch_chart, BatchChart};
pub use theme::Theme;

/// A chart that could not be drawn: the backend's message (a canvas that went away, a full
/// string buffer). Kept as text so callers on any backend can show it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotError(pub String);

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chart could not be drawn: {}", self.0)
    }
}

impl std::error::Error for PlotError {}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for PlotError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        PlotError(e.to_string())
    }
}
