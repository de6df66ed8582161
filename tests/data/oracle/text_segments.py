"""Hugging Face language models under `checkpoint_sequential`-style segment checkpointing (`sqrt`
and `kN` segments) over their decoder layers, measured with the shared oracle harness
(`measure.run_case`, fake CUDA, two steps, each storage rounded to 512 B).
The shared `build_hf` knows only HF's per-layer `gradient_checkpointing_enable`; HF decoder layers
take keyword arguments besides the hidden states (attention mask, position embeddings, ...), so
`checkpoint_sequential` cannot be applied to the layer list as it is. Here, as
`checkpoint_sequential(layers, k, x, use_reentrant=False)` cuts them, the decoder layer list
(`model.model.layers` for LLaMA/Qwen2/Mistral, `model.transformer.h` for GPT-2) is replaced by a
ModuleList of k chunks: k-1 chunks of L//k consecutive layers, each run inside ONE non-reentrant
`torch.utils.checkpoint.checkpoint`, then the remaining layers run plainly. A chunk's forward takes
the arguments of one decoder layer, threads the hidden states through its layers (the other
arguments passed unchanged to each) and returns what one decoder layer returns (in transformers
5.x a tensor). The layers keep their order, so the parameters (and the optimizer's foreach lists)
keep HF's order. `sqrt` means k = max(1, round(sqrt(L))). Any other mode goes to the shared
`build_hf`.

    python text_segments.py OUT.jsonl '[{"model": "gpt2", "seq": 1024, "batch": 8, "dtype": "fp32", "opt": "adamw", "attn": "sdpa", "ckpt": "sqrt"}]'
    python text_segments.py --check   # tiny real-CPU check: chunked models compute the same loss and grads
"""
import json, math, sys
import oracle_env

if "--check" not in sys.argv:
    oracle_env.enter(__file__)
else:
    sys.path.insert(0, oracle_env.HARNESS)
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint
import models

_shared = models.build_hf


def segments(n, mode):
    return max(1, round(math.sqrt(n))) if mode == "sqrt" else int(mode[1:])


class LayerChunk(nn.Module):
    """Consecutive decoder layers called as one decoder layer; `ckpt`: inside one non-reentrant
    checkpoint region."""

    def __init__(self, layers, ckpt):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.ckpt = ckpt

    def _run(self, hidden_states, *args, **kwargs):
        for layer in self.layers:
            out = layer(hidden_states, *args, **kwargs)
            hidden_states = out[0] if isinstance(out, tuple) else out
        return out

    def forward(self, hidden_states, *args, **kwargs):
        if self.ckpt:
            return checkpoint(self._run, hidden_states, *args, use_reentrant=False, **kwargs)
        return self._run(hidden_states, *args, **kwargs)


def layer_owner(model):
    if hasattr(model, "transformer") and hasattr(model.transformer, "h"):
        return model.transformer, "h", "model.transformer.h"
    return model.model, "layers", "model.model.layers"


def chunk_layers(model, mode):
    owner, attr, where = layer_owner(model)
    layers = list(getattr(owner, attr))
    n = len(layers)
    k = segments(n, mode)
    if not 1 <= k <= n:
        raise ValueError(f"checkpoint_sequential needs between 1 and {n} segments, got {k}")
    size = n // k
    chunks = [LayerChunk(layers[i * size:(i + 1) * size], True) for i in range(k - 1)]
    chunks.append(LayerChunk(layers[(k - 1) * size:], False))
    setattr(owner, attr, nn.ModuleList(chunks))
    return (f"checkpoint_sequential-style: {where} ({n} decoder layers) in {k} segments, "
            f"{k - 1} chunks of {size} layers each in one torch.utils.checkpoint(use_reentrant=False), "
            f"the last {n - (k - 1) * size} layers run plainly")


def build_hf(name, seq, attn, ckpt):
    if not (ckpt == "sqrt" or (ckpt.startswith("k") and ckpt[1:].isdigit())):
        return _shared(name, seq, attn, ckpt)
    wl = _shared(name, seq, attn, "none")
    wl.ckpt_desc = chunk_layers(wl.model, ckpt)
    return wl


models.build_hf = build_hf


def check():
    """Tiny real-CPU check (fp32, dropout off): the chunked model gives the plain model's loss and
    gradients, and its parameters keep their order."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    cfgs = [(GPT2LMHeadModel, GPT2Config(n_embd=64, n_layer=5, n_head=4, vocab_size=101, n_positions=64,
                                         resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)),
            (LlamaForCausalLM, LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=5,
                                           num_attention_heads=4, num_key_value_heads=4, vocab_size=101,
                                           tie_word_embeddings=False))]
    for cls, cfg in cfgs:
        cfg.use_cache = False
        cfg._attn_implementation = "sdpa"
        for mode in ("sqrt", "k1", "k3", "k5"):
            torch.manual_seed(0)
            ref = cls(cfg).train()
            torch.manual_seed(0)
            m = cls(cfg).train()
            names = [n for n, _ in m.named_parameters()]
            desc = chunk_layers(m, mode)
            assert len(names) == len(list(m.parameters()))
            for p, q in zip(ref.parameters(), m.parameters()):
                assert p.shape == q.shape and torch.equal(p, q)
            calls = []
            for i, layer in enumerate(c for ch in layer_owner(m)[0].__getattr__(layer_owner(m)[1]) for c in ch.layers):
                layer.register_forward_pre_hook(lambda mod, a, i=i: calls.append(i))
            ids = torch.randint(0, 101, (2, 16))
            l0 = ref(input_ids=ids, labels=ids).loss
            l1 = m(input_ids=ids, labels=ids).loss
            l0.backward(); l1.backward()
            gd = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), m.parameters()))
            assert torch.allclose(l0, l1, atol=1e-6) and gd < 1e-5, (cls.__name__, mode, l0.item(), l1.item(), gd)
            n, k = cfg.num_hidden_layers, segments(cfg.num_hidden_layers, mode)
            rerun = calls[n:]  # layers entered again in backward: exactly the checkpointed ones
            assert sorted(rerun) == list(range((k - 1) * (n // k))), (mode, calls)
            print(cls.__name__, mode, "loss", l0.item(), l1.item(), "max grad diff", gd, "recomputed", rerun, "|", desc)


if "--check" in sys.argv:
    check()
    sys.exit(0)

import os
import measure

# The shared set's language-model records end with the model's `hf_config` (the non-default
# fields of its `config.to_dict()`, plus `model_type` and `architectures`); each case here gets
# the shared set's dict for the same model, checked against the config the harness builds.
_SHARED_SET = os.path.join(oracle_env.HARNESS, "..", "pytorch-step-memory.jsonl")


def shared_hf_config(name):
    for line in open(_SHARED_SET):
        r = json.loads(line)
        if r.get("model") == name and "hf_config" in r:
            d = models.hf_config(name).to_dict()
            bad = [k for k, v in r["hf_config"].items() if k != "architectures" and d.get(k) != v]
            assert not bad, (name, bad)
            return r["hf_config"]
    return None


out, specs = sys.argv[1], json.loads(sys.argv[2])


def add_hf_config(s, rec):
    if s["model"] in models.HF_MODELS and (cfg := shared_hf_config(s["model"])) is not None:
        rec["hf_config"] = cfg


oracle_env.write_harness_records(out, specs, add_hf_config)
