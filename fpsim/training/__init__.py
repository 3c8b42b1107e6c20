"""Mixed-precision training experiments: instrumented runs of a small model on the digits
under the precision recipes of Micikevicius et al. (2018), and the ``fpsim demo`` /
``fpsim train`` commands.
"""

from .model import MLP
from .recipes import PRECISIONS, Recipe, get_recipe, parse_loss_scale
from .trainer import RunResult, TrainConfig, train

__all__ = ["MLP", "PRECISIONS", "Recipe", "RunResult", "TrainConfig", "get_recipe",
           "parse_loss_scale", "train"]
