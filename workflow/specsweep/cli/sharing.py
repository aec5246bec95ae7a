"""Subcommands that carry a study elsewhere: ``compare`` (study B against study A), ``archive``
(one file holding config, code, environment, results and logs), ``verify`` (an archive against
its checksums), ``rebuild`` (the summary again from an archive's raw results) and ``migrate`` (a
study folder an older specsweep wrote, into today's layout)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specsweep.cli.common import add_study_args, study_of
from specsweep.errors import ConfigError
from specsweep.records import migrations, paths, store
from specsweep.study import loading


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


def args_archive(parser: argparse.ArgumentParser) -> None:
    add_study_args(parser)
    parser.add_argument("--out", type=Path, default=paths.ARCHIVE)


def cmd_archive(args) -> int:
    from specsweep.analysis import archive

    checksums = archive.build(study_of(args), args.out)
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


def args_migrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--folder", type=Path, default=Path("."), help="the study folder (default: here)")


def cmd_migrate(args) -> int:
    """Every file of an older layout moved where today's specsweep keeps it (records/migrations.py)."""
    lines = migrations.migrate(args.folder)
    print("\n".join(lines) if lines else f"{args.folder}: nothing of an older layout; nothing to do")
    if lines:
        print(f"{len(lines)} file(s) carried over, nothing measured again; run the study's command as before")
    return 0
