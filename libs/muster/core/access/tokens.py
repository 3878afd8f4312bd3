"""Who is calling: static tokens from a token file, or HS256-signed tokens (JWTs).

Static tokens are held only as sha256 digests, so a memory dump or a log of the book
never reveals a usable secret. Every malformed bearer value becomes ``AuthError`` with
a reason, never another exception, because the value comes straight off the network.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

from muster.core.model.fields import NAME, InvalidInput, Obj


@dataclass(frozen=True, slots=True)
class Principal:
    name: str  # the tenant / subject, e.g. "team-a" or "ci-bot"
    namespaces: frozenset[str]  # where it may read/submit/cancel; "*" = all
    queues: frozenset[str] = frozenset()  # LocalQueues "namespace/name" to submit to; empty = any
    admin: bool = False  # queues, quotas, flavors, priority classes, replay; sees every namespace
    rate: float | None = None  # submissions per second; None = the server default
    burst: int | None = None


# Auth disabled means a single trusted operator, so it gets everything.
ANONYMOUS_ADMIN = Principal("anonymous", frozenset({"*"}), admin=True)

MAX_TOKEN_CHARS = 8192  # bounds the work an unauthenticated caller can make us do
_TENANT = re.compile(r"[^\s\x00-\x1f\x7f]{1,253}")  # free-form, but printable and one word
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_HEADER = {"alg": "HS256", "typ": "JWT"}
_MAX_BURST = 1_000_000_000  # keeps float(burst) exact and finite in the rate limiter


class AuthError(Exception):
    """The caller could not be authenticated; ``reason`` is safe to send back."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def token_digest(token: str) -> str:
    """The sha256 hex digest a token file's ``tokenSha256`` holds."""
    # surrogatepass: a header value can never make hashing raise.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class TokenBook:
    """Static tokens by sha256 hex digest."""

    by_digest: Mapping[str, Principal] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for digest in self.by_digest:
            if not _HEX64.fullmatch(digest) or digest != digest.lower():
                raise ValueError("TokenBook keys must be lower-case sha256 hex digests")

    def lookup(self, token: str) -> Principal | None:
        digest = token_digest(token)
        found = None
        # Compare against every entry, no early exit: timing says nothing about the book.
        for known, principal in self.by_digest.items():
            if hmac.compare_digest(known, digest):
                found = principal
        return found


def parse_token_file(data: object) -> TokenBook:
    """Validate a token file's content (``{"tokens": [...]}``); ``ValueError`` names the field."""
    o = Obj(data)
    by_digest: dict[str, Principal] = {}
    first: dict[str, str] = {}
    for item, path in o.items("tokens", required=True, max_items=100_000):
        digest, principal = _entry(item, path)
        if digest in first:
            raise InvalidInput(path, f"the same token as {first[digest]}")
        first[digest] = path
        by_digest[digest] = principal
    o.done()
    return TokenBook(MappingProxyType(by_digest))


def load_token_file(path: str | Path) -> TokenBook:
    """Read a YAML (or ``.json``) token file: the only I/O in the access package."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    # Parser errors are reported by position only: their snippets could quote a token.
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON at line {exc.lineno} column {exc.colno}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ValueError(f"{p}: not valid YAML{where}") from None
    try:
        return parse_token_file(data)
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None


def _entry(item: object, path: str) -> tuple[str, Principal]:
    o = Obj(item, path)
    token, sha = o.raw("token"), o.raw("tokenSha256")
    if (token is None) == (sha is None):
        raise InvalidInput(path, "give exactly one of token and tokenSha256")
    if token is not None:
        # Bearer parsing strips whitespace, so a token holding any could never match.
        if not isinstance(token, str) or not token or any(c.isspace() for c in token):
            raise InvalidInput(o.at("token"), "must be a non-empty string without spaces")
        digest = token_digest(token)
    else:
        if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
            raise InvalidInput(o.at("tokenSha256"), "must be the 64-digit hex sha256 of the token")
        digest = sha.lower()
    principal = _principal(o, "name", "namespaces")
    o.done()
    return digest, principal


def _principal(o: Obj, name_key: str, ns_key: str) -> Principal:
    """The grant fields shared by token file entries and signed-token claims."""
    name = o.raw(name_key, required=True)
    if not isinstance(name, str) or not _TENANT.fullmatch(name):
        raise InvalidInput(o.at(name_key), "must be a name of 1 to 253 characters, no spaces")
    admin = o.flag("admin", False)
    namespaces = _namespaces(o, ns_key, admin)
    return Principal(
        name=name,
        namespaces=namespaces,
        queues=_queues(o, "queues", namespaces, admin),
        admin=admin,
        rate=_number(o, "rate", positive=True),
        burst=o.integer("burst", lo=1, hi=_MAX_BURST),
    )


def _is_name(value: str) -> bool:
    return len(value) <= 63 and NAME.fullmatch(value) is not None


def _namespaces(o: Obj, key: str, admin: bool) -> frozenset[str]:
    raw, path = o.raw(key), o.at(key)
    if raw is None:
        if admin:  # an admin sees every namespace anyway
            return frozenset()
        raise InvalidInput(path, "is required: a list of namespace names, or ['*'] for all")
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise InvalidInput(path, "must be a list of namespace names")
    if not raw and not admin:
        raise InvalidInput(path, "must name at least one namespace")
    for i, ns in enumerate(raw):
        if ns != "*" and not _is_name(ns):
            raise InvalidInput(
                f"{path}[{i}]", f"{ns!r} is not a namespace name (lower-case letters, digits, '-')"
            )
    return frozenset(raw)


def _queues(o: Obj, key: str, namespaces: frozenset[str], admin: bool) -> frozenset[str]:
    raw, path = o.raw(key), o.at(key)
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(q, str) for q in raw):
        raise InvalidInput(path, "must be a list of LocalQueues as namespace/name")
    if admin and raw:  # refused rather than ignored: it would look like a restriction
        raise InvalidInput(path, "an admin may use every queue; drop queues or admin")
    for i, queue in enumerate(raw):
        ns, _, name = queue.partition("/")
        if not (_is_name(ns) and _is_name(name)):
            raise InvalidInput(f"{path}[{i}]", f"{queue!r} is not a LocalQueue as namespace/name")
        if ns not in namespaces and "*" not in namespaces:
            raise InvalidInput(f"{path}[{i}]", f"namespace {ns} is not among the namespaces")
    return frozenset(raw)


def _number(o: Obj, key: str, *, positive: bool) -> float | None:
    raw = o.raw(key)
    if raw is None:
        return None
    try:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise TypeError
        value = float(raw)  # OverflowError for a 400-digit integer
    except (TypeError, OverflowError):
        raise InvalidInput(o.at(key), "must be a number") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise InvalidInput(o.at(key), "must be a positive number" if positive else "must be finite")
    return value


# -- signed tokens (RFC 7519 JWT, HS256 only) ---------------------------------------


def sign_token(secret: bytes, claims: Mapping[str, object]) -> str:
    """An HS256 JWT carrying ``claims``; ``verify_signed`` checks what they mean."""
    _check_secret(secret)
    head = _b64encode(json.dumps(_HEADER, separators=(",", ":")).encode())
    body = _b64encode(json.dumps(dict(claims), separators=(",", ":"), allow_nan=False).encode())
    return f"{head}.{body}.{_b64encode(_mac(secret, head, body))}"


def verify_signed(token: str, secret: bytes, now: float) -> Principal:
    """The principal a valid, current HS256 JWT names; ``AuthError`` for anything else."""
    _check_secret(secret)
    if len(token) > MAX_TOKEN_CHARS:
        raise AuthError("token too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthError("malformed token: expected header.claims.signature")
    head, body, _ = parts
    try:
        header_raw, claims_raw, signature = (_b64decode(part) for part in parts)
    except ValueError:
        raise AuthError("malformed token: not base64url") from None
    header = _json_object(header_raw, "the header is")
    # The algorithm is fixed by us, never chosen by the token ("none", RS/HS confusion).
    if header.get("alg") != "HS256":
        raise AuthError("unsupported token algorithm: only HS256 is accepted")
    if header != _HEADER:
        raise AuthError('malformed token: the header must be {"alg":"HS256","typ":"JWT"}')
    if not hmac.compare_digest(signature, _mac(secret, head, body)):
        raise AuthError("bad signature")
    claims = _json_object(claims_raw, "the claims are")  # parsed only once authentic
    try:
        o = Obj(claims)
        principal = _principal(o, "sub", "ns")
        expires, not_before = _number(o, "exp", positive=False), _number(o, "nbf", positive=False)
    except InvalidInput as exc:
        raise AuthError(f"invalid token claims: {exc}") from None
    if expires is not None and now >= expires:  # RFC 7519: "on or after" exp is expired
        raise AuthError("token expired")
    if not_before is not None and now < not_before:
        raise AuthError("token not yet valid")
    return principal


def _check_secret(secret: bytes) -> None:
    if not isinstance(secret, bytes) or not secret:
        raise ValueError("the token signing secret must be non-empty bytes")


def _mac(secret: bytes, head: str, body: str) -> bytes:
    return hmac.new(secret, f"{head}.{body}".encode("ascii"), hashlib.sha256).digest()


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(part: str) -> bytes:
    if not _B64URL.fullmatch(part):
        raise ValueError("not base64url")
    raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    # Only the canonical form, so one signed content has exactly one token string.
    if _b64encode(raw) != part:
        raise ValueError("not canonical base64url")
    return raw


def _json_object(raw: bytes, what: str) -> dict[str, object]:
    try:
        value = json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # RecursionError: deeply nested arrays
        raise AuthError(f"malformed token: {what} not JSON") from None
    if not isinstance(value, dict):
        raise AuthError(f"malformed token: {what} not a JSON object")
    return value


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # Duplicate keys would let two parsers read two different tokens.
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# -- the bearer header ----------------------------------------------------------------


def bearer_token(header_value: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive)."""
    parts = (header_value or "").split(maxsplit=1)
    if len(parts) != 2 or parts[0].lower() != "bearer" or not parts[1].strip():
        raise AuthError("missing bearer token")
    return parts[1].strip()


@dataclass(frozen=True, slots=True)
class Authenticator:
    book: TokenBook | None = None
    secret: bytes | None = None

    def __post_init__(self) -> None:
        if self.secret is not None:
            _check_secret(self.secret)

    @property
    def enabled(self) -> bool:
        return self.book is not None or self.secret is not None

    def authenticate(self, header_value: str | None, now: float) -> Principal:
        if not self.enabled:
            return ANONYMOUS_ADMIN
        token = bearer_token(header_value)
        # The book first: a static token that happens to hold two dots still works.
        if self.book is not None and (found := self.book.lookup(token)) is not None:
            return found
        if self.secret is not None and token.count(".") == 2:
            return verify_signed(token, self.secret, now)
        raise AuthError("unknown token")
