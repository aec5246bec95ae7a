"""Subcommands that read and change nothing: ``grid`` (a study's configurations), ``doctor``
(is this host ready for a study), ``config-keys`` and ``failure-classes`` (the reference tables)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from specsweep import errors
from specsweep.cli.common import add_study_args, study_of
from specsweep.errors import ConfigError, HostNotReady
from specsweep.records import paths
from specsweep.study import loading
from specsweep.study.grid import expand_grid


def args_grid(parser: argparse.ArgumentParser) -> None:
    add_study_args(parser)


def cmd_grid(args) -> int:
    from specsweep.analysis import ledger

    study = study_of(args)
    try:  # a listing, as a dry run: say what a real run would refuse, and list
        loading.check_local_paths(study)
    except ConfigError as exc:
        print(f"specsweep: warning: {exc.reason} (a real run refuses this)", file=sys.stderr)
    for spec in expand_grid(study):
        reason = ledger.exclusion_reason(study, spec)
        print(spec.name + (f"\texcluded: {reason}" if reason else ""))
    return 0


def args_doctor(parser: argparse.ArgumentParser) -> None:
    add_study_args(parser)
    parser.add_argument("--results", type=Path, default=paths.RESULTS, help="where the study writes its results")


def cmd_doctor(args) -> int:
    from specsweep.measure import doctor

    study = study_of(args)
    checks = doctor.run_checks(study, results=args.results)
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    if failed:
        raise HostNotReady(f"this host cannot run study {study['study']} as it stands: {', '.join(failed)} "
                           f"(the lines marked FAIL say what to do)")
    print(f"this host is ready for study {study['study']}: {len(checks)} checks passed")
    return 0


def args_config_keys(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=Path("config/config.yaml"),
                        help="the default study, whose own choices are named beside the schema's defaults")


def cmd_config_keys(args) -> int:
    chosen = yaml.safe_load(args.config.read_text()) if args.config.is_file() else {}
    print(loading.key_table(chosen or {}), end="")
    return 0


def args_failure_classes(parser: argparse.ArgumentParser) -> None:
    """No arguments: the table is errors.py's own."""


def cmd_failure_classes(_args) -> int:
    print(errors.failure_table(), end="")
    return 0

