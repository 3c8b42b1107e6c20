"""Settings of the autograd engine and the one rounding step every operation goes through.

- :func:`rounding_context`: the rounding policy (a :class:`fpsim.RoundingPolicy`: mode,
  generator, random bits, overflow, subnormals, tininess) with which op results and gradients
  are rounded to their formats; default ``nearest_even``.
- :func:`matmul_accumulation`: how matmul / linear / conv2d accumulate their dot products
  (see :mod:`fpsim.autograd.accumulate`); default ``"fp32"``.
- :func:`promote_formats`: the format of an op mixing formats (PyTorch promotes fp16 + fp32 to
  fp32; here "wider" is defined for every :class:`~fpsim.Format`, see :func:`contains`).
- :func:`round_to`: computed values -> the storage array of a format, rounded once.

Settings are read when an op runs: the forward ops when they are called, the backward ops when
``backward()`` runs.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import state as _state
from ..formats import (
    BF16,
    FP16,
    FP32,
    FP64,
    Format,
    get_float_format,
)
from ..modes import Overflow, Rounding, Subnormals, Tininess, as_rounding
from ..rounding import RoundingPolicy, cast
from ..rounding.fp16 import f16_to_wide, f32_to_f16, f64_to_f16
from ..rounding.native import (
    BF16_BITS_MIN,
    NATIVE_CAST_FORMATS,
    bf16_by_bits,
    native_rounding,
    table_cast_ok,
    widen_bf16,
    widen_byte,
)
from ..rounding.native import cast as native_cast

__all__ = [
    "Accumulation",
    "as_accumulation",
    "autocast_args",
    "bf16_sum32",
    "check_same_format",
    "contains",
    "get_accumulation",
    "get_autocast_hook",
    "get_rounding",
    "matmul_accumulation",
    "plain_rounding",
    "promote_formats",
    "reset_autocast_hook",
    "round_to",
    "rounding_context",
    "set_autocast_hook",
    "widen",
]

# Formats into which an op may compute in float32 and round with one native cast (inputs in the
# format, RNE): float32 has p = 24 >= 2q + 2 bits, so by Figueroa's theorem rounding the float32
# result of + - * / sqrt again to fp16 (q = 11) equals rounding the exact result once, and fp16
# operands' results never leave float32's normal range. fp32 results are exact IEEE operations.
F32_SAFE: frozenset[Format] = frozenset({FP32, FP16})


@dataclass(frozen=True)
class Accumulation:
    """A matmul accumulation model: ``kind`` in ``fp32``, ``exact``, ``sgemm``, ``sequential``,
    ``pairwise``, ``tensorcore``; ``fmt`` the accumulator format of sequential / pairwise;
    ``gpu`` the GPU of the tensor-core model.

    >>> as_accumulation(("sequential", "bf16"))
    Accumulation(kind='sequential', fmt='bf16', gpu=None)
    """

    kind: str
    fmt: Format | None = None
    gpu: str | None = None

    def __repr__(self) -> str:
        fmt = None if self.fmt is None else self.fmt.name
        return f"Accumulation(kind={self.kind!r}, fmt={fmt!r}, gpu={self.gpu!r})"


_KINDS = ("fp32", "exact", "sgemm", "sequential", "pairwise", "tensorcore")
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)
_BF16_DTYPE = BF16.storage_dtype
_FLAG_STACK = _state.flag_stack  # the active flag contexts (fpsim.flags.flags_active reads it)
_SIMPLE = {k: Accumulation(k) for k in ("fp32", "exact", "sgemm")}  # frozen: shared
_VALID = ('"fp32", "exact", "sgemm", ("sequential", fmt), ("pairwise", fmt), '
          '("tensorcore", gpu) or an Accumulation')


def as_accumulation(spec: Accumulation | str | tuple) -> Accumulation:
    """Parse an accumulation model: ``"fp32"``, ``"exact"``, ``"sgemm"``,
    ``("sequential", fmt)``, ``("pairwise", fmt)`` or ``("tensorcore", gpu_name)``.

    >>> as_accumulation("exact").kind
    'exact'
    >>> as_accumulation(("tensorcore", "A100")).gpu
    'A100'
    """
    if isinstance(spec, Accumulation):
        return spec
    if isinstance(spec, str):
        simple = _SIMPLE.get(spec)
        if simple is not None:
            return simple
        key = spec.strip().lower()
        if key in _SIMPLE:
            return _SIMPLE[key]
        if key in _KINDS:
            raise ValueError(f"accumulation {spec!r} needs a second element: use {_VALID}")
        raise ValueError(f"unknown accumulation model {spec!r}; valid: {_VALID}")
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        key = spec[0].strip().lower()
        if key in ("sequential", "pairwise"):
            return Accumulation(key, fmt=get_float_format(spec[1]))
        if key == "tensorcore":
            if not isinstance(spec[1], str):
                raise TypeError(f"the tensor-core model takes a GPU name, got {spec[1]!r}")
            return Accumulation("tensorcore", gpu=spec[1])
    raise ValueError(f"unknown accumulation model {spec!r}; valid: {_VALID}")


class _Settings:
    """The engine's settings: ``policy``, how op results and gradients are rounded (its
    format a stand-in: each op rounds to its own, :meth:`policy_for`), and ``accumulation``.
    Its values never change once made (threads share it); ``_for`` only caches."""

    __slots__ = ("policy", "plain", "accumulation", "_for")

    def __init__(self, policy: RoundingPolicy, accumulation: Accumulation) -> None:
        self.policy = policy
        # plain: the policy part of fpsim.rounding.native's rule, where native casts are exact
        self.plain = native_rounding(policy)
        self.accumulation = accumulation
        self._for: dict = {}  # (id(fmt), rounding) -> (fmt, policy): ops ask on every call

    def replace(self, **kw) -> _Settings:
        return _Settings(kw.get("policy", self.policy), kw.get("accumulation", self.accumulation))

    def policy_for(self, fmt: Format, rounding: Rounding | None = None) -> RoundingPolicy:
        """The policy rounding to ``fmt``, in mode ``rounding`` if given (the random bits kept
        only for stochastic rounding); built once per format and mode (a dict lookup after)."""
        key = (id(fmt), rounding)
        hit = self._for.get(key)
        if hit is not None and hit[0] is fmt:  # the id is of this very format object
            return hit[1]
        pol = self.policy
        if rounding is None or rounding is pol.rounding:
            pol = pol.replace(fmt=fmt)
        else:
            pol = pol.replace(fmt=fmt, rounding=rounding, random_bits=(
                pol.random_bits if rounding is Rounding.STOCHASTIC else None))
        if len(self._for) > 256:  # formats made on the fly: keep the cache bounded
            self._for.clear()
        self._for[key] = (fmt, pol)
        return pol


# The active settings are ambient state, per thread (fpsim.state.local.autograd_settings);
# these are every thread's defaults. The policy's format is a stand-in (policy_for).
_state.set_default("autograd_settings", _Settings(RoundingPolicy(FP64), Accumulation("fp32")))
_LOCAL = _state.local


def settings() -> _Settings:
    """The active settings object (internal; read by the ops)."""
    return _LOCAL.autograd_settings


class _use(_state.scoped):  # noqa: N801 - a context manager, used like one
    """``scoped(autograd_settings=new)`` whose ``with ... as`` target is ``new`` (a class, not
    a generator: the contexts are entered per step). As the contextmanager it replaced, it
    decorates functions (each call enters afresh); one object may be entered again while active
    (``scoped`` keeps a record per entry)."""

    __slots__ = ()

    def __init__(self, new: _Settings) -> None:
        super().__init__(autograd_settings=new)

    def __enter__(self) -> _Settings:
        super().__enter__()
        return self._values["autograd_settings"]

    def __call__(self, fn: Callable) -> Callable:
        new = self._values["autograd_settings"]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _use(new):
                return fn(*args, **kwargs)

        return wrapper


def rounding_context(rounding: Rounding | str = "nearest_even",
                     rng: np.random.Generator | int | None = None, *,
                     overflow: Overflow | str = "inf", subnormals: Subnormals | str = "keep",
                     tininess: Tininess | str = "after", random_bits: int | None = None):
    """Context manager: round op results and gradients with ``rounding`` (any
    :class:`fpsim.Rounding` name; ``stochastic`` draws from ``rng``, a Generator or seed, else
    fpsim's default generator, and from ``random_bits`` of each 64-bit draw if given),
    ``overflow`` (``inf`` | ``saturate``), ``subnormals`` (``keep`` | ``flush`` | ``daz`` |
    ``flush_daz``) and ``tininess`` (``after`` | ``before``): the options of
    :func:`fpsim.round`, held as one :class:`fpsim.RoundingPolicy`. Tensor construction always
    rounds to nearest even. Named as :func:`fpsim.flag_context`.

    >>> import fpsim
    >>> from fpsim.autograd import Tensor, rounding_context
    >>> x = Tensor([1.0], fpsim.FP16)
    >>> with rounding_context("up"):
    ...     y = x + 2.0**-20
    >>> float(y.item()) == 1 + 2.0**-10
    True
    """
    rng = _state.as_generator(rng)  # an int seed: one generator for the whole context
    policy = RoundingPolicy(FP64, rounding, overflow, subnormals, tininess, rng, random_bits)
    return _use(_LOCAL.autograd_settings.replace(policy=policy))


def matmul_accumulation(model: Accumulation | str | tuple):
    """Context manager: the accumulation model of matmul, linear and conv2d (see
    :mod:`fpsim.autograd.accumulate`).

    >>> import fpsim
    >>> from fpsim.autograd import Tensor, matmul_accumulation
    >>> a = Tensor([[1.0, 2.0**-11, 2.0**-11]], fpsim.FP16)
    >>> b = Tensor([[1.0], [1.0], [1.0]], fpsim.FP16)
    >>> with matmul_accumulation(("sequential", "fp16")):
    ...     float((a @ b).item())  # 1 + 2**-11 is a tie in fp16: each add rounds to even
    1.0
    >>> float((a @ b).item())  # fp32 accumulation keeps both
    1.0009765625
    """
    base = _LOCAL.autograd_settings
    try:
        key = (base, model)
        ctx = _ACCUMULATION_CONTEXTS.get(key)
    except TypeError:  # an unhashable spec: parsed (and checked) on every call
        key = ctx = None
    if ctx is None:
        ctx = _use(base.replace(accumulation=as_accumulation(model)))
        if key is not None:
            if len(_ACCUMULATION_CONTEXTS) >= _CONTEXTS_MAX:
                _ACCUMULATION_CONTEXTS.clear()
            _ACCUMULATION_CONTEXTS[key] = ctx
    return ctx


# matmul_accumulation's contexts by (the settings active at the call, the model asked for): a
# context object may be entered again (see _use), so a training loop's per-step
# ``with matmul_accumulation(...)`` parses and builds nothing after its first step. Shared by
# threads: an entry is immutable once made, and scoped keeps each thread's entries apart
_ACCUMULATION_CONTEXTS: dict = {}
_CONTEXTS_MAX = 64


def get_rounding() -> Rounding:
    """The active rounding mode of op results.

    >>> get_rounding()
    <Rounding.NEAREST_EVEN: 'nearest_even'>
    """
    return _LOCAL.autograd_settings.policy.rounding


def get_accumulation() -> Accumulation:
    """The active matmul accumulation model.

    >>> get_accumulation().kind
    'fp32'
    """
    return _LOCAL.autograd_settings.accumulation


# ---------------------------------------------------------------------------- promotion
def contains(a: Format, b: Format) -> bool:
    """True when every finite value of ``b`` is a value of ``a`` ("a is at least as wide").

    Precision, the top of the range and the finest quantum must all be covered; special values
    (inf, NaN, -0 of fnuz formats) are not compared.

    >>> import fpsim
    >>> contains(fpsim.FP32, fpsim.BF16), contains(fpsim.FP16, fpsim.BF16)
    (True, False)
    >>> contains(fpsim.FP16, fpsim.FP8_E4M3)
    True
    """
    if a is b:
        return True
    hit = _CONTAINS.get((id(a), id(b)))
    if hit is not None and hit[0] is a and hit[1] is b:  # the ids are of these very objects
        return hit[2]
    result = _contains(a, b)
    if len(_CONTAINS) > 1024:
        _CONTAINS.clear()
    _CONTAINS[(id(a), id(b))] = (a, b, result)
    return result


_CONTAINS: dict = {}  # (id(a), id(b)) -> (a, b, contains(a, b)): ops ask on every call


def _contains(a: Format, b: Format) -> bool:
    if a == b:
        return True
    if a.precision_bits < b.precision_bits or a.max < b.max:
        return False
    # b's finest quantum 2**(b.emin - b.m) must be on a's grid there
    quantum_b = b.emin - b.mantissa_bits
    if max(b.emin, a.emin) - a.mantissa_bits > quantum_b:
        return False
    if not a.subnormals and b.smallest_subnormal < a.smallest_normal:
        return False
    return True


_COMMON = (FP16, BF16, FP32, FP64)


def promote_formats(*fmts: Format) -> Format:
    """The result format of an op mixing formats: the one that contains the others (see
    :func:`contains`), else the narrowest of fp16, bf16, fp32, fp64 containing all (fp16 + bf16
    -> fp32, as PyTorch; e4m3 + e5m2 -> fp16).

    >>> import fpsim
    >>> promote_formats(fpsim.FP16, fpsim.FP32).name, promote_formats(fpsim.FP16, fpsim.BF16).name
    ('fp32', 'fp32')
    """
    out = fmts[0]
    for f in fmts[1:]:
        if f is out or f == out or contains(out, f):  # identity first: == compares fields
            continue
        if contains(f, out):
            out = f
            continue
        out = next(c for c in _COMMON if contains(c, out) and contains(c, f))
    return out


# ------------------------------------------------------------------------------ rounding
def plain_rounding() -> bool:
    """Whether op results round the plain way: nearest even, IEEE overflow and subnormals, and
    no IEEE flags to record (round_to records them), so a native cast gives round_to's result:
    the condition of the fast paths (accumulate.finish, add_grads, functional's fp16 paths).

    >>> plain_rounding()
    True
    """
    return _LOCAL.autograd_settings.plain and not _FLAG_STACK.get()


def round_to(x: np.ndarray, fmt: Format, rounding: Rounding | str | None = None) -> np.ndarray:
    """Round computed values ``x`` once to ``fmt`` by the active policy
    (:func:`rounding_context`), returning the format's storage array.

    ``x`` is float64 (values computed exactly or in float64), or an array already holding values
    of ``fmt`` (returned unchanged), or float32 values whose rounding is innocuous (an op may
    pass float32 only under the :data:`F32_SAFE` rule). ``rounding`` overrides the context's
    mode (construction always uses nearest even). Inside a :func:`fpsim.flag_context` the
    rounding records its IEEE flags there.

    >>> import fpsim
    >>> round_to(np.array([0.1]), fpsim.FP16).dtype
    dtype('float16')
    """
    sd = fmt.storage_dtype
    if x.dtype == sd and fmt.dtype is not None:
        return x  # values already of the format
    s = _LOCAL.autograd_settings
    flags = bool(_FLAG_STACK.get())  # flags_active(), read once (round_to is per op)
    if rounding is None and fmt is FP16 and s.plain and not flags:
        # fp16 training's case, first: the plain path below, without its other tests
        if x.dtype == _F64:
            return f64_to_f16(x)
        if x.dtype == _F32:
            return f32_to_f16(x)
    pol = s.policy
    if rounding is not None and not isinstance(rounding, Rounding):
        rounding = as_rounding(rounding)
    if rounding is None or rounding is pol.rounding:
        rounding, plain = None, s.plain  # None: the context's own mode (policy_for's key)
    else:
        plain = native_rounding(s.policy_for(fmt, rounding))
    kind = x.dtype.kind
    if flags:
        plain = False  # fpsim.cast computes the IEEE flags and records them in the contexts
    if (kind == "f" and x.dtype.itemsize <= 8) or kind == "V":  # ints, long double: cast below
        if x.dtype != np.float64 and x.dtype != np.float32:
            x = widen(x)
        if plain:
            if fmt is FP16 or fmt == FP16:  # NumPy's cast is ~30x slower on fp16 subnormals
                return f64_to_f16(x) if x.dtype == np.float64 else f32_to_f16(x)
            # formats whose native cast is round's nearest even: rounding.native's one table
            if fmt in NATIVE_CAST_FORMATS:  # (one rounding in every ml_dtypes version)
                return native_cast(x, sd)
            if fmt == FP64:
                return x.astype(np.float64)
        if fmt == FP64 and x.dtype == np.float64 and pol.subnormals is Subnormals.KEEP:
            return x  # float64 values are fp64 values in every mode
    return cast(x, policy=s.policy_for(fmt, rounding))


def widen(x: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Exact conversion of stored values to float64 (or float32 for formats it holds); float16
    goes through a 65536-entry table (NumPy's cast is slow on fp16 subnormals).

    >>> widen(np.array([2.0**-24], dtype=np.float16))
    array([5.96046448e-08])
    """
    if x.dtype == dtype:
        return x
    if x.dtype == np.float16:
        return f16_to_wide(x, dtype)
    if x.dtype.kind not in "fV":
        raise TypeError(f"expected floating-point values, got dtype {x.dtype}")
    # the registry fpsim.rounding.fast.WIDENINGS' rows (each switches to astype when small)
    if x.dtype == _BF16_DTYPE:
        return widen_bf16(x, dtype)  # a shift: bf16 is float32's top half
    if table_cast_ok(x.dtype) and np.dtype(dtype) in (_F64, _F32):
        return widen_byte(x, dtype)  # fp8 / fp6 / fp4: a 256-entry table, ~5x astype
    # the cast is exact, but a signalling NaN (fp32 tensors and ml_dtypes formats store them)
    # sets the FPU's invalid flag on the way, which NumPy reports as a RuntimeWarning that
    # means nothing here
    with np.errstate(invalid="ignore"):
        return x.astype(dtype)


def bf16_sum32(op: np.ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``op(a, b)`` (np.add or np.subtract) of two bf16 storage arrays, rounded to bf16 with
    nearest even, computed in float32 and rounded by the bits: the float64 route's result.
    The float32 result is exact below float32's normal range (a multiple of 2**-133, bf16's
    quantum), else the exact result rounded to 24 >= 2 * 8 + 2 bits, whose bf16 rounding is
    the exact result's (Figueroa's theorem), and float32's overflow is bf16's. None where it
    does not pay (below ``BF16_BITS_MIN`` elements) or a NaN is met (the float32 and float64
    adds may pick different payloads): the caller takes the float64 route. The caller checks
    plain rounding and the formats.

    >>> x = np.array([1.0, 2.0**-8], np.float32).astype(_BF16_DTYPE)
    >>> bf16_sum32(np.add, x, x) is None  # two elements: the float64 route
    True
    """
    if max(a.size, b.size) < BF16_BITS_MIN:
        return None
    return bf16_by_bits(op(widen(a, np.float32), widen(b, np.float32)))


# ---------------------------------------------------------------------- autocast hook
# The autocast state lives here, in the autograd layer, so the ops can consult it without
# importing fpsim.amp: fpsim.amp.autocast installs a cast policy, a callable
# ``policy(op_name, args) -> args``, for its region (None: no autocast).
_AUTOCAST_HOOK: contextvars.ContextVar = _state.autocast_hook  # ambient state: fpsim.state


def get_autocast_hook():
    """The active autocast cast policy, or None outside autocast regions.

    >>> get_autocast_hook() is None
    True
    """
    return _AUTOCAST_HOOK.get()


def set_autocast_hook(hook) -> contextvars.Token:
    """Install ``hook`` (a callable ``hook(op, args) -> args``, or None); returns the token
    that :func:`reset_autocast_hook` takes to restore the previous one."""
    return _AUTOCAST_HOOK.set(hook)


def reset_autocast_hook(token: contextvars.Token) -> None:
    """Restore the hook active before the :func:`set_autocast_hook` that gave ``token``."""
    _AUTOCAST_HOOK.reset(token)


def autocast_args(op: str, *args):
    """What the autocast-aware ops call first: their arguments as the active cast policy
    casts them for ``op`` (unchanged outside autocast). One argument gives one value back,
    several a tuple.

    >>> autocast_args("exp", 1.0), autocast_args("add", 1.0, 2.0)
    (1.0, (1.0, 2.0))
    """
    hook = _AUTOCAST_HOOK.get()
    if hook is not None:
        args = hook(op, args)
    return args[0] if len(args) == 1 else args


def check_same_format(op: str, *tensors) -> None:
    """PyTorch's rule for matmul, linear and conv2d: the operands (and a bias) must have one
    format; outside an autocast region (:class:`fpsim.amp.autocast`, where mixing is allowed
    and the result takes the promoted format) a mix is a TypeError, so that a bf16 model fed
    fp32 data does not silently compute in fp32. ``None`` entries (no bias) are skipped.

    >>> import fpsim
    >>> check_same_format("matmul", fpsim.Tensor([1.0], "bf16"), fpsim.Tensor([1.0], "bf16"))
    """
    fmts = [t.fmt for t in tensors if t is not None]
    if all(f is fmts[0] or f == fmts[0] for f in fmts[1:]) or _AUTOCAST_HOOK.get() is not None:
        return
    names = " and ".join(f.name for f in fmts)
    raise TypeError(
        f"{op}: operands have different formats ({names}); as PyTorch, matmul / linear / "
        f"conv2d do not mix formats: convert one with .to(fmt) (a module with "
        f"module.to(fmt)), or compute under fpsim.amp.autocast, where mixing is allowed")
