//! DeepSeek-V3's multi-head latent attention, op by op as transformers 5.24.0 runs it
//! (`models/deepseek_v3/modeling_deepseek_v3.py`, `DeepseekV3Attention`): the queries through
//! a low-rank path (`q_a_proj`, `q_a_layernorm`, `q_b_proj`; or one `q_proj` without
//! `q_lora_rank`), the keys and values through one compressed latent per token
//! (`kv_a_proj_with_mqa` → `kv_lora_rank` latent + one `qk_rope_head_dim` rotary key shared by
//! all heads, `kv_a_layernorm` on the latent), rotary positions on the `qk_rope_head_dim` parts
//! only, and `expand_kv`: `kv_b_proj` up-projects the latent to every head's `qk_nope_head_dim`
//! key part and `v_head_dim` value, and the key is assembled in a new tensor. Queries and keys
//! are `qk_nope_head_dim + qk_rope_head_dim` wide, values `v_head_dim`.
//!
//! **The KV cache.** transformers 5.24's `DynamicCache` stores what `cache.update` receives:
//! the *compressed* latent (`[B, 1, T, kv_lora_rank]`, after `kv_a_layernorm`) and the rotated
//! shared key (`[B, 1, T, qk_rope_head_dim]`) per layer, and every forward re-expands the whole
//! cache through `kv_b_proj` ("Cache read / write is performed while latent KV is still
//! compressed"). That is [`MlaCache::Latent`], the default, and also what vLLM and SGLang keep
//! for MLA models. Engines that cache the up-projected per-head keys and values instead (older
//! transformers releases, and DeepSeek's reference `attn_impl = "naive"`) hold
//! `heads · (qk_nope + qk_rope + v_head_dim)` per token and layer: [`MlaCache::Expanded`].

use crate::estimator::config::AttnImpl;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::ops::EagerOpts;
use crate::estimator::tune::{Sparsity, Target, TuneCtx};

use super::gpt_oss::rotate_halves;

/// The MLA part of a config (`DeepseekV3Config`).
#[derive(Clone, Debug, PartialEq)]
pub struct Mla {
    /// `q_lora_rank`: the queries' low-rank width; `None` for one `q_proj`.
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
    /// `rope_interleave`: rotary pairs `(x0, x1), (x2, x3), …` (strided slices) rather than
    /// the two halves.
    pub rope_interleave: bool,
    /// `attention_bias` on `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj`.
    pub bias: bool,
    /// What a serving engine caches per token and layer.
    pub cache: MlaCache,
}

/// What the KV cache of an MLA model holds per token and layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MlaCache {
    /// The compressed latent and the shared rotary key, `kv_lora_rank + qk_rope_head_dim`
    /// values: transformers 5.24's `DynamicCache`, vLLM, SGLang.
    #[default]
    Latent,
    /// The up-projected keys and values of every head, `heads · (qk_nope_head_dim +
    /// qk_rope_head_dim + v_head_dim)` values.
    Expanded,
}

impl Mla {
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Parameters of one attention block (`DeepseekV3Attention.__init__`).
    pub fn params(&self, hidden: u64, heads: u64) -> u64 {
        let b = |n: u64| if self.bias { n } else { 0 };
        let qk = self.qk_head_dim();
        let q = match self.q_lora_rank {
            Some(r) => hidden * r + b(r) + r + r * heads * qk,
            None => hidden * heads * qk,
        };
        let kv_a = self.kv_lora_rank + self.qk_rope_head_dim;
        let kv = hidden * kv_a
            + b(kv_a)
            + self.kv_lora_rank
            + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim);
        let o = heads * self.v_head_dim * hidden + b(hidden);
        q + kv + o
    }

    /// The per-layer cache tensors' shapes `[B, heads, T, width]` of `cache` for `tokens`.
    pub fn cache_shapes(
        &self,
        cache: MlaCache,
        batch: u64,
        heads: u64,
        tokens: u64,
    ) -> [Vec<u64>; 2] {
        match cache {
            MlaCache::Latent => [
                vec![batch, 1, tokens, self.kv_lora_rank],
                vec![batch, 1, tokens, self.qk_rope_head_dim],
            ],
            MlaCache::Expanded => [
                vec![batch, heads, tokens, self.qk_head_dim()],
                vec![batch, heads, tokens, self.v_head_dim],
            ],
        }
    }
}

/// How the attention of [`attention`] gets its keys and values.
#[derive(Clone, Copy)]
pub(crate) enum MlaKv {
    /// Training: this forward's, under the causal mask, with the chosen kernel.
    Masked {
        mask: Option<TensorId>,
        attn: AttnImpl,
        dropout: f64,
        cpu: bool,
    },
    /// Generation: written into the layer's two cache tensors (holding `past` tokens before),
    /// attended with the kernel the device (`cpu`) picks.
    Cached {
        first: TensorId,
        second: TensorId,
        past: u64,
        cpu: bool,
    },
}

/// `DeepseekV3Attention.forward` on the input-norm output `x` (`[B, S, H]`) with `nh` heads inside the `self_attn` scope, with the rotary tables `cos`/`sin` (`[1, 1, S, qk_rope_head_dim]`).
/// Returns the `o_proj` output; in generation also holds the module's references.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    g: &mut Graph,
    mla: &Mla,
    nh: u64,
    x: TensorId,
    cos: TensorId,
    sin: TensorId,
    kv: MlaKv,
    tune: &TuneCtx,
) -> Result<TensorId, EstimateError> {
    let s = g.shape(x);
    let (b, sq, hd) = (s[0], s[1], s[2]);
    let (nope, rope, vd, r) = (
        mla.qk_nope_head_dim,
        mla.qk_rope_head_dim,
        mla.v_head_dim,
        mla.kv_lora_rank,
    );
    let qk = mla.qk_head_dim();
    let cpu = match kv {
        MlaKv::Masked { cpu, .. } | MlaKv::Cached { cpu, .. } => cpu,
    };
    // One tensor-parallel rank's heads (the caller checked that the degree divides them).
    let nhl = nh / g.tp_size();
    // Every projection is an `nn.Linear` (`DeepseekV3Attention.__init__`), which peft wraps
    // when a target names it.
    let q = match mla.q_lora_rank {
        Some(qr) => {
            let qa = down_proj(g, "q_a_proj", x, hd, qr, mla.bias, Target::QA, tune, cpu)?;
            let qa = g.rms_norm("q_a_layernorm", qa)?;
            g.block_linear("q_b_proj", qa, qr, nh * qk, false, Target::QB, tune, cpu)?
        }
        None => g.block_linear("q_proj", x, hd, nh * qk, false, Target::Q, tune, cpu)?,
    };
    // `view(B, S, -1, qk).transpose(1, 2)` and `split([nope, rope])`: views.
    let q = g.view(q, vec![b, nhl, sq, qk])?;
    let qp = g.split(q, vec![vec![b, nhl, sq, nope], vec![b, nhl, sq, rope]])?;
    let ckv = down_proj(
        g,
        "kv_a_proj_with_mqa",
        x,
        hd,
        r + rope,
        mla.bias,
        Target::KvA,
        tune,
        cpu,
    )?;
    let parts = g.split(ckv, vec![vec![b, sq, r], vec![b, sq, rope]])?;
    let latent = g.rms_norm("kv_a_layernorm", parts[0])?;
    let latent = g.view(latent, vec![b, 1, sq, r])?;
    let k_rot = g.view(parts[1], vec![b, 1, sq, rope])?;
    let (q_rot, k_rot) = if mla.rope_interleave {
        // `cos[..., : cos.shape[-1] // 2]`: views of the first half of the tables.
        let half = vec![1, 1, sq, rope / 2];
        let c = g.slice_view(cos, half.clone())?;
        let sn = g.slice_view(sin, half)?;
        (
            rotate_halves(g, qp[1], c, sn, true)?,
            rotate_halves(g, k_rot, c, sn, true)?,
        )
    } else {
        (g.rotary(qp[1], cos, sin)?, g.rotary(k_rot, cos, sin)?)
    };
    let (latent_all, k_rot_all, mask_attn) = match kv {
        MlaKv::Cached {
            first,
            second,
            past,
            ..
        } if mla.cache == MlaCache::Latent => (
            g.kv_update(latent, first, past)?,
            g.kv_update(k_rot, second, past)?,
            None,
        ),
        MlaKv::Cached { .. } => (latent, k_rot, None),
        MlaKv::Masked {
            mask,
            attn,
            dropout,
            cpu,
        } => (latent, k_rot, Some((mask, attn, dropout, cpu))),
    };
    let query = g.cat(&[qp[0], q_rot], 3)?;
    let (key, value) = expand_kv(g, mla, nh, latent_all, k_rot_all, tune, cpu)?;
    let o = match (mask_attn, kv) {
        (Some((mask, attn, dropout, cpu)), _) => match attn {
            AttnImpl::Sdpa => g.sdpa(query, key, value, mask, dropout, cpu)?,
            AttnImpl::Eager => g.eager_attention(
                query,
                key,
                value,
                mask,
                EagerOpts {
                    dropout,
                    fp32_softmax: true,
                    cpu,
                    softcap: false,
                },
            )?,
        },
        (
            None,
            MlaKv::Cached {
                first,
                second,
                past,
                cpu,
            },
        ) if mla.cache == MlaCache::Expanded => {
            // The cache's `torch.cat` outputs are `[B, H, T, D]`-contiguous.
            let k_all = g.kv_update(key, first, past)?;
            let v_all = g.kv_update(value, second, past)?;
            g.sdpa_infer_on(query, k_all, v_all, cpu, false)?
        }
        (None, kv) => {
            // The values are a slice of `kv_b_proj`'s output viewed `[B, T, H, ·]` and
            // transposed (an fp32 copy keeps that order): `[B, H]` folds into one batch
            // dimension only when one of `B`, `H` and `T` is 1.
            let s = g.shape(value);
            let copy_v = s[0] > 1 && s[1] > 1 && s[2] > 1;
            let cpu = matches!(kv, MlaKv::Cached { cpu: true, .. });
            g.sdpa_infer_on(query, key, value, cpu, copy_v)?
        }
    };
    let o = g.block_linear("o_proj", o, nh * vd, hd, mla.bias, Target::O, tune, cpu)?;
    // The forward's locals (the input, the query and latent projections, the rotated query
    // part, `kv_nope` and `k_rot` — this forward's latent and rotated key, or in generation
    // the cache's tensors `cache.update` returned in their place — the assembled query, keys
    // and values) live until it returns: in training this matters where the attention saves
    // none of them (SDPA's math path on the CPU, which MLA's unequal head dims select).
    g.hold(&[x, q, ckv, q_rot, latent_all, k_rot_all, query, key, value]);
    Ok(o)
}

/// A down projection of the latent attention (`q_a_proj`, `kv_a_proj_with_mqa`): under tensor
/// parallelism replicated on every rank, as Megatron-Core builds `linear_q_down_proj` and
/// `linear_kv_down_proj` (`parallel_mode='duplicated'` in `MLASelfAttention.__init__`,
/// `megatron/core/transformer/multi_latent_attention.py`), so the up projections
/// (`q_b_proj`, `kv_b_proj`, column-parallel by heads) all-reduce their inputs' gradients (the
/// latents'), and `o_proj` is row-parallel; [`Graph::block_linear`] on one GPU.
#[allow(clippy::too_many_arguments)]
fn down_proj(
    g: &mut Graph,
    leaf: &str,
    x: TensorId,
    fin: u64,
    fout: u64,
    bias: bool,
    target: Target,
    tune: &TuneCtx,
    cpu: bool,
) -> Result<TensorId, EstimateError> {
    if g.tp_size() == 1 {
        return g.block_linear(leaf, x, fin, fout, bias, target, tune, cpu);
    }
    let dense = tune.quant.keeps_linears_dense() && tune.sparsity == Sparsity::None;
    if !dense || tune.lora.as_ref().is_some_and(|l| l.wraps(target)) {
        return Err(EstimateError::Unsupported(
            "LoRA adapters and quantized weights are not modelled with tensor parallelism: use tp = 1".into(),
        ));
    }
    g.linear(leaf, x, fin, fout, bias)
}

/// `expand_kv`: `kv_b_proj(latent)` (`[B, 1, T, heads·(nope + v)]`) viewed per head and split
/// into the key part and the values (views), the rotary key expanded to every head (a view,
/// its gradient summed back), and the keys assembled in `new_empty` by two `copy_` into its slices. Backward of those
/// in-place copies (`CopySlices`) clones the keys' gradient and the slice it hands on: a
/// key-sized temporary while it runs.
fn expand_kv(
    g: &mut Graph,
    mla: &Mla,
    nh: u64,
    latent: TensorId,
    k_rot: TensorId,
    tune: &TuneCtx,
    cpu: bool,
) -> Result<(TensorId, TensorId), EstimateError> {
    let s = g.shape(latent);
    let (b, t) = (s[0], s[2]);
    let nhl = nh / g.tp_size();
    let (nope, rope, vd, r) = (
        mla.qk_nope_head_dim,
        mla.qk_rope_head_dim,
        mla.v_head_dim,
        mla.kv_lora_rank,
    );
    let kv = g.block_linear(
        "kv_b_proj",
        latent,
        r,
        nh * (nope + vd),
        false,
        Target::KvB,
        tune,
        cpu,
    )?;
    let kv = g.view(kv, vec![b, nhl, t, nope + vd])?;
    let parts = g.split(kv, vec![vec![b, nhl, t, nope], vec![b, nhl, t, vd]])?;
    let rg = g.requires_grad(&[parts[0], k_rot]);
    let key = g.alloc(
        vec![b, nhl, t, nope + rope],
        g.dtype(parts[0]),
        StorageKind::Activation,
        rg,
    )?;
    let mut op = g.op("copy_slices", "");
    op.inputs = vec![parts[0], k_rot];
    op.outputs = vec![key];
    for x in [parts[0], k_rot] {
        if g.t(x).requires_grad {
            op.grads.push((x, GradFlow::Alloc));
        }
    }
    if rg {
        op.bwd_scratch = g.bytes(key);
    }
    g.record(op);
    Ok((key, parts[1]))
}
