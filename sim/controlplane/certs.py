"""The control plane's PKI, laid out as kubeadm lays out /etc/kubernetes/pki.

Three CAs (the cluster CA, etcd's CA and the front-proxy CA), the serving and client certificates the
components use, and the service-account key pair. ECDSA P-256 keys throughout (kubeadm's
`encryptionAlgorithm: ECDSA-P256`): every component accepts them and they take microseconds to make, where
RSA keys would cost most of a second each.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The cluster's Service range by default: 198.19.0.0/16, in the range set aside for benchmarking (RFC 2544),
# never a private range; the test bed's pods (`python -m sim realcluster`) take 198.18.0.0/16 beside it.
SERVICE_CIDR = "198.19.0.0/16"
CLUSTER_DOMAIN = "cluster.local"


def kubernetes_service_ip(service_cidr: str) -> str:
    """The `kubernetes` Service's ClusterIP: the first address of the Service range, as the apiserver
    allocates it (and kubeadm puts it in the apiserver's certificate)."""
    return str(ipaddress.ip_network(service_cidr)[1])


VALIDITY = datetime.timedelta(days=365)

_Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        return self.key.read_bytes()


@dataclass(frozen=True)
class Pki:
    """Where each file is; `ensure_pki` makes them."""

    root: Path

    def pair(self, name: str) -> Pair:
        """The certificate and key named `name` under the PKI root (e.g. nodes/node-1/kubelet)."""
        return Pair(self.root / f"{name}.crt", self.root / f"{name}.key")

    @property
    def ca(self) -> Pair:
        return self.pair("ca")

    @property
    def apiserver(self) -> Pair:
        return self.pair("apiserver")

    @property
    def apiserver_kubelet_client(self) -> Pair:
        return self.pair("apiserver-kubelet-client")

    @property
    def apiserver_etcd_client(self) -> Pair:
        return self.pair("apiserver-etcd-client")

    @property
    def front_proxy_ca(self) -> Pair:
        return self.pair("front-proxy-ca")

    @property
    def front_proxy_client(self) -> Pair:
        return self.pair("front-proxy-client")

    @property
    def etcd_ca(self) -> Pair:
        return self.pair("etcd/ca")

    @property
    def etcd_server(self) -> Pair:
        return self.pair("etcd/server")

    @property
    def etcd_peer(self) -> Pair:
        return self.pair("etcd/peer")

    @property
    def admin(self) -> Pair:
        return self.pair("admin")

    @property
    def controller_manager(self) -> Pair:
        return self.pair("controller-manager")

    @property
    def scheduler(self) -> Pair:
        return self.pair("scheduler")

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"

    def all_files(self) -> list[Path]:
        pairs = [
            self.ca,
            self.apiserver,
            self.apiserver_kubelet_client,
            self.apiserver_etcd_client,
            self.front_proxy_ca,
            self.front_proxy_client,
            self.etcd_ca,
            self.etcd_server,
            self.etcd_peer,
            self.admin,
            self.controller_manager,
            self.scheduler,
        ]
        return [path for pair in pairs for path in (pair.cert, pair.key)] + [self.sa_key, self.sa_pub]


def _new_key() -> _Key:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: _Key) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    """The key usage of every certificate here: signatures and key encipherment, and ``cert_sign`` for the
    CA, which signs the others."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=True,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def _ca(pair: Pair, common_name: str, now: datetime.datetime) -> tuple[x509.Certificate, _Key]:
    key = _new_key()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY * 10)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(pair.key, key)
    _write_cert(pair.cert, cert)
    return cert, key


def _leaf(
    pair: Pair,
    ca: tuple[x509.Certificate, _Key],
    now: datetime.datetime,
    common_name: str,
    *,
    organizations: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> None:
    ca_cert, ca_key = ca
    key = _new_key()
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if dns or ips:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    _write_key(pair.key, key)
    _write_cert(pair.cert, builder.sign(ca_key, hashes.SHA256()))


def ensure_pki(root: Path, *, service_cidr: str = SERVICE_CIDR, addresses: tuple[str, ...] = ()) -> Pki:
    """Makes every file under `root` unless all are there already (a data dir used again keeps its
    CA, so kubeconfigs written before still work). The apiserver's certificate names loopback, the first
    address of `service_cidr` and `addresses` (where else it listens: the nodes' gateway on real nodes)."""
    pki = Pki(root)
    if all(path.exists() for path in pki.all_files()):
        return pki
    now = datetime.datetime.now(datetime.UTC)
    ca = _ca(pki.ca, "kubernetes", now)
    etcd_ca = _ca(pki.etcd_ca, "etcd-ca", now)
    front_proxy_ca = _ca(pki.front_proxy_ca, "front-proxy-ca", now)

    loopback = ("127.0.0.1", "::1")
    _leaf(
        pki.apiserver,
        ca,
        now,
        "kube-apiserver",
        server=True,
        dns=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
        ),
        ips=(*loopback, kubernetes_service_ip(service_cidr), *addresses),
    )
    # system:masters as kubeadm gave it before 1.29 (its newer kubeadm:cluster-admins group needs a binding
    # that only kubeadm makes): lets the apiserver reach kubelets' logs/exec once there are kubelets.
    _leaf(
        pki.apiserver_kubelet_client,
        ca,
        now,
        "kube-apiserver-kubelet-client",
        organizations=("system:masters",),
        client=True,
    )
    _leaf(pki.front_proxy_client, front_proxy_ca, now, "front-proxy-client", client=True)
    _leaf(pki.apiserver_etcd_client, etcd_ca, now, "kube-apiserver-etcd-client", client=True)
    _leaf(
        pki.etcd_server,
        etcd_ca,
        now,
        "etcd-server",
        server=True,
        client=True,
        dns=("localhost",),
        ips=loopback,
    )
    _leaf(
        pki.etcd_peer, etcd_ca, now, "etcd-peer", server=True, client=True, dns=("localhost",), ips=loopback
    )
    _leaf(pki.admin, ca, now, "kubernetes-admin", organizations=("system:masters",), client=True)
    _leaf(pki.controller_manager, ca, now, "system:kube-controller-manager", client=True)
    _leaf(pki.scheduler, ca, now, "system:kube-scheduler", client=True)

    sa = _new_key()
    _write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def issue_client_cert(pki: Pki, pair: Pair, common_name: str, *, organizations: tuple[str, ...] = ()) -> Pair:
    """A client certificate signed by the cluster CA at `pair`, unless one is there already: a node's
    kubelet (`system:node:NAME` in `system:nodes`, which the Node authorizer and NodeRestriction know) or
    its kube-proxy (`system:kube-proxy`, bound to `system:node-proxier` by the apiserver's default RBAC)."""
    if pair.cert.exists() and pair.key.exists():
        return pair
    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert_pem())
    ca_key = serialization.load_pem_private_key(pki.ca.key_pem(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca.key}: not an ECDSA key")
    now = datetime.datetime.now(datetime.UTC)
    _leaf(pair, (ca_cert, ca_key), now, common_name, organizations=organizations, client=True)
    return pair
