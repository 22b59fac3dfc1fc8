"""Digests of the data layer as this process computes it, for tests/test_cpu.py to compare across CPU feature sets.

    python tests/data_layer_digest.py   (prints one JSON object)

The prompts of every split; the output spaces of the soft training space and of the evaluation space; their
tries for the demo model's tokenizer, and values drawn from them as training draws its paths; the metrics of
answers drawn from the evaluation spaces; the tiny model's answers; and the kernels this process runs, with
`numpy.geomspace` of the grid's geometric axes.
"""

# calibft first: importing it turns numpy's AVX-512 kernels off before numpy is imported
import calibft  # noqa: F401, I001

import hashlib
import json

import numpy as np

from calibft.core.cpu import kernels
from calibft.evals.structured.metrics import sample_records, score
from calibft.data.grid import GEOMSPACE, prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.demo.tiny_model import TinyModelSettings, train_tokenizer, training_chats
from calibft.data.trie import trie_set_for_spaces

SPACES = {
    "train_d5_b1001": ("train", 5, 1001),
    "unseen_d5_b16384": ("unseen", 5, 16384),
    "ood_d5_b16384": ("ood", 5, 16384),
}
SHAPE = ("node_offsets", "node_parent", "node_token", "child_start", "child_count", "value_leaf", "value_length")


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for array in arrays:
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def metrics_of_draws(split_prompts, spaces: SpaceSet) -> dict:
    """metrics.json of 200 answers per prompt drawn from its output space (W1 evaluates the law's CDF)."""
    rng = np.random.default_rng(11)
    records = []
    for i, prompt in enumerate(split_prompts):
        values = spaces.space(i).strings()
        texts = [values[j] for j in spaces.sample_values(np.full(200, i), rng)]
        records += sample_records(prompt, texts, np.ones(len(texts), dtype=bool), pattern=None)
    return score(split_prompts, records)


def main() -> None:
    out: dict = {
        **kernels(),
        "geomspace": {repr(key): np.geomspace(*key).tolist() for key in GEOMSPACE},
    }
    for split in ("train", "unseen", "ood"):
        out[f"prompts/{split}"] = hashlib.sha256("\n".join(p.prompt for p in prompts(split)).encode()).hexdigest()
    chats = training_chats()
    out["tiny_model/answers"] = hashlib.sha256("\n".join(chat.answer for chat in chats).encode()).hexdigest()
    settings = TinyModelSettings()
    tokenizer = train_tokenizer(chats, settings.vocab_size, settings.max_position_embeddings)
    for name, (split, decimals, max_bins) in SPACES.items():
        split_prompts = prompts(split)
        spaces = SpaceSet.from_spaces(
            [p.id for p in split_prompts], spaces_for_prompts(split_prompts, decimals, max_bins), decimals=decimals
        )
        out[f"spaces/{name}/values"] = digest(spaces.values, spaces.offsets)
        out[f"spaces/{name}/probs"] = digest(spaces.probs)
        tries = trie_set_for_spaces(tokenizer, spaces)
        out[f"tries/{name}"] = digest(*(getattr(tries, name) for name in SHAPE))
        out[f"tries/{name}/probs"] = digest(tries.node_mass, tries.value_probs)
        draws = tries.sample_values(np.repeat(np.arange(len(tries)), 16), np.random.default_rng(11))
        out[f"tries/{name}/draws"] = digest(draws)
        if split != "train":
            out[f"metrics/{split}"] = hashlib.sha256(
                json.dumps(metrics_of_draws(split_prompts, spaces)).encode()
            ).hexdigest()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
