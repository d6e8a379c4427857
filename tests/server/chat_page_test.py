#!/usr/bin/env python3
"""The browser chat page at "/" in headless Chromium (Debian's package),
driven over the DevTools protocol: the page loads under its
Content-Security-Policy, a ?q= question streams an answer, a second turn typed
into the form is answered with the first in context, and the Stop button ends
a long answer. Starts and stops the server (and the browser) itself.

Usage: python3 tests/server/chat_page_test.py path/to/actorlm
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402


class Browser:
    """One headless Chromium with one page, spoken to over CDP."""

    def __init__(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        check(exe, "chromium is not installed (scripts/setup.sh installs it)")
        self.profile = tempfile.mkdtemp(prefix="actorlm-chromium-")
        self.proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list").read())
        page = next(p for p in pages if p["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.next_id = 0
        self.call("Runtime.enable")
        self.call("Page.enable")

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                check("error" not in msg, msg)
                return msg.get("result", {})

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        check("exceptionDetails" not in r, r)
        return r["result"].get("value")

    def wait(self, expression, timeout=120):
        deadline = time.monotonic() + timeout
        guarded = f"(() => {{ try {{ return !!({expression}); }} catch (e) {{ return false; }} }})()"
        while time.monotonic() < deadline:  # the page may still be loading
            if self.eval(guarded):
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {expression}: {self.eval('document.body.innerText')}")

    def close(self):
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    with ServerProcess(sys.argv[1], ["--kv-tokens", "8192"]) as server:
        base = f"http://127.0.0.1:{server.port}"
        head = urllib.request.urlopen(base + "/")
        csp = head.headers["Content-Security-Policy"]
        check("script-src 'self'" in csp and "default-src 'none'" in csp, csp)
        check(head.headers["Content-Type"].startswith("text/html"), 'head.headers["Content-Type"].startswith("text/html")')
        browser = Browser()
        try:
            browser.call("Page.navigate",
                         url=base + "/?t=0&q=" + urllib.request.quote("Name the capital of France."))
            browser.wait("document.body.dataset.state === 'done'")
            answers = browser.eval("[...document.querySelectorAll('.assistant')].map(e => e.textContent)")
            check(len(answers) == 1 and "Paris" in answers[0], answers)
            check(not browser.eval("document.querySelector('.error')"), browser.eval("document.body.innerText"))
            check("tokens in" in browser.eval("document.getElementById('stats').textContent"), '"tokens in" in browser.eval("document.getElementById(\'stats\').textContent")')

            # A second turn typed into the form, answered in the context of the first.
            browser.eval("document.getElementById('input').value = 'And what country is that city in?';"
                         "document.getElementById('form').requestSubmit(); true")
            browser.wait("document.querySelectorAll('.assistant').length === 2 && "
                         "document.body.dataset.state === 'done'")
            second = browser.eval("document.querySelectorAll('.assistant')[1].textContent")
            check("France" in second, second)

            # Stop ends a long answer early and the page stays usable.
            browser.eval("document.getElementById('input').value = 'Write a very long story about a lighthouse.';"
                         "document.getElementById('form').requestSubmit(); true")
            browser.wait("document.querySelectorAll('.assistant').length === 3 && "
                         "document.querySelectorAll('.assistant')[2].textContent.length > 20")
            browser.eval("document.getElementById('stop').click(); true")
            browser.wait("document.body.dataset.state === 'done'")
            check(browser.eval("document.getElementById('stats').textContent") == "stopped", 'browser.eval("document.getElementById(\'stats\').textContent") == "stopped"')
        finally:
            browser.close()
        # The stopped stream was aborted on the server: nothing left running or locked.
        for _ in range(100):
            m = server.metrics()
            if m["actorlm_running_requests"] == 0:
                break
            time.sleep(0.1)
        check(m["actorlm_running_requests"] == 0 and m["actorlm_kv_pool_locked_tokens"] == 0, m)
    print("chat page: loads under its CSP, streams answers, keeps context, stops on request")


if __name__ == "__main__":
    main()
