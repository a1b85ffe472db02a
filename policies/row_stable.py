"""Layers whose output rows do not depend on how many rows are batched with them.

On the CPU, ``F.linear`` and ``F.conv2d`` take other kernels for a batch of very few rows than for a
larger one, and the kernels round differently. On session 87's host (MKL and oneDNN, AVX-512), the
policy's linear layers gave other floats for 1-3 rows than for 4-200 rows, and its convolutions for 1
row than for 2 or more, while every batch from 4 to 200 rows gave every row bit for bit; a layer of one output
rounds each row by where it falls in the batch, at any batch size. The policy's actions for the same
observation differed by up to 4.2e-7 between a call on a few starts and a call on 16. Over a closed loop
such a difference can change an episode played alone (the last starts of a gate check) from the one
played in a full evaluation batch: in ``benchmarks.batch_invariance`` (``batch_invariance_s87.json``) it
changed one episode's length of 300. (The renderer's tiles changed more, ``envs.tabletop.render``.)

:class:`RowStableLinear` and :class:`RowStableConv2d` pad an input of fewer than :data:`MIN_ROWS`
rows with zero rows up to :data:`MIN_ROWS` and drop their outputs, so a few rows take the kernels of a
full batch. A batch of :data:`MIN_ROWS` rows or more is computed exactly as by ``nn.Linear`` /
``nn.Conv2d`` (but for a layer of one output, see :class:`RowStableLinear`), so a full batch's actions are
unchanged. The parameters, their initialisation and the checkpoint keys are those of ``nn.Linear`` /
``nn.Conv2d``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: The fewest rows these layers compute at once. 4 was enough on the measured host; 8 leaves room for
#: kernels that switch paths a little later. Padding costs a 1-row call of the main job's policy 1.1 -> 2.2-2.5 ms.
MIN_ROWS = 8


def with_min_rows(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """``fn(x)`` for ``x`` (N, ...) with N rows; when 0 < N < :data:`MIN_ROWS`, computed on ``x`` padded with zero
    rows to :data:`MIN_ROWS` rows and cut back to N (``fn`` must treat rows independently)."""
    n = x.shape[0]
    if not 0 < n < MIN_ROWS:
        return fn(x)
    return fn(torch.cat([x, x.new_zeros(MIN_ROWS - n, *x.shape[1:])]))[:n]


class RowStableLinear(nn.Linear):
    """``nn.Linear``, (..., in_features) -> (..., out_features), computed on at least :data:`MIN_ROWS` rows (all
    leading dims flattened into rows). A layer of one output (a value head) multiplies with a second, zero output
    column: as a matrix-vector product its kernel rounds a row by where it falls in the batch, at any batch size."""

    def forward(self, x: Tensor) -> Tensor:
        rows = with_min_rows(self._matmul, x.reshape(-1, x.shape[-1]))
        return rows.reshape(*x.shape[:-1], self.out_features)

    def _matmul(self, rows: Tensor) -> Tensor:
        """(N, in_features) -> (N, out_features)."""
        if self.out_features > 1:
            return F.linear(rows, self.weight, self.bias)
        weight = torch.cat([self.weight, self.weight.new_zeros(1, self.in_features)])
        bias = None if self.bias is None else torch.cat([self.bias, self.bias.new_zeros(1)])
        return F.linear(rows, weight, bias)[:, :1]


class RowStableConv2d(nn.Conv2d):
    """``nn.Conv2d``, (N, C, H, W) -> (N, C', H', W'), computed on at least :data:`MIN_ROWS` images."""

    def forward(self, x: Tensor) -> Tensor:
        return with_min_rows(super().forward, x)
