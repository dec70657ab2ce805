"""The CPU kernel's specialised AVX-512 rows (cpu_kernel/rows_avx512_chunks.h): the half rotation
(each chunk loaded once, serving as its partner's partner), a table row held in registers, any
permutation of a row of up to 8 chunks held in registers (3D modes, random permutations),
for every dtype, D and mode that takes them, on cached and on streamed (>= 16 MiB, non-temporal)
outputs, with results that need the exact rounding path (subnormal, NaN, overflow), on both AVX-512
families. Bit for bit against the reference."""
import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference
from special_values import ISAS as FAMILIES
from special_values import assert_bit_exact

op = torch.ops.npu_ops_transformer_ext.rope_matrix

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# The AVX-512 families this CPU has (with and without AVX512_BF16), as NPU_OPS_CPU_ISA caps.
ISAS = [cap for cap, family in FAMILIES if family.startswith("avx512")]
pytestmark = pytest.mark.skipif(not ISAS, reason="this CPU has no AVX-512")


def with_edge_values(x, sin, cos, g):
    """Some rows whose results are subnormal, NaN or infinite (the exact rounding path)."""
    tiny = torch.finfo(x.dtype).tiny
    rows = x.view(-1, x.shape[-1])
    n = rows.shape[0]
    picks = torch.randint(0, n, (6,), generator=g)
    rows[picks[0], 3] = float("nan")
    rows[picks[1], 5] = float("inf")
    rows[picks[2]] = tiny * 0.75  # times cos/sin in (-1, 1): subnormal results
    rows[picks[3], :7] = -tiny * 0.5
    rows[picks[4], -1] = torch.finfo(x.dtype).max
    t = sin.view(-1, sin.shape[-1])
    t[0, 1] = float("nan")
    return x, sin, cos


def operands(shape, d, dtype, g, bsnd=False):
    """x [B, N, S, d] (or [B, S, N, d] with bsnd), tables [S, d] (or [S, 1, d])."""
    b, n, s = shape
    x = torch.randn(b, s, n, d, generator=g) if bsnd else torch.randn(b, n, s, d, generator=g)
    sin = torch.rand(s, d, generator=g) * 2 - 1
    cos = torch.rand(s, d, generator=g) * 2 - 1
    if bsnd:
        sin, cos = sin[:, None], cos[:, None]
    return x.to(dtype), sin.to(dtype).contiguous(), cos.to(dtype).contiguous()


MODES = {
    "half32": ("half", [32]),
    "half64": ("half", [64]),
    "half96": ("half", [96]),
    "half128": ("half", [128]),
    "interleave128": ("interleave", [128]),
    "3d": ("half", [44, 44, 40]),
    "half48": ("half", [48]),  # odd chunk count: no half rotation, tables in registers
    "half40": ("half", [40]),  # D not a multiple of 16: masked chunks
}


@pytest.mark.parametrize("isa", ISAS or [None])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("bsnd", [False, True])
def test_cached_outputs(monkeypatch, isa, dtype, mode, bsnd):
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    kind, sections = MODES[mode]
    d = sum(sections)
    g = torch.Generator().manual_seed(d + len(mode))
    y = mode_matrix(kind, sections, dtype=dtype)
    # 2 x 7 heads (BNSD: a short last batch with three or four heads a batch); 37 table rows: blocks
    # that do not divide evenly.
    x, sin, cos = with_edge_values(*operands((2, 7, 37), d, dtype, g, bsnd), g)
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    # In place takes the same rows with the output being the input.
    xi = x.clone()
    torch.ops.npu_ops_transformer_ext.rope_matrix_(xi, y, sin, cos)
    assert_bit_exact(xi, rope_matrix_reference(x, y, sin, cos))


@pytest.mark.parametrize("isa", ISAS or [None])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["half128", "interleave128", "3d", "half96"])
def test_streamed_outputs(monkeypatch, isa, dtype, mode):
    """Outputs of 16 MiB and more take the non-temporal stores."""
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    kind, sections = MODES[mode]
    d = sum(sections)
    g = torch.Generator().manual_seed(11)
    y = mode_matrix(kind, sections, dtype=dtype)
    s = -(-(16 << 20) // (5 * d * torch.tensor([], dtype=dtype).element_size()))
    x, sin, cos = with_edge_values(*operands((1, 5, s), d, dtype, g), g)
    assert x.numel() * x.element_size() >= 16 << 20
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["half128", "interleave128", "3d"])
@pytest.mark.parametrize("threads", [1, 2])
def test_bnsd_outputs_stream_before_bsnd_ones(dtype, mode, threads):
    """Outputs whose heads lie apart (BNSD) are streamed from 12 MiB (8 MiB on one thread), those of
    adjacent heads (BSND) from 12 or 16 MiB by CPU (8 or 10 MiB on one thread): at 13 MiB on two
    threads and 9 MiB on one, both layouts exact, also through rope_matrix_qk with one operand of
    each layout."""
    kind, sections = MODES[mode]
    g = torch.Generator().manual_seed(15)
    y = mode_matrix(kind, sections, dtype=dtype)
    size = (13 << 20) if threads == 2 else (9 << 20)
    s = size // (5 * 128 * torch.tensor([], dtype=dtype).element_size()) + 3
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for bsnd in (False, True):
            x, sin, cos = with_edge_values(*operands((1, 5, s), 128, dtype, g, bsnd), g)
            assert size <= x.numel() * x.element_size() < size + (1 << 20)
            assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
        q, sin, cos = operands((1, 5, s), 128, dtype, g)
        k = torch.randn(1, s, 5, 128, generator=g).to(dtype).transpose(1, 2)  # BSND memory, BNSD view
        qo, ko = torch.ops.npu_ops_transformer_ext.rope_matrix_qk(q, k, y, sin, cos)
    finally:
        torch.set_num_threads(saved)
    assert_bit_exact(qo, rope_matrix_reference(q, y, sin, cos))
    assert_bit_exact(ko, rope_matrix_reference(k, y, sin, cos))


@pytest.mark.parametrize("mode", ["half128", "3d"])
def test_streamed_float32_heads_longer_than_8_mib(mode):
    """Streamed fp32 BNSD heads of more than 8 MiB of rows may take batches of another size than
    shorter ones (on CPUs with the default batch shape four heads, not two; 5 heads: batches of 4 and
    1); the shorter heads of test_streamed_outputs take the other."""
    kind, sections = MODES[mode]
    g = torch.Generator().manual_seed(14)
    y = mode_matrix(kind, sections)
    s = (8 << 20) // (128 * 4) + 37
    x, sin, cos = with_edge_values(*operands((1, 5, s), 128, torch.float32, g), g)
    assert s * 128 * 4 > 8 << 20
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["half128", "3d"])
@pytest.mark.parametrize("bsnd", [False, True])
def test_streamed_outputs_with_float32_tables(dtype, mode, bsnd):
    """Streamed 16-bit outputs take blocks of up to 1024 table rows; with float32 tables these are
    converted into the block's buffer (1 MiB). 3 heads (BNSD: one batch, or batches of 2 and 1,
    by CPU) and a table row count that leaves a short last block."""
    kind, sections = MODES[mode]
    g = torch.Generator().manual_seed(13)
    y = mode_matrix(kind, sections, dtype=dtype)
    s = 3 * 1024 + 333
    while 3 * s * 128 * 2 < 16 << 20:
        s += 2048
    x, sin, cos = operands((1, 3, s), 128, torch.float32, g, bsnd)
    x, sin, cos = with_edge_values(x.to(dtype), sin, cos, g)
    assert x.numel() * x.element_size() >= 16 << 20
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


@pytest.mark.parametrize("dtype", DTYPES)
def test_table_rows_shared_by_many_heads_and_broadcast_batches(dtype):
    """Runs of rows that share their table rows: many heads per table row, and tables broadcast
    over the batch dim too (every row of a batch reads table row 0)."""
    g = torch.Generator().manual_seed(5)
    y = mode_matrix("half", [128], dtype=dtype)
    x = torch.randn(3, 40, 1, 128, generator=g).to(dtype)
    sin = torch.randn(1, 1, 1, 128, generator=g).to(dtype)
    cos = torch.randn(1, 1, 1, 128, generator=g).to(dtype)
    assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))
    sin3 = torch.randn(3, 1, 1, 128, generator=g).to(dtype)
    cos3 = torch.randn(3, 1, 1, 128, generator=g).to(dtype)
    assert_bit_exact(op(x, y, sin3, cos3), rope_matrix_reference(x, y, sin3, cos3))


def random_signed_permutation(d, g, zero_cols=0):
    """Any signed (partial) permutation of d elements: most chunks need a gather or several runs."""
    src = torch.randperm(d, generator=g)
    sign = torch.randint(0, 2, (d,), generator=g) * 2 - 1
    y = torch.zeros(d, d)
    y[src, torch.arange(d)] = sign.float()
    for j in torch.randperm(d, generator=g)[:zero_cols]:
        y[:, j] = 0
    return y


@pytest.mark.parametrize("isa", ISAS or [None])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [16, 48, 128, 144])
def test_any_permutation_with_the_row_in_registers(monkeypatch, isa, dtype, d):
    """Rows of at most 8 full chunks take any signed permutation from the row held in registers
    (up to four two-source permutes a chunk); longer rows keep the gather. Edge values, in place,
    zero columns; on streamed outputs too."""
    if isa:
        monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    g = torch.Generator().manual_seed(d)
    y = random_signed_permutation(d, g, zero_cols=3).to(dtype)
    x, sin, cos = with_edge_values(*operands((2, 5, 23), d, dtype, g), g)
    kind = torch.ops.npu_ops_transformer_ext._cpu_kernel_choice(x, y, sin, cos)
    assert kind.endswith("/chunks" if d <= 128 else "/chunks-buffered") or "/pairs" in kind, kind
    ref = rope_matrix_reference(x, y, sin, cos)
    assert_bit_exact(op(x, y, sin, cos), ref)
    xi = x.clone()
    torch.ops.npu_ops_transformer_ext.rope_matrix_(xi, y, sin, cos)
    assert_bit_exact(xi, ref)
    if d == 128:
        s = -(-(16 << 20) // (5 * d * x.element_size()))
        x, sin, cos = with_edge_values(*operands((1, 5, s), d, dtype, g), g)
        assert_bit_exact(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos))


def _tuning_from_cpuinfo():
    """The per-CPU tuning the kernel should run with, read from /proc/cpuinfo independently of the
    kernel's CPUID code: "amd-family-19h" for an AMD CPU of family 25 with AVX-512, else "default";
    None where /proc/cpuinfo has no x86 fields."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return None
    fields = {k.strip(): v.strip() for k, sep, v in (line.partition(":") for line in first.splitlines()) if sep}
    if "vendor_id" not in fields:
        return None
    zen4 = (fields["vendor_id"] == "AuthenticAMD" and fields.get("cpu family") == "25"
            and "avx512f" in fields.get("flags", "").split())
    return "amd-family-19h" if zen4 else "default"


def test_the_cpu_tuning_follows_the_cpu():
    """The batch shape and store thresholds of cpu_kernel/cpu_tuning.cpp are chosen by CPUID."""
    want = _tuning_from_cpuinfo()
    if want is None:
        pytest.skip("no x86 /proc/cpuinfo to compare with")
    assert torch.ops.npu_ops_transformer_ext._cpu_tuning(torch.empty(0)) == want
