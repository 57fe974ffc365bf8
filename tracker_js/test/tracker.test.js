// Unit tests of src/tracker.js in a hand-made fake window (test/fake-dom.js).
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { fakeWindow } from './fake-dom.js'

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
// The build replaces __TALLY_VERSION__ with the package version; do the same here.
globalThis.__TALLY_VERSION__ = pkg.version
const { createTracker, boot } = await import('../src/tracker.js')

const API = 'https://stats.example.org'
const ENDPOINT = API + '/api/service/event'
const bodies = (w) => w.sent.map((s) => s.body)
const names = (w) => w.sent.map((s) => s.body.n)
// A tracker with no automatic events, so each test sees only what it sends.
const manual = (w, opts = {}) => createTracker({ site: 'site-1', api: API, auto: false, outbound: false, ...opts }, w)

describe('payload', () => {
  test('automatic pageview on load carries every field, sent with fetch as text/plain', () => {
    const w = fakeWindow()
    const before = Date.now()
    createTracker({ site: 'site-1', api: API + '/' }, w)
    const after = Date.now()
    assert.equal(w.sent.length, 1)
    const { via, url, init, body } = w.sent[0]
    assert.equal(via, 'fetch')
    assert.equal(url, ENDPOINT)
    assert.equal(init.method, 'POST')
    assert.equal(init.keepalive, true)
    assert.deepEqual(init.headers, { 'Content-Type': 'text/plain' })
    assert.equal(typeof init.body, 'string')
    assert.deepEqual(Object.keys(body).sort(), ['n', 'p', 'props', 'r', 's', 'sid', 't', 'ts', 'u', 'v', 'visit', 'w'])
    assert.equal(body.s, 'site-1')
    assert.equal(body.n, 'pageview')
    assert.equal(body.u, 'https://shop.example.com/products?page=2#top')
    assert.equal(body.p, '/products?page=2')
    assert.equal(body.r, 'https://search.example.net/?q=shoes')
    assert.equal(body.t, 'Products')
    assert.equal(body.w, 1280)
    assert.deepEqual(body.props, {})
    assert.match(body.sid, /^[0-9a-f]{32}$/)
    assert.equal(body.visit, 'join', "a page load's id may continue the visitor's visit")
    assert.equal(body.v, pkg.version)
    assert.ok(body.ts >= before && body.ts <= after, 'ts is Date.now() at send time')
  })

  test('api without trailing slash, and default api is same-origin relative', () => {
    const w = fakeWindow()
    manual(w).track('a')
    manual(w, { api: undefined }).track('b')
    assert.deepEqual(
      w.sent.map((s) => s.url),
      [ENDPOINT, '/api/service/event'],
    )
  })

  test('custom event name and props', () => {
    const w = fakeWindow()
    manual(w).track('signup', { plan: 'pro', seats: 3, nested: { a: [1, 2] } })
    assert.equal(w.sent[0].body.n, 'signup')
    assert.deepEqual(w.sent[0].body.props, { plan: 'pro', seats: 3, nested: { a: [1, 2] } })
  })

  test('string fields are cut to the server limits', () => {
    const long = 'x'.repeat(5000)
    const w = fakeWindow({ url: 'https://shop.example.com/' + long, title: long, referrer: 'https://r.example/' + long })
    manual(w).track('e'.repeat(100))
    const b = w.sent[0].body
    assert.equal(b.n, 'e'.repeat(64))
    assert.equal(b.u.length, 2048)
    assert.equal(b.p.length, 2048)
    assert.ok(b.p.startsWith('/xxx'))
    assert.equal(b.r.length, 2048)
    assert.equal(b.t.length, 512)
  })

  test('a cut never splits a character in two (the server refuses a lone surrogate as invalid json)', () => {
    const w = fakeWindow({ title: 'x'.repeat(511) + '\u{1F600}' + 'tail' })
    manual(w).track('e'.repeat(63) + '\u{1F389}')
    const b = w.sent[0].body
    assert.equal(b.t, 'x'.repeat(511))
    assert.equal(b.n, 'e'.repeat(63))
    assert.doesNotMatch(w.sent[0].raw || JSON.stringify(b), /\\ud[89ab]/i)
  })

  test('missing site id sends nothing', () => {
    const w = fakeWindow()
    createTracker({ api: API }, w).track('x')
    assert.equal(w.sent.length, 0)
  })
})

describe('default props', () => {
  test('merged into every event, per-call props win, setDefaultProps extends', () => {
    const w = fakeWindow()
    const defaults = { app: 'web', plan: 'free' }
    const t = createTracker({ site: 'site-1', api: API, defaultProps: defaults, outbound: false }, w)
    t.track('upgrade', { plan: 'pro', from: 'banner' })
    t.setDefaultProps({ theme: 'dark', app: 'web2' })
    t.track('click')
    t.identify({ email: 'a@example.com', plan: 'team' })
    assert.deepEqual(bodies(w), [
      { ...bodies(w)[0], n: 'pageview', props: { app: 'web', plan: 'free' } },
      { ...bodies(w)[1], n: 'upgrade', props: { app: 'web', plan: 'pro', from: 'banner' } },
      { ...bodies(w)[2], n: 'click', props: { app: 'web2', plan: 'free', theme: 'dark' } },
      { ...bodies(w)[3], n: 'identify', props: { app: 'web2', plan: 'team', theme: 'dark', email: 'a@example.com' } },
    ])
    // neither the caller's defaults object nor later calls leak into each other
    assert.deepEqual(defaults, { app: 'web', plan: 'free' })
  })

  test('setDefaultProps works with no initial defaults', () => {
    const w = fakeWindow()
    const t = manual(w)
    t.setDefaultProps({ a: 1 })
    t.track('x', { b: 2 })
    assert.deepEqual(w.sent[0].body.props, { a: 1, b: 2 })
  })
})

describe('identify', () => {
  test('sends an identify event whose props are the traits', () => {
    const w = fakeWindow()
    manual(w).identify({ id: 'u42', plan: 'pro' })
    assert.equal(w.sent[0].body.n, 'identify')
    assert.deepEqual(w.sent[0].body.props, { id: 'u42', plan: 'pro' })
  })
})

describe('session id', () => {
  test('random per tracker, stable across events, new after reset(), never stored', () => {
    let counter = 0
    const w = fakeWindow({ randomBytes: (arr) => arr.fill(++counter) })
    const stored = []
    w.localStorage.setItem = (k, v) => stored.push([k, v])
    w.document.cookie = ''
    const t = manual(w)
    t.track('a')
    t.track('b')
    t.reset()
    t.track('c')
    t.track('d')
    const sids = bodies(w).map((b) => b.sid)
    assert.equal(sids[0], '01'.repeat(16))
    assert.equal(sids[1], sids[0])
    assert.equal(sids[2], '02'.repeat(16))
    assert.equal(sids[3], sids[2])
    assert.deepEqual(bodies(w).map((b) => b.visit), ['join', 'join', 'new', 'new'])
    assert.equal(counter, 2, 'crypto.getRandomValues called once per session')
    assert.deepEqual(stored, [])
    assert.equal(w.document.cookie, '')
  })

  test('a new id after 30 idle minutes, which may join a visit again', (ctx) => {
    let counter = 0
    let now = 1_800_000_000_000
    ctx.mock.method(Date, 'now', () => now)
    const w = fakeWindow({ randomBytes: (arr) => arr.fill(++counter) })
    const t = manual(w)
    t.track('a')
    now += 30 * 60 * 1000
    t.track('b') // exactly 30 minutes: the same visit
    t.reset()
    t.track('c')
    now += 30 * 60 * 1000 + 1
    t.track('d')
    assert.deepEqual(
      bodies(w).map((b) => [b.sid, b.visit]),
      [['01'.repeat(16), 'join'], ['01'.repeat(16), 'join'], ['02'.repeat(16), 'new'], ['03'.repeat(16), 'join']],
    )
  })

  test('two trackers get different real random ids', () => {
    const w = fakeWindow()
    manual(w).track('a')
    manual(w).track('a')
    assert.notEqual(w.sent[0].body.sid, w.sent[1].body.sid)
  })
})

describe('beforeSend', () => {
  test('receives automatic events too and may modify them', () => {
    const w = fakeWindow()
    const seen = []
    const t = createTracker(
      {
        site: 'site-1',
        api: API,
        beforeSend(e) {
          seen.push(e.n)
          return { ...e, u: e.u.replace(/\?.*$/, ''), props: { ...e.props, hooked: true } }
        },
      },
      w,
    )
    t.track('custom', { a: 1 })
    assert.deepEqual(seen, ['pageview', 'custom'])
    assert.equal(w.sent[0].body.u, 'https://shop.example.com/products')
    assert.deepEqual(w.sent[0].body.props, { hooked: true })
    assert.deepEqual(w.sent[1].body.props, { a: 1, hooked: true })
  })

  test('changes made in place are sent when the hook returns nothing', () => {
    const w = fakeWindow()
    manual(w, {
      beforeSend(e) {
        e.props.x = 1
      },
    }).track('a')
    assert.deepEqual(w.sent[0].body.props, { x: 1 })
  })

  test('returning false cancels the event', () => {
    const w = fakeWindow()
    const t = createTracker({ site: 'site-1', api: API, beforeSend: (e) => (e.n === 'secret' ? false : e) }, w)
    t.track('secret')
    t.track('public')
    assert.deepEqual(names(w), ['pageview', 'public'])
  })

  test('a hook that throws is logged with console.warn and the event is sent unmodified', (t) => {
    const warn = t.mock.method(console, 'warn', () => {})
    const w = fakeWindow()
    const tr = manual(w, {
      beforeSend(e) {
        e.n = 'changed'
        e.props.leak = true
        throw new Error('boom')
      },
    })
    tr.track('signup', { plan: 'pro' })
    tr.track('again')
    assert.equal(warn.mock.callCount(), 2)
    assert.match(String(warn.mock.calls[0].arguments[0]), /beforeSend/)
    assert.equal(warn.mock.calls[0].arguments[1].message, 'boom')
    assert.deepEqual(names(w), ['signup', 'again'])
    assert.deepEqual(w.sent[0].body.props, { plan: 'pro' })
  })

  test('limits still apply to what the hook returns', () => {
    const w = fakeWindow()
    manual(w, { beforeSend: (e) => ({ ...e, t: 'y'.repeat(1000) }) }).track('a')
    assert.equal(w.sent[0].body.t.length, 512)
  })
})

describe('automatic pageviews (SPA)', () => {
  test('pushState / replaceState / popstate send pageviews, deduplicated on the page (pathname)', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/?utm_source=news' })
    createTracker({ site: 'site-1', api: API }, w)
    const h = w.history
    h.pushState({}, '', '/about')
    h.pushState({}, '', '/about') // same path: no duplicate
    h.pushState({}, '', '/about#team') // hash only: no duplicate
    h.replaceState({ s: 1 }, '') // state only: no duplicate
    h.replaceState({}, '', '/about?tab=2') // query only: the same page, as in Plausible
    h.pushState({}, '', '/blog/post')
    w.goBack() // popstate back to /about?tab=2: another page than /blog/post
    h.replaceState({}, '', '/login') // a redirect: another page
    assert.deepEqual(
      bodies(w).map((b) => [b.n, b.p]),
      [
        ['pageview', '/?utm_source=news'],
        ['pageview', '/about'],
        ['pageview', '/blog/post'],
        ['pageview', '/about?tab=2'],
        ['pageview', '/login'],
      ],
    )
    assert.equal(w.sent[2].body.u, 'https://shop.example.com/blog/post')
  })

  test("a later page's referrer is the page before it; events carry their page's referrer", () => {
    const w = fakeWindow({ url: 'https://shop.example.com/', referrer: 'https://www.google.com/' })
    const t = createTracker({ site: 'site-1', api: API }, w)
    t.track('signup')
    w.history.pushState({}, '', '/about')
    t.track('click')
    w.history.pushState({}, '', '/blog')
    assert.deepEqual(
      bodies(w).map((b) => [b.n, b.p, b.r]),
      [
        ['pageview', '/', 'https://www.google.com/'],
        ['signup', '/', 'https://www.google.com/'],
        ['pageview', '/about', 'https://shop.example.com/'],
        ['click', '/about', 'https://shop.example.com/'],
        ['pageview', '/blog', 'https://shop.example.com/about'],
      ],
    )
  })

  test('a page restored from the back/forward cache sends a pageview again', () => {
    // Back to a page kept in the bfcache runs no script: only pageshow (persisted) says it is shown.
    const w = fakeWindow({ url: 'https://shop.example.com/about' })
    createTracker({ site: 'site-1', api: API }, w)
    w.dispatch('pageshow', { persisted: false }) // the first load's own pageshow: already counted
    w.dispatch('pageshow', { persisted: true })
    assert.deepEqual(bodies(w).map((b) => [b.n, b.p]), [['pageview', '/about'], ['pageview', '/about']])
  })

  test('a search box that writes each keystroke to the query sends one pageview', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/search' })
    createTracker({ site: 'site-1', api: API }, w)
    for (const q of ['s', 'sh', 'sho', 'shoes']) w.history.replaceState(null, '', '/search?q=' + q)
    w.history.pushState(null, '', '/search?q=shoes&sort=price')
    assert.deepEqual(bodies(w).map((b) => b.p), ['/search'])
  })

  test('hash: true makes each hash route a page: hashchange sends a pageview, p keeps the hash', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/app/#/home' })
    createTracker({ site: 'site-1', api: API, hash: true }, w)
    w.location.assign('#/settings') // a hash router's link: the browser fires hashchange
    w.dispatch('hashchange', {})
    w.dispatch('popstate', {}) // Chrome also fires popstate for it: no duplicate
    w.location.assign('#/settings')
    w.dispatch('hashchange', {}) // same route: no duplicate
    w.history.pushState({}, '', '/app/?x=1#/settings?tab=2') // queries only: the same page
    w.location.assign('#/billing')
    w.dispatch('hashchange', {})
    assert.deepEqual(
      bodies(w).map((b) => [b.n, b.p]),
      [
        ['pageview', '/app/#/home'],
        ['pageview', '/app/#/settings'],
        ['pageview', '/app/?x=1#/billing'],
      ],
    )
    manual(w, { hash: true }).track('signup')
    assert.equal(w.sent.at(-1).body.p, '/app/?x=1#/billing', 'custom events carry the route too')
  })

  test('without hash, a hashchange sends nothing and p has no hash', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/app/#/home' })
    createTracker({ site: 'site-1', api: API }, w)
    w.location.assign('#/settings')
    w.dispatch('hashchange', {})
    assert.deepEqual(bodies(w).map((b) => b.p), ['/app/'])
  })

  test('wrapped history methods still work and keep their this/arguments', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/' })
    createTracker({ site: 'site-1', api: API }, w)
    w.history.pushState({ id: 7 }, '', '/x')
    assert.deepEqual(w.history.state, { id: 7 })
    assert.equal(w.history.length, 2)
    assert.equal(w.location.pathname, '/x')
  })

  test('auto: false sends no automatic pageviews', () => {
    const w = fakeWindow()
    createTracker({ site: 'site-1', api: API, auto: false }, w)
    w.history.pushState({}, '', '/other')
    assert.equal(w.sent.length, 0)
  })
})

describe('outbound links', () => {
  const setup = (opts) => {
    const w = fakeWindow()
    createTracker({ site: 'site-1', api: API, auto: false, ...opts }, w)
    const el = (tag, attrs, parent = w.document.body) => w.document.createElement(tag, attrs, parent)
    return { w, el }
  }

  test('click on a link to another host sends outbound with {url: href}', () => {
    const { w, el } = setup()
    w.click(el('a', { href: 'https://other.example/page?x=1' }))
    assert.equal(w.sent.length, 1)
    assert.equal(w.sent[0].body.n, 'outbound')
    assert.deepEqual(w.sent[0].body.props, { url: 'https://other.example/page?x=1' })
    assert.equal(w.sent[0].body.p, '/products?page=2', 'path is the current page')
  })

  test('click on a child of the link counts', () => {
    const { w, el } = setup()
    const a = el('a', { href: 'https://docs.other.example/' })
    const img = el('img', {}, el('span', {}, a))
    w.click(img)
    assert.deepEqual(bodies(w).map((b) => b.props), [{ url: 'https://docs.other.example/' }])
  })

  test('same host, relative, mailto/tel links, anchors without href and non-links are not outbound', () => {
    const { w, el } = setup()
    w.click(el('a', { href: 'https://shop.example.com/cart' }))
    w.click(el('a', { href: '/checkout' }))
    w.click(el('a', { href: 'mailto:hi@other.example' }))
    w.click(el('a', { href: 'tel:+123' }))
    w.click(el('a', {}))
    w.click(el('button', {}))
    w.click(el('span', {}, el('div', {})))
    assert.equal(w.sent.length, 0)
  })

  test('middle click (auxclick button 1) counts, right click does not', () => {
    const { w, el } = setup()
    const a = el('a', { href: 'https://other.example/' })
    w.auxclick(a, 2)
    w.auxclick(a, 1)
    assert.deepEqual(names(w), ['outbound'])
  })

  test('outbound: false disables it', () => {
    const { w, el } = setup({ outbound: false })
    w.click(el('a', { href: 'https://other.example/' }))
    assert.equal(w.sent.length, 0)
  })
})

describe('file downloads', () => {
  const setup = (opts) => {
    const w = fakeWindow()
    createTracker({ site: 'site-1', api: API, auto: false, ...opts }, w)
    const el = (tag, attrs, parent = w.document.body) => w.document.createElement(tag, attrs, parent)
    return { w, el }
  }

  test('off by default: a link to a file on another host is an outbound click', () => {
    const { w, el } = setup()
    w.click(el('a', { href: '/files/report.pdf' }))
    w.click(el('a', { href: 'https://cdn.other.example/app.dmg' }))
    assert.deepEqual(bodies(w).map((b) => [b.n, b.props]), [['outbound', { url: 'https://cdn.other.example/app.dmg' }]])
  })

  test('downloads: true counts links to the default file types, on any host, as file_download only', () => {
    const { w, el } = setup({ downloads: true })
    w.click(el('a', { href: '/files/Report.PDF?v=2#p3' }))
    w.click(el('a', { href: 'https://cdn.other.example/app.dmg' }))
    w.click(el('a', { href: '/blog/pdf' })) // no extension
    w.click(el('a', { href: '/page.html' })) // not a listed type
    assert.deepEqual(bodies(w).map((b) => [b.n, b.props]), [
      ['file_download', { url: 'https://shop.example.com/files/Report.PDF?v=2#p3' }],
      ['file_download', { url: 'https://cdn.other.example/app.dmg' }],
    ])
  })

  test('an SVG link (no pathname, no hostname) sends nothing and throws nothing', () => {
    const { w, el } = setup({ downloads: true })
    const a = el('a', { href: '/a.pdf' })
    Object.defineProperty(a, 'pathname', { value: undefined })
    Object.defineProperty(a, 'hostname', { value: undefined })
    w.click(a)
    assert.equal(w.sent.length, 0)
  })

  test('a list of types replaces the default one', () => {
    const { w, el } = setup({ downloads: 'epub, MOBI' })
    for (const href of ['/book.epub', '/book.mobi', '/book.pdf']) w.click(el('a', { href }))
    assert.deepEqual(bodies(w).map((b) => b.props.url), ['https://shop.example.com/book.epub', 'https://shop.example.com/book.mobi'])
  })

  test('the script tag takes data-downloads', () => {
    for (const [value, sent] of [['true', ['file_download']], ['zip', ['file_download']], ['false', []], [undefined, []]]) {
      const w = fakeWindow({ script: { site: 'abc', auto: 'false', ...(value ? { downloads: value } : {}) } })
      boot(w)
      w.click(w.document.createElement('a', { href: '/a.zip' }, w.document.body))
      assert.deepEqual(names(w), sent, `data-downloads=${value}`)
    }
  })
})

describe('tagged elements', () => {
  test('a click in an element with data-tally-event sends that event with its data-tally-prop-* props', () => {
    const w = fakeWindow()
    createTracker({ site: 'site-1', api: API, auto: false }, w)
    const button = w.document.createElement('button', { 'data-tally-event': 'Signup', 'data-tally-prop-plan': 'pro',
      'data-tally-prop-seats': 3, class: 'cta' }, w.document.body)
    w.click(w.document.createElement('span', {}, button))
    // A tagged outbound link sends its own event only.
    w.click(w.document.createElement('a', { href: 'https://other.example/', 'data-tally-event': 'Partner' }, w.document.body))
    assert.deepEqual(bodies(w).map((b) => [b.n, b.props]), [['Signup', { plan: 'pro', seats: '3' }], ['Partner', {}]])
  })

  test('once per click with the script tag; tagged: false turns it off', () => {
    const w = fakeWindow({ script: { site: 'abc', auto: 'false' } })
    boot(w)
    w.click(w.document.createElement('button', { 'data-tally-event': 'Signup' }, w.document.body))
    assert.deepEqual(names(w), ['Signup'])
    const w2 = fakeWindow()
    createTracker({ site: 'site-1', api: API, auto: false, tagged: false }, w2)
    w2.click(w2.document.createElement('button', { 'data-tally-event': 'Signup' }, w2.document.body))
    assert.equal(w2.sent.length, 0)
  })
})

describe('opt-outs', () => {
  test('localStorage tally_ignore = "true" disables sending, checked at send time', () => {
    const w = fakeWindow({ storage: { tally_ignore: 'true' } })
    const t = manual(w)
    t.track('a')
    w.localStorage.setItem('tally_ignore', 'false')
    t.track('b')
    w.localStorage.setItem('tally_ignore', 'true')
    t.track('c')
    assert.deepEqual(names(w), ['b'])
  })

  test('a throwing localStorage does not stop tracking', () => {
    const w = fakeWindow({ storageThrows: true })
    manual(w).track('a')
    assert.deepEqual(names(w), ['a'])
  })

  test('Do-Not-Track is respected only with respectDnt', () => {
    const w = fakeWindow({ dnt: '1' })
    manual(w).track('ignored-dnt')
    manual(w, { respectDnt: true }).track('dropped')
    assert.deepEqual(names(w), ['ignored-dnt'])
    const w2 = fakeWindow({ dnt: '0' })
    manual(w2, { respectDnt: true }).track('kept')
    assert.deepEqual(names(w2), ['kept'])
    const w3 = fakeWindow()
    w3.doNotTrack = '1' // old Safari/IE place
    manual(w3, { respectDnt: true }).track('dropped')
    assert.equal(w3.sent.length, 0)
  })

  for (const url of ['http://localhost:8000/', 'http://127.0.0.1/x', 'http://[::1]:3000/', 'file:///home/me/page.html']) {
    test(`no events from ${url} unless allowLocalhost`, () => {
      const w = fakeWindow({ url })
      manual(w).track('dropped')
      createTracker({ site: 'site-1', api: API }, w) // no automatic pageview either
      assert.equal(w.sent.length, 0)
      manual(w, { allowLocalhost: true }).track('kept')
      assert.deepEqual(names(w), ['kept'])
    })
  }

  test('hosts that merely contain "localhost" are tracked', () => {
    const w = fakeWindow({ url: 'https://localhost.example.com/' })
    manual(w).track('kept')
    assert.deepEqual(names(w), ['kept'])
  })
})

describe('excluded pages', () => {
  test("exclude: pages matching a pattern send no pageview (Plausible's data-exclude: * within a segment, ** across)", () => {
    const w = fakeWindow({ url: 'https://shop.example.com/admin/users?x=1' })
    const t = createTracker({ site: 'site-1', api: API, exclude: '/admin/**, /preview/*, /draft.html' }, w)
    t.track('signup') // a custom event on an excluded page is sent, as in Plausible
    const h = w.history
    h.pushState({}, '', '/preview/a') // excluded
    h.pushState({}, '', '/preview/a/') // excluded: a trailing slash may follow
    h.pushState({}, '', '/preview/a/b') // * stops at a slash: tracked
    h.pushState({}, '', '/draft.html') // excluded, the dot taken as a dot
    h.pushState({}, '', '/draftxhtml') // tracked
    h.pushState({}, '', '/administrator') // tracked: /admin/** needs the slash
    h.pushState({}, '', '/admin') // tracked
    assert.deepEqual(
      bodies(w).map((b) => [b.n, b.p]),
      [
        ['signup', '/admin/users?x=1'],
        ['pageview', '/preview/a/b'],
        ['pageview', '/draftxhtml'],
        ['pageview', '/administrator'],
        ['pageview', '/admin'],
      ],
    )
  })

  test('an array of patterns; with hash routing a pattern may name a hash route', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/app#/settings?tab=1' })
    createTracker({ site: 'site-1', api: API, hash: true, exclude: ['/app#/settings', '/x'] }, w)
    w.location.assign('#/home')
    w.dispatch('hashchange', {})
    assert.deepEqual(bodies(w).map((b) => [b.n, b.p]), [['pageview', '/app#/home']])
  })

  test('data-exclude on the script tag', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/admin/', script: { site: 'abc', exclude: '/admin/**' } })
    boot(w)
    w.history.pushState({}, '', '/shop')
    assert.deepEqual(bodies(w).map((b) => [b.n, b.p]), [['pageview', '/shop']])
  })
})

describe('transport', () => {
  test('falls back to navigator.sendBeacon when fetch is missing', () => {
    const w = fakeWindow({ fetch: false })
    manual(w, { defaultProps: { a: 1 } }).track('signup')
    assert.equal(w.sent.length, 1)
    assert.equal(w.sent[0].via, 'beacon')
    assert.equal(w.sent[0].url, ENDPOINT)
    assert.equal(w.sent[0].body.n, 'signup')
    assert.equal(w.sent[0].body.s, 'site-1')
    assert.deepEqual(w.sent[0].body.props, { a: 1 })
  })

  test('neither fetch nor sendBeacon: no error', () => {
    const w = fakeWindow({ fetch: false, beacon: false })
    assert.doesNotThrow(() => manual(w).track('a'))
  })

  test('a rejected fetch is swallowed, a throwing fetch does not break the page', async () => {
    const w = fakeWindow()
    let calls = 0
    w.fetch = () => (++calls, Promise.reject(new TypeError('network down')))
    const t = manual(w)
    t.track('a')
    w.fetch = () => {
      ++calls
      throw new TypeError('bad init')
    }
    assert.doesNotThrow(() => t.track('b'))
    await new Promise((r) => setTimeout(r, 10)) // an unhandled rejection would fail the run
    assert.equal(calls, 2)
  })
})

describe('script tag (boot)', () => {
  test('reads data-site, api defaults to the script origin, exposes window.tally and window.Tally', () => {
    const w = fakeWindow({ script: { site: 'abc' }, scriptSrc: 'https://stats.example.org:8443/tracker.js' })
    boot(w)
    assert.deepEqual(w.sent.map((s) => [s.url, s.body.s, s.body.n]), [
      ['https://stats.example.org:8443/api/service/event', 'abc', 'pageview'],
    ])
    for (const m of ['track', 'identify', 'reset', 'setDefaultProps']) assert.equal(typeof w.tally[m], 'function')
    w.tally('track', 'viaCall', { a: 1 })
    w.tally.track('viaMethod', { b: 2 })
    w.tally('identify', { id: 'u1' })
    w.tally('noSuchMethod', 1) // an event name (Plausible's form); props that are no object are none
    assert.deepEqual(
      bodies(w).slice(1).map((b) => [b.n, b.props]),
      [
        ['viaCall', { a: 1 }],
        ['viaMethod', { b: 2 }],
        ['identify', { id: 'u1' }],
        ['noSuchMethod', {}],
      ],
    )
    const sid = w.sent[4].body.sid
    w.tally('reset')
    w.tally('track', 'after')
    assert.notEqual(w.sent[5].body.sid, sid)

    assert.equal(typeof w.Tally.createTracker, 'function')
    const other = w.Tally.createTracker({ site: 'second', api: 'https://x.example', auto: false })
    other.track('esm')
    assert.deepEqual([w.sent.at(-1).url, w.sent.at(-1).body.s], ['https://x.example/api/service/event', 'second'])
  })

  test('data-api overrides the script origin', () => {
    const w = fakeWindow({ script: { site: 'abc', api: 'https://collect.example/' } })
    boot(w)
    assert.equal(w.sent[0].url, 'https://collect.example/api/service/event')
  })

  test('calls queued before load are replayed in order, before the first pageview', () => {
    const w = fakeWindow({ script: { site: 'abc' } })
    // the snippet a page puts before the script tag
    w.tally =
      w.tally ||
      function () {
        ;(w.tally.q = w.tally.q || []).push(arguments)
      }
    w.tally('setDefaultProps', { plan: 'pro' })
    w.tally('track', 'signup', { plan: 'team' })
    w.tally('identify', { id: 'u9' })
    w.tally('track', 'later')
    assert.equal(w.sent.length, 0)
    boot(w)
    assert.deepEqual(
      bodies(w).map((b) => [b.n, b.props]),
      [
        ['signup', { plan: 'team' }],
        ['identify', { plan: 'pro', id: 'u9' }],
        ['later', { plan: 'pro' }],
        ['pageview', { plan: 'pro' }],
      ],
    )
    assert.equal(w.tally.q, undefined, 'the stub is replaced')
  })

  test("tally('signup', props), Plausible's form, sends that event, queued or not; a non-string sends nothing", () => {
    const w = fakeWindow({ script: { site: 'abc', auto: 'false' } })
    w.tally = function () {
      ;(w.tally.q = w.tally.q || []).push(arguments)
    }
    w.tally('signup', { plan: 'pro' })
    boot(w)
    w.tally('checkout')
    w.tally('toString')
    w.tally(42)
    assert.deepEqual(
      bodies(w).map((b) => [b.n, b.props]),
      [
        ['signup', { plan: 'pro' }],
        ['checkout', {}],
        ['toString', {}],
      ],
    )
  })

  test('data-hash="true" tracks hash routes', () => {
    const w = fakeWindow({ url: 'https://shop.example.com/#/a', script: { site: 'abc', hash: 'true' } })
    boot(w)
    w.location.assign('#/b')
    w.dispatch('hashchange', {})
    assert.deepEqual(bodies(w).map((b) => b.p), ['/#/a', '/#/b'])
  })

  test('data-auto="false" disables automatic pageviews but keeps outbound tracking', () => {
    const w = fakeWindow({ script: { site: 'abc', auto: 'false' } })
    boot(w)
    w.history.pushState({}, '', '/next')
    assert.equal(w.sent.length, 0)
    w.click(w.document.createElement('a', { href: 'https://elsewhere.example/' }))
    assert.deepEqual(names(w), ['outbound'])
  })

  test('data-auto="true" (or absent) tracks SPA navigation', () => {
    const w = fakeWindow({ script: { site: 'abc', auto: 'true' } })
    boot(w)
    w.history.pushState({}, '', '/next')
    assert.deepEqual(bodies(w).map((b) => b.p), ['/products?page=2', '/next'])
  })

  test('data-allow-localhost="true" allows localhost', () => {
    const w = fakeWindow({ url: 'http://localhost:5173/', script: { site: 'abc' } })
    boot(w)
    assert.equal(w.sent.length, 0)
    const w2 = fakeWindow({ url: 'http://localhost:5173/', script: { site: 'abc', 'allow-localhost': 'true' } })
    boot(w2)
    assert.deepEqual(names(w2), ['pageview'])
  })

  test('data-respect-dnt="true" respects Do-Not-Track', () => {
    const w = fakeWindow({ dnt: '1', script: { site: 'abc' } })
    boot(w)
    assert.deepEqual(names(w), ['pageview'])
    const w2 = fakeWindow({ dnt: '1', script: { site: 'abc', 'respect-dnt': 'true' } })
    boot(w2)
    assert.equal(w2.sent.length, 0)
  })

  test('missing data-site warns and sends nothing', (t) => {
    const warn = t.mock.method(console, 'warn', () => {})
    const w = fakeWindow({ script: {} })
    boot(w)
    w.tally('track', 'x')
    assert.equal(w.sent.length, 0)
    assert.equal(warn.mock.callCount(), 1)
  })
})
