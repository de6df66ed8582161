//! What the integration tests share: the measured-step files of `tests/data` (their provenance in
//! `tests/data/PROVENANCE.md`), the one replay that estimates each record and compares it with
//! its measurement, and `assert_close`. Each test file that needs one says `mod common;`.

// Every test file compiles its own copy of this module and uses only part of it.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use vram_planner::cli::reference::{as_measured, compare_line, Compared, Record};
use vram_planner::plan::Plan;

/// One measured-step file of `tests/data`: JSON lines in the `cli::reference` formats (the
/// shared reference set's flat records, or records carrying their own `plan`).
pub struct Measured {
    pub name: &'static str,
    pub text: &'static str,
}

macro_rules! measured {
    ($name:literal) => {
        Measured {
            name: $name,
            text: include_str!(concat!("../data/", $name)),
        }
    };
}

/// The shared reference set: CNNs, ViTs, language models and the LSTM, on CUDA and the CPU.
pub const REFERENCE_SET: Measured = measured!("pytorch-step-memory.jsonl");
/// Autocast in fp16: CNNs, ViT, GPT-2, LLaMA with SDPA and eager attention.
pub const AMP_FP16: Measured = measured!("amp-fp16-steps.jsonl");
/// MobileNetV2, ConvNeXt-T and the checkpointing modes the reference set lacks.
pub const CNN_EXTRA: Measured = measured!("cnn-extra-step-memory.jsonl");
/// ResNets under `checkpoint_sequential` over their residual blocks.
pub const RESNET_SEGMENTS: Measured = measured!("resnet-segments-steps.jsonl");
/// Every image model at the smallest resolution it takes.
pub const SMALL_RES: Measured = measured!("small-res-steps.jsonl");
/// Language-model presets and paths the reference set lacks (GQA, tied, eager under autocast).
pub const TEXT_EXTRA: Measured = measured!("text-extra-steps.jsonl");
/// Language models under `checkpoint_sequential`-style segments over their layers.
pub const TEXT_SEGMENTS: Measured = measured!("text-segments-steps.jsonl");
/// Unpadded batches: no causal mask, `enable_gqa`.
pub const UNPADDED: Measured = measured!("unpadded-steps.jsonl");
/// ViT-L/16, pure bf16, other resolutions, the native LSTM in bf16 and under autocast.
pub const VIT_LSTM: Measured = measured!("vit-lstm-oracle.jsonl");
/// ViTs under per-block segments.
pub const VIT_SEGMENTS: Measured = measured!("vit-segments-steps.jsonl");
/// ViT and LSTM steps on the CPU's kernels.
pub const CPU: Measured = measured!("cpu-oracle.jsonl");
/// LoRA, QLoRA, frozen layers and serving (prefill and decode peaks); records carry a `plan`.
pub const FINETUNE_INFER: Measured = measured!("finetune-infer-steps.jsonl");
/// One rank of real FSDP2 steps.
pub const FSDP2: Measured = measured!("fsdp2-steps.jsonl");
/// One rank of real DDP steps.
pub const DDP: Measured = measured!("ddp-steps.jsonl");
/// One rank of real DDP + `ZeroRedundancyOptimizer` steps.
pub const ZERO1: Measured = measured!("zero1-steps.jsonl");
/// Qwen3, Phi-3, OLMo 2, Gemma 2 and 3 (two layers, published widths, fake CUDA) and the
/// mixtures of experts (two layers, reduced widths, real CPU tensors, balanced routing).
pub const VARIANTS: Measured = measured!("variant-steps.jsonl");
/// RoBERTa and ModernBERT (masked LM) and LLaVA (CLIP tower, projector, LLaMA), at reduced and
/// published widths, on the fake CUDA device.
pub const ENCODER_VLM: Measured = measured!("encoder-vlm-steps.jsonl");
/// DeepSeek-V3 (multi-head latent attention) and gpt-oss (attention sinks) at two layers and
/// reduced widths on real CPU tensors, balanced routing.
pub const MLA_SINKS: Measured = measured!("mla-sinks-steps.jsonl");
/// The mixtures of experts of `VARIANTS` and `MLA_SINKS` with transformers' grouped experts
/// (`experts_impl: grouped_mm`), real CPU tensors, balanced routing.
pub const GROUPED_MM: Measured = measured!("grouped-mm-steps.jsonl");
/// Serving (prefill and last decode step) of the newer decoders, the mixtures of experts on real
/// CPU tensors under balanced routing and LLaVA (an image and a text prompt), and the encoders'
/// forward of the prompt.
pub const SERVING: Measured = measured!("serving-steps.jsonl");
/// peft LoRA on the mixtures of experts (adapters on the attention projections, frozen fused
/// experts), real CPU tensors, balanced routing.
pub const MOE_LORA: Measured = measured!("moe-lora-steps.jsonl");
/// Image models' evaluation forwards (`model.eval()`, `torch.no_grad()`): ViT-B/16 and
/// ResNet-50 through the real caching allocator on the faked CUDA device.
pub const IMAGE_INFER: Measured = measured!("image-infer-steps.jsonl");

/// peft LoRA on Phi-3 (fused projections, two layers at Phi-3-mini's widths), RoBERTa and
/// ModernBERT (masked LM, published widths) on the fake CUDA device; records carry a `plan`.
pub const LORA: Measured = measured!("lora-steps.jsonl");

/// QLoRA (bitsandbytes NF4 with peft adapters) on the mixtures of experts, real CPU tensors with
/// the CUDA backend's bitsandbytes allocations, balanced routing; records carry a `plan`.
pub const QLORA_MOE: Measured = measured!("qlora-moe-steps.jsonl");

/// QLoRA on LLaVA (tower, projector and language model NF4) on the fake CUDA device.
pub const QLORA_LLAVA: Measured = measured!("qlora-llava-steps.jsonl");

/// gpt-oss with every decoder layer checkpointed (non-reentrant), full training and peft LoRA,
/// real CPU tensors, balanced routing; records carry a `plan`.
pub const GPT_OSS_CKPT: Measured = measured!("gpt-oss-ckpt-steps.jsonl");

/// Every measured-step file; `reference::every_data_file_is_known_and_replays` checks that
/// `tests/data` holds exactly these.
pub const ALL: [Measured; 26] = [
    REFERENCE_SET,
    AMP_FP16,
    CNN_EXTRA,
    RESNET_SEGMENTS,
    SMALL_RES,
    TEXT_EXTRA,
    TEXT_SEGMENTS,
    UNPADDED,
    VIT_LSTM,
    VIT_SEGMENTS,
    CPU,
    FINETUNE_INFER,
    FSDP2,
    DDP,
    ZERO1,
    VARIANTS,
    ENCODER_VLM,
    MLA_SINKS,
    GROUPED_MM,
    SERVING,
    IMAGE_INFER,
    MOE_LORA,
    LORA,
    QLORA_MOE,
    QLORA_LLAVA,
    GPT_OSS_CKPT,
];

/// One record replayed: the record as read and the estimate compared with its measurement.
pub struct Replayed {
    pub record: Value,
    pub case: Compared,
}

impl Measured {
    /// Every record of the file, parsed.
    pub fn records(&self) -> Vec<Value> {
        self.lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: not JSON: {e}", self.name))
            })
            .collect()
    }

    /// Replays every record.
    pub fn replay(&self) -> Vec<Replayed> {
        self.replay_where(|_| true)
    }

    /// Replays the records `keep` accepts; fails the test listing every record the estimator
    /// cannot estimate.
    pub fn replay_where(&self, keep: impl Fn(&Value) -> bool) -> Vec<Replayed> {
        let mut cases = Vec::new();
        let mut unsupported = Vec::new();
        for line in self.lines() {
            let record: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", self.name));
            if !keep(&record) {
                continue;
            }
            match compare_line(line) {
                Ok((case, _)) => cases.push(Replayed { record, case }),
                Err((id, why)) => unsupported.push(format!("{id}: {why}")),
            }
        }
        assert!(
            unsupported.is_empty(),
            "{}: records the estimator cannot replay:\n{}",
            self.name,
            unsupported.join("\n")
        );
        cases
    }

    fn lines(&self) -> impl Iterator<Item = &'static str> {
        self.text.lines().filter(|l| !l.trim().is_empty())
    }
}

/// Asserts each case's estimate is within the relative tolerance `tol` of its measurement,
/// listing every case that is not.
#[track_caller]
pub fn assert_within(cases: &[Replayed], tol: f64) {
    let off: Vec<String> = cases
        .iter()
        .map(|r| &r.case)
        .filter(|c| c.rel_err.abs() > tol)
        .map(|c| {
            format!(
                "{}: predicted {} measured {} ({:+.4} %)",
                c.case_id,
                c.predicted,
                c.measured,
                100.0 * c.rel_err
            )
        })
        .collect();
    assert!(
        off.is_empty(),
        "off by more than {} %:\n{}",
        100.0 * tol,
        off.join("\n")
    );
}

/// Replays every record of `file`, asserts there are `count` of them and that each is predicted
/// within the relative tolerance `tol`.
#[track_caller]
pub fn assert_replays(file: &Measured, count: usize, tol: f64) {
    let cases = file.replay();
    assert_eq!(cases.len(), count, "{}: records", file.name);
    assert_within(&cases, tol);
}

/// The plan a record measured, in either format (its own `plan`, or the reference set's fields),
/// under the dispatch mode every measured step ran in (the harness's tracker).
pub fn plan_of(record: &Value) -> Plan {
    let id = record["case_id"].as_str().unwrap_or("<no case_id>");
    as_measured(match record.get("plan") {
        Some(plan) => serde_json::from_value(plan.clone())
            .unwrap_or_else(|e| panic!("{id}: plan not understood: {e}")),
        None => serde_json::from_value::<Record>(record.clone())
            .unwrap_or_else(|e| panic!("{id}: record not understood: {e}"))
            .plan()
            .unwrap_or_else(|e| panic!("{id}: {e}")),
    })
}

/// A mixture of experts' record's tokens per expert (`routing_counts`: one list per sparse
/// layer, or per prompt and decode step), empty for a dense model's.
pub fn routing_counts(record: &Value) -> Vec<Vec<u64>> {
    let Some(counts) = record.get("routing_counts").and_then(Value::as_object) else {
        return Vec::new();
    };
    counts
        .values()
        .map(|c| {
            c.as_array()
                .expect("a list of counts")
                .iter()
                .map(|v| v.as_u64().expect("a count"))
                .collect()
        })
        .collect()
}

/// Asserts `got` is within the relative tolerance `rel_tol` of `want`.
#[track_caller]
pub fn assert_close(got: f64, want: f64, rel_tol: f64) {
    let err = (got - want).abs() / want.abs();
    assert!(
        err <= rel_tol,
        "got {got}, want {want} (rel err {err:.4} > {rel_tol})"
    );
}

/// Runs the `vram-planner` binary with `args` and `stdin`, as a user would.
pub fn run_cli(args: &[&str], stdin: &str) -> Output {
    run_cli_in(
        Command::new(env!("CARGO_BIN_EXE_vram-planner")),
        args,
        stdin,
    )
}

/// [`run_cli`] with `cmd`'s environment (a test's own variables).
pub fn run_cli_in(mut cmd: Command, args: &[&str], stdin: &str) -> Output {
    let mut child = cmd
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the CLI");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A two-layer Qwen3-MoE `config.json` at small widths: hidden 64, 8 experts of width
/// `expert_width`, top 2 (the expert-parallel and experts-implementation tests).
pub fn small_qwen3_moe(expert_width: u64) -> Value {
    serde_json::json!({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 256, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": expert_width})
}
