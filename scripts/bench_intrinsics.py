"""Seconds to register TVM's tensor intrinsics in a fresh interpreter: plainly and through ms_pruner.

    python scripts/bench_intrinsics.py --repeat 2 --out docs/results/cpu/intrinsics.json

`import tvm.s_tir.tensor_intrin` (what every TuneContext does) against
`ms_pruner.intrinsics.register_tensor_intrinsics()`, each in its own interpreter after `import tvm`,
alternating; each run also hashes every registered intrinsic's description and implementation
(TVMScript), so the output says whether both ways registered the same ones.
"""

import argparse
import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Records every TensorIntrin.register during the import, then prints each intrinsic's description
# and implementation as TVMScript (hashed), keyed by name, and the import's seconds.
_SCRIPT = """
import hashlib, json, sys, time
import tvm
from tvm.s_tir import TensorIntrin
names = []
original = TensorIntrin.register
def register(name, desc, impl, override=False):
    names.append(name)
    return original(name, desc, impl, override)
TensorIntrin.register = staticmethod(register)
started = time.perf_counter()
if sys.argv[1] == "ms_pruner":
    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()
else:
    import tvm.s_tir.tensor_intrin
seconds = time.perf_counter() - started
digest = lambda func: hashlib.sha256(func.script().encode()).hexdigest()
intrinsics = {name: [digest(TensorIntrin.get(name).desc), digest(TensorIntrin.get(name).impl)] for name in names}
print(json.dumps({"seconds": seconds, "intrinsics": intrinsics}))
"""


def registered(how: str) -> dict:
    """``{"seconds": ..., "intrinsics": {name: [desc hash, impl hash]}}`` from a fresh interpreter;
    ``how`` is "ms_pruner" or "plain"."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _SCRIPT, how], capture_output=True, text=True, check=True,
                         env=env, cwd=REPO_ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def tvms_own(intrinsics: dict) -> dict:
    """``intrinsics`` without the package's own (ms_pruner/mma_k16.py), which only it registers."""
    from ms_pruner.mma_k16 import INTRINSIC_NAMES  # lazy: loads TVM, which --help need not

    return {name: hashes for name, hashes in intrinsics.items() if name not in INTRINSIC_NAMES}


def main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import provenance, write_json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default="docs/results/cpu/intrinsics.json")
    args = parser.parse_args()
    seconds = {"plain": [], "ms_pruner": []}
    hashes = {}
    for _ in range(args.repeat):
        for how in ("plain", "ms_pruner"):
            result = registered(how)
            seconds[how].append(round(result["seconds"], 3))
            hashes.setdefault(how, result["intrinsics"])
    write_json(args.out, {**provenance(), "seconds": seconds,
                          "intrinsics": len(hashes["plain"]),
                          "same_intrinsics": hashes["plain"] == tvms_own(hashes["ms_pruner"])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
