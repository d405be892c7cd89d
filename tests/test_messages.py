"""The words a user reads, written for someone who never saw an older
version: no placeholder where a value is missing, devices and ties in
plain words, no name that is not part of the public API, and no help text
that describes how things used to be."""

import re
from pathlib import Path

import pytest

import dlpack_ref
import dlpack_ref.conformance
import dlpack_ref.cuda
from dlpack_ref.bench.report import standing_lines
from dlpack_ref.conformance.rules import consumer_judges as judges
from support import command

pytestmark = pytest.mark.harness

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("module", [dlpack_ref, dlpack_ref.cuda, dlpack_ref.conformance])
def test_the_future_import_is_no_public_name(module):
    assert "annotations" not in dir(module)


def test_a_second_import_that_never_happened_is_not_said_to_be_refused():
    # The producer kept no capsule, so there was nothing to import twice.
    out = {"outcome": "ok", "second": {"outcome": "none"}}
    verdict, notes = judges.refuses_second_import(out, [], None)
    assert notes == ["no second import: the producer kept no capsule to hand over again"]
    out = {"outcome": "ok", "second": {"outcome": "raised", "exc": ["BufferError", "used"]}}
    assert judges.refuses_second_import(out, [], None)[1] == ["second import refused with BufferError"]


def test_a_device_reads_in_the_headers_words_not_as_a_list():
    problems = []
    judges.refuses({"outcome": "ok", "type": "Array", "device": [1, 0]}, problems, None)
    assert problems == ["accepted (result Array on device_type 1, device_id 0)"]
    assert judges.refuses_device({"outcome": "ok", "device": [2, 1]}, [], None)[1] == [
        "kept as a device array on device_type 2, device_id 1, not read"]


def _standing(ratio):
    doc = {"dlpack_ref": {"as_consumer": [{"producer": "numpy", "ratio": ratio, "dlpack_ref_ns_median": 100.0,
                                           "best_other": "numpy", "best_other_ns_median": 100.0 / ratio}],
                          "as_producer": []}}
    [line] = standing_lines(doc)
    return line


def test_a_tie_reads_as_a_tie_whichever_side_of_one_it_falls():
    assert _standing(1.004).endswith("1.00x (tied with the fastest)")
    assert _standing(0.996).endswith("1.00x (tied with the fastest)")
    assert _standing(0.5).endswith("0.50x (fastest)")
    assert _standing(1.2).endswith("1.20x (slower)")


def test_help_and_docs_describe_what_is_not_what_was():
    rc, out, _ = command.run(["check", "--help"], timeout=60)
    pages = out + (DOCS / "conformance.md").read_text() + (DOCS / "ci_yardstick.md").read_text()
    for phrase in ("Before the gate", "gives that behaviour back", "the old exit status", "used to", "no longer"):
        assert phrase not in pages, phrase


def test_asarray_names_the_type_it_cannot_read_with_the_right_article():
    with pytest.raises(TypeError, match=r"^asarray cannot read an object of type object: "):
        dlpack_ref.asarray(object())
