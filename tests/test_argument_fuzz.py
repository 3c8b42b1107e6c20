"""Bad arguments, as a class: every public function and class of the modules below is called as
its docstring examples call it, with one argument at a time swapped for a bad value (a string,
None, an object, a complex, a ragged list, NaN, -1, 10**30, 1.5, an empty array, True, a dict).
Whatever it does, it must not hang, and an error must be fpsim's own (raised in fpsim's code)
of a type that says what is wrong (TypeError, ValueError, OverflowError, IndexError,
LookupError), never the AttributeError of a method called on the bad value nor an error from
deep inside NumPy. NumPy's AxisError ("axis 1 is out of bounds for array of dimension 0"), its
"Maximum allowed dimension exceeded", Python's "expected str, bytes or os.PathLike object" and
the OS's "No such file or directory" are their own clear words and are let through; warnings
are errors (a complex value cast to a real one loses its imaginary part silently). It also
fails when a call closes a standard stream (an int taken for a path is a file descriptor:
load_hardware_file(True) closed standard output). This sweep found the classes fixed with it:
ragged lists and unbroadcastable shapes in the integer, encoding, arithmetic, amp and quant
layers, an axis beyond any array, a hang in optimal_checkpoint_segments, objects of the wrong
kind (a model, a mapping, histograms, batch_norm's running statistics, an MX format, a ZeRO
engine, an observer, an experiment's config or result, a hardware file, double_quantize's
result, the ranks' arrays), unchecked counts in make_blobs, and complex values cut silently
(fp8_dequantize's q, a zero point, adam_step_flat's hyperparameters). A second sweep gives
size-like arguments an absurd size (10**12) and scale-like ones a scale float32 cannot store
(1e-50, 1e50): it found mx.quantize's block_size and per_tensor_scale, make_blobs,
minibatches, the layers' sizes, the rounding figures' n and Communicator's world_size
allocating terabytes, and the quantizers' scales overflowing their float32 storage. The
command line's plumbing (fpsim.cli: configure_parser, run_cli) takes its own parser's
Namespace and is not swept here (tests/test_cli_sweep.py sweeps it); nor are calls that run as
long as they were asked to (ASKED). Besides the arguments an example gives, each keyword it
leaves at its default is also set to each bad value in turn."""

from __future__ import annotations

import ast
import copy
import doctest
import importlib
import inspect
import os
import re
import signal
import traceback
from pathlib import Path

import matplotlib
import numpy as np
import pytest

try:
    import resource
except ImportError:  # not on Windows
    resource = None

MODULES = ["fpsim.rounding", "fpsim.arithmetic", "fpsim.encoding", "fpsim.integer",
           "fpsim.reductions", "fpsim.formats", "fpsim.modes", "fpsim.flags", "fpsim.datasets",
           "fpsim.autograd.functional", "fpsim.autograd.conv", "fpsim.mx", "fpsim.tensorcore",
           "fpsim.tensorcore.gpus", "fpsim.tensorcore.model", "fpsim.nn", "fpsim.optim",
           "fpsim.amp", "fpsim.quant", "fpsim.memory", "fpsim.distributed", "fpsim.viz",
           "fpsim.training", "fpsim.state", "fpsim.models", "fpsim.probe"]
BAD = ["'abc'", "None", "object()", "1j", "[1.0, [2.0]]", "float('nan')", "-1", "10**30",
       "1.5", "np.array([])", "True", "{}"]
CLEAR = (TypeError, ValueError, OverflowError, IndexError, LookupError)
# NumPy's and Python's own clear words, let through from deep inside them: an axis out of
# range, a size no array can have (a dimension of 10**30), a path that is not one
THEIRS = ("Maximum allowed dimension exceeded", "Maximum allowed size exceeded",
          "expected str, bytes or os.PathLike object")
# calls that run as long as they were asked to: not hangs, and not run here
ASKED = {
    "fpsim.quant.run_experiment(0=None)": "None is the full default experiment (minutes)",
    "fpsim.datasets.minibatches(epochs=10**30)": "10**30 epochs of batches, yielded as asked",
    "fpsim.distributed.Communicator(0=10**30)": "10**30 simulated ranks, made as asked",
    "fpsim.distributed.ZeroEngine(world_size=10**30)": "10**30 simulated ranks, made as asked",
}
FPSIM = str(Path(importlib.import_module("fpsim").__file__).parent)


def _is_call_of(node: ast.AST, name: str) -> bool:
    f = getattr(node, "func", None)
    return isinstance(node, ast.Call) and (
        (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute)
                                                       and f.attr == name))


def _examples():
    """(module, name, namespace before the example, parsed example) per example calling it."""
    matplotlib.use("Agg")
    for mod_name in MODULES:
        mod = importlib.import_module(mod_name)
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or not obj.__doc__:
                continue
            ns = {"np": np, **vars(mod), name: obj}
            for ex in doctest.DocTestParser().get_examples(obj.__doc__):
                tree = ast.parse(ex.source)
                if any(_is_call_of(n, name) for n in ast.walk(tree)):
                    yield mod_name, name, dict(ns), tree, obj
                try:  # its setup for the next (an example may show an error on purpose)
                    exec(compile(ex.source, "<doctest>", "exec"), ns)
                except Exception:  # noqa: BLE001 - what the example shows, not this test's
                    pass


def _swapped(tree: ast.Module, name: str, obj: object, bad_values=BAD, only=None):
    """The example with one argument of its first call of ``name`` swapped for a bad value, or
    with one more keyword argument (one the example leaves at its default) set to a bad value.
    Bool flags are left out: fpsim takes their truth value (flags="no" is True), where NumPy
    and Python's builtins want an int and PyTorch a bool; a strict rule for its ~160 bool
    parameters is not decided yet."""
    call = next(n for n in ast.walk(tree) if _is_call_of(n, name))
    slots = [("pos", i) for i in range(len(call.args))] + [("kw", k.arg) for k in call.keywords
                                                            if k.arg]
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        sig = None
    names = list(sig.parameters) if sig is not None else []
    given = {k.arg for k in call.keywords}
    if sig is not None:
        for i, (pn, p) in enumerate(sig.parameters.items()):
            if pn in ("self", "args", "kwargs") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if pn in given or (i < len(call.args) and p.kind != p.KEYWORD_ONLY):
                continue
            if p.default is inspect.Parameter.empty or isinstance(p.default, bool):
                continue
            slots.append(("add", pn))
    for kind, key in slots:
        pname = names[key] if kind == "pos" and key < len(names) else key
        if only is not None and not (isinstance(pname, str) and only(pname)):
            continue
        for bad in bad_values:
            t = copy.deepcopy(tree)
            c = next(n for n in ast.walk(t) if _is_call_of(n, name))
            value = ast.parse(bad, mode="eval").body
            if kind == "pos":
                c.args[key] = value
            elif kind == "add":
                c.keywords.append(ast.keyword(arg=key, value=value))
            else:
                next(k for k in c.keywords if k.arg == key).value = value
            yield f"{key}={bad}", ast.fix_missing_locations(t)


def _timeout(signum, frame):
    raise TimeoutError


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM to catch a hang")
@pytest.mark.filterwarnings("error")  # NumPy's ComplexWarning: a value silently cut
def test_bad_arguments_get_fpsim_errors_that_name_the_problem(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    monkeypatch.chdir(tmp_path)  # a swapped-in 'abc' is a file name to write_hardware_file
    failures, calls = [], 0
    old = signal.signal(signal.SIGALRM, _timeout)
    try:
        for mod_name, name, ns, tree, obj in _examples():
            for label, swapped in _swapped(tree, name, obj):
                call = f"{mod_name}.{name}({label})"
                if call in ASKED:
                    continue
                calls += 1
                signal.alarm(10)
                try:
                    exec(compile(swapped, "<example>", "exec"), dict(ns))
                except TimeoutError:
                    failures.append(f"{call}: hung")
                except Exception as e:  # noqa: BLE001 - classified below
                    where = traceback.extract_tb(e.__traceback__)[-1].filename
                    if where == "<example>":
                        continue  # the call returned; the example's next step failed on it
                    clear = isinstance(e, CLEAR) and where.startswith(FPSIM)
                    theirs = isinstance(e, (np.exceptions.AxisError, OSError)) or isinstance(
                        e, (TypeError, ValueError)) and any(w in str(e) for w in THEIRS)
                    if not (clear or theirs):
                        failures.append(f"{call}: {type(e).__name__} in {Path(where).name}: "
                                        f"{str(e)[:80]}")
                finally:
                    signal.alarm(0)
                    for fd in (0, 1, 2):  # an int taken for a path is a file descriptor
                        try:
                            os.fstat(fd)
                        except OSError:
                            failures.append(f"{call}: closed file descriptor {fd}")
                    plt.close("all")
    finally:
        signal.signal(signal.SIGALRM, old)
    assert calls > 1000  # the sweep ran over the modules' examples
    assert not failures, "\n".join(failures)


# Values that look harmless and are not: a size that implies an absurd allocation (10**12
# values: mx.quantize(block_size=10**12) tried to allocate 3.6 TiB), and a scale that
# underflows or overflows in the format it is stored in (per_tensor_scale=1e-50 became 0 in
# float32 and dequantize() returned zeros). Each goes to the arguments its name says it is;
# the address space is capped meanwhile, so an allocation that is tried fails at once
# (MemoryError: a failure here) instead of swapping. The command line's negative-looking
# values (-inf, -1e-5) are swept by tests/test_cli_sweep.py, every option of every command.
SIZE_LIKE = re.compile(r"(^|_)(size|sizes|n|num|length|width|block|rank|dim|chunk)(_|$)")
SCALE_LIKE = re.compile(r"scale")
ABSURD = {"size": (["10**12"], SIZE_LIKE.search), "scale": (["1e-50", "1e50"],
                                                          SCALE_LIKE.search)}


@pytest.mark.skipif(not hasattr(signal, "SIGALRM") or resource is None,
                    reason="needs SIGALRM and an address-space limit")
@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("kind", sorted(ABSURD))
def test_absurd_sizes_and_unstorable_scales_are_refused(tmp_path, monkeypatch, kind):
    import matplotlib.pyplot as plt
    monkeypatch.chdir(tmp_path)
    values, only = ABSURD[kind]
    failures, calls = [], 0
    old = signal.signal(signal.SIGALRM, _timeout)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        used = int(fh.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + 4 * 2**30, hard))
    try:
        for mod_name, name, ns, tree, obj in _examples():
            for label, swapped in _swapped(tree, name, obj, values, only):
                call = f"{mod_name}.{name}({label})"
                if call in ASKED:
                    continue
                calls += 1
                signal.alarm(10)
                try:
                    exec(compile(swapped, "<example>", "exec"), dict(ns))
                except TimeoutError:
                    failures.append(f"{call}: hung")
                except MemoryError:
                    failures.append(f"{call}: tried to allocate it (MemoryError)")
                except Exception as e:  # noqa: BLE001 - classified below
                    where = traceback.extract_tb(e.__traceback__)[-1].filename
                    clear = isinstance(e, CLEAR) and where.startswith(FPSIM)
                    theirs = isinstance(e, (TypeError, ValueError)) and any(
                        w in str(e) for w in THEIRS)
                    if where != "<example>" and not (clear or theirs):
                        failures.append(f"{call}: {type(e).__name__} in {Path(where).name}: "
                                        f"{str(e)[:80]}")
                finally:
                    signal.alarm(0)
                    plt.close("all")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, old)
    assert calls > 20  # the sweep found arguments of that kind
    assert not failures, "\n".join(failures)
