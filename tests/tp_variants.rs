//! Tensor parallelism for the LLaMA-family variants whose layers are not the plain column/row
//! split: Phi-3's fused projections (Megatron-Core's fused `linear_qkv` and gated `linear_fc1`),
//! OLMo 2's query/key norms over the whole projection (transformers' `colwise_gather_output`),
//! the mixtures of experts (each expert split over tp, the router replicated, the experts'
//! output all-reduced), alone and with expert parallelism, and DeepSeek-V3's latent attention
//! (Megatron-Core's `MLASelfAttention`); what stays refused and why.

mod common;

use serde_json::json;
use vram_planner::estimator::config::Precision;
use vram_planner::estimator::optimizer::OptimizerKind;
use vram_planner::estimator::parallel::comm::{Collective, Traffic};
use vram_planner::estimator::parallel::{Parallel, ParallelEstimate};
use vram_planner::plan::{estimate_parallel, Plan};

const B: u64 = 2;
const S: u64 = 64;
const H: u64 = 64;
const V: u64 = 256;
const L: u64 = 2;
const D: u64 = 16;
/// fp32 weights and activations (the plan's default dtype).
const F32: u64 = 4;

/// Two layers at a small width, `extra` on top.
fn small(model_type: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut cfg = json!({
        "model_type": model_type, "hidden_size": H, "intermediate_size": 128,
        "num_hidden_layers": L, "num_attention_heads": 4, "num_key_value_heads": 4,
        "vocab_size": V, "head_dim": D, "tie_word_embeddings": false
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

fn plan(cfg: serde_json::Value, par: Parallel) -> Plan {
    let mut p = Plan::new("custom");
    p.hf_config = Some(cfg);
    p.batch = B;
    p.seq = Some(S);
    p.opt = OptimizerKind::Adam;
    p.gpu = Some("h100-80".into());
    p.parallel = Some(par);
    p
}

fn layout(dp: u64, tp: u64, ep: u64) -> Parallel {
    Parallel {
        gpus_per_node: Some(dp * tp),
        dp: Some(dp),
        tp,
        ep,
        zero: Some(0),
        ..Default::default()
    }
}

fn run(cfg: serde_json::Value, dp: u64, tp: u64, ep: u64) -> ParallelEstimate {
    estimate_parallel(&plan(cfg, layout(dp, tp, ep))).unwrap_or_else(|e| panic!("{e}"))
}

fn refusal(cfg: serde_json::Value, par: Parallel) -> String {
    match estimate_parallel(&plan(cfg, par)) {
        Ok(_) => panic!("must be refused"),
        Err(e) => e.to_string(),
    }
}

/// Calls per step of the tensor-parallel collective `c` of `bytes` (forward or backward).
fn tp_calls(e: &ParallelEstimate, c: Collective, backward: bool, bytes: u64) -> u64 {
    let dir = if backward { "backward" } else { "forward" };
    e.communication
        .iter()
        .filter(|i| {
            i.scheme == Traffic::Tp
                && i.collective == Some(c)
                && i.what.contains(dir)
                && i.buffer_bytes == bytes
        })
        .map(|i| i.calls)
        .sum()
}

/// `[B, S, H]` in fp32: the tensor every row-parallel all-reduce and every `f` moves.
const BSH: u64 = B * S * H * F32;

/// Bytes of one fp32 weight of `n` elements as the caching allocator holds it: rounded up to
/// its 512-byte blocks (`kMinBlockSize`, `c10/cuda/CUDACachingAllocator.cpp`).
fn w(n: u64) -> u64 {
    (n * F32).div_ceil(512) * 512
}

/// The embedding and the LM head split by vocabulary, the final norm replicated.
fn outside_layers(t: u64) -> u64 {
    2 * w(V * H / t) + w(H)
}

/// Phi-3 at tp = 2: the fused `qkv_proj` holds `(heads + 2·kv_heads)/t` heads' rows, the fused
/// `gate_up_proj` `2·I/t` rows, `o_proj` and `down_proj` their `1/t` columns; the norms are
/// replicated. Every byte of the rank's weights, exactly.
#[test]
fn phi3_fused_projections_split_by_heads_and_columns() {
    let i = 128;
    let per_layer = |t: u64| {
        w((4 + 2 * 4) * D * H / t) + w(H * 4 * D / t) + w(2 * i * H / t) + w(i * H / t) + 2 * w(H)
    };
    let total = |t: u64| L * per_layer(t) + outside_layers(t);
    for t in [1, 2, 4] {
        let e = run(small("phi3", json!({})), 1, t, 1);
        assert_eq!(e.per_gpu.params_bytes, total(t), "tp = {t}");
    }
    // Megatron's `f` and `g`: per layer one all-reduce of the attention's and the MLP's input
    // gradient in backward, one of their outputs in forward; the embedding's output and the LM
    // head's input gradient once more.
    let e = run(small("phi3", json!({})), 1, 2, 1);
    assert_eq!(tp_calls(&e, Collective::AllReduce, false, BSH), 2 * L + 1);
    assert_eq!(tp_calls(&e, Collective::AllReduce, true, BSH), 2 * L + 1);
    // The fused layer's activations shrink as the plain LLaMA layer's do: at every degree they
    // are the same model's unfused ones plus Phi-3's rotated query and key copies (the `cat`
    // of `apply_rotary_pos_emb`, `[B, heads/t, S, d]` each), to the byte.
    for t in [1, 2, 4] {
        let act = |mt: &str| run(small(mt, json!({})), 1, t, 1).per_gpu.activations_bytes;
        assert_eq!(act("phi3") - act("llama"), L * 2 * BSH / t, "tp = {t}");
    }
}

#[test]
fn phi3_refuses_what_its_fused_weights_cannot_split() {
    let e = refusal(
        small("phi3", json!({"num_key_value_heads": 2})),
        layout(1, 4, 1),
    );
    assert!(
        e.contains("does not divide the 2 key/value heads") && e.contains("1, 2"),
        "{e}"
    );
    let e = refusal(
        small("phi3", json!({"intermediate_size": 130})),
        layout(1, 4, 1),
    );
    assert!(e.contains("intermediate size 130"), "{e}");
    let mut p = plan(small("phi3", json!({})), layout(1, 2, 1));
    p.lora = Some(vram_planner::estimator::tune::LoraConfig {
        rank: 8,
        alpha: 16.0,
        targets: vec!["qkv".into()],
        dropout: 0.0,
    });
    p.mode = vram_planner::estimator::tune::Mode::Finetune;
    let e = estimate_parallel(&p).unwrap_err().to_string();
    assert!(
        e.contains("LoRA") && e.contains("tensor parallelism"),
        "{e}"
    );
}

/// OLMo 2 under transformers' plan: q, k, v column-split then gathered (three forward
/// all-gathers of `[B, S, H]` per layer), the norms over the whole projection replicated,
/// `o_proj` fed its columns of the replicated attention output (its backward all-gathers that
/// gradient).
#[test]
fn olmo2_gathers_its_projections_for_the_full_norms() {
    let i = 128;
    // q, k, v, o split; q_norm and k_norm over the whole `[heads·d]` replicated; gate, up,
    // down split; the two norms after the sublayers replicated.
    let per_layer = |t: u64| 4 * w(H * H / t) + 2 * w(H) + 3 * w(i * H / t) + 2 * w(H);
    for t in [1, 2] {
        let e = run(small("olmo2", json!({})), 1, t, 1);
        assert_eq!(
            e.per_gpu.params_bytes,
            L * per_layer(t) + outside_layers(t),
            "tp = {t}"
        );
    }
    let e = run(small("olmo2", json!({})), 1, 2, 1);
    assert_eq!(tp_calls(&e, Collective::AllGather, false, BSH), 3 * L);
    assert_eq!(tp_calls(&e, Collective::AllGather, true, BSH), L);
    assert_eq!(tp_calls(&e, Collective::AllReduce, false, BSH), 2 * L + 1);
    // The attention runs on every head on every rank: what OLMo 2 holds beyond a LLaMA layer
    // of the same widths (whose attention is split by heads) grows with the degree.
    let extra = |t| {
        let act = |mt: &str| run(small(mt, json!({})), 1, t, 1).per_gpu.activations_bytes;
        act("olmo2") - act("llama")
    };
    let (one, two, four) = (extra(1), extra(2), extra(4));
    assert!(one < two && two < four, "{one} {two} {four}");
}

const EXPERTS: u64 = 8;
const TOP_K: u64 = 2;
const EXPERT_I: u64 = 512;

fn qwen3_moe() -> serde_json::Value {
    let mut c = common::small_qwen3_moe(EXPERT_I);
    c["tie_word_embeddings"] = json!(false);
    c
}

/// Qwen3-MoE's layer on one rank: attention split by heads (4 heads, 2 key/value heads of 16),
/// the per-head q/k norms and both layer norms replicated, the router `[E, H]` replicated,
/// `E/ep` experts each at `I/t`.
fn qwen3_moe_params(t: u64, ep: u64) -> u64 {
    // Past 2 ranks a key/value head is replicated: each rank holds one (Megatron-Core's
    // `SelfAttention` with `num_query_groups < world_size`).
    let kv_heads = (2 / t).max(1);
    let attn = w(4 * D * H / t) + 2 * w(kv_heads * D * H) + w(H * 4 * D / t) + 2 * w(D) + 2 * w(H);
    let local = EXPERTS / ep;
    let experts = w(local * 2 * EXPERT_I / t * H) + w(local * H * EXPERT_I / t);
    L * (attn + w(EXPERTS * H) + experts) + outside_layers(t)
}

#[test]
fn experts_split_over_tp_and_ep_to_the_byte() {
    for (dp, t, ep) in [(1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 2, 2), (4, 2, 4)] {
        let e = run(qwen3_moe(), dp, t, ep);
        assert_eq!(
            e.per_gpu.params_bytes,
            qwen3_moe_params(t, ep),
            "dp {dp} tp {t} ep {ep}"
        );
    }
}

/// The block costs what a dense MLP does under tensor parallelism: one forward all-reduce of
/// the experts' summed `[T, H]` output and one backward all-reduce of its input gradient per
/// layer; Qwen2-MoE's shared expert adds its own `down_proj` all-reduce.
#[test]
fn the_experts_output_is_all_reduced_once_per_layer() {
    let e = run(qwen3_moe(), 1, 2, 1);
    assert_eq!(tp_calls(&e, Collective::AllReduce, false, BSH), 2 * L + 1);
    assert_eq!(tp_calls(&e, Collective::AllReduce, true, BSH), 2 * L + 1);
    let qwen2 = small(
        "qwen2_moe",
        json!({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
               "shared_expert_intermediate_size": 48}),
    );
    let e = run(qwen2, 1, 2, 1);
    assert_eq!(tp_calls(&e, Collective::AllReduce, false, BSH), 3 * L + 1);
    assert_eq!(tp_calls(&e, Collective::AllReduce, true, BSH), 2 * L + 1);
}

/// With ep as well, a rank exchanges the tokens it holds (all `B·S` of them, replicated over the
/// tensor-parallel ranks) with the ranks of its expert-parallel group: the all-to-alls are
/// those of ep alone, `T·k` rows of `H` each way.
#[test]
fn the_all_to_alls_carry_the_tokens_a_rank_holds() {
    let e = run(qwen3_moe(), 2, 2, 2);
    let rows = B * S * TOP_K * H * F32;
    let a2a: Vec<_> = e
        .communication
        .iter()
        .filter(|c| c.scheme == Traffic::Ep)
        .collect();
    assert_eq!(a2a.len(), 2, "{a2a:#?}");
    for c in a2a {
        assert_eq!(c.collective, Some(Collective::AllToAll));
        assert_eq!(c.group, 2);
        assert_eq!(c.buffer_bytes, rows);
        assert_eq!(c.calls, 2 * L);
    }
    assert_eq!(tp_calls(&e, Collective::AllReduce, false, BSH), 2 * L + 1);
}

fn sp(dp: u64, tp: u64) -> Parallel {
    Parallel {
        sequence_parallel: true,
        ..layout(dp, tp, 1)
    }
}

/// Calls per step of the tensor-parallel collective `c` of `bytes` in forward.
fn fwd(e: &ParallelEstimate, c: Collective, bytes: u64) -> u64 {
    tp_calls(e, c, false, bytes)
}

/// Under sequence parallelism the block is Megatron-Core's all-gather dispatcher: the rank routes
/// its `T/t` tokens, gathers every rank's tokens (`[B, S, H]`) with their routing weights
/// (`[T, k]` fp32) and choices (`[T, k]` int64), runs its expert shards on all `T`, and
/// reduce-scatters the output back; no all-reduce is left. Per layer: one gather and one
/// reduce-scatter for the attention, one each for the experts, and Qwen2-MoE's shared expert
/// one more of each through its own column/row-parallel layers.
#[test]
fn under_sequence_parallelism_the_tokens_are_gathered_before_the_experts() {
    let e = estimate_parallel(&plan(qwen3_moe(), sp(1, 2))).unwrap();
    let tk = B * S * TOP_K;
    assert_eq!(
        fwd(&e, Collective::AllGather, BSH),
        2 * L + 1,
        "+ the LM head's"
    );
    assert_eq!(
        fwd(&e, Collective::ReduceScatter, BSH),
        2 * L + 1,
        "+ the embedding's"
    );
    assert_eq!(fwd(&e, Collective::AllGather, tk * F32), L);
    assert_eq!(fwd(&e, Collective::AllGather, tk * 8), L);
    assert_eq!(fwd(&e, Collective::AllReduce, BSH), 0);
    // The choices carry no gradient: only the tokens' and the weights' gathers reduce-scatter
    // back.
    assert_eq!(tp_calls(&e, Collective::ReduceScatter, true, tk * F32), L);
    assert_eq!(tp_calls(&e, Collective::ReduceScatter, true, tk * 8), 0);
    // The same weights as without sequence parallelism, fewer activations (the norms,
    // residuals and router inputs are sequence shards; the experts' are not).
    let plain = run(qwen3_moe(), 1, 2, 1);
    assert_eq!(e.per_gpu.params_bytes, plain.per_gpu.params_bytes);
    let acts = |par: Parallel| {
        let mut p = plan(qwen3_moe(), par);
        // A step whose peak is in backward, not in Adam's update.
        p.opt = OptimizerKind::Sgd;
        p.batch = 32;
        estimate_parallel(&p).unwrap().per_gpu.activations_bytes
    };
    let (with, without) = (acts(sp(1, 2)), acts(layout(1, 2, 1)));
    assert!(with < without, "{with} vs {without}");
    let qwen2 = small(
        "qwen2_moe",
        json!({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
               "shared_expert_intermediate_size": 48}),
    );
    let e = estimate_parallel(&plan(qwen2, sp(1, 2))).unwrap();
    assert_eq!(fwd(&e, Collective::AllGather, BSH), 3 * L + 1);
    assert_eq!(fwd(&e, Collective::ReduceScatter, BSH), 3 * L + 1);
}

fn small_deepseek() -> serde_json::Value {
    json!({
        "model_type": "deepseek_v3", "hidden_size": H, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_hidden_layers": L, "num_attention_heads": 4,
        "num_key_value_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 12, "n_routed_experts": 8, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1,
        "vocab_size": V, "tie_word_embeddings": false
    })
}

/// DeepSeek-V3 at tp = 2 as Megatron-Core shards it: the latent down projections (`q_a_proj`,
/// `kv_a_proj_with_mqa`) and their norms replicated, the up projections (`q_b_proj`, `kv_b_proj`)
/// column-parallel by heads, `o_proj` row-parallel; the dense first layer, the routed experts
/// and the shared expert split over tp. Every byte of the rank's weights, exactly; the
/// attention's input gradient is all-reduced at the latents (`[B, S, q_lora_rank]`,
/// `[B, S, kv_lora_rank]`), not at the hidden states.
#[test]
fn deepseek_latent_attention_splits_its_up_projections_by_heads() {
    let (qr, r, qk, vd, i, mi) = (24, 16, 16 + 8, 12, 128, 32);
    let attn = |t: u64| {
        w(qr * H)
            + w(qr)
            + w(4 * qk / t * qr)
            + w((r + 8) * H)
            + w(r)
            + w(4 * (16 + vd) / t * r)
            + w(H * 4 * vd / t)
            + 2 * w(H)
    };
    let dense = |t: u64| 3 * w(i * H / t);
    let sparse = |t: u64| w(8 * H) + w(8 * 2 * mi / t * H) + w(8 * H * mi / t) + 3 * w(mi * H / t);
    for t in [1, 2] {
        let e = run(small_deepseek(), 1, t, 1);
        let total = 2 * attn(t) + dense(t) + sparse(t) + outside_layers(t);
        assert_eq!(e.per_gpu.params_bytes, total, "tp = {t}");
    }
    let e = run(small_deepseek(), 1, 2, 1);
    // o_proj per layer, the dense down_proj, the routed experts and the shared expert, the
    // embedding.
    assert_eq!(
        tp_calls(&e, Collective::AllReduce, false, BSH),
        2 + 1 + 2 + 1
    );
    // The MLP inputs (dense and sparse) and the LM head's.
    assert_eq!(tp_calls(&e, Collective::AllReduce, true, BSH), 3);
    assert_eq!(
        tp_calls(&e, Collective::AllReduce, true, B * S * qr * F32),
        L
    );
    assert_eq!(
        tp_calls(&e, Collective::AllReduce, true, B * S * r * F32),
        L
    );
    // With expert parallelism too: 4 experts a rank, each split over tp.
    let e = run(small_deepseek(), 2, 2, 2);
    let sparse_ep = w(8 * H) + w(4 * 2 * mi / 2 * H) + w(4 * H * mi / 2) + 3 * w(mi * H / 2);
    assert_eq!(
        e.per_gpu.params_bytes,
        2 * attn(2) + dense(2) + sparse_ep + outside_layers(2)
    );
}

#[test]
fn mixtures_refuse_what_is_not_split() {
    let e = refusal(common::small_qwen3_moe(514), layout(1, 4, 1));
    assert!(e.contains("expert intermediate size (514)"), "{e}");
    let e = refusal(common::small_qwen3_moe(512), layout(2, 2, 3));
    assert!(e.contains("ep"), "{e}");
    let mut sp = layout(2, 2, 2);
    sp.sequence_parallel = true;
    let e = refusal(qwen3_moe(), sp);
    assert!(
        e.contains("sequence parallelism with expert parallelism is not modelled"),
        "{e}"
    );
    let mut sp = layout(1, 2, 1);
    sp.sequence_parallel = true;
    let e = refusal(small_deepseek(), sp);
    assert!(e.contains("latent attention"), "{e}");
    let gpt_oss = json!({"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2,
        "sliding_window": 32});
    let e = refusal(gpt_oss, layout(1, 2, 1));
    assert!(e.contains("tensor parallelism is not modelled"), "{e}");
}

/// The search now tries tensor-parallel layouts of a mixture: the best layout of a model too
/// big for one GPU's activations may use them, and every layout it returns estimates again.
#[test]
fn the_search_considers_tensor_parallel_mixtures() {
    use vram_planner::plan::search::{search, SearchOptions};
    let mut p = plan(qwen3_moe(), Parallel::default());
    p.parallel = None;
    p.dtype = Precision::Bf16;
    let opts = SearchOptions {
        gpus_per_node: 2,
        max_gpus: 2,
        top: 50,
        ..Default::default()
    };
    let found = search(&p, &opts).unwrap();
    assert!(
        found.iter().any(|c| c.tp == 2),
        "{:?}",
        found.iter().map(|c| (c.dp, c.tp, c.ep)).collect::<Vec<_>>()
    );
    for c in found.iter().filter(|c| c.tp == 2) {
        let again = estimate_parallel(&c.plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.fits, Some(true));
    }
}
