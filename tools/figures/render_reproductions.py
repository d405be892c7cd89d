"""The figure of benchmarks/reproduction_sizes.py:
benchmarks/results/reproduction_sizes.json."""

from __future__ import annotations

from figures.checkout import NoData

_SIDES = (("producer", "producer"), ("consumer", "consumer"), ("cuda", "CUDA"))


def reproduction_sizes(sources, args) -> str:
    """``a producer rule's 10 to 20 lines (median 15), a consumer rule's
    ... and a CUDA rule's ...``, as a sentence of the page goes on."""
    sides = sources[0].need().get("sides")
    if not sides or any(side not in sides for side, _ in _SIDES):
        raise NoData(f"`{sources[0].path}` has no sizes by side")
    parts = [f"a {name} rule's {sides[side]['min']} to {sides[side]['max']} lines "
             f"(median {sides[side]['median']:g})" for side, name in _SIDES]
    return f"{parts[0]}, {parts[1]} and {parts[2]}"
