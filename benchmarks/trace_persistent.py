"""A timeline of the persistent Gluon kernel's CTAs, with and without runs of key tiles.

Builds a copy of ``kernels/gluon_flash_fwd.py`` whose first consumer warpgroup writes
``%globaltimer`` (and its SM, its run) to a trace buffer: when the CTA starts, when
each row block or part of one is stored (or parked, or merged), when each piece of a
run leaves its key-tile loop, and when its loops end. Then, per shape and SPLIT_KEYS,
prints when the CTAs finish (min / median / max: the call lasts until the last), how
long a piece takes by its count of key tiles, the whole row blocks dealt before the
runs, and what a run's first, middle and last pieces cost beyond their key tiles (with
a least-squares line of the first and last pieces' loops: a fixed stall shows as its
intercept), which is where a cut's cost shows (docs/notes/gluon-kernel.md).

    PYTHONPATH=. python3 benchmarks/trace_persistent.py --out DIR   # sm_90 GPU
    ... --repeats 3 --case 16,16,16,512,64,float16,ws-persistent-pingpong

The copy is made by text substitution; when the kernel's code no longer has one of the
snippets below, it stops with the snippet it missed (tests/test_gluon_split.py checks
that they still apply).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "kernels/gluon_flash_fwd.py"
STRIDE = 256  # int64 trace words per CTA: 8 of header, then (end, key tiles) per piece,
RUN_LOOPS = 192  # and from here, when each piece of the run left its key-tile loop

_TIMER = """

@gluon.jit
def _now():  # type: ignore[no-untyped-def]
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64,
                                     is_pure=False, pack=1)


@gluon.jit
def _smid():  # type: ignore[no-untyped-def]
    return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _clock():  # type: ignore[no-untyped-def]  # the SM's cycles (trace_tile_phases.py)
    return gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64,
                                     is_pure=False, pack=1)


@gluon.jit
def _attn_fwd_ws_persistent"""

# (snippet of the kernel, what replaces it): a trace pointer among the launch arguments,
# riding to the consumers in their Warpgroup bundle (a field the copy adds, ``wg.trace``,
# None where a kernel does not pass one), the stamps, and the launcher passing TRACE[0].
SUBSTITUTIONS = [
    ("part_ptr, stat_ptr, flag_ptr,\n                            CAUSAL: gl.constexpr",
     "part_ptr, stat_ptr, flag_ptr, trace_ptr,\n                            CAUSAL: gl.constexpr"),
    ("    PINGPONG: gl.constexpr\n\n    @gluon.constexpr_function\n"
     "    def __init__(self, sched, WG, PINGPONG):",
     "    PINGPONG: gl.constexpr\n    trace: gl.tensor | gl.constexpr\n\n"
     "    @gluon.constexpr_function\n"
     "    def __init__(self, sched, WG, PINGPONG, trace=None):"),
    ("        self.PINGPONG = gl.constexpr(PINGPONG)\n",
     "        self.PINGPONG = gl.constexpr(PINGPONG)\n        self.trace = _field(trace)\n"),
    *[(f"(_consumer_persistent, (qs, ring, Warpgroup(sched, {wg}, PINGPONG)",
       f"(_consumer_persistent, (qs, ring, Warpgroup(sched, {wg}, PINGPONG, trace_ptr)")
      for wg in (0, 1)],
    ("    it = 0\n    # Whole row blocks in one loop",
     f"    tr = wg.trace + gl.program_id(0) * {STRIDE}\n"
     "    if WG == 0:\n"
     "        gl.store(tr, _now())\n"
     "        gl.store(tr + 2, _smid().to(gl.int64))\n"
     "    it = 0\n    # Whole row blocks in one loop"),
    ("_block_of(deal, i), it)\n",
     "_block_of(deal, i), it)\n"
     "        if WG == 0:\n"
     "            gl.store(tr + 8 + 2 * i, _now())\n"
     "            gl.store(tr + 9 + 2 * i, (n_kb + 0 * i).to(gl.int64))\n"
     "    pieces = n_dp\n"
     "    if WG == 0:\n"
     "        gl.store(tr + 6, (n_dp + 0).to(gl.int64))\n"),
    ("            it += n_tiles\n",
     "            it += n_tiles\n"
     "            if WG == 0:\n"
     f"                gl.store(tr + {RUN_LOOPS} + j, _now())\n"),
    ("                                    o_desc, b, h, row0, WG)  # fmt: skip\n",
     "                                    o_desc, b, h, row0, WG)  # fmt: skip\n"
     "            if WG == 0:\n"
     "                gl.store(tr + 8 + 2 * (n_dp + j), _now())\n"
     "                gl.store(tr + 9 + 2 * (n_dp + j), (kb1 - kb0).to(gl.int64))\n"
     "        pieces = n_dp + n_run\n"),
    ("    tma.store_wait(0)\n\n\n@gluon.jit\ndef _attn_fwd_ws_persistent",
     "    if WG == 0:\n"
     "        gl.store(tr + 3, pieces.to(gl.int64))\n"
     "        gl.store(tr + 4, _now())\n"
     "    tma.store_wait(0)\n    if WG == 0:\n        gl.store(tr + 5, _now())" + _TIMER),
    ("q_desc, k_desc, v_desc, o_desc, *scalars, *workspace, *constexprs,",
     "q_desc, k_desc, v_desc, o_desc, *scalars, *workspace, TRACE[0], *constexprs,"),
    ("\n_ROWS = ", "\nTRACE: list[Any] = [None]  # the trace buffer of the next launch\n_ROWS = "),
]  # fmt: skip


def substituted(source: str, substitutions: list[tuple[str, str]], tool: str) -> str:
    """``source`` with each (snippet, replacement) applied; ValueError names a snippet
    that is not there exactly once, and the ``tool`` to update."""
    for old, new in substitutions:
        if source.count(old) != 1:
            raise ValueError(
                f"{KERNEL.name}: expected the snippet {old!r} once, found it "
                f"{source.count(old)} times; update {tool}"
            )
        source = source.replace(old, new)
    return source


def traced_source(source: str) -> str:
    """The kernel module's text with the trace stamps; ValueError names a snippet missed."""
    return substituted(source, SUBSTITUTIONS, "benchmarks/trace_persistent.py")


def module_of(text: str, name: str) -> ModuleType:
    """A module of the kernel's changed ``text``, from a file outside the tree (gluon.jit
    reads its functions' source)."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _traced_module() -> ModuleType:
    return module_of(traced_source(KERNEL.read_text()), "traced_gluon_flash_fwd")


def check_fits(shape: tuple[int, ...], ctas: int) -> None:
    """ValueError where a CTA of ``shape`` would have more pieces than its part of the
    trace buffer holds (the stamps would land in the next CTA's part, or past the end)."""
    batch, heads_q, _, seq, _ = shape
    row_blocks = batch * heads_q * -(-seq // 128)
    # Dealt round-robin, or one round fewer and a run of at most three pieces.
    most = -(-row_blocks // ctas) + 2
    if 8 + 2 * most > RUN_LOOPS:
        raise ValueError(
            f"{shape}: up to {most} row blocks a CTA on {ctas} SMs; the trace holds "
            f"{(RUN_LOOPS - 8) // 2}"
        )


def trace(
    traced: ModuleType, shape: tuple[int, ...], dtype: Any, variant: str, split: int, calls: int
) -> dict[str, Any]:
    """The last of ``calls`` launches' trace, one record per CTA, and the output's error
    (``main`` has checked that the shape fits the trace buffer)."""
    import torch

    from kernels import flash_plan

    batch, heads_q, heads_kv, seq, head_dim = shape
    q = torch.randn(batch, heads_q, seq, head_dim, dtype=dtype, device="cuda")
    k = torch.randn(batch, heads_kv, seq, head_dim, dtype=dtype, device="cuda")
    v = torch.randn(batch, heads_kv, seq, head_dim, dtype=dtype, device="cuda")
    out = torch.empty_like(q)
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    choice = flash_plan.gluon_choice(head_dim, False, variant, {"SPLIT_KEYS": split})
    for _ in range(calls):
        traced.TRACE[0] = torch.zeros(ctas * STRIDE, dtype=torch.int64, device="cuda")
        traced.launch_choice(q, k, v, out, False, head_dim**-0.5, choice)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), enable_gqa=heads_q != heads_kv
    )
    err = ((out.float() - ref).norm() / ref.norm()).item()
    rows = traced.TRACE[0].view(ctas, STRIDE).cpu().tolist()
    return {"shape": list(shape), "dtype": str(dtype), "variant": variant, "split": split,
            "rel_err": err, "ctas": [r for r in rows if r[0]]}  # fmt: skip


def summary(record: dict[str, Any]) -> str:
    ctas = record["ctas"]
    t0 = min(c[0] for c in ctas)

    def spread(values: list[float]) -> str:
        return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f} us"

    by_tiles: dict[int, list[float]] = {}
    dealt: list[float] = []  # the whole row blocks dealt round-robin, before any run
    in_run: list[tuple[str, int, float, float]] = []  # (where in its run, key tiles, us
    # in its key-tile loop, us after it: parking, merging or storing O)
    for c in ctas:
        previous = c[0]
        for i in range(c[3]):
            end, tiles = c[8 + 2 * i], c[9 + 2 * i]
            by_tiles.setdefault(tiles, []).append((end - previous) / 1e3)
            if i < c[6]:
                dealt.append((end - previous) / 1e3)
            else:
                where = "first" if i == c[6] else "last" if i == c[3] - 1 else "middle"
                loop_end = c[RUN_LOOPS + i - c[6]]
                in_run.append((where, tiles, (loop_end - previous) / 1e3, (end - loop_end) / 1e3))
            previous = end
    pieces = ", ".join(
        f"{n}: {statistics.median(us):.2f} (x{len(us)})" for n, us in sorted(by_tiles.items())
    )
    # Fewer than two rounds of row blocks put every one in the runs: no dealt pace.
    tile_us = statistics.median(dealt) / max(by_tiles) if dealt else None
    lines = []
    if in_run and tile_us is not None:
        # A run's first piece is (usually) parked, its last merged: what each costs beyond
        # its key tiles at the dealt row blocks' pace.
        beyond: dict[str, list[tuple[float, float]]] = {}
        for where, tiles, loop_us, finish_us in in_run:
            beyond.setdefault(where, []).append((loop_us + finish_us - tiles * tile_us, finish_us))
        costs = [
            f"{where}: {statistics.median(a for a, _ in us):.2f} "
            f"({statistics.median(f for _, f in us):.2f} after its loop; x{len(us)})"
            for where, us in beyond.items()
        ]
        lines.append(
            "  us beyond its key tiles, by where a piece is in its run (median, count): "
            + ", ".join(costs)
        )
    # A cost that does not grow with the key tiles (the intercept) is a fixed one: a
    # stall when the piece starts, not a slower pace.
    fits = []
    for where in ("first", "last"):
        points = [(n, loop_us) for w, n, loop_us, _ in in_run if w == where]
        if len({n for n, _ in points}) > 1:
            fit = statistics.linear_regression(*zip(*points, strict=True))
            fits.append(f"{where}: {fit.slope:.3f} x key tiles + {fit.intercept:.2f}")
    if fits:
        pace = "" if tile_us is None else f"; dealt pace {tile_us:.3f} a key tile"
        lines.append(f"  us in the key-tile loop (least squares{pace}): {'; '.join(fits)}")
    dealt_us = (
        f"{statistics.median(dealt):.2f} (x{len(dealt)})"
        if dealt
        else "none (fewer than two rounds: every row block is in the runs)"
    )
    return "\n".join([
        f"{tuple(record['shape'])} {record['dtype']} {record['variant']} "
        f"SPLIT_KEYS={record['split']}: {len(ctas)} CTAs, rel. error {record['rel_err']:.2e}",
        f"  loops end (min / median / max): {spread([(c[4] - t0) / 1e3 for c in ctas])}; "
        f"CTA ends: {spread([(c[5] - t0) / 1e3 for c in ctas])}",
        f"  us a piece by its key tiles (median, count): {pieces}",
        f"  us a whole row block dealt before the runs (median, count): {dealt_us}",
        *lines,
    ])  # fmt: skip


Case = tuple[tuple[int, ...], str, str]  # (shape (B, Hq, Hkv, S, D), dtype, variant)
CASES: list[Case] = [
    ((4, 16, 16, 2048, 64), "bfloat16", "ws-persistent-pingpong"),
    ((4, 32, 32, 4096, 128), "float16", "ws-persistent"),
]
VARIANTS = ("ws-persistent", "ws-persistent-pingpong")  # the kernel the tool traces


def parse_case(text: str) -> Case:
    """ "B,Hq,Hkv,S,D,dtype,variant" -> ((B, Hq, Hkv, S, D), dtype, variant); non-causal."""
    fields = text.split(",")
    want = f"want B,Hq,Hkv,S,D,float16|bfloat16,{'|'.join(VARIANTS)}"
    if len(fields) != 7 or fields[5] not in ("float16", "bfloat16") or fields[6] not in VARIANTS:
        raise argparse.ArgumentTypeError(f"{text!r}: {want}")
    try:
        shape = tuple(int(x) for x in fields[:5])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {want}") from None
    if min(shape) < 1 or shape[1] % shape[2] or shape[4] not in (64, 128):
        raise argparse.ArgumentTypeError(
            f"{text!r}: sizes >= 1, Hq a multiple of Hkv, head_dim 64 or 128"
        )
    return shape, fields[5], fields[6]


def case_parser(doc: str, cases: int) -> argparse.ArgumentParser:
    """The options both trace tools take: --out, --calls and --case (``cases``: how many
    the tool traces by default)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=20, help="launches before the traced one")
    parser.add_argument(
        "--case",
        type=parse_case,
        action="append",
        help=f"B,Hq,Hkv,S,D,dtype,variant (repeatable; default: the {cases} in CASES)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = case_parser(__doc__, len(CASES))
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="traces per case and SPLIT_KEYS, in the order 0 1 1 0 0 1 ... (a drift in the"
        " GPU's clock then falls on both)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: want 1 or more")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("trace_persistent.py: needs an sm_90 GPU (Hopper)", file=sys.stderr)
        return 2
    for shape, _, _ in args.case or CASES:
        try:
            check_fits(shape, torch.cuda.get_device_properties(0).multi_processor_count)
        except ValueError as error:
            parser.error(f"--case {error}")
    args.out.mkdir(parents=True, exist_ok=True)
    traced = _traced_module()
    records = []
    for shape, dtype, variant in args.case or CASES:
        for split in [s if r % 2 == 0 else 1 - s for r in range(args.repeats) for s in (0, 1)]:
            record = trace(traced, shape, getattr(torch, dtype), variant, split, args.calls)
            records.append(record)
            print(summary(record), flush=True)
            (args.out / "trace.json").write_text(json.dumps(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
