"""The String Seed of Thought baseline as the authors' release runs it on the structured benchmark (protocol
switch `ssot_prompt: release`): their system prompts and their answer extraction.

The prompts are the authors' text, not this project's: rule `ssot_prompts` downloads their
`inference/ssot_prompts.py` at the pinned commit (`calibft.pipeline.assets.SSOT_PROMPTS`), and `read_prompts` takes
its module-level string assignments without running the file. The offline demo reads
`profiles/demo/fixtures/ssot/ssot_prompts.py`, which has the same names in the project's own words.

What the release keys on (`inference/ssot_adapters.py`): a model family inferred from the checkpoint name
(qwen3, gpt_oss, llama, gemma, default). For the structured benchmark (mode `pif_numeric`) only GPT-OSS
differs: it gets `_GPT_OSS_PIF_DEVELOPER_PROMPT` as a developer message and extra extraction rules; every
other family gets `_PIF_SYSTEM_PROMPT` as a system message. Here that is data a model's config entry can
carry (`STYLES`, a `ReleaseStyle` per kind: the prompt's name, the role, GPT-OSS's extraction), so no code
looks at model names. GPT-OSS's chat template renders a first message of role `system` or `developer` alike,
as its developer message, so passing the developer prompt as the system message gives the same prompt.

The release's other per-family settings, which stay in the models' `ssot_chat`: Qwen3 samples with thinking
on (its `<think>` blocks removed before extraction), GPT-OSS without the `<|channel|>final<|message|>`
generation prefix (it reasons in its analysis channel first).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# The release's prompts for the structured benchmark (SSOTMode.PIF_NUMERIC in calibrate_sft/eval.py); the
# open-ended benchmark's (DAG_OPEN_RANDOM) are `_DAG_SYSTEM_PROMPT` and `_GPT_OSS_DAG_DEVELOPER_PROMPT`.
STRUCTURED_PROMPT = "_PIF_SYSTEM_PROMPT"
GPT_OSS_STRUCTURED_PROMPT = "_GPT_OSS_PIF_DEVELOPER_PROMPT"
ROLES = ("system", "developer")


@dataclass(frozen=True)
class ReleaseStyle:
    """How the release runs SSOT for one kind of model on the structured benchmark."""

    prompt: str  # a name in ssot_prompts.py
    role: str  # the message role the release gives it: "system" or "developer"
    gpt_oss_output: bool  # `extract_answer`'s GPT-OSS rules

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")


# The release's adapters reduced to what the structured benchmark uses: "default" stands for its qwen3,
# llama, gemma and default families, which differ only in chat options (Qwen3's thinking).
STYLES = {
    "default": ReleaseStyle(prompt=STRUCTURED_PROMPT, role="system", gpt_oss_output=False),
    "gpt_oss": ReleaseStyle(prompt=GPT_OSS_STRUCTURED_PROMPT, role="developer", gpt_oss_output=True),
}

_STRIPS = ("strip", "lstrip", "rstrip")  # `"""...""".strip()`: the release's form, applied here without arguments
_ANNOTATION_MODULES = ("__future__", "typing")  # imports the release's file has; they define no strings


def read_prompts(path: str | os.PathLike) -> dict[str, str]:
    """The module-level string assignments of a prompt file, by name, read with `ast` and never executed.

    Taken: `NAME = <string>` (or `NAME: str = <string>`) where <string> is a string literal, implicitly
    concatenated or parenthesized literals, or such a string with `.strip()`, `.lstrip()` or `.rstrip()`
    called without arguments (applied here). Skipped, since they define no string: a module docstring,
    imports from `__future__` and `typing`, and function definitions (never run; the release's file has its
    `build_system_prompt`). Anything else raises ValueError naming the line: any other import or statement,
    an f-string, a call, a name, an operator or a non-string value, a target that is not a single name, a name
    assigned twice, and a file without any string.
    """
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as err:
        raise ValueError(f"{path} is not valid Python: {err}") from err
    prompts: dict[str, str] = {}
    for i, node in enumerate(tree.body):
        where = f"{path}:{node.lineno}"
        if i == 0 and isinstance(node, ast.Expr) and _is_str(node.value):
            continue  # the module docstring
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in _ANNOTATION_MODULES:
            continue
        if isinstance(node, ast.FunctionDef):
            if node.name in prompts:
                raise ValueError(f"{where}: function {node.name!r} redefines a prompt")
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign):
            name, value = _assignment(node, where)
            if name in prompts:
                raise ValueError(f"{where}: {name!r} is assigned a second time")
            prompts[name] = _string(value, f"{where}: {name!r}")
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            raise ValueError(
                f"{where}: an import ({ast.unparse(node)!r}); a prompt file may only import from "
                f"{' or '.join(_ANNOTATION_MODULES)}"
            )
        raise ValueError(f"{where}: a {type(node).__name__} statement; a prompt file holds string assignments only")
    if not prompts:
        raise ValueError(f"{path} assigns no strings")
    return prompts


def _assignment(node: ast.Assign | ast.AnnAssign, where: str) -> tuple[str, ast.expr]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        raise ValueError(
            f"{where}: an assignment to {', '.join(ast.unparse(t) for t in targets)}; only NAME = <string>"
        )
    name = targets[0].id
    if node.value is None:
        raise ValueError(f"{where}: {name!r} is annotated without a value")
    return name, node.value


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _string(node: ast.expr, what: str) -> str:
    """The string an expression stands for, if it is a literal or a literal's argument-less strip."""
    if _is_str(node):  # implicit concatenation and parentheses are folded into one constant by the parser
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _STRIPS
        and not node.args
        and not node.keywords
    ):
        return getattr(_string(node.func.value, what), node.func.attr)()
    if isinstance(node, ast.JoinedStr):
        kind = "an f-string"
    elif isinstance(node, ast.Constant):
        kind = f"a {type(node.value).__name__} constant"
    else:
        kind = f"a {type(node).__name__} expression ({ast.unparse(node)[:60]!r})"
    raise ValueError(f"{what} is {kind}, not a string literal; the file is read, not run")


def system_message(prompts: Mapping[str, str], name: str) -> str:
    """The message the release puts first for the structured benchmark: `prompts[name]`, where `name` is
    a model's `ReleaseStyle.prompt` (`STRUCTURED_PROMPT`, or `GPT_OSS_STRUCTURED_PROMPT` for GPT-OSS).

    Raises ValueError naming the prompts there are when `name` is not one of them.
    """
    if name not in prompts:
        raise ValueError(f"no SSOT prompt {name!r}; the prompt file has {', '.join(sorted(prompts)) or 'none'}")
    return prompts[name]


_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)
_GPT_OSS_CHANNEL_BEFORE_TAG = re.compile(r"assistant(?:final|commentary)\s*(?=<)", re.IGNORECASE)
_GPT_OSS_ANSWER_OPEN = re.compile(r"assistantanswer>", re.IGNORECASE)
_GPT_OSS_INLINE = (
    re.compile(r"assistantanswer\s*([^\n<][^\n<]*)", re.IGNORECASE),
    re.compile(r"assistantfinal\s*([^\n<][^\n<]*)", re.IGNORECASE),
)


def extract_answer(text: str, *, gpt_oss: bool = False) -> str | None:
    """The answer in an SSOT output by the release's rule (inference/ssot.py, strict extraction as its
    `inference_method: ssot` config sets it); None where it finds none.

    `text` is what the release extracts from: the output decoded with special tokens skipped (so GPT-OSS's
    channels read `analysis...assistantfinal...`), Qwen3's `<think>` blocks removed, trimmed.

    - The first `<answer>...</answer>` pair, tags in any case, up to the first closing tag after the first
      opening one (several answers: the first; a second `<answer>` before that closing tag is part of the
      answer), its content trimmed of whitespace; an empty pair gives "".
    - An opening tag without a closing one is no answer (the release reads it only in its non-strict mode).
    - `gpt_oss` (the release's GPT-OSS adapter), before the above: `assistantfinal` or `assistantcommentary`
      right before a `<` is removed and `assistantanswer>` becomes `<answer>`, so tags in the final channel
      are found. Without a pair: the rest of the line after `assistantanswer`, else after `assistantfinal`
      (the first such, trimmed); else the whole text, if it is one line without `<` and without
      "assistant" in any case (a bare final answer).

    Departure: the release returns "" both for no answer and for an empty one; here no answer is None.
    """
    if gpt_oss:
        text = _GPT_OSS_ANSWER_OPEN.sub("<answer>", _GPT_OSS_CHANNEL_BEFORE_TAG.sub("", text))
    match = _ANSWER.search(text)
    if match:
        return match.group(1).strip()
    if not gpt_oss:
        return None
    for pattern in _GPT_OSS_INLINE:
        match = pattern.search(text)
        if match:
            return match.group(1).strip()
    bare = text.strip()
    if bare and "\n" not in bare and "<" not in bare and "assistant" not in bare.lower():
        return bare
    return None
