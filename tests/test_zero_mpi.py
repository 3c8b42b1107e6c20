"""ZeRO on MPI ranks (fpsim.distributed.mpi, ``fpsim zero``) against the simulation and the paper.

References: the in-process simulation (whose arithmetic tests/test_zero_sim.py checks against
an fp32-master Adam on one process and exact Fractions) for the bits, the ZeRO paper's
model-state formulas (fpsim.memory, itself checked against the paper's Table 1) for the bytes
each rank holds, and the ring volumes written out from the chunk schedule
(``(N - 1) / N * S`` per reduce-scatter or all-gather) for the bytes each rank sends.

The MPI tests start ``mpiexec`` (the mpich wheel's, from the extra ``fpsim[mpi]``); they skip,
saying why, only where mpi4py or mpiexec is missing. Run as a script under mpiexec, this file
is the worker of :func:`test_mpi_matches_sim_bit_for_bit`: every configuration in one launch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from fpsim import memory
from fpsim.cli import main
from fpsim.cli import zero as zcli

STEPS = 2
CONFIGS = [(0, False), (1, False), (2, False), (3, False), (2, True), (3, True)]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # N ranks share 2 cores in CI


def _args(ranks: int, stage: int, offload: bool, steps: int = STEPS, batch: int | None = None,
          *extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    zcli.configure_parser(p)
    argv = ["--ranks", str(ranks), "--stage", str(stage), "--steps", str(steps), "--batch",
            str(batch or 4 * ranks), *(["--offload"] if offload else []), *extra]
    return p.parse_args(argv)


def _mpiexec() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return None
    try:  # mpi4py finds an MPI library (loaded in a child: this process stays MPI-free)
        subprocess.run([sys.executable, "-c", "from mpi4py import MPI"], check=True,
                       timeout=120, capture_output=True, stdin=subprocess.DEVNULL)
    except (subprocess.SubprocessError, OSError):
        return None
    try:
        return zcli.find_mpiexec()
    except RuntimeError:
        return None


MPIEXEC = _mpiexec()
needs_mpi = pytest.mark.skipif(MPIEXEC is None, reason="the extra fpsim[mpi] (mpi4py and an "
                               "MPI with mpiexec) is not installed")


def check_against_formulas(res: dict) -> None:
    """Per-rank model-state bytes = the ZeRO formula on the (padded) flat buffer; bytes sent
    and received = the ring volumes of the stage's collectives, every step."""
    n, stage, psi = res["ranks"], res["stage"], res["padded_params"]
    assert psi % n == 0 and psi - res["num_params"] < n
    want = memory.zero_model_state_bytes(psi, stage, n, k=12)
    assert res["model_state_bytes_per_rank"] == [want] * n
    for d in res["model_state_per_rank"]:
        assert d["parameters"] == (2 * psi // n if stage == 3 else 2 * psi)
        assert d["gradients"] == (2 * psi // n if stage >= 2 else 2 * psi)
        assert d["optimizer_states"] == (12 * psi if stage == 0 else 12 * psi // n)
        if res["offload"]:  # the GPU keeps the fp16 parameters only
            assert d["host"] == 14 * psi // n and d["device"] == d["parameters"]
    # stages 0-2: reduce-scatter + all-gather (or one all-reduce), 2 (N-1)/N Psi elements;
    # stage 3: two all-gathers (forward, backward) and one reduce-scatter, 3 (N-1)/N Psi
    per_step = (3 if stage == 3 else 2) * (n - 1) * (psi // n) * 2  # fp16: 2 bytes
    assert res["bytes_sent_per_rank"] == [res["steps"] * per_step] * n
    assert res["bytes_received_per_rank"] == [res["steps"] * per_step] * n
    assert per_step == 2 * memory.zero_communication_volume(psi, stage) * (n - 1) / n
    if res["offload"]:
        moved = res["steps"] * 2 * psi // n  # fp16 gradient partition down, parameters up
        assert res["offload_transfers_per_rank"] == [{"d2h": moved, "h2d": moved}] * n


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_sim_bytes_and_traffic_equal_the_formulas(n):
    for stage, offload in CONFIGS:
        res = zcli.run_zero(_args(n, stage, offload, steps=1))
        assert res["engine"] == "sim" and res["pids"] == [os.getpid()] * n
        check_against_formulas(res)


def _sim_results(n: int) -> list[dict]:
    return [zcli.run_zero(_args(n, s, o)) for s, o in CONFIGS]


def _run(cmd: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=ENV, stdin=subprocess.DEVNULL)


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_mpi_matches_sim_bit_for_bit(n):
    proc = _run([MPIEXEC, "-n", str(n), sys.executable, os.path.abspath(__file__), str(n)])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    # the collectives alone, fp16 / bf16 / fp32, against the simulated ones: values, counters
    assert report["collective_mismatches"] == []
    got = report["runs"]
    assert len(got) == len(CONFIGS)
    for res, want in zip(got, _sim_results(n), strict=True):
        assert res["engine"] == "mpi" and want["engine"] == "sim"
        assert len(set(res["pids"])) == n and os.getpid() not in res["pids"]
        for key in ("params_sha256", "losses", "model_state_bytes_per_rank",
                    "model_state_per_rank", "bytes_sent_per_rank", "bytes_received_per_rank",
                    "offload_transfers_per_rank", "skipped_steps"):
            assert res[key] == want[key], (res["stage"], res["offload"], key)
        check_against_formulas(res)
    # the parameters moved: the runs are not a trivially equal no-op
    assert len({r["params_sha256"] for r in got}) == 1  # every stage: the same training
    assert got[0]["losses"][0] != got[0]["losses"][1]


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@needs_mpi
def test_cli_contract_launches_mpiexec(capsys):
    cmd = ["zero", "--ranks", "2", "--stage", "3", "--steps", "2", "--offload", "--json",
           "--batch", "8"]
    proc = _run([sys.executable, "-m", "fpsim.cli", *cmd, "--engine", "mpi"])
    assert proc.returncode == 0, proc.stderr
    res = _last_json(proc.stdout)
    assert main([*cmd, "--engine", "sim"]) == 0
    sim = _last_json(capsys.readouterr().out)
    for key in ("engine", "ranks", "stage", "pids", "params_sha256",
                "model_state_bytes_per_rank", "bytes_sent_per_rank"):
        assert key in res and key in sim
    assert (res["engine"], res["ranks"], res["stage"]) == ("mpi", 2, 3)
    assert len(set(res["pids"])) == 2
    assert res["params_sha256"] == sim["params_sha256"]
    assert res["model_state_bytes_per_rank"] == sim["model_state_bytes_per_rank"]
    assert res["bytes_sent_per_rank"] == sim["bytes_sent_per_rank"]
    check_against_formulas(res)


@needs_mpi
def test_a_rank_that_raises_is_named_and_the_job_ends():
    # started by the user's own mpiexec: the command sees its launcher and runs as a rank
    proc = _run([MPIEXEC, "-n", "2", sys.executable, "-m", "fpsim.cli", "zero", "--engine",
                 "mpi", "--ranks", "2", "--stage", "2", "--steps", "2", "--batch", "8",
                 "--json", "--fail-rank", "1", "--fail-step", "2", "--timeout", "60"],
                timeout=120)
    assert proc.returncode != 0
    assert "MPI_Abort" in proc.stderr or "Abort" in proc.stderr
    # the abort ended the job: rank 0 did not wait out its --timeout and report a CommTimeout
    assert "rank 0 of 2" not in proc.stderr
    assert "the MPI job failed" not in proc.stderr  # no nested launch: the ranks ran directly
    assert proc.stderr.count("rank 1 of 2") == 1
    assert "rank 1 of 2" in proc.stderr and "failed at step 2" in proc.stderr
    assert "RuntimeError" in proc.stderr and "injected fault" in proc.stderr
    assert "{" not in proc.stdout  # no result


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_a_rank_that_dies_or_hangs_does_not_hang_the_others(mode):
    # rank 1 exits without a word (as a killed process does), or stops answering: the others'
    # deadlines name it, and MPI_Abort ends the job. The deadline leaves room for a rank that is
    # slow to start on a loaded machine (at 3 s, a slow rank 0 got rank 1 named as the culprit).
    proc = _run([sys.executable, "-m", "fpsim.cli", "zero", "--engine", "mpi", "--ranks", "2",
                 "--stage", "1", "--steps", "1", "--batch", "8", "--fail-rank", "1",
                 "--fail-mode", mode, "--timeout", "10"], timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "rank 0 of 2" in proc.stderr and "CommTimeout" in proc.stderr
    assert "for rank(s) [1]" in proc.stderr


def test_sim_fault_injection_names_the_rank(capsys):
    assert main(["zero", "--engine", "sim", "--ranks", "3", "--stage", "2", "--steps", "1",
                 "--batch", "6", "--fail-rank", "2"]) == 1
    assert "rank 2: injected fault" in capsys.readouterr().err
    assert main(["zero", "--engine", "sim", "--ranks", "3", "--stage", "2", "--batch", "6",
                 "--fail-rank", "2", "--fail-mode", "exit"]) == 2
    assert "needs --engine mpi" in capsys.readouterr().err


def test_missing_extra_is_named(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mpi4py" else real(name, *a))
    monkeypatch.setattr(zcli, "launched_by_mpi", lambda: False)
    assert main(["zero", "--engine", "mpi", "--ranks", "2", "--stage", "1"]) == 1
    err = capsys.readouterr().err
    assert "mpi4py" in err and "fpsim[mpi]" in err
    from fpsim.distributed import mpi

    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)  # "import" fails as without mpi4py
    with pytest.raises(mpi.MissingMPIError, match=r"fpsim\[mpi\]"):
        mpi.import_mpi()
    monkeypatch.setattr(importlib.util, "find_spec", real)
    if real("mpi4py") is not None:
        assert main(["zero", "--engine", "mpi", "--ranks", "2", "--stage", "1", "--mpiexec",
                     "/nonexistent/mpiexec"]) == 1
        assert "not an executable" in capsys.readouterr().err
    monkeypatch.setattr(zcli.shutil, "which", lambda *a, **k: None)
    with pytest.raises(RuntimeError, match=r"fpsim\[mpi\]"):
        zcli.find_mpiexec()


@pytest.mark.parametrize("argv,message", [
    (["--ranks", "0", "--stage", "1"], "--ranks must be >= 1"),
    (["--ranks", "-2", "--stage", "1"], "--ranks must be >= 1"),
    (["--ranks", "3", "--stage", "1", "--batch", "64"], "does not divide the global batch"),
    (["--ranks", "2", "--stage", "1", "--offload"], "--stage 2 or 3"),
    (["--ranks", "2", "--stage", "0", "--offload"], "--stage 2 or 3"),
    (["--ranks", "2", "--stage", "1", "--steps", "0"], "--steps must be >= 1"),
    (["--ranks", "2", "--stage", "1", "--fail-rank", "2"], "--fail-rank must be a rank"),
])
def test_bad_input(argv, message, capsys):
    for engine in ("sim", "mpi"):  # refused before any process starts
        assert main(["zero", "--engine", engine, *argv]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("stage", ["4", "-1"])
def test_bad_stage(stage, capsys):
    with pytest.raises(SystemExit) as e:
        main(["zero", "--ranks", "2", "--stage", stage])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def _collective_mismatches(comm) -> list[str]:
    """Every MPI collective against the simulated one (outputs' bytes, per-rank counters)."""
    import numpy as np

    from fpsim.distributed import Communicator

    n, r = comm.world_size, comm.rank
    bad = []
    for dtype in (np.float16, "bfloat16", np.float32):
        dt = np.dtype(dtype) if dtype != "bfloat16" else np.dtype(__import__("ml_dtypes")
                                                                  .bfloat16)
        rng = np.random.default_rng(7)  # the same draws on every rank: each takes its own
        size = 6 * n
        arrays = [(rng.normal(size=size) * 2.0 ** rng.integers(-30, 12, size=size)).astype(dt)
                  for _ in range(n)]
        sim = Communicator(n)
        comm.reset()
        calls = [("all_reduce", lambda c, a: c.all_reduce(a, "sum")),
                 ("all_reduce mean", lambda c, a: c.all_reduce(a, "mean")),
                 ("reduce_scatter", lambda c, a: c.reduce_scatter(a, "mean")),
                 ("all_gather", lambda c, a: c.all_gather([x[:5] for x in a])),
                 ("broadcast", lambda c, a: c.broadcast(a, src=n - 1))]
        for name, call in calls:
            want = call(sim, arrays)[r]
            got = call(comm, [arrays[r]])[0]
            if got.dtype != dt or got.tobytes() != want.tobytes():
                bad.append(f"rank {r} {dt.name} {name}: values differ")
        s, t = comm.stats[0], sim.stats[r]
        if (s.sent_bytes, s.recv_bytes, s.calls, s.by_collective) != \
                (t.sent_bytes, t.recv_bytes, t.calls, t.by_collective):
            bad.append(f"rank {r} {dt.name}: counters {s} != {t}")
    return bad


def _worker(n: int) -> None:
    """Under mpiexec -n n: the collectives, then every configuration on MPI ranks; rank 0
    prints the results."""
    from fpsim.distributed.mpi import MPICommunicator

    comm = MPICommunicator(timeout=120)
    assert comm.world_size == n
    bad = sum(comm.gather_report([_collective_mismatches(comm)]), [])
    out = [zcli.run_zero(_args(n, s, o), comm) for s, o in CONFIGS]
    if comm.rank == 0:
        print(json.dumps({"collective_mismatches": bad, "runs": out}))


if __name__ == "__main__":
    _worker(int(sys.argv[1]))


# -- the launcher's result: every rank reported, or a clear error (issue 32 item 7) -----------

needs_mpi4py = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                  reason="--engine mpi refuses to start without mpi4py")


def _fake_mpiexec(tmp_path, body: str) -> str:
    path = tmp_path / "fake-mpiexec"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@needs_mpi4py
@pytest.mark.parametrize("body,words", [
    ("exit 0", "it printed nothing"),  # /bin/true: ran nothing, said nothing
    ("echo hello; exit 0", "its last line was 'hello'"),
    ('echo \'{"ranks": 1, "pids": [1]}\'; exit 0', "no result of the 2 ranks"),
    ('echo \'{"ranks": 2, "pids": [1]}\'; exit 0', "no result of the 2 ranks"),
    ("kill -9 $$", "mpiexec was killed by signal 9 (SIGKILL)"),
    ("echo 'EXIT STRING: Killed (signal 9)'; exit 9", "mpiexec exit code 9"),
])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_launcher_that_ran_no_rank_is_an_error(tmp_path, capsys, body, words, json_flag):
    fake = _fake_mpiexec(tmp_path, body)
    for mpiexec in ([fake, "/bin/true"] if body == "exit 0" else [fake]):
        rc = main(["zero", "--engine", "mpi", "--ranks", "2", "--stage", "1", "--mpiexec",
                   mpiexec, *json_flag])
        out, err = capsys.readouterr()
        assert rc == 1 and out == "" and words in err, err
        assert "Traceback" not in err
    if "EXIT STRING" in body:  # what the launcher said is kept (Hydra says it on stdout)
        assert "Killed (signal 9)" in err


@needs_mpi
def test_a_rank_killed_by_a_signal_is_named_with_the_signal():
    proc = _run([sys.executable, "-m", "fpsim.cli", "zero", "--engine", "mpi", "--ranks", "2",
                 "--stage", "1", "--steps", "2", "--batch", "8", "--fail-rank", "1",
                 "--fail-mode", "kill", "--timeout", "60", "--json"], timeout=200)
    assert proc.returncode == 1, proc.stderr
    assert "rank 1 of 2 (pid " in proc.stderr
    assert "failed: killed by signal 9 (SIGKILL)" in proc.stderr
    assert "rank 0 of 2" not in proc.stderr  # the launcher's ending of rank 0 is not a failure
    assert "{" not in proc.stdout


@needs_mpi
def test_launched_ranks_leave_no_process_behind():
    proc = _run([sys.executable, "-m", "fpsim.cli", "zero", "--engine", "mpi", "--ranks", "2",
                 "--stage", "1", "--steps", "1", "--batch", "8", "--json"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for pid in _last_json(proc.stdout)["pids"]:  # the ranks ended with the job
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
