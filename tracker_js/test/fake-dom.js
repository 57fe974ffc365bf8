// A tiny hand-made fake of the browser globals the tracker uses:
// window, location, document (+ elements with closest()), history,
// navigator (doNotTrack, sendBeacon), localStorage, fetch, crypto.
// Every request the tracker makes is recorded in win.sent as
// { via, url, body (parsed JSON), init }.

class Target {
  constructor() {
    this.listeners = {}
  }
  addEventListener(type, fn) {
    ;(this.listeners[type] ||= []).push(fn)
  }
  dispatch(type, event = {}) {
    for (const fn of this.listeners[type] || []) fn(event)
  }
}

class Location {
  constructor(href) {
    this.assign(href)
  }
  assign(href) {
    this._url = new URL(href, this._url)
  }
  get href() {
    return this._url.href
  }
  get protocol() {
    return this._url.protocol
  }
  get host() {
    return this._url.host
  }
  get hostname() {
    return this._url.hostname
  }
  get pathname() {
    return this._url.pathname
  }
  get search() {
    return this._url.search
  }
  get hash() {
    return this._url.hash
  }
  get origin() {
    return this._url.origin
  }
}

// Elements support getAttribute, attributes, parentNode and closest('tag[attr]') /
// closest('tag') / closest('[attr]'); <a> gets href/hostname/pathname like a browser.
class Element {
  constructor(doc, tag, attrs = {}, parent = null) {
    this.ownerDocument = doc
    this.tagName = tag.toUpperCase()
    this.attrs = attrs
    this.parentNode = parent
  }
  getAttribute(name) {
    return name in this.attrs ? String(this.attrs[name]) : null
  }
  matches(selector) {
    const m = /^([a-z]*)(?:\[([a-z-]+)\])?$/i.exec(selector)
    if (!m) throw new Error('fake DOM: unsupported selector ' + selector)
    return (!m[1] || m[1].toUpperCase() === this.tagName) && (!m[2] || m[2] in this.attrs)
  }
  closest(selector) {
    for (let el = this; el; el = el.parentNode) if (el.matches(selector)) return el
    return null
  }
  get _url() {
    const href = this.getAttribute('href')
    return href === null ? null : new URL(href, this.ownerDocument.location.href)
  }
  get href() {
    return this.tagName === 'A' && this._url ? this._url.href : undefined
  }
  get hostname() {
    return this.tagName === 'A' && this._url ? this._url.hostname : undefined
  }
  get pathname() {
    return this.tagName === 'A' && this._url ? this._url.pathname : undefined
  }
  get attributes() {
    return Object.entries(this.attrs).map(([name, value]) => ({ name, value: String(value) }))
  }
}

/**
 * fakeWindow(options) builds a fresh window.
 *   url, referrer, title, width: page state
 *   fetch: false to remove window.fetch; beacon: false to remove sendBeacon
 *   dnt: value of navigator.doNotTrack
 *   storage: initial localStorage contents; storageThrows: getItem throws
 *   script: data-* attributes of document.currentScript (without "data-"),
 *   scriptSrc: its src (default https://stats.example.org/tracker.js)
 *   randomBytes: fill function for crypto.getRandomValues (default Node's crypto)
 */
export function fakeWindow(opts = {}) {
  const win = new Target()
  const sent = []
  win.sent = sent
  win.location = new Location(opts.url || 'https://shop.example.com/products?page=2#top')
  win.innerWidth = opts.width ?? 1280

  const doc = new Target()
  doc.location = win.location
  doc.referrer = opts.referrer ?? 'https://search.example.net/?q=shoes'
  doc.title = opts.title ?? 'Products'
  doc.createElement = (tag, attrs, parent) => new Element(doc, tag, attrs, parent)
  doc.body = doc.createElement('body')
  if (opts.script !== undefined) {
    const attrs = {}
    for (const [k, v] of Object.entries(opts.script)) attrs['data-' + k] = v
    doc.currentScript = doc.createElement('script', attrs, doc.body)
    doc.currentScript.src = opts.scriptSrc ?? 'https://stats.example.org/tracker.js'
  } else {
    doc.currentScript = null
  }
  win.document = doc

  const stack = [{ state: null, href: win.location.href }]
  win.history = {
    get length() {
      return stack.length
    },
    state: null,
    pushState(state, _title, url) {
      if (url !== undefined && url !== null) win.location.assign(url)
      this.state = state
      stack.push({ state, href: win.location.href })
    },
    replaceState(state, _title, url) {
      if (url !== undefined && url !== null) win.location.assign(url)
      this.state = state
      stack[stack.length - 1] = { state, href: win.location.href }
    },
  }
  // Simulates the back button: location changes, then popstate fires.
  win.goBack = () => {
    stack.pop()
    const top = stack[stack.length - 1]
    win.location.assign(top.href)
    win.history.state = top.state
    win.dispatch('popstate', { state: top.state })
  }

  const store = new Map(Object.entries(opts.storage || {}))
  win.localStorage = {
    getItem(k) {
      if (opts.storageThrows) throw new Error('SecurityError: storage blocked')
      return store.has(k) ? store.get(k) : null
    },
    setItem(k, v) {
      store.set(k, String(v))
    },
    removeItem(k) {
      store.delete(k)
    },
  }

  win.navigator = { userAgent: 'fake', doNotTrack: opts.dnt ?? null }
  if (opts.beacon !== false) {
    win.navigator.sendBeacon = (url, body) => {
      sent.push({ via: 'beacon', url, body: JSON.parse(body), raw: body })
      return true
    }
  }
  if (opts.fetch !== false) {
    win.fetch = (url, init) => {
      sent.push({ via: 'fetch', url, body: JSON.parse(init.body), raw: init.body, init })
      return Promise.resolve({ status: 202, ok: true })
    }
  }

  win.crypto = {
    getRandomValues: opts.randomBytes
      ? (arr) => (opts.randomBytes(arr), arr)
      : (arr) => globalThis.crypto.getRandomValues(arr),
  }

  // Helpers for tests: click an element (bubbles to document).
  win.click = (target, extra = {}) => doc.dispatch('click', { target, button: 0, ...extra })
  win.auxclick = (target, button = 1) => doc.dispatch('auxclick', { target, button })
  win.window = win
  return win
}
