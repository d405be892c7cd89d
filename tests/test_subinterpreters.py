"""Subinterpreters: dlpack-ref is imported in the main interpreter only
(docs/guarantees.md, "Interpreters"). Any other interpreter, isolated (its
own GIL) or legacy (sharing the main one's), gets an ImportError before any
state of the compiled core is made, so that the main interpreter can always
import it afterwards.

Each case runs in a fresh interpreter, which makes the subinterpreter with
CPython's private ``_interpreters`` module (``_xxsubinterpreters`` before
3.13): the public ``concurrent.interpreters`` of 3.14 makes isolated ones
only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

MESSAGE = ("dlpack_ref can be imported in the main interpreter only, not in a subinterpreter: its compiled core "
           "keeps process-wide state")

SCRIPT = """
import json, os, sys, tempfile
try:
    import _interpreters as interpreters
    make = {"legacy": lambda: interpreters.create("legacy"), "isolated": lambda: interpreters.create("isolated")}
except ImportError:
    import _xxsubinterpreters as interpreters
    make = {"legacy": lambda: interpreters.create(isolated=False),
            "isolated": lambda: interpreters.create(isolated=True)}

def in_subinterpreter(kind, code):
    # What `code` leaves in `result`, run in a new subinterpreter of `kind`.
    fd, path = tempfile.mkstemp()
    os.close(fd)
    interp = make[kind]()
    try:
        interpreters.run_string(interp, code + f"\\nopen({path!r}, 'w').write(result)\\n")
    finally:
        interpreters.destroy(interp)
    with open(path) as f:
        result = f.read()
    os.unlink(path)
    return result

IMPORT = '''
try:
    import dlpack_ref
    result = "imported"
except BaseException as e:
    result = type(e).__name__ + ": " + str(e)
'''
"""


def run(body: str):
    out = subprocess.run([sys.executable, "-c", SCRIPT + textwrap.dedent(body)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["legacy", "isolated"])
def test_a_subinterpreter_that_imports_first_is_refused_and_the_main_one_imports_after(kind):
    # A legacy subinterpreter that imported first locked the main interpreter
    # out for good ("Interpreter change detected"), even once destroyed.
    got = run(f"""
        first = in_subinterpreter({kind!r}, IMPORT)
        import dlpack_ref
        main = dlpack_ref.from_dlpack(dlpack_ref.asarray([1.0, 2.0])).tolist()
        again = in_subinterpreter({kind!r}, IMPORT)
        print(json.dumps([first, main, again]))
    """)
    assert got == [f"ImportError: {MESSAGE}", [1.0, 2.0], f"ImportError: {MESSAGE}"]


LOAD_BY_PATH = """
try:
    import importlib.util
    spec = importlib.util.spec_from_file_location("dlpack_ref._dlpack_ref", CORE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = "loaded"
except BaseException as e:
    result = type(e).__name__ + ": " + str(e)
"""


@pytest.mark.parametrize("kind", ["legacy", "isolated"])
def test_the_core_loaded_by_path_in_a_subinterpreter_first_is_refused_and_the_main_one_imports_after(kind):
    # Loaded by its file path, the package's own import is skipped: the core
    # itself must refuse before it makes any state. It used to make its state
    # first (Cython's record of the first interpreter), and the main
    # interpreter's import then failed for good ("Interpreter change detected").
    import dlpack_ref._dlpack_ref as core
    load = f"CORE = {core.__file__!r}\n" + LOAD_BY_PATH
    got = run(f"""
        first = in_subinterpreter({kind!r}, {load!r})
        import dlpack_ref
        main = dlpack_ref.from_dlpack(dlpack_ref.asarray([1.0, 2.0])).tolist()
        again = in_subinterpreter({kind!r}, {load!r})
        print(json.dumps([first, main, again]))
    """)
    ours = f"ImportError: {MESSAGE}"
    # Where the interpreter checks its extensions (an isolated one on 3.12+,
    # every subinterpreter of a free-threaded build) CPython refuses the core
    # itself, before its create step, in its own words: the core declares
    # multiple interpreters not supported. The core's create step refuses the rest.
    cpythons = "ImportError: module dlpack_ref._dlpack_ref does not support loading in subinterpreters"
    assert got[1] == [1.0, 2.0]
    assert got[0] == got[2] and got[0] in (ours, cpythons)
    if kind == "legacy" and getattr(sys, "_is_gil_enabled", lambda: True)():
        assert got[0] == ours


def test_every_submodule_is_refused_in_a_subinterpreter():
    got = run("""
        import dlpack_ref
        print(json.dumps([in_subinterpreter("legacy", IMPORT.replace("import dlpack_ref", "import " + name))
                          for name in ("dlpack_ref.testing", "dlpack_ref.conformance", "dlpack_ref._dlpack_ref",
                                       "dlpack_ref.cuda")]))
    """)
    assert got == [f"ImportError: {MESSAGE}"] * 4


# --- the header's deleters release in the interpreter that made the export ---------

@pytest.fixture(scope="module")
def api_demo_path(tmp_path_factory):
    """The Cython API demo (tests/cython_api_ext), built here: an extension
    on dlpack_ref.h alone, which a subinterpreter may load."""
    from support.build_ext import build_api_demo
    return build_api_demo(tmp_path_factory.mktemp("api_demo")).__file__


@pytest.mark.skipif(sys.version_info < (3, 15), reason=(
    "CPython 3.15+ (PEP 788): before it, the header's deleter attaches with PyGILState_Ensure, "
    "which attaches to the main interpreter whatever interpreter made the export "
    "(docs/guarantees.md, Deleters)"))
def test_a_deleter_on_a_foreign_thread_drops_the_owner_in_the_interpreter_that_exported(api_demo_path):
    # An extension built on dlpack_ref.h, loaded in a legacy subinterpreter,
    # exports a tensor there; a thread Python never saw calls its deleter. The
    # owner's finalizer must run in the subinterpreter, not the main one.
    sub_code = textwrap.dedent(f"""
        import importlib.util, _interpreters
        spec = importlib.util.spec_from_file_location("api_demo", {api_demo_path!r})
        demo = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(demo)
        seen = []
        class Owner:
            def __del__(self):
                seen.append(_interpreters.get_current()[0])
        demo.release_on_a_new_thread(demo.export_owned(Owner()))
        result = repr([_interpreters.get_current()[0], seen])
    """)
    got = run(f"print(json.dumps(in_subinterpreter('legacy', {sub_code!r})))")
    sub, seen = eval(got)
    assert sub != 0 and seen == [sub]
