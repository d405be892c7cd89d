"""The stream typed once, at the door: the header parses a `stream` argument
into a `dlpack_ref_stream` (given, sync, handle) where it enters, the
producer's callbacks receive that struct, and no code after the door (the
core's callbacks, its CUDA layer) reads the argument again."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import dlpack_ref

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
#include <Python.h>
#include <string.h>
#include "dlpack_ref.h"

static PyObject* fields(const dlpack_ref_stream* s) {
    return Py_BuildValue("(iiK)", s->given, s->sync, (unsigned long long)s->handle);
}

/* parse(stream, cuda_memory, device_type=kDLCUDA or kDLCPU): the struct
 * dlpack_ref_stream_parse fills for memory of that device type. */
static PyObject* parse(PyObject* self, PyObject* args) {
    PyObject* stream;
    int cuda, type = -1;
    dlpack_ref_stream s;
    DLDevice dev = {kDLCUDA, 0};
    if (!PyArg_ParseTuple(args, "Op|i", &stream, &cuda, &type)) return NULL;
    dev.device_type = (DLDeviceType)(type >= 0 ? type : cuda ? kDLCUDA : kDLCPU);
    if (dlpack_ref_stream_parse(stream, cuda, dev, self, &s) < 0) return NULL;
    return fields(&s);
}

/* convert(*, stream=None): the "O&" converter, as an adopter's own entry uses it. */
static PyObject* convert(PyObject* self, PyObject* args, PyObject* kwargs) {
    static char* keywords[] = {"stream", NULL};
    dlpack_ref_stream s = dlpack_ref_stream_none();
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O&", keywords, dlpack_ref_stream_converter, &s)) return NULL;
    return fields(&s);
}

/* convert_rocm(*, stream=None): the ROCm converter, from ROCm's None. */
static PyObject* convert_rocm(PyObject* self, PyObject* args, PyObject* kwargs) {
    static char* keywords[] = {"stream", NULL};
    dlpack_ref_stream s = dlpack_ref_stream_none_rocm();
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O&", keywords, dlpack_ref_stream_converter_rocm, &s))
        return NULL;
    return fields(&s);
}

/* What the last producer callback received: ("order" or "copy", fields). */
static PyObject* seen = NULL;

static int record(const char* which, const dlpack_ref_stream* s) {
    PyObject* f = fields(s);
    PyObject* old = seen;
    if (f == NULL) return -1;
    seen = Py_BuildValue("(sN)", which, f);
    Py_XDECREF(old);
    return seen == NULL ? -1 : 0;
}

static int order_cb(void* ctx, const DLTensor* t, const dlpack_ref_stream* s) {
    (void)ctx; (void)t;
    return record("order", s);
}

static int copy_cb(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream* s, DLTensor* out,
                   PyObject** out_owner) {
    (void)target;
    if (record("copy", s) < 0) return -1;
    *out = *src;                       /* the probe's "copy" is its own static memory */
    Py_INCREF((PyObject*)ctx);
    *out_owner = (PyObject*)ctx;
    return 0;
}

/* export(stream, max_version, copy, device_type=kDLCUDAHost):
 * __dlpack__(stream=stream, max_version=max_version, copy=copy) of memory of
 * that device type (pinned host memory by default: CUDA family, so the order
 * callback is called); returns what the callbacks received (None: neither
 * was called). */
static PyObject* export_(PyObject* self, PyObject* args) {
    static float data[4];
    static int64_t shape[1] = {4};
    PyObject *stream, *copy, *max_version, *capsule, *out;
    int type = kDLCUDAHost;
    dlpack_ref_producer p;
    if (!PyArg_ParseTuple(args, "OOO|i", &stream, &max_version, &copy, &type)) return NULL;
    memset(&p, 0, sizeof p);
    p.tensor.data = data;
    p.tensor.device.device_type = (DLDeviceType)type;
    p.tensor.ndim = 1;
    p.tensor.dtype.code = kDLFloat;
    p.tensor.dtype.bits = 32;
    p.tensor.dtype.lanes = 1;
    p.tensor.shape = shape;
    p.owner = self;
    p.ctx = self;
    p.order = order_cb;
    p.copy = copy_cb;
    Py_CLEAR(seen);
    capsule = dlpack_ref_producer_export(&p, stream, max_version, Py_None, copy);
    if (capsule == NULL) return NULL;
    Py_DECREF(capsule);
    out = seen != NULL ? seen : Py_None;
    Py_INCREF(out);
    return out;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS, NULL},
    {"convert", (PyCFunction)(void (*)(void))convert, METH_VARARGS | METH_KEYWORDS, NULL},
    {"convert_rocm", (PyCFunction)(void (*)(void))convert_rocm, METH_VARARGS | METH_KEYWORDS, NULL},
    {"export", export_, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
"""


class _Proto:
    def __init__(self, answer):
        self.answer = answer
        self.calls = 0

    def __cuda_stream__(self):
        self.calls += 1
        return self.answer


# Each kind of stream value and the struct it parses to, (given, sync, handle),
# for CUDA-family memory.
PARSED = [
    (None, (0, 1, 1)),                   # the default: the legacy default stream
    (1, (1, 1, 1)),                      # CU_STREAM_LEGACY
    (2, (1, 1, 2)),                      # CU_STREAM_PER_THREAD
    (3, (1, 1, 3)),
    (2**40, (1, 1, 2**40)),
    (2**63, (1, 1, 2**63)),              # a pointer above INT64_MAX, kept as its 64 bits
    (2**64 - 2, (1, 1, 2**64 - 2)),
    (-1, (1, 0, 1)),                     # no sync; a copy runs on the legacy default stream
    (_Proto((0, 0)), (1, 1, 1)),         # CUDA's NULL stream: the legacy default
    (_Proto((0, 7)), (1, 1, 7)),
    (_Proto((0, 2**64 - 2)), (1, 1, 2**64 - 2)),
]

# Refused values: the exception type and a word of its message.
REFUSED = [
    (0, ValueError, "ambiguous"), (-2, ValueError, "is not valid"), (2**64 - 1, ValueError, "below 2**64 - 1"),
    (2**70, ValueError, "below 2**64 - 1"), (True, TypeError, "not bool"), (1.0, TypeError, "not float"),
    ("1", TypeError, "not str"), (_Proto((1, 7)), ValueError, "protocol version 0"),
    (_Proto((0, -1)), ValueError, "from 0 to 2**64 - 2"), (_Proto([0, 7]), ValueError, "expected (0, handle)"),
]

KDL_ROCM, KDL_ROCM_HOST, KDL_OPENCL, KDL_TPU_HOST = 10, 11, 4, 20

# ROCm's stream values (the array API standard's device-specific notes), for
# ROCm-family memory: None and 0 the default stream (handle 0), -1 no sync.
PARSED_ROCM = [
    (None, (0, 1, 0)),
    (0, (1, 1, 0)),
    (3, (1, 1, 3)),
    (2**40, (1, 1, 2**40)),
    (2**63, (1, 1, 2**63)),
    (2**64 - 2, (1, 1, 2**64 - 2)),
    (-1, (1, 0, 0)),                     # no sync; a copy runs on the default stream
]

REFUSED_ROCM = [
    (1, ValueError, "stream=1 is not supported for ROCm memory"),
    (2, ValueError, "stream=2 is not supported for ROCm memory"),
    (-2, ValueError, "expected None, -1, 0 or a hipStream_t handle > 2"),
    (2**64 - 1, ValueError, "a hipStream_t handle is a 64-bit pointer below 2**64 - 1"),
    (2**70, ValueError, "a hipStream_t handle is a 64-bit pointer below 2**64 - 1"),
    (True, TypeError, "for ROCm memory, not bool"), (0.0, TypeError, "for ROCm memory, not float"),
    ("0", TypeError, "for ROCm memory, not str"),
    (_Proto((0, 7)), TypeError, "for ROCm memory, not _Proto"),    # a CUDA stream is no HIP stream
]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    from support.build_ext import load_c_probe

    folder = tmp_path_factory.mktemp("stream_struct")
    for name in ("dlpack.h", "dlpack_ref.h", "dlpack_ref_tables.h"):
        shutil.copy(Path(dlpack_ref.get_include(), name), folder / name)
    return load_c_probe("stream_struct_probe", PROBE, folder, c_include=[folder])


@pytest.mark.parametrize("stream, parsed", PARSED, ids=repr)
def test_each_kind_of_stream_value_parses_to_its_struct(probe, stream, parsed):
    assert probe.parse(stream, True) == parsed
    assert probe.convert(stream=stream) == parsed
    assert probe.convert() == (0, 1, 1)


@pytest.mark.parametrize("stream, error, word", REFUSED, ids=repr)
def test_a_refused_stream_raises_the_same_error_through_parse_converter_and_export(probe, stream, error, word):
    for call in (lambda: probe.parse(stream, True), lambda: probe.convert(stream=stream),
                 lambda: probe.export(stream, (1, 3), None)):
        with pytest.raises(error) as info:
            call()
        assert word in str(info.value)


def test_cpu_memory_parses_none_only(probe):
    assert probe.parse(None, False) == (0, 1, 1)
    with pytest.raises(ValueError, match="only stream=None is accepted for CPU memory"):
        probe.parse(1, False)
    with pytest.raises(TypeError, match="stream must be None for CPU memory, not str"):
        probe.parse("1", False)



@pytest.mark.parametrize("device_type", [KDL_OPENCL, KDL_TPU_HOST, 99])
def test_memory_of_no_stream_rule_is_refused_naming_its_device_type(probe, device_type):
    name = {KDL_OPENCL: "OPENCL memory", KDL_TPU_HOST: "TPU_PINNED memory", 99: "memory of device type 99"}
    assert probe.parse(None, False, device_type) == (0, 1, 1)
    with pytest.raises(ValueError) as info:
        probe.parse(1, False, device_type)
    assert str(info.value).endswith(f"; only stream=None is accepted for {name[device_type]}")
    with pytest.raises(TypeError, match=f"^stream must be None for {name[device_type]}, not str$"):
        probe.parse("1", False, device_type)


@pytest.mark.parametrize("device_type", [KDL_ROCM, KDL_ROCM_HOST])
@pytest.mark.parametrize("stream, parsed", PARSED_ROCM, ids=repr)
def test_each_rocm_stream_value_parses_to_its_struct(probe, stream, parsed, device_type):
    assert probe.parse(stream, False, device_type) == parsed
    assert probe.convert_rocm(stream=stream) == parsed
    assert probe.convert_rocm() == (0, 1, 0)


@pytest.mark.parametrize("stream, error, word", REFUSED_ROCM, ids=repr)
def test_a_refused_rocm_stream_raises_through_parse_converter_and_export(probe, stream, error, word):
    for call in (lambda: probe.parse(stream, False, KDL_ROCM), lambda: probe.parse(stream, False, KDL_ROCM_HOST),
                 lambda: probe.convert_rocm(stream=stream),
                 lambda: probe.export(stream, (1, 3), None, KDL_ROCM)):
        with pytest.raises(error) as info:
            call()
        assert word in str(info.value)


@pytest.mark.parametrize("device_type", [KDL_ROCM, KDL_ROCM_HOST])
@pytest.mark.parametrize("stream, parsed", PARSED_ROCM, ids=repr)
def test_the_producer_callbacks_receive_the_parsed_rocm_struct(probe, stream, parsed, device_type):
    """ROCm memory is ordered as CUDA memory is: the order callback gets
    the HIP stream (not for -1), the copy callback gets it too."""
    order = probe.export(stream, (1, 3), None, device_type)
    assert order == (None if parsed[1] == 0 else ("order", parsed))
    assert probe.export(stream, None, None, device_type) == order     # the legacy call as well
    assert probe.export(stream, (1, 3), True, device_type) == ("copy", parsed)


@pytest.mark.parametrize("stream, parsed", PARSED, ids=repr)
def test_the_producer_callbacks_receive_the_parsed_struct(probe, stream, parsed):
    """The order callback gets the struct (and is not called for -1); the
    copy callback gets it too, -1 included; a stream object is asked for
    its handle once per call."""
    if isinstance(stream, _Proto):
        stream.calls = 0
    order = probe.export(stream, (1, 3), None)
    assert order == (None if parsed[1] == 0 else ("order", parsed))
    assert probe.export(stream, (1, 3), True) == ("copy", parsed)
    if isinstance(stream, _Proto):
        assert stream.calls == 2


def test_no_code_after_the_door_reads_a_stream_argument_again():
    """The core hands the CUDA layer the struct's fields: it calls the
    header's parse only where a stream enters (the producer call, and one
    converter call each for to_device and cuda.stream), never rebuilds the
    int from the header's int64, and the CUDA layer checks no stream value."""
    core = {p.name: p.read_text() for p in (ROOT / "src").glob("*.pxi")}
    calls = {name: re.findall(r"dlpack_ref_stream_(?:value|parse|converter)\(", text) for name, text in core.items()}
    assert {name: n for name, n in calls.items() if n} == {
        "_export.pxi": ["dlpack_ref_stream_converter(", "dlpack_ref_stream_converter("]}
    for name, text in core.items():
        assert "2**64" not in text, name
    layer = ROOT / "python" / "dlpack_ref"
    for path in [*layer.glob("_cuda*.py"), layer / "_streams.py", layer / "cuda.py"]:
        text = path.read_text()
        assert "getattr" not in text or "__cuda_stream__" not in text, path.name
        assert "2**64" not in text, path.name


def test_the_parsed_fields_pass_unchanged_to_the_cuda_layer():
    """After the door no one turns the struct back into one value and reads
    it again: the core's copies take the struct itself, and the CUDA layer
    takes its fields, with no None-means-legacy or -1-means-no-sync test of
    a raw stream value left anywhere."""
    core = {p.name: p.read_text() for p in (ROOT / "src").glob("*.pxi")}
    assert "cdef Array _copy_to(Array src, DLDevice target, const dlpack_ref_stream* stream):" in core["_copies.pxi"]
    assert "const dlpack_ref_stream* stream) except -1:" in core["_cuda_copies.pxi"]
    layer = ROOT / "python" / "dlpack_ref"
    sources = {**core, **{p.name: p.read_text() for p in [*layer.glob("_cuda*.py"), layer / "_streams.py",
                                                            layer / "cuda.py"]}}
    raw = re.compile(r"handle_of|NO_SYNC|stream (?:is|is not|==|!=) (?:None|-1)|(?:==|!=) -1\b")
    for name, text in sources.items():
        if name == "_allocation.pxi":
            text = text.replace("if n == -1:", "")      # an element count, not a stream
        assert raw.findall(text) == [], name
