//! The plan the user edits and what the page derives from it ([`Planner`]): one
//! `RwSignal<Plan>`, memos of its numbers and chart data read from the page's workbench
//! ([`super::page_workbench`]), and the links to it.

use std::sync::Arc;

use leptos::prelude::*;

use super::browser;
use super::page_workbench::wb;
use super::widgets::Prefs;
use crate::plan::Plan;
use crate::plan::PlanError;
use crate::presets::gpus::Gpu;
use crate::ui::logic::chart_data::{self, ChartAsk, ChartData};
use crate::ui::logic::ckpt_info::CkptInfo;
use crate::ui::logic::i18n::{Lang, Units};
use crate::ui::logic::json;
use crate::ui::logic::state::{self, InputSpec};
use crate::ui::logic::url::{self, ChartKind, View};
use crate::ui::logic::workbench::Numbers;

/// Whether a memo's new value differs from its old one (chart data: always, it is rebuilt only
/// when what it shows changed).
type Changed = fn(Option<&Option<Arc<ChartData>>>, Option<&Option<Arc<ChartData>>>) -> bool;

/// The largest batch that fits: from the lines at once, then confirmed by full simulations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MaxBatch {
    pub value: Option<u64>,
    pub exact: bool,
}

/// The plan the user edits and what the page derives from it. `Copy`: components take it by
/// value.
#[derive(Clone, Copy)]
pub struct Planner {
    pub plan: RwSignal<Plan>,
    pub lang: RwSignal<Lang>,
    pub units: RwSignal<Units>,
    /// Bumped after every background job, so what reads the workbench reads it again.
    pub version: RwSignal<u64>,
    /// No background work left (for tests and the page's busy hint).
    pub idle: RwSignal<bool>,
    /// The compact card for iframes.
    pub embed: bool,
    /// The chart the embed card shows.
    pub chart: ChartKind,
    /// The plan at batch 1: what does not change when only the batch moves.
    pub base: Memo<Plan>,
    pub spec: Memo<InputSpec>,
    pub info: Memo<CkptInfo>,
    pub numbers: Memo<Result<Numbers, PlanError>>,
    pub max_batch: Memo<Option<MaxBatch>>,
    /// The chart code is here (fetched with the first chart that comes into view): the charts'
    /// data and tables read it.
    pub chart_code: RwSignal<bool>,
    /// Which mounted page this is, for the background pump ([`super::pump::adopt`]).
    pub pump: u64,
}

impl Planner {
    /// Which optional controls apply: what does not change when only the batch moves.
    pub fn applies(self) -> Memo<state::Applies> {
        let p = self;
        Memo::new(move |_| p.base.with(|q| state::applies(q, &p.info.get())))
    }
    pub fn new(initial: Plan, view: View, lang: Lang, units: Units, pump: u64) -> Self {
        let plan = RwSignal::new(initial);
        let version = RwSignal::new(0u64);
        let base = Memo::new(move |_| {
            plan.with(|p| Plan {
                batch: 1,
                ..p.clone()
            })
        });
        let spec = Memo::new(move |_| base.with(state::input_spec));
        let info = Memo::new(move |_| base.with(|p| wb(|w| w.ckpt_info(p))));
        let numbers = Memo::new(move |_| {
            version.track();
            plan.with(|p| {
                state::check_batch(p.batch)?;
                wb(|w| {
                    let m = w.model(p);
                    let m = m.as_ref().as_ref().map_err(Clone::clone)?;
                    let gpu = state::gpu_of(p);
                    let n = m.at(p.batch, gpu.as_ref());
                    match w.exact(p) {
                        Some(Ok(e)) => Ok(n.with_exact(e)),
                        Some(Err(e)) => Err(e.clone()),
                        None => Ok(n),
                    }
                })
            })
        });
        let max_batch = Memo::new(move |_| {
            version.track();
            base.with(|p| {
                let gpu = state::gpu_of(p)?;
                wb(|w| {
                    if let Some(r) = w.max_batch(p) {
                        return r.as_ref().ok().map(|v| MaxBatch {
                            value: *v,
                            exact: true,
                        });
                    }
                    let m = w.model(p);
                    let m = m.as_ref().as_ref().ok()?;
                    Some(MaxBatch {
                        value: m.max_batch_guess(gpu.memory, Some(&gpu)),
                        exact: false,
                    })
                })
            })
        });
        Planner {
            plan,
            lang: RwSignal::new(lang),
            units: RwSignal::new(units),
            version,
            idle: RwSignal::new(false),
            embed: view.embed,
            chart: view.chart,
            base,
            spec,
            info,
            numbers,
            max_batch,
            chart_code: RwSignal::new(chart_data::loaded()),
            pump,
        }
    }

    /// The page's language and units, as the widgets read them.
    pub fn prefs(self) -> Prefs {
        Prefs {
            lang: self.lang.into(),
            units: self.units.into(),
        }
    }

    pub fn gpu(&self) -> Option<Gpu> {
        self.base.with(state::gpu_of)
    }

    /// The view settings as they stand (for links).
    pub fn view(&self) -> View {
        View {
            lang: Some(self.lang.get_untracked()),
            units: self.units.get_untracked(),
            embed: self.embed,
            chart: self.chart,
        }
    }

    /// The link to this plan (the full page, or with `embed` the card); Err while it needs the
    /// JSON code and that has not been fetched.
    pub fn link(&self, embed: bool) -> Result<String, json::NotLoaded> {
        let v = View {
            embed,
            ..self.view()
        };
        let q = self.plan.with_untracked(|p| url::to_query(p, &v))?;
        Ok(format!(
            "{}?{}",
            browser::base_url(),
            url::keep_hf_endpoint(q, &browser::location_query())
        ))
    }

    /// [`Self::link`] for a view, which follows the plan: empty while the JSON code is fetched,
    /// then the view runs again (it tracks `version`, bumped when the code arrives).
    pub fn live_link(self, embed: bool) -> String {
        self.plan.track();
        self.version.track();
        self.link(embed).unwrap_or_else(|_| {
            self.fetch_json(|p| p.version.update(|v| *v += 1));
            String::new()
        })
    }

    /// Fetches the JSON code, then runs `then` (not if the fetch failed).
    fn fetch_json(self, then: impl FnOnce(Planner) + 'static) {
        leptos::task::spawn_local(async move {
            if json::load().await {
                then(self);
            }
        });
    }

    /// Hands what `make` gives to `then`: now, or once the JSON code `make` needs is fetched.
    pub fn with_json<T: 'static>(
        self,
        make: impl Fn(Planner) -> Result<T, json::NotLoaded> + 'static,
        then: impl FnOnce(Planner, T) + 'static,
    ) {
        match make(self) {
            Ok(v) => then(self, v),
            Err(_) => self.fetch_json(move |p| {
                if let Ok(v) = make(p) {
                    then(p, v);
                }
            }),
        }
    }

    /// Writes the plan into the address bar (once the JSON code is here, if it needs it).
    pub fn sync_address(self) {
        self.with_json(
            |p| p.plan.with_untracked(|q| url::to_query(q, &p.view())),
            |_, q| browser::replace_query(&url::keep_hf_endpoint(q, &browser::location_query())),
        );
    }

    /// The data of one chart, recomputed when what it shows changes.
    pub fn chart_data(&self, kind: ChartKind) -> Memo<Option<Arc<ChartData>>> {
        let p = *self;
        let changed: Changed = |_, _| true;
        match kind {
            ChartKind::Batch => {
                let points = Memo::new_with_compare(
                    move |_| {
                        p.chart_code.track();
                        p.base.with(|b| {
                            wb(|w| {
                                let m = w.model(b);
                                let gpu = state::gpu_of(b);
                                Arc::new(
                                    m.as_ref()
                                        .as_ref()
                                        .ok()
                                        .and_then(|m| chart_data::points(m, gpu.as_ref()))
                                        .unwrap_or_default(),
                                )
                            })
                        })
                    },
                    |_, _| true,
                );
                Memo::new_with_compare(
                    move |_| {
                        p.chart_code.track();
                        let pts = points.get();
                        let n = p.numbers.get().ok();
                        let best = p.max_batch.get().and_then(|m| m.value);
                        p.base.with(|b| {
                            wb(|w| {
                                let m = w.model(b);
                                let m = m.as_ref().as_ref().ok()?;
                                let gpu = state::gpu_of(b);
                                chart_data::data(ChartAsk::Batch {
                                    points: &pts,
                                    current: n.as_ref(),
                                    best,
                                    model: m,
                                    gpu: gpu.as_ref(),
                                })
                                .map(Arc::new)
                            })
                        })
                    },
                    changed,
                )
            }
            ChartKind::Length => Memo::new_with_compare(
                move |_| {
                    p.chart_code.track();
                    p.version.track();
                    let n = p.numbers.get().ok();
                    p.plan.with(|plan| {
                        wb(|w| {
                            chart_data::data(ChartAsk::Length {
                                plan,
                                current: n.as_ref(),
                                gpu: state::gpu_of(plan).as_ref(),
                                numbers_of: &|q| w.numbers(q),
                            })
                            .map(Arc::new)
                        })
                    })
                },
                changed,
            ),
            ChartKind::Checkpoint => Memo::new_with_compare(
                move |_| {
                    p.chart_code.track();
                    p.version.track();
                    let n = p.numbers.get().ok();
                    let info = p.info.get();
                    p.plan.with(|plan| {
                        wb(|w| {
                            chart_data::data(ChartAsk::Checkpoint {
                                plan,
                                info: &info,
                                current: n.as_ref(),
                                numbers_of: &|q| w.numbers(q),
                            })
                            .map(Arc::new)
                        })
                    })
                },
                changed,
            ),
            ChartKind::Timeline | ChartKind::Layers => Memo::new_with_compare(
                move |_| {
                    p.chart_code.track();
                    let batch = p.plan.with(|x| x.batch);
                    state::check_batch(batch).ok()?;
                    p.base.with(|b| {
                        wb(|w| {
                            let m = w.model(b);
                            let m = m.as_ref().as_ref().ok()?;
                            let gpu = state::gpu_of(b);
                            chart_data::data(match kind {
                                ChartKind::Timeline => ChartAsk::Timeline {
                                    model: m,
                                    batch,
                                    gpu: gpu.as_ref(),
                                },
                                _ => ChartAsk::Layers { model: m, batch },
                            })
                            .map(Arc::new)
                        })
                    })
                },
                changed,
            ),
        }
    }
}
