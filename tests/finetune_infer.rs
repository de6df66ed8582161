//! Fine-tuning, inference and compression: exact integers (LoRA adapter parameters, KV-cache
//! bytes, NF4 weight bytes), the measured steps of `data/finetune-infer-steps.jsonl` within
//! 0.5 %, and the properties the modes must have (frozen parameters have no gradients or
//! optimizer state, inference keeps no training state, 2:4 sparsity halves weights but not
//! activations, QLoRA's fp32 upcast costs activation memory, the solvers find exact boundaries).

mod common;

use vram_planner::estimator::config::{
    Checkpointing, Frozen, KvDtype, LoraConfig, Mode, OptimizerKind, Precision, Quantization,
    Sparsity,
};
use vram_planner::estimator::error::EstimateError;
use vram_planner::estimator::timeline::Category;
use vram_planner::estimator::tune::{kv_cache_bytes, lora_params, nf4_weight_bytes};
use vram_planner::estimator::units::{Bytes, DType};
use vram_planner::estimator::Estimate;
use vram_planner::plan::fit::{compare, context_sweep, max_batch, max_context};
use vram_planner::plan::{build_graph, estimate};
use vram_planner::plan::{Plan, PlanError};

fn lora(rank: u64, alpha: f64, targets: &[&str]) -> LoraConfig {
    LoraConfig {
        rank,
        alpha,
        targets: targets.iter().map(|t| t.to_string()).collect(),
        dropout: 0.0,
    }
}

fn finetune(model: &str, seq: u64, batch: u64) -> Plan {
    let mut p = Plan::new(model);
    p.mode = Mode::Finetune;
    p.seq = Some(seq);
    p.batch = batch;
    p.dtype = Precision::Bf16;
    p.opt = OptimizerKind::Adamw;
    p
}

fn infer(model: &str, context: u64, new_tokens: u64, batch: u64) -> Plan {
    let mut p = Plan::new(model);
    p.mode = Mode::Infer;
    p.context = Some(context);
    p.new_tokens = Some(new_tokens);
    p.batch = batch;
    p.dtype = Precision::Bf16;
    p
}

// ---------------------------------------------------------------- exact integers

#[test]
fn lora_adapters_of_llama_2_7b_rank_16_on_q_k_v_o() {
    // 32 layers × 4 projections × r·(in + out) = 32 · 4 · 16 · (4096 + 4096) = 16,777,216.
    assert_eq!(32 * 4 * lora_params(4096, 4096, 16), 16_777_216);
    let mut p = finetune("llama-2-7b", 16, 1);
    p.lora = Some(lora(16, 32.0, &["q", "k", "v", "o"]));
    let g = build_graph(&p).unwrap();
    assert_eq!(g.trainable_count(), 16_777_216);
    assert_eq!(g.param_count(), 6_738_415_616 + 16_777_216);
    let e = estimate(&p).unwrap();
    assert_eq!(e.trainable_params, 16_777_216);
    // fp32 adapters: their gradients, and AdamW's two fp32 moments.
    assert_eq!(e.grad_bytes, Bytes(4 * 16_777_216));
    assert_eq!(e.opt_state_bytes, Bytes(2 * 4 * 16_777_216));
}

#[test]
fn kv_cache_of_llama_2_70b_4096_tokens_bf16() {
    // 2 (K and V) · 80 layers · 8 KV heads · 128 · 4096 tokens · 2 bytes = 1,342,177,280.
    assert_eq!(
        kv_cache_bytes(80, 8, 128, 1, 4096, DType::BF16).unwrap(),
        Bytes(1_342_177_280)
    );
    let e = estimate(&infer("llama-2-70b", 4096, 1, 1)).unwrap();
    assert_eq!(e.kv_cache_bytes, Bytes(1_342_177_280));
    assert_eq!(
        e.inference.as_ref().unwrap().kv_bytes_per_token,
        Bytes(327_680)
    );
    // Without grouped-query attention (64 KV heads) the cache would be 8× larger.
    assert_eq!(
        kv_cache_bytes(80, 64, 128, 1, 4096, DType::BF16).unwrap(),
        Bytes(8 * 1_342_177_280)
    );
}

#[test]
fn kv_cache_dtype_and_gqa_per_token() {
    // Llama 3 8B: 32 layers, 8 KV heads of 128: 2·32·8·128·2 = 131,072 bytes per token in bf16.
    let mut p = infer("llama-3-8b", 1000, 1, 2);
    let e = estimate(&p).unwrap();
    assert_eq!(
        e.inference.as_ref().unwrap().kv_bytes_per_token,
        Bytes(131_072)
    );
    assert_eq!(e.kv_cache_bytes, Bytes(131_072 * 1000 * 2));
    p.kv_cache_dtype = Some(KvDtype::Fp8);
    assert_eq!(
        estimate(&p).unwrap().kv_cache_bytes,
        Bytes(65_536 * 1000 * 2)
    );
    // Multi-query attention: one KV head.
    let mut m = Plan::new("mqa");
    m.hf_config = Some(
        serde_json::json!({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 1, "vocab_size": 32000}),
    );
    m.mode = Mode::Infer;
    m.context = Some(100);
    m.batch = 1;
    m.dtype = Precision::Fp16;
    assert_eq!(
        estimate(&m).unwrap().kv_cache_bytes,
        Bytes(2 * 4 * 128 * 100 * 2)
    );
}

/// NF4 weights of Llama 2 7B, by hand. The quantized linears are the 7 projections of each of the
/// 32 blocks: q, k, v, o are 4096×4096 = 16,777,216 elements, gate, up, down 4096×11008 =
/// 45,088,768; 224 weights of 6,476,005,376 elements in all. Embeddings (32000×4096), the output
/// head (32000×4096) and the 65 RMSNorm weights (4096) stay bf16: 262,410,240 × 2 = 524,820,480 B.
///
/// Without double quantization each weight stores n/2 packed bytes, an fp32 absmax per 64
/// elements (n/16 bytes) and the 16-entry fp32 NF4 code (64 B):
/// 3,238,002,688 + 404,750,336 + 224·64 = 3,642,767,360 B; with the bf16 rest 4,167,587,840 B.
///
/// With double quantization the absmax become uint8 (n/64 = 101,187,584 B), plus an fp32 absmax
/// per 256 of them (q-shaped: 262,144 blocks → 1,024 → 4,096 B; MLP-shaped: 704,512 → 2,752 →
/// 11,008 B; per layer 4·4,096 + 3·11,008 = 49,408, in all 1,581,056 B), an fp32 offset per weight
/// (896 B), the codes (14,336 B), each weight's copy of the 256-entry fp32 dynamic map of the
/// second level (224·1,024 = 229,376 B) and the cached original of that map (1,024 B):
/// 3,238,002,688 + 101,187,584 + 1,581,056 + 896 + 14,336 + 229,376 + 1,024 = 3,341,016,960 B;
/// with the bf16 rest 3,865,837,440 B.
#[test]
fn nf4_weight_bytes_of_llama_2_7b_with_and_without_double_quantization() {
    let (q, mlp) = (4096u64 * 4096, 4096u64 * 11008);
    let closed = |dq: bool| {
        32 * (4 * nf4_weight_bytes(q, 64, dq) + 3 * nf4_weight_bytes(mlp, 64, dq))
            + if dq { 1024 } else { 0 }
    };
    assert_eq!(closed(false), 3_642_767_360);
    assert_eq!(closed(true), 3_341_016_960);
    let mut p = infer("llama-2-7b", 16, 1, 1);
    p.quantization = Quantization::Nf4;
    assert_eq!(estimate(&p).unwrap().weights_bytes, Bytes(4_167_587_840));
    p.double_quant = true;
    assert_eq!(estimate(&p).unwrap().weights_bytes, Bytes(3_865_837_440));
}

#[test]
fn int8_int4_and_sparse_weight_bytes() {
    // Llama 2 7B blocks: 6,476,005,376 weights in 224 matrices; the rest 524,820,480 B of bf16.
    let rest = 524_820_480u64;
    let n = 6_476_005_376u64;
    let w = |q: Quantization, s: Sparsity| {
        let mut p = infer("llama-2-7b", 16, 1, 1);
        p.quantization = q;
        p.sparsity = s;
        estimate(&p).unwrap().weights_bytes.0
    };
    let dense = w(Quantization::None, Sparsity::None);
    assert_eq!(dense, rest + 2 * n);
    // INT8 weight-only: 1 byte each plus a bf16 scale per output row (32·(4·4096 + 2·11008 + 4096)).
    let rows = 32 * (4 * 4096 + 2 * 11008 + 4096);
    assert_eq!(w(Quantization::Int8, Sparsity::None), rest + n + 2 * rows);
    // INT4, groups of 128 input elements with an fp16 scale and a 4-bit zero each.
    let groups = n / 128;
    assert_eq!(
        w(Quantization::Int4, Sparsity::None),
        rest + n / 2 + 2 * groups + groups / 2
    );
    // 2:4 on bf16: half the values plus 1 bit of metadata per dense element: 9/16 of dense.
    assert_eq!(w(Quantization::None, Sparsity::TwoFour), rest + n + n / 8);
    assert_eq!(
        w(Quantization::Int8, Sparsity::TwoFour),
        rest + n / 2 + n / 8 + 2 * rows
    );
}

// ---------------------------------------------------------------- measured steps

/// Steps measured with a copy of the reference harness extended with peft 0.21, bitsandbytes
/// 0.50 and a `DynamicCache` forward (see `data/PROVENANCE.md`); each record holds its `plan`.
/// The modelling is op by op: every training peak, prefill peak and decode peak within 0.5 %.
#[test]
fn measured_fine_tuning_and_inference_steps_within_half_a_percent() {
    let cases = common::FINETUNE_INFER.replay();
    assert_eq!(cases.len(), 13);
    for r in &cases {
        assert_eq!(r.record["ok"], true, "{}", r.case.case_id);
    }
    common::assert_within(&cases, 0.005);
}

/// The measured training steps' trainable parameters and optimizer-state bytes, exactly.
#[test]
fn measured_trainable_parameters_and_optimizer_state_are_exact() {
    let training: Vec<_> = common::FINETUNE_INFER
        .records()
        .into_iter()
        .filter(|r| r["kind"] != "infer")
        .collect();
    assert!(!training.is_empty());
    for r in &training {
        let id = r["case_id"].as_str().unwrap();
        let e = estimate(&common::plan_of(r)).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(
            e.trainable_params,
            r["trainable_params"].as_u64().unwrap(),
            "{id}"
        );
        assert_eq!(
            e.opt_state_bytes.0,
            r["opt_state_bytes"].as_u64().unwrap(),
            "{id}: optimizer state"
        );
    }
}

#[test]
fn quantization_state_measured_equals_the_closed_form() {
    // llama-small (8 blocks of 1024×1024 ×4 and 1024×2816 ×3), double-quantized NF4: the tracked
    // quantization tensors (absmax u8, second-level absmax, offset, codes, each weight's copy of
    // the dynamic map and the cached original).
    let r = common::FINETUNE_INFER
        .records()
        .into_iter()
        .find(|r| r["case_id"] == "qlora-all-r16-dq/llama-small/L512/b4/amp_bf16")
        .unwrap();
    let (q, mlp) = (1024u64 * 1024, 1024u64 * 2816);
    let consts = |n: u64| nf4_weight_bytes(n, 64, true) - n / 2;
    let want = 8 * (4 * consts(q) + 3 * consts(mlp)) + 1024;
    assert_eq!(r["quant_state_bytes"].as_u64().unwrap(), want);
}

// ---------------------------------------------------------------- modes

#[test]
fn frozen_layers_have_no_gradients_or_optimizer_state() {
    let mut p = finetune("llama-small", 128, 2);
    let full = estimate(&p).unwrap();
    p.frozen = Some(Frozen::Layers(4));
    let part = estimate(&p).unwrap();
    // llama-small: embeddings 32000×1024; a block is 4·1024² + 3·1024·2816 + 2·1024 = 12,847,104.
    assert_eq!(
        full.trainable_params - part.trainable_params,
        32000 * 1024 + 4 * 12_847_104
    );
    assert_eq!(part.param_count, full.param_count);
    assert!(part.peak_allocated < full.peak_allocated);
    // Module paths freeze the same parameters.
    p.frozen = Some(Frozen::Modules(vec![
        "embed_tokens".into(),
        "layers.0".into(),
        "layers.1".into(),
        "layers.2".into(),
        "layers.3".into(),
    ]));
    assert_eq!(
        estimate(&p).unwrap().trainable_params,
        part.trainable_params
    );
    // Freezing the first layers of a CNN by module path.
    let mut r = Plan::new("resnet18");
    r.mode = Mode::Finetune;
    r.batch = 4;
    r.frozen = Some(Frozen::Modules(vec![
        "conv1".into(),
        "bn1".into(),
        "layer1".into(),
    ]));
    let e = estimate(&r).unwrap();
    assert!(e.trainable_params < 11_689_512 && e.trainable_params > 11_000_000);
}

#[test]
fn frozen_activations_are_not_saved_before_the_first_trainable_layer() {
    // With everything but the last block frozen, the earlier blocks save nothing for backward.
    let mut p = finetune("llama-small", 256, 2);
    p.frozen = Some(Frozen::Layers(7));
    let e = estimate(&p).unwrap();
    let saved: Vec<_> = e
        .layers
        .iter()
        .filter(|l| l.layer.starts_with("layers."))
        .map(|l| l.layer.clone())
        .collect();
    assert_eq!(saved, vec!["layers.7".to_string()], "{:?}", e.layers);
}

#[test]
fn qlora_holds_more_activations_than_lora() {
    // Llama 3 8B, sequence 2048: LoRA on bf16 weights keeps bf16 activations; QLoRA's
    // prepare_model_for_kbit_training upcasts embeddings, norms and the head to fp32, so the
    // residual stream and every 4-bit layer's output (`.to(inp_dtype)`) are fp32.
    let mut l = finetune("llama-3-8b", 2048, 1);
    l.lora = Some(lora(16, 32.0, &["all"]));
    l.ckpt = Checkpointing::Block;
    let mut q = l.clone();
    q.quantization = Quantization::Nf4;
    q.double_quant = true;
    q.dtype = Precision::AmpBf16;
    let (el, eq) = (estimate(&l).unwrap(), estimate(&q).unwrap());
    assert!(
        eq.weights_bytes.0 * 2 < el.weights_bytes.0,
        "4-bit weights: {} vs {}",
        eq.weights_bytes,
        el.weights_bytes
    );
    let acts = |e: &Estimate| {
        e.timeline
            .events
            .iter()
            .map(|ev| ev.live.get(Category::Activations).0 + ev.live.get(Category::BackwardTemps).0)
            .max()
            .unwrap()
    };
    assert!(
        acts(&eq) > acts(&el),
        "QLoRA activations {} vs LoRA {}",
        acts(&eq),
        acts(&el)
    );
    assert!(
        eq.peak_allocated < el.peak_allocated,
        "but the weights more than make up for it"
    );
}

#[test]
fn eight_bit_and_paged_optimizers() {
    let mut p = finetune("llama-small", 128, 1);
    p.opt = OptimizerKind::Adamw;
    let adam = estimate(&p).unwrap();
    p.opt = OptimizerKind::Adamw8bit;
    let a8 = estimate(&p).unwrap();
    // bf16 AdamW keeps 4 bytes per parameter; 8-bit keeps 2 plus block statistics (about 8/256).
    let n = 168_313_856f64;
    assert_eq!(adam.opt_state_bytes.0 as f64, 4.0 * n);
    let per = a8.opt_state_bytes.0 as f64 / n;
    assert!((2.0..2.1).contains(&per), "{per}");
    p.opt = OptimizerKind::PagedAdamw8bit;
    let paged = estimate(&p).unwrap();
    assert_eq!(paged.paged_opt_state_bytes, a8.opt_state_bytes);
    assert_eq!(paged.category(Category::OptimizerState), Bytes::ZERO);
    assert!(paged.peak_allocated < a8.peak_allocated);
}

#[test]
fn inference_keeps_no_training_state() {
    let mut p = Plan::new("resnet50");
    p.batch = 32;
    let train = estimate(&p).unwrap();
    p.mode = Mode::Infer;
    let e = estimate(&p).unwrap();
    assert_eq!(e.grad_bytes, Bytes::ZERO);
    assert_eq!(e.opt_state_bytes, Bytes::ZERO);
    assert_eq!(e.trainable_params, 0);
    for c in [
        Category::Gradients,
        Category::OptimizerState,
        Category::BackwardTemps,
        Category::OptimizerTemps,
    ] {
        assert_eq!(e.category(c), Bytes::ZERO, "{c:?}");
    }
    assert!(
        e.peak_allocated.0 * 4 < train.peak_allocated.0,
        "{} vs {}",
        e.peak_allocated,
        train.peak_allocated
    );
    // Resolution and batch still scale it.
    p.res = Some(384);
    assert!(estimate(&p).unwrap().peak_allocated > e.peak_allocated);
}

#[test]
fn sparsity_saves_weights_not_activations() {
    let dense = estimate(&infer("llama-2-7b", 2048, 1, 1)).unwrap();
    let mut p = infer("llama-2-7b", 2048, 1, 1);
    p.sparsity = Sparsity::TwoFour;
    let sparse = estimate(&p).unwrap();
    assert!(sparse.weights_bytes.0 * 10 < dense.weights_bytes.0 * 6);
    assert_eq!(
        sparse.category(Category::Activations),
        dense.category(Category::Activations)
    );
    assert_eq!(sparse.kv_cache_bytes, dense.kv_cache_bytes);
}

#[test]
fn prefill_against_decode() {
    // A long prompt: the prefill's activations dominate; the last decode step holds the longer
    // cache with one token's activations.
    let e = estimate(&infer("llama-3-8b", 8192, 512, 1)).unwrap();
    let inf = e.inference.clone().unwrap();
    let d = inf.decode_peak.unwrap();
    assert!(inf.prefill_peak > d);
    assert_eq!(e.peak_allocated, inf.prefill_peak);
    assert_eq!(e.kv_cache_bytes, Bytes(131_072 * (8192 + 511)));
    // A short prompt and a long generation: decode is the peak.
    let e = estimate(&infer("llama-3-8b", 16, 32_000, 1)).unwrap();
    let inf = e.inference.unwrap();
    assert!(inf.decode_peak.unwrap() > inf.prefill_peak);
}

#[test]
fn the_solvers_find_exact_boundaries() {
    let cap = Bytes(24 << 30);
    let mut p = infer("llama-3-8b", 1, 256, 1);
    p.quantization = Quantization::Int4;
    let c = max_context(&p, cap).unwrap().unwrap();
    let at = |c: u64| {
        let mut q = p.clone();
        q.context = Some(c);
        estimate(&q).unwrap().device_total
    };
    assert!(at(c) <= cap && at(c + 1) > cap, "{c}");
    let mut f = finetune("llama-3-8b", 2048, 1);
    f.lora = Some(lora(16, 32.0, &["all"]));
    f.ckpt = Checkpointing::Block;
    let b = max_batch(&f, cap).unwrap().unwrap();
    let at = |b: u64| {
        let mut q = f.clone();
        q.batch = b;
        estimate(&q).unwrap().device_total
    };
    assert!(at(b) <= cap && at(b + 1) > cap, "{b}");
    // Nothing fits a 1 GiB card.
    assert_eq!(max_context(&p, Bytes(1 << 30)).unwrap(), None);
}

#[test]
fn context_sweep_has_the_kv_cache_band() {
    let pts = context_sweep(&infer("llama-3-8b", 1, 1, 1), &[1024, 4096, 16384]);
    assert_eq!(pts.len(), 3);
    let kv: Vec<u64> = pts
        .iter()
        .map(|p| {
            p.by_category
                .iter()
                .find(|(c, _)| *c == Category::KvCache)
                .unwrap()
                .1
                 .0
        })
        .collect();
    assert_eq!(kv, vec![131_072 * 1024, 131_072 * 4096, 131_072 * 16384]);
}

#[test]
fn depthwise_separable_against_standard_convolutions() {
    let plans: Vec<Plan> = ["mobilenet_v2", "resnet50"]
        .iter()
        .map(|m| {
            let mut p = Plan::new(m);
            p.batch = 32;
            p
        })
        .collect();
    let r = compare(&plans);
    let (m, r) = (r[0].as_ref().unwrap(), r[1].as_ref().unwrap());
    assert!(m.param_count * 7 < r.param_count);
    assert!(m.forward_flops * 10.0 < r.forward_flops);
    assert!(m.peak_allocated < r.peak_allocated);
}

#[test]
fn options_that_do_not_apply_are_refused() {
    let unsupported = |p: &Plan| {
        matches!(
            estimate(p),
            Err(PlanError::Estimate(EstimateError::Unsupported(_)))
        )
    };
    let mut p = Plan::new("llama-small");
    p.lora = Some(lora(8, 8.0, &["q"]));
    assert!(unsupported(&p), "LoRA in a pre-training plan");
    let mut p = finetune("llama-small", 64, 1);
    p.quantization = Quantization::Nf4;
    assert!(unsupported(&p), "NF4 without adapters");
    p.quantization = Quantization::Int4;
    p.lora = Some(lora(8, 8.0, &["q"]));
    assert!(unsupported(&p), "INT4 training");
    let mut p = finetune("llama-small", 64, 1);
    p.kv_cache_dtype = Some(KvDtype::Int8);
    assert!(unsupported(&p), "KV cache when training");
    let mut p = finetune("gpt2", 64, 1);
    p.lora = Some(lora(8, 8.0, &["q"]));
    assert!(unsupported(&p), "LoRA targets of GPT-2");
    let mut p = finetune("llama-small", 64, 1);
    p.lora = Some(lora(8, 8.0, &["c_attn"]));
    assert!(unsupported(&p), "unknown target");
    let mut p = infer("llama-small", 64, 2, 1);
    p.ckpt = Checkpointing::Block;
    assert!(unsupported(&p), "checkpointing in inference");
    let mut p = infer("gpt2", 64, 2, 1);
    assert!(unsupported(&p), "GPT-2 decode");
    p.new_tokens = Some(1);
    assert!(estimate(&p).is_ok(), "GPT-2 forward");
    let mut p = infer("llama-small", 64, 1, 1);
    p.context = Some(0);
    assert!(estimate(&p).is_err());
    // Unknown keys stay refused; the new keys parse.
    assert!(serde_json::from_str::<Plan>(r#"{"model": "llama-small", "loras": {}}"#).is_err());
    let p: Plan = serde_json::from_str(r#"{"model": "llama-3-8b", "mode": "finetune", "lora": {"rank": 16, "alpha": 32, "targets": ["q", "k", "v", "o"]}, "quantization": "nf4", "double_quant": true, "optimizer": "paged_adamw8bit", "frozen": 2}"#).unwrap();
    assert_eq!(p.opt, OptimizerKind::PagedAdamw8bit);
    let p: Plan = serde_json::from_str(r#"{"model": "llama-3-8b", "mode": "infer", "quantization": "int4", "kv_cache_dtype": "fp8", "sparsity": "none", "context": 4096, "new_tokens": 128}"#).unwrap();
    assert!(estimate(&p).is_ok());
    let p: Plan =
        serde_json::from_str(r#"{"model": "llama-3-8b", "mode": "infer", "sparsity": "2:4"}"#)
            .unwrap();
    assert_eq!(p.sparsity, Sparsity::TwoFour);
}
