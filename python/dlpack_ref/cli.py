"""``dlpack-ref check`` and ``dlpack-ref bench`` (also ``python -m
dlpack_ref``): the conformance checks as a CI gate, and the exchange
benchmark, on one selection of libraries, with one set of conventions:
stdout holds the report alone (whatever a library prints goes to stderr),
progress and warnings go to stderr, ``--json FILE`` writes the JSON report
too, and no run exits 0 unless something was checked."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import fnmatch
import importlib.util
import os
import sys

import dlpack_ref

from .harness import processes
from .harness.output import (EXIT_FAILED, EXIT_MISSING, EXIT_OK, EXIT_USAGE, OutputError, Progress, report_stdout,
                             unwritable, unwritable_folder, write_report)
from .harness.processes import Interrupted
from .harness.registry import KNOWN, select
from .harness.runner import description_of

_LIBRARIES = f"""\
libraries (the same for check and bench):
  Without --library: dlpack_ref and every installed one of
  {', '.join(k for k in KNOWN if k != 'dlpack_ref')}
  (those not installed are listed on one line). --library SPEC names one
  and replaces that set; --installed adds it back. A known name uses its
  adapter; any other importable module is checked through its
  __dlpack_conformance__() factory hook when it has one, else through the
  generic adapter (asarray and reshape, or its from_dlpack of NumPy arrays,
  make arrays; from_dlpack, or the attribute named by module:attr, is the
  consumer). A library is imported only in child processes: one whose
  import fails, crashes or exits, or in which nothing can be checked, is
  reported with why.

output:
  The report goes to stdout, and nothing else does: whatever a library
  writes goes to stderr, with the progress and warnings. --json FILE writes
  the JSON report too, whole or not at all (a temporary file beside it,
  renamed over it); a FILE that cannot be written (a missing or read-only
  folder, a path under /proc or /sys, '') is a usage error before anything
  runs, and a write that fails at the end (a full disk, a reader gone) is
  one line and exit status 2. A FIFO is written once a reader opens it.
"""

_CHECK_EPILOG = _LIBRARIES + """
formats (--format):
  table      plain text: per-library summary, producer and consumer grids,
             the exchange matrix, one short line per failure, each broken
             rule's text once, the gate's verdict, how to see a
             reproduction
  markdown   the same as Markdown (text escaped: __dlpack__ is not bold),
             with the failures' reproductions folded while the report
             stays within 60,000 characters (a pull-request comment holds
             65,536), the command that prints each of the others
  json       machine-readable, schema version 1: the file
             report.schema.json inside the dlpack_ref.conformance package

reproductions as files:
  --repro-dir DIR writes each failure's reproduction in DIR (made when
  missing) as LIBRARY.RULE.py, and the report names each file instead of
  folding any in.

explaining a rule:
  --explain RULE runs that one rule (no exchange matrix) and prints, instead
  of the report, a Python file that runs as is: the rule, where it is
  written and each library's result as comments, then the first failure's
  reproduction, the rule's own check and the library's adapter as they ran
  (python -m dlpack_ref check --library LIB --explain RULE > repro.py).

allowing failures:
  --allow RULE (repeatable, any library) and --allow-file FILE, whose lines
  are "LIBRARY RULE REASON" (LIBRARY may be *, RULE may use * wildcards,
  a reason is required, # starts a comment; UTF-8, LF or CRLF). A line
  that allows no rule there is, or repeats another, is named on stderr
  (--strict-allow: an unknown rule is exit status 2); an allowance for a
  rule that now passes is listed in the report as stale.

exit status:
  0  something was checked, and every checked library passes every rule that
     is not allowed
  1  a checked library fails a rule that is not allowed (or a check could
     not run, or a library crashed)
  2  bad arguments, all found before anything runs: an unknown option, a
     malformed --library SPEC, a --fail-on LIBRARY that is not in the
     run, an unreadable allow file, an unknown --explain rule, a --rules
     pattern that matches no rule, a --json FILE that cannot be written,
     a --repro-dir DIR that cannot be made or written; and a report that
     could not be written at the end
  3  a library asked for with --library (or --fail-on) cannot be imported,
     its import crashes or exits, nothing in it can be checked, or nothing
     was checked at all
  130, 143  interrupted by SIGINT or SIGTERM: every process the run started
     is ended, and the report holds what was done, marked partial
  --fail-on dlpack_ref makes dlpack_ref's own failures alone set the
  status (the other libraries are still checked and reported).
"""

_BENCH_EPILOG = _LIBRARIES + """
  bench always measures dlpack_ref too: it is the yardstick of the standings.

what is measured:
  every producer x consumer pair: the consumer's import of a small array
  (from_dlpack(x), or of x.__dlpack__(...) for a consumer that takes
  capsules), all pairs interleaved within every round, median and min, and
  whether the result is the producer's memory (zero-copy, by pointer) or a
  copy; each producer's __dlpack__() and __dlpack_device__() alone, and
  where its type publishes a C exchange table, dlpack_ref's import through
  it beside the import through __dlpack__; each library's copy=True import
  of a large array of its own and of one NumPy array, beside this machine's
  memcpy of the same bytes. Every call runs once first in a child process:
  one that crashes, hangs or raises is reported and not timed (timing runs
  in this one process).

formats (--format):
  table, markdown, json (the file bench.schema.json inside the
  dlpack_ref.bench package)

exit status:
  0  measured (whatever the numbers; a crashing pair is reported, not fatal)
  1  the chart asked for with --plot cannot be drawn (matplotlib is missing:
     checked before measuring, and an old chart at FILE is removed)
  2  bad arguments, found before measuring (an unknown option, a malformed
     --library SPEC, a --plot or --json FILE that cannot be written), or a
     report or chart that could not be written at the end
  3  a library asked for with --library cannot be imported, its import
     crashes or exits, or it has neither a producer nor a consumer
  130, 143  interrupted by SIGINT or SIGTERM: every process the run started
     is ended, and the report holds what was measured, marked partial
"""


def _library_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--library", action="append", metavar="SPEC",
                   help="a library: a known name, any module, or module:from_dlpack (repeatable)")
    p.add_argument("--installed", action="store_true", help="with --library: every installed known library too")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table",
                   help="report format (default: table)")
    p.add_argument("--json", metavar="FILE", help="also write the JSON report to FILE")


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="DLPack conformance checks and exchange benchmarks of "
                                "array libraries, usable as a CI gate.")
    p.add_argument("--version", action="version",
                   version=f"%(prog)s {dlpack_ref.__version__} (DLPack {'.'.join(map(str, dlpack_ref.DLPACK_VERSION))})")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = sub.add_parser("check", help="run the producer, consumer and exchange checks",
                           description="Run the producer checks, the consumer catalogue (each in a child\n"
                           "process) and the pairwise exchange matrix, print a report, and exit\n"
                           "non-zero when a rule that is not allowed fails.",
                           epilog=_CHECK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _library_options(check)
    check.add_argument("--allow", action="append", default=[], metavar="RULE",
                       help="a rule id (or pattern) whose failure does not fail the gate, for every library")
    check.add_argument("--allow-file", metavar="FILE", help="allowances, one 'LIBRARY RULE REASON' a line")
    check.add_argument("--strict-allow", action="store_true",
                       help="an allowance for a rule id that does not exist is an error (exit 2), not a warning")
    check.add_argument("--fail-on", action="append", metavar="LIBRARY",
                       help="only these libraries' failures set the exit status (repeatable; "
                       "default: every checked library)")
    check.add_argument("--no-matrix", action="store_true", help="skip the pairwise exchange matrix")
    check.add_argument("--rules", action="append", metavar="PATTERN",
                       help="run only the rules whose id matches (shell-style, repeatable; e.g. 'cuda.*' for "
                       "the CUDA checks)")
    check.add_argument("--repro-dir", metavar="DIR",
                       help="write each failure's reproduction in DIR as LIBRARY.RULE.py; the report names "
                       "the files")
    check.add_argument("--explain", metavar="RULE",
                       help="run one rule and print a runnable file: each library's result, and the first "
                       "failure's reproduction")
    bench = sub.add_parser("bench", help="benchmark zero-copy exchange between the libraries",
                           description="Benchmark from_dlpack between every pair of libraries, the producers'\n"
                           "__dlpack__ and __dlpack_device__, and copy=True bandwidth, in one process.",
                           epilog=_BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _library_options(bench)
    bench.add_argument("--plot", metavar="FILE", help="draw the latency heatmap to FILE (.png or .svg; "
                       "needs matplotlib, the 'bench' extra)")
    bench.add_argument("--quick", action="store_true", help="a smoke run: fewer and shorter rounds")
    bench.add_argument("--instructions", action="store_true",
                       help="count instructions per call with callgrind too, where valgrind is installed (slow)")
    p.subcommands = {"check": check, "bench": bench}
    return p


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments; an unknown option is reported with its subcommand's
    usage (argparse gives the top level's), and the closest option."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        sub = parser.subcommands[args.command]
        options = [o for action in sub._actions for o in action.option_strings if o.startswith("--")]
        hints = [m for u in unknown if u.startswith("-")
                 for m in difflib.get_close_matches(u.split("=")[0], options, n=1)]
        sub.error(f"unrecognized arguments: {' '.join(unknown)}"
                  + (f" (did you mean {' '.join(hints)}?)" if hints else ""))
    return args


def _bad_spec(spec: str) -> str | None:
    """Why ``--library SPEC`` cannot name a library, or None. Only the form
    is checked here (a module, optionally ``:attr``, no empty part): any
    other text is a name importlib may find."""
    module, colon, attr = spec.partition(":")
    if not module.strip():
        return f"--library {spec!r}: no module name (a known name, a module, or module:attr)"
    if colon and not attr.strip():
        return f"--library {spec!r}: nothing after ':' (module:attr names the consumer's from_dlpack)"
    for part, what in ((module, "module"), (attr, "attribute")):
        if part and "" in part.split("."):
            return f"--library {spec!r}: an empty part in the {what} name {part!r}"
    if ":" in attr:
        return f"--library {spec!r}: more than one ':' (module:attr)"
    return None


def _suggestion(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _not_found_hint(spec: str) -> str:
    """A close known name for a spec whose module is nowhere to be found
    (looked up without importing it), else ''."""
    top = spec.partition(":")[0].split(".")[0]
    if spec in KNOWN:
        return ""
    try:
        if importlib.util.find_spec(top) is not None:
            return ""
    except (ImportError, ValueError):
        pass
    return _suggestion(spec, KNOWN)


def _library_arguments(args, progress: Progress) -> int | None:
    """Exit status EXIT_USAGE for a malformed --library SPEC, else None."""
    for spec in args.library or []:
        why = _bad_spec(spec)
        if why:
            progress.say(f"error: {why}; nothing was run")
            return EXIT_USAGE
    return None


def _output_arguments(args, progress: Progress, flags=("--json",)) -> int | None:
    """EXIT_USAGE when an output path (--json, --plot, --repro-dir where the
    command has it) cannot be written, saying which and why; else None."""
    for flag in flags:
        path = getattr(args, flag[2:].replace("-", "_"), None)
        if path is None:
            continue
        why = unwritable(path) if flag != "--repro-dir" else unwritable_folder(path)
        if why:
            progress.say(f"error: {flag} {why}; nothing was run")
            return EXIT_USAGE
    return None


def prog_name() -> str:
    """How the command was started: ``dlpack-ref`` or ``python -m dlpack_ref``."""
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m dlpack_ref" if base in ("__main__.py", "-c", "") or base.startswith("python") else base


def _write_json(path: str | None, text: str) -> None:
    if path is not None:
        write_report("--json", path, text + "\n")


# --- check -----------------------------------------------------------------------------------

def _check_arguments(args, progress: Progress, rule_ids: list[str]):
    """The allow list, the rules to run and the selection, or an exit
    status: every argument is checked here, before anything runs."""
    from .conformance.gate import AllowList

    status = _library_arguments(args, progress) or _output_arguments(args, progress, ("--json", "--repro-dir"))
    if status:
        return status
    try:
        allow = (AllowList.read(args.allow_file) if args.allow_file is not None else AllowList()).plus(args.allow)
    except OSError as e:
        progress.say(f"error: --allow-file {args.allow_file}: {e.strerror or e}; nothing was run")
        return EXIT_USAGE
    except ValueError as e:   # a line without a reason, or a file that is not UTF-8
        progress.say(f"error: --allow-file {args.allow_file}: {e}; nothing was run")
        return EXIT_USAGE
    unknown, duplicates = allow.problems(rule_ids)
    for line in unknown + duplicates:
        progress.say(("error: " if args.strict_allow and line in unknown else "warning: ") + line)
    if args.strict_allow and unknown:
        return EXIT_USAGE
    if args.explain is not None:
        if args.explain not in rule_ids:
            progress.say(f"error: --explain: no rule {args.explain!r}{_suggestion(args.explain, rule_ids)} "
                         "(the rule ids are in every report)")
            return EXIT_USAGE
        args.rules, args.no_matrix = [args.explain], True
    only = None
    if args.rules:
        only = {r for r in rule_ids if any(fnmatch.fnmatchcase(r, p) for p in args.rules)}
        if not only:
            hint = "".join(_suggestion(p, rule_ids) for p in args.rules)
            progress.say(f"error: --rules {' '.join(args.rules)}: matches no rule{hint} (the rule ids are in every "
                         "report; e.g. 'producer.*', 'consumer.copy_*', 'cuda.*')")
            return EXIT_USAGE
    selection = select(args.library, add_installed=args.installed)
    for lib in args.fail_on or []:
        if lib in selection.not_installed:
            progress.say(f"error: --fail-on {lib}: not installed here; nothing was run")
            return EXIT_MISSING
        if lib not in selection.specs:
            progress.say(f"error: --fail-on {lib}: not a library of this run{_suggestion(lib, selection.specs)}; "
                         f"it checks {', '.join(selection.specs)}; nothing was run")
            return EXIT_USAGE
    return allow, only, selection


def _check(args, progress: Progress, out, prog: str) -> int:
    from .conformance import report
    from .conformance.gate import blocking, stale
    from .conformance.rules import entries, tasks_for
    from .conformance.run import check_spec, run_matrix

    rule_ids = [e.rule.id for e in entries()]
    checked_arguments = _check_arguments(args, progress, rule_ids)
    if isinstance(checked_arguments, int):
        return checked_arguments
    allow, only, selection = checked_arguments
    progress.say(f"checking {len(selection.specs)} librar{'y' if len(selection.specs) == 1 else 'ies'}: "
                 f"{', '.join(selection.specs)} (each in child processes of its own)")
    libraries, unavailable, sides, cells = {}, {}, {}, {}
    interrupted = None
    try:
        for spec in selection.specs:
            tick = None

            def on_description(checked, spec=spec):
                nonlocal tick
                if checked.error is None:
                    d = checked.description
                    total = len(tasks_for(checked.sides, only))
                    progress.say(f"{spec} {d['version']}: {total} checks")
                    tick = progress.phase(spec, total)
                else:
                    progress.say(f"{spec}: {checked.error}{_not_found_hint(spec)}; not checked")

            def on_result(r):
                if tick:
                    tick(f"{r.rule.id}: {r.status.value}" if r.failed else None, r.failed)

            checked = check_spec(spec, only, on_result, on_description)
            if checked.error is not None:
                unavailable[spec] = checked.error + _not_found_hint(spec)
                continue
            d, sides[spec] = checked.description, checked.sides
            name = d.get("name") or spec
            for r in checked.results:
                r.subject = name
            if name != spec:
                allow = allow.aliased(name, spec)
            # a missing side says why (what was looked for), also where the other side is checked
            libraries[spec] = report.LibraryRun(name, d["version"], checked.results,
                                                "; ".join(d["absent"].values()), d["adapter"])
        matrix = {}
        if not args.no_matrix and libraries:
            producers = [s for s in libraries if sides[s]["producer"]]
            consumers = [s for s in libraries if sides[s]["consumer"]]
            total = len(producers) * len(consumers)
            progress.say(f"exchange matrix: {total} pairs, each pair of libraries in a worker of its own")
            tick = progress.phase("exchange matrix", total)

            def on_pair(task, cell):
                from .harness.exchange import cell_text
                bad = cell_text(cell).split(" ")[0] in ("CRASH", "HANG", "WRONG", "error")
                tick(f"{task['producer']} -> {task['consumer']}: {cell_text(cell)}" if bad else None, bad)
                cells[(task["producer"], task["consumer"])] = cell

            matrix = run_matrix(producers, consumers, on_pair)
    except Interrupted as e:
        interrupted, matrix = e, cells
        for spec in selection.specs:
            if spec not in libraries and spec not in unavailable:
                unavailable[spec] = f"the run was interrupted by {e.signal}"
    results = {lib: lr.results for lib, lr in libraries.items()}
    stopping = blocking(results, allow, args.fail_on)
    asked = set(selection.asked) | set(args.fail_on or [])
    requested_missing = [lib for lib in unavailable if lib in asked]
    requested_missing += [lib for lib in selection.asked if lib in libraries and not libraries[lib].results]
    for lib in selection.asked:
        if lib in libraries and not libraries[lib].results:
            unavailable[lib] = "none of the selected rules applies to it"
    nothing = not any(results.values())
    if nothing and not requested_missing:
        requested_missing.append("(nothing was checked)")
    status = EXIT_MISSING if requested_missing else EXIT_FAILED if stopping else EXIT_OK
    partial = None
    if interrupted is not None:
        status, partial = interrupted.exit_status, _what_was_done(interrupted, libraries, selection.specs,
                                                                    matrix, args.no_matrix)
    run = report.Run(libraries, selection.not_installed, unavailable, matrix, allow, args.fail_on, stopping,
                     requested_missing, status, f"{prog} check --library LIBRARY --explain RULE",
                     partial=partial, stale=stale(results, allow))
    files = report.write_reproductions(run, args.repro_dir) if args.repro_dir else None
    text = explain(run, args.explain) if args.explain is not None else report.render(run, args.format, files)
    out.write(text + "\n")
    _write_json(args.json, report.render(run, "json"))
    if partial:
        progress.say(f"{prog} check: {partial}; the report is marked partial; exit status {status}")
    return run.exit_status


def _what_was_done(e: Interrupted, libraries: dict, specs: list[str], matrix: dict, no_matrix: bool) -> str:
    """One line: the signal, what the run had done, that its processes were ended."""
    done = f"{len(libraries)} of {len(specs)} libraries checked"
    if not no_matrix:
        done += f", {len(matrix)} exchange cells" if matrix else ", no exchange matrix"
    return f"interrupted by {e.signal}: {done}; every process it started was ended"


def explain(run, rule_id: str) -> str:
    """A Python file that runs as is: the rule, where it is written and each
    library's result as comments; the first failure's reproduction as code;
    any other failure's reproduction commented out."""
    from .conformance.reproduce import reproduction
    from .conformance.rules import entries

    rule = {e.rule.id: e.rule for e in entries()}[rule_id]
    out = [f"# {rule.id}: {rule.text}", f"# where: {rule.citation()}", "#"]
    code = []
    for lib, lr in run.libraries.items():
        for r in lr.results:
            out += ["# " + line for line in r.line().splitlines()]
            source = reproduction(lib, r, lr.adapter)
            if source is None:
                continue
            if not code:
                code = ["", f"# --- the reproduction of {run.label(lib)}'s failure ---", source.rstrip()]
            else:
                code += ["", f"# --- the reproduction of {run.label(lib)}'s failure (commented out: "
                         f"--library {lib} --explain {rule.id} prints it as code) ---",
                         *("# " + line if line else "#" for line in source.rstrip().splitlines())]
    for lib, why in run.unavailable.items():
        out.append(f"# {lib}: not checked: {why}")
    if not code:
        out.append("# no library checked here fails this rule: nothing to reproduce")
    return "\n".join(out + code)


# --- bench ------------------------------------------------------------------------------------

def _bench(args, progress: Progress, out) -> int:
    from .bench import chart, measure, report

    status = _library_arguments(args, progress) or _output_arguments(args, progress, ("--json", "--plot"))
    if status:
        return status
    if args.plot:
        if os.path.splitext(args.plot)[1].lower() not in chart.FORMATS:
            progress.say(f"error: --plot {args.plot}: the file must end in {' or '.join(chart.FORMATS)}")
            return EXIT_USAGE
        existed = os.path.exists(args.plot)
        if chart.pyplot_or_remove(args.plot) is None:
            progress.say("error: --plot needs matplotlib (pip install 'dlpack-ref[bench]'); nothing was measured"
                         + (f"; {args.plot}, an earlier run's chart, was removed" if existed else ""))
            return EXIT_FAILED
    selection = select(args.library, add_installed=args.installed, always=("dlpack_ref",))
    missing = {lib: "not installed" for lib in selection.not_installed}
    specs = []
    progress.say(f"bench: {len(selection.specs)} librar{'y' if len(selection.specs) == 1 else 'ies'} "
                 f"({', '.join(selection.specs)}): asking each in a child process what it has")
    for spec in selection.specs:
        found = description_of(spec)
        error = found.error
        if error is None and not (found.sides["producer"] or found.sides["consumer"]):
            error = "nothing to benchmark: it has CUDA arrays only"
        if error is not None:
            missing[spec] = error + _not_found_hint(spec)
            progress.say(f"{spec}: {missing[spec]}; not benchmarked")
            continue
        progress.say(f"  {spec} {found.description.get('version', '')}: "
                     + " and ".join(side for side in ("producer", "consumer") if found.sides[side]))
        specs.append(spec)
    if any(lib in missing for lib in selection.asked):
        return EXIT_MISSING
    settings = measure.QUICK if args.quick else measure.Settings()
    if args.instructions:
        settings = dataclasses.replace(settings, instructions=True)
    doc = measure.measure(specs, settings, progress, missing)
    out.write(report.render(doc, args.format) + "\n")
    _write_json(args.json, report.render(doc, "json"))
    if doc["partial"]:
        status = processes.stop_status() or EXIT_FAILED
        progress.say(f"{prog_name()} bench: {doc['partial']}; the report is marked partial; exit status {status}")
        return status
    if args.plot:
        write_report("--plot", args.plot, draw=lambda path: chart.heatmap(doc, path))
        progress.say(f"chart: {args.plot}")
    untimed = [lib for lib in selection.asked if lib not in _timed(doc)]
    for lib in untimed:
        progress.say(f"{lib}: none of its calls could be timed (the report says why)")
    return EXIT_MISSING if untimed else EXIT_OK


def _timed(doc: dict) -> set[str]:
    """The libraries of a bench report with at least one call timed."""
    timed = {name for pair in doc["pairs"] if pair["status"] == "measured"
             for name in (pair["producer"], pair["consumer"])}
    timed |= {row["library"] for row in doc["producers"] for key in ("dlpack", "dlpack_device", "import_by_dlpack")
              if (row.get(key) or {}).get("status") == "measured"}
    timed |= {row["library"] for kind in ("libraries", "from_numpy") for row in doc["copies"][kind]
              if row["status"] == "measured"}
    return timed


def main(argv=None, prog: str | None = None) -> int:
    """Run the command line; returns the exit status."""
    prog = prog or prog_name()
    args = _parse(_parser(prog), sys.argv[1:] if argv is None else argv)
    progress = Progress()
    # Run as the command line, this process is the run alone: what a library
    # writes to stdout at exit still goes to stderr, and every process the run
    # leaves is this one's to end (see dlpack_ref.harness.processes).
    whole = argv is None
    if whole:
        processes.become_subreaper()
    try:
        with processes.interruptible(), report_stdout(restore=not whole) as stdout:
            out = _Report(stdout)
            try:
                if args.command == "bench":
                    return _bench(args, progress, out)
                return _check(args, progress, out, prog)
            except Interrupted as e:
                progress.say(f"{prog} {args.command}: interrupted by {e.signal} before its report was "
                             f"written; every process it started was ended; exit status {e.exit_status}")
                return e.exit_status
            finally:
                out.flush()
    except OutputError as e:
        progress.say(f"error: {e}")
        return EXIT_USAGE
    finally:
        if whole:
            processes.end_children()


class _Report:
    """stdout for the report: a full disk or a reader gone (EPIPE) is an
    OutputError, one line and exit status 2, not a traceback."""

    def __init__(self, stream):
        self._stream = stream

    def _do(self, call, *args):
        try:
            return call(*args)
        except OSError as e:
            raise OutputError(f"stdout: {e.strerror or e} (the report is incomplete)") from None

    def write(self, text: str) -> int:
        return self._do(self._stream.write, text)

    def flush(self) -> None:
        self._do(self._stream.flush)
