"""The libraries: the known ones (a file each in :mod:`.libraries`), which
of them are installed (found without importing them), the
:class:`~.subject.Subject` a spec names, its version, and the one
selection of libraries that ``check`` and ``bench`` make from their
command lines.

A spec is a known name (``numpy``), any importable module (``mylib``,
checked through its factory hook or the generic adapter) or
``module:attr`` (the generic adapter with ``attr`` as the ``from_dlpack``).
Only :func:`subject` imports a library; the commands call it in child
processes (:func:`description_task`), never in their own.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import pkgutil

from . import libraries
from .libraries.generic import HOOK, generic_subject, hooked_subject
from .observe import exc_name, short
from .outcome import failure_of
from .subject import Subject

__all__ = ["KNOWN", "Selection", "Description", "installed", "in_lane", "select", "subject", "version_of", "module_of",
           "description_task", "main"]


def _library_files() -> dict:
    """Known name -> the file of :mod:`.libraries` that adapts it, in report order."""
    files = [importlib.import_module(f"{libraries.__name__}.{m.name}")
             for m in pkgutil.iter_modules(libraries.__path__) if not m.name.startswith("_") and m.name != "generic"]
    return {f.KNOWN.name: f for f in sorted(files, key=lambda f: f.KNOWN.order)}


#: Known name -> its library file, in the order reports list them.
KNOWN = _library_files()


def in_lane(lane: str | None) -> list[str]:
    """The known libraries a CI lane installs (``"main"``, ``"ecosystem"``;
    None: those no lane installs), in report order."""
    return [name for name, library in KNOWN.items() if library.KNOWN.lane == lane]


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed() -> tuple[list[str], list[str]]:
    """Known libraries that can be imported here and those that cannot, both
    in report order (found without importing them)."""
    found = [name for name, library in KNOWN.items() if _present(library.KNOWN.module)]
    return found, [name for name in KNOWN if name not in found]


@dataclasses.dataclass
class Selection:
    """The libraries a command runs on (``specs``, in order), the known ones
    looked for and not installed, and those the user asked for by name."""

    specs: list[str]
    not_installed: list[str]
    asked: list[str]


def select(asked: list[str] | None, *, add_installed: bool = False, always: tuple[str, ...] = ()) -> Selection:
    """What both commands run on: the libraries named (``--library``), or,
    when none is named or ``add_installed`` (``--installed``), every
    installed known library too; ``always`` first (``bench``'s yardstick)."""
    asked = list(dict.fromkeys(asked or []))
    specs, not_installed = list(always) + asked, []
    if not asked or add_installed:
        found, not_installed = installed()
        specs += found
        if not asked:
            specs.insert(0, "dlpack_ref")
    specs = list(dict.fromkeys(specs))
    return Selection(specs, [name for name in not_installed if name not in specs], asked)


def version_of(spec: str) -> str:
    """The installed version of the library a spec names: its distribution's,
    else the module's (or its package's) ``__version__`` (imports it), else
    ``"unknown"``."""
    library = KNOWN.get(spec)
    module_name = library.KNOWN.module if library is not None else spec.partition(":")[0]
    top = module_name.split(".")[0]
    distributions = [library.KNOWN.distribution] if library is not None else []
    for dist in distributions + importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    for name in dict.fromkeys([module_name, top]):
        version = getattr(importlib.import_module(name), "__version__", None)
        if version is not None:
            return str(version)
    return "unknown"


@functools.lru_cache(maxsize=None)
def subject(spec: str) -> Subject:
    """The Subject a spec names (imports the library).

    Raises
    ------
    ImportError
        When the module cannot be imported (or anything its import raises).
    LookupError
        When ``module:attr`` names nothing.
    TypeError
        When a factory hook does not return a (Producer, Consumer) pair.
    """
    library = KNOWN.get(spec)
    absent: dict[str, str] = {}
    if library is not None:
        producer, consumer, cuda = (getattr(library, side)() if hasattr(library, side) else None
                                    for side in ("producer", "consumer", "cuda"))
        adapter = "known"
    else:
        module_name, _, attr = spec.partition(":")
        cuda, adapter = None, "generic"
        if not attr and hasattr(importlib.import_module(module_name), HOOK):
            adapter = "hook"
            producer, consumer, cuda = hooked_subject(module_name)
            for side, made in (("producer", producer), ("consumer", consumer)):
                if made is None:
                    absent[side] = f"no {side}: {module_name}.{HOOK}() gave None for it"
        else:
            producer, consumer, absent = generic_subject(module_name, attr or None)
    # A hook names its library (Producer.name, else Consumer.name): reports
    # show that name, beside the spec that checks it again.
    named = [side.name for side in (producer, consumer) if adapter == "hook" and side is not None and side.name]
    return Subject(named[0] if named else spec, version_of(spec), producer, consumer, spec, cuda, absent, adapter)


def module_of(spec: str) -> str:
    """The module a spec makes the checker import."""
    library = KNOWN.get(spec)
    return library.KNOWN.module if library is not None else spec.partition(":")[0]


def description_task(task: dict, subjects) -> dict:
    """Child side: what the library ``task["spec"]`` is (version, which
    sides it has, what was looked for, how it was adapted), or why it cannot
    be had: ``{"error": ...}`` for anything its import or its adapter
    raises, ``SystemExit`` included."""
    try:
        importlib.import_module(module_of(task["spec"]))
    except BaseException as e:  # an import that exits or raises anything: a library that cannot be checked
        return {"error": f"cannot be imported: {exc_name(e)}: {short(e)}"}
    try:
        s = subjects.of(task["spec"])
    except BaseException as e:
        return {"error": f"its adapter failed: {exc_name(e)}: {short(e)}"}
    return {"name": s.name, "version": s.version, "producer": s.producer is not None, "consumer": s.consumer is not None,
            "cuda": s.cuda is not None, "absent": s.absent, "adapter": s.adapter}


class Description:
    """What a child process said a library is (:func:`description_task`'s
    answer, or the runner's :class:`~.outcome.Failure`)."""

    def __init__(self, spec: str, description: dict):
        self.spec, self.description = spec, description

    @property
    def sides(self) -> dict[str, bool]:
        """Which sides (producer, consumer, cuda) the library has."""
        return {k: bool(self.description.get(k)) for k in ("producer", "consumer", "cuda")}

    @property
    def error(self) -> str | None:
        """Why the library cannot be checked or benchmarked at all: an import
        that raised, crashed or exited, an adapter that failed, nothing found
        in it (with what was looked for); None when it can be."""
        d, failure = self.description, failure_of(self.description)
        if failure is not None and failure.crashed:
            return f"its process {failure.detail} while importing and adapting it"
        if "error" in d or failure is not None:
            return d.get("error") or failure.detail
        if not any(self.sides.values()):
            return "nothing to check: " + ("; ".join(d["absent"].values()) or "no producer and no consumer")
        return None


def main(argv=None) -> int:
    """``python -m dlpack_ref.harness.registry [--lane LANE] --names |
    --requirements``: the known libraries (of one lane), one a line, for the
    scripts that install or check them (``.ci/lanes/ecosystem.sh``,
    ``benchmarks/run_all.sh``); nothing is imported but the library files."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m dlpack_ref.harness.registry", description=main.__doc__)
    p.add_argument("--lane", choices=("main", "ecosystem"), help="only the libraries this CI lane installs")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--names", action="store_true", help="their names, as --library takes them")
    what.add_argument("--requirements", action="store_true", help="the pip requirements that install them")
    args = p.parse_args(argv)
    names = in_lane(args.lane) if args.lane else list(KNOWN)
    # dlpack-ref itself is installed from its checkout or its wheel, never by requirement
    lines = names if args.names else [r for name in names if name != "dlpack_ref" for r in KNOWN[name].KNOWN.requirements]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
