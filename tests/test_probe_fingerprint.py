"""fpsim.probe.fingerprint: every modelled unit, treated as a black box, is read back as a
BlockFMA that reproduces it.

The black box is fpsim's model of a named GPU behind a closure (the fingerprint sees only
``fn(A, B, C)``). The unit found must give the black box's results bit for bit on every
recorded row with its formats (tests/data/tensorcore: measured rows, the held-out B200 fp8
rows in open/, the published models run in Octave in octave/), and where the rows were
measured on that GPU, the measured results themselves; and on random and adversarial inputs
drawn here with another seed than the fingerprint's own queries. The whole matrix (every GPU x
every pair) is marked slow; a subset covering each kind of unit runs in the fast suite.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fpsim
import fpsim.tensorcore as tc
from fpsim.encoding import from_bits
from fpsim.probe import FingerprintError, fingerprint

DATA = Path(__file__).parent / "data" / "tensorcore"
FILES = sorted(DATA.glob("*.txt.gz")) + sorted((DATA / "open").glob("*.txt.gz")) + \
    sorted((DATA / "octave").glob("*.txt.gz"))
PAIRS = [(g, *p.split("->")) for g in tc.list_gpus() for p in tc.get_gpu(g).supported()]


def _distinct_units():
    """One (GPU, in, out) per distinct unit: GPUs that share a unit (A30 and A100, H200 and
    H100, the B200 variants' non-fp8 pairs...) are the same black box; the others that share
    it are listed, for the test ids."""
    seen: dict = {}
    for g, fi, fo in PAIRS:
        seen.setdefault((tc.get_gpu(g).unit_for(fi, fo), fi, fo), []).append(g)
    return [(gs[0], fi, fo, gs[1:]) for (_, fi, fo), gs in seen.items()]


DISTINCT = _distinct_units()
#: One of each kind: chained aligned blocks (V100, A100, H100 fp8), fp16 output with a floor,
#: exact sums (MI100), c added to the rounded product sum (B200 fp8, issue 33's rule),
#: pairwise (MI210), late c and odd/even groups (MI300X fp8).
FAST = {("V100", "fp16", "fp16"), ("A100", "bf16", "fp32"), ("H100", "fp8_e4m3", "fp32"),
        ("B200", "fp8_e5m2", "fp32"), ("MI100", "fp16", "fp32"), ("MI210", "bf16", "fp32"),
        ("MI300X", "fp8_e4m3fnuz", "fp32"), ("MI300X", "fp16", "fp32")}


class BlackBox:
    def __init__(self, gpu, fi, fo):
        self._args = dict(gpu=gpu, input_format=fi, output_format=fo)
        self.calls = 0

    def __call__(self, A, B, C):
        self.calls += 1
        return tc.matmul(A, B, C, **self._args)


def _file_pairs():
    out = {}
    for p in FILES:
        g, fi, fo = tc.parse_file_name(p)
        out.setdefault((fpsim.get_format(fi).name, fpsim.get_format(fo).name), []).append(p)
    return out


FILE_PAIRS = _file_pairs()


def _random_rows(fi, fo, rng, rows=200, K=70):
    fi, fo = fpsim.get_format(fi), fpsim.get_format(fo)
    lo = max(fi.emin - fi.mantissa_bits, -40)
    e = rng.integers(lo, min(fi.emax, 40) // 2 + 1, size=(2, rows, K))
    v = rng.uniform(1, 2, size=(2, rows, K)) * np.exp2(e) * rng.choice((-1, 1), (2, rows, K))
    v *= rng.random((2, rows, K)) > 0.1  # some zeros
    A, B = (tc.convert_input(x, fi) for x in v)
    B = B.T.copy()
    # adversarial: the second half cancels the first, to the last bit
    A[::3, K // 2:2 * (K // 2)] = -A[::3, :K // 2]
    B[K // 2:2 * (K // 2), ::3] = B[:K // 2, ::3]
    C = np.asarray(fpsim.round(rng.uniform(-4, 4, size=(rows, rows)) *
                               np.exp2(rng.integers(-30, 30, size=(rows, rows))), fo))
    C[::2] = 0.0
    return A, B, C


def _same_bits(x, y, hf):
    """Equal bit patterns, any NaN equal to any NaN (a NaN's sign and payload are no
    BlockFMA parameter)."""
    fo = fpsim.get_format(hf.output_format)
    nan = np.isnan(from_bits(x, fo)) & np.isnan(from_bits(y, fo))
    return bool(((x == y) | nan).all())


def _check(gpu, fi, fo):
    box = BlackBox(gpu, fi, fo)
    unit = fingerprint(box, fi, fo)
    assert isinstance(unit, tc.BlockFMA)
    # every recorded row with these formats: the black box's results, and measured ones
    files = FILE_PAIRS.get((fpsim.get_format(fi).name, fpsim.get_format(fo).name), [])
    for path in files:
        hf = tc.load_hardware_file(path)
        got = tc.model_results(hf, unit)
        assert _same_bits(got, tc.model_results(hf, gpu), hf), (path.name, unit)
        if hf.gpu == gpu and path.parent == DATA:
            assert _same_bits(got, hf.d_bits, hf), (path.name, unit)
    # random and adversarial inputs, over several blocks
    A, B, C = _random_rows(fi, fo, np.random.default_rng(2026))
    with np.errstate(all="ignore"):
        got = tc.matmul(A, B, C, gpu=unit, input_format=fi, output_format=fo)
        want = box(A, B, C)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
    assert same.all(), (unit, int((~same).sum()))
    return unit, box.calls


@pytest.mark.parametrize("gpu, fi, fo", sorted(FAST))
def test_fingerprint_fast_subset(gpu, fi, fo):
    unit, calls = _check(gpu, fi, fo)
    print(f"{gpu} {fi}->{fo}: {unit!r} in {calls} calls")


def test_every_pair_is_covered():
    """Every GPU x pair of list_gpus() is a distinct unit below or shares one with it."""
    covered = {(g, fi, fo) for g0, fi, fo, others in DISTINCT for g in (g0, *others)}
    assert covered == set(PAIRS) and len(PAIRS) == 94 and len(DISTINCT) == 33


@pytest.mark.slow
@pytest.mark.parametrize("gpu, fi, fo", [(g, fi, fo) for g, fi, fo, _ in DISTINCT
                                         if not any(f[1:] == (fi, fo) and
                                                    tc.get_gpu(f[0]).unit_for(fi, fo) ==
                                                    tc.get_gpu(g).unit_for(fi, fo)
                                                    for f in FAST)],
                         ids=[f"{g}-{fi}-{fo}" + (f"(={'+'.join(o)})" if o else "")
                              for g, fi, fo, o in DISTINCT
                              if not any(f[1:] == (fi, fo) and
                                         tc.get_gpu(f[0]).unit_for(fi, fo) ==
                                         tc.get_gpu(g).unit_for(fi, fo) for f in FAST)])
def test_fingerprint_every_unit(gpu, fi, fo):
    _check(gpu, fi, fo)


def test_finds_the_published_parameters():
    """Where the probes can see a parameter, it is the published one."""
    a100 = fingerprint(BlackBox("A100", "fp16", "fp16"), "fp16", "fp16")
    assert (a100.block_size, a100.extra_bits, a100.min_exponent) == (8, 1, -20)
    assert a100.output_rounding is fpsim.Rounding.NEAREST_EVEN
    h100 = fingerprint(BlackBox("H100", "bf16", "fp32"), "bf16")
    assert (h100.block_size, h100.extra_bits, h100.min_exponent) == (16, 2, -133)
    assert h100.output_rounding is fpsim.Rounding.TOWARD_ZERO


def test_custom_unit_round_trip():
    unit = tc.BlockFMA(8, 3, "nearest_even", -130)
    got = fingerprint(lambda A, B, C: tc.matmul(A, B, C, gpu=unit, input_format="bf16"),
                      "bf16")
    assert got == unit


def _random_products(fi: str, rng) -> tuple[np.ndarray, np.ndarray]:
    """Dot products over the input format's whole exponent range, tiny ones included."""
    fmt = fpsim.get_format(fi)
    e0 = int(rng.integers(2 * fmt.emin - 14, 20))

    def side(shape):
        v = rng.uniform(1, 2, shape) * rng.choice([-1.0, 1.0], shape)
        return np.asarray(fpsim.round(np.ldexp(v, rng.integers(e0 // 2 - 6, e0 // 2 + 6,
                                                                 shape)), fi))

    return side((8, 32)), side((32, 8))


@pytest.mark.parametrize("unit, fi", [
    (tc.BlockFMA(8, 4, "nearest_even", -130, sticky_bit=True), "fp16"),
    (tc.BlockFMA(4, 0, "rz", None, sticky_bit=True), "fp16"),
    (tc.BlockFMA(8, 1, "rz", None, sticky_bit=True), "bf16"),
    (tc.BlockFMA(16, 2, "nearest_even", None, sticky_bit=True), "bf16"),
])
def test_sticky_bit_units_are_found(unit, fi):
    """A sticky bit changes where FPRev's masks cancel: the structure stage tries it (units
    with one were refused before). The unit found equals the unit under test on dot products
    over the whole input range (an fp16 input never reaches the -130 floor)."""
    got = fingerprint(lambda A, B, C: tc.matmul(A, B, C, gpu=unit, input_format=fi), fi)
    assert got.sticky_bit and got.block_size == unit.block_size
    assert got.extra_bits == unit.extra_bits
    rng = np.random.default_rng(3)
    for _ in range(40):
        A, B = _random_products(fi, rng)
        want = tc.matmul(A, B, 0.0, gpu=unit, input_format=fi)
        np.testing.assert_array_equal(tc.matmul(A, B, 0.0, gpu=got, input_format=fi), want)


def test_sticky_bit_with_a_reachable_floor_is_refused():
    """The floor of a sticky unit cannot be placed by the cancellation rows (the sticky bit
    keeps the far term alive): refused clearly, not given a floor its answers do not fix."""
    unit = tc.BlockFMA(16, 2, "nearest_even", -133, sticky_bit=True)
    with pytest.raises(FingerprintError, match="alignment floor"):
        fingerprint(lambda A, B, C: tc.matmul(A, B, C, gpu=unit, input_format="bf16"), "bf16")


@pytest.mark.parametrize("fn", [
    lambda A, B, C: (A.astype(np.float32) @ B.astype(np.float32) + C).astype(np.float64),
    lambda A, B, C: A @ B + C,
    lambda A, B, C: np.asarray(fpsim.round(A @ B + C, "fp32", rounding="up")) + 2.0 ** -20,
])
def test_no_blockfma_fits(fn):
    with pytest.raises(FingerprintError, match="no BlockFMA"):
        fingerprint(fn, "fp16")


def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        fingerprint("H100", "fp16")
    with pytest.raises(FingerprintError, match="shape"):
        fingerprint(lambda A, B, C: 0.0, "fp16")
    with pytest.raises(ValueError, match="format"):
        fingerprint(lambda A, B, C: A @ B + C, "nope")
    with pytest.raises(ValueError, match="outside"):
        fingerprint(lambda A, B, C: A @ B + C, "fp64")
