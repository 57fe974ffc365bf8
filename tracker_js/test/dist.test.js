// Checks of the committed build output: it matches a fresh build of the source,
// it is within the size budget, and the script-tag build works when run as a
// classic script in a fake window (a separate vm realm, like a browser page).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import vm from 'node:vm'
import { bundles, gzipSize, BUDGET, version } from '../build.mjs'
import { fakeWindow } from './fake-dom.js'

const dist = (name) => readFileSync(new URL('../dist/' + name, import.meta.url), 'utf8')

test('committed dist/ is up to date with src/ (run `npm run build`)', async () => {
  const fresh = await bundles()
  for (const name of Object.keys(fresh)) assert.equal(dist(name), fresh[name], `dist/${name} is stale`)
})

test(`dist/tally.min.js is at most ${BUDGET} bytes gzipped`, () => {
  const gz = gzipSize(dist('tally.min.js'))
  assert.ok(gz <= BUDGET, `${gz} bytes gzipped`)
})

test('dist/tally.min.js runs as a script tag: pageview, queue replay, window.tally', () => {
  const w = fakeWindow({ script: { site: 'built' }, scriptSrc: 'https://stats.example.org/tracker.js' })
  w.tally = function () {
    ;(w.tally.q = w.tally.q || []).push(arguments)
  }
  w.tally('track', 'early', { k: 'v' })
  w.URL = URL
  w.console = console
  vm.createContext(w)
  vm.runInContext(dist('tally.min.js'), w, { filename: 'tally.min.js' })
  w.tally('track', 'late')
  w.history.pushState({}, '', '/spa')
  assert.deepEqual(
    w.sent.map((s) => [s.url, s.body.n, s.body.p]),
    [
      ['https://stats.example.org/api/service/event', 'early', '/products?page=2'],
      ['https://stats.example.org/api/service/event', 'pageview', '/products?page=2'],
      ['https://stats.example.org/api/service/event', 'late', '/products?page=2'],
      ['https://stats.example.org/api/service/event', 'pageview', '/spa'],
    ],
  )
  const b = w.sent[0].body
  assert.equal(b.v, version, 'v is the package version')
  assert.equal(b.s, 'built')
  assert.equal(JSON.stringify(b.props), '{"k":"v"}')
  assert.equal(w.sent[0].init.headers['Content-Type'], 'text/plain')
  assert.equal(typeof w.Tally.createTracker, 'function')
})

test('dist/tally.esm.js exports createTracker', async () => {
  const mod = await import('../dist/tally.esm.js')
  assert.equal(typeof mod.createTracker, 'function')
  const w = fakeWindow()
  mod.createTracker({ site: 'esm', api: 'https://a.example' }, w).track('x')
  assert.deepEqual(
    w.sent.map((s) => [s.body.n, s.body.v]),
    [
      ['pageview', version],
      ['x', version],
    ],
  )
})
