// A site's overview: totals, time series, top lists, range picker and filters, all kept in the URL.
import { api, qs } from './api.js'
import { timeChart } from './chart.js'
import { duration, errorBox, h, number, percent, trackerHelp } from './dom.js'
import { siteHeader, syncTabs } from './sites.js'

export const RANGES = [['1h', 'Last hour'], ['24h', 'Last 24 hours'], ['7d', 'Last 7 days'], ['30d', 'Last 30 days'], ['90d', 'Last 90 days']]
const FILTERS = [['eventName', 'Event'], ['path', 'Page contains'], ['referrer', 'Referrer contains'], ['country', 'Country']]

export function readState() {
  const q = new URLSearchParams(location.search)
  const state = { range: RANGES.some(([r]) => r === q.get('range')) ? q.get('range') : '7d' }
  for (const [k] of FILTERS) state[k] = q.get(k) || ''
  return state
}

export function writeState(state) {
  const search = qs({ ...state, range: state.range === '7d' ? '' : state.range })
  history.replaceState(null, '', location.pathname + (search ? '?' + search : ''))
  syncTabs()
}

export function rangePicker(state, onChange) {
  const select = h('select', { 'aria-label': 'Date range', class: 'range' },
    RANGES.map(([value, label]) => h('option', { value, selected: value === state.range, text: label })))
  select.addEventListener('change', () => onChange(select.value))
  return select
}

function topList(title, rows, onPick, emptyText) {
  const body = h('ol', { class: 'toplist' })
  if (!rows || !rows.length) body.append(h('li', { class: 'muted small', text: emptyText }))
  for (const row of rows || []) {
    const pct = Math.max(0, Math.min(100, Number(row.percentage) || 0))
    const bar = h('span', { class: 'bar' })
    bar.style.width = pct + '%'
    body.append(h('li', {},
      h('button', { type: 'button', class: 'toprow', title: `Filter by ${row.key}`, onclick: () => onPick(row.key) },
        bar, h('span', { class: 'key ellipsis', text: row.key }),
        h('span', { class: 'count', text: number(row.count) }), h('span', { class: 'pct muted', text: percent(row.percentage) }))))
  }
  return h('section', { class: 'card' }, h('h3', { text: title }), body)
}

function stat(label, value, id) {
  return h('div', { class: 'stat', dataset: { stat: id } }, h('div', { class: 'stat-label', text: label }), h('div', { class: 'stat-value', text: value }))
}

export function exportLinks(siteId, range) {
  const link = (format) => h('a', {
    class: 'button small', download: true, text: `Export ${format.toUpperCase()}`,
    href: '/api/analytics/export?' + qs({ siteId, range, format }),
  })
  return h('div', { class: 'row exports' }, link('csv'), link('json'))
}

export function renderOverview(container, siteId) {
  const state = readState()
  const controls = h('div', { class: 'row controls' })
  const body = h('div', { class: 'overview' })
  const live = h('a', { class: 'live muted small', href: `/app/sites/${encodeURIComponent(siteId)}/realtime` })
  container.append(siteHeader(siteId, 'overview'), controls, body)
  let chart = null
  let alive = true

  const setFilter = (key, value) => {
    state[key] = value
    writeState(state)
    load()
  }

  function drawControls() {
    const chips = FILTERS.filter(([k]) => state[k]).map(([k, label]) =>
      h('span', { class: 'chip' }, h('span', { class: 'ellipsis', text: `${label}: ${state[k]}` }),
        h('button', { type: 'button', class: 'link', 'aria-label': `Remove ${label} filter`, text: '×', onclick: () => setFilter(k, '') })))
    const field = h('select', { 'aria-label': 'Filter field' }, FILTERS.map(([k, label]) => h('option', { value: k, text: label })))
    const value = h('input', { 'aria-label': 'Filter value', placeholder: 'value' })
    const form = h('form', { class: 'row filter-form' }, field, value, h('button', { type: 'submit', class: 'small', text: 'Filter' }))
    form.addEventListener('submit', (e) => {
      e.preventDefault()
      if (value.value.trim()) setFilter(field.value, value.value.trim())
    })
    controls.replaceChildren(rangePicker(state, (r) => setFilter('range', r)), form, ...chips, h('span', { class: 'spacer' }), live,
      exportLinks(siteId, state.range))
  }

  async function load() {
    drawControls()
    body.classList.add('loading')
    try {
      const data = await api('/api/analytics/overview?' + qs({ siteId, ...state }))
      if (!alive) return
      if (chart) chart.destroy()
      const filtered = FILTERS.some(([k]) => state[k])
      const stats = h('div', { class: 'stats' },
        stat('Unique visitors', number(data.uniqueVisitors), 'uniqueVisitors'),
        stat('Pageviews', number(data.totalPageviews), 'totalPageviews'),
        stat('Total events', number(data.totalEvents), 'totalEvents'),
        stat('Bounce rate', percent(data.bounceRate), 'bounceRate'),
        stat('Avg. visit duration', duration(data.avgSessionDuration), 'avgSessionDuration'))
      chart = timeChart(data.timeSeries || [], state.eventName || 'Pageviews')
      body.replaceChildren(
        ...(data.totalEvents === 0 && !filtered ? [trackerHelp(siteId)] : []),
        stats,
        h('section', { class: 'card' }, h('h3', { text: state.eventName ? `“${state.eventName}” events` : 'Pageviews' }), chart.el),
        h('div', { class: 'grid3' },
          topList('Top pages', data.topPages, (k) => setFilter('path', k), 'No pageviews in this range.'),
          topList('Top referrers', data.topReferrers, (k) => setFilter('referrer', k), 'No referrers yet: visits came direct.'),
          topList('Top countries', data.topCountries, (k) => setFilter('country', k), 'No countries known yet.')),
      )
    } catch (e) {
      body.replaceChildren(errorBox(e))
    } finally {
      body.classList.remove('loading')
    }
  }

  async function pollLive() {
    try {
      const rt = await api('/api/analytics/realtime?' + qs({ siteId, window: 300 }))
      live.textContent = `● ${number(rt.activeVisitors)} current visitor${rt.activeVisitors === 1 ? '' : 's'}`
    } catch (e) {
      live.textContent = ''
    }
  }

  load()
  pollLive()
  const timer = setInterval(() => document.visibilityState === 'visible' && pollLive(), 15000)
  return () => {
    alive = false
    clearInterval(timer)
    if (chart) chart.destroy()
  }
}
