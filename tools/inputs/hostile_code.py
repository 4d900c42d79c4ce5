"""Hostile completions for the code task's sandbox (tests/unit/test_code_sandbox.py, test_score_cli.py,
tests/integration/test_code_trial.py, bench/cost/code.py):
each is the code of a completion whose problem asks for double(x); none defines a correct one."""

LOOP = "while True:\n    pass\ndef double(x):\n    return x * 2"
FORK_BOMB = "import os\nwhile True:\n    os.fork()\ndef double(x):\n    return x * 2"
MEMORY_BOMB = "blocks = [bytearray(1 << 28) for _ in range(64)]\ndef double(x):\n    return x * 2"
GROWING_MEMORY_BOMB = (
    "blocks = []\nwhile True:\n    blocks.append(bytearray(1 << 24))\ndef double(x):\n    return x * 2"
)
BIG_WRITE = """\
chunk = b"x" * (1 << 20)
for folder in (".", "/tmp", "/dev/shm", "/var/tmp", "/"):
    try:
        with open(folder + "/{marker}", "wb") as f:
            for _ in range(10 * 1024):
                f.write(chunk)
    except OSError:
        pass
def double(x):
    return x + 2
"""
DAEMON = """\
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.01)
    os._exit(0)
def double(x):
    return x + 2
"""
SOCKET = """\
import socket
try:
    socket.create_connection(("1.1.1.1", 80), timeout=0.5)
    reached = True
except OSError:
    reached = False
def double(x):
    return x * 2 if reached else None
"""
# Blocked, not killed: the sandbox refuses each call (the completion catches the OSError), and the
# attempt alone is a forbidden call that scores 0 (tasks/code/_audit.py, forbidden()).
WRITE_OUTSIDE = """\
try:
    open("/rlsweep-no-such-folder/planted", "w").write("planted")
except OSError:
    pass
def double(x):
    return x + 2
"""
DELETE_OUTSIDE = """\
import os
try:
    os.remove("/rlsweep-no-such-folder/victim")
except OSError:
    pass
def double(x):
    return x + 2
"""
READ_SECRET = """\
import os
try:
    key = open(os.path.expanduser("~/.ssh/id_ed25519")).read()
except OSError:
    key = None
def double(x):
    return x + 2
"""
READ_OUTSIDE = """\
try:
    seen = open({path!r}).read()
except OSError:
    seen = None
def double(x):
    return seen
"""
SIGNAL_PARENT = """\
import os, signal
for pid in (os.getppid(), 1):
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        pass
def double(x):
    return x + 2
"""
LEFT_PROCESS = """\
import os, time
if os.fork() == 0:
    time.sleep(30)
    os._exit(0)
def double(x):
    return x + 2
"""
LEFT_THREAD = """\
import threading, time
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
def double(x):
    return x + 2
"""
PROGRAM = """\
import subprocess
try:
    seen = subprocess.run(["cat", "/etc/hostname"], capture_output=True, timeout=0.5).stdout
except (OSError, subprocess.SubprocessError):
    seen = None
def double(x):
    return x + 2
"""
# One completion per kind of act, each scoring 0 in total: the start of the act as `rlsweep score` names
# it ({path}: a file outside the completion's directory; the parent is process 1 in a PID namespace).
ACTS = {
    "read outside": (READ_OUTSIDE, "forbidden call (read outside its directory: {path})"),
    "write outside": (
        WRITE_OUTSIDE,
        "forbidden call (write outside its directory: /rlsweep-no-such-folder/planted)",
    ),
    "delete outside": (
        DELETE_OUTSIDE,
        "forbidden call (delete outside its directory: /rlsweep-no-such-folder/victim)",
    ),
    "signal to its parent": (
        SIGNAL_PARENT,
        "forbidden call (signal outside the sandbox: SIGTERM to process ",
    ),
    "process left running": (LEFT_PROCESS, "left running after the call: 1 process"),
    "detached daemon": (
        DAEMON,
        "left running after the call: ",
    ),  # 1 or 2: its first child may not have exited
    "thread left running": (LEFT_THREAD, "left running after the call: 1 thread"),
    "network attempt": (SOCKET, "forbidden call (network attempt: a name lookup)"),
    "program started": (PROGRAM, "forbidden call (program started: cat)"),
}
HOSTILE = {
    "endless loop": LOOP,
    "fork bomb": FORK_BOMB,
    "memory bomb": MEMORY_BOMB,
    "10 GB write": BIG_WRITE.format(marker="big"),
    "detached daemon": DAEMON,
    "socket": SOCKET,
}
