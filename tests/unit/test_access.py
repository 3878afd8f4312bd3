"""access: token files and signed tokens authenticate, policy authorizes, the token
bucket limits submissions; malformed input is refused with a reason, never a crash."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.core.access.policy import Action, Denied, authorize, visible_namespaces
from muster.core.access.rate import Bucket, Limit, Limiter, refill, take
from muster.core.access.tokens import (
    ANONYMOUS_ADMIN,
    Authenticator,
    AuthError,
    Principal,
    TokenBook,
    bearer_token,
    load_token_file,
    parse_token_file,
    sign_token,
    token_digest,
    verify_signed,
)

SECRET = b"k" * 32
NOW = 1_700_000_000.0


def entry(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"token": "s3cret-a", "name": "team-a", "namespaces": ["team-a"]}
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not ...}


def book_of(*entries: dict[str, Any]) -> TokenBook:
    return parse_token_file({"tokens": list(entries)})


# -- token files ----------------------------------------------------------------------


def test_a_full_entry_builds_its_principal() -> None:
    book = book_of(
        entry(
            namespaces=["team-a", "team-a-dev"],
            queues=["team-a/training"],
            rate=50,
            burst=100,
        ),
        entry(
            token=...,
            tokenSha256=token_digest("root").upper(),
            name="ops",
            namespaces=...,
            admin=True,
        ),
    )
    assert book.lookup("s3cret-a") == Principal(
        "team-a",
        frozenset({"team-a", "team-a-dev"}),
        frozenset({"team-a/training"}),
        False,
        50.0,
        100,
    )
    ops = book.lookup("root")
    assert ops == Principal("ops", frozenset(), admin=True)
    assert book.lookup("s3cret-b") is None
    assert book.lookup("") is None


def test_the_book_holds_digests_not_tokens() -> None:
    book = book_of(entry())
    assert list(book.by_digest) == [hashlib.sha256(b"s3cret-a").hexdigest()]
    assert "s3cret-a" not in repr(book)
    with pytest.raises(ValueError, match="lower-case sha256"):
        TokenBook({"s3cret-a": Principal("x", frozenset({"x"}))})


def test_a_header_value_never_makes_lookup_raise() -> None:
    book = book_of(entry())
    assert book.lookup("\udcff lone surrogate") is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "must be an object"),
        ({}, "tokens: is required"),
        ({"tokens": []}, "tokens: must not be empty"),
        ({"tokens": {}}, "tokens: must be a list"),
        ({"tokens": [entry()], "extra": 1}, "extra: unknown field"),
        ({"tokens": ["s3cret"]}, r"tokens\[0\]: must be an object"),
        ({"tokens": [entry(token=...)]}, r"tokens\[0\]: give exactly one of token and tokenSha256"),
        (
            {"tokens": [entry(tokenSha256=token_digest("x"))]},
            r"tokens\[0\]: give exactly one of token and tokenSha256",
        ),
        ({"tokens": [entry(token="")]}, r"tokens\[0\]\.token: must be a non-empty string"),
        ({"tokens": [entry(token=123)]}, r"tokens\[0\]\.token: must be a non-empty string"),
        ({"tokens": [entry(token="a b")]}, r"tokens\[0\]\.token: .*without spaces"),
        (
            {"tokens": [entry(token=..., tokenSha256="abc")]},
            r"tokens\[0\]\.tokenSha256: must be the 64-digit hex",
        ),
        (
            {"tokens": [entry(token=..., tokenSha256="g" * 64)]},
            r"tokens\[0\]\.tokenSha256: must be the 64-digit hex",
        ),
        ({"tokens": [entry(name=...)]}, r"tokens\[0\]\.name: is required"),
        ({"tokens": [entry(name="")]}, r"tokens\[0\]\.name: must be a name of 1 to 253"),
        ({"tokens": [entry(name="team a")]}, r"tokens\[0\]\.name: must be a name of 1 to 253"),
        ({"tokens": [entry(name=7)]}, r"tokens\[0\]\.name: must be a name of 1 to 253"),
        ({"tokens": [entry(namespaces=...)]}, r"tokens\[0\]\.namespaces: is required"),
        (
            {"tokens": [entry(namespaces="team-a")]},
            r"tokens\[0\]\.namespaces: must be a list of namespace names",
        ),
        (
            {"tokens": [entry(namespaces=["team-a", 3])]},
            r"tokens\[0\]\.namespaces: must be a list of namespace names",
        ),
        ({"tokens": [entry(namespaces=[])]}, r"tokens\[0\]\.namespaces: must name at least one"),
        (
            {"tokens": [entry(namespaces=["team-a", "Team_B"])]},
            r"tokens\[0\]\.namespaces\[1\]: 'Team_B' is not a namespace name",
        ),
        (
            {"tokens": [entry(namespaces=["team-a\n"])]},
            r"tokens\[0\]\.namespaces\[0\]: .* is not a namespace name",
        ),
        (
            {"tokens": [entry(queues="team-a/training")]},
            r"tokens\[0\]\.queues: must be a list of LocalQueues",
        ),
        (
            {"tokens": [entry(queues=["training"])]},
            r"tokens\[0\]\.queues\[0\]: 'training' is not a LocalQueue as namespace/name",
        ),
        (
            {"tokens": [entry(queues=["team-a/a/b"])]},
            r"tokens\[0\]\.queues\[0\]: .* is not a LocalQueue",
        ),
        (
            {"tokens": [entry(queues=["team-b/training"])]},
            r"tokens\[0\]\.queues\[0\]: namespace team-b is not among the namespaces",
        ),
        (
            {"tokens": [entry(admin=True, queues=["team-a/training"])]},
            r"tokens\[0\]\.queues: an admin may use every queue",
        ),
        ({"tokens": [entry(admin="yes")]}, r"tokens\[0\]\.admin: must be true or false"),
        ({"tokens": [entry(rate=0)]}, r"tokens\[0\]\.rate: must be a positive number"),
        ({"tokens": [entry(rate=-1.5)]}, r"tokens\[0\]\.rate: must be a positive number"),
        ({"tokens": [entry(rate=math.inf)]}, r"tokens\[0\]\.rate: must be a positive number"),
        ({"tokens": [entry(rate="50")]}, r"tokens\[0\]\.rate: must be a number"),
        ({"tokens": [entry(rate=True)]}, r"tokens\[0\]\.rate: must be a number"),
        ({"tokens": [entry(rate=10**400)]}, r"tokens\[0\]\.rate: must be a number"),
        ({"tokens": [entry(burst=0)]}, r"tokens\[0\]\.burst: must be at least 1"),
        ({"tokens": [entry(burst=2.5)]}, r"tokens\[0\]\.burst: must be an integer"),
        ({"tokens": [entry(burst=10**12)]}, r"tokens\[0\]\.burst: must be at most"),
        ({"tokens": [entry(secret="x")]}, r"tokens\[0\]\.secret: unknown field"),
        (
            {"tokens": [entry(), entry(name="team-b", namespaces=["team-b"])]},
            r"tokens\[1\]: the same token as tokens\[0\]",
        ),
        (
            {"tokens": [entry(), entry(token=..., tokenSha256=token_digest("s3cret-a"))]},
            r"tokens\[1\]: the same token as tokens\[0\]",
        ),
    ],
)
def test_every_bad_field_is_refused_by_name(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_token_file(data)
    assert "s3cret" not in str(caught.value)  # errors never quote a token


def test_one_tenant_may_hold_several_tokens_for_rotation() -> None:
    book = book_of(entry(), entry(token="s3cret-a2"))
    assert book.lookup("s3cret-a") == book.lookup("s3cret-a2")


def test_load_token_file_reads_yaml_and_json(tmp_path: Path) -> None:
    yml = tmp_path / "tokens.yaml"
    yml.write_text(
        "tokens:\n"
        '  - token: "s3cret-a"\n'
        "    name: team-a\n"
        "    namespaces: [team-a, team-a-dev]\n"
        "    queues: [team-a/training]\n"
        "    rate: 50\n"
        "    burst: 100\n"
    )
    js = tmp_path / "tokens.json"
    js.write_text(json.dumps({"tokens": [entry()]}))
    assert load_token_file(yml).lookup("s3cret-a") == Principal(
        "team-a",
        frozenset({"team-a", "team-a-dev"}),
        frozenset({"team-a/training"}),
        rate=50.0,
        burst=100,
    )
    assert load_token_file(str(js)).lookup("s3cret-a") == Principal("team-a", frozenset({"team-a"}))


def test_load_token_file_names_the_file_and_never_quotes_it(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text('tokens:\n  - token: "s3cret-a\n')
    with pytest.raises(ValueError, match=r"bad\.yaml: not valid YAML at line") as caught:
        load_token_file(bad_yaml)
    assert "s3cret" not in str(caught.value)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"tokens": [{"token": "s3cret-a",}]}')
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON at line 1") as caught:
        load_token_file(bad_json)
    assert "s3cret" not in str(caught.value)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("tokens:\n  - token: s3cret-a\n    name: team-a\n")
    with pytest.raises(ValueError, match=r"invalid\.yaml: tokens\[0\]\.namespaces: is required"):
        load_token_file(invalid)
    with pytest.raises(FileNotFoundError):
        load_token_file(tmp_path / "missing.yaml")


# -- signed tokens ----------------------------------------------------------------------


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def forge(header: Mapping[str, object] | bytes, claims: Mapping[str, object] | bytes) -> str:
    """A token correctly signed with SECRET over any header and claims (bytes: sent as is)."""
    head, body = (
        b64(part if isinstance(part, bytes) else json.dumps(dict(part)).encode())
        for part in (header, claims)
    )
    sig = hmac.new(SECRET, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


HS256 = {"alg": "HS256", "typ": "JWT"}


def test_sign_and_verify_round_trip() -> None:
    token = sign_token(
        SECRET,
        {"sub": "ci-bot", "ns": ["team-a"], "queues": ["team-a/ci"], "rate": 5, "burst": 10},
    )
    assert token.count(".") == 2 and "=" not in token
    assert verify_signed(token, SECRET, NOW) == Principal(
        "ci-bot", frozenset({"team-a"}), frozenset({"team-a/ci"}), rate=5.0, burst=10
    )
    admin = sign_token(SECRET, {"sub": "root", "admin": True, "iat": NOW, "iss": "ops"})
    assert verify_signed(admin, SECRET, NOW) == Principal("root", frozenset(), admin=True)


def test_our_tokens_are_standard_jwts() -> None:
    token = sign_token(SECRET, {"sub": "a", "ns": ["a"]})
    head, body, sig = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(head + "==")) == HS256
    assert forge(HS256, {"sub": "a", "ns": ["a"]}).split(".")[2] != ""  # forge agrees on form
    expected = hmac.new(SECRET, f"{head}.{body}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(sig + "=") == expected


def test_a_tampered_token_is_refused() -> None:
    token = sign_token(SECRET, {"sub": "team-a", "ns": ["team-a"]})
    head, body, sig = token.split(".")
    elevated = b64(json.dumps({"sub": "team-a", "ns": ["team-a"], "admin": True}).encode())
    for bad in (
        f"{head}.{elevated}.{sig}",
        f"{head}.{body}.{b64(b'x' * 32)}",
        f"{head}.{body}.",
    ):
        with pytest.raises(AuthError, match="bad signature"):
            verify_signed(bad, SECRET, NOW)
    with pytest.raises(AuthError, match="bad signature"):
        verify_signed(token, b"another secret", NOW)


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "none", "typ": "JWT"},
        {"alg": "None"},
        {"alg": "HS512", "typ": "JWT"},
        {"alg": "RS256", "typ": "JWT"},
        {"typ": "JWT"},
        {"alg": ["HS256"], "typ": "JWT"},
    ],
)
def test_only_hs256_is_accepted(header: dict[str, object]) -> None:
    with pytest.raises(AuthError, match="unsupported token algorithm"):
        verify_signed(forge(header, {"sub": "a", "ns": ["a"]}), SECRET, NOW)
    unsigned = forge(header, {"sub": "a", "ns": ["a"]}).rsplit(".", 1)[0] + "."
    with pytest.raises(AuthError, match="unsupported token algorithm"):
        verify_signed(unsigned, SECRET, NOW)


@pytest.mark.parametrize(
    "header", [{"alg": "HS256"}, {"alg": "HS256", "typ": "jwt"}, {**HS256, "crit": ["x"]}]
)
def test_the_header_must_be_exactly_hs256_jwt(header: dict[str, object]) -> None:
    with pytest.raises(AuthError, match="the header must be"):
        verify_signed(forge(header, {"sub": "a", "ns": ["a"]}), SECRET, NOW)


def test_expiry_and_not_before() -> None:
    claims = {"sub": "a", "ns": ["a"]}
    assert verify_signed(forge(HS256, {**claims, "exp": NOW + 1}), SECRET, NOW).name == "a"
    for exp in (NOW, NOW - 1):  # RFC 7519: expired "on or after" exp
        with pytest.raises(AuthError, match="token expired"):
            verify_signed(forge(HS256, {**claims, "exp": exp}), SECRET, NOW)
    assert verify_signed(forge(HS256, {**claims, "nbf": NOW}), SECRET, NOW).name == "a"
    with pytest.raises(AuthError, match="token not yet valid"):
        verify_signed(forge(HS256, {**claims, "nbf": NOW + 1}), SECRET, NOW)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"ns": ["a"]}, "sub: is required"),
        ({"sub": "", "ns": ["a"]}, "sub: must be a name of 1 to 253"),
        ({"sub": "a"}, "ns: is required"),
        ({"sub": "a", "ns": "a"}, "ns: must be a list of namespace names"),
        ({"sub": "a", "ns": ["a"], "queues": ["b/q"]}, r"queues\[0\]: namespace b"),
        ({"sub": "a", "ns": ["a"], "admin": 1}, "admin: must be true or false"),
        ({"sub": "a", "ns": ["a"], "exp": "tomorrow"}, "exp: must be a number"),
        ({"sub": "a", "ns": ["a"], "exp": 1e400}, "exp: must be finite"),
        ({"sub": "a", "ns": ["a"], "nbf": 10**400}, "nbf: must be a number"),
        ({"sub": "a", "ns": ["a"], "rate": 0}, "rate: must be a positive number"),
        ({"sub": "a", "ns": ["a"], "burst": -1}, "burst: must be at least 1"),
    ],
)
def test_invalid_claims_are_refused(claims: dict[str, object], message: str) -> None:
    body = json.dumps(claims).encode().replace(b"Infinity", b"1e400")
    with pytest.raises(AuthError, match=f"invalid token claims: {message}"):
        verify_signed(forge(HS256, body), SECRET, NOW)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("", "expected header.claims.signature"),
        ("abc", "expected header.claims.signature"),
        ("a.b", "expected header.claims.signature"),
        ("a.b.c.d", "expected header.claims.signature"),
        ("a+b.c.d", "not base64url"),
        ("eyJ=.e30.", "not base64url"),  # padding is not the compact form
        ("a.e30.", "not base64url"),  # a length no base64 has
        ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e31.", "not base64url"),  # non-canonical
        ("é.e30.", "not base64url"),
        (b64(b"not json") + ".e30.", "the header is not JSON"),
        (b64(b"[1]") + ".e30.", "the header is not a JSON object"),
        (b64(b'{"alg":"HS256","alg":"none"}') + ".e30.", "the header is not JSON"),
        (b64(b'{"alg":NaN}') + ".e30.", "the header is not JSON"),
        (b64(b"\xff\xfe\xfa") + ".e30.", "the header is not JSON"),
        (b64(b"[" * 5000) + ".e30.", "the header is not JSON"),
        ("x" * 9000, "token too long"),
    ],
)
def test_malformed_tokens_raise_auth_error_only(token: str, message: str) -> None:
    with pytest.raises(AuthError, match=message):
        verify_signed(token, SECRET, NOW)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        (b"not json", "the claims are not JSON"),
        (b'["sub"]', "the claims are not a JSON object"),
        (b'{"sub":"a","sub":"root","ns":["a"]}', "the claims are not JSON"),
        (b'{"sub":"a","ns":["a"],"exp":Infinity}', "the claims are not JSON"),
    ],
)
def test_malformed_signed_claims_raise_auth_error(claims: bytes, message: str) -> None:
    with pytest.raises(AuthError, match=message):
        verify_signed(forge(HS256, claims), SECRET, NOW)


@given(st.text(max_size=200))
def test_arbitrary_text_never_escapes_as_another_exception(token: str) -> None:
    with contextlib.suppress(AuthError):
        verify_signed(token, SECRET, NOW)
    with contextlib.suppress(AuthError):
        Authenticator(book_of(entry()), SECRET).authenticate(f"Bearer {token}", NOW)


def test_an_empty_secret_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="secret"):
        sign_token(b"", {"sub": "a"})
    with pytest.raises(ValueError, match="secret"):
        Authenticator(secret=b"")


# -- the authenticator ------------------------------------------------------------------


def test_disabled_auth_is_the_anonymous_admin() -> None:
    auth = Authenticator()
    assert not auth.enabled
    assert auth.authenticate(None, NOW) is ANONYMOUS_ADMIN
    assert auth.authenticate("Bearer whatever", NOW) is ANONYMOUS_ADMIN
    assert ANONYMOUS_ADMIN.admin and "*" in ANONYMOUS_ADMIN.namespaces


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Basic czNjcmV0LWE=", "s3cret-a", "Token s3cret-a"]
)
def test_a_bearer_token_is_required(header: str | None) -> None:
    with pytest.raises(AuthError, match="missing bearer token"):
        Authenticator(book_of(entry())).authenticate(header, NOW)


@pytest.mark.parametrize(
    "header", ["Bearer s3cret-a", "bearer s3cret-a", "BEARER   s3cret-a  ", "Bearer\ts3cret-a"]
)
def test_the_bearer_scheme_is_case_insensitive(header: str) -> None:
    assert bearer_token(header) == "s3cret-a"
    assert Authenticator(book_of(entry())).authenticate(header, NOW).name == "team-a"


def test_book_only() -> None:
    auth = Authenticator(book=book_of(entry()))
    assert auth.enabled
    with pytest.raises(AuthError, match="unknown token"):
        auth.authenticate("Bearer s3cret-b", NOW)
    # Without a secret a signed token is just an unknown static token.
    jwt = sign_token(SECRET, {"sub": "a", "ns": ["a"]})
    with pytest.raises(AuthError, match="unknown token"):
        auth.authenticate(f"Bearer {jwt}", NOW)


def test_secret_only() -> None:
    auth = Authenticator(secret=SECRET)
    assert auth.enabled
    jwt = sign_token(SECRET, {"sub": "ci-bot", "ns": ["team-a"], "exp": NOW + 60})
    assert auth.authenticate(f"Bearer {jwt}", NOW).name == "ci-bot"
    with pytest.raises(AuthError, match="token expired"):
        auth.authenticate(f"Bearer {jwt}", NOW + 60)
    with pytest.raises(AuthError, match="unknown token"):
        auth.authenticate("Bearer s3cret-a", NOW)
    with pytest.raises(AuthError, match="bad signature"):
        auth.authenticate(f"Bearer {sign_token(b'other', {'sub': 'a', 'ns': ['a']})}", NOW)


def test_book_and_secret_together() -> None:
    auth = Authenticator(book_of(entry(), entry(token="a.b.c", name="dotted")), SECRET)
    assert auth.authenticate("Bearer s3cret-a", NOW).name == "team-a"
    assert auth.authenticate("Bearer a.b.c", NOW).name == "dotted"
    jwt = sign_token(SECRET, {"sub": "ci-bot", "ns": ["team-a"]})
    assert auth.authenticate(f"Bearer {jwt}", NOW).name == "ci-bot"
    with pytest.raises(AuthError, match="unknown token"):
        auth.authenticate("Bearer a.b.c.d", NOW)
    with pytest.raises(AuthError, match="not base64url"):
        auth.authenticate("Bearer x.y.z", NOW)  # two dots: tried, and refused, as a JWT


# -- policy -----------------------------------------------------------------------------

TEAM_A = Principal("team-a", frozenset({"team-a", "team-a-dev"}))
PINNED = Principal("ci-bot", frozenset({"team-a"}), queues=frozenset({"team-a/ci"}))
EVERYWHERE = Principal("viewer", frozenset({"*"}))
ADMIN = Principal("ops", frozenset(), admin=True)


@pytest.mark.parametrize(
    ("p", "action", "namespace", "queue", "denial"),
    [
        # admin may do anything
        (ADMIN, Action.ADMIN, None, None, None),
        (ADMIN, Action.SUBMIT, "team-z", "q", None),
        (ADMIN, Action.CANCEL, None, None, None),
        # the admin scope
        (TEAM_A, Action.ADMIN, None, None, "tenant team-a needs the admin scope"),
        (EVERYWHERE, Action.ADMIN, "team-a", None, "tenant viewer needs the admin scope"),
        # cluster-scoped reads are for everyone; cluster-scoped writes for no tenant
        (TEAM_A, Action.READ, None, None, None),
        (TEAM_A, Action.SUBMIT, None, "q", "tenant team-a may not submit without naming"),
        (TEAM_A, Action.CANCEL, None, None, "tenant team-a may not cancel without naming"),
        # own namespaces
        (TEAM_A, Action.READ, "team-a", None, None),
        (TEAM_A, Action.SUBMIT, "team-a-dev", "any", None),
        (TEAM_A, Action.CANCEL, "team-a", None, None),
        (TEAM_A, Action.READ, "team-b", None, "tenant team-a may not read in namespace team-b"),
        (TEAM_A, Action.SUBMIT, "team-b", "q", "tenant team-a may not submit in namespace team-b"),
        (TEAM_A, Action.CANCEL, "team-b", None, "tenant team-a may not cancel in namespace team-b"),
        (TEAM_A, Action.READ, "*", None, "tenant team-a may not read in namespace \\*"),
        # "*" is every namespace
        (EVERYWHERE, Action.SUBMIT, "team-b", "q", None),
        (EVERYWHERE, Action.CANCEL, "team-z", None, None),
        # a queue restriction binds submissions only
        (PINNED, Action.SUBMIT, "team-a", "ci", None),
        (PINNED, Action.SUBMIT, "team-a", "training", "tenant ci-bot may not submit to queue"),
        (
            PINNED,
            Action.SUBMIT,
            "team-a",
            None,
            "tenant ci-bot may only submit to queues team-a/ci",
        ),
        (PINNED, Action.CANCEL, "team-a", None, None),
        (PINNED, Action.READ, "team-a", None, None),
        (PINNED, Action.SUBMIT, "team-b", "ci", "tenant ci-bot may not submit in namespace team-b"),
    ],
)
def test_authorize_matrix(
    p: Principal, action: Action, namespace: str | None, queue: str | None, denial: str | None
) -> None:
    result = authorize(p, action, namespace, queue)
    if denial is None:
        assert result is None
    else:
        assert isinstance(result, Denied)
        assert result.reason.startswith(denial.replace("\\", ""))


def test_visible_namespaces() -> None:
    assert visible_namespaces(TEAM_A) == frozenset({"team-a", "team-a-dev"})
    assert visible_namespaces(EVERYWHERE) is None
    assert visible_namespaces(ADMIN) is None
    assert visible_namespaces(ANONYMOUS_ADMIN) is None


# -- rate -------------------------------------------------------------------------------

LIMIT = Limit(rate=2.0, burst=3)


def test_a_new_bucket_starts_full_and_drains() -> None:
    bucket, wait = take(None, LIMIT, NOW)
    assert (bucket, wait) == (Bucket(2.0, NOW), None)
    bucket, wait = take(bucket, LIMIT, NOW, cost=2)
    assert (bucket, wait) == (Bucket(0.0, NOW), None)
    refused, wait = take(bucket, LIMIT, NOW)
    assert refused == bucket and wait == 0.5


def test_refill_is_capped_at_the_burst() -> None:
    empty = Bucket(0.0, 100.0)
    assert refill(empty, LIMIT, 100.25) == Bucket(0.5, 100.25)
    assert refill(empty, LIMIT, 1e6) == Bucket(3.0, 1e6)
    assert take(empty, LIMIT, 101.0, cost=2) == (Bucket(0.0, 101.0), None)


def test_a_refusal_returns_the_refilled_bucket_and_the_exact_wait() -> None:
    bucket = Bucket(0.5, 10.0)
    refused, wait = take(bucket, LIMIT, 10.25, cost=3)
    assert refused == Bucket(1.0, 10.25)
    assert wait == 1.0  # two more tokens at 2/s


@given(
    tokens=st.floats(0, 3),
    rate=st.floats(0.001, 1000),
    start=st.floats(0, 2e9),
    cost=st.integers(1, 3),
)
def test_waiting_the_retry_after_is_exactly_enough(
    tokens: float, rate: float, start: float, cost: int
) -> None:
    limit = Limit(rate, 3)
    bucket, wait = take(Bucket(tokens, start), limit, start, cost)
    if wait is None:
        return
    assert wait > 0
    assert take(bucket, limit, start + wait, cost)[1] is None
    sooner = start + wait * (1 - 1e-9)
    if sooner < start + wait:  # representable: a shorter wait is refused
        assert take(bucket, limit, sooner, cost)[1] is not None


@pytest.mark.parametrize(
    ("tokens", "at", "rate"),
    [
        (0.9999999, 0.0, 1000.0),  # a tiny wait next to an exact token count
        (1 - 2**-52, 0.0, 1e300),  # the wait underflows to zero in the closed form
        (0.0, 1e-300, 3.0),
        (0.3, NOW, 7.0),
        (0.0, -5e9, 1e-6),
    ],
)
def test_the_retry_after_is_exact_where_rounding_bites(
    tokens: float, at: float, rate: float
) -> None:
    limit = Limit(rate, 1)
    bucket, wait = take(Bucket(tokens, at), limit, at)
    assert wait is not None and wait > 0
    assert take(bucket, limit, at + wait)[1] is None
    assert take(bucket, limit, math.nextafter(at + wait, -math.inf))[1] is not None


def test_time_going_backwards_mints_no_tokens() -> None:
    drained, _ = take(Bucket(1.0, 100.0), LIMIT, 100.0)
    assert drained == Bucket(0.0, 100.0)
    earlier, wait = take(drained, LIMIT, 90.0)
    assert earlier == drained  # neither tokens nor a rewound clock
    assert wait == 10.5  # back to 100, then half a second for one token
    # Stepping back and forth again must not count 90..100 twice.
    assert take(earlier, LIMIT, 100.4)[1] is not None
    assert take(earlier, LIMIT, 100.5)[1] is None


def test_a_batch_larger_than_the_burst_can_never_pass() -> None:
    with pytest.raises(ValueError, match="a batch of 4 exceeds the burst of 3"):
        take(None, LIMIT, NOW, cost=4)
    assert take(None, LIMIT, NOW, cost=3)[1] is None
    assert take(Bucket(0.0, NOW), LIMIT, NOW, cost=0) == (Bucket(0.0, NOW), None)


@pytest.mark.parametrize(
    ("rate", "burst"), [(0.0, 1), (-1.0, 1), (math.inf, 1), (math.nan, 1), (1.0, 0), (1.0, True)]
)
def test_a_limit_must_be_positive(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        Limit(rate, burst)


@given(
    rate=st.floats(0.1, 100),
    burst=st.integers(1, 20),
    steps=st.lists(st.tuples(st.floats(0, 2), st.integers(1, 20)), max_size=60),
)
def test_admitted_work_never_exceeds_burst_plus_rate_times_window(
    rate: float, burst: int, steps: list[tuple[float, int]]
) -> None:
    limit = Limit(rate, burst)
    bucket: Bucket | None = None
    now = NOW
    admitted: list[tuple[float, int]] = []
    for dt, cost in steps:
        now += dt
        cost = min(cost, burst)
        bucket, wait = take(bucket, limit, now, cost)
        if wait is None:
            admitted.append((now, cost))
    for i, (start, _) in enumerate(admitted):
        for end, _ in admitted[i:]:
            in_window = sum(c for t, c in admitted if start <= t <= end)
            assert in_window <= burst + rate * (end - start) + 1e-6


def test_the_limiter_keeps_a_bucket_per_tenant() -> None:
    limiter = Limiter()
    assert limiter.check("team-a", LIMIT, NOW, cost=3) is None
    assert limiter.check("team-a", LIMIT, NOW) == 0.5
    assert limiter.check("team-b", LIMIT, NOW) is None
    assert limiter.check("team-a", LIMIT, NOW + 0.5) is None
    assert limiter.bucket("team-a") == Bucket(0.0, NOW + 0.5)
    with pytest.raises(ValueError, match="exceeds the burst"):
        limiter.check("team-c", LIMIT, NOW, cost=4)
    assert limiter.bucket("team-c") is None


def test_the_limiter_evicts_buckets_that_are_full_again() -> None:
    limiter = Limiter(sweep_every=4)
    for i in range(3):
        limiter.check(f"tenant-{i}", LIMIT, NOW)  # each one token short of full
    assert len(limiter) == 3
    slow = Limit(rate=0.001, burst=3)
    limiter.check("slow", slow, NOW)  # 4th call sweeps at NOW: nothing is full yet
    assert len(limiter) == 4
    for _ in range(4):
        limiter.check("busy", LIMIT, NOW + 1.0)  # sweeps at NOW + 1: the fast three are full
    assert len(limiter) == 2
    assert limiter.bucket("tenant-0") is None
    assert limiter.bucket("slow") is not None  # judged by its own, slower limit
    assert limiter.bucket("busy") is not None


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 1)), max_size=80))
def test_eviction_never_changes_a_decision(calls: list[tuple[str, float]]) -> None:
    sweeping, keeping = Limiter(sweep_every=1), Limiter(sweep_every=10**9)
    now = NOW
    for tenant, dt in calls:
        now += dt
        assert sweeping.check(tenant, LIMIT, now) == keeping.check(tenant, LIMIT, now)
    assert len(sweeping) <= len(keeping) <= 3


def test_the_limiter_refuses_a_bad_sweep_interval() -> None:
    with pytest.raises(ValueError, match="sweep_every"):
        Limiter(sweep_every=0)
