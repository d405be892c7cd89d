"""Charts, drawn by the run whose numbers they show or not at all: the
exchange heatmap of ``dlpack-ref bench --plot``, the one helper every
chart-drawing script uses to get pyplot (matplotlib is the ``bench``
extra), and what makes a chart legible on the documentation page: its
size (PAGE_WIDTH at DPI), times in plain units (``format_ns``,
``ns_axis``), and numbers only where they fit (``fit_texts``)."""

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


#: Charts are drawn for the documentation site's content column (about
#: 1000 CSS px wide at a 1280 px window; tools/check_docs_render.py fails a
#: page whose image is shown below 60 % of its natural width): PAGE_WIDTH
#: inches at DPI make a 960 px image, shown at its natural size, so that a
#: FONT-point label (15 px) is as large on the page as body text.
PAGE_WIDTH = 9.6
DPI = 100
FONT = 11
#: The smallest font a cell's number is shrunk to before it is left out.
MIN_CELL_FONT = 8


def format_ns(ns: float) -> str:
    """A time in nanoseconds as a person reads it: "72 ns", "1.13 µs",
    "19.3 µs", "2 ms" (three significant digits from 1 µs on).

    Parameters
    ----------
    ns : float

    Returns
    -------
    str
    """
    if ns < 999.5:
        return f"{ns:.0f} ns"
    value = float(f"{ns:.3g}")  # rounded first: 999.7 µs is "1 ms", not "1e+03 µs"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    raise AssertionError("unreachable")


def ns_axis(axis) -> None:
    """Ticks of a log-scaled axis (a colour bar's too) in plain time units:
    "100 ns", "200 ns", "500 ns", "1 µs", ..., not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: format_ns(value)))


def fit_texts(fig, texts, width: float, height: float) -> int:
    """Give ``texts`` one font size, the largest (down to MIN_CELL_FONT
    points, from their own) at which each fits a ``width`` x ``height``
    pixel box, and remove those that fit at none.

    Returns
    -------
    int
        How many texts were removed.
    """
    renderer = fig.canvas.get_renderer()
    fitting, removed = [], 0
    for text in texts:
        size = text.get_fontsize()
        while size >= MIN_CELL_FONT:
            text.set_fontsize(size)
            box = text.get_window_extent(renderer)
            if box.width <= width and box.height <= height:
                break
            size -= 0.5
        if size < MIN_CELL_FONT:
            text.remove()
            removed += 1
        else:
            fitting.append((text, size))
    common = min((size for _, size in fitting), default=None)
    for text, _ in fitting:
        text.set_fontsize(common)
    return removed


def chart_title(doc: dict) -> str:
    """The chart's title: what was timed, on which machine, at which load;
    a chart shared alone carries the warning its report gives when the
    machine was overloaded (other work took turns with the calls timed)."""
    m, s = doc["machine"], doc["settings"]
    shape = "x".join(map(str, s["array"]["shape"]))
    title = (f"from_dlpack latency, {shape}-element {s['array']['dtype']}, median of {s['rounds']} rounds\n"
             f"{m['cpu']}, {m['cores']} cores, load {m['load_average']['start'][0]:.1f}")
    if m.get("overloaded"):
        title += " (overloaded: these times are unreliable)"
    return title


def heatmap(doc: dict, path: str) -> None:
    """Draw the latency matrix of a run (rows: producer, columns: consumer;
    colour: the median time per call on a log scale whose colour bar reads
    in ns and µs; a cell's text: the median, "copy" when the result is not
    the producer's memory, or why the pair was not timed) to ``path`` (.png
    or .svg), at the documentation page's width.

    Raises
    ------
    ImportError
        When matplotlib is not installed (a chart at ``path`` is removed).
    """
    plt = pyplot_or_remove(path)
    if plt is None:
        raise ImportError("the chart needs matplotlib: pip install 'dlpack-ref[bench]'")
    import matplotlib
    from matplotlib.colors import LogNorm

    producers = [lib["name"] for lib in doc["libraries"] if lib["producer"]]
    consumers = [lib["name"] for lib in doc["libraries"] if lib["consumer"]]
    by_pair = {(p["producer"], p["consumer"]): p for p in doc["pairs"]}
    grid = [[math.nan] * len(consumers) for _ in producers]
    for i, p in enumerate(producers):
        for j, c in enumerate(consumers):
            pair = by_pair.get((p, c))
            if pair is not None and pair["status"] == "measured":
                grid[i][j] = pair["ns_median"]
    finite = [v for row in grid for v in row if not math.isnan(v)]
    low, high = (min(finite), max(finite)) if finite else (1.0, 10.0)
    if high <= low:
        low, high = low / 2, high * 2
    norm = LogNorm(vmin=low, vmax=high)
    cmap = matplotlib.colormaps["viridis_r"].with_extremes(bad="#e4e4e4")

    with plt.rc_context({"font.size": FONT}):
        fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 0.5 * len(producers) + 2.6), layout="constrained")
        image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
        ax.set_xticks(range(len(consumers)), consumers)
        ax.set_yticks(range(len(producers)), producers)
        ax.set_xlabel("consumer: consumer.from_dlpack(x)")
        ax.set_ylabel("producer of x")
        ax.tick_params(length=0)
        bar = fig.colorbar(image, ax=ax, label="time per call, median (log scale)", pad=0.02, fraction=0.05)
        ns_axis(bar.ax.yaxis)
        ax.set_title(chart_title(doc), fontsize=FONT)
        texts = []
        for i, p in enumerate(producers):
            for j, c in enumerate(consumers):
                pair = by_pair.get((p, c))
                if pair is None:
                    text, dark = "-", False
                elif pair["status"] != "measured":
                    text, dark = ("CRASH" if pair["status"] == "crashed" else pair["status"]), False
                else:
                    text = format_ns(pair["ns_median"]) + ("" if pair["zero_copy"] is not False else "\ncopy")
                    r, g, b, _ = cmap(norm(pair["ns_median"]))
                    dark = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.5
                texts.append(ax.text(j, i, text, ha="center", va="center", fontsize=FONT - 1,
                                     color="white" if dark else "black"))
        # The consumers' names turn when the widest would not fit its column.
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        column = ax.get_window_extent(renderer).width / max(len(consumers), 1)
        if any(label.get_window_extent(renderer).width > 0.95 * column for label in ax.get_xticklabels()):
            plt.setp(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")
            fig.canvas.draw()
        cells = ax.get_window_extent(renderer)
        removed = fit_texts(fig, texts, 0.92 * cells.width / max(len(consumers), 1),
                            0.92 * cells.height / max(len(producers), 1))
        if removed:
            ax.set_title(f"{ax.get_title()}\n{removed} cell(s) too small for their text: "
                         "the numbers are in the table and the JSON", fontsize=FONT)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
