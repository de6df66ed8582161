//! The planner's charts as plain functions over any plotters [`DrawingBackend`]: the page hands
//! them a canvas, the tests and the SVG export an SVG string, so what the tests check is what
//! users see. Drawing code takes data already computed by the estimator and never estimates
//! anything itself; every text it draws comes in with the data (the page translates it).
//!
//! ```
//! use plotters::prelude::*;
//! use vram_planner::plan::{sweep::{sweep, Axis}, Plan};
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
pub mod context_chart;
pub mod layers;
pub mod rank_chart;
pub mod theme;
pub mod timeline;
pub mod zero_chart;

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

/// The charts' WebAssembly chunk could not be fetched (a `lazy-chunks` build, offline before the
/// service worker had cached it).
#[cfg(target_arch = "wasm32")]
impl From<wasm_split_helpers::SplitLoaderError> for PlotError {
    fn from(_: wasm_split_helpers::SplitLoaderError) -> Self {
        PlotError("its code could not be fetched: check the connection and reload the page".into())
    }
}

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
    pub const GIB: MemUnit = MemUnit {
        divisor: (1u64 << 30) as f64,
        name: "GiB",
    };
    pub const GB: MemUnit = MemUnit {
        divisor: 1e9,
        name: "GB",
    };
    pub fn of(&self, b: crate::estimator::units::Bytes) -> f64 {
        b.0 as f64 / self.divisor
    }
}

impl Default for MemUnit {
    fn default() -> Self {
        MemUnit::GIB
    }
}

/// The words of a panel chart (the ZeRO and rank charts) and the unit of its memory axis, written
/// by the page in its language and units. A chart given none draws English in GiB (tests).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PanelWords {
    pub unit: MemUnit,
    pub x_desc: String,
    pub y_desc: String,
    /// Shown instead of a chart when there is nothing to draw.
    pub empty: String,
    /// The capacity line's label, its size already written out.
    pub capacity: Option<String>,
    /// The marked value's label (the current layout, the peak rank).
    pub mark: Option<String>,
    /// Names of the chart's fixed series, where it has them (the rank chart's parts).
    pub legend: Vec<String>,
}

/// English category names in [`Category::ALL`](crate::estimator::timeline::Category::ALL) order.
pub fn english_categories() -> [&'static str; crate::estimator::timeline::Category::COUNT] {
    crate::estimator::timeline::Category::ALL.map(|c| c.label())
}

/// How a legend entry shows its series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Swatch {
    Fill,
    Line,
    Dashed,
}

/// A legend in a corner of the plotting area `plot` (backend pixels), drawn with plain
/// rectangles and text. plotters' own legend measures every label through the browser's
/// layout on the web (a reflow per label), which a chart redrawn on every slider step cannot
/// afford; this one measures through the backend (`measureText` on a canvas).
pub(crate) fn draw_legend<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    plot: (std::ops::Range<i32>, std::ops::Range<i32>),
    entries: &[(&str, plotters::style::RGBColor, Swatch)],
    right: bool,
    theme: &Theme,
) -> Result<(), PlotError> {
    use plotters::prelude::*;
    if entries.is_empty() {
        return Ok(());
    }
    let font = theme.sans(12.0).color(&theme::INK);
    let line_h = theme.px(17.0) as i32;
    let pad = theme.px(6.0) as i32;
    let sw = theme.px(14.0) as i32;
    let text_w = entries
        .iter()
        .map(|(l, _, _)| {
            area.estimate_text_size(l, &font)
                .map_or(0, |(w, _)| w as i32)
        })
        .max()
        .unwrap_or(0);
    let w = pad * 3 + sw + text_w;
    let h = pad * 2 + line_h * entries.len() as i32;
    let m = theme.px(8.0) as i32;
    let x0 = if right {
        plot.0.end - m - w
    } else {
        plot.0.start + m
    };
    let y0 = plot.1.start + m;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        WHITE.mix(0.85).filled(),
    ))?;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        theme::GRID.stroke_width(1),
    ))?;
    let text_style = font.pos(plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Left,
        plotters::style::text_anchor::VPos::Center,
    ));
    for (i, (label, color, swatch)) in entries.iter().enumerate() {
        let cy = y0 + pad + line_h * i as i32 + line_h / 2;
        let sx = x0 + pad;
        match swatch {
            Swatch::Fill => area.draw(&Rectangle::new(
                [(sx, cy - line_h / 4), (sx + sw, cy + line_h / 4)],
                color.filled(),
            ))?,
            Swatch::Line => area.draw(&PathElement::new(
                vec![(sx, cy), (sx + sw, cy)],
                color.stroke_width(theme.px(2.0)),
            ))?,
            Swatch::Dashed => {
                let d = sw / 3;
                area.draw(&PathElement::new(
                    vec![(sx, cy), (sx + d, cy)],
                    color.stroke_width(theme.px(2.0)),
                ))?;
                area.draw(&PathElement::new(
                    vec![(sx + 2 * d, cy), (sx + sw, cy)],
                    color.stroke_width(theme.px(2.0)),
                ))?;
            }
        }
        area.draw(&Text::new(
            label.to_string(),
            (sx + sw + pad, cy),
            text_style.clone(),
        ))?;
    }
    Ok(())
}

/// Draws the message of a chart that has nothing to show.
pub(crate) fn draw_message<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    msg: &str,
    theme: &Theme,
) -> Result<(), PlotError> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let (w, h) = area.dim_in_pixel();
    let style = theme
        .sans(14.0)
        .color(&theme::MUTED)
        .pos(Pos::new(HPos::Center, VPos::Center));
    area.draw(&Text::new(
        msg.to_string(),
        (w as i32 / 2, h as i32 / 2),
        style,
    ))?;
    Ok(())
}

/// The frame every chart shares: margins and axis-label areas, in CSS pixels.
pub(crate) fn frame<'a, 'b, DB: plotters::prelude::DrawingBackend>(
    area: &'a plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    theme: &Theme,
) -> plotters::prelude::ChartBuilder<'a, 'b, DB> {
    let mut b = plotters::prelude::ChartBuilder::on(area);
    b.margin(theme.px(12.0))
        .x_label_area_size(theme.px(40.0))
        .y_label_area_size(theme.px(56.0));
    b
}

/// The mesh style every chart shares: light grid, muted axes, axis names and label fonts.
pub(crate) fn style_mesh<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut plotters::chart::MeshStyle<'a, 'b, X, Y, DB>,
    theme: &Theme,
    x_desc: &str,
    y_desc: &str,
) -> &'m mut plotters::chart::MeshStyle<'a, 'b, X, Y, DB>
where
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged,
    DB: plotters::prelude::DrawingBackend,
{
    use plotters::prelude::*;
    let font = |px: f64| theme.sans(px);
    mesh.bold_line_style(theme::GRID)
        .light_line_style(theme::GRID.mix(0.4))
        // One minor line between labels: the default ten are hundreds of strokes per redraw.
        .max_light_lines(1)
        .axis_style(theme::MUTED)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(font(12.0).color(&theme::INK))
        .axis_desc_style(font(13.0).color(&theme::INK))
}

/// An axis tick in few digits ("0.5", "12", "1.25").
pub(crate) fn tick(y: f64) -> String {
    format!("{y:.3}")
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_string()
}
