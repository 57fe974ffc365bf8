// A site's overview: totals (with an optional comparison), time series, the breakdown panels, range
// picker and filters, all kept in the URL.
import { api, qs, RETRY_MS, retriesItself } from './api.js'
import { timeChart } from './chart.js'
import { duration, errorBox, h, number, percent, replaceKeepingFocus, retryNote, trackerHelp } from './dom.js'
import { filterChips, termValue, withTerm } from './filters.js'
import { breakdownPanels, scope } from './panels.js'
import { sharedLinks } from './shared_links.js'
import { siteHeader, syncTabs } from './sites.js'

// The API's ranges; today, the months, the year and all time are the site's calendar (its time zone).
export const RANGES = [['1h', 'Last hour'], ['24h', 'Last 24 hours'], ['today', 'Today'], ['yesterday', 'Yesterday'], ['7d', 'Last 7 days'], ['30d', 'Last 30 days'],
  ['month', 'This month'], ['last_month', 'Last month'], ['90d', 'Last 90 days'], ['year', 'This year'],
  ['12mo', 'Last 12 months'], ['all', 'All time']]
const FILTERS = [['eventName', 'Event'], ['path', 'Page contains'], ['referrer', 'Referrer contains'], ['country', 'Country']]
const COMPARE = 'previous_period'

const CUSTOM = 'custom' // ?range=custom&from=YYYY-MM-DD&to=YYYY-MM-DD: the site's days, both included
const DAY = /^\d{4}-\d{2}-\d{2}$/

export function readState() {
  const q = new URLSearchParams(location.search)
  const custom = q.get('range') === CUSTOM && DAY.test(q.get('from') || '') && DAY.test(q.get('to') || '')
  const state = { range: custom || RANGES.some(([r]) => r === q.get('range')) ? q.get('range') : '7d' }
  state.from = custom ? q.get('from') : ''
  state.to = custom ? q.get('to') : ''
  for (const [k] of FILTERS) state[k] = q.get(k) || ''
  state.filters = q.getAll('filter').filter(Boolean)
  state.compare = q.get('compare') === COMPARE ? COMPARE : ''
  return state
}

// A change the user makes is a step in the history, as in Plausible: Back undoes the last filter or range.
export function writeState(state) {
  const search = qs({ ...state, range: state.range === '7d' ? '' : state.range, filters: undefined, filter: state.filters })
  const url = location.pathname + (search ? '?' + search : '')
  if (url !== location.pathname + location.search) history.pushState(null, '', url)
  syncTabs()
}

// The range select; its "Custom range" shows two dates and Apply, which set state.from and state.to before
// onChange('custom'). Another range clears them.
export function rangePicker(state, onChange) {
  const select = h('select', { 'aria-label': 'Date range', class: 'range' },
    [...RANGES, [CUSTOM, 'Custom range…']].map(([value, label]) => h('option', { value, selected: value === state.range, text: label })))
  const from = h('input', { type: 'date', 'aria-label': 'From', value: state.from, min: '2000-01-01' })
  const to = h('input', { type: 'date', 'aria-label': 'To', value: state.to, min: '2000-01-01' })
  const apply = h('button', { type: 'button', class: 'small', text: 'Apply' })
  const problem = h('span', { class: 'error small', role: 'alert' })
  const custom = h('span', { class: 'row custom-range', hidden: state.range !== CUSTOM }, from, h('span', { class: 'muted small', text: 'to' }), to, apply, problem)
  select.addEventListener('change', () => {
    if (select.value === CUSTOM) {
      custom.hidden = false
      from.focus()
      return // drawn on Apply
    }
    state.from = state.to = ''
    onChange(select.value)
  })
  apply.addEventListener('click', () => {
    if (!DAY.test(from.value) || !DAY.test(to.value) || from.value > to.value) {
      problem.textContent = 'Pick a first and a last day, the first not after the last.'
      return
    }
    state.from = from.value
    state.to = to.value
    onChange(CUSTOM)
  })
  return h('span', { class: 'row range-picker' }, select, custom)
}

// A headline figure; with a comparison, its change under it: percent, or percentage points for rates.
function stat(label, value, id, data, format) {
  // A period without visits has no bounce rate or visit duration (not 0%, 0s).
  const perVisit = id === 'bounceRate' || id === 'avgSessionDuration'
  const own = perVisit && !data.sessions ? '—' : format(value)
  const el = h('div', { class: 'stat', dataset: { stat: id } }, h('div', { class: 'stat-label', text: label }), h('div', { class: 'stat-value', text: own }))
  if (data.comparison) {
    const delta = data.change[id]
    const before = perVisit && !data.comparison.sessions ? null : data.comparison[id]
    const shown = before === null ? '—' : format(before)
    const points = id === 'bounceRate'
    // No change: the previous period had none ("new"), or, for the bounce rate, one period had no visits.
    const text = delta === null ? (points && !data.sessions ? '—' : 'new') : `${delta > 0 ? '+' : delta < 0 ? '−' : '±'}${number(Math.abs(delta))}${points ? ' pts' : '%'}`
    // Fewer bounces are good; more of everything else is.
    const good = delta !== null && delta !== 0 && (points ? delta < 0 : delta > 0)
    const bad = delta !== null && delta !== 0 && !good
    el.append(h('div', { class: `stat-change${good ? ' good' : ''}${bad ? ' bad' : ''}`, title: `Previous period: ${shown}` },
      h('span', { class: 'delta', text }), h('span', { class: 'muted', text: ` vs ${shown}` })))
  }
  return el
}

// The export lists the events behind what the page shows: its range and every filter it applies.
export function exportLinks(siteId, { range, from = '', to = '', eventName = '', path = '', referrer = '', country = '', filters = [] }) {
  const link = (format) => h('a', {
    class: 'button small', download: true, text: `Export ${format.toUpperCase()}`,
    href: '/api/analytics/export?' + qs({ siteId, range, from, to, eventName, path, referrer, country, filter: filters, format }),
  })
  return h('div', { class: 'row exports' }, link('csv'), link('json'))
}

// The page a shared link opens: its site's name and nothing to navigate to.
function sharedHeader(domain) {
  return h('div', { class: 'page-head' }, h('div', { class: 'row title-row' }, h('h1', { class: 'site-title', title: domain, text: domain }),
    h('span', { class: 'badge', text: 'shared, read-only' })))
}

// The active filters as chips, each removable, with "Clear all" beside two or more: the overview's, and the
// event log's, which lists what they match.
export function activeFilters(chips, state, changed) {
  const legacy = FILTERS.filter(([k]) => state[k]).map(([k, label]) =>
    h('span', { class: 'chip' }, h('span', { class: 'ellipsis', text: `${label}: ${state[k]}` }),
      h('button', { type: 'button', class: 'link', 'aria-label': `Remove ${label} filter`, text: '×', onclick: () => { state[k] = ''; changed() } })))
  const terms = filterChips(state.filters, (f) => { state.filters = state.filters.filter((x) => x !== f); changed() })
  // A removed chip's focus goes to the next chip, or with none left to the filter form.
  replaceKeepingFocus(chips, [...legacy, ...terms,
    ...(legacy.length + terms.length > 1 ? [h('button', { type: 'button', class: 'link small', text: 'Clear all',
      onclick: () => { state.filters = []; for (const [k] of FILTERS) state[k] = ''; changed() } })] : [])],
  () => chips.querySelector('button') || document.querySelector('.filter-form input'))
  chips.hidden = !(legacy.length + terms.length)
}

// `shared`: {domain} on a shared link's page, which reads with the link's token (api.js) and offers no
// export, goal management, shared links or links to the signed-in pages.
export function renderOverview(container, siteId, { shared = null } = {}) {
  const state = readState()
  const controls = h('div', { class: 'row controls' })
  const body = h('div', { class: 'overview' })
  const live = shared ? h('span', { class: 'live muted small' }) : h('a', { class: 'live muted small', href: `/app/sites/${encodeURIComponent(siteId)}/realtime` })
  let chart = null
  let alive = true

  // A group: a plain div's aria-label is prohibited, and screen readers ignore it.
  const chips = h('div', { class: 'row chips', role: 'group', 'aria-label': 'Active filters' })
  const panels = breakdownPanels({ siteId, state, shared: !!shared, addFilter: (dimension, value) => { state.filters = withTerm(state.filters, dimension, value); changed() } })
  let generation = 0
  let retry = null
  container.append(shared ? sharedHeader(shared.domain) : siteHeader(siteId, 'overview'), controls, chips, body,
    ...(shared ? [] : [sharedLinks(siteId)]))

  const changed = () => {
    writeState(state)
    load()
  }
  const setFilter = (key, value) => {
    state[key] = value
    changed()
  }

  function drawControls() {
    const field = h('select', { 'aria-label': 'Filter field' }, FILTERS.map(([k, label]) => h('option', { value: k, text: label })))
    const value = h('input', { 'aria-label': 'Filter value', placeholder: 'value' })
    const form = h('form', { class: 'row filter-form' }, field, value, h('button', { type: 'submit', class: 'small', text: 'Filter' }))
    form.addEventListener('submit', (e) => {
      e.preventDefault()
      if (value.value.trim()) setFilter(field.value, value.value.trim())
    })
    const compare = h('input', { type: 'checkbox', name: 'compare', checked: !!state.compare })
    compare.addEventListener('change', () => setFilter('compare', compare.checked ? COMPARE : ''))
    replaceKeepingFocus(controls, [rangePicker(state, (r) => setFilter('range', r)),
      h('label', { class: 'check compare small' }, compare, 'Compare to previous period'), form,
      h('span', { class: 'spacer' }), live, ...(shared ? [] : [exportLinks(siteId, state)])])
    activeFilters(chips, state, changed)
  }

  async function load() {
    const mine = ++generation
    clearTimeout(retry)
    drawControls()
    body.classList.add('loading')
    const panelsLoaded = panels.load()
    try {
      const query = scope(siteId, state)
      // Under an event filter, or an event goal's, the chart counts those events (a page goal's are pageviews).
      const goal = termValue(state.filters, 'goal')
      const charted = state.eventName || termValue(state.filters, 'event') || (goal && !goal.startsWith('Visit ') ? goal : '')
      const [data, series] = await Promise.all([
        api('/api/analytics/overview?' + qs({ ...query, compare: state.compare })),
        state.compare || charted ? api('/api/analytics/timeseries?' + qs({ ...query, eventName: charted, compare: state.compare })) : null,
      ])
      if (!alive || mine !== generation) return
      if (chart) chart.destroy()
      const filtered = FILTERS.some(([k]) => state[k]) || state.filters.length > 0
      const stats = h('div', { class: 'stats' },
        stat('Unique visitors', data.uniqueVisitors, 'uniqueVisitors', data, number),
        stat('Pageviews', data.totalPageviews, 'totalPageviews', data, number),
        stat('Total events', data.totalEvents, 'totalEvents', data, number),
        stat('Bounce rate', data.bounceRate, 'bounceRate', data, percent),
        stat('Avg. visit duration', data.avgSessionDuration, 'avgSessionDuration', data, duration))
      chart = timeChart(series ? series.data : data.timeSeries || [], charted || 'Pageviews', series && series.comparison,
        data.timezone || 'UTC')
      replaceKeepingFocus(body, [
        ...(data.totalEvents === 0 && !filtered && !shared ? [trackerHelp(siteId)] : []),
        stats,
        h('section', { class: 'card' }, h('h2', { text: charted ? `“${charted}” events` : 'Pageviews' }), chart.el),
        panels.el,
      ])
    } catch (e) {
      if (!alive || mine !== generation) return
      body.replaceChildren(errorBox(e))
      // Loads again by itself (api.js's retriesItself); any other load since then supersedes this one.
      if (retriesItself(e)) {
        body.append(retryNote())
        retry = setTimeout(() => alive && mine === generation && load(), RETRY_MS)
      }
    } finally {
      // A load left behind does not end the dimming of the one that superseded it.
      if (mine === generation) body.classList.remove('loading')
    }
    await panelsLoaded
  }

  let polls = 0
  async function pollLive() {
    const mine = ++polls // a poll answered after the next one has drawn its count is not drawn
    try {
      const rt = await api('/api/analytics/realtime?' + qs({ siteId, window: 300 }))
      if (mine !== polls) return
      live.textContent = `● ${number(rt.activeVisitors)} current visitor${rt.activeVisitors === 1 ? '' : 's'}`
    } catch (e) {
      if (mine === polls) live.textContent = ''
    }
  }

  load()
  pollLive()
  const timer = setInterval(() => document.visibilityState === 'visible' && pollLive(), 15000)
  return () => {
    alive = false
    clearInterval(timer)
    clearTimeout(retry)
    panels.stop()
    if (chart) chart.destroy()
  }
}
