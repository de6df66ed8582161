//! The sparse mixture-of-experts block of the LLaMA-family decoders, op by op as transformers
//! runs it by default: the per-expert Python loop of `MixtralSparseMoeBlock`,
//! `Qwen2MoeSparseMoeBlock` and `Qwen3MoeSparseMoeBlock`
//! (`models/{mixtral,qwen2_moe,qwen3_moe}/modeling_*.py`), and the auxiliary load-balancing loss
//! (`load_balancing_loss_func`) when the config asks for the router logits.
//!
//! Routing makes the shapes data-dependent; the estimate assumes **balanced routing**: each of
//! the `T·k` token-to-expert assignments of a step goes to the experts in turn, so every expert
//! receives `⌊T·k / E⌋` or `⌈T·k / E⌉` tokens (the first `T·k mod E` experts one more) and
//! every expert runs. A skewed router gives some experts more tokens (larger per-expert inputs,
//! outputs and saved activations) and may leave others idle.
//!
//! Op names follow the module paths (`layers.3.mlp.gate`, `layers.3.mlp.experts.7.w1`), so the
//! per-layer chart keeps an expert's activations in its layer; the router's ops are named under
//! `mlp.gate`, the dispatch's (`one_hot`, `nonzero`, `index`, `index_add`) under `mlp`.

use crate::estimator::error::EstimateError;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::ops::Pw;
use crate::estimator::units::{Bytes, DType};

use super::activation::{activation, Activation};

/// Which transformers block the layer runs (module names and routing details differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeKind {
    /// `MixtralSparseMoeBlock`: experts `w1` (gate), `w3` (up), `w2` (down); top-k weights
    /// always renormalised.
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

    fn names(&self) -> [&'static str; 3] {
        match self.kind {
            MoeKind::Mixtral => ["w1", "w3", "w2"],
            MoeKind::Qwen2 | MoeKind::Qwen3 => ["gate_proj", "up_proj", "down_proj"],
        }
    }
}

/// A gated MLP (`down(act(gate(x)) * up(x))`) under the current scope, dense linears.
fn gated_mlp(
    g: &mut Graph,
    x: TensorId,
    names: [&str; 3],
    hidden: u64,
    inter: u64,
    act: Activation,
    cpu: bool,
) -> Result<TensorId, EstimateError> {
    let gt = g.linear(names[0], x, hidden, inter, false)?;
    let gt = activation(g, gt, act, cpu)?;
    let up = g.linear(names[1], x, hidden, inter, false)?;
    let y = g.mul_bc(gt, up)?;
    g.linear(names[2], y, inter, hidden, false)
}

/// `tensor[index]` along the first dimension (advanced indexing, `aten::index`): a new tensor of
/// the selected rows; saves the index, and its backward scatters into a zero tensor of the
/// source's size (`index_backward`: `new_zeros(self.sizes()).index_put_`).
fn index_rows(
    g: &mut Graph,
    src: TensorId,
    index: TensorId,
    shape: Vec<u64>,
) -> Result<TensorId, EstimateError> {
    let rg = g.t(src).requires_grad;
    let y = g.alloc(shape, g.dtype(src), StorageKind::Activation, rg)?;
    g.record_simple("index", vec![src, index], vec![y], vec![index], 0.0);
    Ok(y)
}

/// What a sparse block returns: its output and the router logits (for the auxiliary loss).
pub struct MoeOut {
    pub out: TensorId,
    pub router_logits: TensorId,
}

/// `*SparseMoeBlock.forward` on `x` (`[B, S, H]`, the post-attention norm's output) inside the
/// layer's `mlp` scope.
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
    let (e_n, k) = (moe.experts, moe.top_k);
    let dt = g.dtype(x);
    let hv = g.view(x, vec![t, h])?;
    // The router: `gate` linear, softmax in fp32, top-k (values and int64 indices).
    let logits = g.linear("gate", hv, h, e_n, false)?;
    let probs = g.softmax_to(logits, DType::F32)?;
    let rg = g.t(probs).requires_grad;
    let vals = g.alloc(vec![t, k], DType::F32, StorageKind::Activation, rg)?;
    let sel = g.alloc(vec![t, k], DType::I64, StorageKind::Activation, false)?;
    // `topk` saves its indices; the gradient is scattered into zeros of the input's size.
    g.record_simple("topk", vec![probs], vec![vals, sel], vec![sel], 0.0);
    let vals = if moe.norm_topk || moe.kind == MoeKind::Mixtral {
        // `routing_weights /= routing_weights.sum(dim=-1, keepdim=True)`: in place, so autograd
        // keeps a copy of the dividend (the divisor's gradient needs it) and the divisor.
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
    let rw = g.cast(vals, dt)?;
    let mut fin = g.zeros(vec![t, h], dt)?;
    // The dispatch: `one_hot(selected_experts, E).permute(2, 1, 0)` (int64, alive for the whole
    // loop), the experts hit (`sum`, `greater`, `nonzero`), then per expert `torch.where` of its
    // mask row (one `nonzero` whose two columns are the slot and token indices).
    let mask = g.no_grad_op("one_hot", &[sel], vec![t, k, e_n], DType::I64, Bytes::ZERO)?;
    let hit = g.no_grad_op("sum", &[mask], vec![e_n], DType::I64, Bytes::ZERO)?;
    let hit = g.no_grad_op("gt", &[hit], vec![e_n], DType::Bool, Bytes::ZERO)?;
    let hit = g.no_grad_op("nonzero", &[hit], vec![e_n, 1], DType::I64, Bytes::ZERO)?;
    let names = moe.names();
    for e in 0..e_n {
        let n = moe.balanced_tokens(t, e);
        if n == 0 {
            continue;
        }
        let slots = g.no_grad_op("nonzero", &[mask], vec![n, 2], DType::I64, Bytes::ZERO)?;
        let tok = g.alias(slots, vec![n], false);
        let cur = index_rows(g, hv, tok, vec![n, h])?;
        let y = g.scoped(format!("experts.{e}"), |g| {
            gated_mlp(g, cur, names, h, moe.expert_intermediate, act, cpu)
        })?;
        let w = index_rows(g, rw, slots, vec![n, 1])?;
        let y = g.mul_bc(y, w)?;
        let y = g.cast(y, dt)?;
        // `final_hidden_states.index_add_(0, top_x, y)`: in place; the source's gradient is
        // `grad.index_select(0, top_x)` (a new tensor), the destination's passes through.
        let rg = g.requires_grad(&[fin, y]);
        let out = g.alias(fin, vec![t, h], rg);
        let mut op = g.op("index_add", "");
        op.flops = (n * h) as f64;
        op.inputs = vec![fin, tok, y];
        op.outputs = vec![out];
        op.saved = vec![tok];
        if g.t(fin).requires_grad {
            op.grads.push((fin, GradFlow::Alias));
        }
        if g.t(y).requires_grad {
            op.grads.push((y, GradFlow::Alloc));
        }
        g.record(op);
        fin = out;
    }
    g.hold(&[mask, hit]);
    if let Some(i) = moe.shared_intermediate {
        // `shared_expert(x)` scaled by `sigmoid(shared_expert_gate(x))`, added out of place.
        let y = g.scoped("shared_expert", |g| {
            gated_mlp(g, hv, ["gate_proj", "up_proj", "down_proj"], h, i, act, cpu)
        })?;
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
        fin = g.add(fin, y, false)?;
    }
    let out = g.view(fin, vec![b, seq, h])?;
    Ok(MoeOut {
        out,
        router_logits: logits,
    })
}

/// `load_balancing_loss_func(router_logits, E, k)` without an attention mask, then
/// `loss += router_aux_loss_coef · aux` (`*ForCausalLM.forward`): the layers' logits concatenated,
/// softmax (fp32 under autocast), top-k indices, `one_hot(...)` and its float copy (the token
/// fractions need no gradient), the mean probability per expert and the scalar product.
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
    let rows: u64 = logits.iter().map(|&l| g.shape(l)[0]).sum();
    let cat = g.cat(logits, 0)?;
    let probs = g.softmax(cat)?;
    let sel = g.no_grad_op("topk", &[probs], vec![rows, k], DType::I64, Bytes::ZERO)?;
    let oh = g.no_grad_op(
        "one_hot",
        &[sel],
        vec![rows, k, e_n],
        DType::I64,
        Bytes::ZERO,
    )?;
    let ohf = g.no_grad_op(
        "to_copy",
        &[oh],
        vec![rows, k, e_n],
        DType::F32,
        Bytes::ZERO,
    )?;
    let frac = g.no_grad_op("mean", &[ohf], vec![k, e_n], DType::F32, Bytes::ZERO)?;
    let rg = g.t(probs).requires_grad;
    let mean = g.alloc(vec![1, e_n], DType::F32, StorageKind::Activation, rg)?;
    g.record_unary("mean", probs, mean, vec![], (rows * e_n) as f64);
    let prod = g.mul_bc(frac, mean)?;
    let sum = g.alloc(vec![], DType::F32, StorageKind::Activation, rg)?;
    g.record_unary("sum", prod, sum, vec![], (k * e_n) as f64);
    let scaled = g.pointwise(
        "mul",
        sum,
        DType::F32,
        Pw {
            flops: 1.0,
            ..Pw::default()
        },
    )?;
    let total = g.add(loss, scaled, false)?;
    // The training loop keeps the total, not the language-model loss alone.
    for kept in g.kept.iter_mut().filter(|t| **t == loss) {
        *kept = total;
    }
    Ok(total)
}
