"""The persistent Gluon kernel's key runs (SPLIT_KEYS): when a row block is cut between
two CTAs, and that the merged output matches a float32 reference on an sm_90 GPU."""

from __future__ import annotations

import pytest
import torch
from attention_checks import Yardstick
from conftest import KERNEL_SEED, needs_sm90

pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

from kernels import gluon_flash_fwd as gf


@pytest.mark.parametrize(
    ("causal", "tiles", "key_tiles", "ctas", "cut"),
    [
        (False, 1024, 16, 132, True),  # (4,16,16,2048,64): 7.76 row blocks a CTA
        (False, 1056, 16, 132, False),  # 8 each already
        (True, 1024, 16, 132, False),  # causal row blocks differ in length
        (False, 100, 16, 132, False),  # a run shorter than a row block: cut twice
        (False, 100, 16, 100, False),  # fewer row blocks than SMs: one each
        (False, 2**20, 2**12, 132, False),  # run arithmetic past int32
    ],
)
def test_split_runs_only_where_a_row_block_is_cut_at_most_once(causal, tiles, key_tiles,
                                                                ctas, cut):  # fmt: skip
    assert gf.split_runs(causal, tiles, key_tiles, ctas) is cut


def test_workspaces_are_kept_per_stream_and_bounded(monkeypatch):
    # One workspace per (device, stream, CTAs, head_dim), the same object on every call;
    # a process that cycles through more streams than the bound starts over.
    monkeypatch.setattr(gf, "_WORKSPACES", {})
    made = []

    def make() -> tuple[torch.Tensor, ...]:
        made.append(torch.zeros(1))
        return (made[-1],)

    first = gf._kept_workspace((0, 1, 132, 64), make)
    assert gf._kept_workspace((0, 1, 132, 64), make) is first and len(made) == 1
    assert gf._kept_workspace((0, 2, 132, 64), make) is not first
    for stream in range(3, 3 + gf._MAX_WORKSPACES):
        gf._kept_workspace((0, stream, 132, 64), make)
        assert len(gf._WORKSPACES) <= gf._MAX_WORKSPACES
    assert len(made) == 1 + 1 + gf._MAX_WORKSPACES


def test_the_timeline_tool_still_patches_the_kernel():
    # benchmarks/trace_persistent.py builds a traced copy of the kernel by substitution:
    # every snippet it replaces is still there, once. The trace pointer reaches the
    # consumers in their Warpgroup bundle, not through the helpers' signatures.
    from benchmarks import trace_persistent

    source = trace_persistent.KERNEL.read_text()
    traced = trace_persistent.traced_source(source)
    assert traced.count("_now()") > source.count("_now()")
    for wg in (0, 1):
        assert f"Warpgroup(sched, {wg}, PINGPONG, trace_ptr)" in traced
    assert "tr = wg.trace + gl.program_id(0)" in traced
    with pytest.raises(ValueError, match="trace_persistent"):
        trace_persistent.traced_source(source.replace("_block_of(deal, i), it)", ""))


def _jit_functions(source: str) -> dict[str, int]:
    # Each @gluon.jit function of a module's source -> its count of parameters.
    import ast

    counts = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and any(
            ast.unparse(d) == "gluon.jit" for d in node.decorator_list
        ):
            a = node.args
            counts[node.name] = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    return counts


def _launched(source: str) -> set[str]:
    # The functions the module launches with a grid: ``name[grid](...)``.
    import ast

    return {
        node.func.value.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Subscript)
        and isinstance(node.func.value, ast.Name)
    }


def test_kernel_helpers_take_at_most_twelve_arguments():
    # Shared state rides in aggregates (KVRing, QBuffers, Warpgroup, Softmax, Deal,
    # Workspace, ...), which is also how the trace tools reach the consumers. Only the
    # launched kernels take their arguments one by one (no aggregate at launch in 3.6).
    from benchmarks import trace_persistent

    source = trace_persistent.KERNEL.read_text()
    counts = _jit_functions(source)
    launched = _launched(source) & set(counts)
    assert launched == {"_attn_fwd_ws", "_attn_fwd_ws_persistent", "_attn_fwd_simple"}
    assert {"_consumer_loop", "_consume_piece", "_consume_block",
            "_consumer_persistent"} <= set(counts)  # fmt: skip
    too_long = {name: n for name, n in counts.items() if name not in launched and n > 12}
    assert not too_long, too_long


@pytest.mark.parametrize(
    "text",
    ["4,16,16,2048,64,bfloat16", "4,16,16,2048,64,float32,ws-persistent",
     "4,16,16,2048,96,float16,ws-persistent", "4,16,5,2048,64,float16,ws-persistent",
     "4,x,16,2048,64,float16,ws-persistent", "4,16,16,2048,64,float16,ws"],
)  # fmt: skip
def test_the_timeline_tool_names_a_case_it_cannot_trace(text):
    import argparse

    from benchmarks import trace_persistent

    with pytest.raises(argparse.ArgumentTypeError, match=text):
        trace_persistent.parse_case(text)
    assert trace_persistent.parse_case("1,32,4,16384,128,bfloat16,ws-persistent") == (
        (1, 32, 4, 16384, 128), "bfloat16", "ws-persistent")  # fmt: skip


def test_the_timeline_tool_refuses_a_case_its_buffer_cannot_hold():
    # 64 x 32 x 32 row blocks over 132 SMs: up to 497 dealt and a run (499 pieces) a CTA,
    # past the trace's part of a CTA.
    from benchmarks import trace_persistent

    trace_persistent.check_fits((4, 16, 16, 2048, 64), 132)
    trace_persistent.check_fits((1, 32, 4, 16384, 128), 132)
    with pytest.raises(ValueError, match="up to 499 row blocks a CTA on 132 SMs"):
        trace_persistent.check_fits((64, 32, 32, 4096, 64), 132)


def test_the_timeline_summary_prices_each_piece_of_a_run():
    # Two CTAs, 4 key tiles a row block: one whole row block dealt (8 us, so 2 us a key
    # tile), then a run: a first piece of 1 or 2 key tiles (its loop 2 us a key tile + 2,
    # then 1 us: 3 beyond), a whole row block (8.5 + 0.5 us: 1 beyond) and a last piece of
    # 3 or 2 key tiles (2 us a key tile, then 0.25 us: 0.25 beyond).
    from benchmarks import trace_persistent

    def cta(start: int, first: int) -> list[int]:
        tiles = (4, first, 4, 4 - first)
        loops = (8.0, 2 * first + 2, 8.5, 2 * (4 - first))
        afters = (0.0, 1.0, 0.5, 0.25)
        ends, loop_ends, t = [], [], start
        for loop, after in zip(loops, afters, strict=True):
            loop_ends.append(t + int(loop * 1000))
            t = loop_ends[-1] + int(after * 1000)
            ends.append(t)
        header = [start, 0, 0, 4, t, t, 1, 0]
        words = header + [x for end, n in zip(ends, tiles, strict=True) for x in (end, n)]
        return words + [0] * (trace_persistent.RUN_LOOPS - len(words)) + loop_ends[1:]

    record = {"shape": [1, 1, 1, 512, 64], "dtype": "bf16", "variant": "v", "split": 1,
              "rel_err": 0.0, "ctas": [cta(1000, 1), cta(2000, 2)]}  # fmt: skip
    text = trace_persistent.summary(record)
    assert "dealt before the runs (median, count): 8.00 (x2)" in text
    assert (
        "first: 3.00 (1.00 after its loop; x2), middle: 1.00 (0.50 after its loop; x2), "
        "last: 0.25 (0.25 after its loop; x2)"
    ) in text
    # The first piece's fixed 2 us shows as the intercept, its pace as the slope.
    assert "first: 2.000 x key tiles + 2.00; last: 2.000 x key tiles + 0.00" in text
    assert "CTA ends: 28.25 / 28.75 / 29.25 us" in text


def test_the_timeline_summary_of_runs_with_no_row_block_dealt_first():
    # Fewer than two rounds of row blocks: every one is in the runs, so there is no dealt
    # pace to price a piece against; the loop's least-squares line still shows (here 2 us
    # a key tile, a fixed 1 us in the first piece and 0.25 us in the last).
    from benchmarks import trace_persistent

    def cta(start: int, first: int) -> list[int]:
        tiles, loops = (first, 4 - first), (2 * first + 1, 2 * (4 - first))
        loop_ends = [start + loops[0] * 1000, start + (loops[0] + loops[1]) * 1000 + 500]
        ends = [loop_ends[0] + 250, loop_ends[1] + 250]
        words = [start, 0, 0, 2, ends[1], ends[1], 0, 0]
        words += [x for end, n in zip(ends, tiles, strict=True) for x in (end, n)]
        return words + [0] * (trace_persistent.RUN_LOOPS - len(words)) + loop_ends

    record = {"shape": [1, 2, 2, 256, 64], "dtype": "bf16", "variant": "v", "split": 1,
              "rel_err": 0.0, "ctas": [cta(1000, 1), cta(2000, 2)]}  # fmt: skip
    text = trace_persistent.summary(record)
    assert "dealt before the runs (median, count): none" in text
    assert "beyond its key tiles" not in text
    assert (
        "(least squares): first: 2.000 x key tiles + 1.00; last: 2.000 x key tiles + 0.25" in text
    )


SHAPES = [  # (batch, heads_q, heads_kv, seq_q, seq_k, head_dim, dtype, variant)
    (4, 16, 16, 2048, 2048, 64, torch.bfloat16, "ws-persistent-pingpong"),
    (16, 16, 16, 512, 512, 64, torch.float16, "ws-persistent-pingpong"),
    (2, 8, 8, 2049, 2049, 64, torch.float16, "ws-persistent-pingpong"),  # ragged
    (2, 16, 16, 1500, 3000, 64, torch.bfloat16, "ws-persistent-pingpong"),  # seq_q < seq_k
    (1, 32, 4, 4096, 4096, 128, torch.bfloat16, "ws-persistent"),  # GQA
    (2, 16, 16, 4001, 4001, 128, torch.float16, "ws-persistent"),  # ragged
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize(
    ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim", "dtype", "variant"),
    SHAPES,
    ids=[f"{b}x{h}x{hk}x{sq}x{sk}x{d}-{str(t)[6:]}" for b, h, hk, sq, sk, d, t, _ in SHAPES],
)
def test_gpu_cut_row_blocks_match_the_reference(batch, heads_q, heads_kv, seq_q, seq_k,
                                                head_dim, dtype, variant):  # fmt: skip
    cfg = gf.config(head_dim, False, variant, SPLIT_KEYS=1)
    tiles = batch * heads_q * -(-seq_q // 128)
    ctas = min(tiles, torch.cuda.get_device_properties(0).multi_processor_count)
    assert gf.split_runs(False, tiles, -(-seq_k // cfg["BLOCK_N"]), ctas), "not a cut shape"
    gen = torch.Generator().manual_seed(seq_q * 7 + seq_k + KERNEL_SEED)
    q = torch.randn(batch, heads_q, seq_q, head_dim, generator=gen).to("cuda", dtype)
    k = torch.randn(batch, heads_kv, seq_k, head_dim, generator=gen).to("cuda", dtype)
    v = torch.randn(batch, heads_kv, seq_k, head_dim, generator=gen).to("cuda", dtype)
    # A second call: the first left the stream's workspace with every flag lowered.
    _check_calls(q, k, v, variant, calls=2)


@pytest.mark.gpu
@needs_sm90
def test_gpu_many_cuts_in_repeated_calls():
    # The dispatched shape (4,32,32,4096,128): 132 cuts a call, with row block parts of
    # 1 to 31 key tiles on either side; 30 calls on one workspace, each checked, and
    # every flag lowered again after them (else a later merge could read a stale part).
    gen = torch.Generator().manual_seed(4096 + KERNEL_SEED)
    q, k, v = (torch.randn(4, 32, 4096, 128, generator=gen).to("cuda", torch.float16)
               for _ in range(3))  # fmt: skip
    _check_calls(q, k, v, "ws-persistent", calls=30)
    torch.cuda.synchronize()
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    _, _, flags = gf._workspace(q, ctas)
    assert flags.abs().sum().item() == 0, flags.nonzero().flatten().tolist()


def _cut_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed + KERNEL_SEED)
    return tuple(torch.randn(4, 16, 2048, 64, generator=gen).to("cuda", torch.bfloat16)
                 for _ in range(3))  # fmt: skip


@pytest.mark.gpu
@needs_sm90
def test_gpu_calls_on_two_streams_at_once():
    # Each stream has its own workspace: two cut calls running side by side do not
    # read each other's parked parts.
    first, second = _cut_inputs(1), _cut_inputs(2)
    outs = [torch.full_like(first[0], float("nan")) for _ in range(2)]
    streams = [torch.cuda.Stream() for _ in range(2)]
    torch.cuda.synchronize()
    for _ in range(5):
        for stream, (q, k, v), out in zip(streams, (first, second), outs, strict=True):
            with torch.cuda.stream(stream):
                gf.flash_attention_fwd(q, k, v, out=out, variant="ws-persistent-pingpong",
                                       SPLIT_KEYS=1)  # fmt: skip
    torch.cuda.synchronize()
    for (q, k, v), out in zip((first, second), outs, strict=True):
        yardstick = Yardstick.of(q, k, v, causal=False)
        yardstick.assert_rel(out)
        yardstick.assert_max(out)


@pytest.mark.gpu
@needs_sm90
def test_gpu_a_captured_cut_call_replays_beside_eager_calls():
    # A CUDA graph gets a workspace of its own at capture: replays interleaved with
    # eager calls on the stream (which use the stream's) stay correct, on fresh inputs.
    q, k, v = _cut_inputs(3)
    out = torch.empty_like(q)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        gf.flash_attention_fwd(q, k, v, out=out, variant="ws-persistent-pingpong", SPLIT_KEYS=1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            gf.flash_attention_fwd(q, k, v, out=out, variant="ws-persistent-pingpong",
                                   SPLIT_KEYS=1)  # fmt: skip
    torch.cuda.current_stream().wait_stream(stream)
    for seed in (4, 5):
        fresh = _cut_inputs(seed)
        for static, new in zip((q, k, v), fresh, strict=True):
            static.copy_(new)
        eager = torch.full_like(q, float("nan"))
        graph.replay()
        gf.flash_attention_fwd(q, k, v, out=eager, variant="ws-persistent-pingpong",
                               SPLIT_KEYS=1)  # fmt: skip
        yardstick = Yardstick.of(q, k, v, causal=False)
        for result in (out, eager):
            yardstick.assert_rel(result)
            yardstick.assert_max(result)


def _check_calls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str,
                 calls: int) -> None:  # fmt: skip
    yardstick = Yardstick.of(q, k, v, causal=False)
    for _ in range(calls):
        out = torch.full_like(q, float("nan"))
        gf.flash_attention_fwd(q, k, v, out=out, variant=variant, SPLIT_KEYS=1)
        yardstick.assert_rel(out)
        yardstick.assert_max(out)  # a wrong merge could stay local to one row block


def test_the_phase_tool_still_patches_the_kernel():
    # benchmarks/trace_tile_phases.py stamps the key-tile loop of trace_persistent's copy:
    # every snippet it replaces is still there, once, and a missing one is named.
    from benchmarks import trace_tile_phases

    source = trace_tile_phases.tp.KERNEL.read_text()
    phased = trace_tile_phases.phased_source(source)
    assert phased.count(" = _clock()") == 7  # the zero, six stamps a key tile
    assert phased.count("gl.atomic_add(ph_ptr + ") == len(trace_tile_phases.STEPS) + 1
    with pytest.raises(ValueError, match="trace_tile_phases"):
        trace_tile_phases.phased_source(source.replace("        m_i = m_new\n", "", 1))


def test_the_phase_tool_refuses_a_case_whose_stamps_reach_its_words():
    from benchmarks import trace_tile_phases

    trace_tile_phases.check_fits((4, 16, 16, 2048, 64), 132)
    # 16 x 16 x 32 row blocks: up to 65 a CTA, whose stamps pass word 96.
    with pytest.raises(ValueError, match="up to 65 row blocks a CTA; the phases start at word 96"):
        trace_tile_phases.check_fits((16, 16, 16, 4096, 64), 132)


def test_the_phase_summary_gives_each_step_per_key_tile():
    # Two CTAs, one row block each: warpgroup 0 spent (100, 400, 50, 1200, 250) cycles
    # in 10 key tiles on one CTA and twice that in 20 on the other; warpgroup 1 the same
    # but a softmax of 1000 a tile. Per key tile: 10, 40, 5, 120 (100), 25; 200 (180).
    from benchmarks import trace_tile_phases

    def cta(start: int, scale: int) -> list[int]:
        words = [start, 0, 0, 1, start + 20_000, start + 20_500, 1, 0, start + 20_000, 16]
        words += [0] * (trace_tile_phases.PHASE_WORDS - len(words))
        for softmax in (1200, 1000):
            steps = [100, 400, 50, softmax, 250]
            words += [scale * s for s in steps] + [10 * scale, 0, 0]
        return words + [0] * (256 - len(words))

    record = {"shape": [1, 1, 1, 128, 64], "dtype": "bf16", "variant": "v", "split": 0,
              "rel_err": 0.0, "ctas": [cta(1000, 1), cta(2000, 2)]}  # fmt: skip
    steps = trace_tile_phases.per_tile(record)
    assert steps[0] == {"turn": 10, "issue": 40, "Q·K^T wait": 5, "softmax": 120,
                        "P·V wait + rescale": 25, "key tile": 200}  # fmt: skip
    assert steps[1]["softmax"] == 100 and steps[1]["key tile"] == 180
    text = trace_tile_phases.summary(record)
    assert "warpgroup 0: 200 cycles a key tile: turn 10 (5%), issue 40 (20%)" in text
    assert "softmax 100 (56%)" in text
    assert "dealt before the runs (median, count): 20.00 (x2)" in text
