"""A BERT encoder with attention-mask mean pooling in plain torch: the PyTorch side of the `minilm`
workload (bench/minilm.py). Its submodules carry the names of the safetensors file
(`embeddings.word_embeddings`, `encoder.layer.0.attention.self.query`, ...), so the weights load
with `load_state_dict`. It computes what examples/transformer.py's `encode` computes: embeddings,
post-norm layers (attention through `scaled_dot_product_attention` with an additive mask of -1e4 on
padding, exact-erf GELU) and mean pooling over the real tokens.

Imported only when torch is importable (bench/minilm_model.py imports it lazily).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional


class Embeddings(nn.Module):
    def __init__(self, vocab: int, positions: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(positions, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)  # noqa: N815  (the safetensors name)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        tokens = ids.shape[1]
        h = self.word_embeddings(ids) + self.position_embeddings.weight[:tokens] + self.token_type_embeddings.weight[0]
        return self.LayerNorm(h)


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = h.shape

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(batch, tokens, self.heads, hidden // self.heads).transpose(1, 2)

        context = functional.scaled_dot_product_attention(split(self.query(h)), split(self.key(h)),
                                                          split(self.value(h)), attn_mask=bias)
        return context.transpose(1, 2).reshape(batch, tokens, hidden)


class DenseNorm(nn.Module):
    """`dense` then LayerNorm of the residual sum (BERT's attention.output and output)."""

    def __init__(self, n_in: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(n_in, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)  # noqa: N815  (the safetensors name)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(residual + self.dense(x))


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, eps: float) -> None:
        super().__init__()
        self.add_module("self", SelfAttention(hidden, heads))
        self.output = DenseNorm(hidden, hidden, eps)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(h, bias), h)


class Intermediate(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, inner)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return functional.gelu(self.dense(h))


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, inner: int, eps: float) -> None:
        super().__init__()
        self.attention = Attention(hidden, heads, eps)
        self.intermediate = Intermediate(hidden, inner)
        self.output = DenseNorm(inner, hidden, eps)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = self.attention(h, bias)
        return self.output(self.intermediate(h), h)


class Encoder(nn.Module):
    def __init__(self, hidden: int, heads: int, inner: int, layers: int, eps: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(hidden, heads, inner, eps) for _ in range(layers))

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            h = layer(h, bias)
        return h


class Bert(nn.Module):
    """token ids (B, T) and a 0/1 attention mask (B, T) -> mean-pooled sentence embeddings (B, D)."""

    def __init__(self, hidden: int, heads: int, inner: int, layers: int, eps: float, vocab: int,
                 positions: int) -> None:
        super().__init__()
        self.embeddings = Embeddings(vocab, positions, hidden, eps)
        self.encoder = Encoder(hidden, heads, inner, layers, eps)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.to(torch.float32)
        bias = ((1.0 - weights) * -10000.0)[:, None, None, :]
        h = self.encoder(self.embeddings(ids), bias)
        pooled = (h * weights[:, :, None]).sum(dim=1)
        return pooled / weights.sum(dim=1, keepdim=True).clamp(min=1e-9)


def build_bert(config: Any, inner: int, vocab: int, positions: int) -> Bert:
    """The model for an examples/transformer.py `Config` (hidden, heads, layers, eps), untrained."""
    return Bert(config.hidden, config.heads, inner, config.layers, config.eps, vocab, positions)
