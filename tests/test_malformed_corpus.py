"""One corpus, one verdict: every capsule of tests/support/malformed.py is
accepted or refused alike by from_dlpack, by an extension built on the
vendorable Cython API (dlpack_ref_api.pxd, whose checks the core calls), and
by the conformance checker's independent reader. The only difference allowed
is dlpack-ref's own device policy: from_dlpack also refuses device types it
holds no memory of (DLPack 1.3 types such as OpenCL), which the universal
checks accept."""

import gc

import pytest

from dlpack_ref import from_dlpack
from dlpack_ref._devices import SUPPORTED
from dlpack_ref.testing import capsule_name, verdict
from support.build_ext import build_api_demo
from support.malformed import MALFORMED, POLICY_ONLY, VALID

CASES = [
    pytest.param(kwargs, versioned, not bad, case in POLICY_ONLY, id=f"{case}-{'v' if versioned else 'legacy'}")
    for bad, corpus in ((True, [(c, k, legacy) for c, k, _, legacy in MALFORMED]), (False, VALID))
    for case, kwargs, legacy in corpus
    for versioned in ((True, False) if legacy else (True,))
]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    return build_api_demo(tmp_path_factory.mktemp("corpus_api"))


def _verdict(consume, capsule) -> bool:
    """True when `consume` accepts the capsule, False on BufferError (any
    other exception fails the test); either way the capsule is consumed."""
    try:
        result = consume(capsule)
    except BufferError:
        return False
    del result
    return True


@pytest.mark.parametrize("kwargs, versioned, valid, policy_only", CASES)
def test_same_verdict_everywhere(factory, api, kwargs, versioned, valid, policy_only):
    consumers = {"from_dlpack": from_dlpack, "vendorable API": api.take}
    verdicts = {}
    for name, consume in consumers.items():
        cap = factory.make(versioned=versioned, **kwargs)
        if name == "from_dlpack":
            # The checker's reader reads without consuming: asked first.
            verdicts["reader, universal"] = verdict(cap, devices=None) is None
            verdicts["reader, dlpack-ref policy"] = verdict(cap) is None
        verdicts[name] = _verdict(consume, cap)
        assert capsule_name(cap).startswith(b"used_"), f"{name} did not take ownership"
        del cap
    gc.collect()
    assert factory.live == 0, "every tensor's deleter ran exactly once"
    assert factory.deleter_calls == len(consumers)
    device_type = kwargs.get("device", (1, 0))[0]
    universal = valid or policy_only
    assert verdicts["vendorable API"] is verdicts["reader, universal"] is universal, verdicts
    assert verdicts["from_dlpack"] is verdicts["reader, dlpack-ref policy"] is (
        universal and device_type in SUPPORTED), verdicts
