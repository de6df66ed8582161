//! The planner's charts as plain functions over any plotters [`DrawingBackend`]: the page hands
//! them a canvas, the tests and the SVG export an SVG string, so what the tests check is what
//! users see. Drawing code takes data already computed by the estimator and never estimates
//! anything itself; every text it draws comes in with the data (the page translates it).
//!
//! ```
//! use plotters::prelude::*;
//! use vram_planner::estimator::{config::Plan, sweep::{sweep, Axis}};
//! use vram_planner::plots::{draw_stacked_chart, StackedChart, Theme};
//!
//! let points = sweep(&Plan::new("resnet18"), Axis::Batch, &[1, 8, 64]);
//! let data = StackedChart::new(&points, "Batch size");
//! let mut svg = String::new();
//! {
//!     let root = SVGBackend::with_string(&mut svg, (640, 360)).into_drawing_area();
//!     draw_stacked_chart(&root, &data, &Theme::default()).unwrap();
//!     root.present().unwrap();
//! }
//! assert!(svg.contains("Batch size"));
//! ```

pub mod batch;
pub mod checkpoint;
pub mod layers;
pub mod theme;
pub mod timeline;

use std::fmt;

use plotters::drawing::DrawingAreaErrorKind;

pub use batch::{draw_stacked_chart, Marker, StackedChart};
pub use checkpoint::{draw_checkpoint_chart, CheckpointChart, CkptPoint};
pub use layers::{draw_layers_chart, LayersChart};
pub use theme::Theme;
pub use timeline::{draw_timeline_chart, TimelineChart};

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

/// The unit of a chart's memory axis: bytes per unit and its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemUnit {
    pub divisor: f64,
    pub name: &'static str,
}

impl MemUnit {
    pub const GIB: MemUnit = MemUnit { divisor: (1u64 << 30) as f64, name: "GiB" };
    pub const GB: MemUnit = MemUnit { divisor: 1e9, name: "GB" };
    pub fn of(&self, b: crate::estimator::units::Bytes) -> f64 {
        b.0 as f64 / self.divisor
    }
}

impl Default for MemUnit {
    fn default() -> Self {
        MemUnit::GIB
    }
}

/// English category names in [`Category::ALL`](crate::estimator::timeline::Category::ALL) order.
pub fn english_categories() -> [&'static str; 8] {
    crate::estimator::timeline::Category::ALL.map(|c| c.label())
}

/// An axis tick in few digits ("0.5", "12", "1.25").
pub(crate) fn tick(y: f64) -> String {
    format!("{y:.3}").trim_end_matches('0').trim_end_matches('.').to_string()
}
