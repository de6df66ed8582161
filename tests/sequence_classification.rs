//! BERT's and RoBERTa's sequence-classification heads (`architectures`:
//! `BertForSequenceClassification`, `RobertaForSequenceClassification` in a `config.json`) in
//! place of the masked-LM head.

use vram_planner::plan::{estimate, parse_json};

fn est(json: &str) -> Result<vram_planner::estimator::Estimate, String> {
    estimate(&parse_json(json).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

const BERT_LARGE: &str = r#""model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 30522, "max_position_embeddings": 512"#;

fn bert_large(extra: &str, plan: &str) -> String {
    format!(
        r#"{{"model": "bert-large-uncased", "hf_config": {{{BERT_LARGE}{extra}}}, "seq": 128{plan}}}"#
    )
}

#[test]
fn bert_classifier_parameters_are_exact() {
    let mlm = est(&bert_large("", "")).unwrap();
    let cls = est(&bert_large(
        r#", "architectures": ["BertForSequenceClassification"]"#,
        "",
    ))
    .unwrap();
    let h = 1024u64;
    // MLM head: transform dense + LayerNorm + decoder bias (the decoder weight is tied).
    let mlm_head = h * h + h + 2 * h + 30522;
    // Pooler dense + classifier over two labels.
    let cls_head = h * h + h + h * 2 + 2;
    assert_eq!(mlm.param_count - mlm_head, cls.param_count - cls_head);
    // bert-large-uncased as BertForSequenceClassification: 335,143,938 parameters.
    assert_eq!(cls.param_count, 335_143_938);
    let three = est(&bert_large(
        r#", "architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b", "2": "c"}"#,
        "",
    ))
    .unwrap();
    assert_eq!(three.param_count, cls.param_count + h + 1);
    let five = est(&bert_large(
        r#", "architectures": ["BertForSequenceClassification"], "num_labels": 5"#,
        "",
    ))
    .unwrap();
    assert_eq!(five.param_count, cls.param_count + 3 * (h + 1));
}

#[test]
fn roberta_classifier_has_no_pooler() {
    let json = r#"{"model": "roberta-base-cls", "seq": 128, "hf_config": {"model_type": "roberta", "architectures": ["RobertaForSequenceClassification"], "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1}}"#;
    // roberta-base as RobertaForSequenceClassification: 124,647,170 parameters.
    assert_eq!(est(json).unwrap().param_count, 124_647_170);
}

#[test]
fn classification_drops_the_vocabulary_logits() {
    let plan = r#", "batch": 8"#;
    let mlm = est(&bert_large("", plan).replace("\"seq\": 128", "\"seq\": 512")).unwrap();
    let cls = est(&bert_large(
        r#", "architectures": ["BertForSequenceClassification"]"#,
        plan,
    )
    .replace("\"seq\": 128", "\"seq\": 512"))
    .unwrap();
    // The masked-LM logits alone are [8, 512, 30522] fp32: 500 MB.
    assert!(mlm.peak_allocated.0 > cls.peak_allocated.0 + 500_000_000);
}

#[test]
fn classification_is_refused_where_it_is_not_modelled() {
    for (json, needle) in [
        (
            r#"{"model": "x", "hf_config": {"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]}}"#.to_string(),
            "bert and roberta",
        ),
        (
            bert_large(r#", "architectures": ["BertForSequenceClassification"], "num_labels": 0"#, ""),
            "num_labels",
        ),
    ] {
        let err = est(&json).err().unwrap_or_default();
        assert!(err.contains(needle), "{json}: {err}");
    }
}
