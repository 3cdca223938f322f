"""A user's own model for ``tune-model --model FILE.py:FUNCTION``.

FUNCTION takes no arguments and returns ``(module, example)``: a ``torch.nn.Module`` and its
example input, one tensor or a tuple of them (token ids and a mask, say). The model is traced at
the example's shapes, so those are the shapes tuned. As with the named models, the module stays
fp32 as the reference and ``--dtype float16`` makes the Relax module mixed precision; a module
holding a ``Conv2d`` has its convolutions converted to NHWC on a GPU (the tensor-core layout).
FILE.py:NAME may instead name a Relax IRModule, or a function returning one (relax_model.py).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from tvm import tirx
from tvm.ir import IRModule

from ..errors import UserError, raised_by_user_code
from ..user_files import FileName, load_name
from .relax_model import is_relax_module, relax_model


def example_inputs(example) -> tuple:
    """A model's example input as a tuple of tensors (a lone tensor is a tuple of one)."""
    return tuple(example) if isinstance(example, (tuple, list)) else (example,)


def load_model_file(model: FileName) -> Tuple[object, object, Optional[Callable]]:
    """(fp32 torch module in eval mode, its example input, FUNCTION) of ``model``; for a Relax
    module (NAME itself, or what FUNCTION returns) a RelaxModel, its inputs, and FUNCTION or None."""
    import torch  # lazy: torch only where a model is built

    name = f"{model.path}:{model.name}"
    function = load_name(model, "--model")
    if is_relax_module(function):
        found = relax_model(function, f"--model {name}")
        return found, found.inputs, None
    if isinstance(function, (IRModule, tirx.PrimFunc)):
        raise UserError(f"--model {name}: '{model.name}' is TensorIR with no Relax main; a kernel is tuned with "
                        f"'ms-pruner tune {name}'")
    if not callable(function):
        raise UserError(f"--model {name}: '{model.path}' defines no function or Relax IRModule '{model.name}'")
    torch.manual_seed(0)
    try:
        built = function()
    except Exception as err:  # pylint: disable=broad-except
        raise UserError(f"--model {name}: {model.name}() failed: {raised_by_user_code(err)}") from err
    if is_relax_module(built):
        found = relax_model(built, f"--model {name}")
        return found, found.inputs, function
    if not (isinstance(built, (tuple, list)) and len(built) == 2 and isinstance(built[0], torch.nn.Module)
            and all(isinstance(x, torch.Tensor) for x in example_inputs(built[1]))):
        raise UserError(f"--model {name}: {model.name}() must return (torch.nn.Module, example input: a tensor "
                        f"or a tuple of tensors), or a Relax IRModule")
    example = built[1] if isinstance(built[1], torch.Tensor) else example_inputs(built[1])
    return built[0].float().eval(), example, function
