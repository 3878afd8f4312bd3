"""Hostile input, shared by the API tests and the chaos suite's hostile run.

Generators, each driving hypothesis over one surface and handing every request to a
``Judge`` (which records the head before, sends, and checks the answer):

* ``http_operations``: every operation of the served OpenAPI document (schemathesis),
  inputs that fit the schema and inputs that break it;
* ``manifests``: every manifest kind of the seeds, one field replaced by a hostile value,
  removed, or an unknown one added, to ``/v1/apply``;
* ``grpc_methods``: every method of both gRPC services, with raw bytes and with messages
  filled from their descriptors (over a valid message, or alone);
* ``ingest_values``: what a client may put on the Kafka submissions topic.

``answer_problem`` says what is wrong with one answer: a server error, or a refusal
that is not in the one error shape.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
import requests
import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode, openapi

from muster.api.v1 import muster_pb2 as pb
from tests.api.conftest import bearer, grpc_meta, workload

# gRPC's answers that mean the server failed (its 5xx).
GRPC_SERVER_ERRORS = {"INTERNAL", "UNKNOWN", "DATA_LOSS", "UNIMPLEMENTED", "UNAVAILABLE"}


@dataclass(frozen=True, slots=True)
class Answer:
    status: str  # "422", or a gRPC code's name
    refused: bool  # a 4xx, or a gRPC error the request caused
    problem: str | None = None  # a server error or a refusal out of shape


Send = Callable[[], Answer]


class Judge(Protocol):
    def __call__(self, transport: str, label: str, send: Send) -> None: ...


@dataclass
class HeadJudge:
    """A judge for a store nothing else writes to: a refusal must leave its head where
    it was. Collects the problems and counts the statuses."""

    head: Callable[[], int]
    problems: list[str] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    def __call__(self, transport: str, label: str, send: Send) -> None:
        before = self.head()
        answer = send()
        self.statuses[answer.status] += 1
        if answer.problem is not None:
            self.problems.append(answer.problem)
        elif answer.refused and self.head() != before:
            self.problems.append(f"{label}: {answer.status}, yet a refusal appended events")


def answer_problem(label: str, status: int, text: str) -> str | None:
    """What is wrong with an HTTP answer to generated input: a 5xx, or a refusal not in
    the error shape."""
    if status >= 500:
        return f"{label} {text[:300]}"
    if status < 400:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict) or set(body) != {"error"}:
        return f"{label}: not the error shape: {text[:200]}"
    return None


def http_answer(label: str, resp: requests.Response) -> Answer:
    problem = answer_problem(label, resp.status_code, resp.text)
    return Answer(str(resp.status_code), resp.status_code >= 400, problem)


def bounded(examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


# -- HTTP: every operation of the OpenAPI document ------------------------------------


def http_operations(
    base_url: str,
    document: dict[str, Any],
    examples: int,
    principals: Sequence[str | None],
    judge: Judge,
    headers: Callable[[str | None], dict[str, str]] = bearer,
) -> None:
    schema = openapi.from_dict(document)
    session = requests.Session()
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @bounded(examples)
            @given(case=op.as_strategy(generation_mode=mode))
            def check(case: Any) -> None:
                if case.query and "watch" in case.query:
                    case.query["watch"] = "false"  # a watch streams until the client leaves
                for who in principals:
                    label = f"{case.method} {case.formatted_path} as {who}"

                    def send(case: Any = case, who: str | None = who, label: str = label) -> Answer:
                        resp = case.call(
                            base_url=base_url, session=session, headers=headers(who), timeout=30
                        )
                        return http_answer(f"{label}: {resp.status_code}", resp)

                    judge("http", label, send)

            check()


# -- manifests: every kind of the seeds, mutated --------------------------------------

leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "-1", "1e400", "0x10", "1Gi", "99999999999Ei", "\u202e", "a" * 300]),
)
hostile = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, originals: Sequence[Any]) -> Any:
    """One of ``originals`` with one field replaced, removed, or an unknown one added."""
    doc = copy.deepcopy(draw(st.sampled_from(originals)))
    path = draw(st.sampled_from(_paths(doc)[1:]))  # never the document itself
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    how = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
    if how == "replace":
        parent[path[-1]] = draw(hostile)
    elif how == "remove" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=12))] = draw(hostile)
    return doc


def manifests(
    base_url: str,
    seeds: Sequence[dict[str, Any]],
    examples: int,
    principals: Sequence[str | None],
    judge: Judge,
) -> None:
    session = requests.Session()

    @bounded(examples)
    @given(doc=mutated(seeds))
    def check(doc: dict[str, Any]) -> None:
        text = yaml.safe_dump(doc).encode()
        for who in principals:
            label = f"apply {doc.get('kind')} as {who}"

            def send(who: str | None = who, label: str = label) -> Answer:
                resp = session.post(
                    f"{base_url}/v1/apply", data=text, headers=bearer(who), timeout=60
                )
                return http_answer(f"{label}: {resp.status_code}\n{text[:300]!r}", resp)

            judge("http", label, send)

    check()


# -- gRPC: every method, raw bytes and messages filled from their descriptors ----------

# Valid messages to build on, so generated ones reach past the first check.
BASES: dict[str, Callable[[], Message]] = {
    "Submit": lambda: pb.SubmitRequest(workload=_pb_workload()),
    "SubmitBatch": lambda: pb.SubmitBatchRequest(items=[pb.SubmitRequest(workload=_pb_workload())]),
    "Apply": lambda: pb.ApplyRequest(
        manifests="apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team-a, labels: "
        "{kueue.x-k8s.io/queue-name: lq}}\nspec: {containers: [{name: c, resources: "
        "{requests: {nvidia.com/gpu: 1}}}]}\n"
    ),
}


def _pb_workload() -> pb.WorkloadSpec:
    return json_format.ParseDict(workload(), pb.WorkloadSpec(), ignore_unknown_fields=True)


def _scalar(f: Any) -> st.SearchStrategy[Any]:  # a FieldDescriptor (python or upb)
    t = f.type
    if t == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.text(max_size=30), st.sampled_from(["team-a", "lq", "cq", "a" * 300]))
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=30)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if t == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in f.enum_type.values])
    unsigned = t in (
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_FIXED64,
    )
    wide = t in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED64,
    )
    bits = 63 if wide else 31
    return st.integers(0 if unsigned else -(2**bits), 2**bits - 1)


def _fill(draw: st.DrawFn, msg: Message, depth: int = 0) -> None:
    """Set some of ``msg``'s fields (recursively, a few levels) to drawn values."""
    f: Any  # a FieldDescriptor (python or upb)
    for f in msg.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        is_message = f.type == FieldDescriptor.TYPE_MESSAGE
        if is_message and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            target = getattr(msg, f.name)
            for _ in range(draw(st.integers(0, 2))):
                key = draw(st.text(max_size=12))
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    if depth < 3:
                        _fill(draw, target[key], depth + 1)
                else:
                    target[key] = draw(_scalar(value_field))
        elif f.is_repeated:
            target = getattr(msg, f.name)
            for _ in range(draw(st.integers(0, 2))):
                if is_message:
                    if depth < 3:
                        _fill(draw, target.add(), depth + 1)
                else:
                    target.append(draw(_scalar(f)))
        elif is_message:
            if depth < 3:
                _fill(draw, getattr(msg, f.name), depth + 1)
                getattr(msg, f.name).SetInParent()
        else:
            setattr(msg, f.name, draw(_scalar(f)))


@st.composite
def grpc_request(draw: st.DrawFn, method: str, cls: type[Message]) -> bytes:
    """Raw bytes, or a message filled over a valid one (or an empty one)."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=200))
    base = BASES.get(method)
    msg = base() if base is not None and draw(st.booleans()) else cls()
    _fill(draw, msg)
    if method == "Watch":
        msg.follow = False  # type: ignore[attr-defined]  # a follow streams until cancelled
    return msg.SerializeToString()


def grpc_methods(
    target: str, examples: int, principals: Sequence[str | None], judge: Judge
) -> None:
    channel = grpc.insecure_channel(target)
    for service in pb.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            _grpc_method(
                channel,
                f"/{service.full_name}/{method.name}",
                method.server_streaming,
                grpc_request(method.name, getattr(pb, method.input_type.name)),
                examples,
                principals,
                judge,
            )
    channel.close()


def _grpc_method(
    channel: grpc.Channel,
    path: str,
    streaming: bool,
    requests_: st.SearchStrategy[bytes],
    examples: int,
    principals: Sequence[str | None],
    judge: Judge,
) -> None:
    @bounded(examples)
    @given(raw=requests_)
    def check(raw: bytes) -> None:
        for who in principals:
            label = f"gRPC {path} as {who}"

            def send(who: str | None = who, label: str = label) -> Answer:
                return _grpc_call(channel, path, streaming, raw, grpc_meta(who), label)

            judge("grpc", label, send)

    check()


def _grpc_call(
    channel: grpc.Channel,
    path: str,
    streaming: bool,
    raw: bytes,
    metadata: tuple[tuple[str, str], ...],
    label: str,
) -> Answer:
    ident = lambda b: b  # noqa: E731  # bytes in, bytes out
    try:
        if streaming:
            stub = channel.unary_stream(path, request_serializer=ident, response_deserializer=ident)
            for _ in stub(raw, metadata=metadata, timeout=30):
                pass
        else:
            stub_u = channel.unary_unary(
                path, request_serializer=ident, response_deserializer=ident
            )
            stub_u(raw, metadata=metadata, timeout=30)
    except grpc.RpcError as exc:
        call: Any = exc  # a grpc.Call too
        code = call.code().name
        if code in GRPC_SERVER_ERRORS or code == "DEADLINE_EXCEEDED":
            return Answer(code, True, f"{label}: {code} {call.details()}")
        trailing = dict(call.trailing_metadata() or ())
        if "muster-error-code" not in trailing and code != "RESOURCE_EXHAUSTED":
            return Answer(code, True, f"{label}: {code} without muster-error-code")
        return Answer(code, True)
    return Answer("OK", False)


# -- Kafka ingest: what a client may put on the submissions topic ---------------------


@st.composite
def ingest_value(draw: st.DrawFn) -> bytes:
    """Raw bytes, JSON that is no workload, or a workload with a hostile field."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return json.dumps(draw(hostile)).encode()
    return json.dumps(draw(mutated([workload(namespace="team-a")]))).encode()
