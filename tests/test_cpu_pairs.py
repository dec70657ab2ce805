"""The CPU kernel's bf16 (and fp16 3D) pair rows and head-interleaved batches (cpu_kernel/pair_plan.cpp,
rows_avx512_pairs.h, rope_matrix_cpu.cpp): which rotate matrices take them, bit-exactness on every
kind of pair group, rounding edge cases on both rounding paths, in place, and batch edge cases."""
import pytest
import torch
from npu_ops_transformer_ext.matrices import get_half_matrix
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference
from special_values import special_values

ops = torch.ops.npu_ops_transformer_ext
op = ops.rope_matrix

HAS_AVX512 = ops._cpu_kernel_choice(
    torch.zeros(1, 32, dtype=torch.bfloat16), get_half_matrix(32), torch.zeros(32), torch.zeros(32)
).startswith("avx512")
needs_avx512 = pytest.mark.skipif(not HAS_AVX512, reason="this CPU has no AVX-512")
# Both AVX-512 families where the CPU has them: the default (AVX512_BF16 rounding with a fix-up
# for subnormals, where the CPU has it) and AVX-512 without it (integer rounding only).
ISAS = [None, "avx512"]


def choice(x, y, sin, cos):
    return ops._cpu_kernel_choice(x, y, sin, cos)


def bits(t):
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bit_exact(out, ref):
    """Equal bits, except that a NaN may be any NaN (torch's own conversions disagree on its bits)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(out), nan), "NaN in different places"
    differ = (bits(out) != bits(ref)) & ~nan
    assert not differ.any(), f"{differ.sum().item()} elements differ"


def pair_permutation(d, g, zero_pairs=0, zero_elems=0, group_limit=None):
    """A random signed permutation that moves whole element pairs (2i, 2i+1), each in order or
    swapped, with some all-zero pairs and some single zero columns (a partial permutation)."""
    npairs = d // 2
    if group_limit is None:
        src = torch.randperm(npairs, generator=g)
    else:  # block-diagonal in blocks of group_limit groups of 16 pairs
        block = 16 * group_limit
        src = torch.cat([torch.randperm(block, generator=g) + b for b in range(0, npairs, block)])
    y = torch.zeros(d, d)
    swap = torch.randint(0, 2, (npairs,), generator=g)
    sign = torch.randint(0, 2, (d,), generator=g) * 2 - 1
    for p in range(npairs):
        s = int(src[p])
        for e in range(2):
            j = 2 * p + e
            i = 2 * s + (e ^ int(swap[p]))
            y[i, j] = float(sign[j])
    for p in torch.randperm(npairs, generator=g)[:zero_pairs]:
        y[:, 2 * p : 2 * p + 2] = 0
    for j in torch.randperm(d, generator=g)[:zero_elems]:
        y[:, j] = 0
    return y.bfloat16()


def inputs(shape, d, g, table_dtype=torch.bfloat16):
    x = torch.randn(*shape, d, generator=g).bfloat16()
    sin = torch.randn(shape[-1], d, generator=g).to(table_dtype)
    cos = torch.randn(shape[-1], d, generator=g).to(table_dtype)
    return x, sin, cos


@needs_avx512
@pytest.mark.parametrize(
    "mode,split,kinds",
    [
        ("half", [128], "OOOO"),
        ("half", [64], "OO"),
        ("interleave", [128], "SSSS"),
        ("quarter", [64], "PP"),  # (quarter [128] has the partners of half 64+64: the fixed rows)
        ("half", [48, 40, 40], "PPRP"),  # the third group reads three groups: three runs
        ("interleave", [44, 44, 40], "SSSS"),
        ("half", [64, 32, 32], "OOPP"),
    ],
)
def test_modes_with_even_halves_take_the_pair_rows(mode, split, kinds):
    g = torch.Generator().manual_seed(0)
    y = mode_matrix(mode, split)
    x, sin, cos = inputs((2, 3, 5), sum(split), g)
    assert choice(x, y, sin, cos).endswith(f"/pairs/{kinds}")
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@needs_avx512
def test_what_has_no_pair_form_takes_the_chunk_rows():
    g = torch.Generator().manual_seed(1)
    x, sin, cos = inputs((2, 7), 128, g)
    for y in (mode_matrix("interleave-half", [128]), mode_matrix("half", [42, 42, 44])):  # odd half: 21
        assert choice(x, y, sin, cos).endswith("/chunks")
        assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    x80, s80, c80 = inputs((2, 7), 80, g)  # D not a multiple of 32
    y80 = mode_matrix("half", [80])
    assert choice(x80, y80, s80, c80).endswith("/chunks")
    assert_bit_exact(op(x80, y80, s80, c80), rope_matrix_reference(x80, y80, s80, c80))
    # fp16 and fp32 x keep the chunk rows.
    y = mode_matrix("half", [128])
    assert choice(x.half(), y.float(), sin.float(), cos.float()).endswith("/chunks")
    assert choice(x.float(), y.float(), sin.float(), cos.float()).endswith("/chunks")


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("d,group_limit", [(32, None), (64, None), (96, None), (128, None), (256, 4), (256, 2)])
def test_random_pair_permutations_bit_exact(monkeypatch, isa, d, group_limit):
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    g = torch.Generator().manual_seed(d + (group_limit or 0))
    seen = set()
    for trial in range(6):
        y = pair_permutation(d, g, zero_pairs=trial % 3, zero_elems=trial % 2, group_limit=group_limit)
        tdt = torch.float32 if trial % 2 else torch.bfloat16
        x, sin, cos = inputs((3, 5, 9), d, g, tdt)
        c = choice(x, y, sin, cos)
        assert "/pairs/" in c, c
        seen.update(c.rsplit("/", 1)[1])
        assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    assert seen & set("PQ"), "no permuted group was exercised"


def with_special_values(x, g):
    """x with each of special_values (NaN, infinities, signed zeros, subnormals, near-overflow
    values) at three random places."""
    x = x.clone()
    flat = x.view(-1)
    specials = torch.tensor(special_values(x.dtype), dtype=torch.float64).to(x.dtype)
    where = torch.randint(0, flat.numel(), (3 * len(specials),), generator=g)
    flat[where] = specials.repeat(3)
    return x


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("d", [32, 64, 96, 128])
def test_fp16_pair_permutations_take_the_word_rows_bit_exact(monkeypatch, isa, d):
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    # fp16 x whose rotate matrix moves whole pairs and whose groups read other pairs of the row
    # (3D modes; random pair permutations with swapped, all-zero and single zero columns) takes the
    # pair rows: the row held as words, partners formed by word permutes, converted by halves.
    g = torch.Generator().manual_seed(100 + d)
    taken = 0
    for trial in range(6):
        y = pair_permutation(d, g, zero_pairs=trial % 3, zero_elems=trial % 2).half()
        tdt = torch.float32 if trial % 2 else torch.float16
        x, sin, cos = inputs((3, 5, 9), d, g, tdt)
        x = with_special_values(x.half(), g)
        c = choice(x, y, sin, cos)
        if c.endswith("/chunks"):
            continue  # every group an offset load or its own pairs swapped: the chunk rows' forms
        assert "/pairs/" in c, c
        taken += 1
        assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    assert taken >= 3, "too few random permutations took the pair rows"
    # (44 + 44 + 40 and the other splits of fixed_perms.h take the fixed rows: test_cpu_fixed_rows.py)
    y = mode_matrix("half", [40, 48, 40] if d == 128 else [d // 2 - 4, d // 2 + 4], dtype=torch.float16)
    x, sin, cos = (t.half() for t in inputs((2, 3, 11), d, g))
    assert "/pairs/" in choice(x, y, sin, cos)
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("d", [32, 64, 96, 128])
@pytest.mark.parametrize("table_dtype", [torch.float16, torch.float32])
def test_fp16_half_rotation_keeps_the_chunk_rows(monkeypatch, isa, d, table_dtype):
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    # The half rotation's groups read other pairs of the row where D / 32 is odd (32, 96), but the
    # chunk rows hold it in registers for less: fp16 keeps them there, as at D = 64 and 128.
    g = torch.Generator().manual_seed(200 + d)
    y = mode_matrix("half", [d], dtype=torch.float16)
    x, sin, cos = inputs((2, 3, 11), d, g, table_dtype)
    x = with_special_values(x.half(), g)
    assert choice(x, y, sin, cos).endswith("/chunks")
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@needs_avx512
def test_fp16_pair_rows_in_place_and_streamed():
    g = torch.Generator().manual_seed(11)
    y = mode_matrix("half", [40, 48, 40], dtype=torch.float16)
    x, sin, cos = (t.half() for t in inputs((2, 6, 17), 128, g))
    assert "/pairs/" in choice(x, y, sin, cos)
    ref = rope_matrix_reference(x, y, sin, cos)
    ops.rope_matrix_(x, y, sin, cos)
    assert_bit_exact(x, ref)
    # An output of 16 MiB and more is written with non-temporal stores; 13 heads BNSD: whatever the
    # CPU's batch shape (two, three or four heads a batch), the last batch has one head (table values
    # read where used).
    x, sin, cos = (t.half() for t in inputs((1, 13, 5100), 128, g))
    assert x.numel() * 2 >= 16 << 20
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@needs_avx512
def test_random_pair_permutation_over_more_than_four_groups_falls_back():
    g = torch.Generator().manual_seed(7)
    y = pair_permutation(512, g)  # 16 groups: some group reads from more than four
    x, sin, cos = inputs((2, 3), 512, g)
    assert not choice(x, y, sin, cos).endswith("pairs")
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("mode,split", [("half", [64]), ("interleave", [64]), ("half", [20, 44])])
def test_pair_rows_round_like_c10(monkeypatch, isa, mode, split):
    # Ties (round to nearest even), results that are fp32 subnormals (AVX512_BF16's conversion
    # flushes them; the row is redone on the integer path), NaN and +-Inf.
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    # Row loops: every group an offset load (half), every group its own pairs swapped
    # (interleave), and groups of different kinds ([20, 44]: permutes).
    d = 64
    y = mode_matrix(mode, split)
    vals = [1.0 + 2**-8, 1.0 + 3 * 2**-8, 2**-130, -(2**-133), float("nan"), float("inf"), -float("inf"), 3.0]
    x = torch.tensor([vals * (d // len(vals))]).bfloat16()
    x = torch.cat([x, torch.full((1, d), 2**-127).bfloat16(), torch.randn(1, d).bfloat16()])
    cos = torch.tensor([1.0 + 2**-9] * d)
    # x @ y of a signed permutation moves each value to its partner (a NaN reaches its own and its
    # partner's output only, as the README says), so the fp32 reference here indexes.
    yf = y.float()
    partner, sign = yf.abs().argmax(0), yf.sum(0)
    for sin in (torch.zeros(d), torch.full((d,), 0.5)):
        assert "/pairs/" in choice(x, y, sin, cos)
        ref = (x.float() * cos + (x.float()[..., partner] * sign) * sin).bfloat16()
        assert_bit_exact(op(x, y, sin, cos), ref)
    out = op(x, y, torch.zeros(d), cos)
    assert (out[1] != 0).all().item(), "subnormal results flushed to zero"


@needs_avx512
@pytest.mark.parametrize("mode,split", [("half", [128]), ("interleave", [128]), ("half", [48, 40, 40])])
def test_pair_rows_in_place(mode, split):
    g = torch.Generator().manual_seed(3)
    y = mode_matrix(mode, split)
    x, sin, cos = inputs((2, 6, 17), 128, g)
    assert "/pairs/" in choice(x, y, sin, cos)
    ref = rope_matrix_reference(x, y, sin, cos)
    ops.rope_matrix_(x, y, sin, cos)
    assert_bit_exact(x, ref)


@pytest.mark.parametrize("heads", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("mode,split", [("half", [44, 44, 40]), ("half", [128]), ("interleave", [128])])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_head_interleaved_batches(heads, mode, split, dtype):
    # BNSD batches take two to four heads at a time (by CPU and dtype): head counts that do not divide,
    # BSND, GQA-style qk. A batch of one head reads its table values where used, others load each
    # table row into registers once (half and interleave; bf16 3D reads them per group).
    g = torch.Generator().manual_seed(heads)
    y = mode_matrix(mode, split, dtype=dtype)
    x, sin, cos = (t.to(dtype) for t in inputs((2, heads, 37), 128, g))
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    xs = x.transpose(1, 2).contiguous()  # BSND, tables [S, 1, D]
    assert_bit_exact(op(xs, y, sin[:, None], cos[:, None]),
                     rope_matrix_reference(xs, y, sin[:, None], cos[:, None]))
    k = torch.randn(2, 2, 37, 128, generator=g).to(dtype)
    qo, ko = ops.rope_matrix_qk(x, k, y, sin, cos)
    assert_bit_exact(qo, rope_matrix_reference(x, y, sin, cos))
    assert_bit_exact(ko, rope_matrix_reference(k, y, sin, cos))
    # BSND q and k with different head counts: each takes its own heads per batch.
    ks = k.transpose(1, 2).contiguous()
    qo, ko = ops.rope_matrix_qk(xs, ks, y, sin[:, None], cos[:, None])
    assert_bit_exact(qo, rope_matrix_reference(xs, y, sin[:, None], cos[:, None]))
    assert_bit_exact(ko, rope_matrix_reference(ks, y, sin[:, None], cos[:, None]))
    # A BSND view whose heads are not adjacent rows (every other head of a larger tensor).
    xv = torch.randn(2, 37, 2 * heads, 128, generator=g).to(dtype)[:, :, ::2]
    assert_bit_exact(op(xv, y, sin[:, None], cos[:, None]),
                     rope_matrix_reference(xv, y, sin[:, None], cos[:, None]))


def test_large_output_streams_and_stays_exact():
    # Outputs of 16 MiB and more are written with non-temporal stores; 13 heads: the last batch has
    # one head whatever the CPU's batch shape.
    g = torch.Generator().manual_seed(9)
    y = mode_matrix("half", [128])
    x, sin, cos = inputs((1, 13, 5100), 128, g)
    assert x.numel() * 2 >= 16 << 20
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_one_thread_streams_from_a_smaller_output_and_stays_exact(dtype):
    # On one thread, outputs from 10 MiB (not 16) are written with non-temporal stores; 3D rows and
    # 13 heads BNSD (the last batch has one head whatever the CPU's batch shape).
    g = torch.Generator().manual_seed(12)
    y = mode_matrix("half", [44, 44, 40], dtype=dtype)
    s = (11 << 20) // (13 * 128 * torch.tensor([], dtype=dtype).element_size())
    x, sin, cos = (t.to(dtype) for t in inputs((1, 13, s), 128, g))
    assert 10 << 20 <= x.numel() * x.element_size() < 16 << 20
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = op(x, y, sin, cos)
    finally:
        torch.set_num_threads(threads)
    assert_bit_exact(out, rope_matrix_reference(x, y, sin, cos))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_few_table_rows_many_heads_split_over_threads(dtype):
    # Three table rows, 320 heads (122880 elements, above the size that runs on one thread): one
    # table block whose heads are sliced over the threads; 160 heads and 2 heads: calls below it.
    g = torch.Generator().manual_seed(4)
    y = mode_matrix("half", [44, 44, 40], dtype=dtype)
    for shape in ((8, 40, 3, 128), (4, 40, 3, 128), (1, 2, 3, 128)):
        x = torch.randn(*shape, generator=g).to(dtype)
        sin, cos = torch.randn(2, 3, 128, generator=g).to(dtype).unbind(0)
        assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
        xs = x.transpose(1, 2).contiguous()
        assert_bit_exact(op(xs, y, sin[:, None], cos[:, None]),
                         rope_matrix_reference(xs, y, sin[:, None], cos[:, None]))


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("variant", ["plain", "swapped", "zero"])
def test_run_groups_bit_exact(monkeypatch, isa, variant):
    # Groups whose partner pairs span three groups but form at most three runs take masked loads
    # (R): 3D 48+40+40 as is (no per-group swap or zero-lane step), with its output pairs swapped,
    # and with a zero column; values that round to subnormals, NaN, Inf and ties on both paths.
    # (44+44+40, whose groups are alike, takes the fixed rows: test_cpu_fixed_rows.py.)
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    d = 128
    y = mode_matrix("half", [48, 40, 40])
    if variant == "swapped":
        y = y[:, torch.arange(d) ^ 1]
    elif variant == "zero":
        y = y.clone()
        y[:, 70] = 0
    g = torch.Generator().manual_seed(11)
    x, sin, cos = inputs((2, 3, 9), d, g)
    vals = [1.0 + 2**-8, 1.0 + 3 * 2**-8, 2**-130, -(2**-133), float("nan"), float("inf"), -float("inf"), 3.0]
    x[0, 0] = torch.tensor(vals * (d // len(vals))).bfloat16()
    x[0, 1] = 2**-127
    sin[1] = 0
    c = choice(x, y, sin, cos)
    assert "R" in c.rsplit("/", 1)[1], c
    # x @ y of a signed permutation moves each value to its partner (Inf and NaN reach no other
    # output), so the fp32 reference here indexes.
    yf = y.float()
    partner, sign = yf.abs().argmax(0), yf.sum(0)
    xf = x.float()
    xp = torch.where(sign == 0, torch.zeros(()), xf[..., partner] * sign)
    ref = (xf * cos.float() + xp * sin.float()).bfloat16()
    assert_bit_exact(op(x, y, sin, cos), ref)
    if variant == "plain":
        assert_bit_exact(op(x[1], y, sin, cos), rope_matrix_reference(x[1], y, sin, cos))


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
def test_run_after_a_zero_pair_starts_at_pair_zero(monkeypatch, isa):
    # Group 0's partner pairs form runs (R): pair lanes 0-1 read pairs 20-21, lane 2 is an all-zero
    # pair, lanes 3-4 read pairs 0-1 and lanes 5-15 pairs 40-50. Lane 3's source pair 0 right after
    # the zero lane must start its own run (the run splitter the chunk rows share), not extend
    # lanes 0-1's run.
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    d = 128
    src = [20, 21, -1, 0, 1] + list(range(40, 51))  # source pair per pair lane of group 0
    y = torch.zeros(d, d)
    for lane, s in enumerate(src):
        if s >= 0:
            y[2 * s, 2 * lane] = 1.0
            y[2 * s + 1, 2 * lane + 1] = -1.0
    y = y.bfloat16()
    g = torch.Generator().manual_seed(5)
    x, sin, cos = inputs((2, 3, 7), d, g)
    c = choice(x, y, sin, cos)
    assert c.rsplit("/", 1)[1].startswith("R"), c
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("d", [32, 128])
def test_offset_group_whose_first_live_lane_reads_the_pair_before_it(monkeypatch, isa, d):
    # Group 0's pair lane 0 is all-zero, lane 1 reads pair 0 (source pair = lane - 1) and lanes
    # 2-15 read their own pairs 2-15. The live lanes are not one offset run (lane 1 is at offset -1,
    # the others at 0), so the group must not become an offset group reading pairs 1-15 from
    # lane 1 on: out[2:4] comes from x[0:2], not x[2:4].
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    y = torch.zeros(d, d)
    y[0, 2] = 1.0
    y[1, 3] = -1.0
    for j in range(4, d):
        y[j, j] = 1.0
    y = y.bfloat16()
    g = torch.Generator().manual_seed(11)
    x, sin, cos = inputs((2, 3, 7), d, g)
    c = choice(x, y, sin, cos)
    assert "/pairs/" in c, c
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    # the smallest form: one row, sin 1 and cos 0, so out is x @ y
    x1 = torch.arange(1, d + 1, dtype=torch.bfloat16).reshape(1, d)
    one, zero = torch.ones(1, d, dtype=torch.bfloat16), torch.zeros(1, d, dtype=torch.bfloat16)
    assert_bit_exact(op(x1, y, one, zero), rope_matrix_reference(x1, y, one, zero))


@needs_avx512
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("mode,split", [("half", [128]), ("interleave", [128]), ("half", [48, 40, 40]),
                                        ("quarter", [64]), ("half", [64])])
@pytest.mark.parametrize("heads", [2, 6])
def test_bf16_tables_read_as_they_are(monkeypatch, isa, mode, split, heads):
    # bf16 x with bf16 tables: the pair rows read the caller's table rows and split them in
    # registers, with y's signs XORed into sin there; the same values as fp32 tables (converted per
    # call) give the same bits, special values in the tables included.
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    g = torch.Generator().manual_seed(heads + len(split))
    d = sum(split)
    y = mode_matrix(mode, split)
    x, sin, cos = inputs((heads, 19), d, g)
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 2**-130, -(2**-128), 0.0, -0.0, 3.0]).bfloat16()
    sin[3, : special.numel()] = special
    cos[5, -special.numel():] = special.flip(0)
    assert "/pairs/" in choice(x, y, sin, cos)
    ref = rope_matrix_reference(x, y, sin, cos)
    for xs, sn, cs in ((x, sin, cos), (x.transpose(0, 1).contiguous(), sin[:, None], cos[:, None])):
        r = ref if xs is x else ref.transpose(0, 1)
        assert_bit_exact(op(xs, y, sn, cs), r)
        assert_bit_exact(op(xs, y, sn.float(), cs.float()), r)
