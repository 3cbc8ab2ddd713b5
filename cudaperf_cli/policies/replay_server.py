"""A small OpenAI-compatible chat-completions server that serves recorded replies.

For tests, demos and CI: ``cudaperf optimize --policy openai --base-url URL`` talks to it
through the real ``openai`` client, exactly as to ``vllm serve`` or a hosted provider::

    python -m cudaperf_cli.policies.replay_server examples/replies/matmul.jsonl --port 8000
    cudaperf optimize examples/matmul.c --policy openai --base-url http://127.0.0.1:8000/v1 --model replay

Endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``.  A request for ``n``
choices takes the next ``n`` replies (fewer when fewer are left; none left: HTTP 500).
Replies file (JSONL, a line each): ``{"text": "..."}``; ``{"status": 503}`` answers that HTTP
error once (to exercise the client's retries); ``{"sleep": 5, "text": "..."}`` answers after
5 seconds (timeouts).  Usage counts are invented (100 prompt tokens, 50 a reply) and say so
in the ``system_fingerprint``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: Invented token counts of every answer (the server does not tokenise).
PROMPT_TOKENS, COMPLETION_TOKENS = 100, 50


class ReplayServer:
    """Serves ``replies`` on ``host:port`` (port 0: a free one) in a background thread.

    ``replies``: items as in the module docstring, or plain strings (a reply's text) and
    ints (an HTTP error status).  ``ignore_n=True`` answers one choice per request whatever
    ``n`` asks (like servers without ``n`` support).  ``requests`` keeps every request body;
    ``on_request(index, body)`` (optional) runs before each answer.

    Attributes:
        url: the base URL to give the client, ``http://HOST:PORT/v1``.
    """

    def __init__(self, replies: list[Any], host: str = "127.0.0.1", port: int = 0, *,
                 ignore_n: bool = False, on_request: Any = None):
        self.replies = [_item(r) for r in replies]
        self.requests: list[dict[str, Any]] = []
        self.ignore_n = ignore_n
        self.on_request = on_request
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/") == "/v1/models":
                    owner._send(self, 200, {"object": "list", "data": [
                        {"id": "replay", "object": "model", "owned_by": "cudaperf"}]})
                else:
                    owner._send(self, 404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                except ValueError:
                    owner._send(self, 400, {"error": {"message": "body is not JSON"}})
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    owner._send(self, 404, {"error": {"message": f"no route {self.path}"}})
                    return
                status, payload = owner._answer(body)
                owner._send(self, status, payload)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            if self.on_request is not None:
                self.on_request(index, body)
            if not self.replies:
                return 500, {"error": {"message": "the replay server has no replies left"}}
            if "status" in self.replies[0]:
                item = self.replies.pop(0)
                return int(item["status"]), {"error": {"message": f"recorded HTTP {item['status']}"}}
            want = 1 if self.ignore_n else max(1, int(body.get("n") or 1))
            taken = []
            while self.replies and len(taken) < want and "status" not in self.replies[0]:
                taken.append(self.replies.pop(0))
        delay = max((float(t.get("sleep", 0)) for t in taken), default=0.0)
        if delay:
            time.sleep(delay)
        return 200, {
            "id": f"chatcmpl-replay-{index}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "replay"),
            "system_fingerprint": "cudaperf-replay (token counts invented)",
            "choices": [
                {"index": k, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": t["text"]}}
                for k, t in enumerate(taken)
            ],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS * len(taken),
                      "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS * len(taken)},
        }

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            pass

    def close(self) -> None:
        """Stop serving and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "ReplayServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _item(reply: Any) -> dict[str, Any]:
    if isinstance(reply, str):
        return {"text": reply}
    if isinstance(reply, int) and not isinstance(reply, bool):
        reply = {"status": reply}
    if not isinstance(reply, dict) or not (isinstance(reply.get("text"), str) or "status" in reply):
        raise ValueError(f'a reply must be a string, an HTTP status or {{"text": ...}}, not {reply!r}')
    status = reply.get("status")
    if "status" in reply and not (isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599):
        raise ValueError(f"status must be an HTTP error code (400-599), not {status!r}")
    sleep = reply.get("sleep", 0)
    if isinstance(sleep, bool) or not isinstance(sleep, (int, float)) or not 0 <= sleep <= 3600:
        raise ValueError(f"sleep must be seconds between 0 and 3600, not {sleep!r}")
    return dict(reply)


def read_replies(path: Path) -> list[dict[str, Any]]:
    """The replies of a JSONL file (see the module docstring).

    Raises:
        ValueError: a line that is not JSON or not a reply (message names the line).
    """
    out = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text (JSONL expected)") from None
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(_item(json.loads(line)))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None
    if not out:
        raise ValueError(f"{path} holds no replies")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m cudaperf_cli.policies.replay_server FILE [--host H] [--port P]``."""
    import typer

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.command()
    def serve(
        replies: Path = typer.Argument(..., help="JSONL file of replies (see the module docstring)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port (0: any free one)."),
    ) -> None:
        """Serve recorded replies as an OpenAI-compatible chat-completions server."""
        try:
            items = read_replies(replies)
            server = ReplayServer(items, host, port)
        except (OSError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        typer.echo(f"serving {len(items)} replies at {server.url} (Ctrl-C to stop)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            server.close()

    import sys

    try:
        app(args=argv, standalone_mode=False)
    except Exception as exc:  # usage errors (click's), one line like cudaperf's own
        message = getattr(exc, "format_message", None)
        if not callable(message):
            raise
        print(f"error: {message()}", file=sys.stderr)
        sys.exit(int(getattr(exc, "exit_code", 2) or 2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    main()
