"""What ``check`` and ``bench`` do with the files and arguments a user
gives them: report paths checked before any work (exit 2, one line, no
traceback), written whole or not at all, a full disk or a reader gone at
the end the same one line; allow files as editors save them, with unknown,
repeated and stale allowances named; every argument validated before a
library is touched, with the subcommand's usage and close matches."""

import json
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from dlpack_ref.harness import output
from dlpack_ref.harness.output import EXIT_FAILED, EXIT_MISSING, EXIT_OK, EXIT_USAGE
from support import command

pytestmark = pytest.mark.harness

BROKEN = "support.broken_consumer:from_dlpack"
BROKEN_RULES = ["consumer.copy_true", "consumer.shape_null"]
# One rule that passes and the two the broken consumer fails: a run of seconds.
FEW = ["--no-matrix", "--rules", "producer.zero_dim", "--rules", "consumer.copy_true", "--rules",
       "consumer.shape_null"]
QUICK_CHECK = ["check", "--library", "dlpack_ref", "--no-matrix", "--rules", "producer.zero_dim"]


@pytest.fixture(scope="module", autouse=True)
def _support_importable():
    with command.support_importable():
        yield


def _one_error_line(err: str, *words: str) -> str:
    """The one 'error:' line of stderr, holding ``words``; no traceback."""
    assert "Traceback" not in err, err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    for word in words:
        assert word in line, line
    return line


def _nothing_ran(err: str) -> None:
    assert "checks" not in err and "done," not in err, err


# --- output files -----------------------------------------------------------------------------

@pytest.mark.parametrize("path, why", [
    ("", "an empty path"),
    ("/proc/version", "/proc or /sys"),
    ("/sys/kernel/dlpack-report.json", "/proc or /sys"),
    ("/no/such/folder/report.json", "does not exist"),
])
def test_an_output_path_that_cannot_take_a_report_is_refused_before_any_work(path, why):
    for argv in (QUICK_CHECK, ["bench", "--library", "dlpack_ref", "--quick"]):
        rc, out, err = command.run([*argv, "--json", path], timeout=120)
        assert rc == EXIT_USAGE, err
        _one_error_line(err, "--json", why)
        _nothing_ran(err)
        assert out == ""


def _read_only_folder(tmp_path):
    """A folder this process cannot write: read-only mode, or for root
    (whom modes do not stop) a read-only bind mount in a mount namespace."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "report.json").write_text("the old report\n")
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return folder, []
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare: no read-only folder to be had")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not allowed here: {probe.stderr.decode().strip()}")
    return folder, ["unshare", "-m", "sh", "-c",
                    f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"', "sh"]


def test_a_read_only_folder_is_refused_before_any_work(tmp_path):
    folder, wrap = _read_only_folder(tmp_path)
    for name in ("report.json", "new.json"):
        done = subprocess.run([*wrap, sys.executable, "-m", "dlpack_ref", *QUICK_CHECK, "--json",
                               str(folder / name)], capture_output=True, text=True, timeout=120)
        assert done.returncode == EXIT_USAGE, done.stderr
        _one_error_line(done.stderr, str(folder / name), "cannot be written")
        _nothing_ran(done.stderr)
    assert (folder / "report.json").read_text() == "the old report\n"


def test_a_full_disk_at_the_end_is_one_line_and_exit_2():
    for argv in (QUICK_CHECK, ["bench", "--library", "dlpack_ref", "--quick"]):
        rc, out, err = command.run([*argv, "--json", "/dev/full"], timeout=300)
        assert rc == EXIT_USAGE, err
        _one_error_line(err, "--json /dev/full", "No space left on device")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "dlpack_ref", *QUICK_CHECK], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert done.returncode == EXIT_USAGE
    _one_error_line(done.stderr, "stdout", "No space left on device")


def test_a_reader_gone_from_stdout_is_one_line_and_exit_2():
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "dlpack_ref", *QUICK_CHECK], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == EXIT_USAGE
    _one_error_line(done.stderr, "stdout", "Broken pipe")


def test_a_fifo_gets_the_report_when_read_and_never_blocks_when_not(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    rc, out, err = command.run([*QUICK_CHECK, "--format", "json", "--json", str(fifo)], timeout=120)
    reader.join(30)
    assert rc == EXIT_OK, err
    assert json.loads(got[0])["libraries"][0]["name"] == "dlpack_ref"
    # nobody reads: the command gives up after FIFO_WAIT_S, it never hangs
    rc, out, err = command.run([*QUICK_CHECK, "--json", str(fifo)], timeout=output.FIFO_WAIT_S + 60)
    assert rc == EXIT_USAGE
    _one_error_line(err, str(fifo), "nobody read the FIFO")


def test_a_report_file_is_replaced_whole_or_left_as_it_was(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("the old report\n")
    target.chmod(0o640)

    def half_then_fail(path):
        with open(path, "w") as f:
            f.write("half a rep")
        raise OSError(28, "No space left on device")

    with pytest.raises(output.OutputError, match=r"^--json .*report\.json: No space left on device"):
        output.write_report("--json", str(target), draw=half_then_fail)
    assert target.read_text() == "the old report\n"
    output.write_report("--json", str(target), "the new report\n")
    assert target.read_text() == "the new report\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640   # the file keeps its mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]   # no temporary file left


# --- allow files ------------------------------------------------------------------------------

def _check_with_allow_file(tmp_path, text: bytes, *extra):
    allow = tmp_path / "allow.txt"
    allow.write_bytes(text)
    return command.run(["check", "--library", "dlpack_ref", "--library", BROKEN, *FEW, "--allow-file", str(allow),
                        *extra], timeout=300)


def test_an_allow_file_saved_with_a_bom_and_crlf_allows_its_first_line(tmp_path):
    text = "".join(f"{BROKEN} {rule} known\r\n" for rule in BROKEN_RULES)
    rc, out, err = _check_with_allow_file(tmp_path, b"\xef\xbb\xbf" + text.encode())
    assert rc == EXIT_OK, out
    assert "2 of the failures allowed" in out


def test_unknown_and_repeated_allowances_are_named_and_strict_allow_refuses_unknown_ones(tmp_path):
    text = (f"{BROKEN} consumer.copy_ture typo\n"
            f"{BROKEN} consumer.copy_true known\n"
            f"{BROKEN} consumer.shape_null known\n"
            f"{BROKEN} consumer.copy_true said twice\n").encode()
    rc, out, err = _check_with_allow_file(tmp_path, text)
    assert rc == EXIT_OK, err
    assert "warning: " in err and "allow.txt:1: 'consumer.copy_ture' is no rule id" in err
    assert "did you mean consumer.copy_true?" in err
    assert "allow.txt:4: " in err and "repeats " in err and "allow.txt:2" in err
    rc, out, err = _check_with_allow_file(tmp_path, text, "--strict-allow")
    assert rc == EXIT_USAGE
    _one_error_line(err, "allow.txt:1", "consumer.copy_ture")
    _nothing_ran(err)


def test_an_allowance_for_a_rule_that_now_passes_is_reported_stale(tmp_path):
    text = "".join(f"{BROKEN} {rule} known\n" for rule in BROKEN_RULES) + "dlpack_ref producer.zero_dim was broken\n"
    allow = tmp_path / "allow.txt"
    allow.write_text(text)
    base = ["check", "--library", "dlpack_ref", "--library", BROKEN, *FEW, "--allow-file", str(allow)]
    rc, out, err = command.run(base, timeout=300)
    assert rc == EXIT_OK
    stale = out.split("Stale allowances")[1].split("\n\n")[0]
    assert "dlpack_ref producer.zero_dim" in stale and "allow.txt:3" in stale
    assert "consumer.copy_true" not in stale
    rc, out, err = command.run([*base, "--format", "json"], timeout=300)
    assert json.loads(out)["gate"]["stale_allowances"] == [
        {"library": "dlpack_ref", "rule": "producer.zero_dim", "reason": "was broken", "where": f"{allow}:3"}]


def test_a_long_reason_is_cut_in_the_table_and_kept_whole_in_json(tmp_path):
    reason = "tracked upstream " + "x" * 300
    text = f"{BROKEN} consumer.copy_true {reason}\n{BROKEN} consumer.shape_null known\n".encode()
    rc, out, err = _check_with_allow_file(tmp_path, text)
    assert rc == EXIT_OK
    [line] = [line for line in out.splitlines() if "tracked upstream" in line]
    assert len(line) <= 200 and line.endswith("...")
    rc, out, err = _check_with_allow_file(tmp_path, text, "--format", "json")
    [result] = [r for lib in json.loads(out)["libraries"] for r in lib["results"] if r["check"] == "consumer.copy_true"
                and r["allowed"]]
    assert result["allowed"] == reason


# --- arguments --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, usage, hint", [
    (["check", "--libary", "numpy"], "usage: python -m dlpack_ref check", "did you mean --library?"),
    (["bench", "--quik"], "usage: python -m dlpack_ref bench", "did you mean --quick?"),
])
def test_an_option_typo_prints_the_subcommands_usage_and_the_closest_option(argv, usage, hint):
    rc, out, err = command.run(argv, timeout=60)
    assert rc == EXIT_USAGE
    assert err.startswith(usage) and hint in err and out == ""


@pytest.mark.parametrize("argv, words", [
    (["check", "--fail-on", "nosuchlib", "--library", "dlpack_ref"], ["--fail-on nosuchlib", "not a library of this run"]),
    (["check", "--fail-on", "dlpack_rf", "--library", "dlpack_ref"], ["did you mean dlpack_ref?"]),
    (["check", "--library", "numpy:"], ["--library 'numpy:'", "nothing after ':'"]),
    (["bench", "--library", "numpy:"], ["--library 'numpy:'", "nothing after ':'"]),
    (["check", "--library", "dlpack_ref", "--rules", "producer.zero_dm"], ["did you mean producer.zero_dim?"]),
    (["check", "--library", "dlpack_ref", "--explain", "producer.zero_dm"], ["did you mean producer.zero_dim?"]),
])
def test_every_argument_is_checked_before_any_library_is(argv, words):
    rc, out, err = command.run(argv, timeout=60)
    assert rc == EXIT_USAGE, err
    _one_error_line(err, *words)
    assert "checking" not in err and "bench:" not in err   # no library was asked anything
    assert out == ""


def test_a_library_name_typo_gets_the_closest_known_name():
    rc, out, err = command.run(["check", "--library", "nupmy", "--no-matrix"], timeout=120)
    assert rc == EXIT_MISSING
    assert "nupmy: not checked: cannot be imported: ModuleNotFoundError" in out and "did you mean numpy?" in out
    rc, out, err = command.run(["bench", "--library", "nupmy", "--quick"], timeout=120)
    assert rc == EXIT_MISSING and "did you mean numpy?" in err


@pytest.mark.parametrize("argv, first", [
    (["bench", "--library", "no_such_lib_xyz", "--quick"], "bench: 2 libraries (dlpack_ref, no_such_lib_xyz)"),
    (["check", "--library", "no_such_lib_xyz", "--no-matrix"], "checking 1 library: no_such_lib_xyz"),
])
def test_progress_starts_before_any_library_is_asked_anything(argv, first):
    # The first line comes before the first child process, whose import of
    # a library may take seconds: a user sees the run start at once.
    rc, out, err = command.run(argv, timeout=120)
    assert rc == EXIT_MISSING
    assert err.splitlines()[0].startswith(first), err


# --- a hook's name ----------------------------------------------------------------------------

HOOK = '''
import dlpack_ref
from dlpack_ref.conformance import Consumer, Producer


def __dlpack_conformance__():
    return (Producer("Named-Library", lambda dtype, shape, readonly=False: dlpack_ref.zeros(shape, dtype=dtype)),
            Consumer("Named-Library", dlpack_ref.from_dlpack))
'''


def test_a_hooks_name_is_the_librarys_name_in_every_report(tmp_path):
    (tmp_path / "named_hook.py").write_text(HOOK)
    with command.support_importable(str(tmp_path)):
        argv = ["check", "--library", "named_hook", "--no-matrix", "--rules", "producer.zero_dim"]
        rc, table, _ = command.run(argv, timeout=120)
        rc_json, out, _ = command.run([*argv, "--format", "json"], timeout=120)
    assert rc == rc_json == EXIT_OK
    assert "Named-Library (named_hook) " in table
    [lib] = json.loads(out)["libraries"]
    assert (lib["name"], lib["spec"]) == ("Named-Library", "named_hook")
    assert {r["subject"] for r in lib["results"]} == {"Named-Library"}


def test_an_allow_line_may_name_a_library_by_its_hooks_name(tmp_path):
    (tmp_path / "named_hook.py").write_text(HOOK)
    allow = tmp_path / "allow.txt"
    allow.write_text("Named-Library producer.zero_dim was broken\n")
    with command.support_importable(str(tmp_path)):
        rc, out, err = command.run(["check", "--library", "named_hook", "--no-matrix", "--rules",
                                    "producer.zero_dim", "--allow-file", str(allow)], timeout=120)
    assert rc == EXIT_OK and "Stale allowances" in out and "producer.zero_dim" in out.split("Stale allowances")[1]
    assert "is no rule id" not in err
