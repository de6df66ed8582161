import json
C = []
def add(model, seq, batch, dtype, opt="adamw", ckpt="none", attn="sdpa"):
    plan = {"model": model, "seq": seq, "batch": batch, "dtype": dtype, "opt": opt, "attn": attn, "causal_mask": "skipped"}
    if ckpt != "none":
        plan["ckpt"] = ckpt
    C.append({"model": model, "seq": seq, "batch": batch, "dtype": dtype, "opt": opt, "ckpt": ckpt, "attn": attn, "plan": plan})
add("llama-small", 2048, 8, "fp32"); add("llama-small", 2048, 8, "bf16"); add("llama-small", 2048, 8, "amp_bf16")
add("llama-small", 1024, 8, "fp32", ckpt="layer"); add("llama-small", 1024, 8, "fp32", attn="eager")
add("gpt2", 1024, 8, "fp32"); add("gpt2", 1024, 8, "amp_bf16"); add("gpt2", 1024, 8, "fp32", ckpt="layer")
add("qwen2-0.5b", 512, 4, "fp32"); add("qwen2-0.5b", 1024, 4, "amp_bf16"); add("qwen2-0.5b", 1024, 4, "bf16")
add("qwen2-0.5b", 2048, 2, "amp_bf16", ckpt="layer")
add("llama-7b", 2048, 1, "bf16", opt="sgd")
print(json.dumps(C))
