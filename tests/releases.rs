//! A plan's `"stack": {"torch": "1.10"}`: before PyTorch 1.11, `softmax` and `log_softmax` saved
//! their input beside their output (`SoftmaxBackward0` holds `self_` and `result_` in torch
//! 1.10.2's generated `Functions.h`, `result_` alone in 1.11.0's), so an eager attention keeps
//! one more score tensor per layer until backward. Before 1.10 the in-place `hardtanh_`
//! (`ReLU6(inplace=True)`) kept its result (1.9.1's `HardtanhBackward1` holds `result_`), where
//! later releases clone its input first. transformers 4.x's BERT adds an extended attention
//! mask in the parameters' dtype even when none is passed, which under autocast promotes the
//! eager attention's scores to fp32.

use vram_planner::estimator::timeline::{Category, Phase};
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

/// The activation bytes live at the end of the plan's forward: all it saves.
fn saved_after_forward(json: &str) -> u64 {
    let e = estimate(&parse_json(json).expect("a plan")).expect("estimates");
    e.timeline
        .events
        .iter()
        .filter(|ev| ev.phase == Phase::Forward)
        .map(|ev| ev.live.get(Category::Activations).0)
        .next_back()
        .unwrap_or(0)
}

/// [`saved_after_forward`] of MobileNetV2 at batch 4 on PyTorch `torch`.
fn mobilenet_v2_saved(torch: &str) -> u64 {
    let json = format!(
        r#"{{"model": "mobilenet_v2", "batch": 4, "res": 224, "dtype": "fp32", "opt": "sgd",
            "stack": {{"cuda": "10.1"{torch}}}}}"#
    );
    saved_after_forward(&json)
}

#[test]
fn before_torch_1_10_relu6_in_place_keeps_no_clone() {
    // 1.10 and 1.9 differ only in ReLU6 (both keep softmax's input).
    let cloned = mobilenet_v2_saved(r#", "torch": "1.10""#);
    let old = mobilenet_v2_saved(r#", "torch": "1.9""#);
    // MobileNetV2 has 35 ReLU6: after the stem, the last convolution, the expansion and the
    // depthwise convolution of each of its 17 blocks (the first has no expansion). From 1.10
    // each keeps a clone of its convolution-and-norm output (fp32, batch 4) where 1.9 keeps the
    // output itself, which the next convolution saves anyway. The last is the exception: the
    // pooling after it (a mean) saves nothing, so 1.10 frees that output and keeps the clone of
    // the same size.
    let per_sample: u64 = 32 * 112 * 112 + 32 * 112 * 112 + expanded_per_sample();
    assert_eq!(cloned - old, per_sample * 4 * 4);
    assert_eq!(
        mobilenet_v2_saved(""),
        mobilenet_v2_saved(r#", "torch": "2.5""#)
    );
}

/// The expansion and depthwise outputs (6x the block's input channels, the depthwise one at the
/// block's stride) of MobileNetV2's 16 blocks with expansion 6 (torchvision's
/// `inverted_residual_setting`).
fn expanded_per_sample() -> u64 {
    let setting = [
        (24, 2, 2),
        (32, 3, 2),
        (64, 4, 2),
        (96, 3, 1),
        (160, 3, 2),
        (320, 1, 1),
    ];
    let (mut side, mut cin, mut total) = (112u64, 16u64, 0u64);
    for (c, n, s) in setting {
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            let hidden = cin * 6;
            total += hidden * side * side;
            side /= stride;
            total += hidden * side * side;
            cin = c;
        }
    }
    total
}

/// [`saved_after_forward`] of BERT-base under fp16 autocast with eager attention, on PyTorch
/// 1.10 (whose softmax keeps its input) and `transformers`.
fn bert_amp_saved(transformers: &str) -> u64 {
    let json = format!(
        r#"{{"model": "bert-base-cls", "batch": 2, "seq": 128, "dtype": "amp_fp16", "opt": "sgd", "attn": "eager",
            "hf_config": {{"model_type": "bert", "architectures": ["BertForSequenceClassification"]}},
            "stack": {{"cuda": "11.2", "torch": "1.10"{transformers}}}}}"#
    );
    saved_after_forward(&json)
}

#[test]
fn transformers_4_keeps_bert_scores_in_fp32_under_autocast() {
    let current = bert_amp_saved("");
    let old = bert_amp_saved(r#", "transformers": "4.16""#);
    // The scores plus the fp32 mask are fp32: the softmax input each of the 12 layers keeps
    // (torch 1.10) is [2, 12, 128, 128] fp32 instead of fp16, 2 more bytes an element.
    assert_eq!(old - current, 12 * (2 * 12 * 128 * 128 * 2));
    assert_eq!(bert_amp_saved(r#", "transformers": "5.0""#), current);
    let err =
        parse_json(r#"{"model": "bert-base", "stack": {"cuda": "11.2", "transformers": "3.4"}}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
    assert!(err.contains("transformers"), "{err}");
}
