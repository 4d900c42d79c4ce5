"""Where a sweep's outputs live: a local or shared folder (a pathlib.Path) or a URI (s3://, gs://, hdfs://...)
reached through pyarrow.fs, so the driver and every node of a cluster can write to the same place.

A URI becomes a RemotePath: the few pathlib operations the sinks use (`/`, exists, mkdir, write_text,
read_text), backed by pyarrow.fs.FileSystem.from_uri. Credentials and endpoints come from the
environment the filesystem reads (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL,
GOOGLE_APPLICATION_CREDENTIALS, ...), never from the sweep file.

output_dir_problems says why a location must not take a sweep's outputs (checked before anything is
written): a file, under a file, read-only, a system directory, or a path MLflow and Ray cannot quote.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.fs as pafs

# The checkout rlsweep runs from: what trainer children import, Ray ships to a cluster and sbatch cd's to.
PROJECT_ROOT = Path(__file__).resolve().parents[2]

URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# MLflow's run filters and Ray's agents take the path inside quoted strings and command lines.
UNSAFE_CHARS = re.compile(r"[\s'\"`\\\x00-\x1f]")
# Folders of the system (or the home folder itself), which a sweep's ten-odd entries would litter.
SYSTEM_DIRS = frozenset(
    ["/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt"]
    + ["/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/include"]
    + ["/usr/lib", "/usr/local", "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/log"]
)
# Trees no sweep output belongs anywhere in.
SYSTEM_TREES = ("/boot", "/dev", "/etc", "/proc", "/sys", "/usr/bin", "/usr/lib", "/usr/sbin")


class RemotePath:
    """A location inside a pyarrow filesystem, printed as its URI."""

    def __init__(self, fs: pafs.FileSystem, path: str, scheme: str):
        self.fs = fs
        self.path = path.rstrip("/")
        self.scheme = scheme

    def __truediv__(self, part: str) -> RemotePath:
        return RemotePath(self.fs, f"{self.path}/{part}", self.scheme)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.path}"

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def parent(self) -> RemotePath:
        return RemotePath(self.fs, str(PurePosixPath(self.path).parent), self.scheme)

    def exists(self) -> bool:
        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def mkdir(self, parents: bool = True, exist_ok: bool = True) -> None:
        # Object stores have no folders; create_dir is a no-op there and makes one on HDFS-like stores.
        self.fs.create_dir(self.path, recursive=True)

    def write_text(self, text: str) -> None:
        with self.fs.open_output_stream(self.path) as f:
            f.write(text.encode())

    def read_text(self) -> str:
        with self.fs.open_input_stream(self.path) as f:
            return f.read().decode()


StoragePath = Path | RemotePath


def output_location(text: str | Path) -> StoragePath:
    """A URI -> RemotePath (file:// -> Path); anything else -> an absolute local/shared Path."""
    text = str(text)
    if text.startswith("file://"):
        return Path(text[len("file://") :]).expanduser().resolve()
    if URI.match(text):
        fs, path = pafs.FileSystem.from_uri(text)
        return RemotePath(fs, path, text.split("://", 1)[0])
    return Path(text).expanduser().resolve()


def local_output_dir(text: str, flag: str, runs: str, errors: list[str]) -> Path:
    """The local folder `text` names for a verb that runs its trials on this machine (solve, calibrate);
    a URI, or a folder output_dir_problems refuses, appends its error (naming `flag`; `runs`: e.g. "solve
    runs its trials") to `errors` and returns Path(".")."""
    location = output_location(text)
    if not isinstance(location, Path):
        errors.append(f"{flag} {text}: {runs} on this machine; give a local folder")
        return Path(".")
    errors += [f"{flag}: {p}" for p in output_dir_problems(text, location)]
    return location


def output_dir_problems(text: str, location: StoragePath) -> list[str]:
    """Why `location` (given as `text`) cannot hold a sweep's outputs; empty when it can."""
    shown = str(location)
    if UNSAFE_CHARS.search(shown):
        return [
            f"{shown!r} holds a space, quote, backslash or control character, which MLflow's run filters "
            "and Ray's agents cannot take; choose a path of letters, digits and - _ . /"
        ]
    if isinstance(location, RemotePath):
        return []
    home = os.path.realpath(os.path.expanduser("~"))
    if shown in SYSTEM_DIRS or shown == home:
        what = "your home folder" if shown == home else "a system folder"
        return [f"{text!r} is {what} ({shown}); give a folder of the sweep's own, e.g. outputs/NAME"]
    tree = next((t for t in SYSTEM_TREES if shown.startswith(t + "/")), None)
    if tree:
        return [f"{shown} is inside the system folder {tree}; give a folder of your own, e.g. outputs/NAME"]
    existing = location
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == location else f"is under {existing}, which is a file"
        return [f"{shown} {where}; give a folder path (new or existing), e.g. outputs/NAME"]
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "is read-only" if existing == location else f"cannot be made: {existing} is read-only"
        return [f"{shown} {where} for this user; give a folder you can write to"]
    return []


def is_remote(location: Any) -> bool:
    return isinstance(location, RemotePath)


def local_dir(location: StoragePath, sweep_name: str) -> Path:
    """A folder for what must be local to a node (trainer scratch): the output dir itself when it is a
    folder, else a new one under the system temp dir, `rlsweep-<sweep name>-<random>`, made for this
    call alone: two runs of one sweep name (to two object-store outputs) on one host must not share
    trial folders, whose names are the trial keys. A node without the folder makes it."""
    if isinstance(location, Path):
        return location
    return Path(tempfile.mkdtemp(prefix=f"rlsweep-{sweep_name}-"))


def filesystem_and_path(location: StoragePath) -> tuple[pafs.FileSystem | None, str]:
    """(filesystem, path) for pyarrow readers/writers and Ray Tune's storage_filesystem/storage_path."""
    if isinstance(location, RemotePath):
        return location.fs, location.path
    return None, str(location)
