"""Measures training steps of the newer decoder families with the shared oracle harness
(`measure.run_case`, two steps, every storage counted and rounded to 512 B, AdamW foreach):
Qwen3, Phi-3, OLMo 2, Gemma 2 and Gemma 3 (text) at two layers of their published widths on the
fake sm_90 CUDA device, and the mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE) at two
layers and reduced widths on real CPU tensors: their routing makes shapes data-dependent
(`nonzero`, `torch.where`), which FakeTensorMode cannot run. The experts run transformers'
eager per-expert loop (`set_experts_implementation("eager")`).

Routing is made balanced and recorded: `torch.topk` over a router's `[tokens, E]`
probabilities returns the indices `(t * k + j) % E` for token t's j-th choice (a clone of a
template made before the measurement, so the same one `[tokens, k]` int64 allocation topk makes)
and the values gathered at them (`torch.gather`: one `[tokens, k]` allocation and, in backward,
a zero tensor of the input's size scattered into, as topk's own backward does). Every expert then
gets `tokens * k / E` tokens.

Usage: python variant_steps.py OUT.jsonl [MODEL-SUBSTRING [SEQ]]  (with the oracle venv's python)."""
import json
import sys

import oracle_env

oracle_env.enter(__file__)

import torch
import measure
import models

DENSE = {
    # name: (transformers config class, kwargs): two layers of the published model's widths.
    "qwen3-8b-2l": ("Qwen3Config", dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=2, num_attention_heads=32,
                                         num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                                         tie_word_embeddings=False)),
    "phi3-mini-2l": ("Phi3Config", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=2, num_attention_heads=32,
                                        num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096,
                                        tie_word_embeddings=False)),
    "olmo2-7b-2l": ("Olmo2Config", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=2, num_attention_heads=32,
                                        num_key_value_heads=32, vocab_size=100352, max_position_embeddings=4096,
                                        tie_word_embeddings=False)),
    "gemma2-9b-2l": ("Gemma2Config", dict(hidden_size=3584, intermediate_size=14336, num_hidden_layers=2, num_attention_heads=16,
                                          num_key_value_heads=8, head_dim=256, vocab_size=256000, sliding_window=4096)),
    "gemma3-12b-2l": ("Gemma3TextConfig", dict(hidden_size=3840, intermediate_size=15360, num_hidden_layers=2,
                                               num_attention_heads=16, num_key_value_heads=8, head_dim=256, vocab_size=262208,
                                               sliding_window=1024, layer_types=["sliding_attention", "full_attention"])),
}
MOE = {
    "mixtral-small-2l": ("MixtralConfig", dict(hidden_size=1024, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                                               num_key_value_heads=4, vocab_size=8192, num_local_experts=8, num_experts_per_tok=2,
                                               tie_word_embeddings=False)),
    "qwen2moe-small-2l": ("Qwen2MoeConfig", dict(hidden_size=1024, intermediate_size=2048, num_hidden_layers=2,
                                                 num_attention_heads=8, num_key_value_heads=8, vocab_size=8192, num_experts=16,
                                                 num_experts_per_tok=4, moe_intermediate_size=512,
                                                 shared_expert_intermediate_size=1024, tie_word_embeddings=False)),
    "qwen3moe-small-2l": ("Qwen3MoeConfig", dict(hidden_size=1024, intermediate_size=2048, num_hidden_layers=2,
                                                 num_attention_heads=8, num_key_value_heads=4, head_dim=128, vocab_size=8192,
                                                 num_experts=16, num_experts_per_tok=4, moe_intermediate_size=512,
                                                 norm_topk_prob=True, tie_word_embeddings=False)),
}
ALL = {**DENSE, **MOE}
TEMPLATES = {}
ROUTING = {}


def config(name):
    import transformers

    cls, kw = ALL[name]
    return getattr(transformers, cls)(**kw)


def balanced_topk(orig):
    def topk(x, k, dim=-1, largest=True, sorted=True, **kw):
        key = (tuple(x.shape), k)
        if dim in (-1, x.dim() - 1) and x.dim() == 2 and key in TEMPLATES:
            idx = TEMPLATES[key].clone()
            return torch.gather(x, 1, idx), idx
        return orig(x, k, dim=dim, largest=largest, sorted=sorted, **kw)

    return topk


def build(spec):
    from transformers import AutoModelForCausalLM

    name = spec["model"]
    if name not in ALL:
        return orig_build(spec)
    cfg = config(name)
    cfg.use_cache = False
    cfg._attn_implementation = spec.get("attn", "sdpa")
    model = AutoModelForCausalLM.from_config(cfg)
    if name in MOE:
        model.set_experts_implementation("eager")
    V = cfg.vocab_size
    seq = spec["seq"]

    def make_batch(device, dtype, batch):
        ids = torch.randint(0, V, (batch, seq), device=device)
        return {"input_ids": ids, "labels": ids}

    def loss_fn(model, b):
        return model(**b).loss

    return models.Workload(model, make_batch, loss_fn, "transformer", notes=[], ckpt_desc="none")


orig_build = models.build
models.build = build
torch.topk = balanced_topk(torch.topk)


def planner_config(name):
    cfg = config(name).to_dict()
    return json.loads(json.dumps(cfg, default=str))


def main(out):
    cases = []
    for name in DENSE:
        # transformers 5.24 refuses SDPA for Gemma 2 (eager is its default).
        attn = "eager" if name.startswith("gemma2") else "sdpa"
        for dtype in ("fp32", "amp_bf16"):
            cases.append(dict(model=name, seq=512, batch=1, dtype=dtype, opt="adamw", ckpt="none", attn=attn, mode="fake", device="cuda"))
        # Activations above the optimizer step's peak.
        for dtype in ("fp32", "amp_bf16"):
            cases.append(dict(model=name, seq=2048, batch=4, dtype=dtype, opt="adamw", ckpt="none", attn=attn, mode="fake", device="cuda"))
    for name in MOE:
        for dtype in ("fp32", "bf16"):
            cases.append(dict(model=name, seq=256, batch=2, dtype=dtype, opt="adamw", ckpt="none", attn="sdpa", mode="real", device="cpu",
                              profile=False))
    only = sys.argv[2] if len(sys.argv) > 2 else None
    only_seq = int(sys.argv[3]) if len(sys.argv) > 3 else None
    with open(out, "a") as f:
        for s in cases:
            if (only and only not in s["model"]) or (only_seq and s["seq"] != only_seq):
                continue
            TEMPLATES.clear()
            ROUTING.clear()
            if s["model"] in MOE:
                cfg = config(s["model"])
                e = getattr(cfg, "num_local_experts", None) or cfg.num_experts
                k = cfg.num_experts_per_tok
                t = s["batch"] * s["seq"]
                TEMPLATES[((t, e), k)] = (torch.arange(t * k) % e).view(t, k)
                ROUTING[f"tokens {t}, top {k} of {e}"] = torch.bincount(TEMPLATES[((t, e), k)].reshape(-1), minlength=e).tolist()
            case_id = measure.case_id(s)
            rec = measure.run_case(s)
            plan = {"model": s["model"], "hf_config": planner_config(s["model"]), "seq": s["seq"], "batch": s["batch"],
                    "dtype": s["dtype"], "opt": "adamw", "attn": s["attn"]}
            if s["device"] == "cpu":
                plan["device"] = "cpu"
            keep = {k: rec[k] for k in ("peak_r512", "peak", "param_bytes", "grad_bytes", "opt_state_bytes", "activation_bytes",
                                        "kernel_ops_seen", "optimizer_impl", "peak_forward", "steps") if k in rec}
            out_rec = {"case_id": case_id, "kind": "train", "plan": plan, **keep, "spec": s, "versions": measure.versions(),
                       "device_faked": s["mode"] == "fake", "routing_counts": dict(ROUTING),
                       "routing": "balanced: token t's j-th expert is (t * k + j) % E" if s["model"] in MOE else None}
            f.write(json.dumps(out_rec) + "\n")
            f.flush()
            print(case_id, rec.get("peak_r512"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
