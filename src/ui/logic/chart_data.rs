//! The five charts' data, assembled from the page's models, with their texts in the page's
//! language: what to draw ([`ChartData::draw`], on a canvas or to SVG for export and tests),
//! the text alternative ([`ChartData::table`]) and a one-line summary for screen readers.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::estimator::config::Checkpointing;
use crate::estimator::timeline::{Category, Phase};
use crate::estimator::units::Bytes;
use crate::plan::sweep::{log_points, Point};
use crate::plan::Plan;
use crate::plots::timeline::Columns;
use crate::plots::{
    draw_checkpoint_chart, draw_layers_chart, draw_stacked_chart, draw_timeline_chart,
    CheckpointChart, CkptPoint, LayersChart, Marker, MemUnit, PlotError, StackedChart, Theme,
    TimelineChart,
};
use crate::presets::gpus::Gpu;

use super::ckpt_info::CkptInfo;
use super::i18n::{category_label, charts, fmt_bytes, fmt_pct, phase_label, Lang, Msg, Units};
use super::state::{self, InputSpec, BATCH_MAX, BATCH_MIN};
use super::url::ChartKind;
use super::workbench::{BatchModel, Numbers};

/// Points of the batch chart.
pub const BATCH_POINTS: usize = 40;

/// The sizes the length chart sweeps (the input slider's positions).
pub fn length_plans(plan: &Plan) -> Vec<Plan> {
    state::input_spec(plan)
        .positions()
        .into_iter()
        .map(|x| state::with_input_size(plan, x))
        .collect()
}

/// round(√N) as `checkpoint_sequential`'s `sqrt` mode uses it.
pub fn sqrt_k(blocks: u64) -> u64 {
    crate::estimator::checkpoint::sqrt_segments(blocks as usize) as u64
}

/// The policies the checkpoint chart compares, as `(k, policy)`: k segments of
/// `checkpoint_sequential` (1 = none) where the model has them, else its own policies.
pub fn ckpt_policies(plan: &Plan, info: &CkptInfo) -> Vec<(u64, Checkpointing)> {
    let n = info.blocks;
    let mut v: Vec<(u64, Checkpointing)> = vec![(1, Checkpointing::None)];
    if info.segments && n >= 2 {
        let mut ks: Vec<u64> = if n <= 16 {
            (2..=n).collect()
        } else {
            [2u64, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
                .into_iter()
                .filter(|&k| k < n)
                .chain([n])
                .collect()
        };
        // A handful of values, kept in order as they come (a sort of `u64` would add its own
        // copy of the sorting code to the page's first load).
        let mut put = |k: u64| {
            let at = ks.partition_point(|&x| x < k);
            if ks.get(at) != Some(&k) {
                ks.insert(at, k);
            }
        };
        put(sqrt_k(n));
        if let Checkpointing::Segments(k) = plan.ckpt {
            if (2..=n).contains(&(k as u64)) {
                put(k as u64);
            }
        }
        v.extend(
            ks.into_iter()
                .filter(|&k| k >= 2)
                .map(|k| (k, Checkpointing::Segments(k as u32))),
        );
    } else {
        if info.stages > 0 && info.stages != info.blocks {
            v.push((info.stages, Checkpointing::Stage));
        }
        if n > 0 {
            v.push((n, Checkpointing::Block));
        }
    }
    v
}

/// The plans of the checkpoint chart (with "every block" where segments are the axis).
pub fn ckpt_plans(plan: &Plan, info: &CkptInfo) -> Vec<Plan> {
    let mut v: Vec<Plan> = ckpt_policies(plan, info)
        .into_iter()
        .map(|(_, c)| Plan {
            ckpt: c,
            ..plan.clone()
        })
        .collect();
    if info.segments && info.blocks > 0 {
        v.push(Plan {
            ckpt: Checkpointing::Block,
            ..plan.clone()
        });
    }
    v
}

/// The x position of the plan's own policy on the checkpoint chart.
pub fn ckpt_x(c: Checkpointing, info: &CkptInfo) -> u64 {
    match c {
        Checkpointing::None => 1,
        Checkpointing::Stage => info.stages,
        Checkpointing::Block => info.blocks,
        Checkpointing::Sqrt => sqrt_k(info.blocks),
        Checkpointing::Segments(k) => k as u64,
    }
}

/// Data of the memory-against-batch chart.
#[derive(Clone, Debug)]
pub struct BatchData {
    pub points: Vec<Point>,
    pub current: Option<(u64, Bytes)>,
    /// The largest batch that fits, and its allocated peak.
    pub best: Option<(u64, Bytes)>,
    pub capacity: Option<(Bytes, &'static str)>,
}

/// Data of the memory-against-input-size chart.
#[derive(Clone, Debug)]
pub struct LengthData {
    pub points: Vec<Point>,
    pub spec: InputSpec,
    pub current: Option<(u64, Bytes)>,
    pub capacity: Option<(Bytes, &'static str)>,
    /// Points still being simulated.
    pub pending: usize,
}

/// Data of the checkpoint chart.
#[derive(Clone, Debug)]
pub struct CkptData {
    pub points: Vec<CkptPoint>,
    pub block: Option<CkptPoint>,
    pub sqrt_k: Option<u64>,
    pub current: Option<CkptPoint>,
    pub current_policy: Checkpointing,
    pub pending: usize,
}

/// Data of the timeline chart.
#[derive(Clone, Debug)]
pub struct TimelineData {
    pub columns: Columns,
    pub capacity: Option<(Bytes, &'static str)>,
}

/// Data of the layers chart.
#[derive(Clone, Debug)]
pub struct LayersData {
    pub layers: Vec<(String, Bytes)>,
}

/// Any chart's data.
#[derive(Clone, Debug)]
pub enum ChartData {
    Batch(BatchData),
    Length(LengthData),
    Checkpoint(CkptData),
    Timeline(TimelineData),
    Layers(LayersData),
}

/// The batch sizes the batch chart shows.
pub fn batch_xs() -> Vec<u64> {
    log_points(BATCH_MIN, BATCH_MAX, BATCH_POINTS)
}

/// The batch chart's points (they do not depend on the current batch).
pub fn batch_points(model: &BatchModel, gpu: Option<&Gpu>) -> Vec<Point> {
    batch_xs()
        .into_iter()
        .map(|b| model.point(b, b, gpu))
        .collect()
}

pub fn batch_data(
    points: Vec<Point>,
    current: Option<&Numbers>,
    best: Option<u64>,
    model: &BatchModel,
    gpu: Option<&Gpu>,
) -> BatchData {
    BatchData {
        points,
        current: current.map(|n| (n.batch, n.peak)),
        best: best.map(|b| (b, model.at(b, gpu).peak)),
        capacity: gpu.map(|g| (g.memory, g.name)),
    }
}

/// The length chart from whichever of its points are simulated (`numbers_of` gives `None` for
/// the others).
pub fn length_data(
    plan: &Plan,
    current: Option<&Numbers>,
    gpu: Option<&Gpu>,
    numbers_of: &dyn Fn(&Plan) -> Option<Numbers>,
) -> LengthData {
    let mut pending = 0;
    let mut points = Vec::new();
    for p in length_plans(plan) {
        match numbers_of(&p) {
            Some(n) => points.push(point(state::input_size(&p), &n)),
            None => pending += 1,
        }
    }
    LengthData {
        points,
        spec: state::input_spec(plan),
        current: current.map(|n| (state::input_size(plan), n.peak)),
        capacity: gpu.map(|g| (g.memory, g.name)),
        pending,
    }
}

fn point(x: u64, n: &Numbers) -> Point {
    Point {
        x,
        peak_allocated: n.peak,
        device_total: n.device_total,
        by_category: Category::ALL.iter().map(|&c| (c, n.category(c))).collect(),
        recompute_flops: n.recompute_flops,
        forward_flops: n.forward_flops,
    }
}

fn ckpt_point(k: u64, n: &Numbers) -> CkptPoint {
    CkptPoint {
        k,
        peak: n.peak,
        activations: n.activation_memory(),
        extra_compute: n.extra_compute(),
    }
}

pub fn ckpt_data(
    plan: &Plan,
    info: &CkptInfo,
    current: Option<&Numbers>,
    numbers_of: &dyn Fn(&Plan) -> Option<Numbers>,
) -> CkptData {
    let mut pending = 0;
    let mut points = Vec::new();
    for (k, c) in ckpt_policies(plan, info) {
        match numbers_of(&Plan {
            ckpt: c,
            ..plan.clone()
        }) {
            Some(n) => points.push(ckpt_point(k, &n)),
            None => pending += 1,
        }
    }
    let block = if info.segments && info.blocks > 0 {
        let n = numbers_of(&Plan {
            ckpt: Checkpointing::Block,
            ..plan.clone()
        });
        if n.is_none() {
            pending += 1;
        }
        n.map(|n| ckpt_point(info.blocks, &n))
    } else {
        None
    };
    CkptData {
        points,
        block,
        sqrt_k: (info.segments && info.blocks >= 2).then(|| sqrt_k(info.blocks)),
        current: current
            .filter(|_| info.any())
            .map(|n| ckpt_point(ckpt_x(plan.ckpt, info), n)),
        current_policy: plan.ckpt,
        pending,
    }
}

pub fn timeline_data(model: &BatchModel, batch: u64, gpu: Option<&Gpu>) -> TimelineData {
    TimelineData {
        columns: Columns::of(model.timeline_at(batch)),
        capacity: gpu.map(|g| (g.memory, g.name)),
    }
}

pub fn layers_data(model: &BatchModel, batch: u64) -> LayersData {
    LayersData {
        layers: model.layers_at(batch),
    }
}

/// The top of a stacked chart's memory axis: twice the capacity, or well above the current value
/// if that is higher.
fn focus(capacity: Option<Bytes>, current: Option<Bytes>) -> Option<Bytes> {
    let cap = capacity?;
    Some(Bytes(
        cap.0
            .saturating_mul(2)
            .max(current.map_or(0, |c| c.0.saturating_add(c.0 / 4))),
    ))
}

/// A chart's text alternative: column headers and rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// What the chart code is asked: a chart's data from the numbers it is drawn from, or a chart's
/// table. Charts sit below the first screen, so a `lazy-chunks` build fetches this code with the
/// first chart that comes into view ([`load`]), not with the first screen.
#[derive(Clone, Copy)]
pub enum ChartAsk<'a> {
    /// The batch chart's sweep: one point per batch size of [`batch_xs`].
    BatchPoints {
        model: &'a BatchModel,
        gpu: Option<&'a Gpu>,
    },
    Batch {
        points: &'a [Point],
        current: Option<&'a Numbers>,
        best: Option<u64>,
        model: &'a BatchModel,
        gpu: Option<&'a Gpu>,
    },
    Length {
        plan: &'a Plan,
        current: Option<&'a Numbers>,
        gpu: Option<&'a Gpu>,
        numbers_of: &'a dyn Fn(&Plan) -> Option<Numbers>,
    },
    Checkpoint {
        plan: &'a Plan,
        info: &'a CkptInfo,
        current: Option<&'a Numbers>,
        numbers_of: &'a dyn Fn(&Plan) -> Option<Numbers>,
    },
    Timeline {
        model: &'a BatchModel,
        batch: u64,
        gpu: Option<&'a Gpu>,
    },
    Layers {
        model: &'a BatchModel,
        batch: u64,
    },
    Table {
        data: &'a ChartData,
        lang: Lang,
        units: Units,
    },
}

/// What the chart code answers.
pub enum ChartAnswer {
    Points(Vec<Point>),
    Data(ChartData),
    Table(Table),
}

fn answer(ask: ChartAsk<'_>) -> ChartAnswer {
    match ask {
        ChartAsk::BatchPoints { model, gpu } => ChartAnswer::Points(batch_points(model, gpu)),
        ChartAsk::Batch {
            points,
            current,
            best,
            model,
            gpu,
        } => ChartAnswer::Data(ChartData::Batch(batch_data(
            points.to_vec(),
            current,
            best,
            model,
            gpu,
        ))),
        ChartAsk::Length {
            plan,
            current,
            gpu,
            numbers_of,
        } => ChartAnswer::Data(ChartData::Length(length_data(
            plan, current, gpu, numbers_of,
        ))),
        ChartAsk::Checkpoint {
            plan,
            info,
            current,
            numbers_of,
        } => ChartAnswer::Data(ChartData::Checkpoint(ckpt_data(
            plan, info, current, numbers_of,
        ))),
        ChartAsk::Timeline { model, batch, gpu } => {
            ChartAnswer::Data(ChartData::Timeline(timeline_data(model, batch, gpu)))
        }
        ChartAsk::Layers { model, batch } => {
            ChartAnswer::Data(ChartData::Layers(layers_data(model, batch)))
        }
        ChartAsk::Table { data, lang, units } => ChartAnswer::Table(data.table_now(lang, units)),
    }
}

crate::lazy_chunk!(chart_data, chart_data_split, chart_data_preload, fn answer(ChartAsk<'_>) -> ChartAnswer);

/// A chart's data; `None` until the chart code is here ([`load`]).
pub fn data(ask: ChartAsk<'_>) -> Option<ChartData> {
    match call(ask) {
        Ok(ChartAnswer::Data(d)) => Some(d),
        _ => None,
    }
}

/// The batch chart's sweep; `None` until the chart code is here ([`load`]).
pub fn points(model: &BatchModel, gpu: Option<&Gpu>) -> Option<Vec<Point>> {
    match call(ChartAsk::BatchPoints { model, gpu }) {
        Ok(ChartAnswer::Points(p)) => Some(p),
        _ => None,
    }
}

pub(crate) fn unit_of(units: Units) -> MemUnit {
    match units {
        Units::Binary => MemUnit::GIB,
        Units::Decimal => MemUnit::GB,
    }
}

fn categories(lang: Lang) -> [&'static str; Category::COUNT] {
    Category::ALL.map(|c| category_label(c, lang))
}

/// The checkpoint chart's label of the plan's own policy. Every stage is not k segments of
/// `checkpoint_sequential` (each stage is wrapped, the last one too, and the stages differ in
/// size), so where it is drawn at k = the number of stages it says which policy it is.
pub fn ckpt_current_label(c: Checkpointing, lang: Lang) -> &'static str {
    match c {
        Checkpointing::Stage => Msg::CkptYourChoiceStage.t(lang),
        _ => Msg::CkptYourChoice.t(lang),
    }
}

impl ChartData {
    pub fn kind(&self) -> ChartKind {
        match self {
            ChartData::Batch(_) => ChartKind::Batch,
            ChartData::Length(_) => ChartKind::Length,
            ChartData::Checkpoint(_) => ChartKind::Checkpoint,
            ChartData::Timeline(_) => ChartKind::Timeline,
            ChartData::Layers(_) => ChartKind::Layers,
        }
    }

    /// Draws the chart on any backend, its texts in `lang`.
    pub fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        lang: Lang,
        units: Units,
        theme: &Theme,
    ) -> Result<(), PlotError> {
        let unit = unit_of(units);
        let b = |x: Bytes| fmt_bytes(x, units);
        let cap_label = |c: &Option<(Bytes, &'static str)>| {
            c.map(|(m, name)| (m, format!("{} {name} {}", Msg::Capacity.t(lang), b(m))))
        };
        let peak_axis = format!("{} ({})", Msg::Peak.t(lang), unit.name);
        match self {
            ChartData::Batch(d) => {
                // Up to where memory leaves the chart's range (well past the GPU), not to 4096.
                let y_max = focus(d.capacity.map(|c| c.0), d.current.map(|c| c.1));
                let keep = d
                    .current
                    .map_or(1, |c| c.0)
                    .max(d.best.map_or(1, |b| b.0))
                    .max(16);
                let end = match y_max {
                    Some(m) => d
                        .points
                        .iter()
                        .position(|p| p.x >= keep && p.peak_allocated > m)
                        .map_or(d.points.len(), |i| i + 1),
                    None => d.points.len(),
                };
                let mut c = StackedChart::new(&d.points[..end], Msg::Batch.t(lang));
                c.y_desc = peak_axis;
                c.categories = categories(lang);
                c.unit = unit;
                c.current = d.current.map(|(x, y)| Marker {
                    x,
                    y,
                    label: format!("{} {x}: {}", Msg::Batchs.t(lang), b(y)),
                });
                c.best = d.best.map(|(x, y)| Marker {
                    x,
                    y,
                    label: format!("{}: {x}", Msg::Largest.t(lang)),
                });
                c.capacity = cap_label(&d.capacity);
                c.device_label = Some(Msg::DeviceLine.t(lang));
                c.empty = Msg::NoBatchInRange.t(lang);
                c.y_max = y_max;
                draw_stacked_chart(area, &c, theme)
            }
            ChartData::Length(d) => {
                let x_desc = if d.spec.is_image() {
                    Msg::Resolution.t(lang)
                } else {
                    Msg::SeqLen.t(lang)
                };
                let mut c = StackedChart::new(&d.points, x_desc);
                c.y_desc = peak_axis;
                c.categories = categories(lang);
                c.unit = unit;
                c.current = d.current.map(|(x, y)| Marker {
                    x,
                    y,
                    label: format!("{x}: {}", b(y)),
                });
                c.capacity = cap_label(&d.capacity);
                c.device_label = Some(Msg::DeviceLine.t(lang));
                c.empty = if d.pending > 0 {
                    Msg::Loading.t(lang)
                } else {
                    Msg::NoInputSizeInRange.t(lang)
                };
                c.y_max = focus(d.capacity.map(|c| c.0), d.current.map(|c| c.1));
                draw_stacked_chart(area, &c, theme)
            }
            ChartData::Checkpoint(d) => {
                let mut c = CheckpointChart::new(&d.points);
                c.block = d.block;
                c.sqrt_k = d.sqrt_k;
                c.current = d.current;
                c.unit = unit;
                c.x_desc = Msg::CheckpointSegmentsAxis.t(lang);
                c.y_desc = format!("{} ({})", Msg::Memory.t(lang), unit.name);
                c.y2_desc = Msg::ExtraComputeAxis.t(lang);
                c.series = [
                    Msg::Peak.t(lang),
                    Msg::ActivationMemoryLegend.t(lang),
                    Msg::ExtraComputeLegend.t(lang),
                ];
                c.block_label = Msg::EveryBlock.t(lang);
                c.current_label = ckpt_current_label(d.current_policy, lang).into();
                c.saving = self.ckpt_saving(lang, units).unwrap_or_default();
                c.empty = if d.pending > 0 {
                    Msg::Loading.t(lang)
                } else {
                    Msg::NoCheckpointingToCompare.t(lang)
                };
                draw_checkpoint_chart(area, &c, theme)
            }
            ChartData::Timeline(d) => {
                let mut c = TimelineChart::new(&d.columns);
                c.phase_labels = [
                    Phase::ZeroGrad,
                    Phase::Forward,
                    Phase::Backward,
                    Phase::Optimizer,
                ]
                .map(|p| phase_label(p, lang));
                c.categories = categories(lang);
                c.unit = unit;
                c.x_desc = Msg::StepEventsAxis.t(lang);
                c.y_desc = format!("{} ({})", Msg::LiveMemory.t(lang), unit.name);
                let peak = d
                    .columns
                    .live
                    .get(d.columns.peak)
                    .map(|c| Bytes(c.iter().sum()))
                    .unwrap_or_default();
                c.peak_label = format!("{} {}", Msg::PeakWord.t(lang), b(peak));
                c.capacity = cap_label(&d.capacity);
                draw_timeline_chart(area, &c, theme)
            }
            ChartData::Layers(d) => {
                let mut c = LayersChart::new(&d.layers);
                c.unit = unit;
                c.x_desc = Msg::ModelBlockAxis.t(lang);
                c.y_desc = format!("{} ({})", Msg::SavedActivations.t(lang), unit.name);
                if let Some((name, bytes)) = d.layers.iter().max_by_key(|(_, b)| *b) {
                    c.max_label = format!("{name}: {}", b(*bytes));
                }
                c.empty = Msg::NoSavedActivations.t(lang);
                draw_layers_chart(area, &c, theme)
            }
        }
    }

    /// The checkpoint chart's one line on the saving against no checkpointing.
    pub fn ckpt_saving(&self, lang: Lang, units: Units) -> Option<String> {
        let ChartData::Checkpoint(d) = self else {
            return None;
        };
        let none = d.points.iter().find(|p| p.k == 1)?;
        let (what, p) = if d.current_policy != Checkpointing::None {
            (Msg::YourChoice.t(lang), d.current?)
        } else {
            let sq = d
                .sqrt_k
                .and_then(|k| d.points.iter().find(|p| p.k == k))
                .or(d.block.as_ref())
                .or(d.points.last())?;
            (
                if d.sqrt_k.is_some() {
                    Msg::SqrtSegments.t(lang)
                } else {
                    Msg::CheckpointingShort.t(lang)
                },
                *sq,
            )
        };
        let saving = none.peak.saturating_sub(p.peak);
        let frac = if none.peak.0 > 0 {
            saving.0 as f64 / none.peak.0 as f64
        } else {
            0.0
        };
        Some(charts::ckpt_saving(
            what,
            &fmt_bytes(saving, units),
            &fmt_pct(frac),
            &fmt_pct(p.extra_compute),
            lang,
        ))
    }

    /// The chart as an SVG document, drawn by the same function as the canvas.
    pub fn svg(&self, lang: Lang, units: Units, size: (u32, u32)) -> Result<String, PlotError> {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
            self.draw(&root, lang, units, &Theme::default())?;
            root.present()?;
        }
        Ok(svg)
    }

    /// The chart's data as a table (its text alternative, also what screen readers get);
    /// `None` until the tables' code is here ([`load`]).
    pub fn table(&self, lang: Lang, units: Units) -> Option<Table> {
        match call(ChartAsk::Table {
            data: self,
            lang,
            units,
        }) {
            Ok(ChartAnswer::Table(t)) => Some(t),
            _ => None,
        }
    }

    fn table_now(&self, lang: Lang, units: Units) -> Table {
        let b = |x: Bytes| fmt_bytes(x, units);
        let h = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match self {
            ChartData::Batch(d) => Table {
                headers: h(&[
                    Msg::Batch.t(lang),
                    Msg::Peak.t(lang),
                    Msg::DeviceTotal.t(lang),
                ]),
                rows: d
                    .points
                    .iter()
                    .map(|p| vec![p.x.to_string(), b(p.peak_allocated), b(p.device_total)])
                    .collect(),
            },
            ChartData::Length(d) => Table {
                headers: h(&[
                    if d.spec.is_image() {
                        Msg::Resolution.t(lang)
                    } else {
                        Msg::SeqLen.t(lang)
                    },
                    Msg::Peak.t(lang),
                    Msg::DeviceTotal.t(lang),
                ]),
                rows: d
                    .points
                    .iter()
                    .map(|p| vec![p.x.to_string(), b(p.peak_allocated), b(p.device_total)])
                    .collect(),
            },
            ChartData::Checkpoint(d) => {
                let mut rows: Vec<Vec<String>> = d
                    .points
                    .iter()
                    .map(|p| {
                        vec![
                            p.k.to_string(),
                            b(p.peak),
                            b(p.activations),
                            fmt_pct(p.extra_compute),
                        ]
                    })
                    .collect();
                if let Some(p) = d.block {
                    rows.push(vec![
                        format!("{} ({})", p.k, Msg::EveryBlock.t(lang)),
                        b(p.peak),
                        b(p.activations),
                        fmt_pct(p.extra_compute),
                    ]);
                }
                Table {
                    headers: h(&[
                        Msg::Segment.t(lang),
                        Msg::Peak.t(lang),
                        Msg::ActivationMemory.t(lang),
                        Msg::ExtraCompute.t(lang),
                    ]),
                    rows,
                }
            }
            ChartData::Timeline(d) => {
                let total = |c: &[u64; Category::COUNT]| Bytes(c.iter().sum());
                let rows = d
                    .columns
                    .spans
                    .iter()
                    .map(|&(ph, s, e)| {
                        let peak = d.columns.live[s..e]
                            .iter()
                            .map(total)
                            .max()
                            .unwrap_or_default();
                        let end = d
                            .columns
                            .live
                            .get(e.saturating_sub(1))
                            .map(total)
                            .unwrap_or_default();
                        vec![phase_label(ph, lang).to_string(), b(peak), b(end)]
                    })
                    .collect();
                Table {
                    headers: h(&[
                        Msg::PhaseColumn.t(lang),
                        Msg::HighestLiveMemory.t(lang),
                        Msg::LiveMemoryAtEnd.t(lang),
                    ]),
                    rows,
                }
            }
            ChartData::Layers(d) => Table {
                headers: h(&[Msg::Layer.t(lang), Msg::SavedActivations.t(lang)]),
                rows: d
                    .layers
                    .iter()
                    .map(|(n, x)| vec![n.clone(), b(*x)])
                    .collect(),
            },
        }
    }

    /// One sentence for the canvas's accessible name.
    pub fn summary(&self, lang: Lang, units: Units) -> String {
        let b = |x: Bytes| fmt_bytes(x, units);
        match self {
            ChartData::Batch(d) => {
                let current = d.current.map(|(x, y)| (x, b(y)));
                let current = current.as_ref().map(|(x, y)| (*x, y.as_str()));
                charts::batch_summary(current, d.best.map(|(x, _)| x), lang)
            }
            ChartData::Length(d) => {
                let first = d.points.first().map(|p| (p.x, b(p.peak_allocated)));
                let last = d.points.last().map(|p| (p.x, b(p.peak_allocated)));
                match (first, last) {
                    (Some((x0, y0)), Some((x1, y1))) => {
                        charts::length_summary((x0, &y0), (x1, &y1), lang)
                    }
                    _ => Msg::ChartLength.t(lang).into(),
                }
            }
            ChartData::Checkpoint(_) => self
                .ckpt_saving(lang, units)
                .unwrap_or_else(|| Msg::ChartCheckpoint.t(lang).into()),
            ChartData::Timeline(d) => charts::timeline_summary(
                &b(d.columns
                    .live
                    .get(d.columns.peak)
                    .map(|c| Bytes(c.iter().sum()))
                    .unwrap_or_default()),
                lang,
            ),
            ChartData::Layers(d) => match d.layers.iter().max_by_key(|(_, x)| *x) {
                Some((n, x)) => charts::layers_summary(n, &b(*x), lang),
                None => Msg::ChartLayers.t(lang).into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::gpus;
    use crate::ui::logic::workbench::{Wants, Workbench};

    fn setup(plan: &Plan) -> (Workbench, CkptInfo) {
        let mut wb = Workbench::new();
        let info = wb.ckpt_info(plan);
        let mut models = length_plans(plan);
        models.extend(ckpt_plans(plan, &info));
        wb.run_all(
            plan,
            &Wants {
                exact: false,
                models,
                ..Default::default()
            },
        );
        (wb, info)
    }

    #[test]
    fn every_stage_is_drawn_as_itself_not_as_four_segments() {
        // ResNet-50 has 4 stages: "every stage" sits at k = 4 with its own peak, which is not
        // that of 4 checkpoint_sequential segments, so the marker names the policy.
        let stage = Plan {
            ckpt: Checkpointing::Stage,
            ..Plan::new("resnet50")
        };
        let (mut wb, info) = setup(&stage);
        let own = wb
            .model(&stage)
            .as_ref()
            .as_ref()
            .unwrap()
            .at(stage.batch, None);
        let d = ckpt_data(&stage, &info, Some(&own), &|p| wb.numbers(p));
        let four = d
            .points
            .iter()
            .find(|p| p.k == 4)
            .expect("k = 4 on the axis");
        let current = d.current.expect("the plan's own point");
        assert_eq!(current.k, 4);
        assert_ne!(
            current.peak, four.peak,
            "every stage drawn with the numbers of 4 segments"
        );
        assert_eq!(
            ckpt_current_label(d.current_policy, Lang::En),
            "your choice: every stage"
        );
        assert_eq!(
            ckpt_current_label(Checkpointing::Segments(4), Lang::En),
            "your choice"
        );
    }

    #[test]
    fn checkpoint_policies_per_model() {
        let gpt2 = Plan::new("gpt2");
        let info = CkptInfo::probe(&gpt2);
        let ks: Vec<u64> = ckpt_policies(&gpt2, &info).iter().map(|p| p.0).collect();
        assert_eq!(ks, (1..=12).collect::<Vec<_>>());
        let l70 = Plan {
            ckpt: Checkpointing::Segments(13),
            ..Plan::new("llama-3-70b")
        };
        let info = CkptInfo {
            blocks: 80,
            stages: 80,
            segments: true,
            ops: 2_500,
        };
        let ks: Vec<u64> = ckpt_policies(&l70, &info).iter().map(|p| p.0).collect();
        assert!(
            ks.contains(&9) && ks.contains(&13) && ks.contains(&80) && ks.len() < 20,
            "{ks:?}"
        );
        let rn = Plan::new("resnet50");
        let ks: Vec<u64> = ckpt_policies(&rn, &CkptInfo::probe(&rn))
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(
            ks,
            (1..=16).collect::<Vec<_>>(),
            "segments of the 16 residual blocks"
        );
        assert_eq!(ckpt_x(Checkpointing::Sqrt, &info), 9);
    }

    #[test]
    fn every_chart_draws_in_both_languages_with_a_table() {
        let plan = Plan {
            batch: 8,
            seq: Some(512),
            gpu: Some("t4".into()),
            ..Plan::new("gpt2")
        };
        let (wb, info) = setup(&plan);
        let gpu = gpus::find("t4");
        let m = wb.cached(&plan).unwrap();
        let m = m.as_ref().as_ref().unwrap();
        let n = wb.numbers(&plan).unwrap();
        let numbers_of = |p: &Plan| wb.numbers(p);
        let charts = [
            ChartData::Batch(batch_data(
                batch_points(m, gpu.as_ref()),
                Some(&n),
                Some(5),
                m,
                gpu.as_ref(),
            )),
            ChartData::Length(length_data(&plan, Some(&n), gpu.as_ref(), &numbers_of)),
            ChartData::Checkpoint(ckpt_data(&plan, &info, Some(&n), &numbers_of)),
            ChartData::Timeline(timeline_data(m, 8, gpu.as_ref())),
            ChartData::Layers(layers_data(m, 8)),
        ];
        for c in &charts {
            for lang in [Lang::En, Lang::Zh] {
                let svg = c.svg(lang, Units::Binary, (800, 450)).unwrap();
                assert!(
                    svg.starts_with("<svg") && svg.len() > 2000,
                    "{:?} {lang:?}",
                    c.kind()
                );
                let t = c.table(lang, Units::Decimal).unwrap();
                assert!(
                    !t.rows.is_empty() && t.rows.iter().all(|r| r.len() == t.headers.len()),
                    "{:?}",
                    c.kind()
                );
                assert!(!c.summary(lang, Units::Binary).is_empty());
            }
        }
        let ChartData::Length(l) = &charts[1] else {
            unreachable!()
        };
        assert_eq!(
            (l.pending, l.points.len()),
            (0, 7),
            "gpt2: 128..1024 in half octaves"
        );
        let ChartData::Checkpoint(ck) = &charts[2] else {
            unreachable!()
        };
        assert_eq!(ck.pending, 0);
        assert!(
            ck.points.last().unwrap().peak < ck.points[0].peak,
            "checkpointing saves memory"
        );
        assert!(
            ck.points.last().unwrap().extra_compute > 0.2,
            "and costs compute"
        );
        assert!(charts[2]
            .ckpt_saving(Lang::En, Units::Binary)
            .unwrap()
            .starts_with("√N segments: −"));
        let zh = charts[0].svg(Lang::Zh, Units::Binary, (800, 450)).unwrap();
        assert!(zh.contains("批大小"), "Chinese axis title");
    }

    #[test]
    fn length_chart_fills_in_as_points_arrive() {
        let plan = Plan {
            res: Some(224),
            ..Plan::new("resnet18")
        };
        let mut wb = Workbench::new();
        wb.model(&plan);
        let d = length_data(&plan, None, None, &|p| wb.numbers(p));
        assert_eq!(d.points.len(), 1, "only the current size is simulated");
        assert_eq!(d.pending, res_count() - 1);
    }

    fn res_count() -> usize {
        state::res_positions().len()
    }
}
