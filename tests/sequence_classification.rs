//! `"head": "sequence_classification"`: `BertForSequenceClassification` and
//! `RobertaForSequenceClassification` in place of the masked-LM head.

use vram_planner::plan::{estimate, parse_json};

fn est(json: &str) -> Result<vram_planner::estimator::Estimate, String> {
    estimate(&parse_json(json).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

#[test]
fn bert_classifier_parameters_are_exact() {
    let mlm = est(r#"{"model": "bert-large", "seq": 128}"#).unwrap();
    let cls =
        est(r#"{"model": "bert-large", "seq": 128, "head": "sequence_classification"}"#).unwrap();
    let h = 1024u64;
    // MLM head: transform dense + LayerNorm + decoder bias (the decoder weight is tied).
    let mlm_head = h * h + h + 2 * h + 30522;
    // Pooler dense + classifier over two labels.
    let cls_head = h * h + h + h * 2 + 2;
    assert_eq!(mlm.param_count - mlm_head, cls.param_count - cls_head);
    // bert-large-uncased with BertForSequenceClassification: 335,143,938 parameters.
    assert_eq!(cls.param_count, 335_143_938);
    let three = est(r#"{"model": "bert-large", "seq": 128, "head": "sequence_classification", "num_labels": 3}"#).unwrap();
    assert_eq!(three.param_count, cls.param_count + h + 1);
}

#[test]
fn roberta_classifier_has_no_pooler() {
    let cls =
        est(r#"{"model": "roberta-base", "seq": 128, "head": "sequence_classification"}"#).unwrap();
    // roberta-base for sequence classification: 124,647,170 parameters.
    assert_eq!(cls.param_count, 124_647_170);
}

#[test]
fn classification_drops_the_vocabulary_logits() {
    let mlm = est(r#"{"model": "bert-base", "batch": 8, "seq": 512}"#).unwrap();
    let cls =
        est(r#"{"model": "bert-base", "batch": 8, "seq": 512, "head": "sequence_classification"}"#)
            .unwrap();
    // The masked-LM logits alone are [8, 512, 30522] fp32: 500 MB.
    assert!(mlm.peak_allocated.0 > cls.peak_allocated.0 + 500_000_000);
}

#[test]
fn heads_are_refused_where_they_do_not_exist() {
    for (json, needle) in [
        (
            r#"{"model": "llama-2-7b", "head": "sequence_classification"}"#,
            "BERT and RoBERTa",
        ),
        (
            r#"{"model": "resnet50", "head": "sequence_classification"}"#,
            "BERT and RoBERTa",
        ),
        (r#"{"model": "bert-base", "num_labels": 3}"#, "head"),
        (
            r#"{"model": "bert-base", "head": "sequence_classification", "num_labels": 0}"#,
            "num_labels",
        ),
    ] {
        let err = est(json).err().unwrap_or_default();
        assert!(err.contains(needle), "{json}: {err}");
    }
}
