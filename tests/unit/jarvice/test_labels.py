"""Job labels that carry the cluster identity: built and parsed back (the runner reads the identity
from its environment: tests/unit/entrypoint/test_cluster_settings.py)."""

import hashlib

import pytest

from jarvice import labels
from jarvice.labels import PodIdentity
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
CLUSTER = "0123456789ab"  # an identity without a name: 12 hex digits of the kube-system UID
NAMED = "staging-0123456789ab"
LONGEST = "n" * 30 + "-0123456789ab"  # the longest identity: a 30-character name
C63 = "c" * 63  # the longest container name Kubernetes allows


def sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def pod(container: str = "", cluster: str = CLUSTER, uid: str = UID) -> PodIdentity:
    return PodIdentity(uid, "ns", "p", "h", container, cluster=cluster)


@pytest.mark.parametrize(
    ("identity", "attempt", "expected"),
    [
        (pod(), 1, f"k8s-{CLUSTER}.{UID}-1"),
        (pod("trainer"), 1, f"k8s-{CLUSTER}.{UID}-trainer-1"),
        (pod("trainer", NAMED), 2, f"k8s-{NAMED}.{UID}-trainer-2"),
        # Past the legacy 50 characters the container name stays whole (255 is the limit) ...
        (pod("a-long-container-name", NAMED), 1, f"k8s-{NAMED}.{UID}-a-long-container-name-1"),
        (pod(C63, LONGEST), 99999, f"k8s-{LONGEST}.{UID}-{C63}-99999"),
        # ... and is hashed only when the label would pass 255 (an absurd attempt number here).
        (pod(C63, LONGEST), 10**106, f"k8s-{LONGEST}.{UID}-~{sha(C63)[:61]}-{10**106}"),
        # Without a cluster: the legacy label, 50 characters at most.
        (pod("a-long-container-name", ""), 1, f"k8s-{UID}-~{sha('a-long-container-name')[:6]}-1"),
        # Without a pod UID the fallback label is not meant to be parsed; the cluster adds nothing.
        (pod("c", CLUSTER, uid=""), 1, "k8s-ns/p-c-1"),
    ],
    ids=[
        "no-container",
        "container",
        "named-cluster",
        "past-50-kept-whole",
        "longest-parts-kept-whole",
        "hashed-past-255",
        "legacy-hashed-past-50",
        "no-uid-fallback",
    ],
)
def test_cluster_job_label(identity: PodIdentity, attempt: int, expected: str) -> None:
    label = labels.build_job_label(identity, attempt=attempt)
    assert label == expected
    assert len(label) <= 255


@pytest.mark.parametrize("container", ["", "a", "trainer", C63])
@pytest.mark.parametrize("cluster", [CLUSTER, NAMED, LONGEST])
@pytest.mark.parametrize("attempt", [1, 10, 99999])
def test_cluster_labels_parse_back(container: str, cluster: str, attempt: int) -> None:
    label = labels.build_job_label(pod(container, cluster), attempt=attempt)
    assert labels.parse_job_label(label) == labels.ParsedLabel(
        pod_uid=UID, container=container or None, container_hashed=False, attempt=attempt, cluster=cluster
    )


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        (f"k8s-{UID}-app-1", labels.ParsedLabel(UID, "app", False, 1, None)),
        (f"k8s-{UID}-3", labels.ParsedLabel(UID, None, False, 3, None)),
        (f"k8s-{UID}-~1a2b3c-2", labels.ParsedLabel(UID, "~1a2b3c", True, 2, None)),
        (f"k8s-{CLUSTER}.{UID}-app-1", labels.ParsedLabel(UID, "app", False, 1, CLUSTER)),
        (f"k8s-{NAMED}.{UID}-1", labels.ParsedLabel(UID, None, False, 1, NAMED)),
        (f"k8s-{NAMED}.{UID}-my-app-2-12", labels.ParsedLabel(UID, "my-app-2", False, 12, NAMED)),
        (f"k8s-{CLUSTER}.{UID}-~abc-7", labels.ParsedLabel(UID, "~abc", True, 7, CLUSTER)),
    ],
    ids=["legacy", "legacy-no-container", "legacy-hashed", "cluster", "named-no-container", "digits", "hashed"],
)
def test_parse_job_label(label: str, expected: labels.ParsedLabel) -> None:
    assert labels.parse_job_label(label) == expected


@pytest.mark.parametrize(
    "label",
    [
        "",
        "hello",
        "k8s-team-a/train-0-c-1",  # the fallback label
        f"k8s-{UID}",  # no attempt
        f"k8s-{CLUSTER}.{UID}",
        f"k8s-{CLUSTER}.{UID}-app-0",  # attempts start at 1
        f"k8s-{CLUSTER}.{UID}-app-01",
        f"k8s-{CLUSTER}.{UID}-Bad_Name-1",
        f"k8s-{CLUSTER}.{UID}-{'c' * 64}-1",  # longer than a container name
        f"k8s-{CLUSTER}.{UID}-~-1",  # a hash mark without a hash
        f"k8s-{CLUSTER}.{UID}-~xyz-1",  # not hex
        f"k8s-0123456789a.{UID}-1",  # 11 hex digits
        f"k8s-0123456789abc.{UID}-1",  # 13
        f"k8s-0123456789AB.{UID}-1",  # upper case
        f"k8s-{'n' * 31}-0123456789ab.{UID}-1",  # the name is too long
        f"k8s--0123456789ab.{UID}-1",  # the name is empty
        f"k8s-bad--0123456789ab.{UID}-1",  # the name ends with '-'
        f"k8s-.{UID}-1",  # an empty cluster
        f"k8s-{CLUSTER}{UID}-1",  # no separator
        f"k8s-{CLUSTER}.{CLUSTER}.{UID}-1",
        f"k8s-{CLUSTER}.{UID.upper()}-1",
        f"k8s-{CLUSTER}.{UID[:-1]}-1",  # a UID cut short
        f"K8S-{CLUSTER}.{UID}-1",
        f"k8s-{CLUSTER}.{UID}-app-1 ",
        f"x-k8s-{CLUSTER}.{UID}-app-1",
    ],
)
def test_parse_job_label_rejects(label: str) -> None:
    assert labels.parse_job_label(label) is None


@pytest.mark.parametrize(
    ("label", "container", "expected"),
    [
        (f"k8s-{CLUSTER}.{UID}-app-1", "app", True),
        (f"k8s-{CLUSTER}.{UID}-app-1", "app2", False),
        (f"k8s-{CLUSTER}.{UID}-1", "anything", True),  # no container part: any container of the pod
        (f"k8s-{UID}-~{sha('a-long-container-name')[:6]}-1", "a-long-container-name", True),
        (f"k8s-{UID}-~{sha('a-long-container-name')[:6]}-1", "a-long-container-namf", False),
        (f"k8s-{UID}-~{sha('x')[:3]}-1000", "x", True),
    ],
    ids=["same", "other", "no-part", "hashed", "hashed-other", "short-hash"],
)
def test_label_names_container(label: str, container: str, expected: bool) -> None:
    parsed = labels.parse_job_label(label)
    assert parsed is not None
    assert parsed.names_container(container) is expected
