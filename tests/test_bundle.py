"""The writer of reproductions (dlpack_ref.harness.bundle): what it writes
runs on its own, without dlpack-ref (an interpreter without site-packages),
carries each definition once as it stands in its module, the core's
constants as their values, and refuses, naming it, what cannot run alone."""

import subprocess
import sys

import pytest

from dlpack_ref.harness import registry
from dlpack_ref.harness.bundle import BundleError, bundle, definition_source
from dlpack_ref.testing import factory, reader

pytestmark = pytest.mark.harness

READS_ITS_OWN_CAPSULE = """
f = CapsuleFactory()
cap = f.make(shape=(2, 2), dtype=(2, 64, 1), fill=struct.pack("<4d", 1.5, 2.5, 3.5, 4.5))
print(read_values(cap), read_capsule(cap)["name"])
del cap
import gc
gc.collect()
print(f.deleter_calls)
try:
    import dlpack_ref
    print("dlpack_ref importable")
except ImportError:
    print("no dlpack_ref")
"""


def test_a_bundle_runs_without_dlpack_ref():
    source = bundle(factory.CapsuleFactory, reader.read_values, reader.read_capsule) + "import struct\n" + \
        READS_ITS_OWN_CAPSULE
    run = subprocess.run([sys.executable, "-S", "-c", source], capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[[1.5, 2.5], [3.5, 4.5]] b'dltensor_versioned'", "1", "no dlpack_ref"]


def test_each_definition_once_as_written_and_the_core_constants_as_values():
    source = bundle(reader.read_capsule, reader.read_values)
    assert definition_source(reader.read_capsule) in source
    assert source.count("def capsule_name(") == 1
    assert "NAME_VERSIONED = b'dltensor_versioned'" in source and "_core" not in source
    assert '"""' not in source  # docstrings are the rule's text's business, not the code's


def test_what_cannot_run_alone_is_refused_by_name():
    # the registry finds the library files by importing a package: no reproduction can
    with pytest.raises(BundleError, match=r"dlpack_ref\.harness\.registry\._library_files uses 'libraries' from "
                                          r"dlpack_ref\.harness, which a reproduction cannot import"):
        bundle(registry.subject)


def test_a_rule_is_written_without_its_registration():
    from dlpack_ref.conformance.rules import RULES
    source = bundle(RULES["producer.size_zero"].check)
    assert "@rule" not in source and "def size_zero(p) -> str:" in source


PRUNABLE = '''from __future__ import annotations
import os
import sys

UNUSED = 1
LIMIT = 3


# Why the helper exists.
def helper(x):
    return x + LIMIT


def unreached():
    return sys.argv


class Box:
    size: int = 0

    def __init__(self, v):
        self.v = v

    # read by the roots
    def used(self):
        return helper(self.v)

    def unused(self):
        return os.getcwd()

    @property
    def shown(self):
        return self.v


class Lonely:
    def never(self):
        return 1
'''


def test_prune_keeps_what_the_roots_reach_and_the_methods_they_name():
    from dlpack_ref.harness.bundle import prune
    source = prune(PRUNABLE, "b = Box(1)\nprint(b.used(), getattr(b, 'shown'))\n")
    assert "def unreached" not in source and "UNUSED" not in source and "class Lonely" not in source
    assert "def unused" not in source and "import os" not in source and "import sys" not in source
    for kept in ("LIMIT = 3", "# Why the helper exists.\ndef helper(x):", "def __init__(self, v):",
                 "    # read by the roots\n    def used(self):", "def shown(self):", "size: int = 0"):
        assert kept in source
    run = subprocess.run([sys.executable, "-c", source + "b = Box(1)\nprint(b.used(), getattr(b, 'shown'))\n"],
                         capture_output=True, text=True, timeout=60)
    assert run.stdout == "4 1\n", run.stderr


def test_a_class_whose_methods_all_go_keeps_a_body():
    from dlpack_ref.harness.bundle import prune
    source = prune(PRUNABLE, "print(Lonely)\n")
    assert "class Lonely:\n    pass" in source
    compile(source, "pruned.py", "exec")


FAMILIES = '''from __future__ import annotations
import os


# Why the helper exists.
def helper(x):
    return x + 1


class Made:
    def __init__(self, v):
        self.v = v

    def run(self):
        # the reason for the call
        return self.step()

    def step(self):
        return helper(self.v)

    def other(self):
        return os.getcwd()


class Stranger:
    def step(self):
        return os.getpid()

    def run(self):
        return 2


class Unused:
    def __init__(self):
        self.n = 0

    def run(self):
        return os.sep


def adapter():
    return Made(1), Unused()


# --- what the checker ran, as it ran: the rule's check and the library's adapter ---

# kept: the code the checker ran keeps its comments
def check(m):
    return m.run()
'''


def test_an_attribute_read_on_self_reaches_only_its_classs_methods():
    from dlpack_ref.harness.bundle import prune
    roots = "made, unused = adapter()\nprint(check(made), Stranger)\n"
    source = prune(FAMILIES, roots)
    made, stranger = source.split("class Stranger")
    assert "def step(self):" in made and "def other" not in made
    # m.run() names run on anything; self.step() only Made's step
    assert "def run(self):" in stranger and "def step" not in stranger
    run = subprocess.run([sys.executable, "-c", source + roots], capture_output=True, text=True, timeout=60)
    assert run.stdout.startswith("2 "), run.stderr


def test_pulled_in_definitions_lose_their_comments_the_checked_code_keeps_them():
    from dlpack_ref.harness.bundle import prune
    source = prune(FAMILIES, "made, unused = adapter()\nprint(check(made))\n")
    assert "# Why the helper exists." not in source and "# the reason for the call" not in source
    assert "def helper(x):" in source and "        return self.step()" in source
    assert "# kept: the code the checker ran keeps its comments\ndef check(m):" in source
    assert "# --- what the checker ran" in source


SETTLED = '''from __future__ import annotations
import dataclasses


def fallback_values(r):
    return ["read", r]


def fallback_pointer(r):
    return 0


def own(r):
    return r


@dataclasses.dataclass
class Side:
    name: str
    tolist: object = None
    data_ptr: object = None
    request: object = None
    shapeless: bool = False

    def values(self, r):
        if self.tolist is None:
            return fallback_values(r)
        return self.tolist(r)

    def pointer(self, r):
        if self.data_ptr is None:
            return fallback_pointer(r)
        return self.data_ptr(r)

    def take(self, r):
        if self.request is not None:
            r = ("asked", r)
        if self.shapeless:
            return b"bytes"
        return r


def adapter():
    return Side("lib", tolist=own, data_ptr=lambda r: 1)


def check(s):
    return s.values(2), s.pointer(3), s.take(4)
'''


def test_a_field_every_construction_settles_cuts_the_fallback_it_rules_out():
    from dlpack_ref.harness.bundle import prune
    roots = "print(check(adapter()))\n"
    source = prune(SETTLED, roots, made_here=True)
    for gone in ("fallback_values", "fallback_pointer", "self.tolist is None", "self.request", "b\"bytes\""):
        assert gone not in source
    assert "    def values(self, r):\n        return self.tolist(r)\n" in source
    run = subprocess.run([sys.executable, "-c", source + roots], capture_output=True, text=True, timeout=60)
    assert run.stdout == "(2, 1, 4)\n", run.stderr
    # without made_here (objects made elsewhere may leave any option out) every fallback stays
    assert "def fallback_values" in prune(SETTLED, roots)
    # a field some code assigns, or a construction that leaves it out, settles nothing
    assigned = prune(SETTLED.replace("    return s.values(2)", "    s.tolist = None\n    return s.values(2)"),
                     roots, made_here=True)
    assert "def fallback_values" in assigned and "def fallback_pointer" not in assigned
    left_out = prune(SETTLED + "\n\ndef other():\n    return Side('x')\n", roots + "print(other)\n", made_here=True)
    assert "def fallback_values" in left_out and "def fallback_pointer" in left_out


def test_a_field_given_a_name_that_may_hold_none_settles_nothing():
    from dlpack_ref.harness.bundle import prune
    roots = "print(check(adapter()))\n"
    # own is also an argument's name somewhere: the name given may be that argument, None
    shadowed = SETTLED + "\n\ndef maker(own=None):\n    return own\n"
    assert "def fallback_values" in prune(shadowed, roots + "print(maker)\n", made_here=True)
    # a nested function given by name settles it, named as the field is (whose declaration binds no function)
    nested = SETTLED.replace("    return Side(\"lib\", tolist=own,", "    def tolist(r):\n        return r\n\n"
                             "    return Side(\"lib\", tolist=tolist,")
    assert "tolist=tolist" in nested and "def fallback_values" not in prune(nested, roots, made_here=True)


UNASKED = '''
def shaped_note(shape):
    return "shaped"


def broken_note(kind):
    return "broken " + kind


def described(shape, *, broken=None, padded=False, note="plain", count=1):
    words = [note] * count
    if broken is not None:
        words.append(broken_note(broken))
    if padded and shape:
        words.append("with padding")
    if not padded:
        words.append(shaped_note(shape))
    return words


class Maker:
    def __init__(self, *, raises=None, legacy=False):
        self.raises = raises
        self.legacy = legacy

    def make(self, **options):
        if self.raises is not None:
            raise self.raises
        if self.legacy:
            return "old"
        return described((2,), **options)


def check(plain):
    return Maker().make(note=plain)
'''


def test_an_option_no_kept_code_gives_cuts_what_its_default_rules_out():
    from dlpack_ref.harness.bundle import prune
    roots = "print(check('x'))\n"
    source = prune(UNASKED, roots)
    for gone in ("broken_note", "with padding", "self.raises is not None", "if self.legacy"):
        assert gone not in source, gone
    # what the defaults leave (if not padded) and the options given (note) stay
    assert "shaped_note" in source and "words = [note] * count" in source
    run = subprocess.run([sys.executable, "-c", source + roots], capture_output=True, text=True, timeout=60)
    assert run.stdout == "['x', 'shaped']\n", run.stderr
    # an option given anywhere kept, as a keyword or as a dict's key (a ** call), keeps its statements
    keyword = prune(UNASKED.replace("Maker().make(note=plain)", "Maker(legacy=True).make(broken='b')"), roots)
    assert "def broken_note" in keyword and "if self.legacy" in keyword
    keyed = prune(UNASKED.replace("make(note=plain)", "make(**{'padded': plain})"), roots)
    assert "with padding" in keyed and "self.raises is not None" not in keyed
    # a key only read (d.get("broken")) gives nothing
    read = prune(UNASKED.replace("return Maker().make(note=plain)", "return Maker().make(note={}.get('broken'))"),
                 roots)
    assert "def broken_note" not in read


def test_an_option_given_only_by_code_it_guards_stays_cut():
    from dlpack_ref.harness.bundle import prune
    roots = "print(check('x'))\n"
    # broken_note gives padded=, but runs only when broken is given: nothing gives either
    looping = UNASKED.replace('    return "broken " + kind', '    return described((1,), padded=True)')
    source = prune(looping, roots)
    assert "def broken_note" not in source and "with padding" not in source
    run = subprocess.run([sys.executable, "-c", source + roots], capture_output=True, text=True, timeout=60)
    assert run.stdout == "['x', 'shaped']\n", run.stderr
