//! The memory timeline of one training step, like PyTorch's memory viewer
//! (`torch.cuda.memory._dump_snapshot` → pytorch.org/memory_viz): live bytes after every event,
//! stacked by category, with the phases shaded (forward rising, backward falling, the optimizer
//! step) and the peak marked.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::theme::{category_color, Theme, CAPACITY, MARK, MUTED, PHASE_TINTS};
use super::{
    draw_legend, draw_message, english_categories, frame, style_mesh, tick, MemUnit, PlotError,
    Swatch,
};
use crate::estimator::timeline::{column_ranges, Category, Live, Phase};
use crate::estimator::units::Bytes;

/// A step's events reduced to at most a chart's width of columns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    /// Live bytes by category per column: the column's event with the largest total, so no
    /// peak is lost.
    pub live: Vec<[u64; Category::COUNT]>,
    /// Phases as `[start, end)` column ranges, in step order.
    pub spans: Vec<(Phase, usize, usize)>,
    /// The column holding the step's peak.
    pub peak: usize,
}

impl Columns {
    /// Columns already grouped: per column, its phase and the live bytes it shows.
    pub fn of(cols: impl IntoIterator<Item = (Phase, [u64; Category::COUNT])>) -> Columns {
        let mut out = Columns::default();
        let mut peak_total = 0;
        for (ph, live) in cols {
            let total = Live(live).total().0;
            if total > peak_total || out.live.is_empty() {
                peak_total = total;
                out.peak = out.live.len();
            }
            out.live.push(live);
            match out.spans.last_mut() {
                Some(s) if s.0 == ph => s.2 = out.live.len(),
                _ => out.spans.push((ph, out.live.len() - 1, out.live.len())),
            }
        }
        out
    }
}

/// Groups a step's events into at most `max_cols` columns that never straddle two phases
/// ([`column_ranges`]); each column shows its highest event (the first on ties), so no peak is
/// lost.
pub fn columns(
    events: impl IntoIterator<Item = (Phase, [u64; Category::COUNT])>,
    max_cols: usize,
) -> Columns {
    let events: Vec<_> = events.into_iter().collect();
    let total = |live: &[u64; Category::COUNT]| Live(*live).total();
    Columns::of(
        column_ranges(events.iter().map(|e| e.0), events.len(), max_cols)
            .into_iter()
            .map(|r| {
                let group = &events[r];
                let best = group.iter().fold(&group[0], |best, e| {
                    if total(&e.1) > total(&best.1) {
                        e
                    } else {
                        best
                    }
                });
                *best
            }),
    )
}

/// What the timeline chart shows.
#[derive(Clone, Debug)]
pub struct TimelineChart<'a> {
    pub columns: &'a Columns,
    /// Label of each phase, in [`Phase`] order (zero_grad, forward, backward, optimizer).
    pub phase_labels: [&'a str; 4],
    pub categories: [&'a str; Category::COUNT],
    pub unit: MemUnit,
    pub x_desc: &'a str,
    pub y_desc: String,
    pub peak_label: String,
    pub capacity: Option<(Bytes, String)>,
    pub empty: &'a str,
}

impl<'a> TimelineChart<'a> {
    pub fn new(columns: &'a Columns) -> Self {
        TimelineChart {
            columns,
            phase_labels: ["zero_grad", "forward", "backward", "optimizer"],
            categories: english_categories(),
            unit: MemUnit::GIB,
            x_desc: "Step events",
            y_desc: "Live memory (GiB)".into(),
            peak_label: "peak".into(),
            capacity: None,
            empty: "No timeline for this plan",
        }
    }
}

fn phase_index(p: Phase) -> usize {
    match p {
        Phase::ZeroGrad => 0,
        Phase::Forward => 1,
        Phase::Backward => 2,
        Phase::Optimizer => 3,
    }
}

pub fn draw_timeline_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    data: &TimelineChart,
    theme: &Theme,
) -> Result<(), PlotError> {
    area.fill(&WHITE)?;
    let font = |px: f64| theme.sans(px);
    let cols = &data.columns.live;
    if cols.is_empty() {
        return draw_message(area, data.empty, theme);
    }
    let unit = data.unit;
    let n = cols.len() as f64;
    let total = |c: &[u64; Category::COUNT]| c.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let top = cols
        .iter()
        .map(|c| unit.of(Bytes(total(c))))
        .fold(0.0, f64::max);
    // The capacity line only when it is near enough to matter; far above, it would flatten the
    // step's shape into the bottom of the chart.
    let cap = data
        .capacity
        .as_ref()
        .map(|c| unit.of(c.0))
        .filter(|&c| c <= 2.0 * top);
    let y_hi = top.max(cap.unwrap_or(0.0)).max(1e-3) * 1.12;

    let mut chart = frame(area, theme).build_cartesian_2d(0f64..n, 0f64..y_hi)?;

    // Phase tints first, under the mesh and the bands.
    for &(ph, start, end) in &data.columns.spans {
        let tint = match ph {
            Phase::ZeroGrad | Phase::Forward => PHASE_TINTS[0],
            Phase::Backward => PHASE_TINTS[1],
            Phase::Optimizer => PHASE_TINTS[2],
        };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(start as f64, 0.0), (end as f64, y_hi)],
            tint.filled(),
        )))?;
    }
    style_mesh(
        &mut chart.configure_mesh(),
        theme,
        data.x_desc,
        data.y_desc.as_str(),
    )
    .disable_x_mesh()
    .x_labels(0)
    .y_label_formatter(&|y| tick(*y))
    .draw()?;
    // Phase names under the axis, centred on their spans.
    let (px, py) = chart.plotting_area().get_pixel_range();
    let scale = (px.end - px.start) as f64 / n;
    for &(ph, start, end) in &data.columns.spans {
        if ph == Phase::ZeroGrad || end - start < cols.len() / 12 {
            continue;
        }
        let x = px.start + (((start + end) as f64 / 2.0) * scale) as i32;
        let style = font(12.0)
            .color(&MUTED)
            .pos(Pos::new(HPos::Center, VPos::Top));
        area.draw(&Text::new(
            data.phase_labels[phase_index(ph)].to_string(),
            (x, py.end + theme.px(4.0) as i32),
            style,
        ))?;
    }
    let mut below = vec![0.0f64; cols.len()];
    let mut legend: Vec<(&str, plotters::style::RGBColor, Swatch)> = Vec::new();
    for c in Category::ALL {
        let v: Vec<f64> = cols
            .iter()
            .map(|col| unit.of(Bytes(col[c.index()])))
            .collect();
        if v.iter().all(|&x| x == 0.0) {
            continue;
        }
        // Each column is a step of the area: flat across the column's width.
        let mut upper = Vec::with_capacity(2 * cols.len());
        let mut lower = Vec::with_capacity(2 * cols.len());
        for (i, (&val, lo)) in v.iter().zip(below.iter_mut()).enumerate() {
            let (x0, x1) = (i as f64, i as f64 + 1.0);
            upper.push((x0, *lo + val));
            upper.push((x1, *lo + val));
            lower.push((x0, *lo));
            lower.push((x1, *lo));
            *lo += val;
        }
        lower.reverse();
        upper.extend(lower);
        let color = category_color(c);
        chart.draw_series(std::iter::once(Polygon::new(
            upper,
            color.mix(0.85).filled(),
        )))?;
        legend.push((data.categories[c.index()], color, Swatch::Fill));
    }

    if let (Some((cap, label)), Some(_)) = (&data.capacity, cap) {
        let y = unit.of(*cap);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, y), (n, y)],
            CAPACITY.stroke_width(theme.px(1.5)),
        )))?;
        let style = font(12.0)
            .color(&CAPACITY)
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(label.clone(), (n, y), style)))?;
    }

    let p = data.columns.peak.min(cols.len() - 1);
    let (x, y) = (p as f64 + 0.5, unit.of(Bytes(total(&cols[p]))));
    chart.draw_series(std::iter::once(Circle::new(
        (x, y),
        theme.px(4.0),
        MARK.filled(),
    )))?;
    let h = if x > n / 2.0 { HPos::Right } else { HPos::Left };
    let style = font(12.0).color(&MARK).pos(Pos::new(h, VPos::Bottom));
    chart.draw_series(std::iter::once(
        EmptyElement::at((x, y))
            + Text::new(
                format!("  {}  ", data.peak_label),
                (0, -(theme.px(6.0) as i32)),
                style,
            ),
    ))?;

    draw_legend(
        area,
        chart.plotting_area().get_pixel_range(),
        &legend,
        false,
        theme,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_keep_the_peak_and_the_phases() {
        let one = |v: u64| {
            let mut a = [0u64; Category::COUNT];
            a[0] = v;
            a
        };
        let mut ev = Vec::new();
        for i in 0..100u64 {
            ev.push((Phase::Forward, one(i)));
        }
        for i in 0..50u64 {
            ev.push((Phase::Backward, one(200 - i)));
        }
        ev.push((Phase::Optimizer, one(10)));
        let c = columns(ev, 20);
        assert!(c.live.len() <= 22, "{} columns", c.live.len());
        assert_eq!(
            c.spans.iter().map(|s| s.0).collect::<Vec<_>>(),
            [Phase::Forward, Phase::Backward, Phase::Optimizer]
        );
        assert_eq!(c.live[c.peak][0], 200);
        assert_eq!(c.spans.last().unwrap().2, c.live.len());
        for w in c.spans.windows(2) {
            assert_eq!(w[0].2, w[1].1);
        }
        assert_eq!(columns(Vec::new(), 10), Columns::default());
    }
}
