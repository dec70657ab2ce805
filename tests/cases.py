"""Named sample cases shared by the forward tests: layouts, table broadcast forms, modes, splits."""
from __future__ import annotations

import itertools

import pytest
import torch
from npu_ops_transformer_ext.reference import MODES, mode_matrix

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SPLITS = {"1d": [128], "2d": [64, 64], "3d": [44, 44, 40]}

B, N, S = 2, 3, 41  # odd S, odd head count


def x_shape(layout: str, d: int):
    return {"bnsd": (B, N, S, d), "bsnd": (B, S, N, d), "sd": (S, d)}[layout]


# Every table form a user passes for each layout, as shapes (D appended).
TABLE_FORMS = {
    "bnsd": {"sd": (S,), "11sd": (1, 1, S), "b1sd": (B, 1, S), "bnsd": (B, N, S), "1nsd": (1, N, S),
             "111d": (1, 1, 1), "d": ()},
    "bsnd": {"1s1d": (1, S, 1), "bs1d": (B, S, 1), "s1d": (S, 1), "bsnd": (B, S, N), "11nd": (1, 1, N)},
    "sd": {"sd": (S,), "1d": (1,), "d": ()},
}


def forward_cases():
    """(id, layout, table_form, mode, split, dtype, table_dtype) for the full forward matrix."""
    for layout, mode, split, dt in itertools.product(TABLE_FORMS, MODES, SPLITS, DTYPES):
        for form in TABLE_FORMS[layout]:
            for tdt in ("x", "fp32") if dt != "fp32" else ("x",):
                yield pytest.param(layout, form, mode, split, dt, tdt,
                                   id=f"{layout}-{form}-{mode}-{split}-{dt}-tab_{tdt}")


def make_inputs(layout, form, mode, split, dt, tdt, seed=0):
    g = torch.Generator().manual_seed(seed)
    dtype = DTYPES[dt]
    table_dtype = torch.float32 if tdt == "fp32" else dtype
    d = sum(SPLITS[split])
    x = torch.randn(x_shape(layout, d), generator=g).to(dtype)
    tshape = TABLE_FORMS[layout][form] + (d,)
    sin = torch.randn(tshape, generator=g).to(table_dtype)
    cos = torch.randn(tshape, generator=g).to(table_dtype)
    y = mode_matrix(mode, SPLITS[split], dtype=dtype)
    return x, y, sin, cos
