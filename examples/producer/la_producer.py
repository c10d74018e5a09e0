#!/usr/bin/env python3
"""Submit one detection job to LocateAnything workers over NATS and print its result.

An example producer that needs nothing but the Python standard library: it speaks the
NATS client protocol on a plain socket (TLS through ssl when the server asks for it) and
JetStream's API on top of it, as docs/wire-contract.md describes:

  1. publish the job as JSON to la.jobs.<class> with the header Nats-Msg-Id = the job id,
     as a request, so JetStream answers with a publish acknowledgement (PubAck): the
     stream and sequence the job was stored under, or "duplicate": true when a job with
     that id was already published within the duplicate window (then it is not queued
     again: publishing twice is safe);
  2. read the result from the stream LA_RESULTS through a short-lived consumer that
     delivers the latest message on la.results.<batch>.<id> and then any new one, so a
     result written before we looked (a duplicate, a rerun) is found as well as one
     written later.

Usage (README.md beside this file has more):

  la_producer.py --image file:///data/frames/000123.png --query "red circle</c>blue square"

The result is printed as one line of JSON on stdout; progress goes to stderr. Exit status:
0 when the job succeeded, 3 when it ended otherwise (failed, canceled, expired: the result
says why), 1 on any other error (cannot connect, publish refused, no result in time).
"""

import argparse
import base64
import hashlib
import json
import os
import re
import secrets
import socket
import ssl
import sys
import time
import urllib.parse

# Job ids, batches and classes are single subject tokens (docs/wire-contract.md).
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")
JOBS_STREAM = "LA_JOBS"
RESULTS_STREAM = "LA_RESULTS"
EXIT_OK, EXIT_ERROR, EXIT_NOT_SUCCEEDED = 0, 1, 3


class NatsError(Exception):
    """A failure talking to the NATS server or to JetStream."""


class Msg:
    """One message delivered to a subscription (MSG or HMSG)."""

    def __init__(self, subject, sid, reply, headers, status, data):
        self.subject = subject
        self.sid = sid
        self.reply = reply
        self.headers = headers  # {name: value}; the first value of a repeated name
        self.status = status  # "503" etc. from the header line, "" when none
        self.data = data  # bytes


class Connection:
    """A NATS client connection: just what a producer needs, one thread, no reconnects.

    The protocol is line based: the server greets with INFO {json}; the client answers
    CONNECT {json}; PUB/HPUB send a message, SUB subscribes, and the server delivers with
    MSG/HMSG; either side may send PING, which the other answers with PONG.
    """

    def __init__(self, url, timeout=10.0, name="la_producer", tls_ca=None):
        u = urllib.parse.urlsplit(url if "://" in url else "nats://" + url)
        if u.scheme not in ("nats", "tls"):
            raise NatsError(f"server URL {url!r}: scheme must be nats:// or tls://")
        self.timeout = timeout
        self.sid = 0
        self.subs = {}  # sid -> subject
        self.pending = []  # messages read while waiting for another one
        self._buf = bytearray()
        host, port = u.hostname or "127.0.0.1", u.port or 4222
        try:
            self._sock = socket.create_connection((host, port), timeout)
        except OSError as e:
            raise NatsError(f"connect to {host}:{port}: {e}") from e
        self.info = self._read_info()
        tls = u.scheme == "tls" or bool(self.info.get("tls_required"))
        if tls:
            ctx = ssl.create_default_context(cafile=tls_ca)
            try:
                self._sock = ctx.wrap_socket(self._sock, server_hostname=host)
            except (OSError, ssl.SSLError) as e:
                raise NatsError(f"TLS with {host}:{port}: {e}") from e
        connect = {"verbose": False, "pedantic": False, "tls_required": tls,
                   "name": name, "lang": "python3-stdlib", "version": "1", "protocol": 1,
                   "headers": True, "no_responders": True}
        if u.username and u.password is not None:
            connect["user"] = urllib.parse.unquote(u.username)
            connect["pass"] = urllib.parse.unquote(u.password)
        elif u.username:
            connect["auth_token"] = urllib.parse.unquote(u.username)
        if not self.info.get("headers"):
            raise NatsError("the server does not support message headers (NATS 2.2 or later is needed)")
        self._send(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        # The server answers the PING only once it has accepted CONNECT; a refusal
        # (authorization, say) arrives as -ERR instead.
        self._wait_pong()

    def close(self):
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Sending.

    def _send(self, data):
        try:
            self._sock.sendall(data)
        except OSError as e:
            raise NatsError(f"send to the NATS server: {e}") from e

    def subscribe(self, subject):
        """Subscribes to subject (wildcards allowed) and returns the subscription id."""
        self.sid += 1
        self.subs[self.sid] = subject
        self._send(f"SUB {subject} {self.sid}\r\n".encode())
        return self.sid

    def unsubscribe(self, sid):
        self.subs.pop(sid, None)
        self._send(f"UNSUB {sid}\r\n".encode())

    def publish(self, subject, data, reply=None, headers=None):
        """Publishes data; with headers the message goes as HPUB, else as PUB."""
        max_payload = self.info.get("max_payload", 1 << 20)
        reply_part = f" {reply}" if reply else ""
        if headers:
            block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            hdr = block.encode()
            if len(hdr) + len(data) > max_payload:
                raise NatsError(f"message of {len(hdr) + len(data)} bytes is over the server's max_payload {max_payload}")
            line = f"HPUB {subject}{reply_part} {len(hdr)} {len(hdr) + len(data)}\r\n".encode()
            self._send(line + hdr + data + b"\r\n")
        else:
            if len(data) > max_payload:
                raise NatsError(f"message of {len(data)} bytes is over the server's max_payload {max_payload}")
            self._send(f"PUB {subject}{reply_part} {len(data)}\r\n".encode() + data + b"\r\n")

    def flush(self):
        """Returns once the server has processed everything sent so far."""
        self._send(b"PING\r\n")
        self._wait_pong()

    # Receiving.

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self._sock.settimeout(remaining)
        try:
            chunk = self._sock.recv(65536)
        except socket.timeout as e:
            raise TimeoutError from e
        except OSError as e:
            raise NatsError(f"read from the NATS server: {e}") from e
        if not chunk:
            raise NatsError("the NATS server closed the connection")
        self._buf += chunk

    def _read_line(self, deadline):
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 2]
                return line.decode()
            self._fill(deadline)

    def _read_exact(self, n, deadline):
        while len(self._buf) < n + 2:  # the payload and its \r\n
            self._fill(deadline)
        data = bytes(self._buf[:n])
        del self._buf[: n + 2]
        return data

    def _read_info(self):
        line = self._read_line(time.monotonic() + self.timeout)
        op, _, body = line.partition(" ")
        if op != "INFO":
            raise NatsError(f"not a NATS server: it greeted with {line[:80]!r}")
        return json.loads(body)

    def _next(self, deadline):
        """Reads until a message arrives (returned) or PONG (None), answering PINGs."""
        while True:
            line = self._read_line(deadline)
            op, _, rest = line.partition(" ")
            op = op.upper()
            if op == "PING":
                self._send(b"PONG\r\n")
            elif op == "PONG":
                return None
            elif op in ("+OK", "INFO"):
                continue
            elif op == "-ERR":
                raise NatsError(f"the NATS server refused: {rest.strip()}")
            elif op == "MSG":
                parts = rest.split()
                subject, sid, size = parts[0], int(parts[1]), int(parts[-1])
                reply = parts[2] if len(parts) == 4 else None
                return Msg(subject, sid, reply, {}, "", self._read_exact(size, deadline))
            elif op == "HMSG":
                parts = rest.split()
                subject, sid, hdr_len, total = parts[0], int(parts[1]), int(parts[-2]), int(parts[-1])
                reply = parts[2] if len(parts) == 5 else None
                raw = self._read_exact(total, deadline)
                headers, status = parse_headers(raw[:hdr_len])
                return Msg(subject, sid, reply, headers, status, raw[hdr_len:])
            else:
                raise NatsError(f"unexpected line from the NATS server: {line[:80]!r}")

    def _wait_pong(self):
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                m = self._next(deadline)
            except TimeoutError:
                raise NatsError(f"no answer from the NATS server in {self.timeout}s") from None
            if m is None:
                return
            self.pending.append(m)

    def next_msg(self, sid, timeout):
        """The next message for subscription sid; raises TimeoutError after timeout seconds.
        Messages for other subscriptions that arrive meanwhile are kept for later."""
        for i, m in enumerate(self.pending):
            if m.sid == sid:
                return self.pending.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            m = self._next(deadline)
            if m is None:
                continue
            if m.sid == sid:
                return m
            if m.sid in self.subs:
                self.pending.append(m)

    def request(self, subject, data, headers=None, timeout=None):
        """Publishes data with a fresh reply subject and returns the first answer."""
        inbox = "_INBOX." + secrets.token_hex(11)
        sid = self.subscribe(inbox)
        try:
            self.publish(subject, data, reply=inbox, headers=headers)
            return self.next_msg(sid, timeout or self.timeout)
        finally:
            self.unsubscribe(sid)


def parse_headers(block):
    """Parses a NATS header block: 'NATS/1.0[ status[ text]]' then 'Name: value' lines."""
    lines = block.decode(errors="replace").split("\r\n")
    status = lines[0][len("NATS/1.0"):].strip().split(" ", 1)[0] if lines else ""
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip() not in headers:
            headers[name.strip()] = value.strip()
    return headers, status


def js_api(conn, subject, body):
    """Calls a JetStream API subject with a JSON body; returns the JSON answer."""
    try:
        m = conn.request(subject, json.dumps(body).encode())
    except TimeoutError:
        raise NatsError(f"JetStream did not answer {subject} in {conn.timeout}s") from None
    if m.status == "503":
        raise NatsError("JetStream is not enabled on this server (no responders)")
    answer = json.loads(m.data)
    if "error" in answer:
        e = answer["error"]
        raise NatsError(f"{subject}: {e.get('description')} (code {e.get('code')}, err_code {e.get('err_code')})")
    return answer


def publish_job(conn, subject, job, headers, attempts=5):
    """Publishes the job to JetStream and returns its PubAck ({"stream", "seq",
    "duplicate"?}). A timeout is retried with the same Nats-Msg-Id, which JetStream
    deduplicates, so a job is never queued twice by a retry."""
    data = json.dumps(job, ensure_ascii=False, separators=(",", ":")).encode()
    headers = {**headers, "Nats-Msg-Id": job["id"]}
    wait = 0.25
    for attempt in range(1, attempts + 1):
        try:
            m = conn.request(subject, data, headers=headers)
        except TimeoutError:
            if attempt == attempts:
                raise NatsError(f"no publish acknowledgement for {subject} after {attempts} tries") from None
            time.sleep(wait)
            wait *= 2
            continue
        if m.status == "503":
            raise NatsError(f"no stream takes {subject}: is a worker running? (it creates {JOBS_STREAM})")
        ack = json.loads(m.data)
        if "error" in ack:
            e = ack["error"]
            raise NatsError(f"publish refused: {e.get('description')} (code {e.get('code')}, err_code {e.get('err_code')})")
        return ack


def watch_result(conn, batch, job_id):
    """Starts delivery of the result of job_id from LA_RESULTS: the latest one already
    stored, if any, then each new one. Returns (subscription id, consumer name)."""
    deliver = "_INBOX." + secrets.token_hex(11)
    sid = conn.subscribe(deliver)  # before the consumer exists, so nothing is missed
    config = {
        "deliver_subject": deliver,
        "filter_subject": f"la.results.{batch}.{job_id}",
        "deliver_policy": "last_per_subject",
        "ack_policy": "none",
        "replay_policy": "instant",
        "mem_storage": True,
        "num_replicas": 1,
        "inactive_threshold": 60 * 10**9,  # nanoseconds: removed by the server a minute after we go
    }
    answer = js_api(conn, f"$JS.API.CONSUMER.CREATE.{RESULTS_STREAM}",
                    {"stream_name": RESULTS_STREAM, "config": config})
    return sid, answer["name"]


def full_result(text):
    """The result (decoded, and its JSON text as the worker wrote it) given the published
    text: for a truncated reference, the whole result read from its result_url when that
    is a file we can read; otherwise the reference itself (docs/wire-contract.md, "Results
    larger than a message")."""
    result = json.loads(text)
    url = result.get("result_url", "")
    if not result.get("truncated"):
        return result, text
    if url.startswith("file://"):
        try:
            with open(urllib.parse.unquote(url[len("file://"):]), encoding="utf-8") as f:
                whole = f.read()
            return json.loads(whole), whole
        except (OSError, ValueError) as e:
            log(f"cannot read {url}: {e}")
    log(f"result {result['id']} was too large for a message: read it whole from {url or '(not stored)'}")
    return result, text


def default_id(job):
    """A job id from the job's fields: the same command gives the same id, so running it
    twice publishes one job (JetStream drops the duplicate)."""
    digest = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).digest()
    return "py-" + base64.b32encode(digest[:15]).decode().lower()


def build_job(args):
    if args.job:
        with (sys.stdin if args.job == "-" else open(args.job, encoding="utf-8")) as f:
            job = json.load(f)
        if not isinstance(job, dict):
            raise ValueError("--job must hold one JSON object")
    else:
        if not args.image or not args.query:
            raise ValueError("--image and --query are required (or give a whole job with --job)")
        job = {"image": args.image, "query": args.query}
        optional = {"task": args.task, "max_new_tokens": args.max_new_tokens, "output": args.output,
                    "deadline": args.deadline, "overlay_format": args.overlay_format}
        job.update({k: v for k, v in optional.items() if v is not None})
        if args.overlay:
            job["overlay"] = True
        if args.batch:
            job["batch"] = args.batch
        if args.metadata:
            try:
                job["metadata"] = json.loads(args.metadata)
            except ValueError as e:
                raise ValueError(f"--metadata is not JSON: {e}") from None
            if not isinstance(job["metadata"], dict):
                raise ValueError("--metadata must be a JSON object")
        if args.id:
            job["id"] = args.id
    job.setdefault("id", default_id(job))
    # The worker would fail such a job (invalid_job) under another id or batch than the
    # one we wait for: refuse it here with a clear message instead.
    for what, value in (("id", job["id"]), ("batch", job.get("batch") or "default"), ("class", args.job_class)):
        if not isinstance(value, str) or not TOKEN.fullmatch(value):
            raise ValueError(f"{what} {value!r} must be 1-128 characters of [A-Za-z0-9_-]")
    return job


def log(msg):
    print(f"la_producer: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Submit one detection job to LocateAnything workers over NATS and print its result.",
        epilog="Exit status: 0 succeeded, 3 the job ended otherwise (the result says why), 1 any other error.")
    p.add_argument("--server", metavar="URL", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
                   help="NATS server: nats://[user:pass@]host:port, or tls://...; env NATS_URL (default %(default)s)")
    p.add_argument("--tls-ca", metavar="FILE", help="CA certificate file for a tls:// server (default: the system's)")
    p.add_argument("--image", metavar="URL", help="s3://bucket/key, or file:///abs/path where the worker allows local files")
    p.add_argument("--query", metavar="TEXT", help='what to find; several categories joined with </c>: "person</c>car"')
    p.add_argument("--id", help="job id, 1-128 of [A-Za-z0-9_-] (default: a hash of the job, so reruns deduplicate)")
    p.add_argument("--batch", help="batch; picks the result subject la.results.<batch>.<id> (default: default)")
    p.add_argument("--class", dest="job_class", default="default", metavar="CLASS", help="publish to la.jobs.<class> (default %(default)s)")
    p.add_argument("--task", choices=["detect", "ground", "ground_one", "point", "text", "region"])
    p.add_argument("--max-new-tokens", type=int, metavar="N", help="generation budget (default: the worker's)")
    p.add_argument("--overlay", action="store_true", help="also store the overlay picture")
    p.add_argument("--overlay-format", choices=["png", "jpeg"])
    p.add_argument("--output", metavar="URL", help="URL prefix for the result files (default: the worker's)")
    p.add_argument("--deadline", metavar="TIME", help="RFC 3339 time after which the job is not started")
    p.add_argument("--metadata", metavar="JSON", help="a JSON object echoed back in the result")
    p.add_argument("--job", metavar="FILE", help="send this JSON job file instead ('-' = stdin); the other job flags are ignored")
    p.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                   help="an extra NATS header on the job message (e.g. traceparent=...); repeatable")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS", help="seconds to wait for the result (default %(default)s)")
    p.add_argument("--no-wait", action="store_true", help="publish and exit without waiting for the result")
    p.add_argument("--pretty", action="store_true", help="indent the printed result")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        job = build_job(args)
        headers = {}
        for h in args.header:
            name, sep, value = h.partition("=")
            if not sep or not name:
                raise ValueError(f"--header {h!r}: want NAME=VALUE")
            headers[name] = value
    except (OSError, ValueError) as e:
        log(str(e))
        return EXIT_ERROR
    subject = f"la.jobs.{args.job_class}"
    batch = job.get("batch") or "default"
    try:
        with Connection(args.server, tls_ca=args.tls_ca) as conn:
            watch = None if args.no_wait else watch_result(conn, batch, job["id"])
            ack = publish_job(conn, subject, job, headers)
            if ack.get("duplicate"):
                log(f"job {job['id']} was already published ({ack['stream']} seq {ack['seq']}): not queued again")
            else:
                log(f"published job {job['id']} to {subject} ({ack['stream']} seq {ack['seq']})")
            if watch is None:
                return EXIT_OK
            sid, consumer = watch
            log(f"waiting up to {args.timeout:g}s for la.results.{batch}.{job['id']}")
            try:
                m = conn.next_msg(sid, args.timeout)
            except TimeoutError:
                log(f"no result for job {job['id']} within {args.timeout:g}s (it may still be queued)")
                return EXIT_ERROR
            conn.unsubscribe(sid)
            try:  # tidy up now rather than after the inactive threshold
                js_api(conn, f"$JS.API.CONSUMER.DELETE.{RESULTS_STREAM}.{consumer}", {})
            except NatsError:
                pass
    except (OSError, NatsError) as e:
        log(str(e))
        return EXIT_ERROR
    result, text = full_result(m.data.decode())
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.pretty else text.strip())
    log(f"job {result['id']}: {result['status']}" +
        (f" ({result['error']['code']}: {result['error']['message']})" if result.get("error") else ""))
    return EXIT_OK if result["status"] == "succeeded" else EXIT_NOT_SUCCEEDED


if __name__ == "__main__":
    sys.exit(main())
