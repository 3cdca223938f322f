"""PaCM's network: a small transformer encoder over pattern tokens, added to the analyzer prior.

score = w * prior + head(mean-pooled encoder output), with prior = -log(analyzer latency) and
w initialised to 1 and the head's last layer to 0: an untrained PaCM ranks exactly as the
analyzer does, and training learns the corrections the measurements ask for.
"""

from __future__ import annotations

import torch
from torch import nn

from .tokens import TOKEN_DIM


class PaCMNet(nn.Module):
    def __init__(self, token_dim: int = TOKEN_DIM, d_model: int = 64, heads: int = 4, layers: int = 2,
                 ff: int = 128):
        super().__init__()
        self.config = {"token_dim": token_dim, "d_model": d_model, "heads": heads, "layers": layers, "ff": ff}
        self.embed = nn.Sequential(nn.Linear(token_dim, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 1))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)
        self.prior_weight = nn.Parameter(torch.tensor(1.0))

    def forward(self, tokens: torch.Tensor, padding: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(self.embed(tokens), src_key_padding_mask=padding)
        keep = (~padding).unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.prior_weight * prior + self.head(pooled).squeeze(-1)
