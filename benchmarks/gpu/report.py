"""The GPU check's report: gpu_check.md's summary tables, and writing gpu_check.json and gpu_check.md."""

from __future__ import annotations

from pathlib import Path

from benchmarks.gpu.settings import CONFIG
from calibft.core.io import atomic_path, write_json


def _amount(value: float, units: tuple[str, str]) -> str:
    """`value` in billions (`units[0]`) from 0.1 billion up, in millions (`units[1]`) below."""
    return f"{value / 1e9:.2f} {units[0]}" if value >= 1e8 else f"{value / 1e6:.2f} {units[1]}"


def _cell(figures: dict, key: str, unit: str = "", digits: int = 1) -> str:
    """A table cell: the figure with its unit, `OOM` where the part ran out of memory, `-` where it is missing."""
    if "out_of_memory" in figures:
        return "OOM"
    value = figures.get(key)
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def markdown(report: dict) -> str:
    """The summary tables of a report, for docs/gpu.md."""
    settings, sampling = report["settings"], CONFIG["evaluation"]["structured"]["sampling"]
    lines = [
        f"`benchmarks/gpu_check.py`, mode `{report['mode']}`, {report['date']}: {report['device']}, torch "
        f"{report['torch']}, transformers {report['transformers']}, peft {report['peft']}, accelerate "
        f"{report['accelerate']}; {report['dtype']}, layers {report['layers'] or 'all'}, tiny {report['tiny']}, "
        f"{report['seconds']} s in all.",
        "",
    ]
    if "note" in report:
        lines += [f"**{report['note']}**", ""]
    lines += [
        f"Sampling: {settings['answers']} answers of at most {settings['max_new_tokens']} tokens to one training "
        f"prompt, decode batches of {sampling['batch_size']}, against `generate` on {settings['plain_batch']} copies "
        f"of the prompt per call ({settings['plain_answers']} answers). Exact pass: the `{report['exact_space']}` "
        f"space, {settings['exact_prompts']} prompt(s), batch_nodes {CONFIG['evaluation']['exact']['batch_nodes']}. "
        f"Training: one process, median of {settings['steps']} step(s) after 2 warm-ups. Peaks are "
        "`torch.cuda.max_memory_allocated` (none on the CPU).",
        "",
        "| model | parameters | weights | engine answers/s | `generate` answers/s | engine peak | exact s/prompt "
        "| exact peak | soft step | soft peak | hard step | hard peak |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in report["models"]:
        if "skipped" in m:
            lines.append(f"| {m['model']} | skipped {m['skipped']} |" + " |" * 10)
            continue
        sampling, exact, training = m["sampling"], m["exact"], m["training"]
        lines.append(
            f"| {m['model']} | {_amount(m['parameters'], ('B', 'M'))} | {_amount(m['weights_bytes'], ('GB', 'MB'))} "
            f"| {_cell(sampling, 'engine_answers_per_s')} | {_cell(sampling, 'plain_answers_per_s')} "
            f"| {_cell(sampling, 'engine_peak_gb', ' GB')} | {_cell(exact, 'seconds_per_prompt', ' s', 3)} "
            f"| {_cell(exact, 'peak_gb', ' GB')} | {_cell(training, 'soft_ms_per_step', ' ms')} "
            f"| {_cell(training, 'soft_peak_gb', ' GB')} | {_cell(training, 'hard_ms_per_step', ' ms')} "
            f"| {_cell(training, 'hard_peak_gb', ' GB')} |"
        )
    parts = (("engine", "sampling", "engine_peak_gb"), ("exact", "exact", "peak_gb"))
    parts += (("soft", "training", "soft_peak_gb"), ("hard", "training", "hard_peak_gb"))
    lines += [
        "",
        "Peak memory measured against `calibft.pipeline.memory`'s estimate of the same batches on the meta device "
        "(tensors only, weights included):",
        "",
        "| model | " + " | ".join(f"{name}: measured / estimated" for name, _, _ in parts) + " |",
        "| --- |" + " ---: |" * len(parts),
    ]
    for m in report["models"]:
        if "skipped" not in m:
            estimated = m["estimated_peak_gb"]
            cells = [
                f"{_cell(m[part], key, ' GB')} / {estimated[f'{name}_peak_gb']:.2f} GB" for name, part, key in parts
            ]
            lines.append(f"| {m['model']} | " + " | ".join(cells) + " |")
    consistency = report["consistency"]
    lines += [
        "",
        f"Consistency, {consistency['compared']}: logits of {consistency['positions']} prompt positions, "
        f"{consistency['answers']} answers of the engine under one seed. The engine draws with a `torch.Generator` "
        "on the model's device, so answers agree across devices only by chance; on one device, where the two "
        "dtypes' probabilities agree. The same seed twice on one device must give the same answers.",
        "",
        "| tested | against | logits rel. RMS difference | tolerance | within | top-1 agreement "
        "| identical answers | identical first tokens | same seed twice (tested) |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for c in consistency["comparisons"]:
        lines.append(
            f"| {c['tested']} | {c['against']} | {c['logits_relative_rms_difference']:.2e} | {c['tolerance']:.2e} "
            f"| {'yes' if c['within_tolerance'] else 'NO'} | {c['top1_agreement']:.3f} | {c['identical_answers']:.2f} "
            f"| {c['identical_first_tokens']:.2f} | {c['repeat_identical_answers']:.2f} |"
        )
    reasons = {c["tolerance"]: c["tolerance_reason"] for c in consistency["comparisons"]}
    lines += [""] + [f"- tolerance {tolerance:.2e}: {reason}." for tolerance, reason in reasons.items()]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: Path) -> None:
    """gpu_check.json and gpu_check.md in `out`, each written to a temporary file there and renamed onto its name."""
    write_json(out / "gpu_check.json", report)
    with atomic_path(out / "gpu_check.md") as tmp:
        tmp.write_text(markdown(report))
