"""Measures training steps of RoBERTa (`RobertaForMaskedLM`), ModernBERT (`ModernBertForMaskedLM`)
and LLaVA (`LlavaForConditionalGeneration`: CLIP vision tower, projector, LLaMA language model)
with the shared oracle harness (`measure.run_case`, two steps, every storage counted and rounded
to 512 B, AdamW foreach) on the fake sm_90 CUDA device, as `variant_steps.py` measures the newer
decoders: it reuses that driver's config table (`variant_steps.ALL`, `config`, `planner_config`)
and chains its `models.build` hook, adding the builders for these three heads.

The language model of LLaVA trains with `text_config.use_cache = False` (see `build`).

Batches: the encoders take `{"input_ids": ids, "labels": ids}` (no `attention_mask`: every token
attends to every other, the padded-batch path without padding; ModernBERT's local layers still
build their sliding-window mask). LLaVA takes `{"input_ids", "pixel_values", "labels"}`: each
sample is one image's `image_seq_length` placeholder tokens (`image_token_id`) followed by `seq`
text tokens, and one `[3, image_size, image_size]` image.

Usage: python encoder_vlm_steps.py OUT.jsonl [MODEL-SUBSTRING]  (with the oracle venv's python)."""
import os
import sys

import oracle_env

# `LlavaModel.get_placeholder_mask` checks the placeholder count against the image features with
# `torch_compilable_check`, which reads a tensor's value: impossible under FakeTensorMode. This is
# transformers' own switch for that check (a few scalar temporaries are not measured).
os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"

oracle_env.enter(__file__)

import torch
import measure
import models
import variant_steps

ROBERTA = {
    # roberta-base (FacebookAI/roberta-base config.json) and a reduced width.
    "roberta-base": ("RobertaConfig", dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                           intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1,
                                           pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)),
    "roberta-small": ("RobertaConfig", dict(vocab_size=8192, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=1024, max_position_embeddings=514, type_vocab_size=1,
                                            pad_token_id=1)),
}
MODERNBERT = {
    # answerdotai/ModernBERT-base config.json, and a reduced width.
    "modernbert-base": ("ModernBertConfig", dict(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                                                 num_attention_heads=12, global_attn_every_n_layers=3, local_attention=128,
                                                 max_position_embeddings=8192, norm_bias=False, attention_bias=False,
                                                 mlp_bias=False, decoder_bias=True, classifier_activation="gelu",
                                                 hidden_activation="gelu")),
    "modernbert-small": ("ModernBertConfig", dict(vocab_size=8192, hidden_size=256, intermediate_size=384, num_hidden_layers=4,
                                                  num_attention_heads=4, global_attn_every_n_layers=3, local_attention=64,
                                                  pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)),
}
LLAVA = {
    # Two vision and two language layers: llava-hf/llava-1.5-7b-hf's widths (CLIP ViT-L/14 at 336, Vicuna 7B),
    # and a reduced width.
    "llava-1.5-7b-2l": dict(
        vision_config=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096, num_hidden_layers=2,
                           num_attention_heads=16, image_size=336, patch_size=14, projection_dim=768, hidden_act="quick_gelu"),
        text_config=dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=2, num_attention_heads=32,
                         num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096, tie_word_embeddings=False),
        image_token_index=32000, vision_feature_layer=-2, vision_feature_select_strategy="default",
        projector_hidden_act="gelu", image_seq_length=576, tie_word_embeddings=False),
    "llava-small": dict(
        vision_config=dict(model_type="clip_vision_model", hidden_size=256, intermediate_size=1024, num_hidden_layers=3,
                           num_attention_heads=4, image_size=128, patch_size=16, hidden_act="quick_gelu"),
        text_config=dict(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=4, vocab_size=8192, tie_word_embeddings=False),
        image_token_index=8000, vision_feature_layer=-2, vision_feature_select_strategy="default",
        projector_hidden_act="gelu", image_seq_length=64, tie_word_embeddings=False),
}
variant_steps.ALL.update(ROBERTA)
variant_steps.ALL.update(MODERNBERT)
variant_steps.ALL.update({k: ("LlavaConfig", v) for k, v in LLAVA.items()})


def build(spec):
    import transformers

    name = spec["model"]
    if name not in ROBERTA and name not in MODERNBERT and name not in LLAVA:
        return chained(spec)
    cfg = variant_steps.config(name)
    cfg.use_cache = False
    cfg._attn_implementation = spec.get("attn", "sdpa")
    seq = spec["seq"]
    if name in LLAVA:
        # `use_cache` is the language model's own setting (`text_config.use_cache`, True by
        # default): left on, `LlamaModel` builds a `DynamicCache` in training too, copying every
        # layer's keys and values into it and skipping the causal mask. Training runs without a
        # cache, as the harness's language models do.
        cfg.text_config.use_cache = False
        cfg.text_config._attn_implementation = cfg._attn_implementation
        cfg.vision_config._attn_implementation = cfg._attn_implementation
        model = transformers.LlavaForConditionalGeneration(cfg)
        if spec.get("frozen") == ["vision_tower"]:
            model.model.vision_tower.requires_grad_(False)
        vc = cfg.vision_config
        n_img = cfg.image_seq_length
        V = cfg.text_config.vocab_size

        def make_batch(device, dtype, batch):
            text = torch.randint(0, cfg.image_token_id, (batch, seq), device=device)
            img = torch.full((batch, n_img), cfg.image_token_id, device=device)
            ids = torch.cat([img, text], dim=1)
            pix = torch.randn(batch, 3, vc.image_size, vc.image_size, device=device, dtype=dtype)
            return {"input_ids": ids, "pixel_values": pix, "labels": ids}
    else:
        cls = transformers.RobertaForMaskedLM if name in ROBERTA else transformers.ModernBertForMaskedLM
        model = cls(cfg)
        V = cfg.vocab_size

        def make_batch(device, dtype, batch):
            ids = torch.randint(0, V, (batch, seq), device=device)
            return {"input_ids": ids, "labels": ids}

    def loss_fn(model, b):
        return model(**b).loss

    return models.Workload(model, make_batch, loss_fn, "transformer", notes=[], ckpt_desc="none")


chained = models.build
models.build = build


def cases():
    out = []
    for name in ("roberta-small", "modernbert-small", "llava-small"):
        for dtype in ("fp32", "amp_bf16"):
            for attn in ("sdpa", "eager"):
                out.append(dict(model=name, seq=256, batch=2, dtype=dtype, opt="adamw", ckpt="none", attn=attn))
    # A sequence inside the local window, and a larger LLaVA step whose activations pass the optimizer's peak.
    out.append(dict(model="modernbert-small", seq=32, batch=2, dtype="fp32", opt="adamw", ckpt="none", attn="sdpa"))
    for dtype in ("fp32", "amp_bf16"):
        out.append(dict(model="llava-small", seq=512, batch=4, dtype=dtype, opt="adamw", ckpt="none", attn="sdpa"))
    # The published widths with activations above the optimizer step's peak.
    out.append(dict(model="llava-1.5-7b-2l", seq=1024, batch=8, dtype="amp_bf16", opt="adamw", ckpt="none", attn="sdpa"))
    # Fine-tuning with the vision tower frozen (`requires_grad_(False)`: no gradients, no optimizer state).
    out.append(dict(model="llava-small", seq=512, batch=4, dtype="amp_bf16", opt="adamw", ckpt="none", attn="sdpa",
                    frozen=["vision_tower"]))
    for dtype in ("fp32", "amp_bf16"):
        out.append(dict(model="roberta-base", seq=512, batch=8, dtype=dtype, opt="adamw", ckpt="none", attn="sdpa"))
        out.append(dict(model="modernbert-base", seq=1024, batch=4, dtype=dtype, opt="adamw", ckpt="none", attn="sdpa"))
        out.append(dict(model="llava-1.5-7b-2l", seq=512, batch=1, dtype=dtype, opt="adamw", ckpt="none", attn="sdpa"))
    return out


def finish(s, rec):
    cfg = variant_steps.planner_config(s["model"])
    if s["model"] in LLAVA:
        cfg["text_config"]["use_cache"] = False  # as `build` measured it
    plan = {"model": s["model"], "hf_config": cfg, "seq": s["seq"], "batch": s["batch"],
            "dtype": s["dtype"], "opt": s["opt"], "attn": s["attn"]}
    if s.get("frozen"):
        plan.update(mode="finetune", frozen=s["frozen"])
        rec["case_id"] = "frozen-vision/" + rec["case_id"]
    rec["plan"] = plan


def main(out):
    only = sys.argv[2] if len(sys.argv) > 2 else None
    specs = [s for s in cases() if not only or only in s["model"]]
    oracle_env.write_harness_records(out, specs, finish)


if __name__ == "__main__":
    main(sys.argv[1])
