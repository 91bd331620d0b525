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
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from kgpu.computedomain.admission import Mutation
from kgpu.metrics.serving import ServerThread, http_server, send_reply

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


class AdmissionServer:
    """HTTPS server of :func:`review` on ``host:port`` (port 0: any free one)."""

    def __init__(
        self,
        address: tuple[str, int],
        cert_file: Path,
        key_file: Path,
        mutate: Mutate,
    ) -> None:
        self._address = address
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._context.load_cert_chain(str(cert_file), str(key_file))
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
            protocol_version = "HTTP/1.1"
            timeout = 10  # a client that stalls mid-request loses its connection

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

        server = http_server(self._address, Handler)
        # the TLS handshake happens on the connection's own thread, not in accept()
        server.socket = self._context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
        self._serving = ServerThread(server, "webhook").start()
        return self

    def stop(self) -> None:
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.stop()
