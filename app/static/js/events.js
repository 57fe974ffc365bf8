// Event log with paging, plus export links; the overview's filters narrow both.
import { api, qs } from './api.js'
import { errorBox, h, localZone, pathNodes, replaceKeepingFocus, trackerHelp, when } from './dom.js'
import { activeFilters, exportLinks, rangePicker, readState, writeState } from './overview.js'
import { scope } from './panels.js'
import { siteHeader } from './sites.js'

export const PAGE_SIZES = [25, 50, 100]

function props(value) {
  if (value === null || value === undefined) return ''
  const text = typeof value === 'string' ? value : JSON.stringify(value)
  return text === '{}' ? '' : text
}

export function renderEvents(container, siteId) {
  const state = readState()
  const query = new URLSearchParams(location.search)
  let offset = Math.max(0, parseInt(query.get('offset'), 10) || 0)
  // Page size: one of the picker's, or any 1-200 given in the URL (?limit=).
  let pageSize = Math.min(200, Math.max(1, parseInt(query.get('limit'), 10) || 50))
  const controls = h('div', { class: 'row controls' })
  const chips = h('div', { class: 'row chips', role: 'group', 'aria-label': 'Active filters' })
  const body = h('div', { class: 'events' })
  container.append(siteHeader(siteId, 'events'), controls, chips, body)
  let alive = true

  function drawControls() {
    const name = h('input', { 'aria-label': 'Event name', placeholder: 'event name, e.g. signup', value: state.eventName })
    const form = h('form', { class: 'row filter-form' }, name, h('button', { type: 'submit', class: 'small', text: 'Filter' }))
    form.addEventListener('submit', (e) => {
      e.preventDefault()
      state.eventName = name.value.trim()
      offset = 0
      writeState(state)
      remember(false)
      load()
    })
    const sizes = PAGE_SIZES.includes(pageSize) ? PAGE_SIZES : [...PAGE_SIZES, pageSize].sort((a, b) => a - b)
    const size = h('select', { 'aria-label': 'Rows per page' },
      sizes.map((n) => h('option', { value: n, selected: n === pageSize, text: `${n} per page` })))
    size.addEventListener('change', () => { pageSize = Number(size.value); offset = 0; remember(); load() })
    replaceKeepingFocus(controls, [rangePicker(state, (r) => { state.range = r; offset = 0; writeState(state); remember(false); load() }), form,
      size, h('span', { class: 'spacer' }), exportLinks(siteId, state)])
    activeFilters(chips, state, () => { offset = 0; writeState(state); remember(false); load() })
  }

  // Each load supersedes the ones before it: a slow answer for a page left behind (Older clicked twice, the
  // range changed) is dropped, not drawn over the page shown since.
  let generation = 0
  async function load() {
    const mine = ++generation
    drawControls()
    try {
      const data = await api('/api/analytics/events?' + qs({ ...scope(siteId, state), limit: pageSize, offset }))
      if (!alive || mine !== generation) return
      const events = data.events || []
      if (!events.length && offset > 0 && data.total > 0) {
        // An offset past the end (an old link, or events gone out of the range): say so and offer the last page.
        const last = Math.floor((data.total - 1) / pageSize) * pageSize
        body.replaceChildren(h('p', { class: 'empty' }, `No events past ${data.total} in this range. `,
          h('button', { type: 'button', class: 'small', text: 'Go to the last page', onclick: () => { offset = last; remember(); load() } })))
        return
      }
      if (!events.length) {
        body.replaceChildren(state.eventName ? h('p', { class: 'empty', text: `No “${state.eventName}” events in this range.` })
          : !chips.hidden ? h('p', { class: 'empty', text: 'No events match these filters in this range.' }) : trackerHelp(siteId))
        return
      }
      const rows = events.map((e) => h('tr', { dataset: { event: e.id } },
        h('td', { class: 'nowrap', title: e.createdAt, text: when(e.createdAt) }),
        // Names run to 64 characters: cut like paths, the whole name in the title.
        h('td', {}, h('span', { class: 'badge ellipsis', title: e.name, text: e.name })),
        h('td', { class: 'ellipsis', title: e.url || '' }, ...pathNodes(e.path || '')),
        h('td', { class: 'ellipsis', title: e.referrer || '', text: e.referrer || '' }),
        h('td', { text: e.country || '' }),
        h('td', { class: 'ellipsis mono', title: props(e.props), text: props(e.props) }),
        h('td', { class: 'ellipsis mono', title: e.sessionId || '', text: e.sessionId || '' })))
      const total = data.total ?? events.length
      const end = offset + events.length
      const prev = h('button', { type: 'button', class: 'small', text: '← Newer', disabled: offset === 0, onclick: () => page(-1) })
      const next = h('button', { type: 'button', class: 'small', text: 'Older →', disabled: end >= total, onclick: () => page(1) })
      // On the last page "Older" is disabled: its focus goes to "Newer".
      replaceKeepingFocus(body, [
        // The table scrolls sideways on a phone: a named region in the tab order, so a keyboard can scroll it.
        h('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': 'Events' }, h('table', { class: 'log' },
          h('thead', {}, h('tr', {}, [`Time (${localZone()})`, 'Event', 'Path', 'Referrer', 'Country', 'Props', 'Session'].map((t) => h('th', { text: t })))),
          h('tbody', {}, rows))),
        h('div', { class: 'row pager' }, prev, h('span', { class: 'muted small', text: `${offset + 1}–${end} of ${total}` }), next),
      ], () => body.querySelector('.pager button:not(:disabled)'))
    } catch (e) {
      if (alive && mine === generation) body.replaceChildren(errorBox(e))
    }
  }

  // Paging is a step in the history (Back returns to the page before); after writeState, which made the
  // step, it only completes the URL.
  function remember(push = true) {
    const q = new URLSearchParams(location.search)
    for (const [k, v, dflt] of [['offset', offset, 0], ['limit', pageSize, 50]]) {
      if (v !== dflt) q.set(k, v)
      else q.delete(k)
    }
    const url = location.pathname + (q.toString() ? '?' + q : '')
    if (url !== location.pathname + location.search) history[push ? 'pushState' : 'replaceState'](null, '', url)
  }

  function page(direction) {
    offset = Math.max(0, offset + direction * pageSize)
    remember()
    load()
  }

  load()
  return () => { alive = false }
}
