"""The emulator's service-account issuer discovery, over HTTP, as kube-apiserver serves it
(pkg/serviceaccount/openidmetadata.go, routes/openidmetadata.go): /.well-known/openid-configuration names
the issuer, the keyset's URI and ES256; /openid/v1/jwks lists one P-256 signing key whose kid is
kube-apiserver's (base64url SHA-256 of the key's DER SubjectPublicKeyInfo), each with its media type and an
hour's Cache-Control. A token from TokenRequest verifies with `cryptography` against the published key
alone (its header naming that kid and ES256, the signature r||s); a tampered payload does not, and
TokenReview still refuses it. Another emulator instance publishes another key, and its tokens find no key
here. Other methods are 405, an Accept header that does not allow the type 406 (as go-restful answers), and
both paths are counted as discovery."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
import requests
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from sim.emulator.server import ApiServerSettings, ApiServerThread
from sim.emulator.tokens import ISSUER
from tests.emulator.conftest import Http, failure, pod

CONFIGURATION = "/.well-known/openid-configuration"
JWKS = "/openid/v1/jwks"
NS = "default"


def _unb64(text: str) -> bytes:
    assert "=" not in text  # JWS and JWK use base64url without padding
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def published_key(http: Http) -> tuple[str, ec.EllipticCurvePublicKey]:
    """The one key of the emulator's JWKS: its kid and the public key built from x and y alone."""
    (jwk,) = http.get(JWKS).json()["keys"]
    x, y = _unb64(jwk["x"]), _unb64(jwk["y"])
    numbers = ec.EllipticCurvePublicNumbers(
        int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
    )
    return str(jwk["kid"]), numbers.public_key()


def issue_token(http: Http) -> str:
    created = http.post(f"/api/v1/namespaces/{NS}/pods", pod("app"))
    assert created.status_code == 201, created.text
    meta = created.json()["metadata"]
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "app", "uid": meta["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"boundObjectRef": ref}}
    response = http.post(f"/api/v1/namespaces/{NS}/serviceaccounts/default/token", body)
    assert response.status_code == 201, response.text
    return str(response.json()["status"]["token"])


def holds(key: ec.EllipticCurvePublicKey, token: str) -> bool:
    """A JWS ES256 signature checked by `cryptography`: r||s, 32 bytes each, turned into DER."""
    head, payload, signature = token.split(".")
    raw = _unb64(signature)
    assert len(raw) == 64
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        key.verify(der, f"{head}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def header(token: str) -> dict[str, Any]:
    return dict(json.loads(_unb64(token.split(".")[0])))


def review(http: Http, token: str) -> dict[str, Any]:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    response = http.post("/apis/authentication.k8s.io/v1/tokenreviews", body)
    assert response.status_code == 201, response.text
    return dict(response.json()["status"])


def test_the_openid_configuration(http: Http) -> None:
    response = http.get(CONFIGURATION)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "public, max-age=3600"
    assert response.json() == {
        "issuer": ISSUER,
        "jwks_uri": ISSUER + "/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    }


def test_the_jwks_lists_one_p256_signing_key(http: Http) -> None:
    response = http.get(JWKS)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/jwk-set+json"
    assert response.headers["Cache-Control"] == "public, max-age=3600"
    (jwk,) = response.json()["keys"]
    assert list(jwk) == ["use", "kty", "kid", "crv", "alg", "x", "y"]  # go-jose's JSONWebKey order
    assert {k: jwk[k] for k in ("use", "kty", "crv", "alg")} == {
        "use": "sig",
        "kty": "EC",
        "crv": "P-256",
        "alg": "ES256",
    }
    assert len(_unb64(jwk["x"])) == len(_unb64(jwk["y"])) == 32


def test_the_kid_is_kube_apiservers_key_id(http: Http) -> None:
    """jwt.go keyIDFromPublicKey: base64url (no padding) of the SHA-256 of the DER SubjectPublicKeyInfo."""
    kid, key = published_key(http)
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert kid == _b64(hashlib.sha256(der).digest())


def test_a_token_verifies_against_the_published_key(http: Http) -> None:
    kid, key = published_key(http)
    token = issue_token(http)
    assert header(token) == {"alg": "ES256", "kid": kid}
    assert holds(key, token)
    assert review(http, token)["authenticated"] is True


def test_a_tampered_payload_does_not_verify(http: Http) -> None:
    _, key = published_key(http)
    head, payload, signature = issue_token(http).split(".")
    claims = json.loads(_unb64(payload)) | {"sub": "system:serviceaccount:kube-system:admin"}
    forged = f"{head}.{_b64(json.dumps(claims).encode())}.{signature}"
    assert not holds(key, forged)
    assert review(http, forged)["error"] == (
        "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]"
    )


def test_another_emulator_publishes_another_key_and_its_tokens_find_no_key_here(http: Http) -> None:
    kid, key = published_key(http)
    with ApiServerThread(ApiServerSettings()) as other, requests.Session() as session:
        other_http = Http(other.url, session)
        other_kid, _ = published_key(other_http)
        foreign = issue_token(other_http)
    assert other_kid != kid
    assert not holds(key, foreign)
    assert review(http, foreign)["error"] == "[invalid bearer token, invalid signature, no keys found]"


@pytest.mark.parametrize(
    "path", [pytest.param(CONFIGURATION, id="configuration"), pytest.param(JWKS, id="jwks")]
)
@pytest.mark.parametrize(
    "method", [pytest.param(m, id=m.lower()) for m in ("POST", "PUT", "PATCH", "DELETE")]
)
def test_other_methods_are_not_allowed(http: Http, path: str, method: str) -> None:
    response = http.request(method, path, {})
    assert response.status_code == 405
    assert response.json() == failure(
        code=405,
        reason="MethodNotAllowed",
        message="the server does not allow this method on the requested resource",
        details={},
    )


def test_both_are_counted_as_discovery(server: ApiServerThread, http: Http) -> None:
    before = server.call(lambda: server.server.request_counts).get(("get", "discovery"), 0)
    assert http.get(CONFIGURATION).status_code == 200
    assert http.get(JWKS).status_code == 200
    after = server.call(lambda: server.server.request_counts)
    assert after[("get", "discovery")] == before + 2


@pytest.mark.parametrize(
    ("path", "accept", "status"),
    [
        pytest.param(JWKS, "application/json", 406, id="keys-as-json"),
        pytest.param(JWKS, "application/jwk-set+json", 200, id="keys-as-their-type"),
        pytest.param(JWKS, "*/*", 200, id="keys-as-anything"),
        pytest.param(JWKS, "application/*;q=0.9", 200, id="keys-as-any-application-type"),
        pytest.param(CONFIGURATION, "application/json", 200, id="configuration-as-json"),
        pytest.param(CONFIGURATION, "text/plain", 406, id="configuration-as-text"),
    ],
)
def test_an_accept_header_not_allowing_the_type_is_406(
    http: Http, path: str, accept: str, status: int
) -> None:
    # A real kube-apiserver (go-restful) answers `Accept: application/json` for the keys with 406.
    response = http.get(path, headers={"Accept": accept})
    assert response.status_code == status
    if status == 406:
        assert "Available representations" in response.text
