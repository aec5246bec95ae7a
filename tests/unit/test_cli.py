"""The CLI's edge without starting it: the quiet-host settings under their name and the old spelling.
Through the real CLI: tests/workflow/test_cli_edge.py."""

from __future__ import annotations


def test_run_takes_the_quiet_host_settings_under_their_name_and_the_old_guard_spelling():
    from specsweep import cli

    for flag in ("--quiet-host", "--guard"):
        args = cli._parser().parse_args(["run", "--spec", "{}", flag, '{"retry_pause_s": 1}'])
        assert args.quiet_host == '{"retry_pause_s": 1}' and cli._quiet_host(args).retry_pause_s == 1
