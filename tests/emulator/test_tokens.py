"""Service-account tokens on the emulator, over HTTP: the TokenRequest subresource
(serviceaccounts/NAME/token) issues a JWT bound to a pod whose payload has the real claims (aud, exp,
iat, nbf, iss, sub, jti, kubernetes.io), and TokenReview authenticates it as the pod's service account
(pod name and uid in `extra`); a token with another audience, an expired one (the emulator's token clock
moved past exp and the minute of leeway), a tampered one, or one whose pod was deleted or re-created
under the same name is refused with the real authenticator's words. TokenRequest's own refusals
(expirationSeconds under 10 minutes, a missing service account or pod, another pod uid), the kubelet's
3607 s extended to a year, the default ServiceAccount of every namespace, and discovery.

The signer itself (`TokenSigner`, no HTTP): ES256 tokens whose header names the key id, any claims round
trip and any other claims under the same signature are refused (hypothesis); a token without a kid is tried
against the key as jwt.go does; another algorithm, a DER signature and a token of another issuer or of no
JWT shape are refused as before; another key's kid finds no key. The published keys: test_openid_discovery."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client

from sim.emulator.server import ApiServerSettings
from sim.emulator.tokens import BAD_SIGNATURE, ISSUER, NO_KEYS, Refused, TokenSigner
from stagger.timestamps import format_rfc3339
from tests.emulator.conftest import Http, pod

NS = "default"
SA_PATH = f"/api/v1/namespaces/{NS}/serviceaccounts"
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


class Clock:
    """The emulator's token clock, which a test moves forward."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def settings(clock: Clock) -> ApiServerSettings:
    return ApiServerSettings(token_clock=clock)


def make_pod(http: Http, name: str, *, account: str = "default") -> dict[str, Any]:
    response = http.post(f"/api/v1/namespaces/{NS}/pods", pod(name, serviceAccountName=account))
    assert response.status_code == 201, response.text
    return dict(response.json())


def request_token(http: Http, *, account: str = "default", **spec: Any) -> Any:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return http.post(f"{SA_PATH}/{account}/token", body)


def bound_to(obj: dict[str, Any], **overrides: str) -> dict[str, str]:
    meta = obj["metadata"]
    return {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]} | overrides


def pod_token(http: Http, name: str = "app", **spec: Any) -> tuple[str, dict[str, Any]]:
    """A token bound to a new pod `name`, and the pod."""
    created = make_pod(http, name)
    response = request_token(http, boundObjectRef=bound_to(created), **spec)
    assert response.status_code == 201, response.text
    return str(response.json()["status"]["token"]), created


def review(http: Http, token: str, audiences: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"token": token} | ({"audiences": audiences} if audiences is not None else {})
    response = http.post(
        REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    )
    assert response.status_code == 201, response.text
    return dict(response.json()["status"])


def payload(token: str) -> dict[str, Any]:
    part = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))))


def test_a_pod_bound_token_reviews_as_the_pods_service_account(http: Http) -> None:
    token, created = pod_token(http)
    account = http.get(f"{SA_PATH}/default").json()
    status = review(http, token)
    assert status["authenticated"] is True
    assert status["audiences"] == [ISSUER]
    assert status["user"] == {
        "username": f"system:serviceaccount:{NS}:default",
        "uid": account["metadata"]["uid"],
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
        "extra": {
            "authentication.kubernetes.io/pod-name": ["app"],
            "authentication.kubernetes.io/pod-uid": [created["metadata"]["uid"]],
            "authentication.kubernetes.io/credential-id": [f"JTI={payload(token)['jti']}"],
        },
    }


def test_the_token_request_answer_and_the_tokens_claims(http: Http, clock: Clock) -> None:
    created = make_pod(http, "app")
    response = request_token(http, boundObjectRef=bound_to(created))
    assert response.status_code == 201
    answer = response.json()
    assert (answer["kind"], answer["apiVersion"]) == ("TokenRequest", "authentication.k8s.io/v1")
    assert answer["spec"]["audiences"] == [ISSUER] and answer["spec"]["expirationSeconds"] == 3600
    claims = payload(answer["status"]["token"])
    assert claims["iat"] == claims["nbf"] == int(clock.now)
    assert claims["exp"] - claims["iat"] == 3600
    assert answer["status"]["expirationTimestamp"] == format_rfc3339(claims["exp"], digits=0)
    assert claims["aud"] == [ISSUER] and claims["iss"] == ISSUER
    assert claims["sub"] == f"system:serviceaccount:{NS}:default"
    assert uuid.UUID(claims["jti"])
    account = http.get(f"{SA_PATH}/default").json()["metadata"]
    assert claims["kubernetes.io"] == {
        "namespace": NS,
        "serviceaccount": {"name": "default", "uid": account["uid"]},
        "pod": {"name": "app", "uid": created["metadata"]["uid"]},
    }


def test_the_kubelets_expiration_is_extended_to_a_year(http: Http) -> None:
    """A pod-bound token for the API server asked for 3607 s (the projected kube-api-access volume)
    lives a year (--service-account-extend-token-expiration); the status still says 3607 s."""
    token, _ = pod_token(http, expirationSeconds=3607)
    claims = payload(token)
    assert claims["exp"] - claims["iat"] == 365 * 24 * 3600
    assert claims["kubernetes.io"]["warnafter"] == claims["iat"] + 3607


def test_a_token_for_another_audience_reviews_for_that_audience(http: Http) -> None:
    token, _ = pod_token(http, audiences=["vault", "other"])
    assert payload(token)["aud"] == ["vault", "other"]
    assert review(http, token, ["vault"])["audiences"] == ["vault"]


def _expire(http: Http, clock: Clock, token: str) -> None:
    clock.now = payload(token)["exp"] + 61  # past the minute of leeway


def _delete_pod(http: Http, clock: Clock, token: str) -> None:
    assert http.delete(f"/api/v1/namespaces/{NS}/pods/app").status_code == 200


def _recreate_pod(http: Http, clock: Clock, token: str) -> None:
    _delete_pod(http, clock, token)
    make_pod(http, "app")


def _nothing(http: Http, clock: Clock, token: str) -> None:
    pass


def _tamper_signature(token: str) -> str:
    head, body, signature = token.split(".")
    return f"{head}.{body}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}"


def _tamper_claims(token: str) -> str:
    head, _, signature = token.split(".")
    claims = payload(token) | {"sub": "system:serviceaccount:kube-system:admin"}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{body}.{signature}"


def _within_leeway(http: Http, clock: Clock, token: str) -> None:
    clock.now = payload(token)["exp"] + 30


@pytest.mark.parametrize(
    ("change", "tamper", "audiences", "error"),
    [
        pytest.param(
            _nothing,
            None,
            ["vault"],
            f'[invalid bearer token, token audiences ["{ISSUER}"] is invalid for the target audiences ["vault"]]',
            id="wrong-audience",
        ),
        pytest.param(
            _expire, None, None, "[invalid bearer token, service account token has expired]", id="expired"
        ),
        pytest.param(
            _nothing,
            _tamper_signature,
            None,
            "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]",
            id="tampered-signature",
        ),
        pytest.param(
            _nothing,
            _tamper_claims,
            None,
            "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]",
            id="tampered-claims",
        ),
        pytest.param(
            _delete_pod,
            None,
            None,
            "[invalid bearer token, service account token has been invalidated]",
            id="pod-deleted",
        ),
        pytest.param(
            _recreate_pod, None, None, "[invalid bearer token, pod UID (", id="pod-recreated-with-another-uid"
        ),
        pytest.param(_nothing, lambda _: "not-a-jwt", None, "invalid bearer token", id="not-a-jwt"),
    ],
)
def test_refused_tokens(
    http: Http,
    clock: Clock,
    change: Callable[[Http, Clock, str], None],
    tamper: Callable[[str], str] | None,
    audiences: list[str] | None,
    error: str,
) -> None:
    """A refusal is still a 201: no `authenticated` (false is omitted, as the Go field is omitempty), an
    empty user, and the authenticator's reason."""
    token, _ = pod_token(http)
    change(http, clock, token)
    status = review(http, tamper(token) if tamper else token, audiences)
    assert "authenticated" not in status and status["user"] == {}
    assert status["error"].startswith(error), status["error"]


def test_a_recreated_pod_names_both_uids(http: Http) -> None:
    token, old = pod_token(http)
    _recreate_pod(http, Clock(), token)
    new = http.get(f"/api/v1/namespaces/{NS}/pods/app").json()
    assert review(http, token)["error"] == (
        f"[invalid bearer token, pod UID ({new['metadata']['uid']}) does not match service account pod ref "
        f"claim ({old['metadata']['uid']})]"
    )


def test_a_token_is_good_within_the_leeway_after_exp(http: Http, clock: Clock) -> None:
    token, _ = pod_token(http)
    _within_leeway(http, clock, token)
    assert review(http, token)["authenticated"] is True


def test_a_deleted_service_account_invalidates_its_tokens(http: Http) -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}
    assert http.post(SA_PATH, account).status_code == 201
    token = request_token(http, account="robot").json()["status"]["token"]
    assert review(http, token)["authenticated"] is True
    assert http.delete(f"{SA_PATH}/robot").status_code == 200
    assert review(http, token)["error"] == '[invalid bearer token, serviceaccounts "robot" not found]'
    assert http.post(SA_PATH, account).status_code == 201  # the same name, another uid
    assert review(http, token)["error"].startswith("[invalid bearer token, service account UID (")


@pytest.mark.parametrize(
    ("account", "spec", "code", "reason", "message"),
    [
        pytest.param(
            "default",
            {"expirationSeconds": 599},
            422,
            "Invalid",
            'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: '
            "may not specify a duration less than 10 minutes",
            id="under-ten-minutes",
        ),
        pytest.param(
            "nobody", {}, 404, "NotFound", 'serviceaccounts "nobody" not found', id="missing-service-account"
        ),
        pytest.param(
            "default",
            {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "ghost"}},
            404,
            "NotFound",
            'pods "ghost" not found',
            id="missing-pod",
        ),
        pytest.param(
            "default",
            {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "app", "uid": "0000"}},
            409,
            "Conflict",
            'Operation cannot be fulfilled on Pod "app": the UID in the bound object reference (0000) does '
            "not match the UID in record. The object might have been deleted and then recreated",
            id="other-pod-uid",
        ),
        pytest.param(
            "default",
            {"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "app"}},
            400,
            "BadRequest",
            "cannot bind token to object of type /v1, Kind=ConfigMap",
            id="unbindable-kind",
        ),
    ],
)
def test_token_request_refusals(
    http: Http, account: str, spec: dict[str, Any], code: int, reason: str, message: str
) -> None:
    make_pod(http, "app")
    response = request_token(http, account=account, **spec)
    assert response.status_code == code, response.text
    assert (response.json()["reason"], response.json()["message"]) == (reason, message)


def test_a_pod_of_another_service_account_is_refused(http: Http) -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}
    assert http.post(SA_PATH, account).status_code == 201
    created = make_pod(http, "app")
    response = request_token(http, account="robot", boundObjectRef=bound_to(created))
    assert response.status_code == 400
    assert response.json()["message"] == (
        'cannot bind token for serviceaccount "robot" to pod running with different serviceaccount name.'
    )


def test_an_empty_token_review_is_a_bad_request(http: Http) -> None:
    response = http.post(
        REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}}
    )
    assert response.status_code == 400
    assert response.json()["message"] == "token is required for TokenReview in authentication"


def test_token_reviews_are_create_only(http: Http) -> None:
    assert http.get(REVIEWS).status_code == 405


def test_every_namespace_has_a_default_service_account(http: Http) -> None:
    for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
        assert http.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default").status_code == 200
    assert http.post("/api/v1/namespaces", {"metadata": {"name": "fresh"}}).status_code == 201
    listed = http.get("/api/v1/namespaces/fresh/serviceaccounts").json()["items"]
    assert [a["metadata"]["name"] for a in listed] == ["default"]


def test_discovery_lists_token_reviews_and_the_token_subresource(http: Http) -> None:
    groups = {g["name"] for g in http.get("/apis").json()["groups"]}
    assert "authentication.k8s.io" in groups
    resources = http.get("/apis/authentication.k8s.io/v1").json()["resources"]
    assert resources == [
        {
            "name": "tokenreviews",
            "singularName": "tokenreview",
            "namespaced": False,
            "kind": "TokenReview",
            "verbs": ["create"],
        }
    ]
    core = {r["name"]: r for r in http.get("/api/v1").json()["resources"]}
    assert core["serviceaccounts/token"] == {
        "name": "serviceaccounts/token",
        "singularName": "",
        "namespaced": True,
        "group": "authentication.k8s.io",
        "version": "v1",
        "kind": "TokenRequest",
        "verbs": ["create"],
    }


def test_the_official_client_requests_and_reviews_a_token(api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    created = core.create_namespaced_pod(NS, pod("app"))
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "app", "uid": created.metadata.uid}
    issued = core.create_namespaced_service_account_token(
        "default", NS, {"spec": {"audiences": [], "boundObjectRef": ref}}
    )
    authn: Any = client.AuthenticationV1Api(api)
    reviewed = authn.create_token_review({"spec": {"token": issued.status.token}})
    assert reviewed.status.authenticated is True
    assert reviewed.status.user.extra["authentication.kubernetes.io/pod-name"] == ["app"]


# ------------------------------------------------------------------------------------------------ the signer

SIGNER = TokenSigner()  # one key for the signer tests: key generation is not what they are about
CLAIMS = {"iss": ISSUER, "sub": "system:serviceaccount:default:default"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
claim_sets = st.dictionaries(st.text(max_size=8).filter(lambda k: k != "iss"), json_values, max_size=5).map(
    lambda claims: claims | {"iss": ISSUER}
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signed(header: dict[str, Any], claims: dict[str, Any], *, der: bool = False) -> str:
    """A token signed with SIGNER's own key under any header; the signature as JWS wants it (r||s) or,
    with `der`, left in the DER form `cryptography` gives."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = SIGNER.private_key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    if not der:
        r, s = decode_dss_signature(signature)
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{signing_input}.{_b64(signature)}"


@given(claims=claim_sets)
def test_any_claims_round_trip_under_an_es256_signature(claims: dict[str, Any]) -> None:
    token = SIGNER.sign(claims)
    head, _, signature = token.split(".")
    assert json.loads(_unb64(head)) == {"alg": "ES256", "kid": SIGNER.key_id}
    assert len(_unb64(signature)) == 64  # r||s, not DER
    assert SIGNER.verify(token) == claims


@given(claims=claim_sets, other=claim_sets)
def test_other_claims_under_a_tokens_signature_are_refused(
    claims: dict[str, Any], other: dict[str, Any]
) -> None:
    head, payload, signature = SIGNER.sign(claims).split(".")
    forged_payload = _b64(json.dumps(other).encode())
    if forged_payload == payload:
        return  # the very same bytes: nothing was forged
    with pytest.raises(Refused) as refused:
        SIGNER.verify(f"{head}.{forged_payload}.{signature}")
    assert refused.value.reason == BAD_SIGNATURE


def test_a_token_without_a_kid_is_tried_against_the_key() -> None:
    assert SIGNER.verify(_signed({"alg": "ES256"}, CLAIMS)) == CLAIMS


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        pytest.param(
            lambda: _signed({"alg": "HS256", "kid": SIGNER.key_id}, CLAIMS), BAD_SIGNATURE, id="other-alg"
        ),
        pytest.param(
            lambda: _signed({"alg": "ES256", "kid": SIGNER.key_id}, CLAIMS, der=True),
            BAD_SIGNATURE,
            id="der-signature",
        ),
        pytest.param(lambda: TokenSigner().sign(CLAIMS), NO_KEYS, id="another-keys-kid"),
        pytest.param(
            lambda: _signed({"alg": "ES256"}, CLAIMS | {"iss": "https://elsewhere"}), None, id="other-issuer"
        ),
        pytest.param(lambda: "a.b", None, id="two-parts"),
        pytest.param(lambda: "!.!.!", None, id="not-base64-json"),
    ],
)
def test_the_signer_refuses(token: Callable[[], str], reason: str | None) -> None:
    with pytest.raises(Refused) as refused:
        SIGNER.verify(token())
    assert refused.value.reason == reason
