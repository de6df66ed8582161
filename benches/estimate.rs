//! Speed of the estimator, printed as figures (run with `cargo bench`): one estimate of a large
//! language model at a long sequence, a 64-point batch sweep, and the largest-batch solver. The
//! planner page re-runs these on every slider move, so they must stay well under a frame.

use std::time::{Duration, Instant};

use vram_planner::estimator::allocator::{replay, AllocatorSettings};
use vram_planner::estimator::config::Precision;
use vram_planner::estimator::simulate::{simulate, StepOptions};
use vram_planner::estimator::units::Bytes;
use vram_planner::plan::sweep::{log_points, max_batch, sweep, Axis};
use vram_planner::plan::Plan;
use vram_planner::plan::{build_graph, estimate};

fn time<F: FnMut()>(name: &str, reps: u32, mut f: F) {
    f(); // warm up
    let mut samples: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    let med = samples[samples.len() / 2];
    let p95 = samples[(samples.len() * 95 / 100).min(samples.len() - 1)];
    println!(
        "{name:<52} median {:>9.3} ms   p95 {:>9.3} ms   ({reps} runs)",
        med.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
}

/// The command-line tool's heap ([`vram_planner::cli::heap`]), so the figures are the tool's.
#[global_allocator]
static HEAP: vram_planner::cli::heap::Heap = vram_planner::cli::heap::Heap {};

fn main() {
    vram_planner::cli::heap::keep_freed_pages();
    let mut cases: Vec<(&str, Plan)> = Vec::new();
    let mut llm = Plan::new("llama-3-70b");
    llm.seq = Some(8192);
    llm.batch = 1;
    llm.dtype = Precision::AmpBf16;
    cases.push(("llama-3-70b seq 8192", llm));
    let mut cnn = Plan::new("resnet50");
    cnn.batch = 64;
    cases.push(("resnet50 r224 b64", cnn));
    for (name, plan) in cases {
        if let Err(e) = estimate(&plan) {
            println!("{name}: skipped ({e})");
            continue;
        }
        let g = build_graph(&plan).expect("builds");
        println!("{name}: {} ops, {} tensors", g.ops.len(), g.tensors.len());
        time(&format!("{name}: build graph"), 20, || {
            std::hint::black_box(build_graph(&plan).unwrap());
        });
        time(&format!("{name}: one estimate"), 20, || {
            std::hint::black_box(estimate(&plan).unwrap());
        });
        // The caching allocator's replay inside that estimate, on its own, for its share.
        let opts = StepOptions::of(&plan.setup());
        let trace = simulate(&g, &opts).alloc_trace;
        println!("{name}: {} allocator events", trace.len());
        time(&format!("{name}: simulate the step"), 20, || {
            std::hint::black_box(simulate(&g, &opts));
        });
        time(
            &format!("{name}: replay its stream (allocator)"),
            20,
            || {
                std::hint::black_box(replay(&trace, &[], AllocatorSettings::default(), None));
            },
        );
        let xs = log_points(1, 4096, 64);
        time(
            &format!("{name}: batch sweep, {} points", xs.len()),
            5,
            || {
                std::hint::black_box(sweep(&plan, Axis::Batch, &xs));
            },
        );
        time(&format!("{name}: largest batch on 80 GiB"), 5, || {
            std::hint::black_box(max_batch(&plan, Bytes(80 << 30)).unwrap());
        });
    }
}
