"""Command line: the one place where typed failures become exit codes and failure records.

    python -m specsweep launch --config config/config.yaml --name tp1-b4-ctx128   # by hand
    python -m specsweep provision llama-server|model|prompts-sharegpt|...    # rules
    python -m specsweep aggregate ... / plot ...                             # rules
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path

import yaml

from specsweep import errors
from specsweep.errors import (
    ConfigError,
    HostNotReady,
    InternalError,
    SpecsweepError,
)
from specsweep.host import quiet_host
from specsweep.measure import attempts, before_start, interrupts
from specsweep.records import paths, store
from specsweep.servers import signatures
from specsweep.servers.backends import Provision
from specsweep.spec import LaunchSpec
from specsweep.study import loading, manifests, offline, targets
from specsweep.study.grid import expand_grid, find_spec


def entry() -> None:
    """The console script `specsweep` and `python -m specsweep`: exit with main's code."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `specsweep grid ... | head`: the reader left, which is no error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


# Subcommands renamed, and what they are called now: the old name is refused with the new one.
RENAMED = {"run": "launch"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in RENAMED:
        print(f"specsweep: `specsweep {argv[0]}` is now `specsweep {RENAMED[argv[0]]}` (one launch of one "
              f"configuration; a run is a whole invocation of the workflow): the same arguments", file=sys.stderr)
        return 2
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecsweepError as exc:
        print(f"specsweep: {exc.failure_class}: {exc.reason}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        raise  # the reader of our output left: entry() ends quietly
    except Exception as exc:  # a bug: one line for the user, the traceback on request
        if os.environ.get("SPECSWEEP_DEBUG"):
            traceback.print_exc()
        print(f"specsweep: internal error (a bug in specsweep): {type(exc).__name__}: {exc}; "
              f"SPECSWEEP_DEBUG=1 shows the traceback", file=sys.stderr)
        return InternalError.exit_code


def _add_study_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--config", type=Path, help="study YAML")
    group.add_argument("--config-json", help="validated study config as JSON (what the workflow passes)")


def _study(args) -> dict:
    if args.config is not None:
        return loading.load_study(args.config)
    return loading.validate_study(json.loads(args.config_json))


def args_launch(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", help="the launch spec as JSON (what the workflow passes)")
    source.add_argument("--config", type=Path, help="a study YAML; pick the configuration with --name")
    parser.add_argument("--name", help="configuration name with --config, e.g. tp1-b4-ctx128")
    parser.add_argument("--binary-manifest", "--server-manifest", type=Path,
                        help="provisioned server manifest (for server.binary 'embedded')")
    parser.add_argument("--model-manifest", type=Path, help="provisioned model manifest (for 'embedded')")
    parser.add_argument("--prompts-manifest", type=Path,
                        help="provisioned prompt set manifest (default: the cached set, provisioned if need be)")
    parser.add_argument("--manifests", type=Path, nargs="*", default=[],
                        help="provisioned manifests, server and model alike (what the workflow passes)")
    parser.add_argument("--launch", type=int, default=1,
                        help="with --config: which launch of the configuration (workload.launches) this is")
    parser.add_argument("--out", type=Path, help="result file (default results/launches/<name>/launch<k>.json)")
    parser.add_argument("--server-log", type=Path, help="server log (default logs/server/<name>/launch<k>.log)")
    parser.add_argument("--failures-dir", type=Path, default=paths.FAILURES)
    parser.add_argument("--port", type=int, help="serve on this port instead of a free one picked at random")
    parser.add_argument("--attempt", type=int, default=1,
                        help="Snakemake's attempt number; a retry after a deterministic failure is not run")
    parser.add_argument("--infer-from", default="",
                        help="comma-separated configurations (shorter contexts, all else equal): if one ran out of "
                             "memory, refuse at once as inferred to fail (the study's infer_failures)")
    parser.add_argument("--quiet-host", "--guard", dest="quiet_host",
                        help="the study's quiet_host settings as JSON (default: the study's, or the defaults); "
                             "--guard is its old spelling")


def cmd_launch(args) -> int:
    from specsweep.measure.progress import say
    from specsweep.measure.runner import launch_configuration

    spec, prompt_source = _launch_spec(args)
    settings = _quiet_host(args)
    out = args.out or paths.launch_result(spec.name, spec.launch)
    server_log = args.server_log or paths.server_log(spec.name, spec.launch)
    if args.config is not None:  # by hand: the folder must hold this study, or nothing yet
        attempts.check_same_study(spec, paths.launches_of(out))
    if args.attempt > 1 and (previous := attempts.deterministic_failure(args.failures_dir, spec)):
        say(spec, f"not retried: the last attempt failed deterministically [{previous.failure_class}] "
                  f"{previous.reason}; fix it or exclude the configuration")
        return previous.exit_code
    if args.attempt > 1:
        attempts.settle_before_retry(args.failures_dir, spec, settings, say)
    interrupts.install()
    started_at = store.utc_now()
    log_start = signatures.log_size(server_log)  # this attempt's lines start here
    try:
        before_start.refuse_inferred([n for n in args.infer_from.split(",") if n], args.failures_dir,
                                     paths.launches_of(out))
        launch_configuration(spec, out=out, server_log=server_log, settings=settings, port=args.port,
                          prompt_source=prompt_source)
        attempts.keep_in_history(spec, out, say)
        return 0
    except Exception as caught:  # a bug, too, must leave a record and a nonzero exit
        exc = caught if isinstance(caught, SpecsweepError) else InternalError(
            f"internal error: {type(caught).__name__}: {caught}")
        path, reason = attempts.record_failure(args.failures_dir, spec, exc, started_at=started_at,
                                               server_log=server_log, log_start=log_start)
        say(spec, f"FAILED [{exc.failure_class}] {reason}", terminal=True)
        say(spec, f"failure record: {path}; server log: {server_log}")
        return exc.exit_code


def _quiet_host(args) -> quiet_host.Settings:
    """The quiet-host settings: --quiet-host, else the study's (--config), else the schema's defaults."""
    if args.quiet_host is not None:
        try:
            doc = json.loads(args.quiet_host)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--quiet-host is not valid JSON: {exc}") from exc
        settings = loading.validate_study({"quiet_host": doc})["quiet_host"]
    elif args.config is not None:
        settings = loading.load_study(args.config)["quiet_host"]
    else:
        settings = loading.validate_study({})["quiet_host"]
    return quiet_host.Settings(**settings)


def _launch_spec(args) -> tuple[LaunchSpec, dict | None]:
    """The spec with provisioned paths filled in, and the prompt set's manifest (if it uses one)."""
    if args.spec is not None:
        try:
            spec = LaunchSpec.from_dict(json.loads(args.spec))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--spec is not valid JSON: {exc}") from exc
    else:
        if not args.name:
            raise ConfigError("--config needs --name; list the names with: python -m specsweep grid --config FILE")
        spec = replace(find_spec(loading.load_study(args.config), args.name), launch=args.launch)
    handed = manifests.Handed.sorted_out(args.manifests, binary=args.binary_manifest, model=args.model_manifest,
                                         prompts=args.prompts_manifest)
    return manifests.resolve(spec, handed)


def args_provision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=[*targets.names(), "study", "check"],
                        help="a target (results/provision/<target>.json; study/targets.py); study: everything a "
                             "study takes from the package index, into the cache ($SPECSWEEP_CACHE: a folder to carry "
                             "to a machine without an index); check: say what of it is cached, and fail where a run "
                             "would need an index none answers")
    parser.add_argument("--config", type=Path, help="study YAML: its provision: pins (study, check: required)")
    parser.add_argument("--pins", help="provision: pins as JSON, over the schema's (what the workflow passes)")
    parser.add_argument("--needs", type=Path, nargs="*", default=[],
                        help="manifests of the targets this one is made from, in the order it names them")
    parser.add_argument("--source", type=Path,
                        help="llama-server: build from this local source (the pinned sdist, or an archive that "
                             "llama-source cut from it) instead of the package index; tiny-gguf: its gguf-py")
    parser.add_argument("--cuda-arch", help="llama-server: build with CUDA for these architectures (90-real: Hopper)")
    parser.add_argument("--no-flash-attention", dest="flash_attention", action="store_false", default=None,
                        help="llama-server: leave out the CUDA flash-attention kernels (a model that cannot use them)")
    parser.add_argument("--build-dir", type=Path,
                        help="llama-server: build in this folder and keep it, so that a build cut short continues")
    parser.add_argument("--sdist", type=Path, help="llama-source: cut from this local copy of the pinned sdist")
    parser.add_argument("--out", type=Path, help="manifest (or archive) to write; not for study, check")
    parser.add_argument("--log", type=Path, help="build log (default: logs/provision/<target>.log)")


PROVISION_OPTIONS = ("source", "cuda_arch", "flash_attention", "build_dir", "sdist")


def cmd_provision(args) -> int:
    if args.what in ("study", "check"):
        return _provision_study(args)
    if args.out is None:
        raise ConfigError(f"provision {args.what} needs --out, the manifest (or archive) to write")
    needs = targets.find(args.what).needs
    if len(args.needs) != len(needs):
        raise ConfigError(f"provision {args.what} is made from {len(needs)} other target(s) "
                          f"({', '.join(needs) or 'none'}); --needs gave {len(args.needs)}")
    options = {k: getattr(args, k) for k in PROVISION_OPTIONS if getattr(args, k) is not None}
    request = Provision(pins=_provision_pins(args), log_path=args.log or paths.provision_log(args.what), out=args.out,
                        needs={name: manifests.read(path) for name, path in zip(needs, args.needs)}, options=options)
    manifest = targets.provision(args.what, request)
    if manifest is not None:
        store.write_json_atomic(args.out, manifest)
    return 0


def _provision_pins(args) -> dict:
    """The study's pins (--config), or --pins over the schema's defaults, validated as a study's."""
    if args.config is not None:
        return loading.load_study(args.config)["provision"]
    try:
        given = json.loads(args.pins) if args.pins else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--pins is not valid JSON: {exc}") from exc
    return loading.validate_study({"provision": given})["provision"]


def _provision_study(args) -> int:
    if args.config is None:
        raise ConfigError(f"provision {args.what} needs --config, the study file")
    config = loading.load_study(args.config)
    if args.what == "study":
        lines = offline.provision(config, args.log or paths.provision_log("study"))
    else:
        offline.check(config, str(args.config))
        lines = offline.status(config)
    print("\n".join(lines))
    return 0


def args_aggregate(parser: argparse.ArgumentParser) -> None:
    _add_study_args(parser)
    parser.add_argument("--launches", type=Path, default=paths.LAUNCHES)
    parser.add_argument("--failures", type=Path, default=paths.FAILURES)
    parser.add_argument("--csv", type=Path, default=paths.SUMMARY_CSV)
    parser.add_argument("--failed", type=Path, help="also write the table of configurations without a result")
    parser.add_argument("--quarantine", type=Path,
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

    study = _study(args)
    frame = aggregate.summarize(study, args.launches, args.failures)
    if args.quarantine is not None:
        ledger.quarantine_invalid(study, frame, args.launches, args.quarantine, args.failures)
    aggregate.check_comparable(study, args.launches)
    aggregate.write_summary(frame, args.csv, args.failed)
    report = partial_reports.failure_report(frame, args.failures)
    if report:
        print(report, file=sys.stderr)
    if args.report_data or args.figure:
        written = _read_summary(args.csv)  # what follows shows what the table says
        if args.report_data:
            _write_report_data(study, args, written, summary=args.csv)
        if args.figure:
            from specsweep.analysis.plot import study_title

            _draw(written, args.figure, args.tradeoff, title=study_title(study), axes=study["plot"])
    return 0


def _read_summary(path: Path):
    import pandas as pd

    return pd.read_csv(path, keep_default_na=True).fillna({"reason": ""})


def _draw(frame, figure: Path, tradeoff: Path | None, *, title: str, axes: dict) -> None:
    """The summary figure, its axes placed as ``axes`` (a study's plot:) says, and the trade-off
    across load levels where asked."""
    from specsweep.analysis.plot import Facets, plot_summary, plot_tradeoff

    plot_summary(frame, figure, title=title, facets=Facets.of(frame, **axes))
    if tradeoff:
        plot_tradeoff(frame, tradeoff, title=title)


def args_set_aside(parser: argparse.ArgumentParser) -> None:
    _add_study_args(parser)
    parser.add_argument("--plan", required=True, help="what planning found (analysis/ledger.py SetAside, JSON)")
    parser.add_argument("--out", type=Path, required=True, help="the marker to write once it is done")


def cmd_set_aside(args) -> int:
    """The run's first job where planning found refused or missing results: planning only reads."""
    from specsweep.analysis import ledger

    plan = ledger.SetAside.from_json(args.plan)
    for line in ledger.set_aside(_study(args), plan, args.out):
        print(line, flush=True)
    return 0


def args_adopt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True,
                        help="the launch result to carry over, results/launches/<name>/launch<k>.json")


def cmd_adopt(args) -> int:
    """A launch result of a folder written before launches/ was named, carried over (rule adopt_launch)."""
    print(f"{store.adopt_legacy(args.out)} -> {args.out}", flush=True)
    return 0


def args_race(parser: argparse.ArgumentParser) -> None:
    _add_study_args(parser)
    parser.add_argument("--round", type=int, required=True, help="the round just finished (launches so far)")
    parser.add_argument("--launches", type=Path, default=paths.LAUNCHES)
    parser.add_argument("--failures", type=Path, default=paths.FAILURES)
    parser.add_argument("--out", type=Path, help="the decision (default results/race/round<r>.json)")


def cmd_race(args) -> int:
    from specsweep.analysis import race

    study = _study(args)
    if not study["verdict"]["until_decided"]:
        raise ConfigError("the study does not race: set verdict.until_decided: {max_launches: N}")
    names = race.write_round(study, args.round, args.launches, args.failures, args.out or paths.race_round(args.round))
    print(f"racing: after round {args.round}, launch {args.round + 1} for "
          + (f"{len(names)}: {', '.join(names)}" if names else "none: every cell is decided or tied, or at the "
             "most launches"), flush=True)
    return 0


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
    _draw(_read_summary(args.csv), args.out, args.tradeoff, title=args.title,
          axes={**loading.defaults("plot"), **chosen})
    return 0


def args_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, help="baseline: a results folder, or a .tar.gz of one")
    parser.add_argument("b", type=Path, help="the study to judge: a results folder, or a .tar.gz of one")
    parser.add_argument("--alpha", type=float,
                        help="significance level after correction (default: the schema's compare.alpha)")
    parser.add_argument("--threshold", type=float,
                        help="a significant slowdown larger than this fraction is a regression, exit 20 (default: "
                             "the schema's compare.threshold)")
    parser.add_argument("--csv", type=Path, help="write the comparison table here")
    parser.add_argument("--plot", type=Path, help="write the ratio figure here")
    parser.add_argument("--regressions", type=Path, help="write the regressions found here (CSV)")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when regressions are found")


def cmd_compare(args) -> int:
    from specsweep.analysis import compare
    from specsweep.errors import RegressionFound

    chosen = {k: getattr(args, k) for k in ("alpha", "threshold") if getattr(args, k) is not None}
    settings = {**loading.defaults("compare"), **chosen}
    study_a, study_b, tmp = compare.open_both(args.a, args.b)
    with tmp:
        frame = compare.compare(study_a, study_b, alpha=settings["alpha"])
    print(f"A: {args.a}\nB: {args.b}\n{compare.table(frame)}")
    bad = compare.regressions(frame, settings["threshold"])
    if args.csv:
        store.write_text_atomic(args.csv, frame.to_csv(index=False))
    if args.regressions:
        store.write_text_atomic(args.regressions, bad.to_csv(index=False))
    if args.plot:
        from specsweep.analysis.plot import plot_compare

        plot_compare(frame, args.plot, title=f"B/A: {args.b} over {args.a}")
    if bad.empty:
        return 0
    listing = "\n  ".join(f"{r.name} {r.section}: {r.verdict} {'' if r.ratio != r.ratio else f'{r.ratio:.3f} '}"
                          f"({r.why})" for r in bad.itertuples())
    message = f"{len(bad)} regression(s) beyond {settings['threshold']:.0%}:\n  {listing}"
    if args.no_fail:
        print(message, file=sys.stderr)
        return 0
    raise RegressionFound(message)


def args_report_data(parser: argparse.ArgumentParser) -> None:
    _add_study_args(parser)
    parser.add_argument("--summary", type=Path, default=paths.SUMMARY_CSV)
    parser.add_argument("--launches", type=Path, default=paths.LAUNCHES)
    parser.add_argument("--failures", type=Path, default=paths.FAILURES)
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
    _write_report_data(_study(args), args, _read_summary(args.summary), summary=args.summary)
    return 0


def _write_report_data(study: dict, args, frame, *, summary: Path) -> None:
    """The best table, the report's pages, the frozen study config and the terminal's answer, from
    the summary as written (read back from its CSV: the report shows what the table says)."""
    from specsweep.analysis import deploy, report
    from specsweep.analysis.archive import frozen_config

    study_yaml = yaml.safe_dump(frozen_config(study), sort_keys=True)
    store.write_text_atomic(args.study_config, study_yaml)
    best = report.write_all(study, frame, launches_dir=args.launches, failures_dir=args.failures,
                            best_csv=args.best, front=args.front, failures_html=args.failures_page,
                            pages_dir=args.pages, tables_html=(args.summary_page, args.best_page),
                            study_yaml=study_yaml, study_html=args.study_page, deploy_dir=args.deploy)
    found = deploy.build(study, frame, best, args.launches)
    deploy.write(found, args.deploy)
    store.write_text_atomic(args.answer, report.terminal_answer(summary, args.best, deployed=(found, args.deploy))
                            + "\n")


def args_archive(parser: argparse.ArgumentParser) -> None:
    _add_study_args(parser)
    parser.add_argument("--out", type=Path, default=paths.ARCHIVE)


def cmd_archive(args) -> int:
    from specsweep.analysis import archive

    checksums = archive.build(_study(args), args.out)
    print(f"{args.out}: {len(checksums)} files; unpack it and read study/REPRODUCE.md")
    return 0


def args_verify(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path)


def cmd_verify(args) -> int:
    import tempfile

    from specsweep.analysis import archive

    if not args.folder.exists():
        raise ConfigError(f"{args.folder} does not exist: give the unpacked study/ folder or the study .tar.gz")
    if args.folder.is_file():  # the .tar.gz itself
        with tempfile.TemporaryDirectory() as tmp:
            found = archive.verify(archive.unpack(args.folder, Path(tmp)))
    else:
        found = archive.verify(args.folder)
    print(f"{args.folder}: all {found.checked} files match their checksums")
    if found.unlisted:
        print(f"not checked, added after packing (not part of the study): {', '.join(found.unlisted)}")
    return 0


def args_rebuild(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True)


def cmd_rebuild(args) -> int:
    from specsweep.analysis import archive

    print(archive.rebuild_summary(args.folder, args.out))
    return 0


def args_doctor(parser: argparse.ArgumentParser) -> None:
    _add_study_args(parser)
    parser.add_argument("--results", type=Path, default=paths.RESULTS, help="where the study writes its results")


def cmd_doctor(args) -> int:
    from specsweep.measure import doctor

    study = _study(args)
    checks = doctor.run_checks(study, results=args.results)
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    if failed:
        raise HostNotReady(f"this host cannot run study {study['study']} as it stands: {', '.join(failed)} "
                           f"(the lines marked FAIL say what to do)")
    print(f"this host is ready for study {study['study']}: {len(checks)} checks passed")
    return 0


def args_grid(parser: argparse.ArgumentParser) -> None:
    _add_study_args(parser)


def cmd_grid(args) -> int:
    from specsweep.analysis import ledger

    study = _study(args)
    try:  # a listing, as a dry run: say what a real run would refuse, and list
        loading.check_local_paths(study)
    except ConfigError as exc:
        print(f"specsweep: warning: {exc.reason} (a real run refuses this)", file=sys.stderr)
    for spec in expand_grid(study):
        reason = ledger.exclusion_reason(study, spec)
        print(spec.name + (f"\texcluded: {reason}" if reason else ""))
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


# Every subcommand: its name, what it does, its arguments and its handler (each pair above, side by side).
COMMANDS = {
    "launch": ("measure one launch of a configuration and write its result", args_launch, cmd_launch),
    "provision": ("obtain an embedded server or model through PyPI", args_provision, cmd_provision),
    "aggregate": ("summary table from valid results only", args_aggregate, cmd_aggregate),
    "set-aside": ("move the results planning refused into results/invalid/ (the run's first job)", args_set_aside,
                  cmd_set_aside),
    "adopt": ("carry a launch result from results/runs/ (the older layout) into results/launches/", args_adopt,
              cmd_adopt),
    "race": ("racing: which configurations get another launch after a round", args_race, cmd_race),
    "plot": ("summary figure from the summary table", args_plot, cmd_plot),
    "compare": ("compare study B with study A, configuration by configuration", args_compare, cmd_compare),
    "report-data": ("best budgets, front page, failures and configuration pages", args_report_data, cmd_report_data),
    "archive": ("pack the study (config, code, environment, results, logs) in one file", args_archive, cmd_archive),
    "verify": ("check an unpacked study archive (or the .tar.gz) against SHA256SUMS", args_verify, cmd_verify),
    "rebuild": ("the summary table again from an unpacked archive's raw results", args_rebuild, cmd_rebuild),
    "grid": ("list the configurations of a study", args_grid, cmd_grid),
    "doctor": ("check this host for a study before a long sweep: one line per check", args_doctor, cmd_doctor),
    "failure-classes": ("the failure classes, exit codes and advice, as a Markdown table", args_failure_classes,
                        cmd_failure_classes),
    "config-keys": ("every key of a study, its default and meaning (the schema's), as a Markdown table",
                    args_config_keys, cmd_config_keys),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specsweep", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (text, arguments, handler) in COMMANDS.items():
        command = sub.add_parser(name, help=text)
        arguments(command)
        command.set_defaults(func=handler)
    return parser
