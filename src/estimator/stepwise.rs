//! An estimate computed a slice of work at a time: the graph's build, the step's simulation,
//! the caching allocator's replay a few thousand events per slice, and the figures read off the
//! result; for serving, the same again for the last decode step. [`estimate`] runs every slice in
//! one go; a caller that must answer input between slices (the planner page's
//! background work) runs one per task, so no task holds the thread for a whole simulation.

use super::allocator::{AllocatorReport, Replay};
use super::config::Setup;
use super::error::EstimateError;
use super::estimate::{
    build_graph, build_graph_step, estimate_step, infer_lengths, simulate_step, Estimate,
    InferenceReport, Pass, ReplayInputs,
};
use super::graph::{Graph, StorageKind};
use super::hardware::Gpu;
use super::model::{InputKind, ModelSpec};
use super::simulate::StepResult;
use super::tune::Mode;
use super::units::Bytes;

/// Allocator events replayed per slice: a step of a 70B model at 8192 tokens records some
/// 45,000, replayed natively at about 70 ns each, and the page's WebAssembly is some times
/// slower, so a slice stays within a few milliseconds there.
pub const REPLAY_SLICE: usize = 8192;

/// Estimates one training step of `model` under `setup` on `gpu` (`None`: the default card, see
/// [`super::hardware::DeviceOverhead`]); for inference, the prefill and the last decode step,
/// reporting the larger peak.
pub fn estimate(
    model: &ModelSpec,
    setup: &Setup,
    gpu: Option<&Gpu>,
) -> Result<Estimate, EstimateError> {
    let mut s = Stepwise::new(model, setup, gpu);
    loop {
        if let Some(e) = s.step() {
            return e;
        }
    }
}

/// The prefill's figures that the estimate of a serving plan keeps while its decode step runs.
struct Prefill {
    estimate: Estimate,
    prefill_peak: Bytes,
    context: u64,
    new_tokens: u64,
    image_tokens: u64,
    per_token: Bytes,
}

enum Stage {
    Start,
    /// A graph built (the step's, or the decode step's after `prefill`).
    Built {
        g: Box<Graph>,
        prefill: Option<Box<Prefill>>,
    },
    /// Its step simulated, its allocator stream being replayed.
    Replaying(Box<Replaying>),
    /// A serving plan's prefill estimated; the decode step's graph comes next.
    Prefilled(Box<Prefill>),
    Done,
}

struct Replaying {
    g: Graph,
    r: StepResult,
    replay: Replay,
    prefill: Option<Box<Prefill>>,
}

/// One plan's estimate under way ([`Stepwise::step`] until it answers).
pub struct Stepwise {
    model: ModelSpec,
    setup: Setup,
    gpu: Option<Gpu>,
    stage: Stage,
}

impl Stepwise {
    pub fn new(model: &ModelSpec, setup: &Setup, gpu: Option<&Gpu>) -> Stepwise {
        Stepwise {
            model: model.clone(),
            setup: setup.clone(),
            gpu: gpu.copied(),
            stage: Stage::Start,
        }
    }

    /// Runs the next slice; the estimate once the last one has run (and `None` after that).
    pub fn step(&mut self) -> Option<Result<Estimate, EstimateError>> {
        match self.advance() {
            Ok(e) => e.map(Ok),
            Err(e) => {
                self.stage = Stage::Done;
                Some(Err(e))
            }
        }
    }

    fn advance(&mut self) -> Result<Option<Estimate>, EstimateError> {
        let gpu = self.gpu.as_ref();
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Start => {
                if self.setup.validation_batch.is_some() {
                    // The pass's code is apart (the page fetches it with the models'
                    // builders): the plan layer routes such a plan to `estimate_validated`.
                    return Err(EstimateError::Unsupported(
                        "a plan with \"validation_batch\" is estimated by estimate_validated"
                            .into(),
                    ));
                }
                let g = build_graph(&self.model, &self.setup)?;
                self.stage = Stage::Built {
                    g: Box::new(g),
                    prefill: None,
                };
                Ok(None)
            }
            Stage::Prefilled(prefill) => {
                let g = build_graph_step(&self.model, &self.setup, Pass::Decode)?;
                self.stage = Stage::Built {
                    g: Box::new(g),
                    prefill: Some(prefill),
                };
                Ok(None)
            }
            Stage::Built { g, prefill } => {
                let inputs = ReplayInputs::of(&self.setup, gpu);
                let r = simulate_step(&g, &self.setup, &inputs)?;
                let replay = Replay::new(&r.alloc_trace, &[], inputs.settings, inputs.capacity);
                self.stage = Stage::Replaying(Box::new(Replaying {
                    g: *g,
                    r,
                    replay,
                    prefill,
                }));
                Ok(None)
            }
            Stage::Replaying(mut w) => {
                if !w.replay.advance(&w.r.alloc_trace, REPLAY_SLICE, None) {
                    self.stage = Stage::Replaying(w);
                    return Ok(None);
                }
                let Replaying {
                    g,
                    r,
                    replay,
                    prefill,
                    ..
                } = *w;
                let report: AllocatorReport = replay.finish().1;
                let e = estimate_step(&self.model.label, &self.setup, &g, gpu, report, r);
                match prefill {
                    None => self.after_step(&g, e),
                    Some(p) => Ok(Some(after_decode(*p, e))),
                }
            }
            Stage::Done => Ok(None),
        }
    }

    /// The step's estimate is the answer, unless the plan serves tokens: then it is the
    /// prefill's, and the last decode step follows when more than one token is generated.
    fn after_step(
        &mut self,
        g: &Graph,
        prefill: Estimate,
    ) -> Result<Option<Estimate>, EstimateError> {
        let InputKind::Tokens { default_seq, .. } = self.model.input else {
            return Ok(Some(prefill));
        };
        if self.setup.mode != Mode::Infer {
            return Ok(Some(prefill));
        }
        let setup = &self.setup;
        let (context, new_tokens) = infer_lengths(setup, setup.seq.unwrap_or(default_seq))?;
        // The prefill's cache holds the prompt's positions, image placeholders included.
        let prompt = context.saturating_add(g.image_tokens);
        let per_token =
            Bytes(g.storage_bytes(StorageKind::KvCache).0 / setup.batch.saturating_mul(prompt));
        let p = Prefill {
            prefill_peak: prefill.peak_allocated,
            estimate: prefill,
            context,
            new_tokens,
            image_tokens: g.image_tokens,
            per_token,
        };
        if new_tokens >= 2 {
            self.stage = Stage::Prefilled(Box::new(p));
            return Ok(None);
        }
        Ok(Some(with_inference(p, None)))
    }
}

/// A serving plan's answer: the larger of the prefill's and the last decode step's peaks, with
/// the decode step's (larger) KV cache.
fn after_decode(p: Prefill, decode: Estimate) -> Estimate {
    let dp = decode.peak_allocated;
    if dp > p.estimate.peak_allocated {
        with_inference(
            Prefill {
                estimate: decode,
                ..p
            },
            Some(dp),
        )
    } else {
        let kv = decode.kv_cache_bytes;
        let mut p = p;
        p.estimate.kv_cache_bytes = kv;
        with_inference(p, Some(dp))
    }
}

/// `p`'s estimate (the prefill's or the decode step's, whichever peaks higher) with the report
/// of both passes.
fn with_inference(p: Prefill, decode_peak: Option<Bytes>) -> Estimate {
    let Prefill {
        mut estimate,
        prefill_peak,
        context,
        new_tokens,
        image_tokens,
        per_token,
    } = p;
    estimate.inference = Some(InferenceReport {
        context,
        image_tokens,
        new_tokens,
        prefill_peak,
        decode_peak,
        kv_bytes_per_token: per_token,
    });
    estimate
}
