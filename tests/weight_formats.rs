//! Serving in the weight formats the official checkpoints ship: DeepSeek-V3's block-wise FP8
//! (e4m3 weights with an fp32 scale per 128×128 tile, activations quantized per token in groups
//! of 128) and gpt-oss's MXFP4 experts (FP4 values with an E8M0 scale per 32). Weight bytes are
//! exact integers from the architecture; the op stream follows transformers'
//! `integrations/finegrained_fp8.py` and `integrations/mxfp4.py`.

use serde_json::json;
use vram_planner::estimator::config::Precision;
use vram_planner::estimator::tune::{fp8_weight_bytes, mxfp4_weight_bytes, Mode, Quantization};
use vram_planner::plan::{build_graph, estimate, Plan};

fn serve(model: &str, quant: Quantization) -> Plan {
    let mut p = Plan::new(model);
    p.mode = Mode::Infer;
    p.context = Some(16);
    p.new_tokens = Some(1);
    p.batch = 1;
    p.dtype = Precision::Bf16;
    p.quantization = quant;
    p
}

fn refusal(p: &Plan) -> String {
    match estimate(p) {
        Ok(_) => panic!("{} in {} was accepted", p.model, p.quantization.key()),
        Err(e) => e.to_string(),
    }
}

/// Every linear FP8 converts in DeepSeek-V3 (`deepseek-ai/DeepSeek-V3` config.json), as
/// `[out, in]` with its count: MLA's five projections in 61 layers, the dense MLP of the first
/// three, and in the other 58 the shared expert and 256 routed experts (each expert's
/// `gate_up_proj` one `[2I, H]` matrix, as `FP8Expert` stores and tiles it).
fn deepseek_v3_fp8_linears() -> Vec<(u64, u64, u64)> {
    let (h, heads, qr, kvr, rope, nope, vd) = (7168, 128, 1536, 512, 64, 128, 128);
    vec![
        (qr, h, 61),
        (heads * (nope + rope), qr, 61),
        (kvr + rope, h, 61),
        (heads * (nope + vd), kvr, 61),
        (h, heads * vd, 61),
        (18432, h, 2 * 3),
        (h, 18432, 3),
        (2048, h, 2 * 58),
        (h, 2048, 58),
        (2 * 2048, h, 256 * 58),
        (h, 2048, 256 * 58),
    ]
}

#[test]
fn deepseek_v3_in_fp8_halves_its_linears_and_adds_one_scale_per_tile() {
    let dense = estimate(&serve("deepseek-v3", Quantization::None))
        .unwrap()
        .weights_bytes
        .0;
    let fp8 = estimate(&serve("deepseek-v3", Quantization::Fp8))
        .unwrap()
        .weights_bytes
        .0;
    let linears = deepseek_v3_fp8_linears();
    let bf16: u64 = linears.iter().map(|&(o, i, n)| n * 2 * o * i).sum();
    let e4m3: u64 = linears
        .iter()
        .map(|&(o, i, n)| n * fp8_weight_bytes(o, i))
        .sum();
    assert_eq!(dense - fp8, bf16 - e4m3);
    // 669.1 billion of the model's 671B weights are FP8; the embeddings, head, norms and
    // routers (1.9B) keep bf16.
    let converted: u64 = linears.iter().map(|&(o, i, n)| n * o * i).sum();
    assert_eq!(converted, 669_065_609_216);
}

#[test]
fn gpt_oss_120b_in_mxfp4_fits_one_80_gb_gpu_and_in_bf16_does_not() {
    // OpenAI's gpt-oss model card: the 120b model runs on a single 80 GB GPU thanks to MXFP4
    // experts. 36 layers of 128 experts, H = I = 2880.
    let dense = estimate(&serve("gpt-oss-120b", Quantization::None)).unwrap();
    let mx = estimate(&serve("gpt-oss-120b", Quantization::Mxfp4)).unwrap();
    let n = 36 * 128 * (2 * 2880 * 2880 + 2880 * 2880);
    let biases = 36 * 128 * (2 * 2880 + 2880);
    // Expert weights leave bf16 for 4.25 bits; their biases go from bf16 to fp32.
    assert_eq!(
        dense.weights_bytes.0 - mx.weights_bytes.0,
        2 * n - mxfp4_weight_bytes(n) - 2 * biases
    );
    assert_eq!(mx.param_count, dense.param_count);
    let g = build_graph(&serve("gpt-oss-120b", Quantization::Mxfp4)).unwrap();
    let count = |kind: &str| g.ops.iter().filter(|o| o.kind == kind).count();
    // Per layer: the triton routing (top-k, then the sort) and two grouped GEMMs, no loop.
    assert_eq!(count("matmul_ogs"), 2 * 36);
    assert_eq!(count("routing_sort"), 36);
    assert_eq!(count("index_add"), 0);
    let gb80 = 80_000_000_000u64;
    assert!(mx.device_total.0 < gb80, "{}", mx.device_total.0);
    assert!(dense.device_total.0 > gb80, "{}", dense.device_total.0);
}

fn fp8_llama() -> serde_json::Value {
    json!({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 1000, "tie_word_embeddings": false})
}

#[test]
fn every_fp8_linear_quantizes_its_input_and_the_copy_dies_with_the_product() {
    let mut p = serve("custom", Quantization::Fp8);
    p.hf_config = Some(fp8_llama());
    let g = build_graph(&p).unwrap();
    let quant: Vec<_> = g.ops.iter().filter(|o| o.kind == "act_quant").collect();
    let mm: Vec<_> = g.ops.iter().filter(|o| o.kind == "fp8_block_mm").collect();
    // q, k, v, o, gate, up, down in each of two layers; the head stays bf16.
    assert_eq!(quant.len(), 14);
    assert_eq!(mm.len(), 14);
    for (q, m) in quant.iter().zip(&mm) {
        assert_eq!(m.inputs[..2], q.outputs[..]);
        let readers = g
            .ops
            .iter()
            .filter(|o| o.inputs.iter().any(|t| q.outputs.contains(t)))
            .count();
        assert_eq!(readers, 1, "only the product reads the quantized copy");
        // The e4m3 copy has the input's shape; its scales one fp32 per group of 128.
        let x = &g.tensors[q.inputs[0]];
        let (copy, scales) = (&g.tensors[q.outputs[0]], &g.tensors[q.outputs[1]]);
        assert_eq!(copy.shape, x.shape);
        assert_eq!(
            scales.shape.last().copied().unwrap() * 128,
            x.shape.last().copied().unwrap()
        );
    }
    assert!(g
        .ops
        .iter()
        .any(|o| o.name.ends_with("lm_head") && o.kind != "fp8_block_mm"));
}

#[test]
fn formats_are_refused_where_the_checkpoints_do_not_use_them() {
    let msg = refusal(&serve("llama-3-8b", Quantization::Mxfp4));
    assert!(msg.contains("gpt-oss"), "{msg}");
    let msg = refusal(&serve("gpt-oss-20b", Quantization::Fp8));
    assert!(msg.contains("mxfp4"), "{msg}");
    let mut train = serve("deepseek-v3", Quantization::Fp8);
    train.mode = Mode::Train;
    train.context = None;
    train.new_tokens = None;
    train.seq = Some(16);
    let msg = refusal(&train);
    assert!(msg.contains("inference"), "{msg}");
    let msg = refusal(&serve("mixtral-8x7b", Quantization::Int8));
    assert!(msg.contains("fp8"), "{msg}");
    let mut odd = serve("custom", Quantization::Fp8);
    let mut cfg = fp8_llama();
    cfg["hidden_size"] = json!(200);
    cfg["num_attention_heads"] = json!(4);
    odd.hf_config = Some(cfg);
    let msg = refusal(&odd);
    assert!(msg.contains("groups of 128"), "{msg}");
}

#[test]
fn mixtral_serves_in_fp8_with_its_experts_converted() {
    let dense = estimate(&serve("mixtral-8x7b", Quantization::None)).unwrap();
    let fp8 = estimate(&serve("mixtral-8x7b", Quantization::Fp8)).unwrap();
    // Attention (q, k, v, o) and 8 experts of [2·14336, 4096] and [4096, 14336] in 32 layers.
    let linears = [
        (4096u64, 4096u64, 32u64 * 2),
        (1024, 4096, 32 * 2),
        (2 * 14336, 4096, 32 * 8),
        (4096, 14336, 32 * 8),
    ];
    let saved: u64 = linears
        .iter()
        .map(|&(o, i, n)| n * (2 * o * i - fp8_weight_bytes(o, i)))
        .sum();
    assert_eq!(dense.weights_bytes.0 - fp8.weights_bytes.0, saved);
}

#[test]
fn gpt_oss_weights_match_the_published_checkpoint_sizes() {
    // OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card" (2025), table 1: checkpoint sizes 60.8 GiB
    // and 12.8 GiB (MXFP4 experts, the rest bf16). The checkpoint stores the experts' biases in
    // bf16; `Mxfp4GptOssExperts` holds them in fp32, two bytes more each on the device.
    for (model, layers, experts, published_gib) in [
        ("gpt-oss-120b", 36u64, 128u64, 60.8),
        ("gpt-oss-20b", 24, 32, 12.8),
    ] {
        let e = estimate(&serve(model, Quantization::Mxfp4)).unwrap();
        let fp32_bias_extra = 2 * layers * experts * (2 * 2880 + 2880);
        let checkpoint = (e.weights_bytes.0 - fp32_bias_extra) as f64 / (1u64 << 30) as f64;
        assert!(
            (checkpoint - published_gib).abs() < 0.05,
            "{model}: {checkpoint:.3} GiB against the card's {published_gib} GiB"
        );
    }
}
