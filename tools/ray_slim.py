"""Repack Ray's wheel small enough for one transfer to an offline GPU host.

    python3 tools/ray_slim.py RAY_WHEEL OUT_DIR [--no-strip]

Leaves out what `rlsweep run` (Ray core, Ray Tune, the Jobs API's dashboard server) never reads: ray/jars
(the Java worker), ray/dashboard/client/build (the dashboard's web app; its Python server stays),
ray/rllib, ray/serve, ray/llm and every *.js.map; and strips the symbols of every ELF file (raylet,
gcs_server, _raylet.so, ...) with `strip --strip-unneeded`. The file name, version and metadata are
unchanged; RECORD is rewritten with each kept file's sha256 and size, so the result is a valid wheel
that pip installs like the original. tools/wheelhouse.sh (RAY=1) calls it; docs/offline.md has the recipe.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

# What Ray's wheel holds that `rlsweep run` never imports or serves.
RAY_DROP_PREFIXES = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/serve/", "ray/llm/")
RAY_DROP_SUFFIXES = (".js.map",)
ELF_MAGIC = b"\x7fELF"
MIB = 1 << 20


def ray_drop(name: str) -> bool:
    """True for a file of Ray's wheel that the slim wheel leaves out."""
    return name.startswith(RAY_DROP_PREFIXES) or name.endswith(RAY_DROP_SUFFIXES)


def is_record(name: str) -> bool:
    """The wheel's own RECORD (NAME-VERSION.dist-info/RECORD at its top), not a vendored package's."""
    return name.count("/") == 1 and name.endswith(".dist-info/RECORD")


def record_hash(data: bytes) -> str:
    """A RECORD entry's hash: sha256, urlsafe base64 without padding (the wheel spec's form)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def stripped(data: bytes, strip: str) -> bytes:
    """An ELF file's bytes without the symbols it does not need to run (`strip --strip-unneeded`)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "elf"
        path.write_bytes(data)
        subprocess.run([strip, "--strip-unneeded", str(path)], check=True, capture_output=True)
        return path.read_bytes()


def slim_wheel(
    src: Path, out_dir: Path, drop: Callable[[str], bool] = ray_drop, strip: str | None = "strip"
) -> Path:
    """Write src's wheel to out_dir (same file name) without the files `drop` names, each ELF file
    stripped by `strip` (None: kept as it is), and a RECORD of the kept files' sha256 and sizes."""
    if strip is not None and shutil.which(strip) is None:
        raise SystemExit(
            f"ray_slim: {strip!r} not found; install binutils, or pass --no-strip (a larger wheel)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / src.name
    if out.resolve() == src.resolve():
        raise SystemExit(f"ray_slim: {out} is the wheel itself; give another OUT_DIR")
    with zipfile.ZipFile(src) as whl:
        records = [i for i in whl.infolist() if is_record(i.filename)]
        if len(records) != 1:
            raise SystemExit(f"ray_slim: {src}: {len(records)} .dist-info/RECORD files; not a wheel")
        record_info = records[0]
        rows: list[tuple[str, str, str]] = []
        part = out.with_name(out.name + ".part")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as slim:
            for info in whl.infolist():
                if info.filename == record_info.filename or info.is_dir() or drop(info.filename):
                    continue
                data = whl.read(info)
                if strip is not None and data[:4] == ELF_MAGIC:
                    data = stripped(data, strip)
                slim.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                rows.append((info.filename, record_hash(data), str(len(data))))
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerows([*rows, (record_info.filename, "", "")])
            slim.writestr(record_info, text.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    part.replace(out)
    return out


def record_problems(wheel: Path) -> list[str]:
    """Where a wheel's RECORD and its files disagree (a file missing from either, a hash or a size that
    is not the file's); empty when they agree."""
    problems = []
    with zipfile.ZipFile(wheel) as whl:
        names = {i.filename for i in whl.infolist() if not i.is_dir()}
        (record,) = [n for n in names if is_record(n)]
        listed = {}
        for row in csv.reader(io.StringIO(whl.read(record).decode())):
            if row:
                listed[row[0]] = row[1:]
        for name in sorted(names - {record}):
            if name not in listed:
                problems.append(f"{name}: in the wheel, not in RECORD")
                continue
            data = whl.read(name)
            digest, size = listed[name]
            if digest != record_hash(data) or size != str(len(data)):
                problems.append(f"{name}: RECORD says {digest} ({size} bytes), the file is {len(data)} bytes")
        problems += [f"{name}: in RECORD, not in the wheel" for name in sorted(set(listed) - names)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("wheel", type=Path, help="Ray's wheel (ray-X-cpXY-cpXY-manylinux2014_x86_64.whl)")
    parser.add_argument("out_dir", type=Path, help="where the slim wheel goes (same file name)")
    parser.add_argument("--no-strip", action="store_true", help="keep the binaries' symbols")
    args = parser.parse_args(argv)
    if not args.wheel.is_file():
        print(f"ray_slim: {args.wheel}: no such wheel; download it first (docs/offline.md)", file=sys.stderr)
        return 2
    out = slim_wheel(args.wheel, args.out_dir, strip=None if args.no_strip else "strip")
    problems = record_problems(out)
    if problems:
        print(
            f"ray_slim: {out}: RECORD disagrees with the files:\n  " + "\n  ".join(problems[:10]),
            file=sys.stderr,
        )
        return 1
    before, after = args.wheel.stat().st_size, out.stat().st_size
    print(f"{out}: {after / MIB:.1f} MiB (from {before / MIB:.1f} MiB); RECORD checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
