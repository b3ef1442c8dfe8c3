"""PNG plots of an ingress-flood report section (matplotlib, headless).

    files = write_plots(section, Path("results/x"))   # {"latency": "latency_percentiles.png", ...}

latency percentiles vs concurrency (or rate) — the published benchmark's plot; latency
histogram per step; req/s per step (with generator-bound steps marked); the proxy's CPU % and
RSS over time; the fault window on the success/failure timeline when a fault ran.
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

    samples = section.get("proxy_samples") or []
    if samples:
        t0 = section["t0"]
        by_t: dict[float, list[float]] = {}
        for s in samples:
            row = by_t.setdefault(round(s["t"] - t0, 1), [0.0, 0.0])
            row[0] += s["cpu_pct"]
            row[1] += s["rss_kib"] / 1024
        ts = sorted(by_t)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(ts, [by_t[t][0] for t in ts], color="tab:orange", label="CPU %")
        ax.set(xlabel="s since load start", ylabel="proxy CPU % (of one core)", title="proxy CPU / RSS")
        ax2 = ax.twinx()
        ax2.plot(ts, [by_t[t][1] for t in ts], color="tab:green", label="RSS MiB")
        ax2.set_ylabel("RSS (MiB)")
        files["proxy"] = _save(fig, run_dir / "proxy_cpu_rss.png")

    for i, f in enumerate(section.get("faults") or []):
        if f.get("last_success_before") is None:
            continue
        t0 = section["t0"]
        fig, ax = plt.subplots(figsize=(7, 3))
        a, b = f["last_success_before"] - t0, (f.get("first_success_after") or f["last_success_before"]) - t0
        ax.axvspan(a, b, color="tab:red", alpha=0.3, label=f"downtime {f['downtime_s']:.2f} s")
        ax.axvline(f["at"] - t0, color="k", ls="--", label="fault")
        ax.set(xlabel="s since load start", yticks=[], title=f"fault: {f['name']}")
        ax.legend(fontsize=8)
        files[f"fault{i}"] = _save(fig, run_dir / f"fault_{i}.png")
    return files


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name
