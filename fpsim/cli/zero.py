"""``fpsim zero``: ZeRO stages 0-3 (and offload) training the demo model on N ranks, simulated
in one process (``--engine sim``) or as N MPI processes (``--engine mpi``), with the same
:class:`~fpsim.distributed.zero.ZeroEngine` driven by either communicator backend.

The contract (checks outside this repository use it)::

    fpsim zero --engine {mpi,sim} --ranks N --stage S --steps K [--offload] --json

runs K steps of the demo model (:class:`fpsim.training.MLP` as ``fpsim demo`` builds it, from
:func:`fpsim.training.experiment.demo_config`; mixed-precision Adam, fp16 parameters) on the digits,
global batch ``--batch`` split evenly across the ranks (step k takes the next ``--batch``
training samples, wrapping around), and prints as its last line one JSON object with at least
``engine``, ``ranks``, ``stage``, ``pids`` (each rank's OS process id), ``params_sha256``
(SHA-256 of the final fp16 parameters' bytes in ``model.parameters()`` order, without ZeRO's
padding), ``model_state_bytes_per_rank`` (bytes of fp16 parameters, gradients and fp32
optimizer states each rank holds after the last step) and ``bytes_sent_per_rank`` (the bytes
each rank sent, counted by the engine: for MPI, the payloads it handed to MPI).

``--engine mpi`` starts ``mpiexec -n N`` itself (``--mpiexec``, else the one next to the Python
interpreter, else the first on PATH) and runs this same command in each process. Under your own
launcher (a hostfile across machines, a batch system) start the same command directly; it
recognises MPICH's, Open MPI's and PMIx's launchers, or say so with ``--no-launch``
(with MPICH's Hydra add ``-disable-auto-cleanup`` so that a rank that dies without a word is
named by the others' deadlines; without it Hydra ends the job at once)::

    mpiexec -n 8 -f hosts -disable-auto-cleanup fpsim zero --engine mpi --ranks 8 --stage 3 \
        --steps 10 --json

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (none), :func:`configure_parser`
and :func:`run_cli`, and the launch and the ranks' work around them. It is in the command-line
layer (it was ``fpsim.distributed.cli``, then ``fpsim.cli_zero``) because it imports the demo
model from :mod:`fpsim.training` when a command runs, and :mod:`fpsim.distributed` sits below
the training layer.

A rank that fails prints ``fpsim zero: rank R of N (pid P on HOST) failed at step K: why`` and
calls ``MPI_Abort``, which ends the job; a rank that waits longer than ``--timeout`` seconds
for a message fails the same way, naming the ranks it waited for. Under fpsim's own launch,
each rank runs under a guard process that names the rank and the signal when one kills it
(``fpsim zero: rank R of N (pid P on HOST) failed: killed by signal 9 (SIGKILL)``), and the
command succeeds only when the launcher exits 0 and rank 0's result covers every rank: a
``--mpiexec`` that runs nothing (``/bin/true``) is an error, not a silent success.

>>> import argparse
>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> p.parse_args(["--engine", "sim", "--ranks", "2", "--stage", "3", "--steps", "1"]).stage
3
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np

from ..distributed.collectives import Communicator, ring_volume
from ..distributed.zero import ZERO_STAGES, ZeroEngine
from .common import Output

__all__ = ["HELP", "OUTPUTS", "ENGINES", "configure_parser", "run_cli", "run_zero",
           "demo_model", "validate_args", "launched_by_mpi", "find_mpiexec"]

HELP = "ZeRO stages 0-3 on N ranks: simulated, or MPI processes (fpsim[mpi])"
OUTPUTS: tuple[Output, ...] = ()

ENGINES = ("sim", "mpi")
FAULT_MODES = ("raise", "hang", "exit", "kill")
ABORT_GRACE_S = 0.5  # seconds a failing rank waits between its report and MPI_Abort
_FAIL_LINE = re.compile(r"^fpsim zero: rank \d+ of \d+ .*failed.*$", re.M)
# each launcher's name for "this process's rank" (MPICH / Hydra, Open MPI, PMIx)
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
PR_SET_PDEATHSIG = 1  # Linux prctl(2): the signal a process gets when its parent dies
# the launchers' own environment: MPICH / Intel MPI (Hydra, PMI), Open MPI, PMIx (srun, prte)
_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


class RankFailure(RuntimeError):
    """A rank raised; the message names the rank, its process and the step."""


def configure_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim zero``."""
    p.add_argument("--engine", choices=ENGINES, default="sim",
                   help="sim: the N ranks simulated one after another in this process; mpi: N "
                        "MPI processes (needs the extra fpsim[mpi]); default sim")
    p.add_argument("--ranks", type=int, required=True, help="data-parallel ranks N (>= 1)")
    p.add_argument("--stage", type=int, required=True, choices=ZERO_STAGES,
                   help="ZeRO stage: 0 (plain data parallel), 1 (P_os), 2 (P_os+g), 3 (P_os+g+p)")
    p.add_argument("--steps", type=int, default=3, help="training steps K (default 3)")
    p.add_argument("--offload", action="store_true",
                   help="ZeRO-Offload: gradient and optimizer partitions on the host (stage 2 "
                        "or 3)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON object on the last line")
    p.add_argument("--batch", type=int, default=64,
                   help="global batch size, split evenly across the ranks (default 64)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a rank waits for a message before it fails the job "
                        "(default 120)")
    p.add_argument("--mpiexec", default=None,
                   help="the mpiexec to start (default: next to this Python, else on PATH)")
    p.add_argument("--no-launch", action="store_true", dest="no_launch",
                   help="run as one rank of an MPI job started by your own mpiexec / srun "
                        "(detected by itself for MPICH, Open MPI and PMIx launchers)")
    # test-only fault injection: rank --fail-rank misbehaves at step --fail-step
    p.add_argument("--fail-rank", type=int, default=None, dest="fail_rank",
                   help=argparse.SUPPRESS)
    p.add_argument("--fail-step", type=int, default=1, dest="fail_step", help=argparse.SUPPRESS)
    p.add_argument("--fail-mode", choices=FAULT_MODES, default="raise", dest="fail_mode",
                   help=argparse.SUPPRESS)
    # internal, set by fpsim's own launch: each rank runs under a guard process that names it
    # and the signal that killed it (mpiexec reports only "exit code 9"), see _GUARD
    p.add_argument("--guarded-by", type=int, default=None, dest="guarded_by",
                   help=argparse.SUPPRESS)


def validate_args(args: argparse.Namespace) -> None:
    """ValueError naming the first bad argument (before any process starts).

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> validate_args(  # doctest: +ELLIPSIS
    ...     p.parse_args(["--ranks", "3", "--stage", "1", "--batch", "64"]))
    Traceback (most recent call last):
    ...
    ValueError: --ranks 3 does not divide the global batch --batch 64: ...
    """
    if args.engine not in ENGINES:
        raise ValueError(f"unknown --engine {args.engine!r}; valid: {', '.join(ENGINES)}")
    if args.ranks < 1:
        raise ValueError(f"--ranks must be >= 1, got {args.ranks}")
    if args.stage not in ZERO_STAGES:
        raise ValueError(f"--stage must be one of 0, 1, 2, 3, got {args.stage}")
    if args.offload and args.stage < 2:
        raise ValueError(f"--offload needs a partitioned gradient: --stage 2 or 3, got "
                         f"--stage {args.stage}")
    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    if args.batch % args.ranks:
        raise ValueError(f"--ranks {args.ranks} does not divide the global batch --batch "
                         f"{args.batch}: each rank takes batch / ranks samples")
    if not (np.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr must be a positive number, got {args.lr}")
    if not (np.isfinite(args.timeout) and args.timeout > 0):
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.fail_rank is not None and not 0 <= args.fail_rank < args.ranks:
        raise ValueError(f"--fail-rank must be a rank in [0, {args.ranks}), got "
                         f"{args.fail_rank}")
    if args.fail_rank is not None and args.engine == "sim" and args.fail_mode != "raise":
        raise ValueError(f"--fail-mode {args.fail_mode} needs --engine mpi (one process per "
                         "rank); the simulation takes --fail-mode raise")


def demo_model():
    """The demo's model, as ``fpsim demo`` builds it: :class:`fpsim.training.MLP` with the
    widths, seed and initialisation of :func:`fpsim.training.experiment.demo_config`.

    >>> from fpsim.nn import Module
    >>> isinstance(demo_model(), Module)
    True
    """
    from ..training import MLP
    from ..training.experiment import demo_config

    cfg = demo_config()
    return MLP(cfg.sizes, rng=cfg.seed, init_scale=cfg.init_scale,
               out_init_scale=cfg.out_init_scale)


def _inject(args: argparse.Namespace, local_ranks, step: int) -> None:
    if args.fail_rank is None or args.fail_rank not in local_ranks or step != args.fail_step:
        return
    if args.fail_mode == "raise":
        raise RuntimeError(f"rank {args.fail_rank}: injected fault (--fail-rank "
                           f"{args.fail_rank} --fail-step {step})")
    if args.fail_mode == "exit":  # dies without a word, as a killed process does
        os._exit(3)
    if args.fail_mode == "kill":  # killed by a signal, as by the OOM killer or a user
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10 * args.timeout + 60)  # "hang": the peers' deadlines must catch it


def run_zero(args: argparse.Namespace, comm: Communicator | None = None,
             progress: dict | None = None) -> dict:
    """Run ``args.steps`` ZeRO steps of the demo model on ``comm`` (default: a simulated
    communicator of ``args.ranks`` ranks) and return the result dictionary (the same on every
    rank). ``progress["step"]`` follows the step being run (for error messages).

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> res = run_zero(p.parse_args(["--ranks", "2", "--stage", "3", "--steps", "1",
    ...                              "--batch", "4"]))
    >>> res["engine"], res["model_state_bytes_per_rank"] == [16 * res["padded_params"] // 2] * 2
    ('sim', True)
    """
    progress = {} if progress is None else progress
    from ..datasets import load_digits

    comm = Communicator(args.ranks) if comm is None else comm
    comm.reset()  # the result counts this run's traffic only
    data = load_digits()
    x, y = data.x_train, data.y_train
    eng = ZeroEngine(demo_model, args.stage, args.ranks, lr=args.lr, offload=args.offload,
                     comm=comm)
    b = args.batch
    losses, step_s = [], []
    for k in range(1, args.steps + 1):
        idx = (np.arange(b) + (k - 1) * b) % len(x)
        progress["step"] = f"step {k}"
        _inject(args, comm.local_ranks, k)
        t0 = time.perf_counter()
        losses.append(eng.step(x[idx], y[idx]))
        step_s.append(max(comm.gather_report([time.perf_counter() - t0]
                                              * len(comm.local_ranks))))
    progress["step"] = "the report"
    flat = eng.full_params()[:eng.num_params]
    digest = hashlib.sha256(flat.tobytes()).hexdigest()
    if eng.stage < 3:  # every rank holds the full parameters: they must agree
        mine = [hashlib.sha256(eng.full_params(rk.rank)[:eng.num_params].tobytes()).hexdigest()
                for rk in eng.ranks]
        every = comm.gather_report(mine)
        if len(set(every)) != 1:
            raise RuntimeError(f"the ranks' parameters differ after the last step: {every}")
    per = lambda f: comm.gather_report([f(rk, st) for rk, st in  # noqa: E731
                                        zip(eng.ranks, comm.stats, strict=True)])
    factor = 3 if eng.stage == 3 else 2
    return {
        "engine": comm.engine,
        "ranks": eng.world_size, "stage": eng.stage, "offload": eng.offload,
        "steps": args.steps, "batch": b,
        "pids": per(lambda _rk, _st: os.getpid()),
        "hosts": per(lambda _rk, _st: socket.gethostname()),
        "params_sha256": digest,
        "model_state_bytes_per_rank": per(lambda rk, _st: rk.model_state_bytes()["total"]),
        "model_state_per_rank": per(lambda rk, _st: rk.model_state_bytes()),
        "bytes_sent_per_rank": per(lambda _rk, st: st.sent_bytes),
        "bytes_received_per_rank": per(lambda _rk, st: st.recv_bytes),
        "offload_transfers_per_rank": per(lambda rk, _st: dict(rk.transfers)),
        "num_params": eng.num_params, "padded_params": eng.padded,
        "ring_bytes_per_rank_per_step": 2 * factor * ring_volume("all_gather", eng.padded,
                                                                 eng.world_size),
        "skipped_steps": eng.skipped_steps,
        "losses": losses,
        "step_seconds": step_s,
    }


def _print_result(res: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(res))
        return
    print(f"ZeRO stage {res['stage']}{' + offload' if res['offload'] else ''}, engine "
          f"{res['engine']}, {res['ranks']} ranks, {res['steps']} steps of batch "
          f"{res['batch']}: {res['num_params']} parameters (padded to {res['padded_params']})")
    print(f"final loss {res['losses'][-1]:.6g}, parameters sha256 {res['params_sha256']}")
    print(f"ring volume per rank and step: {res['ring_bytes_per_rank_per_step']:.0f} bytes")
    print(f"{'rank':>4}  {'pid':>8}  {'model-state bytes':>17}  {'bytes sent':>10}  "
          f"{'step s (median)':>15}")
    med = float(np.median(res["step_seconds"]))
    for r in range(res["ranks"]):
        print(f"{r:>4}  {res['pids'][r]:>8}  {res['model_state_bytes_per_rank'][r]:>17}  "
              f"{res['bytes_sent_per_rank'][r]:>10}  {med:>15.4g}")


def launched_by_mpi() -> bool:
    """Whether this process was started by an MPI launcher (MPICH's or Intel's Hydra, Open
    MPI, PMIx / srun), read from the variables those launchers set.

    >>> isinstance(launched_by_mpi(), bool)
    True
    """
    return any(v in os.environ for v in _LAUNCHER_VARS)


def find_mpiexec(explicit: str | None = None) -> str:
    """The mpiexec to run: ``explicit``, else the one installed next to this Python (the
    mpich wheel's), else the first on PATH; RuntimeError naming the extra if none.

    >>> find_mpiexec("/nonexistent/mpiexec")
    Traceback (most recent call last):
    ...
    fpsim.distributed.mpi.MissingMPIError: --mpiexec '/nonexistent/mpiexec' is not an executable
    """
    from ..distributed.mpi import MPI_EXTRA_HINT, MissingMPIError

    if explicit is not None:
        found = shutil.which(explicit)
        if found is None:
            raise MissingMPIError(f"--mpiexec {explicit!r} is not an executable")
        return found
    here = os.path.dirname(sys.executable)
    found = shutil.which("mpiexec", path=here) or shutil.which("mpiexec")
    if found is None:
        raise MissingMPIError("--engine mpi needs mpiexec, which is neither next to "
                              f"{sys.executable} nor on PATH; " + MPI_EXTRA_HINT)
    return found


def _worker_argv(args: argparse.Namespace) -> list[str]:
    """The command line of each rank under fpsim's own launch (under :data:`_GUARD`, which
    puts its pid for GUARD_PID). The ranks always print JSON: the launcher reads the result
    (and prints it as asked)."""
    argv = ["zero", "--engine", "mpi", "--ranks", str(args.ranks), "--stage", str(args.stage),
            "--steps", str(args.steps), "--batch", str(args.batch), "--lr", repr(args.lr),
            "--timeout", repr(args.timeout), "--no-launch", "--json"]
    argv += ["--offload"] * args.offload + ["--guarded-by", "GUARD_PID"]
    if args.fail_rank is not None:
        argv += ["--fail-rank", str(args.fail_rank), "--fail-step", str(args.fail_step),
                 "--fail-mode", args.fail_mode]
    return argv


def _is_hydra(mpiexec: str) -> bool:
    """Whether ``mpiexec`` is MPICH's (or Intel MPI's) Hydra launcher."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "HYDRA" in out.stdout.upper()


def _launch(args: argparse.Namespace) -> int:
    from ..distributed.mpi import MPI_EXTRA_HINT, MissingMPIError

    if importlib.util.find_spec("mpi4py") is None:
        raise MissingMPIError("--engine mpi needs mpi4py, which is not installed; "
                              + MPI_EXTRA_HINT)
    mpiexec = find_mpiexec(args.mpiexec)
    cmd = [mpiexec, "-n", str(args.ranks)]
    if _is_hydra(mpiexec):
        # Hydra kills every rank as soon as one exits without MPI_Abort, before anyone can
        # say which: let the survivors' deadlines name it, then MPI_Abort
        cmd.append("-disable-auto-cleanup")
    cmd += [sys.executable, "-I", "-c", _GUARD, str(args.ranks), repr(ABORT_GRACE_S),
            sys.executable, "-m", "fpsim.cli", *_worker_argv(args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    res = _job_result(proc, args, mpiexec)
    sys.stderr.write(proc.stderr)
    sys.stdout.write("".join(proc.stdout.splitlines(keepends=True)[:-1]))
    _print_result(res, args.json)
    return 0


def _signal_name(number: int) -> str:
    """``"signal 9 (SIGKILL)"``."""
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def _job_result(proc: subprocess.CompletedProcess, args: argparse.Namespace,
                mpiexec: str) -> dict:
    """The result rank 0 printed, when the job succeeded and every rank reported in it (rank 0
    prints it after gathering every rank's report); else :class:`RankFailure` saying what
    happened: the ranks' own failure lines (a rank killed by a signal is named by its guard),
    or the launcher's words. ``mpiexec /bin/true`` exits 0 having run nothing: a failure."""
    if proc.returncode != 0:
        how = (f"mpiexec was killed by {_signal_name(-proc.returncode)}" if proc.returncode < 0
               else f"mpiexec exit code {proc.returncode}")
        why = _FAIL_LINE.findall(proc.stderr)
        if not why:  # no rank said a word: keep what the launcher says (Hydra: on stdout)
            why = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()][-12:]
        raise RankFailure(f"the MPI job failed ({how}):\n" + "\n".join(why))
    lines = proc.stdout.strip().splitlines()
    try:
        res = json.loads(lines[-1]) if lines else None
    except ValueError:
        res = None
    n = args.ranks
    if not (isinstance(res, dict) and res.get("ranks") == n and isinstance(res.get("pids"), list)
            and len(res["pids"]) == n):
        said = f"its last line was {lines[-1][:200]!r}" if lines else "it printed nothing"
        raise RankFailure(f"{mpiexec} -n {n} exited 0, but no result of the {n} ranks came "
                          f"back ({said}): the ranks did not run (is --mpiexec an MPI "
                          "launcher?)")
    return res


# Each rank under fpsim's own launch runs under this guard (a bare Python: no fpsim, no NumPy,
# ~30 ms), which starts the rank as its child and, when a signal kills it (the OOM killer, a
# user's kill -9), says which rank, which process and which signal (mpiexec says only "exit
# code 9"), then dies by the same signal, as the rank did, so that the launcher ends the job as
# it would have. A signal sent to the guard (the launcher ending the job) goes on to the rank
# and is not reported as the rank's failure. argv: ranks, grace seconds, the rank's command.
_GUARD = r"""
import os, signal, socket, subprocess, sys, time
ranks, grace, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
cmd = [str(os.getpid()) if a == "GUARD_PID" else a for a in cmd]
child = subprocess.Popen(cmd, close_fds=False)  # the launcher's PMI socket goes to the rank
stopped = []
def forward(signum, frame):
    stopped.append(signum)
    child.send_signal(signum)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, forward)
# Hydra tells the processes it started that a peer has ended with SIGUSR1, whose default
# action ends the process: 1 run in 3 of a 2-rank job, the guard of the rank that finished
# last died of it after a successful run (exit code 10)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
rc = child.wait()
if rc >= 0 or stopped:
    sys.exit(rc if rc >= 0 else 128 - rc)
rank = next((os.environ[v] for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
             if os.environ.get(v, "").isdigit()), "?")  # _RANK_VARS
try:
    name = f"signal {-rc} ({signal.Signals(-rc).name})"
except ValueError:
    name = f"signal {-rc}"
print(f"fpsim zero: rank {rank} of {ranks} (pid {child.pid} on {socket.gethostname()}) "
      f"failed: killed by {name}", file=sys.stderr, flush=True)
time.sleep(grace)  # let the launcher forward the line before it ends the job
if -rc in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(-rc, signal.SIG_DFL)
os.kill(os.getpid(), -rc)
"""


def _die_with(guard: int) -> None:
    """Under a guard: end with it (Linux), so that no rank outlives its guard."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != guard:  # the guard ended before the line above
        os._exit(1)


def _run_rank(args: argparse.Namespace) -> int:
    from ..distributed.mpi import MPICommunicator

    if args.guarded_by is not None:
        _die_with(args.guarded_by)
    comm = MPICommunicator(timeout=args.timeout)
    where = f"rank {comm.rank} of {comm.world_size} (pid {os.getpid()} on " \
            f"{socket.gethostname()})"
    progress = {"step": "setup"}
    try:
        if comm.world_size != args.ranks:
            raise ValueError(f"--ranks {args.ranks} but the MPI job has {comm.world_size} "
                             f"processes: start it with mpiexec -n {args.ranks}")
        res = run_zero(args, comm, progress)
    except BaseException as exc:  # noqa: BLE001 - any failure must end the whole job
        print(f"fpsim zero: {where} failed at {progress['step']}: {type(exc).__name__}: {exc}"
              " (ending the job: MPI_Abort)", file=sys.stderr, flush=True)
        # MPI_Abort tears the job down at once, and Hydra dropped lines still on their way:
        # under fpsim's own launch and under the user's mpiexec alike, the job ended with no
        # word of who failed (1 run in 4-6 of the tests). The pause lets the launcher forward
        # this line; the launcher's own abort notice may still be lost, so the line says it.
        time.sleep(ABORT_GRACE_S)
        comm.abort(1)
        return 1
    if comm.rank == 0:
        _print_result(res, args.json)
        sys.stdout.flush()
    return 0


def run_cli(args: argparse.Namespace) -> int:
    """Handler of ``fpsim zero``: 0 on success, 1 when the job fails (the message names the
    rank); bad arguments raise ValueError, which ``fpsim`` prints (exit status 2).

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> run_cli(p.parse_args(["--ranks", "2", "--stage", "1", "--offload"]))
    Traceback (most recent call last):
    ...
    ValueError: --offload needs a partitioned gradient: --stage 2 or 3, got --stage 1
    """
    validate_args(args)
    if args.engine == "sim":
        try:
            res = run_zero(args)
        except RuntimeError as exc:
            print(f"fpsim zero: the simulated job failed: {exc}", file=sys.stderr)
            return 1
        _print_result(res, args.json)
        return 0
    try:
        if args.no_launch or launched_by_mpi():
            return _run_rank(args)
        return _launch(args)
    except RuntimeError as exc:  # MissingMPIError, RankFailure
        print(f"fpsim zero: {exc}", file=sys.stderr)
        return 1
