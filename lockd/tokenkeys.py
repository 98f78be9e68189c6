"""A pod's token checked against the API server's published keys, with no TokenReview.

Kubernetes publishes the keys that verify its service-account tokens (OIDC discovery:
`GET /.well-known/openid-configuration` names the issuer, `GET /openid/v1/jwks` lists the keys; readable by
every service account through the default ClusterRoleBinding `system:service-account-issuer-discovery`,
https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/). lockd reads them at start
and checks a pod's token as the API server's authenticator does (pkg/serviceaccount/jwt.go and claims.go):
the signature (RS256, ES256, ES384 or ES512, the algorithms kube-apiserver signs with), the issuer, the
audience, `exp` and `nbf` within the authenticator's minute of leeway, and the pod the token is bound to.
What the authenticator also checks, that the bound pod still exists with that uid, lockd checks against its
own pod watch (`TokenPod.live` is False here: `lockd.asking.check_token` compares the uid). What lockd does
not check: that the token's service account still exists (a pod keeps running when its account is deleted;
the token lives at most its `expirationSeconds`).

So a pod's ask costs the API server nothing. A token lockd cannot judge here (another issuer, a key it has
not read, another algorithm, or no keys read at all) goes to a TokenReview as before: `judge` answers None.

`judge` and `read_keys` are pure; `IssuerKeys` reads the keys (again on an unknown key id, at most every
`refresh_after_unknown`, and every `refresh`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from stagger.kube import ApiError, RestClient

__all__ = ["LEEWAY", "IssuerKeys", "KeySet", "judge", "read_keys"]

logger = logging.getLogger(__name__)

# go-jose's jwt.DefaultLeeway, which the authenticator uses for exp and nbf.
LEEWAY = 60.0
OPENID_CONFIGURATION = "/.well-known/openid-configuration"
JWKS = "/openid/v1/jwks"
JWKS_MEDIA_TYPE = "application/jwk-set+json"  # the only one kube-apiserver serves the keys as (else 406)
_SERVICE_ACCOUNT = "system:serviceaccount:"
# JWS algorithm -> (hash, EC curve's name or None for RSA PKCS#1 v1.5, bytes of r and of s).
_ALGORITHMS: dict[str, tuple[type[hashes.HashAlgorithm], str | None, int]] = {
    "RS256": (hashes.SHA256, None, 0),
    "ES256": (hashes.SHA256, "secp256r1", 32),
    "ES384": (hashes.SHA384, "secp384r1", 48),
    "ES512": (hashes.SHA512, "secp521r1", 66),
}
_CURVES: dict[str, ec.EllipticCurve] = {
    "P-256": ec.SECP256R1(),
    "P-384": ec.SECP384R1(),
    "P-521": ec.SECP521R1(),
}

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


@dataclass(frozen=True)
class KeySet:
    """The issuer and its keys by key id, as the API server publishes them."""

    issuer: str
    keys: Mapping[str, PublicKey] = field(default_factory=dict)


@dataclass(frozen=True)
class Judged:
    """What the token says, once its signature and claims hold: the pod it is bound to."""

    namespace: str
    name: str
    uid: str
    service_account: str


@dataclass(frozen=True)
class Refused:
    reason: str


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _int(text: Any) -> int:
    if not isinstance(text, str):
        raise ValueError("not a base64url string")
    return int.from_bytes(_unb64(text), "big")


def _public_key(jwk: Mapping[str, Any]) -> PublicKey | None:
    """A JWK's public key; None for a key not for signatures or of a kind the API server does not use."""
    if jwk.get("use", "sig") != "sig":
        return None
    try:
        if jwk.get("kty") == "RSA":
            return rsa.RSAPublicNumbers(_int(jwk.get("e")), _int(jwk.get("n"))).public_key()
        curve = _CURVES.get(str(jwk.get("crv")))
        if jwk.get("kty") == "EC" and curve is not None:
            return ec.EllipticCurvePublicNumbers(_int(jwk.get("x")), _int(jwk.get("y")), curve).public_key()
    except (ValueError, binascii.Error):
        return None
    return None


def read_keys(configuration: Mapping[str, Any], jwks: Mapping[str, Any]) -> KeySet:
    """The key set of an OpenID configuration and its JWKS; ValueError when they are not of that shape."""
    issuer = configuration.get("issuer")
    keys = jwks.get("keys")
    if not isinstance(issuer, str) or not issuer or not isinstance(keys, list):
        raise ValueError("expected an OpenID configuration with an issuer and a JWKS with keys")
    found: dict[str, PublicKey] = {}
    for jwk in keys:
        key = _public_key(jwk) if isinstance(jwk, dict) else None
        if key is not None and isinstance(jwk.get("kid"), str):
            found[jwk["kid"]] = key
    return KeySet(issuer=issuer, keys=found)


def _signature_holds(key: PublicKey, alg: str, signed: bytes, signature: bytes) -> bool:
    digest, curve, size = _ALGORITHMS[alg]
    try:
        if curve is None:
            if not isinstance(key, rsa.RSAPublicKey):
                return False
            key.verify(signature, signed, padding.PKCS1v15(), digest())
            return True
        if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != curve:
            return False
        if len(signature) != 2 * size:  # JWS: r and s side by side (RFC 7518 3.4), not DER
            return False
        r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
        key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(digest()))
        return True
    except InvalidSignature:
        return False


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _claims_refusal(claims: Mapping[str, Any], *, audience: str, now: float) -> str | None:
    """Why the claims do not hold at `now` (wall seconds), as claims.go and go-jose judge them."""
    exp, nbf = _number(claims, "exp"), _number(claims, "nbf")
    if exp is None:
        return "the token has no expiry"
    if now > exp + LEEWAY:
        return "the token has expired"
    if nbf is not None and now < nbf - LEEWAY:
        return "the token is not valid yet"
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if audience not in audiences:
        return f"the token is not for audience {audience!r}"
    return None


def _bound_pod(claims: Mapping[str, Any]) -> Judged | Refused:
    private = claims.get("kubernetes.io")
    private = private if isinstance(private, dict) else {}
    account, pod = private.get("serviceaccount"), private.get("pod")
    namespace, subject = private.get("namespace"), claims.get("sub")
    if (
        not isinstance(namespace, str)
        or not isinstance(account, dict)
        or not isinstance(pod, dict)
        or not all(isinstance(pod.get(k), str) and pod.get(k) for k in ("name", "uid"))
        or subject != f"{_SERVICE_ACCOUNT}{namespace}:{account.get('name')}"
    ):
        return Refused(
            f"the token of {subject or 'nobody'} is not a pod's (a projected service-account token is needed)"
        )
    return Judged(namespace=namespace, name=pod["name"], uid=pod["uid"], service_account=str(account["name"]))


def judge(token: str, *, keys: KeySet, audience: str, now: float) -> Judged | Refused | None:
    """The pod `token` is bound to, why it is refused, or None when it cannot be judged with these keys
    (not a JWT of this issuer, a key id or algorithm not known here): then a TokenReview decides. Pure."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header, claims = json.loads(_unb64(parts[0])), json.loads(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict) or claims.get("iss") != keys.issuer:
        return None
    alg, key = header.get("alg"), keys.keys.get(str(header.get("kid")))
    if key is None or alg not in _ALGORITHMS:
        return None
    if not _signature_holds(key, str(alg), f"{parts[0]}.{parts[1]}".encode(), signature):
        # Of our issuer and key, but not signed by it: no API server would accept it either.
        return Refused("its signature does not verify")
    problem = _claims_refusal(claims, audience=audience, now=now)
    return Refused(problem) if problem is not None else _bound_pod(claims)


class IssuerKeys:
    """The API server's published keys, read at start, every `refresh`, and again (at most every
    `refresh_after_unknown`) when a token names a key id not read yet (the issuer rotated its keys)."""

    def __init__(
        self,
        *,
        client: RestClient,
        clock: Callable[[], float],
        refresh: float = 3600.0,
        refresh_after_unknown: float = 30.0,
        timeout: float = 5.0,
    ) -> None:
        self._client, self._clock = client, clock
        self._refresh, self._after_unknown, self._timeout = refresh, refresh_after_unknown, timeout
        self.keys: KeySet | None = None
        self._read_at: float | None = None
        self._reading: asyncio.Task[None] | None = None
        self.reads = 0  # for /status and tests
        self.problem: str | None = None  # why the last read failed, for /status

    def stale(self, *, unknown: bool) -> bool:
        """Whether the keys should be read again now (`unknown`: a token named a key id not read)."""
        if self._read_at is None:
            return True
        age = self._clock() - self._read_at
        # With no keys read yet (the last read failed), try again as often as for an unknown key.
        return age >= self._refresh or ((unknown or self.keys is None) and age >= self._after_unknown)

    async def read(self) -> None:
        """Read the keys once (concurrent callers share one read); a failure keeps the last keys read."""
        if self._reading is None:
            self._reading = asyncio.create_task(self._read(), name="issuer-keys")
            self._reading.add_done_callback(lambda _: setattr(self, "_reading", None))
        await asyncio.shield(self._reading)

    async def _read(self) -> None:
        self.reads += 1
        self._read_at = self._clock()
        try:
            async with asyncio.timeout(self._timeout):
                configuration = await self._client.request("GET", OPENID_CONFIGURATION)
                jwks = await self._client.request("GET", JWKS, accept=JWKS_MEDIA_TYPE)
            keys = read_keys(configuration, jwks)
        except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as err:
            self.problem = f"the API server's keys could not be read ({err or type(err).__name__}): " + (
                "using the last read" if self.keys is not None else "every token goes to a TokenReview"
            )
            logger.warning("%s", self.problem)
            return
        if self.keys is None or set(keys.keys) != set(self.keys.keys):
            logger.info("read %d service-account key(s) of issuer %s", len(keys.keys), keys.issuer)
        self.keys, self.problem = keys, None
