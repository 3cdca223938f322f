"""End-to-end torch timings to print next to the tuned model (eager and torch.compile)."""

from __future__ import annotations

import time
from typing import Optional

from .user_model import example_inputs


def torch_latency(module, example, device: str, compile_model: bool = False, repeat: int = 20) -> Optional[float]:
    """Median seconds per forward pass on ``example`` (a tensor or a tuple), or None when this torch
    cannot run it (e.g. compile fails)."""
    import torch  # lazy: torch only for its own timings

    try:
        module = module.to(device)
        inputs = [x.to(device) for x in example_inputs(example)]
        fn = torch.compile(module) if compile_model else module
        with torch.no_grad():
            for _ in range(3):
                fn(*inputs)
            times = []
            for _ in range(repeat):
                if device == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                fn(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
    except Exception:  # pylint: disable=broad-except
        return None
    times.sort()
    return times[len(times) // 2]
