"""mpi4py: a consumer only. ``MPI.buffer(x)`` imports x's DLPack export as a
byte buffer, as every message call does: no shape, no dtype, so its results
are compared as bytes; it has no copy or device keywords."""

from __future__ import annotations

from ..subject import Consumer
from ._common import Known

KNOWN = Known("mpi4py", module="mpi4py.MPI", distribution="mpi4py", order=13,
              lane="ecosystem", requirements=("mpich", "mpi4py"))


def consumer():
    from mpi4py import MPI

    return Consumer("mpi4py", MPI.buffer, tolist=lambda b: b.tobytes(), data_ptr=lambda b: b.address,
                    readonly=lambda b: b.readonly, spec="mpi4py", shapeless=True)
