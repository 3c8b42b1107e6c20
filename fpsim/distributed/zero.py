"""ZeRO (Rajbhandari et al., SC'20) stages 0-3 and ZeRO-Offload, simulated with N data-parallel
ranks in one process.

Mixed precision as in the paper: fp16 parameters and gradients (``param_fmt``, 2 bytes each),
fp32 master weights and Adam moments (K = 12 bytes per parameter) in the partitions. The
parameters are flattened, in ``model.parameters()`` order, into one buffer of Psi elements
(zero-padded to a multiple of N, as DeepSpeed pads its flat groups); rank r owns elements
``[r Psi/N, (r + 1) Psi/N)``. What each rank keeps between steps:

======  ==================  ====================  =====================  ======================
stage   fp16 parameters     fp16 gradients        fp32 master, m, v      communication / step
======  ==================  ====================  =====================  ======================
0       all (2 Psi)         all (2 Psi)           all (12 Psi)           all-reduce grads
1       all                 all (buffer)          its partition          reduce-scatter grads,
                                                  (12 Psi / N)           all-gather params
2       all                 its partition         its partition          as stage 1
                            (2 Psi / N)
3       its partition       its partition         its partition          all-gather params
        (2 Psi / N)                                                      (forward and again
                                                                         for backward),
                                                                         reduce-scatter grads
======  ==================  ====================  =====================  ======================

Per rank and step this moves ``2 (N - 1) / N * Psi`` elements for stages 0-2 and
``3 (N - 1) / N * Psi`` for stage 3 (ring volumes, see :mod:`fpsim.distributed.collectives`;
the paper's 2 Psi and 3 Psi are the large-N limits). Offload (ZeRO-Offload, Ren et al. 2021,
on stages 2 and 3): the rank's gradient partition, its fp32 master weights and moments live on
the host and the Adam step runs there; the GPU keeps the fp16 parameters. Per step the rank
sends its reduced fp16 gradient partition down and receives its fp16 parameter partition back
(2 bytes per element each way, counted in ``transfers``).

One step with a global batch of B samples: rank r takes samples ``[r B/N, (r + 1) B/N)``, runs
forward and backward of ``loss_fn(model(x_r), y_r)`` (times ``loss_scale``) with fp16
parameters; the gradients are averaged by the collective's fixed reduction (float64 sum in rank
order, divided by N, rounded once to fp16); each rank unscales its partition in float32
(PyTorch's ``g * float32(1 / scale)``) and runs Adam (:func:`adam_step_flat`) on it, and the new
fp16 parameters are the master rounded to nearest even. Every stage therefore computes the same
bits as one process that runs the N micro-batches one after another and averages their fp16
gradients the same way (tests/test_zero_sim.py). A step whose averaged gradients contain inf or
NaN is skipped on every rank (the flag's one-element all-reduce is not counted).

One implementation, two communicator backends. The engine holds the state of its *local*
ranks (``comm.local_ranks``) and runs every collective through ``comm``:

- :class:`~fpsim.distributed.collectives.Communicator` (the default) simulates all N ranks in
  one process: the local ranks are 0..N-1, run one after another on one workspace model (the
  ``model`` given), into which each rank's full parameters are loaded before its forward pass;
  the workspace is compute scratch, not part of any rank's state.
- :class:`~fpsim.distributed.mpi.MPICommunicator` runs each rank in its own MPI process: the
  local rank is the process's own, the collectives are MPI messages of the arrays' real width,
  and the reduction is the same ordered one, so both give the same bits
  (:mod:`fpsim.distributed.mpi`).
 Stage 3 gathers the whole model at once (a real
implementation gathers layer by layer: the same volume, a smaller transient buffer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..autograd import functional as F
from ..autograd.tensor import Tensor, as_format, no_grad
from ..formats import FP16, Format
from ..rounding import cast
from ..zero_stages import ZERO_STAGES, as_zero_stage
from .adam import adam_step_flat
from .collectives import Communicator

__all__ = ["ZeroEngine", "ZeroRank", "ZERO_STAGES"]


@dataclass
class ZeroRank:
    """The state one simulated rank keeps between steps (flat arrays; ``None`` = not held).

    ``params`` fp16 (all, or the partition in stage 3), ``grads`` fp16 (all in stages 0-1, the
    partition in 2-3), ``master`` / ``exp_avg`` / ``exp_avg_sq`` fp32 (all in stage 0, else the
    partition); with ``offload`` the gradient partition and the fp32 arrays are on the host.
    ``transfers``: bytes moved device -> host (``d2h``) and host -> device (``h2d``).
    """

    rank: int
    params: np.ndarray
    grads: np.ndarray
    master: np.ndarray
    exp_avg: np.ndarray
    exp_avg_sq: np.ndarray
    offload: bool = False
    step: int = 0
    transfers: dict = field(default_factory=lambda: {"d2h": 0, "h2d": 0})

    def model_state_bytes(self) -> dict[str, int]:
        """Bytes held, by kind and by side (``device``, ``host``): the arrays' real sizes.

        Keys: ``parameters``, ``gradients``, ``optimizer_states`` (master + moments),
        ``device``, ``host``, ``total``.
        """
        p, g = int(self.params.nbytes), int(self.grads.nbytes)
        o = int(self.master.nbytes + self.exp_avg.nbytes + self.exp_avg_sq.nbytes)
        host = g + o if self.offload else 0
        return {"parameters": p, "gradients": g, "optimizer_states": o,
                "device": p + g + o - host, "host": host, "total": p + g + o}


class ZeroEngine:
    """Data-parallel training of ``model`` on ``world_size`` simulated ranks with ZeRO
    ``stage`` (0 = plain data parallelism) and mixed-precision Adam.

    ``model``: an :class:`fpsim.nn.Module` or a zero-argument callable returning one; it is cast
    to ``param_fmt`` in place and used as the ranks' compute workspace. ``loss_fn(output,
    target)`` (default :func:`fpsim.functional.cross_entropy`) returns the mean loss of a
    micro-batch. ``loss_scale``: a static loss scale. ``offload``: keep the gradient and
    optimizer partitions on the host (ZeRO-Offload; stages 2 and 3). ``comm``: the
    communicator backend (default: a simulated :class:`Communicator` of ``world_size``
    ranks; an :class:`~fpsim.distributed.mpi.MPICommunicator` for one rank per MPI process,
    whose size must be ``world_size``). ``ranks`` holds the local ranks' state only.

    >>> import numpy as np, fpsim
    >>> from fpsim import nn
    >>> eng = ZeroEngine(lambda: nn.Linear(4, 2, rng=0), stage=2, world_size=2, lr=1e-2)
    >>> x = np.random.default_rng(0).normal(size=(8, 4)); y = np.arange(8) % 2
    >>> loss = eng.step(x, y)
    >>> eng.num_params, eng.ranks[0].model_state_bytes()["device"]  # 2*10 + (2+12)*10/2
    (10, 90)
    >>> eng.last_step_comm[0]  # elements sent by rank 0: 2 (N - 1) / N * Psi
    10
    """

    def __init__(self, model, stage: int, world_size: int, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, offload: bool = False,
                 param_fmt: Format | str = FP16, loss_fn: Callable | None = None,
                 loss_scale: float = 1.0, comm: Communicator | None = None) -> None:
        from ..nn import Module

        n_stage = as_zero_stage(stage)  # (a TypeError for 2.0: it was taken as stage 2)
        if not isinstance(model, Module):
            if not callable(model):
                raise TypeError("model must be an fpsim.nn.Module or a callable returning one, "
                                f"got {type(model).__name__}")
            model = model()
            if not isinstance(model, Module):
                raise TypeError(f"the model factory returned {type(model).__name__}, not an "
                                "fpsim.nn.Module")
        if offload and stage < 2:
            raise ValueError(f"offload needs a partitioned gradient: stage 2 or 3, got stage "
                             f"{stage}")
        if not (loss_scale > 0 and np.isfinite(loss_scale)):
            raise ValueError(f"loss_scale must be positive and finite, got {loss_scale!r}")
        if comm is None:
            comm = Communicator(world_size)
        elif not isinstance(comm, Communicator):
            raise TypeError(f"ZeroEngine: comm must be a Communicator (or an MPICommunicator), "
                            f"got {type(comm).__name__} {comm!r}")
        elif comm.world_size != world_size:
            raise ValueError(f"world_size is {world_size!r} but the communicator has "
                             f"{comm.world_size} ranks")
        self.comm = comm
        self.stage = n_stage
        self.world_size = self.comm.world_size
        self.offload = bool(offload)
        self.param_fmt = as_format(param_fmt)
        self.hyper = dict(lr=float(lr), betas=tuple(betas), eps=float(eps),
                          weight_decay=float(weight_decay))
        self.loss_fn = F.cross_entropy if loss_fn is None else loss_fn
        self.loss_scale = float(loss_scale)
        self.model = model.to(self.param_fmt)
        self._params = list(model.parameters())
        if not self._params:
            raise ValueError("the model has no parameters")
        self._shapes = [p.shape for p in self._params]
        sizes = [int(np.prod(s)) for s in self._shapes]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        self.num_params = int(self._offsets[-1])
        n = self.world_size
        self.padded = -(-self.num_params // n) * n
        self.shard = self.padded // n
        flat = self._flatten([p.data for p in self._params])
        self.ranks: list[ZeroRank] = []
        for r in self.comm.local_ranks:
            own = self._own(flat, r)
            full_opt = self.stage == 0
            part = flat if full_opt else own
            self.ranks.append(ZeroRank(
                rank=r,
                params=(own if self.stage == 3 else flat).copy(),
                grads=np.zeros(self.padded if self.stage <= 1 else self.shard, flat.dtype),
                master=part.astype(np.float32),
                exp_avg=np.zeros(part.size, np.float32),
                exp_avg_sq=np.zeros(part.size, np.float32),
                offload=self.offload))
        self.skipped_steps = 0
        self.last_step_comm: list[int] = [0] * len(self.ranks)
        self.last_loss: float | None = None

    # ------------------------------------------------------------------- layout
    def _flatten(self, arrays) -> np.ndarray:
        dtype = self.param_fmt.storage_dtype
        flat = np.zeros(self.padded, dtype)
        for a, lo, hi in zip(arrays, self._offsets[:-1], self._offsets[1:], strict=True):
            if a is not None:
                flat[lo:hi] = np.asarray(a).reshape(-1)
        return flat

    def _own(self, flat: np.ndarray, r: int) -> np.ndarray:
        return flat[r * self.shard:(r + 1) * self.shard]

    def unflatten(self, flat: np.ndarray) -> list[np.ndarray]:
        """The parameter arrays (views) of a flat buffer of ``padded`` elements."""
        return [flat[lo:hi].reshape(s) for lo, hi, s in
                zip(self._offsets[:-1], self._offsets[1:], self._shapes, strict=True)]

    def _load(self, flat: np.ndarray) -> None:
        for p, a in zip(self._params, self.unflatten(flat), strict=True):
            p.set_data_(a)  # a view into the rank's flat buffer
            p.grad = None

    def full_params(self, rank: int | None = None) -> np.ndarray:
        """Rank ``rank``'s full flat fp16 parameters (default: the first local rank's; stage 3:
        every rank's partition, gathered outside the communication count: with an MPI
        communicator every rank must call this)."""
        if self.stage == 3:
            return np.concatenate(self.comm.gather_report([rk.params for rk in self.ranks]))
        return self._local(rank).params.copy()

    def _local(self, rank: int | None) -> ZeroRank:
        if rank is None:
            return self.ranks[0]
        for rk in self.ranks:
            if rk.rank == rank:
                return rk
        raise ValueError(f"rank {rank!r} is not held here; local ranks: "
                         f"{list(self.comm.local_ranks)}")

    def load_into(self, model) -> None:
        """Copy the current parameters into ``model`` (same architecture), rounding to its
        parameters' formats."""
        for p, a in zip(model.parameters(), self.unflatten(self.full_params()), strict=True):
            p.data = a

    # --------------------------------------------------------------------- step
    def step(self, x, y) -> float:
        """One training step on the global batch ``(x, y)`` (split evenly across the ranks);
        returns the mean of the ranks' losses (unscaled)."""
        n = self.world_size
        x = np.asarray(x.data if isinstance(x, Tensor) else x)
        y = np.asarray(y.data if isinstance(y, Tensor) else y)
        if len(x) != len(y) or len(x) % n:
            raise ValueError(f"the global batch ({len(x)} inputs, {len(y)} targets) must "
                             f"split evenly across {n} ranks")
        before = [s.sent_elements for s in self.comm.stats]
        xs, ys = np.split(x, n), np.split(y, n)  # only the local ranks' slices are used
        if self.stage == 3:  # gathered for the forward pass, and again for the backward pass
            fwd = self.comm.all_gather([rk.params for rk in self.ranks])
            bwd = self.comm.all_gather([rk.params for rk in self.ranks])
        else:
            fwd = bwd = [rk.params for rk in self.ranks]
        losses, full_grads = [], []
        for rk, pf, pb in zip(self.ranks, fwd, bwd, strict=True):
            r = rk.rank
            self._load(pf)
            out = self.model(Tensor(xs[r], self.param_fmt))
            loss = self.loss_fn(out, ys[r])
            losses.append(loss.item())
            if self.loss_scale != 1.0:
                loss = loss * self.loss_scale
            self._load(pb)
            with np.errstate(over="ignore", invalid="ignore"):  # overflow skips the step
                loss.backward()
            full_grads.append(self._flatten([p.grad for p in self._params]))
        shards = self._reduce(full_grads)
        self._optimizer_step(shards)
        self.last_step_comm = [s.sent_elements - b for s, b in zip(self.comm.stats, before,
                                                                   strict=True)]
        # the mean of all ranks' losses in rank order (a report: not counted as traffic)
        self.last_loss = float(np.mean(self.comm.gather_report(losses)))
        return self.last_loss

    def _reduce(self, full_grads: list[np.ndarray]) -> list[np.ndarray]:
        """Average the gradients; store what each rank keeps; return each rank's
        optimizer-partition gradients."""
        if self.stage == 0:
            reduced = self.comm.all_reduce(full_grads, op="mean")
            for rk, g in zip(self.ranks, reduced, strict=True):
                rk.grads[...] = g
            return [rk.grads for rk in self.ranks]
        shards = self.comm.reduce_scatter(full_grads, op="mean")
        for rk, g, full in zip(self.ranks, shards, full_grads, strict=True):
            if self.stage == 1:  # the full buffer stays; its own partition is reduced
                rk.grads[...] = full
                self._own(rk.grads, rk.rank)[...] = g
            else:
                rk.grads[...] = g
        return shards

    def _optimizer_step(self, grads: list[np.ndarray]) -> None:
        inv = np.float32(1.0 / self.loss_scale)
        g32 = []
        for rk, g in zip(self.ranks, grads, strict=True):
            if self.offload:
                rk.transfers["d2h"] += int(g.nbytes)
            g = g.astype(np.float32)
            g32.append(g * inv if self.loss_scale != 1.0 else g)
        if not self.comm.all_true([np.isfinite(g).all() for g in g32]):
            self.skipped_steps += 1
            return
        new = []
        for rk, g in zip(self.ranks, g32, strict=True):
            rk.step += 1
            adam_step_flat(rk.master, g, rk.exp_avg, rk.exp_avg_sq, rk.step, **self.hyper)
            p16 = np.asarray(cast(rk.master, self.param_fmt, "nearest_even"))
            if self.offload:
                rk.transfers["h2d"] += int(p16.nbytes)
            new.append(p16)
        if self.stage in (1, 2):
            new = self.comm.all_gather(new)
        for rk, p16 in zip(self.ranks, new, strict=True):
            rk.params = p16

    # ----------------------------------------------------------------- reports
    def model_state_bytes(self, rank: int | None = None) -> dict[str, int]:
        """Rank ``rank``'s model-state bytes (default: the first local rank's; see
        :meth:`ZeroRank.model_state_bytes`)."""
        return self._local(rank).model_state_bytes()

    @no_grad()
    def evaluate(self, x) -> Tensor:
        """The model's output on ``x`` with the current parameters (no graph)."""
        self._load(self.full_params())
        return self.model(Tensor(np.asarray(x), self.param_fmt))
