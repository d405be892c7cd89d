"""Threads released together, for the tests that race the core."""

import threading

N_THREADS = 8


def run_threads(work, n_threads: int = N_THREADS) -> None:
    """work(k) for k in range(n_threads), each on its own thread, all released
    by one barrier; the first exception any of them raised is raised here.
    A failing thread aborts the barrier, so the others never wait for it."""
    barrier = threading.Barrier(n_threads)
    errors = []

    def body(k):
        try:
            barrier.wait()
            work(k)
        except BaseException as exc:  # re-raised below, once every thread is done
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
