//! Activation memory per layer: what each block of the model keeps for backward at the end of
//! forward, one bar per module in forward order, the largest highlighted.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, MARK};
use super::{draw_message, frame, style_mesh, tick, MemUnit, PlotError};
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;

/// What the layers chart shows.
#[derive(Clone, Debug)]
pub struct LayersChart<'a> {
    /// (module, saved bytes) in forward order.
    pub layers: &'a [(String, Bytes)],
    pub unit: MemUnit,
    pub x_desc: &'a str,
    pub y_desc: String,
    /// Label of the largest bar ("largest: layer4 1.2 GiB").
    pub max_label: String,
    pub empty: &'a str,
}

impl<'a> LayersChart<'a> {
    pub fn new(layers: &'a [(String, Bytes)]) -> Self {
        LayersChart {
            layers,
            unit: MemUnit::GIB,
            x_desc: "Layer",
            y_desc: "Saved activations (GiB)".into(),
            max_label: String::new(),
            empty: "No activations are saved for backward",
        }
    }
}

/// A module name short enough for an axis label.
fn short(name: &str) -> String {
    if name.chars().count() <= 14 {
        name.to_string()
    } else {
        let tail: String = name
            .chars()
            .rev()
            .take(12)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    }
}

pub fn draw_layers_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    data: &LayersChart,
    theme: &Theme,
) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| theme.sans(px);
    if data.layers.is_empty() || data.layers.iter().all(|(_, b)| b.0 == 0) {
        return draw_message(area, data.empty, theme);
    }
    let unit = data.unit;
    let n = data.layers.len() as i32;
    let y_hi = data
        .layers
        .iter()
        .map(|(_, b)| unit.of(*b))
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.15;
    let (imax, _) = data
        .layers
        .iter()
        .enumerate()
        .max_by_key(|(_, (_, b))| *b)
        .unwrap_or((0, &(String::new(), Bytes::ZERO)));

    let mut chart = frame(area, theme).build_cartesian_2d((0..n).into_segmented(), 0f64..y_hi)?;
    let names = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => data
            .layers
            .get(*i as usize)
            .map(|(s, _)| short(s))
            .unwrap_or_default(),
        SegmentValue::Last => String::new(),
    };
    style_mesh(
        &mut chart.configure_mesh(),
        theme,
        data.x_desc,
        data.y_desc.as_str(),
    )
    .disable_x_mesh()
    .x_labels((n as usize).min(8))
    .x_label_formatter(&names)
    .y_label_formatter(&|y| tick(*y))
    .draw()?;

    let color = category_color(Category::Activations);
    chart.draw_series(data.layers.iter().enumerate().map(|(i, (_, b))| {
        let c = if i == imax { MARK } else { color };
        let mut bar = Rectangle::new(
            [
                (SegmentValue::Exact(i as i32), 0.0),
                (SegmentValue::Exact(i as i32 + 1), unit.of(*b)),
            ],
            c.mix(0.9).filled(),
        );
        bar.set_margin(0, 0, 1, 1);
        bar
    }))?;
    if !data.max_label.is_empty() {
        let h = if imax as i32 > n / 2 {
            HPos::Right
        } else {
            HPos::Left
        };
        let style = font(12.0).color(&MARK).pos(Pos::new(h, VPos::Bottom));
        let at = (
            SegmentValue::CenterOf(imax as i32),
            unit.of(data.layers[imax].1),
        );
        chart.draw_series(std::iter::once(
            EmptyElement::at(at)
                + Text::new(
                    format!(" {} ", data.max_label),
                    (0, -(theme.px(4.0) as i32)),
                    style,
                ),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_names_keep_their_end() {
        assert_eq!(super::short("layer1"), "layer1");
        assert_eq!(super::short("model.layers.12.mlp"), "…ayers.12.mlp");
    }
}
