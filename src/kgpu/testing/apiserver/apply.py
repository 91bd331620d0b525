"""Server-side apply, simplified: which fields each manager owns, and what an apply does to them.

Reproduced (as kube-apiserver's structured-merge-diff does for kgpu's objects): an apply sets
the fields of its configuration; fields the same manager applied before and now omits are
removed unless another manager owns them too; a field owned by another manager with a different
value is a conflict (409) unless ``force=true``, which takes it over; a create, update or merge
patch makes its manager the owner of the fields it changed. Simplified: lists are atomic (as
ResourceSlice ``devices`` is; keyed lists such as ``status.conditions`` merge per key on a real
server), ownership lives beside the object instead of in ``metadata.managedFields``.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]
Owners = dict[str, set[Path]]

#: Metadata the server sets or that identifies the object: never owned by a manager.
_SERVER_META = frozenset(
    {
        "name",
        "namespace",
        "generateName",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


class ApplyConflict(Exception):
    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        self.conflicts = conflicts
        listed = "\n".join(f'- conflict with "{m}": .{".".join(p)}' for m, p in conflicts)
        super().__init__(f"Apply failed with {len(conflicts)} conflict(s):\n{listed}")


def field_paths(obj: Obj) -> set[Path]:
    """The leaf fields of an object: map keys recursively, lists and scalars as leaves."""
    out: set[Path] = set()

    def walk(value: Any, path: Path) -> None:
        if isinstance(value, dict) and value:
            for key, sub in value.items():
                walk(sub, (*path, str(key)))
        else:
            out.add(path)

    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata" and isinstance(value, dict):
            for mkey, mvalue in value.items():
                if mkey in _SERVER_META:
                    continue
                if mkey in ("labels", "annotations") and isinstance(mvalue, dict):
                    out.update(("metadata", mkey, k) for k in mvalue)
                else:
                    out.add(("metadata", mkey))
        else:
            walk(value, (key,))
    return out


_MISSING = object()


def get_path(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _set_path(obj: Obj, path: Path, value: Any) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = obj[key] = {}
        obj = nxt
    obj[path[-1]] = copy.deepcopy(value)


def _del_path(obj: Obj, path: Path) -> None:
    parents = []
    cur: Any = obj
    for key in path[:-1]:
        if not isinstance(cur, dict) or key not in cur:
            return
        parents.append((cur, key))
        cur = cur[key]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)
    for parent, key in reversed(parents):  # drop maps the removal left empty
        if parent[key] == {}:
            del parent[key]
        else:
            break


def apply(current: Obj | None, config: Obj, manager: str, owners: Owners, force: bool) -> Obj:
    """The object after ``manager`` applies ``config``; updates ``owners`` in place. Raises
    :class:`ApplyConflict` when another manager owns a field with a different value."""
    wanted = field_paths(config)
    conflicts = []
    for other, paths in sorted(owners.items()):
        if other == manager:
            continue
        for path in sorted(paths & wanted):
            if current is not None and get_path(current, path) != get_path(config, path):
                conflicts.append((other, path))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for other, path in conflicts:
        owners[other].discard(path)
    new = copy.deepcopy(current) if current is not None else {}
    shared = set().union(*(p for m, p in owners.items() if m != manager))
    for path in owners.get(manager, set()) - wanted:
        if path not in shared:
            _del_path(new, path)
    for path in sorted(wanted):
        _set_path(new, path, get_path(config, path))
    owners[manager] = wanted
    return new


def record_write(old: Obj | None, new: Obj, manager: str, owners: Owners) -> None:
    """A create, update or patch by ``manager``: it owns what it changed; fields it removed
    are no one's."""
    before = field_paths(old) if old is not None else set()
    after = field_paths(new)
    changed = {p for p in after if old is None or get_path(old, p) != get_path(new, p)}
    removed = before - after
    for other, paths in owners.items():
        if other != manager:
            paths -= changed
        paths -= removed
    owners.setdefault(manager, set()).update(changed)
