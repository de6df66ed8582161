//! The command-line tool as a user runs it: the binary, its exit status, stdout and stderr.
//! Good plans print numbers; bad input exits non-zero with a message, never a panic.

mod common;

use std::process::{Command, Output, Stdio};

fn run(args: &[&str], stdin: &str) -> Output {
    common::run_cli(args, stdin)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn estimate_prints_json_with_the_fine_tuning_and_per_gpu_keys() {
    let plan = r#"{"model":"llama-2-7b","mode":"finetune","seq":512,"dtype":"bf16","lora":{"rank":16,"targets":["q","k","v","o"]},"gpu":"a100-80","parallel":{"gpus_per_node":2,"dp":2,"zero":2}}"#;
    let out = run(&["estimate", "--format", "json"], plan);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["trainable_params"], 16_777_216);
    for k in [
        "params_bytes",
        "grads_bytes",
        "optimizer_state_bytes",
        "activations_bytes",
        "peak_allocated_bytes",
        "device_total_bytes",
    ] {
        assert!(v["per_gpu"][k].as_u64().is_some(), "per_gpu.{k} missing");
    }
    assert!(v["communication"]["bytes_per_step"].as_u64().unwrap() > 0);
    assert!(v["step_seconds"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_table_names_the_verdict() {
    let out = run(
        &["estimate"],
        r#"{"model":"resnet50","batch":64,"gpu":"t4"}"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.contains("peak allocated") && t.contains("T4"), "{t}");
}

/// A mixture of experts: the table and the JSON give the active parameters per token beside the
/// total (Mixtral 8x7B: 46.7B on the device, 2 of 8 experts per token).
/// The stack sets the CUDA context: CUDA 11.2 loads every kernel image at start-up (1,486 MiB),
/// a current stack loads them when first run (the card's figure), and the device total follows.
#[test]
fn the_stack_sets_the_cuda_context() {
    let json = |plan: &str| -> serde_json::Value {
        let out = run(&["estimate", "--format", "json"], plan);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let now = json(r#"{"model":"bert-large","seq":128,"gpu":"v100-16"}"#);
    let old = json(r#"{"model":"bert-large","seq":128,"gpu":"v100-16","stack":{"cuda":"11.2"}}"#);
    assert_eq!(old["context_bytes"], 1486u64 << 20);
    assert_eq!(now["context_bytes"], 400u64 << 20);
    assert_eq!(
        old["device_total_bytes"].as_u64().unwrap() - now["device_total_bytes"].as_u64().unwrap(),
        1086 << 20
    );
    let out = run(
        &["estimate"],
        r#"{"model":"bert-large","seq":128,"gpu":"v100-16","stack":{"cuda":"11.2"}}"#,
    );
    assert!(
        text(&out.stdout).contains("1.45 GiB"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_mixture_of_experts_shows_its_active_parameters() {
    let plan = r#"{"model":"mixtral-8x7b","mode":"infer","context":16,"new_tokens":2,"dtype":"bf16","batch":1}"#;
    let out = run(&["estimate", "--format", "json"], plan);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["param_count"], 46_702_792_704u64);
    let idle = 32 * 6 * 3 * 4096 * 14336u64;
    assert_eq!(v["active_param_count"], 46_702_792_704 - idle);
    let out = run(&["estimate"], plan);
    let t = text(&out.stdout);
    assert!(t.contains("active per token"), "{t}");
    let dense = run(&["estimate"], r#"{"model":"gpt2","seq":16}"#);
    assert!(!text(&dense.stdout).contains("active per token"));
}

/// LLaVA-1.5 7B served from the command line: `context` counts the text, and the image's 576
/// placeholder tokens join it in the prefill and the KV cache (32 layers of 4096-wide keys and
/// values in bf16 per token).
#[test]
fn llava_is_served_with_its_image_tokens() {
    let plan = r#"{"model":"llava-1.5-7b","mode":"infer","context":512,"new_tokens":16,"batch":1,"dtype":"bf16"}"#;
    let out = run(&["estimate", "--format", "json"], plan);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let inf = &v["inference"];
    assert_eq!(
        (&inf["context"], &inf["image_tokens"]),
        (&512.into(), &576.into())
    );
    let per_token = 32 * 2 * 4096 * 2u64;
    assert_eq!(inf["kv_bytes_per_token"], per_token);
    assert_eq!(v["kv_cache_bytes"], per_token * (576 + 512 + 15));
}

/// Adafactor from the command line: GPT-2's factored state is about 1.3 MiB where AdamW's
/// moments are 949 MiB (`tests/adafactor.rs` counts it exactly).
#[test]
fn adafactor_is_an_optimizer_of_the_cli() {
    let out = run(
        &["estimate", "--format", "json"],
        r#"{"model":"gpt2","seq":128,"batch":2,"opt":"adafactor","gpu":"t4"}"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let state = v["breakdown"]["optimizer_state"].as_u64().unwrap();
    assert!((1 << 20..2 << 20).contains(&state), "{state}");
}

#[test]
fn bad_input_exits_non_zero_with_a_message() {
    for (plan, says) in [
        ("{ not json", "invalid plan"),
        (r#"{"model":"resnet50","batchsize":8}"#, "batchsize"),
        (r#"{"model":"no-such-model"}"#, "no-such-model"),
        (r#"{"model":"resnet50","batch":0}"#, "batch"),
        (
            r#"{"model":"llama-2-7b","parallel":{"tp":3,"gpus_per_node":3}}"#,
            "tp",
        ),
        (
            r#"{"model":"bert-large","stack":{"cuda":"11.2","module_loading":"lazy"}}"#,
            "lazy module loading needs CUDA 11.7",
        ),
        (
            r#"{"model":"bert-large","stack":{"cuda":"cu112"}}"#,
            "major.minor",
        ),
        (
            r#"{"model":"gpt2","seq":128,"opt":"adafactor","parallel":{"gpus_per_node":2,"dp":2}}"#,
            "Adafactor is estimated on one GPU",
        ),
    ] {
        let out = run(&["estimate"], plan);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{plan}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{plan}: {err}"
        );
        assert!(!err.contains("panicked"), "{plan}: {err}");
    }
    let out = run(&["estimate", "--config", "/no/such/plan.json"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/no/such/plan.json"));
    let out = run(&["frobnicate"], "");
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown command is a usage error"
    );
}

#[test]
fn a_reader_that_stops_early_is_not_a_crash() {
    // `vram-planner models | head -1`: the pipe closes before the tool has written everything.
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram-planner"))
        .arg("reference")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/pytorch-step-memory.jsonl"
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn search_lists_layouts_that_fit() {
    let out = run(
        &["search", "--max-gpus", "16"],
        r#"{"model":"gpt2","batch":64,"seq":1024,"gpu":"a100-40"}"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!v.as_array().unwrap().is_empty());
}

#[test]
fn reference_replays_both_record_formats() {
    for file in [
        "pytorch-step-memory.jsonl",
        "finetune-infer-steps.jsonl",
        "unpadded-steps.jsonl",
        "fsdp2-steps.jsonl",
        "ddp-steps.jsonl",
        "zero1-steps.jsonl",
    ] {
        let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = run(&["reference", &path], "");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let last = text(&out.stdout).lines().last().unwrap().to_string();
        let v: serde_json::Value = serde_json::from_str(&last).unwrap();
        assert_eq!(v["summary"]["unsupported"], 0, "{file}: {last}");
        assert!(v["summary"]["cases"].as_u64().unwrap() > 0);
        assert!(
            v["summary"]["max_abs_rel_err"].as_f64().unwrap() < 0.05,
            "{file}: {last}"
        );
    }
}

/// Every failure is a non-zero exit with exactly one line on stderr, starting `error: `, that
/// names what to change: usage errors (clap's, exit 2), I/O errors and refused plans (exit 1).
#[test]
fn every_error_is_one_actionable_line() {
    let dir = std::env::temp_dir();
    let cases: [(&[&str], &str, i32, &str); 14] = [
        (&["frobnicate"], "", 2, "frobnicate"),
        (&["estimate", "--bogus"], "", 2, "--bogus"),
        (&["estimate", "--confi", "x"], "", 2, "--config"),
        (&["estimate", "--format", "xml"], "", 2, "json, table"),
        (&["search", "--max-gpus", "99999"], "", 2, "1..=4096"),
        (&["search", "--top", "0"], "", 2, "--top"),
        (&["search", "--gpus-per-node", "many"], "", 2, "many"),
        (&["reference"], "", 2, "FILE"),
        (
            &["estimate", "--config", dir.to_str().unwrap()],
            "",
            1,
            "cannot read",
        ),
        (
            &["reference", "/no/such/records.jsonl"],
            "",
            1,
            "/no/such/records.jsonl",
        ),
        (&["estimate"], "", 1, "invalid plan"),
        (
            &["estimate"],
            "{\"model\":\"resnet50\",\n\"batch\":\n-1}",
            1,
            "line 3",
        ),
        (&["search"], r#"{"model":"resnet50"}"#, 1, "gpu"),
        (
            &["estimate"],
            r#"{"model":"gpt2","seq":999999999}"#,
            1,
            "seq",
        ),
    ];
    for (args, stdin, code, says) in cases {
        let out = run(args, stdin);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line:\n{err}");
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: wrote to stdout");
    }
}

/// `--help` of the tool and of each command says what it does, its options and an example.
#[test]
fn every_command_has_help() {
    for (cmd, says) in [
        (None, "Plans GPU memory"),
        (Some("estimate"), "peak memory"),
        (Some("search"), "fewest GPUs"),
        (Some("reference"), "measured peak"),
        (Some("models"), "model presets"),
        (Some("gpus"), "GPU presets"),
    ] {
        let args: Vec<&str> = cmd.into_iter().chain(["--help"]).collect();
        let out = run(&args, "");
        let help = text(&out.stdout);
        assert!(out.status.success(), "{args:?}");
        assert!(
            help.contains(says) && help.contains("Usage:"),
            "{args:?}:\n{help}"
        );
    }
    for cmd in ["estimate", "search"] {
        let help = text(&run(&[cmd, "--help"], "").stdout);
        assert!(
            help.contains("Example:") && help.contains("schema.json"),
            "{cmd}:\n{help}"
        );
        assert!(help.contains("The plan's JSON file"), "{cmd}:\n{help}");
    }
}

#[test]
fn reference_compares_published_figures_by_metric() {
    let path = format!(
        "{}/tests/data/published/published-measurements.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = run(&["reference", &path], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 21, "one line per record and the summary");
    let case: serde_json::Value = serde_json::from_str(lines[7]).unwrap();
    assert_eq!(case["metric"], "max_memory_reserved");
    assert_eq!(case["predicted"], case["reserved_predicted"]);
    let v: serde_json::Value = serde_json::from_str(lines[20]).unwrap();
    assert_eq!(
        v["summary"]["unsupported"], 0,
        "no published case is refused"
    );
    let by = v["summary"]["by_metric"].as_object().unwrap();
    let metrics: Vec<&str> = by.keys().map(|k| k.as_str()).collect();
    assert_eq!(
        metrics,
        [
            "max_memory_allocated",
            "max_memory_reserved",
            "nvidia_smi_total"
        ]
    );
}
