"""Measures training steps of DeepSeek-V3 (multi-head latent attention, grouped sigmoid router,
shared experts, dense first layers) and gpt-oss (attention sinks, alternating sliding-window and
full layers, clamped SwiGLU experts with biases) at two layers and reduced widths on real CPU
tensors, with the shared oracle harness (`measure.run_case`: two steps, every storage counted
and rounded to 512 B, AdamW foreach).

Everything MoE-specific comes from `variant_steps` by import: its `build` (the model from its
config class, `use_cache=False`, the experts' eager per-expert loop) and its `torch.topk`
replacement that makes routing balanced and recordable (read its docstring). For DeepSeek-V3
the replacement catches the final `torch.topk(scores_for_choice, k=top_k)` over `[tokens, E]`;
the group scores' `.topk(2)` (a 3-D tensor method) and the `topk_group` choice over
`[tokens, n_group]` run as written, so the group mask is computed but the experts chosen are the
balanced ones. gpt-oss runs eager attention (transformers 5.24 has no SDPA path for it).

Usage: python mla_sinks_steps.py OUT.jsonl [MODEL-SUBSTRING]  (with the oracle venv's python)."""
import json
import sys

import oracle_env

oracle_env.enter(__file__)

import torch  # noqa: E402
import measure  # noqa: E402
import variant_steps as vs  # noqa: E402

NEW = {
    "deepseek-v3-small-2l": ("DeepseekV3Config", dict(
        hidden_size=1024, intermediate_size=2048, moe_intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=8, q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
        n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2, first_k_dense_replace=1,
        routed_scaling_factor=2.5, norm_topk_prob=True, vocab_size=8192, max_position_embeddings=4096,
        tie_word_embeddings=False)),
    "gpt-oss-small-2l": ("GptOssConfig", dict(
        hidden_size=1024, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
        head_dim=64, num_local_experts=16, num_experts_per_tok=4, sliding_window=128, vocab_size=8192,
        layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False)),
}
vs.ALL.update(NEW)
vs.MOE.update(NEW)


def main(out):
    cases = []
    for name in NEW:
        attn = "eager" if name.startswith("gpt-oss") else "sdpa"
        for dtype in ("fp32", "bf16"):
            cases.append(dict(model=name, seq=256, batch=2, dtype=dtype, opt="adamw", ckpt="none", attn=attn, mode="real",
                              device="cpu", profile=False))
        if attn == "sdpa":
            cases.append(dict(model=name, seq=256, batch=2, dtype="fp32", opt="adamw", ckpt="none", attn="eager", mode="real",
                              device="cpu", profile=False))
    only = sys.argv[2] if len(sys.argv) > 2 else None
    with open(out, "a") as f:
        for s in cases:
            if only and only not in s["model"]:
                continue
            vs.TEMPLATES.clear()
            vs.ROUTING.clear()
            cfg = vs.config(s["model"])
            e, k = cfg.num_local_experts, cfg.num_experts_per_tok
            t = s["batch"] * s["seq"]
            vs.TEMPLATES[((t, e), k)] = (torch.arange(t * k) % e).view(t, k)
            vs.ROUTING[f"tokens {t}, top {k} of {e}"] = torch.bincount(vs.TEMPLATES[((t, e), k)].reshape(-1), minlength=e).tolist()
            case_id = measure.case_id(s)
            rec = measure.run_case(s)
            plan = {"model": s["model"], "hf_config": vs.planner_config(s["model"]), "seq": s["seq"], "batch": s["batch"],
                    "dtype": s["dtype"], "opt": "adamw", "attn": s["attn"], "device": "cpu"}
            keep = {k: rec[k] for k in ("peak_r512", "peak", "param_bytes", "grad_bytes", "opt_state_bytes", "activation_bytes",
                                        "kernel_ops_seen", "optimizer_impl", "peak_forward", "steps") if k in rec}
            out_rec = {"case_id": case_id, "kind": "train", "plan": plan, **keep, "spec": s, "versions": measure.versions(),
                       "device_faked": False, "routing_counts": dict(vs.ROUTING),
                       "routing": "balanced: token t's j-th expert is (t * k + j) % E"}
            f.write(json.dumps(out_rec) + "\n")
            f.flush()
            print(case_id, rec.get("peak_r512"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
