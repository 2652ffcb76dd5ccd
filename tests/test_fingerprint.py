"""The case fingerprint: equal for one kernel built from two checkouts, different when
the compiled code or the launch changes (compiled for sm_90 without a GPU)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import random
import re
import secrets
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from guard.measure import fingerprint as fp

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parent.parent

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * {factor}, mask=mask)


def launch(x, y, block={block}):
    n = x.numel()
    _scale[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)
"""

# A persistent loop whose round count is written two ways: triton emits the PTX's
# special-register reads in another order (and numbers registers differently), and
# ptxas makes one binary of both.
ROUNDS_INLINE = "    rounds = tl.cdiv(n * k - tl.program_id(0), tl.num_programs(0))\n"
ROUNDS_NAMED = (
    "    ctas = tl.num_programs(0)\n    p = tl.program_id(0)\n"
    "    rounds = tl.cdiv(n * k - p, ctas)\n"
)
PERSISTENT = """
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, k, BLOCK: tl.constexpr):
{rounds}    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for r in range(rounds):
        start = r * tl.num_programs(0) * BLOCK
        mask = offs + start < n
        tl.store(y_ptr + offs + start, tl.load(x_ptr + offs + start, mask=mask) * 2.0, mask=mask)


def launch(x, y):
    _scale[(4,)](x, y, x.numel() // 128, 1, BLOCK=128)
"""


CHILD = """
import hashlib, importlib.util, sys, torch
from guard.measure import fingerprint as fp
from kernel_reports import triton_compile

spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[sys.argv[2]] = module
spec.loader.exec_module(module)
x = torch.randn(int(sys.argv[3]))
with triton_compile.compile_only("sm_90") as compiled, fp.capture_triton_launches() as launches:
    module.launch(x, torch.empty_like(x))
assert launches, "the launch was not recorded"
ptx = fp.normalize_ptx(compiled[-1].kernel.asm["ptx"])
print("ptx", hashlib.sha256(ptx.encode()).hexdigest())
print(fp.fingerprint(launches, [], {}))
"""


def _load(tmp: Path, name: str, *, factor: str = "2.0", block: int = 128, pad: int = 0) -> Path:
    folder = tmp / name
    folder.mkdir()
    path = folder / f"{name}.py"
    source = textwrap.dedent(KERNEL.format(factor=factor, block=block))
    path.write_text("# padding\n" * pad + source)
    return path


def _compiled(path: Path, n: int = 1024) -> tuple[str, str]:
    """(fingerprint, digest of the normalized PTX) of the kernel's launch, compiled in a
    fresh process: other tests run this one under TRITON_INTERPRET=1, where triton.jit
    interprets and compiles nothing."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), path.stem, str(n)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    *_, ptx, print_ = proc.stdout.strip().splitlines()
    return print_, ptx


def _fingerprint(path: Path, n: int = 1024) -> str:
    return _compiled(path, n)[0]


def test_same_kernel_from_two_checkouts_and_shifted_lines_is_identical(tmp_path):
    a = _fingerprint(_load(tmp_path, "fp_base"))
    b = _fingerprint(_load(tmp_path, "fp_head", pad=7))  # other path, other line numbers
    assert a == b
    assert a.startswith("gpu:")


def test_ptx_reordered_into_one_binary_is_identical(tmp_path):
    paths = []
    for name, rounds in (("fp_inline", ROUNDS_INLINE), ("fp_named", ROUNDS_NAMED)):
        (tmp_path / name).mkdir()
        paths.append(tmp_path / name / f"{name}.py")
        paths[-1].write_text(PERSISTENT.format(rounds=rounds))
    (inline, inline_ptx), (named, named_ptx) = (_compiled(p) for p in paths)
    assert inline_ptx != named_ptx  # else this test shows nothing
    assert inline == named


def test_a_change_in_code_changes_the_fingerprint(tmp_path):
    base = _fingerprint(_load(tmp_path, "fp_b_code"))
    head = _fingerprint(_load(tmp_path, "fp_h_code", factor="3.0"))
    assert base != head


def test_a_change_in_grid_alone_changes_the_fingerprint(tmp_path):
    # The same compiled kernel (1024 and 2048 specialize alike: both divisible by 16)
    # launched on 8 and on 16 programs.
    path = _load(tmp_path, "fp_grid")
    assert _fingerprint(path, n=1024) != _fingerprint(path, n=2048)


def test_normalize_ptx_drops_locations_and_debug_sections():
    ptx = textwrap.dedent(
        """
        .version 8.7
        .file 1 "/a/b/kernel.py"
        .visible .entry k() {
            .loc 1 12 5
            ret; // done
        }
        .section .debug_str
        {
        .b8 47,97
        }
        """
    )
    text = fp.normalize_ptx(ptx)
    assert "kernel.py" not in text and ".loc" not in text and "debug" not in text
    assert "ret;" in text and ".visible .entry k()" in text


def test_normalize_ptx_ignores_renumbered_debug_labels_not_branch_labels():
    # An inlined helper adds "$L__tmpN:" labels (debug info only); "$L__BB" labels are
    # branch targets and stay.
    before = ".entry k() {\n$L__tmp3:\n add.s32 %r1, %r2, 1;\n$L__BB0_1:\n ret;\n}\n"
    after = ".entry k() {\n$L__tmp4:\n$L__tmp5:\n add.s32 %r1, %r2, 1;\n$L__BB0_1:\n ret;\n}\n"
    assert fp.normalize_ptx(before) == fp.normalize_ptx(after)
    assert "$L__BB0_1:" in fp.normalize_ptx(before)
    assert fp.normalize_ptx(before) != fp.normalize_ptx(before.replace("%r2, 1", "%r2, 2"))


def test_without_device_work_seen_the_fingerprint_is_the_tree_hash(tmp_path):
    (tmp_path / "k.py").write_text("x = 1\n")
    before = fp.tree_hash(tmp_path)
    assert fp.take(lambda: 7, tmp_path) == (7, f"source:{before}")  # no device work
    (tmp_path / "k.py").write_text("x = 2\n")
    assert fp.tree_hash(tmp_path) != before


def test_the_tree_hash_counts_a_link_by_its_text_and_never_reads_through_it(tmp_path):
    """A link in kernels/ to a 2 GiB file outside the tree (sparse: no disk used) was
    read whole, in every worker. Now only the link's text counts: what it points at
    can change without changing the hash, and retargeting the link changes it."""
    tree, outside = tmp_path / "kernels", tmp_path / "outside"
    (tree / "sub").mkdir(parents=True)
    outside.mkdir()
    (tree / "k.py").write_text("x = 1\n")
    blob = outside / "blob"
    with blob.open("wb") as fh:
        fh.truncate(2**31)
    (tree / "blob").symlink_to(blob)
    (tree / "sub" / "dir").symlink_to(outside, target_is_directory=True)
    with_big = fp.tree_hash(tree)
    blob.unlink()
    blob.write_text("small, and other content\n")  # same link text, other target content
    (outside / "more.py").write_text("y = 2\n")  # inside the linked folder: not walked
    assert fp.tree_hash(tree) == with_big
    (tree / "blob").unlink()
    (tree / "blob").symlink_to(outside / "more.py")
    assert fp.tree_hash(tree) != with_big  # a changed link is a change
    (tree / "blob").unlink()
    assert fp.tree_hash(tree) != with_big  # and so is a removed one
    (tree / "k.py").write_text("x = 2\n")
    assert fp.tree_hash(tree) != with_big


def test_extension_digests_are_read_in_chunks(tmp_path):
    ext = tmp_path / "ext.so"
    ext.write_bytes(b"\x7fELF" + bytes(3 << 20))  # over one chunk
    expected = hashlib.sha256(ext.read_bytes()).hexdigest()
    assert fp._file_digest(str(ext), ext.stat().st_mtime_ns) == expected


def test_an_extra_device_kernel_or_another_extension_binary_changes_the_fingerprint():
    copy = {"name": "copy_kernel", "grid": [4, 1, 1], "block": [128, 1, 1], "shared": 0}
    attn = {"name": "flash_fwd", "grid": [8, 16, 1], "block": [128, 1, 1], "shared": 69632}
    base = fp.fingerprint([], [attn], {"ext": "aa"})
    assert base.startswith("gpu:") and fp.fingerprint([], [attn], {"ext": "aa"}) == base
    assert fp.fingerprint([], [attn, copy], {"ext": "aa"}) != base
    assert fp.fingerprint([], [attn], {"ext": "bb"}) != base


def test_a_shared_object_loaded_outside_sys_modules_counts(tmp_path):
    # torch's cpp_extension.load imports a built extension with module_from_spec, which
    # never enters sys.modules; ctypes neither. The fingerprint must still see its bytes.
    import ctypes
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a shared object")
    source = tmp_path / "ext.c"
    source.write_text(f"int planted(void) {{ return {secrets.randbelow(1 << 30)}; }}\n")
    ext = tmp_path / "built_ext.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(ext), str(source)], check=True)
    ctypes.CDLL(str(ext))
    digest = hashlib.sha256(ext.read_bytes()).hexdigest()
    assert fp.loaded_extensions().get(str(ext)) == digest
    # The system's own libraries are the same for both arms and stay out.
    assert not any(path.startswith("/usr/") for path in fp.loaded_extensions())


def test_triton_launch_stubs_in_its_cache_stay_out_and_nothing_else(tmp_path, monkeypatch):
    # triton builds a host stub per kernel signature into its cache and loads it on the
    # first launch: another stub for one more constexpr, with the same device binary.
    import ctypes
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a shared object")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    cache, elsewhere = tmp_path / "cache" / "ABC", tmp_path / "mine"
    deeper = cache / "DEF"
    deeper.mkdir(parents=True)
    elsewhere.mkdir()
    source = tmp_path / "stub.c"
    source.write_text(f"int launch(void) {{ return {secrets.randbelow(1 << 30)}; }}\n")
    built = []
    for folder, name in (
        (cache, f"__triton_launcher{suffix}"),
        (cache, f"cuda_utils{suffix}"),
        (cache, "my_kernels.so"),  # not a stub's name: counts, even in the cache
        (cache, f"__triton_launcher_mine{suffix}"),  # nor this one
        (deeper, f"__triton_launcher{suffix}"),  # not where triton puts its stubs: counts
        (elsewhere, f"__triton_launcher{suffix}"),  # outside the cache: counts
    ):
        built.append(folder / name)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(built[-1]), str(source)], check=True)
        ctypes.CDLL(str(built[-1]))
    assert fp._triton_stub_dir().endswith(os.sep)
    monkeypatch.setattr(fp, "_triton_stub_dir", lambda: str(tmp_path / "cache") + os.sep)
    seen = fp.loaded_extensions()
    assert [str(p) in seen for p in built] == [False, False, True, True, True, True]


def test_a_case_counts_the_extensions_it_loaded_or_launched_a_kernel_of(tmp_path):
    # A worker keeps every extension an earlier case loaded mapped; a change to the CUDA
    # extension must not make the Triton cases after it look changed, and must make the
    # case that launches its kernel look changed.
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a shared object")
    built = {}
    for name in ("attn_fwd_planted", "other_kernel"):
        source = tmp_path / f"{name}.c"
        source.write_text(f"int {name}(void) {{ return {secrets.randbelow(1 << 30)}; }}\n")
        built[name] = tmp_path / f"{name}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(built[name]), str(source)], check=True)
    now = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in built.values()}
    launched = [{"name": "void ns::attn_fwd_planted<float, 128>(Params)", "grid": [1, 1, 1]}]
    used = fp.extensions_used(set(now), now, launched)
    assert set(used) == {str(built["attn_fwd_planted"])}
    assert fp.extensions_used(set(now), now, [{"name": "triton_attn_kernel"}]) == {}
    # What the call loaded itself counts, whatever it launched.
    assert set(fp.extensions_used(set(), now, [])) == set(now)


@pytest.mark.parametrize(
    ("profiled", "token"),
    [
        (
            "void flash_sm90::flash_fwd_sm90_kernel<flash_sm90::Traits<64, 128>, false>(P)",
            b"flash_fwd_sm90_kernel",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, 9>(float*)",
            b"softmax_warp_forward",
        ),
        (
            "void at::native::(anonymous namespace)::distribution_kernel<float>(int)",
            b"distribution_kernel",
        ),
        ("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp)", b"reduce_kernel"),
        ("_attn_fwd", b"_attn_fwd"),
        ("void (anonymous namespace)::f<int>(int)", b""),  # too short to mean anything
        ("void", b""),
    ],
)
def test_the_kernel_token_is_the_function_name_never_a_return_type(profiled, token):
    # Seen on an H100: "void (anonymous namespace)::softmax_warp_forward<...>" gave the
    # token "void", found in every C++ extension, so every case counted the CUDA one.
    assert fp._kernel_token(profiled) == token


def _elf(sections: list[tuple[str, int, bytes]]) -> bytes:
    """A 64-bit little-endian ELF file of (name, type, bytes) sections after the null
    one, with its section-name table last; a type-8 (NOBITS) section's bytes give only
    its size."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    body, headers, at = b"", [bytes(64)], 64
    name_at = 1
    for name, kind, data in [*sections, (".shstrtab", 3, names)]:
        stored = b"" if kind == 8 else data
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, at, len(data), 0, 0, 1, 0))
        body += stored
        at += len(stored)
        name_at += len(name) + 1
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    header = struct.pack(
        "<16sHHIQQQIHHHHHH", ident, 2, 190, 1, 0, 0, at, 0, 64, 0, 0, 64, len(headers),
        len(headers) - 1,
    )  # fmt: skip
    return header + body + b"".join(headers)


def _cubin(text: bytes = b"\x01\x02", line: bytes = b"12", shared: int = 1024) -> bytes:
    return _elf([
        (".text.k", 1, text),
        (".debug_line", 1, line),
        (".nv_debug_ptx_txt", 1, b"ld.global" + line),
        (".nv.shared.k", 8, bytes(shared)),
    ])  # fmt: skip


def test_machine_code_leaves_out_only_the_debug_sections():
    code = fp.machine_code(_cubin())
    assert code is not None and b"\x01\x02" in code and b"ld.global" not in code
    # Other line numbers, longer or not (the sections after them move in the file).
    assert fp.machine_code(_cubin(line=b"13")) == code
    assert fp.machine_code(_cubin(line=b"1234567")) == code
    assert fp.machine_code(_cubin(text=b"\x01\x03")) != code
    assert fp.machine_code(_cubin(shared=2048)) != code  # its size, though no bytes


def test_machine_code_refuses_what_is_no_readable_elf_file():
    assert fp.machine_code(b"") is None
    assert fp.machine_code(b"\x7fELF\x01\x01" + bytes(100)) is None  # 32-bit
    whole = _cubin()
    assert fp.machine_code(whole[: len(whole) // 2]) is None  # cut short
    far = bytearray(whole)
    struct.pack_into("<Q", far, 0x28, 2**63)  # section headers past any file
    assert fp.machine_code(bytes(far)) is None


def test_machine_code_refuses_sections_that_overlap():
    # Many headers on one large body would make the digest read it again and again.
    body = bytes(4096)
    overlapping = _elf([(".text.k", 1, body)])
    shoff = struct.unpack_from("<Q", overlapping, 0x28)[0]
    text_header = overlapping[shoff + 64 : shoff + 128]
    shnum = struct.unpack_from("<H", overlapping, 0x3C)[0]
    bomb = bytearray(overlapping + text_header * 50)
    struct.pack_into("<HH", bomb, 0x3C, shnum + 50, shnum - 1)
    assert fp.machine_code(bytes(bomb)) is None


def test_launch_attributes_and_tma_blocks_count_beside_the_machine_code():
    from types import SimpleNamespace

    def digest(**meta: object) -> str:
        fields = {"name": "k", "num_warps": 4, "launch_pdl": False,
                  "tensordesc_meta": [{"swizzle": 3, "block_size": [64, 64]}], **meta}  # fmt: skip
        return fp.kernel_code_digest(
            SimpleNamespace(metadata=SimpleNamespace(**fields), asm={"cubin": _cubin()})
        )

    assert digest() == digest()
    assert digest(launch_pdl=True) != digest()
    assert digest(tensordesc_meta=[{"swizzle": 2, "block_size": [64, 64]}]) != digest()
    assert digest(num_warps=8) != digest()


OLD_DEBUG_SECTION = re.compile(
    r"^\s*\.section\s+\.debug_\w+\s*\{.*?^\s*\}", re.MULTILINE | re.DOTALL
)


def _old_normalize(ptx: str) -> str:
    text = OLD_DEBUG_SECTION.sub("", ptx)
    for pattern in (fp._LOCATION_LINE, fp._DEBUG_LABEL, fp._COMMENT):
        text = pattern.sub("", text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def test_normalize_ptx_is_the_regex_it_replaced_in_one_pass() -> None:
    rng = random.Random(11)
    pieces = [
        "\tadd.s32 %r1, %r2, 1;", ".section .debug_info {", ".section .debug_abbrev",
        "{", "}", "\t}", "  .b8 1,2,3", "", "// a comment", ".loc 1 2 3", "$L__tmp4:",
        "} // closing with a comment", "$L__BB0_1:", ".section .nv.shared {",
    ]  # fmt: skip
    for _ in range(500):
        ptx = "\n".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
        assert fp.normalize_ptx(ptx) == _old_normalize(ptx), ptx
    # Sections left unclosed (718 KB of them took the regex over a minute): kept, as
    # the regex kept them, the rest of the text normalized.
    unclosed = "\n".join([".section .debug_str {", "\t.b8 0"] * 20_000) + "\n\tret;"
    assert fp.normalize_ptx(unclosed).endswith("\tret;")
