"""A user's own Relax IRModule for ``tune-model --model FILE.py:NAME``: a model that reached TVM
without torch (``relax.frontend.onnx``, TVMScript, a Relax builder).

There is no torch module to hold it against or to time, so the bar is TVM's own build of the same
module with no tuning record (``compile_tuned`` with an empty database: DLight's default schedules
on a GPU, TVM's plain lowering on a CPU): the tuned model's outputs must match it, and its latency
is reported beside. The inputs are random, drawn at the static shapes ``main`` declares (integer
inputs zeros, so an index stays in range); a parameter of symbolic shape or of no tensor type is
refused in one line.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import numpy as np
from tvm import relax
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.tirx import IntImm

from ..errors import UserError
from .compile import compile_tuned

DEFAULT_BUILD = "TVM's default build"


@dataclasses.dataclass(frozen=True)
class RelaxModel:
    """A Relax module as ``tune-model`` tunes it, with the inputs its ``main`` is run on."""

    mod: object  # tvm.IRModule holding a Relax ``main``
    inputs: Tuple[np.ndarray, ...]

    @property
    def dtype(self) -> str:
        """float16 where an input is (it computes in fp16, as the named fp16 models do), else float32."""
        return "float16" if any(x.dtype == np.float16 for x in self.inputs) else "float32"


def is_relax_module(found) -> bool:
    """Whether ``found`` is an IRModule whose ``main`` is a Relax function."""
    return isinstance(found, IRModule) and any(
        g.name_hint == "main" and isinstance(f, relax.Function) for g, f in found.functions.items())


def relax_model(mod, where: str) -> RelaxModel:
    """``mod`` with random inputs at ``main``'s static shapes (seeded, so a rerun checks the same);
    ``where`` leads a refusal (``--model FILE.py:NAME``)."""
    rng = np.random.default_rng(0)
    inputs = []
    for param in mod["main"].params:
        dtype, shape = _static_tensor(param, where)
        inputs.append(np.zeros(shape, dtype) if np.issubdtype(np.dtype(dtype), np.integer)
                      else rng.standard_normal(shape).astype(dtype))
    return RelaxModel(mod, tuple(inputs))


def _static_tensor(param, where: str) -> Tuple[str, Tuple[int, ...]]:
    """(dtype, shape) of one of ``main``'s parameters, a tensor of static shape."""
    kind = param.ty
    shape = getattr(kind, "shape", None)
    if not isinstance(kind, relax.TensorType) or shape is None:
        raise UserError(f"{where}: main's parameter '{param.name}' is a {type(kind).__name__}, not a tensor of "
                        "known shape (tune-model passes each input as one tensor)")
    dims = list(shape.values)
    if not all(isinstance(d, IntImm) for d in dims):
        raise UserError(f"{where}: main's parameter '{param.name}' has a symbolic shape {shape}; tune-model tunes "
                        "static shapes (bind them first, e.g. relax.transform.BindSymbolicVars)")
    return str(kind.dtype), tuple(int(d) for d in dims)


def default_build(mod, target, run) -> Tuple[List[np.ndarray], Optional[float]]:
    """(outputs, seconds) of Relax ``mod`` built by TVM with no tuning record, run by ``run(executable)``
    (``run_executable`` here or on a tracker's server)."""
    return run(compile_tuned(ms.database.MemoryDatabase(), mod, target))
