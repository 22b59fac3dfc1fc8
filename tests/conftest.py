# calibft first: importing it turns numpy's AVX-512 kernels off before numpy is imported (calibft.core.cpu), so the
# tests, and the workflows they run, compute with the kernels of every x86-64 CPU
import calibft  # noqa: F401, I001

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, trainers
from transformers import PreTrainedTokenizerFast

from calibft.data.grid import prompts
from calibft.data.output_space import build_output_space


def _number_corpus() -> list[str]:
    """Canonical strings of a spread of prompts: what a tokenizer of numbers should learn merges from."""
    corpus = []
    for p in prompts("train")[::97]:
        corpus += build_output_space(p.family, p.params, 3, 300).strings()
    return corpus


def make_bpe_tokenizer(eos: str | None = "</s>", vocab_size: int = 120) -> PreTrainedTokenizerFast:
    """A BPE tokenizer whose merges join digits, so canonical strings take 1 to 8 tokens of varied shapes."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    specials = ["<unk>"] + ([eos] if eos else [])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(_number_corpus(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=eos, unk_token="<unk>")


@pytest.fixture(scope="session")
def fsdp_env() -> dict[str, str]:
    """launch/fsdp.yaml's FSDP settings as its launcher hands them (tests/fsdp_policy.py)."""
    from tests.fsdp_policy import launcher_fsdp_env

    env = launcher_fsdp_env()
    assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP" and "FSDP_TRANSFORMER_CLS_TO_WRAP" not in env
    return env


@pytest.fixture(scope="session")
def bpe_tokenizer() -> PreTrainedTokenizerFast:
    return make_bpe_tokenizer()


@pytest.fixture(scope="session")
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The demo model's tokenizer: byte-level BPE with single digits, EOS `<|im_end|>`, as Qwen3's."""
    from calibft.demo.tiny_model import TinyModelSettings, train_tokenizer, training_chats

    settings = TinyModelSettings()
    return train_tokenizer(training_chats(), settings.vocab_size, settings.max_position_embeddings)


@pytest.fixture(scope="session")
def briefly_trained_model(tmp_path_factory) -> Path:
    """A tiny model after 30 training steps (a few seconds): varied answers for the evaluation tests, read only."""
    from calibft.demo.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("briefly_trained") / "tiny", train_steps=30)


def assert_saved_as_dequantized(folder: Path, gguf_file: Path, names: dict[str, str]) -> None:
    """The weights saved in `folder` are the `gguf` package's own dequantization of the file's tensors, exactly:
    `names` maps a GGUF tensor to its name in the folder's model.safetensors."""
    import gguf
    from safetensors import safe_open

    tensors = {t.name: t for t in gguf.GGUFReader(str(gguf_file)).tensors}
    with safe_open(str(folder / "model.safetensors"), "np") as saved:
        for name, saved_name in names.items():
            expected = gguf.quants.dequantize(tensors[name].data, tensors[name].tensor_type)
            assert np.array_equal(saved.get_tensor(saved_name), expected.astype(np.float32)), name


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# The modules that read the demo's run (tests/workflow/conftest.py), which one xdist worker makes once.
DEMO_MODULES = ("tests/workflow/test_demo.py", "tests/workflow/test_slurm.py")


def pytest_xdist_make_scheduler(config, log):
    """xdist's `--dist loadfile` (a worker per module), with the modules of the demo's run as one, handed out
    first: the longest unit, mostly waiting on its jobs, overlaps the rest of the session."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class DemoTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return DEMO_MODULES[0] if scope in DEMO_MODULES else scope

        def _assign_work_unit(self, node) -> None:
            if DEMO_MODULES[0] in self.workqueue:
                self.workqueue.move_to_end(DEMO_MODULES[0], last=False)
            super()._assign_work_unit(node)

    return DemoTogether(config, log)
