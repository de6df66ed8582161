"""ResNets and ViTs under `checkpoint_sequential` (`sqrt` and `kN` segments), measured with the
shared oracle harness (`measure.run_case`, fake CUDA, two steps, each storage rounded to 512 B).
The shared `apply_vision_ckpt` takes only `stage` and `block` for ResNets and `block` for ViTs;
here `sqrt` and `kN` segment
- a ResNet's residual blocks in order, `nn.Sequential(*layer1, *layer2, *layer3, *layer4)`, with
  the stem run before it and the pool and classifier after, as vram-planner's ResNet builder does;
- a ViT's encoder layers (`model.encoder.layers`, an `nn.Sequential` of `EncoderBlock`s), the
  positional embedding added before them and the final LayerNorm after.
Any other model or mode goes to the shared `apply_vision_ckpt`.

    python vision_segments.py OUT.jsonl '[{"model": "resnet50", "res": 224, "batch": 32, "dtype": "fp32", "opt": "adam", "ckpt": "sqrt"}]'
"""
import json, math, sys
import oracle_env

oracle_env.enter(__file__)
import torch.nn as nn
import measure
import models

_shared = models.apply_vision_ckpt


def segments(n, mode):
    return max(1, round(math.sqrt(n))) if mode == "sqrt" else int(mode[1:])


def apply_vision_ckpt(name, model, mode):
    if not (mode == "sqrt" or mode.startswith("k")):
        return _shared(name, model, mode)
    if name.startswith("vit"):
        layers = model.encoder.layers
        seg = segments(len(layers), mode)
        model.encoder.layers = models.CkptSequential(layers, seg)
        return f"checkpoint_sequential(model.encoder.layers, {seg} segments, use_reentrant=False) over its {len(layers)} encoder blocks"
    if not name.startswith("resnet"):
        return _shared(name, model, mode)
    layers = ("layer1", "layer2", "layer3", "layer4")
    blocks = nn.Sequential(*[b for ln in layers for b in getattr(model, ln)])
    n = len(blocks)
    seg = segments(n, mode)
    # The blocks move into layer1 in their order, so the parameters (and the optimizer's
    # foreach lists) keep torchvision's order; layer2..4 become identities.
    model.layer1 = models.CkptSequential(blocks, seg)
    for ln in layers[1:]:
        setattr(model, ln, nn.Identity())
    return f"checkpoint_sequential(nn.Sequential(*layer1..layer4 blocks), {seg} segments, use_reentrant=False) over its {n} residual blocks"


models.apply_vision_ckpt = apply_vision_ckpt

out, specs = sys.argv[1], json.loads(sys.argv[2])
oracle_env.write_harness_records(out, specs)
