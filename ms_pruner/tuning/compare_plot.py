"""``compare.png``: each run's best latency against wall time and against trials, a row a workload
(matplotlib, the optional ``plot`` extra; without it no plot is written)."""

from __future__ import annotations

from typing import Optional


def plot(report: dict, path: str) -> Optional[str]:
    """The comparison ``report`` (compare.json) plotted to ``path``; None without matplotlib or a finished run.
    Runs set aside and made again (restore --rerun) are drawn dashed."""
    try:
        import matplotlib  # lazy: the optional `plot` extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: (the same)
    except ImportError:
        return None
    specs = [spec for spec, entry in report["workloads"].items() if entry["runs"]]
    if not specs:
        return None
    fig, axes = plt.subplots(len(specs), 2, figsize=(11, 3.6 * len(specs)), squeeze=False)
    for row, spec in enumerate(specs):
        entry = report["workloads"][spec]
        earlier = [(f"{name} (earlier run)", run, "--") for name, runs in entry.get("superseded", {}).items()
                   for run in runs]
        for name, run, style in [(name, run, "-") for name, run in entry["runs"].items()] + earlier:
            curve = [p for p in run["curve"] if p["best_latency_s"]]
            for ax, key in zip(axes[row], ("wall_s", "trials")):
                ax.step([p[key] for p in curve], [p["best_latency_s"] * 1e6 for p in curve], style,
                        where="post", label=name)
        axes[row][0].set(title=spec, xlabel="wall time (s)", ylabel="best latency (us)")
        axes[row][1].set(title=spec, xlabel="trials", ylabel="best latency (us)")
        for ax in axes[row]:
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
