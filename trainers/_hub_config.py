"""A hub model's config.json without its weights: from the local Hugging Face cache, else fetched alone
(a few KB) into that cache with huggingface_hub, else the one-line command that fetches it.

The environment is read at each call, as huggingface_hub reads it at import: HF_HUB_CACHE, else
HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; HF_ENDPOINT (default
https://huggingface.co); HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE): no network, the cache only; HF_TOKEN
for a gated or private model (else the token `hf auth login` saved). A cached config.json is used without
the network: the snapshot `refs/main` names, else the newest snapshot holding one. The fetch makes one
HEAD request first (FETCH_TIMEOUT_S, or HF_HUB_ETAG_TIMEOUT; no retries), so an unreachable hub answers
in seconds rather than after huggingface_hub's backoff, then hf_hub_download lays the file out as every
Hugging Face library reads it. An answer, found or refused, is kept for the process: a fit map asks
once per cell.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

HUB = "https://huggingface.co"
FETCH_TIMEOUT_S = 5.0
_TRUE = {"1", "ON", "YES", "TRUE"}


class ConfigUnavailable(ValueError):
    """A model whose config.json cannot be read here: the message names what was tried and the fix."""


@dataclass(frozen=True)
class FoundConfig:
    """A model's config.json and where it came from, in words: 'bundled', its path, or (a hub id's) "its
    config.json in the HF cache (PATH)" / "its config.json, fetched from ENDPOINT into the HF cache (PATH)"."""

    config: dict
    where: str
    fetched: bool = False  # True when this process fetched it from the hub


def hub_cache() -> Path:
    """The Hugging Face hub cache huggingface_hub uses with this environment (module doc)."""
    home = os.environ.get("HF_HOME") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    )
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or f"{home}/hub"
    return Path(os.path.expandvars(cache)).expanduser()


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")


def hub_offline() -> bool:
    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return flag.upper() in _TRUE


def fetch_timeout() -> float:
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or FETCH_TIMEOUT_S)
    except ValueError:
        return FETCH_TIMEOUT_S


def fetch_command(repo_id: str) -> str:
    """The one line that fetches repo_id's config.json alone into the HF cache (HF_HOME as here)."""
    return f"hf download {repo_id} config.json"


def cached_config(repo_id: str) -> Path | None:
    """repo_id's config.json in the HF cache: the snapshot refs/main names, else the newest with one."""
    folder = hub_cache() / f"models--{repo_id.replace('/', '--')}"
    main = folder / "refs" / "main"
    if main.is_file():
        path = folder / "snapshots" / main.read_text().strip() / "config.json"
        if path.is_file():
            return path
    found = [p for p in (folder / "snapshots").glob("*/config.json") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


_ANSWERS: dict[tuple, FoundConfig | ConfigUnavailable] = {}


def hub_config(repo_id: str) -> FoundConfig:
    """repo_id's config.json from the HF cache, else fetched from the hub (module doc); ConfigUnavailable
    naming what was tried and the command that fetches it."""
    key = (repo_id, str(hub_cache()), hub_endpoint(), hub_offline())
    if key not in _ANSWERS:
        try:
            _ANSWERS[key] = _find(repo_id)
        except ConfigUnavailable as exc:
            _ANSWERS[key] = exc
    answer = _ANSWERS[key]
    if isinstance(answer, ConfigUnavailable):
        raise answer
    return answer


def _find(repo_id: str) -> FoundConfig:
    cached = cached_config(repo_id)
    if cached is not None:
        return FoundConfig(_read(cached, repo_id), f"its config.json in the HF cache ({cached})")
    cache, endpoint = hub_cache(), hub_endpoint()
    fix = (
        f"fetch it once where the hub is reachable with `{fetch_command(repo_id)}` (the same HF_HOME), "
        "then run this again; or give the path of a config.json (--model /path/to/config.json)"
    )
    if hub_offline():
        raise ConfigUnavailable(
            f"model: {repo_id!r} is not bundled and its config.json is not in the HF cache ({cache}); "
            f"HF_HUB_OFFLINE is set, so it was not fetched from {endpoint}; {fix}"
        )
    path = _fetch(repo_id, endpoint, cache, fix)
    where = f"its config.json, fetched from {endpoint} into the HF cache ({path})"
    return FoundConfig(_read(path, repo_id), where, True)


def _fetch(repo_id: str, endpoint: str, cache: Path, fix: str) -> Path:
    """hf_hub_download of config.json after one HEAD without retries; ConfigUnavailable with the reason."""
    import httpx
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    url = hf_hub_url(repo_id, "config.json", endpoint=endpoint)
    timeout = fetch_timeout()
    token = os.environ.get("HF_TOKEN") or None
    try:
        get_hf_file_metadata(url, token=token, timeout=timeout, endpoint=endpoint)
        return Path(
            hf_hub_download(
                repo_id, "config.json", cache_dir=cache, endpoint=endpoint, etag_timeout=timeout, token=token
            )
        )
    except GatedRepoError:
        raise ConfigUnavailable(
            f"model: {repo_id!r} is gated on {endpoint}: its config.json needs the token of an account that "
            f"accepted its terms; accept them at {endpoint}/{repo_id}, then set HF_TOKEN (or `hf auth login`) "
            f"and run again, or `{fetch_command(repo_id)}` with that token"
        ) from None
    except RepositoryNotFoundError:
        said = (
            "private: set HF_TOKEN to a token that may read it"
            if token is None
            else "not readable with HF_TOKEN"
        )
        raise ConfigUnavailable(
            f"model: {repo_id!r}: no such model on {endpoint} (or it is {said}); check the hub id "
            "(org/name, as on its model page), or give the path of its config.json"
        ) from None
    except (EntryNotFoundError, RevisionNotFoundError):
        raise ConfigUnavailable(
            f"model: {repo_id!r} on {endpoint} has no config.json (its main branch), so its architecture "
            "is not known; give the path of a config.json of the same model"
        ) from None
    except (httpx.HTTPError, HfHubHTTPError, OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigUnavailable(
            f"model: {repo_id!r} is not bundled and its config.json is not in the HF cache ({cache}); "
            f"fetching {url} failed ({reason}; timeout {timeout:g} s); {fix}"
        ) from None


def _read(path: Path, repo_id: str) -> dict:
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigUnavailable(
            f"model: {repo_id!r}: its config.json at {path} cannot be read as JSON ({exc}); delete it and "
            f"fetch it again with `{fetch_command(repo_id)} --force-download`"
        ) from None
    if not isinstance(config, dict):
        raise ConfigUnavailable(
            f"model: {repo_id!r}: its config.json at {path} is not a JSON object; delete it and fetch it "
            f"again with `{fetch_command(repo_id)} --force-download`"
        )
    return config
