//! Gradient checkpointing's trade: the allocated peak and the activation memory at the peak
//! (left axis) and the extra forward compute spent recomputing (right axis) against the number
//! of `checkpoint_sequential` segments k, with √N, "every block" and the current choice marked.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, COMPUTE, INK, MARK, MUTED};
use super::{draw_legend, draw_message, frame, style_mesh, tick, MemUnit, PlotError, Swatch};
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;

/// One checkpointing policy's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CkptPoint {
    /// Segments (1 = no checkpointing); "every block" sits at N.
    pub k: u64,
    pub peak: Bytes,
    /// Activations, inputs and backward temporaries at the peak.
    pub activations: Bytes,
    /// Extra compute as a fraction of a step without checkpointing.
    pub extra_compute: f64,
}

/// What the checkpoint chart shows.
#[derive(Clone, Debug)]
pub struct CheckpointChart<'a> {
    /// `checkpoint_sequential` with k segments, in increasing k (or the model's policies).
    pub points: &'a [CkptPoint],
    /// Every block checkpointed.
    pub block: Option<CkptPoint>,
    /// round(√N), the classic choice (Chen et al. 2016).
    pub sqrt_k: Option<u64>,
    /// The plan's choice.
    pub current: Option<CkptPoint>,
    pub unit: MemUnit,
    pub x_desc: &'a str,
    pub y_desc: String,
    pub y2_desc: &'a str,
    /// Legend: allocated peak, activation memory, extra compute.
    pub series: [&'a str; 3],
    pub block_label: &'a str,
    pub current_label: String,
    /// One line on the saving against no checkpointing, drawn at the top.
    pub saving: String,
    pub empty: &'a str,
}

impl<'a> CheckpointChart<'a> {
    /// A chart with English texts in GiB and nothing marked.
    pub fn new(points: &'a [CkptPoint]) -> Self {
        CheckpointChart {
            points,
            block: None,
            sqrt_k: None,
            current: None,
            unit: MemUnit::GIB,
            x_desc: "Checkpoint segments k",
            y_desc: "Memory (GiB)".into(),
            y2_desc: "Extra compute (%)",
            series: ["Allocated peak", "Activation memory", "Extra compute"],
            block_label: "every block",
            current_label: "current".into(),
            saving: String::new(),
            empty: "This model has no checkpointing to compare",
        }
    }
}

pub fn draw_checkpoint_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    data: &CheckpointChart,
    theme: &Theme,
) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| theme.sans(px);
    if data.points.is_empty() {
        return draw_message(area, data.empty, theme);
    }
    let unit = data.unit;
    let all = || {
        data.points
            .iter()
            .chain(data.block.iter())
            .chain(data.current.iter())
    };
    let x_hi = all().map(|p| p.k).max().unwrap_or(1).max(2) as f64;
    let y_hi = all().map(|p| unit.of(p.peak)).fold(0.0, f64::max).max(1e-3) * 1.15;
    let c_hi = (all().map(|p| p.extra_compute * 100.0).fold(0.0, f64::max) * 1.15).max(10.0);

    let mut chart = frame(area, theme)
        .margin_top(theme.px(28.0))
        .right_y_label_area_size(theme.px(52.0))
        .build_cartesian_2d(0.5f64..x_hi + 0.5, 0f64..y_hi)?
        .set_secondary_coord(0.5f64..x_hi + 0.5, 0f64..c_hi);
    style_mesh(
        &mut chart.configure_mesh(),
        theme,
        data.x_desc,
        data.y_desc.as_str(),
    )
    .x_label_formatter(&|x| format!("{x:.0}"))
    .y_label_formatter(&|y| tick(*y))
    .draw()?;
    chart
        .configure_secondary_axes()
        .axis_style(MUTED)
        .y_desc(data.y2_desc)
        .label_style(font(12.0).color(&COMPUTE))
        .axis_desc_style(font(13.0).color(&COMPUTE))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;

    if let Some(k) = data.sqrt_k {
        let x = k as f64;
        let dash = theme.px(4.0);
        chart.draw_series(DashedLineSeries::new(
            vec![(x, 0.0), (x, y_hi)],
            dash,
            dash,
            MUTED.stroke_width(theme.px(1.0)),
        ))?;
        let style = font(12.0)
            .color(&MUTED)
            .pos(Pos::new(HPos::Left, VPos::Top));
        chart.draw_series(std::iter::once(Text::new(
            format!(" √N = {k}"),
            (x, y_hi),
            style,
        )))?;
    }

    let r = theme.px(3.0);
    let act_color = category_color(Category::Activations);
    let peak: Vec<(f64, f64)> = data
        .points
        .iter()
        .map(|p| (p.k as f64, unit.of(p.peak)))
        .collect();
    let act: Vec<(f64, f64)> = data
        .points
        .iter()
        .map(|p| (p.k as f64, unit.of(p.activations)))
        .collect();
    let comp: Vec<(f64, f64)> = data
        .points
        .iter()
        .map(|p| (p.k as f64, p.extra_compute * 100.0))
        .collect();
    chart.draw_series(
        LineSeries::new(peak.clone(), INK.stroke_width(theme.px(2.0))).point_size(r),
    )?;
    chart.draw_series(LineSeries::new(act, act_color.stroke_width(theme.px(2.0))).point_size(r))?;
    let dash = theme.px(6.0);
    chart.draw_secondary_series(DashedLineSeries::new(
        comp,
        dash,
        theme.px(3.0),
        COMPUTE.stroke_width(theme.px(2.0)),
    ))?;

    if let Some(b) = data.block {
        let (x, y) = (b.k as f64, unit.of(b.peak));
        let corners = triangle(theme.px(6.0));
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, y)) + Polygon::new(corners.clone(), INK.filled()),
        ))?;
        chart.draw_secondary_series(std::iter::once(
            EmptyElement::at((x, b.extra_compute * 100.0))
                + Polygon::new(corners, COMPUTE.filled()),
        ))?;
        let style = font(12.0).color(&INK).pos(Pos::new(HPos::Right, VPos::Top));
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, y))
                + Text::new(
                    format!("{} ", data.block_label),
                    (0, theme.px(8.0) as i32),
                    style,
                ),
        ))?;
    }

    if let Some(c) = data.current {
        let (x, y) = (c.k as f64, unit.of(c.peak));
        chart.draw_series(std::iter::once(Circle::new(
            (x, y),
            theme.px(6.0),
            MARK.stroke_width(theme.px(2.0)),
        )))?;
        let right_half = x > (x_hi + 1.0) / 2.0;
        let h = if right_half { HPos::Right } else { HPos::Left };
        let style = font(12.0).color(&MARK).pos(Pos::new(h, VPos::Bottom));
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, y))
                + Text::new(
                    format!("  {}  ", data.current_label),
                    (0, -(theme.px(8.0) as i32)),
                    style,
                ),
        ))?;
    }

    let legend = [
        (data.series[0], INK, Swatch::Line),
        (data.series[1], act_color, Swatch::Line),
        (data.series[2], COMPUTE, Swatch::Dashed),
    ];
    draw_legend(
        area,
        chart.plotting_area().get_pixel_range(),
        &legend,
        true,
        theme,
    )?;

    if !data.saving.is_empty() {
        let style = font(13.0).color(&INK).pos(Pos::new(HPos::Left, VPos::Top));
        area.draw(&Text::new(
            data.saving.clone(),
            (theme.px(12.0) as i32, theme.px(6.0) as i32),
            style,
        ))?;
    }
    Ok(())
}

/// The corners of an upward triangle `r` pixels from its centre to each corner, as offsets.
/// plotters' `TriangleMarker` finds the same three points with `sin` and `cos`, which would bring
/// libm's trigonometry (some kilobytes) into the page for three constants.
fn triangle(r: u32) -> Vec<(i32, i32)> {
    let r = f64::from(r);
    let half_side = (r * 3f64.sqrt() / 2.0).round() as i32;
    let below = (r / 2.0).round() as i32;
    vec![(0, -(r as i32)), (-half_side, below), (half_side, below)]
}
