"""What a worker process does for each kind of task (see _worker)."""

from __future__ import annotations


def run(task: dict) -> dict:
    kind = task["kind"]
    if kind == "case":
        from .consumer import resolve, run_case
        return run_case(resolve(task["consumer"]), task["case"])
    if kind == "producer":
        from .adapters import library
        from .producer import run_producer_check
        return run_producer_check(library(task["library"]).producer, task["check"]).to_dict()
    if kind == "pair":
        from .exchange import exchange_pair
        return exchange_pair(task["producer"], task["consumer"])
    raise ValueError(f"unknown task kind {kind!r}")
