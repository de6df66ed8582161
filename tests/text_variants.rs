//! The LLaMA-family variants a `config.json` brings (Qwen3, Phi-3, OLMo 2) and the mixtures of
//! experts (Mixtral, Qwen2-MoE, Qwen3-MoE): their config classes' defaults, the layer each
//! modeling file runs (module names as transformers 5.24 names them), the per-expert dispatch
//! under balanced routing, the auxiliary loss, serving, and the settings they are refused.

mod common;

use serde_json::json;
use vram_planner::estimator::error::EstimateError;
use vram_planner::estimator::graph::Graph;
use vram_planner::estimator::parallel::Parallel;
use vram_planner::estimator::units::DType;
use vram_planner::plan::{build_graph, estimate, estimate_parallel, Plan, PlanError};
use vram_planner::presets::hf::{parse, SUPPORTED};
use vram_planner::presets::moe::{Moe, MoeKind};
use vram_planner::presets::text::QkNorm;

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

/// Two layers at a small width, `extra` on top.
fn small(model_type: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut cfg = json!({
        "model_type": model_type, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 256, "head_dim": 16
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

fn small_moe(model_type: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut cfg = small(
        model_type,
        json!({"num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
               "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48}),
    );
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

#[test]
fn each_model_type_imports_with_its_config_class_defaults() {
    let q3 = parse(&json!({"model_type": "qwen3"})).unwrap();
    assert_eq!((q3.head_dim, q3.variant.qk_norm), (128, QkNorm::PerHead));
    let phi = parse(&json!({"model_type": "phi3"})).unwrap();
    assert!(phi.variant.fused);
    assert_eq!((phi.vocab, phi.hidden, phi.kv_heads), (32064, 3072, 32));
    let olmo = parse(&json!({"model_type": "olmo2"})).unwrap();
    assert!(olmo.variant.norm_after);
    assert_eq!(olmo.variant.qk_norm, QkNorm::Full);
    let mx = parse(&json!({"model_type": "mixtral"})).unwrap();
    let moe = mx.variant.moe.unwrap();
    assert_eq!(
        (moe.kind, moe.experts, moe.top_k, moe.expert_intermediate),
        (MoeKind::Mixtral, 8, 2, 14336)
    );
    assert!(moe.norm_topk && !moe.aux_loss);
    let q2 = parse(&json!({"model_type": "qwen2_moe"})).unwrap();
    let moe = q2.variant.moe.unwrap();
    assert_eq!(
        (moe.experts, moe.top_k, moe.shared_intermediate),
        (60, 4, Some(5632))
    );
    assert!(q2.qkv_bias && !q2.o_bias);
    let q3m = parse(&json!({"model_type": "qwen3_moe"})).unwrap();
    let moe = q3m.variant.moe.unwrap();
    assert_eq!(
        (moe.experts, moe.top_k, moe.expert_intermediate),
        (128, 8, 768)
    );
    assert!(!moe.norm_topk);
    assert_eq!((q3m.kv_heads, q3m.head_dim), (4, 64));
}

#[test]
fn an_unsupported_model_type_names_every_supported_one() {
    let Err(EstimateError::BadHfConfig(msg)) = parse(&json!({"model_type": "t5"})) else {
        panic!("t5 must be refused");
    };
    for t in SUPPORTED {
        assert!(msg.contains(t), "{msg} lacks {t}");
    }
    for bad in [
        json!({"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3}),
        json!({"model_type": "qwen3_moe", "mlp_only_layers": [99], "num_hidden_layers": 4}),
        json!({"model_type": "qwen3_moe", "mlp_only_layers": "all"}),
        json!({"model_type": "phi3", "partial_rotary_factor": 0.5}),
        json!({"model_type": "phi3", "resid_pdrop": 0.1}),
        json!({"model_type": "mixtral", "router_jitter_noise": 0.01}),
    ] {
        assert!(
            matches!(parse(&bad), Err(EstimateError::BadHfConfig(_))),
            "{bad}"
        );
    }
}

#[test]
fn the_variants_change_the_layer_where_their_modeling_files_do() {
    let g = graph(small("olmo2", json!({})));
    let norms = names_of(&g, "rsqrt");
    assert!(norms
        .iter()
        .any(|n| n.contains("post_feedforward_layernorm")));
    assert!(!norms.iter().any(|n| n.contains("input_layernorm")));
    // OLMo 2 normalises the whole projection: weights of 4·16 and 2·16.
    let tc = parse(&small("olmo2", json!({}))).unwrap();
    assert_eq!(g.param_count(), tc.param_count());
    assert!(norms.iter().any(|n| n.contains("self_attn.q_norm")));

    let g = graph(small("qwen3", json!({})));
    let tc = parse(&small("qwen3", json!({}))).unwrap();
    assert_eq!(g.param_count(), tc.param_count());
    // Per-head norms: the plain LLaMA layer plus 2·16 weights per layer.
    let llama = parse(&small("llama", json!({}))).unwrap();
    assert_eq!(tc.param_count(), llama.param_count() + 2 * 2 * 16);

    let g = graph(small("phi3", json!({"num_key_value_heads": 4})));
    let linears = names_of(&g, "linear");
    assert!(linears.iter().any(|n| n.ends_with("self_attn.qkv_proj")));
    assert!(linears.iter().any(|n| n.ends_with("mlp.gate_up_proj")));
    assert!(!linears
        .iter()
        .any(|n| n.ends_with("q_proj") && !n.contains("qkv")));
}

#[test]
fn balanced_routing_gives_every_expert_its_share() {
    let moe = Moe {
        kind: MoeKind::Qwen3,
        experts: 4,
        top_k: 3,
        expert_intermediate: 8,
        norm_topk: false,
        shared_intermediate: None,
        sparse_step: 1,
        dense_layers: vec![],
        aux_loss: false,
    };
    let shares: Vec<u64> = (0..4).map(|e| moe.balanced_tokens(5, e)).collect();
    assert_eq!(shares, vec![4, 4, 4, 3]);
    assert_eq!(moe.block_params(10), 10 * 4 + 4 * 3 * 10 * 8);
    assert_eq!(moe.active_block_params(10), 10 * 4 + 3 * 3 * 10 * 8);
}

#[test]
fn each_expert_runs_on_its_tokens_with_the_dispatch_buffers() {
    // 16 tokens, top 2 of 4 experts: 8 tokens per expert.
    let g = graph(small_moe("qwen3_moe", json!({})));
    let gathered: Vec<_> = g
        .ops
        .iter()
        .filter(|o| o.kind == "index" && g.shape(o.outputs[0])[1] == 64)
        .collect();
    assert_eq!(gathered.len(), 2 * 4);
    assert!(gathered.iter().all(|o| g.shape(o.outputs[0]) == [8, 64]));
    assert_eq!(names_of(&g, "index_add").len(), 2 * 4);
    // Each expert's weights are `select` views of the 3-D parameters.
    assert_eq!(names_of(&g, "select").len(), 2 * 4 * 2);
    let one_hot: Vec<_> = g.ops.iter().filter(|o| o.kind == "one_hot").collect();
    assert_eq!(one_hot.len(), 2);
    assert_eq!(g.shape(one_hot[0].outputs[0]), [16, 2, 5]);
    assert_eq!(g.dtype(one_hot[0].outputs[0]), DType::I64);
    let linears = names_of(&g, "linear");
    assert!(linears.contains(&"layers.1.mlp.gate".to_string()));
    assert!(linears.contains(&"layers.1.mlp.experts".to_string()));
    let tc = parse(&small_moe("qwen3_moe", json!({}))).unwrap();
    assert_eq!(g.param_count(), tc.param_count());

    // Mixtral keeps its routing weights in fp32; Qwen2-MoE adds the gated shared expert.
    let g = graph(small_moe("mixtral", json!({})));
    assert_eq!(
        g.param_count(),
        parse(&small_moe("mixtral", json!({})))
            .unwrap()
            .param_count()
    );
    let g = graph(small_moe("qwen2_moe", json!({})));
    let linears = names_of(&g, "linear");
    assert!(linears.contains(&"layers.0.mlp.shared_expert.up_proj".to_string()));
    assert!(linears.contains(&"layers.0.mlp.shared_expert_gate".to_string()));
    let tc = parse(&small_moe("qwen2_moe", json!({}))).unwrap();
    assert_eq!(g.param_count(), tc.param_count());

    // A dense layer among sparse ones (`mlp_only_layers`).
    let g = graph(small_moe("qwen3_moe", json!({"mlp_only_layers": [0]})));
    let linears = names_of(&g, "linear");
    assert!(linears.contains(&"layers.0.mlp.gate_proj".to_string()));
    assert!(linears.contains(&"layers.1.mlp.experts".to_string()));
}

#[test]
fn the_load_balancing_loss_is_added_when_the_router_logits_are_output() {
    let plain = graph(small_moe("mixtral", json!({})));
    let aux = graph(small_moe("mixtral", json!({"output_router_logits": true})));
    // One histogram per sparse layer.
    assert_eq!(names_of(&plain, "histc").len(), 0);
    assert_eq!(names_of(&aux, "histc").len(), 2);
    // The training loop keeps the total loss: a scalar made after the language-model loss.
    let kept = aux.kept[0];
    assert!(aux.shape(kept).is_empty());
    assert_ne!(plain.ops.len(), aux.ops.len());
    let p = estimate(&plan(small_moe("mixtral", json!({})))).unwrap();
    let a = estimate(&plan(small_moe(
        "mixtral",
        json!({"output_router_logits": true}),
    )))
    .unwrap();
    assert!(a.peak_allocated >= p.peak_allocated);
    assert_eq!(a.param_count, p.param_count);
}

#[test]
fn moe_and_variants_serve_and_are_refused_where_not_modelled() {
    use vram_planner::estimator::config::Precision;
    use vram_planner::estimator::tune::{LoraConfig, Mode};
    for mt in [
        "qwen3",
        "phi3",
        "olmo2",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
    ] {
        let mut p = plan(small_moe(mt, json!({})));
        p.mode = Mode::Infer;
        p.context = Some(32);
        p.new_tokens = Some(4);
        p.dtype = Precision::Bf16;
        let e = estimate(&p).unwrap_or_else(|e| panic!("{mt}: {e}"));
        assert!(e.kv_cache_bytes.0 > 0, "{mt}");
    }
    for mt in ["phi3", "olmo2", "mixtral"] {
        let mut p = plan(small_moe(mt, json!({"num_key_value_heads": 4})));
        p.parallel = Some(Parallel {
            gpus_per_node: Some(2),
            tp: 2,
            ..Default::default()
        });
        // Their tensor-parallel layers are `tests/tp_variants.rs`'s, with sequence parallelism
        // too.
        estimate_parallel(&p).unwrap_or_else(|e| panic!("{mt}: {e}"));
        if let Some(par) = p.parallel.as_mut() {
            par.sequence_parallel = true;
        }
        estimate_parallel(&p).unwrap_or_else(|e| panic!("{mt}: {e}"));
    }
    // Phi-3's fused projections take no LoRA; a mixture of experts takes it on its attention
    // projections (`nn.Linear`) but not on its fused 3-D experts (`data/moe-lora-steps.jsonl`).
    for (mt, target, refused) in [
        ("phi3", "q", "LoRA"),
        ("mixtral", "up", "3-D parameters"),
        ("qwen3_moe", "all", "3-D parameters"),
    ] {
        let mut p = plan(small_moe(mt, json!({})));
        p.mode = Mode::Finetune;
        p.lora = Some(LoraConfig {
            rank: 8,
            alpha: 16.0,
            targets: vec![target.into()],
            dropout: 0.0,
        });
        match estimate(&p) {
            Err(PlanError::Estimate(EstimateError::Unsupported(m))) => {
                assert!(m.contains(refused), "{mt}: {m}")
            }
            other => panic!("{mt}: expected a refusal, got {other:?}"),
        }
    }
    for mt in ["mixtral", "qwen2_moe", "qwen3_moe"] {
        let mut p = plan(small_moe(mt, json!({})));
        p.mode = Mode::Finetune;
        p.lora = Some(LoraConfig {
            rank: 8,
            alpha: 16.0,
            targets: vec!["q".into(), "v".into()],
            dropout: 0.0,
        });
        let lora = estimate(&p).unwrap_or_else(|e| panic!("{mt}: {e}"));
        // Only the fp32 adapters train.
        assert!(lora.trainable_params > 0, "{mt}");
        assert_eq!(lora.grad_bytes.0, 4 * lora.trainable_params, "{mt}");
        // QLoRA quantizes the attention only (`tests/qlora_steps.rs`); the same adapters train.
        p.quantization = vram_planner::estimator::tune::Quantization::Nf4;
        let qlora = estimate(&p).unwrap_or_else(|e| panic!("{mt}: QLoRA: {e}"));
        assert_eq!(qlora.trainable_params, lora.trainable_params, "{mt}");
        p.mode = Mode::Infer;
        p.lora = None;
        p.quantization = vram_planner::estimator::tune::Quantization::Int8;
        match estimate(&p) {
            Err(PlanError::Estimate(EstimateError::Unsupported(m))) => {
                assert!(m.contains("fine-tune it with QLoRA"), "{mt}: {m}")
            }
            other => panic!("{mt}: int8 must be refused, got {other:?}"),
        }
    }
    // Qwen3's per-head norms take LoRA like LLaMA.
    let mut p = plan(small("qwen3", json!({})));
    p.mode = Mode::Finetune;
    p.lora = Some(LoraConfig {
        rank: 8,
        alpha: 16.0,
        targets: vec!["q".into(), "v".into()],
        dropout: 0.0,
    });
    assert!(estimate(&p).is_ok());
}

#[test]
fn gemma_configs_alternate_local_and_global_layers_and_cap_their_logits() {
    let g2 = parse(&json!({"model_type": "gemma2"})).unwrap();
    let sl = g2.variant.sliding.as_ref().unwrap();
    assert_eq!(sl.window, 4096);
    assert_eq!(&sl.local[..4], &[true, false, true, false]);
    let gm = g2.variant.gemma.as_ref().unwrap();
    assert!(gm.attn_softcap && gm.final_softcap && g2.tie_embeddings);
    assert_eq!((g2.vocab, g2.head_dim), (256000, 256));
    let g3 = parse(&json!({"model_type": "gemma3_text", "num_hidden_layers": 12})).unwrap();
    let sl = g3.variant.sliding.as_ref().unwrap();
    let globals: Vec<usize> = (0..12).filter(|&i| !sl.local[i]).collect();
    assert_eq!(globals, vec![5, 11]);
    let gm = g3.variant.gemma.as_ref().unwrap();
    assert!(!gm.attn_softcap && !gm.final_softcap);
    assert_eq!(g3.variant.qk_norm, QkNorm::PerHead);
    let listed = parse(&json!({"model_type": "gemma3_text", "num_hidden_layers": 2,
        "layer_types": ["full_attention", "sliding_attention"]}))
    .unwrap();
    assert_eq!(listed.variant.sliding.unwrap().local, vec![false, true]);
    for bad in [
        json!({"model_type": "gemma3_text", "num_hidden_layers": 2, "layer_types": ["full_attention"]}),
        json!({"model_type": "gemma2", "final_logit_softcapping": "high"}),
    ] {
        assert!(
            matches!(parse(&bad), Err(EstimateError::BadHfConfig(_))),
            "{bad}"
        );
    }
    let mistral = parse(&json!({"model_type": "mistral", "sliding_window": 4096})).unwrap();
    assert!(mistral.variant.sliding.unwrap().local.iter().all(|&l| l));
}

#[test]
fn gemma_layers_have_four_norms_scaled_embeddings_and_capped_logits() {
    use vram_planner::estimator::config::AttnImpl;
    let cfg = small("gemma2", json!({"sliding_window": 8}));
    let g = graph(cfg.clone());
    let norms = names_of(&g, "rsqrt");
    for n in [
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ] {
        assert_eq!(
            norms
                .iter()
                .filter(|x| x.ends_with(&format!(".{n}")))
                .count(),
            2,
            "{n}"
        );
    }
    assert_eq!(g.param_count(), parse(&cfg).unwrap().param_count());
    // Gemma 2 runs eager attention even when SDPA is asked (transformers 5.24 has no SDPA path
    // for it): the attention soft-capping's saved `tanh` over the [1, 4, 16, 16] scores of
    // each layer, then the final soft-capping's over the logits [1, 16, 256].
    let tanh: Vec<_> = g.ops.iter().filter(|o| o.kind == "tanh").collect();
    assert_eq!(tanh.len(), 3);
    assert_eq!(g.shape(tanh[0].outputs[0]), [1, 4, 16, 16]);
    assert_eq!(g.shape(tanh[2].outputs[0]), [1, 16, 256]);
    let mut p = plan(cfg.clone());
    p.attn = AttnImpl::Eager;
    let eager = build_graph(&p).unwrap();
    assert_eq!(eager.ops.len(), g.ops.len());
    // Gemma 3 has no soft-capping: no `tanh` at all.
    let g3 = graph(small("gemma3_text", json!({})));
    assert_eq!(g3.ops.iter().filter(|o| o.kind == "tanh").count(), 0);
    // A window shorter than the sequence: local layers take their own mask.
    let masks = |g: &Graph| g.ops.iter().filter(|o| o.kind == "causal_mask").count();
    assert_eq!(masks(&g), 2);
    let wide = graph(small("gemma2", json!({"sliding_window": 4096})));
    assert_eq!(masks(&wide), 2);
    // Gemma 3: per-head q/k norms and a second rotary table for its local layers.
    let g3 = graph(small("gemma3_text", json!({"sliding_window": 8})));
    assert!(names_of(&g3, "rsqrt")
        .iter()
        .any(|n| n.ends_with("self_attn.q_norm")));
    assert!(g3
        .ops
        .iter()
        .any(|o| o.name.starts_with("rotary_emb_local")));
    assert_eq!(
        g3.param_count(),
        parse(&small("gemma3_text", json!({})))
            .unwrap()
            .param_count()
    );
}

/// A local layer serves from a window-sized cache: after the prefill, each decode step keeps
/// `window - 1` past tokens plus the new one, where a global layer keeps them all. Two layers
/// (Gemma 2: the first local, the second global), 2 KV heads of 16, bf16: 128 bytes per token
/// and layer; context 32 plus 4 new tokens, window 8: the last decode step (34 tokens past,
/// one new) holds 35 tokens in the global layer and 7 + 1 in the local one.
#[test]
fn local_layers_serve_from_a_window_sized_cache() {
    use vram_planner::estimator::config::Precision;
    use vram_planner::estimator::tune::Mode;
    let serve = |cfg: serde_json::Value| {
        let mut p = plan(cfg);
        p.mode = Mode::Infer;
        p.context = Some(32);
        p.new_tokens = Some(4);
        p.dtype = Precision::Bf16;
        estimate(&p).unwrap()
    };
    let e = serve(small("gemma2", json!({"sliding_window": 8})));
    assert_eq!(e.kv_cache_bytes.0, 128 * (35 + 8));
    let wide = serve(small("gemma2", json!({"sliding_window": 4096})));
    assert_eq!(wide.kv_cache_bytes.0, 128 * (35 + 35));
    let m = serve(small("mistral", json!({"sliding_window": 8})));
    assert_eq!(m.kv_cache_bytes.0, 128 * (8 + 8));
    let full = serve(small("mistral", json!({})));
    assert_eq!(full.kv_cache_bytes.0, 128 * (35 + 35));
}

/// The measured steps of `data/variant-steps.jsonl` (`data/PROVENANCE.md`): the dense families
/// at two layers of their published widths on the fake CUDA device within 0.1 % (Phi-3 under
/// autocast too: its rotary `cat` leaves the query heads-major, so is cuDNN's output, and the
/// head merge copies it); Mixtral, Qwen2-MoE and Qwen3-MoE on real CPU tensors, balanced
/// routing, within 0.25 %, their step peaking in backward where the harness sums two per-expert
/// gradients of a 3-D expert weight out of place (the replay's `dispatch_mode`).
#[test]
fn measured_steps_of_the_new_families() {
    let cases = common::VARIANTS.replay();
    assert_eq!(cases.len(), 26);
    let of = |f: &dyn Fn(&str) -> bool| -> Vec<common::Replayed> {
        common::VARIANTS.replay_where(|r| f(r["case_id"].as_str().unwrap_or("")))
    };
    let dense = of(&|id| !id.contains("moe") && !id.contains("mixtral"));
    assert_eq!(dense.len(), 20);
    common::assert_within(&dense, 1e-3);
    let mixtral = of(&|id| id.contains("mixtral"));
    assert_eq!(mixtral.len(), 2);
    common::assert_within(&mixtral, 2.5e-3);
    let qwen_moe = of(&|id| id.contains("moe"));
    assert_eq!(qwen_moe.len(), 4);
    common::assert_within(&qwen_moe, 2.5e-3);
    // The records were measured under balanced routing, the estimator's assumption.
    for r in common::VARIANTS.records() {
        let id = r["case_id"].as_str().unwrap();
        if id.contains("moe") || id.contains("mixtral") {
            let counts = common::routing_counts(&r);
            assert!(!counts.is_empty(), "{id}");
            for c in counts {
                assert!(c.iter().all(|&n| n == c[0]), "{id}: {c:?}");
            }
        }
    }
}
