//! Per-GPU breakdown of a multi-GPU layout: one stacked bar per pipeline stage (every data- and
//! tensor-parallel replica of a stage holds the same bytes), split into parameters, gradients,
//! optimizer state, activations and the rest, with the peak rank marked and the GPU's capacity.
//! The bars are [`crate::estimator::parallel::RankReport::memory`], unchanged.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, CAPACITY, INK, MARK};
use super::{draw_legend, draw_message, frame, style_mesh, MemUnit, PanelWords, PlotError, Swatch};
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
    /// The page's words and units (`None`: English in GiB).
    pub words: Option<PanelWords>,
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
                    label: if e.ranks.len() == 1 {
                        "every GPU".into()
                    } else {
                        format!("stage {}", r.stage)
                    },
                    parts: [
                        m.params_bytes,
                        m.grads_bytes,
                        m.optimizer_state_bytes,
                        m.activations_bytes,
                        m.other_bytes,
                    ],
                    device_total: Bytes(m.device_total_bytes),
                }
            })
            .collect();
        RankChart {
            bars,
            peak: e.peak_rank,
            capacity,
            words: None,
        }
    }
}

/// Draws the chart onto `area` (canvas on the page, SVG in tests).
pub fn draw_rank_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    data: &RankChart,
    theme: &Theme,
) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| theme.sans(px);
    let w = data.words.as_ref();
    let unit = w.map_or(MemUnit::GIB, |w| w.unit);
    if data.bars.is_empty() {
        return draw_message(
            area,
            w.map_or("No rank to show", |w| w.empty.as_str()),
            theme,
        );
    }
    let n = data.bars.len();
    let tops = data
        .bars
        .iter()
        .map(|b| b.device_total)
        .chain(data.capacity);
    let y_hi = tops.map(|b| unit.of(b)).fold(0.0f64, f64::max).max(1e-3) * 1.15;
    let labels: Vec<String> = data.bars.iter().map(|b| b.label.clone()).collect();
    let mut chart = frame(area, theme).build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..y_hi)?;
    style_mesh(
        &mut chart.configure_mesh(),
        theme,
        w.map_or("Pipeline rank", |w| w.x_desc.as_str()),
        w.map_or("Per-GPU memory (GiB)", |w| w.y_desc.as_str()),
    )
    .disable_x_mesh()
    .x_labels(n.min(16))
    .x_label_formatter(&|x| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    })
    .y_label_formatter(&|y| {
        format!("{y:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    })
    .draw()?;

    let half = 0.35;
    let mut legend = Vec::new();
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
                Rectangle::new(
                    [
                        (x - half, unit.of(Bytes(lo))),
                        (x + half, unit.of(Bytes(hi))),
                    ],
                    color.mix(0.85).filled(),
                )
            })
            .collect();
        chart.draw_series(rects)?;
        legend.push((
            w.and_then(|w| w.legend.get(k))
                .map_or(*name, |s| s.as_str()),
            color,
            Swatch::Fill,
        ));
    }
    // The device total above the allocated parts (reserved slack, workspaces, CUDA context).
    chart.draw_series(data.bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        PathElement::new(
            vec![
                (x - half, unit.of(b.device_total)),
                (x + half, unit.of(b.device_total)),
            ],
            INK.stroke_width(theme.px(1.5)),
        )
    }))?;

    if let Some(b) = data.bars.get(data.peak) {
        let x = data.peak as f64;
        let y = unit.of(b.device_total);
        let style = font(12.0)
            .color(&MARK)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        let label = w
            .and_then(|w| w.mark.clone())
            .unwrap_or_else(|| format!("peak rank: {}", b.device_total));
        chart.draw_series(std::iter::once(Text::new(
            label,
            (x, y + y_hi * 0.01),
            style,
        )))?;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x - half, 0.0), (x + half, y)],
            MARK.stroke_width(theme.px(2.0)),
        )))?;
    }

    if let Some(cap) = data.capacity {
        let y = unit.of(cap);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(-0.5, y), (n as f64 - 0.5, y)],
            CAPACITY.stroke_width(theme.px(1.5)),
        )))?;
        let style = font(12.0)
            .color(&CAPACITY)
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        let label = w
            .and_then(|w| w.capacity.clone())
            .unwrap_or_else(|| format!("GPU capacity {cap}"));
        chart.draw_series(std::iter::once(Text::new(
            label,
            (n as f64 - 0.5, y),
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
    Ok(())
}
