"""What a completion may not do in the code sandbox: the audit events the harness watches (WATCHED) and
forbidden(), which says in words what an event would do outside the completion's directory, process group
or the interpreter's own files. Trusted, stdlib only, nothing of the project: the sandbox runs this file's
text, then tasks/code/_harness.py's, as one -c source (tasks/code/_sandbox.py HARNESS)."""

import os
import signal

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# event -> (what it does, the positions of its path arguments, the position of its dir_fd or None)
_CHANGES = {
    "os.remove": ("delete", (0,), 1),
    "os.rmdir": ("delete", (0,), 1),
    "shutil.rmtree": ("delete", (0,), None),
    "os.rename": ("rename", (0, 1), 2),
    "os.truncate": ("truncate", (0,), None),
    "os.chmod": ("chmod", (0,), 2),
    "os.chown": ("chown", (0,), 3),
    "os.mkdir": ("mkdir", (0,), 2),
    "os.symlink": ("link", (1,), 2),
    "os.link": ("link", (0, 1), 3),  # a hard link to a file outside would be read as one inside
    "os.utime": ("touch", (0,), 3),
    "os.setxattr": ("xattr", (0,), None),
    "os.removexattr": ("xattr", (0,), None),
}
_LISTINGS = ("os.listdir", "os.scandir", "glob.glob")
_SIGNALS = ("os.kill", "os.killpg")
_NETWORK = {
    "socket.__new__": "a socket",
    "socket.getaddrinfo": "a name lookup",
    "socket.gethostbyname": "a name lookup",
    "socket.gethostbyname_ex": "a name lookup",
    "socket.gethostbyaddr": "a name lookup",
    "socket.getnameinfo": "a name lookup",
}
_PROGRAMS = ("os.exec", "os.posix_spawn", "os.system", "subprocess.Popen", "os.forkpty", "pty.spawn")
_OTHERS = {
    "ctypes.dlopen": "native code loaded (ctypes)",
    "ctypes.dlsym": "native code loaded (ctypes)",
    "ctypes.call_function": "native code called (ctypes)",
    "gc.get_objects": "a walk of the interpreter's objects (gc.get_objects)",
    "gc.get_referrers": "a walk of the interpreter's objects (gc.get_referrers)",
    "gc.get_referents": "a walk of the interpreter's objects (gc.get_referents)",
}
WATCHED = frozenset(("open", *_CHANGES, *_LISTINGS, *_SIGNALS, *_NETWORK, *_PROGRAMS, *_OTHERS))
_PUBLIC = ("/dev/null", "/dev/urandom", "/dev/random", "/dev/zero")
_SIGNAL_NAMES = {s.value: s.name for s in signal.Signals}


def _path(value) -> str | None:
    """A path argument as text; None for none or a file descriptor (its open was checked). Only exact
    text and bytes are read: any other object's methods (a str subclass, a pathlib path) would run the
    completion's code inside the check, and could answer it one path and the call another (TypeError:
    the call is unchecked, so an act)."""
    if value is None or type(value) is int:
        return None
    if type(value) in (str, bytes):
        return os.fsdecode(value)
    raise TypeError(f"a path of type {type(value).__name__}")


def _inside(path: str, workdir: str, cwd: str | None = None) -> bool:
    """In `workdir` or the folder itself (tempfile's NamedTemporaryFile audits its open with the folder);
    a relative path is taken from `cwd` (the process's, which the completion may have changed)."""
    real = os.path.realpath(os.path.join(cwd or workdir, path))
    return real == workdir or real.startswith(workdir + os.sep)


def _readable(path: str, workdir: str, trusted: tuple[str, ...], cwd: str | None) -> bool:
    real = os.path.realpath(os.path.join(cwd or workdir, path))
    return _inside(real, workdir) or real in _PUBLIC or (real + os.sep).startswith(trusted)


def _signal(args: tuple, group: int) -> str | None:
    target, sig = (*args, None, None)[:2]
    if type(target) is not int:
        return None
    name = _SIGNAL_NAMES.get(sig, f"signal {sig}")
    target = -os.getpgrp() if target == 0 else target  # its group now: it may have joined another
    if target in (-group, os.getpid()):  # its own group, or itself
        return None
    if target > 0:
        try:
            if os.getpgid(target) == group:  # a process it started
                return None
        except OSError:
            pass
    whom = "every process it may signal" if target == -1 else f"process {abs(target)}"
    return f"signal outside the sandbox: {name} to {whom}{' (a group)' if target < -1 else ''}"


def forbidden(
    event: str, args: tuple, workdir: str, trusted: tuple[str, ...], cwd: str | None = None, group: int = 0
) -> str | None:
    """What the audit event `event(*args)` would do that a completion may not, in words; None when it
    may (anything inside `workdir`; reading Python's own files under `trusted`; signalling its own
    process `group`). Relative paths are taken from `cwd` (default: `workdir`)."""
    if event == "open":
        path, mode, flags = (*args, None, None, None)[:3]
        path = _path(path)
        if path is None:
            return None
        writes = (type(mode) is str and any(c in mode for c in "wax+")) or bool(
            type(flags) is int and flags & _WRITE_FLAGS
        )
        if writes and path != os.devnull and not _inside(path, workdir, cwd):
            return f"write outside its directory: {path[:100]}"
        if not writes and not _readable(path, workdir, trusted, cwd):
            return f"read outside its directory: {path[:100]}"
        return None
    if event in _LISTINGS:
        path = _path(args[0] if args and args[0] is not None else ".")
        if path is None or event == "glob.glob" and not os.path.dirname(path):
            return None
        folder = os.path.dirname(path) if event == "glob.glob" else path
        if not _readable(folder, workdir, trusted, cwd):
            return f"read outside its directory: {path[:100]}"
        return None
    if event in _SIGNALS:
        return _signal(args if event == "os.kill" else (-args[0], *args[1:]), group)
    if event in _NETWORK:
        return f"network attempt: {_NETWORK[event]}"
    if event in _PROGRAMS:  # (path or command, ...) or Popen's (executable, args, ...)
        for value in args[:2]:
            value = value[0] if type(value) in (list, tuple) and value else value
            if type(value) in (str, bytes):
                return f"program started: {os.fsdecode(value)[:100]}"
        return f"program started ({event})"
    if event in _OTHERS:
        return _OTHERS[event]
    if event not in _CHANGES:
        return None
    what, positions, dir_fd_at = _CHANGES[event]
    dir_fd = args[dir_fd_at] if dir_fd_at is not None and dir_fd_at < len(args) else None
    dir_fd = dir_fd if type(dir_fd) is int and dir_fd >= 0 else None  # CPython passes -1 for none
    for position in positions:
        path = _path(args[position]) if position < len(args) else None
        if path is None:
            continue
        relative_to_fd = dir_fd is not None and not os.path.isabs(path)  # its folder is not known here
        if relative_to_fd or not _inside(path, workdir, cwd):
            return f"{what} outside its directory: {path[:100]}"
    return None
