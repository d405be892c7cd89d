"""Charts, drawn by the run whose numbers they show or not at all: the
exchange heatmap of ``dlpack-ref bench --plot``, and the one helper every
chart-drawing script uses to get pyplot (matplotlib is the ``bench``
extra)."""

from __future__ import annotations

import math
import os

#: The file types ``--plot`` writes, by suffix.
FORMATS = (".png", ".svg")


def pyplot_or_remove(path: str):
    """matplotlib's pyplot on the Agg backend, or None when matplotlib is
    not installed; then the chart at ``path``, an earlier run's, is
    removed, so that no chart shows other numbers than its run's.

    Parameters
    ----------
    path : str
        Where the chart is to be written.

    Returns
    -------
    module or None
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if os.path.exists(path):
            os.remove(path)
        return None
    return plt


def heatmap(doc: dict, path: str) -> None:
    """Draw the latency matrix of a run (rows: producer, columns: consumer;
    colour: log of the median ns; a cell's text: the median, "copy" when the
    result is not the producer's memory) to ``path`` (.png or .svg).

    Raises
    ------
    ImportError
        When matplotlib is not installed (a chart at ``path`` is removed).
    """
    plt = pyplot_or_remove(path)
    if plt is None:
        raise ImportError("the chart needs matplotlib: pip install 'dlpack-ref[bench]'")
    producers = [lib["name"] for lib in doc["libraries"] if lib["producer"]]
    consumers = [lib["name"] for lib in doc["libraries"] if lib["consumer"]]
    by_pair = {(p["producer"], p["consumer"]): p for p in doc["pairs"]}
    grid = [[math.nan] * len(consumers) for _ in producers]
    for i, p in enumerate(producers):
        for j, c in enumerate(consumers):
            pair = by_pair.get((p, c))
            if pair is not None and pair["status"] == "measured":
                grid[i][j] = math.log10(pair["ns_median"])
    fig, ax = plt.subplots(figsize=(1.3 * len(consumers) + 3, 0.7 * len(producers) + 2.2))
    image = ax.imshow(grid, cmap="viridis_r", aspect="auto")
    ax.set_xticks(range(len(consumers)), consumers, rotation=30, ha="right")
    ax.set_yticks(range(len(producers)), producers)
    ax.set_xlabel("consumer (from_dlpack)")
    ax.set_ylabel("producer")
    finite = sorted(v for row in grid for v in row if not math.isnan(v))
    middle = finite[len(finite) // 2] if finite else 0.0
    for i, p in enumerate(producers):
        for j, c in enumerate(consumers):
            pair = by_pair.get((p, c))
            if pair is None:
                text = "-"
            elif pair["status"] != "measured":
                text = "CRASH" if pair["status"] == "crashed" else pair["status"]
            else:
                text = f"{pair['ns_median']:.0f}" + ("" if pair["zero_copy"] is not False else "\ncopy")
            dark = not math.isnan(grid[i][j]) and grid[i][j] > middle
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    fig.colorbar(image, ax=ax, label="log10(ns per call, median)")
    m, s = doc["machine"], doc["settings"]
    shape = "x".join(map(str, s["array"]["shape"]))
    ax.set_title(f"from_dlpack latency, {shape}-element {s['array']['dtype']}, ns (median of {s['rounds']} "
                 f"rounds)\n{m['cpu']}, {m['cores']} cores, load {m['load_average']['start'][0]:.1f}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
