"""The trainer's CPU time by phase (RunResult.cpu_time_s): every phase named, non-negative,
summing to the CPU time the run took in this thread (time.thread_time, measured around it)."""

from __future__ import annotations

import time

from fpsim.training import train
from fpsim.training.trainer import PHASES


def test_phases_add_up_to_the_runs_cpu_time():
    t0 = time.thread_time()
    r = train(precision="mixed-fp16", steps=6, sizes=(64, 16, 10), eval_every=3,
              measure_every=2)
    spent = time.thread_time() - t0
    assert tuple(r.cpu_time_s) == PHASES
    assert all(v >= 0 for v in r.cpu_time_s.values())
    total = sum(r.cpu_time_s.values())
    assert 0 < total <= spent + 1e-3
    assert total > 0.5 * spent  # the phases cover the run, not only a part of it
    assert r.cpu_time_s["instrumentation"] > 0 and r.cpu_time_s["evaluation"] > 0
    assert set(r.summary()["cpu_time_s"]) == set(PHASES)
    quiet = train(precision="fp32", steps=3, sizes=(64, 16, 10), instrument=False)
    assert quiet.cpu_time_s["instrumentation"] == 0.0
