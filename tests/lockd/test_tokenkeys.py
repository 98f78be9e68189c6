"""lockd/tokenkeys.py, pure: a service-account token judged against the API server's published keys as the
authenticator judges it (pkg/serviceaccount/jwt.go, claims.go), with keys and tokens made here by
`cryptography` the way kube-apiserver makes them (ES256 from a P-256 key, RS256 from an RSA key):
a pod's good token names its pod; a tampered, expired, not-yet-valid, other-audience or not-a-pod's
token is refused; a token of another issuer, an unknown key id or algorithm, or no JWT at all is left to
a TokenReview (None); a JWKS reads into its keys, skipping keys of other kinds and uses; without the `cryptography` library lockd
still runs and sends every token to a TokenReview."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import given, settings
from hypothesis import strategies as st

from lockd.tokenkeys import LEEWAY, Judged, KeySet, Refused, judge, read_keys

ISSUER = "https://kubernetes.default.svc.cluster.local"
NOW = 1_800_000_000.0
EC_KEY = ec.generate_private_key(ec.SECP256R1())
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _n(value: int, size: int) -> str:
    return _b64(value.to_bytes(size, "big"))


def jwks() -> dict[str, Any]:
    ec_numbers = EC_KEY.public_key().public_numbers()
    rsa_numbers = RSA_KEY.public_key().public_numbers()
    return {
        "keys": [
            {"use": "sig", "kty": "EC", "kid": "ec", "crv": "P-256", "alg": "ES256",
             "x": _n(ec_numbers.x, 32), "y": _n(ec_numbers.y, 32)},
            {"use": "sig", "kty": "RSA", "kid": "rsa", "alg": "RS256",
             "n": _n(rsa_numbers.n, 256), "e": _n(rsa_numbers.e, 3)},
            {"use": "enc", "kty": "RSA", "kid": "enc", "n": _n(rsa_numbers.n, 256), "e": "AQAB"},
            {"use": "sig", "kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        ]
    }  # fmt: skip


KEYS = read_keys({"issuer": ISSUER}, jwks())


def claims(**changes: Any) -> dict[str, Any]:
    """A projected token's claims as kube-apiserver writes them for pod default/web-0."""
    found: dict[str, Any] = {
        "aud": ["stagger"],
        "exp": NOW + 600,
        "iat": NOW - 10,
        "nbf": NOW - 10,
        "iss": ISSUER,
        "sub": "system:serviceaccount:default:app",
        "kubernetes.io": {
            "namespace": "default",
            "node": {"name": "node-1", "uid": "n-1"},
            "pod": {"name": "web-0", "uid": "p-1"},
            "serviceaccount": {"name": "app", "uid": "sa-1"},
        },
    }
    found.update(changes)
    return {key: value for key, value in found.items() if value is not None}


def sign(payload: dict[str, Any], *, kid: str = "ec", alg: str = "ES256") -> str:
    head = _b64(json.dumps({"alg": alg, "kid": kid}).encode())
    body = _b64(json.dumps(payload).encode())
    signed = f"{head}.{body}".encode()
    if alg == "RS256":
        signature = RSA_KEY.sign(signed, padding.PKCS1v15(), hashes.SHA256())
    else:
        r, s = decode_dss_signature(EC_KEY.sign(signed, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{head}.{body}.{_b64(signature)}"


POD = Judged(namespace="default", name="web-0", uid="p-1", service_account="app")


def test_a_jwks_reads_into_its_signing_keys() -> None:
    assert set(KEYS.keys) == {"ec", "rsa"}
    assert KEYS.issuer == ISSUER


@pytest.mark.parametrize(
    ("configuration", "keys"),
    [
        pytest.param({}, {"keys": []}, id="no-issuer"),
        pytest.param({"issuer": ISSUER}, {}, id="no-keys"),
        pytest.param({"issuer": ""}, {"keys": []}, id="empty-issuer"),
    ],
)
def test_a_jwks_of_another_shape_is_an_error(configuration: dict[str, Any], keys: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="issuer"):
        read_keys(configuration, keys)


@pytest.mark.parametrize(
    ("kid", "alg"), [pytest.param("ec", "ES256", id="es256"), pytest.param("rsa", "RS256", id="rs256")]
)
def test_a_pods_own_token_names_its_pod(kid: str, alg: str) -> None:
    assert judge(sign(claims(), kid=kid, alg=alg), keys=KEYS, audience="stagger", now=NOW) == POD


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        pytest.param(sign(claims(exp=NOW - LEEWAY - 1)), "expired", id="expired"),
        pytest.param(sign(claims(nbf=NOW + LEEWAY + 1)), "not valid yet", id="not-yet-valid"),
        pytest.param(sign(claims(exp=None)), "no expiry", id="no-expiry"),
        pytest.param(sign(claims(aud=["https://kubernetes.default.svc"])), "audience", id="other-audience"),
        pytest.param(sign(claims(**{"kubernetes.io": {"namespace": "default"}})), "not a pod's", id="no-pod"),
        pytest.param(
            sign(claims(sub="system:serviceaccount:other:app")), "not a pod's", id="subject-mismatch"
        ),
        pytest.param(sign(claims(), kid="rsa", alg="ES256"), "signature", id="ec-alg-on-an-rsa-key"),
        pytest.param(sign(claims(), kid="ec", alg="RS256"), "signature", id="rsa-alg-on-an-ec-key"),
    ],
)
def test_a_token_that_does_not_hold_is_refused(token: str, reason: str) -> None:
    found = judge(token, keys=KEYS, audience="stagger", now=NOW)
    assert isinstance(found, Refused)
    assert reason in found.reason


def test_within_the_leeway_a_token_still_holds() -> None:
    token = sign(claims(exp=NOW - LEEWAY + 1, nbf=NOW + LEEWAY - 1))
    assert judge(token, keys=KEYS, audience="stagger", now=NOW) == POD


def test_a_plain_string_audience_counts() -> None:
    assert judge(sign(claims(aud="stagger")), keys=KEYS, audience="stagger", now=NOW) == POD


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("not-a-jwt", id="not-a-jwt"),
        pytest.param("a.b.c", id="not-base64-json"),
        pytest.param(sign(claims(iss="https://elsewhere")), id="another-issuer"),
        pytest.param(sign(claims(), kid="unknown"), id="unknown-key-id"),
        pytest.param(sign(claims(), kid="hmac", alg="HS256"), id="an-algorithm-not-used"),
    ],
)
def test_what_the_keys_cannot_judge_is_left_to_a_review(token: str) -> None:
    assert judge(token, keys=KEYS, audience="stagger", now=NOW) is None


def test_with_no_keys_every_token_is_left_to_a_review() -> None:
    assert judge(sign(claims()), keys=KeySet(issuer=ISSUER), audience="stagger", now=NOW) is None


@settings(max_examples=60, deadline=None)
@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_any_changed_byte_of_the_signed_part_is_refused(position: int, flip: int) -> None:
    token = sign(claims())
    head, body, signature = token.split(".")
    raw = bytearray(json.dumps(json.loads(base64.urlsafe_b64decode(body + "==")), sort_keys=True).encode())
    # Change one byte of the claims and keep the JSON readable, so that only the signature can tell.
    index = position % len(raw)
    raw[index] = (raw[index] ^ flip) & 0x7F or 0x20
    try:
        changed = json.loads(raw)
    except ValueError:
        return  # no longer JSON: not a token this test is about
    if not isinstance(changed, dict) or changed == json.loads(base64.urlsafe_b64decode(body + "==")):
        return
    tampered = f"{head}.{_b64(json.dumps(changed).encode())}.{signature}"
    found = judge(tampered, keys=KEYS, audience="stagger", now=NOW)
    # Another issuer is left to a review, which refuses it; everything else is refused here.
    assert found is None or isinstance(found, Refused)


def test_without_the_cryptography_library_every_token_goes_to_a_review() -> None:
    """`pip install stagger` without the `lockd` extra: lockd still runs, with TokenReviews, and says why."""
    script = (
        "import logging, sys, time; sys.modules['cryptography'] = None; logging.basicConfig(level=logging.WARNING)\n"
        "from lockd.settings import TokenSettings\n"
        "from lockd.tokenreview import _issuer_keys\n"
        "print(_issuer_keys(client=None, settings=TokenSettings(), clock=time.monotonic))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "None"
    assert "needs the cryptography library" in done.stderr and "stagger[lockd]" in done.stderr
