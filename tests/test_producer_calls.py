"""How the consumer calls a producer's ``__dlpack__`` and ``__dlpack_device__``.

from_dlpack calls both by vectorcall, through a per-type memo of the method
found on the type (src/_import.pxi). These tests hold the two things that
can go wrong there on any CPython version: the keyword names handed to the
call (NULL or a tuple, never None: CPython 3.14 read None as a tuple and
crashed, and NumPy's C method refused it), and the memo, which must give
exactly what ``x.__dlpack__`` gives after the type, a base or the instance
changes.
"""

import functools
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from dlpack_ref import from_dlpack
from dlpack_ref.testing import CapsuleFactory


class Recorder:
    """A producer whose methods record exactly the arguments they receive."""

    __slots__ = ("factory", "device_calls", "dlpack_calls")

    def __init__(self, factory):
        self.factory = factory
        self.device_calls = []
        self.dlpack_calls = []

    def __dlpack_device__(self, *args, **kwargs):
        self.device_calls.append((args, kwargs))
        return (1, 0)

    def __dlpack__(self, *args, **kwargs):
        self.dlpack_calls.append((args, kwargs))
        return self.factory.make(shape=(3,))


def test_the_plain_request_calls_only_dunder_dlpack(factory):
    # Nothing of it depends on the device (the tensor says where it is).
    producer = Recorder(factory)
    from_dlpack(producer)
    assert producer.device_calls == []
    assert producer.dlpack_calls == [((), {"max_version": (1, 3)})]


def test_dlpack_device_is_called_with_no_arguments_before_a_request(factory):
    producer = Recorder(factory)
    from_dlpack(producer, copy=False)
    assert producer.device_calls == [((), {})]
    assert producer.dlpack_calls == [((), {"max_version": (1, 3), "copy": False})]


# copy=True of CPU memory asks for the tensor in place (the copy is made
# here, on the worker pool): tests/test_copies.py.
@pytest.mark.parametrize("kwargs, expected", [
    ({"device": "cpu"}, {"max_version": (1, 3), "dl_device": (1, 0)}),
    ({"copy": True}, {"max_version": (1, 3)}),
    ({"copy": False}, {"max_version": (1, 3), "copy": False}),
    ({"device": "cpu", "copy": True}, {"max_version": (1, 3)}),
], ids=["device", "copy-true", "copy-false", "device-and-copy"])
def test_requests_reach_the_producer_as_exactly_these_keywords(factory, kwargs, expected):
    producer = Recorder(factory)
    from_dlpack(producer, **kwargs)
    assert [call for call in producer.dlpack_calls] == [((), expected)]


def test_numpy_methods_that_take_no_keywords_are_called_correctly():
    # ndarray.__dlpack_device__ is a C method that refuses any keyword
    # names, None included.
    x = np.arange(6, dtype=np.float32)
    a = from_dlpack(x)
    assert a.data_ptr == x.ctypes.data
    assert from_dlpack(x, copy=True).data_ptr != x.ctypes.data


def test_plain_producers_do_not_crash_the_interpreter():
    # The 3.14 crash killed the process, so the repro runs in a child.
    script = textwrap.dedent("""
        import numpy as np
        from dlpack_ref import from_dlpack
        from dlpack_ref.testing import CapsuleFactory, ForeignProducer
        factory = CapsuleFactory()
        for _ in range(3):
            assert from_dlpack(ForeignProducer(factory, shape=(2,))).shape == (2,)
            assert from_dlpack(np.zeros(4)).shape == (4,)
            assert from_dlpack(ForeignProducer(factory, shape=(2,)), copy=True).shape == (2,)
        print("ok")
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "ok"


# --- the method memo: what x.__dlpack__ gives, after every kind of change ------

def _capsule_maker(tag, seen):
    def __dlpack__(self, **kwargs):
        seen.append(tag)
        return self.factory.make(shape=(1,))
    return __dlpack__


def _slotted_type(name, seen, tag, base=object):
    return type(name, (base,), {
        "__slots__": ("factory",) if base is object else (),
        "__init__": lambda self, factory: setattr(self, "factory", factory),
        "__dlpack_device__": lambda self: (1, 0),
        "__dlpack__": _capsule_maker(tag, seen),
    })


def test_a_method_replaced_on_the_type_is_the_one_called(factory):
    seen = []
    Producer = _slotted_type("Producer", seen, "first")
    x = Producer(factory)
    from_dlpack(x)
    from_dlpack(x)
    Producer.__dlpack__ = _capsule_maker("second", seen)
    from_dlpack(x)
    assert seen == ["first", "first", "second"]


def test_a_method_replaced_on_a_base_reaches_the_subclass(factory):
    seen = []
    Base = _slotted_type("Base", seen, "base")
    Derived = type("Derived", (Base,), {"__slots__": ()})
    x = Derived(factory)
    from_dlpack(x)
    Base.__dlpack__ = _capsule_maker("base-again", seen)
    from_dlpack(x)
    assert seen == ["base", "base-again"]


def test_alternating_types_each_get_their_own_method(factory):
    seen = []
    Base = _slotted_type("Base", seen, "base")
    Override = _slotted_type("Override", seen, "override", base=Base)
    for x in [Base(factory), Override(factory), Base(factory), Override(factory)]:
        from_dlpack(x)
    assert seen == ["base", "override", "base", "override"]


def test_a_method_deleted_from_the_type_is_not_called(factory):
    seen = []
    Base = _slotted_type("Base", seen, "base")
    Derived = _slotted_type("Derived", seen, "derived", base=Base)
    x = Derived(factory)
    from_dlpack(x)
    del Derived.__dlpack__
    from_dlpack(x)
    del Base.__dlpack__
    with pytest.raises(TypeError, match="Derived"):
        from_dlpack(x)
    assert seen == ["derived", "base"]


def test_an_instance_attribute_wins_over_the_type(factory):
    seen = []

    class WithDict:
        def __init__(self, factory):
            self.factory = factory

        def __dlpack_device__(self):
            return (1, 0)

        __dlpack__ = _capsule_maker("type", seen)

    x = WithDict(factory)
    from_dlpack(x)
    x.__dlpack__ = lambda **kwargs: (seen.append("instance"), factory.make(shape=(1,)))[1]
    from_dlpack(x)
    assert seen == ["type", "instance"]


def test_getattribute_overrides_are_honoured(factory):
    seen = []

    class Proxy:
        __slots__ = ("factory",)

        def __init__(self, factory):
            self.factory = factory

        def __dlpack_device__(self):
            return (1, 0)

        __dlpack__ = _capsule_maker("type", seen)

        def __getattribute__(self, name):
            if name == "__dlpack__":
                seen.append("getattribute")
            return object.__getattribute__(self, name)

    from_dlpack(Proxy(factory))
    assert seen == ["getattribute", "type"]


class _Tagged:
    """A producer whose methods record which object they were called on."""

    def __init__(self, factory, tag, seen):
        self.factory, self.tag, self.seen = factory, tag, seen

    def __dlpack__(self, **kwargs):
        self.seen.append(self.tag)
        return self.factory.make(shape=(1,))

    def __dlpack_device__(self):
        return (1, 0)


def test_methods_held_in_slots_are_what_the_slots_hold_now(factory):
    """The memo keeps the type's attribute, here a slot's descriptor, never
    what it gave one instance: each call reads the slot afresh, and the
    bound method is called on its own object."""
    seen = []

    class Holder:
        __slots__ = ("__dlpack__", "__dlpack_device__")

    first, second = _Tagged(factory, "first", seen), _Tagged(factory, "second", seen)
    x, y = Holder(), Holder()
    x.__dlpack__, x.__dlpack_device__ = first.__dlpack__, first.__dlpack_device__
    y.__dlpack__, y.__dlpack_device__ = second.__dlpack__, second.__dlpack_device__
    from_dlpack(x)
    from_dlpack(y)
    x.__dlpack__ = second.__dlpack__
    from_dlpack(x)
    from_dlpack(y, copy=True)   # a request that asks whether __dlpack__ exists first
    del x.__dlpack__
    with pytest.raises(TypeError, match="Holder"):
        from_dlpack(x)
    with pytest.raises(TypeError, match="Holder"):
        from_dlpack(x, copy=True)
    assert seen == ["first", "second", "second", "second"]


def test_a_request_with_copy_sees_dunder_dlpack_deleted_from_the_type(factory):
    seen = []
    Producer = _slotted_type("Producer", seen, "p")
    x = Producer(factory)
    from_dlpack(x, copy=True)
    from_dlpack(x, copy=True)
    del Producer.__dlpack__
    with pytest.raises(TypeError, match="Producer"):
        from_dlpack(x, copy=True)
    assert seen == ["p", "p"]


def _partial_binds() -> int:
    """1 where this Python binds a functools.partial class attribute to the
    instance (3.14+), 0 where it does not (3.13's partial has a __get__
    that warns and returns itself)."""
    class Probe:
        count = functools.partial(lambda *args: len(args))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return Probe().count()


# 3.13 warns that a partial will bind in later Pythons: the test compares
# with what this one does
@pytest.mark.filterwarnings("ignore:functools.partial will be a method descriptor:FutureWarning")
def test_type_attributes_that_are_no_methods_are_called_as_getattr_gives_them(factory):
    """A callable that is no descriptor is called without the instance; a
    staticmethod, a classmethod and a property through their __get__; a
    functools.partial as this Python's getattr binds it (a descriptor from
    CPython 3.14 on, which then passes the instance)."""
    seen = []
    tagged = _Tagged(factory, "property", seen)

    class CallableObject:
        def __call__(self, *args, **kwargs):
            seen.append(("object", len(args)))
            return factory.make(shape=(1,))

    def plain(*args, **kwargs):
        seen.append(("plain", len(args)))
        return factory.make(shape=(1,))

    def on_class(cls, **kwargs):
        seen.append((cls.__name__, 0))
        return factory.make(shape=(1,))

    kinds = {   # name: (the type's __dlpack__, the call it makes: whose, with how many positional arguments)
        "Object": (CallableObject(), ("object", 0)),
        "Partial": (functools.partial(plain), ("plain", _partial_binds())),
        "Static": (staticmethod(plain), ("plain", 0)),
        "OnClass": (classmethod(on_class), ("OnClass", 0)),
        "Property": (property(lambda self: tagged.__dlpack__), "property"),
    }
    for name, (attribute, expected) in kinds.items():
        kind = type(name, (), {"__slots__": (), "__dlpack__": attribute, "__dlpack_device__": lambda self: (1, 0)})
        seen.clear()
        for _ in range(2):   # the second call through the memo
            from_dlpack(kind())
        through_from_dlpack = list(seen)
        seen.clear()
        getattr(kind(), "__dlpack__")()   # the oracle: Python's own attribute lookup
        assert through_from_dlpack == seen * 2, name
        assert through_from_dlpack == [expected, expected], name


def test_the_memo_keeps_no_deleter_count_wrong():
    factory = CapsuleFactory()
    seen = []
    Producer = _slotted_type("Producer", seen, "p")
    arrays = [from_dlpack(Producer(factory)) for _ in range(50)]
    assert factory.deleter_calls == 0
    del arrays
    import gc
    gc.collect()
    assert factory.deleter_calls == 50
