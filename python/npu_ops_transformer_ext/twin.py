"""The CPU twin of the rope_matrix Ascend C kernel.

The kernel source in ``op_kernel/`` is compiled with the host C++ compiler against the project's
own implementation of the Ascend C API subset it uses, and runs here with one thread per simulated
core (``blockDim`` cube cores and ``2*blockDim`` vector cores, numbered as the hardware numbers
them). The host side is the NPU launcher's own: the shared validator, the NPU limit checks, the
pure tiling function and the matmul tiling. So a twin run checks the kernel, the tiling and the
launcher together, without an NPU.

Where the hardware would misbehave or silently do something else (a GM access out of bounds, UB
over budget, a misaligned DataCopy, vector work on a cube core, an illegal Cast mode, queue
misuse, a flag counter overflow, a deadlock, ...) the twin stops with :class:`TwinError`, naming
the core, the rule and the values.

    from npu_ops_transformer_ext import twin
    out, report = twin.run(x, y, sin, cos, soc="Ascend910B3")

Importing this module needs the compiled ``_twin`` extension (built by the normal build);
``import npu_ops_transformer_ext`` does not.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

import torch

from . import _cli, _twin

__all__ = ["SOCS", "TwinError", "perm_tiling", "run", "tiling", "timing_params"]

#: SoCs whose core counts the twin knows (cube cores, vector cores).
SOCS = {
    "Ascend910B1": (24, 48),
    "Ascend910B2": (24, 48),
    "Ascend910B3": (20, 40),
    "Ascend910B4": (20, 40),
}


class TwinError(RuntimeError):
    """A rule the kernel broke on the twin.

    Attributes:
        rule: short stable identifier of the rule (e.g. ``"gm-out-of-bounds"``, ``"deadlock"``).
        core: the simulated core, ``"AIC_<b>"`` or ``"AIV_<2b+s>"`` (MIX kernel; ``"AIV_<b>"`` in the
            vector-only kernel)
            (``"all cores"`` for a deadlock).
    """

    def __init__(self, message: str, rule: str, core: str):
        super().__init__(message)
        self.rule = rule
        self.core = core


def run(
    x: torch.Tensor,
    y: torch.Tensor,
    sin: torch.Tensor,
    cos: torch.Tensor,
    *,
    soc: str = "Ascend910B3",
    max_block_dim: int = 0,
    kernel: str | None = None,
    timeline: bool = False,
    trace: str | os.PathLike[str] | None = None,
    timing_params: dict[str, float] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Runs ``rope_matrix(x, y, sin, cos)`` on the CPU twin of the NPU kernel.

    Shapes and dtypes as for ``rope_matrix`` within the NPU kernel's limits: x bfloat16, float16 or
    float32 with D >= 16; y ``[D, D]`` (any dtype whose values x's dtype holds exactly); sin and
    cos varying along one dim of x only (``[S, D]``, ``[1, 1, S, D]`` for BNSD; ``[S, 1, D]``,
    ``[1, S, 1, D]`` for BSND), any floating dtype each (converted as on the CPU). All tensors
    on the CPU.

    Args:
        soc: the SoC whose core counts the tiling uses (see ``SOCS``).
        max_block_dim: cap on the AI Cores used (0 = as many as the tiling wants); for the
            vector-only kernel, on the vector cores.
        kernel: ``"auto"`` (the vector-only kernel when y is a signed, possibly partial,
            permutation and its tiling serves the shape, else the MIX kernel), ``"perm"`` or
            ``"mix"`` to force one; ``None`` reads ``NPU_OPS_NPU_KERNEL`` as the NPU launcher does
            (``auto`` when unset).

    Returns:
        ``(out, report)``. ``report`` holds ``soc``, ``block_dim``, ``kernel`` (the entry point),
        ``kernel_kind`` (``"perm"`` or ``"mix"``), ``tiling`` (every field of that kernel's tiling struct), ``workspace_bytes``, ``out_write_count_min/max`` (how often
        each output byte was written: 1/1 when every row is covered exactly once) and ``cores``:
        per simulated core ``name``, ``type``, ``block``, ``sub``, ``gm_read``/``gm_write`` (bytes
        per tensor), ``gm_read_bytes``/``gm_write_bytes``, ``ub_peak_bytes``, ``flags_set``,
        ``flags_waited``, ``flags_left`` (flag id -> counter at kernel end, where non-zero: the
        generated launch wrapper's flag 15 on the vector cores of a MIX kernel) and ``rows`` (x rows
        multiplied by a cube core / written by a vector core).
        With ``timeline``: ``report["timeline"]`` holds ``predicted_us`` (launch overhead +
        ``makespan_us``, the end of the last core's last pipe), ``bytes`` (``hbm_read``,
        ``hbm_write``, ``l2_read``, ``l2_write`` over all cores), ``params`` (the parameters used) and
        per core ``name``, ``busy_us`` (per pipe), ``end_us`` and ``bytes``.

    Raises:
        TwinError: the kernel broke a hardware rule (see the exception's ``rule`` and ``core``).
        ValueError, TypeError: invalid inputs, with the same messages as the NPU launcher; an
            unknown ``soc``; ``max_block_dim`` not a whole number from 0 to 2**32 - 1; ``trace``
            without ``timeline``, or a path that cannot be written (checked before the run; its
            folder is created); ``timing_params`` without ``timeline``, with an unknown name, or with
            a value the model cannot use (rates, sizes and the clock > 0, ``l2_line`` a whole
            number >= 1, latencies and fixed costs >= 0, all finite).

    An empty x runs nothing: ``out`` is empty and ``report`` is ``{}`` (no trace is written).
    """
    for name, t in (("x", x), ("mat", y), ("sin", sin), ("cos", cos)):  # y is the launcher's mat
        if t is None:
            raise ValueError(f"rope_matrix: {name} must be a tensor, got None")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"rope_matrix: {name} must be a tensor, got {type(t).__name__}")
    if kernel is not None and kernel not in ("auto", "mix", "perm"):
        raise ValueError(f"kernel must be 'auto', 'mix' or 'perm' (or None for NPU_OPS_NPU_KERNEL), got {kernel!r}")
    if trace is not None and not isinstance(trace, (str, os.PathLike)):
        raise TypeError(f"trace must be a file name (str or os.PathLike) or None, got {type(trace).__name__}")
    trace = os.fspath(trace) if trace is not None else None
    if not isinstance(trace, (str, type(None))):
        raise TypeError(f"trace must name a file as str, got {type(trace).__name__}")
    if trace == "":
        raise ValueError("trace: give a file name (or None for no trace)")
    if trace and not timeline:
        raise ValueError("trace= needs timeline=True")
    if timing_params and not timeline:
        raise ValueError("timing_params= needs timeline=True (they are the timing model's)")
    if not isinstance(soc, str) or soc not in SOCS:
        raise ValueError(f"soc must be one of {', '.join(SOCS)}, got {soc!r}")
    _check_block_dim(max_block_dim)
    if timing_params:
        _check_timing_params(timing_params)
    if trace:
        problem = _cli.output_path_problem(trace)
        if problem:
            raise ValueError(f"trace{problem}")
    return _run(x, y, sin, cos, soc=soc, max_block_dim=int(max_block_dim), kernel=kernel or "", timeline=timeline,
                trace=trace, timing_params=timing_params)


def _check_block_dim(max_block_dim: object) -> None:
    """A TypeError or ValueError unless max_block_dim is a whole number the launcher takes (a
    uint32_t: 0 to 2**32 - 1)."""
    _check_whole("max_block_dim", max_block_dim, 32, " (0 = as many cores as the tiling wants)")


def _check_whole(name: str, value: object, bits: int, meaning: str = "") -> None:
    """A TypeError naming ``name`` unless value is an int (not a bool), a ValueError unless it is
    from 0 to 2**bits - 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int{meaning}, got {type(value).__name__} {value!r}")
    if not 0 <= int(value) < 2**bits:
        raise ValueError(f"{name} must be from 0 to 2**{bits} - 1{meaning}, got {value}")


def _tiling_args(outer: object, s: object, inner: object, d: object, x_dtype: object, table_dtype: object,
                 soc: object, max_block_dim: object) -> tuple:
    """tiling's and perm_tiling's arguments as the extension takes them, checked before it converts
    them: the dims whole numbers, the names str, table_dtype (None: x_dtype) x_dtype or "float32"
    (the tables the launcher hands the kernel: of x's dtype, or converted to float32)."""
    table_dtype = x_dtype if table_dtype is None else table_dtype
    for name, v in (("outer", outer), ("s", s), ("inner", inner), ("d", d)):
        _check_whole(name, v, 64)
    for name, v in (("x_dtype", x_dtype), ("table_dtype", table_dtype), ("soc", soc)):
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a str, got {type(v).__name__} {v!r}")
    if table_dtype not in (x_dtype, "float32"):
        raise ValueError(f"table_dtype must be x_dtype ({x_dtype!r}) or 'float32' (the tables the kernel gets: "
                         f"of x's dtype, or converted to float32), got {table_dtype!r}")
    _check_block_dim(max_block_dim)
    return int(outer), int(s), int(inner), int(d), x_dtype, table_dtype, soc, int(max_block_dim)


# Timing parameters that are rates, sizes or the clock (> 0); l2_line is a whole number of bytes
# >= 1; every other one is a latency or fixed cost (>= 0).
_POSITIVE_PARAMS = frozenset({
    "clock_ghz", "hbm_gbps", "l2_gbps", "mte_core_bytes_per_cycle", "vec_bytes_per_cycle",
    "gather_elems_per_cycle", "cube_macs_half", "cube_macs_float", "l0a_bytes_per_cycle",
    "l0b_bytes_per_cycle", "fix_bytes_per_cycle",
})


def _check_timing_params(params: object) -> None:
    """A ValueError or TypeError naming the first timing parameter that the model cannot use."""
    if not isinstance(params, dict):
        raise TypeError(f"timing_params must be a dict of parameter name -> number, got {type(params).__name__}")
    known = timing_params()
    for k, v in params.items():
        if k not in known:
            raise ValueError(f"unknown timing parameter {k!r}; known: {', '.join(sorted(known))}")
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"timing parameter {k} must be a number, got {type(v).__name__} {v!r}")
        v = float(v)
        if k == "l2_line":
            ok, want = math.isfinite(v) and v >= 1 and v.is_integer(), "a whole number of bytes >= 1"
        elif k in _POSITIVE_PARAMS:
            ok, want = math.isfinite(v) and v > 0, "a finite number > 0"
        else:
            ok, want = math.isfinite(v) and v >= 0, "a finite number >= 0"
        if not ok:
            raise ValueError(f"timing parameter {k} must be {want}, got {v!r}")


def timing_params() -> dict[str, float]:
    """The timing model's hardware parameters (twin/include/twin/timing_params.h, where each one
    cites its source)."""
    return _twin.timing_params()


def tiling(
    outer: int,
    s: int,
    inner: int,
    d: int,
    *,
    x_dtype: str = "bfloat16",
    table_dtype: str | None = None,
    soc: str = "Ascend910B3",
    max_block_dim: int = 0,
) -> dict[str, Any]:
    """The host tiling for x viewed as ``[outer, S, inner, D]`` (a dict of every field, plus the
    platform's core counts, the workspace size and the matmul tiling under ``"cube"``), with tables
    of ``table_dtype`` (x's dtype when None, or ``"float32"``).
    Raises ValueError with the numbers when no tiling can serve the shape, TypeError or ValueError
    for an argument of the wrong type or out of range."""
    return _twin.tiling(*_tiling_args(outer, s, inner, d, x_dtype, table_dtype, soc, max_block_dim),
                        _twin.SLOT_BYTES)


def perm_tiling(
    outer: int,
    s: int,
    inner: int,
    d: int,
    *,
    x_dtype: str = "bfloat16",
    table_dtype: str | None = None,
    soc: str = "Ascend910B3",
    max_block_dim: int = 0,
) -> dict[str, Any]:
    """The host tiling of the vector-only (signed permutation) kernel for x viewed as
    ``[outer, S, inner, D]``, but for ``partnerPath``, left 0 here: the launcher sets it from y
    (``twin.run``'s report gives the one it chose). Raises ValueError with the numbers when it
    cannot serve the shape (the launcher then runs the MIX kernel), TypeError or ValueError for an
    argument of the wrong type or out of range."""
    return _twin.perm_tiling(*_tiling_args(outer, s, inner, d, x_dtype, table_dtype, soc, max_block_dim))


def _materialized(t):
    """What an op sees after the dispatcher's fallbacks, which the twin (called directly, not
    through the dispatcher) does not get: a negated view's values resolved, an efficient zero
    tensor (no memory) as real zeros. Anything that is not a tensor is left for the validator."""
    if not isinstance(t, torch.Tensor):
        return t
    if t._is_zerotensor():
        return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    return t.resolve_neg().resolve_conj()


def _run(
    x, y, sin, cos, *, soc, max_block_dim=0, variant="", tiling_patch=None, op_limit=0, slot_bytes=0,
    kernel="", timeline=False, trace=None, timing_params=None,
):
    # variant / tiling_patch / op_limit / slot_bytes exist for the twin's own tests only.
    x, y, sin, cos = (_materialized(t) for t in (x, y, sin, cos))
    r = _twin.run(
        x, y, sin, cos, soc, max_block_dim, variant, tiling_patch or {}, op_limit,
        slot_bytes or _twin.SLOT_BYTES, kernel, timeline, os.fsencode(trace) if trace else b"", timing_params or {},
    )
    if "error" in r:
        e = r["error"]
        raise TwinError(e["message"], e["rule"], e["core"])
    return r["out"], r["report"]
