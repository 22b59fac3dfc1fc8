"""`calibft`: look at the data layer without the workflow, and at what a run asks of a cluster. JSON Lines on
stdout, errors on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from calibft.artifacts import reference, reproduction
from calibft.artifacts.registry import ARTIFACTS
from calibft.core import cpu
from calibft.core.repository import REFERENCE
from calibft.data.grid import SPLITS, prompts, select
from calibft.data.output_space import spaces_for_prompts
from calibft.evals.tinybench import gpirt
from calibft.pipeline import memory, plan
from calibft.pipeline.assets import TINYBENCHMARKS_PARAMS, identity_mismatch
from calibft.pipeline.config import read_config


def _space_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("split", choices=SPLITS)
    parser.add_argument("--decimals", type=int, required=True, help="decimal places of continuous values (0..8)")
    parser.add_argument("--max-bins", type=int, required=True, help="cap on the number of values (>= 2)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calibft", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("prompts", help="the prompts of a split, in grid order")
    cmd.add_argument("split", choices=SPLITS)
    cmd = commands.add_parser("space", help="canonical output spaces: values and probabilities")
    _space_args(cmd)
    cmd.add_argument("--id", action="append", dest="ids", metavar="ID", help="only this prompt (repeatable)")
    cmd = commands.add_parser("trie", help="the token trie of one prompt: one line per prefix")
    _space_args(cmd)
    cmd.add_argument("--tokenizer", required=True, help="tokenizer folder or Hugging Face id")
    cmd.add_argument("--id", required=True, help="the prompt id")
    cmd = commands.add_parser("gpirt", help="tinyBenchmarks irt, p-IRT and gp-IRT estimates from 100 item scores")
    source = cmd.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--params", metavar="FILE", help="the upstream tinyBenchmarks.pkl, verified by its git blob id first"
    )
    source.add_argument(
        "--own-params",
        metavar="FILE",
        help="your own parameters pickle in tinyBenchmarks.pkl's structure, not verified against the upstream file",
    )
    cmd.add_argument("--task", required=True, choices=list(gpirt.PARAMS_ENTRIES))
    cmd.add_argument("--scores", required=True, help="JSON list of the 100 item scores in dataset row order")
    cmd = commands.add_parser(
        "gpu-hours",
        help="the GPU-hours that a planned run requests, per rule and in all, from `snakemake --dry-run` output",
    )
    cmd.add_argument(
        "plan", nargs="?", type=argparse.FileType("r"), default=sys.stdin, help="the dry run's output (default: stdin)"
    )
    cmd = commands.add_parser(
        "cpu", help="the SIMD kernels numpy and torch run; or run a command as on a CPU without AVX-512"
    )
    cmd.add_argument(
        "--as-avx2",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="run COMMAND with the AVX2 feature set of calibft.core.cpu (for example: calibft cpu --as-avx2 make test)",
    )
    cmd = commands.add_parser(
        "reference", help="the paper's printed numbers as CSV, from its LaTeX tables (reference/paper_tables.tex)"
    )
    cmd.add_argument("latex", nargs="?", type=argparse.FileType("r"), help="LaTeX holding the table environments")
    cmd.add_argument(
        "--record",
        metavar="TABLES",
        help="instead, a run's tables folder (results/tables): its numbers of the tables the paper reports",
    )
    cmd.add_argument(
        "--widen",
        metavar="CSV",
        help="instead, a recorded reference (profiles/demo/reference.csv) whose tolerances also cover the runs of "
        "--spread: each keeps its value, its tolerance the largest of its own and its deviations over them",
    )
    cmd.add_argument(
        "--spread",
        nargs="+",
        default=(),
        metavar="TABLES",
        help="with --record or --widen: other runs' tables folders (seeds, CPU feature sets); a number's tolerance "
        "is its largest deviation over them",
    )
    cmd.add_argument(
        "--machine",
        metavar="JSON",
        help="with --record: write what produced the run to this file; with --widen: add what produced the --spread "
        "runs to it",
    )
    cmd = commands.add_parser(
        "memory",
        help="the estimated peak GPU memory of every GPU job, per model, against what it asks for (a markdown table)",
    )
    cmd.add_argument("--config", default="config.yaml", help="the workflow configuration (default: config.yaml)")
    cmd.add_argument("--models", nargs="+", metavar="MODEL", help="only these models of the configuration")
    cmd.add_argument(
        "--record",
        action="store_true",
        help="write the measurements to reference/memory.json (the paper's table in docs/cluster.md)",
    )
    cmd = commands.add_parser(
        "preflight",
        help="on the login node, before any job: what would fail on this cluster (configuration, plan, Hugging Face "
        "access and downloads, disk, Slurm partitions and accounts, GPU memory); exit status 1 when anything will fail",
    )
    cmd.add_argument("targets", nargs="*", metavar="TARGET", help="the workflow's targets (default: its default)")
    cmd.add_argument("--profile", help="the Snakemake profile the run uses, e.g. profiles/slurm")
    cmd.add_argument(
        "--configfile", nargs="+", default=[], metavar="FILE", help="the run's --configfile arguments, in order"
    )
    return parser


def _emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")


def _prompts(args: argparse.Namespace) -> None:
    for p in prompts(args.split):
        _emit({"id": p.id, "family": p.family, "params": p.params, "prompt": p.prompt})


def _space(args: argparse.Namespace) -> None:
    chosen = select(prompts(args.split), args.ids)
    for p, space in zip(chosen, spaces_for_prompts(chosen, args.decimals, args.max_bins), strict=True):
        _emit({"id": p.id, "values": space.strings(), "probs": space.probs.tolist()})


def _trie(args: argparse.Namespace) -> None:
    from calibft.data.trie import trie_of_space
    from calibft.lm.models import load_tokenizer

    chosen = select(prompts(args.split), [args.id])
    space = spaces_for_prompts(chosen, args.decimals, args.max_bins)[0]
    tokenizer = load_tokenizer(args.tokenizer)
    trie = trie_of_space(tokenizer, space)
    for node in range(trie.num_nodes):
        if trie.child_count[node] == 0:
            continue
        prefix = trie.prefix_tokens(node)
        tokens, q = trie.children(node)
        _emit(
            {
                "prefix": prefix.tolist(),
                "text": tokenizer.decode(prefix),
                "mass": float(trie.node_mass[node]),
                "children": [
                    {"token": int(t), "text": tokenizer.decode([int(t)]), "q": float(v)}
                    for t, v in zip(tokens, q, strict=True)
                ],
            }
        )


def _upstream_params(path: str) -> str:
    """`path`, once verified to be the upstream tinyBenchmarks.pkl by its git blob id (before it is read)."""
    mismatch = identity_mismatch(TINYBENCHMARKS_PARAMS, path)
    if mismatch is not None:
        raise ValueError(
            f"{path} is not the upstream {TINYBENCHMARKS_PARAMS.filename} of {TINYBENCHMARKS_PARAMS.url} "
            f"({mismatch}). To estimate with your own parameters file, pass it as --own-params {path} (it is "
            "read by the same restricted unpickler)"
        )
    return path


def _gpirt(args: argparse.Namespace) -> None:
    # Both files go through gpirt's restricted unpickler; the upstream one is verified before it is read.
    scores = gpirt.load_scores(args.scores)  # checked first: the cheaper file, and the one more often wrong
    path = args.own_params if args.params is None else _upstream_params(args.params)
    _emit(gpirt.estimate(gpirt.load_params(path), args.task, scores))


def _gpu_hours(args: argparse.Namespace) -> None:
    jobs = plan.planned_jobs(args.plan)
    rows = plan.gpu_hours_by_rule(jobs)
    for row in rows:
        _emit({**row, "gpu_hours": round(row["gpu_hours"], 2)})
    gpu_hours = sum(row["gpu_hours"] for row in rows)
    _emit(
        {
            "rule": "total",
            "jobs": len(jobs),
            "gpu_jobs": sum(row["jobs"] for row in rows),
            "gpu_hours": round(gpu_hours, 2),
        }
    )


def _reference(args: argparse.Namespace) -> None:
    if args.widen is not None:
        if not args.spread:
            raise ValueError("--widen needs the runs to cover: --spread TABLES...")
        reference_cells = reference.read_csv_file(args.widen)
        sys.stdout.write(reference.to_csv(reproduction.widen(reference_cells, args.spread)))
        if args.machine is not None:  # what the recorded run came from, and now what widened it
            machine = Path(args.machine)
            record = json.loads(machine.read_text()) if machine.exists() else {}
            widened_by = record.get("widened_by", []) + [reproduction.recording_machine(t) for t in args.spread]
            machine.write_text(json.dumps({**record, "widened_by": widened_by}, indent=2) + "\n")
    elif args.record is not None:
        paper = reference.read_csv_file(REFERENCE / "paper.csv")
        names = [row.name for row in reference.compared_rows(ARTIFACTS, list(paper))]
        sys.stdout.write(reference.to_csv(reproduction.record(args.record, names, args.spread)))
        if args.machine is not None:
            Path(args.machine).write_text(json.dumps(reproduction.recording_machine(args.record), indent=2) + "\n")
    elif args.latex is None:
        raise ValueError("give the LaTeX file of the tables, or --record TABLES")
    else:
        sys.stdout.write(reference.to_csv(reference.extract(args.latex.read())))


def _cpu(args: argparse.Namespace) -> None:
    if args.as_avx2 is None:
        _emit(cpu.kernels())
    elif not args.as_avx2:
        raise ValueError("--as-avx2 needs a command to run")
    else:  # replaces this process
        os.execvpe(args.as_avx2[0], args.as_avx2, {**os.environ, **cpu.AVX2_FEATURE_SET})


def _memory(args: argparse.Namespace) -> None:
    config = read_config(args.config)
    unknown = sorted(set(args.models or ()) - set(config["models"]))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not among the models of {args.config} ({', '.join(config['models'])})")
    rows, measurements, left_out = memory.plan_memory(config, args.models)
    if args.record:
        memory.write_record({**memory.read_record(), **measurements})
    sys.stdout.write(memory.table(rows) + "\n")
    for key, why in left_out.items():
        print(f"calibft: {key} not estimated: {why}", file=sys.stderr)


def _preflight(args: argparse.Namespace) -> int:
    from calibft.pipeline.preflight import preflight
    from calibft.pipeline.preflight_checks import WARNING, WILL_FAIL, exit_status

    checks = preflight(args.profile, args.configfile, args.targets)
    for check in checks:
        print(check.line(), flush=True)
    failing = sum(check.status == WILL_FAIL for check in checks)
    warnings = sum(check.status == WARNING for check in checks)
    print(f"{len(checks)} checks: {failing} will fail, {warnings} with a warning")
    return exit_status(checks)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "preflight":  # its own exit status: 1 when a check will fail
        return _preflight(args)
    try:
        commands = {
            "prompts": _prompts,
            "space": _space,
            "trie": _trie,
            "gpirt": _gpirt,
            "gpu-hours": _gpu_hours,
            "cpu": _cpu,
            "reference": _reference,
            "memory": _memory,
        }
        commands[args.command](args)
    except (KeyError, ValueError, FileNotFoundError, PermissionError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"calibft: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `calibft ... | head` closes the pipe early
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
