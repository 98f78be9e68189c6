"""The files the controller re-reads, without a server: the serving certificate (each handshake through
the listener's front context gets the pair in force; a changed pair is tried before it is switched to; a
bad one keeps the old) and the grant API token (constant-time check, last good token kept)."""

from __future__ import annotations

import hashlib
import ssl
from pathlib import Path

import pytest
import trustme

from tests.webhook.process import Certs
from webhook.tls import CertificateError, ServingCertificate, handshake
from webhook.token import TokenError, TokenFile


def _served(serving: ServingCertificate) -> str:
    return hashlib.sha256(handshake(serving.context)).hexdigest()


def _leaf_sha256(certs: Certs) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(certs.cert.read_text())).hexdigest()


def test_the_front_context_serves_the_pair_in_force(tmp_path: Path) -> None:
    certs = Certs.write(tmp_path / "tls")
    serving = ServingCertificate.load(certs.cert, certs.key)
    assert serving.sha256 == _leaf_sha256(certs) == _served(serving)
    assert serving.problem is None and serving.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert serving.reload_if_changed() == "unchanged"

    certs.issue(trustme.CA())
    assert serving.reload_if_changed() == "reloaded"
    assert serving.sha256 == _leaf_sha256(certs) == _served(serving)
    assert serving.reloads == 1 and serving.self_test() is None


def test_a_bad_pair_keeps_the_one_in_force_until_the_files_change_again(tmp_path: Path) -> None:
    certs = Certs.write(tmp_path / "tls")
    serving = ServingCertificate.load(certs.cert, certs.key)
    good = serving.sha256
    other, stranger = trustme.CA().issue_cert("x"), trustme.CA().issue_cert("y")
    certs.install(other.cert_chain_pems[0].bytes(), stranger.private_key_pem.bytes())
    assert serving.reload_if_changed() == "failed"
    assert "not a usable pair (KEY_VALUES_MISMATCH)" in serving.last_error
    assert _served(serving) == good
    assert serving.reload_if_changed() == "unchanged"  # not tried again until a file changes
    certs.install(b"not a certificate", other.private_key_pem.bytes())
    assert serving.reload_if_changed() == "failed"
    assert serving.last_error == f"certificate {certs.cert}: no PEM BEGIN CERTIFICATE in it"
    certs.issue(trustme.CA())
    assert serving.reload_if_changed() == "reloaded"
    assert serving.last_error == "" and _served(serving) == _leaf_sha256(certs)


def test_unusable_pairs_at_start_name_the_files(tmp_path: Path) -> None:
    certs = Certs.write(tmp_path / "tls")
    with pytest.raises(CertificateError, match=r"certificate .*missing\.crt: cannot read it: No such file"):
        ServingCertificate.load(tmp_path / "missing.crt", certs.key)
    with pytest.raises(CertificateError, match=r"private key .*tls\.crt: no PEM PRIVATE KEY in it"):
        ServingCertificate.load(certs.cert, certs.cert)


def test_the_token_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    token = TokenFile.load(path)
    assert token.accepts("Bearer s3cret") and token.accepts("bearer s3cret")
    assert not token.accepts("Bearer s3cre") and not token.accepts("s3cret") and not token.accepts(None)
    assert not token.reload_if_changed()
    staged = tmp_path / "token.new"
    staged.write_text("")
    staged.replace(path)
    assert not token.reload_if_changed()
    assert token.last_error == f"token file {path}: empty" and token.accepts("Bearer s3cret")
    staged.write_text("rotated")
    staged.replace(path)
    assert token.reload_if_changed() and token.last_error == ""
    assert token.accepts("Bearer rotated") and not token.accepts("Bearer s3cret")
    with pytest.raises(TokenError, match="cannot read it"):
        TokenFile.load(tmp_path / "none")
