"""Subcommands that turn launch results into the study's answer: ``set-aside`` (refused results
moved aside), ``aggregate`` (the summary
table), ``race`` (who gets another launch), ``report-data`` (best table, report pages, deploy
files, the terminal's answer) and ``plot`` (the figures)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from specsweep.cli.common import add_study_args, draw, read_summary, study_of
from specsweep.errors import ConfigError
from specsweep.records import paths, store
from specsweep.study import loading


def args_set_aside(parser: argparse.ArgumentParser) -> None:
    add_study_args(parser)
    parser.add_argument("--plan", required=True, help="what planning found (analysis/ledger.py SetAside, JSON)")
    parser.add_argument("--out", type=Path, required=True, help="the marker to write once it is done")


def cmd_set_aside(args) -> int:
    """The run's first job where planning found refused or missing results: planning only reads."""
    from specsweep.analysis import ledger

    plan = ledger.SetAside.from_json(args.plan)
    for line in ledger.set_aside(study_of(args), plan, args.out):
        print(line, flush=True)
    return 0


def _add_results_args(parser: argparse.ArgumentParser) -> None:
    """Where the study's launch results and failure records are (the study folder's, by default)."""
    parser.add_argument("--launches", type=Path, default=paths.LAUNCHES)
    parser.add_argument("--failures", type=Path, default=paths.FAILURES)


def args_aggregate(parser: argparse.ArgumentParser) -> None:
    add_study_args(parser)
    _add_results_args(parser)
    parser.add_argument("--csv", type=Path, default=paths.SUMMARY_CSV)
    parser.add_argument("--failed", type=Path, help="also write the table of configurations without a result")
    parser.add_argument("--set-aside", type=Path,
                        help="move results that cannot be aggregated into this folder and fail, so they are rerun")
    parser.add_argument("--report-data", action="store_true",
                        help="then, in the same process, what report-data writes (its options, here too): the "
                             "rule's one command, so the analysis libraries are loaded once")
    _report_data_outputs(parser)
    parser.add_argument("--figure", type=Path,
                        help="then draw the summary figure here, as the study's plot: settings place its axes")
    parser.add_argument("--tradeoff", type=Path, help="with --figure: also draw the load levels' trade-off here")


def cmd_aggregate(args) -> int:
    from specsweep.analysis import aggregate, ledger, partial_reports

    study = study_of(args)
    frame = aggregate.summarize(study, args.launches, args.failures)
    if args.set_aside is not None:
        ledger.set_aside_refused(study, frame, args.launches, args.set_aside, args.failures)
    aggregate.check_comparable(study, args.launches)
    aggregate.write_summary(frame, args.csv, args.failed)
    report = partial_reports.failure_report(frame, args.failures)
    if report:
        print(report, file=sys.stderr)
    if args.report_data or args.figure:
        written = read_summary(args.csv)  # what follows shows what the table says
        if args.report_data:
            _write_report_data(study, args, written, summary=args.csv)
        if args.figure:
            from specsweep.analysis.plot import study_title

            draw(written, args.figure, args.tradeoff, title=study_title(study), axes=study["plot"])
    return 0


def args_race(parser: argparse.ArgumentParser) -> None:
    add_study_args(parser)
    parser.add_argument("--round", type=int, required=True, help="the round just finished (launches so far)")
    _add_results_args(parser)
    parser.add_argument("--out", type=Path, help="the decision (default results/race/round<r>.json)")


def cmd_race(args) -> int:
    from specsweep.analysis import race

    study = study_of(args)
    if not study["verdict"]["until_decided"]:
        raise ConfigError("the study does not race: set verdict.until_decided: {max_launches: N}")
    names = race.write_round(study, args.round, args.launches, args.failures, args.out or paths.race_round(args.round))
    print(f"racing: after round {args.round}, launch {args.round + 1} for "
          + (f"{len(names)}: {', '.join(names)}" if names else "none: every cell is decided or tied, or at the "
             "most launches"), flush=True)
    return 0


def args_report_data(parser: argparse.ArgumentParser) -> None:
    add_study_args(parser)
    parser.add_argument("--summary", type=Path, default=paths.SUMMARY_CSV)
    _add_results_args(parser)
    _report_data_outputs(parser)


def _report_data_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--best", type=Path, default=paths.BEST_CSV)
    parser.add_argument("--front", type=Path, default=paths.FRONT_PAGE)
    parser.add_argument("--failures-page", type=Path, default=paths.REPORT_FAILURES)
    parser.add_argument("--pages", type=Path, default=paths.REPORT_CONFIGURATIONS)
    parser.add_argument("--study-config", type=Path, default=paths.STUDY_CONFIG)
    parser.add_argument("--summary-page", type=Path, default=paths.REPORT_SUMMARY)
    parser.add_argument("--best-page", type=Path, default=paths.REPORT_BEST)
    parser.add_argument("--study-page", type=Path, default=paths.REPORT_STUDY)
    parser.add_argument("--deploy", type=Path, default=paths.DEPLOY,
                        help="the server command of each configuration the answer names: deploy.json and scripts")
    parser.add_argument("--answer", type=Path, default=paths.ANSWER,
                        help="what the terminal shows after the main command (the Snakefile's onsuccess prints it)")


def cmd_report_data(args) -> int:
    _write_report_data(study_of(args), args, read_summary(args.summary), summary=args.summary)
    return 0


def _write_report_data(study: dict, args, frame, *, summary: Path) -> None:
    """The answer (answer.write_best: best.csv), the report's pages, the deploy files, the frozen
    study config and the terminal's answer, from the summary as written (read back from its CSV:
    the report shows what the table says) and the answer as computed once."""
    from specsweep.analysis import answer, deploy, report
    from specsweep.analysis.archive import frozen_config

    study_yaml = yaml.safe_dump(frozen_config(study), sort_keys=True)
    store.write_text_atomic(args.study_config, study_yaml)
    best = answer.write_best(frame, study, args.best)  # the answer's one owner
    report.write_all(study, frame, best, launches_dir=args.launches, failures_dir=args.failures, front=args.front,
                     failures_html=args.failures_page, pages_dir=args.pages,
                     tables_html=(args.summary_page, args.best_page), study_yaml=study_yaml,
                     study_html=args.study_page, deploy_dir=args.deploy)
    found = deploy.build(study, frame, best, args.launches)
    deploy.write(found, args.deploy)
    said = report.terminal_answer(frame, best, summary_csv=summary, best_csv=args.best, deployed=(found, args.deploy))
    store.write_text_atomic(args.answer, said + "\n")


def args_plot(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv", type=Path, default=paths.SUMMARY_CSV)
    parser.add_argument("--out", type=Path, default=paths.SUMMARY_PNG)
    parser.add_argument("--title", default="specsweep")
    parser.add_argument("--x", help="axis along the x axis (default: the schema's plot.x)")
    parser.add_argument("--line", help="axis told apart by colour (default: the schema's plot.line)")
    parser.add_argument("--column", help="axis with panels of its own (default: the schema's plot.column)")
    parser.add_argument("--tradeoff", type=Path, default=None,
                        help="also draw tok/s per user against tok/s per GPU across load levels here")


def cmd_plot(args) -> int:
    chosen = {k: getattr(args, k) for k in ("x", "line", "column") if getattr(args, k) is not None}
    draw(read_summary(args.csv), args.out, args.tradeoff, title=args.title,
          axes={**loading.defaults("plot"), **chosen})
    return 0

