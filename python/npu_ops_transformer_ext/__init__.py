"""npu_ops_transformer_ext: RoPE-Matrix (RoME), rotary position embedding as one fused operator.

    out = x * cos + (x @ mat) * sin      (fp32 math, one rounding to x.dtype)

Importing the package registers ``torch.ops.npu_ops_transformer_ext.rope_matrix`` (and its fused
q/k and in-place variants) for CPU, for Meta/fake tensors (torch.compile) and, in NPU builds, for
Ascend NPUs. torch_npu is never needed to import the package.

Submodules imported on demand: ``diffusers_patch`` (switch a diffusers transformer to
``rope_matrix``), ``precision``, ``bench`` and ``plot`` (command-line tools, ``python -m
npu_ops_transformer_ext.<name> --help``).
"""
import torch  # noqa: F401  (loads libtorch before our extension)

from . import (  # noqa: F401  (model drop-ins, sequence parallel; diffusers_patch and precision are imported on demand)
    _C,
    autograd,
    models,
    parallel,
)
from .matrices import (
    compose_matrix,
    get_half_matrix,
    get_interleave_half_matrix,
    get_interleave_matrix,
    get_quarter_matrix,
    is_signed_permutation,
)
from .ops import rope_matrix, rope_matrix_, rope_matrix_qk
from .tables import (
    RopeTables,
    RotaryEmbedding,
    for_layout,
    hf_rope_scaling,
    rope_1d,
    rope_inv_freq,
    rope_mrope,
    rope_nd,
)
from .transformers import patch_transformers, unpatch_transformers  # HF transformers drop-in

__version__: str = "0.1.0"

__all__ = [
    "RopeTables",
    "RotaryEmbedding",
    "compose_matrix",
    "for_layout",
    "get_half_matrix",
    "get_interleave_half_matrix",
    "get_interleave_matrix",
    "get_quarter_matrix",
    "hf_rope_scaling",
    "is_signed_permutation",
    "patch_transformers",
    "rope_1d",
    "rope_inv_freq",
    "rope_matrix",
    "rope_matrix_",
    "rope_matrix_qk",
    "rope_mrope",
    "rope_nd",
    "unpatch_transformers",
]
