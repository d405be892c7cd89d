"""The processes of a ``check`` or ``bench`` run and the signals that stop
it, with libraries that behave as real ones sometimes do: a call that hangs
in a worker, a library that ignores SIGINT, helpers started at import (one
forked and detached), a forked helper holding the worker's pipe when the
worker crashes, writes to stdout at interpreter exit, a closed sys.stderr,
a project folder with a ``json.py``. Every command runs in a child process
with a timeout; real signals, real processes."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.harness

# A library checked through its hook: dlpack_ref's arrays, with {factory}
# run before each array is made and {at_import} run at import.
LIBRARY = '''
import os, signal, subprocess, sys, time
import dlpack_ref as dr
from dlpack_ref.conformance import Consumer, Producer

NOTES = {notes!r}

def note(name, pid=None):
    # written whole under another name, then renamed: a reader polling the
    # folder never finds the note empty
    hidden = os.path.join(NOTES, f".{{name}}.{{os.getpid()}}")
    with open(hidden, "w") as f:
        f.write(str(pid or os.getpid()))
    os.replace(hidden, os.path.join(NOTES, name))

def detached_helper(tag):
    """A daemon as daemon(3) makes one: fork, setsid, fork, stdio on /dev/null."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 4096)
            note(tag)
            time.sleep(1000)
        os._exit(0)
    os.waitpid(pid, 0)

def make(dtype, shape, readonly=False):
{factory}
    return dr.zeros(shape, dtype=dtype)

def __dlpack_conformance__():
    return (Producer({name!r}, make),
            Consumer({name!r}, dr.from_dlpack, tolist=lambda r: r.tolist(), data_ptr=lambda r: r.data_ptr,
                     readonly=lambda r: r.readonly, cpu_device="cpu"))

{at_import}
'''

HANGS = "    note('hanging')\n    time.sleep(1000)"
HELPERS = textwrap.dedent('''
    _helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    note(f"helper.{os.getpid()}", _helper.pid)
    detached_helper(f"detached.{os.getpid()}")
    ''')


def write_library(folder, name: str, factory: str = "    pass", at_import: str = "") -> None:
    notes = folder / "notes"
    notes.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(LIBRARY.format(notes=str(notes), name=name, factory=factory,
                                                      at_import=at_import))


def start(folder, argv: list[str], cwd=None, command=None) -> subprocess.Popen:
    """``python -m dlpack_ref ARGV`` (or ``command``) with ``folder`` on
    PYTHONPATH, in a session of its own (a signal the test sends reaches
    the command alone)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen((command or [sys.executable, "-m", "dlpack_ref"]) + argv, cwd=cwd or folder, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def noted(folder, prefix: str) -> list[int]:
    notes = folder / "notes"
    return [int((notes / n).read_text()) for n in sorted(os.listdir(notes)) if n.startswith(prefix)]


def wait_for_note(folder, name: str, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = noted(folder, name)
        if found and found[0]:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"nothing noted {name!r} within {timeout} s")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pids: list[int], within: float = 3.0) -> list[int]:
    """Those of ``pids`` still running after ``within`` seconds (a zombie
    waiting for init counts as gone)."""
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


@pytest.fixture
def cleanup(tmp_path):
    """Whatever a test started or noted is killed at its end, whatever it found."""
    started = []
    yield started
    # The noted processes first: a runner's workers lead sessions of their
    # own, outlive a kill of the command's group and hold its pipes.
    notes = tmp_path / "notes"
    for name in sorted(os.listdir(notes)) if notes.exists() else []:
        text = (notes / name).read_text()
        if text.isdigit() and int(text) > 0:   # a note a process is still writing is skipped
            with __import__("contextlib").suppress(ProcessLookupError, PermissionError):
                os.kill(int(text), signal.SIGKILL)
    for proc in started:
        with __import__("contextlib").suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


# --- signals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("signum, ignores_sigint, fmt", [
    (signal.SIGINT, False, "json"),
    (signal.SIGINT, True, "json"),
    (signal.SIGTERM, False, "table"),
], ids=["sigint", "sigint-ignored-by-the-library", "sigterm"])
def test_a_signal_to_the_command_alone_ends_a_hanging_check_at_once(tmp_path, cleanup, signum, ignores_sigint, fmt):
    at_import = "signal.signal(signal.SIGINT, signal.SIG_IGN)" if ignores_sigint else ""
    write_library(tmp_path, "hangs", HANGS, at_import)
    proc = start(tmp_path, ["check", "--library", "dlpack_ref", "--library", "hangs", "--rules", "producer.zero_dim",
                            "--format", fmt])
    cleanup.append(proc)
    worker = wait_for_note(tmp_path, "hanging")   # the call hangs in the worker now
    sent = time.monotonic()
    os.kill(proc.pid, signum)                      # the command alone, not its group
    out, err = proc.communicate(timeout=20)
    took = time.monotonic() - sent
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err[-3000:]
    assert took < 10, f"the run went on for {took:.1f} s after {name}"
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if "interrupted by" in line]
    assert f"interrupted by {name}: 1 of 2 libraries checked" in line and "partial" in line
    assert f"exit status {128 + signum}" in line
    if fmt == "json":
        report = json.loads(out)
        assert report["partial"].startswith(f"interrupted by {name}: 1 of 2 libraries checked")
        assert report["gate"]["exit_status"] == 128 + signum
        checked = {lib["name"]: lib["checked"] for lib in report["libraries"]}
        assert checked == {"dlpack_ref": True, "hangs": False}
    else:
        assert out.startswith(f"PARTIAL: interrupted by {name}: ")
        assert f"PARTIAL (exit status {128 + signum})" in out
    assert gone([worker]) == []


def test_sigint_during_the_exchange_matrix_keeps_the_libraries_checked_and_marks_the_report_partial(tmp_path, cleanup):
    # the rule passes; the matrix's exchanges hang, each pair in a worker thread
    in_exchange = "any(f.name == 'exchange' for f in __import__('traceback').extract_stack())"
    write_library(tmp_path, "hangs", f"    if {in_exchange}:\n        note(f'hanging.{{os.getpid()}}')\n"
                  "        time.sleep(1000)")
    proc = start(tmp_path, ["check", "--library", "dlpack_ref", "--library", "hangs", "--rules", "producer.zero_dim",
                            "--format", "json"])
    cleanup.append(proc)
    wait_for_note(tmp_path, "hanging.")
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["partial"].startswith("interrupted by SIGINT: 2 of 2 libraries checked")
    assert [lib["checked"] for lib in report["libraries"]] == [True, True]
    assert all(lib["results"][0]["status"] == "pass" for lib in report["libraries"])
    assert not any("crashed" in c for c in report["exchange"])  # an interrupted cell is no verdict
    assert gone(noted(tmp_path, "hanging.")) == []


def _start_two_hanging_groups(tmp_path, before: str = "") -> subprocess.Popen:
    """A Python caller of run_groups with two groups whose task hangs (each
    notes ``hanging.PID`` first), ``before`` run in it first; it prints
    "interrupted" on KeyboardInterrupt."""
    write_library(tmp_path, "hangs_in_a_task",
                  at_import="def hang(task, subjects):\n    note(f'hanging.{os.getpid()}')\n    time.sleep(1000)\n")
    script = textwrap.dedent(before) + textwrap.dedent('''
        from dlpack_ref.harness.runner import run_groups
        hang = {"function": "hangs_in_a_task:hang"}
        try:
            run_groups([[hang], [hang]], parallel=2)
        except KeyboardInterrupt:
            print("interrupted")
        ''')
    return start(tmp_path, ["-c", script], command=[sys.executable])


def test_ctrl_c_in_a_python_caller_ends_the_runner_s_parallel_workers_at_once(tmp_path, cleanup):
    proc = _start_two_hanging_groups(tmp_path)
    cleanup.append(proc)
    deadline = time.monotonic() + 60
    while len(noted(tmp_path, "hanging.")) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    workers = noted(tmp_path, "hanging.")
    assert len(workers) == 2
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)   # as Ctrl-C reaches a caller whose workers lead sessions of their own
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10, "the workers' tasks were waited for"
    assert out.strip() == "interrupted", err[-3000:]
    assert gone(workers) == []


def test_ctrl_c_handed_to_a_pool_thread_still_ends_the_run_at_once(tmp_path, cleanup):
    """The kernel hands a process's signal to any of its threads: here, as
    it sometimes does, to one of the runner's pool threads, whose signal
    interrupts no wait of the caller's thread."""
    proc = _start_two_hanging_groups(tmp_path, before=f'''
        import os, signal, threading, time
        notes = {str(tmp_path / "notes")!r}

        def to_a_pool_thread():
            while sum(n.startswith("hanging.") for n in os.listdir(notes)) < 2:
                time.sleep(0.02)
            pool_thread = next(t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor"))
            signal.pthread_kill(pool_thread.ident, signal.SIGINT)

        threading.Thread(target=to_a_pool_thread, daemon=True).start()
        ''')
    cleanup.append(proc)
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "interrupted", err[-3000:]
    assert gone(noted(tmp_path, "hanging.")) == []


def test_sigterm_ends_bench_with_a_report_marked_partial(tmp_path, cleanup):
    write_library(tmp_path, "hangs", HANGS)
    proc = start(tmp_path, ["bench", "--quick", "--library", "hangs", "--format", "json"])
    cleanup.append(proc)
    worker = wait_for_note(tmp_path, "hanging")
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["partial"].startswith("interrupted by SIGTERM: ")
    hangs = [p for p in report["pairs"] if "hangs" in (p["producer"], p["consumer"])]
    assert hangs and all(p["status"] == "not measured" for p in hangs)
    assert [line for line in err.splitlines() if "interrupted by SIGTERM" in line and "partial" in line]
    assert gone([worker]) == []


# --- processes -------------------------------------------------------------------------------

def test_the_helpers_a_library_starts_at_import_are_gone_when_check_exits(tmp_path, cleanup):
    write_library(tmp_path, "starts_helpers", at_import=HELPERS)
    proc = start(tmp_path, ["check", "--library", "starts_helpers", "--rules", "producer.zero_dim", "--no-matrix",
                            "--format", "json"])
    cleanup.append(proc)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    helpers, detached = noted(tmp_path, "helper."), noted(tmp_path, "detached.")
    assert helpers and detached
    assert gone(helpers + detached) == []


def test_a_worker_ends_the_helpers_of_its_library_when_it_ends(tmp_path, cleanup):
    """Through the runner alone (the API's path: no command line, no
    subreaper), each worker's helpers end with it, detached ones included."""
    write_library(tmp_path, "starts_helpers", at_import=HELPERS)
    script = ("from dlpack_ref.harness.runner import description_of\n"
              "d = description_of('starts_helpers')\n"
              "assert d.error is None, d.error\n"
              "import os; print(os.getpid())\n")
    proc = start(tmp_path, ["-c", script], command=[sys.executable])
    cleanup.append(proc)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    helpers, detached = noted(tmp_path, "helper."), noted(tmp_path, "detached.")
    assert len(helpers) == len(detached) == 1
    assert gone(helpers + detached, within=0.5) == []


def test_a_worker_that_crashes_is_judged_a_crash_while_a_forked_helper_holds_its_pipe(tmp_path, cleanup):
    at_import = textwrap.dedent('''
        if os.fork() == 0:   # a helper that inherits every file descriptor, the runner's pipe included
            note(f"forked.{os.getpid()}")
            time.sleep(1000)
        ''')
    write_library(tmp_path, "crashes", "    os.kill(os.getpid(), signal.SIGSEGV)", at_import)
    proc = start(tmp_path, ["check", "--library", "crashes", "--rules", "producer.zero_dim", "--no-matrix",
                            "--format", "json"])
    cleanup.append(proc)
    began = time.monotonic()
    out, err = proc.communicate(timeout=40)
    assert time.monotonic() - began < 20, "the crash was taken for a hang"
    [lib] = json.loads(out)["libraries"]
    [result] = lib["results"]
    assert result["status"] == "fail" and "killed by SIGSEGV" in result["detail"], result
    assert gone(noted(tmp_path, "forked.")) == []


# --- stdout is the report alone --------------------------------------------------------------

NOISY = textwrap.dedent('''
    import atexit, threading

    atexit.register(lambda: (print("printed by atexit"), os.write(1, b"fd 1 by atexit\\n")))

    class _Late:
        def __del__(self):
            os.write(1, b"fd 1 by __del__ at shutdown\\n")

    _late = _Late()

    def _chatter():
        while True:
            os.write(1, b"fd 1 by a daemon thread\\n")
            time.sleep(0.002)

    threading.Thread(target=_chatter, daemon=True).start()
    sys.stderr = open(os.devnull, "w")
    sys.stderr.close()
    ''')


def test_bench_stdout_holds_the_report_alone_whatever_a_library_writes_or_closes(tmp_path, cleanup):
    write_library(tmp_path, "noisy", at_import=NOISY + HELPERS)
    proc = start(tmp_path, ["bench", "--quick", "--library", "noisy", "--format", "json"])
    cleanup.append(proc)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out)            # nothing but the report on stdout
    assert {lib["name"] for lib in report["libraries"]} == {"dlpack_ref", "noisy"}
    assert report["partial"] is None
    assert "fd 1 by atexit" in err and "fd 1 by a daemon thread" in err
    # bench imports the library in its own process too: its helpers end with the command
    helpers, detached = noted(tmp_path, "helper."), noted(tmp_path, "detached.")
    assert len(helpers) >= 2 and len(detached) >= 2
    assert gone(helpers + detached) == []


# --- the working folder ----------------------------------------------------------------------

def test_check_from_a_project_folder_with_a_json_module_imports_as_the_command_does(tmp_path, cleanup):
    project = tmp_path / "project"
    project.mkdir()
    (project / "json.py").write_text("raise ImportError('the project json.py was imported')\n")
    (project / "subject.py").write_text("raise ImportError('the project subject.py was imported')\n")
    # The console script as pip writes it: its folder, not the working one, is first on sys.path.
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    script = bin_folder / "dlpack-ref"
    script.write_text("import sys\nfrom dlpack_ref.cli import main\nsys.exit(main())\n")
    proc = start(tmp_path, ["check", "--library", "dlpack_ref", "--rules", "producer.zero_dim", "--no-matrix",
                            "--format", "json"], cwd=project, command=[sys.executable, str(script)])
    cleanup.append(proc)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    [lib] = json.loads(out)["libraries"]
    assert lib["checked"] and lib["results"][0]["status"] == "pass"


# --- tasks ------------------------------------------------------------------------------------

def test_a_task_names_its_function_from_the_function_object():
    from dlpack_ref.harness import exchange, runner
    made = runner.task(exchange.exchange_task, producer="numpy", consumer="torch")
    assert made == {"function": "dlpack_ref.harness.exchange:exchange_task", "producer": "numpy", "consumer": "torch"}
    def nested(task, subjects):
        return {}

    for unnamed in (lambda task, subjects: {}, nested):   # a child cannot import these by name
        with pytest.raises(ValueError, match="module-level function"):
            runner.task(unnamed)


# --- one typed outcome crosses the pipe -------------------------------------------------------

def _killed_by_sigsegv(task, subjects):
    os.kill(os.getpid(), signal.SIGSEGV)


def _exits_3(task, subjects):
    os._exit(3)


def _hangs(task, subjects):
    time.sleep(60)


def _raises(task, subjects):
    raise KeyError("no such key")


def test_a_task_s_failure_crosses_the_pipe_typed_and_its_readers_take_the_fields_not_the_words():
    from dlpack_ref.conformance.model import result_from_outcome
    from dlpack_ref.conformance.rules import RULES
    from dlpack_ref.harness.exchange import cell_text
    from dlpack_ref.harness.outcome import Failure, failure_json, failure_of
    from dlpack_ref.harness.runner import Worker, task

    with Worker(None, subject=object(), timeout=2) as worker:
        outcomes = [worker.ask(task(f)) for f in (_killed_by_sigsegv, _exits_3, _hangs, _raises)]
    assert [failure_of(o) for o in outcomes] == [
        Failure("crashed", "killed by SIGSEGV", signal=signal.SIGSEGV),
        Failure("crashed", "exited with status 3", exit_status=3),
        Failure("hung", "hung for more than 2 s (killed)"),
        Failure("error", "KeyError: 'no such key'", exception_type="KeyError")]
    assert [failure_of(failure_json(failure_of(o))) for o in outcomes] == [failure_of(o) for o in outcomes]
    assert [cell_text(o) for o in outcomes] == ["CRASH (SIGSEGV)", "CRASH", "HANG", "error"]
    # the signal is read from its field: words of any other shape do not hide it
    reworded = {**outcomes[0], "crashed": "ended by the kernel"}
    assert cell_text(reworded) == "CRASH (SIGSEGV)"
    result = result_from_outcome(reworded, RULES["consumer.shape_null"].rule, "lib")
    assert (result.crash, result.detail) == ("SIGSEGV", "the consumer crashed the process (ended by the kernel)")
    assert result_from_outcome(outcomes[2], RULES["consumer.shape_null"].rule, "lib").crash is None
