"""Fixtures shared by the test files (kept small: helpers belong to their tests)."""

import pytest

from dlpack_ref.testing import CapsuleFactory


@pytest.fixture
def factory():
    """A fresh CapsuleFactory, so each test counts only its own deleter calls."""
    return CapsuleFactory()
