//! Inference memory against context length: the allocated peak of a context sweep
//! ([`crate::estimator::fit::context_sweep`]) stacked by category, the KV cache as its own band,
//! the device total (what `nvidia-smi` shows) as a line, and the GPU's capacity and the current
//! context marked.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, CAPACITY, GRID, INK, MARK, MUTED};
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

/// The bands bottom to top: the categories in [`Category::ALL`] order with the KV cache last, so
/// it sits on top of the weights and activations and its growth with the context is visible.
/// Categories empty at every point are left out. Each edge is (context, lower GiB, upper GiB).
pub fn context_bands(points: &[Point]) -> Vec<(Category, Vec<(f64, f64, f64)>)> {
    let order = Category::ALL.iter().copied().filter(|&c| c != Category::KvCache).chain(std::iter::once(Category::KvCache));
    let mut below = vec![0.0f64; points.len()];
    let mut out = Vec::new();
    for c in order {
        let gib: Vec<f64> = points.iter().map(|p| p.by_category.iter().find(|(k, _)| *k == c).map_or(0.0, |(_, b)| b.gib())).collect();
        if gib.iter().all(|&v| v == 0.0) {
            continue;
        }
        let edges = points.iter().zip(&gib).zip(below.iter_mut()).map(|((p, &v), lo)| {
            let e = (p.x as f64, *lo, *lo + v);
            *lo += v;
            e
        });
        out.push((c, edges.collect()));
    }
    out
}

/// Draws the chart onto `area` (canvas on the page, SVG in tests).
pub fn draw_context_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, data: &ContextChart, theme: &Theme) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| ("sans-serif", theme.font(px)).into_font();
    if data.points.is_empty() {
        let (w, h) = area.dim_in_pixel();
        let style = font(14.0).color(&MUTED).pos(Pos::new(HPos::Center, VPos::Center));
        area.draw(&Text::new("No context length can be estimated for this plan", (w as i32 / 2, h as i32 / 2), style))?;
        return Ok(());
    }
    let xs = data.points.iter().map(|p| p.x).chain(data.current.map(|c| c.0));
    let (x_lo, x_hi) = xs.fold((u64::MAX, 0), |(lo, hi), x| (lo.min(x.max(1)), hi.max(x.max(1))));
    let (x_lo, x_hi) = (x_lo as f64, (x_hi as f64).max(x_lo as f64 * 2.0));
    let tops = data.points.iter().map(|p| p.device_total.max(p.peak_allocated)).chain(data.current.map(|c| c.1)).chain(data.capacity);
    let y_hi = tops.map(Bytes::gib).fold(0.0f64, f64::max).max(1e-3) * 1.08;

    let mut chart = ChartBuilder::on(area)
        .margin(theme.px(12.0))
        .x_label_area_size(theme.px(40.0))
        .y_label_area_size(theme.px(56.0))
        .build_cartesian_2d((x_lo..x_hi).log_scale(), 0f64..y_hi)?;
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(GRID.mix(0.4))
        .axis_style(MUTED)
        .x_desc("Context length (tokens)")
        .y_desc("Memory (GiB)")
        .label_style(font(12.0).color(&INK))
        .axis_desc_style(font(13.0).color(&INK))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}").trim_end_matches('0').trim_end_matches('.').to_string())
        .draw()?;

    for (category, edges) in context_bands(data.points) {
        // The shared palette draws the KV cache black, which would hide the device-total line.
        let color = if category == Category::KvCache { RGBColor(0x00, 0x80, 0x80) } else { category_color(category) };
        let upper = edges.iter().map(|&(x, _, hi)| (x, hi));
        let lower = edges.iter().rev().map(|&(x, lo, _)| (x, lo));
        let outline: Vec<(f64, f64)> = upper.chain(lower).collect();
        let swatch = theme.px(5.0) as i32;
        chart
            .draw_series(std::iter::once(Polygon::new(outline, color.mix(0.85).filled())))?
            .label(category.label())
            .legend(move |(x, y)| Rectangle::new([(x, y - swatch), (x + 2 * swatch, y + swatch)], color.filled()));
    }

    let w = theme.px(1.5);
    let total = data.points.iter().map(|p| (p.x as f64, p.device_total.gib()));
    chart
        .draw_series(LineSeries::new(total, INK.stroke_width(w)))?
        .label("Device total (reserved + CUDA context)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 10 * w as i32, y)], INK.stroke_width(w)));

    if let Some(cap) = data.capacity {
        let y = cap.gib();
        chart.draw_series(std::iter::once(PathElement::new(vec![(x_lo, y), (x_hi, y)], CAPACITY.stroke_width(theme.px(1.5)))))?;
        let style = font(12.0).color(&CAPACITY).pos(Pos::new(HPos::Right, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(format!("GPU capacity {cap}"), (x_hi, y), style)))?;
    }

    if let Some((ctx, total)) = data.current {
        let (x, y) = (ctx.max(1) as f64, total.gib());
        chart.draw_series(std::iter::once(PathElement::new(vec![(x, 0.0), (x, y_hi)], MARK.stroke_width(theme.px(1.0)))))?;
        chart.draw_series(std::iter::once(Circle::new((x, y), theme.px(4.0), MARK.filled())))?;
        let right_half = x.ln() - x_lo.ln() > (x_hi.ln() - x_lo.ln()) / 2.0;
        let style = font(12.0).color(&MARK).pos(Pos::new(if right_half { HPos::Right } else { HPos::Left }, VPos::Bottom));
        let label = format!("  context {ctx}: {total}  ");
        chart.draw_series(std::iter::once(EmptyElement::at((x, y)) + Text::new(label, (0, -(theme.px(6.0) as i32)), style)))?;
    }

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .margin(theme.px(8.0))
        .legend_area_size(theme.px(18.0))
        .label_font(font(12.0).color(&INK))
        .background_style(WHITE.mix(0.85))
        .border_style(GRID)
        .draw()?;
    Ok(())
}
