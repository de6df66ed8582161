//! DeepSeek-V3 (multi-head latent attention, the grouped sigmoid router, shared experts, dense
//! first layers) and gpt-oss (attention sinks, alternating sliding-window layers, the clamped
//! SwiGLU experts with biases): their config classes' defaults, the parameter counts
//! transformers 5.24 gives on the meta device, the layer each modeling file runs, serving with
//! the latent or the expanded MLA cache, and the measured steps of
//! `data/mla-sinks-steps.jsonl`.

mod common;

use serde_json::json;
use vram_planner::estimator::config::Precision;
use vram_planner::estimator::error::EstimateError;
use vram_planner::estimator::graph::Graph;
use vram_planner::estimator::tune::Mode;
use vram_planner::plan::{build_graph, estimate, Plan};
use vram_planner::presets::hf::parse;
use vram_planner::presets::mla::MlaCache;
use vram_planner::presets::models;
use vram_planner::presets::moe::MoeKind;

fn plan(cfg: serde_json::Value) -> Plan {
    let mut p = Plan::new("custom");
    p.batch = 1;
    p.seq = Some(16);
    p.hf_config = Some(cfg);
    p
}

fn graph(cfg: serde_json::Value) -> Graph {
    build_graph(&plan(cfg)).unwrap()
}

fn names_of(g: &Graph, kind: &str) -> Vec<String> {
    g.ops
        .iter()
        .filter(|o| o.kind == kind)
        .map(|o| o.name.clone())
        .collect()
}

/// Two layers, the first dense, 8 routed experts in 4 groups and one shared expert.
fn small_deepseek(extra: serde_json::Value) -> serde_json::Value {
    let mut cfg = json!({
        "model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 12, "n_routed_experts": 8, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1,
        "vocab_size": 256
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

fn small_gpt_oss(extra: serde_json::Value) -> serde_json::Value {
    let mut cfg = json!({
        "model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8,
        "vocab_size": 256
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

#[test]
fn the_config_classes_defaults_are_deepseek_v3_and_gpt_oss_120b() {
    let ds = parse(&json!({"model_type": "deepseek_v3"})).unwrap();
    let mla = ds.variant.mla.as_ref().unwrap();
    assert_eq!(
        (
            mla.q_lora_rank,
            mla.kv_lora_rank,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim
        ),
        (Some(1536), 512, 128, 64, 128)
    );
    assert!(mla.rope_interleave);
    assert_eq!(mla.cache, MlaCache::Latent);
    // `__post_init__`: `head_dim = qk_rope_head_dim`.
    assert_eq!(ds.head_dim, 64);
    let moe = ds.variant.moe.as_ref().unwrap();
    assert_eq!(
        moe.kind,
        MoeKind::DeepseekV3 {
            groups: 8,
            topk_group: 4
        }
    );
    assert_eq!(
        (moe.experts, moe.top_k, moe.expert_intermediate),
        (256, 8, 2048)
    );
    assert_eq!(moe.shared_intermediate, Some(2048));
    assert_eq!(moe.dense_layers, vec![0, 1, 2]);
    assert!(moe.norm_topk && !moe.aux_loss);

    let go = parse(&json!({"model_type": "gpt_oss"})).unwrap();
    let moe = go.variant.moe.as_ref().unwrap();
    assert_eq!(
        (moe.kind, moe.experts, moe.top_k, moe.expert_intermediate),
        (MoeKind::GptOss, 128, 4, 2880)
    );
    assert!(go.qkv_bias && go.o_bias);
    let sl = go.variant.sliding.as_ref().unwrap();
    assert_eq!(sl.window, 128);
    assert_eq!(&sl.local[..4], &[true, false, true, false]);
    assert_eq!((go.heads, go.kv_heads, go.head_dim), (64, 8, 64));
}

#[test]
fn malformed_deepseek_and_gpt_oss_configs_are_refused() {
    for bad in [
        json!({"model_type": "deepseek_v3", "n_routed_experts": 10, "n_group": 4}),
        json!({"model_type": "deepseek_v3", "topk_group": 9}),
        json!({"model_type": "deepseek_v3", "num_experts_per_tok": 200}),
        json!({"model_type": "deepseek_v3", "num_key_value_heads": 16}),
        json!({"model_type": "deepseek_v3", "qk_rope_head_dim": 63}),
        json!({"model_type": "deepseek_v3", "mla_cache": "paged"}),
        json!({"model_type": "gpt_oss", "num_experts_per_tok": 200}),
        json!({"model_type": "gpt_oss", "num_hidden_layers": 2, "layer_types": ["full_attention"]}),
    ] {
        assert!(
            matches!(parse(&bad), Err(EstimateError::BadHfConfig(_))),
            "{bad}"
        );
    }
}

/// The work a config may ask for is capped at 16,384 expert blocks (routed experts × sparse
/// layers), with a message saying so; the published models stay below it.
#[test]
fn expert_blocks_past_the_cap_are_refused_with_a_message() {
    // The fuzzers' case: DeepSeek-V3's 61 layers (3 dense) with 512 routed experts.
    let many = json!({"model_type": "deepseek_v3", "n_routed_experts": 512, "n_group": 8});
    match parse(&many) {
        Err(EstimateError::BadHfConfig(m)) => {
            assert!(m.contains("29696 expert blocks"), "{m}");
            assert!(m.contains("at most 16384"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // 2048 layers of gpt-oss' 128 experts; Qwen3-MoE with 128 experts in 128 layers.
    for cfg in [
        json!({"model_type": "gpt_oss", "num_hidden_layers": 2048}),
        json!({"model_type": "qwen3_moe", "num_hidden_layers": 129}),
    ] {
        assert!(
            matches!(parse(&cfg), Err(EstimateError::BadHfConfig(_))),
            "{cfg}"
        );
    }
    // At the cap: 128 sparse layers of 128 experts.
    assert!(parse(&json!({"model_type": "qwen3_moe", "num_hidden_layers": 128})).is_ok());
    for id in [
        "deepseek-v3",
        "gpt-oss-120b",
        "qwen3-30b-a3b",
        "mixtral-8x7b",
    ] {
        assert!(build_graph(&Plan::new(id)).is_ok(), "{id}");
    }
}

/// `sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())` on the meta
/// device (transformers 5.24.0, the presets' configs), and the active count: the total less
/// the `E - k` routed experts a token skips in each sparse layer (the experts' parameters, biases
/// included). DeepSeek-V3's is 671.0B without its multi-token-prediction layer, which
/// transformers does not build (the checkpoint's 685B include it); 37.6B active, "37B
/// activated" in its model card. gpt-oss counts the embeddings and the output head as active
/// (its model card's 3.6B and 5.1B leave out the 0.58B embedding).
#[test]
fn presets_have_transformers_total_and_active_parameter_counts() {
    for (id, total, active) in [
        ("deepseek-v3", 671_026_404_352u64, 37_552_282_624u64),
        ("gpt-oss-20b", 20_914_757_184, 4_187_440_704),
        ("gpt-oss-120b", 116_829_156_672, 5_711_982_912),
    ] {
        let tc = parse(&models::text_config(id).unwrap()).unwrap();
        assert_eq!(tc.param_count(), total, "{id}");
        assert_eq!(tc.active_param_count(), active, "{id}");
        assert_eq!(models::find(id).unwrap().params, total, "{id}");
        assert_eq!(models::text_model_type(id), Some(tc.model_type.as_str()));
    }
}

#[test]
fn the_latent_attention_runs_as_the_modeling_file_writes_it() {
    let cfg = small_deepseek(json!({}));
    let g = graph(cfg.clone());
    assert_eq!(g.param_count(), parse(&cfg).unwrap().param_count());
    let linears = names_of(&g, "linear");
    for leaf in [
        "self_attn.q_a_proj",
        "self_attn.q_b_proj",
        "self_attn.kv_a_proj_with_mqa",
        "self_attn.kv_b_proj",
        "self_attn.o_proj",
    ] {
        assert_eq!(
            linears.iter().filter(|n| n.ends_with(leaf)).count(),
            2,
            "{leaf}"
        );
    }
    let norms = names_of(&g, "rsqrt");
    assert!(norms.iter().any(|n| n.ends_with("self_attn.q_a_layernorm")));
    assert!(norms
        .iter()
        .any(|n| n.ends_with("self_attn.kv_a_layernorm")));
    // kv_b_proj up-projects the latent: [1, 1, 16, 4 · (16 + 12)].
    let kv_b = g
        .ops
        .iter()
        .find(|o| o.kind == "linear" && o.name.ends_with("kv_b_proj"))
        .unwrap();
    assert_eq!(g.shape(kv_b.outputs[0]), [1, 1, 16, 4 * 28]);
    // Queries and keys 24 wide, values 12: SDPA's output is [1, 4, 16, 12] per layer.
    let sdpa: Vec<_> = g
        .ops
        .iter()
        .filter(|o| o.kind.starts_with("sdpa"))
        .collect();
    assert_eq!(sdpa.len(), 2);
    assert_eq!(g.shape(sdpa[0].outputs[0]), [1, 4, 16, 12]);
    // The first layer is dense, the second a sparse block with its shared experts.
    assert!(linears.contains(&"layers.0.mlp.gate_proj".to_string()));
    assert!(linears.contains(&"layers.1.mlp.gate".to_string()));
    assert!(linears.contains(&"layers.1.mlp.shared_experts.down_proj".to_string()));
    // The sigmoid router gathers its weights from the scores; its choice runs without autograd.
    assert_eq!(names_of(&g, "gather").len(), 1);
    assert_eq!(names_of(&g, "masked_fill").len(), 1);
    // Without q_lora_rank the queries come from one q_proj.
    let g = graph(small_deepseek(json!({"q_lora_rank": null})));
    assert!(names_of(&g, "linear")
        .iter()
        .any(|n| n.ends_with("self_attn.q_proj")));
    assert_eq!(
        g.param_count(),
        parse(&small_deepseek(json!({"q_lora_rank": null})))
            .unwrap()
            .param_count()
    );
}

/// Serving caches per token and layer: the latent (16) and the rotary key (8) by default —
/// what transformers 5.24's `DynamicCache` receives from `DeepseekV3Attention` — or every
/// head's key (16 + 8) and value (12) when `mla_cache` is `"expanded"`. bf16, context 32 plus
/// 4 new tokens: the last decode step holds 35 tokens.
#[test]
fn mla_serves_from_the_latent_or_the_expanded_cache() {
    let serve = |cfg: serde_json::Value| {
        let mut p = plan(cfg);
        p.mode = Mode::Infer;
        p.context = Some(32);
        p.new_tokens = Some(4);
        p.dtype = Precision::Bf16;
        estimate(&p).unwrap()
    };
    let latent = serve(small_deepseek(json!({})));
    assert_eq!(latent.kv_cache_bytes.0, 2 * 2 * (16 + 8) * 35);
    let expanded = serve(small_deepseek(json!({"mla_cache": "expanded"})));
    assert_eq!(expanded.kv_cache_bytes.0, 2 * 2 * 4 * (16 + 8 + 12) * 35);
    // gpt-oss: its local layer keeps the window (7 past + 1 new), the global one all 35.
    let go = serve(small_gpt_oss(json!({})));
    assert_eq!(go.kv_cache_bytes.0, 2 * 2 * 2 * 16 * (35 + 8));
}

/// Serving on the CPU: queries and keys 24 wide, values 12, so SDPA runs its math path
/// (`_scaled_dot_product_attention_math`), which copies bf16 q, k and v to fp32 and builds the
/// causal mask of a prompt itself; the values, a slice of `kv_b_proj`'s output in `[B, T, H]`
/// order, are copied for the `bmm`, and the heads-major output is copied by the head merge. On
/// the GPU the fused kernel runs.
#[test]
fn mla_serving_on_the_cpu_runs_sdpas_math_path() {
    use vram_planner::estimator::config::Device;
    use vram_planner::estimator::units::DType;
    let prefill = |device: Device| {
        let mut p = plan(small_deepseek(json!({})));
        p.mode = Mode::Infer;
        p.batch = 2;
        p.context = Some(32);
        p.new_tokens = Some(2);
        p.dtype = Precision::Bf16;
        p.device = device;
        build_graph(&p).unwrap()
    };
    let g = prefill(Device::Cuda);
    assert_eq!(names_of(&g, "sdpa_cudnn").len(), 2);
    let g = prefill(Device::Cpu);
    assert!(g.ops.iter().all(|o| !o.kind.starts_with("sdpa")));
    let in_attn = |kind: &str| {
        g.ops
            .iter()
            .filter(|o| o.kind == kind && o.name == "layers.0.self_attn")
            .flat_map(|o| o.outputs.iter().map(|&t| (g.shape(t), g.dtype(t))))
            .collect::<Vec<_>>()
    };
    let f32 = |s: [u64; 4]| (s.to_vec(), DType::F32);
    let casts = in_attn("to_copy");
    for want in [
        f32([2, 4, 32, 24]),
        f32([2, 4, 32, 12]),
        ([2, 4, 32, 32].to_vec(), DType::BF16),
        ([2, 4, 32, 12].to_vec(), DType::BF16),
    ] {
        assert!(casts.contains(&want), "{want:?} in {casts:?}");
    }
    assert_eq!(in_attn("causal_mask"), [(vec![32, 32], DType::F32)]);
    assert_eq!(in_attn("bmm")[0], f32([2, 4, 32, 32]));
    assert_eq!(
        in_attn("clone"),
        [f32([2, 4, 32, 12]), (vec![2, 32, 48], DType::BF16)]
    );
}

#[test]
fn gpt_oss_layers_have_sinks_biased_experts_and_eager_attention() {
    use vram_planner::estimator::config::AttnImpl;
    let cfg = small_gpt_oss(json!({}));
    let g = graph(cfg.clone());
    assert_eq!(g.param_count(), parse(&cfg).unwrap().param_count());
    // Eager whatever was asked: the scores with the sink column, [1, 4, 16, 17], per layer.
    assert_eq!(names_of(&g, "sdpa_cudnn").len(), 0);
    let cats: Vec<_> = g
        .ops
        .iter()
        .filter(|o| o.kind == "cat" && g.shape(o.outputs[0]) == [1, 4, 16, 17])
        .collect();
    assert_eq!(cats.len(), 2);
    assert_eq!(names_of(&g, "max").len(), 2);
    let mut p = plan(cfg);
    p.attn = AttnImpl::Eager;
    assert_eq!(build_graph(&p).unwrap().ops.len(), g.ops.len());
    // The router has a bias; each expert clamps gate and up.
    let linears = names_of(&g, "linear");
    assert!(linears.contains(&"layers.0.mlp.router".to_string()));
    // 16 tokens, top 2 of 4: every expert runs, two clamps each, two layers.
    assert_eq!(names_of(&g, "clamp").len(), 2 * 4 * 2);
    // The sliding layer takes its own mask: two masks.
    assert_eq!(g.ops.iter().filter(|o| o.kind == "causal_mask").count(), 2);
}

/// The measured steps of `data/mla-sinks-steps.jsonl` (`data/PROVENANCE.md`): two layers at
/// reduced widths on real CPU tensors under balanced routing.
///
/// The step peaks are reached in backward, where autograd sums the per-expert
/// `select_backward` gradients of `experts.gate_up_proj` (each a full `[E, 2I, H]` tensor). The
/// harness's tracker is a `TorchDispatchMode`, under which `InputBuffer::accumulate` never adds
/// in place, so each sum is a third parameter-sized tensor for a moment (the replay's
/// `dispatch_mode`); a plain training loop adds the later gradients into the first in place
/// (torch 2.15 on the CPU: the final `.grad` is the first `select_backward` output). With the
/// dispatch mode the forward, backward and step peaks agree within 0.05 %; without it the
/// backward peak is lower, by at most one gate_up weight.
#[test]
fn measured_mla_and_sink_steps() {
    use vram_planner::estimator::simulate::{simulate, StepOptions};
    use vram_planner::estimator::timeline::Phase;
    let cases = common::MLA_SINKS.replay();
    assert_eq!(cases.len(), 5);
    common::assert_within(&cases, 5e-4);
    for r in common::MLA_SINKS.records() {
        let id = r["case_id"].as_str().unwrap();
        let counts = common::routing_counts(&r);
        assert!(!counts.is_empty(), "{id}");
        for c in counts {
            assert!(c.iter().all(|&n| n == c[0]), "{id}: {c:?}");
        }
        let p = common::plan_of(&r);
        let step = &r["steps"]["2"];
        let fwd = step["peak_forward_r512"].as_u64().unwrap() as f64;
        let est = estimate(&p).unwrap();
        let err = est.peak_forward.0 as f64 / fwd - 1.0;
        assert!(err.abs() < 5e-4, "{id}: forward {err:+.5}");
        let g = build_graph(&p).unwrap();
        let s = p.setup();
        let backward_peak = |dispatch_mode: bool| {
            let opts = StepOptions {
                dispatch_mode,
                ..StepOptions::of(&s)
            };
            simulate(&g, &opts).timeline.peak_in(Phase::Backward).0
        };
        let measured = step["peak_backward_r512"].as_u64().unwrap() as f64;
        let traced = backward_peak(true);
        let err = traced as f64 / measured - 1.0;
        assert!(err.abs() < 5e-4, "{id}: backward {err:+.5}");
        // The largest 3-D parameter: `gate_up_proj`, `[E, 2I, H]` or `[E, H, 2I]`.
        let gate_up = (0..g.tensors.len())
            .filter(|&t| g.tensors[t].is_param && g.tensors[t].shape.len() == 3)
            .map(|t| g.bytes(t).0)
            .max()
            .unwrap();
        let plain = backward_peak(false);
        assert!(
            plain < traced && traced - plain <= gate_up,
            "{id}: backward {plain} in place, {traced} out of place, gate_up {gate_up}"
        );
    }
}
