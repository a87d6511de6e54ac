"""Where ControlPlane.read finds what `kubectl get -o json` would print (devplatform.cluster.apipaths)."""

from __future__ import annotations

from typing import Any

import pytest

from devplatform.cluster import apipaths


@pytest.mark.parametrize(
    ("resource", "name", "namespace", "path"),
    [
        ("pods", None, "ns", "/api/v1/namespaces/ns/pods"),
        ("pod", "p-1", "ns", "/api/v1/namespaces/ns/pods/p-1"),
        ("pvc", "data", "ns", "/api/v1/namespaces/ns/persistentvolumeclaims/data"),
        ("job", "j", "ns", "/apis/batch/v1/namespaces/ns/jobs/j"),
        ("leases", "l", "nimbix-burst", "/apis/coordination.k8s.io/v1/namespaces/nimbix-burst/leases/l"),
        ("certificates.cert-manager.io", None, "n", "/apis/cert-manager.io/v1/namespaces/n/certificates"),
        ("node", "real", None, "/api/v1/nodes/real"),
        ("namespace", "t-1", None, "/api/v1/namespaces/t-1"),
        (
            "mutatingwebhookconfigurations",
            "m",
            None,
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/m",
        ),
    ],
)
def test_paths(resource: str, name: str | None, namespace: str | None, path: str) -> None:
    assert apipaths.build_path(resource, name=name, namespace=namespace) == path


@pytest.mark.parametrize(
    ("resource", "namespace", "complaint"),
    [("pods", None, "namespaced"), ("widgets", "ns", "no API path")],
)
def test_what_it_cannot_place_is_refused(resource: str, namespace: str | None, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        apipaths.build_path(resource, namespace=namespace)


def test_a_name_is_one_path_segment() -> None:
    assert apipaths.build_path("pods", name="a/b", namespace="ns") == "/api/v1/namespaces/ns/pods/a%2Fb"


def test_selectors_become_the_query() -> None:
    assert apipaths.build_query() == []
    assert apipaths.build_query(labels="job-name=j", fields="involvedObject.name=p") == [
        ("labelSelector", "job-name=j"),
        ("fieldSelector", "involvedObject.name=p"),
    ]


def test_a_document_reads_as_kubectl_prints_it() -> None:
    listed: dict[str, Any] = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": [{"metadata": {"name": "p", "managedFields": [{}]}}],
    }
    assert apipaths.as_kubectl_prints(listed)["items"] == [
        {"metadata": {"name": "p"}, "kind": "Pod", "apiVersion": "v1"}
    ]
    one = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "managedFields": [{}]}}
    assert apipaths.as_kubectl_prints(one) == {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}}


@pytest.mark.parametrize(
    ("headers", "texts"),
    [
        ([], []),
        (['299 - "the pod bursts"'], ["the pod bursts"]),
        (['299 - "a \\"quoted\\" cap \\\\ here"', '299 - "two"'], ['a "quoted" cap \\ here', "two"]),
        (["199 agent free text"], ["199 agent free text"]),  # not the API server's form: as it came
    ],
)
def test_warnings_read_as_kubectl_prints_them(headers: list[str], texts: list[str]) -> None:
    assert apipaths.parse_warnings(headers) == texts
