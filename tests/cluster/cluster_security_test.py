#!/usr/bin/env python3
"""Attacks on a worker node's port, as real processes on loopback (issue 13, defects 2 and 3).

  - Replay: a tiny TCP relay between a head and a node records what the head sends; the
    recording, replayed on a fresh connection by someone without the secret (to the node's
    port, and past the gate straight to its loopback middleman), runs nothing: the node's
    stats count no new prompt, and the node stays healthy.
  - BASP bomb: a 32-byte CAF frame header announcing a 4 GiB payload, on 20 sockets at once,
    leaves the node's RSS flat; the node closes them at its handshake deadline. The same header
    sent after a valid gate handshake closes that connection (--max-message-bytes). Connections
    beyond the cap on unauthenticated ones are closed at once. A real head still joins and gets
    correct tokens afterwards.

Usage: python3 tests/cluster/cluster_security_test.py path/to/actorlm
"""
import hashlib
import hmac
import os
import re
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_process import ServerProcess, stop_process  # noqa: E402
from cluster_test import NodeProcess, check, complete, nodes, wait_for  # noqa: E402

BIN = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="actorlm-cluster-security-")
SECRET_TEXT = b"correct horse battery staple 1f3a"
SECRET = os.path.join(WORK, "secret")
with open(SECRET, "wb") as f:
    f.write(SECRET_TEXT + b"\n")
BOMB = struct.pack(">BBBBIQQQ", 1, 0, 0, 0, 0xFFFFFFFF, 0, 0, 0)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def closed_within(s, seconds):
    """True when the peer closes `s` within `seconds` (whatever it sent before)."""
    s.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not s.recv(4096):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True
    return False


def gate_handshake(port):
    """The dialer's side of the node's gate handshake (actors/tcp_gate.hpp), with the secret."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    mine = os.urandom(32)
    s.sendall(b"ALMGATE1" + mine)
    hello = recv_exact(s, 40)
    check(hello[:8] == b"ALMGATE1", hello)
    theirs = hello[8:]
    s.sendall(hmac.new(SECRET_TEXT, b"actorlm-gate-dialer" + mine + theirs, hashlib.sha256).digest())
    verdict = recv_exact(s, 33)
    check(verdict[0] == 0, "the gate refused the right secret")
    check(verdict[1:] == hmac.new(SECRET_TEXT, b"actorlm-gate-acceptor" + mine + theirs, hashlib.sha256).digest(), "the gate's verdict does not carry the acceptor's HMAC of both nonces")
    return s


class Recorder:
    """Relays 127.0.0.1:port to a target and keeps every byte the client side sent."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.sent = []  # one bytearray per accepted connection
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            record = bytearray()
            self.sent.append(record)
            threading.Thread(target=self._pump, args=(client, upstream, record), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    @staticmethod
    def _pump(src, dst, record):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record is not None:
                    record.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def replay(port, data, listen_s=4):
    """Sends `data` on a fresh connection to `port`, keeps it open for listen_s, returns what came back."""
    back = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
        except OSError:
            return bytes(back)  # refused while sending
        s.settimeout(0.5)
        deadline = time.monotonic() + listen_s
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not chunk:
                break
            back.extend(chunk)
    return bytes(back)


def check_replay(node):
    middleman = None
    for line in node.lines:
        m = re.search(r"middleman behind the gate on 127\.0\.0\.1:(\d+)", line)
        if m:
            middleman = int(m.group(1))
    recorder = Recorder(node.port)
    with ServerProcess(BIN, ["--node", f"127.0.0.1:{recorder.port}", "--secret-file", SECRET]) as h:
        address = f"127.0.0.1:{recorder.port}"
        wait_for("the head to join through the relay", lambda: nodes(h.port)[address]["alive"], 30)
        code, body = complete(h.port, "The capital of France is", max_tokens=8)
        check(code == 200 and "Paris" in body["choices"][0]["text"], body)
        time.sleep(0.5)
        prompts = nodes(h.port)[address]["prompt_tokens"]
        check(prompts > 0, nodes(h.port))
        check(len(recorder.sent) == 1, f"{len(recorder.sent)} connections through the relay")
        recorded = bytes(recorder.sent[0])
        check(len(recorded) > 100, len(recorded))
        back = replay(node.port, recorded)
        targets = ["the node's port"]
        if middleman:
            # A local process can reach the loopback middleman: the requests in the
            # recording (past the 72 bytes of gate handshake) must still run nothing.
            replay(middleman, recorded[72:])
            targets.append("its loopback middleman")
        time.sleep(2)
        check(node.proc.poll() is None, "the node died")
        after = nodes(h.port)[address]
        check(after["alive"], after)
        check(after["prompt_tokens"] == prompts, f"the replay ran a request on the node: {prompts} -> {after}")
        if middleman:
            # Past the gate it was the seal that refused the requests, not CAF.
            check(any("forged or replayed" in line for line in node.lines), node.lines[-8:])
        check(any("refused a head: the shared secret does not match" in line for line in node.lines), node.lines[-8:])
        # The measure works: a real request from the real head is counted.
        code, body = complete(h.port, "The capital of France is", max_tokens=8)
        check(code == 200 and "Paris" in body["choices"][0]["text"], body)
        check(nodes(h.port)[address]["prompt_tokens"] > prompts, f"the node at {address} ran nothing after the join")
    print(f"ok: {len(recorded)} bytes recorded from a joined head, replayed to {' and '.join(targets)} without the "
          f"secret, ran nothing (node prompt tokens stayed {prompts}; {len(back)} bytes came back); the node stayed up")


def check_basp_bomb(node):
    base = rss_mb(node.proc.pid)
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
        s.sendall(BOMB)
        socks.append(s)
    time.sleep(2)
    grown = rss_mb(node.proc.pid) - base
    check(grown < 50, f"node RSS grew {grown:.0f} MB after 20 BASP bombs")
    t0 = time.monotonic()
    check(all(closed_within(s, 10) for s in socks), "the node kept an unauthenticated connection past its deadline")
    waited = time.monotonic() - t0 + 2
    for s in socks:
        s.close()
    # After a valid gate handshake, the frame bound still holds.
    authed = gate_handshake(node.port)
    authed.sendall(BOMB)
    check(closed_within(authed, 5), "an authenticated peer's 4 GiB frame was not refused")
    authed.close()
    # The node logs the refusal around the time it closes; its stderr reaches
    # node.lines through a reader thread, so give the line a moment.
    wait_for("the node's log of the refused frame",
             lambda: any("over --max-message-bytes" in line for line in node.lines), 10)
    # Beyond the cap on connections still authenticating, the node closes at once.
    idle = [socket.create_connection(("127.0.0.1", node.port), timeout=10) for _ in range(70)]
    shut = sum(closed_within(s, 0.3) for s in idle[-10:])
    for s in idle:
        s.close()
    check(shut >= 6, f"only {shut} of the last 10 of 70 idle connections were closed at once")
    grown = rss_mb(node.proc.pid) - base
    check(grown < 50, f"node RSS grew {grown:.0f} MB")
    check(node.proc.poll() is None, "the node died")
    print(f"ok: 20 x 4 GiB BASP headers before auth: node RSS +{grown:.1f} MB, all closed within {waited:.1f} s; "
          f"after auth the 4 GiB frame closes the connection; {shut} connections over the cap closed at once")


def main():
    node = NodeProcess(["--secret-file", SECRET]).start()
    try:
        check_replay(node)
        check_basp_bomb(node)
        # A real head still joins and gets correct tokens afterwards.
        with ServerProcess(BIN, ["--node", node.address, "--secret-file", SECRET]) as h:
            code, body = complete(h.port, "The capital of France is", max_tokens=8)
            check(code == 200 and "Paris" in body["choices"][0]["text"], body)
        print("ok: after the attacks a real head joins and gets correct tokens")
    finally:
        stop_process(node.proc)
    print("cluster security: all checks passed")


if __name__ == "__main__":
    main()
