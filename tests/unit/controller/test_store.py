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
