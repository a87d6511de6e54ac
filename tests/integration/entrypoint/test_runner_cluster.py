"""The runner carries the cluster identity the webhook gives it in its job label, or says that the
reaper will never stop a job without one."""

from devplatform.emulator import EmulatorControl, EmulatorThread
from tests.support.runner_processes import base_env, run_runner

CLUSTER = "dev-0123456789ab"
NO_CLUSTER_WARNING = "no cluster identity: the orphan reaper will never stop this job"


def test_the_job_label_carries_the_cluster(emulator: EmulatorThread, control: EmulatorControl) -> None:
    env = base_env(
        emulator.url, APP_COMMAND_ARGS="echo hi", NIMBIX_BURST_CLUSTER=CLUSTER, NIMBIX_BURST_CONTAINER="trainer"
    )
    code, runner = run_runner(env)
    assert code == 0, runner.err
    label = f"k8s-{CLUSTER}.{env['POD_UID']}-trainer-1"
    assert [job["status"] for job in control.jobs(label)] == ["COMPLETED"]
    assert NO_CLUSTER_WARNING not in runner.messages()


def test_without_a_cluster_the_runner_warns_once(emulator: EmulatorThread, control: EmulatorControl) -> None:
    env = base_env(emulator.url, APP_COMMAND_ARGS="echo hi")
    code, runner = run_runner(env)
    assert code == 0, runner.err
    (warning,) = [entry for entry in runner.logs() if entry["message"] == NO_CLUSTER_WARNING]
    assert warning["level"] == "WARNING" and warning["variable"] == "NIMBIX_BURST_CLUSTER"
    assert control.jobs(f"k8s-{env['POD_UID']}-1")


def test_an_invalid_cluster_is_a_settings_error(emulator: EmulatorThread, control: EmulatorControl) -> None:
    env = base_env(emulator.url, APP_COMMAND_ARGS="echo hi", NIMBIX_BURST_CLUSTER="Prod")
    code, runner = run_runner(env)
    assert code == 78
    (error,) = [entry for entry in runner.logs() if entry["level"] == "ERROR"]
    assert error["message"] == "invalid settings" and "NIMBIX_BURST_CLUSTER" in error["problems"][0]
    assert control.stats()["requests"] == {}
