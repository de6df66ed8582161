//! Memory against batch size: the allocated peak of a batch sweep stacked by category (what is
//! live at each batch's peak), on a log batch axis, with the current batch and the GPU's capacity
//! marked.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, CAPACITY, GRID, INK, MARK, MUTED};
use super::PlotError;
use crate::estimator::sweep::Point;
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;

/// What the batch chart shows; every number comes from the estimator.
#[derive(Clone, Copy, Debug)]
pub struct BatchChart<'a> {
    /// A batch sweep (`sweep(plan, Axis::Batch, ..)`), in increasing batch order.
    pub points: &'a [Point],
    /// The batch the user picked and its allocated peak.
    pub current: Option<(u64, Bytes)>,
    /// Usable memory of the chosen GPU.
    pub capacity: Option<Bytes>,
}

/// One category's band: for each sweep point, its batch and the band's lower and upper edge
/// in GiB.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub category: Category,
    pub edges: Vec<(f64, f64, f64)>,
}

/// Stacks the categories of each point in [`Category::ALL`] order, leaving out categories that
/// are empty at every point. The top band's upper edge is the allocated peak.
pub fn bands(points: &[Point]) -> Vec<Band> {
    let mut below = vec![0.0f64; points.len()];
    let mut out = Vec::new();
    for c in Category::ALL {
        let gib: Vec<f64> = points.iter().map(|p| p.by_category.iter().find(|(k, _)| *k == c).map_or(0.0, |(_, b)| b.gib())).collect();
        if gib.iter().all(|&v| v == 0.0) {
            continue;
        }
        let edges = points.iter().zip(&gib).zip(below.iter_mut()).map(|((p, &v), lo)| {
            let e = (p.x as f64, *lo, *lo + v);
            *lo += v;
            e
        });
        out.push(Band { category: c, edges: edges.collect() });
    }
    out
}

/// Draws the chart onto `area` (any backend: canvas on the page, SVG in tests).
pub fn draw_batch_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, data: &BatchChart, theme: &Theme) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| ("sans-serif", theme.font(px)).into_font();
    if data.points.is_empty() {
        let (w, h) = area.dim_in_pixel();
        let style = font(14.0).color(&MUTED).pos(Pos::new(HPos::Center, VPos::Center));
        area.draw(&Text::new("No batch size in range can be estimated for this plan", (w as i32 / 2, h as i32 / 2), style))?;
        return Ok(());
    }

    let xs = data.points.iter().map(|p| p.x).chain(data.current.map(|c| c.0));
    let (x_lo, x_hi) = xs.fold((u64::MAX, 0), |(lo, hi), x| (lo.min(x.max(1)), hi.max(x.max(1))));
    let (x_lo, x_hi) = (x_lo as f64, (x_hi as f64).max(x_lo as f64 * 2.0));
    let tops = data.points.iter().map(|p| p.peak_allocated).chain(data.current.map(|c| c.1)).chain(data.capacity);
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
        .x_desc("Batch size")
        .y_desc("Allocated peak (GiB)")
        .label_style(font(12.0).color(&INK))
        .axis_desc_style(font(13.0).color(&INK))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.3}").trim_end_matches('0').trim_end_matches('.').to_string())
        .draw()?;

    for band in bands(data.points) {
        let color = category_color(band.category);
        let upper = band.edges.iter().map(|&(x, _, hi)| (x, hi));
        let lower = band.edges.iter().rev().map(|&(x, lo, _)| (x, lo));
        let outline: Vec<(f64, f64)> = upper.chain(lower).collect();
        let swatch = theme.px(5.0) as i32;
        chart
            .draw_series(std::iter::once(Polygon::new(outline, color.mix(0.85).filled())))?
            .label(band.category.label())
            .legend(move |(x, y)| Rectangle::new([(x, y - swatch), (x + 2 * swatch, y + swatch)], color.filled()));
    }

    let total = data.points.iter().map(|p| (p.x as f64, p.peak_allocated.gib()));
    chart.draw_series(LineSeries::new(total, INK.stroke_width(theme.px(1.5))))?;

    if let Some(cap) = data.capacity {
        let y = cap.gib();
        chart.draw_series(std::iter::once(PathElement::new(vec![(x_lo, y), (x_hi, y)], CAPACITY.stroke_width(theme.px(1.5)))))?;
        let style = font(12.0).color(&CAPACITY).pos(Pos::new(HPos::Right, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(format!("GPU capacity {cap}"), (x_hi, y), style)))?;
    }

    if let Some((batch, peak)) = data.current {
        let (x, y) = (batch.max(1) as f64, peak.gib());
        chart.draw_series(std::iter::once(PathElement::new(vec![(x, 0.0), (x, y_hi)], MARK.stroke_width(theme.px(1.0)))))?;
        chart.draw_series(std::iter::once(Circle::new((x, y), theme.px(4.0), MARK.filled())))?;
        // Label just above the point, away from the legend in the upper left (memory grows with
        // the batch), and inside the plot: right of the marker in the left half, left of it otherwise.
        let right_half = x.ln() - x_lo.ln() > (x_hi.ln() - x_lo.ln()) / 2.0;
        let h = if right_half { HPos::Right } else { HPos::Left };
        let style = font(12.0).color(&MARK).pos(Pos::new(h, VPos::Bottom));
        let label = format!("  batch {batch}: {peak}  ");
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
