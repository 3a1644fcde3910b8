#!/usr/bin/python3
"""A 2 x 2 job under attack by a process that never joined it (forge).

usage: hostile_test.py control|token|garbage|curve LOCAL_SH CLUSTER_KV FORGE
                       [SCHEDULER]

control  forged ABORT, NODE_TABLE, NODE_FAILED, heartbeats, LEAVE, barrier
         requests and pushes, and a late join: each node drops and counts what
         it was sent, logs it, and the job finishes with exact sums.
token    the same with EMBER_CLUSTER_TOKEN set: the scheduler also refuses the
         join for its missing token, and says so.
garbage  10 s of random frames at every node's port: each node returns the
         heap the flood left by itself, a heartbeat after it ended, so that
         its resident memory at the end grows by at most 20 MB (and by at most
         20 MB once malloc has returned all the freed heap it keeps for
         reuse); its peak stays under
         256 MB (the largest buffer a node keeps for unsolicited data, the
         messages held before its node table), each logs at most 100 lines
         about it, and the job finishes with exact sums (cluster_kv checks the
         memory).
curve    the control attack on a job with EMBER_CURVE=1 (SCHEDULER makes its
         key file), by an outsider that knows the cluster's public key and
         connects with CURVE and a key pair of its own: no message reaches
         any node, the nodes refuse its connections and say so, and the job
         finishes with exact sums.

The program is the scheduler too (EMBER_PROGRAM_SCHEDULER=1), so the
scheduler reports what it dropped like the others. Every process's output is
printed when the test fails.
"""

import os
import re
import subprocess
import sys
import tempfile

ROLES = ["scheduler-0", "server-0", "server-1", "worker-0", "worker-1"]
MAX_LOG_LINES = 100
MAX_RSS_GROWTH_MB = 20
MAX_PEAK_GROWTH_MB = 256


def fail(why, output):
    sys.stdout.write(output)
    print(f"hostile_test: FAIL: {why}")
    sys.exit(1)


def check_curve(output, node_logs):
    """Nothing of the outsider's reached a node; its connections were
    refused and logged."""
    refused = 0
    for role, log in node_logs.items():
        report = re.search(r"cluster_kv: dropped (\d+) unauthenticated", log)
        if not report:
            fail(f"{role} did not report what it dropped", output)
        if int(report.group(1)) != 0:
            fail(f"{role} received the outsider's messages", output)
        refused += log.count("does not hold the cluster's CURVE key")
    if refused == 0:
        fail("no node logged the refused connections", output)
    if "forge: the join was not answered" not in output:
        fail("the outsider's join was answered", output)
    print(f"hostile_test: no message reached a node; {refused} log lines "
          "about refused connections")
    print("hostile_test: PASS (curve)")
    return 0


def main():
    modes = ("control", "token", "garbage", "curve")
    if len(sys.argv) not in (5, 6) or sys.argv[1] not in modes or (
            sys.argv[1] == "curve" and len(sys.argv) != 6):
        print(__doc__)
        return 2
    mode, local_sh, cluster_kv, forge = sys.argv[1:5]
    forge_mode = "garbage --seconds=10" if mode == "garbage" else "control"
    env = dict(os.environ)
    env.update({"EMBER_PROGRAM_SCHEDULER": "1", "EMBER_TIMEOUT": "90"})
    env.pop("EMBER_CLUSTER_TOKEN", None)
    env.pop("EMBER_CLUSTER_TOKEN_FILE", None)
    if mode == "token":
        env["EMBER_CLUSTER_TOKEN"] = "hostile-test-token"
    with tempfile.TemporaryDirectory() as logs:
        env["EMBER_LOG_DIR"] = logs
        if mode == "curve":
            key = os.path.join(logs, "cluster.key")
            subprocess.run([sys.argv[5], "--make_curve_key=" + key],
                           check=True, stdout=subprocess.DEVNULL)
            env.update({"EMBER_CURVE": "1", "EMBER_CURVE_KEY_FILE": key})
            forge_mode += " --curve_public_key_file=" + key
        command = [local_sh, "2", "2", cluster_kv,
                   f"--attack={forge} --mode={forge_mode}"]
        no_rss = os.environ.get("EMBER_HOSTILE_NO_RSS_CHECK")
        if mode == "garbage" and no_rss:
            print(f"hostile_test: memory growth not checked: {no_rss}")
        elif mode == "garbage":
            command += [f"--max_rss_growth_mb={MAX_RSS_GROWTH_MB}",
                        f"--max_peak_growth_mb={MAX_PEAK_GROWTH_MB}"]
        try:
            run = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=110,
                                 check=False)
        except subprocess.TimeoutExpired as e:
            fail("the job did not end within 110 s",
                 (e.output or b"").decode(errors="replace"))
        output = run.stdout.decode(errors="replace")
        if run.returncode != 0:
            fail(f"the job ended with status {run.returncode}", output)
        node_logs = {}
        for role in ROLES:
            path = os.path.join(logs, role + ".log")
            if not os.path.exists(path):
                fail(f"no log of {role}", output)
            with open(path, errors="replace") as f:
                node_logs[role] = f.read()
        if mode == "curve":
            return check_curve(output, node_logs)

    if "forge: " not in output:
        fail("the attack did not run", output)
    for role, log in node_logs.items():
        report = re.search(r"cluster_kv: dropped (\d+) unauthenticated", log)
        if not report:
            fail(f"{role} did not report what it dropped", output)
        if int(report.group(1)) == 0:
            fail(f"{role} dropped nothing: the attack did not reach it",
                 output)
        if "aborted" in log or "declared dead" in log:
            fail(f"{role} took a forged message for real", output)
        lines = sum(1 for line in log.splitlines() if "dropping" in line)
        if lines > MAX_LOG_LINES:
            fail(f"{role} logged {lines} lines about dropped messages "
                 f"(at most {MAX_LOG_LINES})", output)
        growth = re.search(r"resident memory grew by -?\d+ MB[^\n]*", log)
        print(f"hostile_test: {role}: {report.group(0)}, "
              f"{lines} log lines about drops, "
              f"{growth.group(0) if growth else 'resident memory: ?'}")
    if mode in ("control", "token"):
        answer = re.search(r"forge: the join was answered: abort: (.*)", output)
        if not answer:
            fail("the forged join got no ABORT", output)
        print(f"hostile_test: the forged join was refused: {answer.group(1)}")
        if mode == "token":
            if "EMBER_CLUSTER_TOKEN" not in answer.group(1):
                fail("the join was not refused for its token", output)
            if not re.search(r"refusing a join from worker .*: no cluster "
                             r"token", node_logs["scheduler-0"]):
                fail("the scheduler did not log the refused join", output)
    print(f"hostile_test: PASS ({mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
