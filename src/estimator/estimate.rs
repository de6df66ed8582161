//! One step of a model estimated: the settings checked, the forward tape built (the prefill and
//! the last decode step for serving), the step simulated, and the answer ([`Estimate`]): the
//! peak, its breakdown, the device-level totals and the saved activations per block.

use serde::Serialize;

use super::allocator::{self, AllocatorSettings};
use super::config::{self, BuildCtx, Setup};
use super::device::ReduceDevice;
use super::error::EstimateError;
use super::graph::Graph;
use super::graph::{Precision, StorageKind};
use super::hardware::{DeviceOverhead, Gpu, DEFAULT_SM, DEFAULT_SMS};
use super::model::{InputKind, ModelSpec};
use super::moe_parts::{moe_parts, MoeParts};
use super::optimizer;
use super::simulate::{simulate, StepOptions, StepResult};
use super::timeline::{Category, Phase, Timeline};
use super::tune::{self, InferStep, Mode, Quantization, TuneCtx};
use super::units::Bytes;

/// Upper limits that keep every product inside 64 bits and every answer meaningful.
pub const MAX_BATCH: u64 = 1 << 30;
pub const MAX_RES: u64 = 16_384;
pub const MAX_SEQ: u64 = 1 << 24;
pub const MAX_ACCUMULATION: u32 = 1 << 16;
pub const MAX_IMAGES: u64 = 1 << 10;

/// One row of the breakdown at the peak.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub category: Category,
    pub bytes: Bytes,
}

/// Saved activation bytes of one block of the model (see `block_of`) after forward.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LayerActivation {
    pub layer: String,
    pub bytes: Bytes,
}

/// Prefill against decode for an inference plan.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct InferenceReport {
    /// Prompt text tokens per sequence (the plan's `context`).
    pub context: u64,
    /// Image placeholder tokens per sequence in the prompt besides `context` (a vision-language
    /// model's images, 0 for a text model): the prefill runs over `context + image_tokens`
    /// positions and the KV cache grows from there.
    pub image_tokens: u64,
    /// Tokens generated per sequence.
    pub new_tokens: u64,
    /// Peak of the prompt's forward (weights, the prompt's cache, the whole prompt's activations).
    pub prefill_peak: Bytes,
    /// Peak of the last decode step (the full cache, one token's activations); `None` when only
    /// one token is generated (the prefill makes it).
    pub decode_peak: Option<Bytes>,
    /// Cache bytes per token of one sequence (keys and values of every layer).
    pub kv_bytes_per_token: Bytes,
}

/// The answer for one plan.
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub model: String,
    pub param_count: u64,
    /// Parameters each token runs through: `param_count` for a dense model; for a mixture of
    /// experts the router, the experts a token is routed to and everything outside the experts.
    /// All of them are on the device (`param_count` prices the memory).
    pub active_param_count: u64,
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
    /// Caching-allocator segments at their largest, workspaces included: the loop's stream
    /// replayed through [`allocator`] (`torch.cuda.max_memory_reserved()`).
    pub reserved: Bytes,
    /// Reserved bytes that no tensor uses when the allocated bytes peak (cached free blocks,
    /// split remainders).
    pub fragmentation_at_peak: Bytes,
    /// Requests that fitted only after the allocator released its cache (PyTorch's
    /// `num_alloc_retries`); only with a GPU, whose capacity bounds the replay.
    pub alloc_retries: u64,
    /// CUDA context and kernels.
    pub context: Bytes,
    /// What `nvidia-smi` would show: reserved + context.
    pub device_total: Bytes,
    pub forward_flops: f64,
    /// Extra forward FLOPs spent recomputing checkpointed segments.
    pub recompute_flops: f64,
    pub layers: Vec<LayerActivation>,
    /// `train`, `finetune` or `infer`.
    pub mode: Mode,
    /// Parameters that receive gradients and optimizer state (LoRA: the adapters).
    pub trainable_params: u64,
    /// Exact bytes of the stored weights: parameters in their formats (4-bit, int8, sparse) plus
    /// quantization constants (scales, absmax, codes).
    pub weights_bytes: Bytes,
    /// Exact bytes of the KV cache at its largest (inference), 0 otherwise.
    pub kv_cache_bytes: Bytes,
    /// Optimizer state in CUDA managed memory (paged optimizers), not in the peak.
    pub paged_opt_state_bytes: Bytes,
    pub inference: Option<InferenceReport>,
    /// The allocated peak of the plan's validation pass (its forward at the validation batch,
    /// with the training's `.grad` and optimizer state resident); `reserved` includes the pass.
    pub validation_peak: Option<Bytes>,
    /// A mixture of experts' parts (experts, router, shared experts, dispatch); `None` for a
    /// dense model.
    pub moe: Option<MoeParts>,
    #[serde(skip)]
    pub timeline: Timeline,
}

impl Estimate {
    pub fn category(&self, c: Category) -> Bytes {
        self.breakdown
            .iter()
            .find(|r| r.category == c)
            .map(|r| r.bytes)
            .unwrap_or_default()
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

/// Validates the settings and builds the model's forward tape (inference: the prefill's).
pub fn build_graph(model: &ModelSpec, setup: &Setup) -> Result<Graph, EstimateError> {
    build_graph_step(model, setup, Pass::Step)
}

/// Which forward of a plan a graph is.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Pass {
    /// The plan's step (inference: the prefill).
    Step,
    /// Inference: the last decode step.
    Decode,
    /// The validation pass after training steps: the forward at this batch under `no_grad`.
    Validation(u64),
}

/// The prompt tokens and generated tokens of an inference step.
pub(super) fn infer_lengths(setup: &Setup, default_seq: u64) -> Result<(u64, u64), EstimateError> {
    let context = setup.context.or(setup.seq).unwrap_or(default_seq);
    check_range("context", context, 1, MAX_SEQ)?;
    let new_tokens = setup.new_tokens.unwrap_or(1);
    check_range("new_tokens", new_tokens, 1, MAX_SEQ)?;
    check_range("context + new_tokens", context + new_tokens, 2, MAX_SEQ + 1)?;
    Ok((context, new_tokens))
}

/// Builds the graph of one of the plan's forwards.
pub(super) fn build_graph_step(
    model: &ModelSpec,
    setup: &Setup,
    pass: Pass,
) -> Result<Graph, EstimateError> {
    check_range("batch", setup.batch, 1, MAX_BATCH)?;
    check_range(
        "accumulation",
        setup.accumulation as u64,
        1,
        MAX_ACCUMULATION as u64,
    )?;
    let mut tune = TuneCtx::from_plan(setup)?;
    let (batch, ckpt) = match pass {
        Pass::Validation(b) => {
            tune.mode = Mode::Infer;
            (b, config::Checkpointing::None)
        }
        _ => (setup.batch, setup.ckpt),
    };
    // QLoRA (`prepare_model_for_kbit_training`): every parameter that is not 4-bit is upcast to
    // fp32; the 4-bit layers compute in `tune.nf4_compute`. Autocast, if asked for, stays on.
    // torchtune keeps every parameter in bf16.
    let precision = match (tune.quant, tune.mode, setup.dtype) {
        (Quantization::Nf4, Mode::Finetune, Precision::Bf16 | Precision::Fp16)
            if tune.recipe == config::Recipe::Transformers =>
        {
            Precision::Fp32
        }
        (_, _, p) => p,
    };
    if setup.mode == Mode::Infer {
        if setup.ckpt != config::Checkpointing::None {
            return Err(EstimateError::Unsupported("checkpointing trades recomputation for saved activations; inference saves none (use \"ckpt\": \"none\")".into()));
        }
        if setup.accumulation != 1 {
            return Err(EstimateError::Unsupported(
                "gradient accumulation applies to training".into(),
            ));
        }
        if setup.zero_grad != config::ZeroGrad::SetToNone {
            return Err(EstimateError::Unsupported(
                "\"zero_grad\" applies to training".into(),
            ));
        }
    }
    let mut ctx = BuildCtx {
        batch,
        res: 224,
        seq: 512,
        precision,
        ckpt,
        attn: setup.attn,
        causal_mask: setup.causal_mask,
        cudnn: setup.cudnn.unwrap_or(setup.device == config::Device::Cuda),
        device: setup.device,
        tune,
        tp: 1,
        sequence_parallel: false,
        ep: 1,
        expert_skew: setup.expert_skew.unwrap_or(1.0),
        experts_impl: setup.experts_impl.unwrap_or_default(),
        expert_capacity: None,
        images: setup.images.unwrap_or(1),
        rules: setup.stack.rules(),
    };
    if let Some(par) = &setup.parallel {
        ctx.tp = par.tp;
        ctx.sequence_parallel = par.sequence_parallel && par.tp > 1;
        ctx.ep = par.ep;
        ctx.expert_capacity = par.capacity_factor.map(|factor| config::Capacity {
            factor,
            pad: par.pad_to_capacity,
        });
    }

    if let Some(res) = setup.res {
        check_range("res", res, 1, MAX_RES)?;
    }
    if let Some(seq) = setup.seq {
        check_range("seq", seq, 1, MAX_SEQ)?;
    }
    if let Some(n) = setup.images {
        check_range("images", n, 1, MAX_IMAGES)?;
    }
    if !model.caps.language_model {
        if matches!(ctx.tune.frozen, Some(tune::Frozen::Layers(_))) {
            return Err(EstimateError::Unsupported("\"frozen\": N counts transformer blocks; for this model list module paths (e.g. [\"conv1\", \"layer1\"])".into()));
        }
        if ctx.tune.lora.is_some()
            || !ctx.tune.dense_linears()
            || setup.kv_cache_dtype.is_some()
            || setup.context.is_some()
            || setup.new_tokens.is_some()
        {
            return Err(EstimateError::Unsupported(format!(
                "LoRA, quantization, sparsity and the KV cache are modelled for language models; {} takes {}",
                model.label,
                if model.input.is_tokens() {
                    "plain training or inference"
                } else {
                    "batch and resolution"
                }
            )));
        }
    }
    if ctx.tune.mode == Mode::Infer && !model.caps.inference {
        return Err(EstimateError::Unsupported(format!(
            "inference of {} is not modelled",
            model.label
        )));
    }
    match model.input {
        InputKind::Image {
            default_res,
            min_res,
        } => {
            ctx.res = setup.res.unwrap_or(default_res);
            if ctx.res < min_res {
                return Err(EstimateError::ResolutionTooSmall {
                    model: model.label.clone(),
                    res: ctx.res,
                    min: min_res,
                });
            }
        }
        InputKind::Tokens {
            default_seq,
            max_seq,
        } => {
            ctx.seq = setup.seq.unwrap_or(default_seq);
            set_infer_step(setup, &mut ctx, pass == Pass::Decode)?;
            if let Some(max) = max_seq {
                if ctx.seq > max {
                    return Err(EstimateError::SequenceTooLong {
                        model: model.label.clone(),
                        seq: ctx.seq,
                        max,
                    });
                }
            }
        }
    }
    let g = (model.build)(&ctx)?;
    if ctx.ep > 1 && !g.tensors.iter().any(|t| t.expert) {
        return Err(EstimateError::Unsupported(format!(
            "expert parallelism (ep = {}) splits routed experts over GPUs; {} has none: use dp, zero or tp",
            ctx.ep, model.label
        )));
    }
    // Only the builders that model torchtune's own model attach its initialisation.
    if setup.recipe == config::Recipe::Torchtune && g.init.is_none() {
        return Err(EstimateError::Unsupported(
            "\"recipe\": \"torchtune\" is its LoRA/QLoRA of plain LLaMA decoders".into(),
        ));
    }
    if setup.images.is_some() && g.image_tokens == 0 {
        return Err(EstimateError::Unsupported(format!(
            "\"images\" counts the images of a vision-language model's sample (llava); {} takes none",
            model.label
        )));
    }
    if setup.experts_impl.is_some() && g.active_params.is_none() {
        return Err(EstimateError::Unsupported(format!(
            "\"experts_impl\" applies to mixture-of-experts models; {} has no experts",
            model.label
        )));
    }
    // A skew names the busiest expert's share: a model without experts has none to skew.
    if setup.expert_skew.is_some() && g.active_params.is_none() {
        return Err(EstimateError::Unsupported(format!(
            "\"expert_skew\" applies to mixture-of-experts models; {} has no experts",
            model.label
        )));
    }
    Ok(g)
}

/// Inference of language models: the forward to build (prefill of the prompt, or the last
/// decode step over `context + new_tokens - 2` cached tokens).
fn set_infer_step(setup: &Setup, ctx: &mut BuildCtx, decode: bool) -> Result<(), EstimateError> {
    if ctx.tune.mode != Mode::Infer {
        return Ok(());
    }
    let (context, new_tokens) = infer_lengths(setup, ctx.seq)?;
    let kv_dtype = setup.kv_cache_dtype.map(|k| k.dtype());
    ctx.tune.infer = Some(match decode {
        false => InferStep {
            past: 0,
            tokens: context,
            kv_dtype,
        },
        true if new_tokens >= 2 => InferStep {
            past: context + new_tokens - 2,
            tokens: 1,
            kv_dtype,
        },
        true => {
            return Err(EstimateError::Unsupported(
                "one new token is made by the prefill alone: no decode step".into(),
            ))
        }
    });
    ctx.seq = context;
    Ok(())
}

/// The block an op belongs to, as the per-layer chart groups them: its module path up to the
/// first indexed or numbered module (`h.3`, `features.12`, `enc.2`, `bn1`,
/// `encoder.layers.encoder_layer_3`), a numbered module taking the index that follows it
/// (`layer1.0`: ResNet's blocks); else its top-level module (`encoder`, `lm_head`).
/// `nn.Sequential`/`nn.ModuleList` index their children this way in every model family, so no
/// per-model list of names is needed.
fn block_of(name: &str) -> &str {
    let comps: Vec<&str> = name.split('.').collect();
    let numeric = |c: &str| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit());
    let last = match comps
        .iter()
        .position(|c| c.bytes().last().is_some_and(|b| b.is_ascii_digit()))
    {
        Some(p) if !numeric(comps[p]) && comps.get(p + 1).is_some_and(|c| numeric(c)) => p + 1,
        Some(p) => p,
        None => 0,
    };
    let len: usize = comps[..=last].iter().map(|c| c.len()).sum::<usize>() + last;
    &name[..len]
}

/// What the caching allocator's replay of a step's stream takes: the cuBLAS workspace each
/// GEMM allocates and frees, the card its reduction kernels size their staging blocks by, the
/// options, and on a known card what the CUDA
/// context leaves it, so that it frees its cache and retries before it gives up, as PyTorch
/// does; past that the replay goes on so that the figures say what the step would need.
pub(super) struct ReplayInputs {
    gemm_workspace: u64,
    reduce_device: Option<ReduceDevice>,
    pub(super) settings: AllocatorSettings,
    pub(super) capacity: Option<allocator::Capacity>,
}

impl ReplayInputs {
    pub(super) fn of(setup: &Setup, gpu: Option<&Gpu>) -> ReplayInputs {
        let o = DeviceOverhead::of(gpu, &setup.stack);
        ReplayInputs {
            capacity: gpu.map(|g| allocator::Capacity {
                total: g.memory.0,
                free: g.memory.0.saturating_sub(o.context.0),
            }),
            gemm_workspace: o.workspaces.0,
            // The card named, or the one assumed when none is (`DEFAULT_SM`, `DEFAULT_SMS`).
            reduce_device: match gpu {
                Some(g) => ReduceDevice::of(g.sm, g.sms),
                None => ReduceDevice::of(DEFAULT_SM, DEFAULT_SMS),
            },
            settings: setup.allocator,
        }
    }
}

/// The caching allocator's segments when the allocated bytes of the step (an inference plan: its
/// prefill) peak, in `torch.cuda.memory_snapshot()`'s terms.
pub fn segments_at_peak(
    model: &ModelSpec,
    setup: &Setup,
    gpu: Option<&Gpu>,
) -> Result<Vec<allocator::SegmentView>, EstimateError> {
    let g = build_graph(model, setup)?;
    let inputs = ReplayInputs::of(setup, gpu);
    let r = simulate_step(&g, setup, &inputs)?;
    Ok(allocator::segment_map(
        &r.alloc_trace,
        &[],
        inputs.settings,
        inputs.capacity,
    ))
}

/// The step of `g` simulated, refused when its allocator stream overflows the address space
/// (every estimate, whole or in slices, starts here).
pub(super) fn simulate_step(
    g: &Graph,
    setup: &Setup,
    inputs: &ReplayInputs,
) -> Result<StepResult, EstimateError> {
    let r = simulate(g, &step_options(setup, inputs));
    if !r.alloc_trace.fits_address_space() {
        return Err(EstimateError::TooLarge);
    }
    Ok(r)
}

pub(super) fn step_options(setup: &Setup, inputs: &ReplayInputs) -> StepOptions {
    StepOptions {
        gemm_workspace: inputs.gemm_workspace,
        reduce_device: inputs.reduce_device,
        ..StepOptions::of(setup)
    }
}

/// Estimates one training step of `model` under `setup`, followed by the plan's validation pass
/// (`validation_batch`): the model's forward at that batch under `torch.no_grad()` appended to
/// the loop's allocator stream ([`crate::estimator::simulate::validation_pass`]), with the last
/// step's `.grad` and optimizer state resident through it.
pub fn estimate_validated(
    model: &ModelSpec,
    setup: &Setup,
    gpu: Option<&Gpu>,
) -> Result<Estimate, EstimateError> {
    let v = validation_graph(model, setup)?;
    let g = build_graph(model, setup)?;
    let inputs = ReplayInputs::of(setup, gpu);
    let opts = step_options(setup, &inputs);
    let mut r = simulate(&g, &opts);
    let live = crate::estimator::simulate::validation_pass(&mut r.alloc_trace, &v, &opts);
    // `.grad` and the optimizer state from the last step stay through the pass: the loop drops
    // `.grad` at the next step's `zero_grad`.
    let held = r
        .timeline
        .events
        .iter()
        .find(|e| e.phase == Phase::ZeroGrad)
        .map_or(Bytes::ZERO, |e| {
            e.live.get(Category::Gradients) + e.live.get(Category::OptimizerState)
        });
    if !r.alloc_trace.fits_address_space() {
        return Err(EstimateError::TooLarge);
    }
    let report = allocator::replay(&r.alloc_trace, &[], inputs.settings, inputs.capacity);
    let mut e = estimate_step(&model.label, setup, &g, gpu, report, r);
    e.validation_peak = Some(live.total() + held);
    Ok(e)
}

/// The model's forward at the plan's validation batch under `torch.no_grad()`: the inference
/// graph over the same weights, built as an eval pass builds it (no dropout masks, batch norm on
/// its running statistics, autocast as in training).
fn validation_graph(model: &ModelSpec, setup: &Setup) -> Result<Graph, EstimateError> {
    let batch = setup.validation_batch.unwrap_or(setup.batch);
    check_range("validation_batch", batch, 1, MAX_BATCH)?;
    let refuse = |why: &str| Err(EstimateError::Unsupported(why.into()));
    if setup.mode == Mode::Infer {
        return refuse(
            "\"validation_batch\" is a pass after training steps; a serving plan has none",
        );
    }
    if model.caps.language_model || !model.caps.inference {
        return refuse("\"validation_batch\" is modelled for image models (a forward at that batch under no_grad); language models' evaluation (a forward with labels, no KV cache) is not");
    }
    if setup.parallel.is_some() || setup.offload.is_some() {
        return refuse("\"validation_batch\" is modelled on one GPU without offload");
    }
    build_graph_step(model, setup, Pass::Validation(batch))
}

/// Estimates a step of an already built graph.
pub fn estimate_graph(
    label: &str,
    plan: &Setup,
    g: &Graph,
    gpu: Option<&Gpu>,
) -> Result<Estimate, EstimateError> {
    let inputs = ReplayInputs::of(plan, gpu);
    let r = simulate_step(g, plan, &inputs)?;
    let report = allocator::replay(&r.alloc_trace, &[], inputs.settings, inputs.capacity);
    Ok(estimate_step(label, plan, g, gpu, report, r))
}

/// The estimate from a simulated step `r` of `g` and the replay of its allocator stream
/// (`report`): its peak and breakdown read off its timeline.
pub(super) fn estimate_step(
    label: &str,
    plan: &Setup,
    g: &Graph,
    gpu: Option<&Gpu>,
    report: allocator::AllocatorReport,
    r: StepResult,
) -> Estimate {
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
            Category::ALL
                .iter()
                .map(|&c| Row {
                    category: c,
                    bytes: e.live.get(c),
                })
                .collect(),
        ),
        None => (Bytes::ZERO, Phase::Forward, None, Vec::new()),
    };
    let param_bytes: Bytes = g
        .tensors
        .iter()
        .filter(|t| t.is_param)
        .map(|t| g.storages[t.storage].bytes)
        .sum();
    let grad_bytes: Bytes = g
        .tensors
        .iter()
        .filter(|t| t.is_param && t.requires_grad)
        .map(|t| g.storages[t.storage].bytes)
        .sum();
    let trainable = || g.tensors.iter().filter(|t| t.is_param && t.requires_grad);
    let any_8bit =
        plan.opt.is_bnb() && trainable().any(|t| t.numel() >= optimizer::BNB_MIN_8BIT_SIZE);
    let counters = (trainable().count() as u64).saturating_mul(
        plan.opt
            .step_counter_bytes(plan.optimizer_impl(), plan.device),
    );
    let opt_state_bytes = if g.inference {
        Bytes::ZERO
    } else {
        Bytes(
            trainable()
                .flat_map(|t| plan.opt.state_storages(&t.shape, t.dtype))
                .chain(plan.opt.shared_state(any_8bit))
                .fold(counters, |a, b| a.saturating_add(b)),
        )
    };
    let DeviceOverhead {
        workspaces,
        context,
        ..
    } = DeviceOverhead::of(gpu, &plan.stack);
    let reserved = report.max_reserved;
    let mut layers: Vec<LayerActivation> = Vec::new();
    for (i, op) in g.ops.iter().enumerate() {
        let b = r.saved_after_forward[i];
        if b == 0 {
            continue;
        }
        let top = block_of(&op.name);
        let top = if top.is_empty() {
            op.kind.to_string()
        } else {
            top.to_string()
        };
        match layers.iter_mut().find(|l| l.layer == top) {
            Some(l) => l.bytes += Bytes(b),
            None => layers.push(LayerActivation {
                layer: top,
                bytes: Bytes(b),
            }),
        }
    }
    Estimate {
        model: label.to_string(),
        param_count: g.param_count(),
        active_param_count: g.active_params.unwrap_or_else(|| g.param_count()),
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
        fragmentation_at_peak: report.fragmentation_at_peak,
        alloc_retries: report.retries,
        context,
        device_total: reserved + context,
        forward_flops: r.forward_flops,
        recompute_flops: r.recompute_flops,
        layers,
        mode: plan.mode,
        trainable_params: g.trainable_count(),
        weights_bytes: g.storage_bytes(StorageKind::Param),
        kv_cache_bytes: g.storage_bytes(StorageKind::KvCache),
        paged_opt_state_bytes: if plan.opt.is_paged() {
            opt_state_bytes
        } else {
            Bytes::ZERO
        },
        inference: None,
        validation_peak: None,
        moe: g
            .active_params
            .is_some()
            .then(|| moe_parts(g, &r.saved_after_forward)),
        timeline: r.timeline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_group_into_the_blocks_of_their_model() {
        for (name, block) in [
            ("layer1.0.conv1", "layer1.0"),
            ("bn1", "bn1"),
            ("h.11.attn.c_attn", "h.11"),
            ("features.12.conv.0.0", "features.12"),
            (
                "encoder.layers.encoder_layer_3.mlp.0",
                "encoder.layers.encoder_layer_3",
            ),
            ("encoder.ln", "encoder"),
            ("enc.2.1.0", "enc.2"),
            ("lm_head", "lm_head"),
            ("", ""),
        ] {
            assert_eq!(block_of(name), block, "{name}");
        }
    }
}
