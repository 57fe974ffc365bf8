// Small DOM helpers. Text always goes in through textContent, so server data is never parsed as HTML.
import { RETRY_MS } from './api.js'

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue
    if (k === 'class') el.className = v
    else if (k === 'text') el.textContent = v
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v)
    else if (k === 'dataset') Object.assign(el.dataset, v)
    else el.setAttribute(k, v === true ? '' : v)
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue
    el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  }
  return el
}

// What identifies a control across a re-render: a row by its key, anything else by its label and text.
function identity(el) {
  const d = el.dataset || {}
  return [el.tagName, el.getAttribute('aria-label'), el.name, d.tab, d.key, d.key === undefined ? el.textContent : ''].join('\u0000')
}

// parent.replaceChildren(...children), giving focus back to the new twin of the control that had it, else to
// `fallback()`'s element: a keyboard user keeps their place after changing a range, a tab, a filter or a page,
// or after removing a row (a goal, a key, a shared link), whose button is gone with it.
export function replaceKeepingFocus(parent, children, fallback = null) {
  const active = document.activeElement
  const had = active && active !== document.body && parent.contains(active) ? identity(active) : null
  parent.replaceChildren(...children)
  if (had === null || parent.contains(document.activeElement)) return
  const twin = [...parent.querySelectorAll('a[href], button, input, select')].find((el) => !el.disabled && el.getClientRects().length && identity(el) === had)
  const target = twin || (fallback && fallback())
  if (target) target.focus()
}

const RTL = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF]/

// A path as text nodes whose segments keep their order in the left-to-right layout: in "/שלום/עולם" the
// slash between two Hebrew words takes their direction, so the browser showed the segments reversed. Each
// segment with right-to-left letters is isolated in a <bdi>; the text (copy, title, textContent) is unchanged.
export function pathNodes(path) {
  if (!RTL.test(path)) return [path]
  return path.split(/(\/)/).filter((part) => part !== '').map((part) => part === '/' ? part : h('bdi', { text: part }))
}

export const fmt = new Intl.NumberFormat()

export function number(n) {
  return typeof n === 'number' && isFinite(n) ? fmt.format(Math.round(n * 10) / 10) : '–'
}

export function percent(n) {
  return typeof n === 'number' && isFinite(n) ? `${Math.round(n * 10) / 10}%` : '–'
}

export function duration(ms) {
  if (typeof ms !== 'number' || !isFinite(ms)) return '–'
  const s = Math.round(ms / 1000)
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m ${s % 60}s`
  return `${Math.floor(m / 60)}h ${m % 60}m`
}

const short = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' })

export function when(iso) {
  const d = new Date(iso)
  return isNaN(d) ? String(iso || '') : short.format(d)
}

// The zone when() writes in, as the browser abbreviates it ("EST", "GMT+5:30"): a column of when()'s times
// names it, since the chart beside them is in the site's zone.
export function localZone() {
  const part = new Intl.DateTimeFormat(undefined, { timeZoneName: 'short' }).formatToParts(new Date()).find((p) => p.type === 'timeZoneName')
  return part ? part.value : ''
}

export function ago(iso) {
  const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000))
  if (!isFinite(s)) return ''
  if (s < 60) return `${s}s ago`
  if (s < 3600) return `${Math.floor(s / 60)}m ago`
  return `${Math.floor(s / 3600)}h ago`
}

// The install snippet: the tracker, and a stub that queues calls made before the deferred script has run
// (the tracker replays window.tally.q when it loads), as Plausible's snippet does.
const QUEUE_STUB = '<script>window.tally = window.tally || function () { (window.tally.q = window.tally.q || []).push(arguments) }</script>'

export function snippet(siteId) {
  return `<script defer src="${location.origin}/tracker.js" data-site="${siteId}"></script>\n${QUEUE_STUB}`
}

// How to send a custom event, in the form that works before the script has loaded too (through the stub).
export function customEventsHint() {
  return h('p', { class: 'muted small' },
    'Custom events: ', h('code', { class: 'custom-event', text: "tally('track', 'signup', { plan: 'pro' })" }),
    ' (also before the script has loaded). While testing on localhost, add ', h('code', { text: 'data-allow-localhost="true"' }), '.')
}

// A copyable code block with a Copy button.
export function codeBlock(text, label = 'Copy') {
  const code = h('code', { text })
  const button = h('button', {
    type: 'button', class: 'small', text: label,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text)
        button.textContent = 'Copied'
      } catch (e) {
        const range = document.createRange()
        range.selectNodeContents(code)
        getSelection().removeAllRanges()
        getSelection().addRange(range)
        button.textContent = 'Selected: press Ctrl+C'
      }
      setTimeout(() => (button.textContent = label), 2000)
    },
  })
  return h('div', { class: 'codeblock' }, h('pre', {}, code), button)
}

export function trackerHelp(siteId) {
  return h('div', { class: 'empty' },
    h('h2', { text: 'No events yet' }),
    h('p', { text: 'Add this snippet to the <head> of every page of your site. Pageviews, SPA navigation and outbound link clicks are tracked automatically:' }),
    codeBlock(snippet(siteId)),
    customEventsHint(),
  )
}

// Runs `action` with `button` busy until it ends, so a second press meanwhile (Enter twice) sends nothing: no
// second key or link, no second DELETE whose 404 reads as a failure. Busy, not disabled: a disabled button
// drops the keyboard's focus to the page.
export async function whileBusy(button, action) {
  if (button.getAttribute('aria-disabled') === 'true') return
  button.setAttribute('aria-disabled', 'true')
  try {
    await action()
  } finally {
    button.removeAttribute('aria-disabled')
  }
}

// Said under an error that is tried again by itself (api.js's retriesItself).
export function retryNote() {
  return h('p', { class: 'muted small', text: `Trying again every ${RETRY_MS / 1000}s.` })
}

export function errorBox(error) {
  if (error && error.status === 404) {
    return h('div', { class: 'empty' }, h('p', { text: 'This site does not exist or belongs to another workspace.' }),
      h('a', { href: '/app', text: 'Back to your sites' }))
  }
  // Unreachable: its message says it all (api.js's UNREACHABLE).
  const message = error && error.status === 0 ? error.message : `Could not load: ${(error && error.message) || error}`
  return h('p', { class: 'error', role: 'alert', text: message })
}
