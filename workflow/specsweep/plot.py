"""The summary figure: throughput and speedup over draft budget, per section, context and tp.

One line per (tp, context): colour for the context, line style and marker for tp, so two tp
values are never joined into one line.

Configurations without a valid result are drawn as marks at the top edge of their panel with
their reason listed under the figure, so a missing point can never be read as zero.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on CI or cluster nodes

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .aggregate import EXCLUDED, OK, not_ok  # noqa: E402

LABELS = {
    "output_tok_s": "output tok/s (section wall time)",
    "speedup": "speedup over budget 0\n(< 1: slower than no speculation)",
    "acceptance_length": "acceptance length\n(tokens per verification step)",
}
SPREAD = {"output_tok_s": ("output_tok_s_min", "output_tok_s_max"), "speedup": ("speedup_min", "speedup_max")}
STATUS_MARKS = {EXCLUDED: ("o", "grey", "excluded"), "default": ("X", "crimson", "failed / no result")}
TP_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def tp_style(tps: list[int]) -> dict[int, tuple[str, str]]:
    """(line style, marker) of each tp value."""
    return {tp: TP_STYLES[i % len(TP_STYLES)] for i, tp in enumerate(sorted(tps))}


def plot_summary(frame: pd.DataFrame, out: Path, *, title: str):
    """Write the three-row figure (tok/s; speedup; acceptance length) with one column per section.

    Returns the (closed) figure, whose artists say what was drawn."""
    sections = list(dict.fromkeys(frame["section"]))
    contexts = sorted(frame["context"].unique())
    palette = dict(zip(contexts, sns.color_palette("viridis", len(contexts))))
    budgets = sorted(frame["budget"].unique())
    styles = tp_style(list(frame["tp"].unique()))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(3, len(sections), figsize=(4.6 * len(sections), 11.0), squeeze=False, sharex=True)
    ok = frame[frame["status"] == OK]
    for col, section in enumerate(sections):
        part = ok[ok["section"] == section]
        _panel(axes[0, col], part, "output_tok_s", palette, styles, budgets, f"{section}: output tok/s")
        _panel(axes[1, col], part.dropna(subset=["speedup"]), "speedup", palette, styles, budgets,
               f"{section}: speedup over budget 0")
        axes[1, col].axhline(1.0, color="black", lw=1, ls="--")
        _panel(axes[2, col], part.dropna(subset=["acceptance_length"]), "acceptance_length", palette, styles, budgets,
               f"{section}: acceptance length")
        if part["acceptance_length"].isna().all():
            axes[2, col].text(0.5, 0.5, "no drafts made (or not reported)", transform=axes[2, col].transAxes,
                              ha="center", va="center", color="grey")
        _mark_missing(axes[0, col], frame[(frame["section"] == section) & (frame["status"] != OK)], palette)
    _legend(fig, axes, palette, styles)
    n_bad = len(not_ok(frame))
    fig.suptitle(f"{title}\n{frame['name'].nunique() - n_bad} configurations measured, {n_bad} without result",
                 fontsize=12, y=0.995)
    footer = _footer(frame)
    _save(fig, out, footer, top=0.91)
    return fig


def _save(fig, out: Path, footer: str, *, top: float) -> None:
    """Lay out above the footer (the list of what is not a number), write the PNG, free the figure."""
    fig.tight_layout(rect=(0, 0.02 + 0.022 * footer.count("\n"), 1, top))
    if footer:
        fig.text(0.01, 0.005, footer, fontsize=8, va="bottom", family="monospace", color="crimson")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _panel(ax, part: pd.DataFrame, column: str, palette, styles, budgets, title: str) -> None:
    """Mean per budget, one line per (tp, context), with the repeats' min-max as error bars."""
    low, high = SPREAD.get(column, (None, None))
    for (tp, context), group in part.groupby(["tp", "context"]):
        group = group.sort_values("budget")
        yerr = None if low is None else [(group[column] - group[low]).clip(lower=0),
                                         (group[high] - group[column]).clip(lower=0)]
        line, marker = styles[tp]
        ax.errorbar(group["budget"], group[column], yerr=yerr, marker=marker, ls=line, capsize=4,
                    color=palette[context], label=f"tp {tp}, ctx {context}")
    ax.set_title(title, fontsize=10, pad=16)  # room for the missing-result marks above the axes
    ax.set_xticks(budgets)
    ax.set_xlabel("draft budget (0 = no speculation)")
    ax.set_ylabel(LABELS[column] if ax.get_subplotspec().is_first_col() else "")
    if column == "output_tok_s":
        ax.set_ylim(bottom=0)


def _mark_missing(ax, bad: pd.DataFrame, palette) -> None:
    """A mark just above the axes (axes coordinates), never at y=0 nor among the data."""
    transform = ax.get_xaxis_transform()
    for row in bad.itertuples():
        marker, color, _ = STATUS_MARKS.get(row.status, STATUS_MARKS["default"])
        ax.scatter([row.budget], [1.04], marker=marker, s=90, color=color, transform=transform, zorder=5,
                   edgecolors=palette[row.context], linewidths=1.5, clip_on=False)


def _legend(fig, axes, palette, styles) -> None:
    handles = [plt.Line2D([], [], color=c, marker="o", label=f"context {ctx}") for ctx, c in palette.items()]
    if len(styles) > 1:
        handles += [plt.Line2D([], [], color="black", ls=line, marker=marker, label=f"tp {tp}")
                    for tp, (line, marker) in styles.items()]
    for marker, color, label in STATUS_MARKS.values():
        handles.append(plt.Line2D([], [], ls="", marker=marker, color=color, label=label))
    fig.legend(handles=handles, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.93), ncol=len(handles),
               frameon=False)


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
    sections = list(dict.fromkeys(frame["section"]))
    tps = sorted(frame["tp"].unique())
    contexts = sorted(frame["context"].unique())
    offsets = dict(zip(contexts, [(i - (len(contexts) - 1) / 2) * 0.12 for i in range(len(contexts))]))
    markers = dict(zip(contexts, "osD^v<>"))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(len(tps), len(sections), figsize=(4.6 * len(sections), 3.8 * len(tps) + 1.4),
                             squeeze=False, sharex=True)
    numbers = frame[frame["ratio"].notna()]
    for (row, tp), (col, section) in ((r, c) for r in enumerate(tps) for c in enumerate(sections)):
        ax = axes[row, col]
        part = numbers[(numbers["tp"] == tp) & (numbers["section"] == section)]
        for r in part.itertuples():
            color = COMPARE_MARKS.get(r.verdict, "grey")
            x = r.budget + offsets[r.context] * max(1, max(frame["budget"]) / 8)
            if not pd.isna(r.ci_low):
                ax.errorbar([x], [r.ratio], yerr=[[max(0, r.ratio - r.ci_low)], [max(0, r.ci_high - r.ratio)]],
                            color=color, capsize=4, lw=1.2)
            ax.scatter([x], [r.ratio], marker=markers[r.context], s=70, edgecolors=color, linewidths=1.5,
                       facecolors=color if r.verdict in ("faster", "slower") else "none", zorder=3)
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.set_title(f"tp {tp}, {section}: B/A output tok/s", fontsize=10)
        ax.set_xticks(sorted(frame["budget"].unique()))
        ax.set_xlabel("draft budget")
        ax.set_ylabel("B / A (median of repeats)" if col == 0 else "")
    handles = [plt.Line2D([], [], ls="", marker=markers[c], color="black", label=f"context {c}") for c in contexts]
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
