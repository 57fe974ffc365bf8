// Realtime panel: polls /api/analytics/realtime every few seconds while the tab is visible.
import { api, qs } from './api.js'
import { ago, errorBox, h, number, pathNodes, trackerHelp } from './dom.js'
import { siteHeader } from './sites.js'

export const POLL_MS = 3000
const WINDOWS = [['60', 'Last minute'], ['300', 'Last 5 minutes'], ['1800', 'Last 30 minutes']]

// Per-minute rates to the API's two decimals: over 30 minutes one pageview is 0.03 a minute, which one
// decimal rounded to 0 beside that pageview in the feed.
const perMinute = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 })

function rate(n) {
  return typeof n === 'number' && isFinite(n) ? perMinute.format(n) : '–'
}

function big(label, value, id) {
  return h('div', { class: 'stat', dataset: { stat: id } }, h('div', { class: 'stat-label', text: label }), h('div', { class: 'stat-value', text: value }))
}

export function renderRealtime(container, siteId) {
  // One of the picker's windows; anything else in the URL (an edited link) is the default, not an error.
  let hasEvents = false
  let windowSeconds = new URLSearchParams(location.search).get('window')
  if (!WINDOWS.some(([v]) => v === windowSeconds)) windowSeconds = '60'
  const picker = h('select', { 'aria-label': 'Realtime window' },
    WINDOWS.map(([v, label]) => h('option', { value: v, text: label, selected: v === windowSeconds })))
  const updated = h('span', { class: 'muted small', role: 'status' })
  const body = h('div', { class: 'realtime' })
  container.append(siteHeader(siteId, 'realtime'), h('div', { class: 'row controls' }, picker, h('span', { class: 'spacer' }), updated), body)
  let alive = true

  // A poll's answer is drawn only if no later poll started meanwhile: a slow one for the window left behind
  // would show that window's figures under the new choice.
  let generation = 0
  async function poll() {
    const mine = ++generation
    const current = () => alive && mine === generation
    try {
      const rt = await api('/api/analytics/realtime?' + qs({ siteId, window: windowSeconds }))
      if (!current()) return
      const pages = h('ol', { class: 'toplist' })
      for (const p of rt.topActivePages || []) {
        pages.append(h('li', {}, h('div', { class: 'toprow' }, h('span', { class: 'key ellipsis' }, ...pathNodes(p.key)), h('span', { class: 'count', text: number(p.count) }))))
      }
      if (!pages.firstChild) pages.append(h('li', { class: 'muted small', text: 'Nobody is on the site right now.' }))
      const feed = h('ul', { class: 'feed' })
      for (const e of rt.recentEvents || []) {
        feed.append(h('li', { dataset: { event: e.id } },
          h('span', { class: 'badge ellipsis', title: e.name, text: e.name }), h('span', { class: 'ellipsis path' }, ...pathNodes(e.path || '')),
          h('span', { class: 'muted small', text: e.country || '' }), h('time', { class: 'muted small', datetime: e.timestamp, text: ago(e.timestamp) })))
      }
      const idle = !(rt.recentEvents || []).length
      // The tracker's help is for a site that has never had an event: one quiet window is not that. Asked once
      // it is known (the last 90 days' event count), not on every poll.
      if (!idle) hasEvents = true
      else if (!hasEvents) hasEvents = (await api('/api/analytics/events?' + qs({ siteId, range: '90d', limit: 1 }))).total > 0
      if (!current()) return
      body.replaceChildren(
        h('div', { class: 'stats' },
          big('Current visitors', number(rt.activeVisitors), 'activeVisitors'),
          big('Pageviews / min', rate(rt.pageviewsPerMinute), 'pageviewsPerMinute'),
          big('Events / min', rate(rt.eventsPerMinute), 'eventsPerMinute')),
        h('div', { class: 'grid2' },
          h('section', { class: 'card' }, h('h2', { text: 'Active pages' }), pages),
          h('section', { class: 'card' }, h('h2', { text: 'Latest events' }),
            idle ? h('p', { class: 'muted small', text: hasEvents ? 'No events in this window. New ones appear here within seconds of happening.' : 'No events yet. They appear here within seconds of happening.' }) : feed)),
        ...(idle && !hasEvents ? [trackerHelp(siteId)] : []),
      )
      updated.textContent = `Live · updated ${new Date().toLocaleTimeString()}`
    } catch (e) {
      if (!current() || e.status === 401) return
      body.replaceChildren(errorBox(e))
      // Not "Live" while the figures are not updating; the next poll that answers says Live again.
      updated.textContent = `Not updating · retrying every ${POLL_MS / 1000}s`
    }
  }

  picker.addEventListener('change', () => {
    windowSeconds = picker.value
    history.pushState(null, '', location.pathname + (windowSeconds === '60' ? '' : '?window=' + windowSeconds))
    poll()
  })
  poll()
  const timer = setInterval(() => document.visibilityState === 'visible' && poll(), POLL_MS)
  const onVisible = () => document.visibilityState === 'visible' && poll()
  document.addEventListener('visibilitychange', onVisible)
  return () => {
    alive = false
    clearInterval(timer)
    document.removeEventListener('visibilitychange', onVisible)
  }
}
