//! The search for the cheapest layouts that fit a GPU: fewest GPUs first, then the shortest
//! step. The training job is held fixed: the plan's global batch (`batch` × its micro-batches)
//! is split over the data-parallel replicas and then into micro-batches, the fewest that fit (the
//! largest micro-batch keeps the GPU busiest), at least `pp` of them under pipeline parallelism.
//! Every layout that may fit is estimated in full ([`super::evaluate`]); the graph and the stage
//! simulations are shared by layouts with the same model-parallel degrees and micro-batch. A
//! layout whose resident model state alone overflows the GPU ([`ResidentFloor`], known once per
//! tensor- and expert-parallel degree) is passed over before the graph of its micro-batch is
//! built, one whose resident state and saved activations together overflow it ([`SavedFloor`],
//! [`resident_over`]) before its pieces are simulated, and one whose simulated pieces surely
//! overflow it ([`surely_over`]) before its timelines are walked: none changes an answer.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::{layout_graph, resolve, Plan, PlanError};
use crate::estimator::config::Setup;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::Graph;
use crate::estimator::parallel::{
    evaluate, prepare_built, resident_over, surely_over, Layout, Offload, ParallelEstimate,
    Prepared, ResidentFloor, SavedFloor,
};
use crate::estimator::tune::TuneCtx;
use crate::presets::gpus::Gpu;

/// The most GPUs a search may try: far beyond any single job's layout search, and the number
/// of layouts (and so the time) grows with it.
pub const MAX_SEARCH_GPUS: u64 = 4096;

/// What the search may vary.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    pub max_gpus: u64,
    pub gpus_per_node: u64,
    /// How many fitting layouts to return.
    pub top: usize,
    /// ZeRO stages to try (data-parallel degrees above 1 only).
    pub zero_stages: Vec<u8>,
    /// Also try optimizer offload (and parameter offload at stage 3) over the GPU's host link.
    pub offload: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            max_gpus: 64,
            gpus_per_node: 8,
            top: 10,
            zero_stages: vec![0, 1, 2, 3],
            offload: false,
        }
    }
}

/// A layout that fits, with the plan that applies it.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub plan: Plan,
    pub gpus: u64,
    pub scheme: crate::estimator::parallel::Scheme,
    pub dp: u64,
    pub tp: u64,
    pub pp: u64,
    /// Expert parallelism: the data-parallel ranks each sparse layer's routed experts are split
    /// over (1 for dense models).
    pub ep: u64,
    pub zero: u8,
    pub offload_optimizer: bool,
    pub offload_params: bool,
    /// Samples per micro-batch and micro-batches per step on each replica.
    pub micro_batch: u64,
    pub micro_batches: u64,
    pub peak_device_bytes: u64,
    /// Time of one step of the whole global batch.
    pub step_seconds: Option<f64>,
    pub scaling_efficiency: Option<f64>,
}

/// The divisors of `n` in increasing order, found up to its square root: a batch of hundreds of
/// millions has a few hundred divisors, and trying every number below it took minutes.
fn divisors(n: u64) -> Vec<u64> {
    let mut low = Vec::new();
    let mut high = Vec::new();
    let mut d = 1;
    while d <= n / d {
        if n.is_multiple_of(d) {
            low.push(d);
            if d != n / d {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    low
}

/// One layout's degrees: GPUs in all and per node, nodes, and the data-, tensor-, pipeline-
/// and expert-parallel degrees.
#[derive(Clone, Copy, Debug)]
struct Shape {
    gpus: u64,
    node_gpus: u64,
    nodes: u64,
    dp: u64,
    tp: u64,
    pp: u64,
    ep: u64,
}

/// A ZeRO stage with optimizer offload and parameter offload.
type Stage = (u8, bool, bool);

/// A fitting layout as the search reports it.
fn candidate(
    shape: &Shape,
    (zero, offload_optimizer, offload_params): Stage,
    micro_batches: u64,
    e: &ParallelEstimate,
    plan: Plan,
) -> Candidate {
    Candidate {
        gpus: shape.gpus,
        scheme: e.scheme,
        dp: shape.dp,
        tp: shape.tp,
        pp: shape.pp,
        ep: shape.ep,
        zero,
        offload_optimizer,
        offload_params,
        micro_batch: plan.batch,
        micro_batches,
        peak_device_bytes: e.per_gpu.device_total_bytes,
        step_seconds: e.step_seconds,
        scaling_efficiency: e.scaling_efficiency,
        plan,
    }
}

/// The cheapest layouts of `plan` that fit its GPU (`plan.gpu` is required).
pub fn search(plan: &Plan, opts: &SearchOptions) -> Result<Vec<Candidate>, PlanError> {
    search_with(plan, opts, true).map(|(found, _)| found)
}

/// [`search`] with the floors asked or not (`floors`), and how many layouts it prepared: the
/// floors must change no answer, only the work (tests compare the two).
#[doc(hidden)]
pub fn search_counted(
    plan: &Plan,
    opts: &SearchOptions,
    floors: bool,
) -> Result<(Vec<Candidate>, usize), PlanError> {
    search_with(plan, opts, floors)
}

/// [`search`], passing over the layouts [`resident_over`] rules out before building or
/// preparing them when `floor`, and how many layouts it prepared.
fn search_with(
    plan: &Plan,
    opts: &SearchOptions,
    floor: bool,
) -> Result<(Vec<Candidate>, usize), PlanError> {
    let mut steps = SearchSteps::with_floors(plan, opts, floor)?;
    let found = steps.finish();
    Ok((found, steps.layouts.cache.len()))
}

/// A search under way, one set of degrees (a [`Shape`], every stage and micro-batch count of it)
/// per step: the page runs it a few steps per task, so a search of a 128-expert model, seconds
/// of work, leaves the page live. Run to the end it is [`search`].
pub struct SearchSteps {
    layouts: Layouts,
    /// World sizes not yet begun, fewest GPUs first.
    worlds: std::vec::IntoIter<u64>,
    /// The world under way: its size, its shapes not yet begun, the shape under way and what
    /// fitted so far.
    world: Option<World>,
    found: Vec<Candidate>,
    gpus_per_node: u64,
    experts: bool,
    top: usize,
}

/// A world size under way in a [`SearchSteps`].
struct World {
    gpus: u64,
    shapes: std::vec::IntoIter<Shape>,
    shape: Option<ShapeWork>,
    fitting: Vec<Candidate>,
}

impl SearchSteps {
    /// The search of `plan`'s layouts over `opts`, not yet begun; refused as [`search`] refuses.
    pub fn new(plan: &Plan, opts: &SearchOptions) -> Result<SearchSteps, PlanError> {
        SearchSteps::with_floors(plan, opts, true)
    }

    fn with_floors(
        plan: &Plan,
        opts: &SearchOptions,
        floor: bool,
    ) -> Result<SearchSteps, PlanError> {
        let gpu = resolve::gpu(plan)?.ok_or_else(|| {
            EstimateError::Unsupported("the search needs a GPU (`gpu` in the plan) to fit".into())
        })?;
        if opts.max_gpus > MAX_SEARCH_GPUS {
            return Err(EstimateError::TooBig {
                field: "max_gpus",
                max: MAX_SEARCH_GPUS,
                got: opts.max_gpus,
            }
            .into());
        }
        let gpn = opts.gpus_per_node.max(1);
        let base_m = plan
            .parallel
            .as_ref()
            .and_then(|p| p.micro_batches)
            .unwrap_or(plan.accumulation)
            .max(1) as u64;
        let mut worlds: Vec<u64> = (1..=gpn.min(opts.max_gpus)).collect();
        worlds.extend((2..).map(|k| k * gpn).take_while(|&w| w <= opts.max_gpus));
        let experts = has_routed_experts(plan)?;
        let mut layouts = Layouts {
            plan: plan.clone(),
            gpu,
            opts: opts.clone(),
            global: plan.batch.saturating_mul(base_m),
            cache: HashMap::new(),
            overheads: HashMap::new(),
            built: HashMap::new(),
            resident: HashMap::new(),
            floor,
            alike: false,
        };
        layouts.alike = layouts.builds_alike();
        Ok(SearchSteps {
            layouts,
            worlds: worlds.into_iter(),
            world: None,
            found: Vec::new(),
            gpus_per_node: gpn,
            experts,
            top: opts.top,
        })
    }

    /// Runs the steps left to the end: the fitting layouts, best first.
    pub fn finish(&mut self) -> Vec<Candidate> {
        loop {
            if let Some(found) = self.step() {
                return found;
            }
        }
    }

    /// The GPUs of the world under way (0 before the first step): how far the search got.
    pub fn gpus(&self) -> u64 {
        self.world.as_ref().map_or(0, |w| w.gpus)
    }

    /// Tries the next stage of a shape; the fitting layouts, best first, once the search is
    /// over (a world is searched whole, then the search stops if it has `top` layouts).
    pub fn step(&mut self) -> Option<Vec<Candidate>> {
        loop {
            let Some(world) = self.world.as_mut() else {
                let next = (self.found.len() < self.top)
                    .then(|| self.worlds.next())
                    .flatten();
                let Some(w) = next else {
                    let mut found = std::mem::take(&mut self.found);
                    found.truncate(self.top);
                    return Some(found);
                };
                self.world = Some(World {
                    gpus: w,
                    shapes: self.shapes(w).into_iter(),
                    shape: None,
                    fitting: Vec::new(),
                });
                continue;
            };
            if let Some(work) = world.shape.as_mut() {
                if work.step(&mut self.layouts) {
                    let done = world.shape.take().map(ShapeWork::candidates);
                    world.fitting.extend(done.into_iter().flatten());
                }
                return None;
            }
            if let Some(shape) = world.shapes.next() {
                world.shape = Some(ShapeWork::new(&self.layouts, shape));
                continue;
            }
            let mut here = std::mem::take(&mut world.fitting);
            here.sort_by(|a, b| {
                let ka = a.step_seconds.unwrap_or(f64::INFINITY);
                let kb = b.step_seconds.unwrap_or(f64::INFINITY);
                ka.total_cmp(&kb)
                    .then(a.peak_device_bytes.cmp(&b.peak_device_bytes))
            });
            self.found.append(&mut here);
            self.world = None;
        }
    }

    /// Every shape of a world of `w` GPUs the search tries, in its order.
    fn shapes(&self, w: u64) -> Vec<Shape> {
        let gpn = self.gpus_per_node;
        let (node_gpus, nodes) = if w <= gpn { (w, 1) } else { (gpn, w / gpn) };
        let mut shapes = Vec::new();
        for tp in divisors(node_gpus) {
            for pp in divisors(w / tp) {
                let dp = w / (tp * pp);
                if !self.layouts.global.is_multiple_of(dp) {
                    continue;
                }
                // Expert parallelism splits the routed experts over ep of the dp ranks; an ep that
                // does not divide the experts is refused by the build and so passed over.
                let eps = if self.experts { divisors(dp) } else { vec![1] };
                for ep in eps {
                    shapes.push(Shape {
                        gpus: w,
                        node_gpus,
                        nodes,
                        dp,
                        tp,
                        pp,
                        ep,
                    });
                }
            }
        }
        shapes
    }
}

/// The search's fixed inputs and the simulations its layouts share.
struct Layouts {
    plan: Plan,
    gpu: Gpu,
    opts: SearchOptions,
    /// Samples per optimizer step over all replicas.
    global: u64,
    /// A simulation depends on the model-parallel degrees, the micro-batch and whether
    /// gradients accumulate (more than one micro-batch; not how many: see
    /// `StepOptions::accumulation`), so layouts of every world size share it: keyed by
    /// micro-batch count, a 70B search re-simulated the same stages for each world and took half
    /// a minute.
    cache: HashMap<Key, Option<Prepared>>,
    /// The allocator overhead of each unsharded step, which the pipeline's depth does not
    /// change: keyed as the cache without `pp`.
    overheads: HashMap<(u64, u64, u64, bool), u64>,
    /// The model built for each tensor- and expert-parallel degree and micro-batch (`None`: the
    /// build refuses them), which every pipeline depth cuts, and the floor of what its pieces
    /// save: a layout over the GPU by that floor is passed over before its pieces are simulated.
    built: HashMap<(u64, u64, u64), Option<Built>>,
    /// The floor of what a rank keeps resident, for each tensor- and expert-parallel degree
    /// (`None`: the first build of those degrees failed): the parameters do not depend on the
    /// micro-batch, so a layout over the GPU by its model state alone is passed over before
    /// the graph of its micro-batch is built.
    resident: HashMap<(u64, u64), Option<ResidentFloor>>,
    /// Whether the floors are asked (always, but in the test that they change no answer).
    floor: bool,
    /// Whether every stage's layout builds alike ([`Layouts::builds_alike`]): only then is a
    /// layout passed over on its resident floor before its micro-batch's graph is built.
    alike: bool,
}

/// What a prepared layout is keyed by: tensor-, pipeline- and expert-parallel degrees,
/// micro-batch and whether gradients accumulate.
type Key = (u64, u64, u64, u64, bool);

/// A model built for a layout's degrees and micro-batch (`g`: `None` once dropped), and what
/// its pieces surely save.
struct Built {
    label: String,
    g: Option<Arc<Graph>>,
    floor: SavedFloor,
}

/// A layout's prepared pieces (`None`: it cannot be built or cut), or its floor over the GPU.
enum Prepare {
    Done(Option<Prepared>),
    Over,
}

impl Prepare {
    fn as_ref(&self) -> Option<&Prepared> {
        match self {
            Prepare::Done(p) => p.as_ref(),
            Prepare::Over => None,
        }
    }
}

impl Layouts {
    /// The stages a layout over `dp` replicas tries: at dp = 1 ZeRO shards nothing, and stage 3
    /// only matters with parameter offload.
    fn stages(&self, dp: u64) -> Vec<Stage> {
        let zs: Vec<u8> = if dp > 1 {
            self.opts.zero_stages.clone()
        } else {
            vec![0, 3]
        };
        let mut stages = Vec::new();
        for z in zs {
            if dp > 1 || z == 0 {
                stages.push((z, false, false));
            }
            if self.opts.offload {
                if dp > 1 || z == 0 {
                    stages.push((z, true, false));
                }
                if z == 3 {
                    stages.push((z, true, true));
                }
            }
        }
        stages
    }

    /// Whether the model builds (or is refused) alike for every stage the search tries. The
    /// build refuses some optimizers at some stages (`TuneCtx::from_plan`: bitsandbytes under
    /// ZeRO or FSDP), and the graph built for the first layout of a micro-batch serves the
    /// later ones, whatever their stage: where stages differ, which layout asks first decides
    /// what the later ones get, so no layout may be passed over before that build.
    fn builds_alike(&self) -> bool {
        let mut oks = [1, 2]
            .into_iter()
            .flat_map(|dp| self.stages(dp))
            .map(|(z, oo, op)| {
                let mut p = self.plan.clone();
                let mut par = p.parallel.clone().unwrap_or_default();
                par.zero = Some(z);
                par.fsdp = false;
                p.parallel = Some(par);
                p.offload = (oo || op).then(|| Offload {
                    optimizer: oo,
                    params: op,
                    ..self.plan.offload.clone().unwrap_or_default()
                });
                TuneCtx::from_plan(&p.setup()).is_ok()
            });
        let first = oks.next();
        oks.all(|ok| Some(ok) == first)
    }

    /// The layout at `m` micro-batches and `stage`, estimated, with the plan that applies it
    /// (`None`: the layout cannot be built or resolved, or surely does not fit).
    fn at(&mut self, shape: &Shape, m: u64, stage: Stage) -> Option<(ParallelEstimate, Plan)> {
        let (zero, off_opt, off_params) = stage;
        let plan = &self.plan;
        let b = self.global / shape.dp / m;
        let mut p = plan.clone();
        p.batch = b;
        p.accumulation = 1;
        let mut par = plan.parallel.clone().unwrap_or_default();
        par.gpus_per_node = Some(shape.node_gpus);
        par.nodes = Some(shape.nodes);
        par.dp = Some(shape.dp);
        par.tp = shape.tp;
        par.pp = shape.pp;
        par.ep = shape.ep;
        par.zero = Some(zero);
        par.fsdp = false;
        par.micro_batches = Some(m as u32);
        par.interleave = 1;
        par.sequence_parallel = par.sequence_parallel && shape.tp > 1;
        p.parallel = Some(par);
        p.offload = (off_opt || off_params).then(|| Offload {
            optimizer: off_opt,
            params: off_params,
            ..plan.offload.clone().unwrap_or_default()
        });
        let links = resolve::layout_links(&p, Some(&self.gpu)).ok()?;
        let setup = p.setup();
        let layout = Layout::resolve(&setup, links).ok()?;
        let step = (shape.tp, shape.ep, b, m > 1);
        let key = (shape.tp, shape.pp, shape.ep, b, m > 1);
        if !self.cache.contains_key(&key) {
            let prep = self.prepare(&p, &setup, &layout, key);
            if let Some(prep) = prep.as_ref() {
                self.overheads.entry(step).or_insert(prep.overhead);
            }
            match prep {
                Prepare::Over => return None,
                Prepare::Done(prep) => self.cache.insert(key, prep),
            };
        }
        let prep = self.cache.get(&key)?.as_ref()?;
        if surely_over(&setup, &layout, prep, &self.gpu) {
            return None;
        }
        let e = evaluate(&setup, &layout, prep, Some(&self.gpu), None);
        Some((e, p))
    }

    /// Prepares `layout` (of the plan `p`, cache key `key`) unless its floor is over the GPU.
    /// The model is built once per tensor- and expert-parallel degree and micro-batch; a build
    /// whose first layout is over is dropped (its floor kept) and built again if a later one
    /// needs its pieces: a 128-expert model with every expert on one GPU is over at every
    /// micro-batch, and holding each of those builds doubled the search's memory.
    fn prepare(&mut self, p: &Plan, setup: &Setup, layout: &Layout, key: Key) -> Prepare {
        let (tp, _, ep, b, more) = key;
        let build = || {
            layout_graph(p, layout).ok().map(|(label, g)| Built {
                floor: SavedFloor::of(&g),
                label,
                g: Some(Arc::new(g)),
            })
        };
        let chunks = layout.pp * layout.interleave;
        let resident = if self.floor && self.alike {
            // The first layout of these degrees builds its own micro-batch's graph for the
            // resident floor (the build is kept for it).
            if !self.resident.contains_key(&(tp, ep)) {
                let built = self.built.entry((tp, ep, b)).or_insert_with(build);
                let floor = built
                    .as_ref()
                    .and_then(|x| x.g.as_ref())
                    .map(|g| ResidentFloor::of(g, setup));
                self.resident.insert((tp, ep), floor);
            }
            self.resident
                .get(&(tp, ep))
                .and_then(Option::as_ref)
                .and_then(|r| r.pieces(setup, layout))
        } else {
            None
        };
        if let Some(res) = resident.as_deref() {
            let built = self.built.get_mut(&(tp, ep, b)).and_then(Option::as_mut);
            let saved = built.as_ref().and_then(|x| x.floor.pieces(chunks));
            if resident_over(setup, layout, res, saved.as_deref(), &self.gpu) {
                // Dropped as the saved floor alone drops it below; a graph that floor keeps
                // is kept, for the later stages and replicas its micro-batch fits (dropping it
                // here rebuilt a 128-expert model a dozen times per search).
                let none = vec![0; chunks as usize];
                let saved_over = saved
                    .as_deref()
                    .is_some_and(|f| resident_over(setup, layout, &none, Some(f), &self.gpu));
                if let Some(built) = built.filter(|_| saved_over) {
                    built.g = None;
                }
                return Prepare::Over;
            }
        }
        let built = self.built.entry((tp, ep, b)).or_insert_with(build);
        // A build that fails fails every layout of these degrees, as its prepare would.
        let Some(built) = built.as_mut() else {
            return Prepare::Done(None);
        };
        if let Some(f) = built.floor.pieces(chunks).filter(|_| self.floor) {
            // Over on its saved activations alone, the layout drops the graph as before; over
            // only with its resident state, it keeps it for the stages that hold less (with
            // the resident floor dropping it too, a 128-expert model was rebuilt 7 times).
            let none = vec![0; chunks as usize];
            let saved_over = resident_over(setup, layout, &none, Some(&f), &self.gpu);
            if saved_over
                || resident
                    .as_deref()
                    .is_some_and(|r| resident_over(setup, layout, r, Some(&f), &self.gpu))
            {
                if saved_over {
                    built.g = None;
                }
                return Prepare::Over;
            }
        }
        if built.g.is_none() {
            built.g = layout_graph(p, layout).ok().map(|(_, g)| Arc::new(g));
        }
        let Some(g) = built.g.as_ref() else {
            return Prepare::Done(None);
        };
        let known = self.overheads.get(&(tp, ep, b, more)).copied();
        Prepare::Done(prepare_built(&built.label, setup, layout, g, known).ok())
    }

    /// [`Layouts::at`] when the layout fits the GPU.
    fn fits(&mut self, shape: &Shape, m: u64, stage: Stage) -> Option<(ParallelEstimate, Plan)> {
        self.at(shape, m, stage)
            .filter(|(e, _)| e.fits == Some(true))
    }
}

/// One shape's layouts under way, one layout estimated per step: each stage's layout at the
/// fewest micro-batches that fit, listed by micro-batch count, then stage, as a scan would list
/// them.
///
/// Past one micro-batch (where gradients start to persist between micro-batches) a layout
/// needs no more memory as the micro-batch shrinks: the activations and the tensor-parallel
/// buffers scale with it, the pipeline keeps `pp - stage` micro-batches in flight whatever
/// their number (m >= pp), everything else is fixed. So a stage that does not fit at the
/// most micro-batches fits at no count above one (without that, a 70B search tried every
/// micro-batch count of every layout too small to hold it), and the fewest that fit are
/// found by bisection between the fewest above one and the most.
struct ShapeWork {
    shape: Shape,
    stages: Vec<Stage>,
    /// The micro-batch counts above one to bisect over, fewest first.
    rest: Vec<u64>,
    /// What is left, in order.
    tasks: std::collections::VecDeque<Task>,
    fitting: Vec<(u64, usize, ParallelEstimate, Plan)>,
}

/// One layout of a [`ShapeWork`] to estimate, for stage `k`.
enum Task {
    /// At one micro-batch, tried whatever: its gradients do not persist.
    One(usize),
    /// At the most micro-batches, for a stage that did not fit at one.
    Most(usize),
    /// Between `rest[lo]` and `rest[hi]`, the fewest known to fit (`best` there).
    Bisect {
        k: usize,
        lo: usize,
        hi: usize,
        best: Box<(ParallelEstimate, Plan)>,
    },
}

impl ShapeWork {
    fn new(layouts: &Layouts, shape: Shape) -> ShapeWork {
        let per_replica = layouts.global / shape.dp;
        let stages = layouts.stages(shape.dp);
        let ms: Vec<u64> = divisors(per_replica)
            .into_iter()
            .filter(|&m| m >= shape.pp && m <= crate::estimator::MAX_ACCUMULATION as u64)
            .collect();
        let one = ms.first() == Some(&1);
        let rest = ms[usize::from(one)..].to_vec();
        let mut tasks: std::collections::VecDeque<Task> = Default::default();
        if one {
            tasks.extend((0..stages.len()).map(Task::One));
        }
        if !rest.is_empty() {
            tasks.extend((0..stages.len()).map(Task::Most));
        }
        ShapeWork {
            shape,
            stages,
            rest,
            tasks,
            fitting: Vec::new(),
        }
    }

    /// Estimates the next layout; `true` once every stage has its answer.
    fn step(&mut self, layouts: &mut Layouts) -> bool {
        let (shape, rest) = (&self.shape, &self.rest);
        while let Some(task) = self.tasks.pop_front() {
            match task {
                Task::One(k) => {
                    if let Some((e, p)) = layouts.fits(shape, 1, self.stages[k]) {
                        self.fitting.push((1, k, e, p));
                    }
                }
                Task::Most(k) => {
                    if self.fitting.iter().any(|f| f.1 == k) {
                        continue;
                    }
                    let top = rest.len() - 1;
                    if let Some(best) = layouts.fits(shape, rest[top], self.stages[k]) {
                        self.tasks.push_front(Task::Bisect {
                            k,
                            lo: 0,
                            hi: top,
                            best: Box::new(best),
                        });
                    }
                }
                Task::Bisect { k, lo, hi, best } if lo >= hi => {
                    let (e, p) = *best;
                    self.fitting.push((rest[hi], k, e, p));
                    continue;
                }
                Task::Bisect {
                    k,
                    lo,
                    hi,
                    mut best,
                } => {
                    let mid = (lo + hi) / 2;
                    let next = match layouts.fits(shape, rest[mid], self.stages[k]) {
                        Some(f) => {
                            *best = f;
                            (lo, mid)
                        }
                        None => (mid + 1, hi),
                    };
                    self.tasks.push_front(Task::Bisect {
                        k,
                        lo: next.0,
                        hi: next.1,
                        best,
                    });
                }
            }
            break;
        }
        self.tasks.is_empty()
    }

    /// The fitting layouts found, once [`ShapeWork::step`] is done.
    fn candidates(mut self) -> Vec<Candidate> {
        self.fitting.sort_by_key(|f| (f.0, f.1));
        let (shape, stages) = (self.shape, self.stages);
        self.fitting
            .into_iter()
            .map(|(m, k, e, p)| candidate(&shape, stages[k], m, &e, p))
            .collect()
    }
}

/// Whether the plan's model has routed experts to split over GPUs (built once, at batch 1 and
/// without a layout: building is cheap next to the simulations the search runs).
fn has_routed_experts(plan: &Plan) -> Result<bool, PlanError> {
    let mut p = plan.clone();
    p.batch = 1;
    p.parallel = None;
    p.offload = None;
    Ok(super::build_graph(&p)?.tensors.iter().any(|t| t.expert))
}

#[cfg(test)]
mod tests {
    use super::divisors;

    #[test]
    fn divisors_in_order_by_trial_below_the_root() {
        assert_eq!(divisors(1), vec![1]);
        assert_eq!(divisors(12), vec![1, 2, 3, 4, 6, 12]);
        assert_eq!(divisors(49), vec![1, 7, 49]);
        for n in 1..200u64 {
            let slow: Vec<u64> = (1..=n).filter(|d| n % d == 0).collect();
            assert_eq!(divisors(n), slow, "{n}");
        }
    }
}

#[cfg(test)]
mod layouts {
    use super::*;

    /// Worlds whose replicas get fewer samples than pipeline stages have no micro-batch count
    /// to try (12 samples: dp 1 × pp 16 cannot run); they are passed over, the rest still found.
    #[test]
    fn a_world_with_no_micro_batch_count_is_passed_over() {
        let mut plan = Plan::new("gpt2");
        plan.batch = 12;
        plan.seq = Some(1024);
        plan.gpu = Some("custom:3".into());
        let opts = SearchOptions {
            max_gpus: 16,
            top: 40,
            ..Default::default()
        };
        let found = search(&plan, &opts).unwrap();
        assert_eq!(found.len(), 21);
        assert!(found
            .iter()
            .all(|c| c.micro_batch * c.micro_batches * c.dp == 12));
    }
}

#[cfg(test)]
mod floor {
    use super::*;

    /// The floor that passes over layouts before their pieces are simulated changes no answer:
    /// the same layouts, estimates and plans with it as without, while it prepares fewer.
    /// Cases: a mixture of experts whose every expert on one GPU is far too large (the floor's
    /// reason to be), and a dense decoder with a batch that only a deep pipeline holds.
    #[test]
    fn the_floor_changes_no_answer() {
        let mut moe = Plan::new("custom");
        moe.hf_config = Some(
            serde_json::json!({"model_type": "qwen3_moe", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 256, "head_dim": 16, "num_experts": 16,
            "num_experts_per_tok": 4, "moe_intermediate_size": 256}),
        );
        moe.batch = 8;
        moe.seq = Some(256);
        moe.gpu = Some("custom:0.56".into());
        let mut dense = Plan::new("gpt2");
        dense.batch = 16;
        dense.seq = Some(1024);
        dense.gpu = Some("custom:6".into());
        for plan in [moe, dense] {
            let opts = SearchOptions {
                max_gpus: 16,
                top: 40,
                offload: true,
                ..Default::default()
            };
            let (with, prepared_with) = search_with(&plan, &opts, true).unwrap();
            let (without, prepared_without) = search_with(&plan, &opts, false).unwrap();
            assert!(!with.is_empty(), "{}", plan.model);
            assert_eq!(
                serde_json::to_string(&with).unwrap(),
                serde_json::to_string(&without).unwrap(),
                "{}",
                plan.model
            );
            assert!(
                prepared_with < prepared_without,
                "{}: {prepared_with} of {prepared_without}",
                plan.model
            );
        }
    }
}
