"""Measures LM training steps as on a real GPU with an unpadded, unpacked batch: transformers'
packed-sequence check returns None (sequential position ids), so the causal mask is skipped
(SDPA is_causal) and grouped-query attention uses enable_gqa. Everything else is the shared
oracle harness (fake sm_90 CUDA, LiveTracker)."""
import json, os, sys
import oracle_env

oracle_env.enter(__file__)

import torch
import transformers.masking_utils as mu
import measure

def unpadded_find_packed_sequence_indices(position_ids):
    # The same temporaries as transformers' function; on a real GPU with sequential positions the
    # check `(packed[:, -1] == 0).all()` holds and it returns None.
    first = position_ids[:, :1] - 1
    diff = torch.diff(position_ids, prepend=first, dim=-1)
    (diff != 1).cumsum(-1)
    return None

mu.find_packed_sequence_indices = unpadded_find_packed_sequence_indices

out = sys.argv[1]
specs = json.loads(sys.argv[2])
with open(out, "a") as f:
    for s in specs:
        s.setdefault("mode", "fake"); s.setdefault("device", "cuda"); s.setdefault("ckpt", "none"); s.setdefault("attn", "sdpa")
        plan = s.pop("plan")
        s["case_id"] = measure.case_id(s) + "/unpadded"
        rec = measure.run_case(s)
        keep = {k: rec[k] for k in ("peak_r512", "peak", "param_bytes", "grad_bytes", "opt_state_bytes", "activation_bytes", "kernel_ops_seen", "optimizer_impl")}
        out_rec = {"case_id": s["case_id"], "kind": "train", "plan": plan, **keep, "spec": s, "versions": measure.versions(), "device_faked": True}
        f.write(json.dumps(out_rec) + "\n")
        print(s["case_id"], rec.get("peak_r512"), flush=True)
