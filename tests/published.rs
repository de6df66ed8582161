//! The estimator against figures other people measured on real GPUs and published
//! (`tests/data/published/published-measurements.jsonl`, provenance in `tests/data/PROVENANCE.md`):
//! each record's `metric` (allocated, reserved or `nvidia-smi` total) against the matching
//! output. These are the current errors, asserted so that any change to them is deliberate; the
//! estimator is not fitted to them.

use vram_planner::cli::reference::{by_metric, compare_line};

const PUBLISHED: &str = include_str!("data/published/published-measurements.jsonl");

/// Absolute tolerance on each relative error figure (0.2 percentage points).
const TOL: f64 = 0.002;

#[test]
fn published_figures_per_metric() {
    let mut cases = Vec::new();
    let mut refused = Vec::new();
    for line in PUBLISHED.lines().filter(|l| !l.trim().is_empty()) {
        match compare_line(line) {
            Ok((c, _)) => cases.push(c),
            Err((id, _)) => refused.push(id),
        }
    }
    // Adafactor is not an optimizer the estimator knows.
    assert_eq!(refused, ["hf-bertlarge-b4-fp32-adafactor"]);
    let s = by_metric(&cases);
    // metric: cases, median, p90, max |relative error|, under-estimates.
    for (metric, n, med, p90, max, under) in [
        ("max_memory_allocated", 4, 0.0739, 0.3800, 0.3800, 3),
        ("max_memory_reserved", 9, 0.1035, 0.1947, 0.3065, 9),
        ("nvidia_smi_total", 6, 0.1288, 0.1790, 0.1790, 4),
    ] {
        let m = &s[metric];
        assert_eq!(m["cases"], n, "{metric}");
        assert_eq!(m["under_estimates"], under, "{metric}");
        for (k, want) in [
            ("median_abs_rel_err", med),
            ("p90_abs_rel_err", p90),
            ("max_abs_rel_err", max),
        ] {
            let got = m[k].as_f64().unwrap();
            assert!(
                (got - want).abs() <= TOL,
                "{metric} {k}: {got:.4} vs {want}"
            );
        }
    }
}

/// Reserved memory (the step's stream replayed through the caching allocator) is above the
/// allocated peak on every published case.
#[test]
fn reserved_exceeds_allocated_on_every_published_case() {
    for line in PUBLISHED.lines().filter(|l| !l.trim().is_empty()) {
        let Ok((c, out)) = compare_line(line) else {
            continue;
        };
        let alloc = out["allocated_predicted"].as_u64().unwrap();
        let reserved = out["reserved_predicted"].as_u64().unwrap();
        assert!(reserved > alloc, "{}: {reserved} vs {alloc}", c.case_id);
    }
}
