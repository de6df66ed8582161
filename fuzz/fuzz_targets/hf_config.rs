//! The `config.json` importer (pasted, fetched or in a plan's `hf_config`): any JSON object is
//! read as each supported `model_type` in turn (the first byte picks which, so every reader gets
//! the same share of the inputs), and what is accepted is built and estimated or refused.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_planner::plan::{estimate, Plan};
use vram_planner::presets::hf;

const MODEL_TYPES: [&str; 8] = [
    "gpt2",
    "bert",
    "llama",
    "mistral",
    "qwen2",
    "roberta",
    "modernbert",
    "llava",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(mut cfg) = serde_json::from_slice::<serde_json::Value>(rest) else {
        return;
    };
    // The raw value first, as pasted (its own model_type, or none).
    let _ = hf::parse_model(&cfg);
    if let Some(o) = cfg.as_object_mut() {
        if pick < 250 {
            let mt = MODEL_TYPES[pick as usize % MODEL_TYPES.len()];
            o.insert("model_type".into(), mt.into());
        }
    }
    if hf::parse_model(&cfg).is_err() {
        return;
    }
    let plan = Plan {
        model: "config".into(),
        hf_config: Some(cfg),
        batch: 1,
        seq: Some(16 + u64::from(pick % 4) * 48),
        ..Plan::default()
    };
    let _ = estimate(&plan);
});
