"""The summary figure: throughput, speedup and acceptance length over one axis, per section.

Which axis is where is the study's choice (``plot:`` in the study, documented in
config/README.md): ``x`` along the x axis (draft budget by default), ``line`` told apart by colour
(context by default), ``column`` an axis with panels of its own (none by default: one column per
section). Every other axis (tp, and any of the study's own) gets a line style and marker per
combination of its values, so two configurations are never joined into one line.

Configurations without a valid result are drawn as marks at the top edge of their panel with
their reason listed under the figure, so a missing point can never be read as zero.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on CI or cluster nodes

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from specsweep import axes as grid_axes  # noqa: E402
from specsweep.analysis.aggregate import not_ok  # noqa: E402
from specsweep.records.status import EXCLUDED, INFERRED, NOT_ENGAGED, OK  # noqa: E402
from specsweep.spec import SLO, loads_named  # noqa: E402

LABELS = {
    "output_tok_s": "output tok/s (section wall time)",
    "speedup": "speedup over budget 0\n(< 1: slower than no speculation)",
    "acceptance_length": "acceptance length\n(tokens per verification step)",
    "j_per_output_token": "J per output token\n(GPU energy; lower is better)",
}
SPREAD = {"output_tok_s": ("output_tok_s_min", "output_tok_s_max"), "speedup": ("speedup_min", "speedup_max")}
STATUS_MARKS = {EXCLUDED: ("o", "grey", "excluded"), NOT_ENGAGED: ("s", "darkorange", "speculation did not engage"),
                INFERRED: ("v", "purple", "inferred: out of memory at a shorter context"),
                "default": ("X", "crimson", "failed / no result")}
TP_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (1, 4)), "v"), ((0, (5, 1)), "P"))
AXIS_LABELS = {"budget": "draft budget (0 = no speculation)", "tp": "tensor-parallel size",
               "context": "prompt length (tokens)"}


def study_title(config: dict) -> str:
    """The title of a study's figures: its name, model and backend."""
    return f"specsweep: {config['study']} ({config['model']['name']} on {config['backend']})"


@dataclass(frozen=True)
class Facets:
    """Where each axis of a summary goes: x, colour (line), panel column, and the styled rest."""

    x: str
    line: str | None
    column: str | None
    styled: tuple[str, ...]

    @classmethod
    def of(cls, frame: pd.DataFrame, x: str, line: str | None, column: str | None) -> Facets:
        """The facets for a summary's own axes (the study's plot:); a chosen axis the table lacks is
        left unused."""
        present = grid_axes.columns(frame.columns)
        line = line if line in present and line != x else None
        column = column if column in present and column not in (x, line) else None
        return cls(x=x, line=line, column=column,
                   styled=tuple(a for a in present if a not in (x, line, column)))


def tp_style(tps: list) -> dict:
    """(line style, marker) of each value (of tp, or of a combination of the styled axes)."""
    return {tp: TP_STYLES[i % len(TP_STYLES)] for i, tp in enumerate(sorted(tps, key=str))}


def _styled_key(row: dict, facets: Facets) -> tuple:
    return tuple(row[a] for a in facets.styled)


def _label(axis_names, values) -> str:
    return ", ".join(f"{'ctx' if a == 'context' else a} {v}" for a, v in zip(axis_names, values))


def measurements(frame: pd.DataFrame) -> list[tuple[str, str | None]]:
    """(section, load) of each measurement of a configuration, in the workload's order (load None
    in a summary written before load was a dimension)."""
    loads = frame[grid_axes.LOAD] if grid_axes.LOAD in frame.columns else [None] * len(frame)
    return list(dict.fromkeys(zip(frame[grid_axes.SECTION], loads)))


def _panels(frame: pd.DataFrame, facets: Facets) -> list[tuple[tuple, object]]:
    """((section, load), value of the column axis or None) of each column of panels, in the workload's order."""
    sections = measurements(frame)
    if facets.column is None:
        return [(s, None) for s in sections]
    return [(s, v) for v in sorted(frame[facets.column].unique(), key=_sort_key) for s in sections]


def _title(measurement: tuple[str, str | None], frame: pd.DataFrame) -> str:
    """The section, and its load where some section ran at more than one."""
    section, load = measurement
    if load is None or not loads_named(frame[[grid_axes.SECTION, grid_axes.LOAD]].itertuples(index=False)):
        return section
    return f"{section} at {'goodput (' + SLO + ')' if load == SLO else load}"


_sort_key = grid_axes.sort_key


def plot_summary(frame: pd.DataFrame, out: Path, *, title: str, facets: Facets):
    """Write the three-row figure (tok/s; speedup; acceptance length; and energy per output token
    where any section's GPU energy was read), one column per section (and value of the column
    axis). Returns the (closed) figure, whose artists say what was drawn."""
    panels = _panels(frame, facets)
    colours = sorted(frame[facets.line].unique(), key=_sort_key) if facets.line else [None]
    palette = dict(zip(colours, sns.color_palette("viridis", len(colours))))
    xs = sorted(frame[facets.x].unique(), key=_sort_key)
    styles = tp_style(list({_styled_key(r, facets) for r in frame.to_dict("records")}))
    sns.set_theme(style="whitegrid", context="notebook")
    energy = "j_per_output_token" in frame and frame["j_per_output_token"].notna().any()
    rows = 4 if energy else 3  # a CPU study reads no energy: no row of empty panels
    fig, axes = plt.subplots(rows, len(panels), figsize=(4.6 * len(panels), 11.0 * rows / 3), squeeze=False,
                             sharex=True)
    ok = frame[frame["status"] == OK]
    draw = Drawing(facets, palette, styles, xs)
    for col, (section, value) in enumerate(panels):
        where = _title(section, frame) + (f", {facets.column} {value}" if facets.column else "")
        part = _select(ok, section, facets.column, value)
        _panel(axes[0, col], part, "output_tok_s", f"{where}: output tok/s", draw)
        _panel(axes[1, col], part.dropna(subset=["speedup"]), "speedup", f"{where}: speedup over budget 0", draw)
        axes[1, col].axhline(1.0, color="black", lw=1, ls="--")
        _panel(axes[2, col], part.dropna(subset=["acceptance_length"]), "acceptance_length",
               f"{where}: acceptance length", draw)
        if part["acceptance_length"].isna().all():
            axes[2, col].text(0.5, 0.5, "no drafts made (or not reported)", transform=axes[2, col].transAxes,
                              ha="center", va="center", color="grey")
        if energy:
            _panel(axes[3, col], part.dropna(subset=["j_per_output_token"]), "j_per_output_token",
                   f"{where}: J per output token", draw)
        bad = _select(frame, section, facets.column, value)
        _mark_missing(axes[0, col], bad[bad["status"] != OK], draw)
    _legend(fig, facets, palette, styles)
    n_bad = len(not_ok(frame))
    fig.suptitle(f"{title}\n{frame['name'].nunique() - n_bad} configurations measured, {n_bad} without result",
                 fontsize=12, y=0.995)
    footer = _footer(frame)
    _save(fig, out, footer, top=0.91)
    return fig


def _select(frame: pd.DataFrame, measurement: tuple[str, str | None], column: str | None, value) -> pd.DataFrame:
    section, load = measurement
    keep = frame[grid_axes.SECTION] == section
    if load is not None:
        keep &= frame[grid_axes.LOAD] == load
    if column is not None:
        keep &= frame[column] == value
    return frame[keep]


def _save(fig, out: Path, footer: str, *, top: float) -> None:
    """Lay out above the footer (the list of what is not a number), write the PNG, free the figure."""
    fig.tight_layout(rect=(0, 0.02 + 0.022 * footer.count("\n"), 1, top))
    if footer:
        fig.text(0.01, 0.005, footer, fontsize=8, va="bottom", family="monospace", color="crimson")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class Drawing:
    """How one figure draws: where each axis goes, its colours and styles, the x values in order."""

    facets: Facets
    palette: dict
    styles: dict
    xs: list

    def x_of(self, values) -> list:
        """Numbers stay where they are on the x axis; names are placed in order, one apart."""
        if all(grid_axes.is_number(v) for v in self.xs):
            return list(values)
        position = {v: i for i, v in enumerate(self.xs)}
        return [position[v] for v in values]


def _panel(ax, part: pd.DataFrame, column: str, title: str, drawing: Drawing) -> None:
    """Mean per x value, one line per combination of the other axes, the repeats' min-max as error bars."""
    low, high = SPREAD.get(column, (None, None))
    facets = drawing.facets
    groups = [a for a in (*facets.styled, facets.line) if a is not None]
    for key, group in (part.groupby(groups, sort=True) if groups else [((), part)]):
        key = key if isinstance(key, tuple) else (key,)
        values = dict(zip(groups, key))
        group = group.sort_values(facets.x, key=lambda c: c.map(_sort_key))
        yerr = None if low is None else [(group[column] - group[low]).clip(lower=0),
                                         (group[high] - group[column]).clip(lower=0)]
        line, marker = drawing.styles[tuple(values[a] for a in facets.styled)]
        ax.errorbar(drawing.x_of(group[facets.x]), group[column], yerr=yerr, marker=marker, ls=line, capsize=4,
                    color=drawing.palette[values.get(facets.line)], label=_label(groups, key))
    ax.set_title(title, fontsize=10, pad=16)  # room for the missing-result marks above the axes
    ax.set_xticks(drawing.x_of(drawing.xs), [str(v) for v in drawing.xs])
    ax.set_xlabel(AXIS_LABELS.get(facets.x, facets.x))
    ax.set_ylabel(LABELS[column] if ax.get_subplotspec().is_first_col() else "")
    if column == "output_tok_s":
        ax.set_ylim(bottom=0)


def _mark_missing(ax, bad: pd.DataFrame, drawing: Drawing) -> None:
    """A mark just above the axes (axes coordinates), never at y=0 nor among the data."""
    transform = ax.get_xaxis_transform()
    for row in bad.to_dict("records"):
        marker, color, _ = STATUS_MARKS.get(row["status"], STATUS_MARKS["default"])
        ax.scatter(drawing.x_of([row[drawing.facets.x]]), [1.04], marker=marker, s=90, color=color,
                   transform=transform, zorder=5, edgecolors=drawing.palette[row.get(drawing.facets.line)],
                   linewidths=1.5, clip_on=False)


def _legend(fig, facets: Facets, palette, styles) -> None:
    handles = ([plt.Line2D([], [], color=c, marker="o", label=_label([facets.line], [v]).replace("ctx", "context"))
                for v, c in palette.items()] if facets.line else [])
    if len(styles) > 1:
        handles += [plt.Line2D([], [], color="black", ls=line, marker=marker, label=_label(facets.styled, key))
                    for key, (line, marker) in styles.items()]
    for marker, color, label in STATUS_MARKS.values():
        handles.append(plt.Line2D([], [], ls="", marker=marker, color=color, label=label))
    fig.legend(handles=handles, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.93),
               ncol=min(len(handles), 6), frameon=False)


def _footer(frame: pd.DataFrame) -> str:
    bad = not_ok(frame)
    lines = [textwrap.shorten(f"{r.name}: {r.status}: {r.reason}", 150) for r in bad.itertuples()]
    if len(lines) > 12:
        lines = lines[:12] + [f"... and {len(lines) - 12} more (see results/failed.csv)"]
    return "\n".join(lines)


COMPARE_MARKS = {"faster": "seagreen", "slower": "crimson", "~": "grey"}


def plot_compare(frame: pd.DataFrame, out: Path, *, title: str) -> None:
    """B/A per configuration with its interval: one column per section, one row per tp.

    Significant changes are filled (green faster, red slower), "no significant difference" is a
    hollow grey mark; configurations that are not a number are listed under the figure.
    """
    sections = measurements(frame)
    tps = sorted(frame["tp"].unique())
    # Marker and offset per combination of the axes other than tp and budget (context, the study's own).
    others = [a for a in grid_axes.columns(frame.columns) if a not in ("tp", "budget")]
    group = frame.apply(lambda r: _label(others, [r[a] for a in others]), axis=1) if others else pd.Series(
        "", index=frame.index)
    kinds = sorted(group.unique())
    offsets = dict(zip(kinds, [(i - (len(kinds) - 1) / 2) * 0.12 for i in range(len(kinds))]))
    markers = dict(zip(kinds, "osD^v<>ph*"))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(len(tps), len(sections), figsize=(4.6 * len(sections), 3.8 * len(tps) + 1.4),
                             squeeze=False, sharex=True)
    numbers = frame[frame["ratio"].notna()]
    for (row, tp), (col, section) in ((r, c) for r in enumerate(tps) for c in enumerate(sections)):
        ax = axes[row, col]
        part = _select(numbers[numbers["tp"] == tp], section, None, None)
        for i, r in zip(part.index, part.itertuples()):
            kind, color = group[i], COMPARE_MARKS.get(r.verdict, "grey")
            x = r.budget + offsets[kind] * max(1, max(frame["budget"]) / 8)
            if not pd.isna(r.ci_low):
                ax.errorbar([x], [r.ratio], yerr=[[max(0, r.ratio - r.ci_low)], [max(0, r.ci_high - r.ratio)]],
                            color=color, capsize=4, lw=1.2)
            ax.scatter([x], [r.ratio], marker=markers[kind], s=70, edgecolors=color, linewidths=1.5,
                       facecolors=color if r.verdict in ("faster", "slower") else "none", zorder=3)
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.set_title(f"tp {tp}, {_title(section, frame)}: B/A output tok/s", fontsize=10)
        ax.set_xticks(sorted(frame["budget"].unique()))
        ax.set_xlabel("draft budget")
        ax.set_ylabel("B / A (median of repeats)" if col == 0 else "")
    handles = [plt.Line2D([], [], ls="", marker=markers[k], color="black", label=k.replace("ctx", "context"))
               for k in kinds if k]
    handles += [plt.Line2D([], [], ls="", marker="o", color=COMPARE_MARKS["faster"], label="significantly faster"),
                plt.Line2D([], [], ls="", marker="o", color=COMPARE_MARKS["slower"], label="significantly slower"),
                plt.Line2D([], [], ls="", marker="o", markerfacecolor="none", color="grey",
                           label="no significant difference")]
    fig.legend(handles=handles, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.94), ncol=len(handles),
               frameon=False)
    fig.suptitle(title, fontsize=11, y=0.995)
    others = frame[frame["ratio"].isna()].drop_duplicates("name")
    footer = "\n".join(textwrap.shorten(f"{r.name}: {r.verdict}: {r.why}", 150) for r in others.itertuples())
    _save(fig, out, footer, top=0.9)


TRADEOFF_LABELS = {"x": "output tok/s per GPU (output tok/s / tp)",
                   "y": "tok/s per user (each request's decode rate, mean)"}


def _tradeoff_panel(ax, section: str, failed: pd.DataFrame, *, first: bool) -> None:
    """A trade-off panel's words: the configurations without a result named (never drawn as
    zero), the title and the axes, from 0."""
    missing = failed["name"].unique()
    if len(missing):
        ax.text(0.01, 0.99, "no result: " + ", ".join(missing), transform=ax.transAxes, va="top",
                fontsize=8, color="crimson", wrap=True)
    ax.set_title(f"{section}: per user against per GPU", fontsize=10)
    ax.set_xlabel(TRADEOFF_LABELS["x"])
    ax.set_ylabel(TRADEOFF_LABELS["y"] if first else "")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)


def plot_tradeoff(frame: pd.DataFrame, out: Path, *, title: str):
    """The serving trade-off, one panel per section: tok/s per user against tok/s per GPU, one
    curve per configuration across its load levels (colour = budget, style = the other axes), the
    points no other beats on both marked as the frontier. The goodput search's rows are left out
    (they are a rate, not a level); configurations without a result are named in their panel and
    listed under the figure, never drawn as zero. Returns the (closed) figure."""
    sections = list(dict.fromkeys(frame[grid_axes.SECTION]))
    loads = frame[grid_axes.LOAD] if grid_axes.LOAD in frame.columns else pd.Series("", index=frame.index)
    levels = frame[loads != SLO].copy()
    levels["per_gpu"] = levels["output_tok_s"].astype("float64") / levels["tp"]
    levels["per_user"] = levels["decode_tok_s_mean"].astype("float64")
    others = [a for a in grid_axes.columns(frame.columns) if a != "budget"]
    budgets = sorted(frame["budget"].unique(), key=_sort_key)
    palette = dict(zip(budgets, sns.color_palette("viridis", len(budgets))))
    styles = tp_style(list({tuple(r[a] for a in others) for r in frame.to_dict("records")}))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(sections), figsize=(max(9.0, 5.2 * len(sections)), 6.2), squeeze=False)
    for col, section in enumerate(sections):
        ax = axes[0, col]
        part = levels[(levels[grid_axes.SECTION] == section) & (levels["status"] == OK)].dropna(
            subset=["per_gpu", "per_user"])
        for _, curve in part.groupby("name", sort=False):
            first = curve.iloc[0]
            line, marker = styles[tuple(first[a] for a in others)]
            ax.plot(curve["per_gpu"], curve["per_user"], ls=line, marker=marker, color=palette[first["budget"]])
            for row in curve.itertuples():
                ax.annotate(str(getattr(row, grid_axes.LOAD, "")), (row.per_gpu, row.per_user), fontsize=7,
                            textcoords="offset points", xytext=(4, 4), color="dimgrey")
        front = frontier(part[["per_gpu", "per_user"]].to_numpy().tolist())
        if front:
            ax.plot(*zip(*front), color="black", ls="--", lw=1, zorder=1)
            ax.scatter(*zip(*front), s=160, facecolors="none", edgecolors="black", zorder=4)
        _tradeoff_panel(ax, section, frame[(frame[grid_axes.SECTION] == section) & (frame["status"] != OK)],
                        first=col == 0)
    handles = [plt.Line2D([], [], color=c, marker="o", label=f"budget {b}") for b, c in palette.items()]
    if len(styles) > 1:
        handles += [plt.Line2D([], [], color="black", ls=line, marker=marker, label=_label(others, key))
                    for key, (line, marker) in styles.items()]
    handles.append(plt.Line2D([], [], color="black", ls="--", marker="o", markerfacecolor="none",
                              label="frontier (no point beats it on both)"))
    fig.legend(handles=handles, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.9),
               ncol=min(len(handles), 4), frameon=False)
    fig.suptitle(f"{title}\none curve per configuration across its load levels\n(point labels: c<n> = n "
                 f"requests in flight, r<x> = x requests/s)", fontsize=11, y=0.995)
    _save(fig, out, _footer(frame), top=0.78)
    return fig


def frontier(points: list[list[float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both coordinates (Pareto), by increasing x."""
    best: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not best or y > best[-1][1]:
            best.append((x, y))
    return sorted(best)
