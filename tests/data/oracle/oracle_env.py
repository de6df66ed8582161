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
