"""ZeRO wall time per training step against the number of ranks N: MPI processes
(``fpsim zero --engine mpi``) next to the in-process simulation of the same N ranks, same model
(the demo MLP), same global batch (strong scaling), BLAS pinned to one thread per process.

Speed vs reference = reference time / fpsim time, the reference being the simulation of the
same N ranks run one after another in one process (1.0: MPI as fast as the simulation; > 1:
the processes overlap). Each time is the best step of ``--steps`` (the first, a warm-up,
left out). On a machine with C cores, N > C ranks share cores, so MPI cannot beat the
simulation there; the numbers show where the processes' parallelism ends and the message
latency shows. Needs the extra fpsim[mpi] for the MPI column.

    python benchmarks/bench_zero.py                  # N = 1, 2, 4; stages 0 and 3
    python benchmarks/bench_zero.py --ranks 1 2 4 8 --stages 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from threadpoolctl import threadpool_limits

from fpsim.cli import zero as zcli


def zero_args(n: int, stage: int, steps: int, batch: int) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    zcli.configure_parser(p)
    return p.parse_args(["--ranks", str(n), "--stage", str(stage), "--steps", str(steps),
                         "--batch", str(batch)])


def mpi_run(n: int, stage: int, steps: int, batch: int) -> dict | None:
    cmd = [sys.executable, "-m", "fpsim.cli", "zero", "--engine", "mpi", "--ranks", str(n),
           "--stage", str(stage), "--steps", str(steps), "--batch", str(batch), "--json"]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        print(f"  mpi run failed: {proc.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--stages", type=int, nargs="+", default=[0, 3])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=64, help="global batch (default 64)")
    p.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = p.parse_args(argv)
    print(f"ZeRO step wall time vs N: demo MLP, global batch {args.batch}, best of "
          f"{args.steps - 1} steps; speed vs reference = simulation time / MPI time; "
          f"{os.cpu_count()} CPUs")
    print(f"{'stage':>5} {'N':>3} {'sim s/step':>11} {'mpi s/step':>11} {'speed vs sim':>13} "
          f"{'MB sent/rank/step':>18} {'same bits':>9}")
    rows = []
    for stage in args.stages:
        for n in args.ranks:
            with threadpool_limits(1):
                sim = zcli.run_zero(zero_args(n, stage, args.steps, args.batch))
            mpi = mpi_run(n, stage, args.steps, args.batch)
            t_sim = min(sim["step_seconds"][1:] or sim["step_seconds"])
            t_mpi = min(mpi["step_seconds"][1:] or mpi["step_seconds"]) if mpi else float("nan")
            sent = sim["bytes_sent_per_rank"][0] / args.steps / 1e6
            same = mpi is not None and mpi["params_sha256"] == sim["params_sha256"]
            rows.append({"stage": stage, "ranks": n, "sim_s_per_step": t_sim,
                         "mpi_s_per_step": t_mpi, "mb_sent_per_rank_per_step": sent,
                         "same_bits": same})
            print(f"{stage:>5} {n:>3} {t_sim:>11.4f} {t_mpi:>11.4f} {t_sim / t_mpi:>13.2f} "
                  f"{sent:>18.4f} {'yes' if same else 'NO':>9}", flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
