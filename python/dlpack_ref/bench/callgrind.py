"""Instructions per call, counted by callgrind (valgrind).

Wall-clock timings on a shared machine wander by tens of percent; the number
of instructions a call executes does not. One child interpreter runs under
``valgrind --tool=callgrind`` and counts every call a factory function makes:
each call runs in a C-level loop (``itertools.starmap``) and callgrind
collects only inside that loop (``--toggle-collect=starmap_next``), so start-up,
imports and setup are not counted; the call's result is dropped inside it.
Each call runs a warm-up, then N and 2N times, with a dump of the counters
between (``--dump-before`` a function nothing else calls,
``sys.getswitchinterval``); (2N - N) / N is the cost of one call with
one-time costs cancelled, minus the same figure of an empty call (the loop
itself). The hash seed is fixed and the cycle collector off.

Counting needs an interpreter whose symbols callgrind can read (a build that
is not stripped: ``starmap_next`` and ``sys_getswitchinterval`` must be found).
"""

from __future__ import annotations

import functools
import gc
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from itertools import repeat, starmap
from typing import Callable

_TOGGLE = "starmap_next"
_MARK = "sys_getswitchinterval"
_WARM = 20
#: The name of the empty call whose count is subtracted as the loop's own.
LOOP = "(loop)"
#: The counting child: the parent's sys.path exactly, set before any import
#: (-P: no working folder first), as the runner's workers have it.
_CHILD = ("import sys; sys.path[:] = sys.argv[5:]; from dlpack_ref.bench.callgrind import serve; "
          "serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])")


def missing() -> str | None:
    """Why instructions cannot be counted here, or None when they can."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed"
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        return "valgrind cannot run a process with AddressSanitizer preloaded (LD_PRELOAD)"
    return None


@functools.cache
def unavailable() -> str | None:
    """Why instructions cannot be counted here, or None when they can:
    :func:`missing`, or a short counting run that found nothing to count
    by (an interpreter whose symbols callgrind cannot read). Runs the probe
    once per process (a few seconds under valgrind)."""
    why = missing()
    if why is None:
        try:
            count(f"{__name__}:source_calls", ["", {"one": "1"}], loops=2)
        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
            why = str(e)
    return why


def _noop() -> None:
    return None


def _dropping(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` whose result is dropped inside the call, where callgrind
    counts (``starmap`` hands a result back to the uncounted loop, which
    would free it there: a capsule's destructor would go uncounted)."""
    def run() -> None:
        fn()
    return run


def serve(factory: str, args_json: str, loops: int, names_path: str) -> None:
    """Child side: run each call of ``factory(*args)`` (``module:function``
    returning name -> callable) in the counted loops, and write the names,
    in the order run, to ``names_path``."""
    module, _, attr = factory.partition(":")
    made = getattr(importlib.import_module(module), attr)(*json.loads(args_json))
    calls: dict[str, Callable[[], object]] = {LOOP: _noop, **made}
    gc.disable()
    for fn in calls.values():
        run = _dropping(fn)
        for n in (_WARM, loops, 2 * loops):
            for _ in starmap(run, repeat((), n)):
                pass
            sys.getswitchinterval()   # the dump between loops
    with open(names_path, "w") as f:
        json.dump(list(calls), f)


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError(f"{path} has no totals line")


def count(factory: str, args: list, loops: int = 200, env: dict | None = None,
          keep: dict[str, str] | None = None, timeout: float | None = None) -> tuple[dict[str, float], float]:
    """Instructions per call of each call a factory makes, in one child
    interpreter under callgrind.

    Parameters
    ----------
    factory : str
        ``"module:function"``; ``function(*args)`` returns a dict of name ->
        callable of no argument, in the child.
    args : list
        Its arguments (JSON-able).
    loops : int
        N: each call runs N and 2N times.
    env : dict, optional
        Environment of the child (default: this one); ``PYTHONHASHSEED`` is 0.
    keep : dict of str to str, optional
        Name -> a path to copy the profile of that call's 2N loop to (for
        ``callgrind_annotate``).
    timeout : float, optional
        Seconds before the child is killed.

    Returns
    -------
    (dict of str to float, float)
        Name -> instructions per call, the loop's own cost subtracted; and
        that cost.

    Raises
    ------
    RuntimeError
        When valgrind is missing, the child fails, or callgrind found no
        loop or marker to count by (an interpreter without symbols).
    """
    why = missing()
    if why:
        raise RuntimeError(why)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        names_path = os.path.join(tmp, "names.json")
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={_TOGGLE}",
             f"--dump-before={_MARK}", f"--callgrind-out-file={out}",
             sys.executable, "-P", "-c", _CHILD, factory, json.dumps(args), str(loops), names_path, *sys.path],
            env={**(os.environ if env is None else env), "PYTHONHASHSEED": "0"},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
        if run.returncode != 0:
            tail = run.stderr.strip().splitlines()[-3:]
            raise RuntimeError(f"the counting run failed (exit status {run.returncode}): {' / '.join(tail)}")
        with open(names_path) as f:
            names = json.load(f)
        dumps = [os.path.join(tmp, f"callgrind.out.{i}") for i in range(1, 3 * len(names) + 1)]
        if not all(os.path.exists(p) for p in dumps):
            raise RuntimeError(f"callgrind made no dump at {_MARK}: this interpreter has no symbols to count by")
        totals = [_total(p) for p in dumps]
        per_call = {}
        for i, label in enumerate(names):
            single, double = totals[3 * i + 1], totals[3 * i + 2]
            per_call[label] = (double - single) / loops
            if keep and label in keep:
                shutil.copy(dumps[3 * i + 2], keep[label])
    if totals[1] == 0:
        raise RuntimeError(f"callgrind counted nothing in {_TOGGLE}: this interpreter has no symbols to count by")
    loop_cost = per_call.pop(LOOP)
    return {label: cost - loop_cost for label, cost in per_call.items()}, loop_cost


def source_calls(setup: str, statements: dict[str, str]) -> dict[str, Callable[[], object]]:
    """A factory for :func:`count`: ``setup`` run once, then each statement
    (an expression) as a call of no argument in its namespace.

    Parameters
    ----------
    setup : str
        Python statements (imports, the arrays).
    statements : dict of str to str
        Name -> an expression to count.

    Returns
    -------
    dict of str to callable
    """
    namespace: dict = {}
    exec(setup, namespace)
    return {label: eval(f"lambda: {expr}", namespace) for label, expr in statements.items()}
