"""Measures serving (`mode: infer`) of the newer families with the shared oracle harness's
`LiveTracker` (every storage counted, each rounded to 512 B), the way the serving records of
`finetune-infer-steps.jsonl` were measured: `model.eval()` under `torch.no_grad()` with the cache
`generate` builds (`DynamicCache(config=model.config)`: transformers 5.24 gives the sliding layers
of Gemma 2/3 and gpt-oss a `DynamicSlidingWindowLayer`, the others a `DynamicLayer`), and the
forward calls of `GenerationMixin._sample`: the prefill of `context` tokens, then one token per
sequence for each further new token, every call with `logits_to_keep=1`; after each, the last
logits copied to fp32 (`outputs.logits[:, -1].to(copy=True, dtype=torch.float32)`), the argmax,
and `del outputs`; the next forward takes the new token alone. As in
`finetune-infer-steps.jsonl`, the fp32 logits are dropped before the next forward and the prompt
is not grown: `_sample` itself keeps the previous step's fp32 logits (`[batch, vocab]`) and the
grown ids (`torch.cat`, `[batch, context + step]` int64) alive through each decode forward, which
these records leave out (this driver reproduces that file's llama-small records to the byte).
Recorded: the prefill's peak and
the last decode step's peak (`prefill_peak_r512`, `decode_peak_r512`, `peak_r512` the larger).

The models come from the training drivers by import, with their config tables and builders:
`variant_steps` (Qwen3, Phi-3, OLMo 2, Gemma 2, Gemma 3 at two layers of their published widths
on the fake sm_90 CUDA device; Mixtral, Qwen2-MoE, Qwen3-MoE at reduced widths on real CPU
tensors, data-dependent routing), `mla_sinks_steps` (DeepSeek-V3, gpt-oss, real CPU tensors) and
`encoder_vlm_steps` (RoBERTa, ModernBERT: one forward of the prompt under `no_grad`, what the
estimator's `mode: infer` runs for an encoder; LLaVA: the prefill takes the image's placeholder
tokens and the pixels, the decode steps only the new token). Routing is balanced by
`variant_steps`' `torch.topk` replacement, with a template for the prefill's tokens and one for a
decode step's (`batch` tokens), recorded as `routing_counts`.

Usage: python serving_steps.py OUT.jsonl [MODEL-SUBSTRING]  (with the oracle venv's python)."""
import contextlib
import json
import os
import sys

os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"

import oracle_env  # noqa: E402

oracle_env.enter(__file__)

import torch  # noqa: E402
import measure  # noqa: E402
import models  # noqa: E402
import variant_steps as vs  # noqa: E402
import mla_sinks_steps as ms  # noqa: E402, F401  (adds DeepSeek-V3 and gpt-oss to vs.MOE)
import encoder_vlm_steps as ev  # noqa: E402
from tracker import LiveTracker  # noqa: E402
from transformers import DynamicCache  # noqa: E402

ENCODERS = {**ev.ROBERTA, **ev.MODERNBERT}


def case(model, context, new_tokens, batch, dtype, attn="sdpa"):
    real = model in vs.MOE
    return dict(model=model, context=context, new_tokens=new_tokens, batch=batch, dtype=dtype, attn=attn,
                device="cpu" if real else "cuda", mode="real" if real else "fake")


CASES = [
    # Dense decoders on the fake device; Gemma 2's window is 4096, Gemma 3's 1024.
    case("qwen3-8b-2l", 512, 3, 2, "bf16"), case("qwen3-8b-2l", 256, 2, 1, "fp32"),
    case("phi3-mini-2l", 512, 3, 2, "bf16"), case("phi3-mini-2l", 256, 2, 1, "fp32"),
    case("olmo2-7b-2l", 512, 3, 2, "bf16"), case("olmo2-7b-2l", 256, 2, 1, "fp32"),
    case("gemma2-9b-2l", 4608, 3, 1, "bf16", "eager"), case("gemma2-9b-2l", 512, 2, 1, "fp32", "eager"),
    case("gemma3-12b-2l", 1536, 3, 2, "bf16"), case("gemma3-12b-2l", 1280, 2, 1, "fp32"),
    case("gemma3-12b-2l", 512, 3, 1, "bf16"),
    # Mixtures of experts on real CPU tensors; gpt-oss's window is 128.
    case("mixtral-small-2l", 128, 3, 2, "bf16"), case("mixtral-small-2l", 128, 2, 2, "fp32"),
    case("qwen2moe-small-2l", 128, 3, 2, "bf16"), case("qwen2moe-small-2l", 128, 2, 2, "fp32"),
    case("qwen3moe-small-2l", 128, 3, 2, "bf16"), case("qwen3moe-small-2l", 128, 2, 2, "fp32"),
    case("deepseek-v3-small-2l", 128, 3, 2, "bf16"), case("deepseek-v3-small-2l", 128, 2, 2, "fp32"),
    case("gpt-oss-small-2l", 192, 3, 2, "bf16", "eager"), case("gpt-oss-small-2l", 192, 2, 2, "fp32", "eager"),
    # Encoders: the prompt's forward (one new token: no decode step). ModernBERT's window is 64.
    case("roberta-small", 256, 1, 2, "fp32"), case("roberta-small", 256, 1, 2, "bf16"),
    case("roberta-base", 512, 1, 4, "bf16"),
    case("modernbert-small", 256, 1, 2, "fp32"), case("modernbert-small", 256, 1, 2, "bf16"),
    case("modernbert-base", 1024, 1, 2, "bf16"),
]
# LLaVA: the prefill takes the pixels and the prompt, the image's 64 placeholder tokens and the
# `context` text tokens (64 + 128 positions); the decode steps take the new token alone. Last in
# the file, which they joined when the estimator began to serve LLaVA.
LLAVA_CASES = [case("llava-small", 128, 3, 2, "bf16"), case("llava-small", 128, 2, 2, "fp32")]
CASES += LLAVA_CASES


def experts(cfg):
    return getattr(cfg, "num_local_experts", None) or getattr(cfg, "n_routed_experts", None) or cfg.num_experts


def balance(s, prompt_tokens):
    vs.TEMPLATES.clear()
    vs.ROUTING.clear()
    if s["model"] not in vs.MOE:
        return
    cfg = vs.config(s["model"])
    e, k = experts(cfg), cfg.num_experts_per_tok
    for t in (s["batch"] * prompt_tokens, s["batch"]):
        vs.TEMPLATES[((t, e), k)] = (torch.arange(t * k) % e).view(t, k)
        vs.ROUTING[f"tokens {t}, top {k} of {e}"] = torch.bincount(vs.TEMPLATES[((t, e), k)].reshape(-1), minlength=e).tolist()


def measure_case(s):
    dev = s["device"]
    fake = s["mode"] == "fake"
    spec = dict(model=s["model"], seq=s["context"], batch=s["batch"], dtype=s["dtype"], attn=s["attn"], ckpt="none")
    ctx = measure.fake_mode() if fake else contextlib.nullcontext()
    rec = {}
    with ctx:
        torch.manual_seed(0)
        with torch.device(dev), measure._fake_safe_init(fake):
            wl = models.build(spec)
        model = wl.model
        if s["dtype"] == "bf16":
            measure.convert_dtype(model, torch.bfloat16)
        model.eval()
        in_dtype = torch.bfloat16 if s["dtype"] == "bf16" else torch.float32
        batch = wl.make_batch(dev, in_dtype, s["batch"])
        batch.pop("labels", None)
        prompt = batch["input_ids"].shape[1]
        balance(s, prompt)
        encoder = s["model"] in ENCODERS
        if not encoder:
            text_cfg = model.config.get_text_config()
            text_cfg.use_cache = True
        params = measure.unique_params(model)
        tr = LiveTracker(dev)
        with torch.no_grad(), tr:
            tr.track(params, "param")
            tr.track(list(model.buffers()), "buffer")
            tr.track(batch, "input")
            if encoder:
                tr.set_phase(1, "forward")
                out = model(**batch)
                del out
                tr.set_phase(1, "end")
            else:
                cache = DynamicCache(config=model.config)
                rec["cache_layers"] = [type(layer).__name__ for layer in cache.layers]
                kwargs = dict(batch)
                for step in range(1, s["new_tokens"] + 1):
                    tr.set_phase(step, "forward")
                    outputs = model(**kwargs, past_key_values=cache, use_cache=True, logits_to_keep=1)
                    next_token_logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32)
                    next_tokens = torch.argmax(next_token_logits, dim=-1)
                    del outputs, next_token_logits
                    kwargs = {"input_ids": next_tokens[:, None]}
                    tr.set_phase(step, "end")
                rec["cache_tokens"] = [int(layer.keys.shape[-2]) for layer in cache.layers]
                rec["cache_storage_tokens"] = [int(layer.keys.untyped_storage().nbytes() // max(1, layer.keys[:, :, :1].numel() * layer.keys.element_size()))
                                               for layer in cache.layers]
        peak = lambda k: max(tr.peaks[(k, ph)]["peak_r512"] for ph in ("forward", "end") if (k, ph) in tr.peaks)
        rec["prefill_peak_r512"] = peak(1)
        rec["prefill_breakdown"] = tr.peaks[(1, "forward")]["breakdown"]
        if s["new_tokens"] >= 2:
            rec["decode_peak_r512"] = peak(s["new_tokens"])
        rec["peak_r512"] = max(rec["prefill_peak_r512"], rec.get("decode_peak_r512", 0))
        rec["param_count"] = sum(p.numel() for p in params)
        rec["param_bytes"] = tr.storage_bytes(params)
        rec["kernel_ops_seen"] = dict(tr.ops_seen)
    return rec


def main(out):
    only = sys.argv[2] if len(sys.argv) > 2 else None
    torch.cuda.init()
    fake_dev = torch.cuda.get_device_name(0) + f" sm_{''.join(map(str, torch.cuda.get_device_capability(0)))}"
    with open(out, "a") as f:
        for s in CASES:
            if only and only not in s["model"]:
                continue
            rec = measure_case(s)
            plan = {"model": s["model"], "hf_config": vs.planner_config(s["model"]), "mode": "infer", "batch": s["batch"],
                    "context": s["context"], "new_tokens": s["new_tokens"], "dtype": s["dtype"], "attn": s["attn"]}
            if s["device"] == "cpu":
                plan["device"] = "cpu"
            case_id = f"infer/{s['model']}/C{s['context']}/N{s['new_tokens']}/b{s['batch']}/{s['dtype']}/{s['attn']}/{s['mode']}/{s['device']}"
            out_rec = {"case_id": case_id, "kind": "infer", "plan": plan, **rec, "spec": s, "versions": measure.versions(),
                       "device_faked": s["mode"] == "fake", "ok": True}
            if s["mode"] == "fake":
                out_rec["fake_cuda_device"] = fake_dev
            if s["model"] in vs.MOE:
                out_rec["routing_counts"] = dict(vs.ROUTING)
                out_rec["routing"] = "balanced: token t's j-th expert is (t * k + j) % E"
            f.write(json.dumps(out_rec) + "\n")
            f.flush()
            print(case_id, rec["prefill_peak_r512"], rec.get("decode_peak_r512"), rec.get("cache_tokens"),
                  rec.get("cache_storage_tokens"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
