//! Estimate after parse: any plan the CLI accepts must be estimated or refused with a message,
//! never a panic, and quickly (libFuzzer's `-timeout` turns a slow input into a crash; the
//! plan layer caps the work a plan may ask for).

#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_planner::plan::{self, fit, search};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = plan::parse_json(text) else {
        return;
    };
    let single = plan::estimate(&p);
    if p.is_parallel() {
        let _ = plan::estimate_parallel(&p);
    }
    if let (Ok(_), Ok(Some(gpu))) = (&single, plan::resolve::gpu(&p)) {
        let _ = fit::max_batch(&p, gpu.memory);
        // A small search: the CLI's defaults scaled down so one input stays quick.
        let opts = search::SearchOptions {
            max_gpus: 8,
            gpus_per_node: 4,
            top: 2,
            ..Default::default()
        };
        let _ = search::search(&p, &opts);
    }
});
