"""What an image model's evaluation forward allocates: `model.eval()` and `model(x)` under
`torch.no_grad()`, on the faked CUDA device.

The training steps of the shared harness (`shared/reference/harness/`) and of the other drivers
never run a model in eval mode, where torchvision's models take other paths: `nn.BatchNorm2d` on
its running statistics (no saved mean and inverse deviation), and `nn.MultiheadAttention`'s fast
path (`torch._native_multi_head_attention`), which `MultiheadAttention.forward` takes when not
training, under no_grad, with batched 3-D inputs, `batch_first=True` and `need_weights=False` —
as torchvision's `EncoderBlock` calls it.

Each case runs in its own process with the `fakecuda_alloc` shims of `reserved_steps.py`
preloaded (real tensors through PyTorch's real `CUDACachingAllocator` on a faked sm_90 device;
kernels, cuBLAS and cuDNN are no-ops, cuDNN workspaces answered as 0 bytes). The model is the
harness's `models.build` (seeded with `torch.manual_seed(0)`), built on the CPU, converted to
bf16 there for `"dtype": "bf16"` (`measure.convert_dtype`), moved with `model.to("cuda")`; the
batch is the harness's `make_batch` (its `x` only: no labels, no loss). Then

    model.eval()
    with torch.no_grad(), autocast_or_nothing:
        out = model(batch["x"])

under the harness's `LiveTracker` (parameters, buffers and the input tracked first): `peak_r512`
is its peak (every live storage rounded to 512 bytes, checked after every op), the figure the
other measured files record; `max_allocated` is `torch.cuda.max_memory_allocated()` of the
forward beside it.

Usage (with the harness venv's python; re-executes itself with the shims preloaded):
    python tests/data/oracle/image_infer_steps.py --out tests/data/image-infer-steps.jsonl [--filter REGEX] [--trace]

`--trace` prints each aten op of the forward with its outputs and `torch.cuda.memory_allocated()`
after it, instead of writing records.
"""
import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reserved_steps as rs  # noqa: E402  (the shims and their environment)


def cases():
    C = []

    def add(**kw):
        kw["case_id"] = "eval/{model}/r{res}/b{batch}/{dtype}/allocshim/cuda".format(**kw)
        C.append(kw)

    add(model="vit_b_16", res=224, batch=64, dtype="bf16")
    add(model="vit_b_16", res=224, batch=64, dtype="fp32")
    add(model="vit_b_16", res=224, batch=64, dtype="amp_bf16")
    add(model="resnet50", res=224, batch=128, dtype="fp32")
    add(model="resnet50", res=224, batch=32, dtype="amp_bf16")
    add(model="resnet50", res=224, batch=32, dtype="bf16")
    return C


def run_one(spec, trace):
    import warnings

    warnings.filterwarnings("ignore")
    sys.path.insert(0, rs.HARNESS)
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    import measure
    from models import build
    from tracker import LiveTracker

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.cuda.init()
    t0 = time.time()

    class Trace(TorchDispatchMode):
        """Each aten op, its outputs, and what the allocator holds after it."""

        def __init__(self):
            super().__init__()
            self.kernels = {}
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket.__name__)
            # the first call of each op: what it mallocs and frees inside, from the allocator's
            # own history
            inside = trace and name not in self.seen
            self.seen.add(name)
            if inside:
                torch.cuda.memory._record_memory_history(max_entries=100000)
            out = func(*args, **(kwargs or {}))
            if inside:
                ev = [(e["action"], e["size"]) for e in torch.cuda.memory._snapshot()["device_traces"][0]
                      if e["action"] in ("alloc", "free_requested")]
                torch.cuda.memory._record_memory_history(enabled=None)
                if len(ev) > 1:
                    print(f"IN {name}: " + " ".join(f"{'+' if a == 'alloc' else '-'}{n}" for a, n in ev), flush=True)
            if any(k in name for k in ("cudnn", "flash", "efficient", "native_multi_head", "transformer")):
                self.kernels[f"aten.{name}"] = self.kernels.get(f"aten.{name}", 0) + 1
            if trace:
                outs = [f"{list(t.shape)}:{str(t.dtype)[6:]}" for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
                print(f"OP {name:40} {torch.cuda.memory_allocated():>14} {' '.join(outs)}", flush=True)
            return out

    torch.manual_seed(0)
    wl = build({"model": spec["model"], "res": spec["res"], "batch": spec["batch"], "dtype": spec["dtype"],
                "opt": "sgd", "ckpt": "none"})
    model = wl.model
    if spec["dtype"] == "bf16":
        measure.convert_dtype(model, torch.bfloat16)
    model.to("cuda")
    model.eval()
    in_dtype = torch.bfloat16 if spec["dtype"] == "bf16" else torch.float32
    torch.manual_seed(0)
    x = wl.make_batch("cuda", in_dtype, spec["batch"])["x"]
    amp = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if spec["dtype"] == "amp_bf16"
           else contextlib.nullcontext())
    torch.cuda.synchronize()
    allocated_before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    mode = Trace()
    tr = LiveTracker("cuda")
    with mode, tr:
        tr.track(measure.unique_params(model), "param")
        tr.track(list(model.buffers()), "buffer")
        tr.track(x, "input")
        tr.set_phase(1, "forward")
        with torch.no_grad(), amp:
            out = model(x)
        del out
    torch.cuda.synchronize()
    pk = tr.peaks[(1, "forward")]
    return {
        "peak_r512": pk["peak_r512"],
        "peak": pk["peak"],
        "breakdown": pk.get("breakdown"),
        "max_allocated": torch.cuda.max_memory_allocated(),
        "allocated_before": allocated_before,
        "kernel_ops_seen": mode.kernels,
        "fake_cuda_device": torch.cuda.get_device_name(0)
        + f" sm_{''.join(map(str, torch.cuda.get_device_capability(0)))}",
        "versions": measure.versions(),
        "wall_s": round(time.time() - t0, 2),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="JSONL to write")
    ap.add_argument("--filter", default=None, help="regex matched against the case id")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--one", default=None, help="internal: run one case (JSON spec) and print its record")
    args = ap.parse_args(argv)
    if args.one is not None:
        if os.environ.get("ORACLE_FAKECUDA_ALLOC_ACTIVE") != "1":
            sys.exit("--one must run with the fakecuda_alloc shims preloaded")
        rec = run_one(json.loads(args.one), args.trace)
        print("RECORD " + json.dumps(rec), flush=True)
        return 0
    C = [c for c in cases() if not args.filter or re.search(args.filter, c["case_id"])]
    if not args.out and not args.trace:
        ap.error("--out or --trace is required")
    rs.build_shims()
    recs = []
    for c in C:
        cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(c)] + (["--trace"] if args.trace else [])
        p = subprocess.run(cmd, env=rs.shim_env(None), capture_output=True, text=True)
        line = [l for l in p.stdout.splitlines() if l.startswith("RECORD ")]
        if p.returncode != 0 or not line:
            print(f"[FAIL] {c['case_id']}\n{p.stderr[-3000:]}", flush=True)
            return 1
        if args.trace:
            print(f"== {c['case_id']}")
            print("\n".join(l for l in p.stdout.splitlines() if l.startswith(("OP ", "IN "))))
        m = json.loads(line[0][len("RECORD "):])
        plan = {"model": c["model"], "mode": "infer", "batch": c["batch"], "dtype": c["dtype"], "res": c["res"]}
        rec = {"case_id": c["case_id"], "kind": "infer", "plan": plan, **m, "device_faked": True,
               "method": "fakecuda_alloc shims (tests/data/oracle/fakecuda_alloc/): real tensors through PyTorch's real "
               "CUDACachingAllocator on a faked sm_90 device; model.eval(), the forward under torch.no_grad() under the "
               "harness's LiveTracker"}
        recs.append(rec)
        print(f"{c['case_id']:45} peak_r512 {m['peak_r512']:>12} max_allocated {m['max_allocated']:>12} "
              f"{m['kernel_ops_seen']} {m['wall_s']}s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
