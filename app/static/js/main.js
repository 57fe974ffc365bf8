// Dashboard shell: a tiny path router over the /app/... pages, with pushState navigation.
import { api } from './api.js'
import { h } from './dom.js'
import { renderEvents } from './events.js'
import { renderKeys } from './keys.js'
import { renderOverview } from './overview.js'
import { renderRealtime } from './realtime.js'
import { knownSite, renderSites } from './sites.js'

const view = document.getElementById('view')
const routes = [
  [/^\/app\/?$/, renderSites, 'sites'],
  [/^\/app\/keys\/?$/, renderKeys, 'keys'],
  [/^\/app\/sites\/([^/]+)\/?$/, knownSite(renderOverview), 'sites'],
  [/^\/app\/sites\/([^/]+)\/realtime\/?$/, knownSite(renderRealtime), 'sites'],
  [/^\/app\/sites\/([^/]+)\/events\/?$/, knownSite(renderEvents), 'sites'],
]
let cleanup = null

export function navigate(url, { replace = false } = {}) {
  history[replace ? 'replaceState' : 'pushState'](null, '', url)
  render()
}

function render() {
  if (cleanup) cleanup()
  cleanup = null
  view.replaceChildren()
  for (const [re, page, section] of routes) {
    const m = location.pathname.match(re)
    if (!m) continue
    // The section a page is in is the current one: the page itself (Sites), or a page under it (a site's).
    for (const a of document.querySelectorAll('[data-nav]')) {
      a.classList.toggle('active', a.dataset.nav === section)
      if (a.dataset.nav === section) a.setAttribute('aria-current', a.pathname === location.pathname ? 'page' : 'true')
      else a.removeAttribute('aria-current')
    }
    const params = m.slice(1).map(decodeURIComponent)
    cleanup = page(view, ...params) || null
    window.scrollTo(0, 0)
    return
  }
  view.append(h('div', { class: 'empty' }, h('h1', { text: 'Page not found' }), h('a', { href: '/app', text: 'Back to your sites' })))
}

// Same-origin /app links navigate without a page load.
document.addEventListener('click', (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return
  const a = event.target.closest && event.target.closest('a[href]')
  if (!a || a.target || a.hasAttribute('download') || a.origin !== location.origin || !a.pathname.startsWith('/app')) return
  event.preventDefault()
  navigate(a.pathname + a.search)
})
window.addEventListener('popstate', render)

// Signed out only once the server says so (401: the session was gone already): on a failure the session is
// still valid, so the page says so and stays rather than showing a sign-in page over a live session.
document.getElementById('logout').addEventListener('click', async () => {
  let status = 0
  try {
    status = (await fetch('/api/auth/logout', { method: 'POST', credentials: 'same-origin' })).status
  } catch (e) {}
  if ((status >= 200 && status < 300) || status === 401) {
    location.assign('/login')
    return
  }
  const error = document.getElementById('logout-error') || h('span', { id: 'logout-error', class: 'error small', role: 'alert' })
  error.textContent = status ? `Not signed out: the server answered ${status}. Try again.` : "Not signed out: can't reach the Tally server. Check your connection and try again."
  document.getElementById('logout').after(error)
})

api('/api/auth/me').then((me) => {
  document.getElementById('whoami').textContent = me.email
}).catch(() => {})

render()
