"""A user's own TensorIR kernel for ``tune FILE.py:NAME`` and ``compare FILE.py:NAME``: NAME is a
PrimFunc or an IRModule of one (TVMScript's ``@T.prim_func``, ``@I.ir_module``), or a function of no
arguments returning one. It is tuned as written: MetaSchedule's workload is the module itself, so a
rerun resumes it, and ``show`` and ``db`` list it as any other; ``check`` holds its best kernel
against its unscheduled function (only a named workload has an exact reference, and torch's time)"""

from __future__ import annotations

import dataclasses

from tvm import tirx
from tvm.ir import IRModule
from tvm.s_tir.analysis import estimate_tir_flops

from ..errors import UserError, raised_by_user_code
from ..user_files import FileName, file_name, load_name
from .spec import parse_workload


@dataclasses.dataclass(frozen=True)
class KernelFile:
    """A kernel from a user's file, with the two things ``tune`` asks of a workload."""

    source: FileName
    mod: object  # tirx.PrimFunc or IRModule

    @property
    def spec(self) -> str:
        """Its name in reports and work dirs: ``file:NAME``."""
        return self.source.label

    @property
    def flops(self) -> float:
        """As TVM estimates them from the unscheduled TIR (a comparison's TFLOP/s)."""
        return float(estimate_tir_flops(self.mod if isinstance(self.mod, IRModule) else IRModule({"main": self.mod})))

    def prim_func(self):
        return self.mod


def tuned_workload(text: str):
    """What ``tune`` tunes for ``text``: a KernelFile for ``FILE.py:NAME``, else a named workload spec."""
    named = file_name(text)
    return load_kernel_file(named) if named else parse_workload(text)


def load_kernel_file(named: FileName) -> KernelFile:
    where = f"tune {named.path}:{named.name}"
    found = load_name(named, "tune")
    if found is None:
        raise UserError(f"{where}: '{named.path}' defines no '{named.name}'")
    if callable(found) and not isinstance(found, (tirx.PrimFunc, IRModule)):
        try:
            found = found()
        except Exception as err:  # pylint: disable=broad-except  # the user's function: its error, one line
            raise UserError(f"{where}: {named.name}() failed: {raised_by_user_code(err)}") from err
    if isinstance(found, IRModule):
        functions = list(found.functions.values())
        if any(not isinstance(f, tirx.PrimFunc) for f in functions):
            raise UserError(f"{where}: '{named.name}' is a Relax module; a whole model is tuned with "
                            f"'ms-pruner tune-model --model {named.path}:{named.name}'")
        if len(functions) != 1 or not isinstance(functions[0], tirx.PrimFunc):
            raise UserError(f"{where}: tune takes an IRModule of one PrimFunc, not of {len(functions)} functions "
                            "(a whole model: tune-model, or ms_pruner.tune_relax)")
    elif not isinstance(found, tirx.PrimFunc):
        raise UserError(f"{where}: '{named.name}' is of type {type(found).__name__}, not a PrimFunc, an IRModule "
                        "of one, or a function returning one")
    return KernelFile(named, found)
