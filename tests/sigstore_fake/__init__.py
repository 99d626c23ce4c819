"""An offline Sigstore instance for tests: fake Fulcio, fake Rekor, a GitHub-style OIDC token
endpoint, and the ClientTrustConfig that points sigstore-python at them. Test code only.

One HTTP server on 127.0.0.1 (ephemeral port) serves:
- `POST /api/v2/signingCert`: checks the HS256 bearer JWT (aud=sigstore) and the CSR's
  proof of possession, issues a 10-minute leaf with an embedded SCT (see `ca`);
- `POST /api/v1/log/entries`: accepts dsse/0.0.1 entries, returns them with an inclusion proof,
  a signed checkpoint and a signed entry timestamp (see `log`);
- `GET /oidc/token`: GitHub Actions' `ACTIONS_ID_TOKEN_REQUEST_URL` protocol (bearer request
  token in, `{"value": jwt}` out).

`shared()` returns one instance per test session (started on first use, stopped at exit).
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .ca import FakeCA, spki_der
from .log import FakeLog, LogError

AUDIENCE = "sigstore"
TEST_ISSUER = "https://issuer.trace.test"
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
REQUEST_TOKEN = "fake-actions-request-token"
_B64 = base64.b64encode


class FakeSigstore:
    def __init__(self) -> None:
        self.secret = "trace-test-hs256-secret-0123456789abcdef"
        self.ca = FakeCA()
        self.requests: list[str] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        host, port = self.httpd.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self.log = FakeLog(self.url, f"{host!s}:{port}")
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- tokens -------------------------------------------------------------------------------
    def token(
        self,
        *,
        email: str | None = "signer@trace.test",
        issuer: str = TEST_ISSUER,
        sub: str = "signer",
        lifetime: int = 300,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": issuer,
            "sub": sub,
            "aud": AUDIENCE,
            "iat": now,
            "nbf": now - 5,
            "exp": now + lifetime,
            **claims,
        }
        if email is not None:
            body["email"] = email
            body["email_verified"] = True
        return jwt.encode(body, self.secret, algorithm="HS256")

    # --- trust config -------------------------------------------------------------------------
    def trust_config(self) -> dict[str, Any]:
        start = "2020-01-01T00:00:00Z"

        def pub(key: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
            return {
                "rawBytes": _B64(spki_der(key.public_key())).decode(),
                "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                "validFor": {"start": start},
            }

        root_der = self.ca.root.public_bytes(serialization.Encoding.DER)
        ct_id = _B64(hashlib.sha256(spki_der(self.ca.ct_key.public_key())).digest())
        return {
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": {
                "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
                "tlogs": [
                    {
                        "baseUrl": self.url,
                        "hashAlgorithm": "SHA2_256",
                        "publicKey": pub(self.log.key),
                        "logId": {"keyId": _B64(self.log.log_id).decode()},
                    }
                ],
                "certificateAuthorities": [
                    {
                        "subject": {"organization": "trace tests", "commonName": "fake-fulcio"},
                        "uri": self.url,
                        "certChain": {"certificates": [{"rawBytes": _B64(root_der).decode()}]},
                        "validFor": {"start": start},
                    }
                ],
                "ctlogs": [
                    {
                        "baseUrl": self.url + "/ct",
                        "hashAlgorithm": "SHA2_256",
                        "publicKey": pub(self.ca.ct_key),
                        "logId": {"keyId": ct_id.decode()},
                    }
                ],
                "timestampAuthorities": [],
            },
            "signingConfig": {
                "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                "caUrls": [
                    {
                        "url": self.url,
                        "majorApiVersion": 1,
                        "validFor": {"start": start},
                        "operator": "trace-tests",
                    }
                ],
                "oidcUrls": [],
                "rekorTlogUrls": [
                    {
                        "url": self.url,
                        "majorApiVersion": 1,
                        "validFor": {"start": start},
                        "operator": "trace-tests",
                    }
                ],
                "tsaUrls": [],
                "rekorTlogConfig": {"selector": "ANY"},
                "tsaConfig": {"selector": "ANY"},
            },
        }

    def write_trust_config(self, path: Path) -> Path:
        path.write_text(json.dumps(self.trust_config(), indent=2))
        return path

    # --- HTTP ---------------------------------------------------------------------------------
    def _signing_cert(self, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return 401, {"code": 401, "message": "missing bearer token"}
        try:
            claims = jwt.decode(
                auth[7:], self.secret, algorithms=["HS256"], audience=AUDIENCE, leeway=5
            )
        except jwt.PyJWTError as exc:
            return 401, {"code": 401, "message": f"invalid identity token: {exc}"}
        csr_pem = base64.b64decode(json.loads(body)["certificateSigningRequest"])
        csr = x509.load_pem_x509_csr(csr_pem)
        if not csr.is_signature_valid:
            return 400, {"code": 400, "message": "CSR signature invalid"}
        pub = csr.public_key()
        if not isinstance(pub, ec.EllipticCurvePublicKey):
            return 400, {"code": 400, "message": "only ECDSA keys"}
        san: x509.GeneralName
        if "email" in claims:
            san = x509.RFC822Name(claims["email"])
        elif "job_workflow_ref" in claims:
            san = x509.UniformResourceIdentifier("https://github.com/" + claims["job_workflow_ref"])
        else:
            san = x509.UniformResourceIdentifier(str(claims["sub"]))
        leaf = self.ca.issue(pub, san=san, issuer=str(claims["iss"]))
        pems = [c.public_bytes(serialization.Encoding.PEM).decode() for c in (leaf, self.ca.root)]
        return 201, {"signedCertificateEmbeddedSct": {"chain": {"certificates": pems}}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _reply(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                fake.requests.append(f"GET {url.path}")
                if url.path != "/oidc/token":
                    return self._reply(404, {"code": 404, "message": "not found"})
                if self.headers.get("Authorization", "").lower() != f"bearer {REQUEST_TOKEN}":
                    return self._reply(403, {"message": "bad request token"})
                audience = parse_qs(url.query).get("audience", [""])[0]
                token = fake.token(
                    email=None,
                    issuer=GITHUB_ISSUER,
                    sub="repo:trace/fork:ref:refs/heads/main",
                    job_workflow_ref="trace/fork/.github/workflows/verify.yml@refs/heads/main",
                    aud=audience,
                )
                self._reply(200, {"value": token})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(min(length, 1 << 20))
                fake.requests.append(f"POST {self.path}")
                try:
                    if self.path == "/api/v2/signingCert":
                        return self._reply(*fake._signing_cert(self.headers, body))
                    if self.path == "/api/v1/log/entries":
                        return self._reply(201, fake.log.append(json.loads(body)))
                except (LogError, ValueError, KeyError) as exc:
                    return self._reply(400, {"code": 400, "message": str(exc)})
                self._reply(404, {"code": 404, "message": "not found"})

        return Handler


def reissue_with_bad_sct(fake: FakeSigstore, bundle_json: str) -> str:
    """The same Sigstore bundle with its leaf re-issued by the fake CA for the same key and
    identity, but with an SCT no trusted CT log signed: chain and DSSE signature still hold."""
    from cryptography.x509.oid import ObjectIdentifier

    doc = json.loads(bundle_json)
    material = doc["verificationMaterial"]
    old = x509.load_der_x509_certificate(base64.b64decode(material["certificate"]["rawBytes"]))
    pub = old.public_key()
    assert isinstance(pub, ec.EllipticCurvePublicKey)
    san = old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    issuer = old.extensions.get_extension_for_oid(ObjectIdentifier("1.3.6.1.4.1.57264.1.1"))
    assert isinstance(issuer.value, x509.UnrecognizedExtension)
    leaf = fake.ca.issue(
        pub,
        san=next(iter(san)),
        issuer=issuer.value.value.decode(),
        sct_key=ec.generate_private_key(ec.SECP256R1()),
        valid=(old.not_valid_before_utc, old.not_valid_after_utc),
    )
    material["certificate"]["rawBytes"] = _B64(
        leaf.public_bytes(serialization.Encoding.DER)
    ).decode()
    return json.dumps(doc)


_shared: FakeSigstore | None = None
_shared_lock = threading.Lock()


def shared() -> FakeSigstore:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = FakeSigstore()
            atexit.register(_shared.stop)
        return _shared
