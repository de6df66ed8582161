//! A plan's validation pass (`validation_batch`): a forward at that batch under `no_grad` after
//! the training steps, which the caching allocator serves from what the steps left and grows
//! for. Its ground truth through PyTorch's real allocator is in `tests/allocator_replay.rs`.

use vram_planner::plan::{estimate, parse_json};

fn plan(json: &str) -> vram_planner::plan::Plan {
    parse_json(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// The pass changes what the loop reserves, not the training step's own peak; its allocated
/// peak holds the weights, the last step's `.grad` and optimizer state, and the pass's batch.
#[test]
fn a_larger_validation_batch_grows_reserved_not_the_step() {
    let base = r#"{"model":"resnet50","batch":8,"dtype":"fp32","opt":"sgd_momentum""#;
    let train = estimate(&plan(&format!("{base}}}"))).unwrap();
    let val = estimate(&plan(&format!(r#"{base},"validation_batch":128}}"#))).unwrap();
    assert_eq!(train.validation_peak, None);
    assert_eq!(val.peak_allocated, train.peak_allocated);
    let vp = val.validation_peak.expect("the pass's peak");
    assert!(
        vp > train.param_bytes + train.grad_bytes + train.opt_state_bytes,
        "{vp}"
    );
    // At 16 times the batch the pass's activations need segments the steps never made.
    assert!(
        val.reserved > train.reserved,
        "{} vs {}",
        val.reserved,
        train.reserved
    );
    assert!(val.reserved >= vp, "{} vs {vp}", val.reserved);
    assert!(val.device_total > train.device_total);
    // A pass at the training batch needs far less than one at 16 times it.
    let same = estimate(&plan(&format!(r#"{base},"validation_batch":8}}"#))).unwrap();
    assert!(same.reserved < val.reserved);
    assert!(same.validation_peak.unwrap() < vp);
}

/// Where the pass is not modelled the plan is refused with a message naming the key.
#[test]
fn plans_the_pass_does_not_apply_to_are_refused() {
    for (json, says) in [
        (r#"{"model":"gpt2","validation_batch":8}"#, "image models"),
        (
            r#"{"model":"resnet50","mode":"infer","validation_batch":8}"#,
            "serving",
        ),
        (
            r#"{"model":"resnet50","validation_batch":8,"parallel":{"dp":2,"gpus_per_node":2}}"#,
            "one GPU",
        ),
        (
            r#"{"model":"resnet50","validation_batch":0}"#,
            "validation_batch",
        ),
    ] {
        let err = parse_json(json)
            .map_err(|e| e.to_string())
            .and_then(|p| estimate(&p).map(|_| ()).map_err(|e| e.to_string()))
            .expect_err(json);
        assert!(err.contains("validation_batch"), "{json}: {err}");
        assert!(err.contains(says), "{json}: {err}");
    }
}
