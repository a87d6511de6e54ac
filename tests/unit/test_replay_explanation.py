"""The replay's saved history (replay/record_file.py), its option (--save-history) and the explanation
of one decision (replay/explanation.py, printed by replay/explain.py), over a hand-built history whose
answers are worked out below."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from replay import explain, explanation, record_file, settings
from replay.accounting import PodOutcome, RunRecord
from replay.history import (
    GPU,
    AdmissionView,
    NodeSeen,
    Observation,
    Placement,
    PodSeen,
    Requirement,
    Toleration,
)
from replay.trace import PodRow

MODEL = "nimbix-burst.io/gpu-model"
NS = "replay-webhook"
G2 = Placement(terms=((Requirement(MODEL, "In", ("G2",)),),))


def _node(name: str, *, at: float, gpus: int, cpu: int, model: str = "G2", version: int) -> Observation:
    seen = NodeSeen(name, {MODEL: model}, {GPU: gpus, "cpu": cpu, "memory": 256_000}, (), False)
    return Observation(at, "node", name, node=seen, version=version)


def _pod(name: str, *, at: float, cpu: int, on: str = "", version: int, placement: Placement = G2) -> Observation:
    key = f"{NS}/{name}"
    seen = PodSeen(key, on, {GPU: 1, "cpu": cpu, "memory": 1000}, False, placement, decision="local")
    return Observation(at, "pod", key, pod=seen, version=version)


def _outcome(name: str, *, sent: float, cpu: int, decision: str = "local", reason: str = "") -> PodOutcome:
    row = PodRow(0, name, cpu, 1000, 1, 1000, ("G2",), "LS", "Running", 0.0, 100.0, None)
    return PodOutcome(name, f"{NS}/{name}", row, sent, sent + 0.01, decision=decision, reason=reason)


# Two G2 nodes and a G1 node the pods may not use. n-a: 3 GPUs, 24 cores, p-run (4 cores) on it, so
# 2 GPUs and 20 cores free; n-b: 1 GPU, 8 cores free. p-wait (12 cores) is unbound: a claim only n-a
# can hold. q-early was kept local before p-new (#1 < #3) and is not in the watch yet: a claim too.
# p-new (10 cores) is kept local at t=10: n-a has 20 cores, 12 of them claimed; n-b has 8. Counting
# CPU it fits nowhere; counting GPUs alone, 3 free GPUs hold it and both claims. q-late was decided
# after p-new (#5): no claim on it.
HISTORY = [
    _node("n-a", at=0.0, gpus=3, cpu=24_000, version=1),
    _node("n-b", at=0.0, gpus=1, cpu=8_000, version=2),
    _node("n-c", at=0.0, gpus=4, cpu=64_000, model="G1", version=3),
    _pod("p-run", at=1.0, cpu=4_000, on="n-a", version=10),
    _pod("p-wait", at=2.0, cpu=12_000, version=11),
    _pod("p-run", at=9.9, cpu=4_000, on="n-a", version=12),  # re-observed inside the window
    _pod("x-other", at=9.95, cpu=1_000, on="n-c", version=13, placement=Placement()),  # not touching
    _pod("p-new", at=10.5, cpu=10_000, version=14),  # after the window
]
PODS = [
    _outcome("q-early", sent=9.0, cpu=2_000),
    _outcome("p-new", sent=10.0, cpu=10_000, reason="1 candidate node(s) can host 1 GPU; best fit n-b"),
    _outcome("q-late", sent=9.95, cpu=1_000),
    _outcome("p-burst", sent=20.0, cpu=1_000, decision="remote", reason="every eligible node's GPU is in use"),
]
VIEWS = {
    f"{NS}/q-early": AdmissionView(11, 3, 1),
    f"{NS}/p-new": AdmissionView(13, 3, 3),
    f"{NS}/q-late": AdmissionView(13, 3, 5),
}


def build_saved(**changes: Any) -> record_file.SavedRun:
    fields: dict[str, Any] = {
        "policy": "webhook",
        "namespace": NS,
        "compression": 4000.0,
        "trace_start": 0.0,
        "trace_end": 1e6,
        "wall_start": 0.0,
        "wall_end": 30.0,
        "replay_wall_seconds": 30.0,
        "pods": PODS,
        "history": HISTORY,
        "create_latencies_ms": [12.5, 30.0],
        "admission_latencies_ms": [0.6],
        "max_lag_seconds": 0.1,
        "truncated": False,
        "preload_pods": 1,
        "notes": ("a note",),
        "views": VIEWS,
    }
    return record_file.SavedRun(RunRecord(**(fields | changes)), model_label=MODEL, race_window=0.25)


# -- the file -------------------------------------------------------------------------------------

UNUSUAL = [
    Observation(
        0.5,
        "node",
        "n-t",
        node=NodeSeen("n-t", {"a": "b"}, {GPU: 8}, (("k", "v", "NoSchedule"),), True),
        version=4,
    ),
    Observation(
        0.6,
        "pod",
        f"{NS}/t",
        pod=PodSeen(
            f"{NS}/t",
            "",
            {"cpu": 100},
            True,
            Placement({"zone": "a"}, None, (Toleration("k", "Equal", "v", "NoSchedule"),)),
            unschedulable_message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu",
        ),
        version=5,
    ),
    Observation(0.7, "pod-deleted", f"{NS}/t", version=6),
    Observation(0.8, "node-deleted", "n-t"),
]


@pytest.mark.parametrize(
    "saved",
    [
        build_saved(),
        build_saved(history=[*HISTORY, *UNUSUAL], views={}, notes=(), truncated=True, policy="on-failure"),
        build_saved(pods=[], history=[], create_latencies_ms=[], admission_latencies_ms=[]),
    ],
    ids=["webhook-run", "taints-tolerations-deletions", "empty-run"],
)
def test_the_file_gives_back_the_run(saved: record_file.SavedRun) -> None:
    assert record_file.decode(record_file.encode(saved)) == saved


def _lines(saved: record_file.SavedRun) -> list[str]:
    return record_file.encode_lines(saved)


def _gz(lines: list[str]) -> bytes:
    return gzip.compress(("\n".join(lines) + "\n").encode())


def _with_header(**changes: Any) -> bytes:
    lines = _lines(build_saved())
    lines[0] = json.dumps(json.loads(lines[0]) | changes)
    return _gz(lines)


BAD_FILES: Mapping[str, tuple[Callable[[], bytes], str]] = {
    "other-version": (lambda: _with_header(version=99), "format version 99, this checkout reads version 1"),
    "other-format": (lambda: _with_header(format="csv"), "not a replay history file"),
    "cut-gzip": (lambda: record_file.encode(build_saved())[:300], "truncated"),
    "end-line-missing": (lambda: _gz(_lines(build_saved())[:-1]), "truncated after line"),
    "line-cut": (lambda: _gz([*_lines(build_saved())[:3], _lines(build_saved())[3][:20]]), "line 4: garbled"),
    "field-garbled": (
        lambda: _gz([line.replace('"version": 12', '"version": "x"') for line in _lines(build_saved())]),
        "line 7: garbled or truncated (field 'version' missing or not int)",
    ),
    "not-gzip": (lambda: b"observation\n", "not a gzip-compressed history file"),
    "empty": (lambda: _gz([]), "history file is empty"),
}


@pytest.mark.parametrize("build, message", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_an_unreadable_file_says_where_and_to_save_it_again(build: Callable[[], bytes], message: str) -> None:
    with pytest.raises(record_file.RecordFileError) as caught:
        record_file.decode(build())
    assert message in str(caught.value)
    assert "re-run `python -m replay --save-history`" in str(caught.value)


@pytest.mark.parametrize(
    "argv, save",
    [([], False), (["--save-history"], True), (["--save-history", "--policies", "webhook"], True)],
    ids=["default-off", "on", "with-other-options"],
)
def test_save_history_option(argv: list[str], save: bool) -> None:
    assert settings.parse_settings(argv).save_history is save


# -- the explanation ------------------------------------------------------------------------------


def _facts(e: explanation.Explanation) -> dict[str, object]:
    start = e.moments[0]
    return {
        "kind": e.kind,
        "wrong_gpu_only": e.contradicted_gpu_only,
        "wrong_all": e.contradicted_all_resources,
        "fits_at_start": (start.gpu_only.fits, start.all_resources.fits, start.all_resources.fits_ignoring_claims),
        "nodes": [(n.name, n.eligible, n.free[GPU], n.free["cpu"], [p.key for p in n.pods]) for n in start.nodes],
        "claims": [(c.key, c.source, c.sequence, c.could_use) for c in start.claims],
        "claims_at_end": [c.key for c in e.moments[1].claims],
        "events": [(round(ev.at, 3), ev.kind, ev.name) for ev in e.events],
        "window": (round(e.window_start, 3), round(e.window_end, 3)),
    }


EXPLAINED: Mapping[str, tuple[str, tuple[str, ...], dict[str, object]]] = {
    "kept-local-room-taken-by-a-claim": (
        "p-new",
        (),
        {
            "kind": "local",
            "wrong_gpu_only": False,  # 3 free GPUs, 2 claims
            "wrong_all": True,  # n-a's 20 free cores: 12 claimed by p-wait; n-b has 8
            "fits_at_start": (True, False, True),
            # the node the webhook named first, then the best fits (room for all it asks first)
            "nodes": [
                ("n-b", True, 1, 8_000, []),
                ("n-a", True, 2, 20_000, [f"{NS}/p-run"]),
            ],
            "claims": [
                (f"{NS}/p-wait", "unbound pod", None, ("n-a",)),
                (f"{NS}/q-early", "local decision not yet seen", 1, ("n-b", "n-a")),
            ],
            "claims_at_end": [f"{NS}/p-wait", f"{NS}/q-early"],  # q-late came after (#5): no claim
            "events": [(-0.1, "pod", f"{NS}/p-run"), (-0.05, "decided-local", f"{NS}/q-late")],
            "window": (-0.25, 0.01),
        },
    ),
    "a-node-asked-for": (
        f"{NS}/p-new",
        ("n-c",),
        {
            "nodes": [("n-c", False, 4, 64_000, [])],
            "events": [(-0.05, "pod", f"{NS}/x-other"), (-0.05, "decided-local", f"{NS}/q-late")],
        },
    ),
    # At t=20 the burst's view is unknown, so every local decision not yet seen is a claim: four
    # claims on 3 free GPUs, three of which can be placed together; no GPU is left for the pod.
    "burst-upheld": (
        "p-burst",
        (),
        {
            "kind": "remote",
            "wrong_gpu_only": False,
            "wrong_all": False,
            "fits_at_start": (False, False, True),
            "claims": [
                (f"{NS}/p-wait", "unbound pod", None, ("n-a",)),
                (f"{NS}/p-new", "unbound pod", 3, ("n-a",)),
                (f"{NS}/q-early", "local decision not yet seen", 1, ("n-b", "n-a")),
                (f"{NS}/q-late", "local decision not yet seen", 5, ("n-b", "n-a")),
            ],
            "events": [],
        },
    ),
}


@pytest.mark.parametrize("pod, nodes, expected", EXPLAINED.values(), ids=EXPLAINED.keys())
def test_explanation(pod: str, nodes: tuple[str, ...], expected: dict[str, object]) -> None:
    facts = _facts(explanation.explain(build_saved(), pod, nodes=nodes))
    assert {k: facts[k] for k in expected} == expected


@pytest.mark.parametrize(
    "pod, nodes, message",
    [
        ("nope", (), "no decision for replay-webhook/nope in this webhook history"),
        ("p-new", ("n-z",), "no node n-z in the window's states"),
    ],
    ids=["unknown-pod", "unknown-node"],
)
def test_explain_names_what_is_there(pod: str, nodes: tuple[str, ...], message: str) -> None:
    with pytest.raises(explanation.ExplainError, match=message):
        explanation.explain(build_saved(), pod, nodes=nodes)


@pytest.mark.parametrize(
    "reason, node",
    [
        ("3 candidate node(s) can host 1 GPU; best fit openb-node-0516", "openb-node-0516"),
        ("best node openb-node-0516 has 1 free; 2 nodes ...", "openb-node-0516"),
        ("every eligible node's nvidia.com/gpu is in use", ""),
    ],
    ids=["best-fit", "best-node", "none"],
)
def test_the_node_the_webhook_named(reason: str, node: str) -> None:
    assert explanation.named_node(reason) == node


def test_command_prints_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "history-webhook.jsonl.gz"
    path.write_bytes(record_file.encode(build_saved()))
    assert explain.main(["--history", str(path), "p-new"]) == 0
    text = capsys.readouterr().out
    assert "KEPT LOCAL WITHOUT A FIT" in text
    assert f"claim {NS}/p-wait (unbound pod): 1 gpu, 12000m cpu, 1000Mi; room on: n-a" in text
    assert "node n-a: allocatable 3 gpu, 24000m cpu, 256000Mi; used 1 gpu, 4000m cpu" in text
    assert explain.main(["--history", str(path), "p-new", "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["contradicted_all_resources"] is True
    assert [c["key"] for c in document["moments"][1]["claims"]] == [f"{NS}/p-wait", f"{NS}/q-early"]
    path.write_bytes(record_file.encode(build_saved())[:200])
    assert explain.main(["--history", str(path), "p-new"]) == 2
    assert "re-run `python -m replay --save-history`" in capsys.readouterr().err
