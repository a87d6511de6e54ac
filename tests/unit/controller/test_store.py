"""PodStore keeps a ReapView of every pod, labeled or not, as the watch adds, changes and deletes it."""

from __future__ import annotations

from typing import Any

from controller.store import PodStore


def obj(uid: str, *, phase: str = "Running", labeled: bool = False) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid}",
            "namespace": "n",
            "labels": {"task-type": "Nimbix"} if labeled else {},
        },
        "spec": {"containers": [{"name": "app"}]},
        "status": {"phase": phase},
    }


def test_every_pod_has_a_reap_view_that_follows_the_watch() -> None:
    store = PodStore(clock=lambda: 0.0)
    store.replace([obj("a"), obj("b", labeled=True), {"metadata": {"name": "no-uid"}}])
    assert sorted(store.reap_views()) == ["a", "b"]
    assert [v.uid for v in store.labeled()] == ["b"]
    store.apply("MODIFIED", obj("a", phase="Failed"))
    store.apply("ADDED", obj("c"))
    store.apply("DELETED", obj("b", labeled=True))
    views = store.reap_views()
    assert sorted(views) == ["a", "c"] and views["a"].terminal and not views["c"].terminal
    assert store.labeled() == []


def test_reap_views_is_a_snapshot() -> None:
    store = PodStore(clock=lambda: 0.0)
    store.replace([obj("a")])
    snapshot = store.reap_views()
    store.apply("DELETED", obj("a"))
    assert list(snapshot) == ["a"] and store.reap_views() == {}


# What a user can write on a pod of their own at its creation (a pod without the opt-in label never
# reaches the webhook that clears the product's marks): digits Python reads as digits but int() does not
# (a superscript), and more digits than int() reads at all.
NOT_JOB_NUMBERS = ["\u00b2", "9" * 5000, "\u0663"]


def test_a_pod_whose_move_home_mark_is_no_job_number_does_not_stop_the_store() -> None:
    """The store parses every pod of every namespace: one that raised would fail every relist, and the
    controller would act for no tenant."""
    store = PodStore(clock=lambda: 0.0)
    pods = [obj(str(i), labeled=True) for i in range(len(NOT_JOB_NUMBERS))]
    for pod, text in zip(pods, NOT_JOB_NUMBERS, strict=True):
        pod["metadata"]["annotations"] = {"nimbix-burst.io/move-home": text}
    store.replace([*pods, obj("fine", labeled=True)])
    for pod in pods:
        store.apply("MODIFIED", pod)
    assert sorted(store.reap_views()) == ["0", "1", "2", "fine"]
    assert [v.moving_home for v in store.labeled()] == [None, None, None, None]
