"""The entry point of dlpack-ref's pytest plugin (``pytest11``).

pytest loads this module at every start in every environment where
dlpack-ref is installed, so it lives outside the ``dlpack_ref`` package
(whose import loads the compiled core) and imports nothing but what
pytest has already loaded. The plugin itself,
:mod:`dlpack_ref.conformance.pytest_plugin`, is imported when a test
module first holds a :class:`dlpack_ref.conformance.Suite`.
"""


def pytest_addoption(parser):
    group = parser.getgroup("dlpack-ref", "DLPack conformance (dlpack-ref)")
    group.addoption("--dlpack-allow", metavar="FILE", default=None,
                    help="allow file for dlpack-ref conformance tests: 'LIBRARY RULE REASON' lines; "
                    "the rules listed are marked xfail (a relative FILE is read from the rootdir)")
    parser.addini("dlpack_allow_file", "allow file for dlpack-ref conformance tests (as --dlpack-allow; "
                  "a relative path is read from the rootdir)")


def _is_suite(obj) -> bool:
    # By name: a Suite exists only where dlpack_ref.conformance was imported,
    # and isinstance would need that import here.
    cls = type(obj)
    return cls.__name__ == "Suite" and cls.__module__ == "dlpack_ref.conformance"


def pytest_pycollect_makeitem(collector, name, obj):
    if _is_suite(obj) and collector.funcnamefilter(name):
        from dlpack_ref.conformance.pytest_plugin import ConformanceSuite
        return ConformanceSuite.from_parent(collector, name=name, suite=obj)
    return None


def pytest_configure(config):
    """An allow file given on the command line or in the ini file that
    cannot be read is a usage error now, before any test is collected."""
    import os

    path = config.getoption("dlpack_allow") or config.getini("dlpack_allow_file")
    if not path:
        return
    full = os.path.join(str(config.rootpath), str(path))   # an absolute path stays as it is
    try:
        with open(full, "rb"):
            pass
    except OSError as e:
        import pytest
        option = "--dlpack-allow" if config.getoption("dlpack_allow") else "dlpack_allow_file"
        raise pytest.UsageError(f"dlpack-ref: {option} {full}: {e.strerror or e}") from None
