//! Accuracy against PyTorch as a whole: every measured training step of the shared reference set
//! (`tests/data/pytorch-step-memory.jsonl`, see `tests/data/PROVENANCE.md`) within 10 % and
//! their median within 3 %, the autocast fp16 steps exactly, and the inventory of
//! `tests/data`: every measured-step file is one `common::ALL` knows, and every record of every
//! file replays. The per-family tolerances live with each family's tests.

mod common;
use vram_planner::cli::reference::summary;

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
    let cases = common::REFERENCE_SET.replay();
    let mut by_family: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for r in &cases {
        by_family
            .entry(family(&r.case.model))
            .or_default()
            .push(r.case.rel_err);
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
    let errs: Vec<f64> = cases.iter().map(|r| r.case.rel_err).collect();
    let (med, p90, max) = summary(&errs);
    println!(
        "{:<16} {:>3} cases  median {:.2} %  p90 {:.2} %  max {:.2} %",
        "all",
        errs.len(),
        100.0 * med,
        100.0 * p90,
        100.0 * max
    );
    common::assert_within(&cases, 0.10);
    assert!(med <= 0.03, "median error {:.2} % above 3 %", 100.0 * med);
}

/// Autocast in fp16 (`torch.autocast(dtype=torch.float16)`), measured with the shared harness
/// (tests/data/PROVENANCE.md): CNNs, ViT, GPT-2, LLaMA with SDPA and eager attention.
#[test]
fn autocast_fp16_steps_measured_exactly() {
    common::assert_replays(&common::AMP_FP16, 7, 1e-4);
}

/// `tests/data` holds exactly the measured-step files `common::ALL` names (a new file must be
/// registered there, and so given to the replay), and every record of each is one the estimator
/// replays. Each file's tolerance is asserted by the tests of its family.
#[test]
fn every_data_file_is_known_and_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    on_disk.sort();
    let mut known: Vec<String> = common::ALL.iter().map(|f| f.name.to_string()).collect();
    known.sort();
    assert_eq!(on_disk, known);
    for file in &common::ALL {
        let records = file.records().len();
        assert!(records > 0, "{}: empty", file.name);
        assert_eq!(file.replay().len(), records, "{}", file.name);
    }
}
