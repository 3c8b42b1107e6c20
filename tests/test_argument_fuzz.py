"""Bad arguments, as a class: every public function and class of the modules below is called
as its docstring examples call it, with one argument at a time swapped for a bad value (a
string, None, an object, a complex, a ragged list, NaN, -1, 10**30, 1.5, an empty array, True,
a dict). Whatever it does, it must not hang, and an error must be fpsim's own (raised in
fpsim's code) of a type that says what is wrong (TypeError, ValueError, OverflowError,
IndexError, LookupError), never the AttributeError of a method called on the bad value nor an
error from deep inside NumPy. NumPy's AxisError ("axis 1 is out of bounds for array of
dimension 0") is NumPy's own clear word on an axis and is let through. This sweep found the
classes fixed with it: ragged lists and unbroadcastable shapes in the integer, encoding and
arithmetic layers, an axis beyond any array, a hang in optimal_checkpoint_segments, objects of
the wrong kind for a model, a mapping, histograms, batch_norm's running statistics, an MX
format and a ZeRO engine."""

from __future__ import annotations

import ast
import copy
import doctest
import importlib
import inspect
import signal
import traceback
from pathlib import Path

import matplotlib
import numpy as np
import pytest

MODULES = ["fpsim.rounding", "fpsim.arithmetic", "fpsim.encoding", "fpsim.integer",
           "fpsim.reductions", "fpsim.formats", "fpsim.modes", "fpsim.flags",
           "fpsim.autograd.functional", "fpsim.autograd.conv", "fpsim.mx",
           "fpsim.tensorcore.gpus", "fpsim.tensorcore.model", "fpsim.memory"]
BAD = ["'abc'", "None", "object()", "1j", "[1.0, [2.0]]", "float('nan')", "-1", "10**30",
       "1.5", "np.array([])", "True", "{}"]
CLEAR = (TypeError, ValueError, OverflowError, IndexError, LookupError)
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
                    yield mod_name, name, dict(ns), tree
                exec(compile(ex.source, "<doctest>", "exec"), ns)  # its setup for the next


def _swapped(tree: ast.Module, name: str):
    """The example with one argument of its first call of ``name`` swapped for a bad value."""
    call = next(n for n in ast.walk(tree) if _is_call_of(n, name))
    slots = [("pos", i) for i in range(len(call.args))] + [("kw", k.arg) for k in call.keywords
                                                            if k.arg]
    for kind, key in slots:
        for bad in BAD:
            t = copy.deepcopy(tree)
            c = next(n for n in ast.walk(t) if _is_call_of(n, name))
            value = ast.parse(bad, mode="eval").body
            if kind == "pos":
                c.args[key] = value
            else:
                next(k for k in c.keywords if k.arg == key).value = value
            yield f"{key}={bad}", ast.fix_missing_locations(t)


def _timeout(signum, frame):
    raise TimeoutError


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM to catch a hang")
def test_bad_arguments_get_fpsim_errors_that_name_the_problem():
    import matplotlib.pyplot as plt
    failures, calls = [], 0
    old = signal.signal(signal.SIGALRM, _timeout)
    try:
        for mod_name, name, ns, tree in _examples():
            for label, swapped in _swapped(tree, name):
                calls += 1
                signal.alarm(10)
                try:
                    exec(compile(swapped, "<example>", "exec"), dict(ns))
                except TimeoutError:
                    failures.append(f"{mod_name}.{name}({label}): hung")
                except Exception as e:  # noqa: BLE001 - classified below
                    where = traceback.extract_tb(e.__traceback__)[-1].filename
                    ours = where.startswith(FPSIM) or where == "<example>"
                    clear = isinstance(e, CLEAR) and ours
                    if not (clear or isinstance(e, np.exceptions.AxisError)):
                        failures.append(f"{mod_name}.{name}({label}): {type(e).__name__} in "
                                        f"{Path(where).name}: {str(e)[:80]}")
                finally:
                    signal.alarm(0)
                plt.close("all")
    finally:
        signal.signal(signal.SIGALRM, old)
    assert calls > 1000  # the sweep ran over the modules' examples
    assert not failures, "\n".join(failures)
