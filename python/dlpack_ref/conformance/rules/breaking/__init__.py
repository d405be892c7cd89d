"""What the breakers share: the subjects made to break one rule each, which
each chapter declares beside its rule (``@breaks`` of :mod:`..table`), are
small classes on the bases here. :mod:`.surgery` alters a capsule through
the ctypes mirror of the ABI; :mod:`.producers` puts dlpack-ref's arrays
behind a class of a library's own (:class:`~.producers.Wrapped`);
:mod:`.consumers` runs dlpack-ref's ``from_dlpack`` in steps a subclass
breaks (:class:`~.consumers.Importer`); :mod:`.cuda` does the same for
CUDA arrays. They run only where a breaker is built: in the proofs of the
rules and in the factory hooks that name a breaker."""

from __future__ import annotations

__all__ = ["subject_of"]


def subject_of(side: str, cls: type):
    """dlpack-ref's own subject for ``side`` with the breaker ``cls`` in it:
    each array behind ``cls`` (a producer or CUDA producer), or ``cls()``
    as its ``from_dlpack`` (a consumer)."""
    if side == "producer":
        from .producers import wrapping
        return wrapping(cls)
    if side == "consumer":
        from .consumers import importing
        return importing(cls())
    from .cuda import cuda_wrapping
    return cuda_wrapping(cls)
