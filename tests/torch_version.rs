//! A plan's `"stack": {"torch": "1.10"}`: before PyTorch 1.11, `softmax` and `log_softmax` saved
//! their input beside their output (`SoftmaxBackward0` holds `self_` and `result_` in torch
//! 1.10.2's generated `Functions.h`, `result_` alone in 1.11.0's), so an eager attention keeps
//! one more score tensor per layer until backward.

use vram_planner::plan::{estimate, parse_json};

fn forward_peak(stack: &str) -> u64 {
    let json = format!(
        r#"{{"model": "bert-base-cls", "batch": 2, "seq": 128, "dtype": "fp32", "opt": "sgd", "attn": "eager",
            "hf_config": {{"model_type": "bert", "architectures": ["BertForSequenceClassification"]}},
            "stack": {{"cuda": "11.2"{stack}}}}}"#
    );
    estimate(&parse_json(&json).expect("a plan"))
        .expect("estimates")
        .peak_forward
        .0
}

#[test]
fn torch_1_10_keeps_each_layers_attention_scores() {
    let current = forward_peak("");
    let old = forward_peak(r#", "torch": "1.10""#);
    // 12 layers of fp32 scores [2, 12, 128, 128] (1.5 MiB each, a whole number of 512-byte
    // blocks), and the classifier's log-softmax input [2, 2] fp32 (one 512-byte block).
    let scores = 12 * (2 * 12 * 128 * 128 * 4);
    assert_eq!(old - current, scores + 512);
    assert_eq!(forward_peak(r#", "torch": "1.11""#), current);
}

#[test]
fn torch_versions_are_checked() {
    for bad in [
        r#""torch": "1""#,
        r#""torch": "3.0""#,
        r#""torch": "one.ten""#,
    ] {
        let json = format!(r#"{{"model": "bert-base", "stack": {{"cuda": "11.2", {bad}}}}}"#);
        let err = parse_json(&json)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("PyTorch"), "{bad}: {err}");
    }
}
