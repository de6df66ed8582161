"""Measures QLoRA fine-tuning steps of the mixtures of experts (bitsandbytes NF4 base weights, peft
LoRA adapters) with the shared oracle harness (`measure.run_case`, two steps, every storage counted
and rounded to 512 B, AdamW), on real CPU tensors like `moe_lora_steps.py` (whose configs, balanced
`torch.topk` and mask counting it imports: token t's j-th expert is `(t * k + j) % E`, the counts
recorded). Real tensors are needed because the experts' loop routes by value, which the fake CUDA
device of `lora_steps.py` cannot run.

The model is what `from_pretrained(..., dtype=torch.bfloat16, quantization_config=
BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=
torch.bfloat16, bnb_4bit_use_double_quant=dq))`, `prepare_model_for_kbit_training(model,
use_gradient_checkpointing=False)` and `get_peft_model` leave: transformers 5.24's
`replace_with_bnb_linear` (`integrations/bitsandbytes.py`) swaps every module whose type is
`nn.Linear` outside `get_modules_to_not_convert` (`quantizers/base.py`: the output head, plus
`_keep_in_fp32_modules`, gpt-oss's norms) for a `bnb.nn.Linear4bit`. In these models that is the
attention's `q_proj`, `k_proj`, `v_proj`, `o_proj` and Qwen2-MoE's shared expert (`gate_proj`,
`up_proj`, `down_proj`) and `shared_expert_gate`; the routers (`*TopKRouter`, a bare `weight`
parameter) and the fused 3-D experts are no `nn.Linear` and stay dense (listed by `probe()`).
Each `Linear4bit` is assembled by hand as `lora_steps.quantize_blocks` assembles it (packed
weight from `functional.quantize_4bit` of the bf16 weight, blocks of 64, its quantization state
and bitsandbytes' cached dynamic map registered as buffers so the tracker counts them), then every
16-bit parameter is upcast to fp32 (`prepare_model_for_kbit_training`'s loop: the experts and
routers included) and peft wraps the targets (`lora.bnb.Linear4bit`, fp32 adapters).

bitsandbytes' CPU kernels are not the CUDA ones the planner models, so the three ops the training
step calls are replaced by what the CUDA backend allocates (`backends/cuda/ops.py`): `gemm_4bit`
above 1536 rows is `_dequant_linear_fallback` (with a nested state the fp32 absmax by `empty_like`
and `absmax + offset`, then the weight in the input's dtype, then `F.linear`), `dequantize_4bit`
returns one `torch.empty(shape, dtype)`, `dequantize_blockwise` one `empty_like(A, dtype)`. The
values they return are zeros: the routing is the balanced template, not the values.

Usage: python qlora_moe_steps.py OUT.jsonl [MODEL-SUBSTRING [DTYPE [CKPT]]]   (with the oracle venv's python)
       python qlora_moe_steps.py --probe   (prints which modules become Linear4bit)"""
import json
import sys

import oracle_env

oracle_env.enter(__file__)

import re

import torch
import measure
import moe_lora_steps  # its mask counting, dtype-conversion bypass and DeepSeek/gpt-oss tables
import variant_steps

CURRENT = {}
# Calls of the replaced ops per case: the record shows the CUDA-allocation stand-ins ran.
CALLS = {}
LAST = {}


def bnb_config(dq):
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
                              bnb_4bit_use_double_quant=dq)


def converted(model, dq):
    """The names `replace_with_bnb_linear` would swap, found by running it on a meta copy with the
    quantizer's own skip list (`Bnb4BitHfQuantizer._process_model_before_weight_loading`)."""
    import transformers
    from transformers.integrations import replace_with_bnb_linear
    from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer
    import bitsandbytes as bnb

    with torch.device("meta"):
        meta = type(model)(model.config)
    q = Bnb4BitHfQuantizer(bnb_config(dq))
    skip = q.get_modules_to_not_convert(meta, q.quantization_config.llm_int8_skip_modules, meta._keep_in_fp32_modules)
    replace_with_bnb_linear(meta, modules_to_not_convert=skip, quantization_config=q.quantization_config)
    return {n for n, m in meta.named_modules() if isinstance(m, bnb.nn.Linear4bit)}, skip


def quantize(model, dq):
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    names, _ = converted(model, dq)
    F.name2qmap.pop("dynamic", None)
    for full in sorted(names):
        parent_name, _, name = full.rpartition(".")
        parent = model.get_submodule(parent_name)
        lin = getattr(parent, name)
        assert type(lin) is torch.nn.Linear, full
        with torch.no_grad():
            packed, state = F.quantize_4bit(lin.weight.detach().to(torch.bfloat16), blocksize=64, compress_statistics=dq,
                                            quant_type="nf4")
        new = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None, compute_dtype=torch.bfloat16,
                                compress_statistics=dq, quant_type="nf4", device="meta")
        w = torch.nn.Parameter(packed, requires_grad=False)
        w.quant_state, w.compress_statistics, w.quant_type, w.blocksize = state, dq, "nf4", 64
        new.weight = w
        new.quant_state = state
        if lin.bias is not None:
            new.bias = lin.bias
        new.register_buffer("qs_absmax", state.absmax)
        new.register_buffer("qs_code", state.code)
        if dq:
            new.register_buffer("qs_absmax2", state.state2.absmax)
            new.register_buffer("qs_code2", state.state2.code)
            new.register_buffer("qs_offset", state.offset)
        setattr(parent, name, new)
    if "dynamic" in F.name2qmap:
        model.register_buffer("bnb_dynamic_map", F.name2qmap["dynamic"])
    model.is_loaded_in_4bit = True
    model.requires_grad_(False)
    for mod in model.modules():
        for n, p in list(mod._parameters.items()):
            if p is not None and p.dtype in (torch.float16, torch.bfloat16):
                setattr(mod, n, torch.nn.Parameter(p.detach().to(torch.float32), requires_grad=False))
    return sorted({re.sub(r"\.\d+\.", ".N.", n) for n in names})


def cuda_allocations():
    """bitsandbytes' ops with the CUDA backend's allocations (see the module doc)."""

    class Gemm4bit:
        @staticmethod
        def default(A, B, shapeB, absmax, blocksize, quant_type, bias=None, absmax_8bit=None, absmax_code=None,
                    absmax_offset=None):
            rows = A.numel() // A.shape[-1]
            if rows <= 1536:
                raise RuntimeError("the cases measure the dequantize-and-linear path only (more than 1536 rows)")
            CALLS["gemm_4bit"] = CALLS.get("gemm_4bit", 0) + 1
            if absmax_8bit is not None:
                absmax_dq = torch.zeros_like(absmax_8bit, dtype=torch.float32)
                absmax = absmax_dq + absmax_offset
            B_dq = torch.zeros(list(shapeB), dtype=A.dtype, device=A.device)
            return torch.nn.functional.linear(A, B_dq, bias)

    class Dequantize4bit:
        @staticmethod
        def default(A, absmax, blocksize, quant_type, shape, dtype):
            CALLS["dequantize_4bit"] = CALLS.get("dequantize_4bit", 0) + 1
            return torch.zeros(list(shape), dtype=dtype, device=A.device)

    class DequantizeBlockwise:
        @staticmethod
        def default(A, absmax, code, blocksize, dtype):
            CALLS["dequantize_blockwise"] = CALLS.get("dequantize_blockwise", 0) + 1
            return torch.zeros_like(A, dtype=dtype)

    torch.ops.bitsandbytes.gemm_4bit = Gemm4bit
    torch.ops.bitsandbytes.dequantize_4bit = Dequantize4bit
    torch.ops.bitsandbytes.dequantize_blockwise = DequantizeBlockwise


def qlora_build(spec):
    wl = variant_steps.build(spec)
    from peft import LoraConfig, get_peft_model

    moe_lora_steps.ORIG_CONVERT(wl.model, torch.bfloat16)
    c = CURRENT
    c["quantized"] = quantize(wl.model, c["dq"])
    if spec["ckpt"] == "layer":
        # `prepare_model_for_kbit_training(model, gradient_checkpointing_kwargs={"use_reentrant":
        # False})`: every decoder layer checkpointed, and no `enable_input_require_grads` hook.
        wl.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        wl.ckpt_desc = "HF gradient_checkpointing_enable(use_reentrant=False): every decoder layer"
    l = c["lora"]
    kw = dict(r=l["rank"], lora_alpha=l["alpha"], lora_dropout=l["dropout"], target_modules=[t + "_proj" for t in l["targets"]])
    wl.model = get_peft_model(wl.model, LoraConfig(**kw))
    LAST["model"] = wl.model
    return wl


def cases():
    return [
        ("qwen3moe-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), False),
        ("qwen3moe-small-2l", 1024, 2, dict(rank=8, alpha=16, targets=["q", "v"], dropout=0.0), True),
        ("mixtral-small-2l", 1024, 2, dict(rank=8, alpha=8, targets=["q", "v"], dropout=0.0), True),
        ("qwen2moe-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), True),
        ("gpt-oss-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), False),
        # Under autocast: the fp32 experts' and routers' products run in bf16.
        ("qwen3moe-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), True, "amp_bf16"),
        ("mixtral-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.05), False, "amp_bf16"),
        # With every decoder layer checkpointed (non-reentrant).
        ("qwen3moe-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), True, "bf16", "layer"),
        ("mixtral-small-2l", 1024, 2, dict(rank=8, alpha=8, targets=["q", "v"], dropout=0.05), True, "amp_bf16", "layer"),
        ("gpt-oss-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), False, "bf16", "layer"),
        ("gpt-oss-small-2l", 1024, 2, dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0), False, "amp_bf16",
         "layer"),
    ]


def main(out):
    only = sys.argv[2] if len(sys.argv) > 2 else None
    only_dtype = sys.argv[3] if len(sys.argv) > 3 else None
    import bitsandbytes
    import peft

    cuda_allocations()
    variant_steps.models.build = qlora_build
    with open(out, "a") as f:
        for name, seq, batch, lora, dq, *more in cases():
            dtype = more[0] if more else "bf16"
            ckpt = more[1] if len(more) > 1 else "none"
            if len(sys.argv) > 4 and ckpt != sys.argv[4]:
                continue
            if (only and only not in name) or (only_dtype and dtype != only_dtype):
                continue
            attn = "eager" if name.startswith("gpt-oss") else "sdpa"
            s = dict(model=name, seq=seq, batch=batch, dtype=dtype, opt="adamw", ckpt=ckpt, attn=attn, mode="real",
                     device="cpu", profile=False, lora=f"r{lora['rank']}-{'-'.join(lora['targets'])}-nf4{'-dq' if dq else ''}")
            variant_steps.TEMPLATES.clear()
            variant_steps.ROUTING.clear()
            cfg = variant_steps.config(name)
            e = getattr(cfg, "num_local_experts", None) or cfg.num_experts
            k = cfg.num_experts_per_tok
            t = batch * seq
            tmpl = (torch.arange(t * k) % e).view(t, k)
            variant_steps.TEMPLATES[((t, e), k)] = tmpl
            variant_steps.ROUTING[f"tokens {t}, top {k} of {e}"] = torch.bincount(tmpl.reshape(-1), minlength=e).tolist()
            CURRENT.clear()
            CURRENT.update(lora=lora, dq=dq)
            moe_lora_steps.MASK.clear()
            CALLS.clear()
            rec = measure.run_case(s)
            plan = {"model": name, "hf_config": variant_steps.planner_config(name), "mode": "finetune", "seq": seq,
                    "batch": batch, "dtype": dtype, "opt": "adamw", "ckpt": ckpt, "attn": attn, "device": "cpu",
                    "lora": {key: lora[key] for key in ("rank", "alpha", "targets", "dropout")},
                    "quantization": "nf4", "double_quant": dq}
            if attn == "sdpa":
                assert moe_lora_steps.MASK.get("skipped=True") == 2, moe_lora_steps.MASK
                plan["causal_mask"] = "skipped"
            keep = {key: rec[key] for key in ("peak_r512", "peak", "param_count", "param_bytes", "grad_bytes", "opt_state_bytes",
                                              "activation_bytes", "optimizer_impl", "peak_forward", "steps") if key in rec}
            versions = dict(measure.versions(), peft=peft.__version__, bitsandbytes=bitsandbytes.__version__)
            case_id = "qlora-" + s["lora"] + "/" + measure.case_id(s)
            out_rec = {"case_id": case_id, "kind": "train", "plan": plan, **keep, "spec": s, "versions": versions,
                       "device_faked": False, "linear4bit_modules": CURRENT["quantized"],
                       "bnb_kernels": "CUDA backend's allocations (gemm_4bit dequantize-and-linear fallback, dequantize_4bit, dequantize_blockwise)",
                       "bnb_op_calls": dict(CALLS), "peft_layers": sorted({type(m).__module__ + "." + type(m).__name__
                                                                         for m in LAST["model"].modules() if hasattr(m, "lora_A")}),
                       "causal_mask_skips": dict(moe_lora_steps.MASK), "routing_counts": dict(variant_steps.ROUTING),
                       "routing": "balanced: token t's j-th expert is (t * k + j) % E"}
            f.write(json.dumps(out_rec) + "\n")
            f.flush()
            print(case_id, rec.get("peak_r512"), flush=True)


def probe():
    import mla_sinks_steps  # noqa: F401
    import encoder_vlm_steps  # noqa: F401
    import transformers

    for name in ("qwen3moe-small-2l", "mixtral-small-2l", "qwen2moe-small-2l", "gpt-oss-small-2l", "deepseek-v3-small-2l",
                 "llava-1.5-7b-2l"):
        cfg = variant_steps.config(name)
        with torch.device("meta"):
            model = (transformers.LlavaForConditionalGeneration(cfg) if name.startswith("llava")
                     else transformers.AutoModelForCausalLM.from_config(cfg))
        names, skip = converted(model, False)
        print(name, cfg.model_type, "not converted:", sorted(skip))
        print("  Linear4bit:", sorted({re.sub(r"\.\d+\.", ".N.", n) for n in names}))


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        probe()
    else:
        main(sys.argv[1])
