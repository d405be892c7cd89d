"""The consumer rules' judges: each case's outcome (a dict of
:mod:`.consumer_cases`) against what its rule asks. A judge takes the
outcome, the problems found so far (the deleter count) and the values
expected, and returns a status (None: pass unless there are problems) and
notes."""

from __future__ import annotations

#: The data pointer of a case's device memory, which nothing may read.
BOGUS_DEVICE_POINTER = 0xDEAD0000


def refused(out) -> bool:
    return out.get("outcome") != "ok"


def is_buffererror(out) -> bool:
    return "BufferError" in out.get("exc_mro", [])


def values_problems(out, problems, want) -> None:
    """Wrong values are a problem; values that cannot be read are the
    checker's blindness, which :func:`~.consumer_cases.judged` answers (not supported)."""
    if want is not None and "values" in out and out["values"] != want:
        problems.append(f"values {out['values']!r}, expected {want!r}")


def accepts(out, problems, want):
    if refused(out):
        return "fail", ["refused"]
    values_problems(out, problems, want)
    notes = ["accepted" if problems or "values" not in out else "accepted with the right values"]
    if out.get("deleters_during"):
        notes.append("data copied and released at once")
    return None, notes


def cannot_share(out) -> bool:
    """A refusal of copy=False with the standard's errors for a copy that
    would be needed: ValueError (from_dlpack) or BufferError (__dlpack__)."""
    mro = out.get("exc_mro", [])
    return refused(out) and ("ValueError" in mro or "BufferError" in mro)


def accepts_in_place(out, problems, want):
    if refused(out):
        if out.get("call_kwargs") == {"copy": False} and cannot_share(out):
            return "not supported", [f"copy=False refused with {out['exc'][0]}: the consumer cannot "
                                     "import this memory in place, and says so as the standard asks"]
        return "fail", ["refused"]
    values_problems(out, problems, want)
    if "ptr" not in out:
        return "not supported", [f"the result's data pointer cannot be read ({out.get('ptr_error')}), so "
                                 "whether it is in place cannot be told"]
    if out["ptr"] != out.get("source_ptr"):
        no_copy = out.get("copy_false")
        if no_copy is not None and cannot_share(no_copy):
            why = (f"copied: the consumer cannot import this memory in place (copy=False refused with "
                   f"{no_copy['exc'][0]}: {no_copy['exc'][1]})")
            return ("fail" if problems else "not supported"), [why]
        problems.append(f"copied (pointer {out['ptr']} != source {out.get('source_ptr')})")
        return None, []
    if out.get("deleters_during"):
        problems.append("deleter ran while the result still used the data")
    return None, ["in place"]


def copies(out, problems, want):
    if refused(out):
        if is_buffererror(out):
            return "not supported", ["copy=True refused with BufferError"]
        return "fail", ["refused"]
    values_problems(out, problems, want)
    if "ptr" not in out:
        return "not supported", [f"the result's data pointer cannot be read ({out.get('ptr_error')}), so "
                                 "whether it is a copy cannot be told"]
    if out["ptr"] == out.get("source_ptr"):
        problems.append("copy=True imported in place (same pointer)")
        return None, []
    calls = out.get("calls") or [{}]
    return None, [f"copied; last __dlpack__ call {calls[-1]}"]


def asks_max_version(out, problems, want):
    # the first call is the point, whatever the consumer did with its answer
    first = (out.get("calls") or [{}])[0]
    if not first.get("max_version") or first["max_version"][0] < 1:
        problems.append(f"first __dlpack__ call had {first}, no max_version >= (1, 0)")
        return None, []
    return None, [f"__dlpack__ called with {first}"]


def falls_back_to_legacy(out, problems, want):
    if refused(out):
        return "fail", ["refused"]
    values_problems(out, problems, want)
    calls = out.get("calls", [])
    if not calls or "max_version" in calls[-1]:
        problems.append("no call without max_version after the TypeError")
    return None, [f"__dlpack__ calls {calls}"]


def renames(out, problems, want):
    if refused(out):
        return "fail", ["refused"]
    expected = "used_" + (out.get("name_before") or "?")
    if out.get("name_after") != expected:
        problems.append(f"capsule named {out.get('name_after')!r} after import, expected {expected!r}")
        return None, []
    return None, [f"renamed {expected!r}"]


def refuses_second_import(out, problems, want):
    second = out.get("second", {})
    if refused(out):
        problems.append("the first import failed")
    if second.get("outcome") == "ok":
        problems.append("the same capsule was imported twice")
        return None, []
    if "exc" in second:
        return None, [f"second import refused with {second['exc'][0]}"]
    return None, ["no second import: the producer kept no capsule to hand over again"
                  if second.get("outcome") == "none" else f"second import: {second.get('outcome')}"]


def keeps_read_only(out, problems, want):
    if refused(out):
        if is_buffererror(out):
            return None, ["refused with BufferError"]
        return "fail", ["refused"]
    values_problems(out, problems, want)
    ro = out.get("readonly")
    if ro is None:
        return "not supported", ["cannot tell whether the result is read-only"]
    if ro is False:
        problems.append("imported READ_ONLY data as a writable array")
        return None, []
    return None, ["read-only array"]


def accepts_or_refuses(out, problems, want):
    if refused(out):
        return None, [f"refused with {out['exc'][0]}"]
    values_problems(out, problems, want)
    return None, ["accepted"]


def device_text(device) -> str:
    """A device read back from an export (``[1, 0]``) in the header's words."""
    if not isinstance(device, (list, tuple)) or len(device) != 2:
        return "an unknown device"
    return f"device_type {device[0]}, device_id {device[1]}"


def refuses(out, problems, want):
    if not refused(out):
        problems.append(f"accepted (result {out.get('type')} on {device_text(out.get('device'))})")
        return None, []
    return None, [f"refused with {out['exc'][0]}"]


def refuses_with_buffererror(out, problems, want):
    if refused(out) and not is_buffererror(out):
        problems.append(f"refused with {out['exc'][0]}, not BufferError")
        return None, []
    return refuses(out, problems, want)


def refuses_copy(out, problems, want):
    """copy=False and a tensor flagged IS_COPIED: the standard's two errors
    for a forbidden copy (BufferError from __dlpack__, ValueError from
    from_dlpack) are both right."""
    if not refused(out):
        problems.append(f"accepted a tensor flagged IS_COPIED for copy=False (result {out.get('type')})")
        return None, []
    mro = out.get("exc_mro", [])
    if "BufferError" not in mro and "ValueError" not in mro:
        problems.append(f"refused with {out['exc'][0]}, not BufferError or ValueError")
        return None, []
    return None, [f"refused with {out['exc'][0]}"]


def kept_unread(out) -> bool:
    """The result holds the device memory's own address and refuses to be
    read with BufferError: a consumer that hands device memory on (to a
    device-aware library, as a message buffer) without reading it."""
    return (out.get("ptr") == BOGUS_DEVICE_POINTER and "values" not in out
            and str(out.get("values_error", "")).startswith("BufferError"))


def refuses_device(out, problems, want):
    if not refused(out) and out.get("device") and out["device"][0] != 1:
        return None, [f"kept as a device array on {device_text(out['device'])}, not read"]
    if not refused(out) and kept_unread(out):
        return None, ["kept as device memory at its own address, never read (reading the result raises "
                      f"{out['values_error'].split(':')[0]})"]
    return refuses_with_buffererror(out, problems, want)
