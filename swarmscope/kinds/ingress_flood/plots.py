"""PNG plots of an ingress-flood run (matplotlib, headless), written into the run directory.

    files = write_plots({"steps": [...], "faults": [...], "model": "closed", "t0": t}, Path(run_dir))

latency percentiles vs concurrency (or rate), the published benchmark's plot; latency
histogram per step; req/s per step (generator-bound steps in red); the proxy's CPU % and RSS
per step (from the probe's procstat rows); the mean latency vs load, one line per backend replica
count (the write-up's "average response time … with replicas"); the outage around each fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_plots(section: dict[str, Any], run_dir: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = section["steps"]
    if not steps:
        return {}
    key = "rate" if section.get("model") == "open" else "users"
    xs = [s.get(key) or s["step"] for s in steps]
    files: dict[str, str] = {}

    fig, ax = plt.subplots(figsize=(7, 4))
    for p in ("p10", "p25", "p50", "p75", "p90", "p95", "p99", "p99.9"):
        ax.plot(xs, [s["latency_ms"][p] for s in steps], marker="o", label=p)
    ax.plot(xs, [s["latency_ms"]["max"] for s in steps], "k--", label="max")
    ax.set(xlabel=key, ylabel="latency (ms)", yscale="log", title="latency percentiles vs load")
    ax.legend(fontsize=7, ncol=3)
    files["latency"] = _save(fig, run_dir / "latency_percentiles.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for s, x in zip(steps, xs, strict=True):
        h = s.get("histogram") or []
        if h:
            ax.step([b for b, _ in h], [c for _, c in h], where="pre", label=f"{key} {x:g}")
    ax.set(xlabel="latency (ms)", ylabel="requests", xscale="log", title="latency histogram per step")
    ax.legend(fontsize=7)
    files["histogram"] = _save(fig, run_dir / "latency_histograms.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = ["tab:red" if s["generator_bound"] else "tab:blue" for s in steps]
    ax.bar([str(int(x)) for x in xs], [s["rps"] for s in steps], color=colors)
    ax.set(xlabel=key, ylabel="req/s", title="throughput per step (red: generator-bound)")
    files["rps"] = _save(fig, run_dir / "rps.png")

    proxied = [(x, s["proxy"]) for s, x in zip(steps, xs, strict=True) if s.get("proxy")]
    if proxied:
        fig, ax = plt.subplots(figsize=(7, 4))
        px = [x for x, _ in proxied]
        ax.plot(px, [p["cpu_pct"] for _, p in proxied], marker="o", color="tab:orange", label="CPU %")
        ax.set(xlabel=key, ylabel="proxy CPU % (of one core)", title="proxy CPU / RSS per step (probe)")
        ax2 = ax.twinx()
        ax2.plot(px, [p["rss_kib_max"] / 1024 for _, p in proxied], marker="s", color="tab:green")
        ax2.set_ylabel("proxy RSS max (MiB)")
        files["proxy"] = _save(fig, run_dir / "proxy_cpu_rss.png")

    if any("backends" in s for s in steps):
        files["mean_by_backends"] = _mean_by_backends(plt, steps, key, run_dir)

    for i, f in enumerate(section.get("faults") or []):
        if f.get("last_success_before") is None:
            continue
        t0 = section["t0"]
        fig, ax = plt.subplots(figsize=(7, 3))
        a, b = f["last_success_before"] - t0, (f.get("first_success_after") or f["last_success_before"]) - t0
        ax.axvspan(a, b, color="tab:red", alpha=0.3, label=f"downtime {f['downtime_s']:.2f} s")
        ax.axvline(f["at"] - t0, color="k", ls="--", label="fault")
        ax.set(xlabel="s since the first step", yticks=[], title=f"fault: {f['name']}")
        ax.legend(fontsize=8)
        files[f"fault{i}"] = _save(fig, run_dir / f"fault_{i}.png")
    return files


def _mean_by_backends(plt: Any, steps: list[dict[str, Any]], key: str, run_dir: Path) -> str:
    """The write-up's plot: average response time against concurrency, one line per replica
    count (the mean of the step's exact histogram)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for reps in sorted({s["backends"] for s in steps if "backends" in s}):
        pts = sorted(
            (s.get(key) or s["step"], s["latency_ms"]["mean"]) for s in steps if s.get("backends") == reps
        )
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=f"{reps} replica(s)")
    ax.set(xlabel=key, ylabel="mean latency (ms)", title="average response time vs concurrency and replicas")
    ax.legend(fontsize=8)
    return _save(fig, run_dir / "mean_latency_backends.png")


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name
