"""The Locust path's batched recording counts exactly what one record() per request counts.

The HTTP flood's users append each answered request to a buffer and flush it in batches
(workers/http_users.py, WindowLoad); StepRecorder.record_many and http_stats.add_values must
give the same histograms (bucket by bucket), counts, statuses, failures, first/last times and
timeline as StepRecorder.record, step boundaries and count steps included.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from swarmscope.workers.http_stats import HIGH_US, LOW_US, StepRecorder, add_values, new_histogram


def _values(rng: random.Random, n: int) -> list[int]:
    # every bucket edge of the 1 µs … 60 s, 3-digit histogram, and random values in each range
    edges = [LOW_US, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, 4097, 65535, 65536, HIGH_US - 1, HIGH_US]
    spread = [rng.randint(LOW_US, 10 ** rng.randint(1, 7)) for _ in range(n)]
    return [*edges, *spread, *(min(HIGH_US, v * 3) for v in spread[:50])]


def test_add_values_equals_record_value_bucket_by_bucket() -> None:
    rng = random.Random(7)
    for n in (1, 10, 5000):
        vals = _values(rng, n)
        one, batch = new_histogram(), new_histogram()
        for v in vals:
            one.record_value(v)
        add_values(batch, np.array(vals, dtype=np.int64))
        assert list(batch.counts) == list(one.counts)
        assert batch.get_total_count() == one.get_total_count() == len(vals)
        assert batch.get_min_value() == one.get_min_value()
        assert batch.get_max_value() == one.get_max_value()
        assert batch.get_value_at_percentile(99.9) == one.get_value_at_percentile(99.9)
        assert batch.encode() == one.encode()
    empty = new_histogram()
    add_values(empty, np.array([], dtype=np.int64))
    assert empty.get_total_count() == 0


def _rows(rng: random.Random, t0: float, n: int, span_s: float, steps: list[int | None]) -> list[tuple]:
    outcomes = [
        *[(200, None)] * 3,
        (503, None),
        (302, None),
        (None, "ConnectionRefusedError"),
        (404, None),
        (200, "ResponseTooLarge"),
        (0, None),
    ]
    rows = []
    for _ in range(n):
        t = t0 + rng.uniform(0.0, span_s)
        status, err = rng.choice(outcomes)
        # latencies from 0 (clipped to 1 µs) up past the 60 s ceiling (clipped to it)
        lat = rng.choice([0.0, 5e-7, 1.5e-6, rng.uniform(0, 0.05), rng.uniform(0, 2), 61.0])
        rows.append((t, t + lat, status or None, err, rng.choice(steps)))
    return rows


def _pair(n_steps: int, keep: bool, t0: float) -> tuple[StepRecorder, StepRecorder]:
    return (
        StepRecorder(1.0, t0, keep_timeline=keep, n_steps=n_steps),
        StepRecorder(1.0, t0, keep_timeline=keep, n_steps=n_steps),
    )


def _same(one: StepRecorder, many: StepRecorder) -> None:
    a, b = one.encode(), many.encode()
    assert a == b
    assert sorted(one.steps) == sorted(many.steps)
    for i, s in one.steps.items():
        assert list(s.hist.counts) == list(many.steps[i].hist.counts)


def test_record_many_equals_record_across_steps_failures_and_timeline() -> None:
    rng = random.Random(11)
    t0 = 1_700_000_000.0
    for keep in (False, True):
        # timed steps: batches inside one step, straddling steps, past the last step (overshoot)
        one, many = _pair(3, keep, t0)
        for span_start, span in ((0.1, 0.5), (0.7, 0.6), (1.2, 2.5), (2.9, 1.0)):
            rows = _rows(rng, t0 + span_start, 700, span, [None])
            for r in rows:
                one.record(*r[:4], step=r[4])
            many.record_many(rows)
        _same(one, many)
        # count steps: rows name their step, one step per batch or mixed with timed ones
        one, many = _pair(0, keep, t0)
        for steps in ([0], [1, 2], [None, 4]):
            rows = _rows(rng, t0, 500, 3.0, steps)
            for r in rows:
                one.record(*r[:4], step=r[4])
            many.record_many(rows)
        many.record_many([])
        _same(one, many)
        # batches with no transport error (counted by status alone): 5xx, 3xx and no status too
        one, many = _pair(0, keep, t0)
        sent: list[tuple] = []
        for status in (200, 503, None):
            rows = [(t, d, s, None, 0) for t, d, s, _e, _s in _rows(rng, t0, 400, 1.0, [0])]
            rows += [(t0 + 0.5, t0 + 0.6, status, None, 0)] * 9
            for r in rows:
                one.record(*r[:4], step=r[4])
            many.record_many(rows)
            sent += rows
        _same(one, many)
        assert many.steps[0].statuses["503"] == sum(r[2] == 503 for r in sent)
        assert many.steps[0].failures["HTTP 503"] == sum(r[2] == 503 for r in sent)
        assert many.steps[0].statuses["none"] == sum(r[2] is None for r in sent)
    # a step in progress set by a count run (current_step) is where unnamed rows go
    one, many = _pair(0, False, t0)
    one.current_step = many.current_step = 5
    rows = _rows(rng, t0, 300, 9.0, [None])
    for r in rows:
        one.record(*r[:4])
    many.record_many(rows)
    assert list(many.steps) == [5]
    _same(one, many)


@pytest.mark.slow
def test_window_load_buffers_and_counts_a_count_step_exactly() -> None:
    """WindowLoad in a real (gevent-patched) process: the buffer flushes at FLUSH_AT and at
    stop, recorded() counts buffered requests, a count step is done at exactly its share."""
    code = textwrap.dedent(
        """
        import time
        from types import SimpleNamespace as NS
        from swarmscope.workers import http_users
        from swarmscope.workers.http_stats import StepRecorder

        rec = StepRecorder(30.0, time.time())
        load = http_users.WindowLoad(rec, "http://127.0.0.1:1", "/", "closed")
        done = []
        load.begin_step(3, http_users.FLUSH_AT + 5, done.append)
        ok, bad = NS(status_code=200, error=None), NS(status_code=0, error=ConnectionResetError())
        for i in range(http_users.FLUSH_AT - 1):
            load.record(time.time(), ok, 3)
        assert rec.steps == {} and load.recorded() == http_users.FLUSH_AT - 1, load.recorded()
        load.record(time.time(), bad, 3)
        assert rec.steps[3].requests == http_users.FLUSH_AT and load._buf == []
        for i in range(4):
            load.record(time.time(), ok, 3)
        assert done == [] and load.recorded() == http_users.FLUSH_AT + 4
        load.record(time.time(), ok, 3)
        assert done == [3] and rec.steps[3].requests == http_users.FLUSH_AT + 5
        load.record(time.time(), ok, 3)  # a late answer: counted, the step is not done twice
        assert done == [3] and load.recorded() == http_users.FLUSH_AT + 6
        load.stop()
        assert rec.steps[3].requests == http_users.FLUSH_AT + 6 and load._buf == []
        assert rec.steps[3].failures == {"ConnectionResetError": 1}
        assert rec.steps[3].statuses == {"200": http_users.FLUSH_AT + 5, "none": 1}
        print("ok")
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().endswith("ok")
