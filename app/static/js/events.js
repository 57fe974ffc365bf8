// Event log with paging, plus export links.
import { api, qs } from './api.js'
import { errorBox, h, trackerHelp, when } from './dom.js'
import { exportLinks, rangePicker, readState, writeState } from './overview.js'
import { siteHeader } from './sites.js'

export const PAGE_SIZE = 50

function props(value) {
  if (value === null || value === undefined) return ''
  const text = typeof value === 'string' ? value : JSON.stringify(value)
  return text === '{}' ? '' : text
}

export function renderEvents(container, siteId) {
  const state = readState()
  let offset = Math.max(0, parseInt(new URLSearchParams(location.search).get('offset'), 10) || 0)
  const controls = h('div', { class: 'row controls' })
  const body = h('div', { class: 'events' })
  container.append(siteHeader(siteId, 'events'), controls, body)
  let alive = true

  function drawControls() {
    const name = h('input', { 'aria-label': 'Event name', placeholder: 'event name, e.g. signup', value: state.eventName })
    const form = h('form', { class: 'row filter-form' }, name, h('button', { type: 'submit', class: 'small', text: 'Filter' }))
    form.addEventListener('submit', (e) => {
      e.preventDefault()
      state.eventName = name.value.trim()
      offset = 0
      writeState(state)
      load()
    })
    controls.replaceChildren(rangePicker(state, (r) => { state.range = r; offset = 0; writeState(state); load() }), form,
      h('span', { class: 'spacer' }), exportLinks(siteId, state.range))
  }

  async function load() {
    drawControls()
    try {
      const data = await api('/api/analytics/events?' + qs({ siteId, range: state.range, eventName: state.eventName, limit: PAGE_SIZE, offset }))
      if (!alive) return
      const events = data.events || []
      if (!events.length && offset === 0) {
        body.replaceChildren(state.eventName ? h('p', { class: 'empty', text: `No “${state.eventName}” events in this range.` }) : trackerHelp(siteId))
        return
      }
      const rows = events.map((e) => h('tr', { dataset: { event: e.id } },
        h('td', { class: 'nowrap', title: e.createdAt, text: when(e.createdAt) }),
        h('td', {}, h('span', { class: 'badge', text: e.name })),
        h('td', { class: 'ellipsis', title: e.url || '', text: e.path || '' }),
        h('td', { class: 'ellipsis', title: e.referrer || '', text: e.referrer || '' }),
        h('td', { text: e.country || '' }),
        h('td', { class: 'ellipsis mono', title: props(e.props), text: props(e.props) }),
        h('td', { class: 'ellipsis mono', title: e.sessionId || '', text: e.sessionId || '' })))
      const total = data.total ?? events.length
      const end = offset + events.length
      const prev = h('button', { type: 'button', class: 'small', text: '← Newer', disabled: offset === 0, onclick: () => page(-1) })
      const next = h('button', { type: 'button', class: 'small', text: 'Older →', disabled: end >= total, onclick: () => page(1) })
      body.replaceChildren(
        h('div', { class: 'table-wrap' }, h('table', { class: 'log' },
          h('thead', {}, h('tr', {}, ['Time', 'Event', 'Path', 'Referrer', 'Country', 'Props', 'Session'].map((t) => h('th', { text: t })))),
          h('tbody', {}, rows))),
        h('div', { class: 'row pager' }, prev, h('span', { class: 'muted small', text: `${offset + 1}–${end} of ${total}` }), next),
      )
    } catch (e) {
      body.replaceChildren(errorBox(e))
    }
  }

  function page(direction) {
    offset = Math.max(0, offset + direction * PAGE_SIZE)
    const q = new URLSearchParams(location.search)
    if (offset) q.set('offset', offset)
    else q.delete('offset')
    history.replaceState(null, '', location.pathname + (q.toString() ? '?' + q : ''))
    load()
  }

  load()
  return () => { alive = false }
}
