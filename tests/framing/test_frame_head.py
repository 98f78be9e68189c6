"""`stagger.framing.frame_head`: how long the body after a request head is, or why the door refuses the
request before reading it (a chunked body, a body over the limit, a bad or doubled Content-Length)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger.framing import Framed, Refusal, frame_head

_LINE = b"POST /mutate/pods HTTP/1.1\r\nHost: x"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param(b"", Framed(0), id="no-body"),
        pytest.param(b"\r\nContent-Length: 0", Framed(0), id="empty-body"),
        pytest.param(b"\r\nContent-Length: 1024", Framed(1024), id="at-the-limit"),
        pytest.param(b"\r\ncontent-length:  12 ", Framed(12), id="any-case-and-spaces"),
        pytest.param(b"\r\nContent-Length: 12\r\nContent-Length: 12", Framed(12), id="repeated-the-same"),
        pytest.param(b"\r\nContent-Length: 1025", 413, id="over-the-limit"),
        pytest.param(b"\r\nContent-Length: 99999999999999999999999", 400, id="absurdly-long"),
        pytest.param(b"\r\nContent-Length: 12\r\nContent-Length: 13", 400, id="two-lengths"),
        pytest.param(b"\r\nContent-Length: -1", 400, id="negative"),
        pytest.param(b"\r\nContent-Length: 1e3", 400, id="not-digits"),
        pytest.param(b"\r\nTransfer-Encoding: chunked", 411, id="chunked"),
        pytest.param(b"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked", 411, id="chunked-and-length"),
    ],
)
def test_the_body_length_or_the_refusal(headers: bytes, expected: Framed | int) -> None:
    framed = frame_head(_LINE + headers, max_body=1024)
    if isinstance(expected, Framed):
        assert framed == expected
    else:
        assert isinstance(framed, Refusal) and framed.status == expected and framed.reason


@given(st.binary(max_size=400), st.integers(min_value=0, max_value=1 << 20))
def test_any_head_is_framed_within_the_limit_or_refused(head: bytes, max_body: int) -> None:
    framed = frame_head(head, max_body=max_body)
    if isinstance(framed, Framed):
        assert 0 <= framed.content_length <= max_body
    else:
        assert framed.status in (400, 411, 413)
