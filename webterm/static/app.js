// The web terminal's page: a login form, then the DCUI in xterm.js over one
// WebSocket. Binary frames carry terminal bytes both ways; text frames carry
// JSON control. The cookie is HttpOnly: the page only ever holds the CSRF
// token, in memory. Everything comes from this origin (CSP default-src 'self').
import './xterm-csp.js'; // first: lets xterm style itself under the CSP
import { Terminal } from './vendor/xterm/xterm.mjs';
import { FitAddon } from './vendor/addon-fit/addon-fit.mjs';

const PROTOCOL = 'virtcon.webterm.v1';
const RETRY_EVERY_MS = 1000;
const RETRY_FOR_MS = 20000; // the server keeps a dropped session's PTY this long
const RESIZE_DEBOUNCE_MS = 50;
// Closes the server makes on purpose: the session is over, log in again.
const ENDED = {
  4001: 'The session was locked after being idle.',
  4003: 'Logged out.',
  4008: 'The session reached its time limit.',
};

const $ = (id) => document.getElementById(id);
const form = $('login');
const userField = $('user');
const passwordField = $('password');
const loginError = $('login-error');
const box = $('terminal');
const who = $('who');
const banner = $('banner');
const logoutButton = $('logout');

const host = location.hostname;
let csrf = '';
let lastUser = ''; // offered again when the session ends
let term = null;
let fit = null;
let ws = null;
let observer = null;
let sent = { cols: 0, rows: 0 }; // the size the server has been told
let retryUntil = 0;
let exitReason = '';
let idleWarned = false; // the banner shows the idle countdown
const timers = { resize: 0, retry: 0, countdown: 0 };

function say(text) {
  banner.textContent = text;
  banner.hidden = !text;
  clearInterval(timers.countdown);
  idleWarned = false;
}

function api(path, init = {}) {
  return fetch(path, { credentials: 'same-origin', cache: 'no-store', ...init });
}

async function errorText(r, fallback) {
  const body = await r.json().catch(() => ({}));
  return (body && typeof body.error === 'string' && body.error) || fallback;
}

// showLogin ends whatever terminal there is and shows the form with msg.
function showLogin(msg) {
  teardown();
  csrf = '';
  who.textContent = `virtcon — ${host}`;
  document.title = `virtcon — ${host}`;
  logoutButton.hidden = true;
  box.hidden = true;
  form.hidden = false;
  loginError.textContent = msg || '';
  if (!userField.value) userField.value = lastUser;
  (userField.value ? passwordField : userField).focus();
}

function teardown() {
  clearTimeout(timers.resize);
  clearTimeout(timers.retry);
  say('');
  if (ws) {
    ws.onclose = null;
    ws.close();
    ws = null;
  }
  if (observer) observer.disconnect();
  if (term) term.dispose();
  observer = term = fit = null;
  window.__term = null;
}

form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const submit = form.querySelector('button[type=submit]');
  submit.disabled = true;
  loginError.textContent = '';
  try {
    const r = await api('/api/login', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ user: userField.value, password: passwordField.value }),
    });
    if (r.ok) {
      passwordField.value = '';
      const body = await r.json();
      csrf = body.csrf;
      openTerminal(body.user || userField.value);
    } else if (r.status === 429) {
      const wait = r.headers.get('Retry-After');
      loginError.textContent = wait
        ? `Too many attempts: wait ${wait} s and try again.`
        : 'Too many attempts: wait and try again.';
    } else if (r.status === 401) {
      passwordField.value = '';
      loginError.textContent = await errorText(r, 'login refused');
    } else {
      loginError.textContent = await errorText(r, `login failed: HTTP ${r.status}`);
    }
  } catch (e) {
    loginError.textContent = `cannot reach the server: ${e.message}`;
  } finally {
    submit.disabled = false;
  }
});

logoutButton.addEventListener('click', async () => {
  let msg = 'Logged out.';
  try {
    const r = await api('/api/logout', { method: 'POST', headers: { 'X-CSRF-Token': csrf } });
    if (!r.ok) msg = await errorText(r, `logout failed: HTTP ${r.status}`);
  } catch (e) {
    msg = `logout failed: ${e.message}`;
  }
  showLogin(msg);
});

function openTerminal(user) {
  teardown();
  lastUser = user;
  form.hidden = true;
  loginError.textContent = '';
  who.textContent = `${user}@${host}`;
  document.title = `${user}@${host} — virtcon`;
  logoutButton.hidden = false;
  box.hidden = false;

  term = new Terminal({ cursorBlink: true, scrollback: 1000, fontFamily: 'monospace', convertEol: false });
  fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  window.__term = term;

  const enc = new TextEncoder();
  term.onData((d) => {
    if (idleWarned) say(''); // the key resets the server's idle clock
    send(enc.encode(d));
  });
  // onBinary: a string of bytes (mouse reports in X10 mode), one char each.
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));

  observer = new ResizeObserver(() => {
    clearTimeout(timers.resize);
    timers.resize = setTimeout(resized, RESIZE_DEBOUNCE_MS);
  });
  observer.observe(box);

  retryUntil = 0;
  connect();
  term.focus();
}

function send(data) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(data);
}

function resized() {
  if (!term) return;
  fit.fit();
  if (term.cols === sent.cols && term.rows === sent.rows) return;
  if (ws && ws.readyState === WebSocket.OPEN) {
    ws.send(JSON.stringify({ t: 'resize', cols: term.cols, rows: term.rows }));
    sent = { cols: term.cols, rows: term.rows };
  }
}

function connect() {
  exitReason = '';
  const sock = new WebSocket(`wss://${location.host}/ws?cols=${term.cols}&rows=${term.rows}`, PROTOCOL);
  sock.binaryType = 'arraybuffer';
  sent = { cols: term.cols, rows: term.rows };
  sock.onopen = () => {
    retryUntil = 0;
    say('');
    resized(); // the window may have changed while we were away
  };
  sock.onmessage = (ev) => {
    if (typeof ev.data === 'string') control(ev.data);
    else term.write(new Uint8Array(ev.data));
  };
  sock.onclose = (ev) => {
    if (ws !== sock) return;
    ws = null;
    if (ENDED[ev.code]) showLogin(ENDED[ev.code]);
    else if (exitReason) showLogin(exitReason);
    else retry();
  };
  ws = sock;
}

function control(text) {
  let m;
  try {
    m = JSON.parse(text);
  } catch {
    return; // not ours to act on
  }
  if (m.t === 'idle-warning') {
    let left = Number(m.in) || 0;
    say(`locking in ${left} s: press a key`);
    idleWarned = true;
    timers.countdown = setInterval(() => {
      left = Math.max(0, left - 1);
      banner.textContent = `locking in ${left} s: press a key`;
    }, 1000);
  } else if (m.t === 'exit') {
    exitReason = m.reason ? `The session ended: ${m.reason}` : 'The session ended.';
    say(exitReason);
  }
  // (read-only is the DCUI's own: its header says [RO] and who holds the
  // console lock; the server sends no control frame for it)
}

// retry reconnects an unexpectedly closed socket every second for up to
// RETRY_FOR_MS (the server hands the same PTY back), asking first whether
// the cookie still holds, so a dead session goes to the form at once.
function retry() {
  if (!retryUntil) retryUntil = Date.now() + RETRY_FOR_MS;
  if (Date.now() >= retryUntil) {
    showLogin('The connection was lost.');
    return;
  }
  say('connection lost: reconnecting…');
  const mine = term;
  timers.retry = setTimeout(async () => {
    try {
      const r = await api('/api/session');
      if (term !== mine) return; // logged out or in again meanwhile
      if (r.status === 401) {
        showLogin('The session has ended: log in again.');
        return;
      }
      if (r.ok) {
        const body = await r.json();
        csrf = body.csrf || csrf;
        if (body.refused) {
          // refused before the upgrade (a session limit): retrying is no use
          retryUntil = 0;
          say(`no session: ${body.refused}; close another tab or session, then reload`);
          return;
        }
      }
    } catch {
      // the server is away: try the socket anyway, it fails fast
    }
    if (term === mine && !ws) connect();
  }, RETRY_EVERY_MS);
}

async function start() {
  try {
    const r = await api('/api/session');
    if (r.ok) {
      const body = await r.json();
      csrf = body.csrf;
      openTerminal(body.user);
      return;
    }
    showLogin('');
  } catch (e) {
    showLogin(`cannot reach the server: ${e.message}`);
  }
}

start();
