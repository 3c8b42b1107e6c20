"""``python -m fpsim.cli ARGS``: the ``fpsim`` command (:func:`fpsim.cli.main`); the ranks of
``fpsim zero --engine mpi`` are started this way."""

import sys

from . import main

sys.exit(main())
