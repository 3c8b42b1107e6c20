"""Mixed-precision training experiments: instrumented runs of a small model on the digits
under the precision recipes of Micikevicius et al. (2018), behind the ``fpsim demo`` /
``fpsim train`` / ``fpsim lm`` commands (:mod:`fpsim.cli.demo`, :mod:`fpsim.cli.train`,
:mod:`fpsim.cli.lm`). It does not import :mod:`fpsim.viz` (nor the other way round): the
command line draws the runs.
"""

from .model import MLP
from .recipes import PRECISIONS, Recipe, get_recipe, parse_loss_scale
from .trainer import RunResult, TrainConfig, train

__all__ = ["MLP", "PRECISIONS", "Recipe", "RunResult", "TrainConfig", "get_recipe",
           "parse_loss_scale", "train"]
