"""A small Chrome DevTools Protocol client for the browser test: starts Debian's chromium headless
in its own process group, opens page targets and drives them over the DevTools websocket
(the `websocket-client` package from scripts/setup.sh's Python tools).

    browser = Chromium()
    browser.start()
    page = browser.new_page()
    page.navigate("http://127.0.0.1:8080/")
    page.wait_for("document.body.dataset.state === 'done'", timeout=60, what="a mesh")
    png = page.screenshot(page.rect("#viewer"))
    browser.kill()

Every wait has a timeout; a command that gets no answer raises CdpError. What a page says on its
own (console messages, uncaught exceptions, log entries, failed loads) is collected as it comes
and read with Page.problems().
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

try:
    import websocket
except ImportError as e:  # say what to do, not only what is missing
    raise ImportError(f"{e}: the browser test needs the websocket-client package; run "
                      f"scripts/setup.sh") from e

CHROMIUM = "/usr/bin/chromium"
COMMAND_TIMEOUT_S = 30
START_TIMEOUT_S = 60  # chromium's first start on a loaded 2-core machine takes seconds

# Headless with WebGL on the CPU: SwiftShader through ANGLE (no GPU on CI machines); no sandbox
# (containers run the tests as root); no first-run UI; a port of its own choice, read back from
# DevToolsActivePort (no clash with another test's browser).
CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu-sandbox", "--enable-unsafe-swiftshader",
    "--use-angle=swiftshader", "--remote-debugging-port=0", "--no-first-run",
    "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--metrics-recording-only",
    "--password-store=basic", "--mute-audio", "--hide-scrollbars",
]


# What Connection._wait_locked's find() returns while what it looks for has not come.
_NOT_YET = object()


class CdpError(AssertionError):
    """A DevTools command failed, timed out, or the browser went away (an AssertionError, so a
    test reports it as a failure, not an error of the test itself)."""


class Connection:
    """One DevTools websocket: commands answered by id, events kept in order of arrival."""

    def __init__(self, url, timeout=COMMAND_TIMEOUT_S):
        # suppress_origin: chromium refuses DevTools connections with an Origin header it was not
        # told to allow (--remote-allow-origins); a client that sends none is accepted.
        self.ws = websocket.create_connection(url, timeout=timeout, suppress_origin=True,
                                              enable_multithread=True)
        self.ws.settimeout(None)  # the reader thread blocks; waits have their own timeouts
        self.timeout = timeout
        self._next_id = 0
        self._answers = {}
        self._events = []
        self._closed = None
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()

    def _read(self):
        while True:
            try:
                message = self.ws.recv()
            except Exception as e:  # closed by us, or the browser went away
                with self._cond:
                    self._closed = f"{type(e).__name__}: {e}"
                    self._cond.notify_all()
                return
            if not message:
                continue
            data = json.loads(message)
            with self._cond:
                if "id" in data:
                    self._answers[data["id"]] = data
                else:
                    self._events.append(data)
                self._cond.notify_all()

    def send(self, method, params=None, timeout=None):
        """Sends a command and waits for its result (a dict); raises CdpError on an error answer
        or after `timeout` seconds."""
        timeout = self.timeout if timeout is None else timeout
        with self._cond:
            self._next_id += 1
            call_id = self._next_id
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        with self._cond:
            answer = self._wait_locked(lambda: self._answers.pop(call_id, _NOT_YET), deadline,
                                       f"{method}: the DevTools connection closed",
                                       f"{method}: no answer within {timeout} s")
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error'].get('message')} "
                           f"({answer['error'].get('data', '')})")
        return answer.get("result", {})

    def events(self, method=None):
        """The events received so far (a copy), optionally only those of `method`."""
        with self._cond:
            return [e for e in self._events if method is None or e["method"] == method]

    def clear_events(self):
        with self._cond:
            self._events.clear()

    def wait_event(self, method, predicate=lambda params: True, timeout=None, since=0):
        """The params of the first event `method` (from index `since` of the event list) for
        which predicate(params) holds; raises CdpError after `timeout` seconds."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout

        def find():
            for e in self._events[since:]:
                if e["method"] == method and predicate(e.get("params", {})):
                    return e.get("params", {})
            return _NOT_YET

        with self._cond:
            return self._wait_locked(find, deadline,
                                     f"waiting for {method}: the connection closed",
                                     f"no {method} event within {timeout} s")

    def _wait_locked(self, find, deadline, closed, late):
        """With self._cond held: find()'s answer once it has one (not _NOT_YET), waiting for the
        reader thread between tries; CdpError("CLOSED (why)") when the connection closes first,
        CdpError(LATE) at `deadline` (time.monotonic())."""
        while True:
            found = find()
            if found is not _NOT_YET:
                return found
            if self._closed:
                raise CdpError(f"{closed} ({self._closed})")
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(late)
            self._cond.wait(left)

    def event_count(self):
        with self._cond:
            return len(self._events)

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass


class Page(Connection):
    """A page target: navigation, JavaScript, input, screenshots, and what the page reported."""

    def __init__(self, url, target_id, timeout=COMMAND_TIMEOUT_S):
        super().__init__(url, timeout)
        self.target_id = target_id
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def navigate(self, url, timeout=60):
        """Loads url and waits for its load event."""
        since = self.event_count()
        result = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if result.get("errorText"):
            raise CdpError(f"navigating to {url}: {result['errorText']}")
        self.wait_event("Page.loadEventFired", timeout=timeout, since=since)

    def evaluate(self, expression, timeout=None):
        """The value of a JavaScript expression (awaited when it is a promise, returned by
        value: JSON-like values only); raises CdpError when it throws."""
        result = self.send("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True,
            "userGesture": True}, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise CdpError(f"JavaScript threw: {text}\n  in: {expression}")
        return result.get("result", {}).get("value")

    def wait_for(self, predicate, timeout, what=None, poll=0.1):
        """Polls a JavaScript expression until it is truthy; returns its value. Raises CdpError
        naming `what` (or the expression) and its last value after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = self.evaluate(predicate)
            if last:
                return last
            if time.monotonic() >= deadline:
                raise CdpError(f"not within {timeout} s: {what or predicate} (last value: "
                               f"{last!r})")
            time.sleep(poll)

    def rect(self, selector):
        """The element's bounding box in CSS pixels: {x, y, width, height}."""
        rect = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                             f".getBoundingClientRect(); return {{x: r.x, y: r.y, "
                             f"width: r.width, height: r.height}}; }})()")
        if not rect or rect["width"] <= 0 or rect["height"] <= 0:
            raise CdpError(f"{selector} has no box: {rect}")
        return rect

    def click(self, selector):
        """A real mouse click (press and release) in the middle of the element, after scrolling
        it into view."""
        self.evaluate(f"document.querySelector({json.dumps(selector)})"
                      f".scrollIntoView({{block: 'center'}})")
        r = self.rect(selector)
        x, y = r["x"] + r["width"] / 2, r["y"] + r["height"] / 2
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y,
                                                   "button": "left", "clickCount": 1})

    def type(self, selector, text, clear=True):
        """Focuses the field, empties it (when clear) and types text as a user would (one input
        event, as an IME commit)."""
        self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                      f"e.focus(); if ({json.dumps(clear)}) {{ e.select && e.select(); }} }})()")
        if clear:
            # Select-all then delete: the page sees the edit as a user's.
            self.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": "Delete",
                                                 "code": "Delete", "windowsVirtualKeyCode": 46})
            self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": "Delete",
                                                 "code": "Delete", "windowsVirtualKeyCode": 46})
        if text:
            self.send("Input.insertText", {"text": text})

    def screenshot(self, clip=None):
        """PNG bytes of the page, or of `clip` ({x, y, width, height} in CSS pixels)."""
        params = {"format": "png", "captureBeyondViewport": False}
        if clip is not None:
            params["clip"] = {**{k: clip[k] for k in ("x", "y", "width", "height")}, "scale": 1}
        return base64.b64decode(self.send("Page.captureScreenshot", params, timeout=60)["data"])

    def problems(self, ignore=()):
        """What the page reported that a clean run never does, as readable lines: console
        errors, warnings and assertions, uncaught exceptions, error and warning log entries
        (failed resources among them) and failed loads. A line containing one of `ignore`'s
        strings is left out."""
        out = []
        for e in self.events():
            method, p = e["method"], e.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning",
                                                                          "assert"):
                text = " ".join(str(a.get("value", a.get("description", "")))
                                for a in p.get("args", []))
                out.append(f"console.{p['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                what = d.get("exception", {}).get("description") or d.get("text")
                out.append(f"exception: {what} at {d.get('url', '')}:{d.get('lineNumber', '')}")
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error",
                                                                                   "warning"):
                entry = p["entry"]
                out.append(f"log {entry['level']} ({entry.get('source')}): {entry.get('text')} "
                           f"{entry.get('url', '')}".rstrip())
            elif method == "Network.loadingFailed" and not p.get("canceled"):
                out.append(f"load failed: {p.get('errorText')} ({p.get('type')}, "
                           f"request {p.get('requestId')})")
        return [line for line in out if not any(s in line for s in ignore)]


class Chromium:
    """A headless chromium in its own process group, with a temporary profile."""

    def __init__(self, binary=CHROMIUM, window=(1280, 800), extra_flags=()):
        self.binary = binary
        self.window = window
        self.extra_flags = list(extra_flags)
        self.proc = None
        self.profile = None
        self.port = None
        self.browser_ws = None
        self.pages = []
        self.browser = None
        self.log_path = None

    def start(self, timeout=START_TIMEOUT_S):
        if not os.access(self.binary, os.X_OK):
            raise CdpError(f"{self.binary} is missing: run scripts/setup.sh (it installs Debian's "
                           f"chromium for the browser test)")
        self.profile = tempfile.mkdtemp(prefix="cube3d-chromium-")
        self.log_path = os.path.join(self.profile, "chromium.log")
        args = [self.binary, *CHROMIUM_FLAGS, f"--window-size={self.window[0]},{self.window[1]}",
                f"--user-data-dir={self.profile}", *self.extra_flags, "about:blank"]
        with open(self.log_path, "wb") as log:
            # Its own session (process group): kill() ends the GPU, renderer and utility
            # processes with it, whatever happens to the test.
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        active = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise CdpError(f"chromium exited with {self.proc.returncode} at start:\n"
                               f"{self.log_tail()}")
            try:
                with open(active) as f:
                    lines = f.read().split("\n")
                if len(lines) >= 2 and lines[0].strip() and lines[1].strip():
                    self.port = int(lines[0])
                    self.browser_ws = f"ws://127.0.0.1:{self.port}{lines[1].strip()}"
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                self.kill()
                raise CdpError(f"chromium wrote no DevToolsActivePort within {timeout} s")
            time.sleep(0.05)
        # The browser target's own connection, open while chromium runs: tabs are made and
        # closed over it, and settings made over it (downloads) last as long as it does.
        self.browser = Connection(self.browser_ws)

    def targets(self):
        """The browser's targets (GET /json/list)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as r:
            return json.loads(r.read())

    def new_page(self, url="about:blank"):
        """A new tab (its own sessionStorage and history), connected and with its domains on."""
        target_id = self.browser.send("Target.createTarget", {"url": url})["targetId"]
        page = Page(f"ws://127.0.0.1:{self.port}/devtools/page/{target_id}", target_id)
        self.pages.append(page)
        return page

    def close_page(self, page):
        page.close()
        if page in self.pages:
            self.pages.remove(page)
        try:
            self.browser.send("Target.closeTarget", {"targetId": page.target_id})
        except CdpError:
            pass  # gone already

    def allow_downloads(self, folder):
        """Downloads go to folder, without asking (kept while the browser connection is open)."""
        self.browser.send("Browser.setDownloadBehavior", {"behavior": "allow",
                                                          "downloadPath": folder})

    def kill(self):
        """Ends chromium's whole process group and removes its profile; safe to call twice."""
        for page in self.pages:
            page.close()
        self.pages = []
        if self.browser is not None:
            self.browser.close()
            self.browser = None
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self.profile is not None:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except (OSError, TypeError):
            return ""
