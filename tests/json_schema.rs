//! The CLI's JSON output is a documented format: `estimate --format json` matches
//! docs/estimate.schema.json and `search` matches docs/search.schema.json, checked on real outputs
//! of the binary. The schemas close every object (`additionalProperties: false`, every key
//! listed), so adding, removing or renaming a key fails here until the schema says so.
//!
//! The check reads the subset of JSON Schema the files use (`type`, `properties`, `required`,
//! `additionalProperties`, `items`, and the annotations `$schema`, `title`, `description`) and
//! refuses any other keyword, so a schema can never rely on a rule this check would skip.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const KEYWORDS: [&str; 8] = [
    "$schema",
    "title",
    "description",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
];

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        other => panic!("unknown type '{other}' in the schema"),
    }
}

/// Every way `v` breaks `schema`, each with its JSON path.
fn check(v: &Value, schema: &Value, path: &str, errors: &mut Vec<String>) {
    let s = schema.as_object().expect("a schema is an object");
    for k in s.keys() {
        assert!(
            KEYWORDS.contains(&k.as_str()),
            "{path}: keyword '{k}' is not checked here"
        );
    }
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, v),
            Value::Array(ts) => ts.iter().any(|t| type_matches(t.as_str().unwrap(), v)),
            _ => panic!("{path}: bad type"),
        };
        if !ok {
            errors.push(format!("{path}: {v} is not of type {t}"));
            return;
        }
    }
    if let (Some(o), Some(props)) = (v.as_object(), s.get("properties")) {
        let props = props.as_object().unwrap();
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap();
            if !o.contains_key(r) {
                errors.push(format!("{path}: required key '{r}' is missing"));
            }
        }
        for (k, x) in o {
            match props.get(k) {
                Some(ps) => check(x, ps, &format!("{path}.{k}"), errors),
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    errors.push(format!("{path}: key '{k}' is not in the schema"))
                }
                None => {}
            }
        }
    }
    if let (Some(a), Some(items)) = (v.as_array(), s.get("items")) {
        for (i, x) in a.iter().enumerate() {
            check(x, items, &format!("{path}[{i}]"), errors);
        }
    }
}

fn errors(v: &Value, schema: &Value) -> Vec<String> {
    let mut e = Vec::new();
    check(v, schema, "$", &mut e);
    e
}

fn schema(name: &str) -> Value {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn cli(args: &[&str], plan: &str) -> Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram-planner"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(plan.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{plan}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Plans that between them reach every key and every null of the output: one GPU with and
/// without a GPU preset, fine-tuning, serving, data/tensor/pipeline parallelism with ZeRO and
/// offload, FSDP with mixed precision, a CPU step, a vision transformer and an LSTM.
const PLANS: [&str; 11] = [
    r#"{"model":"resnet50","batch":64,"gpu":"t4"}"#,
    r#"{"model":"resnet50"}"#,
    r#"{"model":"llama-2-7b","mode":"finetune","seq":512,"dtype":"bf16","lora":{"rank":16,"targets":["q","k","v","o"]},"gpu":"a100-80","parallel":{"gpus_per_node":2,"dp":2,"zero":2}}"#,
    r#"{"model":"llama-2-7b","mode":"infer","context":512,"new_tokens":64,"gpu":"a100-40","kv_cache_dtype":"fp8"}"#,
    r#"{"model":"llama-2-7b","mode":"infer","context":512,"new_tokens":64}"#,
    r#"{"model":"llama-2-7b","seq":1024,"dtype":"bf16","gpu":"h100-80","parallel":{"gpus_per_node":8,"tp":2,"pp":2,"zero":1,"micro_batches":4},"offload":{"optimizer":true}}"#,
    r#"{"model":"gpt2","mode":"finetune","frozen":2,"gpu":"a100-40"}"#,
    r#"{"model":"llama-2-7b","seq":512,"gpu":"a100-80","parallel":{"gpus_per_node":4,"fsdp":true,"zero":3,"mixed_precision":{"param_dtype":"bf16"}}}"#,
    r#"{"model":"resnet18","device":"cpu","batch":4}"#,
    r#"{"model":"vit_b_16","batch":8,"dtype":"amp_bf16","gpu":"a100-40"}"#,
    r#"{"model":"lstm-lm","batch":8,"gpu":"custom:24"}"#,
];

#[test]
fn estimate_json_matches_its_schema() {
    let s = schema("estimate.schema.json");
    for plan in PLANS {
        let v = cli(&["estimate", "--format", "json"], plan);
        let e = errors(&v, &s);
        assert!(e.is_empty(), "{plan}:\n{}", e.join("\n"));
    }
}

/// `--segments` adds the caching allocator's segment map at the peak: its segments hold every
/// allocated byte the replay counts, and the schema describes it.
#[test]
fn segment_map_matches_its_schema_and_the_reserved_figure() {
    let s = schema("estimate.schema.json");
    let plan = r#"{"model":"resnet18","batch":8,"alloc_conf":"max_split_size_mb:64"}"#;
    let v = cli(&["estimate", "--format", "json", "--segments"], plan);
    let e = errors(&v, &s);
    assert!(e.is_empty(), "{plan}:\n{}", e.join("\n"));
    let segs = v["segments_at_peak"].as_array().unwrap();
    assert!(segs.len() > 3, "{segs:?}");
    let size: u64 = segs.iter().map(|g| g["size"].as_u64().unwrap()).sum();
    let free: u64 = segs
        .iter()
        .flat_map(|g| g["blocks"].as_array().unwrap())
        .filter(|b| !b["allocated"].as_bool().unwrap())
        .map(|b| b["size"].as_u64().unwrap())
        .sum();
    assert!(size <= v["reserved_bytes"].as_u64().unwrap());
    assert_eq!(free, v["fragmentation_at_peak_bytes"].as_u64().unwrap());
}

#[test]
fn search_json_matches_its_schema() {
    let s = schema("search.schema.json");
    for (plan, args) in [
        (
            r#"{"model":"llama-2-7b","seq":1024,"dtype":"bf16","gpu":"a100-40"}"#,
            &["search", "--max-gpus", "16", "--offload"][..],
        ),
        (
            r#"{"model":"resnet50","batch":64,"gpu":"t4"}"#,
            &["search", "--max-gpus", "4"][..],
        ),
        (
            r#"{"model":"gpt2","seq":1024,"batch":16,"gpu":"custom:8","parallel":{"sequence_parallel":true}}"#,
            &["search", "--max-gpus", "8", "--top", "3"][..],
        ),
    ] {
        let v = cli(args, plan);
        assert!(!v.as_array().unwrap().is_empty(), "{plan}: nothing found");
        let e = errors(&v, &s);
        assert!(e.is_empty(), "{plan}:\n{}", e.join("\n"));
    }
}

/// The check fails on a key added, removed or renamed at any depth of a real output.
#[test]
fn a_changed_key_breaks_the_schema() {
    let s = schema("estimate.schema.json");
    let v = cli(&["estimate", "--format", "json"], PLANS[5]);
    assert!(errors(&v, &s).is_empty());
    let mut added = v.clone();
    added["per_gpu"]["spare_bytes"] = 1.into();
    assert!(!errors(&added, &s).is_empty(), "an added key passed");
    let mut removed = v.clone();
    removed
        .as_object_mut()
        .unwrap()
        .remove("peak_allocated_bytes");
    assert!(!errors(&removed, &s).is_empty(), "a removed key passed");
    let mut renamed = v.clone();
    let ranks = renamed["parallel"]["ranks"][0].as_object_mut().unwrap();
    let x = ranks.remove("stage").unwrap();
    ranks.insert("pipeline_stage".into(), x);
    assert!(!errors(&renamed, &s).is_empty(), "a renamed key passed");
    let mut retyped = v;
    retyped["breakdown"]["params"] = "12 GiB".into();
    assert!(!errors(&retyped, &s).is_empty(), "a retyped value passed");
}

/// Every object the schemas describe is closed, so the check above holds at every depth (the
/// search's plan leaves its `parallel` and `offload` values to the plan's own format).
#[test]
fn every_object_in_the_schemas_is_closed() {
    fn walk(s: &Value, path: &str) {
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            assert_eq!(
                s.get("additionalProperties"),
                Some(&Value::Bool(false)),
                "{path}"
            );
            for (k, p) in props {
                walk(p, &format!("{path}.{k}"));
            }
        }
        if let Some(items) = s.get("items") {
            walk(items, &format!("{path}[]"));
        }
    }
    walk(&schema("estimate.schema.json"), "estimate");
    walk(&schema("search.schema.json"), "search");
}
