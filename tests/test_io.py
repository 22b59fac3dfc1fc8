import json
import os
import stat

import numpy as np
import pytest

from calibft.core.io import atomic_folder, atomic_path, load_npz, read_jsonl, save_npz, write_jsonl


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.jsonl"
    write_jsonl(target, [{"a": 1}])
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half written")
        raise RuntimeError("job killed")
    assert read_jsonl(target) == [{"a": 1}]  # the old output is intact
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary file left behind


def test_written_files_follow_the_umask_not_mkstemp(tmp_path):
    old = os.umask(0o022)
    try:
        write_jsonl(tmp_path / "x.jsonl", [])
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "x.jsonl").stat().st_mode) == 0o644


def test_an_atomic_folder_replaces_the_old_one_only_when_complete(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_folder(target) as building:
        (building / "new.txt").write_text("half")
        raise RuntimeError("interrupted")
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and (target / "old.txt").exists()
    old = os.umask(0o022)
    try:
        with atomic_folder(target) as building:
            (building / "new.txt").write_text("new")
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # nothing left beside it
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o755  # shared like any folder, not private as mkdtemp makes it


def test_npz_round_trip_with_metadata(tmp_path):
    save_npz(tmp_path / "a.npz", {"x": np.arange(3)}, {"decimals": 5, "tokenizer": "t"})
    arrays, metadata = load_npz(tmp_path / "a.npz")
    assert arrays["x"].tolist() == [0, 1, 2] and metadata == {"decimals": 5, "tokenizer": "t"}


def test_gzipped_jsonl_round_trip_gives_the_same_bytes_for_the_same_records(tmp_path):
    import gzip

    records = [{"id": "poisson-001", "index": i, "text": "3", "value": 3.0, "valid": True} for i in range(3)]
    write_jsonl(tmp_path / "a.jsonl.gz", records)
    write_jsonl(tmp_path / "b.jsonl.gz", records)
    assert read_jsonl(tmp_path / "a.jsonl.gz") == records
    assert gzip.decompress((tmp_path / "a.jsonl.gz").read_bytes()).count(b"\n") == 3
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_read_runs_nests_by_model_then_condition(tmp_path):
    from calibft.core.io import read_runs

    paths = []
    for model, cond in [("m1", "base"), ("m1", "soft"), ("m2", "base")]:
        path = tmp_path / f"{model}_{cond}.json"
        path.write_text(json.dumps({"who": f"{model}/{cond}"}))
        paths.append(path)
    runs = read_runs(paths, [["m1", "base"], ["m1", "soft"], ["m2", "base"]])
    assert list(runs) == ["m1", "m2"] and list(runs["m1"]) == ["base", "soft"]
    assert runs["m1"]["soft"] == {"who": "m1/soft"} and runs["m2"]["base"] == {"who": "m2/base"}
    with pytest.raises(ValueError):
        read_runs(paths, [["m1", "base"]])  # a path without its run
