"""Who asks: the pod's projected service-account token, the Kubernetes way.

Admission mounts a token of the pod's service account into the init client, for stagger's own audience
(`--token-audience`) and bound to the pod (Kubernetes writes the pod's name and uid into a token it
issues for a pod's projected volume). The init client sends it as `Authorization: Bearer`. lockd asks the
API server who it is (a TokenReview, `authentication.k8s.io/v1`: the pod's name and uid come back as the
user's extra `authentication.kubernetes.io/pod-name` and `pod-uid`) and binds the ask or the release to
that pod: a token of another pod, an expired one or one of another audience is refused (403) and nothing
changes. Answers are cached by the token's hash (at most `cache` seconds, never past the token's own
`exp`), so a pod's long polls cost one review. New tokens are rate-bounded per caller address
(`CallerBudgets`, a map bounded in size) and, as a backstop, per node, so that tokens made up by the
thousand cannot make lockd flood the API server, and cost their sender, not the other pods of the node:
a token the API server accepts gives its sender's budget back.

A pod that admission gave the token (its spec has the token volume, `stagger.contracts.podtoken`) must
show it: an ask or release in its name without it is refused, and one whose token could not be checked
is told to ask again. A pod opted in by hand without the token is checked by its name and uid on this
node alone, unless `--require-pod-token` says every pod must have one.

Pure but for `TokenReviewer`, which calls the API server.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import aiohttp

from lockd.settings import TokenSettings
from stagger.contracts.podtoken import TOKEN_VOLUME
from stagger.kube import TOKENREVIEWS, ApiError, RestClient
from stagger.throttles import TokenBucket

if TYPE_CHECKING:
    from lockd import tokenkeys

__all__ = [
    "POD_NAME_EXTRA",
    "POD_UID_EXTRA",
    "CallerBudgets",
    "Refusal",
    "Rejected",
    "TokenPod",
    "TokenReviewer",
    "Unanswered",
    "bearer_token",
    "decide",
    "read_review",
    "token_expiry",
]

logger = logging.getLogger(__name__)

# Documented in https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/
# ("Bound service account tokens": the user info's extra fields of a token bound to a pod).
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
_SERVICE_ACCOUNT = "system:serviceaccount:"


@dataclass(frozen=True)
class TokenPod:
    """The pod a token was issued for; `live`: the API server confirmed that pod exists with that uid (a
    TokenReview does; a token checked against the published keys leaves that to lockd's pod watch)."""

    namespace: str
    name: str
    uid: str
    service_account: str
    live: bool = True


@dataclass(frozen=True)
class Rejected:
    """The API server does not accept the token (expired, another audience, not a pod's, made up)."""

    reason: str


UnansweredWhy = Literal["unanswered", "caller_budget", "node_budget"]


@dataclass(frozen=True)
class Unanswered:
    """The API server could not be asked: it failed (`unanswered`), or no review was left for this caller
    (`caller_budget`) or on this node (`node_budget`); `retry_after`: when asking again may be answered."""

    reason: str
    why: UnansweredWhy = "unanswered"
    retry_after: float = 1.0


Review = TokenPod | Rejected | Unanswered

RefusalWhy = Literal["missing", "required", "rejected", "other_pod", UnansweredWhy]


@dataclass(frozen=True)
class Refusal:
    """A request refused for its token; `why` is the metric's reason label."""

    status: Literal[403, 503]
    reason: str
    why: RefusalWhy
    retry_after: float = 1.0


Verdict = Literal["verified", "unverified"] | Refusal


class BadAuthorization(ValueError):
    """An Authorization header that is not `Bearer <token>` (400)."""


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer` header; None without the header."""
    value = headers.get("Authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        raise BadAuthorization("Authorization: expected 'Bearer <the pod's service-account token>'")
    return token


def read_review(answer: Mapping[str, Any], *, audience: str) -> TokenPod | Rejected:
    """The pod a TokenReview's answer names, or why the token is refused. Pure."""
    status = answer.get("status") or {}
    if status.get("authenticated") is not True:
        return Rejected(f"the token was not accepted: {status.get('error') or 'not authenticated'}")
    if audience not in (status.get("audiences") or [audience]):
        return Rejected(f"the token is not for audience {audience!r}")
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    extra = user.get("extra") or {}
    names, uids = extra.get(POD_NAME_EXTRA) or [], extra.get(POD_UID_EXTRA) or []
    account = username.removeprefix(_SERVICE_ACCOUNT).split(":")
    if not username.startswith(_SERVICE_ACCOUNT) or len(account) != 2 or len(names) != 1 or len(uids) != 1:
        return Rejected(
            f"the token of {username or 'nobody'} is not a pod's (a projected service-account token is needed)"
        )
    return TokenPod(namespace=account[0], name=str(names[0]), uid=str(uids[0]), service_account=account[1])


def token_expiry(token: str) -> float | None:
    """The `exp` of a JWT's payload, read without checking the signature: only to cache an answer no
    longer than the token lives (the API server checks the token itself)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def decide(
    review: Review | None,
    *,
    require: bool,
    injected: bool,
    namespace: str,
    name: str,
    uid: str,
    watched_uid: str | None = None,
) -> Verdict:
    """What a request for `namespace/name` (uid `uid`, "" when not given) with this token's review (None:
    no token) may do; `injected`: the pod has the token volume (admission gave it the token);
    `watched_uid`: the uid of the pod of that name in lockd's watch, which a token the API server did not
    confirm live must be bound to. Pure."""
    if review is None:
        if require:
            return Refusal(
                403, "a service-account token of the pod is required (lockd --require-pod-token)", "required"
            )
        if injected:
            return Refusal(
                403,
                f"pod {namespace}/{name} was given a service-account token for lockd (its volume "
                f"{TOKEN_VOLUME}): an ask or release in its name must carry it",
                "missing",
            )
        return "unverified"
    if isinstance(review, Rejected):
        return Refusal(403, review.reason, "rejected")
    if isinstance(review, Unanswered):
        if require or injected:
            return Refusal(
                503,
                f"the pod's token could not be checked ({review.reason}): ask again",
                review.why,
                review.retry_after,
            )
        return "unverified"
    if (review.namespace, review.name) != (namespace, name) or (uid and review.uid != uid):
        return Refusal(
            403,
            f"the token is pod {review.namespace}/{review.name}'s (uid {review.uid}), "
            f"not {namespace}/{name}'s" + (f" (uid {uid})" if uid else ""),
            "other_pod",
        )
    if not review.live and review.uid != watched_uid:
        # What the authenticator checks of a bound token (claims.go): its pod is still there, that very one.
        return Refusal(
            403,
            f"the token is bound to pod {review.namespace}/{review.name} uid {review.uid}, which is no "
            "longer there: service account token has been invalidated",
            "rejected",
        )
    return "verified"


class CallerBudgets:
    """Each caller address's own budget of new tokens (a token bucket), in a map of at most `capacity`
    callers: the least recently seen is forgotten for a new one, so that many addresses cannot grow it
    without bound (a forgotten caller starts again with a full budget; the node's budget still bounds
    them all)."""

    def __init__(self, *, burst: int, fill_seconds: float, capacity: int) -> None:
        self._burst, self._fill, self._capacity = burst, fill_seconds, capacity
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def of(self, peer: str, *, now: float) -> TokenBucket:
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = self._buckets[peer] = TokenBucket(burst=self._burst, fill_seconds=self._fill, now=now)
            while len(self._buckets) > self._capacity:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(peer)
        return bucket


class TokenReviewer:
    """Asks the API server about tokens, with a cache and a bound on reviews."""

    def __init__(
        self,
        *,
        client: RestClient,
        settings: TokenSettings,
        clock: Callable[[], float],
        wall: Callable[[], float],
        count: Callable[[Literal["keys", "review"]], None] = lambda how: None,
    ) -> None:
        self._client = client
        self._count = count
        self._settings = settings
        self._clock = clock
        self._wall = wall
        self._cache: OrderedDict[bytes, tuple[float, TokenPod | Rejected]] = OrderedDict()
        self._reviewing: dict[bytes, asyncio.Task[Review]] = {}
        # The node's budget: a backstop above the callers' own, which bounds the API server's load.
        self._reviews = TokenBucket(
            burst=settings.token_review_burst, fill_seconds=settings.token_review_fill, now=clock()
        )
        self.callers = CallerBudgets(
            burst=settings.token_review_caller_burst,
            fill_seconds=settings.token_review_caller_fill,
            capacity=settings.token_review_callers,
        )
        self.api_reviews = 0  # TokenReviews sent, for tests and /status
        self.key_checks = 0  # tokens judged against the published keys, for tests and /status
        self.keys = (
            _issuer_keys(client=client, settings=settings, clock=clock) if settings.token_keys else None
        )

    async def review(self, token: str, *, peer: str) -> Review:
        """Who `token` is: judged against the API server's published keys when it can be, else by a
        TokenReview, for which a new token costs its sender `peer` (the caller's address) one review."""
        key = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        judged = await self._judge(token)
        if judged is not None:
            self.key_checks += 1
            self._count("keys")
            self._remember(key, token, judged)
            return judged
        task = self._reviewing.get(key)
        if task is None:
            caller = self.callers.of(peer, now=now)
            if not caller.take(now):
                return Unanswered(
                    f"too many new tokens from {peer} at once",
                    "caller_budget",
                    caller.seconds_until_token(now),
                )
            if not self._reviews.take(now):
                caller.give_back(now)
                return Unanswered(
                    "too many new tokens on this node at once",
                    "node_budget",
                    self._reviews.seconds_until_token(now),
                )
            task = asyncio.create_task(self._review(key, token, caller=caller), name="token-review")
            self._reviewing[key] = task
            task.add_done_callback(lambda _: self._reviewing.pop(key, None))
        # Shielded: a caller that goes away does not cancel the review others wait for.
        return await asyncio.shield(task)

    async def _review(self, key: bytes, token: str, *, caller: TokenBucket) -> Review:
        found = await self._ask(key, token)
        if isinstance(found, TokenPod):
            # A real pod's token costs its sender nothing: pods sharing an address (hostNetwork) are not
            # held back by each other; only tokens the API server refuses use up the sender's budget.
            caller.give_back(self._clock())
        return found

    async def _ask(self, key: bytes, token: str) -> Review:
        self.api_reviews += 1
        self._count("review")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self._settings.token_audience]},
        }
        try:
            async with asyncio.timeout(self._settings.token_review_timeout):
                answer = await self._client.create(TOKENREVIEWS, body)
        except ApiError as err:
            logger.warning("TokenReview failed: %s", err)
            return Unanswered(f"TokenReview: {err}")
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            return Unanswered(f"TokenReview: {err or type(err).__name__}")
        found = read_review(answer, audience=self._settings.token_audience)
        self._remember(key, token, found)
        return found

    async def _judge(self, token: str) -> TokenPod | Rejected | None:
        """The token judged against the published keys (lockd/tokenkeys.py); None: a review must say."""
        if self.keys is None:
            return None
        if self.keys.stale(unknown=False):
            await self.keys.read()
        judged = self._judge_with_keys(token)
        if judged is None and self.keys.stale(unknown=True):
            await self.keys.read()  # perhaps signed with a key the issuer added since the last read
            judged = self._judge_with_keys(token)
        return judged

    def _judge_with_keys(self, token: str) -> TokenPod | Rejected | None:
        keys = self.keys.keys if self.keys is not None else None
        if keys is None:
            return None
        from lockd import tokenkeys  # loaded already: `self.keys` is one of its

        judged = tokenkeys.judge(token, keys=keys, audience=self._settings.token_audience, now=self._wall())
        if isinstance(judged, tokenkeys.Refused):
            return Rejected(f"the token was not accepted: {judged.reason}")
        if judged is None:
            return None
        return TokenPod(
            namespace=judged.namespace,
            name=judged.name,
            uid=judged.uid,
            service_account=judged.service_account,
            live=False,
        )

    def _remember(self, key: bytes, token: str, found: TokenPod | Rejected) -> None:
        now, wall = self._clock(), self._wall()
        until = now + self._settings.token_cache
        expiry = token_expiry(token)
        if expiry is not None:
            until = min(until, now + (expiry - wall))
        self._cache[key] = (until, found)
        self._cache.move_to_end(key)
        while len(self._cache) > self._settings.token_cache_entries:
            self._cache.popitem(last=False)


def _issuer_keys(
    *, client: RestClient, settings: TokenSettings, clock: Callable[[], float]
) -> tokenkeys.IssuerKeys | None:
    """The published keys' reader, or None where the `cryptography` library is not installed (`pip install
    'stagger[lockd]'`; the image has it): then every new token goes to a TokenReview, as with
    --no-token-keys."""
    try:
        from lockd import tokenkeys
    except ImportError as err:
        logger.warning(
            "pods' tokens go to TokenReviews: checking them by the API server's published keys needs the "
            "cryptography library (%s; pip install 'stagger[lockd]')",
            err,
        )
        return None
    return tokenkeys.IssuerKeys(
        client=client,
        clock=clock,
        refresh_after_unknown=settings.token_keys_reread,
        timeout=settings.token_review_timeout,
    )
