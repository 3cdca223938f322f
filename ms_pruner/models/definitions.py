"""Small PyTorch models for whole-model tuning, defined here (no downloads, no torchvision)."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, Tuple

from ..errors import UserError
from ..user_files import file_name
from .relax_model import RelaxModel
from .user_model import example_inputs, load_model_file


def _torch():
    import torch  # lazy: torch only where a model is built

    return torch


def mlp_tiny():
    """Linear 64->128, ReLU, Linear 128->128, ReLU, Linear 128->128: a CPU-sized model whose two
    128->128 layers share one tuning task (weight 2)."""
    nn = _torch().nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(64, 128)
            self.fc2 = nn.Linear(128, 128)
            self.fc3 = nn.Linear(128, 128)

        def forward(self, x):
            x = _torch().relu(self.fc1(x))
            x = _torch().relu(self.fc2(x))
            return _torch().relu(self.fc3(x))

    return MLP()


def bert_layer(hidden: int = 768, heads: int = 12, ffn: int = 3072):
    """One BERT-base encoder layer (post-LayerNorm, GELU), attention written with matmuls."""
    torch = _torch()
    nn = torch.nn

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.out = nn.Linear(hidden, hidden)
            self.norm1 = nn.LayerNorm(hidden)
            self.up = nn.Linear(hidden, ffn)
            self.down = nn.Linear(ffn, hidden)
            self.norm2 = nn.LayerNorm(hidden)

        def forward(self, x):
            batch, seq, _ = x.shape
            head_dim = hidden // heads
            qkv = self.qkv(x).reshape(batch, seq, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(head_dim))
            context = torch.matmul(torch.softmax(scores, dim=-1), v)
            context = context.permute(0, 2, 1, 3).reshape(batch, seq, hidden)
            x = self.norm1(x + self.out(context))
            return self.norm2(x + self.down(torch.nn.functional.gelu(self.up(x))))

    return EncoderLayer()


def resnet_block(channels: int = 256, width: int = 64):
    """A ResNet-50 bottleneck (1x1 -> 3x3 -> 1x1, batch norm, ReLU, identity shortcut)."""
    torch = _torch()
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(channels)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = torch.relu(self.bn2(self.conv2(out)))
            return torch.relu(self.bn3(self.conv3(out)) + x)

    return Bottleneck()


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A named model: how to build it and the shape/dtype of its example input."""

    name: str
    build: Callable
    input_shape: Tuple[int, ...]
    dtype: str
    nhwc: bool  # convert its convolutions to NHWC (tensor-core friendly) before tuning
    doc: str


MODELS: Dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("mlp-tiny", mlp_tiny, (8, 64), "float32", False, "3-layer MLP, fp32, for CPU"),
        ModelSpec("bert-layer", bert_layer, (1, 128, 768), "float16", False,
                  "BERT-base encoder layer, fp16, batch 1 x 128 tokens"),
        ModelSpec("resnet-block", resnet_block, (1, 256, 56, 56), "float16", True,
                  "ResNet-50 bottleneck (256->64->256 channels, 56x56), fp16, convolutions in NHWC"),
    ]
}


def get_model(name: str, dtype: str = None, input_shape: Tuple[int, ...] = None):
    """(fp32 torch module in eval mode, example input, ModelSpec); weights are seeded. ``name`` is one
    of MODELS (an fp32 example of ``input_shape``, default the spec's) or a user's ``FILE.py:FUNCTION``
    (user_model.py: its own example, a tensor or a tuple; for a Relax module a RelaxModel and its inputs).

    ``spec.dtype`` is the compute dtype of the tuned model: for float16 the Relax module is made
    mixed precision (fp16 operands, fp32 accumulation, what the tensor-core workloads use) after
    import; the torch module stays fp32 as the reference, and torch timings cast it to fp16.
    """
    if dtype not in (None, "float16", "float32"):
        raise UserError(f"unsupported model dtype '{dtype}'; use float16 or float32")
    user_file = file_name(name)
    if user_file is not None:
        module, example, function = load_model_file(user_file)
        shapes = tuple(tuple(x.shape) for x in example_inputs(example))
        doc = ((function.__doc__ if function else None) or "").strip().split("\n")[0]
        if isinstance(module, RelaxModel):
            if dtype == "float32" and module.dtype == "float16":
                raise UserError(f"--model {name}: its main takes float16 inputs; drop --dtype float32")
            nhwc, written = True, module.dtype  # ConvertLayout leaves a module without conv2d as it is
        else:
            nhwc, written = any(isinstance(m, _torch().nn.Conv2d) for m in module.modules()), "float32"
        return module, example, ModelSpec(user_file.label, function, shapes[0] if len(shapes) == 1 else shapes,
                                          dtype or written, nhwc, doc)
    if name not in MODELS:
        raise UserError(f"unknown model '{name}'; known: {', '.join(sorted(MODELS))}, or FILE.py:FUNCTION")
    torch = _torch()
    spec = MODELS[name]
    torch.manual_seed(0)
    module = spec.build().eval()
    dtype = dtype or spec.dtype
    example = torch.randn(*(input_shape or spec.input_shape), dtype=torch.float32)
    return module, example, dataclasses.replace(spec, dtype=dtype, input_shape=tuple(example.shape))
