"""Measures full training steps of gpt-oss (two layers, reduced widths: `mla_sinks_steps.py`'s
`gpt-oss-small-2l`) with every decoder layer checkpointed the way transformers'
`gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})` does
(non-reentrant `torch.utils.checkpoint` around each `GptOssDecoderLayer`), on real CPU tensors
with the balanced routing of `variant_steps.py` (token t's j-th expert is `(t * k + j) % E`),
with the shared oracle harness (`measure.run_case`: two steps, every storage counted and rounded
to 512 B, AdamW foreach).

`--trace CASE-INDEX` instead prints the tracker's live bytes after every op of step 2 (phase, op,
live), for comparing with the estimator's `Estimate.timeline`.

Usage: python gptoss_ckpt_steps.py OUT.jsonl [CASE-INDICES, e.g. 2,3]  (with the oracle venv's python)
       python gptoss_ckpt_steps.py --trace N"""
import json
import sys

import oracle_env

oracle_env.enter(__file__)

import torch  # noqa: E402
import measure  # noqa: E402
import moe_lora_steps  # noqa: E402  (adds gpt-oss to variant_steps' tables; its bf16 conversion bypass)
import variant_steps as vs  # noqa: E402

NAME = "gpt-oss-small-2l"
LORA = dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0)


def ckpt_build(spec):
    """The model in the step's dtype, every decoder layer checkpointed, then (for a LoRA case) peft
    wraps it, as `qlora_moe_steps.qlora_build` orders it (fp32 adapters: the harness's own bf16
    conversion is bypassed by `moe_lora_steps`)."""
    wl = vs.build(spec)
    if spec["dtype"] == "bf16":
        moe_lora_steps.ORIG_CONVERT(wl.model, torch.bfloat16)
    if spec["ckpt"] == "layer":
        wl.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        wl.ckpt_desc = "HF gradient_checkpointing_enable(use_reentrant=False): every decoder layer"
    if spec.get("lora"):
        from peft import LoraConfig, get_peft_model

        kw = dict(r=LORA["rank"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                  target_modules=[t + "_proj" for t in LORA["targets"]])
        wl.model = get_peft_model(wl.model, LoraConfig(**kw))
    return wl


vs.models.build = ckpt_build


def cases():
    out = []
    for seq, batch, dtype, lora in ((256, 2, "bf16", False), (256, 2, "amp_bf16", False), (1024, 2, "bf16", True),
                                    (1024, 2, "amp_bf16", True), (512, 4, "bf16", True)):
        s = dict(model=NAME, seq=seq, batch=batch, dtype=dtype, opt="adamw", ckpt="layer", attn="eager", mode="real",
                 device="cpu", profile=False)
        if lora:
            s["lora"] = f"r{LORA['rank']}-{'-'.join(LORA['targets'])}-d{LORA['dropout']}"
        out.append(s)
    return out


def routing(s):
    vs.TEMPLATES.clear()
    vs.ROUTING.clear()
    cfg = vs.config(s["model"])
    e, k = cfg.num_local_experts, cfg.num_experts_per_tok
    t = s["batch"] * s["seq"]
    vs.TEMPLATES[((t, e), k)] = (torch.arange(t * k) % e).view(t, k)
    vs.ROUTING[f"tokens {t}, top {k} of {e}"] = torch.bincount(vs.TEMPLATES[((t, e), k)].reshape(-1), minlength=e).tolist()


def trace(s):
    import tracker

    log = []
    orig = tracker.LiveTracker.__torch_dispatch__

    def disp(self, func, types, args=(), kwargs=None):
        out = orig(self, func, types, args, kwargs)
        if self.step == 2:
            log.append((self.phase, func.__name__, self.live[self.target]))
        return out

    tracker.LiveTracker.__torch_dispatch__ = disp
    routing(s)
    measure.run_case(s)
    for i, (ph, name, live) in enumerate(log):
        print(i, ph, name, live)


def main(out):
    only = [int(i) for i in sys.argv[2].split(",")] if len(sys.argv) > 2 else None
    with open(out, "a") as f:
        for i, s in enumerate(cases()):
            if only is not None and i not in only:
                continue
            routing(s)
            rec = measure.run_case(s)
            plan = {"model": s["model"], "hf_config": vs.planner_config(s["model"]), "seq": s["seq"], "batch": s["batch"],
                    "dtype": s["dtype"], "opt": "adamw", "ckpt": "layer", "attn": s["attn"], "device": "cpu"}
            versions = measure.versions()
            case_id = measure.case_id(s)
            if s.get("lora"):
                import peft

                plan["mode"] = "finetune"
                plan["lora"] = dict(LORA)
                versions["peft"] = peft.__version__
                case_id = "lora-" + s["lora"] + "/" + case_id
            keep = {k: rec[k] for k in ("peak_r512", "peak", "param_bytes", "grad_bytes", "opt_state_bytes", "activation_bytes",
                                        "kernel_ops_seen", "optimizer_impl", "peak_forward", "steps", "ckpt_desc") if k in rec}
            out_rec = {"case_id": case_id, "kind": "train", "plan": plan, **keep, "spec": s, "versions": versions, "device_faked": False, "routing_counts": dict(vs.ROUTING),
                       "routing": "balanced: token t's j-th expert is (t * k + j) % E"}
            f.write(json.dumps(out_rec) + "\n")
            f.flush()
            print(out_rec["case_id"], rec.get("peak_r512"), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--trace":
        trace(cases()[int(sys.argv[2])])
    else:
        main(sys.argv[1])
