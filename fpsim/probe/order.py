"""The accumulation order of a black-box sum, read from outside (FPRev, Xie et al., ATC'25).

Contract: :func:`reveal_order` calls ``fn`` (a function summing a 1-D array of ``n`` values
of ``fmt``) on designed inputs and returns the tree in which it adds them: a nested tuple
whose leaves are the indices 0..n-1; an internal node is the tuple of its children (two for a
two-operand add, more for a multi-term fused adder, such as a tensor core's block). Child
order within a node is free. When ``fn`` is not a sum of its inputs in one fixed tree (an
exact sum such as ``math.fsum``, a sum that reorders by value, an accumulator too wide to be
masked in ``fmt``'s range), it raises :class:`OrderError` saying which check failed.

Method (the paper's masking; facts from the paper, code written here):

- every input is a small unit ``u`` except ``+M`` at leaf i and ``-M`` at leaf j, with
  ``M / u`` beyond any accumulator's reach (2**(53 + bits(n) + 2) where ``fmt``'s range
  allows): every partial sum holding M absorbs the units it meets, in a two-operand add that
  rounds to nearest as in a fused adder that aligns its terms to the largest and truncates.
  M and -M cancel exactly where their paths meet, in the node ``lca(i, j)``; units added
  after that survive. So ``fn(x) / u = n - |leaves under lca(i, j)|``: one call measures the
  size of the smallest subtree holding both leaves.
- the tree is built top-down from those sizes (the paper's FPRev, not its quadratic
  BasicFPRev): for a set S of leaves that is a union of whole subtrees, take its first leaf
  i and measure ``|lca(i, j)|`` for every other j in S (|S| - 1 calls). The distinct sizes
  are i's ancestors, smallest first; the leaves of one size are those that join i's subtree at
  that ancestor, a union of whole subtrees, built the same way. So a sequential sum costs
  n - 1 calls, a balanced one O(n log n), the worst case O(n**2), as in the paper.
- every answer is checked: an integer count in range, and each ancestor's size equal to the
  leaves found under it. The tree is then checked on random inputs: its sums, with every node
  rounded once (to nearest even or toward zero, 11 to 53 bits, a multi-term node aligning its
  terms or adding them exactly), must give ``fn``'s results bit for bit for some one choice.

>>> import numpy as np
>>> reveal_order(lambda x: (x[0] + x[1]) + (x[2] + x[3]), 4)
((0, 1), (2, 3))
>>> reveal_order(lambda x: np.float32(x[2] + x[0]) + x[1], 3, fmt="fp32")
((0, 2), 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..checks import as_int, check_allocation
from ..formats import Format, get_float_format
from ..modes import Rounding
from ..rounding import round as fp_round

__all__ = ["reveal_order", "OrderError", "Tree", "tree_leaves", "build_tree", "tree_nodes"]

#: A summation tree: a leaf index, or the tuple of a node's children.
Tree = int | tuple["Tree", ...]

#: Bits of float64's significand: M must outrun the widest accumulator fn may use.
_WIDEST_ACCUMULATOR = 53
#: Random inputs that check a revealed tree, and their exponent spread (binades).
_CHECK_TRIALS = 12
_CHECK_SPREAD = 10
#: Accumulator precisions (significand bits) and roundings the random check tries.
_CHECK_PRECISIONS = (11, 14, 24, 53)
_CHECK_ROUNDINGS = (Rounding.NEAREST_EVEN, Rounding.TOWARD_ZERO)
#: Alignment widths a multi-term node may keep, as fraction bits beyond the precision's.
_CHECK_ALIGN_EXTRA = (-1, 0, 1, 2, 3)


class OrderError(ValueError):
    """``fn`` is not a sum of its inputs in one fixed tree (or cannot be masked in ``fmt``)."""


# -- the tree builder (shared with the tensor-core fingerprint) ------------------------------

@dataclass
class _Frame:
    leaves: list[int]
    bound: int
    groups: list[tuple[int, list[int]]] = field(default_factory=list)
    k: int = 0
    cur: Tree = 0
    count: int = 1


def build_tree(n: int, lca_sizes: Callable[[int, np.ndarray], np.ndarray]) -> Tree:
    """The tree over leaves 0..n-1 from ``lca_sizes(i, js)``: for leaf i and an int array of
    other leaves, the number of leaves under each ``lca(i, j)`` (FPRev's recursion; see the
    module docstring). Raises :class:`OrderError` when the sizes fit no tree.

    >>> sizes = {(0, 1): 2, (0, 2): 3, (0, 3): 4, (1, 2): 3}
    >>> build_tree(4, lambda i, js: np.array([sizes.get((i, j), 4) for j in js]))
    (((0, 1), 2), 3)
    """
    n = as_int("n", n, 1)
    # an explicit stack, not recursion: a chain (a sequential sum reversed) is n frames deep
    stack = [_Frame(list(range(n)), n)]
    result: list[Tree] | None = None
    while stack:
        fr = stack[-1]
        if result is None:  # a fresh frame: measure its first leaf against the others
            if len(fr.leaves) == 1:
                result = [fr.leaves[0]]
                stack.pop()
                continue
            i, others = fr.leaves[0], np.asarray(fr.leaves[1:])
            sizes = np.asarray(lca_sizes(i, others))
            bad = (sizes < 2) | (sizes > fr.bound)
            if bad.any():
                j = int(others[np.argmax(bad)])
                raise OrderError(
                    f"inconsistent answers: leaves {i} and {j} meet in a subtree of "
                    f"{int(sizes[np.argmax(bad)])} leaves, outside [2, {fr.bound}] (the "
                    f"subtree they were found in): fn is not a sum in one fixed tree")
            fr.cur = i
            fr.groups = [(int(s), [int(j) for j in others[sizes == s]])
                         for s in np.unique(sizes)]
            stack.append(_Frame(fr.groups[0][1], fr.groups[0][0]))
            continue
        forest, result = result, None
        s, group = fr.groups[fr.k]
        fr.count += len(group)
        last = fr.k == len(fr.groups) - 1
        if fr.count == s:
            fr.cur = (fr.cur, *forest)
        elif fr.count < s and last and s == fr.bound:
            # these leaves are only part of a node whose other children lie outside them
            result = [fr.cur, *forest]
            stack.pop()
            continue
        else:
            raise OrderError(
                f"inconsistent answers: leaf {fr.leaves[0]}'s ancestor of {s} leaves holds "
                f"{fr.count} of the leaves examined: fn is not a sum in one fixed tree (an "
                f"exact sum such as math.fsum, or a sum that reorders by value)")
        if last:
            result = [fr.cur]
            stack.pop()
        else:
            fr.k += 1
            stack.append(_Frame(fr.groups[fr.k][1], fr.groups[fr.k][0]))
    assert result is not None and len(result) == 1
    return result[0]


def tree_nodes(tree: Tree) -> list[tuple]:
    """The internal nodes of ``tree``, children before parents (no recursion).

    >>> tree_nodes(((0, 1), 2))
    [(0, 1), ((0, 1), 2)]
    """
    out: list[tuple] = []
    stack: list[tuple[Tree, bool]] = [(tree, False)]
    while stack:
        node, done = stack.pop()
        if isinstance(node, int):
            continue
        if done:
            out.append(node)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(node))
    return out


def tree_leaves(tree: Tree) -> list[int]:
    """The leaves of ``tree`` in the order they appear.

    >>> tree_leaves(((2, 0), 1))
    [2, 0, 1]
    """
    out: list[int] = []
    stack: list[Tree] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, int):
            out.append(node)
        else:
            stack.extend(reversed(node))
    return out


# -- masking a black-box sum -----------------------------------------------------------------

def mask_values(fmt: Format, n: int, *, subnormal: bool = False) -> tuple[float, float]:
    """(M, u): the mask and the unit for ``n`` inputs of ``fmt``: M the largest power of two
    of ``fmt``; u = M / 2**(53 + bits(n) + 2), or ``fmt``'s smallest normal value (smallest
    subnormal with ``subnormal=True``) if that is larger.

    >>> mask_values(get_float_format("fp32"), 100)
    (1.7014118346046923e+38, 3.6893488147419103e+19)
    >>> mask_values(get_float_format("fp16"), 100, subnormal=True)
    (32768.0, 5.960464477539063e-08)
    """
    big = 2.0 ** fmt.emax
    tiny = fmt.smallest_subnormal if subnormal and fmt.subnormals else fmt.smallest_normal
    return big, max(tiny, big * 2.0 ** -(_WIDEST_ACCUMULATOR + n.bit_length() + 2))


def _call(fn: Callable, x: np.ndarray) -> float:
    # the masks are extreme on purpose: a fn that is no sum may overflow on them, which the
    # checks below then report (not NumPy's RuntimeWarning)
    with np.errstate(all="ignore"):
        out = np.asarray(fn(x.copy()))
    if out.size != 1:
        raise OrderError(f"fn must return the sum as a scalar, got an array of shape "
                         f"{out.shape}")
    try:
        return float(out.reshape(()))
    except (TypeError, ValueError):
        raise OrderError(f"fn must return a real scalar, got {out!r}") from None


def reveal_order(fn: Callable[[np.ndarray], object], n: int, *,
                 fmt: Format | str = "fp32") -> Tree:
    """The accumulation tree of ``fn``, which sums a 1-D array of ``n`` values of ``fmt``
    (passed in ``fmt``'s storage dtype: float32 for fp32). See the module docstring.

    >>> import numpy as np
    >>> reveal_order(np.sum, 4)  # NumPy adds blocks of fewer than 8 values in order
    (((0, 1), 2), 3)
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking a 1-D array and returning its sum, "
                        f"got {fn!r}")
    n = as_int("n", n, 1)
    fmt = get_float_format(fmt)
    store = fmt.storage_dtype
    check_allocation("n", n, np.dtype(store).itemsize)  # a clear error before NumPy's
    problem = ""
    for subnormal in (True, False):  # the widest M / u first; a normal u if fn flushes
        big, unit = mask_values(fmt, n, subnormal=subnormal)
        ones = np.full(n, unit, dtype=store)
        got = _call(fn, ones)
        if got != n * unit:
            problem = (f"fn of {n} equal values {unit!r} returned {got!r}, not their sum "
                       f"{n * unit!r}: fn is not a sum of its inputs (or its accumulator "
                       f"cannot count to {n})")
            continue
        if n == 1:
            return 0
        # M must absorb the units wherever it meets them: first, last, and in between
        for at in sorted({0, n // 2, n - 1}):
            x = ones.copy()
            x[at] = big
            got = _call(fn, x)
            if got != big:
                break
        if got != big:
            problem = (f"the mask {big!r} did not absorb {n - 1} units {unit!r} (fn returned "
                       f"{got!r}): fn adds more exactly than {fmt.name}'s range can mask (an "
                       f"exact sum such as math.fsum, or an accumulator wider than "
                       f"{fmt.name}'s range allows)")
            continue
        problem = ""
        break
    if problem:
        raise OrderError(problem)

    def lca_sizes(i: int, js: np.ndarray) -> np.ndarray:
        out = np.empty(len(js), dtype=np.int64)
        for k, j in enumerate(js):
            x = ones.copy()
            x[i], x[j] = big, -big
            count = _call(fn, x) / unit
            if not (math.isfinite(count) and count == int(count) and 0 <= count <= n - 2):
                raise OrderError(
                    f"fn with +{big!r} at {i}, -{big!r} at {j} and {unit!r} elsewhere returned "
                    f"{count * unit!r}, not a whole number (0..{n - 2}) of units: fn is not a "
                    f"sum in one fixed tree that rounds to nearest or aligns and truncates")
            out[k] = n - int(count)
        return out

    tree = build_tree(n, lca_sizes)
    _cross_check(tree, n, lca_sizes)
    if any(len(node) > 2 for node in tree_nodes(tree)):
        # a symmetric fn (one that sorts its inputs) looks like one n-term fused adder to
        # the masks: its sums must then be those of a fused adder
        check_tree(fn, tree, n, fmt)
    return tree


def lca_size_table(tree: Tree) -> Callable[[int, int], int]:
    """``size(i, j)``: the number of leaves under ``lca(i, j)`` in ``tree``."""
    depth_path: dict[int, list[tuple]] = {}
    sizes: dict[int, int] = {}
    for node in tree_nodes(tree):
        sizes[id(node)] = sum(1 if isinstance(c, int) else sizes[id(c)] for c in node)
    stack: list[tuple[Tree, list[tuple]]] = [(tree, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, int):
            depth_path[node] = path
        else:
            stack.extend((c, [*path, node]) for c in node)

    def size(i: int, j: int) -> int:
        common = [a for a, b in zip(depth_path[i], depth_path[j], strict=False) if a is b]
        return sizes[id(common[-1])]
    return size


def _cross_check(tree: Tree, n: int, lca_sizes: Callable) -> None:
    """Pairs FPRev did not measure must meet where the tree says (one call per leaf)."""
    size = lca_size_table(tree)
    rng = np.random.default_rng(n)
    for i in range(n):
        j = int(rng.integers(n - 1))
        j += j >= i
        got = int(lca_sizes(i, np.array([j]))[0])
        if got != size(i, j):
            raise OrderError(
                f"inconsistent answers: leaves {i} and {j} meet in a subtree of {got} leaves, "
                f"the revealed tree says {size(i, j)}: fn is not a sum in one fixed tree "
                f"(e.g. it reorders its inputs by value)")


# -- checking a tree on random inputs --------------------------------------------------------

def _random_inputs(fmt: Format, n: int, trials: int, rng: np.random.Generator) -> np.ndarray:
    """(trials, n) exact values of ``fmt``: random signs and significands over a few binades,
    small enough that no sum of n of them overflows ``fmt``."""
    hi = min(_CHECK_SPREAD, math.floor(math.log2(fmt.max / (4 * n))))
    lo = max(hi - _CHECK_SPREAD, fmt.emin)
    e = rng.integers(lo, hi + 1, size=(trials, n))
    v = rng.uniform(1.0, 2.0, size=(trials, n)) * np.exp2(e)
    v *= rng.choice((-1.0, 1.0), size=(trials, n))
    return np.asarray(fp_round(v, fmt))


@dataclass(frozen=True)
class _Semantics:
    precision: int
    rounding: Rounding
    align_extra: int | None  # multi-term nodes: None adds exactly, else F = precision - 1 + this


def _round_p(v: np.ndarray, precision: int, rounding: Rounding) -> np.ndarray:
    if precision >= _WIDEST_ACCUMULATOR:
        return v
    return np.asarray(fp_round(v, Format(11, precision - 1), rounding=rounding))


def evaluate_tree(tree: Tree, x: np.ndarray, sem: _Semantics) -> np.ndarray:
    """The tree's sums of the rows of ``x`` (trials, n), each node rounded once by ``sem``."""
    val: dict[int, np.ndarray] = {}
    for node in tree_nodes(tree):
        kids = np.stack([x[:, c] if isinstance(c, int) else val[id(c)] for c in node], axis=1)
        if len(node) > 2 and sem.align_extra is not None:
            frac = sem.precision - 1 + sem.align_extra
            _, e = np.frexp(kids)
            top = np.where(kids != 0, e - 1, -10**6).max(axis=1, keepdims=True)
            scale = np.exp2((frac - top).astype(np.float64))
            kids = np.trunc(kids * scale) / scale
        total = kids.sum(axis=1) if len(node) > 2 else kids[:, 0] + kids[:, 1]
        val[id(node)] = _round_p(total, sem.precision, sem.rounding)
    return val[id(tree)] if not isinstance(tree, int) else x[:, tree]


def check_tree(fn: Callable, tree: Tree, n: int, fmt: Format,
               rng: np.random.Generator | None = None) -> _Semantics:
    """The accumulator rule under which ``tree`` reproduces ``fn`` on random inputs; raises
    :class:`OrderError` when none does."""
    rng = np.random.default_rng(0) if rng is None else rng
    x = _random_inputs(fmt, n, _CHECK_TRIALS, rng)
    store = fmt.storage_dtype
    got = np.array([_call(fn, row.astype(store)) for row in x])
    multi = any(len(nd) > 2 for nd in tree_nodes(tree))
    for p in _CHECK_PRECISIONS:
        if p < fmt.precision_bits:
            continue
        for r in _CHECK_ROUNDINGS:
            if p >= _WIDEST_ACCUMULATOR and (r is not Rounding.NEAREST_EVEN or multi):
                continue
            for extra in ((None, *_CHECK_ALIGN_EXTRA) if multi else (None,)):
                sem = _Semantics(p, r, extra)
                if np.array_equal(evaluate_tree(tree, x, sem), got):
                    return sem
    raise OrderError(
        f"the revealed tree does not reproduce fn on random inputs under any accumulator "
        f"(round to nearest even or toward zero, {min(_CHECK_PRECISIONS)} to "
        f"{_WIDEST_ACCUMULATOR} bits, multi-term nodes exact or aligned): fn is not a sum in "
        f"one fixed tree (e.g. it reorders its inputs by value)")
