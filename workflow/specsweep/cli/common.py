"""What the subcommands share: a study given by file or as the workflow's JSON, the summary
table read back, the summary figure drawn."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specsweep.study import loading


def add_study_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--config", type=Path, help="study YAML")
    group.add_argument("--config-json", help="validated study config as JSON (what the workflow passes)")


def study_of(args) -> dict:
    if args.config is not None:
        return loading.load_study(args.config)
    return loading.validate_study(json.loads(args.config_json))


def read_summary(path: Path):
    import pandas as pd

    return pd.read_csv(path, keep_default_na=True).fillna({"reason": ""})


def draw(frame, figure: Path, tradeoff: Path | None, *, title: str, axes: dict) -> None:
    """The summary figure, its axes placed as ``axes`` (a study's plot:) says, and the trade-off
    across load levels where asked."""
    from specsweep.analysis.plot import Facets, plot_summary, plot_tradeoff

    plot_summary(frame, figure, title=title, facets=Facets.of(frame, **axes))
    if tradeoff:
        plot_tradeoff(frame, tradeoff, title=title)

