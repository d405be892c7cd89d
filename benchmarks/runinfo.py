"""What every result file of benchmarks/ carries about the run that made it,
so that a figure on a documentation page can say where it comes from
(tools/docs_figures.py renders these fields beside the figures):

- ``command``: the command line, as run from the repository's root;
- ``date``: the day of the run (UTC);
- ``machine``: the CPU's model name, its cores and the load average
  (1, 5 and 15 minutes) before the first measurement and after the last,
  and ``overloaded`` (a 1-minute load average above the cores: other work
  took turns with the calls timed);
- ``environment``: the interpreter and the platform;
- ``versions``: Python, dlpack-ref and every library the run used;
- ``settings``: the script's own (rounds, loops, sizes, quick).

    import runinfo
    began = runinfo.start()
    ...measure...
    json.dump({**runinfo.record(began, settings={...}, modules=["numpy"]), ...}, f)

The scripts run as ``python benchmarks/NAME.py``, which puts this folder first
on sys.path; the machine and the environment are dlpack_ref.bench's, as
``dlpack-ref bench`` writes them.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import os
import shlex
import subprocess
import sys

from dlpack_ref.bench.measure import machine, overloaded
from dlpack_ref.harness.output import environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start() -> dict:
    """The machine before the first measurement (CPU, cores, load average)."""
    return machine()


def _version(module: str) -> str | None:
    """The version of an importable module (its ``__version__``, else its
    distribution's), None when it is not installed."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    version = getattr(mod, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def compiler(command: str) -> str | None:
    """The first line of ``command --version`` (cc, c++), None without one."""
    try:
        done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout else None


def command_line() -> str:
    """This process's command line, the script's path relative to the
    repository's root when it lies inside it."""
    argv = list(sys.argv)
    script = os.path.abspath(argv[0]) if argv and argv[0] else ""
    if script.startswith(ROOT + os.sep):
        argv[0] = os.path.relpath(script, ROOT)
    return "python " + " ".join(shlex.quote(a) for a in argv)


def record(began: dict, *, settings: dict, modules: list[str] = (), extra_versions: dict | None = None) -> dict:
    """The fields every result file carries (see the module's doc), the load
    average at the end read now.

    Parameters
    ----------
    began : dict
        What :func:`start` returned before the first measurement.
    settings : dict
        The run's settings (rounds, loops, sizes, quick).
    modules : list of str
        Modules whose versions the run depends on (dlpack_ref is always there).
    extra_versions : dict, optional
        Versions of what is not a module (compilers).
    """
    end = machine()
    versions = {"python": sys.version.split()[0], "dlpack_ref": _version("dlpack_ref")}
    versions.update({m: _version(m) for m in modules})
    versions.update(extra_versions or {})
    return {
        "command": command_line(),
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "machine": {"cpu": began["cpu"], "cores": began["cores"],
                    "load_average": {"start": began["load_average"], "end": end["load_average"]},
                    "overloaded": overloaded(began["load_average"], began["cores"])
                    or overloaded(end["load_average"], end["cores"])},
        "environment": environment(),
        "versions": versions,
        "settings": settings,
    }
