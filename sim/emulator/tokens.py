"""Service-account tokens: the TokenRequest subresource (POST serviceaccounts/NAME/token) issues JWTs
bound to the service account and, optionally, to a Pod, Secret or Node; TokenReview (POST
authentication.k8s.io/v1 tokenreviews) checks them as the API server's service-account authenticator
does. Pure functions of the registry, like `podactions`.

References (Kubernetes API docs):
https://kubernetes.io/docs/reference/kubernetes-api/authentication-resources/token-request-v1/
https://kubernetes.io/docs/reference/kubernetes-api/authentication-resources/token-review-v1/
https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/ (bound tokens)
Error texts are the real server's: pkg/registry/core/serviceaccount/storage/token.go (TokenREST),
pkg/apis/authentication/validation (ValidateTokenRequest), pkg/serviceaccount/jwt.go and claims.go (the
authenticator), pkg/registry/authentication/tokenreview/storage.go.

Tokens are signed ES256 with a P-256 key made per emulator instance (kube-apiserver signs with its
--service-account-signing-key-file: ES256 for a P-256 key, RS256 for an RSA key as kubeadm makes by
default), under the key id the real server computes (pkg/serviceaccount/jwt.go keyIDFromPublicKey), and
the public key is published by OIDC discovery (`openid_configuration`, `TokenSigner.jwks`;
pkg/serviceaccount/openidmetadata.go) so a client can check a token without a TokenReview.

Where it knowingly differs: the key lives only as long as the emulator instance (tokens of another run
never verify; there is no key file, no rotation and no second verifying key). The discovery document's
jwks_uri is the issuer's URL + /openid/v1/jwks, where the real server, without --service-account-jwks-uri,
names its own external address (clients here read the keys from the API server's /openid/v1/jwks). No
--service-account-max-token-expiration (no upper clamp but 2^32 seconds).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from sim.emulator import errors
from sim.emulator.errors import FieldError
from sim.emulator.registry import Registry
from sim.emulator.resources import builtin
from stagger.objects import Obj
from stagger.timestamps import format_rfc3339, parse_rfc3339

GROUP, VERSION = "authentication.k8s.io", "v1"
API_VERSION = f"{GROUP}/{VERSION}"
# --service-account-issuer of a kubeadm-style cluster; kube-apiserver defaults --api-audiences to it, so
# a token without an audience of its own is for the API server itself.
ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)
MIN_EXPIRATION = 10 * 60  # ValidateTokenRequest: "may not specify a duration less than 10 minutes"
MAX_EXPIRATION = 1 << 32
DEFAULT_EXPIRATION = 60 * 60  # SetDefaults_TokenRequestSpec
# The kubelet asks for this for the projected kube-api-access volume; --service-account-extend-token-
# expiration (on by default) then makes the token live a year, noting the asked-for time as warnafter.
WARN_ONLY_EXPIRATION = 60 * 60 + 7
EXTENDED_EXPIRATION = 24 * 365 * 60 * 60
LEEWAY = 60  # go-jose jwt.DefaultLeeway: exp, nbf and deletions are judged a minute loosely
EXTRA = "authentication.kubernetes.io/"
# What the authenticator's go-jose answers for a signature that does not verify.
BAD_SIGNATURE = "go-jose/go-jose: error in cryptographic primitive"
INVALIDATED = "service account token has been invalidated"
# What jwt.go answers for a token whose header names a key id it has no key for.
NO_KEYS = "invalid signature, no keys found"
ALGORITHM = "ES256"
CURVE = "P-256"
_COORDINATE = 32  # bytes of a P-256 coordinate, and of r and of s in a JWS signature (RFC 7518 3.4)
# OIDC discovery (pkg/serviceaccount/openidmetadata.go): the paths, and the keyset's media type (RFC 7517 8.5.1).
OPENID_CONFIGURATION_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
JWKS_MEDIA_TYPE = "application/jwk-set+json"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Refused(Exception):
    """A token the authenticator does not accept; `reason` None: not a service-account JWT at all."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(reason or "")
        self.reason = reason


def key_id_of(public_key: ec.EllipticCurvePublicKey) -> str:
    """kube-apiserver's key id (jwt.go keyIDFromPublicKey): base64url of the SHA-256 of the public key's
    DER SubjectPublicKeyInfo, so the same key always gets the same id across API server replicas."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _b64(hashlib.sha256(der).digest())


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _coordinate(value: int) -> str:
    return _b64(value.to_bytes(_COORDINATE, "big"))


@dataclass(frozen=True)
class TokenSigner:
    """The emulator instance's signing key (random per instance: tokens of another run never verify)."""

    private_key: ec.EllipticCurvePrivateKey = field(default_factory=_new_key, repr=False)
    # Keys it no longer signs with but still accepts and publishes, as a kube-apiserver restarted with a new
    # --service-account-signing-key-file and the old public key still among its --service-account-key-file.
    retired: tuple[ec.EllipticCurvePublicKey, ...] = ()
    key_id: str = field(init=False)

    def __post_init__(self) -> None:
        # Derived from the key, once (the dataclass is frozen).
        object.__setattr__(self, "key_id", key_id_of(self.private_key.public_key()))

    def rotated(self) -> TokenSigner:
        """A signer with a new key, this one's keys kept for verifying (a key rotation)."""
        return TokenSigner(retired=(self.private_key.public_key(), *self.retired))

    def _public_keys(self) -> dict[str, ec.EllipticCurvePublicKey]:
        keys = {key_id_of(key): key for key in self.retired}
        keys[self.key_id] = self.private_key.public_key()
        return keys

    def sign(self, claims: Obj) -> str:
        header = _b64(json.dumps({"alg": ALGORITHM, "kid": self.key_id}, separators=(",", ":")).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        der = self.private_key.sign(f"{header}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        # JWS wants r and s side by side, each the curve's size, big-endian (RFC 7518 3.4), not DER.
        return f"{header}.{payload}.{_b64(r.to_bytes(_COORDINATE, 'big') + s.to_bytes(_COORDINATE, 'big'))}"

    def _holds(self, key: ec.EllipticCurvePublicKey, signing_input: str, signature: bytes) -> bool:
        if len(signature) != 2 * _COORDINATE:  # go-jose refuses any other length before the maths
            return False
        r = int.from_bytes(signature[:_COORDINATE], "big")
        s = int.from_bytes(signature[_COORDINATE:], "big")
        try:
            key.verify(encode_dss_signature(r, s), signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True

    def verify(self, token: str) -> Obj:
        """The claims of a token this signer made. Like jwt.go: a token that is no JWT or has another
        issuer is not ours (Refused(None)); one of our issuer naming a key id not ours finds no key; one
        whose algorithm is not ours or whose signature fails is refused."""
        parts = token.split(".")
        if len(parts) != 3:
            raise Refused(None)
        try:
            header = json.loads(_unb64(parts[0]))
            claims = json.loads(_unb64(parts[1]))
            signature = _unb64(parts[2])
        except (ValueError, binascii.Error) as err:
            raise Refused(None) from err
        if not isinstance(claims, dict) or claims.get("iss") != ISSUER:
            raise Refused(None)
        if not isinstance(header, dict):
            raise Refused(BAD_SIGNATURE)
        kid, keys = header.get("kid"), self._public_keys()
        if isinstance(kid, str) and kid and kid not in keys:
            raise Refused(NO_KEYS)  # jwt.go picks keys by the header's kid, and has none of another
        # A token without a kid is tried against every key, as jwt.go does.
        candidates = [keys[kid]] if isinstance(kid, str) and kid else list(keys.values())
        signed = f"{parts[0]}.{parts[1]}"
        if header.get("alg") != ALGORITHM or not any(self._holds(k, signed, signature) for k in candidates):
            raise Refused(BAD_SIGNATURE)
        return claims

    def jwks(self) -> Obj:
        """GET /openid/v1/jwks: the public key as go-jose writes a JSONWebKey (its field order)."""
        found = []
        for kid, public in self._public_keys().items():
            numbers = public.public_numbers()
            key = {"use": "sig", "kty": "EC", "kid": kid, "crv": CURVE, "alg": ALGORITHM}
            found.append(key | {"x": _coordinate(numbers.x), "y": _coordinate(numbers.y)})
        return {"keys": found}


def openid_configuration() -> Obj:
    """GET /.well-known/openid-configuration (openidmetadata.go openIDMetadata); jwks_uri under the
    issuer (see the module docstring)."""
    return {
        "issuer": ISSUER,
        "jwks_uri": ISSUER + JWKS_PATH,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [ALGORITHM],
    }


# -------------------------------------------------------------------------------------------- TokenRequest


def typed_body(body: Any, kind: str) -> Obj:
    """The body's apiVersion and kind must be ours (or absent, as the real decoder allows)."""
    if not isinstance(body, dict):
        raise errors.bad_request(
            f'{kind} in version "{VERSION}" cannot be handled as a {kind}: the body must be a JSON object'
        )
    api_version, body_kind = body.get("apiVersion"), body.get("kind")
    if (api_version and api_version != API_VERSION) or (body_kind and body_kind != kind):
        raise errors.bad_request(
            f'{body_kind} in version "{VERSION}" cannot be handled as a {kind}: the kind in the data '
            f"({api_version}, {body_kind}) does not match the expected ({API_VERSION}, {kind})"
        )
    return body


def _expiration(spec: Obj) -> int:
    value = spec.get("expirationSeconds", DEFAULT_EXPIRATION)
    if not isinstance(value, int) or isinstance(value, bool):
        raise errors.bad_request(
            'TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot unmarshal '
            f"{type(value).__name__} into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64"
        )
    problem = ""
    if value < MIN_EXPIRATION:
        problem = "may not specify a duration less than 10 minutes"
    elif value > MAX_EXPIRATION:
        problem = "may not specify a duration larger than 2^32 seconds"
    if problem:
        # TokenREST validates after the service account lookup, with an empty name (errors.NewInvalid(gk, "")).
        raise errors.invalid(
            GROUP,
            "TokenRequest",
            "",
            [FieldError("FieldValueInvalid", "spec.expirationSeconds", problem, value)],
        )
    return value


def _check_metadata(metadata: Obj, *, namespace: str, name: str) -> None:
    """TokenREST: a name or namespace in the body must be the URL's."""
    for key, wanted, what in (("name", name, "name"), ("namespace", namespace, "namespace")):
        given = metadata.get(key)
        if given and given != wanted:
            raise errors.invalid(
                GROUP,
                "TokenRequest",
                name,
                [
                    FieldError(
                        "FieldValueInvalid",
                        f"metadata.{key}",
                        f"must match the service account {what} if specified",
                        given,
                    )
                ],
            )


def _bound_object(registry: Registry, ref: Obj, *, namespace: str, account: str) -> tuple[str, Obj]:
    """TokenREST's boundObjectRef switch: the object must exist (its own 404), a pod must run as the
    service account, and a uid given must be the object's (else a Conflict, as after a re-creation)."""
    api_version, kind, name = ref.get("apiVersion") or "", ref.get("kind") or "", ref.get("name") or ""
    group, _, version = api_version.rpartition("/")
    resources = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}
    if group or kind not in resources:
        raise errors.bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
    rtype = builtin("", resources[kind])
    obj = registry.get(rtype, namespace if rtype.namespaced else "", name)
    if kind == "Pod" and (obj.get("spec") or {}).get("serviceAccountName") != account:
        raise errors.bad_request(
            f'cannot bind token for serviceaccount "{account}" to pod running with different serviceaccount name.'
        )
    uid = ref.get("uid")
    if uid and uid != obj["metadata"].get("uid"):
        raise errors.conflict(
            "",
            kind,
            name,
            f"the UID in the bound object reference ({uid}) does not match the UID in record. The object "
            "might have been deleted and then recreated",
        )
    return kind, obj


def _private_claims(registry: Registry, account: Obj, bound: tuple[str, Obj] | None) -> Obj:
    """The `kubernetes.io` claim (pkg/serviceaccount/claims.go Claims): the account, the bound object
    and, for a pod on a node, that node (ServiceAccountTokenPodNodeInfo; the uid only if it exists)."""
    meta = account["metadata"]
    private: Obj = {
        "namespace": meta["namespace"],
        "serviceaccount": {"name": meta["name"], "uid": meta["uid"]},
    }
    if bound is None:
        return private
    kind, obj = bound
    private[kind.lower()] = {"name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
    node_name = (obj.get("spec") or {}).get("nodeName") if kind == "Pod" else None
    if node_name:
        node = registry.store.get(builtin("", "nodes").storage_key, "", node_name)
        private["node"] = {"name": node_name} | ({"uid": node["metadata"]["uid"]} if node else {})
    return private


def request_token(
    registry: Registry, signer: TokenSigner, *, namespace: str, name: str, body: Any, now: float
) -> Obj:
    """POST serviceaccounts/NAME/token, in TokenREST.Create's order: body name/namespace, the service
    account (404), defaults, validation (422), the bound object; then the signed token (201)."""
    request = typed_body(body, "TokenRequest")
    metadata = dict(request.get("metadata") or {})
    _check_metadata(metadata, namespace=namespace, name=name)
    account = registry.get(builtin("", "serviceaccounts"), namespace, name)
    spec = dict(request.get("spec") or {})
    spec["audiences"] = list(spec.get("audiences") or API_AUDIENCES)
    seconds = _expiration(spec)
    spec["expirationSeconds"] = seconds
    ref = spec.get("boundObjectRef")
    bound = _bound_object(registry, ref, namespace=namespace, account=name) if isinstance(ref, dict) else None
    lifetime, private = seconds, _private_claims(registry, account, bound)
    issued = int(now)
    if (
        bound
        and bound[0] == "Pod"
        and seconds == WARN_ONLY_EXPIRATION
        and set(spec["audiences"]) <= set(API_AUDIENCES)
    ):
        lifetime, private["warnafter"] = EXTENDED_EXPIRATION, issued + seconds
    claims: Obj = {
        "aud": spec["audiences"],
        "exp": issued + lifetime,
        "iat": issued,
        "iss": ISSUER,
        "jti": str(uuid.uuid4()),
        "kubernetes.io": private,
        "nbf": issued,
        "sub": f"system:serviceaccount:{namespace}:{name}",
    }
    metadata.update(name=name, namespace=namespace, creationTimestamp=format_rfc3339(now, digits=0))
    metadata.setdefault("uid", account["metadata"]["uid"])
    return {
        "kind": "TokenRequest",
        "apiVersion": API_VERSION,
        "metadata": metadata,
        "spec": spec,
        # The asked-for lifetime even when the token was extended (the status promises only that).
        "status": {
            "token": signer.sign(claims),
            "expirationTimestamp": format_rfc3339(issued + seconds, digits=0),
        },
    }


# --------------------------------------------------------------------------------------------- TokenReview


def _go_quoted(values: list[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _deleted_long_ago(obj: Obj, now: float) -> bool:
    """Deleted (deletionTimestamp) more than the leeway ago: claims.go's invalidIfDeletedBefore."""
    stamp = parse_rfc3339(str((obj.get("metadata") or {}).get("deletionTimestamp") or ""))
    return stamp is not None and stamp < now - LEEWAY


def _check_times(claims: Obj, now: float) -> None:
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if isinstance(exp, int | float) and now - LEEWAY > exp:
        raise Refused("service account token has expired")
    if isinstance(nbf, int | float) and now + LEEWAY < nbf:
        raise Refused("service account token is not valid yet")


def _check_bound(registry: Registry, private: Obj, *, namespace: str, now: float) -> None:
    """The bound secret, pod or (for a token bound to a node alone) node must still be there, with the
    uid of the claim and not deleted a minute ago (claims.go validator.Validate)."""
    checks = [("secret", "secrets"), ("pod", "pods")]
    if not isinstance(private.get("pod"), dict):
        checks.append(("node", "nodes"))
    for claim, resource in checks:
        ref = private.get(claim)
        if not isinstance(ref, dict):
            continue
        rtype = builtin("", resource)
        obj = registry.store.get(
            rtype.storage_key, namespace if rtype.namespaced else "", str(ref.get("name"))
        )
        if obj is None:
            raise Refused(INVALIDATED)
        if obj["metadata"].get("uid") != ref.get("uid"):
            raise Refused(
                f"{claim} UID ({obj['metadata'].get('uid')}) does not match service account {claim} ref claim "
                f"({ref.get('uid')})"
            )
        if _deleted_long_ago(obj, now):
            raise Refused(INVALIDATED)


def _user(registry: Registry, claims: Obj, *, now: float) -> Obj:
    """validator.Validate, then ServiceAccountInfo.UserInfo (and the authenticated group the API server
    adds): the account must still exist with the claim's uid."""
    _check_times(claims, now)
    private = claims.get("kubernetes.io")
    if not isinstance(private, dict):
        raise Refused("service account token claims could not be validated due to unexpected private claim")
    namespace = str(private.get("namespace") or "")
    account_ref = private.get("serviceaccount") or {}
    name = str(account_ref.get("name") or "")
    account = registry.store.get(builtin("", "serviceaccounts").storage_key, namespace, name)
    if account is None:
        raise Refused(f'serviceaccounts "{name}" not found')
    if _deleted_long_ago(account, now):
        raise Refused(f"service account {namespace}/{name} has been deleted")
    if account["metadata"].get("uid") != account_ref.get("uid"):
        raise Refused(
            f"service account UID ({account['metadata'].get('uid')}) does not match claim ({account_ref.get('uid')})"
        )
    _check_bound(registry, private, namespace=namespace, now=now)
    extra: dict[str, list[str]] = {}
    for claim in ("pod", "node"):
        ref = private.get(claim)
        for key in ("name", "uid"):
            if isinstance(ref, dict) and ref.get(key):
                extra[f"{EXTRA}{claim}-{key}"] = [str(ref[key])]
    if claims.get("jti"):
        extra[f"{EXTRA}credential-id"] = [f"JTI={claims['jti']}"]  # authenticationtokenjwt.CredentialIDForJTI
    user: Obj = {
        "username": f"system:serviceaccount:{namespace}:{name}",
        "uid": account_ref.get("uid"),
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
    }
    return user | ({"extra": extra} if extra else {})


def _authenticate(
    registry: Registry, signer: TokenSigner, token: str, requested: list[str], *, now: float
) -> Obj:
    """jwt.go AuthenticateToken: signature and issuer, then the audience, then the claims."""
    claims = signer.verify(token)
    audience = claims.get("aud")
    token_audiences = [audience] if isinstance(audience, str) else [str(a) for a in audience or ()]
    common = [a for a in token_audiences if a in requested]
    if not common:
        raise Refused(
            f"token audiences {_go_quoted(token_audiences)} is invalid for the target audiences {_go_quoted(requested)}"
        )
    return {"authenticated": True, "user": _user(registry, claims, now=now), "audiences": common}


def review_token(registry: Registry, signer: TokenSigner, body: Any, *, now: float) -> Obj:
    """POST tokenreviews (not stored). A refused token is still a 201: `authenticated` is then left out
    (the Go field is omitempty, so false is never written), `user` is empty and `error` says why, in
    the words of the API server's authenticator union ("[invalid bearer token, <the reason>]")."""
    review = typed_body(body, "TokenReview")
    spec = dict(review.get("spec") or {})
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise errors.bad_request("token is required for TokenReview in authentication")
    requested = [str(a) for a in spec.get("audiences") or ()] or list(API_AUDIENCES)
    try:
        status = _authenticate(registry, signer, token, requested, now=now)
    except Refused as refused:
        reason = (
            "invalid bearer token" if refused.reason is None else f"[invalid bearer token, {refused.reason}]"
        )
        status = {"user": {}, "error": reason}
    metadata = dict(review.get("metadata") or {})
    metadata.setdefault("creationTimestamp", None)
    return {
        "kind": "TokenReview",
        "apiVersion": API_VERSION,
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }
