"""Stock MetaSchedule vs Pruner (vs MoA) on the same workloads and trial budget.

    python scripts/compare.py --suite cpu-small --target llvm --trials 64 --out docs/results/cpu
    python scripts/compare.py --workload matmul:4096x4096x4096:float16:float32 --target cuda \\
        --trials 256 --out docs/results/h100

Same as ``ms-pruner compare``; writes compare.json, compare.md and compare.png under --out.
"""

import sys

from ms_pruner.cli import main

if __name__ == "__main__":
    sys.exit(main(["compare"] + sys.argv[1:]))
