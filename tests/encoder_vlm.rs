//! The encoders (RoBERTa, ModernBERT) and the vision-language model (LLaVA) a `config.json`
//! brings: their config classes' defaults, the modules each modeling file runs (transformers
//! 5.24), their presets' exact parameter counts, the settings they are refused, and the measured
//! steps of `data/encoder-vlm-steps.jsonl`.

mod common;

use serde_json::json;
use vram_planner::estimator::error::EstimateError;
use vram_planner::estimator::graph::Graph;
use vram_planner::plan::{build_graph, estimate, Plan, PlanError};
use vram_planner::presets::hf::{parse, parse_model, HfModel, SUPPORTED};
use vram_planner::presets::llava::Llava;
use vram_planner::presets::models;
use vram_planner::presets::text::Arch;

fn plan(cfg: serde_json::Value, seq: u64) -> Plan {
    let mut p = Plan::new("custom");
    p.batch = 2;
    p.seq = Some(seq);
    p.hf_config = Some(cfg);
    p
}

fn graph(cfg: serde_json::Value, seq: u64) -> Graph {
    build_graph(&plan(cfg, seq)).unwrap()
}

fn names_of(g: &Graph, kind: &str) -> Vec<String> {
    g.ops
        .iter()
        .filter(|o| o.kind == kind)
        .map(|o| o.name.clone())
        .collect()
}

fn llava(cfg: &serde_json::Value) -> Llava {
    match parse_model(cfg).unwrap() {
        HfModel::Llava(m) => m,
        other => panic!("not llava: {other:?}"),
    }
}

/// A small LLaVA: a 3-layer CLIP tower on 64-pixel images in 16-pixel patches (16 features per
/// image), a 2-layer LLaMA, `extra` on top.
fn small_llava(extra: serde_json::Value) -> serde_json::Value {
    let mut cfg = json!({
        "model_type": "llava",
        "vision_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
                          "num_attention_heads": 4, "image_size": 64, "patch_size": 16},
        "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

/// Counted with transformers 5.24 on the meta device from the presets' configs
/// (`RobertaForMaskedLM`, `ModernBertForMaskedLM`, `LlavaForConditionalGeneration`).
#[test]
fn presets_have_the_exact_parameter_counts() {
    for (id, n) in [
        ("roberta-base", 124_697_433),
        ("modernbert-base", 149_655_232),
        ("llava-1.5-7b", 7_063_427_072),
    ] {
        let preset = models::find(id).unwrap();
        assert_eq!(preset.params, n, "{id}: catalogue");
        let mut p = Plan::new(id);
        p.batch = 1;
        p.seq = Some(32);
        assert_eq!(
            build_graph(&p).unwrap().param_count(),
            n,
            "{id}: built graph"
        );
        let cfg = models::text_config(id).unwrap();
        let closed = match parse_model(&cfg).unwrap() {
            HfModel::Text(tc) => tc.param_count(),
            HfModel::Llava(m) => m.param_count(),
        };
        assert_eq!(closed, n, "{id}: closed form");
        assert_eq!(
            models::text_model_type(id),
            cfg["model_type"].as_str(),
            "{id}"
        );
    }
}

#[test]
fn each_model_type_imports_with_its_config_class_defaults() {
    let r = parse(&json!({"model_type": "roberta"})).unwrap();
    assert_eq!(r.arch, Arch::Roberta);
    assert_eq!(
        (r.vocab, r.max_positions, r.position_offset),
        (50265, Some(512), 2)
    );
    let m = parse(&json!({"model_type": "modernbert"})).unwrap();
    assert_eq!(m.arch, Arch::ModernBert);
    assert_eq!(
        (m.vocab, m.hidden, m.intermediate, m.layers),
        (50368, 768, 1152, 22)
    );
    let mb = m.variant.modernbert.unwrap();
    assert_eq!(mb.half_window, 64);
    // Every third layer global, from the first.
    let globals: Vec<usize> = (0..22).filter(|&i| !mb.local[i]).collect();
    assert_eq!(globals, vec![0, 3, 6, 9, 12, 15, 18, 21]);
    assert!(!mb.norm_bias && mb.decoder_bias && !m.qkv_bias && !m.mlp_bias);
    // LLaVA without sub-configs: LLaVA's own tower defaults (CLIP ViT-L/14 at 336) and LLaMA.
    let l = llava(&json!({"model_type": "llava"}));
    assert_eq!(
        (l.vision.hidden, l.vision.layers, l.vision.grid()),
        (1024, 24, 24)
    );
    assert_eq!(l.image_tokens(), 576);
    assert_eq!(l.feature_layers, vec![23]);
    assert_eq!((l.text.hidden, l.text.vocab), (4096, 32000));
    // A given `vision_config` takes `CLIPVisionConfig`'s defaults: 224 pixels, 32-pixel patches.
    let l = llava(&json!({"model_type": "llava", "vision_config": {}}));
    assert_eq!(
        (l.vision.hidden, l.vision.layers, l.image_tokens()),
        (768, 12, 49)
    );
    let full = llava(&small_llava(
        json!({"vision_feature_select_strategy": "full"}),
    ));
    assert_eq!(full.image_tokens(), 17);
}

#[test]
fn an_unsupported_model_type_names_every_supported_one_and_bad_fields_are_refused() {
    let Err(EstimateError::BadHfConfig(msg)) = parse_model(&json!({"model_type": "t5"})) else {
        panic!("t5 must be refused");
    };
    for t in SUPPORTED {
        assert!(msg.contains(t), "{msg} lacks {t}");
    }
    for t in ["roberta", "modernbert", "llava"] {
        assert!(SUPPORTED.contains(&t));
    }
    for bad in [
        json!({"model_type": "roberta", "max_position_embeddings": 2}),
        json!({"model_type": "roberta", "pad_token_id": "one"}),
        json!({"model_type": "roberta", "add_cross_attention": true}),
        json!({"model_type": "modernbert", "hidden_size": 100, "num_attention_heads": 12}),
        json!({"model_type": "modernbert", "sparse_prediction": true}),
        json!({"model_type": "modernbert", "num_hidden_layers": 2, "layer_types": ["full_attention"]}),
        json!({"model_type": "llava", "vision_config": {"model_type": "siglip_vision_model"}}),
        json!({"model_type": "llava", "text_config": {"model_type": "bert"}}),
        json!({"model_type": "llava", "text_config": {"model_type": "t5"}}),
        json!({"model_type": "llava", "vision_config": 3}),
        json!({"model_type": "llava", "vision_feature_layer": 30}),
        json!({"model_type": "llava", "vision_feature_layer": [-2, "x"]}),
        json!({"model_type": "llava", "vision_feature_select_strategy": "cls"}),
        json!({"model_type": "llava", "image_seq_length": 577}),
        json!({"model_type": "llava", "vision_config": {"image_size": 16, "patch_size": 32}}),
    ] {
        assert!(
            matches!(parse_model(&bad), Err(EstimateError::BadHfConfig(_))),
            "{bad}"
        );
    }
    // `parse` reads language models; LLaVA's config says where its language model is.
    let Err(EstimateError::BadHfConfig(msg)) = parse(&json!({"model_type": "llava"})) else {
        panic!("parse takes language models only");
    };
    assert!(msg.contains("text_config"), "{msg}");
    // RoBERTa's positions start past the padding index: 514 rows, 512 tokens.
    let mut p = plan(
        json!({"model_type": "roberta", "max_position_embeddings": 514}),
        513,
    );
    p.batch = 1;
    assert!(matches!(
        estimate(&p),
        Err(PlanError::Estimate(EstimateError::SequenceTooLong {
            max: 512,
            ..
        }))
    ));
}

#[test]
fn roberta_counts_its_positions_from_the_input_ids() {
    let cfg = json!({"model_type": "roberta", "hidden_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256});
    let g = graph(cfg.clone(), 16);
    // `create_position_ids_from_input_ids`: per-sample int64 positions, looked up per sample.
    let cumsum: Vec<_> = g.ops.iter().filter(|o| o.kind == "cumsum").collect();
    assert_eq!(cumsum.len(), 1);
    let pos = g
        .ops
        .iter()
        .find(|o| o.name == "embeddings.position_embeddings")
        .unwrap();
    assert_eq!(g.shape(pos.outputs[0]), [2, 16, 64]);
    let linears = names_of(&g, "linear");
    assert!(linears.contains(&"lm_head.dense".to_string()));
    assert!(linears.contains(&"lm_head.decoder".to_string()));
    assert_eq!(g.param_count(), parse(&cfg).unwrap().param_count());
    // The same config as BERT differs only in those two places: BERT's positions are a `[1, S]`
    // view of its buffer.
    let mut bert = cfg.clone();
    bert["model_type"] = "bert".into();
    let b = graph(bert, 16);
    let pos = b
        .ops
        .iter()
        .find(|o| o.name == "embeddings.position_embeddings")
        .unwrap();
    assert_eq!(b.shape(pos.outputs[0]), [1, 16, 64]);
}

#[test]
fn modernbert_runs_fused_projections_rotary_and_local_masks() {
    let cfg = json!({"model_type": "modernbert", "hidden_size": 64, "intermediate_size": 96,
                     "num_hidden_layers": 3, "num_attention_heads": 4, "vocab_size": 256,
                     "local_attention": 16, "pad_token_id": 0});
    let g = graph(cfg.clone(), 32);
    let linears = names_of(&g, "linear");
    for n in [
        "layers.0.attn.Wqkv",
        "layers.2.mlp.Wi",
        "layers.2.mlp.Wo",
        "head.dense",
        "decoder",
    ] {
        assert!(linears.contains(&n.to_string()), "{n}");
    }
    // Layer 0 has no attention norm; the final norm and the head's norm are there.
    let norms = names_of(&g, "layer_norm");
    assert!(!norms.iter().any(|n| n == "layers.0.attn_norm"));
    assert!(norms.iter().any(|n| n == "layers.1.attn_norm"));
    assert!(norms.iter().any(|n| n == "final_norm"));
    // One sliding-window mask (32 tokens reach past the half-window of 8), none for the global
    // layers; two rotary tables (global and local layers).
    assert_eq!(names_of(&g, "sliding_window_mask").len(), 1);
    assert_eq!(g.ops.iter().filter(|o| o.kind == "cos").count(), 2);
    // A sequence inside the half-window needs no mask.
    let short = graph(cfg.clone(), 4);
    assert!(names_of(&short, "sliding_window_mask").is_empty());
    assert_eq!(g.param_count(), parse(&cfg).unwrap().param_count());
    // With biases everywhere.
    let mut biased = cfg.clone();
    for k in ["norm_bias", "attention_bias", "mlp_bias", "classifier_bias"] {
        biased[k] = true.into();
    }
    biased["tie_word_embeddings"] = false.into();
    assert_eq!(
        graph(biased.clone(), 32).param_count(),
        parse(&biased).unwrap().param_count()
    );
}

#[test]
fn llava_adds_the_image_tokens_and_trains_the_tower_up_to_its_feature_layer() {
    let cfg = small_llava(json!({}));
    let m = llava(&cfg);
    let g = graph(cfg.clone(), 24);
    assert_eq!(g.param_count(), m.param_count());
    // 24 text tokens and 16 image tokens per sample.
    let scatter = g.ops.iter().find(|o| o.kind == "masked_scatter").unwrap();
    assert_eq!(g.shape(scatter.outputs[0]), [2, 40, 64]);
    assert!(g
        .ops
        .iter()
        .any(|o| o.name.starts_with("language_model.layers.1")));
    // Every tower layer runs; the last one (past `vision_feature_layer` = -2) and
    // `post_layernorm` get no gradient.
    assert!(g.ops.iter().any(|o| o
        .name
        .starts_with("vision_tower.vision_model.encoder.layers.2.")));
    let layer = 4 * (64 * 64 + 64) + 2 * 2 * 64 + (64 * 128 + 128) + (128 * 64 + 64);
    assert_eq!(g.trainable_count(), m.param_count() - layer - 2 * 64);
    // The whole tower at `vision_feature_layer` = -1.
    let last = graph(small_llava(json!({"vision_feature_layer": -1})), 24);
    assert_eq!(last.trainable_count(), m.param_count() - 2 * 64);
    // Two feature layers concatenated: the projector takes twice the tower's width.
    let two = llava(&small_llava(json!({"vision_feature_layer": [-3, -2]})));
    assert_eq!(two.param_count(), m.param_count() + 64 * 64);
    // Fine-tuning with the tower frozen: only the projector and the language model train.
    let mut p = plan(cfg.clone(), 24);
    p.mode = vram_planner::estimator::config::Mode::Finetune;
    p.frozen = Some(vram_planner::estimator::tune::Frozen::Modules(vec![
        "vision_tower".into(),
    ]));
    let frozen = build_graph(&p).unwrap();
    assert_eq!(
        frozen.trainable_count(),
        m.param_count() - m.vision.param_count()
    );
    let full = estimate(&plan(cfg.clone(), 24)).unwrap();
    let part = estimate(&p).unwrap();
    assert!(part.peak_allocated < full.peak_allocated);
}

#[test]
fn llava_refuses_what_it_does_not_model() {
    use vram_planner::estimator::tune::{Frozen, Mode, Quantization};
    let cfg = small_llava(json!({}));
    let mut serve = plan(cfg.clone(), 24);
    serve.mode = Mode::Infer;
    serve.quantization = Quantization::Int8;
    // NF4 serving (QLoRA fine-tuning is modelled, `tests/qlora_steps.rs`).
    let mut qlora = plan(cfg.clone(), 24);
    qlora.mode = Mode::Infer;
    qlora.quantization = Quantization::Nf4;
    let mut blocks = plan(cfg, 24);
    blocks.mode = Mode::Finetune;
    blocks.frozen = Some(Frozen::Layers(1));
    for p in [serve, qlora, blocks] {
        match estimate(&p) {
            Err(PlanError::Estimate(EstimateError::Unsupported(m))) => {
                assert!(m.contains("llava"), "{m}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// Serving LLaVA: `context` counts the prompt's text tokens; each image adds its placeholder
/// tokens, which the prefill's language model and the KV cache take with the text. The prefill
/// runs the tower and the projector; a decode step runs the language model on the new token
/// while the tower's weights and the caller's batch stay resident.
#[test]
fn llava_serves_the_image_tokens_with_the_text() {
    use vram_planner::estimator::tune::Mode;
    let cfg = small_llava(json!({}));
    let m = llava(&cfg);
    let serve = |images: Option<u64>| {
        let mut p = plan(cfg.clone(), 24);
        p.seq = None;
        p.mode = Mode::Infer;
        p.context = Some(24);
        p.new_tokens = Some(3);
        p.images = images;
        p
    };
    let g = build_graph(&serve(Some(2))).unwrap();
    assert_eq!(g.param_count(), m.param_count());
    let scatter = g.ops.iter().find(|o| o.kind == "masked_scatter").unwrap();
    assert_eq!(g.shape(scatter.outputs[0]), [2, 24 + 2 * 16, 64]);
    let patches = g.ops.iter().find(|o| o.kind == "conv2d").unwrap();
    assert_eq!(g.shape(patches.inputs[0])[0], 2 * 2);
    let e = estimate(&serve(Some(2))).unwrap();
    let inf = e.inference.as_ref().unwrap();
    assert_eq!((inf.context, inf.image_tokens, inf.new_tokens), (24, 32, 3));
    // Two layers of keys and values, two KV heads of 16: 2·2·2·16 elements per token in fp32.
    let per_token = 2 * 2 * 2 * 16 * 4;
    assert_eq!(inf.kv_bytes_per_token.0, per_token);
    // The last decode step's cache: the prompt's 24 + 32 tokens and the first new token's.
    assert_eq!(e.kv_cache_bytes.0, 2 * per_token * (24 + 32 + 2));
    let one = estimate(&serve(None)).unwrap();
    assert_eq!(one.inference.as_ref().unwrap().image_tokens, 16);
    assert!(one.inference.unwrap().prefill_peak < inf.prefill_peak);
}

/// The measured steps of `data/encoder-vlm-steps.jsonl` (`data/PROVENANCE.md`): RoBERTa,
/// ModernBERT and LLaVA at reduced widths (SDPA and eager, fp32 and bf16 autocast), at the
/// published widths (roberta-base, ModernBERT-base, two layers of each of llava-1.5-7b's
/// stacks), and LLaVA fine-tuned with its tower frozen. Target: within 0.5 % of the measured
/// peak; every case replays to the byte.
#[test]
fn measured_steps_within_half_a_percent() {
    let cases = common::ENCODER_VLM.replay();
    assert_eq!(cases.len(), 23);
    common::assert_within(&cases, 5e-3);
    for t in ["roberta", "modernbert", "llava"] {
        let n = common::ENCODER_VLM
            .replay_where(|r| r["case_id"].as_str().unwrap_or("").contains(t))
            .len();
        assert!(n >= 6, "{t}: {n} cases");
    }
}

/// Several images per sample (`images`): the tower and the projector run on `B·n` images and
/// each image's 16 tokens add to its sample's sequence; one image is the default; a model that
/// takes no images refuses the key.
#[test]
fn llava_takes_several_images_per_sample() {
    let cfg = small_llava(json!({}));
    let with = |n: Option<u64>| {
        let mut p = plan(cfg.clone(), 24);
        p.images = n;
        p
    };
    let g = build_graph(&with(Some(3))).unwrap();
    let scatter = g.ops.iter().find(|o| o.kind == "masked_scatter").unwrap();
    assert_eq!(g.shape(scatter.outputs[0]), [2, 24 + 3 * 16, 64]);
    let patches = g.ops.iter().find(|o| o.kind == "conv2d").unwrap();
    assert_eq!(
        g.shape(patches.inputs[0])[0],
        2 * 3,
        "the tower sees every image"
    );
    assert_eq!(g.param_count(), llava(&cfg).param_count());
    let one = estimate(&with(None)).unwrap().peak_allocated;
    assert_eq!(estimate(&with(Some(1))).unwrap().peak_allocated, one);
    assert!(estimate(&with(Some(3))).unwrap().peak_allocated > one);
    let err = |p: Plan| estimate(&p).unwrap_err().to_string();
    assert!(err(with(Some(0))).contains("images"));
    let mut text_only = plan(
        json!({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256}),
        24,
    );
    text_only.images = Some(2);
    assert!(err(text_only).contains("takes none"));
}
