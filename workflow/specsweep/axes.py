"""The grid's axes, declared once: which there are, each configuration's values, and its name.

``tp``, ``budget`` and ``context`` are built in and keep their meaning (GPUs per job, draft
budget with 0 = speculation off, prompt length in tokens). Any other key of ``grid:`` is an axis
of the study's own: its values reach the server through the placeholder of the same name in
``server.command``, ``server.speculative_args`` or ``server.env``. Configuration names, the
summary's key columns, exclusions, the figure's facets, the report's groups and compare's pairing
all follow from the functions here.
"""

from __future__ import annotations

import itertools
import numbers

BUILTIN = ("tp", "budget", "context")
# The name of one configuration: the built-in axes as before (tp1-b4-ctx1024), so results of a
# three-axis study keep their names, then -<axis><value> per study axis in declared order.
PREFIX = {"tp": "tp", "budget": "b", "context": "ctx"}
SECTION = "section"  # the summary's column after the axes
LOAD = "load"  # and after it, the load level (c<concurrency>, r<rate>, or slo for the goodput search)


def within(frame_columns) -> list[str]:
    """The columns that tell one measurement of a configuration from another: section and load
    (a summary written before load was a dimension has no load column)."""
    return [c for c in (SECTION, LOAD) if c in list(frame_columns)]


def names(grid: dict) -> list[str]:
    """Every axis of a grid, built-in first, then the study's own in the order declared."""
    return [*BUILTIN, *(k for k in grid if k not in BUILTIN)]


def own(grid: dict) -> list[str]:
    """The study's own axes (neither tp, budget nor context)."""
    return [k for k in grid if k not in BUILTIN]


def points(grid: dict) -> list[dict]:
    """{axis: value} of every grid point, in a stable order (tp, budget, context, then the rest)."""
    order = names(grid)
    return [dict(zip(order, combo)) for combo in itertools.product(*(grid[a] for a in order))]


def config_name(values: dict) -> str:
    """The file stem of one configuration, readable by a person: tp1-b4-ctx1024, tp1-b4-ctx1024-kvq8_0."""
    head = "-".join(f"{PREFIX[a]}{values[a]}" for a in BUILTIN)
    return head + "".join(f"-{a}{v}" for a, v in values.items() if a not in BUILTIN)


def columns(frame_columns) -> list[str]:
    """The axis columns of a summary table: those between ``name`` and ``section`` (or ``status``
    in a table of configurations). So a table says its own axes: a summary written by a
    three-axis study reads as it is.
    """
    cols = list(frame_columns)
    end = next(i for i, c in enumerate(cols) if c in (SECTION, "status"))
    return cols[cols.index("name") + 1:end]


def matches(wanted, value) -> bool:
    """An exclude rule's axis: absent matches all, a value that value, a list any of its values."""
    if wanted is None:
        return True
    return value in wanted if isinstance(wanted, list) else value == wanted


def rule_matches(rule: dict, values: dict) -> bool:
    """Every axis an exclude rule names matches this configuration's value."""
    return all(matches(rule.get(axis), value) for axis, value in values.items())


def plain(value):
    """A value read back from a table (numpy scalar) as the YAML/JSON value the study wrote."""
    return value.item() if hasattr(value, "item") else value


def is_number(value) -> bool:
    """A number (numpy's too, as tables hold them), not a name."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def sort_key(value) -> tuple:
    """Numbers in numeric order, then names in text order (an axis may hold either)."""
    return (0, float(value), "") if is_number(value) else (1, 0, str(value))
