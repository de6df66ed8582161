//! The reserved figure is the loop's malloc/free stream replayed through the caching allocator
//! (`estimator::allocator`): the options a run sets in `PYTORCH_CUDA_ALLOC_CONF` change it the
//! way PyTorch's allocator would, and an option PyTorch rejects is refused with its name.

use vram_planner::estimator::allocator::AllocConf;
use vram_planner::plan::{estimate, parse_json, Plan};

fn with_conf(model: &str, conf: Option<&str>) -> Plan {
    let mut p = Plan::new(model);
    p.batch = 8;
    p.alloc_conf = conf.map(|c| AllocConf::parse(c).unwrap());
    p
}

/// `expandable_segments:True` maps pages into one segment per pool instead of a `cudaMalloc` per
/// request size class, so freed blocks of one size can serve another: less reserved, never less
/// than what the tensors hold.
#[test]
fn expandable_segments_reserve_less_than_fixed_segments() {
    for model in ["gpt2", "resnet50"] {
        let fixed = estimate(&with_conf(model, None)).unwrap();
        let exp = estimate(&with_conf(model, Some("expandable_segments:True"))).unwrap();
        assert_eq!(fixed.peak_allocated, exp.peak_allocated, "{model}");
        assert!(
            exp.reserved < fixed.reserved,
            "{model}: {} vs {}",
            exp.reserved,
            fixed.reserved
        );
        assert!(exp.reserved >= exp.peak_allocated, "{model}");
        assert!(fixed.fragmentation_at_peak.0 > 0, "{model}");
    }
}

/// The figures PyTorch's allocator keeps: what a tensor does not use at the peak is reserved, so
/// reserved is at least the allocated peak and the fragmentation together (the cuBLAS workspace
/// is in use only during a matrix multiply).
#[test]
fn reserved_holds_the_peak_and_the_free_blocks() {
    for model in ["gpt2", "resnet50", "vit_b_16", "lstm-lm"] {
        let e = estimate(&with_conf(model, None)).unwrap();
        assert!(
            e.reserved >= e.peak_allocated + e.fragmentation_at_peak,
            "{model}: {} < {} + {}",
            e.reserved,
            e.peak_allocated,
            e.fragmentation_at_peak
        );
    }
}

/// A plan's `alloc_conf` is checked as the plan is read, as PyTorch checks the variable when CUDA
/// starts: an option it rejects is refused with its name, and a valid one is written back as
/// given.
#[test]
fn options_pytorch_rejects_are_refused_by_name() {
    for (conf, says) in [
        ("max_split_size_mb:8", "more than 20"),
        ("expandable_segments:yes", "True or False"),
        (
            "pinned_use_cuda_host_register:True",
            "unknown allocator option",
        ),
        ("garbage_collection_threshold", "key:value"),
        ("garbage_collection_threshold:1e-3", "a number"),
    ] {
        let plan = format!(r#"{{"model":"gpt2","alloc_conf":"{conf}"}}"#);
        let err = parse_json(&plan).unwrap_err().to_string();
        assert!(err.contains(says), "{conf}: {err}");
        assert!(err.contains("PYTORCH_CUDA_ALLOC_CONF"), "{conf}: {err}");
    }
    let text = r#"{"model":"gpt2","alloc_conf":"expandable_segments:True,garbage_collection_threshold:0.6"}"#;
    let p = parse_json(text).unwrap();
    let s = p.alloc_conf.as_ref().unwrap().settings;
    assert!(s.expandable_segments);
    assert_eq!(s.garbage_collection_threshold, Some(0.6));
    assert!(serde_json::to_string(&p)
        .unwrap()
        .contains(r#""alloc_conf":"expandable_segments:True,garbage_collection_threshold:0.6""#));
}

mod common;

use vram_planner::estimator::config::{CausalMask, ZeroGrad};
use vram_planner::estimator::optimizer::OptimizerImpl;

/// What PyTorch's real caching allocator reserved in 24 steps, measured without a GPU
/// (`tests/data/reserved/`, provenance in `tests/data/PROVENANCE.md`).
const RESERVED: &str = include_str!("data/reserved/reserved-steps.jsonl");

fn reserved_plan(r: &serde_json::Value) -> Plan {
    let id = r["case_id"].as_str().unwrap();
    // The record's settings in the reference set's format (its tensor peak under the name that
    // format gives it).
    let mut settings = r.clone();
    settings["peak_r512"] = r["max_allocated"].clone();
    let mut p = common::plan_of(&settings);
    p.alloc_conf = r["alloc_conf"]
        .as_str()
        .map(|c| AllocConf::parse(c).unwrap());
    if r["opt_impl"] == "fused" {
        p.optimizer_impl = Some(OptimizerImpl::Fused);
    }
    if id.ends_with("/unpadded") {
        p.causal_mask = CausalMask::Skipped;
    }
    if let Some(k) = r["accumulation"].as_u64() {
        p.accumulation = k as u32;
    }
    if r["zero_grad"] == "zero" {
        p.zero_grad = ZeroGrad::Zero;
    }
    p.validation_batch = r["validation_batch"].as_u64();
    // The faked device is an H100 (sm_90: 32 MiB cuBLAS workspaces).
    p.gpu = Some("h100-80".into());
    p
}

/// Each step's reserved bytes against the estimate's, and their relative error.
fn reserved_errors(records: &str) -> Vec<(String, u64, u64, f64)> {
    records
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let id = r["case_id"].as_str().unwrap().to_string();
            let measured = r["max_reserved"].as_u64().unwrap();
            let e = estimate(&reserved_plan(&r)).unwrap_or_else(|e| panic!("{id}: {e}"));
            let err = e.reserved.0 as f64 / measured as f64 - 1.0;
            (id, measured, e.reserved.0, err)
        })
        .collect()
}

#[test]
fn reserved_against_the_real_allocator() {
    let rows = reserved_errors(RESERVED);
    for (id, m, p, err) in &rows {
        println!(
            "{id:<90} measured {m:>12} predicted {p:>12} {:+.1} %",
            err * 100.0
        );
    }
    let mut abs: Vec<f64> = rows.iter().map(|r| r.3.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let median = abs[abs.len() / 2];
    let max = abs[abs.len() - 1];
    println!(
        "median |error| {:.1} %, max {:.1} %",
        median * 100.0,
        max * 100.0
    );
    assert_eq!(rows.len(), 24);
    // The current figures, asserted so that a change to them is deliberate. Every step ran
    // under a dispatch mode (the harness's tracker, or the d2h-counting mode of the
    // `notracker` controls), so its gradient sums are out of place (`dispatch_mode`); with
    // that the CNN steps meet the allocator to the byte. The bias gradients' reduction staging
    // blocks lifted ViT-B/16 under autocast from -5.3 % to -0.6 %. What remains under is
    // ResNet-50 under autocast (-2.5 %), which no reduction explains; the largest error is an
    // over-estimate (ResNet-18 with Adam, +9 %), see PROVENANCE.md.
    assert!(median <= 0.010, "median {median}");
    assert!(max <= 0.095, "max {max}");
    let under = rows.iter().filter(|r| r.3 < -0.02).count();
    assert!(under <= 1, "{under} steps more than 2 % under");
}

/// Steps whose loop differs from a plain one at its first step or micro-batch, through the real
/// allocator (`tests/data/reserved/accumulation-steps.jsonl`): gradient accumulation, whose
/// first micro-batch of each step steals its gradients into `.grad` among the activations'
/// blocks, and `zero_grad(set_to_none=False)`, whose loop does so once.
const ACCUMULATION: &str = include_str!("data/reserved/accumulation-steps.jsonl");

#[test]
fn accumulation_and_in_place_zeroing_against_the_real_allocator() {
    let rows = reserved_errors(ACCUMULATION);
    for (id, m, p, err) in &rows {
        println!(
            "{id:<90} measured {m:>12} predicted {p:>12} {:+.2} %",
            err * 100.0
        );
    }
    assert_eq!(rows.len(), 8);
    // Allocating every `.grad` ahead of the first micro-batch instead put these at +2.5 % to
    // -9.9 % (median |error| 2.5 %). ViT-B/16 under autocast is -1.5 % (-3.1 % before its
    // bias gradients' reduction staging blocks were modelled); ResNet-18 with Adam remains off
    // (-5.8 %; its plain step is +9 % over), not explained by the loop's shape; see
    // PROVENANCE.md.
    let mut abs: Vec<f64> = rows.iter().map(|r| r.3.abs()).collect();
    abs.sort_by(f64::total_cmp);
    assert!(abs[abs.len() / 2] <= 0.008, "median {}", abs[abs.len() / 2]);
    for (id, _, _, err) in &rows {
        assert!(err.abs() <= 0.06, "{id}: {:+.2} %", err * 100.0);
    }
}

/// Steps followed by a validation pass (`model.eval()`, a forward at a larger batch under
/// `no_grad`), through the real allocator (`tests/data/reserved/validation-steps.jsonl`): the
/// pass's activations need larger blocks than the steps cached, so the allocator grows.
const VALIDATION: &str = include_str!("data/reserved/validation-steps.jsonl");

#[test]
fn validation_passes_against_the_real_allocator() {
    let rows = reserved_errors(VALIDATION);
    for (id, m, p, err) in &rows {
        println!(
            "{id:<90} measured {m:>12} predicted {p:>12} {:+.2} %",
            err * 100.0
        );
    }
    for line in VALIDATION.lines().filter(|l| !l.trim().is_empty()) {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut p = reserved_plan(&r);
        p.validation_batch = None;
        let e = estimate(&p).unwrap();
        let m = r["max_reserved"].as_u64().unwrap() as f64;
        println!(
            "{:<90} without the pass {:+.2} %",
            r["case_id"],
            (e.reserved.0 as f64 / m - 1.0) * 100.0
        );
    }
    assert_eq!(rows.len(), 5);
    // ViT-B/16 at batch 16 in bf16 stays over (+8.6 %; +11.1 % before the reduction staging
    // blocks): its steps alone already reserve more than the real allocator; the rest are
    // within 1.5 %.
    for (id, _, _, err) in &rows {
        let tol = if id.contains("/b16/bf16/") {
            0.09
        } else {
            0.015
        };
        assert!(err.abs() <= tol, "{id}: {:+.2} %", err * 100.0);
    }
}
