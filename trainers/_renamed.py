"""Names renamed since sweep files, trials.parquet, trial.json and MLflow runs were first written: each
old name is read as its new one wherever one is read back, and a reader of user input says so in a note.
"""

from __future__ import annotations

import json
import sys
from typing import Any

# old name -> new name, for a knob, a record field and a Parquet column alike.
RENAMED = {"framework": "stack", "framework_dtype": "stack_dtype"}
# knob -> {old value: new value}: optim's "the stack's own optimizer" was renamed with the stack.
RENAMED_VALUES = {"optim": {"framework": "stack"}}
OLD_NAMES = {new: old for old, new in RENAMED.items()}  # new name -> its old one (a steps partition's)
OLD_VALUES = {name: {new: old for old, new in values.items()} for name, values in RENAMED_VALUES.items()}
_OLD_WORDS = tuple(f'"{old}' for old in (*RENAMED, *(o for v in RENAMED_VALUES.values() for o in v)))


def renamed_note(old: str, where: str = "") -> str:
    """The one line a reader of user input prints for an old name: what it is now and the fix."""
    new = RENAMED[old]
    return f"note: {where}{old} was renamed {new}; read as {new} here, write {new} instead"


def renamed_value_notes(name: str, value: Any, where: str = "") -> list[str]:
    """The line a reader of user input prints for each renamed value of knob `name` in `value` (a list's
    elements too): `note: fixed.optim: framework was renamed stack; ...`."""
    values = RENAMED_VALUES.get(name, {})
    found = [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str) and v in values]
    return [
        f"note: {where}{name}: {old} was renamed {values[old]}; read as {values[old]} here, write "
        f"{name}: {values[old]} instead"
        for old in dict.fromkeys(found)
    ]


_SAID: set[str] = set()  # the notes said in this process: each once


def say_renamed(old: str, where: str, value: Any = None) -> None:
    """Say on stderr, once a process, that `old` (a sweep key or --set name) was renamed, or that a value
    of knob `old` in `value` was (optim: framework). For the readers of user input."""
    for line in [renamed_note(old, where)] if old in RENAMED else renamed_value_notes(old, value, where):
        if line not in _SAID:
            _SAID.add(line)
            print(line, file=sys.stderr)


def new_name(name: str) -> str:
    """`name`'s current name (itself when it was never renamed)."""
    return RENAMED.get(name, name)


def new_value(name: str, value: Any) -> Any:
    """A knob's value under today's names (`optim: framework` is `optim: stack`)."""
    values = RENAMED_VALUES.get(name)
    return values.get(value, value) if values and isinstance(value, str) else value


def renamed_keys(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(data with each old key as its new one and each old value as its new one, the old keys met).
    Where both names are given, the new name's value is kept."""
    old = [key for key in data if key in RENAMED]
    values = [key for key in RENAMED_VALUES if key in data and new_value(key, data[key]) != data[key]]
    if not old and not values:
        return data, []
    out = {new_name(key): value for key, value in data.items() if key in RENAMED}
    out.update({key: value for key, value in data.items() if key not in RENAMED})
    for key in values:
        out[key] = new_value(key, out[key])
    return out, old


def renamed_config(text: Any) -> Any:
    """A row's `config` (a TrialSpec's JSON text) with old knob names as new ones; anything else as is."""
    if not isinstance(text, str) or not any(word in text for word in _OLD_WORDS):
        return text
    try:
        config = json.loads(text)
    except ValueError:
        return text
    if not isinstance(config, dict):
        return text
    return json.dumps(renamed_keys(config)[0], sort_keys=True)


def renamed_row(row: dict[str, Any]) -> dict[str, Any]:
    """A trial row read back (trials.parquet, an exported file, trial.json, an MLflow run) under today's
    names: its old columns and its config's old knobs renamed."""
    row = renamed_keys(row)[0]
    if "config" in row:
        row["config"] = renamed_config(row["config"])
    return row


def renamed_frame(frame: Any) -> Any:
    """A pandas DataFrame of trial rows under today's names (as renamed_row, column-wise)."""
    columns = {c: RENAMED[c] for c in frame.columns if c in RENAMED and RENAMED[c] not in frame.columns}
    frame = frame.rename(columns=columns) if columns else frame
    if "config" in frame.columns and len(frame):
        frame = frame.assign(config=frame["config"].map(renamed_config))
    for name in RENAMED_VALUES:
        if name in frame.columns and len(frame):
            frame = frame.assign(**{name: frame[name].map(lambda value, n=name: new_value(n, value))})
    return frame


def accept_old_names(cls: type) -> type:
    """`cls` (a dataclass of knobs) built from old names too (`TrialSpec(<old>=...)`, as scripts written
    before a rename build it), and each old name readable as an attribute of its new one."""
    init = cls.__init__

    (checked,) = RENAMED_VALUES  # the one knob with a renamed value (optim)
    old_values = RENAMED_VALUES[checked]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        value = kwargs.get(checked)
        if kwargs.keys().isdisjoint(RENAMED) and not (isinstance(value, str) and value in old_values):
            return init(self, *args, **kwargs)  # today's names (a plan builds many: no more work)
        init(self, *args, **renamed_keys(kwargs)[0])

    __init__.__doc__, __init__.__wrapped__ = init.__doc__, init  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[method-assign]
    for old, new in RENAMED.items():
        setattr(cls, old, property(lambda self, new=new: getattr(self, new), doc=f"{new} (its old name)"))
    return cls
