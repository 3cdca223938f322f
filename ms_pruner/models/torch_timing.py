"""End-to-end torch timings to print next to the tuned model (eager and torch.compile)."""

from __future__ import annotations

import time
from typing import Optional


def torch_latency(module, example, device: str, compile_model: bool = False, repeat: int = 20) -> Optional[float]:
    """Median seconds per forward pass, or None when this torch cannot run it (e.g. compile fails)."""
    import torch  # lazy: torch only for its own timings

    try:
        module = module.to(device)
        example = example.to(device)
        fn = torch.compile(module) if compile_model else module
        with torch.no_grad():
            for _ in range(3):
                fn(example)
            times = []
            for _ in range(repeat):
                if device == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                fn(example)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
    except Exception:  # pylint: disable=broad-except
        return None
    times.sort()
    return times[len(times) // 2]
