"""Autocast fp16 training steps (`torch.autocast(dtype=torch.float16)` over fp32 weights), measured
with the shared oracle harness: its amp_bf16 loop with the autocast dtype switched to fp16. The
loop has no GradScaler (its `step` reads `found_inf.item()`, which FakeTensorMode cannot); the
scaler's own state is three one-element tensors."""
import json, os, sys
import oracle_env

oracle_env.enter(__file__)
import torch
import measure

_autocast = torch.autocast
class _Fp16Autocast(_autocast):
    def __init__(self, device_type, dtype=None, **kw):
        super().__init__(device_type, dtype=torch.float16, **kw)
torch.autocast = _Fp16Autocast  # the harness's amp_bf16 context, now in fp16

out, specs = sys.argv[1], json.loads(sys.argv[2])
with open(out, "a") as f:
    for s in specs:
        plan = dict(s["plan"])
        s = {k: v for k, v in s.items() if k != "plan"}
        s.setdefault("mode", "fake"); s.setdefault("device", "cuda"); s.setdefault("ckpt", "none")
        s["dtype"] = "amp_bf16"
        rec = measure.run_case(s)
        cid = measure.case_id(s).replace("amp_bf16", "amp_fp16")
        keep = {k: rec[k] for k in ("peak_r512", "peak", "param_bytes", "grad_bytes", "opt_state_bytes", "activation_bytes", "kernel_ops_seen", "optimizer_impl")}
        f.write(json.dumps({"case_id": cid, "kind": "train", "plan": plan, **keep, "versions": measure.versions(), "device_faked": True}) + "\n")
        print(cid, rec["peak_r512"], flush=True)
