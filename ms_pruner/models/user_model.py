"""A user's own torch model for ``tune-model --model FILE.py:FUNCTION``.

FUNCTION takes no arguments and returns ``(module, example)``: a ``torch.nn.Module`` and its
example input, one tensor or a tuple of them (token ids and a mask, say). The model is traced at
the example's shapes, so those are the shapes tuned. As with the named models, the module stays
fp32 as the reference and ``--dtype float16`` makes the Relax module mixed precision; a module
holding a ``Conv2d`` has its convolutions converted to NHWC on a GPU (the tensor-core layout).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Callable, Optional, Tuple

from ..errors import UserError


@dataclasses.dataclass(frozen=True)
class ModelFile:
    """A ``--model`` value naming a file's function: ``path/to/file.py:FUNCTION`` taken apart."""

    path: str
    function: str

    @property
    def label(self) -> str:
        """The model's name in reports and work dirs: ``file:FUNCTION``."""
        return f"{os.path.basename(self.path)[:-3]}:{self.function}"


def model_file(name: str) -> Optional[ModelFile]:
    """``name`` as a ModelFile, or None where it names no file's function (a named model)."""
    path, _, function = name.rpartition(":")
    return ModelFile(path, function) if path.endswith(".py") and function else None


def example_inputs(example) -> tuple:
    """A model's example input as a tuple of tensors (a lone tensor is a tuple of one)."""
    return tuple(example) if isinstance(example, (tuple, list)) else (example,)


def load_model_file(model: ModelFile) -> Tuple[object, object, Callable]:
    """(fp32 torch module in eval mode, its example input, FUNCTION) of ``model``."""
    import torch  # lazy: torch only where a model is built

    path, function_name = model.path, model.function
    name = f"{path}:{function_name}"
    if not os.path.isfile(path):
        raise UserError(f"--model {name}: no file '{path}'")
    loader = importlib.util.spec_from_file_location(f"ms_pruner_user_model_{abs(hash(path))}", path)
    source = importlib.util.module_from_spec(loader)
    try:
        loader.loader.exec_module(source)
    except Exception as err:  # pylint: disable=broad-except  # the user's file: its error, one line
        raise UserError(f"--model {name}: importing '{path}' failed: {type(err).__name__}: {err}") from err
    function = getattr(source, function_name, None)
    if not callable(function):
        raise UserError(f"--model {name}: '{path}' defines no function '{function_name}'")
    torch.manual_seed(0)
    try:
        built = function()
    except Exception as err:  # pylint: disable=broad-except
        raise UserError(f"--model {name}: {function_name}() failed: {type(err).__name__}: {err}") from err
    if not (isinstance(built, (tuple, list)) and len(built) == 2 and isinstance(built[0], torch.nn.Module)
            and all(isinstance(x, torch.Tensor) for x in example_inputs(built[1]))):
        raise UserError(f"--model {name}: {function_name}() must return (torch.nn.Module, example input: a tensor "
                        f"or a tuple of tensors)")
    example = built[1] if isinstance(built[1], torch.Tensor) else example_inputs(built[1])
    return built[0].float().eval(), example, function
