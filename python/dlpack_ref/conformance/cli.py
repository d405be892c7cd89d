"""``dlpack-ref check`` (also ``python -m dlpack_ref check``): run the
conformance checks on libraries and gate on the result; ``dlpack-ref bench``:
benchmark the exchange between them (the :mod:`dlpack_ref.bench` package),
with the same libraries, report formats and exit statuses."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import os
import sys
import time

import dlpack_ref

from .adapters import KNOWN, installed, subject as adapter_subject
from .runner import RULES, run as run_subject, run_matrix, tasks_for
from .exchange_matrix import cell_text
from .gate import AllowList, blocking
from .report import SCHEMA_VERSION, LibraryRun, Run, render
from .reproduce import reproduction

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_MISSING = 0, 1, 2, 3

_EPILOG = f"""\
libraries:
  Without --library: dlpack_ref and every installed one of
  {', '.join(k for k in KNOWN if k != 'dlpack_ref')};
  the report lists those looked for and not found.
  --library NAME uses a built-in adapter for a known name; any other
  importable module is checked through the generic array-API adapter
  (asarray, reshape and dtype attributes make arrays; values are read by
  indexing and through DLPack): --library mylib, or --library
  module:from_dlpack (e.g. mylib.sub:from_dlpack) to name the from_dlpack to
  check.

formats (--format, the report goes to stdout, progress to stderr):
  table      plain text: per-library summary, producer and consumer grids,
             the exchange matrix, one short line per failure, each broken
             rule's text once, the gate's verdict
  markdown   the same as Markdown (text escaped: __dlpack__ is not bold)
  json       machine-readable, schema version {SCHEMA_VERSION}: the file
             report.schema.json inside the dlpack_ref.conformance package

explaining a rule:
  --explain RULE runs that one rule (no exchange matrix) and prints, instead
  of the report, the rule, where it is written, each library's result and,
  for each failure, a reproduction: Python that shows it with that library
  alone (also in the Markdown and JSON reports), to paste into its tracker.

allowing failures:
  --allow RULE (repeatable, any library) and --allow-file FILE, whose lines
  are "LIBRARY RULE REASON" (LIBRARY may be *, RULE may use * wildcards,
  a reason is required, # starts a comment).

exit status:
  {EXIT_OK}  every checked library passes every rule that is not allowed
  {EXIT_FAILED}  a checked library fails a rule that is not allowed (or a check
     could not run, or a library crashed)
  {EXIT_USAGE}  bad arguments or an unreadable allow file
  {EXIT_MISSING}  a library asked for with --library (or --fail-on) cannot be imported
  Without the gate only dlpack_ref's own failures set the status:
  --fail-on dlpack_ref gives that behaviour back.
"""


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="DLPack conformance checks of array libraries, "
                                "usable as a CI gate.")
    p.add_argument("--version", action="version",
                   version=f"%(prog)s {dlpack_ref.__version__} (DLPack {'.'.join(map(str, dlpack_ref.DLPACK_VERSION))})")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = sub.add_parser("check", help="run the producer, consumer and exchange checks",
                           description="Run the producer checks, the consumer catalogue (each case in a\n"
                           "child process) and the pairwise exchange matrix, print a report, and exit\n"
                           "non-zero when a rule that is not allowed fails.",
                           epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--library", action="append", metavar="SPEC",
                       help="a library to check: a known name or any module[:from_dlpack] (repeatable)")
    check.add_argument("--format", choices=("table", "markdown", "json"), default="table",
                       help="report format (default: table)")
    check.add_argument("--allow", action="append", default=[], metavar="RULE",
                       help="a rule id (or pattern) whose failure does not fail the gate, for every library")
    check.add_argument("--allow-file", metavar="FILE", help="allowances, one 'LIBRARY RULE REASON' a line")
    check.add_argument("--fail-on", action="append", metavar="LIBRARY",
                       help="only these libraries' failures set the exit status (repeatable; "
                       "default: every checked library)")
    check.add_argument("--no-matrix", action="store_true", help="skip the pairwise exchange matrix")
    check.add_argument("--rules", action="append", metavar="PATTERN",
                       help="run only the rules whose id matches (shell-style, repeatable; e.g. 'cuda.*' for "
                       "the CUDA checks)")
    check.add_argument("--explain", metavar="RULE",
                       help="run one rule and print it with each library's result and each failure's reproduction")
    _bench_parser(sub)
    return p


_BENCH_EPILOG = f"""\
libraries:
  dlpack_ref always; without --library every installed one of
  {', '.join(k for k in KNOWN if k != 'dlpack_ref')};
  --library SPEC names one as `check` does (a known name, any module through
  the array API or its __dlpack_conformance__ hook, module:from_dlpack) and
  replaces that set, --installed adds it back: `--installed --library mylib`
  benchmarks mylib against everyone.

what is measured (docs/benchmarks.md):
  every producer x consumer pair: consumer.from_dlpack(x) of a small array,
  all pairs interleaved within every round, median and min, and whether the
  result is the producer's memory (zero-copy, by pointer) or a copy; each
  producer's __dlpack__() and __dlpack_device__() alone, and where its type
  publishes a C exchange table, dlpack_ref's import through it beside the
  import through __dlpack__; each library's from_dlpack(x, copy=True) of a
  large array beside this machine's memcpy of the same bytes. Every call
  runs once first in a child process: one that crashes, hangs or raises is
  reported and not timed (timing runs in this one process).

formats (--format, the report goes to stdout, progress and warnings to stderr):
  table      plain text
  markdown   the same as Markdown
  json       machine-readable: the file bench.schema.json inside the
             dlpack_ref.bench package

exit status:
  {EXIT_OK}  measured (whatever the numbers; a crashing pair is reported, not fatal)
  {EXIT_FAILED}  the chart asked for with --plot cannot be drawn (matplotlib is
     missing: checked before measuring, and an old chart at FILE is removed)
  {EXIT_USAGE}  bad arguments
  {EXIT_MISSING}  a library asked for with --library cannot be imported
"""


def _bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmark zero-copy exchange between the libraries",
                           description="Benchmark from_dlpack between every pair of libraries, the producers'\n"
                           "__dlpack__ and __dlpack_device__, and copy=True bandwidth, in one process.",
                           epilog=_BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--library", action="append", metavar="SPEC",
                       help="a library to benchmark: a known name or any module[:from_dlpack] (repeatable)")
    bench.add_argument("--installed", action="store_true",
                       help="with --library: every installed known library too")
    bench.add_argument("--format", choices=("table", "markdown", "json"), default="table",
                       help="report format (default: table)")
    bench.add_argument("--json", metavar="FILE", help="also write the JSON report to FILE")
    bench.add_argument("--plot", metavar="FILE", help="draw the latency heatmap to FILE (.png or .svg; "
                       "needs matplotlib, the 'bench' extra)")
    bench.add_argument("--quick", action="store_true", help="a smoke run: fewer and shorter rounds")
    bench.add_argument("--instructions", action="store_true",
                       help="count instructions per call with callgrind too, where valgrind is installed (slow)")


def explain(run: Run, rule_id: str) -> str:
    """The rule, where it is written, and each checked library's result of
    it, with a reproduction for each failure."""
    rule = RULES[rule_id]
    out = [f"{rule.id}: {rule.text}", f"where: {rule.citation()}", ""]
    for lib, lr in run.libraries.items():
        for r in lr.results:
            out.append(r.line())
            source = reproduction(lib, r)
            if source is not None:
                out += ["", source.rstrip(), ""]
            elif r.failed:
                out.append("    (no reproduction: no recipe writes this library's objects for this rule)")
    for lib, why in run.missing.items():
        out.append(f"{lib}: not checked ({why})")
    return "\n".join(out)


class _Progress:
    """Counts on stderr while a phase runs."""

    def say(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def phase(self, label: str, total: int):
        state = {"done": 0, "failing": 0, "start": time.monotonic()}
        step = max(1, total // 5)

        def tick(line: str | None = None, failed: bool = False):
            state["done"] += 1
            state["failing"] += failed
            if line:
                self.say(f"  {label}: {line}")
            if state["done"] % step == 0 or state["done"] == total:
                self.say(f"  {label}: {state['done']}/{total} done, {state['failing']} failing, "
                         f"{time.monotonic() - state['start']:.1f} s")
        return tick


def _libraries(args) -> tuple[list[str], list[str], bool]:
    """(to check, known ones not installed, whether they were asked for)."""
    if args.library:
        return list(dict.fromkeys(args.library)), [], True
    found, missing = installed()
    if "dlpack_ref" not in found:
        found.insert(0, "dlpack_ref")
    return found, missing, False


def execute(args, allow: AllowList, progress: _Progress) -> Run:
    """Run the checks the arguments ask for."""
    wanted, not_installed, asked = _libraries(args)
    missing = {lib: "not installed" for lib in not_installed}
    only = None if not args.rules else [r for r in RULES if any(fnmatch.fnmatchcase(r, p) for p in args.rules)]
    libraries: dict[str, LibraryRun] = {}
    for spec in wanted:
        try:
            subject = adapter_subject(spec)
        except Exception as e:
            missing[spec] = f"cannot be imported: {type(e).__name__}: {e}"
            progress.say(f"{spec}: {missing[spec]}; skipped")
            continue
        tasks = tasks_for(subject, only)
        progress.say(f"{spec} {subject.version}: {len(tasks)} checks")
        tick = progress.phase(spec, len(tasks))

        def on_result(r, tick=tick):
            tick(f"{r.rule.id}: {r.status.value}" if r.failed else None, r.failed)

        libraries[spec] = LibraryRun(spec, subject.version, run_subject(subject, only, on_result=on_result))
    matrix = {}
    usable = [lib for lib in libraries if lib in wanted]
    if not args.no_matrix and usable:
        progress.say(f"exchange matrix: {len(usable) ** 2} pairs")
        tick = progress.phase("exchange matrix", len(usable) ** 2)

        def on_pair(task, cell):
            bad = cell_text(cell) in ("CRASH", "WRONG VALUES", "error")
            tick(f"{task['producer']} -> {task['consumer']}: {cell_text(cell)}" if bad else None, bad)

        matrix = run_matrix(usable, on_pair)
    fail_on = args.fail_on
    results = {lib: lr.results for lib, lr in libraries.items()}
    stopping = blocking(results, allow, fail_on)
    requested_missing = [lib for lib in missing if asked or (fail_on and lib in fail_on)]
    if fail_on:
        requested_missing += [lib for lib in fail_on if lib not in libraries and lib not in requested_missing]
        for lib in fail_on:
            if lib not in libraries:
                missing.setdefault(lib, "asked for with --fail-on but not checked")
    status = EXIT_MISSING if requested_missing else EXIT_FAILED if stopping else EXIT_OK
    return Run(libraries, missing, matrix, allow, fail_on, stopping, status)


def prog_name() -> str:
    """How the command was started: ``dlpack-ref`` or ``python -m dlpack_ref``."""
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m dlpack_ref" if base in ("__main__.py", "-c", "") or base.startswith("python") else base


def _bench(args, progress: _Progress) -> int:
    """Run ``bench`` as the arguments ask; returns the exit status."""
    from dlpack_ref.bench import chart, measure, report

    if args.plot:
        if os.path.splitext(args.plot)[1].lower() not in chart.FORMATS:
            progress.say(f"error: --plot {args.plot}: the file must end in {' or '.join(chart.FORMATS)}")
            return EXIT_USAGE
        existed = os.path.exists(args.plot)
        if chart.pyplot_or_remove(args.plot) is None:
            progress.say("error: --plot needs matplotlib (pip install 'dlpack-ref[bench]'); nothing was measured"
                         + (f"; {args.plot}, an earlier run's chart, was removed" if existed else ""))
            return EXIT_FAILED
    wanted = list(args.library or [])
    missing: dict[str, str] = {}
    if not args.library or args.installed:
        found, not_installed = installed()
        wanted += found
        missing.update((lib, "not installed") for lib in not_installed if lib not in wanted)
    specs = []
    for spec in dict.fromkeys(["dlpack_ref", *wanted]):
        try:
            adapter_subject(spec)
        except Exception as e:
            missing[spec] = f"cannot be imported: {type(e).__name__}: {e}"
            progress.say(f"{spec}: {missing[spec]}")
            continue
        specs.append(spec)
    if any(lib in missing for lib in args.library or []):
        return EXIT_MISSING
    settings = measure.QUICK if args.quick else measure.Settings()
    if args.instructions:
        settings = dataclasses.replace(settings, instructions=True)
    doc = measure.measure(specs, settings, progress, missing)
    print(report.render(doc, args.format))
    if args.json:
        with open(args.json, "w") as f:
            f.write(report.render(doc, "json") + "\n")
    if args.plot:
        chart.heatmap(doc, args.plot)
        progress.say(f"chart: {args.plot}")
    return EXIT_OK


def main(argv=None, prog: str | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser(prog or prog_name()).parse_args(sys.argv[1:] if argv is None else argv)
    progress = _Progress()
    if args.command == "bench":
        return _bench(args, progress)
    try:
        allow = AllowList.read(args.allow_file) if args.allow_file else AllowList()
    except (OSError, ValueError) as e:
        progress.say(f"error: --allow-file: {e}")
        return EXIT_USAGE
    if args.explain is not None:
        if args.explain not in RULES:
            progress.say(f"error: --explain: no rule {args.explain!r} (the rule ids are in every report)")
            return EXIT_USAGE
        args.rules, args.no_matrix = [args.explain], True
    run = execute(args, allow.plus(args.allow), progress)
    print(explain(run, args.explain) if args.explain is not None else render(run, args.format))
    return run.exit_status
