//! The sparse mixture-of-experts block of the LLaMA-family decoders, op by op as transformers
//! 5.24 runs it with its eager experts: the per-expert Python loop of `MixtralExperts`,
//! `Qwen2MoeExperts`, `Qwen3MoeExperts`, `DeepseekV3Experts` and `GptOssExperts` behind their
//! routers (`models/{mixtral,qwen2_moe,qwen3_moe,deepseek_v3,gpt_oss}/modeling_*.py`), and the
//! auxiliary load-balancing loss (`load_balancing_loss_func`) when the config asks for the
//! router logits.
//!
//! Routing makes the shapes data-dependent; the estimate assumes **balanced routing** by default:
//! each of the `T·k` token-to-expert assignments of a step goes to the experts in turn, so every
//! expert receives `⌊T·k / E⌋` or `⌈T·k / E⌉` tokens (the first `T·k mod E` experts one more)
//! and every expert runs. The plan's `expert_skew` s sets a skewed router instead: the first
//! expert receives `⌈s·T·k / E⌉` tokens (never more than `T`: a token picks an expert once) and
//! the others share the rest in turn. The eager loop's per-expert inputs, outputs and
//! temporaries grow with the busiest expert; the saved activations of a training step sum over
//! the experts and stay `T·k` rows. transformers' implementations are dropless: no capacity
//! factor drops or pads tokens.
//!
//! The experts' implementation is a plan option (`experts_impl`): the eager loop by default, or
//! `grouped_mm` (`grouped_mm_experts_forward` in transformers' `integrations/moe.py`: the pairs
//! sorted by expert, two `torch._grouped_mm` calls over all of them) on weights in the step's
//! own dtype (not under autocast).
//! Under expert parallelism each rank's experts sit behind an all-to-all token dispatch
//! ([`dispatched_experts`]).
//!
//! Serving with the checkpoints' own weight formats: FP8 block-wise experts (`FP8Expert`, the same
//! eager loop with block-scaled GEMMs) and gpt-oss's MXFP4 experts (`Mxfp4GptOssExperts`, the
//! triton kernels' routing and two grouped GEMMs instead of the loop).
//!
//! Op names follow the module paths, so the per-layer chart keeps an expert's activations in its
//! layer and the breakdown can tell the parts apart: the router's ops are named under
//! `mlp.gate`, the experts' and the dispatch's (`one_hot`, `nonzero`, `index`, `index_add`)
//! under `mlp.experts`, Qwen2-MoE's shared expert under `mlp.shared_expert`.

use crate::estimator::config::{Capacity, ExpertsImpl, Routing};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{
    Collective, CommGroup, CommRecord, GradFlow, Graph, MoePart, StorageKind, TensorId,
};
use crate::estimator::ops::Pw;
use crate::estimator::tune::{fp8_scale_shape, Quantization, TuneCtx, MX_BLOCK};
use crate::estimator::units::{Bytes, DType};

use super::activation::{activation, Activation};

/// Which transformers block the layer runs (routing details differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeKind {
    /// `MixtralSparseMoeBlock`: top-k weights always renormalised and kept in fp32.
    Mixtral,
    /// `Qwen2MoeSparseMoeBlock`: `gate_proj`/`up_proj`/`down_proj` experts plus a shared expert
    /// gated by `sigmoid(shared_expert_gate(x))`.
    Qwen2,
    /// `Qwen3MoeSparseMoeBlock`: as Qwen2-MoE without the shared expert.
    Qwen3,
    /// `DeepseekV3MoE`: the sigmoid router `DeepseekV3TopkRouter` in fp32 (experts chosen
    /// among the `topk_group` best of `groups` expert groups, by scores plus
    /// `e_score_correction_bias`; weights gathered from the plain scores, renormalised when
    /// `norm_topk_prob`, times `routed_scaling_factor`), the routed experts, then the
    /// `n_shared_experts` shared experts as one ungated MLP added last.
    DeepseekV3 { groups: u64, topk_group: u64 },
    /// `GptOssMLP`: a router with a bias, `topk` of the logits then a softmax over the chosen
    /// ones; experts stored transposed (`gate_up_proj` `[E, H, 2I]`, `down_proj` `[E, I, H]`)
    /// with biases, gate and up interleaved, the clamped SwiGLU
    /// (`models/gpt_oss/modeling_gpt_oss.py`).
    GptOss,
}

/// The mixture-of-experts part of a config.
#[derive(Clone, Debug, PartialEq)]
pub struct Moe {
    pub kind: MoeKind,
    /// Routed experts per sparse layer (`num_local_experts` / `num_experts`).
    pub experts: u64,
    /// Experts each token goes to (`num_experts_per_tok`).
    pub top_k: u64,
    /// Width of one routed expert's MLP (`moe_intermediate_size`; Mixtral: `intermediate_size`).
    pub expert_intermediate: u64,
    /// `norm_topk_prob`: the top-k probabilities divided by their sum.
    pub norm_topk: bool,
    /// Qwen2-MoE `shared_expert_intermediate_size` (gated); DeepSeek-V3 `moe_intermediate_size
    /// · n_shared_experts` (ungated).
    pub shared_intermediate: Option<u64>,
    /// A layer is sparse when `(i + 1) % sparse_step == 0` and `i` is not in `dense_layers`
    /// (`decoder_sparse_step`, `mlp_only_layers`); the others run the dense MLP.
    pub sparse_step: u64,
    pub dense_layers: Vec<u64>,
    /// `output_router_logits`: the causal-LM forward adds `router_aux_loss_coef ·
    /// load_balancing_loss_func(router_logits)` to the loss.
    pub aux_loss: bool,
}

impl Moe {
    pub fn is_sparse(&self, layer: u64) -> bool {
        (layer + 1).is_multiple_of(self.sparse_step) && !self.dense_layers.contains(&layer)
    }

    /// Tokens expert `e` receives out of `tokens` under balanced routing.
    pub fn balanced_tokens(&self, tokens: u64, e: u64) -> u64 {
        let total = tokens * self.top_k;
        total / self.experts + u64::from(e < total % self.experts)
    }

    /// Tokens expert `e` receives when the busiest (expert 0) takes `skew` times the balanced
    /// share `T·k / E` (rounded up, at most `T`) and the others share the rest in turn; `skew`
    /// 1 is [`Moe::balanced_tokens`]. A skew past `E / k` would give the busiest expert more
    /// than every token and is refused.
    pub fn tokens_of(&self, tokens: u64, e: u64, skew: f64) -> Result<u64, EstimateError> {
        let most = self.experts as f64 / self.top_k as f64;
        if !skew.is_finite() || skew < 1.0 || skew > most {
            return Err(EstimateError::Unsupported(format!(
                "expert_skew must be between 1 (balanced) and E / k = {most} (every token to one expert), got {skew}"
            )));
        }
        if skew == 1.0 || self.experts == 1 {
            return Ok(self.balanced_tokens(tokens, e));
        }
        let total = tokens * self.top_k;
        let hot = ((skew * total as f64 / self.experts as f64).ceil() as u64).min(tokens);
        if e == 0 {
            return Ok(hot);
        }
        let (rest, others) = (total - hot, self.experts - 1);
        Ok(rest / others + u64::from(e - 1 < rest % others))
    }

    /// Parameters of one sparse block: the router, the experts, the shared expert and its gate.
    pub fn block_params(&self, hidden: u64) -> u64 {
        self.params_with(hidden, self.experts)
    }

    /// Parameters one token runs through in a sparse block: the router, `top_k` experts and the
    /// shared expert.
    pub fn active_block_params(&self, hidden: u64) -> u64 {
        self.params_with(hidden, self.top_k)
    }

    /// The block's parameters with `experts` routed experts counted: gpt-oss adds the router's
    /// and each expert's biases (`2I + H`); Qwen2-MoE gates its shared expert (`H`), DeepSeek-V3
    /// does not (its `e_score_correction_bias` is a buffer).
    fn params_with(&self, hidden: u64, experts: u64) -> u64 {
        let i = self.expert_intermediate;
        let (router_bias, expert_bias, shared_gate) = match self.kind {
            MoeKind::GptOss => (self.experts, 2 * i + hidden, 0),
            MoeKind::Qwen2 => (0, 0, hidden),
            _ => (0, 0, 0),
        };
        let shared = self
            .shared_intermediate
            .map_or(0, |si| 3 * hidden * si + shared_gate);
        hidden * self.experts + router_bias + experts * (3 * hidden * i + expert_bias) + shared
    }
}

/// A gated MLP (`down(act(gate(x)) * up(x))`, `Qwen2MoeMLP`) under the current scope.
fn gated_mlp(
    g: &mut Graph,
    x: TensorId,
    hidden: u64,
    inter: u64,
    act: Activation,
    cpu: bool,
    tune: &TuneCtx,
) -> Result<TensorId, EstimateError> {
    let gt = g.weight_linear("gate_proj", x, hidden, inter, false, tune)?;
    let gt = activation(g, gt, act, cpu)?;
    let up = g.weight_linear("up_proj", x, hidden, inter, false, tune)?;
    let y = g.mul_bc(gt, up)?;
    g.weight_linear("down_proj", y, inter, hidden, false, tune)
}

/// [`gated_mlp`] under tensor parallelism on `x` (`[B, S, H]`, a sequence shard under sequence
/// parallelism): `gate_proj` and `up_proj` column-parallel, `down_proj` row-parallel, as
/// transformers' plans (`shared_expert.{gate,up}_proj`: `colwise`, `down_proj`: `rowwise`) and
/// Megatron-Core's `SharedExpertMLP` (an `MLP`: `linear_fc1` column-parallel, `linear_fc2`
/// row-parallel) split a shared expert; `inter` is the whole width.
fn tp_gated_mlp(
    g: &mut Graph,
    x: TensorId,
    hidden: u64,
    inter: u64,
    act: Activation,
    cpu: bool,
) -> Result<TensorId, EstimateError> {
    let gt = g.column_parallel_linear("gate_proj", x, hidden, inter, false)?;
    let gt = activation(g, gt, act, cpu)?;
    let up = g.column_parallel_linear("up_proj", x, hidden, inter, false)?;
    let y = g.mul_bc(gt, up)?;
    g.row_parallel_linear("down_proj", y, inter, hidden, false)
}

/// `tensor[index]` along the first dimension (advanced indexing, `aten::index`): a new tensor of
/// the selected rows; saves the indices, and its backward scatters into a zero tensor of the
/// source's size (`index_backward`: `new_zeros(self.sizes()).index_put_`).
fn index_rows(
    g: &mut Graph,
    src: TensorId,
    index: &[TensorId],
    shape: Vec<u64>,
) -> Result<TensorId, EstimateError> {
    let rg = g.t(src).requires_grad;
    let y = g.alloc(shape, g.dtype(src), StorageKind::Activation, rg)?;
    let mut inputs = vec![src];
    inputs.extend_from_slice(index);
    g.record_simple("index", inputs, vec![y], index.to_vec(), 0.0);
    Ok(y)
}

/// Op kinds among the experts' that move or index tokens rather than compute on them: the
/// token dispatch of [`crate::estimator::moe_parts`].
const DISPATCH_KINDS: [&str; 19] = [
    "one_hot",
    "sum",
    "gt",
    "nonzero",
    "index",
    "index_add",
    "index_put",
    "argsort",
    "sort",
    "floor_divide",
    "histc",
    "cumsum",
    "arange",
    "all_to_all",
    "sort_chunks",
    "zeros",
    "python_ref",
    "routing_topk",
    "routing_sort",
];

/// What a sparse block returns: its output and the router logits (for the auxiliary loss).
pub struct MoeOut {
    pub out: TensorId,
    pub router_logits: TensorId,
}

/// `*SparseMoeBlock.forward` on `x` (`[B, S, H]`, the post-attention norm's output) inside the
/// layer's `mlp` scope, as transformers 5.24 writes it: the router (`*TopKRouter`: `F.linear`
/// with its `[E, H]` weight, softmax in fp32, `topk`, the optional renormalisation in place,
/// Qwen's cast back to the logits' dtype; DeepSeek-V3's and gpt-oss's routers are their own,
/// see [`MoeKind`]) and the experts (`*Experts`, stored as two 3-D parameters `gate_up_proj`
/// `[E, 2I, H]` and `down_proj` `[E, H, I]`) run by the eager per-expert loop
/// (`experts_implementation="eager"`). Each expert's weights are a `select` view of the 3-D
/// parameters: under autocast the view is cast anew for every expert (only leaf weights are
/// cached) and the copy saved, and in backward each view's gradient is a zero tensor of the
/// whole parameter's size with the expert's slice filled in (`select_backward`).
///
/// transformers 5.24 picks `grouped_mm` instead when `torch._grouped_mm` can dispatch (recent
/// CUDA GPUs); the loop is what it runs elsewhere and what `experts_implementation="eager"` asks.
/// The plan's `experts_impl: grouped_mm` builds the grouped path ([`grouped_mm_experts`]).
pub fn sparse_block(
    g: &mut Graph,
    moe: &Moe,
    x: TensorId,
    act: Activation,
    cpu: bool,
    tune: &TuneCtx,
    routing: Routing,
) -> Result<MoeOut, EstimateError> {
    let skew = routing.skew;
    let s = g.shape(x);
    let (b, seq, h) = (s[0], s[1], s[2]);
    let t = b * seq;
    let dt = g.dtype(x);
    let hv = g.view(x, vec![t, h])?;
    // Refuses an impossible skew whichever path runs (the grouped GEMMs' buffers do not depend
    // on it).
    moe.tokens_of(t, 0, skew)?;
    if tune.quant == Quantization::Mxfp4 {
        if g.ep > 1 || routing.experts != ExpertsImpl::Eager {
            return Err(EstimateError::Unsupported(
                "MXFP4 experts run on their own triton kernels: expert parallelism and experts_impl do not apply (use ep = 1 and leave experts_impl out)".into(),
            ));
        }
        let first = g.ops.len();
        let (out, logits) = mxfp4_block(g, moe, hv)?;
        g.tag_moe(first, MoePart::Experts, &DISPATCH_KINDS);
        return Ok(MoeOut {
            out: g.view(out, vec![b, seq, h])?,
            router_logits: logits,
        });
    }
    let tp_moe = tp_shard(g, moe, x)?;
    let moe = &tp_moe;
    let (tp, sp) = (g.tp_size() > 1, g.sp());
    // Qwen2-MoE runs its shared expert first.
    let first = g.ops.len();
    let shared = match (moe.kind, moe.shared_intermediate) {
        (MoeKind::Qwen2, Some(si)) if tp => {
            let y = g.scoped("shared_expert", |g| tp_gated_mlp(g, x, h, si, act, cpu))?;
            Some(g.view(y, vec![t, h])?)
        }
        (MoeKind::Qwen2, Some(si)) => {
            Some(g.scoped("shared_expert", |g| gated_mlp(g, hv, h, si, act, cpu, tune))?)
        }
        _ => None,
    };
    g.tag_moe(first, MoePart::Shared, &[]);
    let first = g.ops.len();
    let (logits, rw, sel) = match moe.kind {
        MoeKind::DeepseekV3 { groups, topk_group } => {
            g.scoped("gate", |g| deepseek_router(g, moe, hv, groups, topk_group))?
        }
        MoeKind::GptOss => g.scoped("router", |g| gpt_oss_router(g, moe, hv))?,
        _ => g.scoped("gate", |g| softmax_router(g, moe, hv))?,
    };
    g.tag_moe(first, MoePart::Router, &[]);
    let first = g.ops.len();
    let out = g.scoped("experts", |g| {
        // Under sequence parallelism the rank routes its own tokens, then gathers every rank's
        // tokens with their routing (Megatron-Core's `MoEAllGatherTokenDispatcher.token_dispatch`)
        // and runs its expert shards on all of them.
        let (hv, rw, sel) = if sp {
            let xg = g.sp_all_gather(x)?;
            let hv = g.view(xg, vec![t * g.tp_size(), h])?;
            (hv, g.sp_all_gather_rows(rw)?, g.sp_all_gather_rows(sel)?)
        } else {
            (hv, rw, sel)
        };
        // gpt-oss's router logits stay bound to `_` in `GptOssMLP.forward` until it returns.
        let outer: &[TensorId] = if moe.kind == MoeKind::GptOss {
            &[logits]
        } else {
            &[]
        };
        let out = experts(
            g, moe, hv, rw, sel, act, cpu, dt, tune.quant, routing, outer,
        )?;
        if sp {
            // `token_combine`: the partial sums reduce-scattered back to the rank's tokens.
            let out = g.view(out, vec![b, seq * g.tp_size(), h])?;
            let out = g.sp_reduce_scatter(out)?;
            g.view(out, vec![t, h])
        } else {
            Ok(tp_all_reduce(g, out))
        }
    })?;
    g.tag_moe(first, MoePart::Experts, &DISPATCH_KINDS);
    let first = g.ops.len();
    let out = match shared {
        // `sigmoid(shared_expert_gate(x)) * shared_expert(x)`, added out of place.
        Some(y) => {
            let gate = g.weight_linear("shared_expert_gate", hv, h, 1, false, tune)?;
            let gdt = g.dtype(gate);
            let gate = g.pointwise(
                "sigmoid",
                gate,
                gdt,
                Pw {
                    save_output: true,
                    flops: 4.0,
                    ..Pw::default()
                },
            )?;
            let y = g.mul_bc(gate, y)?;
            g.add(out, y, false)?
        }
        None => out,
    };
    g.tag_moe(first, MoePart::Shared, &[]);
    let out = g.view(out, vec![b, seq, h])?;
    // DeepSeek-V3: `hidden_states + self.shared_experts(residuals)` after the routed experts.
    let out = match (moe.kind, moe.shared_intermediate) {
        (MoeKind::DeepseekV3 { .. }, Some(si)) => {
            let first = g.ops.len();
            let y = if tp {
                g.scoped("shared_experts", |g| tp_gated_mlp(g, x, h, si, act, cpu))?
            } else {
                g.scoped("shared_experts", |g| gated_mlp(g, x, h, si, act, cpu, tune))?
            };
            g.tag_moe(first, MoePart::Shared, &[]);
            g.add(out, y, false)?
        }
        _ => out,
    };
    Ok(MoeOut {
        out,
        router_logits: logits,
    })
}

/// One tensor-parallel rank's block under transformers' tensor-parallel plan for the mixtures
/// (`Qwen3MoeConfig.base_model_tp_plan` in `models/qwen3_moe/configuration_qwen3_moe.py`,
/// transformers commit 008e574; Mixtral's and Qwen2-MoE's alike): the router (`mlp.gate`, not in
/// the plan) replicated, every rank routing all its tokens; each routed expert's `gate_up_proj`
/// split by columns (`packed_colwise`: matching gate and up halves) and its `down_proj` by rows
/// (`rowwise`), so a rank runs every expert it holds at `moe_intermediate_size / tp` and
/// the experts' summed output is all-reduced (`moe_tp_experts`); the shared expert is a
/// column/row-parallel MLP with its own all-reduce (`shared_expert.{gate,up}_proj`: `colwise`,
/// `down_proj`: `rowwise`), its scalar gate replicated. This is Megatron-Core's expert tensor
/// parallelism with `expert_tensor_parallel_size = tp` (`megatron/core/transformer/moe/experts.py`,
/// `TEGroupedMLP`: `linear_fc1` / `linear_fc2` over the `expt_tp` group). Without sequence
/// parallelism (which Megatron-Core refuses in training for performance only, `moe_layer.py`,
/// `MoELayer.forward`, and transformers runs) every rank holds all the tokens, and with expert
/// parallelism its all-to-all exchanges them with the ranks of the same tensor-parallel index.
/// With sequence parallelism (expert parallelism 1) the block is Megatron-Core's
/// `MoEAllGatherTokenDispatcher` (`megatron/core/transformer/moe/token_dispatcher.py`): the
/// router runs on the rank's sequence shard, the tokens and their routing are all-gathered over
/// the tensor-parallel group (`token_dispatch`), the expert shards run on all of them, and the
/// partial outputs are reduce-scattered back (`token_combine`); the shared expert gathers and
/// reduce-scatters through its own column/row-parallel layers (`SharedExpertMLP`). What is
/// gathered are this builder's routing tensors (weights and int64 choices `[T, k]`), where
/// Megatron-Core gathers its `[T, E]` probabilities and boolean routing map. Without sequence
/// parallelism records the all-reduce of the block input's gradient (the column-parallel
/// layers' `f`); returns the block with one rank's expert width (the whole on one GPU).
fn tp_shard(g: &mut Graph, moe: &Moe, x: TensorId) -> Result<Moe, EstimateError> {
    let t = g.tp_size();
    if t == 1 {
        return Ok(moe.clone());
    }
    let mut local = moe.clone();
    local.expert_intermediate = g.tp_local(moe.expert_intermediate, "expert intermediate size")?;
    if let Some(si) = moe.shared_intermediate {
        g.tp_local(si, "shared expert intermediate size")?;
    }
    if !g.sp() && g.t(x).requires_grad && !g.tp.f_inputs.contains(&x) {
        g.tp.f_inputs.push(x);
        let b = g.bytes(x).0;
        g.tp_comm(true, Collective::AllReduce, b);
    }
    Ok(local)
}

/// The all-reduce (in place, identity in backward) of the routed experts' combined partial
/// sums (`moe_tp_experts`).
fn tp_all_reduce(g: &mut Graph, y: TensorId) -> TensorId {
    if g.tp_size() > 1 {
        let b = g.bytes(y).0;
        g.tp_comm(false, Collective::AllReduce, b);
    }
    y
}

/// `topk` of `[T, ·]` scores: values (with a gradient when the scores have one) and int64
/// indices `[T, k]`; saves the indices, and its gradient is scattered into zeros of the
/// input's size.
fn topk(g: &mut Graph, x: TensorId, k: u64) -> Result<(TensorId, TensorId), EstimateError> {
    let mut shape = g.shape(x);
    if let Some(last) = shape.last_mut() {
        *last = k;
    }
    let rg = g.t(x).requires_grad;
    let vals = g.alloc(shape.clone(), g.dtype(x), StorageKind::Activation, rg)?;
    let sel = g.alloc(shape, DType::I64, StorageKind::Activation, false)?;
    g.record_simple("topk", vec![x], vec![vals, sel], vec![sel], 0.0);
    Ok((vals, sel))
}

/// `router_top_value /= router_top_value.sum(dim=-1, keepdim=True)` (DeepSeek-V3 adds `1e-20`
/// to the sum first): in place, so autograd keeps a copy of the dividend (the divisor's
/// gradient needs it).
fn renormalise(g: &mut Graph, vals: TensorId, eps: bool) -> Result<TensorId, EstimateError> {
    let s = g.shape(vals);
    let (t, k) = (s[0], s[1]);
    let dt = g.dtype(vals);
    let rg = g.t(vals).requires_grad;
    let mut sum = g.alloc(vec![t, 1], dt, StorageKind::Activation, rg)?;
    g.record_unary("sum", vals, sum, vec![], (t * k) as f64);
    if eps {
        sum = g.pointwise(
            "add",
            sum,
            dt,
            Pw {
                alias_grad: true,
                flops: 1.0,
                ..Pw::default()
            },
        )?;
    }
    let q = g.alloc(vec![t, k], dt, StorageKind::Activation, rg)?;
    g.record_simple(
        "div",
        vec![vals, sum],
        vec![q],
        vec![vals, sum],
        (t * k) as f64,
    );
    Ok(q)
}

/// Mixtral's and Qwen's `*TopKRouter`: logits, softmax in fp32, `topk`, the optional
/// renormalisation, Qwen's cast of the weights back to the logits' dtype.
fn softmax_router(
    g: &mut Graph,
    moe: &Moe,
    hv: TensorId,
) -> Result<(TensorId, TensorId, TensorId), EstimateError> {
    let h = g.shape(hv)[1];
    let w = g.param(vec![moe.experts, h])?;
    let logits = g.linear_with(hv, w, None)?;
    // Mixtral: `softmax(router_logits.float())`; Qwen: `softmax(..., dtype=torch.float)`.
    let probs = if moe.kind == MoeKind::Mixtral {
        let lf = g.cast(logits, DType::F32)?;
        g.softmax_to(lf, DType::F32)?
    } else {
        g.softmax_to(logits, DType::F32)?
    };
    let (vals, sel) = topk(g, probs, moe.top_k)?;
    let vals = if moe.norm_topk {
        renormalise(g, vals, false)?
    } else {
        vals
    };
    let rw = if moe.kind == MoeKind::Mixtral {
        vals
    } else {
        let ldt = g.dtype(logits);
        g.cast(vals, ldt)?
    };
    Ok((logits, rw, sel))
}

/// `DeepseekV3TopkRouter.forward`: `F.linear(x.float(), weight.float())` (fp32 copies of a
/// low-precision input and weight, saved), `sigmoid` (saves its output), then the choice: the
/// scores plus `e_score_correction_bias`, per group the sum of its two best (`topk(2)` of a
/// `[T, G, E/G]` view), the `topk_group` best groups, a zero `[T, G]` mask scattered with ones,
/// expanded and reshaped to `[T, E]` (a copy), `~mask.bool()` (two bool tensors),
/// `masked_fill(-inf)` and the final `topk`. Only the indices of that branch are used: its
/// values are dropped at once, so no gradient ever reaches it and its nodes (and what they
/// saved) die with the router's locals; it is recorded without autograd, the locals
/// (`group_scores`, `group_mask`, `score_mask`) held to the end of the router. The weights are
/// `scores.gather(1, idx)` (saves the indices; its gradient is a zero `[T, E]` scattered into),
/// renormalised in place when `norm_topk_prob`, times `routed_scaling_factor` (a new tensor):
/// fp32, so the experts' weighted outputs are fp32 and cast back.
fn deepseek_router(
    g: &mut Graph,
    moe: &Moe,
    hv: TensorId,
    groups: u64,
    topk_group: u64,
) -> Result<(TensorId, TensorId, TensorId), EstimateError> {
    let (t, h) = (g.shape(hv)[0], g.shape(hv)[1]);
    let (e, k) = (moe.experts, moe.top_k);
    let w = g.param(vec![e, h])?;
    let pdt = g.precision.param_dtype();
    let bias = g.buffer(vec![e], pdt)?;
    let xf = g.cast(hv, DType::F32)?;
    let wf = g.cast(w, DType::F32)?;
    let logits = g.linear_with(xf, wf, None)?;
    let ldt = g.dtype(logits);
    let scores = g.pointwise(
        "sigmoid",
        logits,
        ldt,
        Pw {
            save_output: true,
            flops: 4.0,
            ..Pw::default()
        },
    )?;
    let z = Bytes::ZERO;
    let choice = g.no_grad_op("add", &[scores, bias], vec![t, e], ldt, z)?;
    let top2 = g.no_grad_op("topk", &[choice], vec![t, groups, 2], ldt, z)?;
    let top2_idx = g.no_grad_op("topk", &[choice], vec![t, groups, 2], DType::I64, z)?;
    let group_scores = g.no_grad_op("sum", &[top2, top2_idx], vec![t, groups], ldt, z)?;
    let gv = g.no_grad_op("topk", &[group_scores], vec![t, topk_group], ldt, z)?;
    let gi = g.no_grad_op(
        "topk",
        &[group_scores, gv],
        vec![t, topk_group],
        DType::I64,
        z,
    )?;
    let group_mask = g.no_grad_op("scatter", &[gi], vec![t, groups], ldt, z)?;
    let score_mask = g.no_grad_op("clone", &[group_mask], vec![t, e], ldt, z)?;
    let mb = g.no_grad_op("to_copy", &[score_mask], vec![t, e], DType::Bool, z)?;
    let keep = g.no_grad_op("bitwise_not", &[mb], vec![t, e], DType::Bool, z)?;
    let masked = g.no_grad_op("masked_fill", &[choice, keep], vec![t, e], ldt, z)?;
    let vals = g.no_grad_op("topk", &[masked], vec![t, k], ldt, z)?;
    let sel = g.no_grad_op("topk", &[masked, vals], vec![t, k], DType::I64, z)?;
    let rg = g.t(scores).requires_grad;
    let tw = g.alloc(vec![t, k], ldt, StorageKind::Activation, rg)?;
    g.record_simple("gather", vec![scores, sel], vec![tw], vec![sel], 0.0);
    let tw = if moe.norm_topk {
        renormalise(g, tw, true)?
    } else {
        tw
    };
    let rw = g.pointwise(
        "mul",
        tw,
        ldt,
        Pw {
            flops: 1.0,
            ..Pw::default()
        },
    )?;
    g.hold(&[group_scores, group_mask, score_mask]);
    Ok((logits, rw, sel))
}

/// `GptOssTopKRouter.forward`: `F.linear(x, weight, bias)`, `topk` of the logits, then
/// `softmax(values, dim=1, dtype=values.dtype)` (saves its output): the routing weights in the
/// logits' dtype.
fn gpt_oss_router(
    g: &mut Graph,
    moe: &Moe,
    hv: TensorId,
) -> Result<(TensorId, TensorId, TensorId), EstimateError> {
    let h = g.shape(hv)[1];
    let w = g.param(vec![moe.experts, h])?;
    let b = g.param(vec![moe.experts])?;
    let logits = g.linear_with(hv, w, Some(b))?;
    let (vals, sel) = topk(g, logits, moe.top_k)?;
    let dt = g.dtype(vals);
    let rw = g.softmax_to(vals, dt)?;
    Ok((logits, rw, sel))
}

/// `GptOssExperts`' parameters: `gate_up_proj` `[E, H, 2I]`, `gate_up_proj_bias` `[E, 2I]`,
/// `down_proj` `[E, I, H]`, `down_proj_bias` `[E, H]`.
fn gpt_oss_expert_params(
    g: &mut Graph,
    experts: u64,
    hidden: u64,
    inter: u64,
) -> Result<Vec<TensorId>, EstimateError> {
    let dt = g.precision.param_dtype();
    Ok(vec![
        expert_param(g, vec![experts, hidden, 2 * inter], dt)?,
        expert_param(g, vec![experts, 2 * inter], dt)?,
        expert_param(g, vec![experts, inter, hidden], dt)?,
        expert_param(g, vec![experts, hidden], dt)?,
    ])
}

/// One expert of `GptOssExperts.forward` on its tokens `cur` (`[n, H]`):
/// `cur @ gate_up_proj[e] + gate_up_proj_bias[e]`, `_apply_gate` ([`gpt_oss_gate`]), then
/// `@ down_proj[e] + down_proj_bias[e]`. Each weight and bias is a `select` view of its
/// parameter.
///
/// `gated_output` is a local of the loop: the previous expert's (`prev_gated`) lives until this
/// expert's replaces it. Returns the output and this expert's `gated_output`.
fn gpt_oss_expert(
    g: &mut Graph,
    w: &[TensorId],
    cur: TensorId,
    inter: u64,
    prev_gated: Option<TensorId>,
) -> Result<(TensorId, TensorId), EstimateError> {
    let h = g.shape(cur)[1];
    let w1 = g.select(w[0], vec![h, 2 * inter])?;
    let gu = g.matmul(cur, w1)?;
    let b1 = g.select(w[1], vec![2 * inter])?;
    let gu = g.add(gu, b1, false)?;
    let y = gpt_oss_gate(g, gu, inter)?;
    if let Some(p) = prev_gated {
        g.hold(&[p]);
    }
    let w2 = g.select(w[2], vec![inter, h])?;
    let out = g.matmul(y, w2)?;
    let b2 = g.select(w[3], vec![h])?;
    Ok((g.add(out, b2, false)?, y))
}

/// `GptOssExperts._apply_gate` on an `[n, 2I]` projection: the strided gate and up halves, each
/// clamped (`clamp` saves its input, so the projection stays alive), `gate * α`, `sigmoid`
/// saving its output, the product saving both, `up + 1`, the final product saving both. The
/// clamped `up` is a local of `_apply_gate` (`up + 1` saves nothing): it lives until the
/// function returns, after the final product.
fn gpt_oss_gate(g: &mut Graph, gu: TensorId, inter: u64) -> Result<TensorId, EstimateError> {
    let n = g.shape(gu)[0];
    let dt = g.dtype(gu);
    let gate = g.slice_view(gu, vec![n, inter])?;
    let up = g.slice_view(gu, vec![n, inter])?;
    let clamp = Pw {
        save_input: true,
        flops: 1.0,
        ..Pw::default()
    };
    let gate = g.pointwise("clamp", gate, dt, clamp)?;
    let up = g.pointwise("clamp", up, dt, clamp)?;
    let ga = g.pointwise(
        "mul",
        gate,
        dt,
        Pw {
            flops: 1.0,
            ..Pw::default()
        },
    )?;
    let sg = g.pointwise(
        "sigmoid",
        ga,
        dt,
        Pw {
            save_output: true,
            flops: 4.0,
            ..Pw::default()
        },
    )?;
    let glu = g.mul_bc(gate, sg)?;
    let up1 = g.pointwise(
        "add",
        up,
        dt,
        Pw {
            alias_grad: true,
            flops: 1.0,
            ..Pw::default()
        },
    )?;
    let y = g.mul_bc(up1, glu)?;
    g.hold(&[up]);
    Ok(y)
}

/// A routed expert's weight: a parameter marked so that the layouts split it over the
/// expert-parallel group.
fn expert_param(g: &mut Graph, shape: Vec<u64>, dtype: DType) -> Result<TensorId, EstimateError> {
    let p = g.param_of(shape, dtype)?;
    g.tensors[p].expert = true;
    Ok(p)
}

/// A routed expert's weight-format constant (FP8 tile scales, MXFP4 block scales): stored with
/// its weights, never trained.
fn expert_constant(
    g: &mut Graph,
    shape: Vec<u64>,
    dtype: DType,
) -> Result<TensorId, EstimateError> {
    let c = g.weight_constant(shape, dtype)?;
    g.tensors[c].expert = true;
    Ok(c)
}

/// The experts this rank holds: all of them, or `E/ep` under expert parallelism.
fn local_experts(g: &Graph, moe: &Moe) -> Result<u64, EstimateError> {
    let ep = g.ep.max(1);
    if !moe.experts.is_multiple_of(ep) {
        let divisors: Vec<String> = (1..=moe.experts)
            .filter(|d| moe.experts.is_multiple_of(*d))
            .map(|d| d.to_string())
            .collect();
        return Err(EstimateError::BadLayout(format!(
            "expert parallelism ep = {ep} does not divide the {} routed experts: use ep among {}",
            moe.experts,
            divisors.join(", ")
        )));
    }
    Ok(moe.experts / ep)
}

/// `final.index_add_(0, index, y)`: in place; the source's gradient is
/// `grad.index_select(0, index).expand_as(source)` (a new tensor), so autograd saves the source
/// as well as the indices (`derivatives.yaml` `index_add`); the destination's gradient passes on.
fn index_add_rows(
    g: &mut Graph,
    fin: TensorId,
    index: TensorId,
    y: TensorId,
) -> Result<TensorId, EstimateError> {
    let (n, h) = (g.shape(y)[0], g.shape(y)[1]);
    let rg = g.requires_grad(&[fin, y]);
    let next = g.alias(fin, g.shape(fin), rg);
    let mut op = g.op("index_add", "");
    op.flops = (n * h) as f64;
    op.inputs = vec![fin, index, y];
    op.outputs = vec![next];
    op.saved = vec![index, y];
    if g.t(fin).requires_grad {
        op.grads.push((fin, GradFlow::Alias));
    }
    if g.t(y).requires_grad {
        op.grads.push((y, GradFlow::Alloc));
    }
    g.record(op);
    Ok(next)
}

/// One expert's MLP on its rows `cur` (`[n, H]`): the gate-up projection through a `select`
/// view of the 3-D weight (FP8: [`Graph::fp8_matmul`] with the tile scales), the gated
/// activation, the down projection; gpt-oss's own expert.
#[allow(clippy::too_many_arguments)]
fn expert_mlp(
    g: &mut Graph,
    moe: &Moe,
    weights: &[TensorId],
    scales: &[TensorId],
    cur: TensorId,
    act: Activation,
    cpu: bool,
) -> Result<TensorId, EstimateError> {
    let (n, h) = (g.shape(cur)[0], g.shape(cur)[1]);
    let i = moe.expert_intermediate;
    if moe.kind == MoeKind::GptOss {
        return Ok(gpt_oss_expert(g, weights, cur, i, None)?.0);
    }
    let w1 = g.select(weights[0], vec![2 * i, h])?;
    let gu = match scales.first() {
        Some(&s) => {
            let s1 = g.select(s, fp8_scale_shape(2 * i, h))?;
            g.fp8_matmul(cur, w1, s1)?
        }
        None => g.linear_with(cur, w1, None)?,
    };
    let parts = g.split(gu, vec![vec![n, i], vec![n, i]])?;
    let a = activation(g, parts[0], act, cpu)?;
    let y = g.mul_bc(a, parts[1])?;
    let w2 = g.select(weights[1], vec![h, i])?;
    match scales.get(1) {
        Some(&s) => {
            let s2 = g.select(s, fp8_scale_shape(h, i))?;
            g.fp8_matmul(y, w2, s2)
        }
        None => g.linear_with(y, w2, None),
    }
}

/// The experts' eager loop (`*Experts.forward`): the dispatch without autograd, then per expert
/// with tokens its gather, MLP, weighting and `index_add_` into the output. Under FP8 the loop
/// is `FP8Expert.forward` (transformers `integrations/finegrained_fp8.py`): e4m3 weights with
/// `*_scale_inv` tiles per expert, each projection through [`Graph::fp8_matmul`], and
/// `one_hot` over the `E` experts only. Under expert parallelism the rank's `E/ep` experts run
/// behind an all-to-all dispatch ([`dispatched_experts`]). `outer`: what the caller's frame
/// keeps referenced through gpt-oss's loop (its router logits).
#[allow(clippy::too_many_arguments)]
fn experts(
    g: &mut Graph,
    moe: &Moe,
    hv: TensorId,
    rw: TensorId,
    sel: TensorId,
    act: Activation,
    cpu: bool,
    dt: DType,
    quant: Quantization,
    routing: Routing,
    outer: &[TensorId],
) -> Result<TensorId, EstimateError> {
    let (t, h) = (g.shape(hv)[0], g.shape(hv)[1]);
    let (e_n, k, i) = (moe.experts, moe.top_k, moe.expert_intermediate);
    let skew = routing.skew;
    let local = local_experts(g, moe)?;
    let fp8 = quant == Quantization::Fp8;
    let grouped = routing.experts == ExpertsImpl::GroupedMm;
    if grouped {
        check_grouped(g, moe, quant)?;
    }
    let weights = if moe.kind == MoeKind::GptOss {
        gpt_oss_expert_params(g, local, h, i)?
    } else {
        let wdt = if fp8 {
            DType::F8e4m3
        } else {
            g.precision.param_dtype()
        };
        vec![
            expert_param(g, vec![local, 2 * i, h], wdt)?,
            expert_param(g, vec![local, h, i], wdt)?,
        ]
    };
    let scales = if fp8 {
        let mut gu = fp8_scale_shape(2 * i, h);
        gu.insert(0, local);
        let mut down = fp8_scale_shape(h, i);
        down.insert(0, local);
        vec![
            expert_constant(g, gu, DType::F32)?,
            expert_constant(g, down, DType::F32)?,
        ]
    } else {
        Vec::new()
    };
    if routing.capacity.is_some() && local == e_n {
        return Err(EstimateError::Unsupported(
            "a capacity factor caps what the all-to-all dispatch of expert parallelism sends each expert; transformers' experts are dropless: set ep > 1 or leave it out".into(),
        ));
    }
    if local < e_n {
        let ctx = Dispatch {
            weights: &weights,
            scales: &scales,
            act,
            cpu,
            dt,
            skew,
            grouped,
            capacity: routing.capacity,
        };
        return dispatched_experts(g, moe, hv, rw, sel, &ctx);
    }
    if grouped {
        return grouped_mm_experts(g, moe, hv, rw, sel, &weights, act, cpu);
    }
    let mut fin = g.zeros(vec![t, h], dt)?;
    // The dispatch, without autograd: `one_hot(top_k_index, classes).permute(2, 1, 0)` (int64,
    // alive for the whole loop; `E + 1` classes, gpt-oss `E`), the experts hit (`sum`,
    // `greater`, `nonzero`), then per expert `torch.where(expert_mask[e])` (one `nonzero`: slot
    // and token indices).
    let classes = if moe.kind == MoeKind::GptOss || fp8 {
        e_n
    } else {
        e_n + 1
    };
    let z = Bytes::ZERO;
    let mask = g.no_grad_op("one_hot", &[sel], vec![t, k, classes], DType::I64, z)?;
    let hit = g.no_grad_op("sum", &[mask], vec![classes], DType::I64, z)?;
    let hit = g.no_grad_op("gt", &[hit], vec![classes], DType::Bool, z)?;
    let hit = g.no_grad_op("nonzero", &[hit], vec![e_n, 1], DType::I64, z)?;
    // gpt-oss: the loop's locals (`GptOssExperts.forward`) and what the frames above hold.
    let gpt_oss = moe.kind == MoeKind::GptOss;
    let mut locals: Vec<TensorId> = Vec::new();
    for e in 0..e_n {
        let n = moe.tokens_of(t, e, skew)?;
        if n == 0 {
            continue;
        }
        let slots = g.no_grad_op("nonzero", &[mask], vec![n, 2], DType::I64, z)?;
        let tok = g.alias(slots, vec![n], false);
        let pos = g.alias(slots, vec![n], false);
        let cur = index_rows(g, hv, &[tok], vec![n, h])?;
        let y = if gpt_oss {
            // `current_state` and `gated_output` stay bound until the next expert rebinds them
            // (with frozen experts neither is saved: the products save only the weights).
            if let Some(&prev_cur) = locals.first() {
                g.hold(&[prev_cur]);
            }
            let (y, gated) = gpt_oss_expert(g, &weights, cur, i, locals.get(1).copied())?;
            locals = vec![cur, gated];
            y
        } else {
            expert_mlp(g, moe, &weights, &scales, cur, act, cpu)?
        };
        let w = index_rows(g, rw, &[tok, pos], vec![n, 1])?;
        let y = g.mul_bc(y, w)?;
        let y = g.cast(y, dt)?;
        if gpt_oss {
            // Non-reentrant checkpointing stops the recomputation at the last tensor the
            // segment saves (`_StopRecomputationError` in `torch/utils/checkpoint.py`): the
            // last expert's `index_add_`, which saves before it runs. Until then the frames
            // hold `hidden_states`, `next_states` (the destination of every `index_add_`),
            // `expert_mask`, `expert_hit`, the loop's locals and the caller's (`outer`: the
            // router logits `GptOssMLP.forward` binds to `_`), so they are referenced here,
            // before the `index_add_`.
            let mut held = vec![hv, fin, mask, hit];
            held.extend_from_slice(&locals);
            held.extend_from_slice(outer);
            g.hold(&held);
        }
        fin = index_add_rows(g, fin, tok, y)?;
    }
    locals.extend_from_slice(&[mask, hit]);
    g.hold(&locals);
    Ok(fin)
}

/// Refuses what the grouped GEMMs are not modelled for. torch 2.15's `torch._grouped_mm` takes
/// fp32, bf16 and fp16 operands (`_meta_grouped_mm_common` in `torch/_meta_registrations.py`;
/// the CPU runs every one, CUDA its own kernel for bf16 and the per-group loop of
/// `_grouped_mm_fallback` otherwise), but it is not on autocast's lists: transformers casts the
/// rows to the weights' dtype (`_grouped_mm` in `integrations/moe.py`), so under autocast the
/// experts would run on the fp32 weights, which is not modelled. FP8 and MXFP4 experts have
/// kernels of their own; gpt-oss's biased experts are modelled without expert parallelism only.
fn check_grouped(g: &Graph, moe: &Moe, quant: Quantization) -> Result<(), EstimateError> {
    if quant != Quantization::None {
        return Err(EstimateError::Unsupported(
            "experts_impl grouped_mm is modelled for bf16 weights, not quantized experts: leave experts_impl out".into(),
        ));
    }
    if moe.kind == MoeKind::GptOss && g.ep > 1 {
        return Err(EstimateError::Unsupported(
            "experts_impl grouped_mm under expert parallelism is not modelled for gpt-oss's biased experts: use ep = 1 or the eager loop".into(),
        ));
    }
    if g.precision.autocast().is_some() {
        return Err(EstimateError::Unsupported(format!(
            "experts_impl grouped_mm runs torch._grouped_mm outside autocast, on the weights' dtype (transformers casts the rows to it): use \"dtype\": \"bf16\" or \"fp32\", not {}",
            g.precision.name()
        )));
    }
    Ok(())
}

/// The experts as two grouped GEMMs over rows already sorted by expert: the gate-up projection,
/// the gated activation on its halves (`_apply_gate`), the down projection. `offsets` are the
/// groups' ends when the GEMMs take them as a tensor (`torch._grouped_mm(..., offs=offsets)`),
/// which autograd saves with both operands.
fn grouped_experts(
    g: &mut Graph,
    moe: &Moe,
    weights: &[TensorId],
    x: TensorId,
    offsets: Option<TensorId>,
    act: Activation,
    cpu: bool,
) -> Result<TensorId, EstimateError> {
    let (rows, i) = (g.shape(x)[0], moe.expert_intermediate);
    let gu = g.grouped_mm(x, weights[0], offsets, false)?;
    let parts = g.split(gu, vec![vec![rows, i], vec![rows, i]])?;
    let a = activation(g, parts[0], act, cpu)?;
    let y = g.mul_bc(a, parts[1])?;
    g.grouped_mm(y, weights[1], offsets, false)
}

/// The projections of `grouped_mm_experts_forward` for gpt-oss's experts
/// (`use_experts_implementation(is_concatenated=False, is_transposed=True, has_bias=True)` in
/// `models/gpt_oss/modeling_gpt_oss.py`): each bias gathered per row (`gate_up_proj_bias[expert_ids_g]`,
/// an `[S, 2I]` copy saving the ids; its backward scatters into a zero `[E, 2I]`), the grouped
/// GEMM on the `[E, H, 2I]` weight as stored, the bias added in place (`out.add_(bias)` in
/// `_grouped_linear`: saves nothing, the gradient passes to both), `GptOssExperts._apply_gate`
/// ([`gpt_oss_gate`]), then the same for the down projection. The gate-up bias rows live until
/// the down projection's replace them in `selected_biases`; those stay until the function
/// returns, and are returned to be held.
fn gpt_oss_grouped(
    g: &mut Graph,
    moe: &Moe,
    w: &[TensorId],
    x: TensorId,
    ids: TensorId,
    offsets: TensorId,
) -> Result<(TensorId, TensorId), EstimateError> {
    let (s, h) = (g.shape(x)[0], g.shape(x)[1]);
    let i = moe.expert_intermediate;
    let b1 = index_rows(g, w[1], &[ids], vec![s, 2 * i])?;
    let gu = g.grouped_mm(x, w[0], Some(offsets), true)?;
    let gu = g.add(gu, b1, true)?;
    let y = gpt_oss_gate(g, gu, i)?;
    let b2 = index_rows(g, w[3], &[ids], vec![s, h])?;
    g.hold(&[b1]);
    let out = g.grouped_mm(y, w[2], Some(offsets), true)?;
    let out = g.add(out, b2, true)?;
    Ok((out, b2))
}

/// `grouped_mm_experts_forward` (transformers 5.24 `integrations/moe.py`,
/// `experts_implementation="grouped_mm"`), without expert parallelism. The `S = T·k`
/// token-expert pairs sorted by expert (`torch.sort`: the sorted ids and the permutation, int64),
/// the rows gathered in that order (`hidden_states[perm // num_top_k]`) with their routing
/// weights (`sample_weights[perm]`), the per-expert counts (`torch.histc`, whose input is
/// `expert_ids_g.float()` on the CPU and `.int()` on CUDA, both 4 bytes an element; its output
/// fp32) and their int32 `cumsum` as the offsets, the two grouped GEMMs (gpt-oss's with their
/// per-row biases, [`gpt_oss_grouped`]), the weighting (its
/// product promoted to the routing weights' dtype: fp32 for Mixtral's router), the inverse
/// permutation (`empty_like` filled from an `arange` by `index_put_`) gathering the rows back,
/// `view(T, k, H).sum(1)` (its backward a broadcast view) and `.to(hidden_states.dtype)`: a copy
/// when the weighting promoted, a no-op otherwise. The sentinel mask and its `masked_fill` are
/// built only when `_is_expert_parallel`, which is never the case here (expert parallelism runs
/// [`dispatched_experts`]). The function's locals (the sorted ids, the histc input and counts,
/// the gathered-back rows and the sum before its cast) are released when it returns, after the
/// cast. Every row of every expert at once: the `[S, 2I]` projection and its activation are
/// whole-batch tensors, where the loop holds one expert's.
#[allow(clippy::too_many_arguments)]
fn grouped_mm_experts(
    g: &mut Graph,
    moe: &Moe,
    hv: TensorId,
    rw: TensorId,
    sel: TensorId,
    weights: &[TensorId],
    act: Activation,
    cpu: bool,
) -> Result<TensorId, EstimateError> {
    let (t, h) = (g.shape(hv)[0], g.shape(hv)[1]);
    let (e_n, k) = (moe.experts, moe.top_k);
    let s = t.checked_mul(k).ok_or(EstimateError::TooLarge)?;
    let z = Bytes::ZERO;
    let ids = g.alloc(vec![s], DType::I64, StorageKind::Activation, false)?;
    let perm = g.alloc(vec![s], DType::I64, StorageKind::Activation, false)?;
    g.record_simple("sort", vec![sel], vec![ids, perm], vec![], 0.0);
    let tok = g.no_grad_op("floor_divide", &[perm], vec![s], DType::I64, z)?;
    let xg = index_rows(g, hv, &[tok], vec![s, h])?;
    let wg = index_rows(g, rw, &[perm], vec![s, 1])?;
    let hdt = if cpu { DType::F32 } else { DType::I32 };
    let hin = g.no_grad_op("to_copy", &[ids], vec![s], hdt, z)?;
    let counts = g.no_grad_op("histc", &[hin], vec![e_n], DType::F32, z)?;
    let offsets = g.no_grad_op("cumsum", &[counts], vec![e_n], DType::I32, z)?;
    let (y, bias_rows) = if moe.kind == MoeKind::GptOss {
        let (y, b) = gpt_oss_grouped(g, moe, weights, xg, ids, offsets)?;
        (y, Some(b))
    } else {
        let y = grouped_experts(g, moe, weights, xg, Some(offsets), act, cpu)?;
        (y, None)
    };
    let y = g.mul_bc(y, wg)?;
    let arange = g.no_grad_op("arange", &[], vec![s], DType::I64, z)?;
    let inv = g.no_grad_op("index_put", &[perm, arange], vec![s], DType::I64, z)?;
    let back = index_rows(g, y, &[inv], vec![s, h])?;
    let v = g.view(back, vec![t, k, h])?;
    let rg = g.t(v).requires_grad;
    let sum = g.alloc(vec![t, h], g.dtype(v), StorageKind::Activation, rg)?;
    let mut op = g.op("sum", "");
    op.flops = (s * h) as f64;
    op.inputs = vec![v];
    op.outputs = vec![sum];
    if rg {
        op.grads.push((v, GradFlow::Alias));
    }
    g.record(op);
    let out = g.cast(sum, g.dtype(hv))?;
    let mut locals = vec![ids, perm, hin, counts, offsets, back, sum];
    locals.extend(bias_rows);
    g.hold(&locals);
    Ok(out)
}

/// What the dispatched experts run with.
struct Dispatch<'a> {
    weights: &'a [TensorId],
    scales: &'a [TensorId],
    act: Activation,
    cpu: bool,
    dt: DType,
    skew: f64,
    /// The local experts as grouped GEMMs over the received rows, not one by one.
    grouped: bool,
    capacity: Option<Capacity>,
}

/// An all-to-all over the expert-parallel group: `x` (`[rows, H]`, what this rank sends) becomes
/// the `[received, H]` rows the others send it. Saves nothing; its backward is the reverse
/// all-to-all, a new gradient of `x`'s size (Megatron-Core `all_to_all` in
/// `megatron/core/tensor_parallel/mappings.py`).
fn all_to_all(g: &mut Graph, x: TensorId, received: u64) -> Result<TensorId, EstimateError> {
    let h = g.shape(x)[1];
    let rg = g.t(x).requires_grad;
    let y = g.alloc(vec![received, h], g.dtype(x), StorageKind::Activation, rg)?;
    g.record_simple("all_to_all", vec![x], vec![y], vec![], 0.0);
    let op = g.ops.len() - 1;
    let (sent, back) = (g.bytes(x).0, g.bytes(y).0);
    for (backward, bytes) in [(false, sent), (true, back)] {
        if backward && !rg {
            continue;
        }
        g.tp.comm.push(CommRecord {
            group: CommGroup::Ep,
            op,
            backward,
            collective: Collective::AllToAll,
            bytes,
        });
    }
    Ok(y)
}

/// The rank's `E/ep` experts behind the token dispatch of Megatron-Core's
/// `MoEAlltoAllTokenDispatcher` (`megatron/core/transformer/moe/token_dispatcher.py` and
/// `moe_utils.py`, `permute` / `sort_chunks_by_idxs` / `unpermute`), each expert run as the eager
/// loop runs it. The routing map (`[T, E]` bool) gives the `T·k` slots in expert order
/// (`argsort`, int64); `permute` gathers the rows (`index_select`, saving the indices; its
/// backward scatters into a zero tensor of the input's size); an all-to-all sends each rank the
/// rows of its experts, and with more than one local expert `sort_chunks_by_idxs` regroups them
/// by expert (`torch.cat`: a new buffer; its backward a new one too); each expert takes its rows
/// as a `split` view; the outputs are concatenated, regrouped by source rank, sent back by the
/// reverse all-to-all, weighted by the router's probabilities and scatter-added into `[T, H]`
/// (`unpermute`). With `grouped_mm` the local experts are two grouped GEMMs over the regrouped
/// rows instead of the loop. The rank holding the first experts receives `ep` ranks' tokens for
/// each of them: `T·k` rows under balanced routing, more under a skew (the busiest expert is its
/// own). With a capacity (`capacity_factor`) each rank sends an expert at most its capacity and
/// drops the rest (`moe_token_drop_policy="probs"`: the rows are fewer, their number does not
/// depend on which), or exactly its capacity when padded; the exchange buffers, the gathered
/// rows and the experts' inputs follow.
fn dispatched_experts(
    g: &mut Graph,
    moe: &Moe,
    hv: TensorId,
    rw: TensorId,
    sel: TensorId,
    d: &Dispatch,
) -> Result<TensorId, EstimateError> {
    let (t, h) = (g.shape(hv)[0], g.shape(hv)[1]);
    let (e_n, k) = (moe.experts, moe.top_k);
    let ep = g.ep.max(1);
    let local = e_n / ep;
    let tk = t.checked_mul(k).ok_or(EstimateError::TooLarge)?;
    // What this rank sends expert `e`: its tokens, capped (or padded) to the capacity.
    let send = |e: u64| -> Result<u64, EstimateError> {
        let n = moe.tokens_of(t, e, d.skew)?;
        Ok(match d.capacity {
            None => n,
            Some(c) if c.pad => c.per_expert(t, k, e_n),
            Some(c) => n.min(c.per_expert(t, k, e_n)),
        })
    };
    let mut sent = 0u64;
    for e in 0..e_n {
        sent = sent.checked_add(send(e)?).ok_or(EstimateError::TooLarge)?;
    }
    let z = Bytes::ZERO;
    let map = g.no_grad_op("one_hot", &[sel], vec![t, e_n], DType::Bool, z)?;
    let order = g.no_grad_op("argsort", &[map], vec![tk], DType::I64, z)?;
    let perm = index_rows(g, hv, &[order], vec![sent, h])?;
    let mut rows = Vec::with_capacity(local as usize);
    for e in 0..local {
        rows.push(send(e)?.checked_mul(ep).ok_or(EstimateError::TooLarge)?);
    }
    let received: u64 = rows.iter().sum();
    let recv = all_to_all(g, perm, received)?;
    let regroup = |g: &mut Graph, x: TensorId| -> Result<TensorId, EstimateError> {
        if local == 1 {
            return Ok(x);
        }
        let rg = g.t(x).requires_grad;
        let y = g.alloc(g.shape(x), g.dtype(x), StorageKind::Activation, rg)?;
        g.record_simple("sort_chunks", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    };
    let sorted = regroup(g, recv)?;
    let out = if d.grouped {
        grouped_experts(g, moe, d.weights, sorted, None, d.act, d.cpu)?
    } else {
        let busy: Vec<u64> = rows.iter().copied().filter(|&n| n > 0).collect();
        let parts = g.split(sorted, busy.iter().map(|&n| vec![n, h]).collect())?;
        let mut outs = Vec::with_capacity(parts.len());
        for cur in parts {
            outs.push(expert_mlp(g, moe, d.weights, d.scales, cur, d.act, d.cpu)?);
        }
        g.cat(&outs, 0)?
    };
    let out = regroup(g, out)?;
    let back = all_to_all(g, out, sent)?;
    let w = index_rows(g, rw, &[order], vec![sent, 1])?;
    let y = g.mul_bc(back, w)?;
    let y = g.cast(y, d.dt)?;
    let fin = g.zeros(vec![t, h], d.dt)?;
    let fin = index_add_rows(g, fin, order, y)?;
    g.hold(&[map]);
    Ok(fin)
}

/// gpt-oss's MLP with MXFP4 experts, as transformers' `integrations/mxfp4.py` patches it
/// (`mlp_forward`, `Mxfp4GptOssExperts.forward`) on the triton kernels: the router's logits
/// (`F.linear` with its bias, the model dtype), then `triton_kernels.routing.routing`: a fused
/// top-k (the chosen logits softmaxed in their dtype `[T, k]`, the expert ids as int16 and a
/// bitmatrix of the choices, one uint32 per 32 experts per token), then the tokens sorted by
/// expert (a histogram `[E]`, the gather and scatter permutations `[T·k]` as int32 and the
/// gate weights `[T·k]`), which live through both GEMMs. `matmul_ogs` gathers the rows,
/// multiplies with the MXFP4 `gate_up_proj` (fp32 bias, fused clamped SwiGLU: `[T·k, I]`), and
/// the second scatters `down_proj`'s rows weighted by the gates back into `[T, H]`.
/// The weights: E2M1 values and an E8M0 (uint8) scale per 32 along the input dimension, the
/// biases in fp32 (`Mxfp4GptOssExperts.__init__`). Not modelled: the kernels' routing metadata
/// (`compute_expt_data`: per-expert offsets and tile indices, `O(E + T·k / 16)` int32) and any
/// split-k scratch of `matmul_ogs`.
fn mxfp4_block(
    g: &mut Graph,
    moe: &Moe,
    hv: TensorId,
) -> Result<(TensorId, TensorId), EstimateError> {
    let (t, h) = (g.shape(hv)[0], g.shape(hv)[1]);
    let (e_n, k, i) = (moe.experts, moe.top_k, moe.expert_intermediate);
    if !h.is_multiple_of(MX_BLOCK) || !i.is_multiple_of(MX_BLOCK) {
        return Err(EstimateError::Unsupported(format!(
            "MXFP4 blocks hold {MX_BLOCK} elements: the hidden size ({h}) and expert width ({i}) must divide by {MX_BLOCK}"
        )));
    }
    let dt = g.dtype(hv);
    let first = g.ops.len();
    let logits = g.scoped("router", |g| {
        let w = g.param(vec![e_n, h])?;
        let b = g.param(vec![e_n])?;
        g.linear_with(hv, w, Some(b))
    })?;
    g.tag_moe(first, MoePart::Router, &[]);
    g.scoped("experts", |g| {
        let w1 = expert_param(g, vec![e_n, 2 * i, h], DType::F4e2m1)?;
        let s1 = expert_constant(g, vec![e_n, 2 * i, h / MX_BLOCK], DType::U8)?;
        let b1 = expert_param(g, vec![e_n, 2 * i], DType::F32)?;
        let w2 = expert_param(g, vec![e_n, h, i], DType::F4e2m1)?;
        let s2 = expert_constant(g, vec![e_n, h, i / MX_BLOCK], DType::U8)?;
        let b2 = expert_param(g, vec![e_n, h], DType::F32)?;
        let tk = t.checked_mul(k).ok_or(EstimateError::TooLarge)?;
        let scal = g.alloc(vec![t, k], dt, StorageKind::Activation, false)?;
        let ids = g.alloc(vec![t, k], DType::I16, StorageKind::Activation, false)?;
        let bits = g.alloc(
            vec![t, e_n.div_ceil(32)],
            DType::I32,
            StorageKind::Activation,
            false,
        )?;
        g.record_simple(
            "routing_topk",
            vec![logits],
            vec![scal, ids, bits],
            vec![],
            0.0,
        );
        let hist = g.alloc(vec![e_n], DType::I32, StorageKind::Activation, false)?;
        let topk_indx = g.alloc(vec![tk], DType::I32, StorageKind::Activation, false)?;
        let gate_indx = g.alloc(vec![tk], DType::I32, StorageKind::Activation, false)?;
        let gate_scal = g.alloc(vec![tk], dt, StorageKind::Activation, false)?;
        g.record_simple(
            "routing_sort",
            vec![scal, ids, bits],
            vec![hist, topk_indx, gate_indx, gate_scal],
            vec![],
            0.0,
        );
        let mid = g.alloc(vec![tk, i], dt, StorageKind::Activation, false)?;
        let mut op = g.op("matmul_ogs", "");
        op.flops = 2.0 * tk as f64 * (2 * i * h) as f64;
        op.inputs = vec![hv, w1, s1, b1, hist, topk_indx, gate_indx];
        op.outputs = vec![mid];
        g.record(op);
        let out = g.alloc(vec![t, h], dt, StorageKind::Activation, false)?;
        let mut op = g.op("matmul_ogs", "");
        op.flops = 2.0 * tk as f64 * (i * h) as f64;
        op.inputs = vec![mid, w2, s2, b2, hist, topk_indx, gate_indx, gate_scal];
        op.outputs = vec![out];
        g.record(op);
        Ok((out, logits))
    })
}

/// `load_balancing_loss_func(router_logits, E, k)` without an attention mask, then
/// `loss += router_aux_loss_coef · aux` in place (`*ForCausalLM.forward`, transformers 5.24):
/// layer by layer a softmax (fp32 under autocast) and a `topk` of each layer's logits, a
/// histogram of the chosen experts (`torch.histc` on a float copy of the indices, no gradient)
/// and the probabilities summed over the tokens, both accumulated into `[E]` sums; then the
/// scalar product.
pub fn aux_loss(
    g: &mut Graph,
    moe: &Moe,
    logits: &[TensorId],
    loss: TensorId,
) -> Result<TensorId, EstimateError> {
    if logits.is_empty() {
        return Ok(loss);
    }
    let (e_n, k) = (moe.experts, moe.top_k);
    let scalar = Pw {
        flops: 1.0,
        ..Pw::default()
    };
    let mut tokens: Option<TensorId> = None;
    let mut probs_sum: Option<TensorId> = None;
    for &l in logits {
        let rows = g.shape(l)[0];
        let probs = g.softmax(l)?;
        let rg = g.t(probs).requires_grad;
        let vals = g.alloc(vec![rows, k], DType::F32, StorageKind::Activation, rg)?;
        let sel = g.alloc(vec![rows, k], DType::I64, StorageKind::Activation, false)?;
        g.record_simple("topk", vec![probs], vec![vals, sel], vec![sel], 0.0);
        let self_f = g.no_grad_op("to_copy", &[sel], vec![rows * k], DType::F32, Bytes::ZERO)?;
        let hist = g.no_grad_op("histc", &[self_f], vec![e_n], DType::F32, Bytes::ZERO)?;
        tokens = Some(match tokens {
            None => g.no_grad_op("add", &[hist], vec![e_n], DType::F32, Bytes::ZERO)?,
            Some(t) => g.no_grad_op("add", &[t, hist], vec![e_n], DType::F32, Bytes::ZERO)?,
        });
        let sum = g.alloc(vec![e_n], DType::F32, StorageKind::Activation, rg)?;
        g.record_unary("sum", probs, sum, vec![], (rows * e_n) as f64);
        probs_sum = Some(match probs_sum {
            None => g.pointwise("add", sum, DType::F32, scalar)?,
            Some(p) => g.add(p, sum, false)?,
        });
    }
    let (Some(tokens), Some(probs_sum)) = (tokens, probs_sum) else {
        return Ok(loss);
    };
    let frac = g.no_grad_op("div", &[tokens], vec![e_n], DType::F32, Bytes::ZERO)?;
    let mean = g.pointwise("div", probs_sum, DType::F32, scalar)?;
    let mean = g.view(mean, vec![1, e_n])?;
    let prod = g.mul_bc(frac, mean)?;
    let rg = g.t(prod).requires_grad;
    let sum = g.alloc(vec![], DType::F32, StorageKind::Activation, rg)?;
    g.record_unary("sum", prod, sum, vec![], (e_n) as f64);
    let aux = g.pointwise("mul", sum, DType::F32, scalar)?;
    let scaled = g.pointwise("mul", aux, DType::F32, scalar)?;
    let total = g.add(loss, scaled, true)?;
    // The training loop keeps the loss, which now carries the auxiliary term.
    for kept in g.kept.iter_mut().filter(|t| **t == loss) {
        *kept = total;
    }
    Ok(total)
}
