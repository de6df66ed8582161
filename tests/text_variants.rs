//! The LLaMA-family variants a `config.json` brings (Qwen3, Phi-3, OLMo 2) and the mixtures of
//! experts (Mixtral, Qwen2-MoE, Qwen3-MoE): their config classes' defaults, the layer each
//! modeling file runs (module names as transformers 5.24 names them), the per-expert dispatch
//! under balanced routing, the auxiliary loss, serving, and the settings they are refused.

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
    let index: Vec<_> = g
        .ops
        .iter()
        .filter(|o| o.kind == "index" && g.shape(o.outputs[0])[1] == 64)
        .collect();
    assert_eq!(index.len(), 2 * 4);
    assert!(index.iter().all(|o| g.shape(o.outputs[0]) == [8, 64]));
    assert_eq!(names_of(&g, "index_add").len(), 2 * 4);
    let one_hot: Vec<_> = g.ops.iter().filter(|o| o.kind == "one_hot").collect();
    assert_eq!(one_hot.len(), 2);
    assert_eq!(g.shape(one_hot[0].outputs[0]), [16, 2, 4]);
    assert_eq!(g.dtype(one_hot[0].outputs[0]), DType::I64);
    let linears = names_of(&g, "linear");
    assert!(linears.contains(&"layers.1.mlp.gate".to_string()));
    assert!(linears.contains(&"layers.1.mlp.experts.3.down_proj".to_string()));
    let tc = parse(&small_moe("qwen3_moe", json!({}))).unwrap();
    assert_eq!(g.param_count(), tc.param_count());

    // Mixtral's experts are `w1`/`w3`/`w2`; Qwen2-MoE adds the gated shared expert.
    let g = graph(small_moe("mixtral", json!({})));
    assert!(names_of(&g, "linear").contains(&"layers.0.mlp.experts.0.w2".to_string()));
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
    assert!(linears.contains(&"layers.1.mlp.experts.0.gate_proj".to_string()));
}

#[test]
fn the_load_balancing_loss_is_added_when_the_router_logits_are_output() {
    let plain = graph(small_moe("mixtral", json!({})));
    let aux = graph(small_moe("mixtral", json!({"output_router_logits": true})));
    assert_eq!(
        names_of(&plain, "cat").len(),
        names_of(&aux, "cat").len() - 1
    );
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
        let err = estimate_parallel(&p).err().expect(mt).to_string();
        assert!(err.contains("tensor parallelism"), "{mt}: {err}");
    }
    for mt in ["phi3", "mixtral"] {
        let mut p = plan(small_moe(mt, json!({})));
        p.mode = Mode::Finetune;
        p.lora = Some(LoraConfig {
            rank: 8,
            alpha: 16.0,
            targets: vec!["q".into()],
            dropout: 0.0,
        });
        match estimate(&p) {
            Err(PlanError::Estimate(EstimateError::Unsupported(m))) => {
                assert!(m.contains("LoRA"), "{mt}: {m}")
            }
            other => panic!("{mt}: expected a refusal, got {other:?}"),
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
