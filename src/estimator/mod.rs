//! The estimator core: pure Rust, no web dependency. A model is a tape of ops with shapes
//! ([`graph`], [`ops`]); one training step is replayed as PyTorch runs it ([`simulate`]); the
//! result is a timeline of live bytes by category and phase, its peak and a breakdown.
//!
//! ```
//! use vram_planner::estimator::{estimate, config::Plan};
//! let mut plan = Plan::new("resnet18");
//! plan.batch = 8;
//! let e = estimate(&plan).unwrap();
//! assert!(e.peak_allocated.gib() > 0.1);
//! ```

pub mod config;
pub mod device;
pub mod error;
pub mod graph;
pub mod ops;
pub mod ops_seq;
pub mod ops_cnn;
pub mod ops_cpu;
pub mod ops_text;
pub mod optimizer;
pub mod parallel;
pub mod simulate;
pub mod sweep;
pub mod timeline;
pub mod units;

use serde::Serialize;

use crate::presets::{gpus, models};
use config::{BuildCtx, Plan};
use error::EstimateError;
use graph::Graph;
use simulate::{simulate, StepOptions};
use timeline::{Category, Phase, Timeline};
use units::Bytes;

/// Upper limits that keep every product inside 64 bits and every answer meaningful.
pub const MAX_BATCH: u64 = 1 << 30;
pub const MAX_RES: u64 = 16_384;
pub const MAX_SEQ: u64 = 1 << 24;
pub const MAX_ACCUMULATION: u32 = 1 << 16;

/// One row of the breakdown at the peak.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub category: Category,
    pub bytes: Bytes,
}

/// Saved activation bytes of one top-level module after forward.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LayerActivation {
    pub layer: String,
    pub bytes: Bytes,
}

/// The answer for one plan.
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub model: String,
    pub param_count: u64,
    /// Exact bytes (no allocator rounding) of parameters, their gradients and optimizer state.
    pub param_bytes: Bytes,
    pub grad_bytes: Bytes,
    pub opt_state_bytes: Bytes,
    /// Peak of tensors live at once, each rounded to 512 B (what `max_memory_allocated` counts
    /// for the model's tensors).
    pub peak_allocated: Bytes,
    pub peak_phase: Phase,
    /// The op running at the peak (module path and op kind).
    pub peak_op: Option<String>,
    pub peak_forward: Bytes,
    /// Live bytes by category at the peak; sums to `peak_allocated`.
    pub breakdown: Vec<Row>,
    /// cuBLAS/cuBLASLt workspaces (allocated through PyTorch's allocator on the device).
    pub workspaces: Bytes,
    /// Caching-allocator segments at their largest, workspaces included.
    pub reserved: Bytes,
    /// CUDA context and kernels.
    pub context: Bytes,
    /// What `nvidia-smi` would show: reserved + context.
    pub device_total: Bytes,
    pub forward_flops: f64,
    /// Extra forward FLOPs spent recomputing checkpointed segments.
    pub recompute_flops: f64,
    pub layers: Vec<LayerActivation>,
    #[serde(skip)]
    pub timeline: Timeline,
}

impl Estimate {
    pub fn category(&self, c: Category) -> Bytes {
        self.breakdown.iter().find(|r| r.category == c).map(|r| r.bytes).unwrap_or_default()
    }
    /// Training FLOPs of one optimizer step: forward, backward (≈ 2× forward) and recomputation.
    pub fn step_flops(&self, accumulation: u32) -> f64 {
        (3.0 * self.forward_flops + self.recompute_flops) * accumulation as f64
    }
}

fn check_range(field: &'static str, v: u64, min: u64, max: u64) -> Result<(), EstimateError> {
    if v < min {
        return Err(EstimateError::TooSmall { field, min, got: v });
    }
    if v > max {
        return Err(EstimateError::TooBig { field, max, got: v });
    }
    Ok(())
}

/// Validates the plan and builds the model's forward tape.
pub fn build_graph(plan: &Plan) -> Result<Graph, EstimateError> {
    check_range("batch", plan.batch, 1, MAX_BATCH)?;
    check_range("accumulation", plan.accumulation as u64, 1, MAX_ACCUMULATION as u64)?;
    let mut ctx = BuildCtx { batch: plan.batch, res: 224, seq: 512, precision: plan.dtype, ckpt: plan.ckpt, attn: plan.attn, cudnn: plan.cudnn.unwrap_or(plan.device == config::Device::Cuda), device: plan.device, tp: 1, sequence_parallel: false };
    if let Some(par) = &plan.parallel {
        ctx.tp = par.tp;
        ctx.sequence_parallel = par.sequence_parallel && par.tp > 1;
    }
    if let Some(res) = plan.res {
        check_range("res", res, 1, MAX_RES)?;
    }
    if let Some(seq) = plan.seq {
        check_range("seq", seq, 1, MAX_SEQ)?;
    }
    if let Some(cfg) = &plan.hf_config {
        ctx.seq = plan.seq.unwrap_or(512);
        return crate::presets::hf::build_from_config(cfg, &ctx);
    }
    let preset = models::find(&plan.model).ok_or_else(|| EstimateError::UnknownModel(plan.model.clone()))?;
    match preset.input {
        models::InputKind::Image { default_res, min_res } => {
            ctx.res = plan.res.unwrap_or(default_res);
            if ctx.res < min_res {
                return Err(EstimateError::ResolutionTooSmall { model: plan.model.clone(), res: ctx.res, min: min_res });
            }
        }
        models::InputKind::Tokens { default_seq, max_seq } => {
            ctx.seq = plan.seq.unwrap_or(default_seq);
            if let Some(max) = max_seq {
                if ctx.seq > max {
                    return Err(EstimateError::SequenceTooLong { model: plan.model.clone(), seq: ctx.seq, max });
                }
            }
        }
    }
    (preset.build)(&ctx)
}

/// Estimates one training step of `plan`.
pub fn estimate(plan: &Plan) -> Result<Estimate, EstimateError> {
    let g = build_graph(plan)?;
    let gpu = match &plan.gpu {
        Some(id) => Some(gpus::find(id).ok_or_else(|| EstimateError::Unsupported(format!("unknown GPU '{id}'")))?),
        None => None,
    };
    Ok(estimate_graph(plan, &g, gpu.as_ref()))
}

/// Estimates a step of an already built graph.
pub fn estimate_graph(plan: &Plan, g: &Graph, gpu: Option<&gpus::Gpu>) -> Estimate {
    let opts = StepOptions { optimizer: plan.opt, optimizer_impl: plan.optimizer_impl(), accumulation: plan.accumulation, device: plan.device };
    let r = simulate(g, &opts);
    let peak = r.timeline.peak().cloned();
    let (peak_allocated, peak_phase, peak_op, breakdown) = match &peak {
        Some(e) => (
            e.live.total(),
            e.phase,
            e.op.map(|i| {
                let op = &g.ops[i];
                if op.name.is_empty() {
                    op.kind.to_string()
                } else {
                    format!("{} ({})", op.name, op.kind)
                }
            }),
            Category::ALL.iter().map(|&c| Row { category: c, bytes: e.live.get(c) }).collect(),
        ),
        None => (Bytes::ZERO, Phase::Forward, None, Vec::new()),
    };
    let param_bytes: Bytes = g.tensors.iter().filter(|t| t.is_param).map(|t| g.storages[t.storage].bytes).sum();
    let grad_bytes: Bytes = g.tensors.iter().filter(|t| t.is_param && t.requires_grad).map(|t| g.storages[t.storage].bytes).sum();
    let trainable = g.tensors.iter().filter(|t| t.is_param && t.requires_grad).count() as u64;
    let counters = trainable.saturating_mul(plan.opt.step_counter_bytes(plan.optimizer_impl(), plan.device));
    let opt_state_bytes = Bytes(grad_bytes.0.saturating_mul(plan.opt.states_per_param()).saturating_add(counters));
    let sm = gpu.map(|g| g.sm).unwrap_or(90);
    let workspaces = if sm == 0 { Bytes::ZERO } else { device::cublas_workspaces(sm) };
    let reserved = r.timeline.reserved() + workspaces;
    let context = gpu.map(|g| g.context).unwrap_or(device::DEFAULT_CONTEXT);
    // Saved activations by top-level module (first path component).
    let mut layers: Vec<LayerActivation> = Vec::new();
    for (i, op) in g.ops.iter().enumerate() {
        let b = r.saved_after_forward[i];
        if b == 0 {
            continue;
        }
        let top = op.name.split('.').take(if op.name.starts_with("layer") || op.name.starts_with("features") || op.name.starts_with("h.") || op.name.starts_with("layers") { 2 } else { 1 }).collect::<Vec<_>>().join(".");
        let top = if top.is_empty() { op.kind.to_string() } else { top };
        match layers.iter_mut().find(|l| l.layer == top) {
            Some(l) => l.bytes += Bytes(b),
            None => layers.push(LayerActivation { layer: top, bytes: Bytes(b) }),
        }
    }
    Estimate {
        model: plan.model.clone(),
        param_count: g.param_count(),
        param_bytes,
        grad_bytes,
        opt_state_bytes,
        peak_allocated,
        peak_phase,
        peak_op,
        peak_forward: r.timeline.peak_in(Phase::Forward),
        breakdown,
        workspaces,
        reserved,
        context,
        device_total: reserved + context,
        forward_flops: r.forward_flops,
        recompute_flops: r.recompute_flops,
        layers,
        timeline: r.timeline,
    }
}
