// Tally browser tracker. One small dependency-free script.
//
// Two ways to use it:
//  * script tag: the IIFE build (dist/tally.min.js) calls boot(window), which
//    reads data-* attributes from its own <script> and exposes window.tally;
//  * ES module: import { createTracker } from 'dist/tally.esm.js'.
//
// Every function that touches the browser takes the window as an argument
// (defaulting to the real one) so the unit tests can pass a hand-made fake.

// Replaced with the package version at build time (see build.mjs); the tests
// set globalThis.__TALLY_VERSION__ before importing this file.
const VERSION = typeof __TALLY_VERSION__ == 'string' ? __TALLY_VERSION__ : 'dev'

// Server-side limits of the event fields (spec: POST /api/service/event).
const LIMITS = { n: 64, u: 2048, p: 2048, r: 2048, t: 512, sid: 64 }

const LOCAL_HOST = /^(localhost|127\.0\.0\.1|\[::1\])$/

// With hash routing (`hash: true`) the hash is part of the page: `/app/#/settings`.
const path = (loc, hash) => loc.pathname + loc.search + (hash ? loc.hash : '')

// A visit ends after this long without events (as on the server).
const IDLE_MS = 30 * 60 * 1000

// Random in-memory session id: 16 random bytes as 32 hex characters.
const newSid = (w) =>
  Array.from(w.crypto.getRandomValues(new Uint8Array(16)), (b) => (b + 256).toString(16).slice(1)).join('')

// File types whose link clicks count as downloads with `downloads: true` (Plausible's default list).
const DOWNLOADS = 'pdf,xlsx,docx,txt,rtf,csv,exe,key,pps,ppt,pptx,7z,pkg,rar,gz,zip,avi,mov,mp4,mpeg,wmv,midi,mp3,wav,wma,dmg'

// The page as the dashboard lists it: the pathname, with hash routing plus the route without its query.
const page = (loc, hash) => loc.pathname + (hash ? loc.hash.split('?')[0] : '')

// Pages without pageviews, as Plausible's data-exclude names them ('/admin/**, /preview/*' or an array): *
// is any text but '/' and spaces, ** any text, everything else itself, and a trailing '/' may follow.
const pattern = (list) =>
  RegExp('^(' + ('' + list).split(',').map((p) => p.trim().replace(/[.+?^${}()|[\]\\]/g, '\\$&')
    .replace(/\*\*?/g, (m) => (m[1] ? '.*' : '[^\\s/]*'))).join('|') + ')/?$')

/**
 * createTracker({ site, api, defaultProps, beforeSend, auto, outbound, downloads, tagged,
 *                 respectDnt, allowLocalhost, hash, exclude })
 * Returns { track, identify, reset, setDefaultProps }.
 */
export function createTracker(o, w = window) {
  const loc = w.location
  const doc = w.document
  const nav = w.navigator
  const url = (o.api || '').replace(/\/+$/, '') + '/api/service/event'
  const defaults = Object.assign({}, o.defaultProps)
  // The id lives in memory only (no cookie, no storage), so each page load makes one. It goes out with
  // visit 'join': the server continues the visitor's open visit, so a multi-page site's visit is one
  // visit. After reset() it goes out with visit 'new': the server starts a visit of its own.
  let sid, last = 0, visit = 'join'
  const excluded = o.exclude && pattern(o.exclude)

  // Opt-outs are looked up at send time, so setting the flag later works.
  const ignored = () => {
    try {
      if (w.localStorage.getItem('tally_ignore') == 'true') return 1
    } catch (e) {
      // storage blocked (sandboxed iframe, privacy mode): not an opt-out
    }
    return (
      (o.respectDnt && (nav.doNotTrack == '1' || w.doNotTrack == '1')) ||
      (!o.allowLocalhost && (LOCAL_HOST.test(loc.hostname) || loc.protocol == 'file:'))
    )
  }

  // The referrer of the page in view: the document's for the first pageview, then the page before it (as
  // Umami's tracker does), so a single-page app's later pages are not counted as more arrivals from the
  // landing's referrer; the server leaves the site's own pages out of referrer lists and sources.
  let ref = doc.referrer
  let at = ''
  const send = (name, props) => {
    if (!o.site || ignored() || (name == 'pageview' && excluded && excluded.test(page(loc, o.hash)))) return
    if (name == 'pageview') {
      if (at) ref = at
      at = loc.href
    }
    const now = Date.now()
    if (!sid || now - last > IDLE_MS) {
      // A tab idle past the server's timeout starts a new visit too, under an id of its own.
      if (sid) visit = 'join'
      sid = newSid(w)
    }
    last = now
    let e = {
      s: o.site,
      n: '' + name,
      u: loc.href,
      p: path(loc, o.hash),
      r: ref,
      t: doc.title,
      w: w.innerWidth,
      props: Object.assign({}, defaults, props),
      sid,
      visit,
      v: VERSION,
      ts: now,
    }
    if (o.beforeSend) {
      // The hook gets a copy: if it throws half-way, the original is sent.
      const copy = JSON.parse(JSON.stringify(e))
      try {
        const r = o.beforeSend(copy)
        if (r === false) return
        e = r && typeof r == 'object' ? r : copy
      } catch (err) {
        console.warn('tally: beforeSend failed', err)
      }
    }
    // Cut to the limits, never between the two halves of a character: the server refuses a lone one.
    for (const k in LIMITS) if (typeof e[k] == 'string') e[k] = e[k].slice(0, LIMITS[k]).replace(/[\ud800-\udbff]$/, '')
    const body = JSON.stringify(e)
    try {
      if (w.fetch) {
        // text/plain keeps this a "simple" request: no CORS preflight.
        w.fetch(url, { method: 'POST', body, keepalive: true, headers: { 'Content-Type': 'text/plain' } }).catch(() => {})
      } else if (nav.sendBeacon) {
        nav.sendBeacon(url, body)
      }
    } catch (err) {
      // never let analytics break the page
    }
  }

  const t = {
    track: send,
    identify: (traits) => send('identify', traits),
    reset: () => {
      sid = 0
      visit = 'new'
    },
    setDefaultProps: (props) => {
      Object.assign(defaults, props)
    },
  }
  autotrack(t, w, o.auto !== false, o.outbound !== false, o.hash, o.downloads, o.tagged !== false)
  return t
}

// Automatic events, built on the public track(): pageviews on load and on
// SPA navigation (deduplicated on the page: the pathname, plus the hash route
// with hash routing), clicks on elements tagged data-tally-event, and link
// clicks: file downloads (opt-in) and outbound links.
function autotrack(t, w, pageviews, outbound, hash, downloads, tagged) {
  const loc = w.location
  if (pageviews) {
    let last
    const viewed = () => {
      // Deduplicated on the page, as the dashboard's page lists and Plausible see it: a query change (a
      // search box writing each keystroke to ?q=, a sort or filter) is the same page, not another pageview.
      const p = page(loc, hash)
      if (p != last) {
        last = p
        t.track('pageview')
      }
    }
    const h = w.history
    for (const k of ['pushState', 'replaceState']) {
      const orig = h[k]
      h[k] = function () {
        const r = orig.apply(this, arguments)
        viewed()
        return r
      }
    }
    w.addEventListener('popstate', viewed)
    // Back/forward to a page kept in the back/forward cache runs no script again: it is shown anew.
    w.addEventListener('pageshow', (e) => e.persisted && ((last = 0), viewed()))
    // A hash router's navigation fires hashchange (and, in most browsers, popstate: deduplicated).
    if (hash) w.addEventListener('hashchange', viewed)
    viewed()
  }
  // true: the default file types; a string or an array: those ('pdf,zip').
  const types = downloads && ('' + (downloads === true ? DOWNLOADS : downloads)).toLowerCase().split(/[\s,]+/)
  const click = (e) => {
    const el = e.target && e.target.closest && e.target
    if (!el) return
    // A tagged element (or one inside it) sends its event, with its data-tally-prop-* attributes as props,
    // and nothing else: the page author named what the click means.
    const tag = tagged && el.closest('[data-tally-event]')
    if (tag) {
      const props = {}
      for (const a of tag.attributes) if (a.name.startsWith('data-tally-prop-')) props[a.name.slice(16)] = a.value
      return t.track(tag.getAttribute('data-tally-event'), props)
    }
    const a = el.closest('a[href]')
    if (!a) return
    // An SVG <a> has no pathname (nor hostname): neither a download nor outbound.
    const file = (a.pathname || '').split('/').pop().split('.')
    if (types && file.length > 1 && types.includes(file.pop().toLowerCase())) t.track('file_download', { url: a.href })
    // hostname is '' for mailto:, tel:, javascript: links: not outbound.
    else if (outbound && a.hostname && a.hostname != loc.hostname) t.track('outbound', { url: a.href })
  }
  if (!outbound && !types && !tagged) return
  w.document.addEventListener('click', click)
  // middle-click opens the link in a new tab
  w.document.addEventListener('auxclick', (e) => e.button == 1 && click(e))
}

// Script-tag setup: <script defer src=".../tracker.js" data-site="ID"
// data-api="https://host" data-respect-dnt="true" data-allow-localhost="true"
// data-auto="false" data-hash="true" data-downloads="true" (or "pdf,zip")
// data-exclude="/admin/**, /preview/*">.
// Replays calls queued in window.tally.q, in order.
export function boot(w = window) {
  const s = w.document.currentScript
  const attr = (k) => s && s.getAttribute('data-' + k)
  const queue = (w.tally && w.tally.q) || []
  const t = createTracker(
    {
      site: attr('site'),
      api: attr('api') || (s && s.src ? new URL(s.src).origin : ''),
      respectDnt: attr('respect-dnt') == 'true',
      allowLocalhost: attr('allow-localhost') == 'true',
      hash: attr('hash') == 'true',
      exclude: attr('exclude'),
      auto: false,
      outbound: false,
      tagged: false,
    },
    w,
  )
  if (!attr('site')) console.warn('tally: data-site is missing')
  // tally('track', name, props) and the other methods by name; any other string is an event name, as in
  // Plausible's plausible('Signup', ...): tally('signup', props). Only own methods (not toString).
  const tally = function (method) {
    const rest = [].slice.call(arguments, 1)
    if (t.hasOwnProperty(method)) t[method].apply(0, rest)
    else if (typeof method == 'string') t.track(method, rest[0])
  }
  Object.assign(tally, t)
  w.tally = tally
  w.Tally = { createTracker: (o) => createTracker(o, w) }
  // Replay first, so queued setDefaultProps/identify precede the first pageview.
  for (const args of queue) tally.apply(0, args)
  const d = attr('downloads')
  autotrack(t, w, attr('auto') != 'false', true, attr('hash') == 'true', d == 'true' || (d != 'false' && d), true)
}
