"""Carry a file over a per-transfer size limit: split it into parts, each under the limit, with a
manifest of sizes and sha256; join them on the other side, every part and the whole verified.

    python3 tools/parts.py split FILE DIR [--limit-mib 60]   # DIR: FILE's parts and NAME.parts.json
    python3 tools/parts.py join STORE [--from DIR] [--out FILE]

`join` first copies into STORE the verified parts (and the manifest) found in --from, keeping those
STORE already holds and verifies; with every part there it writes the whole file (default STORE/NAME),
checks its sha256 and exits 0. Run it once per transfer, each carrying the manifest and some parts:
it says which parts it holds and which are still to come (exit 1 until the last one came). A part whose
hash is not the manifest's is refused, named, and deleted from STORE. Both commands are idempotent:
parts and a joined file already present and verified are kept. Python's standard library only: it runs
on a bare host. The recipe for the real model: docs/gpu-results.md, "Carrying the real model to a GPU host".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
DEFAULT_LIMIT_MIB = 60
MANIFEST_SUFFIX = ".parts.json"
CHUNK = 4 * MIB


class PartsError(Exception):
    """What is wrong with the parts, and what to do; the command prints it and exits 1 (2: bad usage)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Part:
    file: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    name: str
    size: int
    sha256: str
    limit: int
    parts: tuple[Part, ...]

    @classmethod
    def read(cls, path: Path) -> Manifest:
        try:
            data = json.loads(path.read_text())
            return cls(
                data["name"],
                data["size"],
                data["sha256"],
                data["limit"],
                tuple(Part(**p) for p in data["parts"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PartsError(
                f"{path}: not a parts manifest ({exc}); split the file again with `split`"
            ) from None

    def write(self, path: Path) -> None:
        data = {
            "name": self.name, "size": self.size, "sha256": self.sha256, "limit": self.limit,
            "parts": [vars(p) for p in self.parts],
        }  # fmt: skip
        _atomic_write(path, json.dumps(data, indent=1).encode())

    def words(self, part: Part) -> str:
        index = self.parts.index(part) + 1
        return f"part {index} of {len(self.parts)} ({part.file}, {part.size:,} bytes)"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    part = path.with_name(path.name + ".tmp")
    part.write_bytes(data)
    part.replace(path)


def _atomic_copy(src: Path, dst: Path) -> None:
    """Copy under a temporary name, then rename: a copy cut short never looks like a part."""
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


def manifest_path(folder: Path, name: str) -> Path:
    return folder / f"{name}{MANIFEST_SUFFIX}"


def _verified(path: Path, part: Part) -> bool:
    return path.is_file() and path.stat().st_size == part.size and sha256_of(path) == part.sha256


def split(file: Path, folder: Path, limit_mib: float = DEFAULT_LIMIT_MIB) -> Manifest:
    """file's parts (each at most limit_mib MiB) and its manifest in folder; parts already there and
    verified against a manifest of the same file and limit are kept."""
    if not file.is_file():
        raise PartsError(f"{file}: no such file; give the file to split", code=2)
    limit = int(limit_mib * MIB)
    if limit < 1:
        raise PartsError(
            f"--limit-mib {limit_mib:g}: must be above 0; give the transfer limit, e.g. 60", code=2
        )
    folder.mkdir(parents=True, exist_ok=True)
    size, whole = file.stat().st_size, sha256_of(file)
    count = max(1, -(-size // limit))
    names = [f"{file.name}.part{i:03d}" for i in range(1, count + 1)]
    old = manifest_path(folder, file.name)
    if old.is_file():
        kept = Manifest.read(old)
        if (kept.sha256, kept.limit) == (whole, limit) and all(
            _verified(folder / p.file, p) for p in kept.parts
        ):
            return kept
    for stale in folder.glob(f"{file.name}.part[0-9][0-9][0-9]"):
        if stale.name not in names:
            stale.unlink()  # an earlier split's part past this one's count: never carried by mistake
    parts = []
    with file.open("rb") as f:
        for name in names:
            data = f.read(limit)
            _atomic_write(folder / name, data)
            parts.append(Part(name, len(data), hashlib.sha256(data).hexdigest()))
    manifest = Manifest(file.name, size, whole, limit, tuple(parts))
    manifest.write(old)
    return manifest


def _find_manifest(store: Path, source: Path | None) -> Path:
    found = [
        p
        for folder in (source, store)
        if folder is not None
        for p in sorted(folder.glob(f"*{MANIFEST_SUFFIX}"))
    ]
    names = sorted({p.name for p in found})
    if not found:
        where = f"{source} nor {store}" if source is not None else str(store)
        raise PartsError(
            f"no parts manifest (*{MANIFEST_SUFFIX}) in {where}; carry it with the parts (`split` wrote it "
            "beside them)"
        )
    if len(names) > 1:
        raise PartsError(
            f"{len(names)} manifests ({', '.join(names)}); keep one file's parts per folder", code=2
        )
    return found[0]


def join(store: Path, source: Path | None = None, out: Path | None = None) -> tuple[Path, list[str]]:
    """(the joined file, what was done): the parts of source copied into store where verified, then
    the whole written and verified once every part is there. PartsError when a part is missing or
    corrupt, naming it and what to do."""
    if source is not None and not source.is_dir():
        raise PartsError(f"--from {source}: no such folder; give the folder the parts came in", code=2)
    store.mkdir(parents=True, exist_ok=True)
    found = _find_manifest(store, source)
    manifest = Manifest.read(found)
    target = out or store / manifest.name
    done: list[str] = []
    if target.is_file() and target.stat().st_size == manifest.size and sha256_of(target) == manifest.sha256:
        return target, [f"{target}: already joined and verified (sha256 {manifest.sha256[:12]}...)"]
    if found.parent != store:
        _atomic_copy(found, manifest_path(store, manifest.name))
    corrupt, missing = [], []
    for part in manifest.parts:
        kept = store / part.file
        if _verified(kept, part):
            done.append(f"{manifest.words(part)}: here, verified")
            continue
        if kept.exists():
            kept.unlink()
            corrupt.append(
                f"{manifest.words(part)} in {store} was not the manifest's (size or sha256); deleted"
            )
        came = source / part.file if source is not None else None
        if came is not None and came.exists():
            if _verified(came, part):
                _atomic_copy(came, kept)
                done.append(f"{manifest.words(part)}: copied from {source}, verified")
                continue
            got = came.stat().st_size
            corrupt.append(
                f"{manifest.words(part)} in {source} is corrupt: {got:,} bytes, sha256 {sha256_of(came)[:12]}..., "
                f"the manifest's {part.sha256[:12]}...; not kept"
            )
        missing.append(part)
    if corrupt or missing:
        lines = [*done, *corrupt]
        if missing:
            lines.append(
                f"missing {len(missing)} of {len(manifest.parts)}: "
                + ", ".join(manifest.words(p) for p in missing)
            )
        lines.append(
            f"carry {'it' if len(missing) == 1 else 'them'} (with {found.name}) and run join again; a store that "
            "was lost (a machine that went cold starts bare) needs every part again"
        )
        raise PartsError("\n".join(lines))
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("wb") as whole:
        for part in manifest.parts:
            with (store / part.file).open("rb") as f:
                shutil.copyfileobj(f, whole, CHUNK)
    if tmp.stat().st_size != manifest.size or sha256_of(tmp) != manifest.sha256:
        tmp.unlink()
        raise PartsError(
            f"{manifest.name}: the joined parts are not the file the manifest names; split it again"
        )
    tmp.replace(target)
    done.append(f"{target}: joined {len(manifest.parts)} part(s), {manifest.size:,} bytes, sha256 verified")
    return target, done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split", help="FILE's parts and manifest into DIR")
    s.add_argument("file", type=Path)
    s.add_argument("dir", type=Path)
    s.add_argument(
        "--limit-mib", type=float, default=DEFAULT_LIMIT_MIB, help="largest part, MiB (default 60)"
    )
    j = sub.add_parser("join", help="gather verified parts into STORE; write the whole once all are there")
    j.add_argument("store", type=Path, help="where the parts collect over transfers (e.g. under /tmp)")
    j.add_argument("--from", dest="source", type=Path, help="the folder this transfer's parts came in")
    j.add_argument("--out", type=Path, help="the joined file (default STORE/NAME)")
    args = parser.parse_args(argv)
    try:
        if args.command == "split":
            m = split(args.file, args.dir, args.limit_mib)
            for part in m.parts:
                print(f"{args.dir / part.file}: {part.size / MIB:.2f} MiB, sha256 {part.sha256}")
            print(
                f"{manifest_path(args.dir, m.name)}: {len(m.parts)} part(s) of {m.name} ({m.size / MIB:.2f} MiB)"
            )
        else:
            _, lines = join(args.store, args.source, args.out)
            print("\n".join(lines))
    except PartsError as exc:
        print(f"parts: {exc}", file=sys.stderr)
        return exc.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
