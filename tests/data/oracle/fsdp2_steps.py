"""One rank of a PyTorch FSDP2 (`fully_shard`) training step, measured with the shared oracle
harness: fake sm_90 CUDA, FakeTensorMode, and torch's fake process group (`FakeStore`) for a
world of N ranks in one process. The harness's tracker is extended twice: a DTensor counts as its
local shard (its own storage has the global size), and FSDP's `free_storage`/`alloc_storage`
(which resize the unsharded parameters' storage instead of dropping it) are reported to it.
Usage: python fsdp2_steps.py '[{"model": "llama-small", "seq": 1024, "batch": 4, "dtype": "bf16",
"world": 8, "zero": 3}]' OUT.jsonl  (zero 3: reshard_after_forward=True, 2: False; an optional
"mp": {"param": "bf16", "reduce": "fp32"} applies FSDP's MixedPrecisionPolicy; "accum": k runs k micro-batches per optimizer step; "offload": true applies FSDP's
CPUOffloadPolicy — unpinned, as FakeTensorMode cannot pin; pinning does not change GPU memory)."""
import json, os, sys
import oracle_env

oracle_env.enter(__file__)
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
import measure
from tracker import LiveTracker as _LT
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_map

def _local(x):
    return x._local_tensor if isinstance(x, DTensor) else x

class LiveTracker(_LT):
    """The harness's tracker, counting a DTensor by its local shard (its own storage is the
    logical, global size)."""
    def track(self, t, cat):
        return super().track(tree_map(_local, t), cat)
    def relabel(self, t, cat):
        return super().relabel(tree_map(_local, t), cat)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.n_ops += 1
        from tracker import PHASE_CATEGORY
        cat = PHASE_CATEGORY.get(self.phase, "other")
        from torch.utils._pytree import tree_flatten
        for x in tree_flatten(out)[0]:
            x = _local(x)
            if isinstance(x, torch.Tensor) and x.layout == torch.strided:
                self._add_storage(x.untyped_storage(), self._devtype(x), cat)
        self._check_peak()
        return out

import torch.distributed.fsdp._fully_shard._fsdp_param as _fp
import torch.distributed.fsdp._fully_shard._fsdp_param_group as _fpg
from tracker import round512
TRACKER = None

def _resize(tensor, size):
    # FSDP frees and re-allocates unsharded parameters by resizing their storage; the tracker
    # only sees storages born and collected, so it is told here.
    st = tensor.untyped_storage()
    tr = TRACKER
    info = tr._info.get(st) if tr is not None else None
    if info is not None:
        tr.live[info.dev] -= info.nbytes; tr.live_r[info.dev] -= info.rbytes; tr.cat_live[(info.dev, info.cat)] -= info.nbytes
        info.nbytes, info.rbytes = size, (round512(size) if size else 0)
        tr.live[info.dev] += info.nbytes; tr.live_r[info.dev] += info.rbytes; tr.cat_live[(info.dev, info.cat)] += info.nbytes
        tr._check_peak()

def alloc_storage(tensor):
    size = tensor.numel() * tensor.itemsize
    if (storage := tensor.untyped_storage()).size() != size:
        storage.resize_(size)
        _resize(tensor, size)

def free_storage(tensor):
    if (storage := tensor.untyped_storage()).size() != 0:
        storage.resize_(0)
        _resize(tensor, 0)

_fp.alloc_storage = alloc_storage; _fp.free_storage = free_storage; _fpg.alloc_storage = alloc_storage

CASES = json.loads(sys.argv[1])
OUT = sys.argv[2]
world = max(c["world"] for c in CASES)
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
mesh = init_device_mesh("cuda", (world,))
def mp(c):
    # FSDP2's MixedPrecisionPolicy: parameters gathered (and computed) in `param_dtype`,
    # gradients reduced in `reduce_dtype`; the sharded parameters stay in the model's dtype.
    from torch.distributed.fsdp import MixedPrecisionPolicy
    m = c.get("mp")
    if not m:
        return {}
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}
    return {"mp_policy": MixedPrecisionPolicy(param_dtype=dt[m["param"]], reduce_dtype=dt[m.get("reduce", "fp32")])}

def off(c):
    from torch.distributed.fsdp import CPUOffloadPolicy
    return {"offload_policy": CPUOffloadPolicy(pin_memory=False)} if c.get("offload") else {}

def run(c):
    global TRACKER
    world = c["world"]
    mesh = init_device_mesh("cuda", (world,))
    spec = {"model": c["model"], "seq": c["seq"], "batch": c["batch"], "dtype": c["dtype"], "opt": "adamw", "ckpt": c.get("ckpt", "none"), "attn": "sdpa", "mode": "fake", "device": "cuda"}
    with measure.fake_mode():
        wl = oracle_env.build_model(spec)
        model = wl.model
        reshard = c["zero"] == 3
        layers = model.model.layers if hasattr(model, "model") else model.transformer.h
        for layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, **mp(c), **off(c))
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, **mp(c), **off(c))
        params = list(model.parameters())
        opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
        batch, amp = oracle_env.batch_and_autocast(wl, spec)
        tr = LiveTracker("cuda")
        TRACKER = tr
        with tr:
            tr.track(params, "param")
            tr.track(batch, "input")
            for k in (1, 2):
                tr.set_phase(k, "zero_grad"); opt.zero_grad(set_to_none=True)
                for _ in range(c.get("accum", 1)):
                    tr.set_phase(k, "forward")
                    with amp:
                        loss = wl.loss_fn(model, batch)
                    tr.set_phase(k, "backward"); loss.backward()
                tr.set_phase(k, "optimizer"); opt.step(); del loss
                tr.set_phase(k, "end")
        host = tr.live["cpu"]  # what stays in host memory after the step (offload)
        TRACKER = None
        step2 = max(v["peak_r512"] for (k, ph), v in tr.peaks.items() if k == 2)
        phase = [ph for (k, ph), v in tr.peaks.items() if k == 2 and v["peak_r512"] == step2][0]
    return step2, phase, host

with open(OUT, "a") as f:
    for c in CASES:
        peak, phase, host = run(c)
        plan = {"model": c["model"], "seq": c["seq"], "batch": c["batch"], "dtype": c["dtype"], "opt": "adamw",
                "parallel": {"gpus_per_node": c["world"], "dp": c["world"], "fsdp": True, "zero": c["zero"]}}
        if c.get("ckpt", "none") != "none":
            plan["ckpt"] = c["ckpt"]
        if c.get("offload"):
            plan["offload"] = {"optimizer": True, "params": True}
        if c.get("accum", 1) > 1:
            plan["parallel"]["micro_batches"] = c["accum"]
        if c.get("mp"):
            plan["parallel"]["mixed_precision"] = {"param_dtype": c["mp"]["param"], "reduce_dtype": c["mp"].get("reduce", "fp32")}
            cid_mp = f'/mp-{c["mp"]["param"]}-{c["mp"].get("reduce", "fp32")}'
        else:
            cid_mp = ""
        cid = f'fsdp2-z{c["zero"]}-w{c["world"]}/{c["model"]}/L{c["seq"]}/b{c["batch"]}/{c["dtype"]}/ckpt-{c.get("ckpt","none")}{cid_mp}{"/accum" + str(c["accum"]) if c.get("accum", 1) > 1 else ""}'
        rec = {"case_id": cid, "kind": "train", "plan": plan, "peak_r512": peak, "peak_phase": phase, **({"host_bytes_end": host} if c.get("offload") else {}), "rank": 0, "world_size": c["world"],
               "versions": measure.versions(), "device_faked": True, "process_group": "fake (torch.testing FakeStore)"}
        f.write(json.dumps(rec) + "\n")
        print(cid, peak, phase, flush=True)
