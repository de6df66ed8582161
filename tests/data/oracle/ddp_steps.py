"""One rank of a PyTorch DistributedDataParallel (DDP) training step, measured with the shared
oracle harness: fake sm_90 CUDA, FakeTensorMode, and torch's fake process group (`FakeStore`) for
a world of N ranks in one process. The model is wrapped in `torch.nn.parallel.
DistributedDataParallel` (default `bucket_cap_mb=25`, `broadcast_buffers=True`) while the
harness's tracker is already running, so the C++ reducer's flat gradient buckets are counted as
the storages they are (its all-reduce is a no-op on the fake group). The loop is the harness's
(two steps, `zero_grad(set_to_none=True)`, forward, backward, foreach optimizer step); the
reducer rebuilds its buckets in gradient-ready order at step 2's forward, and step 2's peak is
the one recorded. Storages allocated while DDP is constructed and in its pre-forward (where the
reducer rebuilds its buckets) are labelled `ddp` in the tracker's breakdown. Four things a fake
device/group cannot do are worked around, none allocating on the device: `init_sync=False` (the
init-time parameter-shape check reads tensor data; the one-off initial broadcast is skipped), a
Python comm hook doing what the built-in C++ all-reduce hook does (in place; the fake group's
work has no future value), a no-op stand-in for DDP's C++ logger (it reads CUDA event timings),
and real CPU int32 tensors for the bucket indices the reducer broadcasts when it rebuilds.
Usage: python ddp_steps.py '[{"model": "llama-small", "seq": 1024, "batch": 4, "dtype": "bf16",
"opt": "adamw", "world": 8}]' OUT.jsonl  (vision models take "res" instead of "seq"; an optional
"bucket_view": true sets `gradient_as_bucket_view=True`; "dtype" is fp32, bf16 or amp_bf16 as in
the harness; an optional "zero": 1 adds ZeRO stage 1, below). The peak's breakdown by category is
printed to stderr.
ZeRO stage 1 ("zero": 1, case ids `zero1-wN/...`, plan `"parallel": {..., "zero": 1}`) is PyTorch's
`torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=C, **kw)` over the same
DDP model, with C and kw those of the harness's `measure.make_optimizer` (foreach forced; checked
against it on a throwaway CPU tensor) and its defaults `parameters_as_bucket_view=False`,
`overlap_with_ddp=False`: parameters are split greedily, largest first, to the least-loaded rank
(`_partition_parameters`); rank 0's local optimizer (`.optim`, whose state is the one labelled
`opt_state`) steps only its share, then every parameter is `dist.broadcast` in place from its
owner (`_sync_params`), which moves nothing and allocates nothing on the fake group. It needed no
workaround beyond DDP's four."""
import json, sys
import oracle_env

oracle_env.enter(__file__)
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.optim import ZeroRedundancyOptimizer
import measure
from tracker import LiveTracker as _LT, PHASE_CATEGORY
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch._subclasses.fake_tensor import FakeTensor


class LiveTracker(_LT):
    """The harness's tracker, with a category override for what DDP's reducer allocates."""
    cat_override = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.n_ops += 1
        cat = self.cat_override or PHASE_CATEGORY.get(self.phase, "other")
        for x in tree_flatten(out)[0]:
            if isinstance(x, torch.Tensor) and x.layout == torch.strided:
                self._add_storage(x.untyped_storage(), self._devtype(x), cat)
        self._check_peak()
        return out


TRACKER = None


class _RealIndices(TorchDispatchMode):
    """While the reducer rebuilds its buckets it broadcasts the new bucket indices from rank 0
    (`Reducer::sync_bucket_indices`) through CPU int32 tensors that it fills and reads in C++;
    under FakeTensorMode they would have no data. Those few tensors are made real (CPU, untracked)
    and the copies between them and their device twin are skipped (rank 0's indices are
    authoritative; the fake group's broadcast moves nothing)."""
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.empty.memory_format and kwargs.get("dtype") == torch.int32 \
                and torch.device(kwargs.get("device") or "cpu").type == "cpu":
            with _disable_current_modes():
                return func(*args, **kwargs)
        if func is torch.ops.aten.copy_.default and not all(isinstance(a, FakeTensor) for a in args[:2]):
            return args[0]
        return func(*args, **kwargs)


class TrackedDDP(DDP):
    """DDP whose pre-forward (the reducer's one bucket rebuild, the buffer broadcast) allocates
    under the tracker category `ddp`."""
    def _pre_forward(self, *args, **kwargs):
        tr = TRACKER
        if tr is not None:
            tr.cat_override = "ddp"
        try:
            with _RealIndices():
                return super()._pre_forward(*args, **kwargs)
        finally:
            if tr is not None:
                tr.cat_override = None


def allreduce_hook(group, bucket):
    """What DDP's built-in C++ hook does (`AllReduceCommHook::runHook`: divide the flat bucket
    in place, all-reduce it in place, return it), as a Python comm hook: the fake group's work
    carries no future value, which the built-in hook's result parsing asserts on."""
    t = bucket.buffer()
    t.div_(dist.get_world_size(group))
    dist.all_reduce(t, group=group)
    fut = torch.futures.Future()
    fut.set_result(t)
    return fut


class _NoLogger:
    """Stands in for DDP's C++ `dist.Logger`, whose runtime statistics read CUDA event timings
    (cudaEventElapsedTime), which the fake device cannot give; it allocates no tensors."""
    def __getattr__(self, name):
        return lambda *a, **k: None


def zero_optimizer_args(name):
    """The optimizer class and keyword arguments `measure.make_optimizer` uses (foreach forced on
    CUDA, as there), for `ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)`; checked
    against the harness's own choice on a throwaway CPU tensor so the two cannot drift apart."""
    fe = True
    cls, kw = {"sgd": (torch.optim.SGD, dict(lr=0.01, foreach=fe)),
               "sgd_momentum": (torch.optim.SGD, dict(lr=0.01, momentum=0.9, foreach=fe)),
               "adam": (torch.optim.Adam, dict(lr=1e-3, foreach=fe)),
               "adamw": (torch.optim.AdamW, dict(lr=1e-3, weight_decay=0.01, foreach=fe))}[name]
    with _disable_current_modes():
        ref = measure.make_optimizer(name, [torch.nn.Parameter(torch.zeros(1))], "cuda")
        mine = cls([torch.nn.Parameter(torch.zeros(1))], **kw)
    assert type(ref) is cls and ref.defaults == mine.defaults, (ref.defaults, mine.defaults)
    return cls, kw


CASES = json.loads(sys.argv[1])
OUT = sys.argv[2]
world = max(c["world"] for c in CASES)
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)


def run(c):
    global TRACKER
    group = dist.new_group(list(range(c["world"]))) if c["world"] != world else None
    spec = {"model": c["model"], "seq": c.get("seq"), "res": c.get("res"), "batch": c["batch"], "dtype": c["dtype"],
            "opt": c.get("opt", "adamw"), "ckpt": c.get("ckpt", "none"), "attn": "sdpa", "mode": "fake", "device": "cuda"}
    with measure.fake_mode():
        wl = oracle_env.build_model(spec)
        model = wl.model
        params = measure.unique_params(model)
        batch, amp = oracle_env.batch_and_autocast(wl, spec)
        tr = LiveTracker("cuda")
        TRACKER = tr
        with tr:
            tr.track(params, "param")
            tr.track(list(model.buffers()), "buffer")
            tr.track(batch, "input")
            tr.install_grad_hooks(params)
            tr.cat_override = "ddp"
            ddp = TrackedDDP(model, process_group=group, gradient_as_bucket_view=bool(c.get("bucket_view")),
                             init_sync=False)  # the init-time shape check reads tensor data
            ddp.register_comm_hook(group, allreduce_hook)
            ddp.logger = _NoLogger()
            tr.cat_override = None
            if c.get("zero", 0) == 1:
                cls, kw = zero_optimizer_args(spec["opt"])
                opt = ZeroRedundancyOptimizer(params, optimizer_class=cls, process_group=group, **kw)
                local = opt.optim  # this rank's optimizer over its partition; it holds the state
            else:
                opt = measure.make_optimizer(spec["opt"], params, "cuda")
                local = opt
            for k in (1, 2):
                tr.set_phase(k, "zero_grad"); opt.zero_grad(set_to_none=True)
                tr.set_phase(k, "forward")
                with amp:
                    loss = wl.loss_fn(ddp, batch)
                tr.set_phase(k, "backward"); loss.backward()
                tr.set_phase(k, "optimizer"); opt.step()
                tr.relabel(measure.opt_state_tensors(local), "opt_state")
                del loss
                tr.set_phase(k, "end")
        TRACKER = None
        s2 = {ph: v for (k, ph), v in tr.peaks.items() if k == 2}
        step2 = max(v["peak_r512"] for v in s2.values())
        phase = [ph for ph, v in s2.items() if v["peak_r512"] == step2][0]
        print(json.dumps({ph: {"peak_r512": v["peak_r512"], "breakdown": v["breakdown"]} for ph, v in s2.items()}), file=sys.stderr, flush=True)
        del ddp
    return step2, phase


with open(OUT, "a") as f:
    for c in CASES:
        peak, phase = run(c)
        opt = c.get("opt", "adamw")
        plan = {"model": c["model"], **({"res": c["res"]} if "res" in c else {"seq": c["seq"]}), "batch": c["batch"], "dtype": c["dtype"], "opt": opt,
                "parallel": {"gpus_per_node": c["world"], "dp": c["world"], "zero": c.get("zero", 0)}}
        if c.get("bucket_view"):
            plan["parallel"]["gradient_as_bucket_view"] = True
        if c.get("ckpt", "none") != "none":
            plan["ckpt"] = c["ckpt"]
        size = f'r{c["res"]}' if "res" in c else f'L{c["seq"]}'
        cid = f'{"zero1" if c.get("zero", 0) == 1 else "ddp"}-w{c["world"]}/{c["model"]}/{size}/b{c["batch"]}/{c["dtype"]}/{opt}/ckpt-{c.get("ckpt", "none")}{"/bucket-view" if c.get("bucket_view") else ""}'
        rec = {"case_id": cid, "kind": "train", "plan": plan, "peak_r512": peak, "peak_phase": phase, "rank": 0, "world_size": c["world"],
               "versions": measure.versions(), "device_faked": True, "process_group": "fake (torch.testing FakeStore)"}
        f.write(json.dumps(rec) + "\n")
        print(cid, peak, phase, flush=True)
