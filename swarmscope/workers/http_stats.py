"""Per-step HTTP results with exact latency: one HdrHistogram per step, mergeable across workers.

    rec = StepRecorder(step_duration_s=30, t0=time.time())
    rec.record(intended_t, done_t, status=200, error=None)  # latency = done - intended
    blob = rec.encode()                    # dict of plain types: send it to the master
    merged = StepRecorder.merge([blob_a, blob_b])
    merged.summary()                       # [{"step": 0, "requests", "failures", "rps", "latency_ms", ...}]

Latency is recorded in microseconds in an HdrHistogram (1 µs … 60 s, 3 significant digits),
per step, where a request's step is the one its *intended* send time falls in. Merging adds
histograms (exact: the merged histogram equals one histogram of all samples), never averages
percentiles. Counts (requests, failures by status/error) are plain integers, added exactly.
The optional timeline (``keep_timeline=True``) keeps (done_t, ok) per request for fault
analysis (downtime = last success before → first success after).

``record_many(rows)`` takes a batch of the same tuples and counts them exactly as one
``record`` each would (the Locust path buffers its requests and flushes them in batches, see
workers/http_users.py): the latencies go into the histogram with numpy in one pass, the
outcomes through a Counter, so a request costs its generator a list append, not a Python
histogram update.

This module does not import Locust (so the controller and tests can use it without gevent).
"""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

LOW_US, HIGH_US, DIGITS = 1, 60_000_000, 3
# One request for record_many: (intended_t, done_t, status, error, step), as record's arguments.
Row = tuple[float, float, int | None, str | None, int | None]
PERCENTILES = (10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9)


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOW_US, HIGH_US, DIGITS)


def add_values(h: HdrHistogram, us: np.ndarray) -> None:
    """Record every value of ``us`` (int64, each within the histogram's range) into ``h``:
    the same counts, total, min and max as one ``h.record_value(v)`` per value.

    hdrh's own index arithmetic (``_counts_index_for``), vectorised, then one bincount added
    to its counts array in place; tests/test_http_batch.py holds it equal to record_value."""
    if us.size == 0:
        return
    # bit_length of each value | sub_bucket_mask: frexp's exponent, exact below 2**53
    bits = np.frexp((us | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
    bucket = bits - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub = us >> (bucket + h.unit_magnitude)
    idx = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + sub - h.sub_bucket_half_count
    add = np.bincount(idx)
    counts = np.ctypeslib.as_array(h.counts)
    counts[: add.size] += add.astype(counts.dtype)
    h.total_count += int(us.size)
    h.min_value = min(h.min_value, int(us.min()))
    h.max_value = max(h.max_value, int(us.max()))


def pct_key(p: float) -> str:
    return f"p{p:g}"


def latency_ms(h: HdrHistogram) -> dict[str, float]:
    """Percentiles 10 … 99.9 and max (ms) of a histogram; empty histogram → zeros."""
    if h.get_total_count() == 0:
        return {**{pct_key(p): 0.0 for p in PERCENTILES}, "max": 0.0, "min": 0.0, "mean": 0.0}
    out = {pct_key(p): h.get_value_at_percentile(p) / 1000.0 for p in PERCENTILES}
    out["max"] = h.get_max_value() / 1000.0
    out["min"] = h.get_min_value() / 1000.0
    out["mean"] = h.get_mean_value() / 1000.0
    return out


@dataclass
class Step:
    hist: HdrHistogram = field(default_factory=new_histogram)
    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    first_t: float = math.inf
    last_t: float = 0.0


class StepRecorder:
    """Counts and latency histograms per step, for one worker (or merged for many)."""

    def __init__(
        self, step_duration_s: float, t0: float | None = None, keep_timeline: bool = False, n_steps: int = 0
    ):
        self.step_duration_s = float(step_duration_s)
        self.n_steps = n_steps  # > 0: requests after the last step (stop overshoot) count in it
        self.t0 = time.time() if t0 is None else t0
        self.steps: dict[int, Step] = {}
        self.keep_timeline = keep_timeline
        self.timeline: list[tuple[float, bool]] = []
        self.cpu_s: dict[int, float] = {}  # generator CPU seconds used per step (this process)
        self.workers_cpu: list[dict[int, float]] | None = None  # per worker, after merge()
        # Steps that end on a count, not a clock (locust -f, boom's -n): the step in progress,
        # which the CPU meter charges; requests name their step themselves.
        self.current_step: int | None = None

    def step_of(self, t: float) -> int:
        if self.current_step is not None:
            return self.current_step
        i = max(0, int((t - self.t0) // self.step_duration_s))
        return min(i, self.n_steps - 1) if self.n_steps > 0 else i

    def record(
        self, intended_t: float, done_t: float, status: int | None, error: str | None, step: int | None = None
    ) -> None:
        """One request: ``status`` is the HTTP status (None when no response), ``error`` a reason.

        ``step`` overrides the step derived from ``intended_t`` (k6 tags samples with it)."""
        idx = self.step_of(intended_t) if step is None else step
        st = self.steps.get(idx)
        if st is None:
            st = self.steps[idx] = Step()
        st.requests += 1
        us = max(LOW_US, min(HIGH_US, round((done_t - intended_t) * 1e6)))
        st.hist.record_value(us)
        st.first_t = min(st.first_t, intended_t)
        st.last_t = max(st.last_t, done_t)
        key = str(status) if status else "none"
        st.statuses[key] = st.statuses.get(key, 0) + 1
        ok = _ok(status, error)
        if not ok:
            reason = error or f"HTTP {status}"
            st.failures[reason] = st.failures.get(reason, 0) + 1
        if self.keep_timeline:
            self.timeline.append((done_t, ok))

    def record_many(self, rows: list[Row]) -> None:
        """A batch of requests (``record``'s arguments as tuples), counted as ``record`` would."""
        if not rows:
            return
        cols = list(zip(*rows, strict=True))  # intended, done, statuses, errors, steps
        steps = set(cols[4])
        idx: int | None = None
        if steps == {None}:  # timed steps, from the intended times (step_of only grows with t)
            lo, hi = self.step_of(min(cols[0])), self.step_of(max(cols[0]))
            idx = lo if lo == hi else None
        elif len(steps) == 1:  # count steps name their step (one per batch but at its end)
            idx = next(iter(steps))
        if idx is not None:
            self._add(idx, *cols[:4])
        else:  # the batch straddles a step's end: grouped row by row
            by_step: dict[int, list[Row]] = {}
            for r in rows:
                by_step.setdefault(self.step_of(r[0]) if r[4] is None else r[4], []).append(r)
            for i, part in by_step.items():
                self._add(i, *list(zip(*part, strict=True))[:4])
        if self.keep_timeline:  # in the rows' order, as record appends it
            self.timeline.extend(zip(cols[1], map(_ok, cols[2], cols[3]), strict=True))

    def _add(self, idx: int, intended: Any, done: Any, statuses: Any, errors: Any) -> None:
        """One step's share of a batch, as columns (tuples of equal length)."""
        st = self.steps.get(idx)
        if st is None:
            st = self.steps[idx] = Step()
        st.requests += len(intended)
        t_in, t_done = np.array(intended), np.array(done)
        # the same float arithmetic as record (np.rint rounds half to even, as round() does)
        lat = np.rint((t_done - t_in) * 1e6)
        add_values(st.hist, np.clip(lat, LOW_US, HIGH_US).astype(np.int64))
        st.first_t = min(st.first_t, float(t_in.min()))
        st.last_t = max(st.last_t, float(t_done.max()))
        if errors.count(None) == len(errors):  # answers only (the usual batch): count the statuses
            outcomes: Counter[tuple[int | None, str | None]] = Counter()
            for status, n in Counter(statuses).items():
                outcomes[status, None] = n
        else:  # a transport error in the batch: count (status, error) pairs
            outcomes = Counter(zip(statuses, errors, strict=True))
        for (status, error), n in outcomes.items():
            key = str(status) if status else "none"
            st.statuses[key] = st.statuses.get(key, 0) + n
            if not _ok(status, error):
                reason = error or f"HTTP {status}"
                st.failures[reason] = st.failures.get(reason, 0) + n

    # -- transport ------------------------------------------------------------------------------
    def encode(self) -> dict[str, Any]:
        return {
            "t0": self.t0,
            "step_duration_s": self.step_duration_s,
            "n_steps": self.n_steps,
            "steps": {
                str(i): {
                    "hist": s.hist.encode().decode("ascii"),
                    "requests": s.requests,
                    "failures": s.failures,
                    "statuses": s.statuses,
                    "first_t": s.first_t if math.isfinite(s.first_t) else None,
                    "last_t": s.last_t,
                }
                for i, s in self.steps.items()
            },
            "timeline": self.timeline,
            "cpu_s": {str(k): v for k, v in self.cpu_s.items()},
        }

    @classmethod
    def merge(cls, blobs: Iterable[dict[str, Any]]) -> StepRecorder:
        blobs = list(blobs)
        if not blobs:
            raise ValueError("nothing to merge")
        out = cls(
            blobs[0]["step_duration_s"],
            min(b["t0"] for b in blobs),
            keep_timeline=True,
            n_steps=max(int(b.get("n_steps", 0)) for b in blobs),
        )
        out.workers_cpu = []
        for b in blobs:
            for k, s in b["steps"].items():
                st = out.steps.setdefault(int(k), Step())
                st.hist.add(HdrHistogram.decode(s["hist"]))
                st.requests += s["requests"]
                for dst, src in ((st.failures, s["failures"]), (st.statuses, s["statuses"])):
                    for r, n in src.items():
                        dst[r] = dst.get(r, 0) + n
                if s["first_t"] is not None:
                    st.first_t = min(st.first_t, s["first_t"])
                st.last_t = max(st.last_t, s["last_t"])
            out.timeline.extend((float(t), bool(ok)) for t, ok in b.get("timeline", []))
            out.workers_cpu.append({int(k): v for k, v in b.get("cpu_s", {}).items()})
        out.timeline.sort()
        return out

    # -- the report -----------------------------------------------------------------------------
    def summary(self, cpu_bound_pct: float = 90.0) -> list[dict[str, Any]]:
        rows = []
        workers_cpu = self.workers_cpu if self.workers_cpu is not None else [self.cpu_s]
        for i in sorted(self.steps):
            s = self.steps[i]
            dur = self.step_duration_s
            if i == max(self.steps):  # the last step also holds the stop overshoot
                dur = max(dur, s.last_t - (self.t0 + i * dur))
            cpu = [100.0 * w.get(i, 0.0) / dur for w in workers_cpu]
            rows.append(
                {
                    "step": i,
                    "requests": s.requests,
                    "failures": sum(s.failures.values()),
                    "failures_by_reason": dict(s.failures),
                    "statuses": dict(s.statuses),
                    "rps": s.requests / dur,
                    "latency_ms": latency_ms(s.hist),
                    "histogram": histogram_buckets(s.hist),
                    "generator_cpu_pct": cpu,
                    "generator_bound": any(c >= cpu_bound_pct for c in cpu),
                }
            )
        return rows

    def total(self) -> HdrHistogram:
        h = new_histogram()
        for s in self.steps.values():
            h.add(s.hist)
        return h


def _ok(status: int | None, error: str | None) -> bool:
    return error is None and status is not None and 200 <= status < 400


def histogram_buckets(h: HdrHistogram, buckets: int = 40) -> list[tuple[float, int]]:
    """Log-spaced (upper bound ms, count) buckets for plotting and the report."""
    if h.get_total_count() == 0:
        return []
    lo, hi = max(1, h.get_min_value()), max(2, h.get_max_value())
    edges = [lo * (hi / lo) ** (k / buckets) for k in range(1, buckets + 1)]
    counts = [0] * buckets
    k = 0
    for item in h.get_recorded_iterator():
        v = item.value_iterated_to
        while k < buckets - 1 and v > edges[k]:
            k += 1
        counts[k] += item.count_added_in_this_iter_step
    return [(e / 1000.0, c) for e, c in zip(edges, counts, strict=True)]


def downtime(timeline: list[tuple[float, bool]], fault_t: float, bin_s: float = 1.0) -> dict[str, Any]:
    """Client-observed outage around a fault at ``fault_t`` (wall clock).

    The outage is the longest stretch without a success that ends after the fault and holds
    failures: from the last success before it to the first success after it (the end of the
    load when none came back); failed = the failures inside. Not "from the first failure": a
    load generator's timestamps can be a few ms out of order (k6 stamps a response when its VU
    gets to it), and one success stamped just after the first refused connection would make a
    1 s outage look like 4 ms. recovery = time from the fault until a 1-s bin's successes are
    back to >= 80 % of the median pre-fault bin (None: not back before the load ended).
    """
    tl = sorted(timeline)
    fails = [t for t, ok in tl if not ok and t >= fault_t]
    if not fails:
        return {"fault_t": fault_t, "downtime_s": 0.0, "failed_requests": 0, "recovery_s": 0.0}
    oks = [t for t, ok in tl if ok]
    edges = [max((t for t in oks if t <= fails[0]), default=fault_t), *(t for t in oks if t > fails[0])]
    best: tuple[float, float, int] | None = None  # (start, end, failures inside)
    for i, start in enumerate(edges):
        end = edges[i + 1] if i + 1 < len(edges) else tl[-1][0]
        inside = bisect.bisect_right(fails, end) - bisect.bisect_left(fails, start)
        if inside and (best is None or end - start > best[1] - best[0]):
            best = (start, end, inside)
    assert best is not None  # fails[0] lies in the first stretch
    last_ok_before, end, failed = best
    first_ok_after = end if any(t == end for t in oks) and end > last_ok_before else None
    # Recovery: compare success rate per bin with the pre-fault level.
    pre = [t for t, ok in tl if ok and t < fault_t]
    recovery = None
    if pre and first_ok_after is not None:
        start = pre[0]
        nb = max(1, int((fault_t - start) // bin_s))
        counts = [0] * nb
        for t in pre:
            k = int((t - start) // bin_s)
            if k < nb:
                counts[k] += 1
        base = sorted(counts)[len(counts) // 2]
        t = first_ok_after
        oks = [u for u, ok in tl if ok and u >= first_ok_after]
        j = 0
        while t + bin_s <= tl[-1][0] + 1e-9:
            while j < len(oks) and oks[j] < t:
                j += 1
            k = j
            while k < len(oks) and oks[k] < t + bin_s:
                k += 1
            if k - j >= 0.8 * base:
                recovery = t - fault_t
                break
            t += bin_s / 4
    return {
        "fault_t": fault_t,
        "last_success_before": last_ok_before,
        "first_success_after": first_ok_after,
        "downtime_s": (end - last_ok_before),
        "failed_requests": failed,
        "recovery_s": recovery,
    }
