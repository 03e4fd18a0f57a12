"""A Luau VM (PyPI's pluau) holding the Roblox stand-in of roblox_mock.luau, for the kit's tests.

This module is the `host` the mock calls for what Luau cannot do alone: the clock and real
sleeps (task.wait), HTTP over loopback (HttpService:RequestAsync, each exchange logged for the
tests), JSON (HttpService:JSONEncode/JSONDecode), base64 (EncodingService) and compiling a
script's source with its own globals. It also converts values between Luau and Python.

pluau 0.1.2's package __init__ is Python 3.12 syntax (a `type` statement), so on 3.11 it cannot be
imported by name; its compiled module loads by path, which is what load_pluau() does (on 3.12 and
later the plain import works and is used).
"""
import base64
import binascii
import gzip
import http.client
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import urllib.parse
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK = os.path.join(HERE, "roblox_mock.luau")

# What Roblox's HttpService sends with every request (RequestAsync decompresses the answer).
ROBLOX_DEFAULT_HEADERS = {"Accept": "*/*", "Accept-Encoding": "gzip, deflate",
                          "Cache-Control": "no-cache", "User-Agent": "Roblox/Linux (mock)"}
HTTP_TIMEOUT_S = 60


def load_pluau():
    """pluau's compiled module (_pluau), or RuntimeError saying how to install it."""
    try:
        import pluau  # noqa: F401  (Python 3.12 and later)
        return sys.modules["pluau._pluau"]
    except SyntaxError:
        pass  # 3.11: the package's __init__ cannot be compiled; load the extension by path
    except ImportError:
        raise RuntimeError(
            f"pluau is not installed for {sys.executable}: the Roblox kit's Luau tests need it "
            f"(scripts/setup.sh installs it; by hand: {sys.executable} -m pip install "
            f"pluau==0.1.2)") from None
    spec = importlib.util.find_spec("pluau")
    folder = spec.submodule_search_locations[0]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(folder, "_pluau" + suffix)
        if os.path.exists(path):
            loader = importlib.machinery.ExtensionFileLoader("pluau._pluau", path)
            module_spec = importlib.util.spec_from_file_location("pluau._pluau", path,
                                                                 loader=loader)
            module = importlib.util.module_from_spec(module_spec)
            loader.exec_module(module)
            return module
    raise RuntimeError(f"pluau is installed ({folder}) but has no compiled module for this "
                       f"Python ({sys.version.split()[0]}): reinstall pluau==0.1.2")


class Vm:
    """One Luau VM with the mock loaded: `world` is a World (roblox_mock.luau) to drive through
    call(); `exchanges` lists every HTTP exchange the game server made, in order.

    url_map maps the base URLs the kit is configured with to loopback servers, e.g.
    {"https://cube3d.example.com": "http://127.0.0.1:8080"} (a name and TLS in front of the test
    server, as a proxy would be); any other address fails as a name that does not resolve, so
    nothing leaves the machine. on_exchange(entry), when set, is called after each exchange
    (the test's hook to act while the kit waits, e.g. cancel its job). lose_answer(entry), when
    set and true for an exchange, makes the server's answer never reach the kit (the request
    was served; RequestAsync fails as a time-out does): a network that drops the reply."""

    def __init__(self, url_map=None, echo=False):
        self.pluau = load_pluau()
        self.lua = self.pluau.Lua()
        self.url_map = dict(url_map or {})
        self.exchanges = []
        self.on_exchange = None
        self.lose_answer = None
        self.echo = echo or bool(os.environ.get("CUBE3D_LUAU_ECHO"))
        lua = self.lua
        host = lua.create_table()
        for name, fn in (("clock", self._clock), ("sleep", self._sleep), ("http", self._http),
                         ("jsonEncode", self._json_encode), ("jsonDecode", self._json_decode),
                         ("base64Decode", self._b64decode), ("base64Encode", self._b64encode),
                         ("compile", self._compile)):
            host.set(name, lua.create_function(fn))
        if self.echo:
            host.set("echo", lua.create_function(self._echo))
        with open(MOCK, encoding="utf-8") as f:
            mock = lua.load_chunk(f.read(), name="=roblox_mock")
        world_class = mock(host)[0]
        self.world = world_class.get("new")()[0]

    # -- driving the world ------------------------------------------------------------------

    def call(self, method, *args):
        """world:method(*args), arguments converted to Luau, the results to Python."""
        fn = self.world.get(method)
        results = fn(self.world, *[self.to_lua(a) for a in args])
        return [self.to_py(r) for r in results]

    def call_raw(self, method, *args):
        """world:method(*args) without converting the results."""
        return self.world.get(method)(self.world, *[self.to_lua(a) for a in args])

    def run(self, timeout, until=None):
        """Runs the scheduler for up to `timeout` s, or until until() (Python) holds."""
        cond = None
        if until is not None:
            cond = self.lua.create_function(lambda _lua, _args: [bool(until())])
        return bool(self.world.get("run")(self.world, timeout, cond)[0])

    def errors(self):
        return self.to_py(self.world.get("errors"))

    def log(self):
        return self.to_py(self.world.get("log"))

    def output(self, who, kind=None):
        """The lines a machine ("server" or a player's name) printed, warned or erred."""
        return [e["text"] for e in self.log()
                if e["peer"] == who and (kind is None or e["kind"] == kind)]

    # -- conversions ------------------------------------------------------------------------

    def to_lua(self, value):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, bytes):
            return self.lua.create_string(value)
        if isinstance(value, dict):
            table = self.lua.create_table()
            for k, v in value.items():
                if v is not None:
                    table.set(self.to_lua(k), self.to_lua(v))
            return table
        if isinstance(value, (list, tuple)):
            table = self.lua.create_table()
            for v in value:
                table.push(self.to_lua(v))
            return table
        if isinstance(value, (self.pluau.Table, self.pluau.Function, self.pluau.String,
                              self.pluau.Buffer)):
            return value
        raise TypeError(f"no Luau value for {type(value).__name__}")

    def to_py(self, value, depth=0):
        """A Luau value as Python: strings as str (bytes when not UTF-8), tables as lists when
        their keys are 1..n, else dicts; other values as they come."""
        if isinstance(value, self.pluau.String):
            raw = value.as_bytes()
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw
        if isinstance(value, self.pluau.Table):
            if depth > 40:
                raise ValueError("a Luau table nested too deep (a cycle?)")
            items = [(self.to_py(k, depth + 1), v) for k, v in value]
            keys = [k for k, _ in items]
            if keys and all(isinstance(k, int) for k in keys) and \
                    sorted(keys) == list(range(1, len(keys) + 1)):
                return [self.to_py(v, depth + 1) for _, v in sorted(items, key=lambda kv: kv[0])]
            return {k: self.to_py(v, depth + 1) for k, v in items}
        return value

    # -- host functions (called from Luau with (lua, [args])) -----------------------------------

    def _echo(self, _lua, args):
        sys.stderr.write(self.to_py(args[0]) + "\n")
        return []

    @staticmethod
    def _clock(_lua, _args):
        return [time.monotonic()]

    @staticmethod
    def _sleep(_lua, args):
        time.sleep(max(0.0, float(args[0])))
        return []

    def _compile(self, lua, args):
        source, name, env = args
        try:
            return [lua.load_chunk(source.as_bytes(), name=str(name), env=env)]
        except Exception as e:  # a syntax error: Luau's message
            return [None, str(e)]

    def _json_encode(self, _lua, args):
        def plain(v):
            if isinstance(v, self.pluau.String):
                return v.as_bytes().decode("utf-8", errors="replace")
            if isinstance(v, self.pluau.Table):
                py = [(plain(k), plain(val)) for k, val in v]
                keys = [k for k, _ in py]
                if not py:
                    return []
                if all(isinstance(k, int) for k in keys) and \
                        sorted(keys) == list(range(1, len(keys) + 1)):
                    return [val for _, val in sorted(py, key=lambda kv: kv[0])]
                if not all(isinstance(k, str) for k in keys):
                    raise ValueError("a table mixes string and number keys")
                return dict(py)
            if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
                return int(v)  # Roblox writes 5000, not 5000.0
            return v
        try:
            return [json.dumps(plain(args[0]), allow_nan=False, separators=(",", ":"))]
        except (ValueError, TypeError) as e:
            return [None, str(e)]

    def _json_decode(self, _lua, args):
        try:
            return [True, self.to_lua(json.loads(args[0].as_bytes()))]
        except (ValueError, UnicodeDecodeError) as e:
            return [False, str(e)]

    @staticmethod
    def _b64decode(lua, args):
        try:
            return [lua.create_string(base64.b64decode(args[0].as_bytes(), validate=True))]
        except (binascii.Error, ValueError) as e:
            return [None, f"not base64 ({e})"]

    @staticmethod
    def _b64encode(lua, args):
        return [lua.create_string(base64.b64encode(args[0].as_bytes()))]

    def _target(self, url):
        for base, target in self.url_map.items():
            if url == base or url.startswith(base + "/") or url.startswith(base + "?"):
                return target + url[len(base):]
        return None

    def _http(self, lua, args):
        method, url, headers, body = args
        method, url = str(method), str(url)
        headers = {str(k): str(v) for k, v in headers}
        body = body.as_bytes() if body is not None else None
        entry = {"method": method, "url": url, "headers": headers, "body": _json_or(body),
                 "started": time.monotonic()}
        target = self._target(url)
        parsed = urllib.parse.urlsplit(target or "")
        if target is None or parsed.hostname != "127.0.0.1":
            entry.update(error="HttpError: DnsResolve", finished=time.monotonic())
            return self._logged(entry, [False, "HttpError: DnsResolve"])
        send = {**ROBLOX_DEFAULT_HEADERS, **headers}
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=HTTP_TIMEOUT_S)
        try:
            conn.request(method, parsed.path + (f"?{parsed.query}" if parsed.query else ""),
                         body=body, headers=send)
            response = conn.getresponse()
            data = response.read()
            status, reason = response.status, response.reason
            answer_headers = {k: v for k, v in response.getheaders()}
        except ConnectionRefusedError:
            entry.update(error="HttpError: ConnectFail", finished=time.monotonic())
            return self._logged(entry, [False, "HttpError: ConnectFail"])
        except TimeoutError:
            entry.update(error="HttpError: Timedout", finished=time.monotonic())
            return self._logged(entry, [False, "HttpError: Timedout"])
        except (OSError, http.client.HTTPException) as e:
            entry.update(error=f"HttpError: NetFail ({e})", finished=time.monotonic())
            return self._logged(entry, [False, "HttpError: NetFail"])
        finally:
            conn.close()
        encoding = {k.lower(): v for k, v in answer_headers.items()}.get("content-encoding", "")
        if encoding == "gzip":
            data = gzip.decompress(data)
        elif encoding == "deflate":
            data = zlib.decompress(data)
        entry.update(status=status, response_headers=answer_headers, response=_json_or(data),
                     finished=time.monotonic())
        if self.lose_answer is not None and self.lose_answer(entry):
            entry["lost"] = True
            return self._logged(entry, [False, "HttpError: Timedout"])
        return self._logged(entry, [True, status, reason, self.to_lua(answer_headers),
                                    lua.create_string(data)])

    def _logged(self, entry, results):
        self.exchanges.append(entry)
        if self.on_exchange is not None:
            self.on_exchange(entry)
        return results


def _json_or(data):
    """JSON bytes parsed, other bytes as they are, None as None."""
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return data
