//! An estimate made a slice at a time (what the page's background work runs, one slice per
//! task) answers exactly what the estimate in one go answers, for training, serving (prefill,
//! then the last decode step), a validation pass and a refused plan; and a long step's
//! allocator replay is spread over several slices.

use vram_planner::estimator::stepwise::REPLAY_SLICE;
use vram_planner::plan::{estimate, parse_json, EstimateSteps};

/// Slices until the estimate answers, and how many it took.
fn sliced(json: &str) -> (serde_json::Value, usize) {
    let plan = parse_json(json).expect("the plan parses");
    let mut steps = EstimateSteps::new(&plan);
    let mut n = 0;
    loop {
        n += 1;
        assert!(n < 10_000, "{json}: the slices never end");
        if let Some(r) = steps.step() {
            assert!(steps.step().is_none(), "{json}: answered twice");
            let v = match r {
                Ok(e) => serde_json::to_value(e).unwrap(),
                Err(e) => serde_json::Value::String(e.to_string()),
            };
            return (v, n);
        }
    }
}

fn whole(json: &str) -> serde_json::Value {
    let plan = parse_json(json).expect("the plan parses");
    match estimate(&plan) {
        Ok(e) => serde_json::to_value(e).unwrap(),
        Err(e) => serde_json::Value::String(e.to_string()),
    }
}

#[test]
fn slices_answer_what_the_whole_estimate_answers() {
    for json in [
        r#"{"model":"resnet18","batch":16,"res":96,"gpu":"a100-40"}"#,
        r#"{"model":"gpt2","mode":"infer","context":256,"new_tokens":8,"batch":2}"#,
        r#"{"model":"gpt2","mode":"infer","context":256,"new_tokens":1,"batch":2}"#,
        r#"{"model":"resnet18","batch":8,"res":64,"validation_batch":32}"#,
        r#"{"model":"gpt2","seq":512,"batch":2,"ckpt":"sqrt","dtype":"amp_bf16","gpu":"h100-80"}"#,
        r#"{"model":"gpt2","mode":"infer","context":1048576,"new_tokens":8,"batch":4096}"#,
    ] {
        let (s, _) = sliced(json);
        assert_eq!(s, whole(json), "{json}");
    }
}

#[test]
fn a_long_step_replays_its_allocator_stream_over_several_slices() {
    // Llama 3 70B's 80 layers: some 45,000 allocator events, whatever the sequence length.
    let (_, n) = sliced(r#"{"model":"llama-3-70b","seq":128,"batch":1,"dtype":"bf16"}"#);
    // The build, the simulation, then the replay in slices of REPLAY_SLICE events.
    assert!(n >= 2 + 45_000 / REPLAY_SLICE, "{n} slices");
    let (_, small) = sliced(r#"{"model":"resnet18","batch":2,"res":32}"#);
    assert!(
        small < n,
        "{small} slices for a small step, {n} for a long one"
    );
}
