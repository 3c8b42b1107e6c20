"""The notebooks' jupytext sources are notebooks, not modules: pytest's doctest collection
(``--doctest-modules`` over fpsim/) would import, that is run, each of them.
tests/test_notebooks.py runs the notebooks."""

collect_ignore_glob = ["[0-9][0-9]_*.py"]
