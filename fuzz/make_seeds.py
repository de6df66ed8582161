"""Writes the fuzz targets' committed seed corpora (fuzz/seeds/<target>/) from the tests' valid
and hostile inputs: the reference records' plans and config.json files (tests/data/*.jsonl), the
CLI tests' plans and the URL tests' hostile queries. Run from the repository root; the output is
committed, so fuzzing needs no Python."""

import glob
import hashlib
import json
import os
import re

PLAN_KEYS = [
    "model", "hf_config", "batch", "res", "seq", "dtype", "opt", "optimizer", "optimizer_impl",
    "ckpt", "attn", "causal_mask", "cudnn", "device", "accumulation", "gpu", "mode", "lora",
    "quantization", "double_quant", "group_size", "kv_cache_dtype", "sparsity", "frozen",
    "context", "new_tokens", "parallel", "offload", "alloc_conf", "stack", "expert_skew",
    "experts_impl", "images",
]


def write(target, data):
    d = os.path.join("fuzz", "seeds", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def records():
    for path in sorted(glob.glob("tests/data/*.jsonl")):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    yield json.loads(line)


plans, configs, seen_plan, seen_cfg = [], {}, set(), set()
for r in records():
    # Older records hold the plan's keys at the top level, newer ones under "plan".
    r = r["plan"] if isinstance(r.get("plan"), dict) else r
    plan = {k: v for k, v in r.items() if k in PLAN_KEYS}
    if "model" not in plan:
        continue
    cfg = plan.get("hf_config")
    if isinstance(cfg, dict):
        mt = cfg.get("model_type")
        if mt not in configs:
            configs[mt] = cfg
        plan = dict(plan, hf_config={k: v for k, v in cfg.items() if not isinstance(v, (dict, list))})
    shape = (plan["model"], tuple(sorted(plan)))
    if shape in seen_plan:
        continue
    seen_plan.add(shape)
    plans.append(plan)

# The CLI tests' plans, valid and refused, and hostile shapes.
cli_tests = open("tests/cli.rs").read()
extra = [m.encode().decode("unicode_escape") for m in re.findall(r'r#"(\{.*?\})"#', cli_tests)]
hostile = [
    "{ not json", "{}", "[]", "null", '{"model":"resnet50","batch":0}',
    '{"model":"resnet50","batch":18446744073709551615}',
    '{"model":"gpt2","seq":16777216,"batch":4096}',
    '{"model":"llama-3-70b","parallel":{"pp":1048576,"gpus_per_node":1}}',
    '{"model":"resnet50","ckpt":"k1000000"}',
    '{"model":"lstm-lm","seq":16384,"batch":4096}',
    '{"model":"gpt2","mode":"infer","context":16777216,"new_tokens":16777216}',
    '{"model":"gpt2","parallel":{"tp":2,"pp":2,"dp":2,"micro_batches":65536,"interleave":4}}',
    '{"model":"resnet50","gpu":"custom:1e999"}',
    '{"model":"qwen3-30b-a3b","dtype":"bf16","experts_impl":"grouped_mm","parallel":{"dp":8,"ep":8}}',
    '{"model":"deepseek-v3","dtype":"bf16","seq":4096,"parallel":{"dp":256,"ep":256,"fsdp":true}}',
]
for p in plans[:60]:
    text = json.dumps(p, separators=(",", ":"))
    write("plan_json", text)
    write("estimate", text)
for t in extra + hostile:
    write("plan_json", t)
    write("estimate", t)

# The importer: one config per model_type; the first byte picks the model_type the target forces.
for i, (mt, cfg) in enumerate(sorted(configs.items(), key=lambda kv: str(kv[0]))):
    text = json.dumps(cfg, separators=(",", ":"))
    write("hf_config", bytes([255]) + text.encode())
    write("hf_config", bytes([i]) + text.encode())
for t in ["{}", '{"model_type":"gpt2","n_layer":0}', '{"model_type":"llama","num_attention_heads":3,"hidden_size":64}']:
    write("hf_config", bytes([255]) + t.encode())

# The URL: every query the URL tests use (valid and hostile).
url_tests = open("src/ui/logic/url.rs").read()
for q in set(re.findall(r'"([^"\s]*=[^"\s]*)"', url_tests)):
    write("url_query", q)
for p in plans[:20]:
    q = "&".join(f"{k}={v}" for k, v in p.items() if not isinstance(v, (dict, list)))
    write("url_query", q)
