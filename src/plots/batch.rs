//! Memory against a swept size (batch, resolution, sequence length): the allocated peak of each
//! point stacked by category (what is live at that point's peak), on a log axis, with the GPU's
//! capacity, the device total (dashed), the current value and a "largest that fits" marker.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, CAPACITY, FIT, INK, MARK};
use super::{
    draw_legend, draw_message, english_categories, frame, style_mesh, tick, MemUnit, PlotError,
    Swatch,
};
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;
use crate::plan::sweep::Point;

/// A marked value on the x axis, with the label drawn beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    pub x: u64,
    pub y: Bytes,
    pub label: String,
}

/// What a stacked chart shows; every number comes from the estimator, every text from the caller.
#[derive(Clone, Debug)]
pub struct StackedChart<'a> {
    /// A sweep in increasing x order.
    pub points: &'a [Point],
    pub x_desc: &'a str,
    pub y_desc: String,
    /// Legend names in [`Category::ALL`] order.
    pub categories: [&'a str; Category::COUNT],
    pub unit: MemUnit,
    /// The user's current value (red).
    pub current: Option<Marker>,
    /// The largest value that fits (green).
    pub best: Option<Marker>,
    /// The GPU's usable memory and its label.
    pub capacity: Option<(Bytes, String)>,
    /// Label of the dashed device-total line (`None`: not drawn).
    pub device_label: Option<&'a str>,
    /// Shown instead of a chart when there are no points.
    pub empty: &'a str,
    /// Top of the memory axis (`None`: the largest value); higher values are drawn flat at
    /// the top, so a sweep to batch 4096 does not squash the range that matters.
    pub y_max: Option<Bytes>,
}

impl<'a> StackedChart<'a> {
    /// A chart with English texts in GiB and nothing marked.
    pub fn new(points: &'a [Point], x_desc: &'a str) -> Self {
        StackedChart {
            points,
            x_desc,
            y_desc: "Allocated peak (GiB)".into(),
            categories: english_categories(),
            unit: MemUnit::GIB,
            current: None,
            best: None,
            capacity: None,
            device_label: None,
            empty: "Nothing in range can be estimated for this plan",
            y_max: None,
        }
    }
}

/// One category's band: for each sweep point, its x and the band's lower and upper edge in
/// GiB.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub category: Category,
    pub edges: Vec<(f64, f64, f64)>,
}

/// Stacks the categories of each point in [`Category::ALL`] order, leaving out categories that
/// are empty at every point. The top band's upper edge is the allocated peak.
pub fn bands(points: &[Point]) -> Vec<Band> {
    bands_in(points, MemUnit::GIB, f64::INFINITY)
}

fn bands_in(points: &[Point], unit: MemUnit, top: f64) -> Vec<Band> {
    let mut below = vec![0.0f64; points.len()];
    let mut out = Vec::new();
    for c in Category::ALL {
        let v: Vec<f64> = points
            .iter()
            .map(|p| {
                p.by_category
                    .iter()
                    .find(|(k, _)| *k == c)
                    .map_or(0.0, |(_, b)| unit.of(*b))
            })
            .collect();
        if v.iter().all(|&v| v == 0.0) {
            continue;
        }
        let edges = points
            .iter()
            .zip(&v)
            .zip(below.iter_mut())
            .map(|((p, &v), lo)| {
                let e = (p.x as f64, lo.min(top), (*lo + v).min(top));
                *lo += v;
                e
            });
        out.push(Band {
            category: c,
            edges: edges.collect(),
        });
    }
    out
}

/// Draws the chart onto `area` (any backend: canvas on the page, SVG in tests and exports).
pub fn draw_stacked_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    data: &StackedChart,
    theme: &Theme,
) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| theme.sans(px);
    if data.points.is_empty() {
        return draw_message(area, data.empty, theme);
    }
    let unit = data.unit;

    let xs = data
        .points
        .iter()
        .map(|p| p.x)
        .chain(data.current.iter().map(|c| c.x));
    let (x_lo, x_hi) = xs.fold((u64::MAX, 0), |(lo, hi), x| {
        (lo.min(x.max(1)), hi.max(x.max(1)))
    });
    let (x_lo, x_hi) = (x_lo as f64, (x_hi as f64).max(x_lo as f64 * 2.0));
    let tops = data
        .points
        .iter()
        .map(|p| p.peak_allocated)
        .chain(data.current.iter().map(|c| c.y))
        .chain(data.capacity.iter().map(|c| c.0));
    let dev_top = data
        .device_label
        .map(|_| {
            data.points
                .iter()
                .map(|p| p.device_total)
                .max()
                .unwrap_or_default()
        })
        .unwrap_or_default();
    // The device-total line may run far above the capacity; show it up to twice the capacity.
    let dev_top = match &data.capacity {
        Some((cap, _)) => dev_top.min(Bytes(cap.0.saturating_mul(2))),
        None => dev_top,
    };
    let y_hi = tops
        .chain(std::iter::once(dev_top))
        .map(|b| unit.of(b))
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let y_hi = data.y_max.map_or(y_hi, |m| y_hi.min(unit.of(m))) * 1.08;

    let mut chart = frame(area, theme).build_cartesian_2d((x_lo..x_hi).log_scale(), 0f64..y_hi)?;
    style_mesh(
        &mut chart.configure_mesh(),
        theme,
        data.x_desc,
        data.y_desc.as_str(),
    )
    .x_label_formatter(&|x| format!("{x:.0}"))
    .y_label_formatter(&|y| tick(*y))
    .draw()?;

    let mut legend: Vec<(&str, RGBColor, Swatch)> = Vec::new();
    for band in bands_in(data.points, unit, y_hi) {
        let color = category_color(band.category);
        let upper = band.edges.iter().map(|&(x, _, hi)| (x, hi));
        let lower = band.edges.iter().rev().map(|&(x, lo, _)| (x, lo));
        let outline: Vec<(f64, f64)> = upper.chain(lower).collect();
        chart.draw_series(std::iter::once(Polygon::new(
            outline,
            color.mix(0.85).filled(),
        )))?;
        legend.push((data.categories[band.category.index()], color, Swatch::Fill));
    }

    let total = data
        .points
        .iter()
        .map(|p| (p.x as f64, unit.of(p.peak_allocated).min(y_hi)));
    chart.draw_series(LineSeries::new(total, INK.stroke_width(theme.px(1.5))))?;

    if let Some(label) = data.device_label {
        let dev: Vec<(f64, f64)> = data
            .points
            .iter()
            .map(|p| (p.x as f64, unit.of(p.device_total).min(y_hi)))
            .collect();
        let dash = theme.px(5.0);
        chart.draw_series(DashedLineSeries::new(
            dev,
            dash,
            dash,
            INK.stroke_width(theme.px(1.0)),
        ))?;
        legend.push((label, INK, Swatch::Dashed));
    }

    if let Some((cap, label)) = &data.capacity {
        let y = unit.of(*cap).min(y_hi);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x_lo, y), (x_hi, y)],
            CAPACITY.stroke_width(theme.px(1.5)),
        )))?;
        // At the end of the line away from the current marker's label.
        let marker_right = data
            .current
            .as_ref()
            .is_some_and(|m| (m.x.max(1) as f64).ln() - x_lo.ln() > (x_hi.ln() - x_lo.ln()) / 2.0);
        let (x, h) = if marker_right {
            (x_lo, HPos::Left)
        } else {
            (x_hi, HPos::Right)
        };
        let style = font(12.0).color(&CAPACITY).pos(Pos::new(h, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(
            format!(" {label} "),
            (x, y),
            style,
        )))?;
    }

    draw_legend(
        area,
        chart.plotting_area().get_pixel_range(),
        &legend,
        false,
        theme,
    )?;
    // Markers last, so the legend never hides their labels.
    let mut mark = |m: &Marker, color: RGBColor, above: bool| -> Result<(), PlotError> {
        let (x, y) = (m.x.max(1) as f64, unit.of(m.y).min(y_hi));
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, y_hi)],
            color.stroke_width(theme.px(1.0)),
        )))?;
        chart.draw_series(std::iter::once(Circle::new(
            (x, y),
            theme.px(4.0),
            color.filled(),
        )))?;
        // Inside the plot: right of the marker in the left half, left of it otherwise; the
        // current batch's label above its point, the other one below, so they never overlap.
        let right_half = x.ln() - x_lo.ln() > (x_hi.ln() - x_lo.ln()) / 2.0;
        let h = if right_half { HPos::Right } else { HPos::Left };
        let (v, dy) = if above {
            (VPos::Bottom, -(theme.px(6.0) as i32))
        } else {
            (VPos::Top, theme.px(6.0) as i32)
        };
        let style = font(12.0).color(&color).pos(Pos::new(h, v));
        let label = format!("  {}  ", m.label);
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, y)) + Text::new(label, (0, dy), style),
        ))?;
        Ok(())
    };
    if let Some(b) = &data.best {
        mark(b, FIT, false)?;
    }
    if let Some(c) = &data.current {
        mark(c, MARK, true)?;
    }

    Ok(())
}
