"""A fake OAuth 2.0 token endpoint (loopback only) for the credential-failure tests.

Modes: ``"ok"`` answers a bearer token; ``"revoked"`` answers 400 ``invalid_grant`` "Invalid JWT
Signature." (Google's answer for a deleted or disabled service-account key; a revoked user login gets
``invalid_grant`` "Token has been expired or revoked."); ``"unavailable"`` answers 503 (google-auth retries it). The
wire shapes are RFC 6749 §5.1 / §5.2. `blackhole` is a listening socket that accepts nothing and never
answers: a token endpoint this machine cannot get an answer from.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class TokenEndpoint:
    """The ASGI app (``app``) and what it saw (``requests``: the form fields of each POST)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.requests: list[dict[str, str]] = []
        self.app = Starlette(routes=[Route("/token", self.token, methods=["POST"])])

    async def token(self, request: Request) -> JSONResponse:
        form = await request.form()
        self.requests.append({k: str(v) for k, v in form.items()})
        if self.mode == "revoked":
            return JSONResponse(
                {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, 400
            )
        if self.mode == "unavailable":
            return JSONResponse({"error": "internal_failure", "error_description": "Backend Error"}, 503)
        return JSONResponse(
            {"access_token": "ya29.fake-token-for-tests", "expires_in": 3599, "token_type": "Bearer"}
        )


def service_account_file(directory: Path, token_uri: str) -> Path:
    """A service-account key file (the shape ``gcloud iam service-accounts keys create`` writes, with a
    fresh RSA key) whose token endpoint is ``token_uri``. A key file, not gcloud's ``authorized_user``
    login: google-auth always sends a login's refresh to Google's own token endpoint, whatever the file
    says (``google/oauth2/credentials.py`` ``from_authorized_user_info``), and tests reach only loopback."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path = directory / "sa-key.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "demo-project",
                "private_key_id": "0123456789abcdef0123456789abcdef01234567",
                "private_key": pem,
                "client_email": "tpu-devops-test@demo-project.iam.gserviceaccount.com",
                "client_id": "100000000000000000001",
                "token_uri": token_uri,
            }
        )
    )
    return path


@contextlib.contextmanager
def blackhole() -> Iterator[str]:
    """``http://127.0.0.1:PORT/token`` of a socket that listens (connections complete in the kernel's
    backlog) but is never read: every request waits for an answer that does not come."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/token"
    finally:
        sock.close()
