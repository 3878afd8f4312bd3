"""A fake Kubernetes API server speaking the real REST and watch protocol, for tests.

Point a real client (``kubernetes_asyncio``) at :attr:`FakeKubeApi.url`. It serves four
resources, the ones muster's provisioning path and node agent touch:

* core ``v1`` ``nodes`` (cluster-scoped, ``status`` subresource),
* core ``v1`` ``pods`` (namespaced, ``status`` subresource; created ``Pending``; field selectors
  on ``spec.nodeName``, ``status.phase`` and the other fields the real server indexes; only
  ``spec.containers`` is validated, nothing schedules or runs them),
* core ``v1`` ``podtemplates`` (namespaced),
* ``autoscaling.x-k8s.io/v1`` ``provisioningrequests`` (namespaced custom resource with the
  ``status`` subresource, validated like the cluster-autoscaler CRD: required fields, the
  ``Value is immutable`` CEL rules on ``spec``, the condition schema, unknown-field pruning).

Like the real server it keeps one global, monotonically increasing ``resourceVersion`` (a
string in objects, like etcd's revision), answers errors with ``Status`` objects, and streams
watches as newline-delimited JSON events. Watch history is kept until :meth:`compact`; a watch
from a compacted version gets the ``410 Expired`` ERROR event the real server sends.

Tests can act as the cluster-autoscaler or a kubelet without HTTP: :meth:`put`, :meth:`delete`,
:meth:`set_condition`, :meth:`add_node`, :meth:`set_pod_status` write through the same path as
API writes (one new resourceVersion each, watchers notified). Writes that change nothing are
no-ops, as on the real server: no new resourceVersion, no event.

Deliberately left out: namespaces as objects (any namespace exists), finalizers and graceful
deletion (DELETE removes at once), ``limit``/``continue`` paging (lists are never chunked,
which the API allows), server-side apply, defaulting of core types, the immutability of a pod's
spec and its ``binding`` subresource, discovery.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import copy
import json
import random
import re
import socket
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from aiohttp import web

JsonObj = dict[str, Any]
Validator = Callable[[JsonObj, "JsonObj | None"], list["FieldError"]]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_GENERATE_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's alphabet, no vowels


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class FieldError:
    """One validation failure, rendered like apimachinery's ``field.Error``."""

    field: str
    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, ...
    message: str  # the part after "<field>: "

    @staticmethod
    def required(path: str) -> FieldError:
        return FieldError(path, "FieldValueRequired", "Required value")

    @staticmethod
    def invalid(path: str, value: Any, detail: str) -> FieldError:
        return FieldError(path, "FieldValueInvalid", f"Invalid value: {_go_repr(value)}: {detail}")

    @staticmethod
    def wrong_type(path: str, value: Any, want: str) -> FieldError:
        """The OpenAPI schema's type check: ``<path> in body must be of type <want>``."""
        got = _json_type(value)
        return FieldError.invalid(path, got, f'{path} in body must be of type {want}: "{got}"')


class KubeApiError(Exception):
    """A failure with the ``Status`` object the real API server would answer with."""

    def __init__(self, code: int, reason: str, message: str, details: JsonObj | None = None):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> JsonObj:
        body: JsonObj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _go_repr(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(_json_type(value))


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string"


def _bad_request(message: str) -> KubeApiError:
    return KubeApiError(400, "BadRequest", message)


# --------------------------------------------------------------------------- resource types


@dataclass(frozen=True, eq=False)
class ResourceType:
    """How one served resource behaves: its names, scope and the apiserver strategy bits."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    custom: bool = False  # a CRD: unstructured decoding, no strategic merge, no unconditional PUT
    status_subresource: bool = False
    keep_status_on_create: bool = False
    # The status a create starts from when it does not keep the client's (a pod is Pending).
    initial_status: JsonObj | None = None
    return_deleted_object: bool = False
    field_labels: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    validate: Validator | None = None
    schema: Any = None  # pruning schema for custom resources: dict of known fields, [item], None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_resource(self) -> str:
        """``podtemplates`` or ``provisioningrequests.autoscaling.x-k8s.io`` (error messages)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def details(self, name: str) -> JsonObj:
        out: JsonObj = {"name": name}
        if self.group:
            out["group"] = self.group
        out["kind"] = self.plural
        return out

    def not_found(self, name: str) -> KubeApiError:
        return KubeApiError(
            404, "NotFound", f'{self.qualified_resource} "{name}" not found', self.details(name)
        )

    def already_exists(self, name: str) -> KubeApiError:
        return KubeApiError(
            409,
            "AlreadyExists",
            f'{self.qualified_resource} "{name}" already exists',
            self.details(name),
        )

    def conflict(self, name: str) -> KubeApiError:
        return KubeApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {self.qualified_resource} "{name}": the object '
            "has been modified; please apply your changes to the latest version and try again",
            self.details(name),
        )

    def invalid(self, name: str, errors: list[FieldError]) -> KubeApiError:
        rendered = [f"{e.field}: {e.message}" for e in errors]
        joined = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
        details: JsonObj = {"name": name}
        if self.group:
            details["group"] = self.group
        details["kind"] = self.kind
        details["causes"] = [
            {"reason": e.reason, "message": e.message, "field": e.field} for e in errors
        ]
        return KubeApiError(
            422, "Invalid", f'{self.qualified_kind} "{name}" is invalid: {joined}', details
        )


def _validate_podtemplate(obj: JsonObj, old: JsonObj | None) -> list[FieldError]:
    template = obj.get("template")
    return _validate_pod_spec(
        template.get("spec") if isinstance(template, dict) else None, "template.spec"
    )


def _validate_pod(obj: JsonObj, old: JsonObj | None) -> list[FieldError]:
    return _validate_pod_spec(obj.get("spec"), "spec")


def _validate_pod_spec(spec: Any, path: str) -> list[FieldError]:
    """Only what muster's tests rely on: containers, each with a name and an image."""
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, list) or not containers:
        return [FieldError.required(f"{path}.containers")]
    errors: list[FieldError] = []
    for i, c in enumerate(containers):
        item = f"{path}.containers[{i}]"
        if not isinstance(c, dict):
            errors.append(FieldError.invalid(item, c, "must be an object"))
            continue
        if not c.get("name"):
            errors.append(FieldError.required(f"{item}.name"))
        if not c.get("image"):
            errors.append(FieldError.required(f"{item}.image"))
    return errors


_CONDITION_FIELDS = ("lastTransitionTime", "message", "observedGeneration", "reason", "status")
_PROVREQ_SCHEMA: JsonObj = {
    "apiVersion": None,
    "kind": None,
    "metadata": None,
    "spec": {
        "parameters": None,
        "podSets": [{"count": None, "podTemplateRef": {"name": None}}],
        "provisioningClassName": None,
    },
    "status": {
        "conditions": [{**dict.fromkeys(_CONDITION_FIELDS), "type": None}],
        "provisioningClassDetails": None,
    },
}


def _validate_provreq(obj: JsonObj, old: JsonObj | None) -> list[FieldError]:
    """The autoscaling.x-k8s.io/v1 ProvisioningRequest CRD's OpenAPI schema and CEL rules."""
    errors: list[FieldError] = []
    spec = obj.get("spec")
    if spec is None:
        errors.append(FieldError.required("spec"))
    elif not isinstance(spec, dict):
        errors.append(FieldError.wrong_type("spec", spec, "object"))
    else:
        errors.extend(_validate_provreq_spec(spec))
        old_spec = old.get("spec") if old is not None else None
        if isinstance(old_spec, dict):
            # x-kubernetes-validations `self == oldSelf` on each field: a transition rule, so it
            # runs only when the field exists in both the old and the new object.
            for key in ("parameters", "podSets", "provisioningClassName"):
                if key in spec and key in old_spec and spec[key] != old_spec[key]:
                    errors.append(
                        FieldError(
                            f"spec.{key}",
                            "FieldValueInvalid",
                            f'Invalid value: "{_json_type(spec[key])}": Value is immutable',
                        )
                    )
    status = obj.get("status")
    if isinstance(status, dict):
        errors.extend(_validate_conditions(status.get("conditions"), "status.conditions"))
    return errors


def _validate_provreq_spec(spec: JsonObj) -> list[FieldError]:
    errors: list[FieldError] = []
    pod_sets = spec.get("podSets")
    if pod_sets is None:
        errors.append(FieldError.required("spec.podSets"))
    elif not isinstance(pod_sets, list):
        errors.append(FieldError.wrong_type("spec.podSets", pod_sets, "array"))
    elif not pod_sets:
        errors.append(
            FieldError.invalid(
                "spec.podSets", 0, "spec.podSets in body should have at least 1 items"
            )
        )
    elif len(pod_sets) > 32:
        errors.append(
            FieldError(
                "spec.podSets",
                "FieldValueTooMany",
                f"Too many: {len(pod_sets)}: must have at most 32 items",
            )
        )
    else:
        for i, ps in enumerate(pod_sets):
            path = f"spec.podSets[{i}]"
            if not isinstance(ps, dict):
                errors.append(FieldError.invalid(path, _json_type(ps), "must be of type object"))
                continue
            count = ps.get("count")
            if count is None:
                errors.append(FieldError.required(f"{path}.count"))
            elif not isinstance(count, int) or isinstance(count, bool) or count < 1:
                errors.append(
                    FieldError.invalid(
                        f"{path}.count",
                        count,
                        f"{path}.count in body should be greater than or equal to 1",
                    )
                )
            ref = ps.get("podTemplateRef")
            if not isinstance(ref, dict):
                errors.append(FieldError.required(f"{path}.podTemplateRef"))
            elif not isinstance(ref.get("name"), str) or not ref["name"]:
                errors.append(FieldError.required(f"{path}.podTemplateRef.name"))
    pcn = spec.get("provisioningClassName")
    if pcn is None:
        errors.append(FieldError.required("spec.provisioningClassName"))
    elif not isinstance(pcn, str) or not _DNS1123_SUBDOMAIN.match(pcn):
        errors.append(
            FieldError.invalid(
                "spec.provisioningClassName",
                pcn,
                f"spec.provisioningClassName in body should match '{_DNS1123_SUBDOMAIN.pattern}'",
            )
        )
    params = spec.get("parameters")
    if params is not None and (
        not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values())
    ):
        errors.append(FieldError.invalid("spec.parameters", params, "must be a map of strings"))
    return errors


def _validate_conditions(conditions: Any, path: str) -> list[FieldError]:
    """metav1.Condition's schema, as a list-map keyed by ``type``."""
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        return [FieldError.wrong_type(path, conditions, "array")]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, c in enumerate(conditions):
        item = f"{path}[{i}]"
        if not isinstance(c, dict):
            errors.append(FieldError.invalid(item, _json_type(c), "must be of type object"))
            continue
        for key in ("lastTransitionTime", "message", "reason", "status", "type"):
            if key not in c or c[key] is None:
                errors.append(FieldError.required(f"{item}.{key}"))
        status = c.get("status")
        if status is not None and status not in ("True", "False", "Unknown"):
            errors.append(
                FieldError(
                    f"{item}.status",
                    "FieldValueNotSupported",
                    f"Unsupported value: {_go_repr(status)}: supported values: "
                    '"True", "False", "Unknown"',
                )
            )
        reason = c.get("reason")
        if isinstance(reason, str) and not _CONDITION_REASON.match(reason):
            errors.append(
                FieldError.invalid(
                    f"{item}.reason",
                    reason,
                    f"{item}.reason in body should match '{_CONDITION_REASON.pattern}'",
                )
            )
        ltt = c.get("lastTransitionTime")
        if isinstance(ltt, str) and not _parse_time(ltt):
            errors.append(
                FieldError.invalid(
                    f"{item}.lastTransitionTime",
                    ltt,
                    f"{item}.lastTransitionTime in body must be of type date-time",
                )
            )
        ctype = c.get("type")
        if isinstance(ctype, str):
            if ctype in seen:
                errors.append(
                    FieldError(
                        item,
                        "FieldValueDuplicate",
                        f'Duplicate value: map[string]interface {{}}{{"type":"{ctype}"}}',
                    )
                )
            seen.add(ctype)
    return errors


def _parse_time(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


NODES = ResourceType(
    group="",
    version="v1",
    plural="nodes",
    kind="Node",
    namespaced=False,
    status_subresource=True,
    keep_status_on_create=True,
    field_labels=("metadata.name", "spec.unschedulable"),
)
PODS = ResourceType(
    group="",
    version="v1",
    plural="pods",
    kind="Pod",
    namespaced=True,
    status_subresource=True,
    initial_status={"phase": "Pending"},
    return_deleted_object=True,
    # The pod fields the real server can select on (pkg/registry/core/pod).
    field_labels=(
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    validate=_validate_pod,
)
PODTEMPLATES = ResourceType(
    group="",
    version="v1",
    plural="podtemplates",
    kind="PodTemplate",
    namespaced=True,
    return_deleted_object=True,
    validate=_validate_podtemplate,
)
PROVISIONING_REQUESTS = ResourceType(
    group="autoscaling.x-k8s.io",
    version="v1",
    plural="provisioningrequests",
    kind="ProvisioningRequest",
    namespaced=True,
    custom=True,
    status_subresource=True,
    validate=_validate_provreq,
    schema=_PROVREQ_SCHEMA,
)
RESOURCES: tuple[ResourceType, ...] = (NODES, PODS, PODTEMPLATES, PROVISIONING_REQUESTS)


# --------------------------------------------------------------------------- selectors


@dataclass(frozen=True)
class _LabelRequirement:
    key: str
    op: Literal["exists", "!exists", "=", "!=", "in", "notin"]
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_LABEL_EXISTS = re.compile(rf"^(?P<neg>!)?\s*(?P<key>{_KEY})$")
_LABEL_EQ = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})$")
_LABEL_SET = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _parse_label_selector(text: str) -> list[_LabelRequirement]:
    reqs: list[_LabelRequirement] = []
    for part in _split_top_level(text):
        if m := _LABEL_SET.match(part):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            op: Literal["in", "notin"] = "in" if m["op"] == "in" else "notin"
            reqs.append(_LabelRequirement(m["key"], op, values))
        elif m := _LABEL_EQ.match(part):
            eq: Literal["=", "!="] = "!=" if m["op"] == "!=" else "="
            reqs.append(_LabelRequirement(m["key"], eq, frozenset([m["value"]])))
        elif m := _LABEL_EXISTS.match(part):
            reqs.append(_LabelRequirement(m["key"], "!exists" if m["neg"] else "exists"))
        else:
            raise _bad_request(f"unable to parse requirement: {part!r}")
    return reqs


@dataclass(frozen=True)
class Selector:
    """A parsed ``labelSelector`` + ``fieldSelector`` + namespace scope."""

    namespace: str | None = None
    labels: tuple[_LabelRequirement, ...] = ()
    fields: tuple[tuple[str, str, bool], ...] = ()  # (field path, value, equal?)

    @staticmethod
    def parse(
        rt: ResourceType, namespace: str | None, label_selector: str, field_selector: str
    ) -> Selector:
        fields: list[tuple[str, str, bool]] = []
        for part in _split_top_level(field_selector):
            m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", part)
            if not m:
                raise _bad_request(
                    f"invalid selector: '{field_selector}'; can't understand '{part}'"
                )
            path, op, value = m[1].strip(), m[2], m[3].strip()
            if path not in rt.field_labels:
                raise _bad_request(f"field label not supported: {path}")
            fields.append((path, value, op != "!="))
        return Selector(namespace, tuple(_parse_label_selector(label_selector)), tuple(fields))

    def matches(self, obj: JsonObj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        if not all(r.matches(labels) for r in self.labels):
            return False
        for path, value, equal in self.fields:
            if (_field_value(obj, path) == value) != equal:
                return False
        return True


def _field_value(obj: JsonObj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if cur is None:
        return "false" if path == "spec.unschedulable" else ""
    return str(cur)


# --------------------------------------------------------------------------- patches


class _PatchError(Exception):
    pass


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: JsonObj = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise _PatchError(f"invalid JSON pointer: {path!r}")
    if path == "":
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _PatchError(f"invalid array index: {token!r}")
    i = int(token)
    if i > len(container) or (i == len(container) and not allow_end):
        raise _PatchError(f"array index out of bounds: {i}")
    return i


def _resolve(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for t in tokens:
        if isinstance(cur, dict):
            if t not in cur:
                raise _PatchError(f"missing key: /{'/'.join(tokens)}")
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, allow_end=False)]
        else:
            raise _PatchError(f"cannot traverse into a scalar: /{'/'.join(tokens)}")
    return cur


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise _PatchError(f"cannot add to a scalar: /{'/'.join(tokens)}")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _PatchError("cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _PatchError(f"missing key: /{'/'.join(tokens)}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise _PatchError(f"cannot remove from a scalar: /{'/'.join(tokens)}")


def json_patch(document: Any, operations: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    doc = copy.deepcopy(document)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str) or "path" not in op:
            raise _PatchError(f"invalid operation: {op!r}")
        kind, path = op["op"], _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise _PatchError(f"{kind} operation needs a value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            if path:
                _resolve(doc, path)  # must exist
                _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from"))
            value = copy.deepcopy(_resolve(doc, source))
            if kind == "move":
                _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "test":
            if _resolve(doc, path) != op["value"]:
                raise _PatchError(f"test failed at {op['path']}")
        else:
            raise _PatchError(f"unknown operation {kind!r}")
    return doc


def _contains_list(value: Any) -> bool:
    if isinstance(value, list):
        return True
    if isinstance(value, dict):
        return any(_contains_list(v) for v in value.values())
    return False


def _contains_directive(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k.startswith("$") or _contains_directive(v) for k, v in value.items())
    return False


# --------------------------------------------------------------------------- store internals


@dataclass(frozen=True)
class _Event:
    rv: int
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    rt: ResourceType
    obj: JsonObj  # the snapshot after the change (for DELETED: the last state, deletion rv)
    prev: JsonObj | None  # the snapshot before it


@dataclass(eq=False)
class _Watch:
    rt: ResourceType
    selector: Selector
    pending: deque[tuple[str, JsonObj]] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    closing: Literal["end", "abort"] | None = None

    def offer(self, ev: _Event) -> None:
        if self.closing is not None:
            return
        translated = self.translate(ev)
        if translated is not None:
            self.pending.append(translated)
            self.wakeup.set()

    def translate(self, ev: _Event) -> tuple[str, JsonObj] | None:
        """The event as this watch sees it: filtered by its selector, like the watch cache.

        An object modified into the selector arrives as ADDED; one modified out of it arrives
        as DELETED carrying its previous state at the new resourceVersion.
        """
        if ev.rt is not self.rt:
            return None
        now = self.selector.matches(ev.obj)
        if ev.type != "MODIFIED":
            return (ev.type, ev.obj) if now else None
        before = ev.prev is not None and self.selector.matches(ev.prev)
        if now:
            return ("MODIFIED" if before else "ADDED", ev.obj)
        if before and ev.prev is not None:
            gone = copy.deepcopy(ev.prev)
            gone["metadata"]["resourceVersion"] = str(ev.rv)
            return ("DELETED", gone)
        return None

    def close(self, how: Literal["end", "abort"]) -> None:
        """Stop the stream now: events not yet written are not sent (the client resumes)."""
        self.closing = how
        self.pending.clear()
        self.wakeup.set()


@dataclass(frozen=True)
class RequestRecord:
    """One request the fake received, for asserting client behaviour."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str = ""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _prune(value: Any, schema: Any) -> Any:
    """Drop fields a structural CRD schema does not know, as the apiserver does."""
    if isinstance(schema, dict) and isinstance(value, dict):
        return {k: _prune(v, schema[k]) for k, v in value.items() if k in schema}
    if isinstance(schema, list) and isinstance(value, list):
        return [_prune(v, schema[0]) for v in value]
    return value


_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})  # Go's strconv.ParseBool
_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})


def _parse_bool(name: str, value: str | None) -> bool:
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _bad_request(f'invalid value for {name}: strconv.ParseBool: parsing "{value}"')


def _parse_int(name: str, value: str) -> int:
    try:
        out = int(value)
    except ValueError:
        raise _bad_request(f'invalid value for {name}: "{value}"') from None
    if out < 0:
        raise _bad_request(f'invalid value for {name}: "{value}"')
    return out


@dataclass(frozen=True)
class _Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


# --------------------------------------------------------------------------- the server


class FakeKubeApi:
    """An in-memory Kubernetes API server (nodes, pods, podtemplates, provisioningrequests).

    ``bookmark_interval``: seconds between BOOKMARK events on watches that asked for them.
    ``timeout_seconds_scale``: a watch's ``timeoutSeconds`` lasts that many times as long, so
    tests can exercise the server ending a watch (``timeoutSeconds`` is an integer on the wire)
    without waiting whole seconds.
    """

    def __init__(
        self,
        *,
        bookmark_interval: float = 60.0,
        timeout_seconds_scale: float = 1.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.timeout_seconds_scale = timeout_seconds_scale
        self.host = host
        self.requests: list[RequestRecord] = []
        self._rv = 1  # etcd's first revision; every write moves it on by one
        self._floor = 1  # watch history is complete for every version >= this one
        self._history: list[_Event] = []
        self._objects: dict[str, dict[tuple[str, str], JsonObj]] = {
            rt.plural: {} for rt in RESOURCES
        }
        self._watches: set[_Watch] = set()
        self._watches_changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._app = web.Application()
        self._app.router.add_route("*", "/{tail:.*}", self._dispatch)

    # ----------------------------------------------------------------- lifecycle

    @property
    def app(self) -> web.Application:
        """The aiohttp application (to mount in an ``aiohttp.test_utils.TestServer``)."""
        return self._app

    async def start(self) -> None:
        """Serve on a free port of ``host``."""
        if self._runner is not None:
            raise RuntimeError("already started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self._port = int(sock.getsockname()[1])
        runner = web.AppRunner(
            self._app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await runner.setup()
        await web.SockSite(runner, sock).start()
        self._runner = runner

    async def stop(self) -> None:
        """End every watch and stop serving."""
        for w in list(self._watches):
            w.close("end")
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> FakeKubeApi:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the ``host`` of a kubernetes client Configuration."""
        if self._port is None:
            raise RuntimeError("not started")
        return f"http://{self.host}:{self._port}"

    # ----------------------------------------------------------------- test-side API

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (the last write's)."""
        return self._rv

    def objects(self, kind: str, namespace: str | None = None) -> list[JsonObj]:
        """Copies of the stored objects of a kind (``"ProvisioningRequest"`` or its plural)."""
        rt = self._type_named(kind)
        return [
            copy.deepcopy(o)
            for (ns, _), o in sorted(self._objects[rt.plural].items(), key=_by_key)
            if namespace is None or ns == namespace
        ]

    def get(self, kind: str, name: str, namespace: str | None = None) -> JsonObj | None:
        """A copy of one stored object, or None."""
        rt = self._type_named(kind)
        obj = self._objects[rt.plural].get(self._key(rt, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def put(self, obj: JsonObj) -> JsonObj:
        """Create or replace an object as-is, bypassing validation (a privileged write).

        ``apiVersion``, ``kind`` and ``metadata.name`` are required; a namespaced object without
        a namespace goes to ``default``. Server-owned metadata (uid, creationTimestamp) is kept
        from the stored object or filled in. Emits ADDED or MODIFIED; unchanged content is a
        no-op. Returns the stored object.
        """
        rt = self._type_of(obj)
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise ValueError("put() needs metadata.name")
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        current = self._objects[rt.plural].get(self._key(rt, meta.get("namespace"), name))
        if current is None:
            meta.pop("resourceVersion", None)
            meta["uid"] = meta.get("uid") or str(uuid.uuid4())
            meta["creationTimestamp"] = meta.get("creationTimestamp") or _now()
            if rt.custom:
                meta.setdefault("generation", 1)
            return copy.deepcopy(self._commit(rt, "ADDED", new, None))
        for key in ("uid", "creationTimestamp", "generation"):
            if key in current["metadata"]:
                meta[key] = current["metadata"][key]
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return copy.deepcopy(current)
        return copy.deepcopy(self._commit(rt, "MODIFIED", new, current))

    def delete(self, kind: str, name: str, namespace: str | None = None) -> JsonObj:
        """Delete an object (DELETED event); raises :class:`KubeApiError` 404 if missing."""
        rt = self._type_named(kind)
        return copy.deepcopy(self._delete(rt, namespace, name, None))

    def set_conditions(self, namespace: str, name: str, conditions: list[JsonObj]) -> JsonObj:
        """Replace a ProvisioningRequest's ``status.conditions`` through the status strategy.

        The conditions are validated like the CRD does (422 :class:`KubeApiError` otherwise).
        """
        rt = PROVISIONING_REQUESTS
        current = self._require(rt, namespace, name)
        new = copy.deepcopy(current)
        status = new.get("status")
        new["status"] = {
            **(status if isinstance(status, dict) else {}),
            "conditions": copy.deepcopy(conditions),
        }
        return copy.deepcopy(self._update(rt, current, new, status_only=True))

    def set_condition(
        self,
        namespace: str,
        name: str,
        type_: str,
        status: Literal["True", "False", "Unknown"],
        reason: str,
        message: str = "",
    ) -> JsonObj:
        """Upsert one ProvisioningRequest condition as the cluster-autoscaler does.

        Like apimachinery's ``meta.SetStatusCondition``: ``lastTransitionTime`` moves only when
        ``status`` changes; ``observedGeneration`` is the object's generation.
        """
        current = self._require(PROVISIONING_REQUESTS, namespace, name)
        existing = (current.get("status") or {}).get("conditions") or []
        conditions = [copy.deepcopy(c) for c in existing]
        generation = current["metadata"].get("generation", 1)
        for c in conditions:
            if c.get("type") == type_:
                if c.get("status") != status:
                    c["lastTransitionTime"] = _now()
                c.update(
                    status=status, reason=reason, message=message, observedGeneration=generation
                )
                break
        else:
            conditions.append(
                {
                    "type": type_,
                    "status": status,
                    "observedGeneration": generation,
                    "lastTransitionTime": _now(),
                    "reason": reason,
                    "message": message,
                }
            )
        return self.set_conditions(namespace, name, conditions)

    def add_node(
        self,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        allocatable: dict[str, str] | None = None,
        ready: bool = True,
        unschedulable: bool = False,
        taints: list[JsonObj] | None = None,
    ) -> JsonObj:
        """Create a Node, as a node registering (ADDED event). Returns it."""
        capacity = dict(allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"})
        spec: JsonObj = {}
        if unschedulable:
            spec["unschedulable"] = True
        if taints:
            spec["taints"] = copy.deepcopy(taints)
        obj: JsonObj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "message": "",
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": _now(),
                    }
                ],
            },
        }
        if self.get("Node", name) is not None:
            raise NODES.already_exists(name)
        return self.put(obj)

    def set_pod_status(self, namespace: str, name: str, status: JsonObj) -> JsonObj:
        """Replace a Pod's ``status`` through the status strategy, as the kubelet does.
        Returns the stored pod (unchanged, with no new resourceVersion, if nothing changed)."""
        current = self._require(PODS, namespace, name)
        new = copy.deepcopy(current)
        new["status"] = copy.deepcopy(status)
        return copy.deepcopy(self._update(PODS, current, new, status_only=True))

    def compact(self, resource_version: int | None = None) -> int:
        """Forget watch history up to ``resource_version`` (default: all of it).

        A watch from an older version then gets a 410 Expired ERROR event, and an ``Exact``
        list at an older version a 410. Returns the oldest version still watchable.
        """
        floor = self._rv if resource_version is None else min(resource_version, self._rv)
        if floor > self._floor:
            self._floor = floor
            cut = bisect.bisect_right(self._history, floor, key=lambda e: e.rv)
            del self._history[:cut]
        return self._floor

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch; returns how many.

        ``abort=False`` ends each stream cleanly, as the server does at a watch's timeout
        (the client sees the end of the response). ``abort=True`` cuts the connections, as a
        crashing server or a broken network does (the client sees a transport error).
        """
        watches = list(self._watches)
        for w in watches:
            w.close("abort" if abort else "end")
        return len(watches)

    def watch_requests(self) -> list[RequestRecord]:
        """The watch requests received so far, oldest first (to see how a client reconnects)."""
        return [r for r in self.requests if r.method == "GET" and r.query.get("watch") in _TRUE]

    def watch_count(self, kind: str | None = None) -> int:
        """How many watch streams are open (of one kind, or of all)."""
        if kind is None:
            return len(self._watches)
        rt = self._type_named(kind)
        return sum(1 for w in self._watches if w.rt is rt)

    async def wait_for_watches(
        self, count: int, *, kind: str | None = None, timeout: float = 5.0
    ) -> None:
        """Wait until at least ``count`` watches are open (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout):
            while self.watch_count(kind) < count:
                changed = self._watches_changed
                await changed.wait()

    # ----------------------------------------------------------------- store core

    def _type_named(self, kind: str) -> ResourceType:
        for rt in RESOURCES:
            if kind in (rt.kind, rt.plural):
                return rt
        raise ValueError(f"unknown kind {kind!r}; served: {[rt.kind for rt in RESOURCES]}")

    def _type_of(self, obj: JsonObj) -> ResourceType:
        for rt in RESOURCES:
            if obj.get("kind") == rt.kind and obj.get("apiVersion") == rt.api_version:
                return rt
        raise ValueError(f"unknown apiVersion/kind {obj.get('apiVersion')!r}/{obj.get('kind')!r}")

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if rt.namespaced else "", name)

    def _require(self, rt: ResourceType, namespace: str | None, name: str) -> JsonObj:
        obj = self._objects[rt.plural].get(self._key(rt, namespace, name))
        if obj is None:
            raise rt.not_found(name)
        return obj

    def _signal_watches_changed(self) -> None:
        self._watches_changed.set()
        self._watches_changed = asyncio.Event()

    def _commit(
        self,
        rt: ResourceType,
        type_: Literal["ADDED", "MODIFIED", "DELETED"],
        obj: JsonObj,
        prev: JsonObj | None,
    ) -> JsonObj:
        """Write one change: the next resourceVersion, the store, the history, the watchers.

        Synchronous on purpose: nothing else runs between the version bump and the
        notification, so every watcher sees every change in resourceVersion order.
        """
        self._rv += 1
        snap = copy.deepcopy(obj)
        snap["metadata"]["resourceVersion"] = str(self._rv)
        key = self._key(rt, snap["metadata"].get("namespace"), snap["metadata"]["name"])
        if type_ == "DELETED":
            del self._objects[rt.plural][key]
        else:
            self._objects[rt.plural][key] = snap
        ev = _Event(self._rv, type_, rt, snap, prev)
        self._history.append(ev)
        for w in list(self._watches):
            w.offer(ev)
        return snap

    def _create(self, rt: ResourceType, namespace: str | None, body: Any) -> JsonObj:
        obj = self._decode_object(rt, body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise KubeApiError(
                500,
                "InternalError",
                "Internal error occurred: resourceVersion should not be set on objects to be "
                "created",
            )
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            while True:
                suffix = "".join(random.choices(_GENERATE_NAME_CHARS, k=5))
                name = f"{meta['generateName']}{suffix}"
                if self._key(rt, namespace, name) not in self._objects[rt.plural]:
                    break
            meta["name"] = name
        errors = self._validate_name(name)
        if rt.custom and rt.schema is not None:
            obj = _prune(obj, rt.schema)
            meta = obj["metadata"]
        if not rt.keep_status_on_create and rt.status_subresource:
            obj.pop("status", None)
            if rt.initial_status is not None:
                obj["status"] = copy.deepcopy(rt.initial_status)
        if rt.validate is not None:
            errors.extend(rt.validate(obj, None))
        if errors:
            raise rt.invalid(name, errors)
        if self._key(rt, namespace, name) in self._objects[rt.plural]:
            raise rt.already_exists(name)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if rt.custom:
            meta["generation"] = 1
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        return self._commit(rt, "ADDED", obj, None)

    def _update(
        self,
        rt: ResourceType,
        current: JsonObj,
        new: JsonObj,
        *,
        status_only: bool,
        require_rv: bool = False,
    ) -> JsonObj:
        """Replace ``current`` by ``new`` through the update (or status-update) strategy."""
        cur_meta = current["metadata"]
        name = cur_meta["name"]
        new = self._decode_object(rt, new)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        if meta.get("name") not in (None, "", name):
            raise _bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        if rt.namespaced and meta.get("namespace") not in (None, "", cur_meta.get("namespace")):
            raise _bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        rv = meta.get("resourceVersion")
        if rv in (None, ""):
            if require_rv and rt.custom:
                raise rt.invalid(
                    name,
                    [
                        FieldError(
                            "metadata.resourceVersion",
                            "FieldValueInvalid",
                            "Invalid value: 0x0: must be specified for an update",
                        )
                    ],
                )
        elif rv != cur_meta["resourceVersion"]:
            raise rt.conflict(name)

        if status_only:
            # The status strategy: everything but status comes from the stored object.
            merged = copy.deepcopy(current)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
        else:
            merged = new
            merged_meta = merged["metadata"]
            for key in ("uid", "creationTimestamp", "generation", "namespace"):
                if key in cur_meta:
                    merged_meta[key] = cur_meta[key]
                else:
                    merged_meta.pop(key, None)
            merged_meta["name"] = name
            if rt.status_subresource:
                if "status" in current:
                    merged["status"] = copy.deepcopy(current["status"])
                else:
                    merged.pop("status", None)
        merged["apiVersion"], merged["kind"] = rt.api_version, rt.kind
        merged["metadata"]["resourceVersion"] = cur_meta["resourceVersion"]
        if rt.custom and rt.schema is not None:
            merged = _prune(merged, rt.schema)
        if rt.validate is not None:
            errors = rt.validate(merged, current)
            if errors:
                raise rt.invalid(name, errors)
        if rt.custom and merged.get("spec") != current.get("spec"):
            merged["metadata"]["generation"] = cur_meta.get("generation", 1) + 1
        if merged == current:
            return current  # a no-op write: no new resourceVersion, no event
        return self._commit(rt, "MODIFIED", merged, current)

    def _patch(
        self,
        rt: ResourceType,
        current: JsonObj,
        content_type: str,
        raw: bytes,
        *,
        status_only: bool,
    ) -> JsonObj:
        media = content_type.split(";")[0].strip().lower()
        accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
        if not rt.custom:
            accepted.append(STRATEGIC_MERGE_PATCH)
        if media not in accepted or media == APPLY_PATCH:
            raise KubeApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}"
                + (
                    " (server-side apply is not implemented by the fake)"
                    if media == APPLY_PATCH
                    else ""
                ),
            )
        try:
            doc = json.loads(raw or b"null")
        except ValueError as e:
            raise _bad_request(f"error decoding patch: {e}") from None
        try:
            if media == JSON_PATCH:
                if not isinstance(doc, list):
                    raise _bad_request(
                        f"json: cannot unmarshal {_json_type(doc)} into Go value of type "
                        "jsonpatch.Patch"
                    )
                patched = json_patch(current, doc)
            else:
                if not isinstance(doc, dict):
                    raise _bad_request(
                        f"json: cannot unmarshal {_json_type(doc)} into Go value of type "
                        "map[string]interface {}"
                    )
                if media == STRATEGIC_MERGE_PATCH and (
                    _contains_list(doc) or _contains_directive(doc)
                ):
                    raise _bad_request(
                        "the fake kube API approximates strategic merge patch by JSON merge "
                        "patch and so refuses patches with lists or $-directives (their merge "
                        f"keys are schema-dependent); send {MERGE_PATCH} instead"
                    )
                patched = merge_patch(current, doc)
        except _PatchError as e:
            raise KubeApiError(422, "Invalid", str(e)) from None
        if not isinstance(patched, dict):
            raise _bad_request("the patch did not produce an object")
        meta = patched.get("metadata")
        if isinstance(meta, dict) and meta.get("resourceVersion") in (None, ""):
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._update(rt, current, patched, status_only=status_only)

    def _delete(self, rt: ResourceType, namespace: str | None, name: str, options: Any) -> JsonObj:
        current = self._require(rt, namespace, name)
        pre = options.get("preconditions") if isinstance(options, dict) else None
        if isinstance(pre, dict):
            uid, rv = pre.get("uid"), pre.get("resourceVersion")
            if uid and uid != current["metadata"].get("uid"):
                raise KubeApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {rt.qualified_resource} "{name}": '
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{current['metadata'].get('uid')}",
                    rt.details(name),
                )
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise KubeApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {rt.qualified_resource} "{name}": '
                    f"Precondition failed: ResourceVersion in precondition: {rv}, "
                    f"ResourceVersion in object meta: {current['metadata']['resourceVersion']}",
                    rt.details(name),
                )
        return self._commit(rt, "DELETED", current, current)

    def _decode_object(self, rt: ResourceType, body: Any) -> JsonObj:
        if not isinstance(body, dict):
            raise _bad_request(
                f"the object provided is unrecognized (must be of type {rt.kind}): "
                f"json: cannot unmarshal {_json_type(body)} into Go value of type {rt.kind}"
            )
        obj = copy.deepcopy(body)
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if rt.custom and not kind:
            raise _bad_request(f"Object 'Kind' is missing in '{json.dumps(body)}'")
        if rt.custom and not api_version:
            raise _bad_request(f"Object 'apiVersion' is missing in '{json.dumps(body)}'")
        if kind and kind != rt.kind:
            raise _bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        if api_version and api_version != rt.api_version:
            raise _bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        return obj

    @staticmethod
    def _validate_name(name: str) -> list[FieldError]:
        if not name:
            return [
                FieldError(
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                )
            ]
        if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            return [
                FieldError.invalid(
                    "metadata.name",
                    name,
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'example.com', regex used for validation is "
                    f"'{_DNS1123_SUBDOMAIN.pattern[1:-1]}')",
                )
            ]
        return []

    def _list(
        self, rt: ResourceType, selector: Selector, rv: str | None, match: str | None
    ) -> JsonObj:
        if match and not rv:
            raise _bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if match not in (None, "", "Exact", "NotOlderThan"):
            raise _bad_request(f'resourceVersionMatch: Unsupported value: "{match}"')
        state = self._objects[rt.plural]
        list_rv = self._rv
        if rv not in (None, "", "0"):
            n = _parse_int("resourceVersion", rv)
            if match == "Exact":
                if n < self._floor:
                    raise KubeApiError(
                        410, "Expired", "The resourceVersion for the provided list is too old."
                    )
                self._check_not_too_large(n)
                state = self._state_at(rt, n)
                list_rv = n
            else:
                self._check_not_too_large(n)
        elif rv == "0" and match == "Exact":
            raise _bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
        items = []
        for _, obj in sorted(state.items(), key=_by_key):
            if not selector.matches(obj):
                continue
            item = copy.deepcopy(obj)
            if not rt.custom:  # typed lists carry no kind/apiVersion on their items
                item.pop("kind", None)
                item.pop("apiVersion", None)
            items.append(item)
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(list_rv)},
            "items": items,
        }

    def _check_not_too_large(self, n: int) -> None:
        if n > self._rv:
            raise KubeApiError(
                504,
                "Timeout",
                f"Timeout: Too large resource version: {n}, current: {self._rv}",
                {
                    "causes": [
                        {
                            "reason": "ResourceVersionTooLarge",
                            "message": "Too large resource version",
                        }
                    ],
                    "retryAfterSeconds": 1,
                },
            )

    def _state_at(self, rt: ResourceType, rv: int) -> dict[tuple[str, str], JsonObj]:
        """The objects of a kind as they were at ``rv``: undo the later history."""
        state = dict(self._objects[rt.plural])
        start = bisect.bisect_right(self._history, rv, key=lambda e: e.rv)
        for ev in reversed(self._history[start:]):
            if ev.rt is not rt:
                continue
            key = self._key(rt, ev.obj["metadata"].get("namespace"), ev.obj["metadata"]["name"])
            if ev.type == "ADDED":
                del state[key]
            elif ev.prev is not None:
                state[key] = ev.prev
        return state

    def _open_watch(self, rt: ResourceType, selector: Selector, rv: str | None) -> _Watch:
        """Register a watch with its backlog, atomically with respect to writes."""
        w = _Watch(rt, selector)
        if rv in (None, "", "0"):
            # "Get state and start at most recent": synthetic ADDED for what exists now.
            for _, obj in sorted(self._objects[rt.plural].items(), key=_by_key):
                if selector.matches(obj):
                    w.pending.append(("ADDED", obj))
        else:
            n = _parse_int("resourceVersion", rv)
            if n < self._floor:
                w.pending.append(
                    (
                        "ERROR",
                        KubeApiError(
                            410, "Expired", f"too old resource version: {n} ({self._floor})"
                        ).status(),
                    )
                )
                w.closing = "end"
                return w
            try:
                self._check_not_too_large(n)
            except KubeApiError as e:
                w.pending.append(("ERROR", e.status()))
                w.closing = "end"
                return w
            start = bisect.bisect_right(self._history, n, key=lambda e: e.rv)
            for ev in self._history[start:]:
                translated = w.translate(ev)
                if translated is not None:
                    w.pending.append(translated)
        self._watches.add(w)
        self._signal_watches_changed()
        return w

    def _close_watch(self, w: _Watch) -> None:
        if w in self._watches:
            self._watches.discard(w)
            self._signal_watches_changed()

    # ----------------------------------------------------------------- HTTP

    def _route(self, path: str) -> _Route:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise self._unknown_path()
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise self._unknown_path()
        rt = next(
            (r for r in RESOURCES if (r.group, r.version, r.plural) == (group, version, rest[0])),
            None,
        )
        if rt is None or (namespace is not None and not rt.namespaced):
            raise self._unknown_path()
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if name is not None and rt.namespaced and namespace is None:
            raise self._unknown_path()
        if sub is not None and not (sub == "status" and rt.status_subresource):
            raise self._unknown_path()
        return _Route(rt, namespace, name, sub)

    @staticmethod
    def _unknown_path() -> KubeApiError:
        return KubeApiError(404, "NotFound", "the server could not find the requested resource", {})

    @staticmethod
    def _method_not_allowed() -> KubeApiError:
        return KubeApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            {},
        )

    @staticmethod
    def _json(obj: JsonObj, status: int = 200) -> web.Response:
        return web.Response(
            status=status,
            body=json.dumps(obj, separators=(",", ":")).encode() + b"\n",
            content_type="application/json",
        )

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise _bad_request(f"the request body is not JSON: {e}") from None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            RequestRecord(
                request.method,
                request.path,
                dict(request.query),
                request.headers.get("Content-Type", ""),
            )
        )
        try:
            return await self._handle(request, self._route(request.path))
        except KubeApiError as e:
            return self._json(e.status(), e.code)

    async def _handle(self, request: web.Request, route: _Route) -> web.StreamResponse:
        rt, ns, name, method = route.rt, route.namespace, route.name, request.method
        q = request.query
        if name is None:
            if method == "GET":
                selector = Selector.parse(
                    rt, ns, q.get("labelSelector", ""), q.get("fieldSelector", "")
                )
                if _parse_bool("watch", q.get("watch")):
                    return await self._serve_watch(request, rt, selector)
                return self._json(
                    self._list(
                        rt, selector, q.get("resourceVersion"), q.get("resourceVersionMatch")
                    )
                )
            if method == "POST" and (ns is not None or not rt.namespaced):
                obj = self._create(rt, ns, await self._body(request))
                return self._json(obj, 201)
            raise self._method_not_allowed()
        status_only = route.subresource == "status"
        if method == "GET":
            return self._json(self._require(rt, ns, name))
        if method == "PUT":
            current = self._require(rt, ns, name)
            body = await self._body(request)
            return self._json(
                self._update(rt, current, body, status_only=status_only, require_rv=True)
            )
        if method == "PATCH":
            current = self._require(rt, ns, name)
            raw = await request.read()
            return self._json(
                self._patch(
                    rt,
                    current,
                    request.headers.get("Content-Type", ""),
                    raw,
                    status_only=status_only,
                )
            )
        if method == "DELETE" and not status_only:
            body = await self._body(request)
            deleted = self._delete(rt, ns, name, body)
            if rt.return_deleted_object:
                return self._json(deleted)
            details = rt.details(name)
            details["uid"] = deleted["metadata"]["uid"]
            return self._json(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            )
        raise self._method_not_allowed()

    async def _serve_watch(
        self, request: web.Request, rt: ResourceType, selector: Selector
    ) -> web.StreamResponse:
        q = request.query
        bookmarks = _parse_bool("allowWatchBookmarks", q.get("allowWatchBookmarks"))
        timeout = q.get("timeoutSeconds")
        timeout_s = _parse_int("timeoutSeconds", timeout) if timeout else 0
        w = self._open_watch(rt, selector, q.get("resourceVersion"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s * self.timeout_seconds_scale if timeout_s else None
        next_bookmark = loop.time() + self.bookmark_interval if bookmarks else None
        resp = web.StreamResponse(
            status=200,
            headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"},
        )
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            while True:
                if w.pending:
                    type_, obj = w.pending.popleft()
                    await resp.write(_event_line(type_, obj))
                    continue
                if w.closing == "abort":
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                if w.closing == "end":
                    break
                now = loop.time()
                if deadline is not None and now >= deadline:
                    break
                if next_bookmark is not None and now >= next_bookmark:
                    # Nothing is pending, so every matching change up to the current version
                    # has been sent: the bookmark may carry it.
                    bookmark = {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(self._rv)},
                    }
                    next_bookmark = now + self.bookmark_interval
                    await resp.write(_event_line("BOOKMARK", bookmark))
                    continue
                wake_at = min(t for t in (deadline, next_bookmark, now + 3600.0) if t is not None)
                w.wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(w.wakeup.wait(), timeout=wake_at - now)
            await resp.write_eof()
        except ConnectionError:
            pass  # the client went away mid-write
        finally:
            self._close_watch(w)
        return resp


def _by_key(item: tuple[tuple[str, str], JsonObj]) -> tuple[str, str]:
    return item[0]


def _event_line(type_: str, obj: JsonObj) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "NODES",
    "PODS",
    "PODTEMPLATES",
    "PROVISIONING_REQUESTS",
    "STRATEGIC_MERGE_PATCH",
    "FakeKubeApi",
    "FieldError",
    "KubeApiError",
    "RequestRecord",
    "ResourceType",
    "Selector",
    "json_patch",
    "merge_patch",
]
