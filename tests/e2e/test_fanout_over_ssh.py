"""The base image's fan-out over real OpenSSH, in a pod on the real node: the image's own sshd and ssh
client, as the image's non-root user (10001, home /home/app).

What a multi-node JARVICE job needs from the image, short of JARVICE itself: the pod starts its own
sshd (as that user, on 127.0.0.1, a host key and authorized_keys made in the pod, `UsePAM no`, the
default StrictModes), gives the user an ssh config naming a second node `node-1` (that sshd), writes
a nodes file of two nodes and runs the base image's JARVICE run command with the ssh transport. Rank 0
runs on this "node", rank 1 goes through ssh -> sshd -> the rank's guard -> `bash -l -c`. Only the
second node is the same pod: JARVICE's own sshd set-up (keys, who starts sshd) is not what runs here."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from devplatform import demo, images
from devplatform.cluster import controlplane, node
from tests.support import real_node_pods

HOME = "/home/app"
SSH_PORT = 22022
MASTER_PORT = 29555
JARVICE_DIR = f"{HOME}/jarvice"
# sshd and the user's ssh set-up, made in the pod; then the run command JARVICE runs, with the
# command in $RANKS. The fan-out's status is the pod's.
SETUP = f"""
set -euo pipefail
ssh_dir={HOME}/.ssh
mkdir -p -m 700 "$ssh_dir"
ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/id_ed25519"
install -m 600 "$ssh_dir/id_ed25519.pub" "$ssh_dir/authorized_keys"
cat >"$ssh_dir/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port {SSH_PORT}
HostKey $ssh_dir/host_key
AuthorizedKeysFile $ssh_dir/authorized_keys
PidFile $ssh_dir/sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
EOF
/usr/sbin/sshd -f "$ssh_dir/sshd_config" -E "$ssh_dir/sshd.log"
# BatchMode needs a key without a passphrase; the fan-out's own options skip the host-key check.
install -m 600 /dev/null "$ssh_dir/config"
cat >"$ssh_dir/config" <<EOF
Host node-1
  HostName 127.0.0.1
  Port {SSH_PORT}
  IdentityFile $ssh_dir/id_ed25519
  IdentitiesOnly yes
EOF
mkdir -p {JARVICE_DIR}
printf 'node-0\\nnode-1\\n' >{JARVICE_DIR}/nodes
status=0
/usr/local/bin/nimbix-burst-run-command "$RANKS" || status=$?
echo "fan-out exit $status"
echo "ranks left: $(pgrep -c -x -f 'sleep 300' || true)"
sed 's/^/sshd: /' "$ssh_dir/sshd.log"
exit "$status"
"""
RANK_LINE = (
    'echo "rank=$NODE_RANK of $NNODES index=$JOB_COMPLETION_INDEX master=$MASTER_ADDR:$MASTER_PORT'
    ' ssh=${SSH_CONNECTION:+yes} uid=$(id -u) dir=$PWD python=$(command -v python)"'
)


def fanout_pod(name: str, ranks: str) -> dict[str, Any]:
    # The kubelet reads `$$` and `$(NAME)` in a variable's value: the rank commands use neither.
    assert "$$" not in ranks
    env = {
        "RANKS": ranks,
        "NIMBIX_BURST_NODES_DIR": JARVICE_DIR,
        "NIMBIX_BURST_FANOUT_TRANSPORT": "ssh",
        "MASTER_PORT": str(MASTER_PORT),
        "LOG_LEVEL": "INFO",
    }
    container = {
        "name": "app",
        "image": images.BASE,
        "imagePullPolicy": "Never",
        "command": ["bash", "-c", SETUP],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    spec = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True},  # the image's USER 10001:10001, nothing set here
        "containers": [container],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": demo.build_real_node_placement(spec)}


def run_pod(plane: controlplane.ControlPlane, namespace: str, ranks: str) -> tuple[int | None, str]:
    name = f"fanout-ssh-{uuid.uuid4().hex[:6]}"
    plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(fanout_pod(name, ranks)))
    pod = real_node_pods.wait_finished(plane, namespace, name)
    logs = plane.kubectl("logs", "-n", namespace, name).stdout
    return demo.read_exit_code(pod), logs


def accepted_logins(logs: str) -> int:
    return len(re.findall(r"^sshd: Accepted publickey for app from 127\.0\.0\.1", logs, flags=re.MULTILINE))


def test_rank_1_runs_through_sshd_with_the_fan_outs_variables(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    code, logs = run_pod(control_plane, namespace, RANK_LINE)
    assert code == 0, logs
    where = f"uid=10001 dir={HOME} python=/opt/venv/bin/python"
    assert f"rank=0 of 2 index=0 master=node-0:{MASTER_PORT} ssh= {where}\n" in logs, logs
    assert f"rank=1 of 2 index=1 master=node-0:{MASTER_PORT} ssh=yes {where}\n" in logs, logs
    assert accepted_logins(logs) == 1, logs
    assert '"transport": "ssh"' in logs and "fan-out exit 0" in logs


def test_a_failing_remote_ranks_status_is_the_jobs_and_the_local_rank_is_stopped(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    ranks = 'if [ "$NODE_RANK" = 1 ]; then exit 7; fi; trap \'echo "rank 0 stopped"; exit 143\' TERM; sleep 300 & wait'
    code, logs = run_pod(control_plane, namespace, ranks)
    assert code == 7, logs
    assert "rank 0 stopped" in logs and "fan-out exit 7" in logs and "ranks left: 0" in logs, logs
    assert accepted_logins(logs) == 1, logs


def test_a_remote_rank_killed_by_a_signal_reports_that_signal(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    """ssh alone would report a remote command killed by a signal as 255; the guard says 128+N."""
    code, logs = run_pod(control_plane, namespace, 'if [ "$NODE_RANK" = 1 ]; then kill -KILL $BASHPID; fi; sleep 1')
    assert code == 137, logs
    assert "fan-out exit 137" in logs, logs


def test_a_failing_local_rank_stops_the_remote_rank_through_ssh(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    """Rank 0 fails once rank 1 runs: the fan-out ends ssh's input, the guard on the "other node"
    SIGTERMs rank 1 (its trap speaks), and no rank is left running when the fan-out returns."""
    started = f"{HOME}/rank-1-started"
    ranks = (
        'if [ "$NODE_RANK" = 1 ]; then'
        " trap 'echo \"rank 1 stopped ssh=${SSH_CONNECTION:+yes}\"; exit 143' TERM;"
        f" sleep 300 & touch {started}; wait;"
        f" else while [ ! -e {started} ]; do sleep 0.1; done; exit 4; fi"
    )
    code, logs = run_pod(control_plane, namespace, ranks)
    assert code == 4, logs
    assert "rank 1 stopped ssh=yes" in logs, logs
    # The guard on the far side logs at the fan-out's LOG_LEVEL (INFO), which ssh carried to it.
    assert "the fan-out's input ended; stopping the rank" in logs, logs
    assert '"rank": 1, "exit_code": 143' in logs, logs  # the remote rank's own status, through ssh
    assert "fan-out exit 4" in logs and "ranks left: 0" in logs, logs
