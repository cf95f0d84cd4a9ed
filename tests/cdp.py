"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`): no network, no extra
package. Enough to open a page, find an element, and click it with the mouse as a reader would."""
import json, os, select, subprocess, time


class Browser:
    "One headless Chromium; `page(url)` opens a tab, `click(session, selector)` clicks an element's centre."
    def __init__(self, exe: str, user_dir, download_dir):
        r_in, self._w = os.pipe(); self._r, w_out = os.pipe()
        def fds(): os.dup2(r_in, 3); os.dup2(w_out, 4)          # Chromium reads commands on fd 3, answers on fd 4
        self.proc = subprocess.Popen(
            [exe, '--headless', '--no-sandbox', '--disable-gpu', '--remote-debugging-pipe', '--no-first-run', '--disable-quic',
             '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage',
             f'--user-data-dir={user_dir}', '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost', 'about:blank'],
            pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(r_in); os.close(w_out)
        self._id, self._buf, self.events = 0, b'', []
        self.send('Browser.setDownloadBehavior', {'behavior': 'allow', 'downloadPath': str(download_dir), 'eventsEnabled': True})

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60):
        self._id += 1
        msg = {'id': self._id, 'method': method, 'params': params or {}, **({'sessionId': session} if session else {})}
        os.write(self._w, json.dumps(msg).encode() + b'\0')
        end = time.time() + timeout
        while (m := self._next(end - time.time())) is not None:
            if m.get('id') == self._id:
                if 'error' in m: raise RuntimeError(f"{method}: {m['error']}")
                return m.get('result', {})
            self.events.append(m)
        raise TimeoutError(f"{method}: no answer in {timeout} s")

    def _next(self, timeout: float):
        while b'\0' not in self._buf:
            if not select.select([self._r], [], [], max(0.0, timeout))[0]: return None
            chunk = os.read(self._r, 1 << 16)
            if not chunk: return None
            self._buf += chunk
        raw, self._buf = self._buf.split(b'\0', 1)
        return json.loads(raw)

    def wait(self, pred, timeout: float = 30):
        "The first event (seen or to come) for which `pred` holds, or None after `timeout` seconds."
        end = time.time() + timeout
        while time.time() < end:
            if (hit := next((m for m in self.events if pred(m)), None)) is not None: return hit
            if (m := self._next(0.2)) is not None: self.events.append(m)
        return None

    def page(self, url: str) -> str:
        "Open `url` in a new tab and wait for it to load; the tab's session id."
        target = self.send('Target.createTarget', {'url': 'about:blank'})['targetId']
        session = self.send('Target.attachToTarget', {'targetId': target, 'flatten': True})['sessionId']
        self.send('Page.enable', session=session)
        self.goto(session, url)
        return session

    def goto(self, session: str, url: str, timeout: float = 30):
        "Navigate and wait until the tab shows `url`, loaded (not the late load event of the page before, which can come first)."
        self.events.clear()
        self.send('Page.navigate', {'url': url}, session=session)
        end = time.time() + timeout
        while time.time() < end:
            try:
                if self.evaluate(session, "document.readyState === 'complete' && location.href") == url: return
            except RuntimeError: pass          # the old document's context went away mid-evaluation
            time.sleep(0.05)
        raise AssertionError(f"{url} did not load in {timeout} s")

    def evaluate(self, session: str, expression: str):
        return self.send('Runtime.evaluate', {'expression': expression, 'returnByValue': True}, session=session)['result'].get('value')

    def click(self, session: str, selector: str) -> str:
        "Click the centre of the first element matching `selector` with the mouse; the URL it led to (a page or a download)."
        where = self.evaluate(session, f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null; "
                                       "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
                                       "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        assert where, f"no element matches {selector}"
        self.events.clear()
        for kind in ('mousePressed', 'mouseReleased'):
            self.send('Input.dispatchMouseEvent', {'type': kind, 'x': where[0], 'y': where[1], 'button': 'left', 'clickCount': 1},
                      session=session)
        m = self.wait(lambda m: (m.get('method') == 'Page.frameNavigated' and not m['params']['frame'].get('parentId'))
                      or m.get('method') == 'Browser.downloadWillBegin')
        assert m, f"clicking {selector} led nowhere"
        return m['params']['url'] if m['method'] == 'Browser.downloadWillBegin' else m['params']['frame']['url']

    def close(self):
        try: self.send('Browser.close', timeout=10)
        except (RuntimeError, TimeoutError, OSError): pass
        try: self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired: self.proc.kill()


# Whether any handler planted in a page ran, and how many elements carry a script or an on* attribute
HANDLERS = "[...document.querySelectorAll('*')].filter(e => e.tagName === 'SCRIPT' || [...e.attributes].some(a => a.name.startsWith('on'))).length"


def inert(browser: Browser, tab, page, ran: str) -> tuple:
    "Open `page`: (whether the JS expression `ran` is true there, the elements with a script or handler)."
    browser.goto(tab, page.resolve().as_uri())
    fired, handlers = browser.evaluate(tab, f"[Boolean({ran}), {HANDLERS}]")
    return fired, handlers


def pages_showing_as_text(browser: Browser, site, text: str, ran: str) -> list[str]:
    """Open every page of a site: on each, no planted handler ran (`ran` is false) and no element has a script or handler
    (else an assertion names the page); the pages on which `text` is shown, as text a reader sees."""
    tab, shown = browser.page('about:blank'), []
    for page in sorted(site.rglob('*.html')):
        fired, handlers = inert(browser, tab, page, ran)
        assert not fired and handlers == 0, f"{page.relative_to(site)}: a handler ran: {fired}; elements with a script or handler: {handlers}"
        if browser.evaluate(tab, f"document.body.innerText.includes({json.dumps(text)})"): shown.append(page.relative_to(site).as_posix())
    return shown
