"""A page as a reader's browser shows it: headless Chromium driven over the Chrome DevTools Protocol on a
websocket, with Python's standard library only (no selenium or playwright to install).

:func:`inspect_page` opens an HTML file at a fixed window size and returns what the slow browser tests check:
the console errors, each picture (decoded, its size, and whether any ink touches its left or right edge, which
is where a cropped title or legend shows), the sections and tables, the elements wider than the window outside
a sideways-scrolling box, and each code block's widths and overflow (``pre`` and its ``code``). It can also
save a screenshot. ``python -m tests.report.chromium PAGE PNG`` makes the screenshot of the study page in
docs/images/ (see docs/study.md).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, HEIGHT = 1280, 900
"""The window: a laptop's, where the page's 1100 px column fits with room on both sides."""
START_TIMEOUT = 30.0
"""Seconds Chromium may take to open its debugging port (a cold start on a busy 2-core machine: ~2 s)."""

# Runs in the page once it has loaded: every number the tests check, as one JSON-able object.
PROBE = r"""
(async () => {
  const ink = (context, x, height) => {
    const data = context.getImageData(x, 0, 1, height).data;
    let count = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (Math.min(data[i], data[i + 1], data[i + 2]) < 245) count++;
    }
    return count;
  };
  const images = [];
  for (const img of document.images) {
    let decoded = true;
    try { await img.decode(); } catch (error) { decoded = false; }
    const width = img.naturalWidth, height = img.naturalHeight;
    let left = null, right = null;
    if (decoded && width > 0) {
      const canvas = document.createElement("canvas");
      canvas.width = width; canvas.height = height;
      const context = canvas.getContext("2d");
      context.drawImage(img, 0, 0);
      left = ink(context, 0, height); right = ink(context, width - 1, height);
    }
    images.push({alt: img.alt, decoded, width, height, shown: img.getBoundingClientRect().width,
                 inkLeft: left, inkRight: right});
  }
  const viewport = document.documentElement.clientWidth;
  const describe = (element) => element.tagName.toLowerCase() +
    (element.className ? "." + element.className : "") + ": " + element.textContent.slice(0, 60);
  const scrolls = (element) => ["auto", "scroll"].includes(getComputedStyle(element).overflowX);
  const inScrollBox = (element) => {
    for (let box = element.parentElement; box; box = box.parentElement) if (scrolls(box)) return true;
    return false;
  };
  const overflowing = [...document.body.querySelectorAll("*")]
    .filter((element) => element.getBoundingClientRect().right > viewport + 0.5)
    .filter((element) => !inScrollBox(element))
    .map(describe);
  const box = (element) => element && {scrollWidth: element.scrollWidth, clientWidth: element.clientWidth,
                                       overflowX: getComputedStyle(element).overflowX};
  const codeBlocks = [...document.querySelectorAll("pre")].map((pre) => ({
    text: pre.textContent.slice(0, 60), pre: box(pre), code: box(pre.querySelector(":scope > code")),
  }));
  const tables = [...document.querySelectorAll("table")].map((table) => {
    const box = table.parentElement;
    return {
      caption: table.caption ? table.caption.textContent : "",
      headers: [...table.querySelectorAll("thead th")].map((th) => th.textContent),
      rows: table.tBodies[0].rows.length,
      inScrollBox: box.classList.contains("table-wrap") && getComputedStyle(box).overflowX === "auto",
      boxRight: box.getBoundingClientRect().right,
      width: table.getBoundingClientRect().width,
      scrolls: box.scrollWidth > box.clientWidth,
    };
  });
  return {
    viewport,
    pageWidth: document.documentElement.scrollWidth,
    pageHeight: document.documentElement.scrollHeight,
    title: document.title, headings: [...document.querySelectorAll("h2")].map((h) => h.textContent),
    images, tables, overflowing, codeBlocks,
  };
})()
"""


@dataclass(frozen=True)
class PageView:
    """What :data:`PROBE` measured in the loaded page, and the console errors seen while it loaded."""

    errors: list[str]
    probe: dict[str, Any]


def find_chromium() -> str | None:
    """The Chromium (or Chrome) on PATH, None where there is none."""
    return next((path for path in map(shutil.which, NAMES) if path), None)


def inspect_page(page: Path, screenshot: Path | None = None, *, width: int = WIDTH,
                 height: int = HEIGHT, screenshot_height: int | None = None) -> PageView:
    """Open ``page`` in headless Chromium at ``width`` × ``height`` and measure it; with ``screenshot``,
    also save the page's top ``screenshot_height`` CSS pixels (its whole length without) as a PNG."""
    executable = find_chromium()
    if executable is None:
        raise FileNotFoundError(f"no Chromium on PATH (looked for {', '.join(NAMES)})")
    # Chromium's helper processes may still be closing their files in the profile when it is removed.
    with tempfile.TemporaryDirectory(prefix="bgbias-chromium-", ignore_cleanup_errors=True) as profile, \
            _Chromium(executable, Path(profile)) as tab:
        tab.call("Runtime.enable")
        tab.call("Log.enable")
        tab.call("Page.enable")
        tab.call("Emulation.setDeviceMetricsOverride",
                 width=width, height=height, deviceScaleFactor=1, mobile=False)
        tab.call("Page.navigate", url=page.resolve().as_uri())
        tab.wait_for("Page.loadEventFired")
        probe = tab.call("Runtime.evaluate", expression=PROBE, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in probe:
            raise RuntimeError(f"the probe failed in the page: {probe['exceptionDetails']}")
        measured = probe["result"]["value"]
        if screenshot is not None:
            shot_height = min(screenshot_height or measured["pageHeight"], measured["pageHeight"])
            data = tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                            clip={"x": 0, "y": 0, "width": width, "height": shot_height, "scale": 1})["data"]
            screenshot.write_bytes(base64.b64decode(data))
        return PageView(tab.errors(), measured)


class _Chromium:
    """A headless Chromium with one tab, spoken to over the tab's DevTools websocket."""

    def __init__(self, executable: str, profile: Path) -> None:
        self.executable, self.profile = executable, profile
        self.events: list[dict[str, Any]] = []
        self.next_id = 0

    def __enter__(self) -> _Chromium:
        log = (self.profile / "chromium.log").open("wb")
        # --no-sandbox: Chromium's sandbox refuses to start as root (a container's CI); the page is ours.
        # --allow-file-access-from-files: a picture beside the page (the docs site's images/) is then of the
        # page's origin, so that the probe may read its pixels.
        self.process = subprocess.Popen(
            [self.executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--hide-scrollbars", "--allow-file-access-from-files", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}",
             "about:blank"], stdout=log, stderr=log, start_new_session=True)
        log.close()
        try:
            port = self._port()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                targets = json.load(answer)
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            self.socket = _websocket(url)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.socket.close()
        self._stop()

    def _stop(self) -> None:
        """End Chromium and its helper processes (its own process group), waiting until none is left."""
        self._signal_group(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.process.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self._signal_group(0):
            time.sleep(0.05)

    def _signal_group(self, signum: int) -> bool:
        """Send ``signum`` to Chromium's process group; whether any process of it was left to receive it."""
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def _port(self) -> int:
        """The debugging port, from the file Chromium writes into its profile once it listens."""
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Chromium exited ({self.process.returncode}): "
                                   f"{(self.profile / 'chromium.log').read_text(errors='replace')[-2000:]}")
            lines = active.read_text().splitlines() if active.is_file() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise TimeoutError(f"Chromium opened no debugging port in {START_TIMEOUT:.0f} s")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        _send(self.socket, json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(_receive(self.socket))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def wait_for(self, event: str) -> None:
        while not any(message.get("method") == event for message in self.events):
            self.events.append(json.loads(_receive(self.socket)))

    def errors(self) -> list[str]:
        """The console's errors: console.error calls, uncaught exceptions and the browser's own log errors
        (a resource that failed to load, a picture that failed to decode)."""
        found = []
        for message in self.events:
            params = message.get("params", {})
            match message.get("method"):
                case "Runtime.consoleAPICalled" if params["type"] in ("error", "assert"):
                    found.append(" ".join(str(arg.get("value", arg.get("description")))
                                          for arg in params["args"]))
                case "Runtime.exceptionThrown":
                    found.append(params["exceptionDetails"].get("text", "exception"))
                case "Log.entryAdded" if params["entry"]["level"] == "error":
                    found.append(params["entry"]["text"])
        return found


def _websocket(url: str) -> socket.socket:
    """A client websocket to ``ws://host:port/path`` (RFC 6455's opening handshake)."""
    address, _, path = url.removeprefix("ws://").partition("/")
    host, _, port = address.partition(":")
    connection = socket.create_connection((host, int(port)), timeout=60)
    key = base64.b64encode(os.urandom(16)).decode()
    connection.sendall((f"GET /{path} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = connection.recv(1)
        if not chunk:
            raise ConnectionError("Chromium closed the websocket during its handshake")
        head += chunk
    if b" 101 " not in head.split(b"\r\n", 1)[0]:
        raise ConnectionError(f"Chromium refused the websocket: {head.decode(errors='replace')}")
    return connection


def _send(connection: socket.socket, text: str) -> None:
    """One masked text frame (a client must mask what it sends)."""
    payload = text.encode()
    size = len(payload)
    header = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else
                              bytes([0x80 | 126]) + struct.pack(">H", size) if size < 1 << 16 else
                              bytes([0x80 | 127]) + struct.pack(">Q", size))
    mask = os.urandom(4)
    connection.sendall(header + mask + bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload)))


def _receive(connection: socket.socket) -> str:
    """One message: its frames' payloads joined (a screenshot comes in several)."""
    parts = []
    while True:
        first, second = _exactly(connection, 2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", _exactly(connection, 2))[0]
        elif size == 127:
            size = struct.unpack(">Q", _exactly(connection, 8))[0]
        payload = _exactly(connection, size)
        if first & 0x0F == 0x8:
            raise ConnectionError("Chromium closed the websocket")
        if first & 0x0F in (0x0, 0x1, 0x2):
            parts.append(payload)
            if first & 0x80:
                return b"".join(parts).decode()


def _exactly(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("Chromium closed the websocket")
        data += chunk
    return bytes(data)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tests.report.chromium PAGE.html SCREENSHOT.png")
    view = inspect_page(Path(sys.argv[1]), Path(sys.argv[2]), screenshot_height=1900)
    print(json.dumps({"errors": view.errors, "overflowing": view.probe["overflowing"]}, indent=1))
