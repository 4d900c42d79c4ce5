"""tools/parts.py: a file over a transfer limit split into parts under it, carried a part at a time and
joined on the other side, every part and the whole verified; a missing or corrupt part named with the
fix; both commands idempotent. (The real model's rehearsal: docs/gpu-results.md.)"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tools.parts import MANIFEST_SUFFIX, MIB, PartsError, join, main, split

LIMIT_MIB = 1000 / MIB  # parts of at most 1,000 bytes


@pytest.fixture
def original(tmp_path) -> Path:
    path = tmp_path / "model.whl"
    path.write_bytes(os.urandom(3500))
    return path


def _carry(parts_dir: Path, names: list[str], call: Path) -> Path:
    """One transfer: the manifest and the named parts, nothing else."""
    call.mkdir()
    for name in [*names, *(p.name for p in parts_dir.glob(f"*{MANIFEST_SUFFIX}"))]:
        shutil.copy(parts_dir / name, call / name)
    return call


def test_a_file_is_split_into_parts_under_the_limit_with_their_sizes_and_hashes(original, tmp_path):
    manifest = split(original, tmp_path / "parts", LIMIT_MIB)
    assert [p.size for p in manifest.parts] == [1000, 1000, 1000, 500]
    for part in manifest.parts:
        data = (tmp_path / "parts" / part.file).read_bytes()
        assert len(data) <= 1000 and hashlib.sha256(data).hexdigest() == part.sha256
    saved = json.loads((tmp_path / "parts" / f"model.whl{MANIFEST_SUFFIX}").read_text())
    assert saved["sha256"] == hashlib.sha256(original.read_bytes()).hexdigest()
    assert saved["size"] == 3500 and len(saved["parts"]) == 4


def test_parts_carried_one_transfer_at_a_time_join_into_the_same_file(original, tmp_path):
    manifest = split(original, tmp_path / "parts", LIMIT_MIB)
    store = tmp_path / "store"
    for i, part in enumerate(manifest.parts):
        call = _carry(tmp_path / "parts", [part.file], tmp_path / f"call{i}")
        if i < len(manifest.parts) - 1:
            with pytest.raises(PartsError) as waiting:
                join(store, call)
            assert f"missing {len(manifest.parts) - i - 1} of 4" in str(waiting.value)
        else:
            joined, said = join(store, call)
    assert joined.read_bytes() == original.read_bytes()
    assert said[-1].endswith("joined 4 part(s), 3,500 bytes, sha256 verified")


def test_a_missing_part_is_named_with_what_to_carry(original, tmp_path):
    manifest = split(original, tmp_path / "parts", LIMIT_MIB)
    call = _carry(
        tmp_path / "parts", [p.file for p in manifest.parts if not p.file.endswith("3")], tmp_path / "c"
    )
    with pytest.raises(PartsError) as caught:
        join(tmp_path / "store", call)
    text = str(caught.value)
    assert "missing 1 of 4: part 3 of 4 (model.whl.part003, 1,000 bytes)" in text
    assert "carry it (with model.whl.parts.json) and run join again" in text
    assert not (tmp_path / "store" / "model.whl").exists()


def test_a_corrupt_part_is_refused_named_and_not_kept(original, tmp_path):
    manifest = split(original, tmp_path / "parts", LIMIT_MIB)
    call = _carry(tmp_path / "parts", [p.file for p in manifest.parts], tmp_path / "c")
    data = bytearray((call / "model.whl.part002").read_bytes())
    data[10] ^= 0xFF
    (call / "model.whl.part002").write_bytes(bytes(data))
    with pytest.raises(PartsError) as caught:
        join(tmp_path / "store", call)
    text = str(caught.value)
    assert f"part 2 of 4 (model.whl.part002, 1,000 bytes) in {call} is corrupt" in text
    assert f"the manifest's {manifest.parts[1].sha256[:12]}...; not kept" in text
    assert not (tmp_path / "store" / "model.whl.part002").exists()


def test_a_part_damaged_in_the_store_is_deleted_and_asked_for_again(original, tmp_path):
    manifest = split(original, tmp_path / "parts", LIMIT_MIB)
    store = tmp_path / "store"
    with pytest.raises(PartsError):  # three of four parts gathered
        join(store, _carry(tmp_path / "parts", [p.file for p in manifest.parts[:3]], tmp_path / "c1"))
    (store / "model.whl.part001").write_bytes(b"truncated")
    with pytest.raises(PartsError) as caught:
        join(store, _carry(tmp_path / "parts", [manifest.parts[3].file], tmp_path / "c2"))
    text = str(caught.value)
    assert f"part 1 of 4 (model.whl.part001, 1,000 bytes) in {store} was not the manifest's" in text
    assert "missing 1 of 4: part 1 of 4" in text


def test_join_again_keeps_the_verified_file_and_split_again_keeps_the_verified_parts(original, tmp_path):
    manifest = split(original, tmp_path / "parts", LIMIT_MIB)
    before = {p.file: (tmp_path / "parts" / p.file).stat().st_mtime_ns for p in manifest.parts}
    assert split(original, tmp_path / "parts", LIMIT_MIB) == manifest
    assert before == {p.file: (tmp_path / "parts" / p.file).stat().st_mtime_ns for p in manifest.parts}
    call = _carry(tmp_path / "parts", [p.file for p in manifest.parts], tmp_path / "c")
    joined, _ = join(tmp_path / "store", call)
    _, said = join(tmp_path / "store", call)
    assert said == [f"{joined}: already joined and verified (sha256 {manifest.sha256[:12]}...)"]


def test_a_new_split_of_fewer_parts_leaves_no_stale_part_behind(original, tmp_path):
    split(original, tmp_path / "parts", LIMIT_MIB)
    manifest = split(original, tmp_path / "parts", 2000 / MIB)
    left = sorted(p.name for p in (tmp_path / "parts").iterdir())
    assert left == ["model.whl.part001", "model.whl.part002", f"model.whl{MANIFEST_SUFFIX}"]
    assert [p.size for p in manifest.parts] == [2000, 1500]


def test_the_commands_print_the_parts_and_refuse_a_carry_without_its_manifest(original, tmp_path, capsys):
    assert main(["split", str(original), str(tmp_path / "parts"), "--limit-mib", str(LIMIT_MIB)]) == 0
    said = capsys.readouterr().out
    assert said.count(" MiB, sha256 ") == 4 and "4 part(s) of model.whl" in said
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(tmp_path / "parts" / "model.whl.part001", bare)
    assert main(["join", str(tmp_path / "store"), "--from", str(bare)]) == 1
    assert "no parts manifest (*.parts.json)" in capsys.readouterr().err
    assert main(["split", str(tmp_path / "nothing"), str(tmp_path / "p2")]) == 2
    assert "no such file" in capsys.readouterr().err
