"""docs/vendoring.md's checklist of an adopter's duties ("Every duty, as a
checklist"): its C blocks, each marked `/* duty: ... */`, are one whole
module. It is built from those blocks alone and the vendored headers, and
held to what the prose promises: READ_ONLY carried into the array and out
again, a producer with its optional fields zeroed exports, a zeroed holder
released safely, the producer's deleter run exactly once."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dlpack_ref
from support.build_ext import compile_c_extension

DOCS = Path(__file__).resolve().parent.parent / "docs" / "vendoring.md"
HEADING = "## Every duty, as a checklist"


def _section() -> str:
    text = DOCS.read_text()
    start = text.index(HEADING)
    end = text.index("\n## ", start + len(HEADING))
    return text[start:end]


def _duty_blocks(section: str) -> list[str]:
    return [b for b in re.findall(r"```c\n(.*?)```", section, re.S) if b.startswith("/* duty: ")]


def test_the_checklist_names_each_duty_in_prose():
    """Outside the code: the sentences a C author follows."""
    prose = re.sub(r"```.*?```", "", _section(), flags=re.S)
    for duty in ("**Carry `READ_ONLY` into your array.**", "DLPACK_FLAG_BITMASK_READ_ONLY",
                 "**Release the holder exactly once, with `dlpack_ref_release`**",
                 "Releasing a zeroed\n   holder", "returns at once when `managed` is NULL",
                 "**Zero the whole `dlpack_ref_producer` before you fill it.**",
                 "**Name the owner: the object that keeps the memory alive.**",
                 "**Say read-only with `read_only`, not with `flags`.**",
                 "**Set `order` when work may be pending", "**Set `copy` if your arrays can be copied**",
                 "dlpack_ref_get_buffer"):
        assert duty in prose, f"the checklist no longer says {duty!r}"


@pytest.fixture(scope="module")
def duties(tmp_path_factory):
    """The module the checklist's blocks make, compiled once (C99, -Werror)."""
    blocks = _duty_blocks(_section())
    assert len(blocks) >= 5, "the checklist's marked C blocks are missing"
    folder = tmp_path_factory.mktemp("duties")
    vendor = folder / "vendor"
    vendor.mkdir()
    for header in ("dlpack.h", "dlpack_ref.h", "dlpack_ref_tables.h"):
        shutil.copy(Path(dlpack_ref.get_include(), header), vendor / header)
    (folder / "duties.c").write_text("\n".join(blocks))
    compile_c_extension(folder / "duties.c", folder, c_include=[vendor])
    return folder


def _run(folder: Path, code: str) -> str:
    """`code` in a child interpreter (a broken guide may crash it) with the
    module imported as `d`."""
    out = subprocess.run([sys.executable, "-c", "import duties as d\n" + code], cwd=folder, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(folder)}, timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


def test_a_read_only_import_stays_read_only(duties):
    out = _run(duties, """
import numpy as np
x = np.arange(4.0)
x.flags.writeable = False
t = d.from_dlpack(x)
assert t.readonly is True
try:
    t.zero_first()
except ValueError as e:
    assert "read-only" in str(e), e
else:
    raise AssertionError("a read-only import was written")
assert x[0] == 0.0 and x[1] == 1.0
back = np.from_dlpack(t)                       # exported again: still read-only
assert back.ctypes.data == x.ctypes.data and not back.flags.writeable
try:
    t.__dlpack__()                             # the legacy capsule cannot say read-only
except BufferError as e:
    assert "read-only" in str(e), e
else:
    raise AssertionError("a read-only Tensor went out as a legacy capsule")
w = np.arange(1.0, 5.0)
u = d.from_dlpack(w)
assert u.readonly is False
u.zero_first()                                 # writable memory, zero-copy
# NumPy before 2.2 imports every DLPack tensor read-only, its own writable arrays too:
# the export is writable exactly when NumPy imports its own writable array writable
assert w[0] == 0.0 and np.from_dlpack(u).flags.writeable == np.from_dlpack(np.arange(2.0)).flags.writeable
print("ok")
""")
    assert out.strip() == "ok"


def test_a_producer_with_its_optional_fields_zeroed_exports(duties):
    out = _run(duties, """
import numpy as np
x = np.arange(6.0).reshape(2, 3)[:, ::-1]
t = d.from_dlpack(x)
back = np.from_dlpack(t)
assert back.ctypes.data == x.ctypes.data and back.strides == x.strides and (back == x).all()
del back
cap = t.__dlpack__(max_version=(1, 3))
assert type(cap).__name__ == "PyCapsule"
del cap
assert t.__dlpack_device__() == (1, 0)
assert type(d.Tensor.__dict__["__dlpack_c_exchange_api__"]).__name__ == "PyCapsule"
u = d.from_dlpack(t)                           # through the published table
assert np.from_dlpack(u).ctypes.data == x.ctypes.data
try:
    t.__dlpack__(max_version=(1, 3), copy=True)   # copy left NULL: refused
except BufferError as e:
    assert "cannot be copied" in str(e), e
else:
    raise AssertionError("a copy was made without a copy callback")
try:
    d.from_dlpack(x, copy=False, device=(2, 0))
except d.CopyForbiddenError:
    pass
else:
    raise AssertionError("copy=False to CUDA was not refused")
print("ok")
""")
    assert out.strip() == "ok"


def test_a_zeroed_holder_is_released_safely_and_the_deleter_runs_once(duties):
    out = _run(duties, """
import gc, sys
import numpy as np
for _ in range(3):
    e = d.Tensor()                             # never took anything: a zeroed holder
    try:
        e.__dlpack__()
    except BufferError as err:
        assert "holds no memory" in str(err), err
    else:
        raise AssertionError("an empty Tensor exported")
    del e
x = np.arange(4.0)
before = sys.getrefcount(x)
t = d.from_dlpack(x)
assert sys.getrefcount(x) == before + 1        # NumPy's capsule holds x until its deleter
u = d.from_dlpack(t)                           # u holds t (its table export's owner)
del t
gc.collect()
assert sys.getrefcount(x) == before + 1
del u
gc.collect()
assert sys.getrefcount(x) == before, (sys.getrefcount(x), before)   # once: twice would go below
print("ok")
""")
    assert out.strip() == "ok"


_HOOK = '''
import duties
from dlpack_ref.harness.registry import subject
from dlpack_ref.harness.subject import Consumer, Producer

__version__ = "0"
_kept = {}


def __dlpack_conformance__():
    reference = subject("dlpack_ref").producer

    def factory(dtype, shape, readonly=False):
        a = reference.factory(dtype, shape, readonly=readonly)
        t = duties.from_dlpack(a)          # the module's own array: a zero-copy import
        _kept[id(t)] = (t, a.tolist())
        return t

    producer = Producer("duties_check", factory, tolist=lambda x: _kept[id(x)][1], unexportable=lambda: {})
    consumer = Consumer("duties_check", duties.from_dlpack, cpu_device=(1, 0), spec="duties_check")
    return producer, consumer
'''


def test_the_checker_passes_the_module_of_the_checklist(duties):
    """`dlpack-ref check` judges the module both ways: no rule fails, the
    read-only rules of both sides pass, and only what the module has not
    (copies: no copy callback) or the hook gives none of is not supported."""
    import json

    (duties / "duties_check.py").write_text(_HOOK)
    out = subprocess.run([sys.executable, "-m", "dlpack_ref", "check", "--library", "duties_check", "--format",
                          "json"], cwd=duties, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(duties)}, timeout=300)
    report = json.loads(out.stdout)
    status = {r["check"]: r["status"] for r in report["libraries"][0]["results"]}
    assert {c: s for c, s in status.items() if s not in ("pass", "not supported")} == {}
    assert out.returncode == 0, out.stderr[-2000:]
    for rule in ("producer.read_only_flag", "producer.read_only_legacy_refused", "consumer.read_only"):
        assert status[rule] == "pass", rule
    assert {c for c, s in status.items() if s == "not supported"} <= {
        "consumer.copy_true", "producer.copy_true_copies", "producer.copy_true_flag",   # no copy callback
        "producer.view_values", "producer.scalar", "producer.buffererror_for_unexportable"}   # none given
