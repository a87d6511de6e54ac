"""JARVICE application definitions (AppDef): parse and validate one, check a submission against it,
and build the command line JARVICE would run.

Sources: the AppDef reference (nimbix/jardoc `docs/appdef.md`) and the reference's J12 AppDef
(shared/reference/jarvice-api.md §5: `application.command` is a key of `commands`,
`application.parameters` maps parameter ids to values). Where neither says what JARVICE does, the
choice made here is marked UNCONFIRMED.

Everything above `load_appdef` is pure: plain data in, frozen dataclasses or reasons out. Errors name
the JSON path of the offending field and what would be valid, so the AppDef's author can fix it.
"""

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeGuard

# Parameter types of the AppDef reference ("Parameter Type Reference"); `selection` is lower-case there.
PARAMETER_TYPES: Final = ("CONST", "STR", "INT", "FLOAT", "RANGE", "BOOL", "selection", "FILE", "UPLOAD")
# The reference lists BLOCK, BLOCK_ARRAY, FILE and NONE; J12 (a Nimbix AppDef) also uses OBJECT.
VAULT_TYPES: Final = frozenset({"FILE", "BLOCK", "BLOCK_ARRAY", "OBJECT", "NONE"})

# Keys the reference documents (plus `hints` and `appdefversion`, which Nimbix AppDefs and the NAE
# page use). Anything else is rejected: a misspelt optional key would otherwise be silently ignored.
_TOP_REQUIRED: Final = (
    "name",
    "description",
    "author",
    "licensed",
    "classifications",
    "machines",
    "vault-types",
    "commands",
    "image",
)
_TOP_OPTIONAL: Final = ("variables", "identity", "scale_max", "hints", "appdefversion")
_COMMAND_REQUIRED: Final = ("path", "name", "description", "parameters")
_COMMAND_OPTIONAL: Final = ("interactive", "publicip", "noconnect", "url", "machines", "variables", "scale_max")
_PARAMETER_REQUIRED: Final = ("name", "description", "type", "required")
_PARAMETER_OPTIONAL: Final = (
    "variable",
    "positional",
    "value",
    "min",
    "max",
    "precision",
    "values",
    "mvalues",
    "filter",
    "target",
    "size",
)


class AppDefError(ValueError):
    """An invalid AppDef; `problems` lists every problem found, each with its JSON path."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        listing = "".join(f"\n  - {problem}" for problem in self.problems)
        super().__init__(f"invalid AppDef {source}: {len(self.problems)} problem(s):{listing}")


@dataclass(frozen=True, slots=True)
class Parameter:
    key: str  # the id a submission uses in application.parameters
    name: str
    type: str  # one of PARAMETER_TYPES
    required: bool
    positional: bool
    variable: bool
    value: str | int | float | bool | None  # the default (the constant for CONST)
    minimum: float | None
    maximum: float | None
    values: tuple[str, ...]  # selection
    mvalues: tuple[str, ...]  # selection, machine format


@dataclass(frozen=True, slots=True)
class Command:
    key: str
    path: str
    name: str
    interactive: bool
    parameters: tuple[Parameter, ...]  # in AppDef order (positional arguments follow it)


@dataclass(frozen=True, slots=True)
class AppDef:
    name: str
    machines: tuple[str, ...]
    vault_types: tuple[str, ...]
    commands: Mapping[str, Command]


@dataclass(frozen=True, slots=True)
class Invocation:
    """What JARVICE runs for a submission: `argv` (argv[0] is the command's path) and the variables
    that `variable: true` parameters put into /etc/JARVICE/jobenv.sh."""

    argv: tuple[str, ...]
    variables: Mapping[str, str]


# --- parsing and validation --------------------------------------------------------------------


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}")


def _type_name(value: object) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _check_keys(
    raw: Mapping[str, object], path: str, required: Sequence[str], optional: Sequence[str], problems: _Problems
) -> None:
    for key in required:
        if key not in raw:
            problems.add(f"{path}{key}", "required key is missing")
    unknown = sorted(set(raw) - set(required) - set(optional))
    for key in unknown:
        problems.add(f"{path}{key}", f"unknown key (known: {', '.join(sorted([*required, *optional]))})")


def _string(raw: Mapping[str, object], key: str, path: str, problems: _Problems) -> str:
    value = raw.get(key)
    if key in raw and (not isinstance(value, str) or not value.strip()):
        problems.add(f"{path}{key}", f"expected a non-empty string, got {_type_name(value)} {value!r}")
    return value if isinstance(value, str) else ""


def _bool(raw: Mapping[str, object], key: str, path: str, problems: _Problems, *, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        problems.add(f"{path}{key}", f"expected true or false, got {_type_name(value)} {value!r}")
        return default
    return value


def _strings(raw: Mapping[str, object], key: str, path: str, problems: _Problems) -> tuple[str, ...]:
    value = raw.get(key)
    if key in raw and (not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value)):
        problems.add(f"{path}{key}", f"expected a non-empty array of non-empty strings, got {value!r}")
        return ()
    return tuple(value) if isinstance(value, list) else ()


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_parameter(key: str, raw: object, path: str, problems: _Problems) -> Parameter | None:
    if not isinstance(raw, dict):
        problems.add(path.rstrip("."), f"expected an object, got {_type_name(raw)}")
        return None
    _check_keys(raw, path, _PARAMETER_REQUIRED, _PARAMETER_OPTIONAL, problems)
    name = _string(raw, "name", path, problems)
    _string(raw, "description", path, problems)
    kind = raw.get("type")
    if "type" in raw and kind not in PARAMETER_TYPES:
        problems.add(f"{path}type", f"expected one of {', '.join(PARAMETER_TYPES)}, got {kind!r}")
    required = _bool(raw, "required", path, problems, default=False)
    positional = _bool(raw, "positional", path, problems, default=False)
    variable = _bool(raw, "variable", path, problems, default=False)
    value = raw.get("value")
    if value is not None and not isinstance(value, str | int | float | bool):
        problems.add(f"{path}value", f"expected a string, number or boolean, got {_type_name(value)}")
        value = None
    bounds: list[float | None] = []
    for bound in ("min", "max"):
        limit = raw.get(bound)
        if limit is not None and not _number(limit):
            problems.add(f"{path}{bound}", f"expected a number, got {_type_name(limit)} {limit!r}")
            limit = None
        bounds.append(float(limit) if _number(limit) else None)
    minimum, maximum = bounds
    if minimum is not None and maximum is not None and minimum > maximum:
        problems.add(f"{path}min", f"min {minimum:g} is greater than max {maximum:g}")
    values = _strings(raw, "values", path, problems) if "values" in raw else ()
    mvalues = _strings(raw, "mvalues", path, problems) if "mvalues" in raw else ()
    if kind == "CONST" and value is None:
        problems.add(f"{path}value", "a CONST parameter needs its constant in `value`")
    if kind == "BOOL" and value is not None and not isinstance(value, bool):
        problems.add(f"{path}value", f"a BOOL parameter's default must be true or false, got {value!r}")
    if kind == "INT" and value not in (None, "") and (not isinstance(value, int) or isinstance(value, bool)):
        problems.add(f"{path}value", f"an INT parameter's default must be an integer, got {value!r}")
    if kind == "selection":
        if not values:
            problems.add(f"{path}values", "a selection parameter needs a non-empty `values` array")
        if mvalues and len(mvalues) != len(values):
            problems.add(f"{path}mvalues", f"must have as many entries as `values` ({len(values)}), has {len(mvalues)}")
    if kind == "UPLOAD" and not isinstance(raw.get("target"), str):
        problems.add(f"{path}target", "an UPLOAD parameter needs a `target` string")
    if not isinstance(kind, str) or kind not in PARAMETER_TYPES:
        return None
    return Parameter(
        key=key,
        name=name,
        type=kind,
        required=required,
        positional=positional,
        variable=variable,
        value=value,
        minimum=minimum,
        maximum=maximum,
        values=values,
        mvalues=mvalues,
    )


def _parse_command(key: str, raw: object, path: str, problems: _Problems) -> Command | None:
    if not isinstance(raw, dict):
        problems.add(path.rstrip("."), f"expected an object, got {_type_name(raw)}")
        return None
    _check_keys(raw, path, _COMMAND_REQUIRED, _COMMAND_OPTIONAL, problems)
    command_path = _string(raw, "path", path, problems)
    if command_path and not command_path.startswith("/"):
        problems.add(f"{path}path", f"must be an absolute path (JARVICE does not search PATH), got {command_path!r}")
    name = _string(raw, "name", path, problems)
    _string(raw, "description", path, problems)
    interactive = _bool(raw, "interactive", path, problems, default=False)
    for flag in ("publicip", "noconnect"):
        _bool(raw, flag, path, problems, default=False)
    if "machines" in raw:
        _strings(raw, "machines", path, problems)
    params_raw = raw.get("parameters", {})
    parameters: list[Parameter] = []
    if not isinstance(params_raw, dict):
        problems.add(
            f"{path}parameters", f"expected an object ({{}} when there are none), got {_type_name(params_raw)}"
        )
    else:
        for param_key, param_raw in params_raw.items():
            parameter = _parse_parameter(param_key, param_raw, f"{path}parameters.{param_key}.", problems)
            if parameter is not None:
                parameters.append(parameter)
        uploads = [p.key for p in parameters if p.type == "UPLOAD"]
        if len(uploads) > 1:
            problems.add(f"{path}parameters", f"at most one UPLOAD parameter per command, got {uploads}")
    return Command(key=key, path=command_path, name=name, interactive=interactive, parameters=tuple(parameters))


def _check_image(raw: object, problems: _Problems) -> None:
    if not isinstance(raw, dict):
        problems.add("image", f'expected an object {{"type": "image/png", "data": BASE64}}, got {_type_name(raw)}')
        return
    _check_keys(raw, "image.", ("type", "data"), (), problems)
    kind = raw.get("type")
    if "type" in raw and (not isinstance(kind, str) or not kind.startswith("image/")):
        problems.add("image.type", f"expected a media type such as image/png, got {kind!r}")
    data = raw.get("data")
    if "data" in raw:
        try:
            if not isinstance(data, str):
                raise TypeError
            base64.b64decode(data, validate=True)
        except (TypeError, binascii.Error):
            problems.add("image.data", "expected base64 image data (`base64 -w0 icon.png`)")


def parse_appdef(raw: object, *, source: str = "AppDef.json") -> AppDef:
    """Validate a decoded AppDef.json; raise AppDefError listing every problem at once."""
    problems = _Problems()
    if not isinstance(raw, dict):
        raise AppDefError(source, [f"(top level): expected a JSON object, got {_type_name(raw)}"])
    _check_keys(raw, "", _TOP_REQUIRED, _TOP_OPTIONAL, problems)
    name = _string(raw, "name", "", problems)
    _string(raw, "description", "", problems)
    _string(raw, "author", "", problems)
    _bool(raw, "licensed", "", problems, default=False)
    _strings(raw, "classifications", "", problems)
    machines = _strings(raw, "machines", "", problems)
    vault_types = _strings(raw, "vault-types", "", problems)
    for vault_type in vault_types:
        if vault_type not in VAULT_TYPES:
            problems.add("vault-types", f"unknown vault type {vault_type!r} (known: {', '.join(sorted(VAULT_TYPES))})")
    if "image" in raw:
        _check_image(raw["image"], problems)
    commands: dict[str, Command] = {}
    commands_raw = raw.get("commands")
    if "commands" in raw and (not isinstance(commands_raw, dict) or not commands_raw):
        problems.add("commands", f"expected an object with at least one command, got {commands_raw!r}")
    elif isinstance(commands_raw, dict):
        for key, command_raw in commands_raw.items():
            command = _parse_command(key, command_raw, f"commands.{key}.", problems)
            if command is not None:
                commands[key] = command
    if problems.items:
        raise AppDefError(source, problems.items)
    return AppDef(name=name, machines=machines, vault_types=vault_types, commands=commands)


# --- submissions -------------------------------------------------------------------------------


def _value_problem(parameter: Parameter, value: object) -> str | None:
    """Why `value` is not valid for `parameter`, or None."""
    kind = parameter.type
    label = f"parameter {parameter.key!r} ({kind})"
    if kind == "CONST":
        return None if value == parameter.value else f"{label} is a constant ({parameter.value!r}) and cannot be set"
    if kind == "BOOL":
        return None if isinstance(value, bool) else f"{label} expects true or false, got {_type_name(value)}"
    if kind in ("INT", "FLOAT", "RANGE"):
        integral = kind == "INT"
        if not _number(value) or (integral and not isinstance(value, int)):
            return f"{label} expects {'an integer' if integral else 'a number'}, got {_type_name(value)} {value!r}"
        if parameter.minimum is not None and value < parameter.minimum:
            return f"{label} is {value!r}, below its minimum {parameter.minimum:g}"
        if parameter.maximum is not None and value > parameter.maximum:
            return f"{label} is {value!r}, above its maximum {parameter.maximum:g}"
        return None
    if not isinstance(value, str):
        return f"{label} expects a string, got {_type_name(value)}"
    if kind == "selection" and value not in parameter.values:
        return f"{label} is {value!r}, not one of {list(parameter.values)}"
    return None


def check_submission(appdef: AppDef, *, command: object, parameters: object) -> str | None:
    """Why `application.command` / `application.parameters` do not fit the AppDef, or None.

    Unknown command, unknown parameter, missing required parameter (a required STR must also be
    non-empty) and wrong value type are rejected. That the real API checks each of these
    server-side is UNCONFIRMED; the AppDef reference says the AppDef holds "validation rules for the
    automatically generated API".
    """
    if not isinstance(command, str) or command not in appdef.commands:
        return f"unknown command {command!r} (AppDef commands: {', '.join(sorted(appdef.commands))})"
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        return f"application.parameters must be an object, got {_type_name(parameters)}"
    spec = appdef.commands[command]
    known = {p.key: p for p in spec.parameters}
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        return (
            f"unknown parameter(s) {unknown} for command {command!r} (AppDef parameters: {', '.join(known) or 'none'})"
        )
    for parameter in spec.parameters:
        if parameter.key not in parameters:
            if parameter.required and parameter.type != "CONST":
                return f"required parameter {parameter.key!r} of command {command!r} is missing"
            continue
        value = parameters[parameter.key]
        problem = _value_problem(parameter, value)
        if problem is not None:
            return problem
        if parameter.required and parameter.type == "STR" and value == "":
            return f"required parameter {parameter.key!r} of command {command!r} is empty"
    return None


def _text(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_invocation(command: Command, parameters: Mapping[str, object]) -> Invocation:
    """The command line for a submission that passed `check_submission`.

    Parameters in AppDef order; a missing optional one falls back to its default `value` and is
    left out without one. Positional parameters contribute their value; the others `KEY VALUE`, and a
    BOOL only its key when true (the `KEY VALUE` form is UNCONFIRMED). `variable: true` parameters
    go to `variables` instead. A selection with `mvalues` passes the machine-format value. CONST
    substitutions (%CORES% and the like) are not expanded.
    """
    argv = [command.path]
    variables: dict[str, str] = {}
    for parameter in command.parameters:
        raw = parameters.get(parameter.key, parameter.value)
        if raw is None or not isinstance(raw, str | int | float | bool):
            continue
        if parameter.type == "selection" and parameter.mvalues and raw in parameter.values:
            raw = parameter.mvalues[parameter.values.index(raw)]
        if parameter.variable:
            variables[parameter.key] = _text(raw)
        elif parameter.type == "BOOL":
            if raw is True:
                argv.append(parameter.key)
        elif raw == "" and not parameter.required:
            continue
        elif parameter.positional:
            argv.append(_text(raw))
        else:
            argv.extend((parameter.key, _text(raw)))
    return Invocation(argv=tuple(argv), variables=variables)


def parse_appdef_option(text: str) -> tuple[str, Path]:
    """ "APPID=PATH" (the emulator's --appdef) -> ("APPID", Path("PATH"))."""
    app, sep, path = text.partition("=")
    if not sep or not app.strip() or not path.strip():
        raise ValueError(f"expected APPID=PATH/TO/AppDef.json, got {text!r}")
    return app.strip(), Path(path.strip())


# --- loading (I/O) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedAppDef:
    """An AppDef from a file, with each command's `path` mapped to an executable on this host: the
    file of the same name next to the AppDef (how images/base ships its run script), else the path
    itself when it exists here (e.g. /bin/bash)."""

    appdef: AppDef
    source: Path
    host_paths: Mapping[str, Path]  # command key -> executable on this host


def load_appdef(path: Path) -> LoadedAppDef:
    source = str(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AppDefError(source, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    except ValueError as exc:
        raise AppDefError(source, [f"not valid JSON: {exc}"]) from exc
    appdef = parse_appdef(raw, source=source)
    host_paths: dict[str, Path] = {}
    problems = []
    for key, command in appdef.commands.items():
        beside = path.resolve().parent / Path(command.path).name
        candidates = [beside, Path(command.path)]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            problems.append(
                f"commands.{key}.path: {command.path} exists neither next to the AppDef "
                f"({beside}) nor on this host, so the emulator cannot run it"
            )
        else:
            host_paths[key] = found
    if problems:
        raise AppDefError(source, problems)
    return LoadedAppDef(appdef=appdef, source=path, host_paths=host_paths)
