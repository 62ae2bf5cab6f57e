"""A tiny HTTP server that tests/test_services.py starts as a real child process.

Routes: ``/health`` (200 once ready, 503 before), ``/pid`` (its process id), ``/env/NAME`` (the
value of an environment variable) and ``/exit`` (answers, then exits with status 0).

Flags shape its behaviour: ``--ready-after S`` answers 503 on /health for S seconds (alive but
not ready), ``--never-ready`` always answers 503, ``--failed-load`` answers 500 (it stays up but
could not load what it serves; with ``--quiet`` it prints nothing), ``--exit-code N`` fails at once with a message
on stderr, ``--exit-if-file PATH`` fails that way (status 5) while PATH exists, and with
``--once`` removes PATH as it does (the next start comes up), ``--pid-file PATH`` writes the pid before anything else, ``--helper-pid-file PATH``
starts a helper process (in the child's process group, as a real server's workers are) and
writes its pid.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int)
    ap.add_argument("--ready-after", type=float, default=0.0)
    ap.add_argument("--never-ready", action="store_true")
    ap.add_argument("--failed-load", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--exit-code", type=int)
    ap.add_argument("--exit-if-file")
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--pid-file")
    ap.add_argument("--helper-pid-file")
    args = ap.parse_args()
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(str(os.getpid()))
    if args.helper_pid_file:
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open(args.helper_pid_file, "w") as f:
            f.write(str(helper.pid))
    if args.exit_if_file and os.path.exists(args.exit_if_file):
        if args.once:
            os.remove(args.exit_if_file)
        args.exit_code = 5
    if args.exit_code is not None:
        print(f"service_child: failing on purpose with status {args.exit_code}", file=sys.stderr, flush=True)
        sys.exit(args.exit_code)
    if args.never_ready:
        print("service_child: loading index (this never finishes)", flush=True)
    if args.failed_load and not args.quiet:
        print("service_child: could not load the index: corpus.jsonl:1: bad line", flush=True)
    ready_at = time.monotonic() + args.ready_after

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health" and args.failed_load:
                self._answer(500, "index failed to load")
            elif self.path == "/health":
                ready = not args.never_ready and time.monotonic() >= ready_at
                self._answer(200 if ready else 503, "ok" if ready else "loading")
            elif self.path == "/pid":
                self._answer(200, str(os.getpid()))
            elif self.path.startswith("/env/"):
                self._answer(200, os.environ.get(self.path[len("/env/"):], ""))
            elif self.path == "/exit":
                self._answer(200, "bye")
                os._exit(0)
            else:
                self._answer(404, "no such route")

        def _answer(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def log_message(self, format: str, *a: object) -> None:
            pass  # keep the log to the lines the tests look for

    server = HTTPServer((args.host, args.port), Handler)
    if not args.quiet:
        print(f"service_child: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
