"""A one-node Slurm cluster on loopback for a test: munged with a generated key, slurmctld and slurmd
(Debian's slurm-wlm), every port and file private to the test, each daemon stopped by the PID started here.

Slurm comes from Debian's `slurm-wlm` package. If it is missing, the fixture installs it when it runs as
root with apt-get available (set RLSWEEP_INSTALL_SLURM=0 to forbid that), else the test skips and says why.
"""

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers.debian import debian_package
from tests.helpers.services import free_port, start, stop, wait_for

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo")
NODE = "rls0"


def slurm_installed() -> None:
    """slurm-wlm's daemons and commands on PATH (/usr/sbin too), installed with apt-get if allowed."""
    path = os.environ["PATH"].split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(path + [d for d in ("/usr/sbin", "/sbin") if d not in path])
    debian_package("slurm-wlm", list(DAEMONS), "RLSWEEP_INSTALL_SLURM")


def slurm_conf(root: Path, cpus: int) -> str:
    return f"""ClusterName=rlstest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SrunPortRange={(low := free_port())}-{low + 20}
# Bind to 127.0.0.1 (the nodes' addresses), not to every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=rls Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def node_idle(env: dict) -> bool:
    done = subprocess.run(
        ["sinfo", "-h", "-n", NODE, "-o", "%t"], capture_output=True, text=True, env=env, timeout=10
    )
    return done.stdout.strip() == "idle"


@contextlib.contextmanager
def loopback_slurm(cpus: int = 2):
    """Yields the environment (SLURM_CONF) for sbatch/scontrol/scancel; the daemons run until the end."""
    slurm_installed()
    root = Path(tempfile.mkdtemp(prefix="rls-slurm-", dir="/tmp"))  # short: munge's socket path
    root.chmod(0o700)
    for folder in ("state", "spool"):
        (root / folder).mkdir()
    key = root / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    (root / "slurm.conf").write_text(slurm_conf(root, cpus))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    procs = []
    try:
        munge = [
            "munged", "--foreground", "--force", f"--key-file={key}", f"--socket={root}/munge.sock",
            f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log", f"--seed-file={root}/munged.seed",
        ]  # fmt: skip
        procs.append(start(munge, env, root / "munged.out"))
        wait_for("munged", lambda: (root / "munge.sock").exists(), procs[-1], root / "munged.out")
        procs.append(start(["slurmctld", "-D", "-i"], env, root / "slurmctld.out"))
        procs.append(start(["slurmd", "-D", "-N", NODE], env, root / "slurmd.out"))
        wait_for("slurmd's node idle in slurmctld", lambda: node_idle(env), procs[-1], root / "slurmd.out")
        yield env
    finally:
        leftovers = [p for proc in reversed(procs) for p in stop(proc)]
        shutil.rmtree(root, ignore_errors=True)
        assert not leftovers, f"processes survived teardown: {leftovers}"


def job_state(job: str, env: dict) -> str:
    done = subprocess.run(
        ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, env=env, timeout=30
    )
    fields = dict(f.split("=", 1) for f in done.stdout.split() if "=" in f)
    return fields.get("JobState", f"unknown ({done.stderr.strip()})")


def wait_for_job_end(job: str, env: dict, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := job_state(job, env)) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
        if time.monotonic() > deadline:
            return state
        time.sleep(1)
    return state
