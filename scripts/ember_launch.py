#!/usr/bin/python3
"""ember-launch: start an Ember (ps-lite compatible) job and supervise it.

usage: ember-launch -n WORKERS [-s SERVERS] [--launcher local|ssh|mpi|slurm]
                    [options] [--] COMMAND [ARGS...]

The launcher runs the scheduler on this host and starts the servers and the
workers through the chosen engine: as local processes, over ssh, with Open
MPI's mpirun or with Slurm's srun. Every node gets ps-lite's DMLC_*
variables, its output is prefixed with its role and rank, the job ends
non-zero as soon as one node fails, and nothing is left running when it ends.
docs/launching.md describes every option.

Installed as bin/ember-launch; scripts/local.sh (installed as
bin/ember-local) runs it with --local-sh (local.sh's positional arguments
and messages). On the nodes of the ssh, mpi and slurm engines the same file
runs in its --node mode: it picks the node's role from its rank, runs the
program, prefixes or relays its output and stops it when the engine goes
away.

Standard library only; runs on Debian's /usr/bin/python3 (3.11).
"""

import argparse
import ctypes
import errno
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NAME = "ember-launch"
# Ember's version; tests/scripts/version_test.py keeps it equal to the
# project's (CMakeLists.txt).
VERSION = "0.1.0"
LAUNCHERS = ("local", "ssh", "mpi", "slurm")
PYTHON = "/usr/bin/python3"
# How long stopped nodes get between SIGTERM and SIGKILL, and how long the
# output of nodes that ended may take to drain.
STOP_GRACE_S = 2.0
DRAIN_S = 2.0
# How long an engine (mpirun, srun, ssh) gets to stop its nodes itself.
ENGINE_GRACE_S = 5.0
# How long the scheduler may take to publish its port.
PORT_WAIT_S = 30.0
# The longest line kept whole; longer output is cut into lines this long.
MAX_LINE = 1 << 16
# Why a node's death does not stop the job, in the launcher's line.
FAILOVER_NOTE = ("(--failover): the cluster fails its data over to its "
                 "copies, or ends itself if it has none")
SCHEDULER_NOTE = ("(--restart-scheduler): its members wait for the "
                  "scheduler started again (EMBER_SCHEDULER_WAIT_MS)")
# Variables sent to remote nodes (ssh, mpi) besides the job's own: every
# name with one of these prefixes, and these names.
REMOTE_ENV_PREFIXES = ("DMLC_", "EMBER_", "PS_", "GLOG_")
REMOTE_ENV_NAMES = ("LD_LIBRARY_PATH", "OMP_NUM_THREADS", "ASAN_OPTIONS",
                    "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS")
# Engine-set variables that carry a node's rank, in the order tried.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID",
                  "PMI_RANK")
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


class UsageError(Exception):
    """A bad argument or setting: reported with the usage line, exit 2."""


# ----------------------------------------------------------------- settings --
class Job:
    """What to run and how: built from the command line and environment."""

    def __init__(self):
        self.name = NAME  # Prefix of the launcher's own messages.
        self.launcher = "local"
        self.servers = 0  # DMLC_NUM_SERVER
        self.workers = 0  # DMLC_NUM_WORKER
        self.server_procs = 0  # Server processes started.
        self.worker_procs = 0  # Worker processes started.
        self.command = []
        self.timeout = 0.0  # Seconds; 0 = none.
        self.log_dir = None
        self.env = {}  # --env: set on every node.
        self.scheduler = None  # argv of the scheduler; None: the command.
        self.scheduler_note = None  # Why the command is the scheduler.
        self.root_port = None  # Fixed DMLC_PS_ROOT_PORT, or None: port 0.
        self.root_uri = None  # DMLC_PS_ROOT_URI override (remote engines).
        self.hostfile = None
        self.ssh_command = ["ssh", "-o", "BatchMode=yes"]
        self.engine_args = []  # Extra mpirun / srun arguments.
        # --join: (host, port) of a running job's scheduler; one server is
        # started into that job, and nothing else.
        self.join = None
        # --failover: a server that dies does not stop the job; the cluster
        # fails its data over to the copies (EMBER_REPLICAS), or ends itself.
        self.failover = False
        # --replace-servers N: under --failover, a server that dies is
        # replaced by a new one (EMBER_JOIN=replace), at most N times.
        self.replace_servers = 0
        # --restart-scheduler N: a scheduler that dies is started again on
        # its port (EMBER_SCHEDULER_RESTART=1), at most N times.
        self.restart_scheduler = 0


def parse_count(text, what):
    """A non-negative decimal integer (leading zeros allowed); else
    UsageError."""
    if not text.isdigit() or not text.isascii():
        raise UsageError("%s must be a non-negative integer, got '%s'" %
                         (what, text))
    return int(text, 10)


def parse_seconds(text, what):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise UsageError("%s must be a non-negative number of seconds, got "
                         "'%s'" % (what, text))
    return value


def parse_join(text):
    """--join HOST:PORT (an IPv6 host in brackets) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or \
            not 1 <= int(port) <= 65535:
        raise UsageError("--join wants the running job's scheduler as "
                         "HOST:PORT (the launcher prints it when the job "
                         "starts), got '%s'" % text)
    return host, int(port)


def is_variable_name(text):
    return bool(text) and text.replace("_", "a").isalnum() and \
        text.isascii() and not text[0].isdigit()


def parse_env_pair(text, environ):
    """--env NAME=VALUE, NAME:VALUE (MXNet's launch.py) or NAME (its value
    here)."""
    for sep in ("=", ":"):
        name, found, value = text.partition(sep)
        if found and is_variable_name(name):
            return name, value
    if not is_variable_name(text):
        raise UsageError("--env '%s': not NAME=VALUE" % text)
    if text not in environ:
        raise UsageError("--env %s: not set here; give NAME=VALUE" % text)
    return text, environ[text]


def resolve_executable(name, path=None):
    """The path of an executable NAME (a path, or looked up on PATH)."""
    if not name:
        return None
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) \
            else None
    return shutil.which(name, path=path)


def scheduler_candidates(script_dirs, environ):
    dirs = []
    for d in script_dirs:
        dirs += [os.path.join(d, "ember_scheduler"),
                 os.path.join(d, "..", "build", "scheduler",
                              "ember_scheduler")]
    if environ.get("EMBER_BUILD_DIR"):
        dirs.append(os.path.join(environ["EMBER_BUILD_DIR"], "scheduler",
                                 "ember_scheduler"))
    return dirs


def find_scheduler(job, environ, script_dirs):
    """Sets job.scheduler from EMBER_SCHEDULER, EMBER_PROGRAM_SCHEDULER or a
    search (next to the script, ../build/scheduler, EMBER_BUILD_DIR, PATH)."""
    if environ.get("EMBER_SCHEDULER"):
        path = resolve_executable(environ["EMBER_SCHEDULER"],
                                  environ.get("PATH"))
        if path is None:
            raise UsageError("EMBER_SCHEDULER '%s' not found or not "
                             "executable" % environ["EMBER_SCHEDULER"])
        job.scheduler = [path]
        return
    if environ.get("EMBER_PROGRAM_SCHEDULER") == "1":
        job.scheduler = None
        return
    for c in scheduler_candidates(script_dirs, environ):
        if os.path.isfile(c) and os.access(c, os.X_OK):
            job.scheduler = [c]
            return
    path = shutil.which("ember_scheduler", path=environ.get("PATH"))
    if path:
        job.scheduler = [path]
        return
    job.scheduler = None
    job.scheduler_note = (
        "note: ember_scheduler not found (looked next to this script, in "
        "../build/scheduler%s and on PATH); running '%s' as the scheduler" %
        (", $EMBER_BUILD_DIR/scheduler" if environ.get("EMBER_BUILD_DIR")
         else "", job.command[0]))


def apply_environment(job, environ):
    """The EMBER_* / DMLC_* settings both entry points share."""
    if job.root_port is None and environ.get("DMLC_PS_ROOT_PORT"):
        port = environ["DMLC_PS_ROOT_PORT"]
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError("DMLC_PS_ROOT_PORT must be a port number, got "
                             "'%s'" % port)
        job.root_port = int(port)
    if environ.get("EMBER_SERVER_PROCS", "") != "":
        job.server_procs = parse_count(environ["EMBER_SERVER_PROCS"],
                                       "EMBER_SERVER_PROCS")
    if environ.get("EMBER_WORKER_PROCS", "") != "":
        job.worker_procs = parse_count(environ["EMBER_WORKER_PROCS"],
                                       "EMBER_WORKER_PROCS")
    if environ.get("EMBER_TIMEOUT", "") != "":
        job.timeout = float(parse_count(environ["EMBER_TIMEOUT"],
                                        "EMBER_TIMEOUT (seconds)"))
    if environ.get("EMBER_LOG_DIR"):
        job.log_dir = environ["EMBER_LOG_DIR"]
    if environ.get("DMLC_PS_ROOT_URI"):
        job.root_uri = environ["DMLC_PS_ROOT_URI"]


LOCAL_SH_USAGE = "usage: local.sh NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...]"
LOCAL_SH_HELP = LOCAL_SH_USAGE + """

Launch a local cluster of PROGRAM on 127.0.0.1: one scheduler, the server
processes and the worker processes.  Every process gets DMLC_NUM_SERVER,
DMLC_NUM_WORKER, DMLC_PS_ROOT_URI=127.0.0.1, DMLC_PS_ROOT_PORT, DMLC_ROLE
(scheduler|server|worker) and EMBER_RANK_HINT (its launch index within its
role).  An argument equal to {role} is replaced by the process's role name.
Output lines are prefixed with "[scheduler] ", "[server I] ", "[worker I] ".
local.sh runs ember-launch --launcher local (see docs/launching.md).

Environment:
  DMLC_PS_ROOT_PORT        scheduler port (default: the scheduler binds a port
                           the kernel picks and publishes it through
                           EMBER_PORT_FILE)
  EMBER_SCHEDULER          scheduler binary to run (no arguments)
  EMBER_PROGRAM_SCHEDULER  =1: run PROGRAM ARGS as the scheduler (ps-lite's
                           way)
  EMBER_BUILD_DIR          build tree searched for scheduler/ember_scheduler
  EMBER_SERVER_PROCS       number of server processes (default NUM_SERVERS)
  EMBER_WORKER_PROCS       number of worker processes (default NUM_WORKERS)
  EMBER_LOG_DIR            also write raw output to DIR/<role>-<index>.log
  EMBER_TIMEOUT            time limit in seconds, 0 = none (default); exit 124

Without EMBER_SCHEDULER / EMBER_PROGRAM_SCHEDULER, the standalone scheduler
ember_scheduler is searched next to this script, in ../build/scheduler, in
$EMBER_BUILD_DIR/scheduler and on PATH; if it is not found PROGRAM itself is
run as the scheduler.

Exit status: 0 if every process exited 0; the first failing status otherwise;
124 on timeout; 2 on usage errors."""


def local_sh_name(wrapper):
    """The name the wrapper's messages use: ember-local installed, local.sh
    in the source tree (scripts/local.sh)."""
    return "ember-local" if os.path.basename(wrapper) == "ember-local" \
        else "local.sh"


def parse_local_sh(argv, environ, script_dirs, name="local.sh"):
    """local.sh NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...] -> Job, or None
    after printing the help. NAME: what the wrapper is called (its
    messages and help say it)."""
    if argv and argv[0] in ("-h", "--help"):
        print(LOCAL_SH_HELP.replace("local.sh", name))
        return None
    if len(argv) < 3:
        raise UsageError("expected at least 3 arguments, got %d" % len(argv))
    job = Job()
    job.name = name
    job.servers = parse_count(argv[0], "NUM_SERVERS")
    job.workers = parse_count(argv[1], "NUM_WORKERS")
    job.server_procs, job.worker_procs = job.servers, job.workers
    job.command = list(argv[2:])
    apply_environment(job, environ)
    job.root_uri = None  # local.sh always uses 127.0.0.1.
    check_program(job, environ)
    find_scheduler(job, environ, script_dirs)
    return job


def check_program(job, environ):
    if job.launcher != "local":
        return  # The program need only exist on the nodes.
    path = resolve_executable(job.command[0], environ.get("PATH"))
    if path is None:
        raise UsageError("program '%s' not found or not executable" %
                         job.command[0])
    job.command[0] = path


def build_parser():
    p = argparse.ArgumentParser(
        prog=NAME,
        usage="%(prog)s -n WORKERS [-s SERVERS] [--launcher "
              "local|ssh|mpi|slurm] [options] [--] COMMAND [ARGS...]",
        description="Start an Ember (ps-lite compatible) job: a scheduler, "
        "SERVERS servers and WORKERS workers of COMMAND, every output line "
        "prefixed with the node's role and rank. The job ends non-zero as "
        "soon as one node fails, and leaves nothing running. See "
        "docs/launching.md.",
        epilog="Environment: EMBER_TIMEOUT, EMBER_LOG_DIR, EMBER_SCHEDULER, "
        "EMBER_PROGRAM_SCHEDULER, EMBER_BUILD_DIR, EMBER_SERVER_PROCS, "
        "EMBER_WORKER_PROCS, DMLC_PS_ROOT_PORT (fixed scheduler port), "
        "DMLC_PS_ROOT_URI (scheduler address for ssh/mpi/slurm). "
        "Exit status: 0 if every node exited 0; the first failing status "
        "otherwise; 124 on timeout; 2 on usage errors.")
    p.add_argument("--version", action="version",
                   version="%(prog)s (Ember) " + VERSION)
    p.add_argument("-n", "--num-workers", metavar="WORKERS", required=True,
                   help="number of workers (DMLC_NUM_WORKER)")
    p.add_argument("-s", "--num-servers", metavar="SERVERS",
                   help="number of servers (DMLC_NUM_SERVER; default: "
                   "WORKERS)")
    p.add_argument("--launcher", "--cluster", choices=LAUNCHERS,
                   default="local", help="how nodes are started (default: "
                   "local)")
    # Options that take one value: (flags, metavar, help).
    for flags, metavar, text in [
            (["-H", "--hostfile"], "FILE",
             "hosts for ssh (one '[user@]host[:port]' a line) or mpi (Open "
             "MPI's hostfile)"),
            (["--timeout"], "SECONDS", "stop the job and exit 124 after "
             "this long (default: EMBER_TIMEOUT, else none)"),
            (["--log-dir"], "DIR", "also write each node's raw output to "
             "DIR/<role>-<rank>.log (default: EMBER_LOG_DIR)"),
            (["--server-procs"], "N", "server processes (default: "
             "EMBER_SERVER_PROCS, else SERVERS)"),
            (["--worker-procs"], "N", "worker processes, each may host "
             "several logical workers (default: EMBER_WORKER_PROCS, else "
             "WORKERS)"),
            (["--scheduler"], "PROGRAM", "scheduler binary (default: "
             "EMBER_SCHEDULER, else ember_scheduler as searched by "
             "docs/launching.md)")]:
        p.add_argument(*flags, metavar=metavar, help=text)
    p.add_argument("--env", metavar="NAME=VALUE", action="append",
                   default=[], help="set NAME on every node (repeatable); "
                   "a bare NAME passes this host's value")
    p.add_argument("--program-scheduler", action="store_true",
                   help="run COMMAND as the scheduler too (ps-lite style)")
    p.add_argument("--ssh-command", metavar="CMD",
                   help="ssh client and options (default: 'ssh -o "
                   "BatchMode=yes')")
    p.add_argument("--failover", action="store_true",
                   help="a server that dies does not stop the job: Ember "
                   "fails its data over to the copies (EMBER_REPLICAS >= 1) "
                   "or ends the job itself (local and ssh)")
    p.add_argument("--replace-servers", metavar="N",
                   help="with --failover: start a new server in place of "
                   "each one that dies (EMBER_JOIN=replace), at most N in "
                   "the job (default 0; local only)")
    p.add_argument("--restart-scheduler", metavar="N",
                   help="start the scheduler again on its port when it dies "
                   "(EMBER_SCHEDULER_RESTART=1), at most N times (default "
                   "0; ember_scheduler only)")
    p.add_argument("--join", metavar="HOST:PORT",
                   help="start one more server into the running job whose "
                   "scheduler is at HOST:PORT (EMBER_JOIN=1), on this host; "
                   "-n and -s as that job's")
    p.add_argument("--engine-arg", metavar="ARG", action="append",
                   default=[], help="extra argument for mpirun or srun "
                   "(repeatable)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the program and its arguments ({role} becomes the "
                   "node's role)")
    return p


def parse_ember_launch(argv, environ, script_dirs):
    """ember-launch's command line -> Job. argparse exits 2 on its errors."""
    args = build_parser().parse_args(argv)
    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no COMMAND given")
    job = Job()
    job.launcher = args.launcher
    job.workers = parse_count(args.num_workers, "-n WORKERS")
    job.servers = (job.workers if args.num_servers is None else
                   parse_count(args.num_servers, "-s SERVERS"))
    job.server_procs, job.worker_procs = job.servers, job.workers
    job.command = list(command)
    apply_environment(job, environ)
    if args.server_procs is not None:
        job.server_procs = parse_count(args.server_procs, "--server-procs")
    if args.worker_procs is not None:
        job.worker_procs = parse_count(args.worker_procs, "--worker-procs")
    if args.timeout is not None:
        job.timeout = parse_seconds(args.timeout, "--timeout")
    if args.log_dir:
        job.log_dir = args.log_dir
    for pair in args.env:
        name, value = parse_env_pair(pair, environ)
        job.env[name] = value
    if args.hostfile:
        if job.launcher not in ("ssh", "mpi"):
            raise UsageError("--hostfile is for --launcher ssh or mpi")
        job.hostfile = args.hostfile
    elif job.launcher == "ssh":
        raise UsageError("--launcher ssh needs --hostfile")
    if args.ssh_command:
        job.ssh_command = shlex.split(args.ssh_command)
    job.engine_args = list(args.engine_arg)
    if job.launcher == "local":
        job.root_uri = None
    check_program(job, environ)
    if args.failover:
        if job.launcher not in ("local", "ssh"):
            raise UsageError("--failover needs --launcher local or ssh "
                             "(mpirun and srun end the job when a node "
                             "fails)")
        job.failover = True
    if args.replace_servers is not None:
        job.replace_servers = parse_count(args.replace_servers,
                                          "--replace-servers")
        if job.replace_servers and not job.failover:
            raise UsageError("--replace-servers needs --failover (without "
                             "it a server's death ends the job)")
        if job.replace_servers and job.launcher != "local":
            raise UsageError("--replace-servers needs --launcher local")
    if args.restart_scheduler is not None:
        job.restart_scheduler = parse_count(args.restart_scheduler,
                                            "--restart-scheduler")
        if job.restart_scheduler and args.program_scheduler:
            raise UsageError("--restart-scheduler restarts ember_scheduler "
                             "only: a program's own apps on the scheduler "
                             "would start from scratch")
    if args.join is not None:
        if job.restart_scheduler:
            raise UsageError("--restart-scheduler is for the launcher of the "
                             "job, not for --join")
        if job.replace_servers:
            raise UsageError("--replace-servers is for the launcher of the "
                             "job, not for --join")
        if job.launcher != "local":
            raise UsageError("--join starts its server on this host: it "
                             "needs --launcher local")
        if args.scheduler or args.program_scheduler or args.hostfile:
            raise UsageError("--join starts no scheduler and no other "
                             "node: --scheduler, --program-scheduler and "
                             "--hostfile do not apply")
        job.join = parse_join(args.join)
        return job
    sched_env = dict(environ)
    if args.scheduler:
        sched_env["EMBER_SCHEDULER"] = args.scheduler
    if args.program_scheduler:
        sched_env.pop("EMBER_SCHEDULER", None)
        sched_env["EMBER_PROGRAM_SCHEDULER"] = "1"
    find_scheduler(job, sched_env, script_dirs)
    return job


# ------------------------------------------------------------- environment --
def substitute_role(args, role):
    """An argument equal to {role} becomes the role's name (not argv[0])."""
    return args[:1] + [role if a == "{role}" else a for a in args[1:]]


def role_of_rank(rank, server_procs, worker_procs):
    """Engine rank -> (role, index): ranks 0..S-1 are the servers, the next
    W the workers (the scheduler runs beside the launcher)."""
    if rank < 0 or rank >= server_procs + worker_procs:
        raise ValueError("rank %d is outside 0..%d" %
                         (rank, server_procs + worker_procs - 1))
    if rank < server_procs:
        return "server", rank
    return "worker", rank - server_procs


def rank_from_environment(environ):
    for name in RANK_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value), name
    raise ValueError("no rank: none of %s is set" % ", ".join(RANK_VARIABLES))


def job_environment(job, root_uri, root_port):
    """The variables every node of the job gets (besides its role)."""
    env = dict(job.env)
    env.update({"DMLC_NUM_SERVER": str(job.servers),
                "DMLC_NUM_WORKER": str(job.workers),
                "DMLC_PS_ROOT_URI": root_uri,
                "DMLC_PS_ROOT_PORT": str(root_port)})
    return env


def node_environment(base, job, role, index, root_uri, root_port):
    """A local node's full environment: BASE, --env, the job's and the
    node's variables. EMBER_PORT_FILE is the scheduler's alone."""
    env = dict(base)
    env.pop("EMBER_PORT_FILE", None)
    env.update(job_environment(job, root_uri, root_port))
    env["DMLC_ROLE"] = role
    env["EMBER_RANK_HINT"] = str(index)
    return env


def join_environment(base, job):
    """The environment of the server that --join starts: a local server's,
    at the running job's scheduler, with EMBER_JOIN=1 and no rank hint (the
    scheduler gives it its rank)."""
    host, port = job.join
    env = node_environment(base, job, "server", 0, host, port)
    env.pop("EMBER_RANK_HINT", None)
    env["EMBER_JOIN"] = "1"
    return env


def remote_environment(base, job, root_uri, root_port):
    """What is sent to ssh and mpi nodes: this host's DMLC_*, EMBER_*, PS_*,
    GLOG_* and a few runtime variables, then --env and the job's."""
    env = {k: v for k, v in base.items()
           if k.startswith(REMOTE_ENV_PREFIXES) or k in REMOTE_ENV_NAMES}
    for k in ("EMBER_PORT_FILE", "DMLC_ROLE", "EMBER_RANK_HINT"):
        env.pop(k, None)
    env.update(job_environment(job, root_uri, root_port))
    return env


def is_loopback(address):
    return address.startswith("127.") or address in ("::1", "localhost")


def host_addresses(host):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(host, None)})
    except OSError:
        return []


def route_address(host, port=9):
    """The address of this host's interface that routes to HOST, or None.
    A UDP connect sends nothing."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, _, _, _, addr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(addr)
                return s.getsockname()[0]
        except OSError:
            continue
    return None


def this_host_address():
    """A non-loopback address of this host, or 127.0.0.1."""
    for addr in host_addresses(socket.getfqdn()):
        if not is_loopback(addr) and ":" not in addr:
            return addr
    # The interface of the default route (TEST-NET-1: nothing is sent).
    return route_address("192.0.2.1") or "127.0.0.1"


def is_this_host(host):
    if host in ("localhost", socket.gethostname(),
                socket.gethostname().split(".")[0]):
        return True
    addrs = host_addresses(host)
    return bool(addrs) and all(is_loopback(a) for a in addrs)


def choose_root_uri(job, hosts):
    """The scheduler's address as the nodes will reach it:
    DMLC_PS_ROOT_URI if set; 127.0.0.1 when every node runs on this host;
    else this host's address on the route to the first other host."""
    if job.root_uri:
        return job.root_uri
    if hosts is not None and all(is_this_host(h) for h in hosts):
        return "127.0.0.1"
    for h in hosts or []:
        if not is_this_host(h):
            addr = route_address(h)
            if addr and not is_loopback(addr):
                return addr
    return this_host_address()


# ---------------------------------------------------------------- hostfile --
def parse_hostfile(text):
    """Lines '[user@]host[:port] [slots=N]'; '#' starts a comment. Returns
    [(destination, port or None)], each host once per slot."""
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        dest, slots = fields[0], 1
        for f in fields[1:]:
            key, _, value = f.partition("=")
            if key in ("slots", "max_slots", "max-slots") and value.isdigit():
                if key == "slots":
                    slots = max(1, int(value))
            else:
                raise ValueError("line %d: cannot read '%s'" % (number, f))
        port = None
        host_part = dest.rsplit("@", 1)[-1]
        if host_part.count(":") == 1:
            dest, _, port_text = dest.rpartition(":")
            if not port_text.isdigit():
                raise ValueError("line %d: bad port '%s'" %
                                 (number, port_text))
            port = int(port_text)
        hosts += [(dest, port)] * slots
    if not hosts:
        raise ValueError("no hosts")
    return hosts


def hostname_of(dest):
    return dest.rsplit("@", 1)[-1].strip("[]")


def slurm_hosts(environ):
    """Hosts of the current Slurm allocation, or None if unknown."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get(
        "SLURM_NODELIST")
    if not nodelist:
        return None
    if all(c not in nodelist for c in "[,"):
        return [nodelist]
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=10,
                             check=True).stdout.decode()
        return out.split() or None
    except (OSError, subprocess.SubprocessError):
        return None


# -------------------------------------------------------------- processes --
def line_buffered(argv):
    """ARGV under stdbuf, so that a node's output comes a line at a time
    (where stdbuf exists)."""
    return (["stdbuf", "-oL", "-eL"] + argv if shutil.which("stdbuf")
            else argv)


def exit_status(returncode):
    """Popen's returncode -> the shell's convention (128 + signal)."""
    return 128 - returncode if returncode < 0 else returncode


def group_alive(pgid):
    """Does process group PGID have a live (non-zombie) member? Zombies are
    ignored: an init that does not reap orphans would keep a dead group
    'alive'."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


class Node:
    """One process the launcher started: a node, or an engine (mpirun, srun,
    an ssh client). Its combined stdout and stderr come through a pipe."""

    def __init__(self, name, prefix, popen, fd, log):
        self.name = name  # "server 1": in the launcher's messages.
        self.prefix = prefix.encode()
        self.popen = popen
        self.pid = popen.pid
        self.fd = fd  # Read end of its output pipe; None after EOF.
        self.log = log  # Raw output file, or None.
        self.pidfd = None
        self.buffer = b""
        self.status = None  # Exit status once reaped (128 + signal).
        self.group = False  # Leads a process group of its own.
        self.relays_nodes = False  # An engine relaying --node output.
        self.stdin_pipe = None  # Write end of its stdin pipe (ssh), if any.
        # Its failure does not stop the job (a server under --failover, a
        # scheduler with restarts left), and why, for the launcher's line.
        self.survivable = False
        self.survival_note = ""
        self.role = name.split(" ")[0]  # scheduler, server, worker, ...
        # What the launcher calls when it dies survivably: starts a node in
        # its place (--replace-servers, --restart-scheduler) if the job
        # allows; None: nothing.
        self.replace = None

    @property
    def running(self):
        return self.status is None


class Supervisor:
    """Starts processes, relays their output line by line with their prefix
    and waits for them, on one thread: a selector over the output pipes, a
    pidfd per process (or SIGCHLD) and the signal wake-up pipe."""

    def __init__(self, name, out_fd=1):
        self.name = name
        self.out_fd = out_fd
        self.out_broken = False
        self.nodes = []
        self.selector = selectors.DefaultSelector()
        self.signal_number = None
        # The first failure a --node line reported through an engine:
        # (name, pid, host, status).
        self.reported_failure = None
        self.survived = []  # Survivable nodes that failed, in order.
        self.replacements = []  # Nodes started in place of those.
        self.restarts = []  # Schedulers started again (--restart-scheduler).
        self.failure_line = re.compile(
            rb"^%s: ((?:server|worker) \d+) \(pid (\d+) on ([^)]*)\) "
            rb"exited with status (\d+)$" % re.escape(name.encode()))
        self.use_pidfd = hasattr(os, "pidfd_open")
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        self.old_wakeup = signal.set_wakeup_fd(self.wake_w)
        self.old_handlers = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                    signal.SIGCHLD):
            self.old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        if signum != signal.SIGCHLD and self.signal_number is None:
            self.signal_number = signum

    def close(self):
        signal.set_wakeup_fd(self.old_wakeup)
        for sig, handler in self.old_handlers.items():
            signal.signal(sig, handler)
        self.selector.close()
        os.close(self.wake_r)
        os.close(self.wake_w)

    def message(self, text):
        sys.stderr.write("%s: %s\n" % (self.name, text))
        sys.stderr.flush()

    def start(self, name, prefix, argv, env, log_path=None, stdin=None,
              new_group=True, death_signal=signal.SIGKILL):
        """Starts ARGV with ENV in a process group of its own (so stop()
        reaches its children too; a session of its own would put it in an
        autogroup of its own, which halved a 4 x 4 cluster's throughput on 2
        cores). It gets DEATH_SIGNAL if this process dies first, even by
        SIGKILL. Raises OSError if it cannot be started."""
        log = open(log_path, "wb") if log_path else None
        # process_group is Python 3.11's; the node mode, which may run on
        # other hosts' older Pythons, does without.
        group = {"process_group": 0} if new_group else {}
        r, w = os.pipe()
        try:
            popen = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL if stdin is None
                else stdin, stdout=w, stderr=w, close_fds=True,
                preexec_fn=lambda: set_parent_death_signal(death_signal),
                **group)
        except OSError:
            os.close(r)
            if log:
                log.close()
            raise
        finally:
            os.close(w)
        node = Node(name, prefix, popen, r, log)
        node.group = new_group
        os.set_blocking(r, False)
        self.selector.register(r, selectors.EVENT_READ, ("out", node))
        if self.use_pidfd:
            try:
                node.pidfd = os.pidfd_open(node.pid)
                self.selector.register(node.pidfd, selectors.EVENT_READ,
                                       ("exit", node))
            except OSError:
                self.use_pidfd = False
        self.nodes.append(node)
        return node

    # Output --------------------------------------------------------------
    def write(self, data):
        """Writes DATA to the output whole; drops it once the output is
        closed."""
        while data and not self.out_broken:
            try:
                data = data[os.write(self.out_fd, data):]
            except BlockingIOError:  # An output someone made non-blocking.
                time.sleep(0.01)
            except OSError:
                self.out_broken = True  # Output closed: keep supervising.

    def _emit(self, node, lines):
        # A survivable node's own failure line (an ssh client relays one
        # node) is left to its exit (--failover).
        if node.relays_nodes and self.reported_failure is None and \
                not node.survivable:
            for line in lines:
                m = self.failure_line.match(line)
                if m:
                    self.reported_failure = (m.group(1).decode(),
                                             int(m.group(2)),
                                             m.group(3).decode(),
                                             int(m.group(4)))
                    break
        if node.log:
            node.log.write(b"".join(line + b"\n" for line in lines))
            node.log.flush()
        self.write(b"".join(node.prefix + line + b"\n" for line in lines))

    def _close_output(self, node):
        """Stops reading the node's output and closes its log (once)."""
        if node.fd is not None:
            self.selector.unregister(node.fd)
            os.close(node.fd)
            node.fd = None
        if node.log:
            node.log.close()
            node.log = None

    def _read(self, node):
        try:
            data = os.read(node.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            if node.buffer:
                self._emit(node, [node.buffer])
                node.buffer = b""
            self._close_output(node)
            return
        lines = (node.buffer + data).split(b"\n")
        node.buffer = lines.pop()
        while len(node.buffer) > MAX_LINE:
            lines.append(node.buffer[:MAX_LINE])
            node.buffer = node.buffer[MAX_LINE:]
        if lines:
            self._emit(node, lines)

    # Exits ---------------------------------------------------------------
    def _reap(self, node):
        if node.status is not None:
            return False
        code = node.popen.poll()
        if code is None:
            return False
        node.status = exit_status(code)
        if node.pidfd is not None:
            self.selector.unregister(node.pidfd)
            os.close(node.pidfd)
            node.pidfd = None
        return True

    def step(self, timeout):
        """Waits up to TIMEOUT s for output, exits or signals; handles them.
        Returns the nodes that exited."""
        exited = []
        if not self.use_pidfd:
            timeout = 0.2 if timeout is None else min(timeout, 0.2)
        for key, _ in self.selector.select(timeout):
            if key.data is None:
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except OSError:
                    pass
                continue
            kind, node = key.data
            if kind == "out":
                self._read(node)
            elif kind == "eof":
                self._watch_eof(key.fd, node)
            elif self._reap(node):
                exited.append(node)
        if not self.use_pidfd:
            exited += [n for n in self.nodes if self._reap(n)]
        return exited

    def watch_eof(self, fd, callback):
        """Calls CALLBACK() once FD (read, and its data dropped) reaches end
        of file."""
        os.set_blocking(fd, False)
        self.selector.register(fd, selectors.EVENT_READ, ("eof", callback))

    def _watch_eof(self, fd, callback):
        try:
            if os.read(fd, 4096):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self.selector.unregister(fd)
        callback()

    def running(self):
        return [n for n in self.nodes if n.running]

    def describe_running(self):
        running = self.running()
        if running:
            self.message("still running: " + ", ".join(
                "%s (pid %d)" % (n.name, n.pid) for n in running))

    def node_alive(self, node):
        if node.running and node.popen.poll() is None:
            return True
        self._reap(node)
        return group_alive(node.pid) if node.group else False

    def signal_node(self, node, sig):
        """Signals NODE's process group and, while it is not reaped, NODE (a
        reaped PID is never signalled: it may belong to another process)."""
        if node.group:
            try:
                os.killpg(node.pid, sig)
            except OSError:
                pass
        if node.popen.returncode is None:
            try:
                node.popen.send_signal(sig)
            except OSError:
                pass

    def stop(self, first=()):
        """Stops everything started (SIGTERM, then SIGKILL after
        STOP_GRACE_S), relaying output meanwhile; then drains the output.
        FIRST: nodes to stop before the others (given time to stop the
        rest themselves, as engines do)."""
        first = list(first)
        for group in (first, [n for n in self.nodes if n not in first]):
            alive = [n for n in group if self.node_alive(n)]
            for n in group:
                if n.stdin_pipe is not None:
                    os.close(n.stdin_pipe)  # An ssh node sees EOF.
                    n.stdin_pipe = None
            for n in alive:
                self.signal_node(n, signal.SIGTERM)
            deadline = time.monotonic() + (ENGINE_GRACE_S if group is first
                                           else STOP_GRACE_S)
            while alive and time.monotonic() < deadline:
                self.step(0.05)
                alive = [n for n in alive if self.node_alive(n)]
            for n in alive:
                self.signal_node(n, signal.SIGKILL)
        for n in self.nodes:
            if n.running:
                try:
                    n.popen.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                self._reap(n)
        deadline = time.monotonic() + DRAIN_S
        while any(n.fd is not None for n in self.nodes) and \
                time.monotonic() < deadline:
            self.step(0.05)
        for n in self.nodes:
            self._close_output(n)


# ------------------------------------------------------------------ running --
class JobFailed(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


def run_job(job, environ, script_path):
    """Runs JOB to its end; returns the exit status."""
    sup = Supervisor(job.name)
    port_dir = None
    try:
        if job.log_dir:
            try:
                os.makedirs(job.log_dir, exist_ok=True)
            except OSError as e:
                sup.message("cannot create the log directory '%s': %s" %
                            (job.log_dir, e.strerror))
                return 2
        port_dir = tempfile.mkdtemp(prefix="ember-launch.")
        return _run(sup, job, environ, script_path, port_dir)
    except JobFailed as e:
        return e.status
    finally:
        sup.stop()
        sup.close()
        if port_dir:
            shutil.rmtree(port_dir, ignore_errors=True)


def _log_path(job, role, index):
    if not job.log_dir:
        return None
    return os.path.join(job.log_dir, "%s-%s.log" % (role, index))


def _wait(sup, job, deadline, until=None, engines=()):
    """Relays output and watches exits until UNTIL() holds (returns True) or
    every process has ended (returns False). Raises JobFailed on a failure,
    a signal or the deadline, after stopping everything."""
    while True:
        if until is not None and until():
            return True
        if sup.signal_number is not None:
            name = signal.Signals(sup.signal_number).name
            sup.message("interrupted (%s); stopping the cluster" % name)
            sup.stop(engines)
            raise JobFailed(SIGNAL_EXIT.get(sup.signal_number, 1))
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            sup.message("time limit of %g s exceeded; stopping the cluster" %
                        job.timeout)
            sup.describe_running()
            sup.stop(engines)
            raise JobFailed(124)
        if not sup.running():
            return False
        timeout = None if deadline is None else deadline - now
        if until is not None:
            timeout = 0.05 if timeout is None else min(timeout, 0.05)
        exited = sup.step(timeout)
        if sup.reported_failure is not None:
            name, pid, host, status = sup.reported_failure
            sup.message("%s (pid %d on %s) exited with status %d; stopping "
                        "the cluster" % (name, pid, host, status))
            sup.describe_running()
            sup.stop(engines)
            raise JobFailed(status)
        for node in exited:
            if node.status != 0 and node.survivable:
                sup.survived.append(node)
                sup.message("%s (pid %d) exited with status %d; the job goes "
                            "on %s" % (node.name, node.pid, node.status,
                                       node.survival_note))
                if node.replace is not None:
                    node.replace()
            elif node.status != 0:
                sup.message("%s (pid %d) exited with status %d; stopping "
                            "the cluster" % (node.name, node.pid,
                                             node.status))
                sup.describe_running()
                sup.stop(engines)
                raise JobFailed(node.status)


def _start(sup, *args, **kwargs):
    try:
        return sup.start(*args, **kwargs)
    except OSError as e:
        sup.message("cannot start %s: %s" % (args[2][0], e.strerror))
        raise JobFailed(126 if e.errno == errno.EACCES else 127)


def _run(sup, job, environ, script_path, port_dir):
    deadline = None
    if job.timeout > 0:
        deadline = time.monotonic() + job.timeout
    if job.join:
        return _run_join(sup, job, environ, deadline)
    local = job.launcher == "local"
    hosts = None
    if job.launcher == "ssh":
        try:
            with open(job.hostfile) as f:
                hosts = parse_hostfile(f.read())
        except (OSError, ValueError) as e:
            sup.message("hostfile %s: %s" % (job.hostfile, e))
            return 2
    elif job.launcher == "mpi":
        hosts = _mpi_hosts(job, environ)
    elif job.launcher == "slurm":
        hosts = slurm_hosts(environ)
    root_uri = "127.0.0.1" if local else choose_root_uri(
        job, None if hosts is None else
        [hostname_of(h[0]) if isinstance(h, tuple) else h for h in hosts])

    # The scheduler, on this host.
    if job.scheduler_note:
        sup.message(job.scheduler_note)
    port_file = os.path.join(port_dir, "port")
    sched_env = node_environment(environ, job, "scheduler", 0, root_uri,
                                 job.root_port or 0)
    if job.restart_scheduler and not sched_env.get("EMBER_RUN_KEY_FILE"):
        # Where the run's key waits for a scheduler started again.
        sched_env["EMBER_RUN_KEY_FILE"] = os.path.join(port_dir, "run.key")
    if job.root_port is None:
        sched_env["EMBER_PORT_FILE"] = port_file
    elif environ.get("EMBER_PORT_FILE"):
        sched_env["EMBER_PORT_FILE"] = environ["EMBER_PORT_FILE"]
    sched_argv = job.scheduler or substitute_role(job.command, "scheduler")
    scheduler = _start(sup, "scheduler 0", "[scheduler] ",
                       line_buffered(sched_argv), sched_env,
                       _log_path(job, "scheduler", 0))

    root_port = job.root_port
    if root_port is None:
        port_deadline = time.monotonic() + PORT_WAIT_S  # --timeout: _wait.

        def port_known():
            try:
                with open(port_file) as f:
                    text = f.read().strip()
            except OSError:
                text = ""
            return text.isdigit() or not scheduler.running or \
                time.monotonic() >= port_deadline

        try:
            _wait(sup, job, deadline, until=port_known)
        except JobFailed:
            if scheduler.status is not None and scheduler.status != 0:
                sup.message("the scheduler did not publish its port (see "
                            "its output above)")
            raise
        try:
            with open(port_file) as f:
                text = f.read().strip()
        except OSError:
            text = ""
        if not text.isdigit():
            sup.message("the scheduler did not publish its port (see its "
                        "output above)")
            sup.stop()
            status = scheduler.status
            raise JobFailed(status if status else 1)
        root_port = int(text)
    # Where a server joins this job from (ember-launch --join).
    sup.message("scheduler at %s" % join_address(root_uri, root_port))
    if job.restart_scheduler:
        scheduler.survivable = True
        scheduler.survival_note = SCHEDULER_NOTE
        scheduler.replace = _scheduler_restarter(sup, job, sched_argv,
                                                 sched_env, root_port)

    engines = []
    if local:
        for role, count in (("server", job.server_procs),
                            ("worker", job.worker_procs)):
            for i in range(count):
                env = node_environment(environ, job, role, i, root_uri,
                                       root_port)
                node = _start(sup, "%s %d" % (role, i), "[%s %d] " % (role, i),
                              line_buffered(substitute_role(job.command,
                                                            role)),
                              env, _log_path(job, role, i))
                node.survivable = job.failover and role == "server"
                node.survival_note = FAILOVER_NOTE
                if role == "server" and job.replace_servers:
                    node.replace = _replacer(sup, job, environ, i, root_uri,
                                             root_port)
    elif job.launcher == "ssh":
        engines = _start_ssh(sup, job, environ, script_path, hosts,
                             root_uri, root_port)
    elif job.launcher == "mpi":
        engines = [_start_engine(sup, job, "mpirun", _mpirun_argv(
            job, environ, script_path, root_uri, root_port), environ,
            root_uri, root_port)]
    else:
        engines = [_start_engine(sup, job, "srun", _srun_argv(
            job, script_path), environ, root_uri, root_port)]

    _wait(sup, job, deadline, engines=engines)
    servers = [n for n in sup.survived if n.role != "scheduler"]
    if servers:
        sup.message("the job finished without %s, which died during it "
                    "(--failover)%s" % (
                        ", ".join(n.name for n in servers),
                        "; replacements started: %s" % ", ".join(
                            n.name for n in sup.replacements)
                        if sup.replacements else ""))
    if sup.restarts:
        sup.message("the job finished; its scheduler died during it and was "
                    "started again %d time(s) (--restart-scheduler)" %
                    len(sup.restarts))
    return 0


def replacement_environment(base, job, index, root_uri, root_port):
    """The environment of a server started in place of local server INDEX
    (--replace-servers): that server's, with EMBER_JOIN=replace and no rank
    hint (the scheduler gives it a new rank)."""
    env = node_environment(base, job, "server", index, root_uri, root_port)
    env.pop("EMBER_RANK_HINT", None)
    env["EMBER_JOIN"] = "replace"
    return env


def _replacer(sup, job, environ, index, root_uri, root_port):
    """What starts a server in place of local server INDEX when it (or a
    replacement of it) dies, while replacements are left (--replace-servers)
    and the job runs: a worker is running, and so is the scheduler, or it
    died and will be started again (--restart-scheduler; the two may die
    together). The scheduler holds the replacement's join until it has
    declared the death (EMBER_JOIN=replace); the replacement asks again
    while it waits, so a restarted scheduler learns of it."""
    def replace():
        left = job.replace_servers - len(sup.replacements)
        scheduler = [n for n in sup.nodes if n.role == "scheduler"]
        workers = [n for n in sup.nodes if n.role == "worker"]
        if left <= 0:
            sup.message("no replacement for it: all %d started already "
                        "(--replace-servers)" % job.replace_servers)
            return
        # A scheduler that died survivably is started again as its death
        # is handled, perhaps later in the same step.
        if not any(n.running or (n.survivable and n.status)
                   for n in scheduler) or \
                not any(n.running for n in workers):
            sup.message("no replacement for it: the job is ending")
            return
        number = len(sup.replacements) + 1
        name = "replacement %d (server %d)" % (number, index)
        sup.message("starting %s in its place (%d of %d, "
                    "--replace-servers)" % (name, number,
                                            job.replace_servers))
        node = _start(sup, name, "[server %d r%d] " % (index, number),
                      line_buffered(substitute_role(job.command, "server")),
                      replacement_environment(environ, job, index, root_uri,
                                              root_port),
                      _log_path(job, "server", "%d-r%d" % (index, number)))
        node.role = "server"
        node.survivable = True
        node.survival_note = FAILOVER_NOTE
        node.replace = replace
        sup.replacements.append(node)
    return replace


def _scheduler_restarter(sup, job, sched_argv, sched_env, root_port):
    """What starts the scheduler again on ROOT_PORT when it dies while a
    worker (or an engine that runs them) runs (--restart-scheduler): with
    EMBER_SCHEDULER_RESTART=1 and the run's key file of the first one, it
    takes the running job back from its members' re-registrations
    (docs/replication.md, "Scheduler restart"). The last restart allowed is
    not survivable."""
    def restart():
        number = len(sup.restarts) + 1
        # Workers run here (local) or under an engine (mpirun, srun, ssh).
        if not any(n.running for n in sup.nodes
                   if n.role == "worker" or n.relays_nodes):
            sup.message("not starting it again: the job is ending")
            return
        name = "scheduler 0 (restart %d)" % number
        sup.message("starting the scheduler again on port %d (%d of %d, "
                    "--restart-scheduler)" % (root_port, number,
                                              job.restart_scheduler))
        env = dict(sched_env)
        env.pop("EMBER_PORT_FILE", None)
        env["DMLC_PS_ROOT_PORT"] = str(root_port)
        env["EMBER_SCHEDULER_RESTART"] = "1"
        node = _start(sup, name, "[scheduler r%d] " % number,
                      line_buffered(sched_argv), env,
                      _log_path(job, "scheduler", "0-r%d" % number))
        node.role = "scheduler"
        sup.restarts.append(node)
        node.survivable = number < job.restart_scheduler
        node.survival_note = SCHEDULER_NOTE
        node.replace = restart
    return restart


def join_address(host, port):
    return "%s:%d" % ("[%s]" % host if ":" in host else host, port)


def _run_join(sup, job, environ, deadline):
    """--join: one server, started into the running job at job.join with
    EMBER_JOIN=1 (docs/replication.md, "Joining"); it ends as the job's
    servers do, and this launcher with it."""
    host, port = job.join
    env = join_environment(environ, job)
    sup.message("starting a server into the job at %s" %
                join_address(host, port))
    _start(sup, "joining server", "[server +] ",
           line_buffered(substitute_role(job.command, "server")), env,
           _log_path(job, "server", "join"))
    _wait(sup, job, deadline)
    return 0


def _node_args(job, script_path, prefix):
    args = [PYTHON, script_path, "--node", "--name", job.name,
            "--server-procs", str(job.server_procs),
            "--worker-procs", str(job.worker_procs)]
    if prefix:
        args.append("--prefix")
    return args


def _mpi_hosts(job, environ):
    """Hosts mpirun will use, or None if unknown (an allocation)."""
    if job.hostfile:
        try:
            with open(job.hostfile) as f:
                return [hostname_of(h) for h, _ in parse_hostfile(f.read())]
        except (OSError, ValueError):
            return None
    if any(a.startswith(("--host", "-host", "-H", "--hostfile",
                         "-hostfile", "--machinefile")) for a in
           job.engine_args):
        return None
    if any(environ.get(v) for v in ("SLURM_JOB_ID", "PBS_NODEFILE",
                                    "LSB_HOSTS")):
        return None
    return ["localhost"]


def _mpirun_argv(job, environ, script_path, root_uri, root_port):
    argv = ["mpirun"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    argv += ["--oversubscribe", "--bind-to", "none",
             "-np", str(job.server_procs + job.worker_procs)]
    if job.hostfile:
        argv += ["--hostfile", job.hostfile]
    # -x NAME exports mpirun's own value (_start_engine sets them all): a
    # value on the command line would be visible to anyone running ps.
    for name in sorted(remote_environment(environ, job, root_uri, root_port)):
        argv += ["-x", name]
    argv += job.engine_args
    return argv + _node_args(job, script_path, True) + ["--"] + job.command


def _srun_argv(job, script_path):
    argv = ["srun", "--ntasks", str(job.server_procs + job.worker_procs),
            "--kill-on-bad-exit=1", "--export=ALL"] + job.engine_args
    return argv + _node_args(job, script_path, True) + ["--"] + job.command


def _start_engine(sup, job, name, argv, environ, root_uri, root_port):
    env = dict(environ)
    env.pop("EMBER_PORT_FILE", None)
    env.update(job_environment(job, root_uri, root_port))
    node = _start(sup, name, "", argv, env, None, death_signal=signal.SIGTERM)
    node.relays_nodes = True
    return node


def _start_ssh(sup, job, environ, script_path, hosts, root_uri, root_port):
    """One ssh client a node, hosts taken round-robin. Each client's stdin
    is a pipe that carries the node's environment (one JSON line: not on a
    command line, where ps would show it) and then stays open: when the
    launcher ends, the remote node sees EOF and stops its program."""
    remote_env = remote_environment(environ, job, root_uri, root_port)
    cwd = os.getcwd()
    clients = []
    slot = 0
    for role, count in (("server", job.server_procs),
                        ("worker", job.worker_procs)):
        for i in range(count):
            dest, port = hosts[slot % len(hosts)]
            slot += 1
            env = dict(remote_env, DMLC_ROLE=role, EMBER_RANK_HINT=str(i))
            remote = "cd %s && exec %s" % (shlex.quote(cwd), " ".join(
                shlex.quote(a) for a in _node_args(job, script_path, False) +
                ["--role", role, "--index", str(i), "--env-from-stdin",
                 "--watch-stdin", "--"] + job.command))
            argv = list(job.ssh_command)
            if port:
                argv += ["-p", str(port)]
            argv += [dest, remote]
            r, w = os.pipe()
            try:
                node = _start(sup, "%s %d" % (role, i),
                              "[%s %d] " % (role, i), argv,
                              dict(environ, **job_environment(
                                  job, root_uri, root_port)),
                              _log_path(job, role, i), stdin=r,
                              death_signal=signal.SIGTERM)
            finally:
                os.close(r)
            line = (json.dumps(env) + "\n").encode()
            while line:  # Fits the pipe: it does not block.
                line = line[os.write(w, line):]
            node.stdin_pipe = w
            node.relays_nodes = True  # The remote line names the real PID.
            node.survivable = job.failover and role == "server"
            node.survival_note = FAILOVER_NOTE
            clients.append(node)
    return clients


# --------------------------------------------------------------- node mode --
def set_parent_death_signal(sig):
    """Linux: deliver SIG to this process when its parent exits."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def read_environment(fd):
    """One JSON object of NAME: VALUE strings, on one line of FD."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            raise ValueError("no environment on stdin")
        data += chunk
    env = json.loads(data)
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("the environment on stdin is not NAME: VALUE")
    return env


def run_node(argv, environ):
    """--node: one server or worker under an engine. Picks the role (from
    --role/--index, or from the engine's rank), runs the program as its
    child, relays its output (with the role prefix if --prefix), forwards
    signals, stops it on EOF of stdin (--watch-stdin) or when the parent
    (the engine) dies, and exits with its status."""
    p = argparse.ArgumentParser(prog=NAME + " --node")
    p.add_argument("--name", default=NAME)
    p.add_argument("--server-procs", type=int, required=True)
    p.add_argument("--worker-procs", type=int, required=True)
    p.add_argument("--role", choices=("server", "worker"))
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--prefix", action="store_true")
    p.add_argument("--env-from-stdin", action="store_true")
    p.add_argument("--watch-stdin", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    environ = dict(environ)
    if args.env_from_stdin:
        try:
            environ.update(read_environment(0))
        except ValueError as e:
            sys.stderr.write("%s: --node: %s\n" % (args.name, e))
            return 2
    command = args.command[1:] if args.command[:1] == ["--"] else \
        args.command
    host = socket.gethostname()
    name = args.name
    if not command:
        sys.stderr.write("%s: --node: no command\n" % name)
        return 2
    if args.role:
        role, index = args.role, args.index
    else:
        try:
            rank, _ = rank_from_environment(environ)
            role, index = role_of_rank(rank, args.server_procs,
                                       args.worker_procs)
        except ValueError as e:
            sys.stderr.write("%s: on %s: %s\n" % (name, host, e))
            return 2
    env = dict(environ)
    env["DMLC_ROLE"] = role
    env["EMBER_RANK_HINT"] = str(index)
    env.pop("EMBER_PORT_FILE", None)
    # DMLC_NODE_HOST stays as the user set it, or unset: an Ember node finds
    # the address on its route to the scheduler itself
    # (docs/configuration.md, "Addresses"), and honours DMLC_INTERFACE and
    # EMBER_BIND_HOST, which a value set here would override.
    label = "%s %d" % (role, index)
    program = resolve_executable(command[0], env.get("PATH"))
    if program is None:
        sys.stderr.write("%s: %s on %s: program '%s' not found or not "
                         "executable\n" % (name, label, host, command[0]))
        return 127
    command = substitute_role([program] + command[1:], role)
    command = line_buffered(command)

    parent = os.getppid()
    set_parent_death_signal(signal.SIGTERM)
    sup = Supervisor(name)
    try:
        try:
            child = sup.start(
                label, "[%s] " % label if args.prefix else "", command, env,
                new_group=False)
        except OSError as e:
            sys.stderr.write("%s: %s on %s: cannot start %s: %s\n" %
                             (name, label, host, command[0], e.strerror))
            return 127
        stop_reasons = []
        if args.watch_stdin:
            sup.watch_eof(0, lambda: stop_reasons.append(
                "the launcher went away"))
        if os.getppid() != parent:  # It died before the death signal was set.
            stop_reasons.append("the engine went away")
        while child.running and not stop_reasons:
            if sup.signal_number is not None:
                stop_reasons.append(signal.Signals(sup.signal_number).name)
                break
            sup.step(None)
        stop_reason = stop_reasons[0] if stop_reasons else None
        if stop_reason is not None and child.running:
            # Forward the stop: SIGTERM, then SIGKILL after the grace, its
            # output relayed meanwhile.
            child.popen.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while child.running and time.monotonic() < deadline:
                sup.step(0.05)
            if child.running:
                child.popen.kill()
                child.popen.wait()
                sup._reap(child)
        deadline = time.monotonic() + DRAIN_S
        while child.fd is not None and time.monotonic() < deadline:
            sup.step(0.05)
        status = child.status
        if status != 0:
            msg = "%s: %s (pid %d on %s) exited with status %d" % (
                name, label, child.pid, host, status)
            if stop_reason:
                msg += " (stopped: %s)" % stop_reason
            sup.write((msg + "\n").encode())
        return status
    finally:
        sup.close()


# --------------------------------------------------------------------- main --
def main(argv=None, environ=None):
    argv = sys.argv[1:] if argv is None else argv
    environ = dict(os.environ) if environ is None else environ
    script_path = os.path.realpath(__file__)
    if argv[:1] == ["--node"]:
        return run_node(argv[1:], environ)
    if argv[:1] == ["--local-sh"]:
        # scripts/local.sh: --local-sh WRAPPER_PATH ARGS...
        wrapper = argv[1] if len(argv) > 1 else script_path
        dirs = [os.path.dirname(wrapper),
                os.path.dirname(os.path.realpath(wrapper)),
                os.path.dirname(script_path)]
        name = local_sh_name(wrapper)
        try:
            job = parse_local_sh(argv[2:], environ, _unique(dirs), name)
        except UsageError as e:
            sys.stderr.write("%s: %s\n%s\n" % (
                name, e, LOCAL_SH_USAGE.replace("local.sh", name)))
            return 2
    else:
        dirs = [os.path.dirname(sys.argv[0] or script_path),
                os.path.dirname(script_path)]
        try:
            job = parse_ember_launch(argv, environ, _unique(dirs))
        except UsageError as e:
            build_parser().print_usage(sys.stderr)
            sys.stderr.write("%s: error: %s\n" % (NAME, e))
            return 2
    if job is None:
        return 0
    return run_job(job, environ, script_path)


def _unique(items):
    seen = []
    for i in items:
        if i not in seen:
            seen.append(i)
    return seen


if __name__ == "__main__":
    sys.exit(main())
