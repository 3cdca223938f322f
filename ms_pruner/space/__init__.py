"""Design spaces: which tensor-core rule families a task is searched with, and their checks."""

from .checks import PermutedLayoutCheck, permuted_copies_lowerable
from .families import (FAMILIES, SPACES, family_generator, mma_shape, pipeline_depth, resolve_space,
                       sketch_family, space_generator, space_target, tensor_instruction, tuning_space,
                       uses_opt_in_shared_memory)
from .pipeline import DEPTHS, PipelineDepths, stages

__all__ = ["DEPTHS", "FAMILIES", "PermutedLayoutCheck", "PipelineDepths", "SPACES", "family_generator",
           "mma_shape", "permuted_copies_lowerable", "pipeline_depth", "resolve_space", "sketch_family", "space_generator",
           "space_target", "stages", "tensor_instruction", "tuning_space", "uses_opt_in_shared_memory"]
