"""ms_pruner: draft-then-verify search for Apache TVM MetaSchedule (Pruner / MoA-Pruner).

Importing the package is cheap: TVM, torch and the tensor intrinsics load only when a
sub-package that needs them is used.
"""

__version__ = "0.1.0"
