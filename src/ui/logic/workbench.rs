//! What the page shows for a plan at every batch size, and the work queue that fills it in.
//!
//! A [`BatchModel`] is two simulations of a plan (at batch 2 and [`B2`]) turned into
//! [`BatchLines`]: every number the page shows at any batch (the peak, its breakdown, the
//! device total, the step timeline, the activations per layer) then costs microseconds, so
//! moving the batch slider never re-simulates. Models are keyed on the plan without its batch
//! and its GPU (the GPU only changes the fixed workspaces and CUDA context, added back in
//! [`BatchModel::at`]), and cached in a [`Workbench`], which also lists the work the page still
//! wants done ([`Workbench::next_job`]): each chart's sweep points, the suggestions' variants, the
//! exact estimate and the largest batch. A job runs a slice of simulation at a time (the graph's
//! build, the step's simulation, a few thousand allocator events: [`EstimateSteps`]), and the
//! page runs slices between inputs after the frame is drawn, so input stays responsive while
//! charts fill in.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use super::ckpt_info::CkptInfo;

use crate::estimator::config::Checkpointing;
use crate::estimator::context::Stack;
use crate::estimator::hardware::DeviceOverhead;
use crate::estimator::moe_parts::MoeParts;
use crate::estimator::timeline::{Category, Phase};
use crate::estimator::units::Bytes;
use crate::estimator::{Estimate, MAX_BATCH};
use crate::plan::sweep::{BatchLines, MaxBatchSearch, Point, LINE_B1};
use crate::plan::EstimateSteps;
use crate::plan::Plan;
use crate::plan::PlanError;
use crate::presets::gpus::Gpu;

/// The second batch a model is simulated at: large enough that the 512-byte rounding of each
/// block hardly tilts the lines, small enough that every size stays far from overflowing.
pub const B2: u64 = 256;

/// A plan's memory as a function of the batch size.
#[derive(Clone, Debug)]
pub struct BatchModel {
    pub lines: BatchLines,
    /// Saved activations per block of the model: name, bytes at batch 0 and per sample.
    layers: Vec<(String, f64, f64)>,
    pub param_count: u64,
    pub param_bytes: Bytes,
    pub grad_bytes: Bytes,
    pub opt_state_bytes: Bytes,
    /// The fixed part the lines include (workspaces and context of the default device).
    fixed: Bytes,
    /// The plan's software stack, which sets the context on any card.
    stack: Stack,
}

/// The headline numbers of a plan at one batch size on one GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Numbers {
    pub batch: u64,
    pub peak: Bytes,
    /// Caching-allocator segments, workspaces included.
    pub reserved: Bytes,
    pub device_total: Bytes,
    pub context: Bytes,
    pub workspaces: Bytes,
    pub phase: Phase,
    /// The op at the peak (known from the exact estimate only).
    pub peak_op: Option<String>,
    /// Live bytes by category at the peak, [`Category::ALL`] order.
    pub by_category: [Bytes; Category::COUNT],
    /// Each category at the peak event as `intercept + slope × batch` (for the formulas).
    pub per_sample: [(f64, f64); Category::COUNT],
    pub param_count: u64,
    pub param_bytes: Bytes,
    pub grad_bytes: Bytes,
    pub opt_state_bytes: Bytes,
    pub forward_flops: f64,
    pub recompute_flops: f64,
    /// From a full simulation at this batch (otherwise from the lines, within a few KiB).
    pub exact: bool,
    /// A mixture of experts' parts, from the full simulation only.
    pub moe: Option<MoeParts>,
}

impl Numbers {
    pub fn category(&self, c: Category) -> Bytes {
        self.by_category[c.index()]
    }
    /// Extra forward compute spent recomputing checkpointed segments, as a fraction of a step's
    /// compute without checkpointing (forward + backward ≈ 3 × forward).
    pub fn extra_compute(&self) -> f64 {
        if self.forward_flops > 0.0 {
            self.recompute_flops / (3.0 * self.forward_flops)
        } else {
            0.0
        }
    }
    /// Memory that scales with the batch at the peak: activations, inputs and backward
    /// temporaries.
    pub fn activation_memory(&self) -> Bytes {
        self.category(Category::Activations)
            + self.category(Category::Inputs)
            + self.category(Category::BackwardTemps)
    }
    /// Replaces the interpolated figures with a full simulation's (same plan and batch).
    pub fn with_exact(mut self, e: &Estimate) -> Numbers {
        self.peak = e.peak_allocated;
        self.reserved = e.reserved;
        self.device_total = e.device_total;
        self.context = e.context;
        self.workspaces = e.workspaces;
        self.phase = e.peak_phase;
        self.peak_op = e.peak_op.clone();
        for (i, c) in Category::ALL.iter().enumerate() {
            self.by_category[i] = e.category(*c);
        }
        self.forward_flops = e.forward_flops;
        self.recompute_flops = e.recompute_flops;
        self.moe = e.moe.clone();
        self.exact = true;
        self
    }
}

/// Workspaces and context the estimator charges for `gpu` (`None`: its defaults) under `stack`.
pub fn device_fixed(gpu: Option<&Gpu>, stack: &Stack) -> (Bytes, Bytes) {
    let o = DeviceOverhead::of(gpu, stack);
    (o.workspaces, o.context)
}

/// The plan a model is keyed on: batch 1, no GPU.
pub fn model_plan(plan: &Plan) -> Plan {
    Plan {
        batch: 1,
        gpu: None,
        ..plan.clone()
    }
}

/// Cache key of a plan's model: the plan without its batch and GPU, compared whole. Hashed on
/// the few fields that tell cached models apart (equal keys still hash equal), so a lookup per
/// slider step costs no serialisation and the page's first load carries no JSON writer for it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelKey(Plan);

/// Plans come from validated input: no NaN in them, so equality is reflexive.
impl Eq for ModelKey {}

impl Hash for ModelKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let p = &self.0;
        (&p.model, p.res, p.seq, p.accumulation, p.dtype, p.ckpt).hash(h);
    }
}

pub fn model_key(plan: &Plan) -> ModelKey {
    ModelKey(model_plan(plan))
}

/// What a model's checkpointing options are kept by ([`Workbench::ckpt_info`]).
fn ckpt_key(plan: &Plan) -> ModelKey {
    model_key(&Plan {
        ckpt: Checkpointing::None,
        accumulation: 1,
        seq: None,
        res: None,
        dtype: Default::default(),
        ..plan.clone()
    })
}

impl BatchModel {
    /// Simulates `plan` (its batch and GPU ignored) at batch 2 and [`B2`] (8 if that overflows):
    /// the slices of a [`ModelBuild`] run in one go, so the page's background jobs and this
    /// make the same two estimates.
    pub fn new(plan: &Plan) -> Result<BatchModel, PlanError> {
        let mut b = ModelBuild::new(plan);
        loop {
            if let Some(m) = b.step() {
                return m;
            }
        }
    }

    fn from_estimates(
        e1: &Estimate,
        e2: &Estimate,
        b2: u64,
        stack: Stack,
    ) -> Result<BatchModel, PlanError> {
        let lines = BatchLines::from_estimates(e1, LINE_B1, e2, b2)?;
        let d = (b2 - LINE_B1) as f64;
        let layers = e1
            .layers
            .iter()
            .map(|l1| {
                let y2 = e2
                    .layers
                    .iter()
                    .find(|l| l.layer == l1.layer)
                    .map_or(l1.bytes.0 as f64, |l| l.bytes.0 as f64);
                let slope = (y2 - l1.bytes.0 as f64) / d;
                (
                    l1.layer.clone(),
                    l1.bytes.0 as f64 - LINE_B1 as f64 * slope,
                    slope,
                )
            })
            .collect();
        Ok(BatchModel {
            lines,
            layers,
            param_count: e1.param_count,
            param_bytes: e1.param_bytes,
            grad_bytes: e1.grad_bytes,
            opt_state_bytes: e1.opt_state_bytes,
            fixed: e1.workspaces + e1.context,
            stack,
        })
    }

    /// The numbers at batch `b` on `gpu`.
    pub fn at(&self, b: u64, gpu: Option<&Gpu>) -> Numbers {
        let ev = self.lines.peak_event(b);
        let p: Point = self.lines.point_at(ev, b);
        let (workspaces, context) = device_fixed(gpu, &self.stack);
        let segments = p.device_total.saturating_sub(self.fixed);
        let reserved = segments + workspaces;
        let mut by_category = [Bytes::ZERO; Category::COUNT];
        let mut per_sample = [(0.0, 0.0); Category::COUNT];
        for (c, v) in &p.by_category {
            by_category[c.index()] = *v;
        }
        if !self.lines.is_empty() {
            for c in Category::ALL {
                per_sample[c.index()] = self.lines.category_line(ev, c);
            }
        }
        Numbers {
            batch: b,
            peak: p.peak_allocated,
            reserved,
            device_total: reserved + context,
            context,
            workspaces,
            phase: if self.lines.is_empty() {
                Phase::Forward
            } else {
                self.lines.phase(ev)
            },
            peak_op: None,
            by_category,
            per_sample,
            param_count: self.param_count,
            param_bytes: self.param_bytes,
            grad_bytes: self.grad_bytes,
            opt_state_bytes: self.opt_state_bytes,
            forward_flops: p.forward_flops,
            recompute_flops: p.recompute_flops,
            exact: false,
            moe: None,
        }
    }

    /// A sweep point (for the stacked charts) at batch `b`, with `x` as its abscissa.
    pub fn point(&self, x: u64, b: u64, gpu: Option<&Gpu>) -> Point {
        let n = self.at(b, gpu);
        Point {
            x,
            peak_allocated: n.peak,
            device_total: n.device_total,
            by_category: Category::ALL.iter().map(|&c| (c, n.category(c))).collect(),
            recompute_flops: n.recompute_flops,
            forward_flops: n.forward_flops,
        }
    }

    /// Saved activations per block of the model at batch `b`, in forward order.
    pub fn layers_at(&self, b: u64) -> Vec<(String, Bytes)> {
        let bf = b as f64;
        self.layers
            .iter()
            .map(|(n, p, a)| (n.clone(), Bytes((p + a * bf).max(0.0).round() as u64)))
            .collect()
    }

    /// The largest batch whose device total on a GPU of `capacity` the lines predict to fit
    /// (`None`: not even batch 1). [`max_batch`] confirms it with full simulations.
    pub fn max_batch_guess(&self, capacity: Bytes, gpu: Option<&Gpu>) -> Option<u64> {
        let fits = |b: u64| Ok(self.at(b, gpu).device_total <= capacity);
        crate::plan::sweep::largest_fitting(MAX_BATCH, fits)
            .ok()
            .flatten()
    }

    /// The step's timeline at batch `b`: `(phase, live bytes by category)` per column of events
    /// ([`BatchLines::timeline_at`]).
    pub fn timeline_at(
        &self,
        b: u64,
    ) -> impl Iterator<Item = (Phase, [u64; Category::COUNT])> + '_ {
        self.lines.timeline_at(b)
    }
}

/// A model's two estimates under way, a slice of work per job ([`EstimateSteps`]): at batch
/// [`LINE_B1`], then at [`B2`] (8 if that overflows), as [`BatchModel::new`] makes them.
struct ModelBuild {
    base: Plan,
    first: Option<Estimate>,
    /// The second batch under way (the first of [`SECOND_BATCHES`] to answer is taken).
    second: usize,
    steps: EstimateSteps,
}

/// The second batches a model is simulated at, in order: the first that estimates is taken.
const SECOND_BATCHES: [u64; 2] = [B2, 8];

impl ModelBuild {
    fn new(plan: &Plan) -> ModelBuild {
        let base = model_plan(plan);
        ModelBuild {
            steps: EstimateSteps::new(&Plan {
                batch: LINE_B1,
                ..base.clone()
            }),
            base,
            first: None,
            second: 0,
        }
    }

    /// Runs the next slice; the model once its second estimate has answered.
    fn step(&mut self) -> Option<Result<BatchModel, PlanError>> {
        let r = self.steps.step()?;
        let at = |b| Plan {
            batch: b,
            ..self.base.clone()
        };
        match (&self.first, r) {
            (None, Ok(e1)) => {
                self.first = Some(e1);
                self.steps = EstimateSteps::new(&at(SECOND_BATCHES[0]));
                None
            }
            (None, Err(e)) => Some(Err(e)),
            (Some(e1), Ok(e2)) => Some(BatchModel::from_estimates(
                e1,
                &e2,
                SECOND_BATCHES[self.second],
                self.base.stack(),
            )),
            (Some(_), Err(e)) => match SECOND_BATCHES.get(self.second + 1) {
                Some(&b2) => {
                    self.second += 1;
                    self.steps = EstimateSteps::new(&at(b2));
                    None
                }
                None => Some(Err(e)),
            },
        }
    }
}

/// One unit of background work.
#[derive(Clone, Debug, PartialEq)]
pub enum Job {
    /// Simulate a plan's [`BatchModel`].
    Model(Plan),
    /// The full simulation of the current plan, for exact numbers.
    Exact(Plan),
    /// The largest batch that fits the plan's GPU, confirmed by full simulations.
    MaxBatch(Plan),
}

/// What the page currently wants computed beyond the main model.
#[derive(Clone, Debug, Default)]
pub struct Wants {
    /// The exact estimate (the page asks once input has settled).
    pub exact: bool,
    /// Plans whose models the charts and suggestions need, in priority order.
    pub models: Vec<Plan>,
    /// The suggestions' candidates are wanted but their code has not been fetched yet.
    pub suggestions_code: bool,
}

/// Models whose op tape (at batch 1) is longer than this are simulated in the background, a slice
/// per job, never inside an input's task: one simulation of Qwen3-30B-A3B at 8192 tokens (48 layers of
/// 128 experts, some 60,000 ops) takes about half a second in the page, and the two a model needs
/// would block input for a second. A dense 70B model has about 2,500 ops.
pub const HEAVY_OPS: usize = 20_000;

/// How many models the cache keeps (a model keeps a few lines per timeline column, some hundreds
/// of KiB whatever its size).
pub const CACHE_MODELS: usize = 96;

/// How many of the page's wanted models are simulated, in priority order: fewer than the cache
/// keeps, with room for the plans the user moves between.
pub const WANTED_MODELS: usize = CACHE_MODELS - 16;

/// How many largest batches and checkpointing probes the page keeps. Each is small (a plan's key
/// and a number), but a session that slides the sequence length for months makes a new key per
/// length: past this many the maps start afresh, so memory stays bounded and the current plan's
/// entry is simply computed again.
pub const CACHE_SMALL: usize = 4096;

/// Inserts into a map that starts afresh at [`CACHE_SMALL`] entries.
fn insert_bounded<K: Hash + Eq, V>(map: &mut HashMap<K, V>, key: K, value: V) {
    if map.len() >= CACHE_SMALL {
        map.clear();
    }
    map.insert(key, value);
}

/// The cache of models and the other results, and the list of what is still missing.
#[derive(Default)]
pub struct Workbench {
    models: HashMap<ModelKey, Rc<Result<BatchModel, PlanError>>>,
    order: VecDeque<ModelKey>,
    max_batches: HashMap<(ModelKey, Option<String>), Result<Option<u64>, PlanError>>,
    /// The largest-batch search under way, a step per job (input is answered between steps).
    searching: Option<((ModelKey, Option<String>), MaxBatchSearch)>,
    exact: Option<(Plan, Result<Estimate, PlanError>)>,
    ckpt: HashMap<ModelKey, CkptInfo>,
    /// A model under way, a slice of work per job.
    building: Option<(ModelKey, ModelBuild)>,
    /// The exact estimate under way.
    exacting: Option<(Plan, EstimateSteps)>,
    /// [`HEAVY_OPS`], lower in tests.
    heavy_ops: Option<usize>,
    /// Simulations run so far (for tests and the page's diagnostics).
    pub simulations: u64,
}

fn max_batch_key(plan: &Plan) -> (ModelKey, Option<String>) {
    (model_key(plan), plan.gpu.clone())
}

impl Workbench {
    pub fn new() -> Self {
        Self::default()
    }

    /// The plan's model, simulated now if it is not cached; a heavy one ([`HEAVY_OPS`]) is
    /// [`PlanError::Simulating`] until the background jobs have built it.
    pub fn model(&mut self, plan: &Plan) -> Rc<Result<BatchModel, PlanError>> {
        if let Some(m) = self.cached(plan) {
            return m;
        }
        if self.heavy(plan) {
            return Rc::new(Err(PlanError::Simulating));
        }
        let m = Rc::new(BatchModel::new(plan));
        self.simulations += 2;
        // Not kept without its code: the same plan builds once that has been fetched.
        if crate::plan::lazy::ready_for(plan) {
            self.insert(model_key(plan), m.clone());
        }
        m
    }

    /// Whether `plan`'s model is simulated in halves (the tape's length is probed once per
    /// model, with its checkpointing options).
    pub fn heavy(&mut self, plan: &Plan) -> bool {
        self.ckpt_info(plan).ops > self.heavy_ops.unwrap_or(HEAVY_OPS)
    }

    /// One slice of the plan's model under way (begun if another was).
    fn model_slice(&mut self, plan: &Plan) {
        let key = model_key(plan);
        let mut b = match self.building.take() {
            Some((k, b)) if k == key => b,
            _ => ModelBuild::new(plan),
        };
        match b.step() {
            Some(m) => {
                self.simulations += 2;
                self.insert(key, Rc::new(m));
            }
            None => self.building = Some((key, b)),
        }
    }

    fn insert(&mut self, key: ModelKey, m: Rc<Result<BatchModel, PlanError>>) {
        if self.models.insert(key.clone(), m).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > CACHE_MODELS {
            if let Some(old) = self.order.pop_front() {
                self.models.remove(&old);
            }
        }
    }

    /// The plan's model if it has been simulated.
    pub fn cached(&self, plan: &Plan) -> Option<Rc<Result<BatchModel, PlanError>>> {
        self.models.get(&model_key(plan)).cloned()
    }

    /// The plan's numbers at its batch on its GPU, if its model is cached and valid.
    pub fn numbers(&self, plan: &Plan) -> Option<Numbers> {
        let m = self.cached(plan)?;
        let m = m.as_ref().as_ref().ok()?;
        let gpu = super::state::gpu_of(plan);
        Some(m.at(plan.batch, gpu.as_ref()))
    }

    /// The exact estimate of exactly this plan, once computed.
    pub fn exact(&self, plan: &Plan) -> Option<&Result<Estimate, PlanError>> {
        self.exact
            .as_ref()
            .filter(|(p, _)| p == plan)
            .map(|(_, e)| e)
    }

    /// The confirmed largest batch for the plan's GPU, once computed.
    pub fn max_batch(&self, plan: &Plan) -> Option<&Result<Option<u64>, PlanError>> {
        self.max_batches.get(&max_batch_key(plan))
    }

    /// The model's checkpointing options, probed once per model: the sequence length, the
    /// resolution and the dtype change the tensors' shapes, not which layers the builder
    /// checkpoints, so a slider over them probes nothing (for a 256-expert model each probe is a
    /// build of the whole model in the input's task). The tape's length they do change a little
    /// (a short sequence routes no token to some experts; autocast adds casts), which only moves
    /// [`Workbench::heavy`]'s line. A probe that built nothing is not kept: it may be the
    /// input's fault (a resolution too small for the network), not the model's.
    pub fn ckpt_info(&mut self, plan: &Plan) -> CkptInfo {
        if let Some(i) = self.ckpt.get(&ckpt_key(plan)) {
            return *i;
        }
        let info = CkptInfo::probe(plan);
        self.know_ckpt(plan, info);
        info
    }

    /// Keeps `info` as `plan`'s model's checkpointing options, probed here or found by the link's
    /// parse ([`super::url::Parsed::ckpt`]), so that nothing probes the model again; not kept
    /// before its code is here, nor when nothing built.
    pub fn know_ckpt(&mut self, plan: &Plan, info: CkptInfo) {
        if crate::plan::lazy::ready_for(plan) && info.ops > 0 {
            insert_bounded(&mut self.ckpt, ckpt_key(plan), info);
        }
    }

    /// The first missing piece of work, most important first: the plan's model, its exact
    /// estimate (when wanted), its largest batch (when a GPU is chosen), then `wants.models`.
    pub fn next_job(&self, plan: &Plan, wants: &Wants) -> Option<Job> {
        // Nothing to run until the plan's code is here (the page fetches it before it sets such
        // a plan; this only keeps a stray one from spinning).
        if !crate::plan::lazy::ready_for(plan) {
            return None;
        }
        let Some(m) = self.cached(plan) else {
            return Some(Job::Model(model_plan(plan)));
        };
        if wants.exact && self.exact(plan).is_none() {
            return Some(Job::Exact(plan.clone()));
        }
        if m.is_ok() && plan.gpu.is_some() && self.max_batch(plan).is_none() {
            return Some(Job::MaxBatch(Plan {
                batch: 1,
                ..plan.clone()
            }));
        }
        // No more wanted models than the cache keeps: past that each new one would push out
        // another wanted one, and the pump would simulate them in turn for ever.
        wants
            .models
            .iter()
            .take(WANTED_MODELS)
            .find(|p| crate::plan::lazy::ready_for(p) && self.cached(p).is_none())
            .map(|p| Job::Model(model_plan(p)))
    }

    /// Runs a slice of a job: a model, the exact estimate and the largest-batch search take
    /// several, a slice of simulation each ([`EstimateSteps`]; the search's lines are two whole
    /// estimates), the job staying first in line ([`Workbench::next_job`]) until it answers.
    pub fn run(&mut self, job: Job) {
        match job {
            Job::Model(p) => {
                if self.cached(&p).is_none() {
                    self.model_slice(&p);
                }
            }
            Job::Exact(p) => {
                let mut steps = match self.exacting.take() {
                    Some((q, s)) if q == p => s,
                    _ => EstimateSteps::new(&p),
                };
                match steps.step() {
                    Some(e) => {
                        self.simulations += 1;
                        self.exact = Some((p, e));
                    }
                    None => self.exacting = Some((p, steps)),
                }
            }
            Job::MaxBatch(p) => {
                let key = max_batch_key(&p);
                let Some(cap) = super::state::gpu_of(&p).map(|g| g.memory) else {
                    insert_bounded(&mut self.max_batches, key, Ok(None));
                    return;
                };
                let mut search = match self.searching.take() {
                    Some((k, s)) if k == key => s,
                    _ => MaxBatchSearch::new(&p, cap),
                };
                self.simulations += 1;
                match search.step() {
                    Some(r) => insert_bounded(&mut self.max_batches, key, r),
                    None => self.searching = Some((key, search)),
                }
            }
        }
    }

    /// Runs every job the plan wants (tests; the page runs slices of them between inputs).
    pub fn run_all(&mut self, plan: &Plan, wants: &Wants) {
        while let Some(j) = self.next_job(plan, wants) {
            self.run(j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::config::Precision;
    use crate::estimator::error::EstimateError;
    use crate::plan::estimate;
    use crate::plan::sweep::max_batch;
    use crate::presets::gpus;
    use crate::presets::models::MODELS;

    fn rel(a: Bytes, b: Bytes) -> f64 {
        (a.0 as f64 - b.0 as f64).abs() / b.0.max(1) as f64
    }

    /// Reserved memory is the caching allocator's replay, whose layout (which cached block
    /// serves which request) is not affine in the batch; the lines carry the replay's excess
    /// over the allocated peak from two batches (`BatchLines::excess`): within 15 % or 64 MiB
    /// (the exact estimate replaces it on the page once input settles).
    fn close_reserved(a: Bytes, b: Bytes) -> bool {
        a.0.abs_diff(b.0) as f64 <= (0.15 * b.0 as f64).max((64u64 << 20) as f64)
    }

    /// A heavy model is never simulated inside the caller's task: it reads as simulating, and
    /// the background jobs build it a slice of simulation per job (the graph's build, the
    /// step's simulation, a slice of the allocator's replay, the figures: some per estimate,
    /// two estimates), to the same numbers as in one go; the exact estimate is sliced alike.
    #[test]
    fn a_heavy_model_is_built_a_slice_per_job() {
        let plan = Plan {
            res: Some(64),
            batch: 24,
            gpu: Some("a100-80".into()),
            ..Plan::new("resnet18")
        };
        let mut w = Workbench {
            heavy_ops: Some(10),
            ..Workbench::new()
        };
        assert!(matches!(*w.model(&plan), Err(PlanError::Simulating)));
        assert_eq!(w.simulations, 0);
        let wants = Wants {
            exact: true,
            ..Wants::default()
        };
        let mut jobs = 0;
        while w.cached(&plan).is_none() {
            let job = w.next_job(&plan, &wants);
            assert_eq!(job, Some(Job::Model(model_plan(&plan))));
            assert!(matches!(*w.model(&plan), Err(PlanError::Simulating)));
            w.run(job.unwrap());
            jobs += 1;
            assert!(jobs < 100, "the model never finishes");
        }
        // Build, simulate, replay with the figures: three slices per estimate at least.
        assert!(jobs >= 6, "{jobs} jobs");
        assert_eq!(w.simulations, 2);
        let whole = BatchModel::new(&plan).unwrap();
        let gpu = gpus::find("a100-80");
        assert_eq!(w.numbers(&plan), Some(whole.at(24, gpu.as_ref())));
        let mut exact_jobs = 0;
        while w.exact(&plan).is_none() {
            assert_eq!(w.next_job(&plan, &wants), Some(Job::Exact(plan.clone())));
            w.run(Job::Exact(plan.clone()));
            exact_jobs += 1;
        }
        assert!(exact_jobs >= 3, "{exact_jobs} jobs");
        let exact = w.exact(&plan).unwrap().as_ref().unwrap();
        let whole = estimate(&plan).unwrap();
        assert_eq!(
            (exact.peak_allocated, exact.reserved, exact.device_total),
            (whole.peak_allocated, whole.reserved, whole.device_total)
        );
        assert_eq!(exact.timeline.events.len(), whole.timeline.events.len());
        // Not heavy below the limit: simulated at once, as before.
        let mut light = Workbench::new();
        assert!(light.model(&plan).is_ok());
    }

    #[test]
    fn model_matches_full_estimates_at_any_batch_and_gpu() {
        let plan = Plan {
            res: Some(64),
            gpu: Some("a100-80".into()),
            ..Plan::new("resnet18")
        };
        let m = BatchModel::new(&plan).unwrap();
        let gpu = gpus::find("a100-80");
        for b in [1u64, 5, 33, 300, 3000] {
            let e = estimate(&Plan {
                batch: b,
                ..plan.clone()
            })
            .unwrap();
            let n = m.at(b, gpu.as_ref());
            assert!(
                rel(n.peak, e.peak_allocated) < 1e-3,
                "batch {b}: {} vs {}",
                n.peak,
                e.peak_allocated
            );
            assert!(
                close_reserved(n.device_total, e.device_total),
                "batch {b}: total {} vs {}",
                n.device_total,
                e.device_total
            );
            assert!(
                close_reserved(n.reserved, e.reserved),
                "batch {b}: reserved {} vs {}",
                n.reserved,
                e.reserved
            );
            assert_eq!(n.phase, e.peak_phase, "batch {b}");
            assert_eq!(n.context, e.context);
            let exact = n.clone().with_exact(&e);
            assert!(exact.exact && exact.peak == e.peak_allocated);
            let layers = m.layers_at(b);
            assert_eq!(layers.len(), e.layers.len());
            for ((name, bytes), l) in layers.iter().zip(&e.layers) {
                assert_eq!(name, &l.layer);
                assert!(
                    bytes.0.abs_diff(l.bytes.0) <= (l.bytes.0 / 100).max(8 << 10),
                    "{name} at batch {b}: {bytes} vs {}",
                    l.bytes
                );
            }
        }
    }

    #[test]
    fn every_preset_has_a_batch_model() {
        for m in MODELS {
            let p = Plan {
                dtype: Precision::AmpBf16,
                ..Plan::new(m.id)
            };
            let bm = BatchModel::new(&p).unwrap_or_else(|e| panic!("{}: {e}", m.id));
            let e = estimate(&Plan {
                batch: 3,
                ..p.clone()
            })
            .unwrap();
            assert!(
                rel(bm.at(3, None).peak, e.peak_allocated) < 1e-3,
                "{}",
                m.id
            );
        }
    }

    #[test]
    fn gpu_changes_only_the_fixed_part() {
        let plan = Plan::new("resnet18");
        let m = BatchModel::new(&plan).unwrap();
        let (a, b) = (
            gpus::find("v100-16").unwrap(),
            gpus::find("h100-80").unwrap(),
        );
        let (na, nb) = (m.at(8, Some(&a)), m.at(8, Some(&b)));
        assert_eq!(na.peak, nb.peak);
        assert_ne!(na.device_total, nb.device_total);
        let e = estimate(&Plan {
            batch: 8,
            gpu: Some("v100-16".into()),
            ..plan
        })
        .unwrap();
        assert!(close_reserved(na.device_total, e.device_total));
        assert_eq!(nb.device_total - na.device_total, {
            let (oa, ob) = (
                DeviceOverhead::of(Some(&a), &Stack::default()),
                DeviceOverhead::of(Some(&b), &Stack::default()),
            );
            (ob.context + ob.workspaces) - (oa.context + oa.workspaces)
        });
    }

    #[test]
    fn max_batch_guess_agrees_with_the_solver() {
        let plan = Plan {
            gpu: Some("rtx4090".into()),
            ..Plan::new("resnet50")
        };
        let gpu = gpus::find("rtx4090").unwrap();
        let m = BatchModel::new(&plan).unwrap();
        let guess = m.max_batch_guess(gpu.memory, Some(&gpu)).unwrap();
        let exact = max_batch(&plan, gpu.memory).unwrap().unwrap();
        // The guess reads the lines' reserved memory (see `close_reserved`); the solver
        // confirms with exact estimates.
        assert!(
            guess.abs_diff(exact) <= (exact * 12 / 100).max(1),
            "guess {guess} vs {exact}"
        );
        assert_eq!(m.max_batch_guess(Bytes(1 << 20), Some(&gpu)), None);
    }

    /// A page that wants more models than the cache keeps still runs out of work: the models
    /// past [`WANTED_MODELS`] are not simulated, so none pushes out another wanted one.
    #[test]
    fn more_wanted_models_than_the_cache_keeps_still_end() {
        let mut wb = Workbench::new();
        let plan = Plan::new("resnet18");
        let models: Vec<Plan> = (0..CACHE_MODELS as u64 + 20)
            .map(|r| Plan {
                res: Some(32 + r),
                ..plan.clone()
            })
            .collect();
        let wants = Wants {
            models,
            ..Default::default()
        };
        // A model is a few slices of work (two estimates of a small model: six).
        let mut jobs = 0;
        while let Some(j) = wb.next_job(&plan, &wants) {
            wb.run(j);
            jobs += 1;
            assert!(jobs <= 6 * (WANTED_MODELS + 1), "the jobs never end");
        }
        assert!(wants.models[..WANTED_MODELS]
            .iter()
            .all(|p| wb.cached(p).is_some()));
    }

    #[test]
    fn timeline_rises_in_forward_and_has_every_phase() {
        let m = BatchModel::new(&Plan::new("resnet18")).unwrap();
        let tl: Vec<_> = m.timeline_at(16).collect();
        assert!(tl.len() > 50);
        for ph in [Phase::Forward, Phase::Backward, Phase::Optimizer] {
            assert!(tl.iter().any(|(p, _)| *p == ph), "no {ph:?} events");
        }
        let total = |i: usize| tl[i].1.iter().sum::<u64>();
        let last_fwd = tl.iter().rposition(|(p, _)| *p == Phase::Forward).unwrap();
        let first_fwd = tl.iter().position(|(p, _)| *p == Phase::Forward).unwrap();
        assert!(total(last_fwd) > total(first_fwd));
    }

    #[test]
    fn ckpt_probe_knows_each_family() {
        let info = |id: &str| CkptInfo::probe(&Plan::new(id));
        let r = info("resnet50");
        assert_eq!((r.stages, r.blocks, r.segments), (4, 16, true));
        let g = info("gpt2");
        assert_eq!((g.stages > 0, g.blocks, g.segments), (true, 12, true));
        let l = info("lstm-lm");
        assert!(!l.any());
        let u = info("unet");
        assert!(u.blocks > 0 && !u.segments);
        assert!(info("vgg16").segments);
    }

    #[test]
    fn workbench_caches_and_lists_missing_work() {
        let mut wb = Workbench::new();
        let plan = Plan {
            gpu: Some("t4".into()),
            ..Plan::new("resnet18")
        };
        assert_eq!(
            wb.next_job(&plan, &Wants::default()),
            Some(Job::Model(model_plan(&plan)))
        );
        wb.model(&plan);
        let sims = wb.simulations;
        wb.model(&Plan {
            batch: 99,
            gpu: Some("h100-80".into()),
            ..plan.clone()
        });
        assert_eq!(wb.simulations, sims, "another batch or GPU re-simulated");
        assert!(matches!(
            wb.next_job(&plan, &Wants::default()),
            Some(Job::MaxBatch(_))
        ));
        let other = Plan {
            dtype: Precision::AmpBf16,
            ..plan.clone()
        };
        let wants = Wants {
            exact: true,
            models: vec![other.clone()],
            ..Default::default()
        };
        wb.run_all(&plan, &wants);
        assert!(
            wb.exact(&plan).is_some()
                && wb.max_batch(&plan).is_some()
                && wb.cached(&other).is_some()
        );
        assert_eq!(wb.next_job(&plan, &wants), None);
        assert!(
            wb.exact(&Plan {
                batch: 2,
                ..plan.clone()
            })
            .is_none(),
            "an exact estimate of another batch is not this plan's"
        );
        let n = wb.numbers(&plan).unwrap();
        let e = wb.exact(&plan).unwrap().as_ref().unwrap();
        assert!(
            close_reserved(n.device_total, e.device_total),
            "{} vs {}",
            n.device_total,
            e.device_total
        );
    }

    #[test]
    fn invalid_plans_are_cached_errors_and_want_no_more() {
        let mut wb = Workbench::new();
        let plan = Plan {
            seq: Some(4096),
            gpu: Some("t4".into()),
            ..Plan::new("gpt2")
        };
        assert!(wb.model(&plan).is_err());
        assert_eq!(wb.next_job(&plan, &Wants::default()), None);
    }

    #[test]
    fn cache_is_bounded() {
        let mut wb = Workbench::new();
        let key = |r: u64| {
            model_key(&Plan {
                res: Some(32 + r),
                ..Plan::new("resnet50")
            })
        };
        for r in 0..(CACHE_MODELS as u64 + 5) {
            wb.insert(
                key(r),
                Rc::new(Err(PlanError::Estimate(EstimateError::TooLarge))),
            );
        }
        assert_eq!(wb.models.len(), CACHE_MODELS);
        assert!(!wb.models.contains_key(&key(0)));
        assert!(wb.models.contains_key(&key(CACHE_MODELS as u64 + 4)));
    }

    #[test]
    fn largest_batches_and_probes_are_bounded() {
        let mut wb = Workbench::new();
        let plan = |s: u64| Plan {
            seq: Some(8 + s),
            gpu: Some("t4".into()),
            ..Plan::new("gpt2")
        };
        // Each sequence length is a key of its own, as a slider's session makes them.
        for s in 0..(CACHE_SMALL as u64 + 3) {
            insert_bounded(&mut wb.max_batches, max_batch_key(&plan(s)), Ok(Some(s)));
        }
        assert!(wb.max_batches.len() <= CACHE_SMALL);
        let last = plan(CACHE_SMALL as u64 + 2);
        assert_eq!(wb.max_batch(&last), Some(&Ok(Some(CACHE_SMALL as u64 + 2))));
        // Each pasted config is a model of its own.
        for v in 0..(CACHE_SMALL as u64 + 3) {
            wb.ckpt_info(&Plan {
                hf_config: Some(serde_json::json!({
                    "model_type": "llama", "hidden_size": 8, "intermediate_size": 16,
                    "num_hidden_layers": 1, "num_attention_heads": 2,
                    "num_key_value_heads": 2, "vocab_size": 16 + v
                })),
                ..Plan::new("custom")
            });
        }
        assert!(!wb.ckpt.is_empty() && wb.ckpt.len() <= CACHE_SMALL);
    }

    /// What a link's parse found is what the page starts with: nothing probes that model.
    #[test]
    fn a_parsed_link_tells_the_checkpointing_options() {
        let parsed = super::super::url::parse_query("model=gpt2&ckpt=k3&seq=512");
        let info = parsed.ckpt.expect("gpt2 cuts one stack");
        assert_eq!(info, CkptInfo::probe(&parsed.plan));
        let mut wb = Workbench::new();
        // A value no probe gives, to see that it is the one kept.
        let marked = CkptInfo {
            ops: info.ops + 1,
            ..info
        };
        wb.know_ckpt(&parsed.plan, marked);
        assert_eq!(wb.ckpt_info(&parsed.plan), marked);
        // A model cut otherwise (a ResNet's stages) is probed as before.
        assert_eq!(
            super::super::url::parse_query("model=resnet18&ckpt=stage").ckpt,
            None
        );
    }

    /// A slider over the sequence length, the resolution or the dtype probes the model once.
    #[test]
    fn shapes_and_dtypes_probe_a_model_once() {
        let mut wb = Workbench::new();
        for s in [16, 128, 1024] {
            for dtype in [Precision::Fp32, Precision::AmpBf16] {
                let info = wb.ckpt_info(&Plan {
                    seq: Some(s),
                    dtype,
                    ..Plan::new("gpt2")
                });
                assert_eq!(info.blocks, 12);
            }
        }
        for r in [32, 64, 224] {
            wb.ckpt_info(&Plan {
                res: Some(r),
                ..Plan::new("resnet18")
            });
        }
        assert_eq!(wb.ckpt.len(), 2);
        // A sequence the model cannot take builds nothing and is not kept for the model.
        let mut fresh = Workbench::new();
        let long = |seq| Plan {
            seq: Some(seq),
            ..Plan::new("gpt2")
        };
        assert_eq!(fresh.ckpt_info(&long(4096)), CkptInfo::default());
        assert!(fresh.ckpt.is_empty());
        assert_eq!(fresh.ckpt_info(&long(1024)).blocks, 12);
        assert_eq!(fresh.ckpt.len(), 1);
    }
}
