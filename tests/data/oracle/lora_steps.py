"""Measures peft LoRA and QLoRA fine-tuning steps of Phi-3 (fused `qkv_proj` and `gate_up_proj`),
and LoRA steps of RoBERTa (`RobertaForMaskedLM`), ModernBERT (`ModernBertForMaskedLM`) and LLaVA
(`LlavaForConditionalGeneration`, the adapters injected into the whole model as peft does), with
the shared oracle harness (`measure.run_case`, two steps, every storage counted and rounded to
512 B, AdamW foreach) on the fake sm_90 CUDA device. The models and their builders are
`variant_steps.py`'s and `encoder_vlm_steps.py`'s (Phi-3 at two layers of Phi-3-mini's widths,
the encoders at their published widths).

The adapters are injected as `get_peft_model` injects them (`peft.inject_adapter_in_model`, peft
0.21.2: `LoraModel` wraps each targeted `nn.Linear` in a `lora.Linear`, or a `Linear4bit` in a
`lora.bnb.Linear4bit`; `lora_A`/`lora_B` `nn.Linear`s without bias, `nn.Dropout` or
`nn.Identity`; only the adapters trainable) right after the harness converts the model's dtype
and before it collects the parameters. They are created in fp32 directly on the device, which is
where `_move_adapter_to_device_of_base_layer` followed by `autocast_adapter_dtype=True` puts
them: `Module.to` cannot swap fake parameters, so those steps (and `_replace_module`'s
`module.to(weight.device)`) are skipped. A fused projection is one `nn.Linear`, so it gets one
adapter whose `lora_B` has the fused output width. peft 0.21.2 has no default targets for phi3
or modernbert (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`), so every case names its
modules; RoBERTa's first case is peft's default for roberta (`query`, `value`).

QLoRA (bitsandbytes 0.50.2) is assembled by hand, as `quantize_blocks` says, with two changes
that make bitsandbytes run on fake tensors (`bnb_on_fake_tensors`): its quantization maps are
computed on real CPU tensors, and `gemm_4bit` performs the allocations of the CUDA backend's
dequantize-and-`F.linear` path, which every case takes (more than 1536 rows).

Usage: python lora_steps.py OUT.jsonl [MODEL-SUBSTRING [qlora]]  (with the oracle venv's python, peft
0.21.2 and bitsandbytes 0.50.2 installed in it)."""
import sys

import oracle_env

oracle_env.enter(__file__)

import torch
import measure
import encoder_vlm_steps  # its `models.build` hook builds the encoders and LLaVA and chains variant_steps'

import variant_steps

# The case being measured: `unique_params` (called once, right after the dtype conversion and
# `model.train()`) injects its adapters.
CURRENT = {}
orig_unique_params = measure.unique_params


def unique_params(model):
    lora = CURRENT.get("lora")
    if lora is not None and not getattr(model, "_oracle_lora", False):
        if CURRENT.get("nf4") is not None:
            quantize_blocks(model, CURRENT["nf4"])
        from peft import LoraConfig, inject_adapter_in_model
        from peft.tuners.lora import layer

        cfg = LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], target_modules=lora["modules"],
                         lora_dropout=lora["dropout"], bias="none")
        saved = layer.LoraLayer._move_adapter_to_device_of_base_layer, torch.nn.Module.to
        layer.LoraLayer._move_adapter_to_device_of_base_layer = lambda self, *a, **k: None
        torch.nn.Module.to = lambda self, *a, **k: self
        try:
            with torch.device("cuda"):
                inject_adapter_in_model(cfg, model, adapter_name="default")
        finally:
            layer.LoraLayer._move_adapter_to_device_of_base_layer, torch.nn.Module.to = saved
        model._oracle_lora = True
    return orig_unique_params(model)


measure.unique_params = unique_params

# bitsandbytes on fake tensors. Its quantization maps are built with `.tolist()`, which a fake
# tensor cannot give: they are computed once here on real CPU tensors and rebuilt from the lists
# (`torch.tensor` is a factory, which the fake mode runs).
NF4_CODE = None
DYNAMIC_MAP = None


def bnb_on_fake_tensors():
    global NF4_CODE, DYNAMIC_MAP
    import bitsandbytes.functional as F

    NF4_CODE = F.get_4bit_type("nf4", device="cpu").tolist()
    DYNAMIC_MAP = F.create_dynamic_map().tolist()
    F.get_4bit_type = lambda typename, device=None, blocksize=64: torch.tensor(NF4_CODE, dtype=torch.float32, device=device)
    F.create_dynamic_map = lambda *a, **k: torch.tensor(DYNAMIC_MAP, dtype=torch.float32)

    # `gemm_4bit`'s fake kernel returns only the output. Past 1536 rows the CUDA backend always
    # dequantizes the weight and calls `F.linear` (`backends/cuda/ops.py`,
    # `_dequant_linear_fallback`); its allocations are made here, above the tracker, around the
    # same `F.linear`: with a nested state the fp32 absmax (`empty_like`) and `absmax + offset`,
    # then the weight in the input's dtype (`torch.empty(shapeB)`, filled in place by the
    # dequantize kernel). Up to 1536 rows the cases here never run.
    real = torch.ops.bitsandbytes.gemm_4bit

    class Gemm4bit:
        @staticmethod
        def default(A, B, shapeB, absmax, blocksize, quant_type, bias=None, absmax_8bit=None, absmax_code=None,
                    absmax_offset=None):
            rows = A.numel() // A.shape[-1]
            if rows <= 1536:
                raise RuntimeError("the cases measure the dequantize-and-linear path only (more than 1536 rows)")
            if absmax_8bit is not None:
                absmax_dq = torch.empty_like(absmax_8bit, dtype=torch.float32)
                absmax = absmax_dq + absmax_offset
            B_dq = torch.empty(list(shapeB), dtype=A.dtype, device=A.device)
            return torch.nn.functional.linear(A, B_dq, bias)

    Gemm4bit.real = real
    torch.ops.bitsandbytes.gemm_4bit = Gemm4bit


def bnb_linear_names(model):
    """The modules transformers 5.24 swaps for `Linear4bit` (`nf4["whole_model"]`, the LLaVA
    cases): `replace_with_bnb_linear` (`integrations/bitsandbytes.py`) converts every module
    whose type is `nn.Linear` unless `should_convert_module` matches it against
    `get_modules_to_not_convert` (`quantizers/base.py`: `get_keys_to_not_convert`, the output
    head, plus `_keep_in_fp32_modules`). For LLaVA that is every `nn.Linear` of the vision tower,
    the projector and the language model; only `lm_head` stays."""
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer
    from transformers.quantizers.quantizers_utils import should_convert_module

    q = Bnb4BitHfQuantizer(BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"))
    skip = q.get_modules_to_not_convert(model, None, model._keep_in_fp32_modules)
    names = {n for n, m in model.named_modules() if type(m) is torch.nn.Linear and should_convert_module(n, skip)}
    CURRENT["linear4bit_modules"] = sorted({__import__("re").sub(r"\.\d+\.", ".N.", n) for n in names})
    return names


def quantize_blocks(model, nf4):
    """What `from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True,
    bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=dq))`
    leaves, then `prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)`.
    Every `nn.Linear` of the blocks (with `nf4["whole_model"]`: every one `bnb_linear_names`
    lists) becomes a `bnb.nn.Linear4bit` (the output head is transformers'
    `modules_to_not_convert`), quantized from its bf16 weight by
    `functional.quantize_4bit` (blocks of 64). `Params4bit` cannot wrap a fake tensor, so the
    module is built on the (real) meta device and given a plain frozen `Parameter` holding the packed
    weight with the `quant_state` and attributes `Linear4bit.forward` and peft's
    `dispatch_bnb_4bit` read. The quantization state tensors (absmax, code, nested absmax, its
    code and offset) and bitsandbytes' cached dynamic map are registered as buffers so the
    tracker counts them with the weights. Then every 16-bit parameter is upcast to fp32
    (`prepare_model_for_kbit_training`'s loop)."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    F.name2qmap.pop("dynamic", None)
    dq = nf4["double_quant"]
    chosen = bnb_linear_names(model) if nf4.get("whole_model") else None
    parents = list(model.named_modules()) if chosen is not None else \
        [(None, m) for layer in model.model.layers for m in layer.modules()]
    for pname, parent in parents:
        for name, lin in list(parent.named_children()):
            if type(lin) is not torch.nn.Linear:
                continue
            if chosen is not None and f"{pname}.{name}".lstrip(".") not in chosen:
                continue
            with torch.no_grad():
                packed, state = F.quantize_4bit(lin.weight.detach().to(torch.bfloat16), blocksize=64,
                                                compress_statistics=dq, quant_type="nf4")
            with unset_fake_temporarily():
                new = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                                        compute_dtype=torch.bfloat16, compress_statistics=dq, quant_type="nf4",
                                        device="meta")
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
    for mod in model.modules():
        for n, p in list(mod._parameters.items()):
            if p is not None and p.dtype in (torch.float16, torch.bfloat16):
                setattr(mod, n, torch.nn.Parameter(p.detach().to(torch.float32), requires_grad=False))
    model.requires_grad_(False)


def cases():
    # (model, seq, batch, dtype, planner lora, peft target modules[, nf4 double quantization])
    phi3_all = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    return [
        # QLoRA: more than 1536 rows, so `gemm_4bit` takes the dequantize-and-linear path.
        ("phi3-mini-2l", 1024, 2, "amp_bf16", dict(rank=16, alpha=32, targets=["all"], dropout=0.0), phi3_all, True),
        ("phi3-mini-2l", 2048, 1, "bf16", dict(rank=8, alpha=16, targets=["qkv"], dropout=0.05), ["qkv_proj"], False),
        ("phi3-mini-2l", 512, 2, "bf16", dict(rank=16, alpha=32, targets=["qkv"], dropout=0.0), ["qkv_proj"]),
        ("phi3-mini-2l", 1024, 2, "bf16", dict(rank=8, alpha=16, targets=["all"], dropout=0.05), phi3_all),
        ("phi3-mini-2l", 512, 2, "amp_bf16", dict(rank=16, alpha=32, targets=["qkv", "o", "gate_up", "down"], dropout=0.0),
         phi3_all),
        ("roberta-base", 512, 8, "bf16", dict(rank=8, alpha=8, targets=["query", "value"], dropout=0.1), ["query", "value"]),
        ("roberta-base", 512, 8, "amp_bf16", dict(rank=16, alpha=32, targets=["q", "k", "v"], dropout=0.0),
         ["query", "key", "value"]),
        ("modernbert-base", 1024, 4, "bf16", dict(rank=16, alpha=32, targets=["qkv", "o", "gate_up", "down"], dropout=0.0),
         ["Wqkv", "Wo", "Wi"]),
        ("modernbert-base", 1024, 2, "amp_bf16", dict(rank=8, alpha=16, targets=["Wqkv"], dropout=0.1), ["Wqkv"]),
        # LLaVA: peft matches a listed target by its name's suffix, so `q_proj`/`v_proj` also wrap
        # the CLIP tower's attention projections (its `out_proj` matches no `o_proj`).
        ("llava-small", 512, 4, "bf16", dict(rank=16, alpha=32, targets=["q", "v"], dropout=0.0), ["q_proj", "v_proj"]),
        ("llava-small", 512, 4, "amp_bf16", dict(rank=8, alpha=16, targets=["q", "k", "v", "o"], dropout=0.05),
         ["q_proj", "k_proj", "v_proj", "o_proj"]),
        ("llava-1.5-7b-2l", 512, 1, "bf16", dict(rank=16, alpha=32, targets=["q", "v"], dropout=0.0), ["q_proj", "v_proj"]),
        ("llava-1.5-7b-2l", 512, 2, "amp_bf16", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0),
         ["q_proj", "k_proj", "v_proj", "o_proj"]),
        # QLoRA of LLaVA: the tower, the projector and the language model quantized (`whole_model`);
        # batch 3 gives the tower 1731 rows and the projector 1728, past 1536.
        ("llava-1.5-7b-2l", 512, 3, "bf16", dict(rank=16, alpha=32, targets=["q", "v"], dropout=0.0), ["q_proj", "v_proj"],
         False, "whole_model"),
        ("llava-1.5-7b-2l", 512, 3, "amp_bf16", dict(rank=16, alpha=32, targets=["q", "k", "v", "o"], dropout=0.0),
         ["q_proj", "k_proj", "v_proj", "o_proj"], True, "whole_model"),
    ]


def main(out):
    only = sys.argv[2] if len(sys.argv) > 2 else None
    only_nf4 = len(sys.argv) > 3 and sys.argv[3] == "qlora"
    import bitsandbytes  # registers its ops, before the fake mode

    bnb_on_fake_tensors()
    for model, seq, batch, dtype, lora, modules, *nf4 in cases():
        if (only and only not in model) or (only_nf4 and not nf4):
            continue
        s = dict(model=model, seq=seq, batch=batch, dtype=dtype, opt="adamw", ckpt="none", attn="sdpa")
        CURRENT.clear()
        CURRENT["lora"] = dict(lora, modules=modules)
        CURRENT["nf4"] = dict(double_quant=nf4[0], whole_model=nf4[1:] == ["whole_model"]) if nf4 else None

        def finish(spec, rec, lora=lora, modules=modules, nf4=nf4):
            import peft

            hf = variant_steps.planner_config(spec["model"])
            if spec["model"] in encoder_vlm_steps.LLAVA:
                hf["text_config"]["use_cache"] = False  # as `encoder_vlm_steps.build` measures it
            rec["plan"] = {"model": spec["model"], "hf_config": hf, "mode": "finetune",
                           "seq": spec["seq"], "batch": spec["batch"], "dtype": spec["dtype"], "opt": spec["opt"],
                           "attn": spec["attn"], "lora": lora}
            rec["peft_target_modules"] = modules
            rec["versions"]["peft"] = peft.__version__
            kind = "lora"
            if nf4:
                rec["plan"].update(quantization="nf4", double_quant=nf4[0])
                if "linear4bit_modules" in CURRENT:
                    rec["linear4bit_modules"] = CURRENT["linear4bit_modules"]
                rec["versions"]["bitsandbytes"] = bitsandbytes.__version__
                kind = "qlora-dq" if nf4[0] else "qlora"
            rec["case_id"] = f"{kind}-r{lora['rank']}-{'-'.join(modules)}/" + rec["case_id"]

        oracle_env.write_harness_records(out, [s], finish)


if __name__ == "__main__":
    main(sys.argv[1])
