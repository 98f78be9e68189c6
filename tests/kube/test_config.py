"""Where lockd finds the API server: a kubeconfig (read by the official client's loader) or the in-cluster
service account; the bearer token is sent (and re-read from its file, which the kubelet rotates); HTTPS
is verified against the configured CA, with trustme certificates."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web

from stagger import kube


def test_kubeconfig_with_token(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:6443'}\n"
        "users:\n- name: u\n  user: {token: abc}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
        "current-context: x\n"
    )
    config = kube.load_config(kubeconfig=path)
    assert config.server == "http://127.0.0.1:6443"
    assert config.token == "abc"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "does not exist", id="missing"),
        pytest.param("apiVersion: v1\nkind: Config\n", "kubeconfig", id="empty"),
    ],
)
def test_bad_kubeconfig_is_a_config_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(kube.ConfigError, match=message):
        kube.load_config(kubeconfig=path)


def test_in_cluster(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "ca.crt").write_text("not read here")
    config = kube.in_cluster_config(
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, directory=tmp_path
    )
    assert config.server == "https://10.0.0.1:443"
    assert config.token_file == tmp_path / "token"
    assert config.ca_file == tmp_path / "ca.crt"
    with pytest.raises(kube.ConfigError, match="not running in a cluster"):
        kube.in_cluster_config(environ={}, directory=tmp_path)


async def test_https_verified_against_the_ca_with_a_rotating_token(tmp_path: Path, aiohttp_server) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ssl)
    seen: list[str] = []

    async def version(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"gitVersion": "v1.30.0"})

    app = web.Application()
    app.router.add_get("/version", version)
    server = await aiohttp_server(app, ssl=server_ssl)
    ca_file = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    token = tmp_path / "token"
    token.write_text("first\n")
    url = f"https://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession() as session:
        client = kube.RestClient(
            session=session, config=kube.ClusterConfig(server=url, token_file=token, ca_file=ca_file)
        )
        assert (await client.request("GET", "/version"))["gitVersion"] == "v1.30.0"
        assert seen == ["Bearer first"]
        untrusted = kube.RestClient(session=session, config=kube.ClusterConfig(server=url, token="x"))
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await untrusted.request("GET", "/version")


PLAIN_KUBECONFIGS = {
    "token": "clusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:6443/'}\n"
    "users:\n- name: u\n  user: {token: abc}\n",
    "no-user": "clusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:6443'}\nusers: []\n",
    "ca-file-insecure": "clusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443', "
    "certificate-authority: ca.crt, insecure-skip-tls-verify: true}\n"
    "users:\n- name: u\n  user: {token: abc}\n",
    "ca-file": "clusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443', certificate-authority: ca.crt}\n"
    "users:\n- name: u\n  user: {token: abc}\n",
}


@pytest.mark.parametrize("name", sorted(PLAIN_KUBECONFIGS))
def test_a_plain_kubeconfig_reads_as_the_official_loader_reads_it(tmp_path: Path, name: str) -> None:
    """lockd in a pod never imports the kubernetes package; with a plain kubeconfig (server, CA, token:
    what the simulated clusters and the benchmarks give it) it does not either, and reads the same."""
    (tmp_path / "ca.crt").write_text("not read here")
    user = "u" if "users:\n-" in PLAIN_KUBECONFIGS[name] else ""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        + PLAIN_KUBECONFIGS[name]
        + f"contexts:\n- name: x\n  context: {{cluster: c, user: '{user}'}}\ncurrent-context: x\n"
    )
    plain = kube._plain_kubeconfig(path, context=None)
    assert plain is not None
    assert plain == kube.official_kubeconfig_config(path)
    assert kube.load_config(kubeconfig=path) == plain


async def test_a_kubeconfig_with_an_embedded_key_leaves_no_file_behind(
    tmp_path: Path, aiohttp_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig with its CA, client certificate and key embedded (as the real control plane's admin
    kubeconfig is): the official loader writes them to files; they are read once into the TLS context and
    removed before the config is returned, so a killed lockd or controller leaves no key in the temporary
    folder. The context still presents the certificate to a server that requires one."""
    import base64

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    ca = trustme.CA()
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ssl)
    server_ssl.verify_mode = ssl.CERT_REQUIRED
    ca.configure_trust(server_ssl)
    client_pair = ca.issue_cert("kubernetes-admin")

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"gitVersion": "v1.36.3"})

    app = web.Application()
    app.router.add_get("/version", version)
    server = await aiohttp_server(app, ssl=server_ssl)

    def data(pem: bytes) -> str:
        return base64.b64encode(pem).decode()

    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
        f"    server: https://127.0.0.1:{server.port}\n"
        f"    certificate-authority-data: {data(ca.cert_pem.bytes())}\n"
        "users:\n- name: u\n  user:\n"
        f"    client-certificate-data: {data(client_pair.cert_chain_pems[0].bytes())}\n"
        f"    client-key-data: {data(client_pair.private_key_pem.bytes())}\n"
        "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    config = kube.load_config(kubeconfig=path)
    assert (config.ca_file, config.client_cert, config.client_key) == (None, None, None)
    assert list((tmp_path / "tmp").iterdir()) == []  # nothing left where the loader wrote
    async with aiohttp.ClientSession() as session:
        client = kube.RestClient(session=session, config=config)
        assert (await client.request("GET", "/version"))["gitVersion"] == "v1.36.3"
