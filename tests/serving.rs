//! The measured serving steps of `data/serving-steps.jsonl` (`data/PROVENANCE.md`): prefill and
//! last decode step of the newer decoders (Qwen3, Phi-3, OLMo 2, Gemma 2 and 3, the mixtures of
//! experts, DeepSeek-V3's latent attention, gpt-oss's sinks and sliding windows) and of LLaVA
//! (the prefill runs the vision tower on the pixels and the language model over the image's
//! placeholder tokens and the text), and the encoders' forward of the prompt, measured as
//! `finetune-infer-steps.jsonl`'s serving records were.

mod common;

use serde_json::Value;
use vram_planner::plan::estimate;

/// Each record's `(case, prefill error, decode error)`, relative to its measurement.
fn errors(records: &[Value]) -> Vec<(String, f64, Option<f64>)> {
    records
        .iter()
        .map(|r| {
            let id = r["case_id"].as_str().unwrap().to_string();
            let e = estimate(&common::plan_of(r)).unwrap_or_else(|e| panic!("{id}: {e}"));
            let inf = e
                .inference
                .unwrap_or_else(|| panic!("{id}: no inference report"));
            let rel = |got: u64, key: &str| got as f64 / r[key].as_u64().unwrap() as f64 - 1.0;
            let prefill = rel(inf.prefill_peak.0, "prefill_peak_r512");
            let decode = r
                .get("decode_peak_r512")
                .map(|_| rel(inf.decode_peak.unwrap().0, "decode_peak_r512"));
            (id, prefill, decode)
        })
        .collect()
}

/// Every prefill and decode peak within 0.5 %; Qwen3, Phi-3, OLMo 2, Gemma 2, gpt-oss,
/// DeepSeek-V3, LLaVA and the encoders within 0.02 %.
#[test]
fn measured_serving_steps() {
    let records = common::SERVING.records();
    assert_eq!(records.len(), 29);
    let mut off = Vec::new();
    for (id, prefill, decode) in errors(&records) {
        let tight = [
            "qwen3-8b",
            "phi3",
            "olmo2",
            "gemma2",
            "gpt-oss",
            "deepseek-v3",
            "llava",
            "roberta",
            "modernbert",
        ]
        .iter()
        .any(|m| id.contains(m));
        let tol = if tight { 2e-4 } else { 5e-3 };
        for (which, err) in [("prefill", Some(prefill)), ("decode", decode)] {
            if let Some(err) = err.filter(|e| e.abs() > tol) {
                off.push(format!("{id}: {which} {:+.4} %", 100.0 * err));
            }
        }
    }
    assert!(off.is_empty(), "off:\n{}", off.join("\n"));
}

/// The encoders serve the prompt's forward alone: one new token is all a plan may ask of them.
#[test]
fn encoders_serve_one_forward() {
    for r in common::SERVING.records() {
        let id = r["case_id"].as_str().unwrap();
        if id.contains("bert") {
            assert_eq!(r["plan"]["new_tokens"], 1, "{id}");
            assert!(r.get("decode_peak_r512").is_none(), "{id}");
        }
    }
}

/// The mixtures of experts ran balanced routing, for the prompt's tokens and a decode step's.
#[test]
fn serving_routing_is_balanced() {
    for r in common::SERVING.records() {
        let counts = common::routing_counts(&r);
        if counts.is_empty() {
            continue;
        }
        assert_eq!(counts.len(), 2, "{}", r["case_id"]);
        for c in counts {
            let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
            assert!(hi - lo <= 1, "{}: {c:?}", r["case_id"]);
        }
    }
}
