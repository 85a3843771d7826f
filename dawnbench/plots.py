"""The house style of the analyses' and the site's plots: matplotlib without a display, labels cut
to size as plain text, one-value axes spread from zero, legends outside the axes, and PNGs written
whole (a reader never sees half an image)."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
from pathlib import Path

LABEL_CHARS = 60      # longer labels are cut in the plots (never in the numbers)


@contextlib.contextmanager
def pyplot():
    # matplotlib's font manager says on stderr which font stands in for a missing one (mathtext's
    # cmex10 where a label escapes a "$"): a line per build that tells the user nothing
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with matplotlib.rc_context({"font.size": 9}):
        yield plt


def short(label: str) -> str:
    """A label from an entry, cut to size, as plain text: an unescaped "$" would start mathtext
    (and a malformed formula fails the drawing)."""
    label = label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…"
    return label.replace("$", r"\$")


def time_unit(max_hours: float) -> tuple[str, float]:
    """A readable unit for a time axis: (name, factor from hours)."""
    seconds = max_hours * 3600
    if seconds < 120:
        return "seconds", 3600.0
    if seconds < 2 * 3600:
        return "minutes", 60.0
    return "hours", 1.0


def legend_outside(ax, handles: list | None = None) -> None:
    """The legend right of the axes, where it covers no curve however many there are; left out of
    tight_layout (which would shrink the axes to fit it) and added to the saved image by save.
    `handles`: another axes' artists to explain here (a row's legend right of its last axes, where
    nothing is drawn), default this axes' own."""
    legend = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0) \
        if handles else ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    legend.set_in_layout(False)


def single_values_spread(ax) -> None:
    """An axis whose data is one value (one point, or points that share it) gets limits from zero to
    past the value, or a decade around it on a log axis, instead of matplotlib's +-5% around it,
    which reads as a range the data does not have. The quantities here (times, costs, latencies,
    accuracies) are >= 0, so zero is their natural origin."""
    box = ax.dataLim
    for lo, hi, set_limits, scale in ((box.x0, box.x1, ax.set_xlim, ax.get_xscale()),
                                      (box.y0, box.y1, ax.set_ylim, ax.get_yscale())):
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi != lo:
            continue
        if scale == "log" and hi > 0:
            set_limits(hi / 10 ** 0.5, hi * 10 ** 0.5)
        elif hi != 0:
            set_limits(sorted((0.0, 1.25 * hi)))
        else:
            set_limits(-1.0, 1.0)


def save(fig, plt, path: Path) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(fd)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    try:
        # the image grows to hold the legends outside the axes (and nothing else is cut)
        fig.savefig(tmp, dpi=100, format="png", bbox_inches="tight", bbox_extra_artists=legends)
        os.chmod(tmp, 0o644)          # mkstemp's 0600 would hide the plot from a web server
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def label_inside(ax, labels: list[tuple[str, float, float]]) -> None:
    """Each point's label beside it and inside the axes, where the axes clip it: to the point's left
    in the right half of the axes, below it near the top (a label always to the upper right ran into
    the right and top edges, and was cut there)."""
    ax.get_xlim(), ax.get_ylim()        # the limits as drawn (autoscaled), before reading positions
    to_axes = ax.transData + ax.transAxes.inverted()
    for text, px, py in labels:
        fx, fy = to_axes.transform((px, py))
        left, below = fx > 0.5, fy > 0.85
        ax.annotate(text, (px, py), fontsize=7, textcoords="offset points", xytext=(-3 if left else 3, -3 if below else 3),
                    ha="right" if left else "left", va="top" if below else "bottom")


def grid(plt, n: int, cols: int = 1, width: float = 6.4, height: float = 4.0):
    fig, axes = plt.subplots(n, cols, figsize=(width * cols, height * n), squeeze=False)
    return fig, axes
