//! Inputs the fuzz targets (fuzz/) found, each kept as the plain test of what went wrong: the
//! plan JSON, the URL query, the config.json importer and estimate-after-parse.

use std::time::{Duration, Instant};

use vram_planner::plan::{parse_json, search, Plan};

/// A pasted config.json's float read back one ulp off after the plan was written out
/// (serde_json's default parser), so a plan changed on every trip through a link or a file.
#[test]
fn a_plan_reads_back_its_own_json_bit_for_bit() {
    let text = r#"{"model":"cfg","hf_config":{"rms_norm_eps":1e-28,"initializer_range":0.02,"x":9.999999999999999e-29}}"#;
    let p = parse_json(text).unwrap();
    let again = serde_json::to_string(&p).unwrap();
    let back: Plan = serde_json::from_str(&again).unwrap();
    assert_eq!(back, p, "{again}");
}

/// A search for a batch of 284,444,444 tried every number below it as a divisor (minutes); the
/// fuzz target's timeout caught it. It is answered within the second, as every input must be
/// (this bound is loose by two orders of magnitude, for a debug build on a loaded machine).
#[test]
fn a_search_over_a_huge_batch_is_answered() {
    let p = parse_json(r#"{"model":"gpt2","batch":284444444,"gpu":"a100-40"}"#).unwrap();
    let opts = search::SearchOptions {
        max_gpus: 8,
        gpus_per_node: 4,
        top: 2,
        ..Default::default()
    };
    let t = Instant::now();
    let _ = search::search(&p, &opts);
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}
