//! The `config.json` importer (pasted, fetched or in a plan's `hf_config`): any JSON object is
//! read as each supported `model_type` in turn (the first byte picks which, so every reader gets
//! the same share of the inputs), and what is accepted is built into its op tape or refused.
//! Small tapes are also estimated; estimating large ones is the `estimate` target's part (its
//! seeds carry `hf_config` plans), and would hold this one to a few hundred inputs a second.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_planner::plan::{build_graph, estimate, Plan};
use vram_planner::presets::hf;

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
            let mt = hf::SUPPORTED[pick as usize % hf::SUPPORTED.len()];
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
    if build_graph(&plan).is_ok_and(|g| g.ops.len() <= SMALL_TAPE) {
        let _ = estimate(&plan);
    }
});

/// Tapes up to this many ops (two or three layers) are estimated too.
const SMALL_TAPE: usize = 400;
