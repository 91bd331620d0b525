"""The mutating admission webhook that places a ComputeDomain's pods in one NVLink clique.

The decision is :func:`kgpu.computedomain.admission.mutate_pod` (pure); this module serves it
the way the API server calls webhooks: HTTPS (the Helm chart makes the certificate and puts
its CA in the MutatingWebhookConfiguration), ``POST /mutate-pods`` with an
``admission.k8s.io/v1`` AdmissionReview, answered with the same request ``uid``, ``allowed:
true`` and, for a pod that uses a domain's channel, a base64 JSON Patch. Every replica serves
it, leader or not (reads only: informers and one GET of a named ResourceClaim), so admission
keeps working while leadership moves.

It never refuses a pod: a request it cannot read is a 400 (the API server applies the
webhook's ``failurePolicy``); a pod it cannot place is admitted unchanged with a warning,
because refusing would block workloads whenever the controller lags.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from kgpu.computedomain.admission import Mutation
from kgpu.metrics.serving import Limits, PooledHTTPServer, ServerThread, send_reply

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PATH = "/mutate-pods"
REVIEW_API = "admission.k8s.io/v1"
#: The API server sends at most ~3 MiB objects; anything larger is not a pod review.
MAX_BODY = 4 * 1024 * 1024

Mutate = Callable[[Obj, str], Mutation]


class ReviewError(ValueError):
    """An AdmissionReview that cannot be answered (the HTTP answer is 400)."""


def review(body: Obj, mutate: Mutate) -> Obj:
    """The AdmissionReview answering ``body``; :class:`ReviewError` when it is not one."""
    if body.get("apiVersion") != REVIEW_API or body.get("kind") != "AdmissionReview":
        raise ReviewError(
            f"expected an {REVIEW_API} AdmissionReview, got "
            f"{body.get('apiVersion')!r} {body.get('kind')!r}"
        )
    request = body.get("request")
    if not isinstance(request, dict) or not request.get("uid"):
        raise ReviewError("request.uid is missing")
    response: Obj = {"uid": request["uid"], "allowed": True}
    answer = {"apiVersion": REVIEW_API, "kind": "AdmissionReview", "response": response}
    kind = request.get("kind") or {}
    pod = request.get("object")
    if (
        kind.get("kind") != "Pod"
        or kind.get("group", "") != ""
        or request.get("operation") != "CREATE"
        or not isinstance(pod, dict)
    ):
        return answer  # not ours to change
    namespace = str(
        request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "default"
    )
    try:
        mutation = mutate(pod, namespace)
    except Exception as exc:  # never block a pod on our failure: admit it, say why
        log.exception("admission of a pod in %s failed", namespace)
        response["warnings"] = [f"kgpu: NVLink clique placement not applied: {exc}"[:256]]
        return answer
    if mutation.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(mutation.patch).encode()).decode()
    return answer


#: TLS 1.2 suites: AEAD with forward secrecy only (no CBC, no RSA key exchange); TLS 1.3's
#: suites are all AEAD.
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
#: At most one look at the certificate files per this many seconds.
RELOAD_CHECK_S = 1.0
#: Connections, workers and bytes of the webhook (kgpu.metrics.serving): the API server sends
#: a few concurrent reviews of at most ~3 MiB.
LIMITS = Limits(
    workers=4,
    max_connections=64,
    read_timeout=10.0,
    idle_timeout=30.0,
    max_request_bytes=MAX_BODY + 16 * 1024,
    max_buffered_bytes=64 * 1024 * 1024,
)


def _stamp(paths: tuple[Path, ...]) -> tuple[tuple[int, int, int], ...]:
    stamps = []
    for path in paths:
        st = path.stat()
        stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamps)


class TLSFiles:
    """The webhook's server TLS context, rebuilt when ``tls.crt``/``tls.key`` (or the client
    CA) change on disk, as cert-manager or a Secret volume update them: the next handshake
    serves the new certificate, no restart. A pair that does not load (half-written) keeps
    the previous context and is logged once. TLS 1.2+ with AEAD suites only, renegotiation
    off; with ``client_ca`` every client must present a certificate it signed (the API
    server's, when kube-apiserver is configured to send one)."""

    def __init__(self, cert_file: Path, key_file: Path, client_ca: Path | None = None) -> None:
        self.files = (cert_file, key_file) + ((client_ca,) if client_ca else ())
        self.client_ca = client_ca
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp = _stamp(self.files)
        self._context = self._load()

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(CIPHERS)
        context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
        context.load_cert_chain(str(self.files[0]), str(self.files[1]))
        if self.client_ca is not None:
            context.load_verify_locations(cafile=str(self.client_ca))
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def __call__(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked < RELOAD_CHECK_S:
                return self._context
            self._checked = now
            stamp = self._stamp
            try:
                stamp = _stamp(self.files)
                if stamp != self._stamp:
                    self._context = self._load()
                    self._stamp = stamp
                    log.info("webhook: certificate reloaded from %s", self.files[0])
            except (OSError, ssl.SSLError) as exc:
                if stamp != self._stamp:
                    log.warning("webhook: keeping the previous certificate: %s", exc)
                    self._stamp = stamp
            return self._context


class AdmissionServer:
    """HTTPS server of :func:`review` on ``host:port`` (port 0: any free one)."""

    def __init__(
        self,
        address: tuple[str, int],
        cert_file: Path,
        key_file: Path,
        mutate: Mutate,
        *,
        client_ca: Path | None = None,
    ) -> None:
        self._address = address
        self.tls = TLSFiles(cert_file, key_file, client_ca)
        self.mutate = mutate
        self._serving: ServerThread | None = None
        self.reviews = 0
        self.patched = 0

    @property
    def port(self) -> int:
        return self._serving.port if self._serving is not None else 0

    @property
    def serving(self) -> bool:
        return self._serving is not None and self._serving.alive

    def start(self) -> AdmissionServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # kept alive between reviews, idle_timeout

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("webhook: " + format, *args)

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != PATH:
                    send_reply(self, 404, b"not found\n", "text/plain")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 < length <= MAX_BODY:
                    code = 413 if length > MAX_BODY else 400
                    send_reply(self, code, b"bad length\n", "text/plain")
                    return
                try:
                    body = json.loads(self.rfile.read(length))
                    if not isinstance(body, dict):
                        raise ReviewError("the body is not a JSON object")
                    answer = review(body, owner.mutate)
                except (ValueError, ReviewError) as exc:
                    send_reply(self, 400, f"{exc}\n".encode(), "text/plain")
                    return
                owner.reviews += 1
                if "patch" in answer["response"]:
                    owner.patched += 1
                send_reply(self, 200, json.dumps(answer).encode(), "application/json")

        # the TLS handshake happens in the event loop, non-blocking, with the read deadline
        server = PooledHTTPServer(
            self._address, Handler, name="webhook", limits=LIMITS, tls=self.tls
        )
        self._serving = ServerThread(server, "webhook").start()
        return self

    def stop(self) -> None:
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.stop()
