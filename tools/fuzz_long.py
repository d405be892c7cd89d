"""The long fuzz run: the properties of tests/test_fuzz.py with a large budget.

    python tools/fuzz_long.py                 # 20,000 examples per property
    python tools/fuzz_long.py -n 100000 --timeout 3600
    python tools/fuzz_long.py --properties -n 20000   # tests/test_properties.py (Array vs NumPy)

Each property runs in its own interpreter (a crash is reported with the input
that caused it). Prints, per property, the number of inputs run (generation
and shrinking), hypothesis' outcome statistics and the result; exit status 0
when every property held.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_fuzz_module():
    spec = importlib.util.spec_from_file_location("test_fuzz", ROOT / "tests" / "test_fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("test_fuzz", module)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--examples", type=int, default=20_000, help="examples per property")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per property")
    p.add_argument("-k", "--property", action="append", help="run only these properties")
    p.add_argument("--properties", action="store_true",
                   help="run tests/test_properties.py (the Array surface against NumPy) instead")
    args = p.parse_args(argv)
    if args.properties:
        return run_properties(args.examples, args.timeout, args.property)
    fuzz = load_fuzz_module()
    props = args.property or fuzz.CHILD_PROPERTIES
    failed = 0
    total = 0
    with tempfile.TemporaryDirectory(prefix="dlpack-ref-fuzz-") as tmp:
        for prop in props:
            log = str(pathlib.Path(tmp) / f"{prop}.log")
            t0 = time.perf_counter()
            r = fuzz.run_child(prop, args.examples, log, timeout=args.timeout,
                               extra_args=["--hypothesis-show-statistics"])
            seconds = time.perf_counter() - t0
            last, count = fuzz.last_input(log)
            total += count
            ok = r.returncode == 0
            failed += not ok
            print(f"== {prop}: {count} inputs in {seconds:.0f} s: {'held' if ok else f'FAILED (exit {r.returncode})'}")
            stats = [line for line in r.stdout.splitlines()
                     if "%" in line and "Retried draw" not in line or "passing examples" in line]
            print("\n".join(stats))
            if not ok:
                print(f"last input: {last}\n{r.stdout[-6000:]}\n{r.stderr[-3000:]}")
            sys.stdout.flush()
    print(f"== {total} inputs, {len(props) - failed}/{len(props)} properties held")
    return 1 if failed else 0


def run_properties(examples: int, timeout: float, only) -> int:
    """tests/test_properties.py under pytest with `examples` per property,
    in one child interpreter (a crash fails the run, with its output)."""
    env = dict(os.environ, DLPACK_REF_PROPERTY_EXAMPLES=str(examples))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
           str(ROOT / "tests" / "test_properties.py")]
    for name in only or ():
        cmd += ["-k", name]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout * 10)
    except subprocess.TimeoutExpired:
        print(f"== properties: did not finish in {timeout * 10:.0f} s")
        return 1
    seconds = time.perf_counter() - t0
    stats = [line for line in r.stdout.splitlines()
             if " passing, " in line or "test_properties.py::" in line]
    print("\n".join(stats))
    print(r.stdout.splitlines()[-1] if r.stdout else r.stderr[-3000:])
    print(f"== properties: {examples} examples each, {seconds:.0f} s: "
          f"{'held' if r.returncode == 0 else f'FAILED (exit {r.returncode})'}")
    if r.returncode:
        print(r.stdout[-8000:], r.stderr[-3000:])
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
