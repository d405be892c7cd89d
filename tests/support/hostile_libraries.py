"""Libraries that behave as real ones sometimes do, written as files in a
folder on PYTHONPATH so that the checker's children import them by name:
one that exits at import, one that prints (with print and at the
file-descriptor level), one that replaces numpy.from_dlpack, one with
nothing to check, one whose hook returns None, two whose names need
quoting (one holds a newline and a statement). Each is a few lines of the source below; :func:`write` puts them
in a folder, and the fixture :func:`hostile` (imported by a test module)
puts that folder on PYTHONPATH for the module's tests."""

import textwrap

import pytest

from . import command

# a from_dlpack that breaks consumer.copy_true: a failure to reproduce
DROPS_COPY = '''
    import dlpack_ref

    def from_dlpack(x, **kwargs):  # drops copy=True
        kwargs.pop("copy", None)
        return dlpack_ref.from_dlpack(x, **kwargs)
    '''

SOURCES = {
    "exits_at_import": "raise SystemExit(0)\n",
    "prints_everywhere": '''
        import os
        print("printed at import")
        os.write(1, b"written to fd 1 at import\\n")
        import dlpack_ref as dr
        from dlpack_ref.conformance import Consumer, Producer

        def make(dtype, shape, readonly=False):
            print("printed by the factory")
            os.write(1, b"written to fd 1 by the factory\\n")
            return dr.zeros(shape, dtype=dtype)

        def __dlpack_conformance__():
            print("printed by the hook")
            return (Producer("prints", make),
                    Consumer("prints", dr.from_dlpack, tolist=lambda r: r.tolist(), data_ptr=lambda r: r.data_ptr,
                             readonly=lambda r: r.readonly, cpu_device="cpu"))
        ''',
    "replaces_numpy_from_dlpack": '''
        import numpy
        _original = numpy.from_dlpack

        def from_dlpack(x, **kwargs):  # a copy with other values
            return _original(x, **kwargs) * 2 + 1

        numpy.from_dlpack = from_dlpack
        ''',
    "nothing_to_check": "VERSION = 1\n",
    "hook_returns_none": "def __dlpack_conformance__():\n    return None\n",
    'quote"and\\backslash': DROPS_COPY,
    'x\nprint("INJECTED")': DROPS_COPY,
    # Not shaped like NumPy: what the generic adapter and the hooks must judge as what it is.
    "no_dunder_dlpack": '''
        float32 = float64 = "a dtype"

        class Thing:  # heat's DNDarray: arrays without __dlpack__
            def __init__(self, values):
                self.values = values

        def asarray(values, dtype=None):
            return Thing(values)

        def reshape(x, shape):
            return x
        ''',
    "capsule_only": '''
        import dlpack_ref
        import numpy as np

        def from_dlpack(capsule):  # scirs2's: a legacy capsule only, every element widened to float64
            if type(capsule).__name__ != "PyCapsule":
                raise TypeError("from_dlpack: argument must be a PyCapsule")
            return np.asarray(dlpack_ref.from_dlpack(capsule), dtype=np.float64)
        ''',
    "producer_without_asarray": '''
        import dlpack_ref

        class Tensor:  # numkong's: made by from_dlpack, a versioned producer, no asarray
            def __init__(self, a):
                self._a = a

            def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
                return self._a.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

            def __dlpack_device__(self):
                return self._a.__dlpack_device__()

            def __getitem__(self, key):
                return Tensor(self._a[key])

            @property
            def T(self):
                return Tensor(self._a.T)

            @property
            def shape(self):
                return self._a.shape

            @property
            def dtype(self):
                return self._a.dtype

            def __float__(self):
                return float(self._a)

        def from_dlpack(x, **kwargs):
            return Tensor(dlpack_ref.from_dlpack(x, **kwargs))
        ''',
    "single_use": '''
        import dlpack_ref as dr
        from dlpack_ref.conformance import Consumer, Producer

        __version__ = "3.1"

        class Once:  # ctypes-dlpack's DLPackArray: each array exports once
            def __init__(self, a):
                self._a, self._used = a, False

            def __dlpack__(self, **kwargs):
                if self._used:
                    raise RuntimeError("can not call __dlpack__ twice")
                self._used = True
                return self._a.__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return self._a.__dlpack_device__()

        def make(dtype, shape, readonly=False):
            if readonly:
                raise NotImplementedError("no read-only arrays")
            return Once(dr.zeros(shape, dtype=dtype))

        def __dlpack_conformance__():
            return Producer("single_use", make), None
        ''',
    "plain_enum_device": '''
        import enum
        import dlpack_ref as dr
        from dlpack_ref.conformance import Consumer, Producer

        class DLDeviceType(enum.Enum):  # open3d's: a plain Enum, not an IntEnum
            CPU = 1
            CUDA = 2

        class Tensor:
            def __init__(self, a, device=None):
                self._a, self._device = a, device

            def __dlpack__(self, *, stream=None, dl_device=None, **kwargs):
                if stream is not None:
                    raise BufferError("only stream=None for CPU data")
                if dl_device is not None:  # its own enum, as the number dlpack_ref takes
                    dl_device = (getattr(dl_device[0], "value", dl_device[0]), dl_device[1])
                return self._a.__dlpack__(dl_device=dl_device, **kwargs)

            def __dlpack_device__(self):
                return (self._device or DLDeviceType.CPU, 0)

            def tolist(self):
                return self._a.tolist()

        def make(dtype, shape, readonly=False):
            if readonly:
                raise NotImplementedError("no read-only tensors")
            return Tensor(dr.zeros(shape, dtype=dtype))

        def from_dlpack(x, **kwargs):
            if x.__dlpack_device__()[0] == 2:  # a CUDA tensor is kept as a device tensor, not read
                return Tensor(None, DLDeviceType.CUDA)
            return Tensor(dr.from_dlpack(x, **kwargs))

        def __dlpack_conformance__():
            return (Producer("plain_enum_device", make, tolist=lambda x: x.tolist()),
                    Consumer("plain_enum_device", from_dlpack, tolist=lambda r: r.tolist(),
                             data_ptr=lambda r: r._a.data_ptr, readonly=lambda r: r._a.readonly))
        ''',
    "unreadable_pointer": '''
        import dlpack_ref as dr
        from dlpack_ref.conformance import Consumer

        class Result:  # heat's and pydlpack's results: values, but no way to read where the data is
            def __init__(self, a):
                self._a = a

        def from_dlpack(x, **kwargs):
            return Result(dr.from_dlpack(x, **kwargs))

        def __dlpack_conformance__():
            return None, Consumer("unreadable_pointer", from_dlpack, tolist=lambda r: r._a.tolist(),
                                  data_ptr=lambda r: r.address, readonly=lambda r: r._a.readonly)
        ''',
    "device_bytes": '''
        import dlpack_ref as dr
        from dlpack_ref.conformance import Consumer
        from dlpack_ref.testing import read_capsule

        class Message:  # mpi4py's buffers: device memory handed on by address, never read here
            def __init__(self, x):
                self.device = tuple(x.__dlpack_device__())
                if self.device[0] == 1:
                    self._a = dr.from_dlpack(x)
                    self.address = self._a.data_ptr
                else:  # the unconsumed capsule runs its deleter when it goes
                    self._capsule = x.__dlpack__(max_version=(1, 3), copy=False, stream=-1)
                    self.address = read_capsule(self._capsule)["data"]

            def tolist(self):
                if self.device[0] != 1:
                    raise BufferError("buffer is not CPU-accessible")
                return self._a.tolist()

        def __dlpack_conformance__():
            return None, Consumer("device_bytes", Message, tolist=lambda r: r.tolist(),
                                  data_ptr=lambda r: r.address, readonly=lambda r: False)
        ''',
}


def write(folder) -> None:
    """Every library of :data:`SOURCES` as a module file in ``folder``."""
    for name, source in SOURCES.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The hostile libraries' folder, on PYTHONPATH with tests/ while the module's tests run."""
    folder = tmp_path_factory.mktemp("hostile")
    write(folder)
    with command.support_importable(str(folder)):
        yield folder
