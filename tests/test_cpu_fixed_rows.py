"""The CPU kernel's fixed rows (cpu_kernel/fixed_perms.h, rows_avx512_chunks.h, rows_avx512_pairs.h): x whose rotate matrix
is rotate_half within the sections of one of the D = 128 splits compiled in (any signs) takes rows
whose permutes are constants (bf16 x with a pair plan in the pair rows' layout: "fixed-pairs");
bit-exact on special values, every batch shape and table dtype, in place and streamed, rounding
edge cases on both bf16 rounding paths; anything else, however close, takes the general rows."""
import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference
from npu_ops_transformer_ext.tables import HUNYUAN_VIDEO_SPLIT, SEED_3D_SPLIT, WAN_SPLIT
from special_values import assert_bit_exact, cpu_isa, special_values

ops = torch.ops.npu_ops_transformer_ext

FIXED_SPLITS = [list(SEED_3D_SPLIT), list(WAN_SPLIT), list(HUNYUAN_VIDEO_SPLIT), [64, 64]]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _has_avx512() -> bool:
    x = torch.zeros(1, 128, dtype=torch.float16)
    return ops._cpu_kernel_choice(x, mode_matrix("half", [128]), x.float(), x.float()).startswith("avx512")


pytestmark = pytest.mark.skipif(not _has_avx512(), reason="this CPU has no AVX-512")
# Both AVX-512 families: the default (with AVX512_BF16 where the CPU has it) and AVX-512 without it.
ISAS = [None, "avx512"]


def fixed(x, y, sin, cos) -> bool:
    """Whether rope_matrix(x, y, sin, cos) takes the fixed rows (the pair-layout ones for bf16 x
    with a pair plan: every split here but 44+42+42, whose halves are odd)."""
    kind = ops._cpu_kernel_choice(x, y, sin, cos)
    pairs = x.dtype == torch.bfloat16 and all(s % 4 == 0 for s in split_of(y))
    return kind.endswith("/fixed-pairs" if pairs else "/fixed")


def split_of(y):
    """The section lengths of a block-diagonal y (each section's columns take partners inside it)."""
    partner = y.float().abs().argmax(0).tolist()
    lens, begin, reach = [], 0, 0
    for j, p in enumerate(partner):
        reach = max(reach, p, j)
        if reach == j:
            lens.append(j + 1 - begin)
            begin = j + 1
    return lens


def signed(y, g):
    """y with each column's sign flipped at random (the rows fold the signs into sin)."""
    flip = torch.randint(0, 2, (y.shape[1],), generator=g).to(y.dtype) * 2 - 1
    return y * flip


def operands(shape, d, dtype, table_dtype, g, specials=True):
    """x of `shape + (d,)` (BNSD: S = shape[-1]) and [S, d] tables; x with every special value of its
    dtype at random places, sin and cos too."""
    x = torch.randn(*shape, d, generator=g).to(dtype)
    s = shape[-1]
    sin = torch.randn(s, d, generator=g).to(table_dtype)
    cos = torch.randn(s, d, generator=g).to(table_dtype)
    if specials:
        for t in (x, sin, cos):
            flat = t.view(-1)
            vals = torch.tensor(special_values(t.dtype), dtype=torch.float64).to(t.dtype)
            where = torch.randint(0, flat.numel(), (2 * len(vals),), generator=g)
            flat[where] = vals.repeat(2)
    return x, sin, cos


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("split", FIXED_SPLITS, ids=lambda s: "+".join(map(str, s)))
def test_fixed_splits_take_the_fixed_rows_bit_exact(isa, dtype, split):
    g = torch.Generator().manual_seed(sum(split) * 7 + len(split) + DTYPES.index(dtype))
    with cpu_isa(isa):
        for table_dtype in (dtype, torch.float32):
            y = signed(mode_matrix("half", split, dtype=dtype), g)
            # BNSD with 13 heads (whatever the CPU's batch shape, two, three or four heads a batch,
            # the last batch has one head: table values read where used), one head.
            for shape in ((1, 13, 19), (1, 1, 23)):
                x, sin, cos = operands(shape, 128, dtype, table_dtype, g)
                assert fixed(x, y, sin, cos)
                assert_bit_exact(ops.rope_matrix(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), str(shape))
            x, sin, cos = operands((2, 6, 19), 128, dtype, table_dtype, g)
            x_bsnd = x.transpose(1, 2).contiguous()  # [2, 19, 6, 128]: S = 19, 6 heads
            sin, cos = sin[:, None], cos[:, None]  # [S, 1, D]
            assert fixed(x_bsnd, y, sin, cos)
            assert_bit_exact(ops.rope_matrix(x_bsnd, y, sin, cos), rope_matrix_reference(x_bsnd, y, sin, cos), "BSND")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fixed_rows_in_place_and_streamed(dtype):
    g = torch.Generator().manual_seed(5)
    y = signed(mode_matrix("half", list(SEED_3D_SPLIT), dtype=dtype), g)
    x, sin, cos = operands((2, 6, 17), 128, dtype, torch.float32, g)
    ref = rope_matrix_reference(x, y, sin, cos)
    ops.rope_matrix_(x, y, sin, cos)
    assert_bit_exact(x, ref, "in place")
    # An output of 16 MiB and more is written with non-temporal stores.
    x, sin, cos = operands((1, 9, 7300), 128, dtype, dtype, g, specials=False)
    assert x.numel() * x.element_size() >= 16 << 20
    assert fixed(x, y, sin, cos)
    assert_bit_exact(ops.rope_matrix(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), "streamed")


@pytest.mark.parametrize("dtype", DTYPES)
def test_near_misses_take_the_general_rows(dtype):
    g = torch.Generator().manual_seed(9)
    seed = mode_matrix("half", list(SEED_3D_SPLIT), dtype=dtype)
    swapped = seed.clone()
    swapped[:, [3, 70]] = swapped[:, [70, 3]]  # two columns' partners exchanged
    zeroed = seed.clone()
    zeroed[:, 5] = 0  # a column without a partner
    others = [
        swapped,
        zeroed,
        mode_matrix("interleave", list(SEED_3D_SPLIT), dtype=dtype),
        mode_matrix("half", [40, 48, 40], dtype=dtype),
        mode_matrix("half", [128], dtype=dtype),
    ]
    x, sin, cos = operands((2, 3, 11), 128, dtype, torch.float32, g)
    for y in others:
        assert not fixed(x, y, sin, cos)
        assert_bit_exact(ops.rope_matrix(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    # Another D: the general rows.
    x64, s64, c64 = operands((2, 3, 11), 64, dtype, torch.float32, g)
    y64 = mode_matrix("half", [22, 22, 20], dtype=dtype)
    assert not fixed(x64, y64, s64, c64)
    assert_bit_exact(ops.rope_matrix(x64, y64, s64, c64), rope_matrix_reference(x64, y64, s64, c64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_quarter_mode_is_half_64_plus_64_with_other_signs(dtype):
    g = torch.Generator().manual_seed(4)
    y = mode_matrix("quarter", [128], dtype=dtype)
    x, sin, cos = operands((2, 3, 11), 128, dtype, dtype, g)
    assert fixed(x, y, sin, cos)
    assert_bit_exact(ops.rope_matrix(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("split", FIXED_SPLITS, ids=lambda s: "+".join(map(str, s)))
def test_bf16_fixed_rows_round_like_c10(isa, split):
    # Ties (round to nearest even), results that are fp32 subnormals (AVX512_BF16's conversion
    # flushes them; the row is redone on the integer path), NaN and +-Inf.
    d = 128
    y = mode_matrix("half", split)
    vals = [1.0 + 2**-8, 1.0 + 3 * 2**-8, 2**-130, -(2**-133), float("nan"), float("inf"), -float("inf"), 3.0]
    x = torch.tensor([vals * (d // len(vals))]).bfloat16()
    x = torch.cat([x, torch.full((1, d), 2**-127).bfloat16(), torch.randn(1, d).bfloat16()])
    x = x[None].expand(2, 3, d).contiguous()  # two heads: the table row in registers
    cos = torch.full((3, d), 1.0 + 2**-9)
    with cpu_isa(isa):
        for sin in (torch.zeros(3, d), torch.full((3, d), 0.5)):
            for tables in ((sin, cos), (sin.bfloat16(), cos.bfloat16())):
                assert fixed(x, y, *tables)
                assert_bit_exact(ops.rope_matrix(x, y, *tables), rope_matrix_reference(x, y, *tables))
        out = ops.rope_matrix(x, y, torch.zeros(3, d), cos)
    assert (out[:, 1] != 0).all().item(), "subnormal results flushed to zero"
