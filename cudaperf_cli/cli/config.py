"""Defaults from a TOML config file: one table per command, keys = the long option names.

```toml
# cudaperf.toml
[optimize]
policy = "openai"
model = "Qwen/Qwen2.5-Coder-32B-Instruct"
base-url = "http://127.0.0.1:8000/v1"
samples = 4
temperature = 0.7
turns = 5
```

Where it is looked for, first found wins: ``--config FILE``; the file named by
``$CUDAPERF_CONFIG``; ``./cudaperf.toml``; ``$XDG_CONFIG_HOME/cudaperf/config.toml`` (default
``~/.config/cudaperf/config.toml``).  A value on the command line beats the file; the file
beats the built-in default.  Keys are checked like the command line (unknown key, wrong
type, out of range: one line naming the file, table and key); so are the tables
(``[optimize]``; ``[train.policy]`` and ``[reward]`` belong to ``cudaperf train policy
--config`` and are not read here).  Relative paths are relative to the file's folder.  ``-I``/``-D`` have no
long names and cannot be set here.  API keys do not belong in
it: ``--api-key-env`` names the variable holding one.

Finding and parsing the file (:func:`find_config`, :func:`load_config`) live in
``cudaperf_cli/config.py``, below every stage that reads it (bench records the file, rl
reads its tables); this module adds the Typer-specific part (:func:`apply_config`: a
command's options from a table) and re-exports the loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The loader lives below the cli layer (bench and rl read the file too); re-exported here.
from cudaperf_cli.config import CONFIG_ENV, SECTIONS, find_config, load_config
from cudaperf_cli.core import CudaperfError

#: Options a config file may not set (they name a run, not a default).
NOT_CONFIGURABLE = frozenset({"config", "resume", "help", "version"})


def _option_key(param: Any) -> str | None:
    longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    return longs[0][2:] if longs else None


def _wants_str(annotation: Any, current: Any) -> bool:
    """Whether an option takes a string (its annotation is ``str`` or ``Optional[str]``)."""
    import typing

    if isinstance(current, str):
        return True
    if annotation is str:
        return True
    args = typing.get_args(annotation)
    return typing.get_origin(annotation) is typing.Union and str in args and all(
        a in (str, type(None)) for a in args)


def _wants_list(annotation: Any, param: Any) -> bool:
    """Whether an option is repeatable (a ``List[...]`` annotation, or click's ``multiple``)."""
    import typing

    return bool(getattr(param, "multiple", False)) or typing.get_origin(annotation) is list


def _is_path_param(param: Any) -> bool:
    kind = getattr(param, "type", None)
    return type(kind).__name__ == "Path" or "path" in type(kind).__name__.lower()


def source_name(ctx: Any, name: str) -> str | None:
    """Where parameter ``name`` got its value: ``"COMMANDLINE"``, ``"ENVIRONMENT"``,
    ``"DEFAULT"``, ``"DEFAULT_MAP"`` or ``None`` (click's ``ParameterSource`` names; read by
    name because Typer may vendor its own click)."""
    source = ctx.get_parameter_source(name)
    return None if source is None else str(getattr(source, "name", source))


def apply_config(
    ctx: Any, section: str, explicit: Path | None = None, params: dict[str, Any] | None = None,
    types: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """``params`` (default ``ctx.params``) with every option still at its default replaced by
    the config file's value from table ``[section]``; returns the parameters (with
    ``"_config_applied"``: the keys taken from the file) and the file used (or ``None``).
    Relative paths in the file are relative to the file's folder.

    ``ctx`` is the command's click/Typer context; ``types``: the command function's type
    hints (``typing.get_type_hints``), to refuse a number where a string is expected.  A value from the file is converted by the
    option's own type, and to :class:`~pathlib.Path` where the current value is a path
    (click's path type returns strings).

    Raises:
        CudaperfError: no such file, invalid TOML, a table that is not a table, an unknown
            or unsettable key, or a value the option would refuse (exit code 2).
    """
    params = dict(ctx.params if params is None else params)
    types = types or {}
    path = find_config(explicit)
    if path is None:
        return params, None
    document = load_config(path)
    for key, value in document.items():
        if not isinstance(value, dict):
            raise CudaperfError(f"{path}: '{key}' must be inside a table, e.g. [{section}]",
                                hint=f"tables: {', '.join(f'[{t}]' for t in SECTIONS)}")
        if key not in SECTIONS:
            raise CudaperfError(f"{path}: unknown table [{key}]",
                                hint=f"tables: {', '.join(f'[{t}]' for t in SECTIONS)}")
    table = document.get(section, {})
    applied: list[str] = []
    by_key: dict[str, Any] = {}
    for param in ctx.command.params:
        key = _option_key(param)
        if key is not None and param.name not in NOT_CONFIGURABLE:
            by_key[key] = param
    for raw_key, value in table.items():
        key = str(raw_key).replace("_", "-")
        param = by_key.get(key)
        if param is None:
            known = ", ".join(sorted(by_key))
            raise CudaperfError(f"{path}: [{section}] unknown key '{raw_key}'", hint=f"known keys: {known}")
        if source_name(ctx, param.name) not in ("DEFAULT", None):
            continue  # the command line (or an environment variable) wins
        if _wants_list(types.get(param.name), param):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise CudaperfError(f"{path}: [{section}] {raw_key}: expected a list of strings, "
                                    f"e.g. {raw_key} = [\"n=1000\"]")
        elif isinstance(value, (list, dict)):
            raise CudaperfError(f"{path}: [{section}] {raw_key}: expected one value, not {value!r}")
        elif isinstance(value, bool) and not (getattr(param, "is_flag", False) or types.get(param.name) is bool):
            raise CudaperfError(f"{path}: [{section}] {raw_key}: expected a number or a string, not {value!r}")
        if _wants_str(types.get(param.name), params.get(param.name)) and not isinstance(value, str):
            raise CudaperfError(f"{path}: [{section}] {raw_key}: expected a string, got {value!r}")
        try:
            converted = param.process_value(ctx, value)
            if isinstance(converted, str) and _is_path_param(param):
                converted = Path(converted)
            if isinstance(converted, Path) and not converted.is_absolute():
                converted = path.parent / converted  # relative to the config file
            params[param.name] = converted
            applied.append(key)
        except Exception as exc:  # click's BadParameter (Typer vendors click), TypeError...
            why = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            raise CudaperfError(f"{path}: [{section}] {raw_key}: {why}") from None
    params["_config_applied"] = applied
    return params, path


__all__ = [
    "CONFIG_ENV",
    "NOT_CONFIGURABLE",
    "SECTIONS",
    "apply_config",
    "find_config",
    "load_config",
    "source_name",
]
