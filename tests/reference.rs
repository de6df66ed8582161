//! Accuracy against PyTorch: every measured training step in `tests/data/pytorch-step-memory.jsonl`
//! (see `tests/data/PROVENANCE.md`) is estimated and compared with its measured `peak_r512`.
//! Every record must be supported, each within 10 %, and the median within 3 %.

mod common;
use vram_planner::cli::reference::{compare_line, summary};

const DATA: &str = include_str!("data/pytorch-step-memory.jsonl");

fn family(model: &str) -> &'static str {
    match model {
        m if m.starts_with("vit") => "ViT",
        "lstm-lm" => "LSTM",
        m if m.starts_with("gpt2")
            || m.starts_with("bert")
            || m.starts_with("llama")
            || m.starts_with("mistral")
            || m.starts_with("qwen") =>
        {
            "language models"
        }
        _ => "CNN",
    }
}

#[test]
fn every_reference_case_within_10_percent_median_within_3() {
    let mut errs = Vec::new();
    let mut by_family: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut failures = Vec::new();
    let mut unsupported = Vec::new();
    for line in DATA.lines().filter(|l| !l.trim().is_empty()) {
        match compare_line(line) {
            Ok((c, _)) => {
                errs.push(c.rel_err);
                by_family
                    .entry(family(&c.model))
                    .or_default()
                    .push(c.rel_err);
                if c.rel_err.abs() > 0.10 {
                    failures.push(format!(
                        "{}: predicted {} measured {} ({:+.1} %)",
                        c.case_id,
                        c.predicted,
                        c.measured,
                        100.0 * c.rel_err
                    ));
                }
            }
            Err((id, why)) => unsupported.push(format!("{id}: {why}")),
        }
    }
    for (f, e) in &by_family {
        let (med, p90, max) = summary(e);
        println!(
            "{f:<16} {:>3} cases  median {:.2} %  p90 {:.2} %  max {:.2} %",
            e.len(),
            100.0 * med,
            100.0 * p90,
            100.0 * max
        );
    }
    let (med, p90, max) = summary(&errs);
    println!(
        "{:<16} {:>3} cases  median {:.2} %  p90 {:.2} %  max {:.2} %",
        "all",
        errs.len(),
        100.0 * med,
        100.0 * p90,
        100.0 * max
    );
    assert!(
        unsupported.is_empty(),
        "unsupported records:\n{}",
        unsupported.join("\n")
    );
    assert!(
        failures.is_empty(),
        "cases off by more than 10 %:\n{}",
        failures.join("\n")
    );
    assert!(med <= 0.03, "median error {:.2} % above 3 %", 100.0 * med);
}

/// Autocast in fp16 (`torch.autocast(dtype=torch.float16)`), measured with the shared harness
/// (tests/data/PROVENANCE.md): CNNs, ViT, GPT-2, LLaMA with SDPA and eager attention.
#[test]
fn autocast_fp16_steps_measured_exactly() {
    common::assert_replays(include_str!("data/amp-fp16-steps.jsonl"), 7, 1e-4);
}
