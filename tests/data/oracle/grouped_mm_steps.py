"""Measures training steps of the mixtures of experts with transformers' grouped experts
(`set_experts_implementation("grouped_mm")`: `grouped_mm_experts_forward` in
`transformers/integrations/moe.py`, the token-expert pairs sorted by expert and two
`torch._grouped_mm` calls over all of them) on real CPU tensors, with the shared oracle harness
(`measure.run_case`: two steps, every storage counted and rounded to 512 B, AdamW foreach).

The models, their configs and the balanced routing come from `variant_steps` (Mixtral, Qwen2-MoE,
Qwen3-MoE) and `mla_sinks_steps` (DeepSeek-V3, gpt-oss) by import: the same builder (then switched
from the eager loop to `grouped_mm`) and the same `torch.topk` replacement (read their
docstrings). torch 2.15 has a CPU kernel for `torch._grouped_mm` in fp32 and bf16, and
transformers 5.24 takes it on the CPU for torch > 2.10 (`_can_use_grouped_mm`); the driver counts
what really ran (the grouped experts' forwards, `_can_use_grouped_mm`'s answers, the calls of
`torch.nn.functional.grouped_mm`) and records it as `experts_path`, failing a case whose forward
took any other path. The counters are Python integers: they allocate no tensor storage.

The batches carry no attention mask, and on real tensors transformers proves them unpadded: with
SDPA, `sdpa_mask` skips the mask (`_ignore_causal_mask_sdpa` returns True, counted in
`causal_mask_skips`) and attention runs with `is_causal` and `enable_gqa`, so those plans say
`"causal_mask": "skipped"`; eager attention (gpt-oss) always builds its mask. Qwen2-MoE also
builds its sliding-window mask each step (two more calls, not skipped: `[1, 1, S, S]` bool,
64 KiB, held through the forward), which none of its full-attention layers reads.

Usage: python grouped_mm_steps.py OUT.jsonl [MODEL-SUBSTRING [DTYPE]]  (with the oracle venv's python)."""
import collections
import json
import sys

import oracle_env

oracle_env.enter(__file__)

import torch  # noqa: E402
import measure  # noqa: E402
import models  # noqa: E402
import variant_steps as vs  # noqa: E402
import mla_sinks_steps as ms  # noqa: E402, F401  (adds DeepSeek-V3 and gpt-oss to vs.MOE)
from transformers import masking_utils  # noqa: E402
from transformers.integrations import moe as hf_moe  # noqa: E402

PATH = collections.Counter()


def counting_experts_forward(orig):
    def forward(self, *args, **kwargs):
        PATH["grouped_mm_experts_forward"] += 1
        return orig(self, *args, **kwargs)

    return forward


def counting_can_use(orig):
    def can_use(*args, **kwargs):
        ok = orig(*args, **kwargs)
        PATH[f"_can_use_grouped_mm={ok}"] += 1
        return ok

    return can_use


def counting_grouped_mm(orig):
    def grouped_mm(*args, **kwargs):
        PATH["torch.nn.functional.grouped_mm"] += 1
        return orig(*args, **kwargs)

    return grouped_mm


def counting_mask_skip(orig):
    def ignore(*args, **kwargs):
        skip = orig(*args, **kwargs)
        MASK[f"skipped={skip}"] += 1
        return skip

    return ignore


MASK = collections.Counter()
masking_utils._ignore_causal_mask_sdpa = counting_mask_skip(masking_utils._ignore_causal_mask_sdpa)
hf_moe.ALL_EXPERTS_FUNCTIONS["grouped_mm"] = counting_experts_forward(hf_moe.grouped_mm_experts_forward)
hf_moe._can_use_grouped_mm = counting_can_use(hf_moe._can_use_grouped_mm)
torch.nn.functional.grouped_mm = counting_grouped_mm(torch.nn.functional.grouped_mm)

variant_build = models.build


def build(spec):
    wl = variant_build(spec)
    if spec["model"] in vs.MOE:
        wl.model.set_experts_implementation("grouped_mm")
        assert wl.model.config._experts_implementation == "grouped_mm"
    return wl


models.build = build


def moe_layers(cfg):
    return cfg.num_hidden_layers - getattr(cfg, "first_k_dense_replace", 0)


def main(out):
    cases = []
    for name in vs.MOE:
        # transformers 5.24 has no SDPA path for gpt-oss.
        attn = "eager" if name.startswith("gpt-oss") else "sdpa"
        for dtype in ("fp32", "bf16"):
            cases.append(dict(model=name, seq=256, batch=2, dtype=dtype, opt="adamw", ckpt="none", attn=attn, mode="real",
                              device="cpu", profile=False))
    only = sys.argv[2] if len(sys.argv) > 2 else None
    only_dtype = sys.argv[3] if len(sys.argv) > 3 else None
    with open(out, "a") as f:
        for s in cases:
            if (only and only not in s["model"]) or (only_dtype and s["dtype"] != only_dtype):
                continue
            vs.TEMPLATES.clear()
            vs.ROUTING.clear()
            PATH.clear()
            MASK.clear()
            cfg = vs.config(s["model"])
            e = getattr(cfg, "num_local_experts", None) or getattr(cfg, "n_routed_experts", None) or cfg.num_experts
            k = cfg.num_experts_per_tok
            t = s["batch"] * s["seq"]
            vs.TEMPLATES[((t, e), k)] = (torch.arange(t * k) % e).view(t, k)
            vs.ROUTING[f"tokens {t}, top {k} of {e}"] = torch.bincount(vs.TEMPLATES[((t, e), k)].reshape(-1), minlength=e).tolist()
            case_id = measure.case_id(s)
            rec = measure.run_case(s)
            # Two steps, each forward through every sparse layer; two grouped GEMMs each.
            forwards = 2 * moe_layers(cfg)
            path = dict(PATH)
            assert path.get("grouped_mm_experts_forward") == forwards, path
            assert path.get("torch.nn.functional.grouped_mm") == 2 * forwards, path
            assert path.get("_can_use_grouped_mm=True") == 2 * forwards and "_can_use_grouped_mm=False" not in path, path
            plan = {"model": s["model"], "hf_config": vs.planner_config(s["model"]), "seq": s["seq"], "batch": s["batch"],
                    "dtype": s["dtype"], "opt": "adamw", "attn": s["attn"], "device": "cpu", "experts_impl": "grouped_mm"}
            mask = dict(MASK)
            if s["attn"] == "sdpa":
                # The full-attention mask, once per step, skipped every time.
                assert mask.get("skipped=True") == 2, mask
                plan["causal_mask"] = "skipped"
            else:
                assert not mask, mask
            keep = {k: rec[k] for k in ("peak_r512", "peak", "param_bytes", "grad_bytes", "opt_state_bytes", "activation_bytes",
                                        "kernel_ops_seen", "optimizer_impl", "peak_forward", "steps") if k in rec}
            out_rec = {"case_id": case_id + "/grouped_mm", "kind": "train", "plan": plan, **keep, "spec": s,
                       "versions": measure.versions(), "device_faked": False, "experts_path": path,
                       "causal_mask_skips": mask,
                       "routing_counts": dict(vs.ROUTING), "routing": "balanced: token t's j-th expert is (t * k + j) % E"}
            f.write(json.dumps(out_rec) + "\n")
            f.flush()
            print(out_rec["case_id"], rec.get("peak_r512"), path, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
