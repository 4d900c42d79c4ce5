"""What a shared result file must not carry, taken out of a trial row's text: paths, URLs, e-mail and IP
addresses, tokens and keys, this host's names, the user's name and home, and the values of the
environment. Numbers, flags and times carry none of these and are kept as they are; only text passes here.

A row's free text (a failed trial's exception tail, a verdict's detail) is written by libraries as well
as by rlsweep, so it is scrubbed by pattern, not trusted: each match becomes a placeholder that says what
was there (`<path>`, `<host>`, `<token>`, ...).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import socket
from collections.abc import Iterable, Mapping

# Tokens and keys by their published shapes, then a generic long secret (letters and digits mixed).
TOKEN_PATTERNS = (
    r"hf_[A-Za-z0-9]{8,}",  # Hugging Face
    r"sk-[A-Za-z0-9_-]{8,}",  # OpenAI-style API keys
    r"gh[pousr]_[A-Za-z0-9]{16,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{16,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids
    r"xox[abprs]-[A-Za-z0-9-]{8,}",  # Slack
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWTs
    # a long secret: 32+ letters and digits mixed, unbroken by a dash (so not a trial key of dashed parts)
    r"(?=[A-Za-z0-9+/_]*[0-9])(?=[A-Za-z0-9+/_]*[A-Za-z])[A-Za-z0-9+/_]{32,}={0,2}",
)
_TOKEN = re.compile("|".join(f"(?:{p})" for p in TOKEN_PATTERNS))
# NAME=value where the name says it holds a secret (TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL, AUTH).
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSW(?:OR)?D|API_?KEY|ACCESS_?KEY|CREDENTIAL|AUTH)[A-Z0-9_]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
)
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>)]+")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_USER_AT_HOST = re.compile(r"\b[\w.-]+@[\w.-]+")
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b")
_IPV6 = re.compile(r"\b(?:[0-9a-fA-F]{1,4}:){3,7}[0-9a-fA-F]{1,4}\b")
# A POSIX path of two parts or more, or one from ~ (not `tokens/s`: a path starts where no word does).
_POSIX_PATH = re.compile(r"(?<![\w.:/~-])(?:~[\w.-]*|\.{0,2})/[^\s'\"`,;:()<>\[\]{}]*")
_WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\[^\s'\"`,;()<>]*")
# Environment values shorter than this, or that are common words, are not secrets and would mangle text.
MIN_ENV_VALUE = 6


def _host_words() -> set[str]:
    names = {socket.gethostname()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn())
    words = set()
    for name in names:
        if name and name not in ("localhost", "localhost.localdomain"):
            words.add(name)
            words.add(name.split(".")[0])
    return {w for w in words if len(w) >= 2}


def _user_words() -> set[str]:
    words = set()
    for get in (getpass.getuser, lambda: os.environ.get("USER", ""), lambda: os.environ.get("LOGNAME", "")):
        try:
            value = get()
        except (KeyError, OSError):
            continue
        if value and len(value) >= 2:
            words.add(value)
    return words


# Variables that hold settings, not secrets (torch's allocator, CUDA's devices, the locale, the shell's
# state): their values are kept, so `alloc_conf` stays `expandable_segments:True`. A path in any of them is
# still a path, scrubbed as one.
SETTINGS_ENV = re.compile(r"^(PYTORCH_|CUDA_|NCCL_|OMP_|MKL_|LC_|LANG|TERM|SHELL|SHLVL|COLUMNS|LINES|_$)")


def _env_values(environ: Mapping[str, str]) -> set[str]:
    values = set()
    for name, value in environ.items():
        if SETTINGS_ENV.match(name):
            continue
        for part in re.split(r"[:\s]", value) + [value]:
            part = part.strip()
            if len(part) >= MIN_ENV_VALUE and not part.isdigit() and not re.fullmatch(r"[a-z]+", part):
                values.add(part)
    return values


class Scrubber:
    """scrub(text): the text without this host's secrets and any path, URL, address or token."""

    def __init__(self, environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()):
        env = os.environ if environ is None else environ
        literal = {**{v: "<env>" for v in _env_values(env)}, **{w: "<redacted>" for w in extra if w}}
        # Names as whole words (a host called `vm` leaves `nvml` alone), longest first.
        names = {**{w: "<user>" for w in _user_words()}, **{w: "<host>" for w in _host_words()}}
        ordered = sorted(names, key=len, reverse=True)
        self._names = names
        self._name = (
            re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, ordered)) + r")(?![A-Za-z0-9])")
            if ordered
            else None
        )
        # Longest first, so a value holding a shorter one is replaced whole.
        self._literals = sorted(literal.items(), key=lambda kv: -len(kv[0]))
        self._literal = (
            re.compile("|".join(re.escape(k) for k, _ in self._literals)) if self._literals else None
        )
        self._words = dict(self._literals)

    def scrub(self, text: str) -> str:
        text = _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}<redacted>", text)
        text = _URL.sub("<url>", text)
        text = _EMAIL.sub("<email>", text)
        text = _USER_AT_HOST.sub("<user>@<host>", text)
        text = _WINDOWS_PATH.sub("<path>", text)
        text = _POSIX_PATH.sub(lambda m: "<path>" if len(m.group(0)) > 1 else m.group(0), text)
        text = _TOKEN.sub("<token>", text)
        text = _IPV4.sub("<ip>", text)
        text = _IPV6.sub("<ip>", text)
        if self._literal is not None:
            text = self._literal.sub(lambda m: self._words[m.group(0)], text)
        if self._name is not None:
            text = self._name.sub(lambda m: self._names[m.group(0)], text)
        return text

    def scrub_json(self, value):
        """A parsed JSON value with every string (keys too) scrubbed."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, list):
            return [self.scrub_json(v) for v in value]
        if isinstance(value, dict):
            return {self.scrub(str(k)): self.scrub_json(v) for k, v in value.items()}
        return value
