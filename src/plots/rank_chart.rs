//! Per-GPU breakdown of a multi-GPU layout: one stacked bar per pipeline stage (every data- and
//! tensor-parallel replica of a stage holds the same bytes), split into parameters, gradients,
//! optimizer state, activations and the rest, with the peak rank marked and the GPU's capacity.
//! The bars are [`crate::estimator::parallel::RankReport::memory`], unchanged.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, CAPACITY, GRID, INK, MARK, MUTED};
use super::PlotError;
use crate::estimator::parallel::ParallelEstimate;
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;

/// The parts of a bar, bottom to top, and the category whose colour each takes.
pub const PARTS: [(&str, Category); 5] = [
    ("Parameters", Category::Params),
    ("Gradients", Category::Gradients),
    ("Optimizer state", Category::OptimizerState),
    ("Activations", Category::Activations),
    ("Buffers, temporaries, comm. buffers", Category::Buffers),
];

/// One pipeline rank's bar.
#[derive(Clone, Debug, PartialEq)]
pub struct RankBar {
    pub label: String,
    /// Bytes of each of [`PARTS`].
    pub parts: [u64; 5],
    /// What the device holds in all (reserved segments, workspaces, CUDA context).
    pub device_total: Bytes,
}

/// What the chart shows.
#[derive(Clone, Debug, PartialEq)]
pub struct RankChart {
    pub bars: Vec<RankBar>,
    /// Index in `bars` of the rank with the largest device total.
    pub peak: usize,
    pub capacity: Option<Bytes>,
}

impl RankChart {
    /// The bars of a multi-GPU estimate.
    pub fn from_estimate(e: &ParallelEstimate, capacity: Option<Bytes>) -> RankChart {
        let bars = e
            .ranks
            .iter()
            .map(|r| {
                let m = &r.memory;
                RankBar {
                    label: if e.ranks.len() == 1 { "every GPU".into() } else { format!("stage {}", r.stage) },
                    parts: [m.params_bytes, m.grads_bytes, m.optimizer_state_bytes, m.activations_bytes, m.other_bytes],
                    device_total: Bytes(m.device_total_bytes),
                }
            })
            .collect();
        RankChart { bars, peak: e.peak_rank, capacity }
    }
}

/// Draws the chart onto `area` (canvas on the page, SVG in tests).
pub fn draw_rank_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, data: &RankChart, theme: &Theme) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| ("sans-serif", theme.font(px)).into_font();
    if data.bars.is_empty() {
        let (w, h) = area.dim_in_pixel();
        let style = font(14.0).color(&MUTED).pos(Pos::new(HPos::Center, VPos::Center));
        area.draw(&Text::new("No rank to show", (w as i32 / 2, h as i32 / 2), style))?;
        return Ok(());
    }
    let n = data.bars.len();
    let tops = data.bars.iter().map(|b| b.device_total).chain(data.capacity);
    let y_hi = tops.map(Bytes::gib).fold(0.0f64, f64::max).max(1e-3) * 1.15;
    let labels: Vec<String> = data.bars.iter().map(|b| b.label.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .margin(theme.px(12.0))
        .x_label_area_size(theme.px(40.0))
        .y_label_area_size(theme.px(56.0))
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..y_hi)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(GRID)
        .light_line_style(GRID.mix(0.4))
        .axis_style(MUTED)
        .x_labels(n.min(16))
        .x_desc("Pipeline rank")
        .y_desc("Per-GPU memory (GiB)")
        .label_style(font(12.0).color(&INK))
        .axis_desc_style(font(13.0).color(&INK))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 { labels.get(i as usize).cloned().unwrap_or_default() } else { String::new() }
        })
        .y_label_formatter(&|y| format!("{y:.2}").trim_end_matches('0').trim_end_matches('.').to_string())
        .draw()?;

    let half = 0.35;
    for (k, (name, cat)) in PARTS.iter().enumerate() {
        let color = category_color(*cat);
        let rects: Vec<Rectangle<(f64, f64)>> = data
            .bars
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let lo: u64 = b.parts[..k].iter().sum();
                let hi = lo + b.parts[k];
                let x = i as f64;
                Rectangle::new([(x - half, Bytes(lo).gib()), (x + half, Bytes(hi).gib())], color.mix(0.85).filled())
            })
            .collect();
        let swatch = theme.px(5.0) as i32;
        chart
            .draw_series(rects)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - swatch), (x + 2 * swatch, y + swatch)], color.filled()));
    }
    // The device total above the allocated parts (reserved slack, workspaces, CUDA context).
    chart.draw_series(data.bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        PathElement::new(vec![(x - half, b.device_total.gib()), (x + half, b.device_total.gib())], INK.stroke_width(theme.px(1.5)))
    }))?;

    if let Some(b) = data.bars.get(data.peak) {
        let x = data.peak as f64;
        let y = b.device_total.gib();
        let style = font(12.0).color(&MARK).pos(Pos::new(HPos::Center, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(format!("peak rank: {}", b.device_total), (x, y + y_hi * 0.01), style)))?;
        chart.draw_series(std::iter::once(Rectangle::new([(x - half, 0.0), (x + half, y)], MARK.stroke_width(theme.px(2.0)))))?;
    }

    if let Some(cap) = data.capacity {
        let y = cap.gib();
        chart.draw_series(std::iter::once(PathElement::new(vec![(-0.5, y), (n as f64 - 0.5, y)], CAPACITY.stroke_width(theme.px(1.5)))))?;
        let style = font(12.0).color(&CAPACITY).pos(Pos::new(HPos::Right, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(format!("GPU capacity {cap}"), (n as f64 - 0.5, y), style)))?;
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
