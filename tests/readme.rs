//! The figures README.md quotes from the estimator and the command-line tool, each asserted as
//! the README prints it (exact integers; GiB with the README's own rounding), so that a change
//! of behaviour that makes the README wrong fails here. The README's commands run through the
//! binary, as a reader would run them.

mod common;

use vram_planner::estimator::config::{CausalMask, Precision};
use vram_planner::plan::estimate;
use vram_planner::plan::Plan;

const GIB: f64 = (1u64 << 30) as f64;

/// Runs the binary with `args` and `plan` on stdin; its stdout, failing the test on an error.
fn cli(args: &[&str], plan: &str) -> String {
    let out = common::run_cli(args, plan);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} {plan}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn cli_json(plan: &str) -> serde_json::Value {
    serde_json::from_str(&cli(&["estimate", "--format", "json"], plan)).unwrap()
}

/// Bytes in GiB with one decimal, as the README writes them.
fn gib_1(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / GIB)
}

/// "checks itself against 447 measured steps: the shared reference set's 164 and 283 more".
#[test]
fn the_estimator_checks_itself_against_447_measured_steps() {
    let count = |f: &common::Measured| f.records().len();
    assert_eq!(count(&common::REFERENCE_SET), 164);
    let more: usize = common::ALL
        .iter()
        .filter(|f| f.name != common::REFERENCE_SET.name)
        .map(count)
        .sum();
    assert_eq!(more, 283);
}

/// "For llama-3-8b at 8192 tokens, batch 1, bf16 without checkpointing the unpadded step peaks
/// about 7 GiB lower."
#[test]
fn an_unpadded_llama_3_8b_step_at_8k_tokens_peaks_7_gib_lower() {
    let plan = |mask| Plan {
        seq: Some(8192),
        batch: 1,
        dtype: Precision::Bf16,
        causal_mask: mask,
        ..Plan::new("llama-3-8b")
    };
    let peak = |mask| estimate(&plan(mask)).unwrap().peak_allocated.0;
    let saved = peak(CausalMask::Materialized) - peak(CausalMask::Skipped);
    assert_eq!(format!("{:.0}", saved as f64 / GIB), "7");
}

const LLAMA_3_70B_ZERO3: &str = r#"{"model":"llama-3-70b","seq":4096,"batch":1,"dtype":"bf16","opt":"adamw","ckpt":"block","gpu":"h100-80",
       "parallel":{"gpus_per_node":8,"dp":8,"zero":3}}"#;

/// "llama-3-70b, 4096 tokens, 8×H100, ZeRO-3 with per-block checkpointing: 82.7 GiB per GPU".
#[test]
fn llama_3_70b_under_zero3_on_8_h100_takes_82_7_gib_per_gpu() {
    let v = cli_json(LLAMA_3_70B_ZERO3);
    let per_gpu = v["per_gpu"]["device_total_bytes"].as_u64().unwrap();
    assert_eq!(gib_1(per_gpu), "82.7");
}

/// "the same with the optimizer state in host memory: 33.6 GiB per GPU, 65.7 GiB of pinned host
/// memory per GPU", from the README's table command.
#[test]
fn offloading_its_optimizer_state_leaves_33_6_gib_per_gpu_and_65_7_gib_on_the_host() {
    let plan = LLAMA_3_70B_ZERO3.replace("}}", r#"},"offload":{"optimizer":true}}"#);
    let table = cli(&["estimate"], &plan);
    assert!(
        table.contains("peak rank: stage 0, 33.6 GiB per GPU"),
        "{table}"
    );
    assert!(table.contains("host 65.7 GiB per GPU"), "{table}");
    let v = cli_json(&plan);
    assert_eq!(
        gib_1(v["per_gpu"]["device_total_bytes"].as_u64().unwrap()),
        "33.6"
    );
}

const QLORA_LLAMA_3_8B: &str = r#"{"model":"llama-3-8b","mode":"finetune","seq":2048,"dtype":"amp_bf16","opt":"paged_adamw8bit","ckpt":"layer",
       "lora":{"rank":16,"alpha":32,"targets":["all"]},"quantization":"nf4","double_quant":true,"gpu":"rtx4090"}"#;

/// "QLoRA on llama-3-8b, 2048 tokens, RTX 4090: fit.max_batch = 3".
#[test]
fn qlora_on_llama_3_8b_fits_batch_3_on_an_rtx_4090() {
    assert_eq!(cli_json(QLORA_LLAMA_3_8B)["fit"]["max_batch"], 3);
}

/// "(plain LoRA in bf16: 2)": the same plan with unquantized bf16 weights.
#[test]
fn plain_lora_in_bf16_on_llama_3_8b_fits_batch_2_on_an_rtx_4090() {
    let plain = QLORA_LLAMA_3_8B
        .replace(r#""dtype":"amp_bf16""#, r#""dtype":"bf16""#)
        .replace(r#","quantization":"nf4","double_quant":true"#, "");
    assert!(!plain.contains("nf4") && plain.contains(r#""dtype":"bf16""#));
    assert_eq!(cli_json(&plain)["fit"]["max_batch"], 2);
}

/// "llama-3-8b served in INT4 on an RTX 4090 (23.64 GiB), 256 new tokens: fit.max_context =
/// 68608 tokens".
#[test]
fn llama_3_8b_served_in_int4_on_an_rtx_4090_reaches_68608_tokens_of_context() {
    let plan = r#"{"model":"llama-3-8b","mode":"infer","dtype":"bf16","quantization":"int4","new_tokens":256,"gpu":"rtx4090"}"#;
    assert_eq!(cli_json(plan)["fit"]["max_context"], 68_608);
}

/// "23.64 GiB for a "24 GB" RTX 4090, 79.18 GiB for an H100 80 GB": the capacities the fit is
/// measured against.
#[test]
fn an_rtx_4090_holds_23_64_gib_and_an_h100_79_18_gib() {
    let gib_2 = |id: &str| {
        let gpu = vram_planner::presets::gpus::find(id).unwrap();
        format!("{:.2}", gpu.memory.0 as f64 / GIB)
    };
    assert_eq!(gib_2("rtx4090"), "23.64");
    assert_eq!(gib_2("h100-80"), "79.18");
}
