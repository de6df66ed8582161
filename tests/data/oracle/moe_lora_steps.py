"""Measures peft LoRA fine-tuning steps of the mixtures of experts with the shared oracle harness
(`measure.run_case`, two steps, every storage counted and rounded to 512 B, AdamW), on real CPU
tensors like the MoE training records of `variant_steps.py` (whose configs, builder and balanced
`torch.topk` it imports: token t's j-th expert is `(t * k + j) % E`, the counts recorded).

The model is built and, for `"dtype": "bf16"`, converted to bf16 first; then
`peft.get_peft_model(model, LoraConfig(...))` wraps it as a user's script does: every base
parameter frozen, `lora_A`/`lora_B` created in fp32 (peft's `autocast_adapter_dtype`) around the
`nn.Linear` modules the targets name. The harness's own bf16 conversion is skipped for the wrapped
model, so the adapters stay fp32. In transformers 5.24 the experts are fused 3-D parameters
(`Qwen3MoeExperts.gate_up_proj`, `MixtralExperts.down_proj`) and the router a bare `weight`
parameter: `nn.Linear` modules are only the attention projections (and `lm_head`), so those are
what LoRA targets; DeepSeek-V3's are its latent attention's `q_a_proj`, `q_b_proj` (`q_proj`
without `q_lora_rank`: the `deepseek-v3-qproj-small-2l` config), `kv_a_proj_with_mqa`,
`kv_b_proj` and `o_proj`. One Mixtral case targets peft's default for `mixtral`
(`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`: `q_proj`, `v_proj`), named explicitly: with
`target_modules=None` peft 0.21.2 raises `NoMatchingPeftModuleError` on this model ("No
`target_modules` passed but also no `target_parameters` found"); peft has no default for
`qwen3_moe`, `qwen2_moe`, `gpt_oss` or `deepseek_v3` ("Please specify `target_modules`"). The optimizer gets every parameter (the harness's
`unique_params`); the frozen ones never get a gradient, so AdamW keeps no state for them.

One Qwen3-MoE case runs transformers' grouped experts (`set_experts_implementation("grouped_mm")`,
`grouped_mm_experts_forward`) instead of the eager loop.

Usage: python moe_lora_steps.py OUT.jsonl [MODEL-SUBSTRING [DTYPE [EXPERTS-IMPL]]]  (with the oracle venv's python)."""
import json
import sys

import oracle_env

oracle_env.enter(__file__)

import collections

import torch
import measure
import mla_sinks_steps  # noqa: F401  (adds DeepSeek-V3 and gpt-oss to variant_steps' tables)
import variant_steps
from transformers import masking_utils

LORA = {}
# DeepSeek-V3's latent attention (`DeepseekV3Attention.__init__`): `q_a_proj`, `q_b_proj`,
# `kv_a_proj_with_mqa`, `kv_b_proj`, `o_proj`, every one an `nn.Linear`.
MODULE = {"kv_a": "kv_a_proj_with_mqa"}


def lora_build(spec):
    wl = variant_steps.build(spec)
    from peft import LoraConfig, get_peft_model

    if spec.get("experts_impl"):
        wl.model.set_experts_implementation(spec["experts_impl"])
    if spec["dtype"] == "bf16":
        ORIG_CONVERT(wl.model, torch.bfloat16)
    l = LORA[measure.case_id(spec)]
    kw = dict(r=l["rank"], lora_alpha=l["alpha"], lora_dropout=l["dropout"], target_modules=[MODULE.get(t, t + "_proj") for t in l["targets"]])
    wl.model = get_peft_model(wl.model, LoraConfig(**kw))
    return wl


MASK = collections.Counter()


def counting_mask_skip(orig):
    def ignore(*args, **kwargs):
        skip = orig(*args, **kwargs)
        MASK[f"skipped={skip}"] += 1
        return skip

    return ignore


masking_utils._ignore_causal_mask_sdpa = counting_mask_skip(masking_utils._ignore_causal_mask_sdpa)
ORIG_CONVERT = measure.convert_dtype
# The model was converted before peft wrapped it; converting again would make the adapters bf16.
measure.convert_dtype = lambda model, dtype: None
variant_steps.models.build = lora_build
# Without `q_lora_rank` the queries go through one `q_proj` (`DeepseekV3Attention.__init__`).
variant_steps.ALL["deepseek-v3-qproj-small-2l"] = variant_steps.MOE["deepseek-v3-qproj-small-2l"] = (
    "DeepseekV3Config", dict(variant_steps.ALL["deepseek-v3-small-2l"][1], q_lora_rank=None))


def cases():
    out = []
    for name, dtype, lora, impl in [
        ("qwen3moe-small-2l", "bf16", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), None),
        ("qwen3moe-small-2l", "fp32", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), None),
        ("mixtral-small-2l", "bf16", dict(rank=8, alpha=8, targets=["q", "v"], dropout=0.0), None),
        ("mixtral-small-2l", "fp32", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.05), None),
        ("qwen2moe-small-2l", "bf16", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), None),
        ("gpt-oss-small-2l", "bf16", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), None),
        ("qwen3moe-small-2l", "bf16", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), "grouped_mm"),
        ("deepseek-v3-small-2l", "bf16", dict(rank=16, alpha=32, targets=["q_b", "kv_b"], dropout=0.0), None),
        ("deepseek-v3-small-2l", "bf16", dict(rank=16, alpha=32, targets=["q_a", "q_b", "kv_a", "kv_b", "o"], dropout=0.0), None),
        ("deepseek-v3-small-2l", "fp32", dict(rank=8, alpha=16, targets=["q_a", "q_b", "kv_a", "kv_b", "o"], dropout=0.05), None),
        ("deepseek-v3-qproj-small-2l", "bf16", dict(rank=16, alpha=32, targets=["q", "kv_a", "kv_b", "o"], dropout=0.0), None),
    ]:
        # transformers 5.24 has no SDPA path for gpt-oss.
        attn = "eager" if name.startswith("gpt-oss") else "sdpa"
        s = dict(model=name, seq=256, batch=2, dtype=dtype, opt="adamw", ckpt="none", attn=attn, mode="real", device="cpu",
                 profile=False, lora=f"r{lora['rank']}-{'-'.join(lora['targets'])}-d{lora['dropout']}")
        if impl:
            s["experts_impl"] = impl
        out.append((s, lora))
    return out


def main(out):
    only = sys.argv[2] if len(sys.argv) > 2 else None
    only_dtype = sys.argv[3] if len(sys.argv) > 3 else None
    only_impl = sys.argv[4] if len(sys.argv) > 4 else None
    with open(out, "a") as f:
        for s, lora in cases():
            if (only and only not in s["model"]) or (only_dtype and s["dtype"] != only_dtype) or \
                    (only_impl and s.get("experts_impl") != only_impl):
                continue
            variant_steps.TEMPLATES.clear()
            variant_steps.ROUTING.clear()
            cfg = variant_steps.config(s["model"])
            e = getattr(cfg, "num_local_experts", None) or cfg.num_experts
            k = cfg.num_experts_per_tok
            t = s["batch"] * s["seq"]
            tmpl = (torch.arange(t * k) % e).view(t, k)
            variant_steps.TEMPLATES[((t, e), k)] = tmpl
            variant_steps.ROUTING[f"tokens {t}, top {k} of {e}"] = torch.bincount(tmpl.reshape(-1), minlength=e).tolist()
            case_id = "lora-" + s["lora"] + "/" + measure.case_id(s) + ("/" + s["experts_impl"] if s.get("experts_impl") else "")
            LORA[measure.case_id(s)] = lora
            MASK.clear()
            rec = measure.run_case(s)
            plan = {"model": s["model"], "hf_config": variant_steps.planner_config(s["model"]), "mode": "finetune", "seq": s["seq"],
                    "batch": s["batch"], "dtype": s["dtype"], "opt": "adamw", "attn": s["attn"], "device": "cpu",
                    "lora": {key: lora[key] for key in ("rank", "alpha", "targets", "dropout")}}
            if s.get("experts_impl"):
                plan["experts_impl"] = s["experts_impl"]
            if s["attn"] == "sdpa":
                # The batches carry no padding: `sdpa_mask` skips the causal mask at both steps and
                # attention runs with `is_causal` and `enable_gqa`.
                assert MASK.get("skipped=True") == 2, MASK
                plan["causal_mask"] = "skipped"
            keep = {key: rec[key] for key in ("peak_r512", "peak", "param_count", "param_bytes", "grad_bytes", "opt_state_bytes",
                                              "activation_bytes", "optimizer_impl", "peak_forward", "steps") if key in rec}
            import peft

            versions = dict(measure.versions(), peft=peft.__version__)
            out_rec = {"case_id": case_id, "kind": "train", "plan": plan, **keep, "spec": s, "versions": versions,
                       "device_faked": False,
                       "causal_mask_skips": dict(MASK), "routing_counts": dict(variant_steps.ROUTING),
                       "routing": "balanced: token t's j-th expert is (t * k + j) % E"}
            f.write(json.dumps(out_rec) + "\n")
            f.flush()
            print(case_id, rec.get("peak_r512"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
