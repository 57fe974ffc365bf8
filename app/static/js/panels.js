// Breakdown panels of a site's overview: Sources, Pages, Locations, Devices and Goals, each with tabs,
// each reading GET /api/analytics/breakdown under the page's filters. Clicking a row adds a filter.
import { api, qs, RETRY_MS, retriesItself } from './api.js'
import { duration, errorBox, h, number, pathNodes, percent, replaceKeepingFocus, retryNote } from './dom.js'
import { displayValue, termValue } from './filters.js'
import { goalManager } from './goals.js'

const ROWS = 10
const VISITORS = [['visitors', 'Visitors', number]]
const CONVERSIONS = [['visitors', 'Uniques', number], ['events', 'Total', number], ['conversion_rate', 'CR', percent]]
// Top pages' scroll depth and time on page (seconds), shown once the site's tracker reports them (Plausible's
// current tracker sends engagement events): otherwise every row would read "–".
const ENGAGED = [['visitors', 'Visitors', number], ['time_on_page', 'Time on page', (s) => duration(s === null ? s : s * 1000)],
  ['scroll_depth', 'Scroll depth', percent]]

// id, title, tabs: [property, label]. A browser (OS) filter turns its tab into the versions of that browser (OS).
export const PANELS = [
  { id: 'sources', title: 'Sources', tabs: [['channel', 'Channels'], ['source', 'Sources'], [null, 'UTM'], ['utm_medium', 'medium'],
    ['utm_source', 'source'], ['utm_campaign', 'campaign'], ['utm_term', 'term'], ['utm_content', 'content']] },
  { id: 'pages', title: 'Pages', tabs: [['page', 'Top pages'], ['entry_page', 'Entry pages'], ['exit_page', 'Exit pages']] },
  { id: 'locations', title: 'Locations', tabs: [['country', 'Countries'], ['region', 'Regions'], ['city', 'Cities']], optional: ['region', 'city'] },
  { id: 'devices', title: 'Devices', tabs: [['browser', 'Browser'], ['os', 'OS'], ['device', 'Size']] },
]
const DRILL = { browser: 'browser_version', os: 'os_version' }

// The query every read of the page shares: range, the spec's own filters and the `filter=` terms.
export function scope(siteId, state) {
  return { siteId, range: state.range, from: state.from, to: state.to, eventName: state.eventName, path: state.path, referrer: state.referrer, country: state.country, filter: state.filters }
}

const PATHS = new Set(['page', 'entry_page', 'exit_page'])

function rowList(rows, columns, { onPick, barOf, labelOf, empty, paths = false }) {
  const list = h('ol', { class: 'toplist' })
  if (!rows.length) list.append(h('li', { class: 'muted small none', text: empty }))
  else list.append(h('li', { class: `toprow head cols${columns.length} muted small`, 'aria-hidden': 'true' }, h('span'), ...columns.map(([, label]) => h('span', { class: 'count', text: label }))))
  for (const row of rows) {
    const bar = h('span', { class: 'bar' })
    bar.style.width = Math.max(0, Math.min(100, barOf(row))) + '%'
    const label = labelOf(row.key)
    list.append(h('li', {},
      h('button', { type: 'button', class: `toprow cols${columns.length}`, title: `Filter by ${label}`, dataset: { key: row.key }, onclick: () => onPick(row.key) },
        bar, h('span', { class: 'key ellipsis' }, ...(paths ? pathNodes(label) : [label])),
        ...columns.map(([metric, , format]) => h('span', { class: 'count', dataset: { metric }, text: format(row[metric]) })))))
  }
  return list
}

// The WAI-ARIA tabs pattern: one tab stop (the selected tab; roving tabindex), Left/Right (wrapping),
// Home and End move to a tab and select it (selection follows focus), each tab controls the panel's
// body (`panelId`, a role=tabpanel labelled by the selected tab: see tabPanel). A group label ("UTM:") is
// hidden from assistive technology: its tabs' names say it ("UTM medium").
function tabBar(panelId, tabs, active, onSelect, group = '') {
  const bar = h('div', { class: 'panel-tabs', role: 'tablist' })
  let prefix = ''
  for (const [key, label] of tabs) {
    if (key === null) {
      prefix = `${label} `
      bar.append(h('span', { class: 'tab-group muted small', 'aria-hidden': 'true', text: `${label}:` }))
      continue
    }
    const selected = key === active
    bar.append(h('button', { type: 'button', role: 'tab', id: tabId(panelId, key), class: selected ? 'ptab active' : 'ptab',
      'aria-selected': String(selected), 'aria-controls': panelId, tabindex: selected ? '0' : '-1',
      'aria-label': prefix ? prefix + label : null, dataset: { tab: key }, text: label, onclick: () => onSelect(key) }))
  }
  if (group) bar.setAttribute('aria-label', group)
  bar.addEventListener('keydown', (event) => {
    const all = [...bar.querySelectorAll('[role=tab]')]
    const at = all.indexOf(event.target)
    if (at < 0 || event.altKey || event.ctrlKey || event.metaKey) return
    const to = { ArrowRight: (at + 1) % all.length, ArrowLeft: (at - 1 + all.length) % all.length, Home: 0, End: all.length - 1 }[event.key]
    if (to === undefined) return
    event.preventDefault()
    // Focus first: the selection redraws the bar, and the redraw gives focus to the new twin of this tab.
    all[to].focus()
    if (all[to].dataset.tab !== active) onSelect(all[to].dataset.tab)
  })
  return bar
}

const tabId = (panelId, key) => `${panelId}-tab-${key}`

// A panel's failed read: its error, unless a later load of the panel superseded it (a slow failure arrived
// after another tab's rows), and for a read that retries itself (api.js) a load again after RETRY_MS, as the
// overview's. `isCurrent()` tells whether the failed load is still the panel's latest.
function failures(body, load) {
  let timer = null
  let stopped = false
  return {
    show(error, isCurrent) {
      if (!isCurrent()) return
      clearTimeout(timer)
      body.replaceChildren(errorBox(error))
      if (stopped || !retriesItself(error)) return
      body.append(retryNote())
      // Not while the overview shows its own error instead of the panels: its retry loads them too.
      timer = setTimeout(() => !stopped && isCurrent() && body.isConnected && load(), RETRY_MS)
    },
    stop() {
      stopped = true
      clearTimeout(timer)
    },
  }
}

// The panel's body as the tabpanel of its selected tab, or a plain region when the panel shows no tabs.
function tabPanel(body, panelId, active, tabbed = true) {
  body.id = panelId
  if (!tabbed) {
    for (const name of ['role', 'aria-labelledby']) body.removeAttribute(name)
    return
  }
  body.setAttribute('role', 'tabpanel')
  body.setAttribute('aria-labelledby', tabId(panelId, active))
}

// One tabbed breakdown panel. `ctx`: {siteId, state, shared, addFilter(dimension, value)}. Returns {el, load(), stop()}.
function breakdownPanel(spec, ctx) {
  let active = spec.tabs[0][0]
  let hidden = new Set(spec.optional || [])
  let probed = null
  const head = h('div', { class: 'panel-head' })
  const body = h('div', { class: 'panel-body' })
  const el = h('section', { class: 'card panel', dataset: { panel: spec.id } }, head, body)

  const panelId = `panel-${spec.id}`
  function drawHead() {
    const tabs = spec.tabs.filter(([k]) => !hidden.has(k))
    replaceKeepingFocus(head, [h('h2', { text: spec.title }),
      tabBar(panelId, tabs, active, (k) => { active = k; load() }, spec.title)])
    tabPanel(body, panelId, active)
  }

  let generation = 0
  async function load() {
    const mine = ++generation
    const range = [ctx.state.range, ctx.state.from, ctx.state.to].join(' ') // a custom range's days too
    if (spec.optional && probed !== range) {
      // Regions and cities exist only with a GeoIP City database: each tab shows when the range has values
      // of it (asked once per range, not again for every filter; an existence check, not a breakdown).
      // A probe that failed (no answer, a 503) decides nothing: the tabs stay as they were, and the panel's
      // next load asks again.
      const probe = await api('/api/analytics/has-values?' + qs({ siteId: ctx.siteId, range: ctx.state.range, from: ctx.state.from, to: ctx.state.to, properties: spec.optional.join(',') })).catch(() => null)
      if (mine !== generation) return
      if (probe) {
        probed = range
        hidden = new Set(spec.optional.filter((k) => !probe.data[k]))
        if (hidden.has(active)) active = spec.tabs[0][0]
      }
    }
    drawHead()
    const property = DRILL[active] && termValue(ctx.state.filters, active) !== null ? DRILL[active] : active
    body.classList.add('loading')
    try {
      const metrics = property === 'page' ? 'visitors,time_on_page,scroll_depth' : 'visitors'
      const data = await api('/api/analytics/breakdown?' + qs({ ...scope(ctx.siteId, ctx.state), property, metrics, limit: ROWS }))
      if (mine !== generation) return
      const max = Math.max(1, ...data.data.map((r) => r.visitors))
      const prefix = property === active ? '' : `${termValue(ctx.state.filters, active)} `
      const engaged = data.data.some((r) => r.scroll_depth !== undefined && r.scroll_depth !== null)
      replaceKeepingFocus(body, [rowList(data.data, engaged ? ENGAGED : VISITORS, {
        onPick: (key) => ctx.addFilter(property, key),
        barOf: (r) => (100 * r.visitors) / max,
        labelOf: (key) => prefix + displayValue(property, key),
        paths: PATHS.has(property),
        empty: 'No data for this range and these filters.',
      })])
    } catch (e) {
      failed.show(e, () => mine === generation)
    } finally {
      if (mine === generation) body.classList.remove('loading')
    }
  }

  const failed = failures(body, load)
  drawHead()
  return { el, load, stop: failed.stop }
}

// Goals with their conversion rates; once a goal filter is set, the Properties tab breaks a custom
// property down within that goal (props:<key> under goal==name).
function goalsPanel(ctx) {
  let active = 'goal'
  let propKey = ''
  const head = h('div', { class: 'panel-head' })
  const body = h('div', { class: 'panel-body' })
  const manage = h('div', { class: 'goal-manage', hidden: true })
  const manageButton = h('button', { type: 'button', class: 'small', text: 'Manage goals', 'aria-expanded': 'false' })
  manageButton.addEventListener('click', () => {
    manage.hidden = !manage.hidden
    manageButton.setAttribute('aria-expanded', String(!manage.hidden))
    if (!manage.hidden) manage.replaceChildren(goalManager(ctx.siteId, () => load()))
  })
  const el = h('section', { class: 'card panel', dataset: { panel: 'goals' } }, head, manage, body)
  const tools = ctx.shared ? [] : [manageButton]  // a shared link's page only reads

  let generation = 0
  async function load() {
    const mine = ++generation
    const goal = termValue(ctx.state.filters, 'goal')
    if (!goal) active = 'goal'
    replaceKeepingFocus(head, [h('h2', { text: 'Goals' }),
      ...(goal ? [tabBar('panel-goals', [['goal', 'Goals'], ['props', 'Properties']], active, (k) => { active = k; load() }, 'Goals')] : []),
      h('span', { class: 'spacer' }), ...tools])
    tabPanel(body, 'panel-goals', active, !!goal)
    body.classList.add('loading')
    try {
      if (active === 'goal') {
        const data = await api('/api/analytics/breakdown?' + qs({ ...scope(ctx.siteId, ctx.state), property: 'goal', metrics: 'visitors,events,conversion_rate', limit: 100 }))
        if (mine !== generation) return
        replaceKeepingFocus(body, [rowList(data.data, CONVERSIONS, {
          onPick: (key) => ctx.addFilter('goal', key),
          barOf: (r) => r.conversion_rate,
          labelOf: (key) => key,
          empty: ctx.shared ? 'No goals.' : 'No goals yet. A goal is a custom event or a page visit that counts as a conversion: add one under “Manage goals”.',
        })])
        if (!goal && data.data.length) body.append(h('p', { class: 'muted small hint', text: 'Click a goal to filter by it and see which property values convert.' }))
        return
      }
      const keys = (await api('/api/analytics/property-keys?' + qs({ ...scope(ctx.siteId, ctx.state), limit: 50 }))).data.map((r) => r.key)
      if (mine !== generation) return
      if (!keys.includes(propKey)) propKey = keys[0] || ''
      const picker = h('select', { 'aria-label': 'Property', class: 'prop-picker' }, keys.map((k) => h('option', { value: k, selected: k === propKey, text: k })))
      picker.addEventListener('change', () => { propKey = picker.value; load() })
      if (!propKey) {
        body.replaceChildren(h('p', { class: 'muted small none', text: `“${goal}” conversions carry no custom properties.` }))
        return
      }
      const dimension = `props:${propKey}`
      const data = await api('/api/analytics/breakdown?' + qs({ ...scope(ctx.siteId, ctx.state), property: dimension, metrics: 'visitors,events,conversion_rate', limit: ROWS }))
      if (mine !== generation) return
      replaceKeepingFocus(body, [h('div', { class: 'row prop-row' }, h('span', { class: 'muted small', text: `“${goal}” by property` }), picker),
        rowList(data.data, CONVERSIONS, {
          onPick: (key) => ctx.addFilter(dimension, key),
          barOf: (r) => r.conversion_rate,
          labelOf: (key) => key,
          empty: 'No values of this property.',
        })])
    } catch (e) {
      failed.show(e, () => mine === generation)
    } finally {
      if (mine === generation) body.classList.remove('loading')
    }
  }

  const failed = failures(body, load)
  return { el, load, stop: failed.stop }
}

// All panels of the overview, laid out in a grid; load() refreshes every one of them, stop() ends their retries.
export function breakdownPanels(ctx) {
  const panels = [...PANELS.map((spec) => breakdownPanel(spec, ctx)), goalsPanel(ctx)]
  const el = h('div', { class: 'panels' }, panels.map((p) => p.el))
  return { el, load: () => Promise.all(panels.map((p) => p.load())), stop: () => panels.forEach((p) => p.stop()) }
}

