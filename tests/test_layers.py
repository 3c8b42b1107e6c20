"""Layer order and import cost (issue 20).

The layer contracts live in pyproject.toml ([tool.importlinter]); this test runs them so a new
upward import fails the suite. A second test checks that ``import fpsim`` stays light: it must
not pull in matplotlib, tqdm or the training / plotting stack, and it prints its import time.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(lint).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    proc = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-4000:]


HEAVY = ("matplotlib", "tqdm", "fpsim.training", "fpsim.viz", "fpsim.autograd", "fpsim.nn",
         "fpsim.optim", "fpsim.functional")

_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import fpsim
dt = time.perf_counter() - t0
heavy = {heavy!r}
loaded = [m for m in heavy if m in sys.modules]
print(json.dumps({{"seconds": dt, "loaded": loaded}}))
"""


def test_import_fpsim_is_light():
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"import fpsim: {result['seconds'] * 1e3:.0f} ms (fresh interpreter)")
    assert result["loaded"] == [], f"import fpsim loaded {result['loaded']}"


def test_lazy_names_load_on_first_use():
    """The autograd names of ``fpsim`` (issue 35 item 5: loaded on first use) are the objects
    of their home modules, listed by dir(), and reached by ``from fpsim import *``."""
    import fpsim
    import fpsim.autograd as ag
    from fpsim.autograd.checkpoint import checkpoint

    assert fpsim.Tensor is ag.Tensor and fpsim.no_grad is ag.no_grad
    assert fpsim.checkpoint is checkpoint
    assert fpsim.nn.Linear.__module__ == "fpsim.nn.layers"
    assert {"Tensor", "nn", "optim", "checkpoint"} <= set(dir(fpsim))
    space: dict = {}
    exec("from fpsim import *", space)
    assert all(name in space for name in fpsim.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Tensr'"):
        fpsim.Tensr  # noqa: B018


def _tensorcore_graph():
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter "
                                "(pip install -e '.[test]')")
    graph = grimp.build_graph("fpsim", cache_dir=None)
    return graph, sorted(graph.find_descendants("fpsim.tensorcore") | {"fpsim.tensorcore"})


def test_tensorcore_has_no_import_circle():
    """No two modules of fpsim.tensorcore import each other, directly or through a chain (any
    import statement counts, also one inside a function), and none takes a private name from
    another (issue 20: model.py <-> explain.py was a circle; ``_dot_rows`` is now the internal
    API ``model.dot_rows``)."""
    import itertools

    graph, mods = _tensorcore_graph()
    assert "fpsim.tensorcore.model" in mods and "fpsim.tensorcore.accuracy" in mods
    circles = [(a, b, graph.find_shortest_chain(a, b), graph.find_shortest_chain(b, a))
               for a, b in itertools.combinations(mods, 2)
               if graph.chain_exists(a, b) and graph.chain_exists(b, a)]
    assert circles == [], circles
    private = [(imp, m, d["line_contents"]) for m in mods
               for imp in graph.find_modules_that_directly_import(m) if imp in mods
               for d in graph.get_import_details(importer=imp, imported=m)
               if re.search(r"import\s+(\(?\s*)?_\w|,\s*_\w", d["line_contents"])]
    assert private == [], private


def _import_circles(graph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components (more than one module) of the direct-import graph among
    ``modules``: each is an import circle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)
                                                & modules))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        circles.append(sorted(comp))
    return circles


def test_no_import_circle_anywhere_in_fpsim():
    """No modules of fpsim import each other in a circle, directly or through a chain (any
    import statement counts, also one inside a function): issue 20 item 2 opened the last ones
    (autograd conv <-> functional <-> tensor, tensorcore model <-> explain, training.experiment
    <-> viz.training)."""
    pytest.importorskip("grimp")
    import grimp

    graph = grimp.build_graph("fpsim", cache_dir=None)
    modules = set(graph.modules)
    assert "fpsim.training.experiment" in modules and "fpsim.viz.training" in modules
    assert _import_circles(graph, modules) == []


def test_import_circle_finder_finds_a_circle():
    """The finder above on a graph with a planted circle (a -> b -> c -> a) and a tail."""
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return set(self.edges[m])

    assert _import_circles(Graph(), set(Graph.edges)) == [["a", "b", "c"]]


def _private_imports(root: Path) -> list[str]:
    """Every ``from <fpsim module> import _name`` (dunders aside) in the package's sources,
    relative imports included, as 'file:line name'."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 0 and not (node.module or "").split(".")[0] == "fpsim":
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {name}")
    return found


def test_no_private_names_imported_across_modules(tmp_path):
    """Modules share named internal APIs, never each other's underscore names (issue 20 item 2:
    reductions took eight private names from arithmetic, deepspeed_scaler subclassed
    _ScalerBase, ...). The finder is checked on a planted private import first."""
    pkg = tmp_path / "fpsim"
    pkg.mkdir()
    (pkg / "a.py").write_text("from .b import _hidden, shown\nfrom . import c as _c\n"
                              "from numpy import _globals\n")
    assert _private_imports(pkg) == ["fpsim/a.py:1 _hidden"]
    assert _private_imports(Path(__file__).parents[1] / "fpsim") == []
