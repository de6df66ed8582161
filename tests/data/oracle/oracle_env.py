"""What every driver here shares: the shared oracle harness on the import path, and the process
re-executed once with the fake-CUDA shims preloaded (as the harness's own `ensure_fakecuda`
does for `measure.py`). The harness lives beside the clone (`shared/reference/harness/`) or at
$ORACLE_HARNESS; run the drivers with its venv's python."""
import os
import sys

HARNESS = os.environ.get("ORACLE_HARNESS", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "shared", "reference", "harness"))


def enter(script):
    """Call first thing in a driver, with its `__file__`."""
    sys.path.insert(0, HARNESS)
    if os.environ.get("ORACLE_FAKECUDA_ACTIVE") != "1":
        import measure

        d = measure._fakecuda_dir()
        env = dict(os.environ, LD_PRELOAD=os.path.join(d, "libfakecuda.so"), LD_LIBRARY_PATH=d, ORACLE_FAKECUDA_ACTIVE="1")
        os.execve(sys.executable, [sys.executable, os.path.abspath(script)] + sys.argv[1:], env)


def build_model(spec):
    """The harness's workload for `spec` on the fake CUDA device, built the way `measure.py`
    builds it (seeded, fake-safe init, converted to bf16 for `"dtype": "bf16"`, in training
    mode). Call inside `measure.fake_mode()`."""
    import torch
    import measure
    from models import build

    torch.manual_seed(0)
    with torch.device("cuda"), measure._fake_safe_init(True):
        wl = build(spec)
    if spec["dtype"] == "bf16":
        measure.convert_dtype(wl.model, torch.bfloat16)
    wl.model.train()
    return wl


def batch_and_autocast(wl, spec):
    """The workload's batch on the fake device (bf16 inputs for a bf16 model) and the forward's
    autocast context (bf16 for `"dtype": "amp_bf16"`, else none), as `measure.py` uses them."""
    import contextlib
    import torch

    in_dtype = torch.bfloat16 if spec["dtype"] == "bf16" else torch.float32
    batch = wl.make_batch("cuda", in_dtype, spec["batch"])
    amp = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if spec["dtype"] == "amp_bf16" else contextlib.nullcontext()
    return batch, amp


def write_harness_records(out, specs, finish=None):
    """Runs each case of `specs` with the harness's `measure.run_case` (fake CUDA, two steps) and
    appends its record to `out` as the harness's own main loop writes it; `finish(spec, record)`
    may add to the record. One line per case on stdout: id, peak, each step's peak phase."""
    import json
    import torch
    import measure

    torch.cuda.init()
    fake_dev = torch.cuda.get_device_name(0) + f" sm_{''.join(map(str, torch.cuda.get_device_capability(0)))}"
    with open(out, "a") as f:
        for s in specs:
            s.setdefault("mode", "fake")
            s.setdefault("device", "cuda")
            rec = {"case_id": measure.case_id(s), **s, "device_faked": True, "fake_cuda_device": fake_dev,
                   "versions": measure.versions(), "method": measure.METHOD}
            rec.update(measure.run_case(s))
            rec["ok"] = True
            if finish:
                finish(s, rec)
            f.write(json.dumps(rec) + "\n")
            print(rec["case_id"], rec["peak_r512"], rec["steps"]["1"]["peak_step_phase"], rec["steps"]["2"]["peak_step_phase"],
                  rec["ckpt_desc"], flush=True)
