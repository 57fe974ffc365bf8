// Site list: add a site, publish its DNS TXT record and verify it; the shared header of per-site pages.
import { api, apiResponse, qs } from './api.js'
import { codeBlock, customEventsHint, errorBox, h, snippet } from './dom.js'

export const PAGE_SIZE = 50 // what GET /api/sites answers at most (the spec's cap), newest first
let firstPage = null // {sites, total} of the 50 newest
const beyond = new Map() // site id -> promise of a site not among them (or null: no such site)

// One page of the workspace's sites and how many it has (X-Total-Count).
async function sitesPage(offset = 0) {
  const { body, headers } = await apiResponse('/api/sites' + (offset ? '?' + qs({ offset }) : ''))
  return { sites: body, total: Number(headers.get('X-Total-Count')) || body.length }
}

export async function loadSites(force = false) {
  if (!firstPage || force) {
    beyond.clear()
    firstPage = sitesPage().catch((e) => { firstPage = null; throw e })
  }
  return firstPage
}

// A site of the workspace by id: among the 50 newest, else from its verification status (which names its
// domain); null when there is no such site, or it belongs to another workspace.
export async function findSite(siteId) {
  const listed = (await loadSites()).sites.find((s) => s.id === siteId)
  if (listed) return listed
  if (!beyond.has(siteId)) {
    beyond.set(siteId, api('/api/verify?' + qs({ site: siteId })).then(
      (v) => (v.status === 'not_found' ? null : { id: siteId, domain: v.domain, status: v.status, verified: v.status === 'verified' }),
      (e) => {
        beyond.delete(siteId)
        if (e.status === 404) return null
        throw e
      }))
  }
  return beyond.get(siteId)
}

export function isVerified(site) {
  return site.verified === true || site.status === 'verified' || !!site.verifiedAt || !!site.verified_at
}

function badge(verified) {
  return h('span', { class: verified ? 'badge ok' : 'badge', text: verified ? '✓ verified' : 'pending verification' })
}

function verifyPanel(site, onVerified) {
  const out = h('div', { class: 'verify' })
  const status = h('p', { class: 'muted small', role: 'status' })
  const check = h('button', { type: 'button', class: 'small', text: 'Check DNS now' })
  const show = (data) => {
    out.replaceChildren(
      h('p', {}, 'Prove you own ', h('strong', { text: data.domain || site.domain }),
        ' by publishing this TXT record at the domain apex, then check:'),
      codeBlock(data.record || ''),
      h('div', { class: 'row' }, check, status),
    )
  }
  check.addEventListener('click', async () => {
    check.disabled = true
    status.textContent = 'Checking…'
    try {
      const data = await api('/api/verify?' + qs({ site: site.id }), { method: 'POST' })
      if (data.status === 'verified') {
        onVerified()
        return
      }
      status.textContent = data.status === 'not_found' ? 'This site no longer exists.'
        : 'Record not found yet. DNS changes can take a few minutes to appear; try again shortly.'
      if (data.record) show(data)
    } catch (e) {
      status.textContent = `Check failed: ${e.message}`
    } finally {
      check.disabled = false
    }
  })
  api('/api/verify?' + qs({ site: site.id })).then(show, (e) => out.replaceChildren(errorBox(e)))
  return out
}

// The browser's time zone, which a new site takes (as Plausible's form does): its dashboard's days then begin
// at the owner's midnight. Changed on the site's card.
function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'
  } catch {
    return 'UTC'
  }
}

function zoneNames(current) {
  let names = []
  try {
    names = Intl.supportedValuesOf('timeZone')
  } catch {}
  return [...new Set(['UTC', current, ...names])]
}

const zoneOption = (name, selected) => h('option', { value: name, text: name.replaceAll('_', ' '), selected })

// The site's time zone as a select on its card: a change is saved at once (PATCH /api/sites/{id}). It holds
// the site's zone until it is first reached (focus, or a press before it): every zone on each of 50 cards took
// the Sites page 0.6 s to draw.
function zoneControl(site) {
  const id = `zone-${site.id}`
  const current = site.timezone || 'UTC'
  const select = h('select', { id, class: 'zone-select' }, zoneOption(current, true))
  const fill = () => {
    if (select.options.length > 1) return
    const chosen = select.value
    select.replaceChildren(...zoneNames(chosen).map((name) => zoneOption(name, name === chosen)))
  }
  select.addEventListener('focus', fill)
  select.addEventListener('pointerdown', fill)
  const status = h('span', { class: 'muted small', role: 'status' })
  select.addEventListener('change', async () => {
    status.textContent = 'Saving…'
    try {
      const saved = await api(`/api/sites/${encodeURIComponent(site.id)}`, { method: 'PATCH', json: { timezone: select.value } })
      site.timezone = saved.timezone
      status.textContent = 'Saved: the dashboard\'s days now begin at midnight there.'
    } catch (e) {
      select.value = site.timezone || 'UTC'
      status.textContent = `Could not change the time zone: ${e.message}`
    }
  })
  return h('div', { class: 'row small zone' }, h('label', { for: id, class: 'muted', text: 'Time zone' }), select, status)
}

function siteCard(site, openSetup, onVerified) {
  const verified = isVerified(site)
  const setup = h('div', { class: 'setup', hidden: !openSetup })
  const fill = () => setup.replaceChildren(
    h('h3', { text: 'Install the tracker' }),
    codeBlock(snippet(site.id)),
    customEventsHint(),
    ...(verified ? [] : [h('h3', { text: 'Verify the domain' }), verifyPanel(site, onVerified)]),
  )
  if (openSetup) fill()
  // A disclosure button: it says whether its section is open, and which one (every card has one of the name).
  const setupId = `setup-${site.id}`
  setup.id = setupId
  const toggle = h('button', {
    type: 'button', class: 'small', text: verified ? 'Snippet' : 'Set up & verify',
    'aria-expanded': String(!!openSetup), 'aria-controls': setupId,
    'aria-label': `${verified ? 'Snippet' : 'Set up & verify'}: ${site.domain}`,
    onclick: () => {
      if (setup.hidden && !setup.firstChild) fill()
      setup.hidden = !setup.hidden
      toggle.setAttribute('aria-expanded', String(!setup.hidden))
    },
  })
  return h('li', { class: 'card site', dataset: { site: site.id } },
    // The domain is the card's heading: a screen reader's heading keys go from site to site.
    h('div', { class: 'row' }, h('h2', { class: 'site-name' },
      h('a', { class: 'site-domain', href: `/app/sites/${encodeURIComponent(site.id)}`, title: site.domain, text: site.domain })),
      badge(verified), h('span', { class: 'spacer' }), toggle),
    h('div', { class: 'muted small ellipsis' }, 'Site id ', h('code', { text: site.id })),
    zoneControl(site),
    setup,
  )
}

function offsetOf(search) {
  const n = parseInt(new URLSearchParams(search).get('offset'), 10)
  return n > 0 ? n : 0
}

// The list shows 50 sites at a time; past that it says how many there are and pages through them
// (?offset= in the URL, as GET /api/sites takes it).
// `alive()`: whether the Sites page is still the one shown (main.js's router ends it on leaving).
async function renderInto(container, { openId = null, offset = offsetOf(location.search), alive = () => true } = {}) {
  const list = h('ul', { class: 'cards' })
  const error = h('p', { class: 'error', role: 'alert', hidden: true })
  const input = h('input', { name: 'domain', placeholder: 'example.com', required: true, autocomplete: 'off', 'aria-label': 'Domain' })
  const form = h('form', { class: 'add-site row' }, input, h('button', { type: 'submit', class: 'primary', text: 'Add site' }))
  const count = h('p', { class: 'muted small sites-count', hidden: true })
  const pager = h('div', { class: 'row pager', hidden: true })
  const go = (to, openSite = null) => {
    // A site added or verified after the visitor went to another page: that page stays.
    if (!alive()) return
    const url = location.pathname + (to ? '?' + qs({ offset: to }) : '')
    if (url !== location.pathname + location.search) history.pushState(null, '', url) // Back returns
    renderInto(container, { openId: openSite, offset: to, alive })
  }
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    error.hidden = true
    try {
      const domain = input.value.trim()
      let site
      try {
        site = await api('/api/sites', { method: 'POST', form: { domain, timezone: browserZone() } })
      } catch (e) { // a zone this server's database lacks: the site is made in UTC, and the card can change it
        if (!(e.status === 400 && e.message === 'invalid timezone')) throw e
        site = await api('/api/sites', { method: 'POST', form: { domain } })
      }
      await loadSites(true)
      go(0, site.id) // the newest site is first
    } catch (e) {
      error.textContent = e.status === 400 ? 'That is not a valid domain. Enter it like example.com.' : `Could not add the site: ${e.message}`
      error.hidden = false
    }
  })
  container.replaceChildren(
    h('div', { class: 'page-head' }, h('h1', { text: 'Sites' })),
    h('section', { class: 'card' }, h('h2', { text: 'Add a site' }), form, error),
    count, list, pager,
  )
  try {
    const { sites, total } = offset ? await sitesPage(offset) : await loadSites(openId !== null)
    if (!sites.length && !offset) {
      list.append(h('li', { class: 'empty' },
        h('h2', { text: 'No sites yet' }),
        h('p', { text: 'Add the domain of your website above. You will get a one-line script tag to put on its pages.' })))
    }
    for (const site of sites) list.append(siteCard(site, site.id === openId, () => go(offset, site.id)))
    // The site just added or verified: the redraw took away the control the keyboard was on, so focus goes to
    // the site's name, read with its mark ("✓ verified") and followed by its snippet.
    const opened = openId !== null && [...list.querySelectorAll('li.site')].find((li) => li.dataset.site === openId)
    if (opened && (document.activeElement === document.body || !document.activeElement)) opened.querySelector('a.site-domain').focus()
    if (total > PAGE_SIZE || offset) {
      count.textContent = sites.length ? `Sites ${offset + 1}–${offset + sites.length} of ${total}, newest first` : `No sites past ${total}.`
      count.hidden = false
      pager.replaceChildren(
        h('button', { type: 'button', class: 'small', text: '← Newer', disabled: offset === 0, onclick: () => go(Math.max(0, offset - PAGE_SIZE)) }),
        h('button', { type: 'button', class: 'small', text: 'Older →', disabled: offset + sites.length >= total, onclick: () => go(offset + PAGE_SIZE) }))
      pager.hidden = false
    }
  } catch (e) {
    list.append(errorBox(e))
  }
}

export function renderSites(container) {
  let alive = true
  renderInto(container, { alive: () => alive })
  return () => { alive = false }
}

// A site's pages open once the site is known: for an unknown id, or another workspace's, they say so and
// offer nothing (no range, filters or exports, and no reads that could only answer 404).
export function knownSite(render) {
  return (container, siteId) => {
    let alive = true
    let cleanup = null
    findSite(siteId).then((site) => {
      if (!alive) return
      if (site) {
        cleanup = render(container, siteId) || null
        return
      }
      container.replaceChildren(
        h('div', { class: 'page-head' }, h('div', { class: 'row title-row' }, h('a', { href: '/app', class: 'muted', text: 'Sites /' }),
          h('h1', { class: 'site-title', text: 'Site not found' }))),
        errorBox({ status: 404 }))
    }, (e) => { if (alive) container.replaceChildren(errorBox(e)) })
    return () => {
      alive = false
      if (cleanup) cleanup()
    }
  }
}

// Header of a site's pages: domain, verification mark and the page tabs.
export function siteHeader(siteId, active) {
  const title = h('h1', { class: 'site-title', title: siteId, text: siteId })
  const mark = h('span')
  findSite(siteId).then((site) => {
    if (!site) return
    title.textContent = site.domain
    title.title = site.domain
    mark.replaceWith(badge(isVerified(site)))
  }).catch(() => {})
  const base = `/app/sites/${encodeURIComponent(siteId)}`
  const tab = (href, label, key) => h('a', { href: href + location.search, class: active === key ? 'tab active' : 'tab', text: label,
    'aria-current': active === key ? 'page' : null })
  return h('div', { class: 'page-head' },
    h('div', { class: 'row title-row' }, h('a', { href: '/app', class: 'muted', text: 'Sites /' }), title, mark),
    h('nav', { class: 'tabs', 'aria-label': 'Site pages' }, tab(base, 'Overview', 'overview'), tab(`${base}/realtime`, 'Realtime', 'realtime'),
      tab(`${base}/events`, 'Events', 'events')),
  )
}

// Keep the tabs' links carrying the current range and filters.
export function syncTabs() {
  for (const a of document.querySelectorAll('.tabs a')) a.search = location.search
}
