//! The sparse mixture-of-experts block of the LLaMA-family decoders, op by op as transformers
//! 5.24 runs it with its eager experts: the per-expert Python loop of `MixtralExperts`,
//! `Qwen2MoeExperts` and `Qwen3MoeExperts` behind their `*TopKRouter`
//! (`models/{mixtral,qwen2_moe,qwen3_moe}/modeling_*.py`), and the auxiliary load-balancing loss
//! (`load_balancing_loss_func`) when the config asks for the router logits.
//!
//! Routing makes the shapes data-dependent; the estimate assumes **balanced routing**: each of
//! the `T·k` token-to-expert assignments of a step goes to the experts in turn, so every expert
//! receives `⌊T·k / E⌋` or `⌈T·k / E⌉` tokens (the first `T·k mod E` experts one more) and
//! every expert runs. A skewed router gives some experts more tokens (larger per-expert inputs,
//! outputs and saved activations) and may leave others idle.
//!
//! Op names follow the module paths, so the per-layer chart keeps an expert's activations in its
//! layer and the breakdown can tell the parts apart: the router's ops are named under
//! `mlp.gate`, the experts' and the dispatch's (`one_hot`, `nonzero`, `index`, `index_add`)
//! under `mlp.experts`, Qwen2-MoE's shared expert under `mlp.shared_expert`.

use crate::estimator::error::EstimateError;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::ops::Pw;
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
    /// Qwen2-MoE `shared_expert_intermediate_size`.
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

    /// Parameters of one sparse block: the router, the experts, the shared expert and its gate.
    pub fn block_params(&self, hidden: u64) -> u64 {
        let shared = self
            .shared_intermediate
            .map_or(0, |i| 3 * hidden * i + hidden);
        hidden * self.experts + self.experts * 3 * hidden * self.expert_intermediate + shared
    }

    /// Parameters one token runs through in a sparse block: the router, `top_k` experts and the
    /// shared expert.
    pub fn active_block_params(&self, hidden: u64) -> u64 {
        let shared = self
            .shared_intermediate
            .map_or(0, |i| 3 * hidden * i + hidden);
        hidden * self.experts + self.top_k * 3 * hidden * self.expert_intermediate + shared
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
) -> Result<TensorId, EstimateError> {
    let gt = g.linear("gate_proj", x, hidden, inter, false)?;
    let gt = activation(g, gt, act, cpu)?;
    let up = g.linear("up_proj", x, hidden, inter, false)?;
    let y = g.mul_bc(gt, up)?;
    g.linear("down_proj", y, inter, hidden, false)
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

/// What a sparse block returns: its output and the router logits (for the auxiliary loss).
pub struct MoeOut {
    pub out: TensorId,
    pub router_logits: TensorId,
}

/// `*SparseMoeBlock.forward` on `x` (`[B, S, H]`, the post-attention norm's output) inside the
/// layer's `mlp` scope, as transformers 5.24 writes it: the router (`*TopKRouter`: `F.linear`
/// with its `[E, H]` weight, softmax in fp32, `topk`, the optional renormalisation in place,
/// Qwen's cast back to the logits' dtype) and the experts (`*Experts`, stored as two 3-D
/// parameters `gate_up_proj` `[E, 2I, H]` and `down_proj` `[E, H, I]`) run by the eager
/// per-expert loop (`experts_implementation="eager"`). Each expert's weights are a `select`
/// view of the 3-D parameters: under autocast the view is cast anew for every expert (only leaf
/// weights are cached) and the copy saved, and in backward each view's gradient is a zero tensor
/// of the whole parameter's size with the expert's slice filled in (`select_backward`).
///
/// transformers 5.24 picks `grouped_mm` instead when `torch._grouped_mm` can dispatch (recent
/// CUDA GPUs); the loop is what it runs elsewhere and what `experts_implementation="eager"` asks.
pub fn sparse_block(
    g: &mut Graph,
    moe: &Moe,
    x: TensorId,
    act: Activation,
    cpu: bool,
) -> Result<MoeOut, EstimateError> {
    let s = g.shape(x);
    let (b, seq, h) = (s[0], s[1], s[2]);
    let t = b * seq;
    let (e_n, k, i) = (moe.experts, moe.top_k, moe.expert_intermediate);
    let dt = g.dtype(x);
    let hv = g.view(x, vec![t, h])?;
    // Qwen2-MoE runs its shared expert first.
    let shared = match moe.shared_intermediate {
        Some(si) => Some(g.scoped("shared_expert", |g| gated_mlp(g, hv, h, si, act, cpu))?),
        None => None,
    };
    let (logits, rw, sel) = g.scoped("gate", |g| {
        let w = g.param(vec![e_n, h])?;
        let logits = g.linear_with(hv, w, None)?;
        // Mixtral: `softmax(router_logits.float())`; Qwen: `softmax(..., dtype=torch.float)`.
        let probs = if moe.kind == MoeKind::Mixtral {
            let lf = g.cast(logits, DType::F32)?;
            g.softmax_to(lf, DType::F32)?
        } else {
            g.softmax_to(logits, DType::F32)?
        };
        let rg = g.t(probs).requires_grad;
        let vals = g.alloc(vec![t, k], DType::F32, StorageKind::Activation, rg)?;
        let sel = g.alloc(vec![t, k], DType::I64, StorageKind::Activation, false)?;
        // `topk` saves its indices; its gradient is scattered into zeros of the input's size.
        g.record_simple("topk", vec![probs], vec![vals, sel], vec![sel], 0.0);
        let vals = if moe.norm_topk {
            // `router_top_value /= router_top_value.sum(dim=-1, keepdim=True)`: in place, so
            // autograd keeps a copy of the dividend (the divisor's gradient needs it).
            let sum = g.alloc(vec![t, 1], DType::F32, StorageKind::Activation, rg)?;
            g.record_unary("sum", vals, sum, vec![], (t * k) as f64);
            let q = g.alloc(vec![t, k], DType::F32, StorageKind::Activation, rg)?;
            g.record_simple(
                "div",
                vec![vals, sum],
                vec![q],
                vec![vals, sum],
                (t * k) as f64,
            );
            q
        } else {
            vals
        };
        let rw = if moe.kind == MoeKind::Mixtral {
            vals
        } else {
            let ldt = g.dtype(logits);
            g.cast(vals, ldt)?
        };
        Ok::<_, EstimateError>((logits, rw, sel))
    })?;
    let out = g.scoped("experts", |g| {
        let gate_up = g.param(vec![e_n, 2 * i, h])?;
        let down = g.param(vec![e_n, h, i])?;
        let mut fin = g.zeros(vec![t, h], dt)?;
        // The dispatch, without autograd: `one_hot(top_k_index, E + 1).permute(2, 1, 0)` (int64,
        // alive for the whole loop), the experts hit (`sum`, `greater`, `nonzero`), then per
        // expert `torch.where(expert_mask[e])` (one `nonzero`: slot and token indices).
        let mask = g.no_grad_op(
            "one_hot",
            &[sel],
            vec![t, k, e_n + 1],
            DType::I64,
            Bytes::ZERO,
        )?;
        let hit = g.no_grad_op("sum", &[mask], vec![e_n + 1], DType::I64, Bytes::ZERO)?;
        let hit = g.no_grad_op("gt", &[hit], vec![e_n + 1], DType::Bool, Bytes::ZERO)?;
        let hit = g.no_grad_op("nonzero", &[hit], vec![e_n, 1], DType::I64, Bytes::ZERO)?;
        for e in 0..e_n {
            let n = moe.balanced_tokens(t, e);
            if n == 0 {
                continue;
            }
            let slots = g.no_grad_op("nonzero", &[mask], vec![n, 2], DType::I64, Bytes::ZERO)?;
            let tok = g.alias(slots, vec![n], false);
            let pos = g.alias(slots, vec![n], false);
            let cur = index_rows(g, hv, &[tok], vec![n, h])?;
            let w1 = g.select(gate_up, vec![2 * i, h])?;
            let gu = g.linear_with(cur, w1, None)?;
            let parts = g.split(gu, vec![vec![n, i], vec![n, i]])?;
            let a = activation(g, parts[0], act, cpu)?;
            let y = g.mul_bc(a, parts[1])?;
            let w2 = g.select(down, vec![h, i])?;
            let y = g.linear_with(y, w2, None)?;
            let w = index_rows(g, rw, &[tok, pos], vec![n, 1])?;
            let y = g.mul_bc(y, w)?;
            let y = g.cast(y, dt)?;
            // `final_hidden_states.index_add_(0, token_idx, y)`: in place; the source's gradient
            // is `grad.index_select(0, token_idx)` (a new tensor), the destination's passes on.
            let rg = g.requires_grad(&[fin, y]);
            let next = g.alias(fin, vec![t, h], rg);
            let mut op = g.op("index_add", "");
            op.flops = (n * h) as f64;
            op.inputs = vec![fin, tok, y];
            op.outputs = vec![next];
            op.saved = vec![tok];
            if g.t(fin).requires_grad {
                op.grads.push((fin, GradFlow::Alias));
            }
            if g.t(y).requires_grad {
                op.grads.push((y, GradFlow::Alloc));
            }
            g.record(op);
            fin = next;
        }
        g.hold(&[mask, hit]);
        Ok::<_, EstimateError>(fin)
    })?;
    let out = match shared {
        // `sigmoid(shared_expert_gate(x)) * shared_expert(x)`, added out of place.
        Some(y) => {
            let gate = g.linear("shared_expert_gate", hv, h, 1, false)?;
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
    let out = g.view(out, vec![b, seq, h])?;
    Ok(MoeOut {
        out,
        router_logits: logits,
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
