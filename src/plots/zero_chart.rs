//! Per-GPU memory against the number of GPUs, one line per data-parallel sharding scheme
//! (DDP = ZeRO-0, ZeRO-1/2/3, FSDP), with the GPU's capacity and the current layout marked. The
//! curves come from [`crate::ui::logic::parallel::zero_curves`] (full estimates of each layout); this
//! module only draws them.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{Theme, CAPACITY, MARK};
use super::{draw_legend, draw_message, frame, style_mesh, MemUnit, PanelWords, PlotError, Swatch};
use crate::estimator::units::Bytes;

/// One scheme's line: (GPUs in the layout, per-GPU device total) in increasing GPU order.
#[derive(Clone, Debug, PartialEq)]
pub struct ZeroCurve {
    /// "DDP (ZeRO-0)", "ZeRO-1", ..., "FSDP".
    pub label: String,
    pub points: Vec<(u64, Bytes)>,
}

/// What the chart shows; every number comes from the estimator.
#[derive(Clone, Copy, Debug)]
pub struct ZeroChart<'a> {
    pub curves: &'a [ZeroCurve],
    /// The plan's own layout: its GPU count and per-GPU device total.
    pub current: Option<(u64, Bytes)>,
    /// Usable memory of the chosen GPU.
    pub capacity: Option<Bytes>,
    /// The page's words and units (`None`: English in GiB).
    pub words: Option<&'a PanelWords>,
}

/// Line colours, one per scheme (Okabe–Ito, as the category palette).
const LINE: [RGBColor; 6] = [
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
];

/// Draws the chart onto `area` (canvas on the page, SVG in tests).
pub fn draw_zero_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    data: &ZeroChart,
    theme: &Theme,
) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| theme.sans(px);
    let w = data.words;
    let unit = w.map_or(MemUnit::GIB, |w| w.unit);
    let xs = data
        .curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .chain(data.current.map(|c| c.0));
    let (x_lo, x_hi) = xs.fold((u64::MAX, 0), |(lo, hi), x| {
        (lo.min(x.max(1)), hi.max(x.max(1)))
    });
    if x_hi == 0 {
        return draw_message(
            area,
            w.map_or("No layout of this plan can be estimated", |w| {
                w.empty.as_str()
            }),
            theme,
        );
    }
    let (x_lo, x_hi) = (x_lo as f64, (x_hi as f64).max(x_lo as f64 * 2.0));
    let tops = data
        .curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .chain(data.current.map(|c| c.1))
        .chain(data.capacity);
    let y_hi = tops.map(|b| unit.of(b)).fold(0.0f64, f64::max).max(1e-3) * 1.1;

    let mut chart = frame(area, theme).build_cartesian_2d((x_lo..x_hi).log_scale(), 0f64..y_hi)?;
    style_mesh(
        &mut chart.configure_mesh(),
        theme,
        w.map_or("GPUs", |w| w.x_desc.as_str()),
        w.map_or("Per-GPU memory (GiB)", |w| w.y_desc.as_str()),
    )
    .x_label_formatter(&|x| format!("{x:.0}"))
    .y_label_formatter(&|y| {
        format!("{y:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    })
    .draw()?;

    let mut legend = Vec::new();
    for (i, curve) in data.curves.iter().enumerate() {
        if curve.points.is_empty() {
            continue;
        }
        let color = LINE[i % LINE.len()];
        let pts: Vec<(f64, f64)> = curve
            .points
            .iter()
            .map(|&(x, b)| (x as f64, unit.of(b)))
            .collect();
        chart.draw_series(LineSeries::new(
            pts.clone(),
            color.stroke_width(theme.px(2.0)),
        ))?;
        legend.push((curve.label.as_str(), color, Swatch::Line));
        chart.draw_series(
            pts.into_iter()
                .map(|p| Circle::new(p, theme.px(3.0), color.filled())),
        )?;
    }

    if let Some(cap) = data.capacity {
        let y = unit.of(cap);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x_lo, y), (x_hi, y)],
            CAPACITY.stroke_width(theme.px(1.5)),
        )))?;
        let style = font(12.0)
            .color(&CAPACITY)
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        let label = w
            .and_then(|w| w.capacity.clone())
            .unwrap_or_else(|| format!("GPU capacity {cap}"));
        chart.draw_series(std::iter::once(Text::new(label, (x_hi, y), style)))?;
    }

    if let Some((gpus, total)) = data.current {
        let (x, y) = (gpus.max(1) as f64, unit.of(total));
        chart.draw_series(std::iter::once(Circle::new(
            (x, y),
            theme.px(6.0),
            MARK.stroke_width(theme.px(2.0)),
        )))?;
        let right_half = x.ln() - x_lo.ln() > (x_hi.ln() - x_lo.ln()) / 2.0;
        let style = font(12.0).color(&MARK).pos(Pos::new(
            if right_half { HPos::Right } else { HPos::Left },
            VPos::Bottom,
        ));
        let label = match w.and_then(|w| w.mark.as_deref()) {
            Some(m) => format!("  {m}  "),
            None => format!(
                "  your layout, {gpus} GPU{}: {total}  ",
                if gpus == 1 { "" } else { "s" }
            ),
        };
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, y)) + Text::new(label, (0, -(theme.px(8.0) as i32)), style),
        ))?;
    }

    draw_legend(
        area,
        chart.plotting_area().get_pixel_range(),
        &legend,
        true,
        theme,
    )?;
    Ok(())
}
