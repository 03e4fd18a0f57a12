"""The browser playground (http.playground: GET /, share/cube3d/playground/) in Debian's chromium,
headless with WebGL on SwiftShader, driven over the DevTools protocol (cdp_client.py): a prompt
typed with the right API key gives a mesh on the canvas (the progress stages, the counts, the
pixels the mesh covers, a different picture for a different prompt, the history with
thumbnails, no console errors, no failed or foreign loads); a shareable link fills the form and
starts at once; the downloads (the generated format's own bytes, another format from
/v1/meshes:generate with the same parameters); errors in words (401, 400, 429 with its retry
time); cancel stops the server's work; and a broken copy of the viewer makes the same checks
fail. Run by ctest (e2e.browser):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_browser_e2e

Screenshots go to CUBE3D_ARTIFACT_DIR (ctest: <build>/e2e-browser; unset: a temp folder):
playground-<prompt>.png of the canvas per generation, and playground.png, the whole page at
1280x800 (the README's picture). One server and one chromium for the class, a fresh tab (its own
sessionStorage) per test; every wait is bounded.
"""
import base64
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

import numpy as np
from PIL import Image

import server_process as e2e
from cdp_client import CHROMIUM, Chromium
from server_process import KeyedServerTestCase, ServerProcess, metric_value

KEY = "key-browser"
RPM_KEY = "key-browser-rpm"  # one request a minute: the second is a 429 with Retry-After
RES = 5                      # a smooth enough blob in about a second on a loaded CPU
SLOW_RES = 9                 # the demo config's maximum: many seconds of meshing, to cancel
GENERATE_TIMEOUT_S = 90
READY_TIMEOUT_S = 30
VIEWPORT = (1280, 800)
# A pixel differs from the clear colour by more than this (any channel, 0..255) when the mesh
# covers it: antialiasing and SwiftShader's rounding stay far below.
PIXEL_TOLERANCE = 12
MIN_MESH_SHARE = 0.02        # of the canvas' pixels; a framed blob covers ten times that
MIN_DIFFERENT_SHARE = 0.01   # of the pixels that differ between two prompts' pictures
PROMPTS = ("a wooden chair", "a red sports car")
# The viewer's clear colour (viewer.js BACKGROUND): what the canvas shows where the mesh is not.
# A constant here, not read from the page, so that a page without a viewer is measured too.
BACKGROUND = "#1b212b"

ARTIFACT_DIR = os.environ.get("CUBE3D_ARTIFACT_DIR") or tempfile.mkdtemp(
    prefix="cube3d-e2e-browser-")


def setUpModule():
    e2e.setUpModule()
    os.makedirs(ARTIFACT_DIR, exist_ok=True)


def tearDownModule():
    e2e.tearDownModule()


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "mesh"


def png_array(png):
    """An RGB uint8 array [H, W, 3] of PNG bytes."""
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def mesh_share(pixels, background):
    """The share of pixels that differ from the background colour ('#rrggbb')."""
    bg = np.array([int(background[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return float((np.abs(pixels - bg).max(axis=2) > PIXEL_TOLERANCE).mean())


class BrowserTestCase(KeyedServerTestCase):
    """A keyed demo server with the playground on, one chromium for the class, a new tab per
    test (self.page), at VIEWPORT."""

    HTTP = True
    KEYS = [("browser", KEY, {}), ("rpm", RPM_KEY, {"requests_per_minute": 1})]
    # The source tree's playground, not the build tree's copy (bin/../share/cube3d/playground,
    # refreshed by a build): a page edited and tested by hand is the page tested.
    PLAYGROUND_DIR = os.path.join(e2e.SOURCE, "share", "cube3d", "playground")
    SERVER_ARGS = ["--set", "http.playground=true",
                   "--set", f"http.playground_dir={PLAYGROUND_DIR}"]
    browser = None

    @classmethod
    def setUpClass(cls):
        if not os.access(CHROMIUM, os.X_OK):
            raise AssertionError(f"{CHROMIUM} is missing: run scripts/setup.sh (it installs "
                                 f"Debian's chromium and libjs-three for this test)")
        super().setUpClass()
        cls.browser = Chromium(window=VIEWPORT)
        cls.addClassCleanup(cls.browser.kill)
        cls.browser.start()

    def setUp(self):
        self.page = self.new_tab()

    def new_tab(self):
        """A new tab at VIEWPORT, closed at the test's end (after a note of where it was)."""
        page = self.browser.new_page()
        self.addCleanup(self.browser.close_page, page)
        self.addCleanup(self.note_page, page)  # cleanups run last in, first out: before closing
        page.send("Emulation.setDeviceMetricsOverride", {
            "width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1,
            "mobile": False})
        return page

    def note_page(self, page):
        """Where the page was and what it reported, for run() to print when the test failed."""
        try:
            state = page.evaluate(
                "JSON.stringify({state: document.body.dataset.state, status: "
                "document.getElementById('status').textContent, error: "
                "document.getElementById('error').textContent, url: location.href})", 5)
        except Exception as e:  # the tab or browser is gone: say so
            state = f"(no page state: {e})"
        self.page_notes.append("\n".join([state, *page.problems()]))

    def run(self, result=None):
        # Say where the pages were when a test fails (the server's log comes from the base
        # class).
        self.page_notes = []
        before = len(result.failures) + len(result.errors) if result else 0
        outcome = super().run(result)
        if result is not None and len(result.failures) + len(result.errors) > before:
            for note in self.page_notes:
                sys.stderr.write(f"\n----- page ({self.id()}) -----\n{note}\n"
                                 "----- end of page -----\n")
        return outcome

    # -- helpers --

    @property
    def base(self):
        return f"http://{e2e.HOST}:{self.server.http_port}"

    def open(self, path="/", page=None, base=None):
        """Loads the playground and waits until it has set itself up."""
        page = page or self.page
        page.navigate((base or self.base) + path)
        page.wait_for("window.cube3dPlayground && window.cube3dPlayground.ready", READY_TIMEOUT_S,
                      "the playground set itself up (window.cube3dPlayground.ready)")

    def type_key(self, key, page=None, expect_model=True):
        """Types the API key; with expect_model, waits for /v1/model's answer (the key works)."""
        page = page or self.page
        page.type("#api-key", key)
        if expect_model:
            page.wait_for("window.cube3dPlayground.model !== null", READY_TIMEOUT_S,
                          "GET /v1/model with the key typed")

    def wait_settled(self, page=None, timeout=GENERATE_TIMEOUT_S, after=0):
        """Waits until more than `after` generations started and the page is done, failed or
        cancelled; returns that state."""
        page = page or self.page
        return page.wait_for(
            f"window.cube3dPlayground.generations > {after} && "
            "['done', 'error', 'cancelled'].includes(document.body.dataset.state) && "
            "document.body.dataset.state", timeout, "the generation to end")

    def generate(self, page=None, timeout=GENERATE_TIMEOUT_S):
        """Presses Generate and waits for that generation to end; returns the state."""
        page = page or self.page
        before = page.evaluate("window.cube3dPlayground.generations")
        page.click("#generate")
        return self.wait_settled(page, timeout, after=before)

    def show_history(self, nth):
        """Clicks the nth (1 = newest) history entry and waits until the viewer shows it."""
        button = f"#history li:nth-child({nth}) button"
        entry = int(self.page.evaluate(f"document.querySelector({json.dumps(button)})"
                                       ".dataset.id"))
        self.page.click(button)
        self.page.wait_for(f"window.cube3dPlayground.current === {entry} && "
                           "document.body.dataset.state === 'done'", 20,
                           f"history entry {nth} shown again")

    def page_problems(self, page=None):
        """What the page reported since it opened, less the one refusal every page on a keyed
        server sees: GET /v1/model before a key is typed (401), which the browser logs."""
        page = page or self.page
        origin = page.evaluate("location.origin")
        return page.problems(ignore=(f"401 (Unauthorized) {origin}/v1/model",))

    def generation_problems(self, prompt, page=None, res=RES, name=None):
        """Types prompt, presses Generate and checks what a person would see: (problems, facts).
        problems lists every way the page failed (an empty list: it worked): the state, the
        stages (text encoding, decoding with tokensDone advancing, meshing), the counts shown
        (the result's, and the geometry's), the share of the canvas the mesh covers, what the
        page reported since it opened. facts has the pixels, the result and the page's state for
        more checks."""
        page = page or self.page
        page.type("#prompt", prompt)
        page.type("#resolution-base", str(res))
        problems = []
        state = self.generate(page)
        info = page.evaluate("""(() => {
            const p = window.cube3dPlayground;
            return {state: document.body.dataset.state, error: p.error, stages: p.stages,
                    tokens: p.progress.filter((e) => e.stage === 'STAGE_DECODING')
                                      .map((e) => e.tokensDone),
                    meshing: p.progress.filter((e) => e.stage === 'STAGE_MESHING'),
                    result: p.result, shown: p.shown, background: p.background,
                    faces: document.getElementById('faces').textContent,
                    vertices: document.getElementById('vertices').textContent};
        })()""")
        if state != "done":
            problems.append(f"the state is {state!r}, not 'done' (error: {info['error']!r})")
        for stage in ("STAGE_TEXT_ENCODING", "STAGE_DECODING", "STAGE_MESHING"):
            if stage not in info["stages"]:
                problems.append(f"no {stage} among the stages seen: {info['stages']}")
        tokens = info["tokens"]
        if len(tokens) < 2 or tokens != sorted(tokens) or tokens[-1] <= tokens[0]:
            problems.append(f"tokensDone did not advance while decoding: {tokens}")
        if not any(e.get("levelsTotal") for e in info["meshing"]):
            problems.append(f"no meshing levels in the progress: {info['meshing']}")
        result = info["result"] or {}
        digits = lambda text: int(re.sub(r"\D", "", text) or -1)  # noqa: E731 ("1,234")
        if not result.get("faceCount") or digits(info["faces"]) != result.get("faceCount"):
            problems.append(f"#faces shows {info['faces']!r}, the result has "
                            f"{result.get('faceCount')}")
        if not result.get("vertexCount") or digits(info["vertices"]) != result.get("vertexCount"):
            problems.append(f"#vertices shows {info['vertices']!r}, the result has "
                            f"{result.get('vertexCount')}")
        shown = info["shown"] or {}
        if shown.get("faces") != result.get("faceCount"):
            problems.append(f"the viewer shows {shown.get('faces')} faces, the result has "
                            f"{result.get('faceCount')}")
        if "encoded" in result:
            problems.append("window.cube3dPlayground.result carries the base64 file")
        pixels = png_array(page.screenshot(page.rect("#viewer")))
        Image.fromarray(pixels.astype(np.uint8)).save(
            os.path.join(ARTIFACT_DIR, f"{name or 'playground-' + slug(prompt)}.png"))
        if info["background"] not in (None, BACKGROUND):
            problems.append(f"the viewer's clear colour is {info['background']}, not {BACKGROUND}"
                            " (update BACKGROUND)")
        share = mesh_share(pixels, BACKGROUND)
        if share < MIN_MESH_SHARE:
            problems.append(f"the mesh covers {share:.2%} of the canvas (at least "
                            f"{MIN_MESH_SHARE:.0%} expected): the view stays background")
        problems += self.page_problems(page)
        return problems, {**info, "pixels": pixels, "share": share}

    def serve(self, folder):
        """A second server with the class's keys and the playground from `folder` (killed at
        the test's end if it still runs)."""
        server = ServerProcess(["--set", "http.playground=true",
                                "--set", f"http.playground_dir={folder}",
                                "--set", f"auth.api_keys_file={self.keys_path}"],
                               self._tmp.name, http=True)
        self.addCleanup(server.kill)
        server.start()
        return server

    def metrics_now(self, name, **labels):
        return metric_value(self.server.metrics(), name, **labels) or 0


class PlaygroundTest(BrowserTestCase):

    def test_a_prompt_gives_a_mesh_on_the_canvas(self):
        self.open()
        self.type_key(KEY)
        first, seen = self.generation_problems(PROMPTS[0])
        self.assertEqual(first, [], f"the first generation failed: {first}")
        self.assertGreater(seen["share"], MIN_MESH_SHARE)
        second, seen2 = self.generation_problems(PROMPTS[1])
        self.assertEqual(second, [], f"the second generation failed: {second}")
        differ = float((np.abs(seen["pixels"] - seen2["pixels"]).max(axis=2) >
                        PIXEL_TOLERANCE).mean())
        self.assertGreater(differ, MIN_DIFFERENT_SHARE,
                           "two prompts gave the same picture on the canvas")
        # The README's picture: the whole page at 1280x800, the pointer off the buttons.
        self.page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 0, "y": 0})
        full = self.page.screenshot()
        self.assertEqual(Image.open(io.BytesIO(full)).size, VIEWPORT)
        with open(os.path.join(ARTIFACT_DIR, "playground.png"), "wb") as f:
            f.write(full)

        # The history: both, newest first, each with a thumbnail of its mesh.
        history = self.page.evaluate("""[...document.querySelectorAll('#history li')].map((li) =>
            ({prompt: li.querySelector('.history-prompt').textContent,
              thumb: li.querySelector('img').src}))""")
        self.assertEqual([h["prompt"] for h in history], list(reversed(PROMPTS)))
        for entry in history:
            self.assertTrue(entry["thumb"].startswith("data:image/png;base64,"),
                            entry["thumb"][:40])
            thumb = png_array(base64.b64decode(entry["thumb"].split(",", 1)[1]))
            self.assertGreater(mesh_share(thumb, BACKGROUND), MIN_MESH_SHARE,
                               f"the thumbnail of {entry['prompt']!r} is empty")

        # Everything the page loaded came from the server itself (no CDN: it works offline).
        urls = {e["params"]["request"]["url"]
                for e in self.page.events("Network.requestWillBeSent")}
        foreign = [u for u in urls if not u.startswith((self.base + "/", "data:", "blob:"))]
        self.assertEqual(foreign, [], "the page loaded from elsewhere")

        # The address bar now holds the shareable link of the second mesh.
        search = self.page.evaluate("location.search")
        self.assertIn("prompt=a+red+sports+car", search)
        self.assertIn(f"resolutionBase={RES}", search)

        # Clicking the older entry shows that mesh again and refills the form.
        self.show_history(2)
        self.assertEqual(self.page.evaluate("document.getElementById('prompt').value"),
                         PROMPTS[0])
        again = png_array(self.page.screenshot(self.page.rect("#viewer")))
        self.assertLess(float((np.abs(again - seen["pixels"]).max(axis=2) >
                               PIXEL_TOLERANCE).mean()), MIN_DIFFERENT_SHARE,
                        "the history's first entry shows another picture than it did")
        self.assertEqual(self.page_problems(), [])

    def test_a_shared_link_fills_the_form_and_starts(self):
        self.open()
        self.type_key(KEY)  # sessionStorage keeps it for the next page of this tab
        self.page.navigate(f"{self.base}/?prompt=a+tall+lamp&resolutionBase={RES}&seed=3"
                           f"&format=obj&meshProfile=roblox&guidanceScale=2.5")
        # No click: the link starts the generation by itself.
        form = self.page.wait_for("""window.cube3dPlayground && window.cube3dPlayground.ready &&
            document.body.dataset.state !== 'idle' && (() => {
              const v = (id) => document.getElementById(id).value;
              return {prompt: v('prompt'), res: v('resolution-base'), seed: v('seed'),
                      guidance: v('guidance-scale'), format: v('format'),
                      profile: v('mesh-profile'), key: v('api-key')};
            })()""", READY_TIMEOUT_S, "the link's generation to start")
        self.assertEqual(form, {"prompt": "a tall lamp", "res": str(RES), "seed": "3",
                                "guidance": "2.5", "format": "obj", "profile": "roblox",
                                "key": KEY})
        self.assertEqual(self.wait_settled(), "done",
                         self.page.evaluate("window.cube3dPlayground.error"))
        self.assertEqual(self.page.evaluate("window.cube3dPlayground.generations"), 1)
        effective = self.page.evaluate("window.cube3dPlayground.result.effective")
        self.assertEqual((effective["seed"], effective["resolutionBase"], effective["format"],
                          effective["meshProfile"], effective["guidanceScale"]),
                         ("3", RES, "MESH_FORMAT_OBJ", "MESH_PROFILE_ROBLOX", 2.5))
        self.assertEqual(self.page.evaluate("window.cube3dPlayground.shown.format"), "obj")
        # The key lives in this tab's sessionStorage only: not in localStorage, not in the URL.
        self.assertEqual(self.page.evaluate("localStorage.length"), 0)
        self.assertEqual(self.page.evaluate("sessionStorage.getItem('cube3d.apiKey')"), KEY)
        href = self.page.evaluate("location.href")
        self.assertNotIn(KEY, href)
        self.assertIn("seed=3", href)
        self.assertIn("format=obj", href)

    def test_downloads_carry_the_server_bytes(self):
        downloads = tempfile.mkdtemp(prefix="cube3d-e2e-downloads-")
        self.addCleanup(shutil.rmtree, downloads, ignore_errors=True)
        self.browser.allow_downloads(downloads)
        self.open()
        self.type_key(KEY)
        self.page.evaluate("document.getElementById('format').value = 'ply'")
        self.page.type("#prompt", "a small boat")
        self.page.type("#resolution-base", "4")
        self.page.type("#seed", "11")
        self.assertEqual(self.generate(), "done",
                         self.page.evaluate("window.cube3dPlayground.error"))
        result = self.page.evaluate("window.cube3dPlayground.result")
        self.assertEqual(self.page.evaluate("window.cube3dPlayground.shown.format"), "ply")

        def download(button, name):
            self.page.click(button)
            path = os.path.join(downloads, name)
            deadline = time.monotonic() + 60
            while not (os.path.exists(path) and os.path.getsize(path) > 0):
                if time.monotonic() > deadline:
                    self.fail(f"no {name} downloaded within 60 s: {os.listdir(downloads)}; "
                              f"{self.page.evaluate('window.cube3dPlayground.error')}")
                time.sleep(0.1)
            time.sleep(0.2)  # the browser renames a finished download into place: it is whole
            with open(path, "rb") as f:
                return f.read()

        # The generated format: the server's own bytes, the result's request id inside.
        ply = download("#download-ply", "a-small-boat.ply")
        self.assertTrue(ply.startswith(b"ply\n"), ply[:40])
        self.assertIn(f'request_id: "{result["requestId"]}"'.encode(), ply)
        # Another format: computed by /v1/meshes:generate with the same effective parameters,
        # the file's provenance naming them.
        glb = download("#download-glb", "a-small-boat.glb")
        self.assertEqual(glb[:4], b"glTF")
        json_length = int.from_bytes(glb[12:16], "little")
        extras = json.loads(glb[20:20 + json_length])["asset"]["extras"]
        self.assertEqual((extras["prompt"], extras["seed"], extras["resolution_base"]),
                         ("a small boat", 11, 4))
        self.assertNotEqual(extras["request_id"], result["requestId"])
        self.assertEqual(self.page_problems(), [])

    def test_errors_are_said_in_words(self):
        self.open()
        # A wrong key: the server's 401 and its message.
        self.type_key("not-a-key", expect_model=False)
        self.page.type("#prompt", "a chair")
        self.assertEqual(self.generate(), "error")
        error = self.page.evaluate("document.getElementById('error').textContent")
        self.assertTrue(error.startswith("401 UNAUTHENTICATED: "), error)
        self.assertIn("API key", error)
        self.assertTrue(self.page.evaluate("!document.getElementById('error').hidden"))

        # An invalid field: the server's message names it.
        self.type_key(KEY)
        self.page.type("#resolution-base", "12")
        self.assertEqual(self.generate(), "error")
        error = self.page.evaluate("document.getElementById('error').textContent")
        self.assertTrue(error.startswith("400 INVALID_ARGUMENT: "), error)
        self.assertIn("resolution_base", error)

        # Over the key's rate: 429 with the time to wait from Retry-After.
        self.type_key(RPM_KEY)
        self.page.type("#resolution-base", "4")
        states = [self.generate() for _ in range(2)]
        self.assertEqual(states[-1], "error")
        error = self.page.evaluate("document.getElementById('error').textContent")
        self.assertTrue(error.startswith("429 RESOURCE_EXHAUSTED: "), error)
        self.assertRegex(error, r"\(retry in [0-9]+ s\)$")

    def test_cancel_stops_the_server_work(self):
        self.open()
        self.type_key(KEY)
        cancelled = self.metrics_now("cube3d_requests_total", code="CANCELLED")
        self.assertTrue(self.page.evaluate("document.getElementById('cancel').disabled"),
                        "cancel is enabled with nothing running")
        self.page.type("#prompt", "a slow cathedral")
        self.page.type("#resolution-base", str(SLOW_RES))
        self.page.click("#generate")
        self.page.wait_for("['STAGE_DECODING', 'STAGE_MESHING'].includes("
                           "(window.cube3dPlayground.lastProgress || {}).stage)", 60,
                           "the request decoding or meshing")
        self.assertEqual(self.page.evaluate("document.body.dataset.state"), "running")
        self.assertFalse(self.page.evaluate("document.getElementById('cancel').disabled"))
        self.page.click("#cancel")
        self.assertEqual(self.wait_settled(timeout=30, after=0), "cancelled")
        self.assertEqual(self.page.evaluate("document.getElementById('status').textContent"),
                         "cancelled")
        self.assertTrue(self.page.evaluate("document.getElementById('cancel').disabled"))
        self.assertIsNone(self.page.evaluate("window.cube3dPlayground.error"))
        # The server saw the connection close and stopped the work.
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_requests_total", code="CANCELLED") or 0)
            == cancelled + 1 and metric_value(s, "cube3d_requests_running") == 0,
            "cube3d_requests_total{code=\"CANCELLED\"} up by one and no request running",
            timeout=60)

    def test_a_network_failure_is_said(self):
        server = self.serve(self.PLAYGROUND_DIR)
        self.open(base=f"http://{e2e.HOST}:{server.http_port}")
        self.type_key(KEY)
        self.page.type("#prompt", "a chair")
        self.page.type("#resolution-base", "4")
        server.stop()  # the page stays; its server is gone
        self.assertEqual(self.generate(), "error")
        error = self.page.evaluate("document.getElementById('error').textContent")
        self.assertTrue(error.startswith("network error: "), error)


class BrokenViewerTest(BrowserTestCase):
    """The checks above can fail: a server whose playground folder (http.playground_dir) has a
    broken viewer.js, once drawing nothing and once not even loading, fails the same check of a
    generation that PlaygroundTest passes."""

    def broken_copy(self, name, old, new):
        folder = os.path.join(self._tmp.name, name)
        shutil.copytree(self.PLAYGROUND_DIR, folder)
        path = os.path.join(folder, "viewer.js")
        with open(path) as f:
            text = f.read()
        self.assertIn(old, text, "the viewer changed: update this test's break")
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))
        return folder

    def test_a_broken_viewer_fails_the_checks(self):
        cases = [
            # The mesh never reaches the scene: every number is right, only the canvas is empty,
            # and only the pixels say so.
            ("draws-nothing", "this.scene.add(object);", "/* broken: not added */",
             ["the view stays background"]),
            # The script does not parse: no viewer at all.
            ("does-not-load", "class Viewer {", "class Viewer {{",
             ["exception: SyntaxError", "the state is 'error'", "the view stays background"]),
        ]
        for name, old, new, expected in cases:
            with self.subTest(name):
                server = self.serve(self.broken_copy(name, old, new))
                self.page = self.new_tab()  # what it reports is this case's alone
                self.open(base=f"http://{e2e.HOST}:{server.http_port}")
                self.type_key(KEY)
                problems, _ = self.generation_problems(PROMPTS[0], name=f"broken-{name}")
                for want in expected:
                    self.assertTrue(any(want in p for p in problems),
                                    f"the check missed {want!r} ({name}): {problems}")
                if name == "draws-nothing":
                    self.assertEqual(len(problems), 1, problems)
                server.stop()

if __name__ == "__main__":
    unittest.main()
