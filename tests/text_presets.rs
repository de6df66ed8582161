//! Language models: exact parameter counts of every preset (as transformers 5.24 counts them,
//! `sum(p.numel() for p in model.parameters())`, tied weights once), the measured training steps
//! of GPT-2, BERT-base and the two LLaMA shapes and the further language-model steps within 3 %,
//! the segment-checkpointed and unpadded steps within 0.1 %, `config.json` import errors, and the
//! estimator's speed on the largest preset.

mod common;
use proptest::prelude::*;
use serde_json::json;
use vram_planner::estimator::config::{AttnImpl, CausalMask, Checkpointing, Precision};
use vram_planner::estimator::error::EstimateError;
use vram_planner::plan::{build_graph, estimate};
use vram_planner::plan::{Plan, PlanError};
use vram_planner::presets::models::{self, Family};

/// Counted with transformers 5.24 on the meta device from the same configs.
const PARAMS: &[(&str, u64)] = &[
    ("gpt2", 124_439_808),
    ("gpt2-medium", 354_823_168),
    ("gpt2-large", 774_030_080),
    ("gpt2-xl", 1_557_611_200),
    ("bert-base", 109_514_298),
    ("bert-large", 335_174_458),
    ("llama-small", 168_313_856),
    ("llama-7b", 6_738_415_616),
    ("llama-2-7b", 6_738_415_616),
    ("llama-2-13b", 13_015_864_320),
    ("llama-2-70b", 68_976_648_192),
    ("llama-3-8b", 8_030_261_248),
    ("llama-3-70b", 70_553_706_496),
    ("mistral-7b", 7_241_732_096),
    ("qwen2-0.5b", 494_032_768),
];

/// The newer presets, checked against their published totals: the safetensors index's
/// `metadata.total_size` halved (bf16 checkpoints: `meta-llama/Llama-3.1-8B` 16_060_522_496,
/// `Qwen/Qwen2.5-7B` 15_231_233_024, `Qwen/Qwen3-8B` 16_381_470_720, `Qwen/Qwen3-30B-A3B`
/// 61_064_245_248, `mistralai/Mixtral-8x7B-v0.1` 93_405_585_408,
/// `microsoft/Phi-3-mini-4k-instruct` 7_642_159_104) or the model card (Llama 3.1 70B and
/// 405B: 70.6B and 405B, the exact totals the Hub's safetensors metadata reports; `google/gemma-2-9b`
/// 18_483_411_968 bytes). Gemma 3 12B is its language model alone (`Gemma3ForCausalLM` on the
/// checkpoint's `text_config`, without the vision tower and projector): 11_766_034_176, the
/// parameter count llama.cpp's GGUF metadata gives for the converted text model.
const PUBLISHED: &[(&str, u64)] = &[
    ("llama-3.1-8b", 8_030_261_248),
    ("llama-3.1-70b", 70_553_706_496),
    ("llama-3.1-405b", 405_853_388_800),
    ("qwen2.5-7b", 7_615_616_512),
    ("qwen3-8b", 8_190_735_360),
    ("qwen3-30b-a3b", 30_532_122_624),
    ("mixtral-8x7b", 46_702_792_704),
    ("phi-3-mini", 3_821_079_552),
    ("gemma-2-9b", 9_241_705_984),
    ("gemma-3-12b", 11_766_034_176),
];

/// Active parameters per token of the mixtures of experts: the total less the experts a token
/// does not run (`(E - k) · 3 · h · i` per sparse layer): Qwen3-30B-A3B's "3.3B activated",
/// Mixtral's "12.9B active".
#[test]
fn mixtures_of_experts_report_their_active_parameters() {
    for (id, total, idle) in [
        (
            "qwen3-30b-a3b",
            30_532_122_624u64,
            48 * 120 * 3 * 2048 * 768u64,
        ),
        ("mixtral-8x7b", 46_702_792_704, 32 * 6 * 3 * 4096 * 14336),
    ] {
        let tc = vram_planner::presets::hf::parse(&models::text_config(id).unwrap()).unwrap();
        assert_eq!(tc.active_param_count(), total - idle, "{id}");
    }
    assert_eq!(
        vram_planner::presets::hf::parse(&models::text_config("qwen3-30b-a3b").unwrap())
            .unwrap()
            .active_param_count(),
        3_353_032_704
    );
    let dense =
        vram_planner::presets::hf::parse(&models::text_config("qwen3-8b").unwrap()).unwrap();
    assert_eq!(dense.active_param_count(), dense.param_count());
}

fn small_plan(model: &str) -> Plan {
    let mut p = Plan::new(model);
    p.batch = 1;
    p.seq = Some(16);
    p
}

/// Language models under `checkpoint_sequential`-style segments over their layers (none, √N, 4
/// and 12 segments of GPT-2, √8 of LLaMA-small), measured with the shared harness
/// (`data/PROVENANCE.md`, `text-segments-steps.jsonl`): within 0.1 %.
#[test]
fn text_segment_cases_within_a_tenth_of_a_percent() {
    common::assert_replays(&common::TEXT_SEGMENTS, 7, 1e-3);
}

#[test]
fn every_language_preset_has_the_exact_parameter_count() {
    for &(id, n) in PARAMS.iter().chain(PUBLISHED) {
        let preset = models::find(id).unwrap_or_else(|| panic!("preset {id} missing"));
        assert_eq!(preset.family, Family::Language, "{id}");
        assert_eq!(preset.params, n, "{id}: catalogue count");
        let g = build_graph(&small_plan(id)).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(g.param_count(), n, "{id}: built graph");
        let cfg = models::text_config(id).unwrap();
        let tc = vram_planner::presets::hf::parse(&cfg).unwrap();
        assert_eq!(tc.param_count(), n, "{id}: closed form");
    }
}

fn text_model(model: &str) -> bool {
    matches!(model, "gpt2" | "bert-base" | "llama-small" | "llama-7b")
}

#[test]
fn every_measured_step_of_the_language_models_within_3_percent() {
    let cases =
        common::REFERENCE_SET.replay_where(|r| text_model(r["model"].as_str().unwrap_or("")));
    for r in &cases {
        assert!(
            r.record.get("hf_config").is_some(),
            "{}: language records carry their config",
            r.case.case_id
        );
    }
    common::assert_within(&cases, 0.03);
    let worst = cases
        .iter()
        .map(|r| &r.case)
        .max_by(|a, b| a.rel_err.abs().total_cmp(&b.rel_err.abs()))
        .unwrap();
    println!(
        "{} language-model steps, worst {:.4} % ({})",
        cases.len(),
        100.0 * worst.rel_err.abs(),
        worst.case_id
    );
    assert!(
        cases.len() >= 48,
        "expected the GPT-2/BERT/LLaMA records, found {}",
        cases.len()
    );
}

/// Further steps measured with the same oracle (`shared/reference/harness`, `measure.run_case`,
/// fake CUDA, adamw) for the presets and paths the reference set lacks: Qwen2 (GQA, tied),
/// Mistral and Llama 3 (GQA), GPT-2 medium/large, BERT-large, eager attention under autocast,
/// checkpointing with eager attention.
#[test]
fn further_measured_steps_within_3_percent() {
    common::assert_replays(&common::TEXT_EXTRA, 13, 0.03);
}

/// Unpadded batches (no causal mask, `enable_gqa`), measured the same way; see PROVENANCE.md.
#[test]
fn unpadded_batches_measured_within_a_tenth_of_a_percent() {
    common::assert_replays(&common::UNPADDED, 13, 1e-3);
}

#[test]
fn an_unpadded_batch_skips_the_mask_and_the_repeated_heads() {
    let mut padded = Plan::new("llama-3-8b");
    padded.seq = Some(8192);
    padded.batch = 1;
    padded.dtype = Precision::Bf16;
    let unpadded = Plan {
        causal_mask: CausalMask::Skipped,
        ..padded.clone()
    };
    let (a, b) = (estimate(&padded).unwrap(), estimate(&unpadded).unwrap());
    // Per layer: the [1, 1, 8192, 8192] bf16 float mask SDPA keeps (128 MiB) and k, v repeated
    // from 8 to 32 heads (2 × 48 MiB more than the grouped ones), over 32 layers.
    let saved = a.peak_allocated.0 - b.peak_allocated.0;
    assert!(saved > 6 << 30 && saved < 8 << 30, "{saved}");
    // Eager attention builds its mask whatever the batch.
    let eager = |p: &Plan| {
        estimate(&Plan {
            attn: AttnImpl::Eager,
            seq: Some(1024),
            ..p.clone()
        })
        .unwrap()
        .peak_allocated
    };
    assert_eq!(eager(&padded), eager(&unpadded));
    // The key round-trips through a plan's JSON and is left out at its default.
    let json = serde_json::to_value(&unpadded).unwrap();
    assert_eq!(json["causal_mask"], "skipped");
    assert!(serde_json::to_value(&padded)
        .unwrap()
        .get("causal_mask")
        .is_none());
    assert_eq!(serde_json::from_value::<Plan>(json).unwrap(), unpadded);
}

#[test]
fn presets_and_config_import_build_the_same_model() {
    for v in common::REFERENCE_SET
        .records()
        .into_iter()
        .filter(|r| r["model"] == "gpt2" || r["model"] == "llama-small")
        .take(4)
    {
        let model = v["model"].as_str().unwrap();
        let mut from_cfg = small_plan(model);
        from_cfg.hf_config = Some(v["hf_config"].clone());
        let a = estimate(&from_cfg).unwrap();
        let b = estimate(&small_plan(model)).unwrap();
        assert_eq!(a.peak_allocated, b.peak_allocated, "{model}");
        assert_eq!(a.param_count, b.param_count, "{model}");
    }
}

fn with_config(cfg: serde_json::Value) -> Result<vram_planner::estimator::Estimate, PlanError> {
    let mut p = small_plan("custom");
    p.hf_config = Some(cfg);
    estimate(&p)
}

#[test]
fn malformed_or_unsupported_configs_are_errors() {
    for cfg in [
        json!("gpt2"),
        json!({"n_layer": 2}),
        json!({"model_type": "t5"}),
        json!({"model_type": "gpt2", "n_embd": 100, "n_head": 12}),
        json!({"model_type": "gpt2", "n_layer": 2.5}),
        json!({"model_type": "gpt2", "n_head": 0}),
        json!({"model_type": "gpt2", "attn_pdrop": "high"}),
        json!({"model_type": "gpt2", "activation_function": "gelu_fast"}),
        json!({"model_type": "bert", "vocab_size": -5}),
        json!({"model_type": "llama", "num_attention_heads": 12, "num_key_value_heads": 5}),
        json!({"model_type": "llama", "hidden_size": 96, "num_attention_heads": 32, "head_dim": 3}),
        json!({"model_type": "qwen2", "num_hidden_layers": 1e9}),
        json!({"model_type": "mistral", "tie_word_embeddings": "yes"}),
    ] {
        match with_config(cfg.clone()) {
            Err(PlanError::Estimate(EstimateError::BadHfConfig(msg))) => assert!(!msg.is_empty()),
            other => panic!("{cfg}: expected BadHfConfig, got {other:?}"),
        }
    }
}

#[test]
fn learned_positions_limit_the_sequence() {
    let mut p = small_plan("custom");
    p.hf_config = Some(json!({"model_type": "gpt2", "n_layer": 1, "n_positions": 64}));
    p.seq = Some(65);
    assert!(matches!(
        estimate(&p),
        Err(PlanError::Estimate(EstimateError::SequenceTooLong {
            max: 64,
            ..
        }))
    ));
    p.seq = Some(64);
    assert!(estimate(&p).is_ok());
    let mut b = Plan::new("bert-base");
    b.seq = Some(513);
    assert!(matches!(
        estimate(&b),
        Err(PlanError::Estimate(EstimateError::SequenceTooLong { .. }))
    ));
    // Rotary positions have no limit.
    let mut l = small_plan("llama-small");
    l.seq = Some(32_768);
    assert!(estimate(&l).is_ok());
}

#[test]
fn grouped_query_attention_and_tied_embeddings_cost_what_they_should() {
    let base = json!({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000});
    let mut gqa = base.clone();
    gqa["num_key_value_heads"] = json!(2);
    let full = with_config(base.clone()).unwrap();
    let grouped = with_config(gqa).unwrap();
    // k_proj and v_proj shrink by 4× in each of the 2 layers.
    assert_eq!(
        full.param_count - grouped.param_count,
        2 * 2 * 256 * (256 - 64)
    );
    let mut tied = base;
    tied["tie_word_embeddings"] = json!(true);
    assert_eq!(
        full.param_count - with_config(tied).unwrap().param_count,
        1000 * 256
    );
}

#[test]
fn checkpointing_every_layer_saves_memory_on_long_sequences() {
    let mut p = Plan::new("llama-small");
    p.seq = Some(2048);
    p.batch = 8;
    let none = estimate(&p).unwrap().peak_allocated;
    p.ckpt = Checkpointing::Block;
    let layer = estimate(&p).unwrap();
    assert!(layer.peak_allocated < none);
    assert!(layer.recompute_flops > 0.0);
    p.ckpt = Checkpointing::Stage;
    assert_eq!(estimate(&p).unwrap().peak_allocated, layer.peak_allocated);
    p.ckpt = Checkpointing::Sqrt;
    assert!(estimate(&p).unwrap().peak_allocated < none);
}

/// The graph stays linear in depth (its speed is measured by `cargo bench --bench estimate`, not
/// asserted here).
#[test]
fn llama_3_70b_at_8k_builds_a_bounded_tape() {
    let mut p = Plan::new("llama-3-70b");
    p.seq = Some(8192);
    p.dtype = Precision::AmpBf16;
    let g = build_graph(&p).unwrap();
    // A bounded number of ops per layer: building and replaying stay linear in depth.
    assert!(g.ops.len() < 80 * 80, "{} ops", g.ops.len());
    let e = estimate(&p).unwrap();
    assert!(e.peak_allocated.0 > 4 * e.param_count);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Any small config of each family estimates without error, in every precision and attention
    /// implementation, and the peak holds at least the weights, gradients and Adam state.
    #[test]
    fn small_configs_always_estimate(
        family in 0usize..5, layers in 1u64..4, heads in 1u64..5, kv_div in 0usize..2, hd in 1u64..5,
        seq in 1u64..40, batch in 1u64..4, prec in 0usize..4, eager in any::<bool>(), ckpt in any::<bool>(),
    ) {
        let mt = ["gpt2", "bert", "llama", "mistral", "qwen2"][family];
        let hidden = heads * hd * 8;
        let kv = if kv_div == 1 && heads % 2 == 0 { heads / 2 } else { heads };
        let cfg = json!({"model_type": mt, "n_embd": hidden, "n_layer": layers, "n_head": heads, "hidden_size": hidden,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": 3 * hidden,
            "vocab_size": 97, "n_positions": 64, "max_position_embeddings": 64});
        let mut p = Plan::new("custom");
        p.hf_config = Some(cfg);
        p.seq = Some(seq);
        p.batch = batch;
        p.dtype = [Precision::Fp32, Precision::AmpBf16, Precision::Bf16, Precision::AmpFp16][prec];
        p.attn = if eager { AttnImpl::Eager } else { AttnImpl::Sdpa };
        p.ckpt = if ckpt { Checkpointing::Block } else { Checkpointing::None };
        let e = estimate(&p).unwrap();
        prop_assert!(e.peak_allocated.0 >= e.param_bytes.0 + e.grad_bytes.0 + e.opt_state_bytes.0);
    }
}
