"""The CLI's edge without starting it: the quiet-host settings under their name and the old spelling.
Through the real CLI: tests/workflow/test_cli_edge.py."""

from __future__ import annotations


def test_launch_takes_the_quiet_host_settings_under_their_name_and_the_old_guard_spelling():
    from specsweep import cli

    for flag in ("--quiet-host", "--guard"):
        args = cli._parser().parse_args(["launch", "--spec", "{}", flag, '{"retry_pause_s": 1}'])
        assert args.quiet_host == '{"retry_pause_s": 1}' and cli.measuring.quiet_host_settings(args).retry_pause_s == 1


def test_the_subcommand_once_called_run_is_refused_with_its_new_name(capsys):
    """`specsweep run` was one launch; a hand command written before the rename is told what to type,
    and nothing starts (usage error, exit 2, before any argument is read)."""
    from specsweep import cli

    assert cli.main(["run", "--spec", "{}", "--out", "x.json"]) == 2
    err = capsys.readouterr().err
    assert "`specsweep run` is now `specsweep launch`" in err and "the same arguments" in err
