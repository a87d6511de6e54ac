"""AppDef validation, submission checks and the command line, against the AppDef reference's rules
(nimbix/jardoc docs/appdef.md) and the AppDef shipped in images/base (the one the image carries and the
emulator loads)."""

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from devplatform.emulator import appdef
from entrypoint import remote_settings

ROOT = Path(__file__).resolve().parents[2]
BASE_APPDEF = ROOT / "images" / "base" / "AppDef.json"
ICON = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


def minimal() -> dict[str, Any]:
    """Every key the reference marks required, and nothing else."""
    return {
        "name": "Demo",
        "description": "A demo",
        "author": "Someone",
        "licensed": True,
        "classifications": ["Software Development/Batch"],
        "machines": ["n*"],
        "vault-types": ["NONE"],
        "commands": {
            "run": {
                "path": "/bin/bash",
                "name": "Run",
                "description": "Run a command",
                "parameters": {
                    "-l": {
                        "name": "-l",
                        "description": "-l",
                        "type": "CONST",
                        "value": "-l",
                        "positional": True,
                        "required": True,
                    },
                    "-c": {
                        "name": "-c",
                        "description": "-c",
                        "type": "CONST",
                        "value": "-c",
                        "positional": True,
                        "required": True,
                    },
                    "command": {
                        "name": "Command",
                        "description": "Command",
                        "type": "STR",
                        "positional": True,
                        "required": True,
                    },
                },
            }
        },
        "image": {"type": "image/png", "data": ICON},
    }


def with_change(path: str, value: object) -> dict[str, Any]:
    """minimal() with the dotted `path` set to `value` (or deleted when value is DELETE)."""
    raw = copy.deepcopy(minimal())
    *parents, last = path.split("|")
    target = raw
    for part in parents:
        target = target[part]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return raw


DELETE = object()


def test_the_minimal_appdef_is_valid() -> None:
    parsed = appdef.parse_appdef(minimal())
    assert parsed.name == "Demo"
    assert list(parsed.commands) == ["run"]
    assert [p.key for p in parsed.commands["run"].parameters] == ["-l", "-c", "command"]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("name", DELETE, "name: required key is missing"),
        ("author", DELETE, "author: required key is missing"),
        ("vault-types", DELETE, "vault-types: required key is missing"),
        ("image", DELETE, "image: required key is missing"),
        ("licenced", True, "licenced: unknown key"),
        ("licensed", "yes", "licensed: expected true or false"),
        ("machines", [], "machines: expected a non-empty array"),
        ("vault-types", ["S3"], "vault-types: unknown vault type 'S3'"),
        ("commands", {}, "commands: expected an object with at least one command"),
        ("image|type", "png", "image.type: expected a media type"),
        ("image|data", "not base64!", "image.data: expected base64"),
        ("commands|run|path", "bash", "commands.run.path: must be an absolute path"),
        ("commands|run|parameters", [], "commands.run.parameters: expected an object"),
        ("commands|run|parameters|command|type", "STRING", "commands.run.parameters.command.type: expected one of"),
        ("commands|run|parameters|command|required", DELETE, "commands.run.parameters.command.required: required"),
        ("commands|run|parameters|-l|value", DELETE, "commands.run.parameters.-l.value: a CONST parameter needs"),
        ("commands|run|interactive", "no", "commands.run.interactive: expected true or false"),
        ("commands|run|parameters|command|positionnal", True, "commands.run.parameters.command.positionnal: unknown"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_appdefs_name_the_field_and_the_fix(path: str, value: object, expected: str) -> None:
    with pytest.raises(appdef.AppDefError) as caught:
        appdef.parse_appdef(with_change(path, value), source="x.json")
    assert any(problem.startswith(expected) for problem in caught.value.problems), caught.value.problems
    assert "invalid AppDef x.json" in str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    raw = minimal()
    del raw["name"]
    raw["licensed"] = "yes"
    raw["commands"]["run"]["path"] = "relative"
    with pytest.raises(appdef.AppDefError) as caught:
        appdef.parse_appdef(raw)
    assert len(caught.value.problems) == 3


@pytest.mark.parametrize(
    ("parameter", "expected"),
    [
        ({"type": "selection"}, "values: a selection parameter needs"),
        ({"type": "selection", "values": ["a", "b"], "mvalues": ["1"]}, "mvalues: must have as many entries"),
        ({"type": "INT", "min": 5, "max": 1}, "min: min 5 is greater than max 1"),
        ({"type": "INT", "value": "three"}, "value: an INT parameter's default must be an integer"),
        ({"type": "BOOL", "value": "false"}, "value: a BOOL parameter's default must be true or false"),
        ({"type": "UPLOAD"}, "target: an UPLOAD parameter needs"),
    ],
    ids=["selection-no-values", "mvalues-length", "min-above-max", "int-default", "bool-default", "upload-target"],
)
def test_type_specific_rules(parameter: dict[str, Any], expected: str) -> None:
    raw = minimal()
    raw["commands"]["run"]["parameters"]["extra"] = {
        "name": "Extra",
        "description": "Extra",
        "required": False,
        **parameter,
    }
    with pytest.raises(appdef.AppDefError) as caught:
        appdef.parse_appdef(raw)
    assert any(p.startswith(f"commands.run.parameters.extra.{expected}") for p in caught.value.problems)


def test_non_object_top_level_is_rejected() -> None:
    with pytest.raises(appdef.AppDefError, match="expected a JSON object, got array"):
        appdef.parse_appdef([])


# --- submissions ---------------------------------------------------------------------------------


def typed_appdef() -> appdef.AppDef:
    raw = minimal()
    raw["commands"]["train"] = {
        "path": "/usr/local/bin/train",
        "name": "Train",
        "description": "Train",
        "parameters": {
            "epochs": {"name": "Epochs", "description": "", "type": "INT", "min": 1, "max": 10, "required": True},
            "rate": {"name": "Rate", "description": "", "type": "FLOAT", "required": False, "value": 0.1},
            "verbose": {"name": "Verbose", "description": "", "type": "BOOL", "required": False, "value": False},
            "mode": {
                "name": "Mode",
                "description": "",
                "type": "selection",
                "values": ["fast", "exact"],
                "mvalues": ["F", "E"],
                "required": False,
            },
            "TOKEN": {"name": "Token", "description": "", "type": "STR", "variable": True, "required": False},
        },
    }
    raw["commands"]["train"]["parameters"]["epochs"]["description"] = "Epochs"
    for parameter in raw["commands"]["train"]["parameters"].values():
        parameter["description"] = parameter["name"]
    return appdef.parse_appdef(raw)


@pytest.mark.parametrize(
    ("command", "parameters", "expected"),
    [
        ("run", {"command": "echo hi"}, None),
        ("run", {"command": "echo hi", "-l": "-l"}, None),  # a CONST may be sent with its own value
        ("batch", {"command": "echo hi"}, "unknown command 'batch' (AppDef commands: run, train)"),
        (None, {"command": "echo hi"}, "unknown command None"),
        ("run", {}, "required parameter 'command' of command 'run' is missing"),
        ("run", None, "required parameter 'command' of command 'run' is missing"),
        ("run", {"command": ""}, "required parameter 'command' of command 'run' is empty"),
        ("run", {"command": "x", "cmd": "y"}, "unknown parameter(s) ['cmd'] for command 'run'"),
        ("run", {"command": 42}, "parameter 'command' (STR) expects a string, got integer"),
        ("run", {"command": "x", "-c": "-x"}, "parameter '-c' (CONST) is a constant ('-c') and cannot be set"),
        ("run", ["echo hi"], "application.parameters must be an object, got array"),
        ("train", {"epochs": 3}, None),
        ("train", {"epochs": "3"}, "parameter 'epochs' (INT) expects an integer, got string '3'"),
        ("train", {"epochs": 2.5}, "parameter 'epochs' (INT) expects an integer, got number 2.5"),
        ("train", {"epochs": True}, "parameter 'epochs' (INT) expects an integer, got boolean True"),
        ("train", {"epochs": 0}, "parameter 'epochs' (INT) is 0, below its minimum 1"),
        ("train", {"epochs": 11}, "parameter 'epochs' (INT) is 11, above its maximum 10"),
        ("train", {"epochs": 1, "rate": 1}, None),
        ("train", {"epochs": 1, "rate": "fast"}, "parameter 'rate' (FLOAT) expects a number, got string 'fast'"),
        ("train", {"epochs": 1, "verbose": "true"}, "parameter 'verbose' (BOOL) expects true or false, got string"),
        (
            "train",
            {"epochs": 1, "mode": "slow"},
            "parameter 'mode' (selection) is 'slow', not one of ['fast', 'exact']",
        ),
    ],
    ids=lambda v: json.dumps(v) if not isinstance(v, str | type(None)) else v,
)
def test_submission_checks(command: object, parameters: object, expected: str | None) -> None:
    reason = appdef.check_submission(typed_appdef(), command=command, parameters=parameters)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and reason.startswith(expected), reason


@pytest.mark.parametrize(
    ("command", "parameters", "argv", "variables"),
    [
        ("run", {"command": "echo 'a b'"}, ["/bin/bash", "-l", "-c", "echo 'a b'"], {}),
        ("train", {"epochs": 3}, ["/usr/local/bin/train", "epochs", "3", "rate", "0.1"], {}),
        (
            "train",
            {"epochs": 3, "rate": 0.5, "verbose": True, "mode": "exact", "TOKEN": "t"},
            ["/usr/local/bin/train", "epochs", "3", "rate", "0.5", "verbose", "mode", "E"],
            {"TOKEN": "t"},
        ),
    ],
    ids=["positional-consts", "defaults", "flags-bool-mvalues-variable"],
)
def test_invocation(command: str, parameters: dict[str, Any], argv: list[str], variables: dict[str, str]) -> None:
    parsed = typed_appdef()
    assert appdef.check_submission(parsed, command=command, parameters=parameters) is None
    invocation = appdef.build_invocation(parsed.commands[command], parameters)
    assert list(invocation.argv) == argv
    assert dict(invocation.variables) == variables


@pytest.mark.parametrize(
    ("text", "expected"),
    [("app=images/base/AppDef.json", ("app", Path("images/base/AppDef.json"))), ("a = b ", ("a", Path("b")))],
)
def test_appdef_option(text: str, expected: tuple[str, Path]) -> None:
    assert appdef.parse_appdef_option(text) == expected


@pytest.mark.parametrize("text", ["app", "=path", "app="])
def test_bad_appdef_option(text: str) -> None:
    with pytest.raises(ValueError, match="expected APPID=PATH"):
        appdef.parse_appdef_option(text)


# --- the AppDef the base image ships -------------------------------------------------------------


def test_base_image_appdef_runs_what_the_runner_sends() -> None:
    """The runner submits {"command": "run", "parameters": {"command": <shell string>}}
    (entrypoint/remote_settings.py defaults); the image's AppDef accepts exactly that and runs it through its
    run-command script with the string as the only argument."""
    loaded = appdef.load_appdef(BASE_APPDEF)
    run = loaded.appdef.commands[remote_settings.DEFAULT_APP_COMMAND]
    parameters = {remote_settings.DEFAULT_COMMAND_PARAMETER: "python train.py --epochs 3"}
    assert appdef.check_submission(loaded.appdef, command="run", parameters=parameters) is None
    assert appdef.build_invocation(run, parameters).argv == (
        "/usr/local/bin/nimbix-burst-run-command",
        "python train.py --epochs 3",
    )
    (parameter,) = run.parameters
    assert (parameter.type, parameter.required, parameter.positional) == ("STR", True, True)
    assert not run.interactive
    # The emulator runs the script that sits next to the AppDef (the one the Dockerfile copies).
    assert loaded.host_paths["run"] == BASE_APPDEF.parent / "nimbix-burst-run-command"


def test_load_appdef_reports_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(appdef.AppDefError, match="cannot read the file"):
        appdef.load_appdef(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(appdef.AppDefError, match="not valid JSON"):
        appdef.load_appdef(broken)
    elsewhere = tmp_path / "AppDef.json"
    raw = minimal()
    raw["commands"]["run"]["path"] = "/nonexistent/run-it"
    elsewhere.write_text(json.dumps(raw))
    with pytest.raises(appdef.AppDefError, match="exists neither next to the AppDef"):
        appdef.load_appdef(elsewhere)
