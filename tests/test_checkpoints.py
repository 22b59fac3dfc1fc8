import os
from dataclasses import dataclass

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, folder_fingerprint, per_prompt


@dataclass(frozen=True)
class Job:
    model: str
    checkpoint_dir: str | None
    seed: int = 1


def test_checkpoints_are_kept_only_for_the_same_job_and_model_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"1234")
    job = Job(str(model), str(tmp_path / "ckpt"))
    folder = checkpoint_folder(job)
    per_prompt(folder, "a", lambda: [{"x": 1}])
    assert per_prompt(checkpoint_folder(job), "a", lambda: [{"x": 2}]) == [{"x": 1}]  # resumed
    assert per_prompt(checkpoint_folder(Job(str(model), job.checkpoint_dir, seed=2)), "a", lambda: [{"x": 3}]) == [
        {"x": 3}
    ]  # other settings: started afresh
    stat = (model / "weights.bin").stat()
    os.utime(model / "weights.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the model was rebuilt
    assert per_prompt(checkpoint_folder(Job(str(model), job.checkpoint_dir, seed=2)), "a", lambda: [{"x": 4}]) == [
        {"x": 4}
    ]
    finish_checkpoints(folder)
    assert not folder.exists()


def test_an_unstamped_checkpoint_folder_is_not_trusted(tmp_path):
    stale = tmp_path / "ckpt"
    stale.mkdir()
    (stale / "progress.json").write_text('{"step": 747}')  # left by code that did not stamp its folders
    folder = checkpoint_folder(Job("Qwen/Qwen3-8B", str(stale)))
    assert sorted(p.name for p in folder.iterdir()) == ["job.json"]


def test_folder_fingerprint_covers_local_folders_only(tmp_path):
    assert folder_fingerprint(None) is None and folder_fingerprint("Qwen/Qwen3-8B") is None
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.json").write_text("{}")
    [[name, size, _]] = folder_fingerprint(str(tmp_path))
    assert name == os.path.join("sub", "a.json") and size == 2
    assert checkpoint_folder(Job("m", None)) is None
