"""torchtune 0.1.1's single-device LoRA/QLoRA recipe (with torchao 0.1, the version it pins)
through PyTorch's real CUDACachingAllocator on the allocator-mode fake device
(`fakecuda_alloc/`, see `reserved_steps.py`): the model initialisation of
`recipes/lora_finetune_single_device.py` `_setup_model` (the model built under
`set_default_dtype(bf16)` and `torch.device("cuda")`, adapters made trainable, activation
checkpointing on every `TransformerDecoderLayer`, then `load_state_dict` of a bf16 CPU checkpoint)
and two training steps (batch 2 x 512 tokens, `CrossEntropyLoss` over the logits, AdamW on the
adapters, `zero_grad(set_to_none=True)`).

Run with a python whose site-packages hold torchtune==0.1.1 and torchao==0.1 (installed
`--no-deps`, plus sentencepiece, tiktoken, omegaconf, blobfile) on top of the harness venv's torch
2.15; `datasets` (imported by torchtune's dataset modules only) is stubbed. Usage:
    python torchtune_steps.py OUT.jsonl [--stream LAYERS OUT.stream]
`--stream` writes the initialisation's allocator stream ("A bytes" / "F bytes" per event, from
`torch.cuda.memory._snapshot()` device traces) for a QLoRA model of LAYERS layers.
"""
import json
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def stub_datasets():
    mod = types.ModuleType("datasets")
    mod.__getattr__ = lambda name: None
    sys.modules["datasets"] = mod


CASES = [
    # (case id, quantize_base, lora_attn_modules, apply_lora_to_mlp, layers)
    ("torchtune-llama2-7b-qlora-r8", True, ["q_proj", "k_proj", "v_proj", "output_proj"], True, 32),
    ("torchtune-llama2-7b-lora-qv-r8", False, ["q_proj", "v_proj"], False, 32),
    ("torchtune-llama2-7b-qlora-r8-4layers", True, ["q_proj", "k_proj", "v_proj", "output_proj"], True, 4),
]


def build(quantize, attn, mlp, layers):
    import torch
    from torchtune import utils
    from torchtune.models.llama2._component_builders import lora_llama2

    with utils.set_default_dtype(torch.bfloat16), torch.device("cuda"):
        return lora_llama2(lora_attn_modules=attn, apply_lora_to_mlp=mlp, apply_lora_to_output=False, vocab_size=32000,
                           num_layers=layers, num_heads=32, num_kv_heads=32, embed_dim=4096, max_seq_len=4096,
                           intermediate_dim=11008, lora_rank=8, lora_alpha=16, lora_dropout=0.05, quantize_base=quantize)


def one(case):
    import torch
    from torchtune import modules, utils
    from torchtune.modules.peft.peft_utils import get_adapter_params, set_trainable_params

    cid, quantize, attn, mlp, layers = case
    torch.cuda.init()
    model = build(quantize, attn, mlp, layers)
    adapter = get_adapter_params(model)
    set_trainable_params(model, adapter)
    utils.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerDecoderLayer})
    sd = {n.replace("_checkpoint_wrapped_module.", ""): torch.empty(p.shape, dtype=torch.bfloat16)
          for n, p in model.named_parameters() if "lora" not in n}
    model.load_state_dict(sd, strict=False)
    rec = {"case_id": cid, "layers": layers, "quantize_base": quantize, "lora_attn_modules": attn, "apply_lora_to_mlp": mlp,
           "lora_rank": 8, "lora_alpha": 16, "batch": 2, "seq": 512,
           "init": {"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
                    "allocated": torch.cuda.memory_allocated()}, "steps": {}}
    opt = torch.optim.AdamW(adapter.values(), lr=3e-4, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in (1, 2):
        torch.cuda.reset_peak_memory_stats()
        tokens = torch.randint(0, 32000, (2, 512), device="cuda")
        labels = torch.randint(0, 32000, (2, 512), device="cuda")
        logits = model(tokens)
        loss = loss_fn(logits.transpose(1, 2), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss
        rec["steps"][str(step)] = {"max_allocated": torch.cuda.max_memory_allocated(),
                                   "max_reserved": torch.cuda.max_memory_reserved()}
    import torchao, torchtune
    rec["versions"] = {"torch": torch.__version__, "torchtune": torchtune.__version__, "torchao": "0.1"}
    print(json.dumps(rec))


def stream(layers, out):
    import torch

    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=10_000_000)
    model = build(True, ["q_proj", "k_proj", "v_proj", "output_proj"], True, layers)
    sd = {n: torch.empty(p.shape, dtype=torch.bfloat16) for n, p in model.named_parameters() if "lora" not in n}
    model.load_state_dict(sd, strict=False)
    lines = []
    for e in torch.cuda.memory._snapshot()["device_traces"][0]:
        if e["action"] == "alloc":
            lines.append(f"A {e['size']}")
        elif e["action"] == "free_completed":
            lines.append(f"F {e['size']}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    import reserved_steps as r

    if os.environ.get("ORACLE_FAKECUDA_ALLOC_ACTIVE") == "1":
        stub_datasets()
        if sys.argv[1] == "--one":
            one(CASES[int(sys.argv[2])])
        else:
            stream(int(sys.argv[2]), sys.argv[3])
        return
    r.build_shims()
    env = r.shim_env(None)
    out = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "--stream":
        subprocess.check_call([sys.executable, __file__, "--stream", sys.argv[3], sys.argv[4]], env=env)
        return
    with open(out, "w") as f:
        for i in range(len(CASES)):
            res = subprocess.run([sys.executable, __file__, "--one", str(i)], env=env, capture_output=True, text=True, check=True)
            line = res.stdout.strip().splitlines()[-1]
            f.write(line + "\n")
            print(line, flush=True)


if __name__ == "__main__":
    main()
